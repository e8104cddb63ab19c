"""The generated guard-and-launch function, on CPU tensors, with a fake cuLaunchKernel.

``device=-1`` makes CPU tensors pass the device check (``Tensor.get_device()`` is -1 on
CPU). A matching call must launch exactly once with the contract's grid and block and an
argument struct holding the tensors' addresses and the scalars; any mismatch must return
a reason and launch nothing."""

from __future__ import annotations

import ctypes
import struct
import sys

import pytest
import torch

import netra.ops as ops
from netra import contracts
from netra.contracts import DTYPES, Tensor
from netra.runtime import launch as launch_mod
from netra.runtime.launch import LaunchError, make_guard_and_launch

GUARDED = ["rmsnorm_h2048", "add_rmsnorm_h2048", "qk_rmsnorm_d256", "gated_rmsnorm_d128", "smoke_copy"]
NORM = [n for n in GUARDED if n != "smoke_copy"]
EPS = 1e-6
STREAM = 0x5EED
HANDLE = 0xF00D


def f32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


class FakeLaunch:
    """Stands in for cuLaunchKernel; records each call and what the driver would read
    through the kernel-parameter pointer array at that moment."""

    def __init__(self, contract, ret: int = 0):
        self.contract = contract
        self.ret = ret
        self.calls: list[dict] = []

    def __call__(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        seen = {}
        ptrs = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        for i, p in enumerate(self.contract.params):
            ctype = ctypes.c_uint64 if isinstance(p, Tensor) else {
                "u32": ctypes.c_uint32, "s32": ctypes.c_int32, "f32": ctypes.c_float, "u64": ctypes.c_uint64}[p.ptx]
            seen[p.name] = ctype.from_address(ptrs[i]).value
        self.calls.append(dict(fn=fn, grid=(gx, gy, gz), block=(bx, by, bz), smem=smem, stream=stream,
                               params=params, extra=extra, seen=seen))
        return self.ret


def make(name: str, *, device: int = -1, ret: int = 0):
    c = contracts.get(name)
    fake = FakeLaunch(c, ret)
    devices = []

    def stream(d):
        devices.append(d)
        return STREAM

    fn = make_guard_and_launch(c, function_handle=HANDLE, device=device, launch=fake, stream=stream)
    return c, fn, fake, devices


def valid_args(name: str, n: int, gen: torch.Generator) -> dict:
    """Contiguous, aligned, separate tensors of the contract's shapes (n is M or N)."""
    c = contracts.get(name)
    dims = {next(iter(c.dims)): n}
    args = {}
    for p in c.params:
        if isinstance(p, Tensor):
            dtype = getattr(torch, DTYPES[p.dtype][0])
            args[p.name] = torch.randn(c.shape_of(p, dims), generator=gen).to(dtype)
        elif p.value is None:
            args[p.name] = EPS
    return args


def call(fn, c, args: dict):
    names = [p.name for p in c.params if isinstance(p, Tensor) or p.value is None]
    return fn(*[args[n] for n in names])


def struct_values(fn) -> dict:
    args = fn.keepalive[0]
    return {name: getattr(args, name) for name, _ in args._fields_}


def expected_struct(c, args: dict, dims: dict) -> dict:
    out = {}
    strides = {}
    for t in c.tensors:
        if t.strides is not None:
            for s, v in zip(t.strides, args[t.name].stride()):
                if isinstance(s, str):
                    strides[s] = v
    for p in c.params:
        if isinstance(p, Tensor):
            out[p.name] = args[p.name].data_ptr()
        elif p.value is None:
            out[p.name] = f32(args[p.name]) if p.ptx == "f32" else args[p.name]
        else:
            out[p.name] = c.eval(p.value, dims | strides)
    return out


CASES = [(n, m) for n in NORM for m in (1, 5, 16)] + [("smoke_copy", n) for n in (4, 1024, 1028, 1 << 20)]


@pytest.mark.parametrize("name, n", CASES)
def test_match_launches_once(name, n):
    gen = torch.Generator().manual_seed(n)
    c, fn, fake, devices = make(name)
    args = valid_args(name, n, gen)
    assert call(fn, c, args) is None
    assert len(fake.calls) == 1
    (got,) = fake.calls
    dims = {next(iter(c.dims)): n}
    assert got["fn"] == HANDLE
    assert got["grid"] == c.grid_for(dims)
    assert got["block"] == (c.threads, 1, 1)
    assert got["smem"] == c.dynamic_smem
    assert got["stream"] == STREAM and devices == [-1]
    assert got["params"] == ctypes.addressof(fn.keepalive[1])
    assert got["extra"] is None
    want = expected_struct(c, args, dims)
    assert struct_values(fn) == want
    assert got["seen"] == want  # what the driver reads through the pointer array
    assert [f for f, _ in fn.keepalive[0]._fields_] == [p.name for p in c.params]


def test_norm_grid_is_m():
    gen = torch.Generator().manual_seed(0)
    c, fn, fake, _ = make("rmsnorm_h2048")
    for m in (1, 2, 16):
        assert call(fn, c, valid_args("rmsnorm_h2048", m, gen)) is None
    assert [k["grid"] for k in fake.calls] == [(1, 1, 1), (2, 1, 1), (16, 1, 1)]


def test_smoke_copy_struct_and_grid():
    c, fn, fake, _ = make("smoke_copy")
    src, dst = torch.arange(1028, dtype=torch.float32), torch.empty(1028)
    assert fn(src, dst) is None
    assert fake.calls[0]["grid"] == (2, 1, 1)  # 257 vectors of 16 bytes
    assert struct_values(fn) == {"src": src.data_ptr(), "dst": dst.data_ptr(), "n16": 257}


def test_struct_is_rewritten_each_launch():
    gen = torch.Generator().manual_seed(1)
    c, fn, fake, _ = make("gated_rmsnorm_d128")
    a, b = valid_args(c.name, 3, gen), valid_args(c.name, 3, gen)
    b["eps"] = 1e-5
    call(fn, c, a)
    call(fn, c, b)
    assert [k["seen"] for k in fake.calls] == [expected_struct(c, a, {"M": 3}), expected_struct(c, b, {"M": 3})]


# --- qk: strided views of the fused projection output -----------------------------------
@pytest.mark.parametrize("m", [1, 3, 16])
def test_qk_accepts_strided_views(m):
    gen = torch.Generator().manual_seed(m)
    c, fn, fake, _ = make("qk_rmsnorm_d256")
    qkv = torch.randn(m, 9216, generator=gen).bfloat16()
    q = qkv[:, :8192].view(m, 16, 512)[:, :, :256]
    k = qkv[:, 8192:8704].view(m, 2, 256)
    assert not q.is_contiguous()
    wq, wk = torch.randn(256, generator=gen).bfloat16(), torch.randn(256, generator=gen).bfloat16()
    oq, ok = torch.empty(m, 16, 256, dtype=torch.bfloat16), torch.empty(m, 2, 256, dtype=torch.bfloat16)
    assert fn(q, k, wq, wk, oq, ok, EPS) is None
    assert len(fake.calls) == 1 and fake.calls[0]["grid"] == (m, 1, 1)
    s = struct_values(fn)
    assert (s["q_row_stride"], s["q_head_stride"], s["k_row_stride"], s["k_head_stride"]) == (*q.stride()[:2], *k.stride()[:2])
    assert (s["q_head_stride"], s["k_head_stride"]) == (512, 256)
    if m > 1:  # a size-1 dimension's stride is whatever the view chose; the kernel never uses it
        assert (s["q_row_stride"], s["k_row_stride"]) == (9216, 9216)
    assert s["q"] == qkv.data_ptr() and s["k"] == qkv.data_ptr() + 8192 * 2
    assert fake.calls[0]["seen"] == s


def test_qk_contiguous_strides():
    gen = torch.Generator().manual_seed(2)
    c, fn, fake, _ = make("qk_rmsnorm_d256")
    args = valid_args(c.name, 4, gen)
    assert call(fn, c, args) is None
    s = struct_values(fn)
    assert (s["q_row_stride"], s["q_head_stride"], s["k_row_stride"], s["k_head_stride"]) == (4096, 256, 512, 256)


# --- misses ------------------------------------------------------------------------------
def _first(c) -> str:
    return c.tensors[0].name


def _out(c) -> str:
    return next(t.name for t in c.tensors if t.role == "out")


def _dim(c) -> str:
    return next(iter(c.dims))


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    buf = torch.empty(t.numel() + 1, dtype=t.dtype)
    v = buf[1:].view(t.shape)
    v.copy_(t)
    assert v.data_ptr() % 16 and v.is_contiguous()
    return v


def _transposed(t: torch.Tensor) -> torch.Tensor:
    """The same shape and values, not contiguous."""
    if t.dim() == 1:
        v = torch.empty(t.numel() * 2, dtype=t.dtype)[::2]
    else:
        v = torch.empty(tuple(reversed(t.shape)), dtype=t.dtype).permute(*reversed(range(t.dim())))
    v.copy_(t)
    assert v.shape == t.shape and not v.is_contiguous()
    return v


def miss_wrong_dtype(c, a):
    n = _first(c)
    a[n] = a[n].double()
    return f"{n}: dtype"


def miss_wrong_shape(c, a):
    if c.name == "smoke_copy":
        a["dst"] = torch.empty(a["src"].numel() + 4)
        return "dst: N differs between tensors"
    w = next(t.name for t in c.tensors if t.shape and all(isinstance(d, int) for d in t.shape))
    a[w] = torch.cat([a[w], a[w]])
    return f"{w}: shape"


def miss_wrong_row_shape(c, a):
    n = _first(c)
    assert c.name != "smoke_copy"
    a[n] = a[n][..., : a[n].shape[-1] // 2].contiguous()
    return f"{n}: shape"


def miss_m_differs(c, a):
    o = _out(c)
    a[o] = torch.cat([a[o], a[o]])
    return f"{o}: {_dim(c)} differs between tensors"


def miss_rank(c, a):
    n = _first(c)
    a[n] = a[n].unsqueeze(0)
    return f"{n}: rank"


def miss_noncontiguous(c, a):
    n = _out(c) if c.name == "qk_rmsnorm_d256" else _first(c)  # q and k may be strided
    a[n] = _transposed(a[n])
    return f"{n}: not contiguous"


def miss_noncontiguous_weight(c, a):
    assert c.name != "smoke_copy"
    w = next(t.name for t in c.tensors if len(t.shape) == 1 and isinstance(t.shape[0], int))
    a[w] = _transposed(a[w])
    return f"{w}: not contiguous"


def miss_sliced(c, a):
    """A column slice of a wider buffer: right shape, wrong layout."""
    n = _out(c) if c.name == "qk_rmsnorm_d256" else _first(c)
    t = a[n]
    if t.dim() == 1:
        wide = torch.empty(t.numel(), 2, dtype=t.dtype)
        v = wide[:, 0]
    else:
        wide = torch.empty(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype)
        v = wide[..., : t.shape[-1]]
    v.copy_(t)
    a[n] = v
    return f"{n}: not contiguous"


def miss_misaligned(c, a):
    n = _first(c)
    a[n] = _misaligned(a[n])
    return f"{n}: alignment"


def miss_misaligned_out(c, a):
    o = _out(c)
    a[o] = _misaligned(a[o])
    return f"{o}: alignment"


def miss_out_overlaps_input(c, a):
    n, o = _first(c), _out(c)
    x = a[n]
    assert x.numel() == a[o].numel() and x.dtype == a[o].dtype
    buf = torch.empty(x.numel() + 8, dtype=x.dtype)  # out starts 16 bytes into x
    buf[: x.numel()].copy_(x.flatten())
    a[n] = buf[: x.numel()].view(x.shape)
    a[o] = buf[8 : 8 + x.numel()].view(a[o].shape)
    return f"{o} overlaps {n}"


def miss_out_is_input(c, a):
    n, o = _first(c), _out(c)
    assert a[n].shape == a[o].shape and a[n].dtype == a[o].dtype
    a[o] = a[n]
    return f"{o} overlaps {n}"


def miss_out_overlaps_second_input(c, a):
    ins = [t.name for t in c.tensors if t.role == "in"]
    o = _out(c)
    n = ins[1]
    assert a[n].shape == a[o].shape
    a[o] = a[n]
    return f"{o} overlaps {n}"


def miss_outputs_overlap(c, a):
    assert c.name == "qk_rmsnorm_d256"
    buf = torch.empty(a["out_q"].numel() + 8, dtype=torch.bfloat16)
    a["out_q"] = buf[: a["out_q"].numel()].view(a["out_q"].shape)
    a["out_k"] = buf[8 : 8 + a["out_k"].numel()].view(a["out_k"].shape)
    return "out_q overlaps out_k"


class Prefix(str):
    """An expected reason of which only the start is fixed."""


def miss_non_tensor(c, a):
    n = _first(c)
    a[n] = a[n].tolist()
    return Prefix("bad argument: 'list' object has no attribute")


def miss_none(c, a):
    o = _out(c)
    a[o] = None
    return Prefix("bad argument: 'NoneType' object has no attribute")


MISSES = [miss_wrong_dtype, miss_wrong_shape, miss_wrong_row_shape, miss_m_differs, miss_rank, miss_noncontiguous,
          miss_noncontiguous_weight, miss_sliced, miss_misaligned, miss_misaligned_out, miss_out_overlaps_input,
          miss_out_is_input, miss_out_overlaps_second_input, miss_outputs_overlap, miss_non_tensor, miss_none]


def _assert_miss(fn, fake, c, args, reason):
    before = struct_values(fn)
    got = call(fn, c, args)
    assert isinstance(got, str)
    if isinstance(reason, Prefix):
        assert got.startswith(reason), got
    else:
        assert got == reason
    assert fake.calls == []
    assert struct_values(fn) == before  # nothing written on a miss


ONLY = {  # misses that apply to some kernels only
    miss_wrong_row_shape: NORM,
    miss_noncontiguous_weight: NORM,
    miss_out_overlaps_second_input: ["gated_rmsnorm_d128"],  # z has out's shape
    miss_outputs_overlap: ["qk_rmsnorm_d256"],
}
MISS_CASES = [pytest.param(name, miss, id=f"{name}-{miss.__name__[5:]}")
              for miss in MISSES for name in GUARDED if name in ONLY.get(miss, GUARDED)]


@pytest.mark.parametrize("name, miss", MISS_CASES)
def test_miss(name, miss):
    gen = torch.Generator().manual_seed(7)
    c, fn, fake, _ = make(name)
    n = 1024 if name == "smoke_copy" else 4
    args = valid_args(name, n, gen)
    assert call(make(name)[1], c, dict(args)) is None  # the unmodified call matches
    reason = miss(c, args)
    _assert_miss(fn, fake, c, args, reason)


@pytest.mark.parametrize("name", NORM)
@pytest.mark.parametrize("above", [None, 1, 16])
def test_miss_m_outside_contract(name, above):
    """M = 0, and the contract's largest M + 1 and + 16 (17 and 32, or 33 and 48 for the 32-row norms)."""
    gen = torch.Generator().manual_seed(3)
    c, fn, fake, _ = make(name)
    m = 0 if above is None else max(c.dims["M"]) + above
    _assert_miss(fn, fake, c, valid_args(name, m, gen), "M outside the contract")


@pytest.mark.parametrize("n", [0, 6, 1022, (1 << 20) + 4])
def test_smoke_copy_miss_n_outside_contract(n):
    c, fn, fake, _ = make("smoke_copy")
    _assert_miss(fn, fake, c, {"src": torch.zeros(n), "dst": torch.zeros(n)}, "N outside the contract")


@pytest.mark.parametrize("name", GUARDED)
def test_miss_wrong_device(name):
    gen = torch.Generator().manual_seed(4)
    c, fn, fake, _ = make(name, device=0)  # CPU tensors report -1
    args = valid_args(name, 1024 if name == "smoke_copy" else 2, gen)
    _assert_miss(fn, fake, c, args, f"{_first(c)}: device")


def test_add_rmsnorm_inout_residual_aliasing_x():
    gen = torch.Generator().manual_seed(5)
    c, fn, fake, _ = make("add_rmsnorm_h2048")
    args = valid_args(c.name, 3, gen)
    args["residual"] = args["x"]
    _assert_miss(fn, fake, c, args, "residual overlaps x")


def test_add_rmsnorm_residual_partly_overlapping_x():
    gen = torch.Generator().manual_seed(5)
    c, fn, fake, _ = make("add_rmsnorm_h2048")
    args = valid_args(c.name, 2, gen)
    buf = torch.empty(3, 2048, dtype=torch.bfloat16)
    args["x"], args["residual"] = buf[:2], buf[1:]
    _assert_miss(fn, fake, c, args, "residual overlaps x")


@pytest.mark.parametrize("which", ["same", "partial"])
def test_add_rmsnorm_out_overlapping_inout_residual(which):
    gen = torch.Generator().manual_seed(5)
    c, fn, fake, _ = make("add_rmsnorm_h2048")
    args = valid_args(c.name, 2, gen)
    if which == "same":
        args["y"] = args["residual"]
    else:
        buf = torch.empty(3, 2048, dtype=torch.bfloat16)
        args["residual"], args["y"] = buf[:2], buf[1:]
    _assert_miss(fn, fake, c, args, "residual overlaps y")  # the inout is checked first


def test_adjacent_tensors_do_not_overlap():
    """Out right after x in one buffer touches but does not overlap: a match."""
    c, fn, fake, _ = make("rmsnorm_h2048")
    buf = torch.randn(4, 2048).bfloat16()
    assert fn(buf[:2], torch.zeros(2048, dtype=torch.bfloat16), buf[2:], EPS) is None
    assert len(fake.calls) == 1


def _qk_from(m, q_row, q_head, gen):
    big = torch.randn(m * q_row + 16 * q_head + 256, generator=gen).bfloat16()
    q = big.as_strided((m, 16, 256), (q_row, q_head, 1))
    k = torch.randn(m, 2, 256, generator=gen).bfloat16()
    w = torch.randn(256, generator=gen).bfloat16()
    return q, k, w, w.clone(), torch.empty(m, 16, 256, dtype=torch.bfloat16), torch.empty(m, 2, 256, dtype=torch.bfloat16)


@pytest.mark.parametrize("q_row, q_head, reason", [
    (16 * 260, 260, "q_head_stride: not a multiple of 8"),
    (16 * 512 + 4, 512, "q_row_stride: not a multiple of 8"),
])
def test_qk_miss_stride_not_multiple_of_8(q_row, q_head, reason):
    gen = torch.Generator().manual_seed(6)
    c, fn, fake, _ = make("qk_rmsnorm_d256")
    q, k, wq, wk, oq, ok = _qk_from(3, q_row, q_head, gen)
    assert q.data_ptr() % 16 == 0
    before = struct_values(fn)
    assert fn(q, k, wq, wk, oq, ok, EPS) == reason
    assert fake.calls == [] and struct_values(fn) == before


def test_qk_miss_k_head_stride():
    gen = torch.Generator().manual_seed(6)
    c, fn, fake, _ = make("qk_rmsnorm_d256")
    q, _, wq, wk, oq, ok = _qk_from(2, 16 * 256, 256, gen)
    k = torch.randn(2 * 2 * 260, generator=gen).bfloat16().as_strided((2, 2, 256), (520, 260, 1))
    assert fn(q, k, wq, wk, oq, ok, EPS) == "k_head_stride: not a multiple of 8"
    assert fake.calls == []


def test_qk_miss_channel_stride():
    gen = torch.Generator().manual_seed(6)
    c, fn, fake, _ = make("qk_rmsnorm_d256")
    qq = torch.randn(2, 16, 512, generator=gen).bfloat16()[:, :, ::2]
    args = valid_args(c.name, 2, gen) | {"q": qq}
    _assert_miss(fn, fake, c, args, "q: strides")


def test_qk_miss_out_overlapping_strided_q():
    """An output placed inside the strided q's span (in a gate half) is refused: the span
    check is conservative."""
    gen = torch.Generator().manual_seed(6)
    c, fn, fake, _ = make("qk_rmsnorm_d256")
    m = 2
    qkv = torch.randn(m, 9216 + 8192, generator=gen).bfloat16()
    q = qkv[:, :8192].view(m, 16, 512)[:, :, :256]
    k = torch.randn(m, 2, 256, generator=gen).bfloat16()
    ok = torch.empty(m, 2, 256, dtype=torch.bfloat16)
    oq = qkv[0, 256 : 256 + m * 16 * 256].view(m, 16, 256)  # starts in q's first gate half
    w = torch.randn(256, generator=gen).bfloat16()
    assert fn(q, k, w, w.clone(), oq, ok, EPS) == "out_q overlaps q"
    assert fake.calls == []


def test_failed_launch_raises_naming_kernel():
    gen = torch.Generator().manual_seed(8)
    c, fn, fake, _ = make("rmsnorm_h2048", ret=700)
    with pytest.raises(LaunchError, match="kernel rmsnorm_h2048: cuLaunchKernel failed"):
        call(fn, c, valid_args(c.name, 2, gen))
    assert len(fake.calls) == 1


def test_guard_source_is_kept():
    c, fn, _, _ = make("rmsnorm_h2048")
    assert fn.source == launch_mod.guard_source(c, (256, 1, 1), False)
    assert fn.source.startswith("def guard_and_launch(x, w, y, eps):")


@pytest.mark.parametrize("eps", ["1e-6", None, [1e-6]])
def test_bad_scalar_is_a_miss(eps):
    gen = torch.Generator().manual_seed(23)
    c, fn, fake, _ = make("rmsnorm_h2048")
    args = valid_args(c.name, 2, gen) | {"eps": eps}
    got = call(fn, c, args)
    assert got.startswith("bad argument:"), got
    assert fake.calls == []


@pytest.mark.parametrize("name", GUARDED)
def test_driver_guard_builds_and_misses_without_a_gpu(name):
    """The default guard (cuda-bindings' cuLaunchKernel) is generated on a CPU machine, and
    its misses return before any driver call."""
    gen = torch.Generator().manual_seed(24)
    c = contracts.get(name)
    fn = make_guard_and_launch(c, function_handle=HANDLE, device=-1, stream=lambda d: pytest.fail("stream asked"))
    assert "_err, = _launch(" in fn.source and "_SUCCESS" in fn.source
    args = valid_args(name, 1026 if name == "smoke_copy" else max(c.dims["M"]) + 1, gen)
    assert call(fn, c, args) == f"{_dim(c)} outside the contract"
    args = valid_args(name, 1024 if name == "smoke_copy" else 2, gen)
    first = _first(c)
    args[first] = args[first].double()
    assert call(fn, c, args) == f"{first}: dtype"


def test_no_fixed_block_needs_block_argument():
    with pytest.raises(ValueError, match="empty_kernel"):
        make_guard_and_launch(contracts.get("empty_kernel"), function_handle=1, device=-1,
                              launch=lambda *a: 0, stream=lambda d: 0)


# --- hygiene: nothing on the dispatch path allocates, syncs, does I/O or looks up symbols --
FORBIDDEN_NAMES = {
    # allocation
    "empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "empty_strided",
    "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "tensor", "clone", "contiguous",
    # synchronization
    "synchronize",
    # files and environment
    "open", "stat", "lstat", "getenv", "__getitem__", "get",
    # symbol lookup
    "cuModuleGetFunction", "cuModuleLoadData", "cuGetProcAddress", "cuModuleLoad",
}
FORBIDDEN_MODULES = ("pathlib", "os", "io", "_io", "posix", "posixpath", "cuda.bindings", "torch.cuda")
ALLOWED_C = {"isinstance", "len", "get_device", "is_contiguous", "data_ptr", "numel", "stride", "setprofile"}


def _trace(thunk, *args):
    events: list[tuple[str, str | None, str]] = []

    def prof(frame, event, arg):
        if event == "call":
            events.append(("call", frame.f_globals.get("__name__"), frame.f_code.co_qualname))
        elif event == "c_call":
            mod = getattr(arg, "__module__", None)
            if mod is None and getattr(arg, "__self__", None) is not None:
                mod = type(arg.__self__).__module__
            events.append(("c_call", mod, getattr(arg, "__qualname__", getattr(arg, "__name__", repr(arg)))))

    sys.setprofile(prof)
    try:
        result = thunk(*args)
    finally:
        sys.setprofile(None)
    return result, events


def _forbidden(events):
    bad = []
    for kind, mod, qual in events:
        last = qual.rsplit(".", 1)[-1]
        if last in FORBIDDEN_NAMES or any(s in qual for s in ("cuModule", "cuGetProcAddress", "synchronize")):
            bad.append((kind, mod, qual))
        elif mod and (mod in FORBIDDEN_MODULES or mod.startswith(tuple(m + "." for m in FORBIDDEN_MODULES))):
            bad.append((kind, mod, qual))
        elif qual.startswith("_Environ.") or qual.startswith("Path."):
            bad.append((kind, mod, qual))
    return bad


def _hygiene_setup(name):
    gen = torch.Generator().manual_seed(9)
    c = contracts.get(name)
    count = [0]

    def fake_launch(*a):
        count[0] += 1
        return 0

    def stream(d):
        return STREAM

    fn = make_guard_and_launch(c, function_handle=HANDLE, device=-1, launch=fake_launch, stream=stream)
    args = valid_args(name, 1024 if name == "smoke_copy" else 4, gen)
    if name == "qk_rmsnorm_d256":
        qkv = torch.randn(4, 9216, generator=gen).bfloat16()
        args["q"] = qkv[:, :8192].view(4, 16, 512)[:, :, :256]
        args["k"] = qkv[:, 8192:8704].view(4, 2, 256)
    return c, fn, args, count


@pytest.mark.parametrize("name", GUARDED)
def test_dispatch_path_hygiene(name):
    c, fn, args, count = _hygiene_setup(name)
    ordered = [args[p.name] for p in c.params if isinstance(p, Tensor) or p.value is None]
    result, events = _trace(fn, *ordered)
    assert result is None
    assert count == [1]
    assert events, "the profiler saw nothing"
    assert _forbidden(events) == []
    py = [q for k, m, q in events if k == "call"]
    assert py == ["guard_and_launch", "_hygiene_setup.<locals>.stream", "_hygiene_setup.<locals>.fake_launch"]
    c_names = {q.rsplit(".", 1)[-1] for k, m, q in events if k == "c_call"}
    assert c_names <= ALLOWED_C, c_names - ALLOWED_C
    assert "data_ptr" in c_names


def test_hygiene_check_catches_offenders():
    """The detector itself: allocation, sync, file, environment and path access are seen."""
    import os
    import pathlib

    def offender():
        torch.empty(4)
        torch.zeros(2)
        torch.empty_like(torch.ones(1))
        os.environ.get("HOME")
        os.getenv("NETRA_FRAMEWORK")
        os.stat(".")
        pathlib.Path(".").exists()
        with open(os.devnull) as f:
            f.read()

    _, events = _trace(offender)
    bad = {q.rsplit(".", 1)[-1] for _, _, q in _forbidden(events)}
    assert {"empty", "zeros", "empty_like", "ones", "get", "getenv", "stat", "open", "__getitem__"} <= bad
    assert any(m == "pathlib" for _, m, _ in _forbidden(events))


# --- the public ops hand their arguments to the guard in contract order ------------------
OP_ARGS = {  # public op -> its kernel
    "rmsnorm": "rmsnorm_h2048",
    "add_rmsnorm": "add_rmsnorm_h2048",
    "qk_rmsnorm": "qk_rmsnorm_d256",
    "gated_rmsnorm": "gated_rmsnorm_d128",
    "smoke_copy": "smoke_copy",
}


def _public_call(op: str, a: dict):
    if op == "rmsnorm":
        return lambda: ops.rmsnorm(a["x"], a["w"], a["eps"], out=a["y"])
    if op == "add_rmsnorm":
        return lambda: ops.add_rmsnorm(a["x"], a["residual"], a["w"], a["eps"], out=a["y"])
    if op == "qk_rmsnorm":
        return lambda: ops.qk_rmsnorm(a["q"], a["k"], a["q_weight"], a["k_weight"], a["eps"],
                                      out_q=a["out_q"], out_k=a["out_k"])
    if op == "gated_rmsnorm":
        return lambda: ops.gated_rmsnorm(a["o"], a["z"], a["w"], a["eps"], out=a["y"])
    return lambda: ops.smoke_copy(a["src"], out=a["dst"])


@pytest.fixture
def fake_bound(monkeypatch):
    """Bind an op to a guard-and-launch with a fake launch on device -1 (CPU tensors)."""
    def install(op: str):
        k = ops.OPS[op]
        fake = FakeLaunch(k.contract)
        fn = make_guard_and_launch(k.contract, function_handle=HANDLE, device=-1, launch=fake, stream=lambda d: STREAM)
        monkeypatch.setattr(k, "_launch", fn)
        monkeypatch.setattr(k, "go", fn)
        k.misses.clear()
        return k, fn, fake

    yield install
    ops.reset_stats()


@pytest.mark.parametrize("op", list(OP_ARGS))
def test_public_op_takes_kernel_path_when_guard_passes(op, fake_bound):
    k, fn, fake = fake_bound(op)
    assert k.contract.name == OP_ARGS[op]
    gen = torch.Generator().manual_seed(20)
    c = k.contract
    a = valid_args(c.name, 1024 if op == "smoke_copy" else 3, gen)
    outs = [t.name for t in c.tensors if t.role != "in"]
    for o in outs:
        a[o].fill_(float("nan"))
    _public_call(op, a)()
    assert len(fake.calls) == 1
    assert fake.calls[0]["seen"] == expected_struct(c, a, {next(iter(c.dims)): a[c.tensors[0].name].shape[0]})
    # the (fake) kernel ran, not the framework path: outputs and the inout are untouched
    for o in outs:
        assert torch.isnan(a[o].float()).all(), o
    assert dict(k.misses) == {}


@pytest.mark.parametrize("op", list(OP_ARGS))
def test_public_op_miss_takes_framework_path(op, fake_bound):
    k, fn, fake = fake_bound(op)
    gen = torch.Generator().manual_seed(21)
    c = k.contract
    if op == "smoke_copy":
        a = valid_args(c.name, 1002, gen)  # outside the contract
        reason = f"{next(iter(c.dims))} outside the contract"
    else:  # every M is taken (rows(): chunks of 16), so miss on the dtype: a float32 input
        a = valid_args(c.name, 4, gen)
        first = next(t.name for t in c.tensors if t.role == "in")
        a[first] = a[first].float()
        reason = None
    _public_call(op, a)()
    assert fake.calls == []
    assert sum(k.misses.values()) == 1 and (reason is None or dict(k.misses) == {reason: 1}), dict(k.misses)
    out = next(t.name for t in c.tensors if t.role == "out")
    assert torch.isfinite(a[out].float()).all()


@pytest.mark.parametrize("op", [op for op in OP_ARGS if op != "smoke_copy"])
def test_public_op_takes_more_rows_than_the_contract_as_chunks(op, fake_bound):
    """M = 37 above the contract's largest M (16, or 32): launches of 16, 16 and 5 rows (32 and 5), each its own
    guard call and grid, no miss, no framework path (its outputs stay NaN: the fake launch writes nothing)."""
    k, fn, fake = fake_bound(op)
    c = k.contract
    top = max(c.dims["M"])
    a = valid_args(c.name, 37, torch.Generator().manual_seed(23))
    for t in c.tensors:
        if t.role == "out":
            a[t.name].fill_(float("nan"))
    _public_call(op, a)()
    assert dict(k.misses) == {}
    assert [call["grid"] for call in fake.calls] == [c.grid_for({"M": m}) for m in ((16, 16, 5) if top == 16 else (32, 5))]
    out = next(t.name for t in c.tensors if t.role == "out")
    assert torch.isnan(a[out].float()).all()
    # rows that disagree between tensors: no chunk launches (16 rows of each would pass a guard)
    fake.calls.clear()
    a[out] = a[out][:20]
    with pytest.raises(ValueError, match="expected shape"):
        _public_call(op, a)()
    assert fake.calls == [] and sum(k.misses.values()) == 1


@pytest.mark.parametrize("op", list(OP_ARGS))
def test_public_op_dispatch_hygiene(op, fake_bound):
    k, fn, fake = fake_bound(op)
    gen = torch.Generator().manual_seed(22)
    a = valid_args(k.contract.name, 1024 if op == "smoke_copy" else 4, gen)
    thunk = _public_call(op, a)
    thunk()  # first call: nothing left to bind
    fake.calls.clear()
    _, events = _trace(thunk)
    assert len(fake.calls) == 1
    assert _forbidden(events) == []
    assert dict(k.misses) == {}


@pytest.mark.parametrize("dims,allowed", [((0, 0, 0), False), ((8, 1, 1), False), ((16, 1, 1), True), ((4, 4, 1), True)])
def test_loader_allows_non_portable_clusters_only_above_8(monkeypatch, dims, allowed):
    """loader.allow_cluster_size: a compiled-in cluster of more than 8 CTAs gets the driver's
    non-portable attribute (else its launch fails); 8 or fewer, or none, are left alone. (Driver
    faked: no GPU here.)"""
    from types import SimpleNamespace

    from netra.runtime import loader

    A = loader.cu.CUfunction_attribute
    attrs = {A.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: dims[0], A.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT: dims[1],
             A.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: dims[2]}
    ok = loader.cu.CUresult.CUDA_SUCCESS
    set_calls = []
    fake = SimpleNamespace(CUfunction_attribute=A, CUresult=loader.cu.CUresult,
                           cuFuncGetAttribute=lambda a, f: (ok, attrs[a]),
                           cuFuncSetAttribute=lambda f, a, v: set_calls.append((a, v)) or (ok,))
    monkeypatch.setattr(loader, "cu", fake)
    size = loader.allow_cluster_size(object(), "k")
    assert size == (0 if dims[0] == 0 else dims[0] * dims[1] * dims[2])
    assert set_calls == ([(A.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)] if allowed else [])


def _spin_args(B: int, gen: torch.Generator) -> dict:
    """gdn_decode_b32_spin's arguments as the decode runner passes them: qkv and z the column ranges of qkvz rows."""
    c = contracts.get("gdn_decode_b32_spin")
    dims = {"B": B, "P": B + 1}
    args = {}
    for p in c.params:
        if isinstance(p, Tensor):
            dtype = getattr(torch, DTYPES[p.dtype][0])
            shape = c.shape_of(p, dims)
            args[p.name] = (torch.zeros(shape, dtype=dtype) if p.name == "slots"
                            else torch.randn(shape, generator=gen).to(dtype))
        elif p.value is None:
            args[p.name] = EPS
    qkvz = torch.randn(B, 12288, generator=gen).bfloat16()
    args["qkv"], args["z"] = qkvz[:, :8192], qkvz[:, 8192:]
    return args


@pytest.mark.parametrize("B", [1, 2, 32])
def test_spin_guard_takes_qkv_and_z_as_column_ranges_of_one_row(B):
    """Contract.row_views: the spin build writes qkv and z (TAG), so their spans are checked for overlap; as the two
    column ranges of the runner's qkvz rows they overlap as spans from 2 rows on and must still launch; z starting
    inside qkv's columns, or rows of another pitch, do not."""
    gen = torch.Generator().manual_seed(9)
    c, fn, fake, _ = make("gdn_decode_b32_spin")
    args = _spin_args(B, gen)
    assert call(fn, c, args) is None and len(fake.calls) == 1
    qkvz = torch.randn(B, 12288, generator=gen).bfloat16()
    args["qkv"], args["z"] = qkvz[:, :8192], qkvz[:, 8192:]  # z first in the rows: swapped ranges still disjoint
    args["qkv"], args["z"] = qkvz[:, 4096:], qkvz[:, :4096]
    assert call(fn, c, args) is None and len(fake.calls) == 2
    if B > 1:
        wide = torch.randn(B * 12296 + 4096, generator=gen).bfloat16()
        args["qkv"] = wide.as_strided((B, 8192), (12288, 1))
        args["z"] = wide.as_strided((B, 4096), (12288, 1), 8184)  # its first columns are qkv's last
        c, fn, fake, _ = make("gdn_decode_b32_spin")
        _assert_miss(fn, fake, c, args, "qkv overlaps z")
        args["z"] = wide.as_strided((B, 4096), (12296, 1), 8192)  # disjoint in row 0, a pitch of its own
        c, fn, fake, _ = make("gdn_decode_b32_spin")
        _assert_miss(fn, fake, c, args, "qkv overlaps z")
