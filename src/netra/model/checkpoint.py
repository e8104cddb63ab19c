"""The Qwen3.6 checkpoint: the tensors a text model needs, loading them from the real
safetensors layouts (FP8 with 128x128 block scales, or BF16), refusing malformed ones,
and synthetic checkpoints in the same layout from a seed.

FP8 layout (Qwen/Qwen3.6-35B-A3B-FP8): each quantized ``X.weight`` is float8_e4m3fn [N, K]
with ``X.weight_scale_inv`` [ceil(N/128), ceil(K/128)] (fp32, or bf16 which is converted
once at load); dequantized weight = fp8 value * scale of its block. Routed experts are one
tensor per expert. Text tensors live under ``model.language_model.``; ``lm_head.weight``
at the top. Vision-tower and MTP tensors are not loaded."""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from .config import TextConfig

PREFIX = "model.language_model."
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the tensor."""


@dataclass(frozen=True)
class Spec:
    shape: tuple[int, ...]
    quantized: bool  # an FP8 projection in the FP8 layout (weight + weight_scale_inv)
    dtypes: tuple[torch.dtype, ...] = (torch.bfloat16,)


def _proj(shape) -> Spec:
    return Spec(tuple(shape), True)


def _bf16(shape, also_f32: bool = False) -> Spec:
    return Spec(tuple(shape), False, (torch.bfloat16, torch.float32) if also_f32 else (torch.bfloat16,))


def expected(cfg: TextConfig) -> dict[str, Spec]:
    """Every tensor of the text model, by checkpoint name, in load order."""
    H, out = cfg.hidden_size, {}
    out[PREFIX + "embed_tokens.weight"] = _bf16((cfg.vocab_size, H))
    for L in range(cfg.num_hidden_layers):
        p = f"{PREFIX}layers.{L}."
        out[p + "input_layernorm.weight"] = _bf16((H,))
        out[p + "post_attention_layernorm.weight"] = _bf16((H,))
        if cfg.is_full(L):
            a = p + "self_attn."
            nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
            out[a + "q_proj.weight"] = _proj((2 * nh * hd, H))  # per head [query | gate]
            out[a + "k_proj.weight"] = _proj((nkv * hd, H))
            out[a + "v_proj.weight"] = _proj((nkv * hd, H))
            out[a + "o_proj.weight"] = _proj((H, nh * hd))
            out[a + "q_norm.weight"] = _bf16((hd,))
            out[a + "k_norm.weight"] = _bf16((hd,))
        else:
            g = p + "linear_attn."
            nv = cfg.linear_num_value_heads
            out[g + "in_proj_qkv.weight"] = _proj((cfg.conv_dim, H))
            out[g + "in_proj_z.weight"] = _proj((cfg.value_dim, H))
            out[g + "in_proj_b.weight"] = _bf16((nv, H))
            out[g + "in_proj_a.weight"] = _bf16((nv, H))
            out[g + "conv1d.weight"] = _bf16((cfg.conv_dim, 1, cfg.linear_conv_kernel_dim))
            out[g + "A_log"] = _bf16((nv,), also_f32=True)
            out[g + "dt_bias"] = _bf16((nv,), also_f32=True)
            out[g + "norm.weight"] = _bf16((cfg.linear_value_head_dim,), also_f32=True)
            out[g + "out_proj.weight"] = _proj((H, cfg.value_dim))
        m = p + "mlp."
        out[m + "gate.weight"] = _bf16((cfg.num_experts, H))
        out[m + "shared_expert_gate.weight"] = _bf16((1, H))
        Is, I = cfg.shared_expert_intermediate_size, cfg.moe_intermediate_size
        out[m + "shared_expert.gate_proj.weight"] = _proj((Is, H))
        out[m + "shared_expert.up_proj.weight"] = _proj((Is, H))
        out[m + "shared_expert.down_proj.weight"] = _proj((H, Is))
        for e in range(cfg.num_experts):
            x = f"{m}experts.{e}."
            out[x + "gate_proj.weight"] = _proj((I, H))
            out[x + "up_proj.weight"] = _proj((I, H))
            out[x + "down_proj.weight"] = _proj((H, I))
    out[PREFIX + "norm.weight"] = _bf16((H,))
    out["lm_head.weight"] = _bf16((cfg.vocab_size, H))
    return out


def scale_name(weight_name: str) -> str:
    return weight_name + "_scale_inv"


def scale_shape(shape: tuple[int, int], block: tuple[int, int]) -> tuple[int, int]:
    return (math.ceil(shape[0] / block[0]), math.ceil(shape[1] / block[1]))


def dequantize(q: torch.Tensor, scale_inv: torch.Tensor, block=(128, 128), dtype=torch.float32) -> torch.Tensor:
    """fp8 [..., N, K] times the scale of its 128x128 block, in ``dtype`` (exact in float32)."""
    n, k = q.shape[-2:]
    bn, bk = block
    if n % bn == 0 and k % bk == 0:  # broadcast the scales: no full-size scale tensor
        qb = q.float().view(*q.shape[:-2], n // bn, bn, k // bk, bk)
        return (qb * scale_inv.float()[..., :, None, :, None]).view(q.shape).to(dtype)
    s = scale_inv.float().repeat_interleave(bn, -2)[..., :n, :].repeat_interleave(bk, -1)[..., :k]
    return (q.float() * s).to(dtype)


def quantize(w: torch.Tensor, block=(128, 128)) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block FP8 E4M3 quantization with the block's amax mapped to 448 (the real
    checkpoints' recipe). Returns (fp8 [N, K], fp32 scale_inv [ceil(N/bn), ceil(K/bk)])."""
    n, k = w.shape
    bn, bk = block
    pn, pk = math.ceil(n / bn) * bn, math.ceil(k / bk) * bk
    wp = torch.zeros(pn, pk, dtype=torch.float32, device=w.device)
    wp[:n, :k] = w.float()
    blocks = wp.view(pn // bn, bn, pk // bk, bk)
    amax = blocks.abs().amax(dim=(1, 3)).clamp_min(1e-12)
    scale = amax / FP8_MAX
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8).view(pn, pk)[:n, :k].contiguous()
    return q, scale.contiguous()


@dataclass
class Checkpoint:
    cfg: TextConfig
    tensors: dict[str, torch.Tensor]  # checkpoint names; FP8 scales as fp32
    fp8: bool
    source: str

    def weight(self, name: str, dtype=torch.bfloat16) -> torch.Tensor:
        """A projection dequantized exactly (fp8 * fp32 scale, then rounded to ``dtype``)."""
        w = self.tensors[name]
        if w.dtype == FP8:
            return dequantize(w, self.tensors[scale_name(name)], self.cfg.weight_block_size, dtype)
        return w.to(dtype)


def truncate(ckpt: Checkpoint, layers: int) -> Checkpoint:
    """The first ``layers`` decoder layers of ``ckpt`` with its embedding, final norm and LM
    head: the same tensors (no copies), a shallower model."""
    if not 1 <= layers <= ckpt.cfg.num_hidden_layers:
        raise ValueError(f"truncate: expected 1..{ckpt.cfg.num_hidden_layers} layers, got {layers}")
    lp = PREFIX + "layers."
    keep = {n: t for n, t in ckpt.tensors.items() if not n.startswith(lp) or int(n[len(lp):].split(".", 1)[0]) < layers}
    return Checkpoint(ckpt.cfg.with_layers(layers), keep, ckpt.fp8, f"{ckpt.source}, first {layers} layers")


# --- validation ----------------------------------------------------------------------------
def check_tensor(name: str, t: torch.Tensor | None, spec: Spec, fp8: bool, where: str) -> None:
    if t is None:
        raise CheckpointError(f"{name}: missing from {where}")
    if tuple(t.shape) != spec.shape:
        raise CheckpointError(f"{name}: expected shape {list(spec.shape)}, got {list(t.shape)}")
    want = (FP8,) if (spec.quantized and fp8) else spec.dtypes
    if t.dtype not in want:
        raise CheckpointError(f"{name}: expected dtype {' or '.join(str(d).replace('torch.', '') for d in want)}, "
                              f"got {str(t.dtype).replace('torch.', '')}")


def check_scale(name: str, s: torch.Tensor | None, weight_shape, block, where: str) -> torch.Tensor:
    """The scale as fp32 (a bf16 scale is converted once), checked: shape, finite, positive."""
    if s is None:
        raise CheckpointError(f"{name}: missing from {where} (the FP8 weight beside it needs it)")
    want = scale_shape(weight_shape, block)
    if tuple(s.shape) != want:
        raise CheckpointError(f"{name}: expected shape {list(want)} (one scale per {block[0]}x{block[1]} block), got {list(s.shape)}")
    if s.dtype not in (torch.float32, torch.bfloat16):
        raise CheckpointError(f"{name}: expected dtype float32 or bfloat16, got {str(s.dtype).replace('torch.', '')}")
    s = s.float()
    if not torch.isfinite(s).all():
        raise CheckpointError(f"{name}: {int((~torch.isfinite(s)).sum())} scales are NaN or infinite")
    if not (s > 0).all():
        raise CheckpointError(f"{name}: {int((s <= 0).sum())} scales are zero or negative")
    return s


# --- loading -------------------------------------------------------------------------------
def _files(path: Path) -> dict[str, Path]:
    """Tensor name -> shard, from model.safetensors.index.json or the .safetensors files."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {k: path / v for k, v in weight_map.items()}
    from safetensors import safe_open

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path}: no model.safetensors.index.json and no .safetensors files")
    out = {}
    for f in files:
        with safe_open(f, framework="pt") as h:
            for k in h.keys():
                out[k] = f
    return out


def load(path: str | Path, cfg: TextConfig | None = None, device: str | torch.device = "cpu",
         progress: bool = True) -> Checkpoint:
    """Load and validate a real-layout checkpoint (FP8 or BF16), reading only text tensors."""
    from safetensors import safe_open

    path = Path(path)
    cfg = cfg or TextConfig.from_json(path)
    where = str(path)
    fp8 = cfg.quant_method == "fp8"
    names = _files(path)
    spec = expected(cfg)
    wanted = list(spec) + [scale_name(n) for n, s in spec.items() if s.quantized and fp8]
    missing = [n for n in wanted if n not in names]
    if missing:
        raise CheckpointError(f"{missing[0]}: missing from {where}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    by_file: dict[Path, list[str]] = {}
    for n in wanted:
        by_file.setdefault(names[n], []).append(n)
    raw: dict[str, torch.Tensor] = {}
    bar = _progress(progress, f"loading {path.name}", len(wanted))
    with bar as pb:
        task = pb.add_task("tensors", total=len(wanted)) if pb else None
        for f, ns in by_file.items():
            with safe_open(f, framework="pt", device=str(device)) as h:
                for n in ns:
                    raw[n] = h.get_tensor(n)
                    if pb:
                        pb.advance(task)
    tensors = {}
    for n, s in spec.items():
        check_tensor(n, raw[n], s, fp8, where)
        tensors[n] = raw[n]
        if s.quantized and fp8:
            sn = scale_name(n)
            tensors[sn] = check_scale(sn, raw[sn], s.shape, cfg.weight_block_size, where)
    return Checkpoint(cfg, tensors, fp8, where)


class _NoBar:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def _progress(on: bool, what: str, total: int):
    if not on:
        return _NoBar()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True)


# --- synthetic checkpoints ------------------------------------------------------------------
def _gen(seed: int, name: str, device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(zlib.crc32(f"{seed}:{name}".encode()))  # the CPU generator keeps 32 bits
    return g


def _synthetic_tensor(name: str, spec: Spec, seed: int, device) -> torch.Tensor:
    """Realistic statistics: projections N(0, 0.02); the router N(0, 0.08), so its logits
    over the experts spread like a trained router's (std about 3.6 at the model's input scale;
    with 0.02 every token's top-8 boundary was a near tie, which no trained router has);
    zero-centred norm weights N(0, 0.05)
    (the model uses 1 + w); the gated norm's weight 1 + N(0, 0.05); A_log = log(U(1, 16))
    (transformers' init range); dt_bias = softplus^-1 of a step in [1e-3, 1e-1] (Mamba's);
    conv1d U(-0.5, 0.5) (kaiming for fan-in 4)."""
    g = _gen(seed, name, device)
    shape = spec.shape
    if name.endswith("A_log"):
        return torch.log(torch.empty(shape, device=device).uniform_(1.0, 16.0, generator=g))
    if name.endswith("dt_bias"):
        dt = torch.exp(torch.empty(shape, device=device).uniform_(math.log(1e-3), math.log(1e-1), generator=g))
        return (dt + torch.log(-torch.expm1(-dt))).float()
    if name.endswith("linear_attn.norm.weight"):
        return (1.0 + 0.05 * torch.randn(shape, device=device, generator=g)).float()
    if name.endswith("conv1d.weight"):
        return torch.empty(shape, device=device).uniform_(-0.5, 0.5, generator=g).to(torch.bfloat16)
    if name.endswith("mlp.gate.weight"):
        return (0.08 * torch.randn(shape, device=device, generator=g)).to(torch.bfloat16)
    if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
        return (0.05 * torch.randn(shape, device=device, generator=g)).to(torch.bfloat16)
    return (0.02 * torch.randn(shape, device=device, generator=g)).to(torch.float32)


def synthetic(cfg: TextConfig, seed: int = 0, device="cpu", fp8: bool | None = None,
              scale_dtype=torch.float32) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of a synthetic checkpoint in the real layout, one at a time
    (the full model is 35 GB in FP8). Each tensor depends only on (seed, name, device type):
    CPU and CUDA generators draw different numbers from the same seed."""
    fp8 = (cfg.quant_method == "fp8") if fp8 is None else fp8
    for name, spec in expected(cfg).items():
        t = _synthetic_tensor(name, spec, seed, device)
        if spec.quantized and fp8:
            q, s = quantize(t, cfg.weight_block_size)
            yield name, q
            yield scale_name(name), s.to(scale_dtype)
        else:
            yield name, t.to(spec.dtypes[-1] if t.dtype == torch.float32 and len(spec.dtypes) > 1 else torch.bfloat16)


def synthetic_checkpoint(cfg: TextConfig, seed: int = 0, device="cpu") -> Checkpoint:
    """A synthetic checkpoint held in memory (no files), validated like a loaded one."""
    fp8 = cfg.quant_method == "fp8"
    raw = dict(synthetic(cfg, seed, device))
    tensors = {}
    for n, s in expected(cfg).items():
        check_tensor(n, raw.get(n), s, fp8, "the synthetic checkpoint")
        tensors[n] = raw[n]
        if s.quantized and fp8:
            tensors[scale_name(n)] = check_scale(scale_name(n), raw[scale_name(n)], s.shape, cfg.weight_block_size, "synthetic")
    return Checkpoint(cfg, tensors, fp8, f"synthetic(seed={seed})")


def write_shards(path: Path, tensors, prefix: str, shard_bytes: int, metadata: dict) -> dict[str, str]:
    """Write (name, tensor) pairs as <prefix>-0000i-of-0000n.safetensors shards of at most
    shard_bytes each (a larger tensor gets a shard of its own); return name -> file."""
    from safetensors.torch import save_file

    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in tensors:
        nbytes = t.numel() * t.element_size()
        if size and size + nbytes > shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t.contiguous().cpu()
        size += nbytes
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"{prefix}-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(path / fname), metadata=metadata)
        weight_map.update({k: fname for k in shard})
    return weight_map


def write_synthetic(path: str | Path, cfg: TextConfig, seed: int = 0, device="cpu", shard_bytes: int = 4 << 30,
                    scale_dtype=torch.float32) -> Path:
    """Write a synthetic checkpoint as the real one is laid out on disk: config.json,
    model-0000i-of-0000n.safetensors shards and model.safetensors.index.json."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg.to_hf_dict(), indent=2) + "\n")
    sizes = {}

    def counted():
        for name, t in synthetic(cfg, seed, device, scale_dtype=scale_dtype):
            sizes[name] = t.numel() * t.element_size()
            yield name, t

    weight_map = write_shards(path, counted(), "model", shard_bytes, {"format": "pt"})
    (path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}, indent=2) + "\n")
    return path


# --- the transformers reference ---------------------------------------------------------------
def transformers_layer_state_dict(ckpt: Checkpoint, layer: int, dtype=torch.float32) -> dict[str, torch.Tensor]:
    """One decoder layer, exactly dequantized, under Qwen3_5MoeDecoderLayer's parameter
    names (routed experts fused into gate_up_proj [E, 2I, H] and down_proj [E, H, I])."""
    cfg, out = ckpt.cfg, {}
    p = f"{PREFIX}layers.{layer}."
    for name in expected(cfg):
        if name.startswith(p) and ".mlp.experts." not in name:
            out[name[len(p):]] = ckpt.weight(name, dtype)
    m = p + "mlp.experts."
    out["mlp.experts.gate_up_proj"] = torch.stack(
        [torch.cat([ckpt.weight(f"{m}{e}.gate_proj.weight", dtype), ckpt.weight(f"{m}{e}.up_proj.weight", dtype)])
         for e in range(cfg.num_experts)])
    out["mlp.experts.down_proj"] = torch.stack([ckpt.weight(f"{m}{e}.down_proj.weight", dtype) for e in range(cfg.num_experts)])
    return out


def transformers_state_dict(ckpt: Checkpoint, dtype=torch.float32) -> dict[str, torch.Tensor]:
    """The checkpoint, exactly dequantized, under Qwen3_5MoeForCausalLM's parameter names."""
    cfg = ckpt.cfg
    out = {"model.embed_tokens.weight": ckpt.weight(PREFIX + "embed_tokens.weight", dtype),
           "model.norm.weight": ckpt.weight(PREFIX + "norm.weight", dtype),
           "lm_head.weight": ckpt.weight("lm_head.weight", dtype)}
    for L in range(cfg.num_hidden_layers):
        out.update({f"model.layers.{L}.{k}": v for k, v in transformers_layer_state_dict(ckpt, L, dtype).items()})
    return out


def transformers_config(cfg: TextConfig, dtype):
    hf_cfg = cfg.to_transformers()
    hf_cfg._attn_implementation = "sdpa"  # causal without a mask, also for a standalone layer
    # grouped_mm has no float64 kernel; the eager loop is the same math. Set either way so a
    # standalone layer (the shadow gate) does not fall back silently.
    hf_cfg._experts_implementation = "eager" if dtype == torch.float64 else "grouped_mm"
    return hf_cfg


def transformers_layer(ckpt: Checkpoint, layer: int, dtype=torch.float32, device="cpu"):
    """transformers' Qwen3_5MoeDecoderLayer ``layer`` alone, on exactly dequantized weights."""
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeDecoderLayer

    hf_cfg = transformers_config(ckpt.cfg, dtype)
    with torch.device("meta"):
        mod = Qwen3_5MoeDecoderLayer(hf_cfg, layer)
    mod.load_state_dict({k: v.to(device) for k, v in transformers_layer_state_dict(ckpt, layer, dtype).items()},
                        strict=True, assign=True)
    return mod.to(device=device, dtype=dtype).eval()


def transformers_model(ckpt: Checkpoint, dtype=torch.float32, device="cpu"):
    """transformers 5.17.0 Qwen3_5MoeForCausalLM on the exactly dequantized weights."""
    from transformers import Qwen3_5MoeForCausalLM

    hf_cfg = transformers_config(ckpt.cfg, dtype)
    with torch.device("meta"):
        model = Qwen3_5MoeForCausalLM(hf_cfg)
    sd = {k: v.to(device) for k, v in transformers_state_dict(ckpt, dtype).items()}
    model.load_state_dict(sd, strict=True, assign=True)
    with torch.device(device):  # the rotary buffers were made on meta; make them for real
        model.model.rotary_emb = type(model.model.rotary_emb)(config=hf_cfg)
    return model.to(device=device, dtype=dtype).eval()
