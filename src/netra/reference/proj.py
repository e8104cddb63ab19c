"""Float64 reference of the FP8 block-scaled projection."""

from __future__ import annotations

from torch import Tensor

from ..model.checkpoint import dequantize


def fp8_linear(x: Tensor, weight: Tensor, scale: Tensor) -> Tensor:
    """x [M, K] @ dequant(weight [N, K] fp8, scale [N/128, K/128])^T in float64."""
    return x.double() @ dequantize(weight, scale, (128, 128), dtype=x.new_empty(0).double().dtype).T


def router_logits(x: Tensor, w: Tensor) -> Tensor:
    """The router's BF16 logits [M, E] exactly as moe_router_e256_k2048 computes them: per
    expert, lane l (of 32) adds x[k] w[k] (exact in fp32) for k = 256 i + 8 l + c, i and c in
    0..7, in that order; the 32 lane sums are added by a butterfly (16, 8, 4, 2, 1); the sum is
    rounded to BF16. Emulated in float32, so the logits (and their ties) are the kernel's."""
    import torch

    M, K = x.shape
    E = w.shape[0]
    p = x.float()[:, None, :] * w.float()[None, :, :]  # [M, E, K], exact
    p = p.view(M, E, K // 256, 32, 8).permute(0, 1, 3, 2, 4).reshape(M, E, 32, K // 32)
    acc = torch.zeros(M, E, 32, dtype=torch.float32, device=x.device)
    for s in range(K // 32):
        acc = acc + p[..., s]
    lanes = torch.arange(32, device=x.device)
    for off in (16, 8, 4, 2, 1):
        acc = acc + acc[..., lanes ^ off]
    return acc[..., 0].to(torch.bfloat16)


def router_topk(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """(weights float64 [M, k], ids int64 [M, k]): the k largest logits, ties to the lower id,
    in descending order; softmax over all experts renormalized over the k = exp(l_j - l_0) /
    sum over the k, in float64."""
    import torch

    order = torch.sort(logits.double(), dim=-1, descending=True, stable=True)
    top = order.values[:, :k]
    e = torch.exp(top - top[:, :1])
    return e / e.sum(-1, keepdim=True), order.indices[:, :k]


def silu_mul(gu: Tensor) -> Tensor:
    """The model's act_fn(gate) * up on BF16 gate | up rows [..., 2 I]: silu rounded to BF16, the
    product rounded to BF16 (its two BF16 ops), computed from float64."""
    import torch

    g, u = gu.double().chunk(2, -1)
    s = (g * torch.sigmoid(g)).to(torch.bfloat16).double()
    return (s * u).to(torch.bfloat16)


def moe_down(gu: Tensor, w: Tensor, scale: Tensor, ids: Tensor, top: Tensor, sgu: Tensor, ws: Tensor, ss: Tensor,
             glogit: Tensor) -> Tensor:
    """The MoE block's output [M, N] in float64 from its gate | up rows: with a = silu_mul(gu)
    [M, k, I] (gu [M, k * 2 I], the pairs' gate | up) and as = silu_mul(sgu) (the shared
    expert's), sum_j top[t, j] a[t, j] @ dequant(w[ids[t, j]])^T + bf16(sigmoid(glogit[t]))
    as[t] @ dequant(ws)^T; w [E, N, I] fp8 (plain, not packed), ws [N, I]; the gate as the model
    computes it (sigmoid of the BF16 logit, a BF16 product)."""
    import torch

    M, k = ids.shape
    a = silu_mul(gu.view(M, k, -1))
    e = ids.reshape(-1)
    W = dequantize(w[e], scale[e], (128, 128), dtype=torch.float64)  # [M k, N, I]
    routed = torch.einsum("pni,pi->pn", W, a.reshape(M * k, -1).double()).view(M, k, -1)
    out = (routed * top.double()[:, :, None]).sum(1)
    sig = torch.sigmoid(glogit.float()).to(torch.bfloat16).double()
    return out + sig * fp8_linear(silu_mul(sgu), ws, ss)


def act_order(device=None) -> Tensor:
    """perm [128]: position p of a 128-k block in moe_act_i512's xa holds column perm[p]. Position 64 tig + 2 r + h
    (lane group tig, word r = 2 i + kh of mma step i, half h) is column 16 i + 8 kh + 2 tig + h: a lane's B fragments
    of the block as 64 contiguous bytes."""
    import torch

    p = torch.arange(128, device=device)
    tig, r, h = p // 32, (p % 32) // 2, p % 2
    return 16 * (r // 2) + 8 * (r % 2) + 2 * tig + h


def act_natural(xa: Tensor) -> Tensor:
    """xa [M, 9 * 512] (moe_act_i512's fragment order) -> [M, 9, 512] in k order, the same dtype."""
    M = xa.shape[0]
    blocks = xa.reshape(M, -1, 128)
    out = blocks.clone()
    out[..., act_order(xa.device)] = blocks
    return out.reshape(M, -1, 512)


def moe_act(gu: Tensor, top: Tensor, sgu: Tensor, glogit: Tensor) -> tuple[Tensor, Tensor]:
    """(xa float64 [M, 9 * 512], xm float64 [M, 36]): moe_act_i512's outputs from the model's ops. a = silu_mul of each
    pair's gate | up (gu [M, 8 * 2 I], sgu [M, 2 I] for the shared expert, j = 8); per 128-k block the scale 2^e that
    moedown gives its x (e = 141 - E, E = max(15, the biased exponent of the block's amax)); xa = a 2^e in the
    fragment order (act_order), xm = 2^-e times the pair's weight: top[t, j], or bf16(sigmoid(glogit[t]))."""
    import torch

    M = gu.shape[0]
    a = torch.cat([silu_mul(gu.view(M, 8, -1)), silu_mul(sgu)[:, None]], 1).double()  # [M, 9, 512]
    blocks = a.reshape(M, 36, 128)
    amax = blocks.abs().amax(-1).float()
    E = torch.clamp((amax.view(torch.int32) >> 23) & 0xFF, min=15).double()
    scale = torch.where(amax == 0, torch.zeros_like(E), torch.exp2(141 - E))
    inv = torch.where(amax == 0, torch.zeros_like(E), torch.exp2(E - 141))
    xa = torch.empty_like(blocks)
    xa[..., :] = (blocks * scale[..., None])[..., act_order(gu.device)]
    sig = torch.sigmoid(glogit.float()).to(torch.bfloat16).double()  # [M, 1]
    weight = torch.cat([top.double(), sig], 1)  # [M, 9]
    return xa.reshape(M, -1), (inv.view(M, 9, 4) * weight[:, :, None]).reshape(M, -1)


def moe_down_grp(xa: Tensor, xm: Tensor, w: Tensor, scale: Tensor, ids: Tensor, ws: Tensor, ss: Tensor) -> Tensor:
    """fp8_gemv_n2048_k4608_moedown_grp's output [M, N] in float64 from its inputs: sum_j of x[t, j] @
    dequant(W_j)^T with x[t, j] = act_natural(xa)[t, j] times xm[t, j, q] over k block q, W_j = w[ids[t, j]]
    for j < 8 and ws for j = 8 (w [E, N, I] and ws [N, I] plain)."""
    import torch

    M, k = ids.shape
    x = (act_natural(xa).double().view(M, 9, 4, 128) * xm.double().view(M, 9, 4, 1)).view(M, 9, -1)
    e = ids.reshape(-1)
    W = dequantize(w[e], scale[e], (128, 128), dtype=torch.float64)
    routed = torch.einsum("pni,pi->pn", W, x[:, :k].reshape(M * k, -1)).view(M, k, -1).sum(1)
    return routed + fp8_linear(x[:, k], ws, ss)
