"""Dispatch: an exact-shape guard picks the kernel; everything else takes the framework
(PyTorch) path, visibly: each miss is counted by reason and the first of each reason is
logged with what the kernel wants and what arrived.

Per-op switches force the framework path. They are read once, from NETRA_FRAMEWORK (a
comma-separated list of op names, or "all") when this module is imported, and may be
changed with ``set_framework``; the dispatch path reads only a boolean attribute."""

from __future__ import annotations

import contextlib
import logging
import os
from collections import Counter
from typing import Callable

import torch

from .. import contracts
from ..contracts import Contract, Tensor

log = logging.getLogger("netra")

_SWITCH = {s.strip() for s in os.environ.get("NETRA_FRAMEWORK", "").split(",") if s.strip()}
OPS: dict[str, "KernelOp"] = {}
_PDL = False  # set_pdl: launch the kernels whose contract allows it with programmatic serialization


def _no_kernel(reason: str) -> Callable:
    def miss(*_args):
        return reason

    return miss


class KernelOp:
    """The kernel side of one public op: a lazily bound guard-and-launch function."""

    def __init__(self, op: str, kernel: str, key: str | None = None):
        """``key``: the name in OPS, ``op`` unless one op dispatches to several kernels (by shape)."""
        self.op = op
        self.contract: Contract = contracts.get(kernel)
        assert self.contract.op == op, f"contract {kernel} belongs to op {self.contract.op}, not {op}"
        # the guard's positional arguments whose first dimension is the contract's token rows "M":
        # rows() launches a larger M as chunks of at most max_rows
        args = [p for p in self.contract.params if isinstance(p, Tensor) or p.value is None]
        self._row_args = frozenset(i for i, p in enumerate(args) if isinstance(p, Tensor) and p.shape[:1] == ("M",))
        self._row0 = min(self._row_args) if self._row_args else None
        self.max_rows = max(self.contract.dims["M"]) if self._row_args and "M" in self.contract.dims else None
        enabled = not ({op, kernel, "all"} & _SWITCH)
        self.misses: Counter[str] = Counter()
        self.launches_bound = False
        self._launch: Callable | None = None
        self.go: Callable = self._bind_then_go if enabled else self._switched_off
        self.kernel = None
        OPS[key or op] = self

    # --- binding (not the dispatch path) -------------------------------------------------
    def bind(self, device: int | None = None) -> Callable:
        """Load the kernel and build its guard-and-launch function. Call before CUDA-graph
        capture (``netra.ops.prepare()``); the first eager call does it otherwise."""
        if self._launch is not None:
            return self._launch
        from ..runtime import gpu, launch, loader

        reason = gpu.unavailable_reason(device)
        if reason is not None:
            self._launch = _no_kernel(reason)
            return self._launch
        device = torch.cuda.current_device() if device is None else device

        self.kernel = loader.load(self.contract.name, device)
        pdl = bool(_PDL and self.contract.pdl)
        how = (launch.ex_launcher(pdl=pdl, cooperative=True) if self.contract.cooperative
               else launch.pdl_launcher() if pdl else None)
        self._launch = launch.make_guard_and_launch(self.contract, function_handle=self.kernel.handle, device=device,
                                                    launch=how)
        self.launches_bound = True
        return self._launch

    # --- the dispatch path ---------------------------------------------------------------
    # ``go(*args)`` is the guard-and-launch function itself once bound (returns None when the
    # kernel was launched, else the reason for the miss); before binding it is a trampoline
    # that binds first, and while switched off it returns "switched off". Ops call
    # ``k.go(...)`` and, on a miss, ``k.missed(reason, args)`` then their framework path.
    @property
    def enabled(self) -> bool:
        """False while the framework path is forced (``set_framework``)."""
        return self.go is not self._switched_off

    def _bind_then_go(self, *args):
        self.go = self.bind()
        return self.go(*args)

    @staticmethod
    def _switched_off(*_args):
        return "switched off"

    def __call__(self, *args) -> bool:
        """Launch the kernel if the guard passes; return False (and count why) otherwise."""
        reason = self.go(*args)
        if reason is None:
            return True
        self.missed(reason, args)
        return False

    def rows(self, *args) -> list[slice]:
        """Launch the kernel on ``args``; where the token rows exceed the contract's largest M,
        on consecutive chunks of at most that many rows (the other arguments whole). Returns the
        row ranges the guard refused, each counted, for the op's framework path (so an in-place
        op never applies a chunk twice). One guard call when M fits, as ``go``."""
        if self.max_rows is None or (n := args[self._row0].shape[0]) <= self.max_rows:
            reason = self.go(*args)
            if reason is None:
                return []
            self.missed(reason, args)
            return [slice(None)]
        if any(args[i].shape[0] != n for i in self._row_args):  # no chunk may launch: one guard call refuses it
            self.missed(self.go(*args), args)
            return [slice(None)]
        refused = []
        for lo in range(0, n, self.max_rows):
            s = slice(lo, min(lo + self.max_rows, n))
            a = tuple(x[s] if i in self._row_args else x for i, x in enumerate(args))
            reason = self.go(*a)
            if reason is not None:
                self.missed(reason, a)
                refused.append(s)
        return refused

    def missed(self, reason: str, args) -> None:
        first = reason not in self.misses
        self.misses[reason] += 1
        if first:
            log.warning("netra.%s -> framework path (%s). Kernel %s expects %s; %s. Arrived: %s",
                        self.op, reason, self.contract.name, self.expected(), self.contract.describe_dims(),
                        describe_args(self.contract, args))

    def expected(self) -> str:
        return "; ".join(self.contract.describe(t) for t in self.contract.tensors)


def describe_args(contract: Contract, args) -> str:
    out = []
    names = [p.name for p in contract.params if isinstance(p, Tensor) or p.value is None]
    for name, a in zip(names, args):
        if isinstance(a, torch.Tensor):
            out.append(f"{name}: {str(a.dtype).replace('torch.', '')} {list(a.shape)} strides {list(a.stride())} "
                       f"on {a.device}, address % 16 = {a.data_ptr() % 16}")
        else:
            out.append(f"{name}: {a!r}")
    return "; ".join(out)


def set_framework(op: str, on: bool = True) -> None:
    """Force (or stop forcing) the framework path for one op (all its kernels), one kernel
    (an OPS key), or every op with "all"."""
    targets = OPS.values() if op == "all" else [k for name, k in OPS.items() if op in (name, k.op)]
    if not targets:
        raise KeyError(f"set_framework: no op or kernel named {op!r}; known: {', '.join(sorted(OPS))}")
    for k in targets:
        k.go = k._switched_off if on else (k._launch or k._bind_then_go)


def set_pdl(on: bool = True) -> None:
    """Launch every kernel whose contract says what it reads before ``griddepcontrol.wait``
    (``Contract.pdl``) with programmatic stream serialization (cuLaunchKernelEx), so it may
    start while the kernel before it on the stream finishes; or stop. Their guards are rebuilt
    at the next bind (``prepare()``, before CUDA-graph capture). Only for callers that know
    what the kernels read early is not being written by the kernel before (the decode runner:
    weights)."""
    global _PDL
    _PDL = on
    for k in OPS.values():
        if k.contract.pdl and k._launch is not None:
            k._launch = None
            k.launches_bound = False
            if k.go is not k._switched_off:
                k.go = k._bind_then_go


def pdl_enabled() -> bool:
    """Whether set_pdl is on (the decode runner's PDL capture)."""
    return _PDL


def stats() -> dict[str, dict]:
    """Per op: whether the kernel is enabled and bound, and the misses by reason."""
    return {name: {"kernel": k.contract.name, "enabled": k.enabled, "bound": k.launches_bound,
                   "misses": dict(k.misses)} for name, k in OPS.items()}


@contextlib.contextmanager
def count_launches():
    """Count each kernel's launches (guard passed) inside the block: which kernels a model
    step really uses. Off the hot path: it wraps the dispatch functions and restores them."""
    counts: Counter[str] = Counter()
    saved = {}
    for k in OPS.values():
        if not k.enabled:
            continue
        inner = k.bind()
        saved[k] = k.go

        def counted(*args, _inner=inner, _name=k.contract.name):
            r = _inner(*args)
            if r is None:
                counts[_name] += 1
            return r

        k.go = counted
    try:
        yield counts
    finally:
        for k, go in saved.items():
            k.go = go


def reset_stats() -> None:
    for k in OPS.values():
        k.misses.clear()


def prepare(device: int | None = None) -> None:
    """Load every op's kernel now (before CUDA-graph capture)."""
    for k in OPS.values():
        k.bind(device)


def compiling() -> bool:
    return torch.compiler.is_compiling()
