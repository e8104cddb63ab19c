"""Error metrics. rel_err is the one every tolerance in a contract is stated in."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def rel_err(out: Tensor, ref: Tensor) -> float:
    """max |out - ref| / max |ref|, in float64. NaN or Inf anywhere in out gives inf, so an
    unwritten (NaN-poisoned) element always fails."""
    out64, ref64 = out.double(), ref.double()
    if out64.shape != ref64.shape:
        raise ValueError(f"shape {list(out.shape)} vs reference {list(ref.shape)}")
    if not torch.isfinite(out64).all():
        return math.inf
    scale = ref64.abs().max().item()
    diff = (out64 - ref64).abs().max().item()
    return diff / scale if scale > 0 else diff


def output_error(out: Tensor, ref: Tensor, exact: bool = False) -> float:
    """rel_err, or for an output its contract compares exactly (``Contract.exact_outputs``):
    0.0 if out equals ref cast to out's dtype everywhere (or is bit for bit that: a NaN pattern such as
    a consumed input's TAG), else inf."""
    if not exact:
        return rel_err(out, ref)
    if out.shape != ref.shape:
        raise ValueError(f"shape {list(out.shape)} vs reference {list(ref.shape)}")
    r = ref.to(out.dtype)
    return 0.0 if torch.equal(out, r) or first_mismatch(out, r) is None else math.inf


def first_mismatch(a: Tensor, b: Tensor) -> str | None:
    """None if a and b are bitwise identical, else where they first differ."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {list(a.shape)} {a.dtype} vs {list(b.shape)} {b.dtype}"
    ai = a.contiguous().view(torch.uint8) if a.element_size() == 1 else a.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()])
    bi = b.contiguous().view(ai.dtype)
    ne = (ai != bi).nonzero()
    if ne.numel() == 0:
        return None
    idx = tuple(ne[0].tolist())
    return f"first difference at {list(idx)}: {a[idx].item()!r} vs {b[idx].item()!r} ({ne.shape[0]} elements differ)"
