"""The Netra-packed checkpoint: the real checkpoint repacked once into the layouts the
decode ops take, written as safetensors for fast reloads (`netra repack SRC DST`).

Per layer ``layers.L.<key>``:
  in_norm, post_norm                  BF16 [H]
  GDN: qkvz.w/.s (in_proj_qkv | in_proj_z), out.w/.s
                                      FP8 projections with fp32 128x128 block scales; a weight
                                      whose [N, K] has a projection kernel is stored packed
                                      [N / 16, K / 128, 2048] (netra.ops.proj.pack_weight)
       b, a                           BF16 [nv, H]; conv BF16 [conv_dim, K]
       A_log, dt_bias                 fp32 [nv]; gnorm BF16 [dv]
  attention: qkv_attn.w/.s (q | k | v), o.w/.s; q_norm, k_norm BF16 [hd]
  router                              BF16 [E, H]
  w13, s13                            routed experts stacked: gate | up, FP8 [E, 2I, H], scales [E, 2I/128, H/128]
  w2, s2                              FP8 [E, H, I], scales [E, H/128, I/128]; each stack packed
                                      [E, N / 16, K / 128, 2048] where the expert kernels have its shape
  sw13.w/.s, sw2.w/.s, sgate          the shared expert (gate | up stacked) and its gate
and embed, final_norm, lm_head (BF16). netra.json holds the format, the config and where
the tensors came from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..contracts.proj import BY_NK, EXPERTS
from ..ops.proj import pack_weight
from .checkpoint import PREFIX, Checkpoint, CheckpointError, write_shards
from .config import TextConfig

EXPERT_NK = {(s.N, s.K) for s in EXPERTS}
FORMAT = "netra-packed-v3"  # v2: fused qkvz / attention qkv, projections in the kernels' packed layout; v3: experts too


@dataclass
class Packed:
    cfg: TextConfig
    tensors: dict[str, Tensor]
    source: str

    def layer(self, L: int, device) -> dict:
        """The runner's per-layer weights: projections as (fp8 weight, fp32 scale) pairs."""
        p, out = f"layers.{L}.", {}
        for k, t in self.tensors.items():
            if not k.startswith(p):
                continue
            key = k[len(p):]
            if key.endswith(".w"):
                out[key[:-2]] = (t.to(device), self.tensors[k[:-2] + ".s"].to(device))
            elif not key.endswith(".s"):
                out[key] = t.to(device)
        return out


def pack(ckpt: Checkpoint) -> Packed:
    if not ckpt.fp8:
        raise ValueError("packing takes the FP8 checkpoint layout")
    c, T, out = ckpt.cfg, ckpt.tensors, {}
    if c.moe_intermediate_size % 128 or c.shared_expert_intermediate_size % 128:
        raise ValueError("stacking gate|up scales needs intermediate sizes that are multiples of 128")
    bf = torch.bfloat16

    def proj(dst, *names):
        """One projection, or several fused along N (one launch); packed for the kernels
        (netra.ops.proj.pack_weight) where a kernel has its shape."""
        w = torch.cat([T[n] for n in names]) if len(names) > 1 else T[names[0]]
        sc = torch.cat([T[n + "_scale_inv"] for n in names]) if len(names) > 1 else T[names[0] + "_scale_inv"]
        out[dst + ".w"], out[dst + ".s"] = (pack_weight(w) if tuple(w.shape) in BY_NK else w), sc

    for L in range(c.num_hidden_layers):
        p, q = f"{PREFIX}layers.{L}.", f"layers.{L}."
        out[q + "in_norm"] = T[p + "input_layernorm.weight"].to(bf)
        out[q + "post_norm"] = T[p + "post_attention_layernorm.weight"].to(bf)
        if c.is_full(L):
            a = p + "self_attn."
            proj(q + "qkv_attn", a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight")
            proj(q + "o", a + "o_proj.weight")
            out[q + "q_norm"], out[q + "k_norm"] = T[p + "self_attn.q_norm.weight"].to(bf), T[p + "self_attn.k_norm.weight"].to(bf)
        else:
            g = p + "linear_attn."
            proj(q + "qkvz", g + "in_proj_qkv.weight", g + "in_proj_z.weight")
            proj(q + "out", g + "out_proj.weight")
            out[q + "b"], out[q + "a"] = T[g + "in_proj_b.weight"].to(bf), T[g + "in_proj_a.weight"].to(bf)
            out[q + "conv"] = T[g + "conv1d.weight"][:, 0, :].to(bf).contiguous()
            out[q + "A_log"], out[q + "dt_bias"] = T[g + "A_log"].float(), T[g + "dt_bias"].float()
            out[q + "gnorm"] = T[g + "norm.weight"].to(bf)
        m = p + "mlp."
        out[q + "router"] = T[m + "gate.weight"].to(bf)
        E = range(c.num_experts)
        w13 = torch.stack([torch.cat([T[f"{m}experts.{e}.gate_proj.weight"], T[f"{m}experts.{e}.up_proj.weight"]]) for e in E])
        out[q + "w13"] = pack_weight(w13) if tuple(w13.shape[1:]) in EXPERT_NK else w13
        out[q + "s13"] = torch.stack([torch.cat([T[f"{m}experts.{e}.gate_proj.weight_scale_inv"],
                                                 T[f"{m}experts.{e}.up_proj.weight_scale_inv"]]) for e in E])
        w2 = torch.stack([T[f"{m}experts.{e}.down_proj.weight"] for e in E])
        out[q + "w2"] = pack_weight(w2) if tuple(w2.shape[1:]) in EXPERT_NK else w2
        out[q + "s2"] = torch.stack([T[f"{m}experts.{e}.down_proj.weight_scale_inv"] for e in E])
        proj(q + "sw13", m + "shared_expert.gate_proj.weight", m + "shared_expert.up_proj.weight")
        proj(q + "sw2", m + "shared_expert.down_proj.weight")
        out[q + "sgate"] = T[m + "shared_expert_gate.weight"].to(bf)
    out["embed"] = T[PREFIX + "embed_tokens.weight"].to(bf)
    out["final_norm"] = T[PREFIX + "norm.weight"].to(bf)
    out["lm_head"] = T["lm_head.weight"].to(bf)
    return Packed(c, out, ckpt.source)


def save(packed: Packed, path: str | Path, shard_bytes: int = 4 << 30) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    files = write_shards(path, packed.tensors.items(), "packed", shard_bytes, {"format": FORMAT})
    (path / "netra.json").write_text(json.dumps({"format": FORMAT, "config": packed.cfg.to_hf_dict(),
                                                 "source": packed.source, "weight_map": files}, indent=1) + "\n")
    return path


def load(path: str | Path, device="cpu") -> Packed:
    from safetensors import safe_open

    path = Path(path)
    meta_path = path / "netra.json"
    if not meta_path.is_file():
        raise CheckpointError(f"{path}: no netra.json (not a Netra-packed checkpoint; `netra repack` writes one)")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{meta_path}: format {meta.get('format')!r}, this Netra reads {FORMAT!r}")
    cfg = TextConfig.from_dict(meta["config"], source=str(path))
    tensors = {}
    by_file: dict[str, list[str]] = {}
    for k, f in meta["weight_map"].items():
        by_file.setdefault(f, []).append(k)
    for f, keys in by_file.items():
        with safe_open(str(path / f), framework="pt", device=str(device)) as h:
            for k in keys:
                tensors[k] = h.get_tensor(k)
    return Packed(cfg, tensors, f"{meta['source']} (packed at {path})")
