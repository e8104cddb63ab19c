"""The runtime's smoke op: a trivial copy through the whole path (guard, load, launch,
stream, graph capture), used by the tests."""

from __future__ import annotations

import torch
from torch import Tensor

from ._dispatch import KernelOp, compiling

_SMOKE = KernelOp("smoke_copy", "smoke_copy")


def smoke_copy(src: Tensor, *, out: Tensor | None = None) -> Tensor:
    """out = src. Kernel ``smoke_copy``: float32 [N] contiguous, N a multiple of 4 up to 2^20."""
    if out is None:
        out = torch.empty_like(src, memory_format=torch.contiguous_format)
    if compiling():
        torch.ops.netra.smoke_copy(src, out)
    else:
        _smoke_copy(src, out)
    return out


def _smoke_copy(src, out):
    if not _SMOKE(src, out):
        if out.shape != src.shape:
            raise ValueError(f"out: expected shape {list(src.shape)}, got {list(out.shape)}")
        out.copy_(src)


@torch.library.custom_op("netra::smoke_copy", mutates_args=("out",))
def _smoke_copy_op(src: Tensor, out: Tensor) -> None:
    _smoke_copy(src, out)


@_smoke_copy_op.register_fake
def _(src, out):
    return None
