"""Float64 reference of the FP8 block-scaled projection."""

from __future__ import annotations

from torch import Tensor

from ..model.checkpoint import dequantize


def fp8_linear(x: Tensor, weight: Tensor, scale: Tensor) -> Tensor:
    """x [M, K] @ dequant(weight [N, K] fp8, scale [N/128, K/128])^T in float64."""
    return x.double() @ dequantize(weight, scale, (128, 128), dtype=x.new_empty(0).double().dtype).T
