"""Norm ops: Qwen3.6's zero-centred RMSNorm (with or without the residual add before it),
q_norm/k_norm, and the gated RMSNorm of the Gated DeltaNet output.

Each op takes an optional ``out=`` (destination passing, as CUDA graphs want), runs the
kernel when the contract's exact-shape guard passes, and the framework path (PyTorch, fp32
math, the model's rounding) otherwise. Each is also the torch.library custom op
``netra::<op>`` with a fake implementation, so it works under torch.compile."""

from __future__ import annotations

import torch
from torch import Tensor

from ._dispatch import KernelOp, compiling

_RMSNORM = KernelOp("rmsnorm", "rmsnorm_h2048")
_ADD_RMSNORM = KernelOp("add_rmsnorm", "add_rmsnorm_h2048")
_QK_RMSNORM = KernelOp("qk_rmsnorm", "qk_rmsnorm_d256")
_GATED_RMSNORM = KernelOp("gated_rmsnorm", "gated_rmsnorm_d128")


def _same_shape(name: str, out: Tensor, like: Tensor) -> None:
    if out.shape != like.shape:
        raise ValueError(f"{name}: expected shape {list(like.shape)}, got {list(out.shape)}")


def _no_overlap(a_name: str, a: Tensor, b_name: str, b: Tensor) -> None:
    if a.device == b.device and a.numel() and b.numel():
        a0, b0 = a.data_ptr(), b.data_ptr()
        if not a0 or not b0:  # fake or meta tensors (tracing) have no addresses
            return
        a1 = a0 + (sum((s - 1) * st for s, st in zip(a.shape, a.stride())) + 1) * a.element_size()
        b1 = b0 + (sum((s - 1) * st for s, st in zip(b.shape, b.stride())) + 1) * b.element_size()
        if a0 < b1 and b0 < a1:
            raise ValueError(f"{a_name} overlaps {b_name}: pass separate tensors")


def _zero_centred(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.float())


# --- rmsnorm -------------------------------------------------------------------------------
def rmsnorm(x: Tensor, weight: Tensor, eps: float = 1e-6, *, out: Tensor | None = None) -> Tensor:
    """Zero-centred RMSNorm over the last dimension: ``x * rsqrt(mean(x^2) + eps) * (1 + w)``.

    Kernel ``rmsnorm_h2048``: x and out BF16 [M, 2048] contiguous, M in 1..32, weight BF16
    [2048]. Any other input takes the framework path."""
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if compiling():
        torch.ops.netra.rmsnorm(x, weight, float(eps), out)
    else:
        _rmsnorm(x, weight, eps, out)
    return out


def _rmsnorm(x, weight, eps, out):
    refused = _RMSNORM.rows(x, weight, out, eps)  # the rows the kernel did not take
    if refused:
        _same_shape("out", out, x)
    for s in refused:
        out[s].copy_(_zero_centred(x[s], weight, eps))


@torch.library.custom_op("netra::rmsnorm", mutates_args=("out",))
def _rmsnorm_op(x: Tensor, weight: Tensor, eps: float, out: Tensor) -> None:
    _rmsnorm(x, weight, eps, out)


@_rmsnorm_op.register_fake
def _(x, weight, eps, out):
    return None


# --- add_rmsnorm ---------------------------------------------------------------------------
def add_rmsnorm(x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6, *, out: Tensor | None = None) -> Tensor:
    """The residual add and the norm after it: ``residual += x`` (in place, in residual's
    dtype), then ``out = rmsnorm(residual)``. Returns out.

    Kernel ``add_rmsnorm_h2048``: all BF16 [M, 2048] contiguous, M in 1..16, none of
    x, residual and out overlapping. Overlapping out and residual is an error."""
    if out is None:
        out = torch.empty_like(residual, memory_format=torch.contiguous_format)
    if compiling():
        torch.ops.netra.add_rmsnorm(x, residual, weight, float(eps), out)
    else:
        _add_rmsnorm(x, residual, weight, eps, out)
    return out


def _add_rmsnorm(x, residual, weight, eps, out):
    refused = _ADD_RMSNORM.rows(x, residual, weight, out, eps)  # the rows the kernel did not take
    if refused:
        _same_shape("out", out, residual)
        _no_overlap("out", out, "residual", residual)
        _no_overlap("out", out, "x", x)
    for s in refused:
        residual[s].add_(x[s])
        out[s].copy_(_zero_centred(residual[s], weight, eps))


@torch.library.custom_op("netra::add_rmsnorm", mutates_args=("residual", "out"))
def _add_rmsnorm_op(x: Tensor, residual: Tensor, weight: Tensor, eps: float, out: Tensor) -> None:
    _add_rmsnorm(x, residual, weight, eps, out)


@_add_rmsnorm_op.register_fake
def _(x, residual, weight, eps, out):
    return None


# --- qk_rmsnorm ----------------------------------------------------------------------------
def qk_rmsnorm(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, eps: float = 1e-6, *,
               out_q: Tensor | None = None, out_k: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Attention q_norm and k_norm in one call: zero-centred RMSNorm over head_dim.

    Kernel ``qk_rmsnorm_d256``: q BF16 [M, 16, 256] and k BF16 [M, 2, 256], each with unit
    channel stride and row/head strides that are multiples of 8 elements (q may be the view
    of q_proj's output that skips the gate halves); outputs contiguous; M in 1..32."""
    if out_q is None:
        out_q = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if out_k is None:
        out_k = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if compiling():
        torch.ops.netra.qk_rmsnorm(q, k, q_weight, k_weight, float(eps), out_q, out_k)
    else:
        _qk_rmsnorm(q, k, q_weight, k_weight, eps, out_q, out_k)
    return out_q, out_k


def _qk_rmsnorm(q, k, q_weight, k_weight, eps, out_q, out_k):
    refused = _QK_RMSNORM.rows(q, k, q_weight, k_weight, out_q, out_k, eps)  # the rows the kernel did not take
    if refused:
        _same_shape("out_q", out_q, q)
        _same_shape("out_k", out_k, k)
    for s in refused:
        yq, yk = _zero_centred(q[s], q_weight, eps), _zero_centred(k[s], k_weight, eps)
        out_q[s].copy_(yq)
        out_k[s].copy_(yk)


@torch.library.custom_op("netra::qk_rmsnorm", mutates_args=("out_q", "out_k"))
def _qk_rmsnorm_op(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, eps: float, out_q: Tensor, out_k: Tensor) -> None:
    _qk_rmsnorm(q, k, q_weight, k_weight, eps, out_q, out_k)


@_qk_rmsnorm_op.register_fake
def _(q, k, q_weight, k_weight, eps, out_q, out_k):
    return None


# --- gated_rmsnorm -------------------------------------------------------------------------
def gated_rmsnorm(o: Tensor, z: Tensor, weight: Tensor, eps: float = 1e-6, *, out: Tensor | None = None) -> Tensor:
    """The GDN output norm per head of ``weight.numel()`` channels:
    ``w * rmsnorm(o) * silu(z)`` (the weight is not zero-centred).

    Kernel ``gated_rmsnorm_d128``: o, z and out BF16 [M, 4096] contiguous (32 heads of 128),
    weight BF16 [128], M in 1..16."""
    if out is None:
        out = torch.empty_like(o, memory_format=torch.contiguous_format)
    if compiling():
        torch.ops.netra.gated_rmsnorm(o, z, weight, float(eps), out)
    else:
        _gated_rmsnorm(o, z, weight, eps, out)
    return out


def _gated_rmsnorm(o, z, weight, eps, out):
    refused = _GATED_RMSNORM.rows(o, z, weight, out, eps)  # the rows the kernel did not take
    if refused:
        hd = weight.shape[-1]
        _same_shape("out", out, o)
        _same_shape("z", z, o)
        if o.shape[-1] % hd:
            raise ValueError(f"o: last dimension {o.shape[-1]} is not a multiple of the head size {hd}")
    for s in refused:
        of = o[s].float().unflatten(-1, (-1, hd))
        zf = z[s].float().unflatten(-1, (-1, hd))
        y = weight.float() * (of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + eps)) * torch.nn.functional.silu(zf)
        out[s].copy_(y.flatten(-2))


@torch.library.custom_op("netra::gated_rmsnorm", mutates_args=("out",))
def _gated_rmsnorm_op(o: Tensor, z: Tensor, weight: Tensor, eps: float, out: Tensor) -> None:
    _gated_rmsnorm(o, z, weight, eps, out)


@_gated_rmsnorm_op.register_fake
def _(o, z, weight, eps, out):
    return None
