"""Projection kernels: FP8 E4M3 W8A16 GEMV / skinny GEMM (netra.contracts.proj).

The kernels read weights in a packed layout made once at load (``pack_weight``): tile
(strip of 16 rows, 128-k block) is 2048 contiguous bytes holding, per lane of a warp, the
f16 mma A fragments of the tile's 8 k16 steps (64 bytes, as 4 chunks of 512 B so that each
16-byte load of a warp is coalesced). A 3-D weight [N / 16, K / 128, 2048] is packed, a
2-D [N, K] one is not; ``linear`` dispatches on that, and the framework path takes either."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from ..contracts.proj import (DENSE32, EXPERTS, EXPERTS_GROUP, EXPERTS_GROUP32, EXPERTS_ROUTER, EXPERTS_ROUTER_DOWN, EXPERTS_SHARED, EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32, FUSED, LM_HEAD as _LM, MOE_ACT, MOE_DOWN, MOE_DOWN_GRP,
                              MOE_DOWN_S6, MOE_DOWN_WIDE_M, MOE_ROUTER_NORM_REGS, MOE_ROUTER_NORM_SPLIT, NORM_BA, PLAIN_BA, RES32, RES_P2, SHAPES, TOP_K,
                              frag_k)
from ._dispatch import KernelOp

KERNELS = {(s.S, s.KB): KernelOp("fp8_linear", s.name, key=s.name) for s in SHAPES}
# the same for up to 32 rows in one launch (4 n-tiles; the runner's K = 2048 shapes), taken above DENSE32_ROWS rows
KERNELS32 = {(s.S, s.KB): KernelOp("fp8_linear", s.name, key=s.name) for s in DENSE32}
# the fused kernels (input norm prologue, residual epilogue), by the packed weight's (S, KB)
NORM_KERNELS = {(s.S, s.KB): KernelOp("fp8_linear_norm", s.name, key=s.name) for s in FUSED if s.fuse == "norm"}
RES_KERNELS = {(s.S, s.KB): KernelOp("fp8_linear_add", s.name, key=s.name) for s in FUSED if s.fuse == "res"}
# the residual build for up to 32 rows in one launch (k split over clusters of 2), taken above RES32_ROWS rows
RES_KERNELS32 = {(RES32.S, RES32.KB): KernelOp("fp8_linear_add", RES32.name, key=RES32.name)}
# the two-pass build it replaced (RES32's bench peer), by the same packed weight's (S, KB)
RES_P2_KERNELS = {(RES_P2.S, RES_P2.KB): KernelOp("fp8_linear_add", RES_P2.name, key=RES_P2.name)}
# the GDN layer's norm, in_proj_qkv | z and in_proj_b | a in one launch (the same packed weight's (S, KB) as its norm kernel)
NORM_BA_KERNELS = {(NORM_BA.S, NORM_BA.KB): KernelOp("fp8_linear_norm_ba", NORM_BA.name, key=NORM_BA.name)}
# above that kernel's rows (after the norm's own launch): the 16- and 32-token in_proj_qkv | z with the b | a CTAs, by
# the build's tokens
BA_PLAIN_KERNELS = {sh.tokens: {(sh.S, sh.KB): KernelOp("fp8_linear_ba", sh.name, key=sh.name)} for sh in PLAIN_BA}
GATE_KERNELS = {(s.S, s.KB): KernelOp("fp8_linear_gate", s.name, key=s.name) for s in FUSED if s.fuse == "gate"}
# the routed experts' kernels, by the stacked packed weight's (S, KB) per expert
EXPERT_KERNELS = {(s.S, s.KB): KernelOp("fp8_linear_experts", s.name, key=s.name) for s in EXPERTS}
# the gate | up once per distinct expert (bitwise the per-pair kernel), which fp8_linear_experts takes from
# netra.decode.ops.EXPERTS_GROUP_ROWS rows, by the same packed weight's (S, KB)
EXPERT_GROUP_KERNELS = {(EXPERTS_GROUP.S, EXPERTS_GROUP.KB): KernelOp("fp8_linear_experts", EXPERTS_GROUP.name,
                                                                      key=EXPERTS_GROUP.name)}
# its 32-token build (one launch for a batch of up to 32), which fp8_linear_experts takes above EXPERTS_GROUP32_ROWS rows
EXPERT_GROUP32_KERNELS = {(EXPERTS_GROUP32.S, EXPERTS_GROUP32.KB): KernelOp("fp8_linear_experts", EXPERTS_GROUP32.name,
                                                                          key=EXPERTS_GROUP32.name)}
# the routed and the shared experts' gate | up (and the shared expert's gate) in one launch
EXPERTS_SHARED_KERNEL = KernelOp("fp8_linear_experts_shared", EXPERTS_SHARED.name, key=EXPERTS_SHARED.name)
# the same with the routed gate | up once per distinct expert and the shared expert as the first distinct expert, which
# fp8_linear_experts_shared takes from netra.decode.ops.EXPERTS_GROUP_ROWS rows
EXPERTS_SHARED_GROUP_KERNEL = KernelOp("fp8_linear_experts_shared", EXPERTS_SHARED_GROUP.name,
                                       key=EXPERTS_SHARED_GROUP.name)
# and its 32-token build, which it takes above netra.decode.ops.EXPERTS_GROUP32_ROWS rows
EXPERTS_SHARED_GROUP32_KERNEL = KernelOp("fp8_linear_experts_shared", EXPERTS_SHARED_GROUP32.name,
                                         key=EXPERTS_SHARED_GROUP32.name)
# the same after the post-attention norm and the router, with a grid-wide barrier between them (every CTA resident)
EXPERTS_ROUTER_KERNEL = KernelOp("fp8_linear_experts_router", EXPERTS_ROUTER.name, key=EXPERTS_ROUTER.name)
# and at one token moe_down as its third phase: the batch-1 MoE block in one launch
EXPERTS_ROUTER_DOWN_KERNEL = KernelOp("fp8_linear_experts_router_down", EXPERTS_ROUTER_DOWN.name,
                                      key=EXPERTS_ROUTER_DOWN.name)
BA = KernelOp("bf16_linear2", "bf16_gemv_n64_k2048")  # GDN in_proj_b | in_proj_a, one launch


def fp8_linear_ba(x: Tensor, weight: Tensor, scale: Tensor, out: Tensor, w_b: Tensor, w_a: Tensor, out_b: Tensor,
                  out_a: Tensor, tokens: int) -> bool:
    """The plain in_proj_qkv | z build with the b | a CTAs for ``tokens`` (16: fp8_gemv_n12288_k2048_ba, 32: _ba_t32)
    at any of its rows (the decode op fp8_linear_ba picks the build as fp8_linear does): False (the miss counted)
    where it has no build for the weight or its guard refuses."""
    k = kernel_for(weight, BA_PLAIN_KERNELS[tokens])
    return k is not None and k(x, weight, scale, out, w_b, w_a, out_b, out_a)


ROUTER = KernelOp("moe_router", "moe_router_e256_k2048")  # the MoE router and its top-k, one launch
ROUTER_NORM = KernelOp("moe_router_norm", "moe_router_norm_e256_k2048")  # the same after the post-attention norm
# the same outputs with the experts split across CTAs (a counter per token group): from netra.decode.ops.ROUTER_SPLIT_ROWS
ROUTER_NORM_SPLIT = KernelOp("moe_router_norm", MOE_ROUTER_NORM_SPLIT.name, key=MOE_ROUTER_NORM_SPLIT.name)
# and with each warp's expert rows in registers from the start: up to netra.decode.ops.ROUTER_REGS_ROWS rows
ROUTER_NORM_REGS = KernelOp("moe_router_norm", MOE_ROUTER_NORM_REGS.name, key=MOE_ROUTER_NORM_REGS.name)
MOE_DOWN_KERNEL = KernelOp("moe_down", MOE_DOWN.name)  # the routed and shared experts' down, weighted, + residual
MOE_DOWN_KERNEL_S6 = KernelOp("moe_down", MOE_DOWN_S6.name, key=MOE_DOWN_S6.name)  # the same, 6 stages: from MOE_DOWN_WIDE_M rows


# the same once per distinct expert: moe_act makes the pairs' inputs, then each distinct expert's strips are read once
MOE_ACT_KERNEL = KernelOp("moe_down", MOE_ACT.name, key=MOE_ACT.name)
MOE_DOWN_GRP_KERNEL = KernelOp("moe_down", MOE_DOWN_GRP.name, key=MOE_DOWN_GRP.name)
LM_HEAD = KernelOp("lm_head_argmax", _LM.name)  # the LM head and the greedy argmax, one launch


def moe_down_kernel_for(rows: int) -> KernelOp:
    return MOE_DOWN_KERNEL_S6 if rows >= MOE_DOWN_WIDE_M else MOE_DOWN_KERNEL


def moe_down_grouped(x: Tensor, w2: Tensor, s2: Tensor, ids: Tensor, top: Tensor, xs: Tensor, shared_w2: Tensor,
                     shared_s2: Tensor, glogit: Tensor, h: Tensor, out: Tensor) -> bool:
    """moe_down by moe_act_i512 then fp8_gemv_n2048_k4608_moedown_grp (bitwise the per-token kernels); False (the
    miss counted, h untouched) where either guard refuses. The down kernel reads the ids before its
    griddepcontrol.wait: moe_act, launched first, is never their writer. Weights not packed for the kernels (the
    down kernel's guard would refuse them) return False before moe_act is launched or its outputs allocated."""
    if w2.dim() != 4 or shared_w2.dim() != 3:
        return False
    M = x.shape[0]
    xa = torch.empty(M, (TOP_K + 1) * MOE_DOWN_GRP.I, dtype=torch.float16, device=x.device)
    xm = torch.empty(M, (TOP_K + 1) * MOE_DOWN_GRP.KB, dtype=torch.float32, device=x.device)
    if not MOE_ACT_KERNEL(x, top, xs, glogit, xa, xm):
        return False
    return MOE_DOWN_GRP_KERNEL(xa, w2, s2, h, ids, shared_w2, shared_s2, xm, out)


@functools.cache
def _tile_index(device: str, x_direct: bool = False) -> Tensor:
    """idx[o] = row * 128 + k (within the strip's 16 x 128 block) of packed byte o of a tile,
    following the mma.m16n8k16 A-fragment layout: lane t = 4 g + tig holds rows g and g + 8 and
    k indices 2 tig, 2 tig + 1, 2 tig + 8, 2 tig + 9 of each k16 step, as
    (g, k) (g, k + 1) (g + 8, k) (g + 8, k + 1) (g, k + 8) (g, k + 9) (g + 8, k + 8) (g + 8, k + 9);
    the column of a k index is frag_k's."""
    o = torch.arange(2048)
    j, t, p = o // 512, (o % 512) // 16, o % 16
    g, tig = t // 4, t % 4
    step, q = 2 * j + p // 8, p % 8
    row = g + 8 * ((q // 2) % 2)
    cols = torch.tensor([[[frag_k(s_, tg, kk, x_direct) for kk in (0, 1, 8, 9)] for tg in range(4)] for s_ in range(8)])
    k = cols[step, tig, 2 * (q // 4) + q % 2]
    return (row * 128 + k).to(device)


def pack_weight(w: Tensor, x_direct: bool = False) -> Tensor:
    """fp8 [..., N, K] (N, K multiples of 128) -> the kernels' layout [..., N / 16, K / 128, 2048]
    (a stack of experts [E, N, K] packs each expert). ``x_direct``: the columns of each k block in
    the order of the x_direct candidate kernels (netra.contracts.proj.frag_k)."""
    *lead, N, K = w.shape
    if N % 128 or K % 128:
        raise ValueError(f"pack_weight: expected N and K multiples of 128, got [{N}, {K}]")
    tiles = (w.view(torch.uint8).reshape(-1, N // 16, 16, K // 128, 128).permute(0, 1, 3, 2, 4)
             .reshape(*lead, N // 16, K // 128, 2048))
    return tiles[..., _tile_index(str(w.device), x_direct)].contiguous().view(w.dtype)


def unpack_weight(p: Tensor, x_direct: bool = False) -> Tensor:
    """The inverse of pack_weight: [..., S, KB, 2048] -> [..., 16 S, 128 KB]."""
    *lead, S, KB, _ = p.shape
    tiles = torch.empty_like(p.view(torch.uint8))
    tiles[..., _tile_index(str(p.device), x_direct)] = p.view(torch.uint8)
    return (tiles.reshape(-1, S, KB, 16, 128).permute(0, 1, 3, 2, 4).reshape(*lead, S * 16, KB * 128)
            .view(p.dtype))


def kernel_for(weight: Tensor, kernels: dict = KERNELS) -> KernelOp | None:
    if kernels is EXPERT_KERNELS or kernels is EXPERT_GROUP_KERNELS or kernels is EXPERT_GROUP32_KERNELS:  # [E, S, KB, 2048]
        return kernels.get(tuple(weight.shape[1:3])) if weight.dim() == 4 else None
    return kernels.get(tuple(weight.shape[:2])) if weight.dim() == 3 else None
