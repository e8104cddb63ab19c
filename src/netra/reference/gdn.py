"""References of the Gated DeltaNet decode step on slot-indexed pools.

``decode_step``: the step in float64 (the truth the kernels are judged by), keeping the one
rounding the model makes inside it: the conv output is BF16 (transformers'
``causal_conv1d_update`` returns the hidden states' dtype).

``transformers_step``: the same step through transformers 5.17.0's own functions
(``causal_conv1d_update``, ``torch_recurrent_gated_delta_rule``, ``Qwen3_5MoeRMSNormGated``)
fed float64; the recurrent rule computes in float32 inside by design, so it agrees with
``decode_step`` to about 1e-6, not 1e-15. Both work on copies and return the new pools."""

from __future__ import annotations

import math

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


@torch.no_grad()
def verify_restore(qkv: Tensor, z: Tensor, b: Tensor, a: Tensor, conv_w: Tensor, A_log: Tensor, dt_bias: Tensor,
                   norm_w: Tensor, conv_pool: Tensor, state_pool: Tensor, slot_in: Tensor, num_k_heads: int,
                   eps: float) -> dict[str, Tensor]:
    """T tokens (dim 1) from slot ``slot_in`` with the pools left untouched, in float64 by the
    sequential rule (decode_step's math per token), returning what restores the state after any
    prefix instead of the states: ``out`` [B, T, nv dv]; ``ksave`` [B, T, nk, dk] (the l2-normed
    k); ``dsave`` [B, T, nv, dv] (delta_t = beta_t (v_t - (exp(g_t) S_{t-1})^T k_t)); ``gsave``
    [B, T, nv] (c_t = log2 of the decay product up to and including token t). The state after
    the first j tokens is then 2^c_{j-1} S_0 + sum_{s<j} 2^(c_{j-1} - c_s) k_s delta_s^T
    (``commit``)."""
    B, T = qkv.shape[:2]
    nv, dk, dv = state_pool.shape[1:]
    sl = slot_in.long()
    window = conv_pool[sl].double()  # [B, C, K - 1]
    S = state_pool[sl].double()
    rep = nv // num_k_heads
    beta, g = _gates(b, a, A_log, dt_bias)  # [B, T, nv]
    outs, ks, ds = [], [], []
    for t in range(T):
        w = torch.cat([window, qkv[:, t].double()[:, :, None]], -1)
        window = w[:, :, 1:]
        x = F.silu((w * conv_w.double()).sum(-1)).to(torch.bfloat16).double()
        q, k, v = torch.split(x, [num_k_heads * dk, num_k_heads * dk, nv * dv], -1)
        q = q.view(B, num_k_heads, dk)
        k = k.view(B, num_k_heads, dk)
        q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) * dk ** -0.5
        k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        kr, qr = k.repeat_interleave(rep, 1), q.repeat_interleave(rep, 1)
        S = S * g[:, t].exp()[:, :, None, None]
        d = beta[:, t, :, None] * (v.view(B, nv, dv) - torch.einsum("bhkv,bhk->bhv", S, kr))
        S = S + kr[:, :, :, None] * d[:, :, None, :]
        o = torch.einsum("bhkv,bhk->bhv", S, qr)
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps)
        outs.append((norm_w.double() * o * F.silu(z[:, t].double().view(B, nv, dv))).reshape(B, nv * dv))
        ks.append(k)
        ds.append(d)
    c = torch.cumsum(g, 1) / math.log(2.0)
    return {"out": torch.stack(outs, 1), "ksave": torch.stack(ks, 1), "dsave": torch.stack(ds, 1), "gsave": c}


@torch.no_grad()
def commit(qkv: Tensor, conv_pool: Tensor, state_pool: Tensor, slot_in: Tensor, slot_out: Tensor, accepted: Tensor,
           ksave: Tensor, dsave: Tensor, gsave: Tensor) -> dict[str, Tensor]:
    """The pools after sequence b accepts its first ``accepted[b]`` (0..T) verified tokens, in
    float64 from the restore data (verify_restore): slot_out[b] receives the conv window (the
    last K - 1 inputs of the old window followed by the accepted tokens' qkv) and the state
    2^c_{j-1} S_0 + sum_{s<j} 2^(c_{j-1} - c_s) k_s delta_s^T (S_0 itself for j = 0).
    Returns new pools (conv in its dtype, state float64)."""
    conv, state = conv_pool.clone(), state_pool.double().clone()
    nv = state.shape[1]
    for bi in range(qkv.shape[0]):
        j, si, so = int(accepted[bi]), int(slot_in[bi]), int(slot_out[bi])
        hist = torch.cat([conv_pool[si], qkv[bi, :j].transpose(0, 1).to(conv.dtype)], -1)
        S0 = state_pool[si].double()
        if j == 0:
            S = S0
        else:
            c = gsave[bi, :j].double()  # [j, nv]
            k = ksave[bi, :j].double().repeat_interleave(nv // ksave.shape[2], 1)  # [j, nv, dk]
            w = torch.exp2(c[-1] - c)  # [j, nv]
            S = torch.exp2(c[-1])[:, None, None] * S0 + torch.einsum("sh,shk,shv->hkv", w, k, dsave[bi, :j].double())
        conv[so] = hist[:, hist.shape[1] - conv.shape[2]:]
        state[so] = S
    return {"conv_pool": conv, "state_pool": state}
