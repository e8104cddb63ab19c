"""Decode ops of Qwen3.6 beyond the norms: FP8 block-scaled projection, the Gated DeltaNet
step on state pools, the attention step on a paged KV cache, the MoE block and the LM head
with greedy selection. Each is a ``netra::`` custom op with destination passing (``out=``)
and a framework path in PyTorch that captures into a CUDA graph (no host synchronization,
no data-dependent shapes). The kernel issues fill these ops without changing their
signatures: a guard in front of the framework path, as the norm ops have.

Shapes below use the real model's sizes; the framework paths accept any consistent sizes
(the tests run them on a tiny config)."""

from __future__ import annotations

import contextlib
import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..contracts import attn as A
from ..contracts.gdn import GDN_PIPE_B, GDN_PIPE_PDL_B, GDN_SMEM_B, TAG
from ..contracts.proj import SMS
from ..ops import _dispatch, attn, gdn, proj
from ..ops.norm import qk_rmsnorm, rmsnorm


_DISPATCHER = [False]  # True inside named_ops(): every call goes through the custom op


@contextlib.contextmanager
def named_ops():
    """Route the decode ops through their custom ops inside the block, so torch.profiler
    names them (netra::<op>); off the hot path."""
    _DISPATCHER[0] = True
    try:
        yield
    finally:
        _DISPATCHER[0] = False


def decode_op(name: str, mutates_args: tuple[str, ...]):
    """Register ``fn`` as the custom op ``netra::<name>`` (for torch.compile and tracing) and
    return a plain function that calls ``fn`` directly in eager code and under CUDA-graph
    capture: the dispatcher's layers cost tens of microseconds of host time per call
    (measured: 56 us for an eager gdn_decode through the custom op). The custom op stays
    reachable as ``torch.ops.netra.<name>`` and as ``.custom_op``."""

    def wrap(fn):
        op = torch.library.custom_op(f"netra::{name}", mutates_args=mutates_args)(fn)
        packet = getattr(torch.ops.netra, name)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if _DISPATCHER[0] or torch.compiler.is_compiling():
                return packet(*args, **kwargs)
            return fn(*args, **kwargs)

        call.register_fake = op.register_fake
        call.custom_op = op
        return call

    return wrap


def dequant(w: Tensor, scale: Tensor, block: int = 128, dtype=torch.bfloat16) -> Tensor:
    """fp8 [..., N, K] with fp32 block scales [..., ceil(N/128), ceil(K/128)] -> dtype."""
    n, k = w.shape[-2:]
    if n % block == 0 and k % block == 0:  # broadcast the scales: no full-size scale tensor
        lead = w.shape[:-2]
        wb = w.float().view(*lead, n // block, block, k // block, block)
        return (wb * scale[..., :, None, :, None]).view(w.shape).to(dtype)
    s = scale.repeat_interleave(block, -2)[..., :n, :].repeat_interleave(block, -1)[..., :k]
    return (w.float() * s).to(dtype)


# --- fp8_linear ------------------------------------------------------------------------------
# above this many rows the K = 2048 shapes that have a 32-token build (netra.contracts.proj.DENSE32) take it: one launch
# reads the weight once where launches of 16 rows read it twice
DENSE32_ROWS = 16


def linear(x: Tensor, weight: Tensor, scale: Tensor, out: Tensor) -> None:
    """fp8_linear's body: the kernel for a packed weight whose shape has one (and whose guard
    passes), else dequantize then matmul (unpacking a packed weight first)."""
    if weight.dim() == 3:
        k = proj.kernel_for(weight, proj.KERNELS32) if x.shape[0] > DENSE32_ROWS else None  # one launch for <= 32 rows
        k = k or proj.kernel_for(weight)
        refused = k.rows(x, weight, scale, out) if k is not None else [slice(None)]  # more rows: chunks of 16 (32)
        if not refused:
            return
        weight = proj.unpack_weight(weight)
        for s in refused:
            out[s].copy_(x[s] @ dequant(weight, scale, dtype=x.dtype).T)
        return
    out.copy_(x @ dequant(weight, scale, dtype=x.dtype).T)


@decode_op("fp8_linear", mutates_args=("out",))
def fp8_linear(x: Tensor, weight: Tensor, scale: Tensor, out: Tensor) -> None:
    """out[M, N] = x[M, K] @ dequant(weight, scale)^T, BF16 out, fp32 accumulate. weight is
    fp8 [N, K], or packed for the kernels [N / 16, K / 128, 2048] (netra.ops.proj.pack_weight);
    scale fp32 [N / 128, K / 128]. Kernels: netra.contracts.proj (M = 1..16; more rows go as
    launches of 16)."""
    linear(x, weight, scale, out)


@fp8_linear.register_fake
def _(x, weight, scale, out):
    return None


# --- fp8_linear_norm and fp8_linear_add: the fused prologue and epilogue ---------------------
@decode_op("fp8_linear_norm", mutates_args=("out", "x_out"))
def fp8_linear_norm(h: Tensor, norm_weight: Tensor, eps: float, weight: Tensor, scale: Tensor, out: Tensor,
                    x_out: Tensor) -> None:
    """x_out = rmsnorm(h) (zero-centred, BF16), then out = x_out @ dequant(weight, scale)^T:
    the input norm as the projection's prologue. Kernels fp8_gemv_n12288_k2048_norm and
    fp8_gemv_n9216_k2048_norm (packed weights, M = 1..8; bitwise rmsnorm_h2048 then the
    plain kernel); otherwise the norm op, then fp8_linear."""
    k = proj.kernel_for(weight, proj.NORM_KERNELS)
    if k is not None and k(h, weight, scale, out, norm_weight, x_out, eps):
        return
    rmsnorm(h, norm_weight, eps, out=x_out)
    linear(x_out, weight, scale, out)


@fp8_linear_norm.register_fake
def _(h, norm_weight, eps, weight, scale, out, x_out):
    return None


# The GDN layer's b | a by 4 more CTAs of its norm + in_proj_qkv | z launch (fp8_linear_norm_ba) instead of a
# launch of their own after it: bitwise the same logits, 67-77 us less per batch-1 step plainly, 28-42 with PDL,
# ~70 at batch 8 (experiments/decode/step_ab_router_redux_ba_fused{,_b8}_7f8a1fd.json). False: the two launches
BA_FUSED = True
# Above the norm_ba kernel's rows (where its launch falls back to the norm, in_proj_qkv | z and b | a launches), b | a
# first, right after the norm: under PDL the in_proj's weights then stream while b | a runs, where b | a ran after the
# in_proj's end. The same kernels on the same inputs: the same bits. Measured at b763560 (experiments/decode/
# step_ab_current_ba_first_current_again_b32_b763560.json, _b16_, ms plain / PDL): batch 32 8.596 / 8.290 against
# 8.585-8.596 / 8.328-8.332 (late 8.417 against 8.463-8.465 with PDL), batch 16 5.591 / 5.327 against 5.592 /
# 5.340-5.341. False: the norm, the in_proj, then b | a
BA_FIRST = True


@decode_op("fp8_linear_norm_ba", mutates_args=("out", "x_out", "out_b", "out_a"))
def fp8_linear_norm_ba(h: Tensor, norm_weight: Tensor, eps: float, weight: Tensor, scale: Tensor, out: Tensor,
                       x_out: Tensor, w_b: Tensor, w_a: Tensor, out_b: Tensor, out_a: Tensor) -> None:
    """fp8_linear_norm, then out_b = x_out @ w_b^T and out_a = x_out @ w_a^T (BF16; bf16_linear2): the GDN
    layer's input norm and its four input projections. Kernel fp8_gemv_n12288_k2048_norm_ba (packed weight,
    M = 1..8; bitwise fp8_linear_norm's and bf16_linear2's kernels); above its rows (BA_FIRST) the norm, then
    fp8_linear_ba; otherwise those two ops."""
    k = proj.kernel_for(weight, proj.NORM_BA_KERNELS)
    if k is not None and k(h, weight, scale, out, norm_weight, x_out, eps, w_b, w_a, out_b, out_a):
        return
    if BA_FIRST and k is not None and h.shape[0] > k.max_rows:  # rows no norm-fused kernel takes
        rmsnorm(h, norm_weight, eps, out=x_out)
        fp8_linear_ba(x_out, weight, scale, out, w_b, w_a, out_b, out_a)
        return
    fp8_linear_norm(h, norm_weight, eps, weight, scale, out, x_out)
    bf16_linear2(x_out, w_b, w_a, out_b, out_a)


@fp8_linear_norm_ba.register_fake
def _(h, norm_weight, eps, weight, scale, out, x_out, w_b, w_a, out_b, out_a):
    return None


# GDN's in_proj_qkv | z and its b | a in one launch after the norm above the norm_ba kernel's rows
# (netra.contracts.proj.PLAIN_BA: fp8_gemv_n12288_k2048_ba up to DENSE32_ROWS rows, _ba_t32 up to 32, as fp8_linear
# picks the in_proj's build): the same bits, one launch fewer per GDN layer. Measured at a8fe60a (experiments/decode/
# step_ab_current_ba_plain_off_current_again_b{32,16}_a8fe60a.json, ms plain / PDL): batch 32 8.412 / 8.059 and 8.406 /
# 8.058 against 8.505 / 8.079 (late 8.542 / 8.183 against 8.627 / 8.210), batch 16 5.526 / 5.200 against 5.606 / 5.248.
# False: bf16_linear2, then fp8_linear (BA_FIRST's order)
BA_PLAIN = True


@decode_op("fp8_linear_ba", mutates_args=("out", "out_b", "out_a"))
def fp8_linear_ba(x: Tensor, weight: Tensor, scale: Tensor, out: Tensor, w_b: Tensor, w_a: Tensor, out_b: Tensor,
                  out_a: Tensor) -> None:
    """out = x @ dequant(weight, scale)^T, out_b = x @ w_b^T, out_a = x @ w_a^T: GDN's four input projections of the
    normed x. Kernels fp8_gemv_n12288_k2048_ba (M <= DENSE32_ROWS) and _ba_t32 (up to 32 rows), packed weight, bitwise
    fp8_linear's kernel for those rows and bf16_linear2's; otherwise bf16_linear2, then fp8_linear."""
    M = x.shape[0]
    tokens = 32 if M > DENSE32_ROWS else 16  # the in_proj build fp8_linear takes for these rows
    if BA_PLAIN and M <= tokens and proj.fp8_linear_ba(x, weight, scale, out, w_b, w_a, out_b, out_a, tokens):
        return
    bf16_linear2(x, w_b, w_a, out_b, out_a)
    linear(x, weight, scale, out)


@fp8_linear_ba.register_fake
def _(x, weight, scale, out, w_b, w_a, out_b, out_a):
    return None


# above this many rows fp8_linear_add takes the residual build for 32 rows (netra.contracts.proj.RES32, k split over
# clusters of 2): one launch for up to 32 rows, reading the weight once where launches of 16 rows read it twice
RES32_ROWS = 16


@decode_op("fp8_linear_add", mutates_args=("h", "out"))
def fp8_linear_add(x: Tensor, weight: Tensor, scale: Tensor, h: Tensor, out: Tensor) -> None:
    """out = x @ dequant(weight, scale)^T (BF16), then h += out in place (the model's two ops):
    the residual add as the projection's epilogue; out is the mixer's output for whoever reads
    it (the layer shadow). Kernel fp8_gemv_n2048_k4096_res (packed weight, M = 1..16), above
    RES32_ROWS rows fp8_gemv_n2048_k4096_res_ks2_t32 (M = 1..32; k split, so not bitwise launches of 16 rows);
    otherwise fp8_linear, then the add."""
    k = proj.kernel_for(weight, proj.RES_KERNELS32) if x.shape[0] > RES32_ROWS else None
    k = k or proj.kernel_for(weight, proj.RES_KERNELS)
    for s in (k.rows(x, weight, scale, h, out) if k is not None else [slice(None)]):  # rows the kernel did not take
        linear(x[s], weight, scale, out[s])
        h[s].add_(out[s])


@fp8_linear_add.register_fake
def _(x, weight, scale, h, out):
    return None


@decode_op("fp8_linear_gate", mutates_args=("out", "gate_out"))
def fp8_linear_gate(x: Tensor, weight: Tensor, scale: Tensor, gate_w: Tensor, out: Tensor, gate_out: Tensor) -> None:
    """out = x @ dequant(weight, scale)^T and gate_out [M, 1] = x @ gate_w^T (BF16 [1, K]) in one
    launch: the shared expert's gate | up and its BF16 shared_expert_gate. Kernel
    fp8_gemv_n1024_k2048_gate_ks2 (packed weight, M = 1..16); otherwise fp8_linear and a matmul."""
    k = proj.kernel_for(weight, proj.GATE_KERNELS)
    for s in (k.rows(x, weight, scale, out, gate_w, gate_out) if k is not None else [slice(None)]):
        linear(x[s], weight, scale, out[s])
        torch.matmul(x[s], gate_w.T, out=gate_out[s])


@fp8_linear_gate.register_fake
def _(x, weight, scale, gate_w, out, gate_out):
    return None


# --- fp8_linear_experts: the routed experts ----------------------------------------------------
def experts_framework(x: Tensor, weight: Tensor, scale: Tensor, ids: Tensor, out: Tensor) -> None:
    """fp8_linear_experts in PyTorch: gather the pairs' experts, dequantize, one bmm. An id
    outside 0..E-1 gives a NaN row, as the kernels do."""
    E = weight.shape[0]
    k = ids.shape[1] if ids.dim() == 2 else 1
    e = ids.reshape(-1)
    bad = (e < 0) | (e >= E)
    e = torch.where(bad, torch.zeros_like(e), e)
    w = weight[e]
    if w.dim() == 4:
        w = proj.unpack_weight(w)
    xr = x.repeat_interleave(k, 0) if k > 1 else x
    y = torch.bmm(dequant(w, scale[e], dtype=x.dtype), xr[:, :, None])[:, :, 0]
    out.view(y.shape).copy_(torch.where(bad[:, None], torch.full_like(y, float("nan")), y))


# From this many token rows the routed gate | up runs once per distinct expert (fp8_gemv_n1024_k2048_moe_grp, bitwise
# the per-pair kernel). Measured at 0a1ec6d (experiments/proj/experts_group_variant_0a1ec6d.json, us plain): M = 1 7.00
# -> 7.94, 2 11.69 -> 12.34, 4 20.08 -> 20.26, 8 36.78 -> 35.76, 12 53.67 -> 47.51, 16 70.16 -> 58.57; the step
# (experiments/decode/step_ab_experts_group_b{8,32}_0a1ec6d.json, ms plain / PDL): batch 8 4.270 / 4.021 against
# 4.350-4.354 / 4.112-4.121, batch 32 12.064 / 11.848 against 12.800-12.803 / 12.582-12.616, logits bitwise
EXPERTS_GROUP_ROWS = 5
# above this many rows (up to 32) one launch of fp8_gemv_n1024_k2048_moe_grp_t32 (4 n-tiles of x), not 16-row launches
EXPERTS_GROUP32_ROWS = 16


@decode_op("fp8_linear_experts", mutates_args=("out",))
def fp8_linear_experts(x: Tensor, weight: Tensor, scale: Tensor, ids: Tensor, out: Tensor) -> None:
    """The routed experts of the MoE block, one projection for every (token, expert) pair:
    out[m, i] = x[m] @ dequant(weight[ids[m, i]], scale[ids[m, i]])^T with ids [M, k] int64
    (the router's top-k; out [M, k, N]), or out[m] = x[m] @ dequant(weight[ids[m]])^T with
    ids [M] (each pair its own x row; out [M, N]). weight: the experts' fp8 [E, N, K] stacked,
    or packed for the kernels [E, N / 16, K / 128, 2048]; scale fp32 [E, N / 128, K / 128].
    The ids stay on the device (no host sync: the step captures into one graph). Kernels
    fp8_gemv_n1024_k2048_moe (gate | up; from EXPERTS_GROUP_ROWS rows fp8_gemv_n1024_k2048_moe_grp, each distinct
    expert once, bitwise the same; above EXPERTS_GROUP32_ROWS rows its 32-token build _t32) and
    fp8_gemv_n2048_k512_moe (down), 16 (32) x rows per launch; otherwise gather, dequantize, bmm
    (experts_framework)."""
    grouped = ids.dim() == 2 and x.shape[0] >= EXPERTS_GROUP_ROWS  # gate | up once per distinct expert
    kerns = (proj.EXPERT_GROUP32_KERNELS if x.shape[0] > EXPERTS_GROUP32_ROWS else proj.EXPERT_GROUP_KERNELS) if grouped \
        else proj.EXPERT_KERNELS
    kern = proj.kernel_for(weight, kerns)
    for s in (kern.rows(x, weight, scale, out, ids) if kern is not None else [slice(None)]):  # 16 x rows per launch
        experts_framework(x[s], weight, scale, ids[s], out[s])


@fp8_linear_experts.register_fake
def _(x, weight, scale, ids, out):
    return None


@decode_op("fp8_linear_experts_shared", mutates_args=("out", "sout", "gate_out"))
def fp8_linear_experts_shared(x: Tensor, weight: Tensor, scale: Tensor, ids: Tensor, shared_w: Tensor,
                              shared_s: Tensor, gate_w: Tensor, out: Tensor, sout: Tensor, gate_out: Tensor) -> None:
    """fp8_linear_experts (the routed pairs, ids [M, k], into out [M, k, N]) and fp8_linear_gate (the shared
    expert's gate | up shared_w [N, K] into sout [M, N], and gate_out [M, 1] = x @ gate_w^T) in one launch:
    kernel fp8_gemv_n1024_k2048_moe_shared (packed weights, M = 1..16, k = 8: the shared expert as M more
    pairs; from EXPERTS_GROUP_ROWS rows fp8_gemv_n1024_k2048_moe_shared_grp, the routed gate | up once per distinct
    expert and the shared expert as the first, the same bits; above EXPERTS_GROUP32_ROWS rows its 32-token build _t32);
    otherwise those two ops."""
    M = x.shape[0]
    k = (proj.EXPERTS_SHARED_GROUP32_KERNEL if M > EXPERTS_GROUP32_ROWS else proj.EXPERTS_SHARED_GROUP_KERNEL
         if M >= EXPERTS_GROUP_ROWS else proj.EXPERTS_SHARED_KERNEL)
    if (weight.dim() == 4 and shared_w.dim() == 3 and ids.dim() == 2
            and k(x, weight, scale, out, ids, shared_w, shared_s, sout, gate_w, gate_out)):
        return
    fp8_linear_experts(x, weight, scale, ids, out)
    fp8_linear_gate(x, shared_w, shared_s, gate_w, sout, gate_out)


@fp8_linear_experts_shared.register_fake
def _(x, weight, scale, ids, shared_w, shared_s, gate_w, out, sout, gate_out):
    return None


@functools.cache
def _sms(device_index: int) -> int:
    """The device's multiprocessors, read once per device (the router-fused kernel's grid barrier needs one CTA on
    every one of the contract's SMS at once: not under MIG or on a part with fewer)."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _launch_on_every_sm(k, h: Tensor, args: tuple) -> bool:
    """The router-fused kernels' launch: their grid barrier needs SMS CTAs resident at once, one per SM, so a device
    with another SM count is a miss (the caller's fallback), never a launch that waits for CTAs that never start."""
    if h.is_cuda and (n := _sms(h.device.index or 0)) != SMS:
        k.missed(f"its grid barrier needs {SMS} CTAs resident at once, one per SM; the device has {n} SMs", args)
        return False
    return k(*args)


@decode_op("fp8_linear_experts_router", mutates_args=("bar", "x_out", "top", "idx", "logits", "out", "sout", "gate_out"))
def fp8_linear_experts_router(h: Tensor, norm_w: Tensor, eps: float, router: Tensor, weight: Tensor, scale: Tensor,
                              shared_w: Tensor, shared_s: Tensor, gate_w: Tensor, bar: Tensor, x_out: Tensor,
                              top: Tensor, idx: Tensor, logits: Tensor, out: Tensor, sout: Tensor,
                              gate_out: Tensor) -> None:
    """moe_router_norm (x_out = rmsnorm(h), the router's top-k idx and weights top; logits [M, E] fp32 the router's
    BF16 logits) and fp8_linear_experts_shared on them, in one launch: kernel fp8_gemv_n1024_k2048_moe_shared_router
    (M = 1..8, packed weights, all 132 SMs: a grid-wide barrier on ``bar``, int64 [1], zero at allocation and used
    by nothing else); otherwise those two ops (logits then unwritten)."""
    k = proj.EXPERTS_ROUTER_KERNEL
    if weight.dim() == 4 and shared_w.dim() == 3:
        args = (x_out, weight, scale, out, idx, shared_w, shared_s, sout, gate_w, gate_out, h, norm_w, eps, router,
                top, logits, bar)
        if _launch_on_every_sm(k, h, args):
            return
    moe_router_norm(h, norm_w, eps, router, x_out, top, idx)
    fp8_linear_experts_shared(x_out, weight, scale, idx, shared_w, shared_s, gate_w, out, sout, gate_out)


@fp8_linear_experts_router.register_fake
def _(h, norm_w, eps, router, weight, scale, shared_w, shared_s, gate_w, bar, x_out, top, idx, logits, out, sout,
      gate_out):
    return None


@decode_op("fp8_linear_experts_router_down",
           mutates_args=("bar", "x_out", "top", "idx", "logits", "out", "sout", "gate_out", "h", "moe_out"))
def fp8_linear_experts_router_down(h: Tensor, norm_w: Tensor, eps: float, router: Tensor, weight: Tensor, scale: Tensor,
                                   shared_w: Tensor, shared_s: Tensor, gate_w: Tensor, w2: Tensor, s2: Tensor,
                                   shared_w2: Tensor, shared_s2: Tensor, bar: Tensor, x_out: Tensor, top: Tensor,
                                   idx: Tensor, logits: Tensor, out: Tensor, sout: Tensor, gate_out: Tensor,
                                   moe_out: Tensor) -> None:
    """fp8_linear_experts_router, then moe_down on its gate | up rows (moe_out = the MoE block's output, h += moe_out in
    place), in one launch: kernel fp8_gemv_n1024_k2048_moe_shared_router_down (one token, packed weights, all 132 SMs,
    one grid-wide barrier on ``bar`` as fp8_linear_experts_router's); otherwise those two ops."""
    k = proj.EXPERTS_ROUTER_DOWN_KERNEL
    if weight.dim() == 4 and shared_w.dim() == 3 and w2.dim() == 4 and shared_w2.dim() == 3:
        args = (x_out, weight, scale, out, idx, shared_w, shared_s, sout, gate_w, gate_out, h, norm_w, eps, router,
                top, logits, bar, w2, s2, shared_w2, shared_s2, moe_out)
        if _launch_on_every_sm(k, h, args):
            return
    fp8_linear_experts_router(h, norm_w, eps, router, weight, scale, shared_w, shared_s, gate_w, bar, x_out, top, idx,
                              logits, out, sout, gate_out)
    B = h.shape[0]
    moe_down(out.view(B, -1), w2, s2, idx, top, sout, shared_w2, shared_s2, gate_out, h, moe_out)


@fp8_linear_experts_router_down.register_fake
def _(h, norm_w, eps, router, weight, scale, shared_w, shared_s, gate_w, w2, s2, shared_w2, shared_s2, bar, x_out, top,
      idx, logits, out, sout, gate_out, moe_out):
    return None


# --- moe_router: the router and its top-k ------------------------------------------------------
@decode_op("moe_router", mutates_args=("top", "idx"))
def moe_router(x: Tensor, router: Tensor, top: Tensor, idx: Tensor) -> None:
    """The MoE router as the model computes it: probs = softmax(float(x @ router^T)) over the
    E experts, the top k (top [M, k] BF16, renormalized to sum 1; idx [M, k] int64, descending).
    Kernel moe_router_e256_k2048 (E = 256, k = 8, K = 2048, M = 1..32 per launch; the same
    choice: softmax is monotonic; ties to the lower id); otherwise the model's PyTorch form."""
    for s in proj.ROUTER.rows(x, router, top, idx):  # rows the kernel did not take (M > 32: chunks of 32)
        probs = torch.softmax((x[s] @ router.T).float(), -1)
        t, i = torch.topk(probs, top.shape[-1], -1)
        top[s].copy_(t / t.sum(-1, keepdim=True))
        idx[s].copy_(i)


@moe_router.register_fake
def _(x, router, top, idx):
    return None


# From this many rows (with the caller's counters) moe_router_norm launches moe_router_norm_split_e256_k2048: the
# same bits with the experts split across CTAs. Measured at 9a7452f (experiments/proj/router/router_split_variant_9a7452f
# .json, us plain / PDL chain, promoted -> split): M = 32 10.10 / 9.37 -> 7.56 / 7.03, 24 6.96 / 5.84 -> 7.55 / 6.64,
# 16 6.23 / 5.85 -> 6.03 / 5.25, 8 5.31 / 4.53 -> 5.85 / 5.11; the cluster build needs a second wave from 31 tokens
# (its records: 7.04 at 30, 9.65 at 31). Batch-32 step (experiments/decode/step_ab_current_router_split4_b32_9a7452f
# .json): 8.661 / 8.395 ms plain / PDL against 8.761 / 8.533; batch 8 (M = 8) 15-29 us slower, so not below 31.
# From 17 since the split build's lean hand-off (a8d67e9, 0.4-0.7 us a launch faster): step A/Bs at d58d075 / 11fd479
# (experiments/decode/step_ab_current_router_split17_current_again_b{17,20,28}_d58d075.json, _router_split16_..._b24_
# 11fd479.json), ms a PDL step less than both currents: 17 0.011-0.014, 20 0.025-0.028, 24 0.009-0.021, 28 0.065-0.090,
# every column at or below them but one (28 late plain, within 7 us); 16 still 2-19 us slower with PDL
ROUTER_SPLIT_ROWS = 17
# Up to this many rows moe_router_norm launches moe_router_norm_regs_e256_k2048: the same bits, each warp's expert rows
# loaded into registers before its wait. Measured at 4f7f359 (experiments/proj/router/router_regs_variant_4f7f359.json,
# us plain / PDL chain, cluster build -> regs): M = 5 5.31 / 4.48 -> 5.27 / 4.06, 8 5.34 / 4.58 -> 5.35 / 4.40, 12
# 5.42 / 4.65 -> 5.43 / 4.70, 16 6.25 / 5.85 -> 8.77 / 7.72 (a second wave). Batch-8 step (experiments/decode/
# step_ab_current_router_regs_current_again_b8_4f7f359.json): 3.633 / 3.389 ms plain / PDL against 3.625-3.631 /
# 3.431-3.436; batch 16 slower (5.715 / 5.420 against 5.588-5.601 / 5.334-5.348). At c2d934c (step_ab_current_router_
# regs_off_current_again_b8_c2d934c.json, step_ab_current_router_regs_current_again_b12_c2d934c.json): batch 8 without
# it 3.608 / 3.416 against 3.616 / 3.369-3.370; batch 12 with it 4.790 / 4.568 against 4.783-4.786 / 4.609-4.612
# (late 4.627 against 4.666 with PDL), logits bitwise: so up to its contract's 12 rows
ROUTER_REGS_ROWS = 12


@decode_op("moe_router_norm", mutates_args=("x_out", "top", "idx", "cnt"))
def moe_router_norm(h: Tensor, norm_w: Tensor, eps: float, router: Tensor, x_out: Tensor, top: Tensor,
                    idx: Tensor, cnt: Tensor | None = None) -> None:
    """x_out = rmsnorm(h) (zero-centred weight: the post-attention norm), then moe_router on it,
    in one launch: kernel moe_router_norm_e256_k2048 (M = 1..32 per launch; x_out bitwise
    rmsnorm_h2048's), up to ROUTER_REGS_ROWS rows moe_router_norm_regs_e256_k2048, or from
    ROUTER_SPLIT_ROWS rows, given ``cnt`` (int64 [4], zero at allocation, the caller's, for this
    op alone), moe_router_norm_split_e256_k2048 (both the same bits); otherwise rmsnorm, then
    moe_router."""
    if h.shape[0] <= ROUTER_REGS_ROWS and proj.ROUTER_NORM_REGS(h, router, top, idx, norm_w, x_out, eps):
        return
    if cnt is not None and h.shape[0] >= ROUTER_SPLIT_ROWS:
        logits = torch.empty(h.shape[0], router.shape[0], dtype=torch.bfloat16, device=h.device)
        if proj.ROUTER_NORM_SPLIT(h, router, top, idx, norm_w, x_out, eps, logits, cnt):
            return
    for s in proj.ROUTER_NORM.rows(h, router, top, idx, norm_w, x_out, eps):  # rows the kernel did not take
        rmsnorm(h[s], norm_w, eps, out=x_out[s])
        moe_router(x_out[s], router, top[s], idx[s])


@moe_router_norm.register_fake
def _(h, norm_w, eps, router, x_out, top, idx, cnt=None):
    return None


# --- moe_down: the MoE block's down side -----------------------------------------------------------
def moe_down_unfused(x: Tensor, w2: Tensor, s2: Tensor, ids: Tensor, top: Tensor, xs: Tensor, shared_w2: Tensor,
                     shared_s2: Tensor, glogit: Tensor, h: Tensor, out: Tensor) -> None:
    """moe_down as separate ops: silu(gate) * up, each pair's down (fp8_linear_experts), the
    shared expert's down (fp8_linear), then the weighted sum, the gate and the residual add in
    PyTorch."""
    B, k = ids.shape
    gate, up = x.reshape(B * k, -1).chunk(2, -1)
    sg, su = xs.chunk(2, -1)
    y = torch.empty(B * k, h.shape[1], dtype=h.dtype, device=h.device)
    fp8_linear_experts((F.silu(gate) * up).contiguous(), w2, s2, ids.reshape(-1), y)  # each pair's down of its row
    routed = (y.view(B, k, -1) * top[:, :, None]).sum(1)
    shared = torch.empty_like(h)
    linear((F.silu(sg) * su).contiguous(), shared_w2, shared_s2, shared)
    torch.add(routed, torch.sigmoid(glogit) * shared, out=out)
    h.add_(out)


# from this many token rows moe_down reads each distinct expert once (moe_act_i512, then fp8_gemv_n2048_k4608_moedown_grp;
# bitwise the per-token kernels): experiments/proj/moedown_grp_variant_041d36b.json, us plain / PDL chain, per-token
# against grouped: M = 32 84.0 / 81.5 -> 50.2 / 49.1, 16 41.5 / 40.7 -> 32.6 / 31.8, 8 20.3 / 19.9 -> 19.9 / 18.8,
# 4 13.5 / 13.0 -> 13.6 / 12.4, 1 5.8 / 5.4 -> 7.4 / 6.2. With moe_act's own 2.2 us (records at 128d508) the pair wins
# from 9 rows (M = 9 24.3 against 29.0 us plainly, M = 8 21.9 against 22.2); in the decode step (step_ab.py
# moedown_grp_off, experiments/decode/step_ab_moedown_grp_off_b{8,32}_128d508.json) batch 32 1.29 / 1.30 ms less plain
# / PDL (12.18 / 11.96 -> 10.89 / 10.66), batch 8 within -13..+22 us: so from 9
MOE_DOWN_GRP_ROWS = 9
# Under set_pdl from 2: since moe_act triggers its dependents first (17dbbb6) the pair shortens the PDL step at 8
# rows by 42 us (step_ab.py moedown_grp_from8 at 43fbf7c, experiments/decode/step_ab_current_moedown_grp_from8_current_
# again_b8_43fbf7c.json: 3.330 against 3.372 ms, bitwise; 25 us longer plainly, so the plain engine keeps 9), and at
# 2 / 3 / 4 rows by 29 / 25 / 44 us, at 5 / 6 / 7 within -8..+5 us (step_ab.py moedown_grp_pdl_fromN at 4a61c05,
# experiments/decode/step_ab_current_moedown_grp_pdl_from*_4a61c05.json, bitwise; plainly level). At b06b0c2, before
# the trigger moved, 8 rows were 48-55 us slower with PDL. One token is the one-launch MoE block's.
MOE_DOWN_GRP_PDL_ROWS = 2


def moe_down_grp_rows() -> int:
    """The rows from which moe_down takes the grouped pair: MOE_DOWN_GRP_PDL_ROWS under set_pdl, else MOE_DOWN_GRP_ROWS."""
    return MOE_DOWN_GRP_PDL_ROWS if _dispatch._PDL else MOE_DOWN_GRP_ROWS


@decode_op("moe_down", mutates_args=("h", "out"))
def moe_down(x: Tensor, w2: Tensor, s2: Tensor, ids: Tensor, top: Tensor, xs: Tensor, shared_w2: Tensor,
             shared_s2: Tensor, glogit: Tensor, h: Tensor, out: Tensor) -> None:
    """The MoE block after gate | up: out = sum_j top[:, j] down_{ids[:, j]}(a[:, j]) +
    sigmoid(glogit) shared_down(as) (BF16), then h += out, where a = silu(gate) * up of each
    pair's gate | up row in x [B, k 2I] (the expert kernel's output) and as of the shared
    expert's in xs [B, 2Is]; w2 [E, H, I] the experts' down (packed or plain), shared_w2
    [H, Is]. Kernel fp8_gemv_n2048_k4608_moedown (packed weights, E = 256, k = 8, 8 tokens per
    launch: silu * up in its x prologue, one GEMV over the 9 experts' K with the weights folded
    into the x scales, the residual add as its epilogue); from moe_down_grp_rows() tokens (up to 32) moe_act_i512 then
    fp8_gemv_n2048_k4608_moedown_grp, the same bits with each distinct expert read once; otherwise moe_down_unfused."""
    if x.shape[0] >= moe_down_grp_rows() and proj.moe_down_grouped(x, w2, s2, ids, top, xs, shared_w2, shared_s2, glogit,
                                                                  h, out):
        return
    # 8 tokens per launch; a chunk the guard refuses takes the unfused path alone (h gains each row once)
    for s in proj.moe_down_kernel_for(x.shape[0]).rows(x, w2, s2, h, ids, top, xs, shared_w2, shared_s2, glogit, out):
        moe_down_unfused(x[s], w2, s2, ids[s], top[s], xs[s], shared_w2, shared_s2, glogit[s], h[s], out[s])


@moe_down.register_fake
def _(x, w2, s2, ids, top, xs, shared_w2, shared_s2, glogit, h, out):
    return None


# --- bf16_linear2 ----------------------------------------------------------------------------
@decode_op("bf16_linear2", mutates_args=("out_b", "out_a"))
def bf16_linear2(x: Tensor, w_b: Tensor, w_a: Tensor, out_b: Tensor, out_a: Tensor) -> None:
    """Two BF16 projections of the same x in one launch: out_b = x @ w_b^T, out_a = x @ w_a^T
    (GDN in_proj_b and in_proj_a). Kernel bf16_gemv_n64_k2048 (M = 1..32, K = 2048, 32 rows
    each); otherwise two matmuls."""
    for s in proj.BA.rows(x, w_b, w_a, out_b, out_a):  # rows the kernel did not take (M > 32: chunks of 32)
        torch.matmul(x[s], w_b.T, out=out_b[s])
        torch.matmul(x[s], w_a.T, out=out_a[s])


@bf16_linear2.register_fake
def _(x, w_b, w_a, out_b, out_a):
    return None


# --- gdn_decode ------------------------------------------------------------------------------
@decode_op("gdn_decode", mutates_args=("conv_pool", "state_pool", "out"))
def gdn_decode(qkv: Tensor, z: Tensor, b: Tensor, a: Tensor, conv_weight: Tensor, A_log: Tensor, dt_bias: Tensor,
               norm_weight: Tensor, conv_pool: Tensor, state_pool: Tensor, slots: Tensor,
               num_k_heads: int, eps: float, out: Tensor) -> None:
    """One Gated DeltaNet decode step for B sequences, from the projection outputs to the
    gated-norm output ``out`` [B, value_dim] ready for out_proj.

    qkv [B, conv_dim], z [B, value_dim], b and a [B, nv] (BF16); conv_weight [conv_dim, K]
    BF16; A_log, dt_bias [nv] fp32; norm_weight [dv]; conv_pool [slots, conv_dim, K - 1]
    BF16 and state_pool [slots, nv, dk, dv] fp32, indexed by ``slots`` [B] (int32/int64),
    both updated in place. Kernel gdn_decode_b32 (netra.contracts.gdn) at Qwen3.6's shapes,
    B <= 32, int64 slots, num_k_heads 16; gdn_decode_b32_smem from 8 sequences (and their PDL builds
    under set_pdl); gdn_decode_b32_pipe from GDN_PIPE_B = 16 sequences (gdn_decode_b32_pipe_pdl from
    GDN_PIPE_PDL_B = 8 under set_pdl)."""
    if num_k_heads == 16:  # the kernel's head grouping; the contract checks every shape
        # under set_pdl (the decode runner's PDL capture) the build that loads the state before
        # griddepcontrol.wait: the runner launches it right after the GDN in_proj (the norm_ba launch up to 8
        # rows; above, the in_proj after bf16_linear2 under BA_FIRST, else bf16_linear2) (contract
        # gdn_decode_b32_pdl). Never two gdn_decode calls on the same pools back to back under set_pdl:
        # the second would read the state before the first has written it. The persistent pipeline of
        # value-head states from GDN_PIPE_PDL_B sequences under set_pdl and from GDN_PIPE_B plainly; below
        # that, from GDN_SMEM_B, the state slice through shared memory (all bitwise the same)
        if qkv.shape[0] >= (GDN_PIPE_PDL_B if _dispatch._PDL else GDN_PIPE_B):
            k = gdn.DECODE_PIPE_PDL if _dispatch._PDL else gdn.DECODE_PIPE
        elif qkv.shape[0] >= GDN_SMEM_B:
            k = gdn.DECODE_SMEM_PDL if _dispatch._PDL else gdn.DECODE_SMEM
        else:
            k = gdn.DECODE_PDL if _dispatch._PDL else gdn.DECODE
        reason = k.go(qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool, slots, out, eps)
        if reason is None:
            return
        k.missed(reason, (qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool, slots, out,
                          eps))
    gdn_decode_framework(qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool, slots,
                         num_k_heads, eps, out)


def gdn_decode_framework(qkv: Tensor, z: Tensor, b: Tensor, a: Tensor, conv_weight: Tensor, A_log: Tensor,
                         dt_bias: Tensor, norm_weight: Tensor, conv_pool: Tensor, state_pool: Tensor, slots: Tensor,
                         num_k_heads: int, eps: float, out: Tensor) -> None:
    """gdn_decode's framework path (PyTorch, fp32 math, the model's BF16 rounding of the conv output)."""
    B = qkv.shape[0]
    nv, dk, dv = state_pool.shape[1:]
    key_dim = num_k_heads * dk
    window = torch.cat([conv_pool[slots], qkv[:, :, None]], -1)  # [B, C, K]
    conv_pool[slots] = window[:, :, 1:]
    x = F.silu((window.float() * conv_weight.float()).sum(-1)).to(qkv.dtype).float()  # the model rounds to BF16 here
    q, k, v = torch.split(x, [key_dim, key_dim, nv * dv], -1)
    rep = nv // num_k_heads
    q = q.view(B, num_k_heads, dk)
    k = k.view(B, num_k_heads, dk)
    q = (q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6)).repeat_interleave(rep, 1) * dk ** -0.5
    k = (k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)).repeat_interleave(rep, 1)
    beta = torch.sigmoid(b.float())
    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias.float())
    S = state_pool[slots] * g.exp()[:, :, None, None]
    kv = torch.einsum("bhkv,bhk->bhv", S, k)
    S = S + k[:, :, :, None] * (beta[:, :, None] * (v.view(B, nv, dv) - kv))[:, :, None, :]
    state_pool[slots] = S
    o = torch.einsum("bhkv,bhk->bhv", S, q)
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps)
    o = norm_weight.float() * o * F.silu(z.float().view(B, nv, dv))
    out.copy_(o.reshape(B, nv * dv))


@gdn_decode.register_fake
def _(qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool, slots, num_k_heads, eps, out):
    return None


# The decode runner's spin pair (netra.contracts.gdn.GDN_DECODE_B32_SPIN) up to this many sequences under PDL: the GDN
# in_proj (the norm_ba launch, its outputs stored strong) into buffers that hold TAG, then gdn_decode_spin, which polls
# them instead of waiting for the in_proj's grid and leaves them TAG. Measured with PDL (experiments/decode/step_ab.py
# spin_off and spin_max3, docs/notes/decode.md "After efc4214"): batch 1 11-13 us less a step, batch 2 25-29 less,
# batch 3 24 more (at 228 KB, "After 78b3396": batch 4 57 more; 512 CTAs, about 264 fit beside the in_proj). 0: never.
GDN_SPIN_MAX_B = 2


def tag_(*tensors: Tensor) -> None:
    """Fill BF16 tensors (views too) with TAG: the spin pair's buffers before their first in_proj."""
    for t in tensors:
        t.view(torch.int16).fill_(TAG - (1 << 16))


@decode_op("gdn_decode_spin", mutates_args=("qkv", "z", "b", "a", "conv_pool", "state_pool", "out"))
def gdn_decode_spin(qkv: Tensor, z: Tensor, b: Tensor, a: Tensor, conv_weight: Tensor, A_log: Tensor, dt_bias: Tensor,
                    norm_weight: Tensor, conv_pool: Tensor, state_pool: Tensor, slots: Tensor,
                    num_k_heads: int, eps: float, out: Tensor) -> None:
    """gdn_decode as the consumer of the spin protocol: the same outputs (bitwise), and qkv, z, b and a left TAG.
    Kernel gdn_decode_b32_spin (netra.contracts.gdn): its threads poll their inputs until they are not TAG, so under
    PDL the recurrence starts as the in_proj's rows land. The caller keeps the protocol: qkv, z, b and a held TAG
    before the launch that wrote them (fp8_linear_norm_ba, whose kernel stores them strong), and nothing else reads or
    writes them. Otherwise (the guard refuses, or the op is switched off): gdn_decode, then the four filled with
    TAG, so the protocol holds either way."""
    if num_k_heads == 16:
        reason = gdn.DECODE_SPIN.go(qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool,
                                    slots, out, eps)
        if reason is None:
            return
        gdn.DECODE_SPIN.missed(reason, (qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool,
                                        slots, out, eps))
    gdn_decode(qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool, slots, num_k_heads, eps,
               out)
    tag_(qkv, z, b, a)


@gdn_decode_spin.register_fake
def _(qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool, slots, num_k_heads, eps, out):
    return None


# --- gdn_verify ------------------------------------------------------------------------------
@decode_op("gdn_verify", mutates_args=("conv_pool", "state_pool", "out"))
def gdn_verify(qkv: Tensor, z: Tensor, b: Tensor, a: Tensor, conv_weight: Tensor, A_log: Tensor, dt_bias: Tensor,
               norm_weight: Tensor, conv_pool: Tensor, state_pool: Tensor, slot_in: Tensor, slots_out: Tensor,
               num_k_heads: int, eps: float, out: Tensor) -> None:
    """The Gated DeltaNet step for T consecutive tokens of B sequences (speculative
    verification): qkv [B, T, conv_dim], z [B, T, value_dim], b and a [B, T, nv]; each
    sequence starts from pool slot ``slot_in`` [B] (not modified unless it is also a
    destination) and the state and conv window after token t go to slot ``slots_out`` [B, T]
    (distinct slots), so rolling back to an accepted prefix of j tokens is choosing
    slots_out[:, j - 1]. ``out`` [B, T, value_dim]. Kernel gdn_verify_t16 (B <= 32, T <= 16)."""
    if num_k_heads == 16:
        reason = gdn.VERIFY.go(qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool, slot_in,
                               slots_out, out, eps)
        if reason is None:
            return
        gdn.VERIFY.missed(reason, (qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool,
                                   slot_in, slots_out, out, eps))
    gdn_verify_framework(qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool, slot_in,
                         slots_out, num_k_heads, eps, out)


def gdn_verify_framework(qkv: Tensor, z: Tensor, b: Tensor, a: Tensor, conv_weight: Tensor, A_log: Tensor,
                         dt_bias: Tensor, norm_weight: Tensor, conv_pool: Tensor, state_pool: Tensor, slot_in: Tensor,
                         slots_out: Tensor, num_k_heads: int, eps: float, out: Tensor) -> None:
    """gdn_verify's framework path: token by token, each copying the slot the last one left."""
    prev = slot_in
    for t in range(qkv.shape[1]):
        nxt = slots_out[:, t]
        conv_pool[nxt] = conv_pool[prev]
        state_pool[nxt] = state_pool[prev]
        gdn_decode_framework(qkv[:, t], z[:, t], b[:, t], a[:, t], conv_weight, A_log, dt_bias, norm_weight, conv_pool,
                             state_pool, nxt, num_k_heads, eps, out[:, t])
        prev = nxt


@gdn_verify.register_fake
def _(qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool, slot_in, slots_out, num_k_heads,
      eps, out):
    return None


# --- gdn_verify_chunk and gdn_commit -----------------------------------------------------------
@decode_op("gdn_verify_chunk", mutates_args=("out", "ksave", "dsave", "gsave"))
def gdn_verify_chunk(qkv: Tensor, z: Tensor, b: Tensor, a: Tensor, conv_weight: Tensor, A_log: Tensor,
                     dt_bias: Tensor, norm_weight: Tensor, conv_pool: Tensor, state_pool: Tensor, slot_in: Tensor,
                     num_k_heads: int, eps: float, out: Tensor, ksave: Tensor, dsave: Tensor, gsave: Tensor) -> None:
    """Speculative verification of T tokens of B sequences (qkv [B, T, conv_dim], z [B, T,
    value_dim], b and a [B, T, nv]) from pool slot ``slot_in`` [B], leaving both pools untouched:
    ``out`` [B, T, value_dim], and per token what restores the state after any accepted prefix,
    ``ksave`` [B, T, nk, dk] (the l2-normed k), ``dsave`` [B, T, nv, dv] (delta) and ``gsave``
    [B, T, nv] (log2 of the decay product through the token), all fp32. ``gdn_commit`` then
    writes the accepted prefix's state and conv window. Kernels gdn_verify_chunk_t16_w8 at
    B = 1 and gdn_verify_chunk_t16 otherwise (B <= 32, T <= 16, int64 slots)."""
    if num_k_heads == 16:
        k = gdn.VERIFY_CHUNK_W8 if qkv.shape[0] == 1 else gdn.VERIFY_CHUNK
        args = (qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool, slot_in, out, ksave,
                dsave, gsave, eps)
        reason = k.go(*args)
        if reason is None:
            return
        k.missed(reason, args)
    gdn_verify_chunk_framework(qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool, slot_in,
                               num_k_heads, eps, out, ksave, dsave, gsave)


def gdn_verify_chunk_framework(qkv: Tensor, z: Tensor, b: Tensor, a: Tensor, conv_weight: Tensor, A_log: Tensor,
                               dt_bias: Tensor, norm_weight: Tensor, conv_pool: Tensor, state_pool: Tensor,
                               slot_in: Tensor, num_k_heads: int, eps: float, out: Tensor, ksave: Tensor, dsave: Tensor,
                               gsave: Tensor) -> None:
    """gdn_verify_chunk's framework path: gdn_decode_framework's math token by token on copies
    (fp32), keeping k, delta and the decays instead of writing the pools."""
    B, T = qkv.shape[:2]
    nv, dk, dv = state_pool.shape[1:]
    key_dim, rep = num_k_heads * dk, nv // num_k_heads
    window = conv_pool[slot_in]
    S = state_pool[slot_in].float()
    beta = torch.sigmoid(b.float())
    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias.float())  # [B, T, nv]
    for t in range(T):
        w = torch.cat([window, qkv[:, t, :, None]], -1)
        window = w[:, :, 1:]
        x = F.silu((w.float() * conv_weight.float()).sum(-1)).to(qkv.dtype).float()
        q, k, v = torch.split(x, [key_dim, key_dim, nv * dv], -1)
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
        out[:, t] = (norm_weight.float() * o * F.silu(z[:, t].float().view(B, nv, dv))).reshape(B, nv * dv)
        ksave[:, t] = k
        dsave[:, t] = d
    gsave.copy_(torch.cumsum(g, 1) * (1.0 / math.log(2.0)))


@gdn_verify_chunk.register_fake
def _(qkv, z, b, a, conv_weight, A_log, dt_bias, norm_weight, conv_pool, state_pool, slot_in, num_k_heads, eps, out,
      ksave, dsave, gsave):
    return None


@decode_op("gdn_commit", mutates_args=("conv_pool", "state_pool"))
def gdn_commit(qkv: Tensor, conv_pool: Tensor, state_pool: Tensor, slot_in: Tensor, slot_out: Tensor,
               accepted: Tensor, ksave: Tensor, dsave: Tensor, gsave: Tensor) -> None:
    """After gdn_verify_chunk: sequence b keeps its first ``accepted[b]`` (0..T) tokens; the conv
    window and state after them go to pool slot ``slot_out[b]`` (``slot_in[b]`` itself for in
    place; not another sequence's slot_in), rebuilt from slot_in and the restore data:
    S_j = 2^c_(j-1) S_0 + sum_(s<j) 2^(c_(j-1) - c_s) k_s delta_s^T. A count outside 0..T writes
    nothing for that sequence. Kernel gdn_commit_t16 (B <= 32, T <= 16, int64 ids)."""
    args = (qkv, conv_pool, state_pool, slot_in, slot_out, accepted, ksave, dsave, gsave)
    reason = gdn.COMMIT.go(*args)
    if reason is None:
        return
    gdn.COMMIT.missed(reason, args)
    gdn_commit_framework(*args)


def gdn_commit_framework(qkv: Tensor, conv_pool: Tensor, state_pool: Tensor, slot_in: Tensor, slot_out: Tensor,
                         accepted: Tensor, ksave: Tensor, dsave: Tensor, gsave: Tensor) -> None:
    """gdn_commit's framework path (fp32, every sequence at once, no host synchronization). As the
    kernel, a sequence whose count is outside 0..T or whose slot ids are outside the pool changes
    nothing (its slot_out is rewritten with its own contents; slot_out must be distinct across the
    sequences), and tokens past the accepted count are not read (masked, so a NaN there is harmless)."""
    B, T = qkv.shape[:2]
    P, nv, K1 = state_pool.shape[0], state_pool.shape[1], conv_pool.shape[2]
    j, si, so = accepted.long(), slot_in.long(), slot_out.long()
    valid = (j >= 0) & (j <= T) & (si >= 0) & (si < P) & (so >= 0) & (so < P)
    jc, si, so = j.clamp(0, T), si.clamp(0, P - 1), so.clamp(0, P - 1)
    c = torch.cat([torch.zeros_like(gsave[:, :1]), gsave.float()], 1)  # [B, T + 1, nv]: c_-1 = 0
    cl = c.gather(1, jc[:, None, None].expand(B, 1, nv))  # c_(j-1)
    taken = torch.arange(T, device=qkv.device)[None, :] < jc[:, None]  # [B, T]
    w = torch.where(taken[:, :, None], torch.exp2(cl - c[:, 1:]), 0.0)  # [B, T, nv]
    d = torch.where(taken[:, :, None, None], dsave.float(), 0.0)
    k = torch.where(taken[:, :, None, None], ksave.float(), 0.0).repeat_interleave(nv // ksave.shape[2], 2)
    S = torch.exp2(cl[:, 0])[:, :, None, None] * state_pool[si].float() + torch.einsum("bsh,bshk,bshv->bhkv", w, k, d)
    state_pool[so] = torch.where(valid[:, None, None, None], S, state_pool[so])
    hist = torch.cat([conv_pool[si], qkv.transpose(1, 2)], -1)  # [B, C, K - 1 + T]
    idx = (jc[:, None, None] + torch.arange(K1, device=qkv.device)).expand(B, hist.shape[1], K1)
    conv_pool[so] = torch.where(valid[:, None, None], hist.gather(2, idx), conv_pool[so])


@gdn_commit.register_fake
def _(qkv, conv_pool, state_pool, slot_in, slot_out, accepted, ksave, dsave, gsave):
    return None


# --- attention ---------------------------------------------------------------------------------
def rope_tables(max_positions: int, rotary_dim: int, theta: float, device) -> tuple[Tensor, Tensor]:
    """cos and sin [max_positions, rotary_dim] (fp32), rotate_half layout."""
    inv = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=device) / rotary_dim))
    ang = torch.arange(max_positions, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    return torch.cat([ang.cos(), ang.cos()], -1).float(), torch.cat([ang.sin(), ang.sin()], -1).float()


def _rope_(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE in place on the first rotary_dim channels of x [N, heads, hd] (rotate_half layout;
    cos and sin [N, rotary_dim] fp32), computed in fp32 and rounded to x's dtype."""
    rd = cos.shape[-1]
    xr = x[..., :rd].float()
    rot = torch.cat([-xr[..., rd // 2:], xr[..., : rd // 2]], -1)
    x[..., :rd] = xr * cos[:, None] + rot * sin[:, None]  # the copy rounds, as .to(x.dtype)
    return x


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return _rope_(x.clone(), cos, sin)


def attention_context(cos: Tensor, sin: Tensor, block_table: Tensor, positions: Tensor, page: int) -> tuple:
    """What attention_decode derives from the positions, the same for every attention layer of a
    step (the runner computes it once per step): the RoPE rows c, s [B, 1, rotary_dim], the
    widened block table bt, each new token's flat cache row, the length mask [B, pages * page]."""
    bt = block_table.long()
    flat = bt.gather(1, (positions // page)[:, None])[:, 0] * page + positions % page
    valid = torch.arange(bt.shape[1] * page, device=positions.device) <= positions[:, None]
    return cos[positions][:, None], sin[positions][:, None], bt, flat, valid


@decode_op("attention_decode_ctx", mutates_args=("k_pages", "v_pages", "out"))
def attention_decode_ctx(q: Tensor, k: Tensor, v: Tensor, gate: Tensor, c: Tensor, s: Tensor, bt: Tensor,
                         flat: Tensor, valid: Tensor, k_pages: Tensor, v_pages: Tensor, out: Tensor,
                         pages_in_order: bool = False) -> None:
    """attention_decode on a step's attention_context (c, s, bt, flat, valid): the same ops on
    every value, so the same bits. ``pages_in_order``: the caller's block table gives sequence b
    pages b * pages .. (b + 1) * pages - 1 in order (the decode runner's), so the cache is read
    as a view, without gathering every sequence's K and V; the view has the gathered tensor's
    shape, strides and values (the same bits; experiments/attention/sdpa_variant_98716c5.json
    view_form: 39.6 -> 35.8 us per layer at B = 1, 109.3 -> 70.8 at B = 32; the runner passes it).
    A pool that is not exactly B x pages is refused (ValueError)."""
    B, nh, hd = q.shape
    if pages_in_order and (k_pages.shape[0] != bt.numel() or bt.shape[0] != B):  # before anything is written
        raise ValueError(f"attention_decode_ctx(pages_in_order=True): expected a pool of B x pages = "
                         f"{B} x {bt.shape[-1]} pages in block-table order, got {k_pages.shape[0]} pages "
                         f"and a block table of {tuple(bt.shape)}")
    # PyTorch ops, kept few (each is a kernel launch; experiments/attention/sdpa_variant.py):
    # RoPE once on q | k, the append by index_copy_ on flat page rows, one SDPA call on BF16
    # with enable_gqa and a length mask (no 8x K/V repeat, no float32 copies), the positions'
    # tensors once per step. 119 -> 40 us per layer at B = 1 and 3067 -> 109 at B = 32 against
    # the einsum form (context 1024; sdpa_variant_e029eb4.json).
    qk = _rope_(torch.cat([q, k], 1), c[:, 0], s[:, 0])  # [B, nh + nkv, hd]
    k_pages.view(-1, *k_pages.shape[2:]).index_copy_(0, flat, qk[:, nh:])
    v_pages.view(-1, *v_pages.shape[2:]).index_copy_(0, flat, v)
    if pages_in_order:
        K = k_pages.view(B, -1, *k_pages.shape[2:]).transpose(1, 2)  # [B, nkv, pages * page, hd]
        V = v_pages.view(B, -1, *v_pages.shape[2:]).transpose(1, 2)
    else:
        K = k_pages[bt].flatten(1, 2).transpose(1, 2)  # [B, nkv, pages * page, hd]
        V = v_pages[bt].flatten(1, 2).transpose(1, 2)
    o = F.scaled_dot_product_attention(qk[:, :nh, None, :], K, V, attn_mask=valid[:, None, None, :], enable_gqa=True)
    torch.mul(o.view(B, nh * hd), torch.sigmoid(gate), out=out)


@attention_decode_ctx.register_fake
def _(q, k, v, gate, c, s, bt, flat, valid, k_pages, v_pages, out, pages_in_order=False):
    return None


@decode_op("attention_decode", mutates_args=("k_pages", "v_pages", "out"))
def attention_decode(q: Tensor, k: Tensor, v: Tensor, gate: Tensor, cos: Tensor, sin: Tensor,
                     k_pages: Tensor, v_pages: Tensor, block_table: Tensor, positions: Tensor, out: Tensor) -> None:
    """One gated-attention decode step: RoPE on the normed q [B, nh, hd] and k [B, nkv, hd]
    at ``positions`` [B], append k and v to the paged cache (pages [P, page, nkv, hd],
    ``block_table`` [B, pages per sequence]), GQA attention over positions 0..pos with
    scale hd^-0.5, then ``out`` [B, nh * hd] = attention * sigmoid(gate [B, nh * hd]).
    The runner splits it: attention_context once per step, attention_decode_ctx per layer."""
    ctx = attention_context(cos, sin, block_table, positions, k_pages.shape[1])
    attention_decode_ctx(q, k, v, gate, *ctx, k_pages, v_pages, out)


@attention_decode.register_fake
def _(q, k, v, gate, cos, sin, k_pages, v_pages, block_table, positions, out):
    return None


# The decode runner's attention: the kernel (attn_decode_d256) in one launch per layer instead of the framework path's
# RoPE, append, SDPA and gate (~15 PyTorch kernels). False: attention_decode_ctx as before (its context once per step)
ATTN_KERNEL = True


@decode_op("attention_decode_paged", mutates_args=("k_pages", "v_pages", "out", "ws", "counters"))
def attention_decode_paged(q: Tensor, k: Tensor, v: Tensor, gate: Tensor, cos: Tensor, sin: Tensor, positions: Tensor,
                           block_table: Tensor, k_pages: Tensor, v_pages: Tensor, out: Tensor, ws: Tensor,
                           counters: Tensor) -> None:
    """attention_decode with the gate as a [B, nh, hd] view (q_proj's output: head h's gate beside its q) and the
    kernel's scratch: ws [B, nkv, pages per sequence, 2064] fp32 and counters [B, nkv] int32 (zero at allocation, left
    zero), the caller's, for this op alone. Kernel attn_decode_d256 (netra.contracts.attn) at Qwen3.6's attention
    shapes, B <= 32, pages of 64 tokens, int32 block table, int64 positions; else attention_decode's framework path.
    Under set_pdl the kernel reads the cache, positions and tables before griddepcontrol.wait."""
    args = (q, k, v, gate, cos, sin, positions, block_table, k_pages, v_pages, out, ws, counters)
    reason = attn.DECODE.go(*args)
    if reason is None:
        return
    attn.DECODE.missed(reason, args)
    B, nh, hd = q.shape
    attention_decode(q, k, v, gate.reshape(B, nh * hd), cos, sin, k_pages, v_pages, block_table, positions, out)


@attention_decode_paged.register_fake
def _(q, k, v, gate, cos, sin, positions, block_table, k_pages, v_pages, out, ws, counters):
    return None


# The runner's q_norm and k_norm inside the attention launch (attention_decode_paged_qknorm) instead of a qk_rmsnorm launch
# before it (with ATTN_KERNEL; the same bits), where the launch is at most ATTN_QKNORM_MAX_CTAS CTAs (B x pages per
# sequence x 2 kv heads): one wave of 3 CTAs a SM (shared memory). Every CTA normalizes its 8 heads again, which a
# single wave hides and more waves pay: the kernel record at 425fd59 has the fused launch 0.7-1.1 us faster than
# qk_rmsnorm_d256 then attn_decode_d256 up to 256 CTAs and 4.2 us slower at 1024 (B = 32, 16 pages); the step A/B
# (experiments/decode/step_ab_qknorm_prev*_425fd59.json) 9 us faster at batch 1. False: the two launches always
ATTN_QKNORM = True
ATTN_QKNORM_MAX_CTAS = 3 * SMS


# The cluster builds (attn_decode_d256_qknorm_c4 / _c8: C CTAs per (sequence, kv head), each walking its pages and
# streaming the next while it computes, the partials combined through distributed shared memory) in place of
# attn_decode_d256_qknorm: one wave at any context, no scratch. Clusters of 8 up to ATTN_C8_MAX_B sequences, else of 4
# (the kernel records at d615fa7: c8 ahead at B <= 3, c4 at B = 32, within 1 us at B = 8). Their step A/Bs at context
# 1024 (docs/notes/attention.md, docs/notes/decode.md after 43fb274): 38-62 / 40-95 / 182-195 us faster per step at
# positions 960..1023 (batch 1 / 8 / 32, plain and PDL); with PDL 15-29 / 32-47 us slower in the first page (positions
# 3..66, where both builds run one CTA a (sequence, kv head), bitwise alike) and level or ahead from the second
# (step_ab_current_cluster_cluster_c4*_1aec0c9.json). False: attn_decode_d256_qknorm within its one-wave rule, as before
ATTN_CLUSTER = True
ATTN_C8_MAX_B = 4


def attn_cluster_for(batch: int) -> int:
    """The cluster size the op launches for ``batch`` sequences."""
    return 8 if batch <= ATTN_C8_MAX_B else 4


# The long-context builds (attn_decode_d256_qknorm_c4_long / _c8_long: up to S clusters per (sequence, kv head), each
# launch taking S_eff = min(S, ceil(pages / (C x LONG_PAGES))) of them) where the caller passes cl_counters and the
# cache has more than MAX_PAGES pages a sequence (past the cluster builds' 64: contexts over 4096). Up to C x LONG_PAGES
# pages they run the cluster build's arithmetic (the same bits). S aims the grid at ATTN_LONG_CTAS CTAs: one a SM was
# the fastest of S = 1, 2, 4, 8, 16 at every batch measured (experiments/attention/long_sweep_0e2dc50.json: B = 1 / 2 / 4
# x 512 pages at S = 8 / 4 / 2, B = 8 / 16 at 2 / 1; S = 7 at B = 1 is faster still: ATTN_LONG_RESIDENT below); a
# larger grid pays ~0.1 us for each cluster that only exits. Within 64 pages
# they were 1.3 us faster than c8 at B = 1 late in a 4K cache (S = 8: 13.05 against 14.36 us) but slower in its first
# 2K positions (more CTAs, the page table after pos), so the cluster builds keep contexts up to 4096. False: the
# cluster builds alone (past 64 pages the framework path)
ATTN_LONG = True
ATTN_LONG_CTAS = SMS
# At most 120 CTAs in clusters of 8 (124 in clusters of 4) are placed one a SM (experiments/attention/long_place_dd43954
# .json): at B = 1 the 16th cluster of 8 shares 8 SMs and ends 4-7 us after the others. So where the grid passes that
# and S > 2, one split fewer: B = 1 S = 7 took 1 x 256 / 512 / 2048 pages from 18.5 / 26.3 / 72.9 to 16.9 / 25.1 / 70.7
# us and the batch-1 step late in a 32K cache 12 us less (1.745 against 1.757 ms with PDL), B = 2 S = 3 level to 6 us
# less; at B = 4, S = 1 instead of 2 was 11 us slower (long_splits_a5048c1.json, step_ab_current_long_cta120_*).
ATTN_LONG_RESIDENT = {8: 120, 4: 124}
CL_COUNTERS = 8  # cl_counters [B, kv heads, CL_COUNTERS] int32: one a (sequence, kv head, rank), the largest cluster's


def attn_splits(batch: int, cluster: int) -> int:
    """S, the clusters per (sequence, kv head) the long-context build is launched with for ``batch`` sequences: about
    one CTA a SM, one split fewer where the grid would pass what its clusters place one a SM and S stays above 1."""
    n = batch * A.KV_HEADS * cluster
    S = max(1, min(A.LONG_SPLITS[cluster], ATTN_LONG_CTAS // n))
    return S - 1 if S > 2 and n * S > ATTN_LONG_RESIDENT[cluster] else S


def _long_args(q: Tensor, block_table: Tensor, ws: Tensor, cl_counters: Tensor | None):
    """(cluster, ws view [B, kv heads, S, PART], counters view [B, kv heads, C]) where the op takes a long-context build,
    else None. The views are the caller's scratch, contiguous (the first elements of ws and cl_counters)."""
    B, NP = q.shape[0], block_table.shape[-1]
    if cl_counters is None or NP <= A.MAX_PAGES:
        return None
    c = attn_cluster_for(B)
    S = attn_splits(B, c)
    n, m = B * A.KV_HEADS * S * A.PART, B * A.KV_HEADS * c
    if (not ws.is_contiguous() or ws.numel() < n or ws.dtype != torch.float32 or not cl_counters.is_contiguous()
            or cl_counters.numel() < m or cl_counters.dtype != torch.int32):
        return None  # the guard of a cluster build, or the framework path, says what was wrong
    return c, ws.view(-1)[:n].view(B, A.KV_HEADS, S, A.PART), cl_counters.view(-1)[:m].view(B, A.KV_HEADS, c)


@decode_op("attention_decode_paged_qknorm", mutates_args=("k_pages", "v_pages", "out", "ws", "counters", "cl_counters"))
def attention_decode_paged_qknorm(q: Tensor, k: Tensor, v: Tensor, gate: Tensor, q_norm: Tensor, k_norm: Tensor,
                                  cos: Tensor, sin: Tensor, positions: Tensor, block_table: Tensor, k_pages: Tensor,
                                  v_pages: Tensor, out: Tensor, ws: Tensor, counters: Tensor, eps: float,
                                  cl_counters: Tensor | None = None) -> None:
    """attention_decode_paged on q and k before q_norm / k_norm (views of the q | k | v projection's row, unit channel
    stride, other strides multiples of 8), the zero-centred RMSNorms over head_dim (weights q_norm, k_norm [hd], eps)
    applied first, rounded to BF16. Kernels: with ATTN_CLUSTER and ATTN_LONG a long-context build past 64 pages a
    sequence (_long_args: ws's first B x kv heads x S partials and cl_counters [B, kv heads, >= 8] int32, zero at
    allocation, left zero); else with ATTN_CLUSTER a cluster build (ws and counters unused); else
    attn_decode_d256_qknorm (bitwise qk_rmsnorm_d256 then attn_decode_d256); else qk_rmsnorm then
    attention_decode_paged."""
    args = (q, k, v, gate, q_norm, k_norm, cos, sin, positions, block_table, k_pages, v_pages, out, ws, counters, eps)
    if ATTN_CLUSTER and ATTN_LONG and (la := _long_args(q, block_table, ws, cl_counters)) is not None:
        op = attn.DECODE_QKNORM_LONG[la[0]]
        largs = (q, k, v, gate, q_norm, k_norm, cos, sin, positions, block_table, k_pages, v_pages, out, la[1], la[2], eps)
        reason = op.go(*largs)
        if reason is None:
            return
        op.missed(reason, largs)
    if ATTN_CLUSTER:
        op = attn.DECODE_QKNORM_CL[attn_cluster_for(q.shape[0])]
        cargs = (q, k, v, gate, q_norm, k_norm, cos, sin, positions, block_table, k_pages, v_pages, out, eps)
        reason = op.go(*cargs)
        if reason is None:
            return
        op.missed(reason, cargs)
    reason = attn.DECODE_QKNORM.go(*args)
    if reason is None:
        return
    attn.DECODE_QKNORM.missed(reason, args)
    qn, kn = qk_rmsnorm(q, k, q_norm, k_norm, eps)
    attention_decode_paged(qn, kn, v, gate, cos, sin, positions, block_table, k_pages, v_pages, out, ws, counters)


@attention_decode_paged_qknorm.register_fake
def _(q, k, v, gate, q_norm, k_norm, cos, sin, positions, block_table, k_pages, v_pages, out, ws, counters, eps,
      cl_counters=None):
    return None


# --- moe -------------------------------------------------------------------------------------
# The MoE block's launch order after the router (a candidate: experiments/decode/step_ab.py
# shared_first). False: routed gate | up, then the shared gate | up. True: the shared one first,
# so under PDL its weights (no expert ids needed) stream while the router runs on its 8 SMs per
# token, and the routed experts follow. The two launches are independent: the same bits either way.
MOE_SHARED_FIRST = False
# The shared expert's gate | up as M more pairs of the routed experts' launch (fp8_linear_experts_shared), so no
# launch sits between the router and the routed experts, up to MOE_SHARED_MERGED_ROWS tokens. Measured at 9be9f78
# (experiments/decode/step_ab_shared_merged{,_b8}_9be9f78.json, ms plain / PDL): batch 1 2.168 / 1.994 against
# 2.268-2.272 / 2.038-2.045; batch 8 4.347 / 4.173 against 4.362-4.365 / 4.146-4.152 (PDL 21-28 us slower). The
# kernel record: M = 1..4 1.0-1.5 us faster than the two launches, M = 5..8 within 0.5, M >= 9 up to 3 us slower
# (its last CTA, the gate's, is one SM fewer for the weights). False: the two launches at every batch
MOE_SHARED_MERGED = True
MOE_SHARED_MERGED_ROWS = 4
# From EXPERTS_GROUP_ROWS to MOE_SHARED_GROUP_ROWS tokens the same merge on the grouped gate | up
# (fp8_gemv_n1024_k2048_moe_shared_grp: the shared expert is the launch's first distinct expert, its strips requested
# before the wait, while the router runs; the gate logit by its last CTA), so the shared expert's own launch
# (fp8_gemv_n1024_k2048_gate_ks2) is gone there too. Measured at 4f19b08 (experiments/decode/step_ab_current_shared_grp
# {_current_again_b8,_b16}_4f19b08.json, ms plain / PDL): batch 8 3.642 / 3.451 against 3.770-3.775 / 3.521-3.522,
# batch 16 5.614 / 5.380 against 5.737 / 5.444 (not bitwise: the shared rows in the unsplit order, not the k-split
# kernel's). False: the grouped gate | up, then the shared gate | up launch
MOE_SHARED_GROUP = True
# 32: the 32-token build (fp8_gemv_n1024_k2048_moe_shared_grp_t32) above 16 tokens too. Measured at 59ebcec: batch 32
# 8.758 / 8.529 ms against 9.000 / 8.731 (step_ab.py shared_grp32); taken after the decode gates ran at 32 sequences
# with it (experiments/decode/gates_b32_*.json). 16: the grouped gate | up and the shared expert's two launches above 16
MOE_SHARED_GROUP_ROWS = 32
# The post-attention norm and the router inside that launch too (fp8_linear_experts_router, given the runner's barrier
# counter), up to MOE_ROUTER_FUSED_ROWS tokens. Measured at e4d20da (experiments/decode/step_ab_router_fused{,_b8}_e4d20da.json,
# ms plain / PDL): batch 1 2.090 / 1.973 against 2.164-2.165 / 1.988-1.996 (bitwise); batch 8 4.347 / 4.223 against
# 4.369-4.391 / 4.155-4.171 (PDL 52-68 us slower). It is the merged launch with the router in it, so it takes the merge
# whatever MOE_SHARED_MERGED says. False: the router's own launch at every batch
MOE_ROUTER_FUSED = True
MOE_ROUTER_FUSED_ROWS = 4
# At one token moe_down as that launch's third phase (fp8_linear_experts_router_down): the batch-1 MoE block in one
# launch. Measured at b085f0b (experiments/proj/router/router_down_variant_b085f0b.json, ms plain / PDL, logits bitwise):
# batch 1 1.570 / 1.468 against 1.652-1.656 / 1.566. False: the router-fused launch, then moe_down
MOE_ROUTER_DOWN = True


@decode_op("moe_decode", mutates_args=("x", "out", "residual", "bar"))
def moe_decode(x: Tensor, router: Tensor, w13: Tensor, s13: Tensor, w2: Tensor, s2: Tensor,
               shared_w13: Tensor, shared_s13: Tensor, shared_w2: Tensor, shared_s2: Tensor,
               shared_gate: Tensor, top_k: int, out: Tensor, residual: Tensor | None = None,
               norm_w: Tensor | None = None, eps: float = 1e-6, bar: Tensor | None = None) -> None:
    """The MoE block for B tokens: router softmax (fp32) over E experts, top-k renormalized;
    each expert down(silu(gate) * up) with gate|up stacked in w13 [E, 2I, H] fp8 and down
    in w2 [E, H, I] fp8 (128x128 block scales s13, s2; either may be packed for the expert
    kernels, [E, N / 16, K / 128, 2048]); plus the shared expert (the same with [2Is, H] and
    [H, Is], either packed for the projection kernels) scaled by sigmoid(shared_gate [1, H] .
    x). ``residual`` (optional): also ``residual += out`` (BF16), so the next layer's input
    norm can be a projection's prologue (fp8_linear_norm). ``norm_w`` (with ``residual``): x is
    an output, x = rmsnorm(residual) (the post-attention norm, eps) computed by the router's
    launch (moe_router_norm). ``bar`` (with norm_w): an int64 [1] or [5], zero at allocation, the caller's, for
    this op alone: up to MOE_ROUTER_FUSED_ROWS tokens the norm, the router and every gate | up are one launch
    (fp8_linear_experts_router, whose grid barrier counts on bar[0]), at one token with moe_down in it too
    (fp8_linear_experts_router_down); an int64 [5] also holds the split router's counters (bar[1:],
    moe_router_norm's cnt, from ROUTER_SPLIT_ROWS tokens). Ops: moe_router or moe_router_norm,
    fp8_linear_experts (gate | up), fp8_linear_gate (the shared gate | up and its gate logit), moe_down (every
    down, weighted, and the residual add, from the gate | up rows)."""
    B, H = x.shape
    top = torch.empty(B, top_k, dtype=x.dtype, device=x.device)
    idx = torch.empty(B, top_k, dtype=torch.long, device=x.device)
    if (MOE_ROUTER_FUSED and bar is not None and norm_w is not None and residual is not None
            and B <= MOE_ROUTER_FUSED_ROWS):  # the norm, the router, every gate | up and the shared gate: one launch
        gu = torch.empty(B, top_k, s13.shape[1] * 128, dtype=x.dtype, device=x.device)
        sgu = torch.empty(B, shared_s13.shape[0] * 128, dtype=x.dtype, device=x.device)
        glogit = torch.empty(B, 1, dtype=x.dtype, device=x.device)
        logits = torch.empty(B, router.shape[0], dtype=torch.float32, device=x.device)
        if MOE_ROUTER_DOWN and B == 1:  # and moe_down: the whole block in one launch
            fp8_linear_experts_router_down(residual, norm_w, eps, router, w13, s13, shared_w13, shared_s13, shared_gate,
                                           w2, s2, shared_w2, shared_s2, bar[:1], x, top, idx, logits, gu, sgu, glogit,
                                           out)
            return
        fp8_linear_experts_router(residual, norm_w, eps, router, w13, s13, shared_w13, shared_s13, shared_gate, bar[:1],
                                  x, top, idx, logits, gu, sgu, glogit)
        moe_down(gu.view(B, -1), w2, s2, idx, top, sgu, shared_w2, shared_s2, glogit, residual, out)
        return
    if norm_w is not None:
        if residual is None:
            raise ValueError("moe_decode: norm_w (x = rmsnorm(residual)) needs the residual; got residual=None")
        cnt = bar[1:] if bar is not None and bar.numel() > 1 else None  # the split router's counters
        moe_router_norm(residual, norm_w, eps, router, x, top, idx, cnt)
    else:
        moe_router(x, router, top, idx)
    gu = torch.empty(B, top_k, s13.shape[1] * 128, dtype=x.dtype, device=x.device)
    sgu = torch.empty(B, shared_s13.shape[0] * 128, dtype=x.dtype, device=x.device)
    glogit = torch.empty(B, 1, dtype=x.dtype, device=x.device)
    if ((MOE_SHARED_MERGED and B <= MOE_SHARED_MERGED_ROWS)  # every pair's gate | up, the shared's and its gate: one launch
            or (MOE_SHARED_GROUP and EXPERTS_GROUP_ROWS <= B <= MOE_SHARED_GROUP_ROWS)):  # (grouped from 5 rows)
        fp8_linear_experts_shared(x, w13, s13, idx, shared_w13, shared_s13, shared_gate, gu, sgu, glogit)
    else:
        if MOE_SHARED_FIRST:
            fp8_linear_gate(x, shared_w13, shared_s13, shared_gate, sgu, glogit)
        fp8_linear_experts(x, w13, s13, idx, gu)  # every (token, expert) pair's gate | up
        if not MOE_SHARED_FIRST:
            fp8_linear_gate(x, shared_w13, shared_s13, shared_gate, sgu, glogit)  # gate | up and the gate's logit, one launch
    h = residual if residual is not None else torch.zeros_like(out)  # bf16(0 + out) = out
    moe_down(gu.view(B, -1), w2, s2, idx, top, sgu, shared_w2, shared_s2, glogit, h, out)  # out, and h += out


@moe_decode.register_fake
def _(x, router, w13, s13, w2, s2, shared_w13, shared_s13, shared_w2, shared_s2, shared_gate, top_k, out,
      residual=None, norm_w=None, eps=1e-6, bar=None):
    return None


# --- lm head ---------------------------------------------------------------------------------
@decode_op("lm_head_argmax", mutates_args=("logits", "tokens", "ws"))
def lm_head_argmax(h: Tensor, weight: Tensor, logits: Tensor, tokens: Tensor, ws: Tensor | None = None) -> None:
    """logits [B, V] = h [B, H] @ weight [V, H]^T (BF16, fp32 accumulate); tokens [B] =
    argmax (greedy), the lowest index on ties. Kernel bf16_gemv_n248320_k2048_argmax (B = 1..32,
    Qwen3.6's head) where the caller passes ``ws``, its int64 [34] workspace (zero at allocation,
    left zero by every launch, used by nothing else); otherwise cuBLAS and torch.argmax."""
    if ws is not None and proj.LM_HEAD(h, weight, logits, tokens, ws):
        return
    torch.matmul(h, weight.T, out=logits)
    torch.argmax(logits, -1, out=tokens)


@lm_head_argmax.register_fake
def _(h, weight, logits, tokens, ws=None):
    return None
