"""A functional decode step of Qwen3.6 in plain PyTorch, written from the model's math
(design/qwen36.md) in any dtype (float64 for references), one token per sequence per
step, with per-sequence states: the GDN conv and recurrent states and a KV cache.

It is the math every decode op must reproduce and the oracle for the decode runner's
shadow gates. It is checked against transformers 5.17.0's Qwen3_5MoeForCausalLM in the
tests (teacher-forced logits, float64)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..model.checkpoint import PREFIX, Checkpoint, dequantize, scale_name
from ..model.config import TextConfig


def rmsnorm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    """Zero-centred RMSNorm (every norm of the model but the GDN output norm)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def l2norm(x: Tensor, eps: float = 1e-6) -> Tensor:
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def rope(x: Tensor, pos: Tensor, cfg: TextConfig) -> Tensor:
    """Partial RoPE on the first rotary_dim channels, rotate_half pairs i and i + rd/2.
    For text all three mRoPE position rows are equal, so it is plain RoPE. x: [B, h, d]."""
    rd = cfg.rotary_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, rd, 2, dtype=torch.float64, device=x.device) / rd))
    ang = pos.to(torch.float64)[:, None] * inv[None, :]  # [B, rd/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)[:, None, :]
    xr, xp = x[..., :rd], x[..., rd:]
    rot = torch.cat([-xr[..., rd // 2:], xr[..., : rd // 2]], -1)
    return torch.cat([xr * cos + rot * sin, xp], -1)


@dataclass
class State:
    """Per-sequence decode state for B sequences."""

    conv: dict[int, Tensor]  # GDN layer -> [B, conv_dim, K - 1]
    rec: dict[int, Tensor]  # GDN layer -> [B, nv, dk, dv]
    k: dict[int, Tensor]  # attention layer -> [B, ctx, nkv, hd]
    v: dict[int, Tensor]
    length: Tensor  # [B] tokens already in the cache


class Reference:
    """Weights dequantized exactly into ``dtype``; ``step`` decodes one token per sequence.

    ``lazy``: keep the checkpoint's FP8 projections as they are and dequantize each one when
    a step uses it (every tensor under a million elements, and the embedding and LM head,
    are converted once). A float32 reference of the full 35B model then needs the FP8
    checkpoint's 35 GB instead of 140 GB."""

    LAZY_CACHE = 1 << 20

    def __init__(self, ckpt: Checkpoint, dtype=torch.float64, device="cpu", lazy: bool = False):
        self.cfg, self.dtype, self.device, self.ckpt, self.lazy = ckpt.cfg, dtype, device, ckpt, lazy
        self.routes: list | None = None  # teacher_forced(routes=True): each moe call's (ids, margin)
        self.w = {}
        for name, t in ckpt.tensors.items():
            if name.endswith("_scale_inv"):
                continue
            if not lazy or t.numel() < self.LAZY_CACHE or ".layers." not in name:
                self.w[name] = ckpt.weight(name, dtype).to(device)

    def _get(self, name: str) -> Tensor:
        t = self.w.get(name)
        return t if t is not None else self.ckpt.weight(name, self.dtype).to(self.device)

    def p(self, layer: int, name: str) -> Tensor:
        return self._get(f"{PREFIX}layers.{layer}.{name}")

    def experts(self, layer: int, proj: str, ids: list[int]) -> Tensor:
        """[len(ids), out, in]: one projection of several routed experts, stacked."""
        names = [f"{PREFIX}layers.{layer}.mlp.experts.{e}.{proj}.weight" for e in ids]
        if self.lazy and names[0] not in self.w and self.ckpt.fp8:
            q = torch.stack([self.ckpt.tensors[n] for n in names])
            s = torch.stack([self.ckpt.tensors[scale_name(n)] for n in names])
            return dequantize(q, s, self.cfg.weight_block_size, self.dtype).to(self.device)
        return torch.stack([self._get(n) for n in names])

    def new_state(self, batch: int, max_context: int) -> State:
        c, dt, dev = self.cfg, self.dtype, self.device
        conv, rec, k, v = {}, {}, {}, {}
        for L in range(c.num_hidden_layers):
            if c.is_full(L):
                k[L] = torch.zeros(batch, max_context, c.num_key_value_heads, c.head_dim, dtype=dt, device=dev)
                v[L] = torch.zeros_like(k[L])
            else:
                conv[L] = torch.zeros(batch, c.conv_dim, c.linear_conv_kernel_dim - 1, dtype=dt, device=dev)
                rec[L] = torch.zeros(batch, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim,
                                     dtype=dt, device=dev)
        return State(conv, rec, k, v, torch.zeros(batch, dtype=torch.long, device=dev))

    # --- mixers ------------------------------------------------------------------------
    def gdn(self, L: int, x: Tensor, st: State) -> Tensor:
        c = self.cfg
        B = x.shape[0]
        qkv = x @ self.p(L, "linear_attn.in_proj_qkv.weight").T  # [B, conv_dim]
        z = x @ self.p(L, "linear_attn.in_proj_z.weight").T
        b = x @ self.p(L, "linear_attn.in_proj_b.weight").T
        a = x @ self.p(L, "linear_attn.in_proj_a.weight").T
        window = torch.cat([st.conv[L], qkv[:, :, None]], -1)  # [B, C, K]
        st.conv[L] = window[:, :, 1:].clone()
        w = self.p(L, "linear_attn.conv1d.weight")[:, 0, :]  # [C, K]
        qkv = F.silu((window * w).sum(-1))
        q, k, v = torch.split(qkv, [c.key_dim, c.key_dim, c.value_dim], -1)
        nk, nv, dk, dv = c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim
        q = l2norm(q.view(B, nk, dk)).repeat_interleave(nv // nk, 1) * dk ** -0.5
        k = l2norm(k.view(B, nk, dk)).repeat_interleave(nv // nk, 1)
        v = v.view(B, nv, dv)
        beta = torch.sigmoid(b)
        g = -self.p(L, "linear_attn.A_log").exp() * F.softplus(a + self.p(L, "linear_attn.dt_bias"))
        S = st.rec[L] * g.exp()[:, :, None, None]  # [B, nv, dk, dv]
        kv = torch.einsum("bhkv,bhk->bhv", S, k)
        S = S + k[:, :, :, None] * (beta[:, :, None] * (v - kv))[:, :, None, :]
        st.rec[L] = S
        o = torch.einsum("bhkv,bhk->bhv", S, q)  # [B, nv, dv]
        zn = z.view(B, nv, dv)
        o = self.p(L, "linear_attn.norm.weight") * (o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps)) * F.silu(zn)
        return o.reshape(B, -1) @ self.p(L, "linear_attn.out_proj.weight").T

    def attention(self, L: int, x: Tensor, st: State) -> Tensor:
        c = self.cfg
        B, nh, nkv, hd = x.shape[0], c.num_attention_heads, c.num_key_value_heads, c.head_dim
        qg = (x @ self.p(L, "self_attn.q_proj.weight").T).view(B, nh, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:].reshape(B, nh * hd)
        k = (x @ self.p(L, "self_attn.k_proj.weight").T).view(B, nkv, hd)
        v = (x @ self.p(L, "self_attn.v_proj.weight").T).view(B, nkv, hd)
        q = rmsnorm(q, self.p(L, "self_attn.q_norm.weight"), c.rms_norm_eps)
        k = rmsnorm(k, self.p(L, "self_attn.k_norm.weight"), c.rms_norm_eps)
        pos = st.length
        q, k = rope(q, pos, c), rope(k, pos, c)
        rows = torch.arange(B, device=x.device)
        st.k[L][rows, pos] = k
        st.v[L][rows, pos] = v
        out = torch.empty(B, nh, hd, dtype=x.dtype, device=x.device)
        for i in range(B):  # sequences have their own lengths
            n = int(pos[i]) + 1
            kk = st.k[L][i, :n].repeat_interleave(nh // nkv, 1)  # [n, nh, hd]
            vv = st.v[L][i, :n].repeat_interleave(nh // nkv, 1)
            s = torch.einsum("hd,nhd->hn", q[i], kk) * hd ** -0.5
            out[i] = torch.einsum("hn,nhd->hd", torch.softmax(s, -1), vv)
        o = out.reshape(B, nh * hd) * torch.sigmoid(gate)
        return o @ self.p(L, "self_attn.o_proj.weight").T

    def moe(self, L: int, x: Tensor) -> Tensor:
        c = self.cfg
        probs = torch.softmax(x @ self.p(L, "mlp.gate.weight").T, -1)
        top, idx = torch.topk(probs, c.num_experts_per_tok, -1)
        if self.routes is not None:  # the chosen set and its boundary margin (k-th minus (k+1)-th probability)
            kth = probs.topk(c.num_experts_per_tok + 1, -1).values
            self.routes.append((idx.sort(-1).values, kth[:, -2] - kth[:, -1]))
        top = top / top.sum(-1, keepdim=True)
        ids = idx.unique().tolist()  # the experts any token chose, each read once
        # combine[b, j]: token b's routing weight for expert ids[j] (0 where it did not choose it)
        pos = torch.searchsorted(torch.tensor(ids, device=x.device), idx)
        combine = torch.zeros(x.shape[0], len(ids), dtype=x.dtype, device=x.device).scatter_(1, pos, top)
        gate = torch.einsum("eih,bh->bei", self.experts(L, "gate_proj", ids), x)
        up = torch.einsum("eih,bh->bei", self.experts(L, "up_proj", ids), x)
        y = torch.einsum("ehi,bei->beh", self.experts(L, "down_proj", ids), F.silu(gate) * up)
        out = (combine[:, :, None] * y).sum(1)
        sg = x @ self.p(L, "mlp.shared_expert.gate_proj.weight").T
        su = x @ self.p(L, "mlp.shared_expert.up_proj.weight").T
        shared = (F.silu(sg) * su) @ self.p(L, "mlp.shared_expert.down_proj.weight").T
        return out + torch.sigmoid(x @ self.p(L, "mlp.shared_expert_gate.weight").T) * shared

    # --- the step -------------------------------------------------------------------------
    def step(self, tokens: Tensor, st: State) -> Tensor:
        """Logits [B, vocab] for one new token per sequence; advances the state."""
        c = self.cfg
        h = self.w[PREFIX + "embed_tokens.weight"][tokens]
        for L in range(c.num_hidden_layers):
            x = rmsnorm(h, self.p(L, "input_layernorm.weight"), c.rms_norm_eps)
            h = h + (self.attention(L, x, st) if c.is_full(L) else self.gdn(L, x, st))
            x = rmsnorm(h, self.p(L, "post_attention_layernorm.weight"), c.rms_norm_eps)
            h = h + self.moe(L, x)
        st.length += 1
        h = rmsnorm(h, self.w[PREFIX + "norm.weight"], c.rms_norm_eps)
        return h @ self.w["lm_head.weight"].T

    # --- whole sequences ------------------------------------------------------------------
    @torch.no_grad()
    def teacher_forced(self, prompts: Tensor, out_dtype=torch.float32, routes: bool = False):
        """Logits [n, T, V] (on the CPU) at every position of ``prompts`` [n, T]. ``routes``: also
        the router's choices, {"ids": int64 [n, T, layers, k] (each set ascending), "margin":
        [n, T, layers] (the k-th largest probability minus the (k+1)-th)}, on the CPU."""
        n, T = prompts.shape
        st = self.new_state(n, T)
        logits, ids, margin = [], [], []
        self.routes = [] if routes else None
        try:
            for t in range(T):
                logits.append(self.step(prompts[:, t].to(self.device), st).to(out_dtype).cpu())
                if routes:
                    ids.append(torch.stack([i for i, _ in self.routes], 1).cpu())
                    margin.append(torch.stack([m for _, m in self.routes], 1).float().cpu())
                    self.routes = []
        finally:
            self.routes = None
        logits = torch.stack(logits, 1)
        return (logits, {"ids": torch.stack(ids, 1), "margin": torch.stack(margin, 1)}) if routes else logits

    @torch.no_grad()
    def greedy(self, prompt: Tensor, steps: int) -> tuple[Tensor, Tensor]:
        """Greedy continuation [steps] of ``prompt`` [T] and the top-2 margin of each chosen
        token (relative to the largest logit)."""
        st = self.new_state(1, prompt.shape[0] + steps)
        for tok in prompt:
            logits = self.step(tok.view(1).to(self.device), st)
        toks, margins = [], []
        for _ in range(steps):
            top2 = logits[0].topk(2).values
            margins.append(float((top2[0] - top2[1]) / logits[0].abs().max()))
            toks.append(int(logits[0].argmax()))
            logits = self.step(torch.tensor([toks[-1]], device=self.device), st)
        return torch.tensor(toks), torch.tensor(margins)
