"""float64 references for the norm family, written from the model's math
(design/qwen36.md), not from the kernels. Inputs may be any dtype; outputs are float64."""

from __future__ import annotations

import torch
from torch import Tensor


def rmsnorm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    """Zero-centred RMSNorm over the last dimension."""
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.double())


def add_rmsnorm(x: Tensor, residual: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(new residual, norm of it): the residual add in float64, then the norm of the sum."""
    h = residual.double() + x.double()
    return h, rmsnorm(h, w, eps)


def qk_rmsnorm(q: Tensor, k: Tensor, wq: Tensor, wk: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    return rmsnorm(q, wq, eps), rmsnorm(k, wk, eps)


def gated_rmsnorm(o: Tensor, z: Tensor, w: Tensor, eps: float) -> Tensor:
    """Per head of w.numel() channels: w * rmsnorm(o) * silu(z), w not zero-centred."""
    hd = w.shape[-1]
    o = o.double().unflatten(-1, (-1, hd))
    z = z.double().unflatten(-1, (-1, hd))
    y = w.double() * (o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps)) * (z * torch.sigmoid(z))
    return y.flatten(-2)
