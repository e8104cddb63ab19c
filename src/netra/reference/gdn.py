"""References of the Gated DeltaNet decode step on slot-indexed pools.

``decode_step``: the step in float64 (the truth the kernels are judged by), keeping the one
rounding the model makes inside it: the conv output is BF16 (transformers'
``causal_conv1d_update`` returns the hidden states' dtype).

``transformers_step``: the same step through transformers 5.17.0's own functions
(``causal_conv1d_update``, ``torch_recurrent_gated_delta_rule``, ``Qwen3_5MoeRMSNormGated``)
fed float64; the recurrent rule computes in float32 inside by design, so it agrees with
``decode_step`` to about 1e-6, not 1e-15. Both work on copies and return the new pools."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def _gates(b: Tensor, a: Tensor, A_log: Tensor, dt_bias: Tensor) -> tuple[Tensor, Tensor]:
    beta = torch.sigmoid(b.double())
    g = -A_log.double().exp() * F.softplus(a.double() + dt_bias.double())
    return beta, g


@torch.no_grad()
def decode_step(qkv: Tensor, z: Tensor, b: Tensor, a: Tensor, conv_w: Tensor, A_log: Tensor, dt_bias: Tensor,
                norm_w: Tensor, conv_pool: Tensor, state_pool: Tensor, slots: Tensor, num_k_heads: int,
                eps: float) -> dict[str, Tensor]:
    """-> {"out": [B, nv * dv] float64, "conv_pool": new pool (its dtype), "state_pool": float64}."""
    B = qkv.shape[0]
    nv, dk, dv = state_pool.shape[1:]
    conv, state = conv_pool.clone(), state_pool.double().clone()
    sl = slots.long()
    window = torch.cat([conv[sl].double(), qkv.double()[:, :, None]], -1)  # [B, C, K]
    conv[sl] = window[:, :, 1:].to(conv.dtype)
    x = F.silu((window * conv_w.double()).sum(-1)).to(torch.bfloat16).double()
    q, k, v = torch.split(x, [num_k_heads * dk, num_k_heads * dk, nv * dv], -1)
    rep = nv // num_k_heads
    q = q.view(B, num_k_heads, dk)
    k = k.view(B, num_k_heads, dk)
    q = (q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6)).repeat_interleave(rep, 1) * dk ** -0.5
    k = (k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)).repeat_interleave(rep, 1)
    beta, g = _gates(b, a, A_log, dt_bias)
    S = state[sl] * g.exp()[:, :, None, None]
    kv = torch.einsum("bhkv,bhk->bhv", S, k)
    S = S + k[:, :, :, None] * (beta[:, :, None] * (v.view(B, nv, dv) - kv))[:, :, None, :]
    state[sl] = S
    o = torch.einsum("bhkv,bhk->bhv", S, q)
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps)
    out = (norm_w.double() * o * F.silu(z.double().view(B, nv, dv))).reshape(B, nv * dv)
    return {"out": out, "conv_pool": conv, "state_pool": state}


@torch.no_grad()
def transformers_step(qkv: Tensor, z: Tensor, b: Tensor, a: Tensor, conv_w: Tensor, A_log: Tensor, dt_bias: Tensor,
                      norm_w: Tensor, conv_pool: Tensor, state_pool: Tensor, slots: Tensor, num_k_heads: int,
                      eps: float) -> dict[str, Tensor]:
    """The step as Qwen3_5MoeGatedDeltaNet.forward's cached single-token branch computes it."""
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as m

    B = qkv.shape[0]
    nv, dk, dv = state_pool.shape[1:]
    conv, state = conv_pool.clone(), state_pool.double().clone()
    sl = slots.long()
    cs = conv[sl].double()  # [B, C, K - 1], updated in place by the function
    x = m.causal_conv1d_update(qkv.double()[:, :, None], cs, conv_w.double(), None, "silu")
    conv[sl] = cs.to(conv.dtype)
    x = x.to(torch.bfloat16).double()[:, :, 0]  # the model's conv output is BF16
    q, k, v = torch.split(x, [num_k_heads * dk, num_k_heads * dk, nv * dv], -1)
    rep = nv // num_k_heads
    q = q.reshape(B, 1, num_k_heads, dk).repeat_interleave(rep, 2)
    k = k.reshape(B, 1, num_k_heads, dk).repeat_interleave(rep, 2)
    beta, g = _gates(b, a, A_log, dt_bias)
    o, S = m.torch_recurrent_gated_delta_rule(q, k, v.reshape(B, 1, nv, dv), g=g[:, None], beta=beta[:, None],
                                              initial_state=state[sl], output_final_state=True,
                                              use_qk_l2norm_in_kernel=True)
    state[sl] = S.double()
    norm = m.Qwen3_5MoeRMSNormGated(dv, eps=eps).to(device=qkv.device, dtype=torch.float64)
    norm.weight.copy_(norm_w.double())
    out = norm(o.double().reshape(-1, dv), z.double().reshape(-1, dv)).reshape(B, nv * dv)
    return {"out": out, "conv_pool": conv, "state_pool": state}


@torch.no_grad()
def verify_steps(qkv: Tensor, z: Tensor, b: Tensor, a: Tensor, conv_w: Tensor, A_log: Tensor, dt_bias: Tensor,
                 norm_w: Tensor, conv_pool: Tensor, state_pool: Tensor, slot_in: Tensor, slots_out: Tensor,
                 num_k_heads: int, eps: float, step=decode_step) -> dict[str, Tensor]:
    """T tokens (dim 1 of qkv), token t from the slot token t - 1 left (slot_in first) into
    slots_out[:, t], each by ``step`` (decode_step: float64; transformers_step)."""
    conv, state = conv_pool.clone(), state_pool.double().clone()
    outs, prev = [], slot_in.long()
    for t in range(qkv.shape[1]):
        nxt = slots_out[:, t].long()
        conv[nxt], state[nxt] = conv[prev], state[prev]
        r = step(qkv[:, t], z[:, t], b[:, t], a[:, t], conv_w, A_log, dt_bias, norm_w, conv, state, nxt, num_k_heads, eps)
        conv, state = r["conv_pool"], r["state_pool"]
        outs.append(r["out"])
        prev = nxt
    return {"out": torch.stack(outs, 1), "conv_pool": conv, "state_pool": state}
