"""Float64 reference of the attention decode step on a paged KV cache (netra.contracts.attn.ATTN_DECODE): the
model's math (transformers 5.17.0 Qwen3_5MoeAttention at decode: partial rotate_half RoPE, the cache append, GQA
softmax attention with scale head_dim^-0.5, the sigmoid output gate), computed in float64."""

from __future__ import annotations

import torch
from torch import Tensor


def rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """rotate_half RoPE on the first cos.shape[-1] channels of x [heads, hd] at one position (cos, sin [rd]); float64."""
    rd = cos.shape[-1]
    xr = x[..., :rd]
    rot = torch.cat([-xr[..., rd // 2:], xr[..., :rd // 2]], -1)
    return torch.cat([xr * cos + rot * sin, x[..., rd:]], -1)


def decode_step(q: Tensor, k: Tensor, v: Tensor, gate: Tensor, cos: Tensor, sin: Tensor, positions: Tensor,
                block_table: Tensor, k_pages: Tensor, v_pages: Tensor) -> dict[str, Tensor]:
    """out [B, nh * hd], and the caches with each sequence's row pos holding rope(k) and v, all float64.
    q [B, nh, hd], k and v [B, nkv, hd], gate [B, nh, hd], cos / sin [T, rd], positions [B], block_table [B, NP],
    pages [P, page, nkv, hd]."""
    B, nh, hd = q.shape
    nkv, page = k.shape[1], k_pages.shape[1]
    kp, vp = k_pages.double().clone(), v_pages.double().clone()
    out = torch.empty(B, nh * hd, dtype=torch.float64, device=q.device)
    for b in range(B):
        pos = int(positions[b])
        c, s = cos[pos].double(), sin[pos].double()
        qr = rope(q[b].double(), c, s)
        kr = rope(k[b].double(), c, s)
        pg = int(block_table[b, pos // page])
        kp[pg, pos % page] = kr
        vp[pg, pos % page] = v[b].double()
        pages = block_table[b, : pos // page + 1].long()
        K = kp[pages].flatten(0, 1)[: pos + 1]  # [pos + 1, nkv, hd]
        V = vp[pages].flatten(0, 1)[: pos + 1]
        g = nh // nkv
        for h in range(nh):
            sc = K[:, h // g] @ qr[h] / hd ** 0.5
            o = torch.softmax(sc, 0) @ V[:, h // g]
            out[b, h * hd:(h + 1) * hd] = o * torch.sigmoid(gate[b, h].double())
    return {"out": out, "k_pages": kp, "v_pages": vp}
