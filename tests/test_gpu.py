"""GPU tests: the runtime path end to end on the H200. Skipped, with the reason, elsewhere."""

import contextlib
import sys

import pytest
import torch

import netra.ops as ops
from netra import contracts
from netra.lifecycle import metrics
from netra.reference import norm as ref
from netra.runtime import launch as rt_launch
from netra.runtime import loader

pytestmark = pytest.mark.gpu
EPS = 1e-6


def _misses(op):
    return sum(ops.stats()[op]["misses"].values())


@contextlib.contextmanager
def _pdl(pdl: bool, reset: bool = True):
    """The block's ops launched with (or without) programmatic serialization, counters reset first (``reset``),
    synchronized at the end; PDL off again whatever happens."""
    if reset:
        ops.reset_stats()
    ops.set_pdl(pdl)
    try:
        yield
        torch.cuda.synchronize()
    finally:
        ops.set_pdl(False)


def _cache_restorer(i: dict, out: torch.Tensor):
    """The attention tests' state before each launch: the cache pages as made, out NaN-poisoned."""
    kp0, vp0 = i["k_pages"].clone(), i["v_pages"].clone()

    def restore():
        i["k_pages"].copy_(kp0)
        i["v_pages"].copy_(vp0)
        out.fill_(float("nan"))

    return restore, kp0, vp0


def _graph_and_pdl_same_bits(launch, restore, out: torch.Tensor, k_pages: torch.Tensor, want, counters=None):
    """launch() replayed from a CUDA graph, then launched with PDL and without, each from restore()'s state: out and
    k_pages bitwise ``want`` (out, k_pages), the arrival counters (if given) left zero."""
    restore()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        launch()
    restore()
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want[0]) and torch.equal(k_pages, want[1])
    for pdl in (True, False):
        restore()
        with _pdl(pdl):  # the guard rebound with (or without) the PDL launcher
            launch()
        assert torch.equal(out, want[0]) and (counters is None or not counters.any())


def test_smoke_copy_whole_path_eager_and_graph():
    ops.prepare()
    src = torch.randn(4096, device="cuda")
    out = torch.full_like(src, float("nan"))
    before = _misses("smoke_copy")
    assert ops.smoke_copy(src, out=out) is out
    torch.cuda.synchronize()
    assert torch.equal(out, src)
    assert _misses("smoke_copy") == before, "the smoke kernel did not run"
    # Graph capture, then new data in the same buffers, then replay.
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ops.smoke_copy(src, out=out)
    src.normal_()
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, src)
    # On a side stream: the launch follows the caller's current stream.
    s = torch.cuda.Stream()
    out.fill_(float("nan"))
    with torch.cuda.stream(s):
        ops.smoke_copy(src, out=out)
    s.synchronize()
    assert torch.equal(out, src)


def test_loader_checks_params_and_hash():
    k = loader.load("rmsnorm_h2048", 0)
    assert k.handle != 0 and len(k.cubin_sha256) == 64
    layout = loader.param_layout(k.function, len(k.contract.params))
    assert [size for _, size in layout] == [8, 8, 8, 4]
    assert loader.load("rmsnorm_h2048", 0) is k  # loaded once per process


def test_launch_error_names_kernel():
    k = loader.load("empty_kernel", 0)
    go = rt_launch.raw_launcher(k)
    with pytest.raises(rt_launch.LaunchError, match="empty_kernel.*CUDA_ERROR_INVALID_VALUE"):
        go((1, 1, 1), (2048, 1, 1))  # more threads than a block may have


def test_dispatch_path_allocates_syncs_and_looks_up_nothing():
    ops.prepare()
    x = torch.randn(4, 2048, device="cuda").bfloat16()
    w = torch.randn(2048, device="cuda").bfloat16()
    y = torch.empty_like(x)
    ops.rmsnorm(x, w, EPS, out=y)  # warm
    torch.cuda.synchronize()
    allocs = torch.cuda.memory_stats()["allocation.all.allocated"]
    seen = []

    def prof(frame, event, arg):
        if event in ("c_call",):
            seen.append(f"{getattr(arg, '__module__', '')}.{getattr(arg, '__qualname__', getattr(arg, '__name__', '?'))}")
        elif event == "call":
            seen.append(f"{frame.f_globals.get('__name__')}.{frame.f_code.co_name}")

    sys.setprofile(prof)
    try:
        for _ in range(10):
            ops.rmsnorm(x, w, EPS, out=y)
    finally:
        sys.setprofile(None)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == allocs, "the dispatch path allocated device memory"
    bad = [s for s in seen if any(b in s for b in (
        "synchronize", "empty", "zeros", "open", "getenv", "environ", "cuModule", "cuGetProcAddress", "stat", "read_text"))]
    assert not bad, f"forbidden calls on the dispatch path: {sorted(set(bad))}"
    assert _misses("rmsnorm") == 0 or "switched off" not in ops.stats()["rmsnorm"]["misses"]


@pytest.mark.parametrize("M", [1, 5, 16])
def test_norm_ops_kernel_path_matches_reference(M):
    g = torch.Generator().manual_seed(M)
    x = (torch.randn(M, 2048, generator=g) * 3).bfloat16().cuda()
    h = (torch.randn(M, 2048, generator=g) * 3).bfloat16().cuda()
    w = (0.1 * torch.randn(2048, generator=g)).bfloat16().cuda()
    ops.reset_stats()
    y = torch.full_like(x, float("nan"))
    ops.rmsnorm(x, w, EPS, out=y)
    assert metrics.rel_err(y, ref.rmsnorm(x, w, EPS)) <= contracts.get("rmsnorm_h2048").tolerance
    h0 = h.clone()
    y.fill_(float("nan"))
    ops.add_rmsnorm(x, h, w, EPS, out=y)
    h_ref, y_ref = ref.add_rmsnorm(x, h0, w, EPS)
    assert metrics.rel_err(h, h_ref) <= 4.5e-3 and metrics.rel_err(y, y_ref) <= contracts.get("add_rmsnorm_h2048").tolerance
    qkv = torch.randn(M, 9216, generator=g).bfloat16().cuda()
    q = qkv[:, :8192].view(M, 16, 512)[:, :, :256]
    k = qkv[:, 8192:8704].view(M, 2, 256)
    wq, wk = w[:256].contiguous(), w[256:512].contiguous()
    oq, ok = ops.qk_rmsnorm(q, k, wq, wk, EPS)
    rq, rk = ref.qk_rmsnorm(q, k, wq, wk, EPS)
    assert metrics.rel_err(oq, rq) <= 4.5e-3 and metrics.rel_err(ok, rk) <= 4.5e-3
    o = (0.05 * torch.randn(M, 4096, generator=g)).bfloat16().cuda()
    z = (2 * torch.randn(M, 4096, generator=g)).bfloat16().cuda()
    wg = (1 + 0.2 * torch.randn(128, generator=g)).bfloat16().cuda()
    yg = ops.gated_rmsnorm(o, z, wg, EPS)
    assert metrics.rel_err(yg, ref.gated_rmsnorm(o, z, wg, EPS)) <= 4.5e-3
    misses = {k: v["misses"] for k, v in ops.stats().items() if v["misses"]}
    assert not misses, f"contract shapes fell back: {misses}"


def test_bad_input_takes_framework_path_or_raises():
    x = torch.randn(4, 2048, device="cuda").bfloat16()
    w = (0.1 * torch.randn(2048, device="cuda")).bfloat16()
    ops.reset_stats()
    cases = {
        "dtype": (x.float(), w.float()),
        "hidden 1024": (torch.randn(4, 1024, device="cuda").bfloat16(), w[:1024].clone()),  # (M = 17 now goes as 16 + 1)
        "non-contiguous": (torch.randn(2048, 4, device="cuda").bfloat16().t(), w),
        "misaligned": (torch.randn(4 * 2048 + 1, device="cuda").bfloat16()[1:].view(4, 2048), w),
        "cpu": (x.cpu(), w.cpu()),
    }
    for what, (xi, wi) in cases.items():
        y = ops.rmsnorm(xi, wi, EPS)
        assert metrics.rel_err(y, ref.rmsnorm(xi, wi, EPS)) <= 8e-3, what
    assert sum(ops.stats()["rmsnorm"]["misses"].values()) == len(cases)
    # Aliasing: out == x is computed correctly by the framework path.
    x2 = x.clone()
    ops.rmsnorm(x2, w, EPS, out=x2)
    assert metrics.rel_err(x2, ref.rmsnorm(x, w, EPS)) <= 4.5e-3
    # out overlapping residual has no single meaning: a clear error.
    h = x.clone()
    with pytest.raises(ValueError, match="overlaps"):
        ops.add_rmsnorm(x, h, w, EPS, out=h)


def test_switch_forces_framework_path():
    x = torch.randn(2, 2048, device="cuda").bfloat16()
    w = torch.zeros(2048, device="cuda").bfloat16()
    ops.reset_stats()
    ops.set_framework("rmsnorm", True)
    try:
        ops.rmsnorm(x, w, EPS)
    finally:
        ops.set_framework("rmsnorm", False)
    assert ops.stats()["rmsnorm"]["misses"] == {"switched off": 1}
    ops.rmsnorm(x, w, EPS)
    assert ops.stats()["rmsnorm"]["misses"] == {"switched off": 1}


@pytest.mark.parametrize("M", [1, 9, 16])
def test_fp8_linear_op_runs_the_projection_kernels(M):
    """netra::fp8_linear on packed weights takes the kernel at every projection shape (no
    misses) and matches float64; M > 16 goes as launches of 16 and 1 (no miss)."""
    from netra.contracts.proj import SHAPES
    from netra.decode import ops as dops
    from netra.model import checkpoint as ck
    from netra.ops import proj
    from netra.reference.proj import fp8_linear as ref_linear

    g = torch.Generator().manual_seed(M)
    ops.reset_stats()
    for sh in SHAPES:
        q, s = ck.quantize((torch.randn(sh.N, sh.K, generator=g) * 0.02).cuda())
        x = torch.randn(M, sh.K, generator=g).to(torch.bfloat16).cuda()
        out = torch.full((M, sh.N), float("nan"), dtype=torch.bfloat16, device="cuda")
        torch.ops.netra.fp8_linear(x, proj.pack_weight(q), s, out)
        want = ref_linear(x, q, s)
        assert metrics.rel_err(out, want) <= contracts.get(sh.name).tolerance, sh.name
        assert _misses(sh.name) == 0, ops.stats()[sh.name]
    big = torch.randn(17, 512, generator=g).to(torch.bfloat16).cuda()
    q, s = ck.quantize((torch.randn(2048, 512, generator=g) * 0.02).cuda())
    out = torch.empty(17, 2048, dtype=torch.bfloat16, device="cuda")
    out.fill_(float("nan"))
    dops.fp8_linear(big, proj.pack_weight(q), s, out)
    assert _misses("fp8_gemv_n2048_k512") == 0, ops.stats()["fp8_gemv_n2048_k512"]
    assert metrics.rel_err(out, ref_linear(big, q, s)) <= contracts.get("fp8_gemv_n2048_k512").tolerance


@pytest.mark.parametrize("M", [1, 5, 8, 9, 16])
def test_fused_projections_are_bitwise_the_unfused_kernels(M):
    """fp8_linear_norm's kernels give bitwise rmsnorm_h2048 then the plain kernel (x_out too),
    fp8_linear_gate's bitwise the plain kernel (and the gate within tolerance of float64),
    and fp8_linear_add's gives bitwise the plain kernel (its out) then the BF16 add, at M across both
    bodies (M <= 8, M > 8); each launch took the fused kernel (no miss), except the norm
    kernels at M > 8, outside their contract, where the op runs the two kernels."""
    from netra.contracts.proj import FUSED
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds

    ops.reset_stats()
    for sh in FUSED:
        i = testbeds.get(sh.name).make({"M": M}, torch.Generator().manual_seed(100 + M), "cuda")
        if sh.fuse == "norm":
            out = torch.full((M, sh.N), float("nan"), dtype=torch.bfloat16, device="cuda")
            x = torch.full((M, sh.K), float("nan"), dtype=torch.bfloat16, device="cuda")
            dops.fp8_linear_norm(i["h"], i["norm_w"], EPS, i["w"], i["scale"], out, x)
            x_ref = ops.rmsnorm(i["h"], i["norm_w"], EPS)
            out_ref = torch.empty_like(out)
            dops.fp8_linear(x_ref, i["w"], i["scale"], out_ref)
            torch.cuda.synchronize()
            assert torch.equal(x, x_ref), sh.name
            assert torch.equal(out, out_ref), sh.name
        elif sh.fuse == "gate":
            out = torch.full((M, sh.N), float("nan"), dtype=torch.bfloat16, device="cuda")
            g = torch.full((M, 1), float("nan"), dtype=torch.bfloat16, device="cuda")
            dops.fp8_linear_gate(i["x"], i["w"], i["scale"], i["gate_w"], out, g)
            out_ref = torch.empty_like(out)
            dops.fp8_linear(i["x"], i["w"], i["scale"], out_ref)
            torch.cuda.synchronize()
            assert torch.equal(out, out_ref), sh.name
            want = i["x"].double() @ i["gate_w"].double().T
            assert metrics.rel_err(g, want) <= contracts.get(sh.name).tolerance, sh.name
        else:
            h0 = i["h"].clone()
            prod = torch.full_like(h0, float("nan"))
            dops.fp8_linear_add(i["x"], i["w"], i["scale"], i["h"], prod)
            y = torch.empty_like(h0)
            dops.fp8_linear(i["x"], i["w"], i["scale"], y)
            torch.cuda.synchronize()
            assert torch.equal(prod, y), sh.name
            assert torch.equal(i["h"], h0 + y), sh.name
        if sh.fuse == "norm" and M > 8:
            assert "M outside the contract" in str(ops.stats()[sh.name]["misses"])
        else:
            assert _misses(sh.name) == 0, ops.stats()[sh.name]


@pytest.mark.parametrize("M", [1, 2, 5, 8, 9])
def test_norm_ba_is_bitwise_the_norm_kernel_then_the_ba_kernel(M):
    """fp8_linear_norm_ba (one launch: the 12288 x 2048 norm kernel and 4 CTAs of b | a) gives bitwise what
    fp8_linear_norm then bf16_linear2 give (their own kernels), NaN-poisoned outputs, plainly and under
    set_pdl; M > 8 (outside its contract) takes those two ops."""
    from netra.contracts.proj import NORM_BA
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds

    i = testbeds.get(NORM_BA.name).make({"M": M}, torch.Generator().manual_seed(200 + M), "cuda")
    nan = lambda *shape: torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")  # noqa: E731
    want = [nan(M, NORM_BA.N), nan(M, 2048), nan(M, 32), nan(M, 32)]
    dops.fp8_linear_norm(i["h"], i["norm_w"], EPS, i["w"], i["scale"], want[0], want[1])
    dops.bf16_linear2(want[1], i["w_b"], i["w_a"], want[2], want[3])
    for pdl in (False, True):
        with _pdl(pdl):
            got = [nan(M, NORM_BA.N), nan(M, 2048), nan(M, 32), nan(M, 32)]
            dops.fp8_linear_norm_ba(i["h"], i["norm_w"], EPS, i["w"], i["scale"], got[0], got[1], i["w_b"], i["w_a"],
                                    got[2], got[3])
        assert all(torch.equal(a, b) for a, b in zip(got, want)), (M, pdl)
        if M <= 8:
            assert _misses(NORM_BA.name) == 0, ops.stats()[NORM_BA.name]


@pytest.mark.parametrize("tokens,M", [(16, 1), (16, 8), (16, 9), (16, 16), (32, 1), (32, 16), (32, 17), (32, 24), (32, 32)])
def test_plain_ba_is_bitwise_the_ba_kernel_and_the_in_proj_kernel(tokens, M):
    """fp8_gemv_n12288_k2048_ba / _ba_t32 (one launch: the 16- / 32-token in_proj_qkv | z and 4 CTAs of b | a in
    rounds of 8 / 16 tokens) give bitwise what bf16_gemv_n64_k2048 and the in_proj's build for the same tokens give,
    NaN-poisoned outputs, plainly and under set_pdl, no miss; the op (fp8_linear_ba) at 9..32 rows, where it picks the
    build as fp8_linear does, the build itself at the others."""
    from netra.contracts.proj import PLAIN_BA
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.ops import proj as kproj

    ba = next(s for s in PLAIN_BA if s.tokens == tokens)
    i = testbeds.get(ba.name).make({"M": M}, torch.Generator().manual_seed(300 + M), "cuda")
    nan = lambda *shape: torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")  # noqa: E731
    want = [nan(M, ba.N), nan(M, 32), nan(M, 32)]
    assert (kproj.KERNELS32 if tokens == 32 else kproj.KERNELS)[(ba.S, ba.KB)](i["x"], i["w"], i["scale"], want[0])
    dops.bf16_linear2(i["x"], i["w_b"], i["w_a"], want[1], want[2])
    for pdl in (False, True):
        with _pdl(pdl):
            got = [nan(M, ba.N), nan(M, 32), nan(M, 32)]
            args = (i["x"], i["w"], i["scale"], got[0], i["w_b"], i["w_a"], got[1], got[2])
            if 8 < M and (M > dops.DENSE32_ROWS) == (tokens == 32):
                dops.fp8_linear_ba(*args)
            else:
                assert kproj.fp8_linear_ba(*args, tokens)
        assert all(torch.equal(a, b) for a, b in zip(got, want)), (M, pdl)
        assert _misses(ba.name) == 0, ops.stats()[ba.name]


@pytest.mark.parametrize("M", [1, 3, 8, 9, 16])
def test_experts_shared_is_the_experts_kernel_and_the_shared_gate_up(M):
    """fp8_linear_experts_shared (one launch): the routed pairs bitwise fp8_linear_experts' kernel, the shared
    expert's rows and the gate logit within tolerance of float64 (the unsplit order, not the k-split kernel's),
    NaN-poisoned outputs, plainly and under set_pdl, no miss; a bad id gives a NaN row for its pair only."""
    from netra.contracts.proj import EXPERTS_SHARED, EXPERTS_SHARED_GROUP
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds

    tb = testbeds.get(EXPERTS_SHARED.name)
    i = tb.make({"M": M, "E": 256}, torch.Generator().manual_seed(300 + M), "cuda")
    ids = i["ids"].clone()
    ids[0, 3] = 256  # not an expert (the shared expert's index in the kernel): NaN for that pair only
    nan = lambda *shape: torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")  # noqa: E731
    want = nan(M, 8, 1024)
    dops.fp8_linear_experts(i["x"], i["w"], i["scale"], ids, want)
    ref = tb.reference(i)
    tol = contracts.get(EXPERTS_SHARED.name).tolerance
    for pdl in (False, True):
        with _pdl(pdl):
            out, sout, g = nan(M, 8, 1024), nan(M, 1024), nan(M, 1)
            dops.fp8_linear_experts_shared(i["x"], i["w"], i["scale"], ids, i["ws"], i["ss"], i["gate_w"], out, sout, g)
        assert torch.equal(out.view(torch.uint16), want.view(torch.uint16)), (M, pdl)
        assert out[0, 3].isnan().all() and not out[0, 2].isnan().any()
        assert metrics.rel_err(sout, ref["sout"]) <= tol and metrics.rel_err(g, ref["gate_out"]) <= tol, (M, pdl)
        used = EXPERTS_SHARED_GROUP.name if M >= dops.EXPERTS_GROUP_ROWS else EXPERTS_SHARED.name
        assert _misses(used) == 0, ops.stats()[used]


def _id_cases(ids, row: int) -> tuple:
    """The grouped kernels' id cases: the drawn ids; the same with row's sixth expert repeating its third (both slots
    written) and the last token's first id E (not an expert: a NaN row for that pair only); every token on token 0's
    experts."""
    planted = ids.clone()
    planted[row, 5] = planted[row, 2]
    planted[-1, 0] = 256
    return ids, planted, ids[:1].repeat(ids.shape[0], 1)


@pytest.mark.parametrize("M", [2, 5, 9, 16])
def test_experts_group_is_the_per_pair_kernel(M):
    """fp8_gemv_n1024_k2048_moe_grp (each distinct expert once): bitwise the per-pair kernel on the same inputs, with
    the drawn ids, a token repeating an expert (both slots written), an id of E (a NaN row for that pair only) and
    every token on one token's experts; plainly and under set_pdl; fp8_linear_experts takes it from
    EXPERTS_GROUP_ROWS rows with no miss."""
    from netra.contracts.proj import EXPERTS, EXPERTS_GROUP
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.runtime import launch, loader

    tb = testbeds.get(EXPERTS[0].name)
    i = tb.make({"M": M, "E": 256}, torch.Generator().manual_seed(700 + M), "cuda")
    per_pair = launch.make_guard_and_launch(tb.contract, function_handle=loader.load(EXPERTS[0].name, 0).handle, device=0)
    group = launch.make_guard_and_launch(contracts.get(EXPERTS_GROUP.name),
                                         function_handle=loader.load(EXPERTS_GROUP.name, 0).handle, device=0)
    cases = _id_cases(i["ids"], 1)
    planted = cases[1]
    for ids in cases:
        outs = []
        for go in (per_pair, group):
            out = torch.full((M, 8, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
            assert go(i["x"], i["w"], i["scale"], out, ids) is None
            torch.cuda.synchronize()
            outs.append(out)
        assert torch.equal(outs[0].view(torch.uint16), outs[1].view(torch.uint16)), M
    assert outs[0].isnan().sum() == 0  # every token on valid experts: every row written
    from netra.ops import _dispatch

    for pdl in (False, True):
        with _pdl(pdl), _dispatch.count_launches() as counts:
            out = torch.full((M, 8, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
            dops.fp8_linear_experts(i["x"], i["w"], i["scale"], planted, out)
        used = EXPERTS_GROUP.name if M >= dops.EXPERTS_GROUP_ROWS else EXPERTS[0].name
        assert _misses(used) == 0 and counts[used] == 1, (dict(counts), ops.stats()[used])
        assert out[M - 1, 0].isnan().all() and not out[M - 1, 1].isnan().any()
        assert torch.equal(out[1, 5].view(torch.uint16), out[1, 2].view(torch.uint16))


@pytest.mark.parametrize("M", [1, 5, 9, 16])
def test_experts_shared_group_is_the_merged_kernel(M):
    """fp8_gemv_n1024_k2048_moe_shared_grp (the grouped gate | up with the shared expert as distinct expert 0):
    out, sout and gate_out bitwise fp8_gemv_n1024_k2048_moe_shared's (the shared expert as M more pairs) on the same
    inputs, NaN-poisoned, with the drawn ids, a token repeating an expert, an id of E (a NaN row for that pair only) and
    every token on one token's experts; plainly and under set_pdl; fp8_linear_experts_shared takes it from
    EXPERTS_GROUP_ROWS rows with no miss, and sout is within tolerance of float64."""
    from netra.contracts.proj import EXPERTS_SHARED, EXPERTS_SHARED_GROUP
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.ops import _dispatch
    from netra.runtime import launch, loader

    tb = testbeds.get(EXPERTS_SHARED_GROUP.name)
    i = tb.make({"M": M, "E": 256}, torch.Generator().manual_seed(760 + M), "cuda")
    merged, group = (launch.make_guard_and_launch(contracts.get(n), function_handle=loader.load(n, 0).handle, device=0)
                     for n in (EXPERTS_SHARED.name, EXPERTS_SHARED_GROUP.name))
    nan = lambda *shape: torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")  # noqa: E731
    cases = _id_cases(i["ids"], 0)
    planted = cases[1]
    for ids in cases:
        outs = []
        for go in (merged, group):
            o = (nan(M, 8, 1024), nan(M, 1024), nan(M, 1))
            assert go(i["x"], i["w"], i["scale"], o[0], ids, i["ws"], i["ss"], o[1], i["gate_w"], o[2]) is None
            torch.cuda.synchronize()
            outs.append(o)
        assert all(torch.equal(a.view(torch.uint16), b.view(torch.uint16)) for a, b in zip(*outs)), M
    assert not outs[1][1].isnan().any() and not outs[1][2].isnan().any()
    ref = tb.reference(i)
    assert metrics.rel_err(outs[1][1], ref["sout"]) <= tb.contract.tolerance
    for pdl in (False, True):
        with _pdl(pdl), _dispatch.count_launches() as counts:
            out, sout, g = nan(M, 8, 1024), nan(M, 1024), nan(M, 1)
            dops.fp8_linear_experts_shared(i["x"], i["w"], i["scale"], planted, i["ws"], i["ss"], i["gate_w"], out, sout, g)
        used = EXPERTS_SHARED_GROUP.name if M >= dops.EXPERTS_GROUP_ROWS else EXPERTS_SHARED.name
        assert _misses(used) == 0 and counts[used] == 1, (dict(counts), ops.stats()[used])
        assert out[M - 1, 0].isnan().all() and not out[M - 1, 1].isnan().any() and not sout.isnan().any()
        assert torch.equal(out[0, 5].view(torch.uint16), out[0, 2].view(torch.uint16))


@pytest.mark.parametrize("M", [17, 25, 32])
def test_experts_shared_group32_is_the_16_token_builds(M):
    """fp8_gemv_n1024_k2048_moe_shared_grp_t32: out bitwise fp8_gemv_n1024_k2048_moe_grp_t32's, sout and gate_out
    bitwise fp8_gemv_n1024_k2048_moe_shared_grp's on chunks of 16 rows (neither depends on the ids), NaN-poisoned, with
    a repeated expert and an id of E; fp8_linear_experts_shared takes it above EXPERTS_GROUP32_ROWS rows with no miss,
    plainly and under set_pdl."""
    from netra.contracts.proj import EXPERTS_GROUP32, EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.ops import _dispatch
    from netra.runtime import launch, loader

    tb = testbeds.get(EXPERTS_SHARED_GROUP32.name)
    i = tb.make({"M": M, "E": 256}, torch.Generator().manual_seed(880 + M), "cuda")
    r32, s16, s32 = (launch.make_guard_and_launch(contracts.get(n), function_handle=loader.load(n, 0).handle, device=0)
                     for n in (EXPERTS_GROUP32.name, EXPERTS_SHARED_GROUP.name, EXPERTS_SHARED_GROUP32.name))
    nan = lambda *shape: torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")  # noqa: E731
    ids = i["ids"].clone()
    ids[M - 1, 5] = ids[M - 1, 2]
    ids[0, 0] = 256
    want = (nan(M, 8, 1024), nan(M, 1024), nan(M, 1))
    assert r32(i["x"], i["w"], i["scale"], want[0], ids) is None
    for lo in range(0, M, 16):
        s_ = slice(lo, min(M, lo + 16))
        scratch = nan(s_.stop - lo, 8, 1024)
        assert s16(i["x"][s_], i["w"], i["scale"], scratch, ids[s_], i["ws"], i["ss"], want[1][s_], i["gate_w"],
                   want[2][s_]) is None
    got = (nan(M, 8, 1024), nan(M, 1024), nan(M, 1))
    assert s32(i["x"], i["w"], i["scale"], got[0], ids, i["ws"], i["ss"], got[1], i["gate_w"], got[2]) is None
    torch.cuda.synchronize()
    assert all(torch.equal(a.view(torch.uint16), b.view(torch.uint16)) for a, b in zip(got, want)), M
    assert got[0][0, 0].isnan().all() and not got[1].isnan().any() and not got[2].isnan().any()
    for pdl in (False, True):
        with _pdl(pdl), _dispatch.count_launches() as counts:
            o = (nan(M, 8, 1024), nan(M, 1024), nan(M, 1))
            dops.fp8_linear_experts_shared(i["x"], i["w"], i["scale"], ids, i["ws"], i["ss"], i["gate_w"], *o)
        assert _misses(EXPERTS_SHARED_GROUP32.name) == 0 and counts[EXPERTS_SHARED_GROUP32.name] == 1, dict(counts)
        assert all(torch.equal(a.view(torch.uint16), b.view(torch.uint16)) for a, b in zip(o, want)), (M, pdl)


@pytest.mark.parametrize("M", [17, 32])
def test_dense32_is_the_16_token_kernels(M):
    """The 32-token dense builds (12288 and 9216 x 2048): fp8_linear above DENSE32_ROWS rows launches them once, with
    no miss, plainly and under set_pdl, bitwise the 16-token kernel on chunks of 16 rows; within tolerance of float64."""
    from netra.contracts.proj import DENSE32, Fp8Gemv
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.ops import _dispatch
    from netra.runtime import launch, loader

    for sh in DENSE32:
        tb = testbeds.get(sh.name)
        i = tb.make({"M": M}, torch.Generator().manual_seed(850 + M), "cuda")
        name16 = Fp8Gemv(sh.N, sh.K, sh.use).name
        g16 = launch.make_guard_and_launch(contracts.get(name16), function_handle=loader.load(name16, 0).handle, device=0)
        want = torch.full((M, sh.N), float("nan"), dtype=torch.bfloat16, device="cuda")
        for lo in range(0, M, 16):
            s = slice(lo, min(M, lo + 16))
            assert g16(i["x"][s], i["w"], i["scale"], want[s]) is None
        for pdl in (False, True):
            with _pdl(pdl), _dispatch.count_launches() as counts:
                out = torch.full((M, sh.N), float("nan"), dtype=torch.bfloat16, device="cuda")
                dops.fp8_linear(i["x"], i["w"], i["scale"], out)
            assert counts[sh.name] == 1 and _misses(sh.name) == 0, dict(counts)
            assert torch.equal(out.view(torch.uint16), want.view(torch.uint16)), (sh.name, M, pdl)
        assert metrics.rel_err(out, tb.reference(i)["out"]) <= tb.contract.tolerance


@pytest.mark.parametrize("M", [17, 24, 25, 32])
def test_res_p2_is_the_16_row_build(M):
    """fp8_gemv_n2048_k4096_res_p2 (two passes over each CTA's strip; the runner's above 16 rows until RES32, now its
    bench peer), launched by its op entry plainly and with PDL: h and out bitwise the 16-row residual build on chunks of
    16 rows (pass 2 by the M <= 8 body copy at 17 and 24, the M > 8 one at 25 and 32); within tolerance of float64."""
    from netra.contracts.proj import FUSED, RES_P2
    from netra.lifecycle import testbeds
    from netra.ops import proj
    from netra.runtime import launch, loader

    sh = RES_P2
    (one,) = [s for s in FUSED if s.fuse == "res"]
    tb = testbeds.get(sh.name)
    i = tb.make({"M": M}, torch.Generator().manual_seed(870 + M), "cuda")
    g16 = launch.make_guard_and_launch(contracts.get(one.name), function_handle=loader.load(one.name, 0).handle, device=0)
    want_h, want = i["h"].clone(), torch.full((M, sh.N), float("nan"), dtype=torch.bfloat16, device="cuda")
    for lo in range(0, M, 16):
        s = slice(lo, min(M, lo + 16))
        assert g16(i["x"][s], i["w"], i["scale"], want_h[s], want[s]) is None
    for pdl in (False, True):
        with _pdl(pdl):
            h, out = i["h"].clone(), torch.full((M, sh.N), float("nan"), dtype=torch.bfloat16, device="cuda")
            assert not proj.kernel_for(i["w"], proj.RES_P2_KERNELS).rows(i["x"], i["w"], i["scale"], h, out)
        assert torch.equal(out.view(torch.uint16), want.view(torch.uint16)), (M, pdl)
        assert torch.equal(h.view(torch.uint16), want_h.view(torch.uint16)), (M, pdl)
    ref = tb.reference(i)
    assert metrics.rel_err(out, ref["out"]) <= tb.contract.tolerance
    assert metrics.rel_err(h, ref["h"]) <= tb.contract.tolerance


@pytest.mark.parametrize("M", [17, 24, 25, 32])
def test_res32_in_the_op(M):
    """fp8_gemv_n2048_k4096_res_ks2_t32 (RES32, k split over clusters of 2): fp8_linear_add above RES32_ROWS rows
    launches it once, with no miss, plainly and under set_pdl; NaN-poisoned out fully written; PDL bitwise plain and
    repeats bitwise; h is out added to the old h in fp32 and rounded (bitwise); out and h within tolerance of float64."""
    from netra.contracts.proj import FUSED, RES32
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.ops import _dispatch

    sh = RES32
    (one,) = [s for s in FUSED if s.fuse == "res"]
    tb = testbeds.get(sh.name)
    i = tb.make({"M": M}, torch.Generator().manual_seed(880 + M), "cuda")
    got = []
    for pdl in (False, True, False):
        with _pdl(pdl), _dispatch.count_launches() as counts:
            h, out = i["h"].clone(), torch.full((M, sh.N), float("nan"), dtype=torch.bfloat16, device="cuda")
            dops.fp8_linear_add(i["x"], i["w"], i["scale"], h, out)
        assert counts[sh.name] == 1 and counts[one.name] == 0 and _misses(sh.name) == 0, dict(counts)
        got.append((h, out))
    for h, out in got[1:]:
        assert torch.equal(out.view(torch.uint16), got[0][1].view(torch.uint16)), M
        assert torch.equal(h.view(torch.uint16), got[0][0].view(torch.uint16)), M
    h, out = got[0]
    assert not out.isnan().any()
    assert torch.equal(h.view(torch.uint16), (i["h"].float() + out.float()).to(torch.bfloat16).view(torch.uint16))
    ref = tb.reference(i)
    assert metrics.rel_err(out, ref["out"]) <= tb.contract.tolerance
    assert metrics.rel_err(h, ref["h"]) <= tb.contract.tolerance


@pytest.mark.parametrize("M", [17, 32])
def test_experts_group32_is_the_16_token_build(M):
    """fp8_gemv_n1024_k2048_moe_grp_t32 (up to 32 tokens in one launch): bitwise the 16-token grouped build on chunks of
    16 rows, with the drawn ids, a token repeating an expert and an id of E (a NaN row for that pair only);
    fp8_linear_experts takes it above EXPERTS_GROUP32_ROWS rows in one launch with no miss, plainly and under set_pdl."""
    from netra.contracts.proj import EXPERTS_GROUP, EXPERTS_GROUP32
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.ops import _dispatch
    from netra.runtime import launch, loader

    tb = testbeds.get(EXPERTS_GROUP32.name)
    i = tb.make({"M": M, "E": 256}, torch.Generator().manual_seed(800 + M), "cuda")
    g16 = launch.make_guard_and_launch(contracts.get(EXPERTS_GROUP.name),
                                       function_handle=loader.load(EXPERTS_GROUP.name, 0).handle, device=0)
    planted = i["ids"].clone()
    planted[1, 5] = planted[1, 2]
    planted[M - 1, 0] = 256
    want = torch.full((M, 8, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
    for lo in range(0, M, 16):
        s = slice(lo, min(M, lo + 16))
        assert g16(i["x"][s], i["w"], i["scale"], want[s], planted[s]) is None
    for pdl in (False, True):
        with _pdl(pdl), _dispatch.count_launches() as counts:
            out = torch.full((M, 8, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
            dops.fp8_linear_experts(i["x"], i["w"], i["scale"], planted, out)
        assert counts[EXPERTS_GROUP32.name] == 1 and _misses(EXPERTS_GROUP32.name) == 0, dict(counts)
        assert torch.equal(out.view(torch.uint16), want.view(torch.uint16)), (M, pdl)
    assert out[M - 1, 0].isnan().all() and not out[M - 1, 1].isnan().any() and not out[:M - 1].isnan().any()
    ref = tb.reference({**i, "x": i["x"][:M - 1], "ids": planted[:M - 1]})["out"]
    assert metrics.rel_err(out[:M - 1], ref) <= tb.contract.tolerance


@pytest.mark.parametrize("M", [1, 5, 8, 13, 32])
def test_moe_down_grouped_is_the_per_token_kernels(M):
    """moe_act_i512 then fp8_gemv_n2048_k4608_moedown_grp (each distinct expert's strips once): out and h bitwise the
    per-token kernels (8 tokens per launch) on the same inputs, with the drawn ids, a token repeating an expert, an id
    of E (that token's rows NaN, the others not) and every token on one token's experts; the moe_down op takes the pair
    from MOE_DOWN_GRP_ROWS rows plainly and MOE_DOWN_GRP_PDL_ROWS under set_pdl, with no miss."""
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.ops import _dispatch, proj

    tb = testbeds.get("fp8_gemv_n2048_k4608_moedown_grp")
    i = tb.make({"M": M, "E": 256}, torch.Generator().manual_seed(900 + M), "cuda")
    planted = i["ids"].clone()
    if M >= 2:
        planted[1, 5] = planted[1, 2]
        planted[M - 1, 0] = 256
    few = i["ids"][:1].repeat(M, 1)
    bits = lambda t: t.view(torch.uint16)  # noqa: E731

    def run(grouped, ids, pdl=False):
        out = torch.full_like(i["h"], float("nan"))
        h = i["h"].clone()
        with _pdl(pdl, reset=False):
            if grouped:
                assert proj.moe_down_grouped(i["x"], i["w"], i["scale"], ids, i["top"], i["xs"], i["ws"], i["ss"],
                                             i["glogit"], h, out)
            else:
                assert not proj.moe_down_kernel_for(M).rows(i["x"], i["w"], i["scale"], h, ids, i["top"], i["xs"],
                                                            i["ws"], i["ss"], i["glogit"], out)
        return out, h

    for ids in (i["ids"], planted, few):
        for pdl in (False, True):
            (o1, h1), (o2, h2) = run(False, ids, pdl), run(True, ids, pdl)
            assert torch.equal(bits(o1), bits(o2)) and torch.equal(bits(h1), bits(h2)), (M, pdl)
    assert not o1.isnan().any()  # (few) every row written
    ref = tb.reference_for(i, {})
    out, h = run(True, i["ids"])
    assert metrics.rel_err(out, ref["out"]) <= tb.contract.tolerance, M
    o, _ = run(True, planted)
    if M >= 2:
        assert o[M - 1].isnan().all() and not o[:M - 1].isnan().any()
    for pdl in (False, True):
        with _pdl(pdl), _dispatch.count_launches() as counts:
            out, h = torch.full_like(i["h"], float("nan")), i["h"].clone()
            dops.moe_down(i["x"], i["w"], i["scale"], i["ids"], i["top"], i["xs"], i["ws"], i["ss"], i["glogit"], h, out)
        grp = M >= (dops.MOE_DOWN_GRP_PDL_ROWS if pdl else dops.MOE_DOWN_GRP_ROWS)
        assert counts["fp8_gemv_n2048_k4608_moedown_grp"] == int(grp) and counts["moe_act_i512"] == int(grp), dict(counts)
        assert sum(ops.stats()[k]["misses"] and 1 or 0 for k in ("moe_act_i512", "fp8_gemv_n2048_k4608_moedown_grp")) == 0
        assert torch.equal(bits(out), bits(run(True, i["ids"])[0])) or not grp


@pytest.mark.parametrize("M", [1, 4, 8])
def test_experts_router_is_the_router_and_the_merged_kernel(M):
    """fp8_linear_experts_router (one launch, a grid barrier): every output bitwise moe_router_norm's then
    fp8_linear_experts_shared's kernels on the same inputs, the logits exactly the reference's, NaN-poisoned outputs,
    plainly and under set_pdl, three launches in a row on one counter (it advances by 132 each), no miss."""
    from netra.contracts.proj import EXPERTS_ROUTER, SMS
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds

    tb = testbeds.get(EXPERTS_ROUTER.name)
    i = tb.make({"M": M, "E": 256}, torch.Generator().manual_seed(500 + M), "cuda")
    want = tb.peers["netra_unfused"](i, {"eps": 1e-6})
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    for pdl in (False, True):
        with _pdl(pdl):
            for rep in range(3):
                o = tb.alloc_outputs({"M": M, "E": 256}, "cuda")
                for t in o.values():
                    t.fill_(float("nan")) if t.dtype.is_floating_point else t.fill_(-1)
                before = int(i["bar"].item())
                dops.fp8_linear_experts_router(i["h"], i["norm_w"], 1e-6, i["rw"], i["w"], i["scale"], i["ws"], i["ss"],
                                               i["gate_w"], i["bar"], o["x_out"], o["top"], o["idx"], o["logits"],
                                               o["out"], o["sout"], o["gate_out"])
                torch.cuda.synchronize()
                assert int(i["bar"].item()) == before + SMS
                for n in ("x_out", "top", "idx", "out", "sout", "gate_out"):
                    assert torch.equal(bits(o[n]), bits(want[n])), (M, pdl, rep, n)
                ref = tb.reference_for(i, o)
                assert torch.equal(o["logits"].double(), ref["logits"]) and torch.equal(o["idx"], ref["idx"])
        assert _misses(EXPERTS_ROUTER.name) == 0, ops.stats()[EXPERTS_ROUTER.name]


def test_experts_router_down_is_the_router_fused_launch_then_moe_down():
    """fp8_linear_experts_router_down (the batch-1 MoE block in one launch): every output bitwise
    fp8_linear_experts_router's then moe_down's kernels on the same inputs (h updated in place as moe_down does),
    NaN-poisoned outputs, plainly and under set_pdl, three launches in a row on one counter (+ 132 each), one launch
    of its kernel each, no miss."""
    from netra.contracts.proj import EXPERTS_ROUTER_DOWN, SMS
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.ops import _dispatch

    tb = testbeds.get(EXPERTS_ROUTER_DOWN.name)
    i = tb.make({"M": 1, "E": 256}, torch.Generator().manual_seed(501), "cuda")
    h0 = i["h"].clone()
    want = tb.peers["netra_pair"](i, {"eps": 1e-6})
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    for pdl in (False, True):
        with _pdl(pdl):
            for rep in range(3):
                o = tb.alloc_outputs({"M": 1, "E": 256}, "cuda")
                for t in o.values():
                    t.fill_(float("nan")) if t.dtype.is_floating_point else t.fill_(-1)
                h = h0.clone()
                before = int(i["bar"].item())
                with _dispatch.count_launches() as counts:
                    dops.fp8_linear_experts_router_down(h, i["norm_w"], 1e-6, i["rw"], i["w"], i["scale"], i["ws"],
                                                        i["ss"], i["gate_w"], i["w2"], i["s2"], i["sw2"], i["ss2"],
                                                        i["bar"], o["x_out"], o["top"], o["idx"], o["logits"], o["out"],
                                                        o["sout"], o["gate_out"], o["moe_out"])
                torch.cuda.synchronize()
                assert dict(counts) == {EXPERTS_ROUTER_DOWN.name: 1}, dict(counts)
                assert int(i["bar"].item()) == before + SMS
                got = dict(o, h=h)
                for n in ("x_out", "top", "idx", "logits", "out", "sout", "gate_out", "moe_out", "h"):
                    assert torch.equal(bits(got[n]), bits(want[n])), (pdl, rep, n)
        assert _misses(EXPERTS_ROUTER_DOWN.name) == 0, ops.stats()[EXPERTS_ROUTER_DOWN.name]


def test_experts_router_down_with_a_nan_input_ends_and_matches_the_pair():
    """A NaN in h (so NaN norms, logits and gate | up rows): the one-launch MoE block still ends (its down tasks spin
    until no row holds the poison 0xFFFF, which a NaN result never is: fp32 arithmetic gives 0x7FFFFFFF, cvt to BF16
    0x7FFF) and gives the pair's bits."""
    from netra.contracts.proj import EXPERTS_ROUTER_DOWN
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds

    tb = testbeds.get(EXPERTS_ROUTER_DOWN.name)
    i = tb.make({"M": 1, "E": 256}, torch.Generator().manual_seed(502), "cuda")
    i["h"][0, 7] = float("nan")
    h0 = i["h"].clone()
    want = tb.peers["netra_pair"](i, {"eps": 1e-6})
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    o = tb.alloc_outputs({"M": 1, "E": 256}, "cuda")
    h = h0.clone()
    with _pdl(False):
        dops.fp8_linear_experts_router_down(h, i["norm_w"], 1e-6, i["rw"], i["w"], i["scale"], i["ws"], i["ss"],
                                            i["gate_w"], i["w2"], i["s2"], i["sw2"], i["ss2"], i["bar"], o["x_out"],
                                            o["top"], o["idx"], o["logits"], o["out"], o["sout"], o["gate_out"],
                                            o["moe_out"])
    assert torch.isnan(o["moe_out"].float()).all() and torch.isnan(h.float()).all()
    got = dict(o, h=h)
    for n in ("x_out", "top", "idx", "out", "sout", "gate_out", "moe_out", "h"):
        assert torch.equal(bits(got[n]), bits(want[n])), n
    assert _misses(EXPERTS_ROUTER_DOWN.name) == 0, ops.stats()[EXPERTS_ROUTER_DOWN.name]


@pytest.mark.parametrize("M", [1, 3, 9, 16, 20])
def test_expert_kernels_in_the_op_and_the_moe_block(M):
    """fp8_linear_experts takes both expert kernels with no miss (M = 20 tokens: two launches
    of gate | up; the down's 8 M pairs in launches of 16), matches float64 within the
    contract's tolerance and the framework path within its BF16-weight error; a bad id gives
    a NaN row; moe_decode with the kernels matches the framework path, and graph replay
    gives the eager bits."""
    from netra.contracts.proj import EXPERTS
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds

    ops.reset_stats()
    for sh in EXPERTS:
        tb = testbeds.get(sh.name)
        i = tb.make({"M": M, "E": 256}, torch.Generator().manual_seed(M), "cuda")
        want = tb.reference(i)["out"]
        out = torch.full(want.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
        dops.fp8_linear_experts(i["x"], i["w"], i["scale"], i["ids"], out)
        fw = torch.empty_like(out)
        dops.experts_framework(i["x"], i["_w_plain"], i["scale"], i["ids"], fw)
        torch.cuda.synchronize()
        assert _misses(sh.name) == 0, ops.stats()[sh.name]
        assert metrics.rel_err(out, want) <= contracts.get(sh.name).tolerance, sh.name
        assert metrics.rel_err(fw, want) <= 2 * contracts.get(sh.name).tolerance, sh.name
        ids = i["ids"].clone()
        ids.view(-1)[0] = 256
        bad = torch.empty_like(out)
        dops.fp8_linear_experts(i["x"], i["w"], i["scale"], ids, bad)
        torch.cuda.synchronize()
        assert bad.view(-1, sh.N)[0].isnan().all() and torch.equal(bad.view(-1, sh.N)[1:], out.view(-1, sh.N)[1:])
    # the MoE block: routed experts on the kernels (packed stacks) against the framework path
    from netra.model.checkpoint import quantize
    from netra.ops.proj import pack_weight

    g = torch.Generator(device="cuda").manual_seed(7)
    E, H, I = 256, 2048, 512

    def q(shape):
        w = torch.randn(*shape, generator=g, device="cuda") * 0.02
        qq, sc = quantize(w.view(-1, shape[-1]))
        return qq.view(shape), sc.view(shape[0], shape[1] // 128, shape[2] // 128) if len(shape) == 3 else sc

    w13, s13 = q((E, 2 * I, H))
    w2, s2 = q((E, H, I))
    sw13, ss13 = q((2 * I, H))
    sw2, ss2 = q((H, I))
    router = (torch.randn(E, H, generator=g, device="cuda") * 0.02).to(torch.bfloat16)
    sgate = (torch.randn(1, H, generator=g, device="cuda") * 0.02).to(torch.bfloat16)
    x = torch.randn(M, H, generator=g, device="cuda").to(torch.bfloat16)
    psw13, psw2, pw13, pw2 = pack_weight(sw13), pack_weight(sw2), pack_weight(w13), pack_weight(w2)
    args = lambda a, b: (x, router, a, s13, b, s2, psw13, ss13, psw2, ss2, sgate, 8)  # noqa: E731
    out_k, out_f = (torch.empty(M, H, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    dops.moe_decode(*args(pw13, pw2), out_k)
    ops.set_framework("fp8_linear_experts", True)
    try:
        dops.moe_decode(*args(w13, w2), out_f)
    finally:
        ops.set_framework("fp8_linear_experts", False)
    graph_out = torch.full_like(out_k, float("nan"))
    dops.moe_decode(*args(pw13, pw2), graph_out)  # warm the eager path before capture
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        dops.moe_decode(*args(pw13, pw2), graph_out)
    graph_out.fill_(float("nan"))
    gr.replay()
    torch.cuda.synchronize()
    assert metrics.rel_err(out_k, out_f.double()) < 2e-2
    assert torch.equal(graph_out, out_k)


@pytest.mark.parametrize("M", [1, 5, 16, 32])
def test_router_kernel_picks_the_references_experts(M):
    """moe_router takes moe_router_e256_k2048 with no miss; its ids equal the reference's
    exactly (the reference emulates the kernel's fp32 order, so BF16 ties agree), its weights
    are within the contract's tolerance, 20 launches give the same bits, and the ids agree with
    PyTorch's form of the model except where BF16 logits at the top-8 boundary tie."""
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds

    name = "moe_router_e256_k2048"
    tb = testbeds.get(name)
    ops.reset_stats()
    for seed in range(3):
        i = tb.make({"M": M}, torch.Generator().manual_seed(10 * M + seed), "cuda")
        want = tb.reference(i)
        top = torch.full((M, 8), float("nan"), dtype=torch.bfloat16, device="cuda")
        idx = torch.full((M, 8), -1, dtype=torch.long, device="cuda")
        dops.moe_router(i["x"], i["w"], top, idx)
        torch.cuda.synchronize()
        assert _misses("moe_router") == 0, ops.stats()["moe_router"]
        assert torch.equal(idx, want["idx"]), (idx, want["idx"])
        assert metrics.rel_err(top, want["top"]) <= contracts.get(name).tolerance
        for _ in range(20):
            t2, i2 = torch.empty_like(top), torch.empty_like(idx)
            dops.moe_router(i["x"], i["w"], t2, i2)
            assert torch.equal(t2, top) and torch.equal(i2, idx)
        peer = tb.peers["torch_router_topk"](i, {})
        same = (torch.sort(idx).values == torch.sort(peer["idx"]).values).all(-1)
        assert same.float().mean() >= 0.7


@pytest.mark.parametrize("M", [1, 8, 32, 37])
def test_router_norm_kernel_is_rmsnorm_then_the_router(M):
    """moe_router_norm takes moe_router_norm_e256_k2048 with no miss (37 tokens: launches of 32
    and 5; up to ROUTER_REGS_ROWS tokens its register build); x_out is bitwise rmsnorm_h2048's, the ids and weights bitwise the router kernel's on
    it (so exactly the reference's), x_out within tolerance of float64; 10 launches bitwise."""
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds

    name = "moe_router_norm_e256_k2048"
    tb = testbeds.get(name)
    ops.reset_stats()
    i = tb.make({"M": M}, torch.Generator().manual_seed(40 + M), "cuda")
    x = torch.full((M, 2048), float("nan"), dtype=torch.bfloat16, device="cuda")
    top = torch.full((M, 8), float("nan"), dtype=torch.bfloat16, device="cuda")
    idx = torch.full((M, 8), -1, dtype=torch.long, device="cuda")
    dops.moe_router_norm(i["h"], i["norm_w"], EPS, i["w"], x, top, idx)
    x_ref = ops.rmsnorm(i["h"], i["norm_w"], EPS)
    t_ref, i_ref = torch.empty_like(top), torch.empty_like(idx)
    dops.moe_router(x_ref, i["w"], t_ref, i_ref)
    torch.cuda.synchronize()
    assert _misses("moe_router_norm") == 0, ops.stats()["moe_router_norm"]
    assert torch.equal(x, x_ref) and torch.equal(idx, i_ref) and torch.equal(top, t_ref)
    want = tb.reference_for(i, {"x_out": x})
    assert torch.equal(idx, want["idx"])
    assert metrics.rel_err(x, want["x_out"]) <= contracts.get(name).tolerance
    for _ in range(10):
        x2, t2, i2 = torch.empty_like(x), torch.empty_like(top), torch.empty_like(idx)
        dops.moe_router_norm(i["h"], i["norm_w"], EPS, i["w"], x2, t2, i2)
        assert torch.equal(x2, x) and torch.equal(t2, top) and torch.equal(i2, idx)


@pytest.mark.parametrize("M", [1, 9, 16, 17, 30, 31, 32])  # 16 / 17: the op's ROUTER_SPLIT_ROWS boundary
def test_router_split_kernel_is_the_cluster_build(M):
    """moe_router_norm_split_e256_k2048 (the experts split across CTAs, each token group's last CTA selecting): x_out,
    top and idx bitwise moe_router_norm_e256_k2048's on the same inputs, logits exactly the reference's on the kernel's
    x_out, each token group's counter 64 further per launch (and the others untouched), over 6 launches on one counter
    buffer, plainly and under set_pdl; moe_router_norm takes it from ROUTER_SPLIT_ROWS rows (given cnt) with no miss,
    the cluster build below, and without cnt."""
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.ops import _dispatch
    from netra.ops import proj as kproj
    from netra.reference.proj import router_logits

    name = "moe_router_norm_split_e256_k2048"
    tb = testbeds.get(name)
    i = tb.make({"M": M}, torch.Generator().manual_seed(60 + M), "cuda")
    cnt = i["cnt"]
    groups = -(-M // 8)
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    want = tb.peers["moe_router_norm"](i, {"eps": EPS})
    for n, pdl in enumerate((False, True, False, True, False, True)):
        x = torch.full((M, 2048), float("nan"), dtype=torch.bfloat16, device="cuda")
        top = torch.full((M, 8), float("nan"), dtype=torch.bfloat16, device="cuda")
        idx = torch.full((M, 8), -1, dtype=torch.long, device="cuda")
        lg = torch.full((M, 256), float("nan"), dtype=torch.bfloat16, device="cuda")
        with _pdl(pdl):
            assert kproj.ROUTER_NORM_SPLIT(i["h"], i["w"], top, idx, i["norm_w"], x, EPS, lg, cnt)
        assert all(torch.equal(bits(a), bits(want[k])) for k, a in (("x_out", x), ("top", top), ("idx", idx)))
        assert torch.equal(bits(lg), bits(router_logits(x, i["w"])))
        assert cnt[:groups].tolist() == [64 * (n + 1)] * groups and not cnt[groups:].any()
    for with_cnt in (True, False):
        x, top, idx = torch.empty_like(x), torch.empty_like(top), torch.empty_like(idx)
        with _pdl(False), _dispatch.count_launches() as counts:
            dops.moe_router_norm(i["h"], i["norm_w"], EPS, i["w"], x, top, idx, cnt if with_cnt else None)
        used = (name if with_cnt and M >= dops.ROUTER_SPLIT_ROWS else "moe_router_norm_regs_e256_k2048"
                if M <= dops.ROUTER_REGS_ROWS else "moe_router_norm_e256_k2048")
        assert counts[used] == 1 and sum(counts.values()) == 1 and _misses("moe_router_norm") == 0, dict(counts)
        assert all(torch.equal(bits(a), bits(want[k])) for k, a in (("x_out", x), ("top", top), ("idx", idx)))


@pytest.mark.parametrize("M", [1, 5, 8, 12])
def test_router_regs_kernel_is_the_cluster_build(M):
    """moe_router_norm_regs_e256_k2048 (each warp's expert rows in registers from before its wait): x_out, top and idx
    bitwise moe_router_norm_e256_k2048's on the same inputs over 6 launches, plainly and under set_pdl, every output
    written (poisoned before each launch); moe_router_norm takes it up to ROUTER_REGS_ROWS rows with no miss, the
    cluster build above."""
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.ops import _dispatch
    from netra.ops import proj as kproj

    name = "moe_router_norm_regs_e256_k2048"
    tb = testbeds.get(name)
    i = tb.make({"M": M}, torch.Generator().manual_seed(70 + M), "cuda")
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    want = tb.peers["moe_router_norm"](i, {"eps": EPS})
    assert not want["top"].isnan().any() and (want["idx"] >= 0).all()
    for pdl in (False, True, False, True, False, True):
        x = torch.full((M, 2048), float("nan"), dtype=torch.bfloat16, device="cuda")
        top = torch.full((M, 8), float("nan"), dtype=torch.bfloat16, device="cuda")
        idx = torch.full((M, 8), -1, dtype=torch.long, device="cuda")
        with _pdl(pdl):
            assert kproj.ROUTER_NORM_REGS(i["h"], i["w"], top, idx, i["norm_w"], x, EPS)
        assert all(torch.equal(bits(a), bits(want[k])) for k, a in (("x_out", x), ("top", top), ("idx", idx)))
    x, top, idx = torch.empty_like(x), torch.empty_like(top), torch.empty_like(idx)
    with _pdl(False), _dispatch.count_launches() as counts:
        dops.moe_router_norm(i["h"], i["norm_w"], EPS, i["w"], x, top, idx)
    used = name if M <= dops.ROUTER_REGS_ROWS else "moe_router_norm_e256_k2048"
    assert counts[used] == 1 and sum(counts.values()) == 1 and _misses("moe_router_norm") == 0, dict(counts)
    assert all(torch.equal(bits(a), bits(want[k])) for k, a in (("x_out", x), ("top", top), ("idx", idx)))


@pytest.mark.parametrize("M", [1, 5, 8, 11])
def test_moe_down_kernel_in_the_op(M):
    """moe_down takes fp8_gemv_n2048_k4608_moedown with no miss (11 tokens: launches of 8 and
    3); out and h against float64 within the contract's tolerance, and within it of the
    unfused path; a bad id makes that token's rows NaN and no other; 20 calls bitwise; a graph
    replay bitwise the eager call."""
    from netra.contracts.proj import MOE_DOWN
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds

    tb = testbeds.get(MOE_DOWN.name)
    tol = contracts.get(MOE_DOWN.name).tolerance
    ops.reset_stats()
    i = tb.make({"M": M, "E": 256}, torch.Generator().manual_seed(20 + M), "cuda")
    want = tb.reference(i)
    a = lambda h, out, ids=i["ids"]: (i["x"], i["w"], i["scale"], ids, i["top"], i["xs"], i["ws"], i["ss"],  # noqa: E731
                                      i["glogit"], h, out)
    h, out = i["h"].clone(), torch.full_like(i["h"], float("nan"))
    dops.moe_down(*a(h, out))
    hu, ou = i["h"].clone(), torch.full_like(i["h"], float("nan"))
    dops.moe_down_unfused(*a(hu, ou))
    torch.cuda.synchronize()
    assert _misses("moe_down") == 0, ops.stats()["moe_down"]
    assert metrics.rel_err(out, want["out"]) <= tol and metrics.rel_err(h, want["h"]) <= tol
    assert metrics.rel_err(ou, want["out"]) <= tol and metrics.rel_err(hu, want["h"]) <= tol
    for _ in range(20):
        h2, o2 = i["h"].clone(), torch.empty_like(out)
        dops.moe_down(*a(h2, o2))
        assert torch.equal(h2, h) and torch.equal(o2, out)
    ids = i["ids"].clone()
    ids[M // 2, 3] = 256
    hb, ob = i["h"].clone(), torch.empty_like(out)
    dops.moe_down(*a(hb, ob, ids))
    torch.cuda.synchronize()
    bad = torch.zeros(M, dtype=torch.bool, device="cuda")
    bad[M // 2] = True
    assert ob[bad].isnan().all() and hb[bad].isnan().all() and torch.equal(ob[~bad], out[~bad])
    hg, og = i["h"].clone(), torch.empty_like(out)
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        dops.moe_down(*a(hg, og))
    hg.copy_(i["h"])
    og.fill_(float("nan"))
    gr.replay()
    torch.cuda.synchronize()
    assert torch.equal(hg, h) and torch.equal(og, out)


@pytest.mark.parametrize("B", [1, 7, 8, 32])
def test_gdn_decode_op_runs_the_kernel_and_matches_the_framework_path(B):
    """netra::gdn_decode in the runner's layout (qkv and z views of one qkvz row, int64
    slots into a larger pool) takes gdn_decode_b32 with no miss, matches float64, and a
    captured graph replays the same bits; a slot outside the pool gives NaN and touches
    no state; int32 slots take the framework path. From GDN_SMEM_B sequences the op takes
    gdn_decode_b32_smem, from GDN_PIPE_B gdn_decode_b32_pipe (bitwise the same)."""
    from netra.contracts.gdn import GDN_PIPE_B, GDN_SMEM_B
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.reference import gdn as rg

    tb = testbeds.get("gdn_decode_b32")
    i = tb.make({"B": B, "P": B + 3}, torch.Generator().manual_seed(B), "cuda")
    pristine = {k: i[k].clone() for k in ("conv_pool", "state_pool")}
    want = rg.decode_step(*testbeds._gdn_args(i), 16, 1e-6)
    out = torch.full((B, 4096), float("nan"), dtype=torch.bfloat16, device="cuda")
    ops.reset_stats()
    torch.ops.netra.gdn_decode(*testbeds._gdn_args(i), 16, 1e-6, out)
    # the build netra::gdn_decode takes at B
    op = "gdn_decode_b32_pipe" if B >= GDN_PIPE_B else "gdn_decode_b32_smem" if B >= GDN_SMEM_B else "gdn_decode"
    assert _misses(op) == 0, ops.stats()[op]
    assert metrics.rel_err(out, want["out"]) <= contracts.get("gdn_decode_b32").tolerance
    assert metrics.rel_err(i["state_pool"], want["state_pool"]) < 1e-3
    assert torch.equal(i["conv_pool"], want["conv_pool"])
    eager = (out.clone(), i["state_pool"].clone())
    for k, v in pristine.items():
        i[k].copy_(v)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dops.gdn_decode(*testbeds._gdn_args(i), 16, 1e-6, out)
    for k, v in pristine.items():
        i[k].copy_(v)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager[0]) and torch.equal(i["state_pool"], eager[1])
    # a slot id outside the pool: that sequence's output is NaN, its state does not move
    for k, v in pristine.items():
        i[k].copy_(v)
    good = i["slots"].clone()
    i["slots"][0] = B + 3
    dops.gdn_decode(*testbeds._gdn_args(i), 16, 1e-6, out)
    torch.cuda.synchronize()
    assert out[0].isnan().all() and not out[1:].isnan().any()
    still = torch.ones(B + 3, dtype=torch.bool, device="cuda")
    still[good[1:]] = False
    assert still[good[0]] and torch.equal(i["state_pool"][still], pristine["state_pool"][still])
    assert torch.equal(i["conv_pool"][still], pristine["conv_pool"][still])
    i["slots"] = good.int()
    dops.gdn_decode(*testbeds._gdn_args(i), 16, 1e-6, out)
    assert "slots: dtype" in str(ops.stats()[op]["misses"])


@pytest.mark.parametrize("B", [1, 2, 4])
def test_gdn_decode_spin_after_the_strong_in_proj_is_the_pair_it_replaces(B):
    """The spin pair (the decode runner's at up to GDN_SPIN_MAX_B sequences): fp8_linear_norm_ba into buffers that
    hold TAG, then netra::gdn_decode_spin, three layers deep on the same buffers, gives bitwise the outputs, states and
    conv windows of fp8_linear_norm_ba then gdn_decode; plainly, under set_pdl, and replayed from a graph captured
    under set_pdl; the buffers are TAG after every pair, the kernels take every launch. Its fallback (int32 slots:
    gdn_decode's framework path) gives the same outputs within the tolerance and leaves the buffers TAG too."""
    from netra.contracts.gdn import TAG
    from netra.contracts.proj import NORM_BA
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds

    gen = torch.Generator().manual_seed(500 + B)
    proj = testbeds.get(NORM_BA.name).make({"M": B}, gen, "cuda")
    g = testbeds.get("gdn_decode_b32").make({"B": B, "P": B + 3}, gen, "cuda")
    pools0 = (g["conv_pool"].clone(), g["state_pool"].clone())
    bf = lambda *shape: torch.empty(*shape, dtype=torch.bfloat16, device="cuda")  # noqa: E731
    x = bf(B, 2048)
    tagged = lambda *ts: all(bool((t.view(torch.int16) == TAG - (1 << 16)).all()) for t in ts)  # noqa: E731

    def layers(qkvz, bb, aa, out, spin, slots=None):
        res = []
        for layer in range(3):  # the pools advance each layer: three steps of one sequence set
            dops.fp8_linear_norm_ba(proj["h"], proj["norm_w"], EPS, proj["w"], proj["scale"], qkvz, x, proj["w_b"],
                                    proj["w_a"], bb, aa)
            args = (qkvz[:, :8192], qkvz[:, 8192:], bb, aa, g["conv_w"], g["a_log"], g["dt_bias"], g["norm_w"],
                    g["conv_pool"], g["state_pool"], g["slots"] if slots is None else slots, 16, EPS, out)
            (dops.gdn_decode_spin if spin else dops.gdn_decode)(*args)
            res.append(out.clone())
        return res + [g["conv_pool"].clone(), g["state_pool"].clone()]

    def fresh():
        g["conv_pool"].copy_(pools0[0])
        g["state_pool"].copy_(pools0[1])

    fresh()
    want = layers(bf(B, 12288), bf(B, 32), bf(B, 32), bf(B, 4096), spin=False)
    qkvz, bb, aa, out = bf(B, 12288), bf(B, 32), bf(B, 32), bf(B, 4096)
    dops.tag_(qkvz, bb, aa)
    for pdl in (False, True):
        fresh()
        with _pdl(pdl):
            got = layers(qkvz, bb, aa, out, spin=True)
        assert all(torch.equal(a, b) for a, b in zip(got, want)), (B, pdl)
        assert tagged(qkvz, bb, aa) and _misses("gdn_decode_spin") == 0, ops.stats()["gdn_decode_spin"]
    ops.set_pdl(True)
    try:
        ops.prepare()
        graph = torch.cuda.CUDAGraph()
        fresh()
        with torch.cuda.graph(graph):
            got = layers(qkvz, bb, aa, out, spin=True)
    finally:
        ops.set_pdl(False)
    for _ in range(2):  # the graph's own TAG writes leave it ready for the next replay
        fresh()
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(a, b) for a, b in zip(got, want)) and tagged(qkvz, bb, aa), B
    fresh()
    ops.reset_stats()
    fb = layers(qkvz, bb, aa, out, spin=True, slots=g["slots"].int())
    assert "slots: dtype" in str(ops.stats()["gdn_decode_spin"]["misses"]) and tagged(qkvz, bb, aa)
    assert all(metrics.rel_err(a, b) <= contracts.get("gdn_decode_b32_spin").tolerance for a, b in zip(fb[:3], want[:3]))


@pytest.mark.parametrize("B,T", [(1, 1), (1, 16), (3, 7)])
def test_gdn_verify_kernel_is_bitwise_decode_steps(B, T):
    """gdn_verify_t16 takes the kernel with no miss; token t's output, state and conv window
    (in slots_out[:, t]) are bitwise those of t + 1 gdn_decode_b32 launches from slot_in; it
    matches float64; slot_in is untouched; a bad slot id gives NaN outputs and writes nothing."""
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.reference import gdn as rg

    i = testbeds.get("gdn_verify_t16").make({"B": B, "T": T, "P": B * (T + 1)}, torch.Generator().manual_seed(T), "cuda")
    pristine = {k: i[k].clone() for k in ("conv_pool", "state_pool")}
    want = rg.verify_steps(*testbeds._gdn_args(i), 16, 1e-6)
    out = torch.full((B, T, 4096), float("nan"), dtype=torch.bfloat16, device="cuda")
    ops.reset_stats()
    dops.gdn_verify(*testbeds._gdn_args(i), 16, 1e-6, out)
    torch.cuda.synchronize()
    assert _misses("gdn_verify") == 0, ops.stats()["gdn_verify"]
    assert metrics.rel_err(out, want["out"]) <= contracts.get("gdn_verify_t16").tolerance
    assert metrics.rel_err(i["state_pool"], want["state_pool"]) < 1e-3
    assert torch.equal(i["conv_pool"], want["conv_pool"])
    assert torch.equal(i["state_pool"][i["slot_in"]], pristine["state_pool"][i["slot_in"]])
    conv, pool = pristine["conv_pool"].clone(), pristine["state_pool"].clone()
    o = torch.empty(B, 4096, dtype=torch.bfloat16, device="cuda")
    for t in range(T):
        dops.gdn_decode(i["qkv"][:, t], i["z"][:, t], i["b_in"][:, t].contiguous(), i["a_in"][:, t].contiguous(),
                        i["conv_w"], i["a_log"], i["dt_bias"], i["norm_w"], conv, pool, i["slot_in"], 16, 1e-6, o)
        torch.cuda.synchronize()
        assert torch.equal(o, out[:, t]), t
        assert torch.equal(pool[i["slot_in"]], i["state_pool"][i["slots_out"][:, t]]), t
        assert torch.equal(conv[i["slot_in"]], i["conv_pool"][i["slots_out"][:, t]]), t
    assert _misses("gdn_decode") == 0, ops.stats()["gdn_decode"]
    for k, v in pristine.items():
        i[k].copy_(v)
    i["slots_out"][0, -1] = B * (T + 1)  # outside the pool
    dops.gdn_verify(*testbeds._gdn_args(i), 16, 1e-6, out)
    torch.cuda.synchronize()
    assert out[0].isnan().all() and not out[1:].isnan().any()
    assert torch.equal(i["state_pool"][i["slots_out"][0, :-1]], pristine["state_pool"][i["slots_out"][0, :-1]])


@pytest.mark.parametrize("B,T", [(1, 16), (1, 3), (3, 7)])
def test_gdn_verify_chunk_then_commit_is_the_sequential_kernel(B, T):
    """gdn_verify_chunk takes its kernel with no miss (the 8-warp one at B = 1), leaves both
    pools alone, matches float64 and the framework path; gdn_commit of every accepted count
    gives the state and conv window gdn_verify_t16 wrote after that many tokens (to fp32
    rounding: another summation order), in place too; a bad slot id gives NaN outputs."""
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.reference import gdn as rg

    i = testbeds.get("gdn_verify_chunk_t16").make({"B": B, "T": T, "P": B * (T + 1)}, torch.Generator().manual_seed(T),
                                                  "cuda")
    pristine = {k: i[k].clone() for k in ("conv_pool", "state_pool")}
    outs = testbeds._restore_outputs(i)
    for t in outs.values():
        t.fill_(float("nan"))
    ops.reset_stats()
    dops.gdn_verify_chunk(*testbeds._chunk_args(i), 16, 1e-6, *outs.values())
    torch.cuda.synchronize()
    key = "gdn_verify_chunk_t16_w8" if B == 1 else "gdn_verify_chunk_t16"
    assert ops.stats()[key]["misses"] == {} and ops.OPS[key].launches_bound, ops.stats()[key]
    for k, v in pristine.items():
        assert torch.equal(i[k], v), k
    want = rg.verify_restore(*testbeds._chunk_args(i), 16, 1e-6)
    for k, v in outs.items():
        assert metrics.rel_err(v, want[k]) <= contracts.get(key).tolerance, k
    fw = testbeds._restore_outputs(i)
    dops.gdn_verify_chunk_framework(*testbeds._chunk_args(i), 16, 1e-6, *fw.values())
    assert metrics.rel_err(outs["out"], fw["out"]) <= 2 * contracts.get(key).tolerance
    seq_out = torch.empty(B, T, 4096, dtype=torch.bfloat16, device="cuda")
    dops.gdn_verify(*testbeds._gdn_args(i), 16, 1e-6, seq_out)  # the sequential kernel writes slots_out[:, t]
    seq = {k: i[k].clone() for k in ("conv_pool", "state_pool")}
    for j in range(T + 1):
        conv, state = pristine["conv_pool"].clone(), pristine["state_pool"].clone()
        acc = torch.full((B,), j, dtype=torch.long, device="cuda")
        dops.gdn_commit(i["qkv"], conv, state, i["slot_in"], i["slot_in"], acc, *(outs[k] for k in ("ksave", "dsave",
                                                                                                    "gsave")))
        torch.cuda.synchronize()
        assert _misses("gdn_commit") == 0, ops.stats()["gdn_commit"]
        for b in range(B):
            src = pristine if j == 0 else seq
            slot = i["slot_in"][b] if j == 0 else i["slots_out"][b, j - 1]
            assert metrics.rel_err(state[i["slot_in"][b]], src["state_pool"][slot]) < 1e-3, (j, b)
            assert torch.equal(conv[i["slot_in"][b]], src["conv_pool"][slot]), (j, b)
    # the commit's reject paths: a count outside 0..T, a slot id outside the pool: nothing written
    if B > 1:
        conv, state = pristine["conv_pool"].clone(), pristine["state_pool"].clone()
        so = i["slots_out"][:, 0].contiguous()
        bad_out = so.clone()
        bad_out[1] = B * (T + 1)
        acc = torch.tensor([T + 1] + [1] * (B - 1), device="cuda")
        dops.gdn_commit(i["qkv"], conv, state, i["slot_in"], bad_out, acc, *(outs[k] for k in ("ksave", "dsave",
                                                                                               "gsave")))
        torch.cuda.synchronize()
        assert _misses("gdn_commit") == 0
        for b in (0, 1):
            assert torch.equal(state[so[b]], pristine["state_pool"][so[b]]), b
            assert torch.equal(conv[so[b]], pristine["conv_pool"][so[b]]), b
        assert metrics.rel_err(state[so[2]], seq["state_pool"][i["slots_out"][2, 0]]) < 1e-3
    i["slot_in"][0] = B * (T + 1)  # outside the pool: NaN outputs, no restore data written
    for t in outs.values():
        t.fill_(float("nan"))
    dops.gdn_verify_chunk(*testbeds._chunk_args(i), 16, 1e-6, *outs.values())
    torch.cuda.synchronize()
    assert outs["out"][0].isnan().all() and not outs["out"][1:].isnan().any()
    for k in ("ksave", "dsave", "gsave"):
        if k == "ksave":  # a key head's k is written by rank 0 of its even value head: all heads of seq 0 NaN
            assert outs[k][0].isnan().all(), k
        else:
            assert outs[k][0].isnan().all() and not outs[k][1:].isnan().any(), k


@pytest.mark.parametrize("M", [1, 9, 16, 17, 25, 32])
def test_bf16_linear2_runs_the_kernel(M):
    """One launch up to 32 rows (NaN-poisoned outputs, within tolerance of float64); above 16 rows the bits of the
    launches on rows 0..15 and 16.. (each n-tile's mma is the chunk's)."""
    from netra.lifecycle import testbeds

    tb = testbeds.get("bf16_gemv_n64_k2048")
    i = tb.make({"M": M}, torch.Generator().manual_seed(M), "cuda")
    ob = torch.full((M, 32), float("nan"), dtype=torch.bfloat16, device="cuda")
    oa = torch.full((M, 32), float("nan"), dtype=torch.bfloat16, device="cuda")
    ops.reset_stats()
    torch.ops.netra.bf16_linear2(i["x"], i["w_b"], i["w_a"], ob, oa)
    torch.cuda.synchronize()
    assert _misses("bf16_linear2") == 0, ops.stats()["bf16_linear2"]
    want = tb.reference(i)
    tol = contracts.get("bf16_gemv_n64_k2048").tolerance
    assert metrics.rel_err(ob, want["out_b"]) <= tol and metrics.rel_err(oa, want["out_a"]) <= tol
    if M > 16:
        cb, ca = torch.full_like(ob, float("nan")), torch.full_like(oa, float("nan"))
        for s in (slice(0, 16), slice(16, M)):
            torch.ops.netra.bf16_linear2(i["x"][s], i["w_b"], i["w_a"], cb[s], ca[s])
        torch.cuda.synchronize()
        assert _misses("bf16_linear2") == 0
        assert torch.equal(cb, ob) and torch.equal(ca, oa)


@pytest.mark.parametrize("name", ["fp8_gemv_n12288_k2048", "fp8_gemv_n2048_k4096_res", "fp8_gemv_n1024_k2048_gate_ks2",
                                  "bf16_gemv_n64_k2048", "rmsnorm_h2048", "add_rmsnorm_h2048", "qk_rmsnorm_d256"])
def test_more_rows_than_the_contract_go_as_chunks(name):
    """A batch of 37 tokens through the public op: launches of 16, 16 and 5 rows, no miss,
    every output row written (NaN-poisoned before) and within the contract's tolerance of the
    float64 reference (in-place h: each row added once)."""
    from netra.lifecycle import bench, check, testbeds

    tb = testbeds.get(name)
    c = tb.contract
    k = next(k for k in ops.OPS.values() if k.contract.name == name)
    ops.reset_stats()
    b = check.Bench(tb, {"M": 37}, 5)
    b.reset()
    bench._public_call(name, b.bufs)()
    torch.cuda.synchronize()
    assert dict(k.misses) == {}, dict(k.misses)
    want = tb.reference(b.original_inputs())
    for n in tb.output_names():
        assert metrics.output_error(b.bufs[n], want[n], exact=n in c.exact_outputs) <= c.tolerance, n


def test_lm_head_argmax_kernel_ties_nan_graph_pdl_and_workspace():
    """bf16_gemv_n248320_k2048_argmax through the op at M = 3: logits within tolerance of float64; tokens equal to
    torch.argmax of its own logits, with a tie at the top (two equal rows: the lower index) and then a NaN row
    (every token's argmax; torch agrees); ws back to zero after every launch; eager, PDL and a CUDA graph replay
    bitwise alike, repeated launches bitwise."""
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds

    name = "bf16_gemv_n248320_k2048_argmax"
    tb, c = testbeds.get(name), contracts.get(name)
    i = tb.make({"M": 3}, torch.Generator().manual_seed(17), "cuda")
    x, w, ws = i["x"], i["w"], i["ws"]
    w[123] = (x[0].float() * 0.05).to(torch.bfloat16)  # token 0's top row, then a copy of it further on
    w[200001] = w[123]
    logits = torch.full((3, 248320), float("nan"), dtype=torch.bfloat16, device="cuda")
    tokens = torch.full((3,), -7, dtype=torch.long, device="cuda")

    def run():
        logits.fill_(float("nan"))
        tokens.fill_(-7)
        dops.lm_head_argmax(x, w, logits, tokens, ws)
        torch.cuda.synchronize()
        assert not bool(ws.any()), "the kernel must leave its workspace zero"
        return logits.clone(), tokens.clone()

    ops.reset_stats()
    l0, t0 = run()
    assert _misses("lm_head_argmax") == 0, ops.stats()["lm_head_argmax"]
    want = tb.reference({**i, "kernel_logits": l0})
    assert metrics.rel_err(l0, want["logits"]) <= c.tolerance
    assert torch.equal(t0, want["tokens"]) and int(t0[0]) == 123 and torch.equal(l0[0, 123], l0[0, 200001])
    for _ in range(3):
        l1, t1 = run()
        assert metrics.first_mismatch(l1, l0) is None and torch.equal(t1, t0)
    with _pdl(True, reset=False):
        l1, t1 = run()
    assert metrics.first_mismatch(l1, l0) is None and torch.equal(t1, t0)
    logits.fill_(float("nan"))
    tokens.fill_(-7)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dops.lm_head_argmax(x, w, logits, tokens, ws)
    logits.fill_(float("nan"))
    tokens.fill_(-7)
    g.replay()
    torch.cuda.synchronize()
    assert metrics.first_mismatch(logits, l0) is None and torch.equal(tokens, t0) and not bool(ws.any())
    w[5000, 7] = float("nan")  # a NaN logit in every row: the largest, as torch.argmax counts it
    w[9000, 3] = float("nan")
    l2, t2 = run()
    assert t2.tolist() == [5000] * 3 and torch.equal(torch.argmax(l2, -1), t2)
    assert _misses("lm_head_argmax") == 0


@pytest.mark.parametrize("B,NP", [(1, 1), (1, 16), (3, 5), (32, 16)])
def test_attention_decode_paged_qknorm_kernel(B, NP, monkeypatch):
    """netra::attention_decode_paged_qknorm (q and k the row's own slots, before their norms) takes
    attn_decode_d256_qknorm with no miss and gives the bits of qk_rmsnorm_d256 then attn_decode_d256 (out and the cache
    rows), within float64's tolerance; eager, graph and PDL launches the same bits, counters left zero."""
    from netra.contracts import attn as A
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.ops.norm import qk_rmsnorm

    if dops.ATTN_CLUSTER:  # this test is the one-page-a-CTA build's; the cluster builds have their own below
        monkeypatch.setattr(dops, "ATTN_CLUSTER", False)
    tb = testbeds.get(A.ATTN_QKNORM_NAME)
    i = tb.make({"B": B, "NP": NP, "P": B * NP + 3, "T": NP * A.PAGE}, torch.Generator().manual_seed(B + 2 * NP), "cuda")
    want = tb.reference({**i, "kernel_ws": i["ws"]})
    out = torch.full((B, A.Q_HEADS * A.HEAD_DIM), float("nan"), dtype=torch.bfloat16, device="cuda")
    args = lambda: (i["q"], i["k"], i["v"], i["gate"], i["q_norm"], i["k_norm"], i["cos"], i["sin"],  # noqa: E731
                    i["positions"], i["block_table"], i["k_pages"], i["v_pages"], out, i["ws"], i["counters"], EPS)
    restore, _, _ = _cache_restorer(i, out)
    ops.reset_stats()
    qn, kn = qk_rmsnorm(i["q"], i["k"], i["q_norm"], i["k_norm"], EPS)
    dops.attention_decode_paged(qn, kn, *args()[2:4], *args()[6:15])
    torch.cuda.synchronize()
    pair = (out.clone(), i["k_pages"].clone(), i["v_pages"].clone())
    assert _misses("attention_decode_paged") == 0 and _misses("qk_rmsnorm") == 0
    restore()
    dops.attention_decode_paged_qknorm(*args())
    torch.cuda.synchronize()
    assert _misses("attention_decode_paged_qknorm") == 0, ops.stats()["attention_decode_paged_qknorm"]
    assert metrics.first_mismatch(out, pair[0]) is None
    assert torch.equal(i["k_pages"], pair[1]) and torch.equal(i["v_pages"], pair[2])
    assert metrics.rel_err(out, want["out"]) <= A.ATTN_TOL
    assert metrics.rel_err(i["k_pages"], want["k_pages"]) <= 2 ** -7
    assert not i["counters"].any()
    _graph_and_pdl_same_bits(lambda: dops.attention_decode_paged_qknorm(*args()), restore, out, i["k_pages"], pair,
                             i["counters"])


@pytest.mark.parametrize("c", [4, 8])
@pytest.mark.parametrize("B,NP", [(1, 1), (1, 2), (1, 16), (3, 5), (8, 16), (32, 16), (2, 64), (1, 7), (1, 64)])
def test_attention_cluster_kernels(B, NP, c, monkeypatch):
    """attn_decode_d256_qknorm_c4 / _c8 by their guards (NP = 7: a walk the cluster does not divide): out within float64's tolerance, the appended cache rows the
    bits of attn_decode_d256_qknorm's (the same code), out NaN-poisoned before every launch, repeated, graph and PDL
    launches the same bits, and the op picks the build attn_cluster_for names; a position past the cache gives NaN for
    that sequence and writes no row; an invalid page id gives NaN for its sequence alone."""
    from netra.contracts import attn as A
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.ops import attn

    op = attn.DECODE_QKNORM_CL[c]
    tb = testbeds.get(A.ATTN_CLUSTER[c].name)
    i = tb.make({"B": B, "NP": NP, "P": B * NP + 3, "T": NP * A.PAGE}, torch.Generator().manual_seed(7 * B + NP + c), "cuda")
    want = tb.reference(i)
    out = torch.full((B, A.Q_HEADS * A.HEAD_DIM), float("nan"), dtype=torch.bfloat16, device="cuda")
    cargs = lambda: (i["q"], i["k"], i["v"], i["gate"], i["q_norm"], i["k_norm"], i["cos"], i["sin"],  # noqa: E731
                     i["positions"], i["block_table"], i["k_pages"], i["v_pages"], out, EPS)
    restore, kp0, vp0 = _cache_restorer(i, out)

    def run():
        restore()
        assert op.go(*cargs()) is None
        torch.cuda.synchronize()
        return out.clone(), i["k_pages"].clone(), i["v_pages"].clone()

    monkeypatch.setattr(dops, "ATTN_CLUSTER", False)  # the one-page-a-CTA build's cache rows
    restore()
    dops.attention_decode_paged_qknorm(*cargs()[:13], i["ws"], i["counters"], EPS)
    torch.cuda.synchronize()
    rows = (i["k_pages"].clone(), i["v_pages"].clone())
    first = run()
    assert metrics.rel_err(first[0], want["out"]) <= A.ATTN_TOL, metrics.rel_err(first[0], want["out"])
    assert torch.equal(first[1], rows[0]) and torch.equal(first[2], rows[1])
    for _ in range(3):
        assert metrics.first_mismatch(run()[0], first[0]) is None

    def launch():
        assert op.go(*cargs()) is None

    _graph_and_pdl_same_bits(launch, restore, out, i["k_pages"], first)
    monkeypatch.setattr(dops, "ATTN_CLUSTER", True)
    monkeypatch.setattr(dops, "ATTN_C8_MAX_B", B if c == 8 else B - 1)
    restore()
    ops.reset_stats()
    dops.attention_decode_paged_qknorm(*cargs()[:13], i["ws"], i["counters"], EPS)
    torch.cuda.synchronize()
    assert _misses(op.contract.name) == 0 and torch.equal(out, first[0])
    # a position past the cache, and (with more than one sequence) an invalid page id in the last sequence's first page
    restore()
    i["positions"][0] = NP * A.PAGE
    if B > 1:
        i["block_table"][B - 1, 0] = B * NP + 3
    assert op.go(*cargs()) is None
    torch.cuda.synchronize()
    assert out[0].isnan().all()
    if B > 1:
        assert out[B - 1].isnan().all() and not out[1:B - 1].isnan().any()
    pg0 = i["block_table"][0].long()
    assert torch.equal(i["k_pages"][pg0], kp0[pg0]) and torch.equal(i["v_pages"][pg0], vp0[pg0])


@pytest.mark.parametrize("c,B,NP,S", [(8, 1, 16, 16), (8, 1, 64, 16), (8, 1, 200, 16), (8, 1, 1000, 16), (8, 2, 150, 8),
                                      (8, 4, 33, 4), (4, 5, 40, 8), (4, 8, 64, 4), (4, 3, 300, 8), (4, 17, 100, 1)])
def test_attention_long_kernels(c, B, NP, S, monkeypatch):
    """attn_decode_d256_qknorm_c4_long / _c8_long by their guards: out and the cache within float64's tolerance, out
    NaN-poisoned before every launch, repeated, graph and PDL launches the same bits, the counters left zero; where no
    sequence has more than C x LONG_PAGES pages (one cluster each) the bits of the cluster build; the op takes the
    build (given cl_counters) past 64 pages with the same bits, the cluster build up to 64; a position past the cache gives NaN for that sequence, an invalid
    page id NaN for its sequence alone."""
    from netra.contracts import attn as A
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.ops import _dispatch, attn

    op = attn.DECODE_QKNORM_LONG[c]
    tb = testbeds.get(A.ATTN_LONG[c].name)
    i = tb.make({"B": B, "NP": NP, "S": S, "P": B * NP + 3, "T": NP * A.PAGE}, torch.Generator().manual_seed(B + NP + S),
                "cuda")
    want = tb.reference_for(i, {"ws": i["ws"]})
    out = torch.full((B, A.Q_HEADS * A.HEAD_DIM), float("nan"), dtype=torch.bfloat16, device="cuda")
    cargs = lambda: (i["q"], i["k"], i["v"], i["gate"], i["q_norm"], i["k_norm"], i["cos"], i["sin"],  # noqa: E731
                     i["positions"], i["block_table"], i["k_pages"], i["v_pages"], out)
    restore, kp0, vp0 = _cache_restorer(i, out)

    def run():
        restore()
        assert op.go(*cargs(), i["ws"], i["counters"], EPS) is None
        torch.cuda.synchronize()
        assert not i["counters"].any()
        return out.clone(), i["k_pages"].clone(), i["v_pages"].clone()

    first = run()
    for n in ("out", "k_pages", "v_pages"):
        got = dict(zip(("out", "k_pages", "v_pages"), first))[n]
        assert metrics.rel_err(got, want[n]) <= A.ATTN_TOL, (n, metrics.rel_err(got, want[n]))
    for _ in range(3):
        assert metrics.first_mismatch(run()[0], first[0]) is None
    _graph_and_pdl_same_bits(lambda: op.go(*cargs(), i["ws"], i["counters"], EPS), restore, out, i["k_pages"], first,
                             i["counters"])
    taken = NP > A.MAX_PAGES  # the op's choice; up to 64 pages the cluster build, run here once
    if not taken:
        restore()
        assert attn.DECODE_QKNORM_CL[c].go(*cargs(), EPS) is None
        torch.cuda.synchronize()
        expect = out.clone()
        if int(i["positions"].max()) < c * A.LONG_PAGES * A.PAGE:  # one cluster a sequence: the same bits
            assert torch.equal(expect, first[0]) and torch.equal(i["k_pages"], first[1])
    # the op, given cl_counters, takes this build with S = attn_splits (the batch's cluster size forced to c)
    monkeypatch.setattr(dops, "ATTN_C8_MAX_B", B if c == 8 else B - 1)
    monkeypatch.setattr(dops, "ATTN_LONG_CTAS", S * B * A.KV_HEADS * c)
    monkeypatch.setitem(dops.ATTN_LONG_RESIDENT, c, S * B * A.KV_HEADS * c)
    ws = torch.empty(B, A.KV_HEADS, NP, A.PART, device="cuda")
    cl = torch.zeros(B, A.KV_HEADS, dops.CL_COUNTERS, dtype=torch.int32, device="cuda")
    restore()
    ops.reset_stats()
    with _dispatch.count_launches() as counts:
        dops.attention_decode_paged_qknorm(*cargs(), ws, torch.zeros(B, A.KV_HEADS, dtype=torch.int32, device="cuda"),
                                           EPS, cl)
    torch.cuda.synchronize()
    assert dops.attn_splits(B, c) == S and counts[op.contract.name] == taken and sum(counts.values()) == 1, counts
    assert _misses(op.contract.name) == 0 and torch.equal(out, first[0] if taken else expect) and not cl.any()
    # a position past the cache; (with more than one sequence) an invalid page id in the last sequence's pos page
    restore()
    i["positions"][0] = NP * A.PAGE
    if B > 1:
        i["block_table"][B - 1, int(i["positions"][B - 1]) // A.PAGE] = B * NP + 3
    assert op.go(*cargs(), i["ws"], i["counters"], EPS) is None
    torch.cuda.synchronize()
    assert out[0].isnan().all() and not i["counters"].any()
    if B > 1:
        assert out[B - 1].isnan().all() and not out[1:B - 1].isnan().any()
    pg0 = i["block_table"][0].long()
    assert torch.equal(i["k_pages"][pg0], kp0[pg0]) and torch.equal(i["v_pages"][pg0], vp0[pg0])


@pytest.mark.parametrize("B,NP", [(1, 1), (1, 16), (3, 5), (32, 16)])
def test_attention_decode_paged_kernel(B, NP):
    """netra::attention_decode_paged in the runner's layout (v and gate views of one q | k | v row) takes
    attn_decode_d256 with no miss, matches float64 (out, and the cache rows it appends), leaves its counters zero,
    replays the same bits from a CUDA graph and under PDL; a position past the cache gives NaN for that sequence and
    writes no cache row."""
    from netra.contracts import attn as A
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.reference import attn as ra

    i = testbeds.get(A.ATTN_NAME).make({"B": B, "NP": NP, "P": B * NP + 3, "T": NP * A.PAGE},
                                       torch.Generator().manual_seed(B + NP), "cuda")
    out = torch.full((B, A.Q_HEADS * A.HEAD_DIM), float("nan"), dtype=torch.bfloat16, device="cuda")
    restore, kp0, vp0 = _cache_restorer(i, out)
    want = ra.decode_step(i["q"], i["k"], i["v"], i["gate"], i["cos"], i["sin"], i["positions"], i["block_table"],
                          kp0, vp0)
    args = lambda: (i["q"], i["k"], i["v"], i["gate"], i["cos"], i["sin"], i["positions"], i["block_table"],  # noqa: E731
                    i["k_pages"], i["v_pages"], out, i["ws"], i["counters"])
    ops.reset_stats()
    dops.attention_decode_paged(*args())
    torch.cuda.synchronize()
    assert _misses("attention_decode_paged") == 0, ops.stats()["attention_decode_paged"]
    assert metrics.rel_err(out, want["out"]) <= A.ATTN_TOL
    assert metrics.rel_err(i["k_pages"], want["k_pages"]) <= 2 ** -8
    assert torch.equal(i["v_pages"].double(), want["v_pages"])
    assert not i["counters"].any()
    eager = (out.clone(), i["k_pages"].clone())
    _graph_and_pdl_same_bits(lambda: dops.attention_decode_paged(*args()), restore, out, i["k_pages"], eager,
                             i["counters"])
    # a position past the cache: that sequence's output NaN, no row written for it
    restore()
    i["positions"][0] = NP * A.PAGE
    dops.attention_decode_paged(*args())
    torch.cuda.synchronize()
    assert out[0].isnan().all() and not out[1:].isnan().any()
    pg0 = i["block_table"][0].long()
    assert torch.equal(i["k_pages"][pg0], kp0[pg0]) and torch.equal(i["v_pages"][pg0], vp0[pg0])
