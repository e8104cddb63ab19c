"""Guard-and-launch functions generated from a contract.

For each kernel the runtime writes, once, a small Python function specialised to the
contract: it checks every tensor's type, dtype, device, shape, strides and alignment, the
bound dimensions and the aliasing of outputs, and returns a short reason on a miss; on a
match it writes the pointers into a prebuilt argument struct and calls cuLaunchKernel on
the caller's current stream. Nothing in it allocates device memory, synchronizes, touches
a file or the environment, or looks up a symbol: those happened when it was made."""

from __future__ import annotations

import ctypes
from typing import Callable

import torch

from ..contracts import DTYPES, Contract, Scalar, Tensor
from . import loader
from .driver import error_name


class LaunchError(RuntimeError):
    pass


def _current_stream_fn():
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


def _span_expr(t: Tensor, ptr: str, elsize: int) -> str:
    if t.strides is None:  # contiguous: the extent is the product of the (bound) shape
        return f"{ptr} + {' * '.join(str(d) for d in t.shape)} * {elsize}"
    terms = [f"({d} - 1) * {s}" if not (isinstance(d, int) and d == 1) else "0" for d, s in zip(t.shape, t.strides)]
    return f"{ptr} + ({' + '.join(terms)} + 1) * {elsize}"


def guard_source(contract: Contract, block: tuple[int, int, int], driver_call: bool = True) -> str:
    """The Python source of the guard-and-launch function for this contract. With
    ``driver_call`` it calls cuda-bindings' cuLaunchKernel (which returns a 1-tuple),
    otherwise an injected ``_launch`` returning an int CUresult (tests)."""
    args = [p.name for p in contract.params if isinstance(p, Tensor) or p.value is None]
    L = [f"def guard_and_launch({', '.join(args)}):", "  try:"]
    bound: set[str] = set()
    spans: list[tuple[Tensor, str, str]] = []

    def bind(name: str, value: str, what: str):
        if name in bound:
            L.append(f"    if {value} != {name}: return '{what}: {name} differs between tensors'")
        else:
            L.append(f"    {name} = {value}")
            bound.add(name)

    for t in contract.tensors:
        n = t.name
        torch_dtype, elsize = DTYPES[t.dtype]
        L.append(f"    if {n}.dtype is not _torch.{torch_dtype}: return '{n}: dtype'")
        L.append(f"    if {n}.get_device() != _DEV: return '{n}: device'")
        L.append(f"    _s = {n}.shape")
        L.append(f"    if len(_s) != {len(t.shape)}: return '{n}: rank'")
        for i, d in enumerate(t.shape):
            if isinstance(d, int):
                L.append(f"    if _s[{i}] != {d}: return '{n}: shape'")
            else:
                bind(d, f"_s[{i}]", n)
        if t.strides is None:
            L.append(f"    if not {n}.is_contiguous(): return '{n}: not contiguous'")
        else:
            L.append(f"    _st = {n}.stride()")
            for i, s in enumerate(t.strides):
                if isinstance(s, int):
                    L.append(f"    if _st[{i}] != {s}: return '{n}: strides'")
                else:
                    bind(s, f"_st[{i}]", n)
        L.append(f"    p_{n} = {n}.data_ptr()")
        L.append(f"    if p_{n} % {t.align}: return '{n}: alignment'")
        spans.append((t, f"p_{n}", f"e_{n}"))
    for d in contract.dims:
        if contract.dims[d]:
            L.append(f"    if {d} not in _DIMS[{d!r}]: return '{d} outside the contract'")
    for s, m in contract.stride_multiple.items():
        L.append(f"    if {s} % {m} or {s} < 0: return '{s}: not a multiple of {m}'")
    # Address 0: no storage (a fake or meta tensor while tracing). Never launch on it.
    L.append(f"    if not ({' and '.join(p for _, p, _ in spans)}): return 'a tensor has no storage'")
    for t, p, e in spans:
        L.append(f"    {e} = {_span_expr(t, p, DTYPES[t.dtype][1])}")
    checked: set[frozenset] = set()
    row_views = {frozenset(v) for v in contract.row_views}
    for t, p, e in spans:
        if t.role == "in":
            continue
        for u, q, f in spans:
            pair = frozenset((t.name, u.name))
            if u is not t and pair not in checked:
                checked.add(pair)
                if pair not in row_views:
                    L.append(f"    if {p} < {f} and {q} < {e}: return '{t.name} overlaps {u.name}'")
                    continue
                # column ranges of the same rows: one pitch, and each row of one between two rows of the other
                el, (rt, wt), (ru, wu) = DTYPES[t.dtype][1], (t.strides[0], t.shape[1]), (u.strides[0], u.shape[1])
                assert DTYPES[u.dtype][1] == el, (t.name, u.name)
                L.append(f"    if {p} < {f} and {q} < {e}:")
                L.append(f"      _d = {q} - {p}")
                L.append(f"      if not ({rt} == {ru} and ({wt} * {el} <= _d and _d + {wu} * {el} <= {rt} * {el} if _d >= 0 "
                         f"else {wu} * {el} <= -_d and -_d + {wt} * {el} <= {rt} * {el})): "
                         f"return '{t.name} overlaps {u.name}'")
    for prm in contract.params:
        if isinstance(prm, Tensor):
            L.append(f"    _A.{prm.name} = p_{prm.name}")
        elif prm.value is None:
            L.append(f"    _A.{prm.name} = {prm.name}")
        else:
            L.append(f"    _A.{prm.name} = {prm.value}")
    # Every check above reads tensor attributes; a non-tensor argument (or a scalar the
    # struct cannot hold) raises here instead of costing an isinstance test per call.
    L.append("  except (AttributeError, TypeError) as _e:")
    L.append("    return f'bad argument: {_e}'")
    gx, gy, gz = contract.grid
    bx, by, bz = block
    call = f"_launch(_FN, {gx}, {gy}, {gz}, {bx}, {by}, {bz}, {contract.dynamic_smem}, _stream(_DEV), _PARAMS, {0 if driver_call else None})"
    if driver_call:
        L.append(f"  _err, = {call}")
        L.append("  if _err != _SUCCESS: _fail(_err)")
    else:
        L.append(f"  _err = {call}")
        L.append("  if _err: _fail(_err)")
    L.append("  return None")
    return "\n".join(L) + "\n"


def make_guard_and_launch(
    contract: Contract,
    *,
    function_handle: int,
    device: int,
    launch: Callable | None = None,
    stream: Callable | None = None,
    block: tuple[int, int, int] | None = None,
) -> Callable:
    """Build the guard-and-launch function. ``launch`` and ``stream`` default to the raw
    driver entry point and PyTorch's current raw stream; tests pass fakes."""
    if block is None:
        if contract.threads is None:
            raise ValueError(f"kernel {contract.name}: no fixed block size; pass block=")
        block = (contract.threads, 1, 1)
    struct_type = loader.arg_struct(contract)
    args = struct_type()
    n = len(contract.params)
    params = loader.param_pointers(args)
    driver_call = launch is None
    if driver_call:
        from cuda.bindings import driver as cu

        # cuda-bindings' own wrapper: measured at 3.9 us of host time per launch on the H200
        # machine against 5.1 us for the raw entry point through ctypes
        # (experiments/runtime/host_dispatch.json).
        launch = cu.cuLaunchKernel
        function = cu.CUfunction(function_handle)
        params_arg = ctypes.addressof(params) if n else 0
        success = cu.CUresult.CUDA_SUCCESS
    else:
        function = function_handle
        params_arg = ctypes.addressof(params) if n else None
        success = 0

    def fail(err: int):
        raise LaunchError(f"kernel {contract.name}: cuLaunchKernel failed with {error_name(err)}")

    namespace = {
        "_Tensor": torch.Tensor,
        "_torch": torch,
        "_DEV": device,
        "_DIMS": {k: (frozenset(v) if not isinstance(v, range) else v) for k, v in contract.dims.items()},
        "_A": args,
        "_PARAMS": params_arg,
        "_FN": function,
        "_SUCCESS": success,
        "_launch": launch,
        "_stream": stream or _current_stream_fn(),
        "_fail": fail,
    }
    source = guard_source(contract, block, driver_call)
    exec(compile(source, f"<netra guard {contract.name}>", "exec"), namespace)
    fn = namespace["guard_and_launch"]
    fn.__doc__ = f"Guard and launch {contract.name}. Returns None when launched, else the reason for the miss."
    fn.source = source
    fn.keepalive = (args, params)  # the struct and pointer array live as long as the function
    return fn


def pdl_launcher() -> Callable:
    """A ``launch`` for make_guard_and_launch that launches with programmatic stream
    serialization (cuLaunchKernelEx): the grid may start before the previous kernel on the
    stream ends, and must reach ``griddepcontrol.wait`` before it reads anything that kernel
    writes. Captured into a CUDA graph it becomes a programmatic edge. Only for kernels whose
    contract says what they read before the wait."""
    return ex_launcher(pdl=True)


def ex_launcher(pdl: bool = False, cluster_policy: str = "", cooperative: bool = False) -> Callable:
    """A ``launch`` for make_guard_and_launch by cuLaunchKernelEx with launch attributes:
    ``pdl`` (pdl_launcher); ``cluster_policy`` "load_balancing" or "spread" (the cluster
    scheduling policy preference: for clusters of 8, load balancing lets 132 clusters be
    resident at once where spread allows 124 or fewer; experiments/gdn/occupancy_diag.json);
    ``cooperative`` (Contract.cooperative): every CTA resident at once, or the launch fails."""
    from cuda.bindings import driver as cu

    cfg = cu.CUlaunchConfig()
    attrs = []
    if cooperative:
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        attr.value.cooperative = 1
        attrs.append(attr)
    if pdl:
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        attrs.append(attr)
    if cluster_policy:
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
        attr.value.clusterSchedulingPolicyPreference = getattr(
            cu.CUclusterSchedulingPolicy, f"CU_CLUSTER_SCHEDULING_POLICY_{cluster_policy.upper()}")
        attrs.append(attr)
    cfg.attrs, cfg.numAttrs = attrs, len(attrs)
    functions: dict = {}  # handle -> CUfunction, made once (not per launch)

    def launch(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        f = functions.get(fn) if isinstance(fn, int) else fn
        if f is None:
            f = functions[fn] = cu.CUfunction(fn)
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = gx, gy, gz
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = bx, by, bz
        cfg.sharedMemBytes, cfg.hStream = smem, stream
        err, = cu.cuLaunchKernelEx(cfg, f, params, 0)
        return int(err)

    return launch


def raw_launcher(kernel: "loader.LoadedKernel", pdl: bool = False) -> Callable:
    """An unguarded launcher for the runtime's floors, whose geometry the bench chooses:
    launch(grid, block, *param_values) on the current stream (``pdl``: by pdl_launcher)."""
    contract = kernel.contract
    args = loader.arg_struct(contract)()
    n = len(contract.params)
    params = loader.param_pointers(args)
    from cuda.bindings import driver as cu

    stream, names = _current_stream_fn(), [p.name for p in contract.params]
    params_addr = ctypes.addressof(params) if n else 0
    if pdl:
        launch, ok = pdl_launcher(), 0
    else:
        launch, ok = (lambda *a: cu.cuLaunchKernel(*a)[0]), cu.CUresult.CUDA_SUCCESS

    def go(grid, block, *values):
        for name, v in zip(names, values):
            setattr(args, name, v)
        err = launch(kernel.function, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0,
                     stream(kernel.device), params_addr, 0)
        if err != ok:
            raise LaunchError(f"kernel {contract.name}: cuLaunchKernel failed with {error_name(err)}")

    go.keepalive = (args, params)
    return go
