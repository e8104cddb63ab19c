"""The contract vocabulary: one declaration per kernel, read by build, runtime, guards,
tests, checks, benchmarks and records. Shapes are written here once."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence, Union

Dim = Union[int, str]  # a literal extent, or the name of a dimension bound at the call

DTYPES = {  # contract dtype -> (torch dtype name, bytes per element)
    "bf16": ("bfloat16", 2),
    "f32": ("float32", 4),
    "f16": ("float16", 2),
    "fp8e4m3": ("float8_e4m3fn", 1),
    "u8": ("uint8", 1),
    "i32": ("int32", 4),
    "i64": ("int64", 8),
}
PTX_SCALARS = {"u32": 4, "s32": 4, "f32": 4, "u64": 8}


@dataclass(frozen=True)
class Tensor:
    """A tensor parameter, passed to the kernel as a .u64 global address.

    ``strides=None`` means contiguous. Otherwise one entry per dimension: an int, or the
    name of a stride dimension that is bound from the tensor and passed as a scalar."""

    name: str
    dtype: str
    shape: tuple[Dim, ...]
    role: str  # "in", "out" or "inout"
    strides: tuple[Dim, ...] | None = None
    align: int = 16
    doc: str = ""
    ptx: str = "u64"

    def __post_init__(self):
        assert self.dtype in DTYPES, self.dtype
        assert self.role in ("in", "out", "inout"), self.role
        assert self.strides is None or len(self.strides) == len(self.shape)


@dataclass(frozen=True)
class Scalar:
    """A by-value parameter. ``value`` is an expression over the bound dimensions (for
    example ``"N // 4"``), or None when the caller passes it (``eps``)."""

    name: str
    ptx: str
    value: str | None = None
    doc: str = ""

    def __post_init__(self):
        assert self.ptx in PTX_SCALARS, self.ptx


Param = Union[Tensor, Scalar]


@dataclass(frozen=True)
class Contract:
    name: str  # == .ptx file stem == .entry name == registry key
    family: str
    summary: str
    params: tuple[Param, ...]
    dims: dict[str, Sequence[int]]  # every accepted value of each shape dimension (tuple or range)
    grid: tuple[str, str, str]  # expressions over the dimensions
    threads: int | None  # threads per block; None: the launcher chooses (<= max_threads)
    reduction_order: str
    tolerance: float  # max relative error vs the float64 reference (see lifecycle.metrics)
    deterministic: bool
    bytes_read: str  # expression: the fewest bytes the kernel must read
    bytes_written: str
    arch: str = "sm_90a"
    stride_multiple: dict[str, int] = field(default_factory=dict)  # stride dims: multiple of
    max_threads: int = 1024
    max_registers: int = 64
    max_static_smem: int = 0
    dynamic_smem: int = 0
    quantization: str = "none"
    op: str | None = None  # the public op that dispatches to this kernel
    reference: str = ""
    peers: tuple[str, ...] = ()
    bench: bool = True  # measured by `netra bench` (floors and smoke kernels are not)
    cases_override: tuple[dict, ...] | None = None  # check/bench cases when dims are too many
    # the sanitizer's cases (default: the first and last contract case), where the last one
    # would take racecheck minutes (the expert kernels at M = 16 stream 8192 strips)
    sanitize_cases: tuple[dict, ...] | None = None
    # non-empty: the kernel uses griddepcontrol and this says what it reads before the wait;
    # launched with programmatic stream serialization it may then start during the previous
    # kernel (the bench also times it that way, as a chain)
    pdl: str = ""
    # outputs that must equal the reference exactly (integer outputs such as expert ids, where a
    # relative error cannot tell an id off by one from rounding); the tolerance covers the rest
    exact_outputs: tuple[str, ...] = ()
    # the op launches it with CU_LAUNCH_ATTRIBUTE_COOPERATIVE: the driver refuses a grid that cannot be resident at
    # once (what a grid-wide barrier needs) instead of launching one that would wait forever
    cooperative: bool = False
    # the preferred shared-memory carveout (percent of the SM's 228 KB; -1: the driver's choice, sized per kernel),
    # set on the function at load (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT). An SM changes its carveout only
    # when empty, so kernels meant to share SMs under PDL are given the same one
    carveout: int = -1
    # inputs the kernel consumes: it leaves every element it reads TAG (0xFFFF), the producer / consumer protocol of
    # netra::gdn_decode_spin. They are compared exactly (TAG after the launch), and the bench restores them before
    # each timed replay so every launch finds them written, as after its producer
    consumes: tuple[str, ...] = ()
    # pairs of 2-D tensors (row stride symbolic, unit column stride) that may be column ranges of the same rows (qkv and
    # z of one qkvz row): the guard accepts their overlapping spans where the rows' pitch is the same and the column
    # ranges are disjoint within it, instead of refusing any overlap of a written tensor
    row_views: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        names = [p.name for p in self.params]
        assert len(set(names)) == len(names), f"{self.name}: duplicate parameter names"
        assert self.dynamic_smem <= 227 * 1024
        assert self.carveout == -1 or 0 <= self.carveout <= 100, self.carveout
        inout = {p.name for p in self.params if isinstance(p, Tensor) and p.role == "inout"}
        assert set(self.consumes) <= inout & set(self.exact_outputs), f"{self.name}: consumed tensors are exact inouts"
        by = {p.name: p for p in self.params if isinstance(p, Tensor)}
        for pair in self.row_views:
            assert len(pair) == 2 and all(len(by[n].shape) == 2 and by[n].strides is not None
                                          and isinstance(by[n].strides[0], str) and by[n].strides[1] == 1
                                          for n in pair), f"{self.name}: row_views {pair}: 2-D row-strided tensors"

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        return tuple(p for p in self.params if isinstance(p, Tensor))

    @property
    def caller_scalars(self) -> tuple[Scalar, ...]:
        return tuple(p for p in self.params if isinstance(p, Scalar) and p.value is None)

    def cases(self) -> list[dict[str, int]]:
        """Every shape the contract accepts, or the listed subset where that is too many."""
        if self.cases_override is not None:
            return [dict(c) for c in self.cases_override]
        keys = [k for k in self.dims]
        return [dict(zip(keys, vals)) for vals in itertools.product(*(self.dims[k] for k in keys))]

    def eval(self, expr: str, dims: dict[str, int]) -> int:
        return int(eval(expr, {"__builtins__": {}}, dict(dims)))  # contract expressions only

    def grid_for(self, dims: dict[str, int]) -> tuple[int, int, int]:
        return tuple(self.eval(e, dims) for e in self.grid)  # type: ignore[return-value]

    def nbytes(self, dims: dict[str, int]) -> tuple[int, int]:
        return self.eval(self.bytes_read, dims), self.eval(self.bytes_written, dims)

    def shape_of(self, tensor: Tensor, dims: dict[str, int]) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else dims[d] for d in tensor.shape)

    def describe(self, tensor: Tensor) -> str:
        shape = ", ".join(str(d) for d in tensor.shape)
        layout = "contiguous" if tensor.strides is None else "strides (" + ", ".join(map(str, tensor.strides)) + ")"
        return f"{tensor.name}: {tensor.dtype} [{shape}] {layout}, {tensor.align}-byte aligned"

    def describe_dims(self) -> str:
        parts = []
        for k, v in self.dims.items():
            if isinstance(v, range):
                parts.append(f"{k} in {v.start}..{v.stop - 1}" + (f" step {v.step}" if v.step != 1 else ""))
                continue
            v = sorted(v)
            contiguous_run = v == list(range(v[0], v[-1] + 1))
            parts.append(f"{k} in {v[0]}..{v[-1]}" if contiguous_run and len(v) > 2 else f"{k} in {v}")
        by_multiple: dict[int, list[str]] = {}
        for k, m in self.stride_multiple.items():
            by_multiple.setdefault(m, []).append(k)
        for m, names in by_multiple.items():
            parts.append(f"{names[0]} a multiple of {m}" if len(names) == 1 else f"{', '.join(names)} multiples of {m}")
        return ", ".join(parts)
