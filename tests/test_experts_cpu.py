"""The routed experts' kernels (netra.contracts.proj.EXPERTS) without a GPU: generated PTX
current and assembled without spills, the contract's geometry, the guard (with a fake
launch), the stacked packing, and the op's framework path against float64."""

from __future__ import annotations

import pytest
import torch

from netra import contracts, paths
from netra.contracts.proj import EXPERTS, MOE_DOWN, NUM_EXPERTS, SMS, TOP_K
from netra.decode import ops as dops
from netra.lifecycle import testbeds
from netra.lifecycle.metrics import rel_err
from netra.model import checkpoint as ck
from netra.ops import proj
from netra.runtime.launch import make_guard_and_launch

GATE_UP, DOWN = EXPERTS


def _gen():
    return paths.generator("proj", "gen_fp8_gemv")


@pytest.mark.parametrize("sh", EXPERTS, ids=lambda s: s.name)
def test_ptx_is_current_and_assembles_without_spills(sh):
    from test_proj_cpu import _assembles_without_spills

    ptx = _gen().generate(sh)
    assert paths.ptx_path("sm_90a", "proj", sh.name).read_text() == ptx, "run gen_fp8_gemv.py"
    res = _assembles_without_spills(sh.name, ptx)
    assert res["registers"] <= contracts.get(sh.name).max_registers
    # nothing is requested before the wait (the ids are the previous kernel's output)
    head = ptx[ptx.index(".entry"):ptx.index("griddepcontrol.wait;")]
    assert "cp.async.bulk.shared" not in head and "ld.global" not in head


def test_contract_geometry():
    g, d = contracts.get(GATE_UP.name), contracts.get(DOWN.name)
    assert GATE_UP.pairs_per_x == TOP_K and DOWN.pairs_per_x == 1
    assert g.grid_for({"M": 1, "E": NUM_EXPERTS}) == (SMS, 1, 1)  # 8 x 64 strips
    assert d.grid_for({"M": 1, "E": NUM_EXPERTS}) == (128, 1, 1) and d.grid_for({"M": 2, "E": NUM_EXPERTS})[0] == SMS
    assert g.nbytes({"M": 1, "E": NUM_EXPERTS})[0] >= 8 * 1024 * 2048  # eight experts' weights
    for sh in EXPERTS:
        c = contracts.get(sh.name)
        assert c.dynamic_smem == sh.smem and sh.ids_off >= sh.bar_off + 8 * sh.NS and sh.ids_off % 16 == 0
        assert c.op == "fp8_linear_experts" and c.pdl and sh.pre_strips == 0
    assert DOWN.NS == 8 and GATE_UP.NS == 3


class _Fake:
    def __init__(self):
        self.calls = []

    def __call__(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.calls.append(((gx, gy, gz), (bx, by, bz), smem))
        return 0


def _args(sh, M, E=NUM_EXPERTS):
    w = torch.empty(E, sh.S, sh.KB, 2048, dtype=torch.float8_e4m3fn)  # not touched: cheap
    sc = torch.ones(E, sh.N // 128, sh.KB)
    ids = torch.zeros((M, sh.pairs_per_x) if sh.pairs_per_x > 1 else (M,), dtype=torch.int64)
    out = torch.empty(ids.shape + (sh.N,), dtype=torch.bfloat16)
    return [torch.zeros(M, sh.K, dtype=torch.bfloat16), w, sc, out, ids]


@pytest.mark.parametrize("sh", EXPERTS, ids=lambda s: s.name)
def test_guard_launches_contract_shapes_and_refuses_the_rest(sh):
    c = contracts.get(sh.name)
    fake = _Fake()
    go = make_guard_and_launch(c, function_handle=1, device=-1, launch=fake, stream=lambda d: 0)
    for M in (1, 9, 16):
        assert go(*_args(sh, M)) is None
        assert fake.calls[-1] == (c.grid_for({"M": M, "E": NUM_EXPERTS}), (sh.threads, 1, 1), sh.smem)
    n = len(fake.calls)
    bad = []
    a = _args(sh, 17)
    bad.append(a)  # more x rows than a launch takes
    a = _args(sh, 2, E=8)
    bad.append(a)  # not Qwen3.6's 256 experts
    a = _args(sh, 2)
    a[4] = a[4].int()
    bad.append(a)  # int32 ids
    a = _args(sh, 2)
    a[4] = a[4][:1]
    bad.append(a)  # ids for fewer tokens than x
    a = _args(sh, 2)
    a[1] = a[1][:, :, :, :1024]
    bad.append(a)  # not the packed layout
    for a in bad:
        assert isinstance(go(*a), str)
    assert len(fake.calls) == n


def test_stacked_pack_is_each_expert_packed():
    g = torch.Generator().manual_seed(0)
    q, _ = ck.quantize(torch.randn(3 * 256, 384, generator=g) * 0.02)
    q = q.view(3, 256, 384)
    p = proj.pack_weight(q)
    assert p.shape == (3, 16, 3, 2048)
    for e in range(3):
        assert torch.equal(p[e].view(torch.uint8), proj.pack_weight(q[e]).view(torch.uint8))
    assert torch.equal(proj.unpack_weight(p).view(torch.uint8), q.view(torch.uint8))


@pytest.mark.parametrize("sh", EXPERTS, ids=lambda s: s.name)
def test_framework_path_matches_float64_and_marks_bad_ids(sh):
    """Ten experts (the guard refuses: not 256, and no GPU): gather, dequantize, bmm against
    the test bed's float64 reference; an id outside the experts gives a NaN row, the others
    are unchanged."""
    tb = testbeds.get(sh.name)
    i = tb.make({"M": 3, "E": 10}, torch.Generator().manual_seed(5), "cpu")
    want = tb.reference(i)["out"]
    out = torch.full(want.shape, float("nan"), dtype=torch.bfloat16)
    dops.fp8_linear_experts(i["x"], i["w"], i["scale"], i["ids"], out)
    assert rel_err(out, want) <= contracts.get(sh.name).tolerance
    out_plain = torch.empty_like(out)
    dops.fp8_linear_experts(i["x"], i["_w_plain"], i["scale"], i["ids"], out_plain)
    assert torch.equal(out, out_plain)  # packed or not: the same numbers
    ids = i["ids"].clone()
    ids.view(-1)[1] = 10
    ids.view(-1)[2] = -1
    bad = torch.empty_like(out)
    dops.fp8_linear_experts(i["x"], i["w"], i["scale"], ids, bad)
    flat, good = bad.view(-1, sh.N), out.view(-1, sh.N)
    assert flat[1:3].isnan().all() and torch.equal(flat[0], good[0]) and torch.equal(flat[3:], good[3:])
    # the bench's host-dispatch call is the public op (here its framework path)
    from netra.lifecycle import bench

    again = torch.empty_like(out)
    bench._public_call(sh.name, {**i, "out": again})()
    assert torch.equal(again, out)



# --- the router and its top-k ------------------------------------------------------------------
ROUTER = "moe_router_e256_k2048"


def test_router_ptx_is_current_and_assembles():
    """The committed PTX is current; the bab7443 build (measured, racecheck hazards) is the same
    generator without the start-of-cluster barrier."""
    from test_proj_cpu import _assembles_without_spills

    g = paths.generator("proj", "gen_moe_router")
    assert g.NAME == ROUTER
    ptx = g.generate()
    assert paths.ptx_path("sm_90a", "proj", ROUTER).read_text() == ptx, "run gen_moe_router.py"
    res = _assembles_without_spills(ROUTER, ptx)
    c = contracts.get(ROUTER)
    assert res["registers"] <= c.max_registers
    assert c.grid_for({"M": 3}) == (24, 1, 1) and c.threads == 256 and c.exact_outputs == ("idx",)
    old = g.generate(start_barrier=False)
    assert "barrier.cluster.wait.aligned;" in ptx and "barrier.cluster.wait.aligned;" not in old


def test_router_reference_emulates_fp32_order_and_breaks_ties_low():
    from netra.reference.proj import router_logits, router_topk

    tb = testbeds.get(ROUTER)
    i = tb.make({"M": 4}, torch.Generator().manual_seed(2), "cpu")
    got = router_logits(i["x"], i["w"])
    exact = (i["x"].double() @ i["w"].double().T)
    # within one BF16 rounding of the float64 logits (the fp32 order only moves boundary cases)
    assert ((got.double() - exact).abs() <= exact.abs() * 2 ** -8 + 1e-6).all()
    w, ids = router_topk(torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0]]), 3)
    assert ids.tolist() == [[1, 2, 4]] and torch.allclose(w, torch.full((1, 3), 1 / 3, dtype=torch.float64))
    w, ids = router_topk(torch.tensor([[0.0, 2.0, 1.0]]), 2)
    assert ids.tolist() == [[1, 2]] and abs(w[0, 0].item() - 1 / (1 + torch.e ** -1)) < 1e-12


def _select_redux_emulated(logits):
    """gen_moe_router's select="redux" in integers, instruction by instruction: BF16 logits [M, 256] ->
    (values [M, 8] f32, ids [M, 8]) as rank 0's warp 0 chooses them."""
    bits = logits.to(torch.bfloat16).float().view(torch.int32).long() & 0xFFFFFFFF
    bits = torch.where(bits == 0x80000000, 0, bits)  # -0: +0
    neg = bits >> 31 == 1
    key = (bits ^ torch.where(neg, 0xFFFFFFFF, 0x80000000)) & 0xFFFF0000
    key = key | (255 - torch.arange(256))
    vals, ids = [], []
    for _ in range(TOP_K):
        best = key.max(-1).values  # the max tree and redux.sync.max.u32
        key = torch.where(key == best[:, None], 0, key)
        o = best & 0xFFFF0000
        pos = o >> 31 == 1
        b = (o ^ torch.where(pos, 0x80000000, 0xFFFFFFFF)) & 0xFFFF0000
        b = torch.where(b >= 1 << 31, b - (1 << 32), b).to(torch.int32)
        vals.append(b.view(torch.float32))
        ids.append(255 - (best & 255))
    return torch.stack(vals, -1), torch.stack(ids, -1)


def test_router_redux_selection_orders_as_the_reference():
    """The "redux" selection (one u32 key per logit, a warp max per round) picks the reference's ids
    in its order, ties to the lower id, on random logits and on ones built to break it: exact ties,
    +0 beside -0, negative logits, -inf, every logit equal."""
    from netra.reference.proj import router_topk

    g = torch.Generator().manual_seed(5)
    cases = [torch.randn(64, 256, generator=g),
             torch.randint(-3, 4, (64, 256), generator=g).float() / 2,  # many exact ties
             -torch.rand(8, 256, generator=g) * 100,  # every logit negative
             torch.zeros(2, 256), torch.full((2, 256), -1.5)]
    signed_zeros = torch.zeros(4, 256)
    signed_zeros[:, ::2] = -0.0
    signed_zeros[:, 100:104] = -float("inf")
    cases.append(signed_zeros)
    for logits in cases:
        lb = logits.to(torch.bfloat16)
        vals, ids = _select_redux_emulated(lb)
        _, want = router_topk(lb, TOP_K)
        assert torch.equal(ids, want), (ids[:2], want[:2])
        assert torch.equal(vals, lb.float().gather(1, want) + 0.0)  # the chosen values (-0 read back as +0)


def test_router_selection_builds():
    """The promoted builds choose by redux.sync (8 rounds, one division per lane); the builds before them
    (select="bfly", kept for the step A/B) by shfl.bfly argmax and 8 divisions; both assemble without spills."""
    from test_proj_cpu import _assembles_without_spills

    g = paths.generator("proj", "gen_moe_router")
    for norm in (False, True):
        name = g.NORM_NAME if norm else g.NAME
        ptx = g.generate(norm=norm, pdl=norm)
        assert paths.ptx_path("sm_90a", "proj", name).read_text() == ptx
        assert ptx.count("redux.sync.max.u32") == TOP_K and ptx.count("div.rn.f32") == 1
        old = g.generate(norm=norm, pdl=norm, select="bfly")
        assert "redux.sync" not in old and old.count("div.rn.f32") == TOP_K
        for text in (ptx, old):
            assert _assembles_without_spills(name, text)["registers"] <= 128


def test_router_smem_rows_candidate():
    """The smem_rows candidate: every warp's rows bulk-copied (lane 0, the warp's mbarrier) before
    griddepcontrol.wait and read back by ld.shared; no L2 prefetch; assembles without spills in 128 registers;
    its shared memory (the CTA's rows and 8 mbarriers, plus the static logits) fits one CTA per SM."""
    from test_proj_cpu import _assembles_without_spills

    g = paths.generator("proj", "gen_moe_router")
    ptx = g.generate(norm=True, pdl=True, smem_rows=True)
    head = ptx.split("griddepcontrol.wait;")[0]
    assert head.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") == 4
    assert "prefetch.global.L2" not in ptx and ptx.count("ld.shared.v4.u32") == 4 * 8
    assert "ld.global.nc.v4.u32 {%w" not in ptx
    assert _assembles_without_spills(g.NORM_NAME, ptx)["registers"] <= 128
    assert g.SMEM_BYTES + 4 * NUM_EXPERTS <= 227 * 1024 < 2 * (g.SMEM_BYTES + 4 * NUM_EXPERTS)


@pytest.mark.parametrize("epc", [2, 4])
def test_router_split_candidate_builds_its_design(epc):
    """gen_moe_router.generate_split (experiments/proj/router/router_split_variant.py): one bulk copy of the CTA's
    epc rows before griddepcontrol.wait and nothing else global before it; every warp's epc sums from shared
    memory with moe_router_norm's 64 fma per lane in k order; the arrival on cnt by one acq_rel atom; the
    selection's redux rounds; no cluster; assembles without spills in 128 registers (two CTAs per SM)."""
    from test_proj_cpu import _assembles_without_spills

    g = paths.generator("proj", "gen_moe_router")
    ptx = g.generate_split(epc)
    head, tail = ptx.split("griddepcontrol.wait;")
    assert head.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") == 1
    assert f"[%rows], [%o64], {epc * 4096}, [%bar]" in head and "ld.global" not in head and "st.global" not in head
    assert tail.count("ld.shared.v4.u32") == 8 * epc and tail.count("fma.rn.f32 %acc, %xf") == 64 * epc
    assert tail.count("atom.acq_rel.gpu.global.add.u64") == 1 and tail.count("redux.sync.max.u32") == TOP_K
    assert "cluster" not in tail and ".reqnctapercluster" not in ptx
    assert _assembles_without_spills(g.SPLIT_NAME, ptx)["registers"] <= 128


def test_router_split_build_is_current_and_the_op_falls_back_without_a_gpu():
    """The registered split router (generate_split's default build) is the committed PTX, its contract's grid is
    (64, ceil(M / 8)) and it counts its counters; on the CPU moe_router_norm with cnt at 31 and 32 rows gives the
    framework path's bits and leaves cnt alone; moe_decode hands bar[1:] (an int64 [5]) to it."""
    from netra.contracts.proj import MOE_ROUTER_NORM_SPLIT

    g = paths.generator("proj", "gen_moe_router")
    name = MOE_ROUTER_NORM_SPLIT.name
    assert g.SPLIT_NAME == name and paths.ptx_path("sm_90a", "proj", name).read_text() == g.generate_split(), \
        "run gen_moe_router.py"
    c = contracts.get(name)
    assert c.grid_for({"M": 1}) == (64, 1, 1) and c.grid_for({"M": 31}) == (64, 4, 1) and c.op == "moe_router_norm"
    assert c.exact_outputs == ("idx", "logits", "cnt") and c.pdl and dops.ROUTER_SPLIT_ROWS == 17
    tb = testbeds.get(name)
    for M in (31, 32):
        i = tb.make({"M": M}, torch.Generator().manual_seed(M), "cpu")
        outs = []
        for cnt in (i["cnt"], None):
            x = torch.full((M, 2048), float("nan"), dtype=torch.bfloat16)
            top = torch.full((M, TOP_K), float("nan"), dtype=torch.bfloat16)
            idx = torch.full((M, TOP_K), -1, dtype=torch.long)
            dops.moe_router_norm(i["h"], i["norm_w"], 1e-6, i["w"], x, top, idx, cnt)
            outs.append((x, top, idx))
        assert all(torch.equal(a, b) for a, b in zip(*outs)) and not i["cnt"].any()
    import inspect

    src = inspect.getsource(dops.moe_decode)
    assert "bar[1:] if bar is not None and bar.numel() > 1" in src and src.count("bar[:1]") == 2


def test_router_regs_build_is_current_loads_its_rows_before_the_wait_and_falls_back_without_a_gpu():
    """The registered register build (generate(norm=True, pdl=True, reg_rows=True)) is the committed PTX: the promoted
    norm build's sums on rows loaded into registers before griddepcontrol.wait, no L2 prefetch and no row load after
    it; in the SASS its 32 row loads precede the wait (ACQBULK), no spills or local memory, at most 255 registers; its
    contract is the cluster build's up to 12 tokens; on the CPU moe_router_norm at 1 and 8 rows gives the framework
    path's bits."""
    import re

    from test_proj_cpu import _assembles_without_spills

    from netra.contracts.proj import MOE_ROUTER_NORM, MOE_ROUTER_NORM_REGS
    from netra.runtime import build

    g = paths.generator("proj", "gen_moe_router")
    name = MOE_ROUTER_NORM_REGS.name
    ptx = g.generate(norm=True, pdl=True, reg_rows=True)
    assert g.REGS_NAME == name and paths.ptx_path("sm_90a", "proj", name).read_text() == ptx, "run gen_moe_router.py"
    head, tail = ptx.split("griddepcontrol.wait;", 1)
    rows = [ln for ln in head.splitlines() if "ld.global.nc.v4.u32 {%w" in ln]
    assert len(rows) == 32 and "prefetch" not in ptx and "{%w" not in "".join(
        ln for ln in tail.splitlines() if "ld." in ln)
    assert _assembles_without_spills(name, ptx)["registers"] <= 255
    sass = build.disasm(name)
    wait = sass.index("ACQBULK")
    assert len(re.findall(r"LDG\.E\.128\.CONSTANT", sass[:wait])) == 32 and "LDL" not in sass and "STL" not in sass
    c = contracts.get(name)
    assert c.dims["M"] == tuple(range(1, 13)) and c.grid_for({"M": 12}) == MOE_ROUTER_NORM.grid_for({"M": 12})
    assert c.params == MOE_ROUTER_NORM.params and c.op == "moe_router_norm" and dops.ROUTER_REGS_ROWS == 12
    tb = testbeds.get(name)
    for M in (1, 8):
        i = tb.make({"M": M}, torch.Generator().manual_seed(M), "cpu")
        x = torch.full((M, 2048), float("nan"), dtype=torch.bfloat16)
        top = torch.full((M, TOP_K), float("nan"), dtype=torch.bfloat16)
        idx = torch.full((M, TOP_K), -1, dtype=torch.long)
        dops.moe_router_norm(i["h"], i["norm_w"], 1e-6, i["w"], x, top, idx)
        x2, t2, i2 = torch.empty_like(x), torch.empty_like(top), torch.empty_like(idx)
        dops.rmsnorm(i["h"], i["norm_w"], 1e-6, out=x2)
        dops.moe_router(x2, i["w"], t2, i2)
        assert torch.equal(x, x2) and torch.equal(top, t2) and torch.equal(idx, i2)


def test_router_framework_path_is_the_models_form_and_agrees_with_the_reference():
    """On the CPU the op runs the model's PyTorch form (softmax, top-k, renormalize); its ids
    equal the reference's wherever the BF16 logits at the top-8 boundary are not within one
    rounding of each other (cuBLAS's order and the kernel's may round those differently)."""
    tb = testbeds.get(ROUTER)
    M = 16
    i = tb.make({"M": M}, torch.Generator().manual_seed(3), "cpu")
    want = tb.reference(i)
    top = torch.full((M, TOP_K), float("nan"), dtype=torch.bfloat16)
    idx = torch.full((M, TOP_K), -1, dtype=torch.long)
    dops.moe_router(i["x"], i["w"], top, idx)
    peer = tb.peers["torch_router_topk"](i, {})
    assert torch.equal(top, peer["top"]) and torch.equal(idx, peer["idx"])
    same = (torch.sort(idx).values == torch.sort(want["idx"]).values).all(-1)
    assert same.float().mean() >= 0.75, same
    rows = same.nonzero()[:, 0]
    # the same experts: the same weights within the contract's tolerance (torch.topk orders
    # exact ties its own way, so compare by expert id)
    a, b = torch.sort(idx[rows]), torch.sort(want["idx"][rows])
    assert rel_err(top[rows].gather(1, a.indices), want["top"][rows].gather(1, b.indices)) <= contracts.get(ROUTER).tolerance
    assert torch.allclose(top.float().sum(-1), torch.ones(M), atol=2e-2)


def test_router_guard_refuses_what_it_cannot_take():
    c = contracts.get(ROUTER)
    fake = _Fake()
    go = make_guard_and_launch(c, function_handle=1, device=-1, launch=fake, stream=lambda d: 0)

    def args(M, E=NUM_EXPERTS, idt=torch.long, k=TOP_K):
        return (torch.zeros(M, 2048, dtype=torch.bfloat16), torch.zeros(E, 2048, dtype=torch.bfloat16),
                torch.empty(M, k, dtype=torch.bfloat16), torch.empty(M, k, dtype=idt))

    assert go(*args(1)) is None and go(*args(32)) is None
    assert fake.calls[-1][0] == (256, 1, 1)
    n = len(fake.calls)
    for a in (args(33), args(2, E=128), args(2, idt=torch.int32), args(2, k=4)):
        assert isinstance(go(*a), str)
    assert len(fake.calls) == n


def test_exact_outputs_metric_catches_an_id_off_by_one():
    """Contract.exact_outputs: an integer output compared exactly. rel_err would pass an id
    off by one at the BF16 tolerance (1/255 < 4.5e-3); output_error does not."""
    from netra.lifecycle.metrics import output_error

    ref = torch.tensor([[255, 3, 7]])
    off = torch.tensor([[254, 3, 7]])
    assert rel_err(off, ref) < 4.5e-3
    assert output_error(off, ref, exact=True) == float("inf")
    assert output_error(ref.clone(), ref, exact=True) == 0.0
    assert output_error(off.double(), ref.double()) == rel_err(off, ref)


# --- moe_down: the MoE block's down side --------------------------------------------------------
def test_moe_down_ptx_is_current_and_assembles():
    """The "moedown" build: current, no spills, M <= 8 only, nothing requested before the wait,
    the ids-table predicate intact across the x loads (a bug found in review), and the residual
    epilogue: every store of h follows its load and a store of out (its first H200 run stored
    the product alone)."""
    import re

    from test_proj_cpu import _assembles_without_spills

    ptx = _gen().generate(MOE_DOWN)
    assert paths.ptx_path("sm_90a", "proj", MOE_DOWN.name).read_text() == ptx, "run gen_fp8_gemv.py"
    c = contracts.get(MOE_DOWN.name)
    res = _assembles_without_spills(MOE_DOWN.name, ptx)
    assert res["registers"] <= c.max_registers and c.dynamic_smem <= 227 * 1024
    # M <= 8 only; 3 experts x (tiles, scales) per chunk, 3 chunks, at 2 issue sites (first, refill)
    assert "BODY_M16" not in ptx and ptx.count("cp.async.bulk.shared") == 36
    head = ptx[ptx.index(".entry"):ptx.index("griddepcontrol.wait;")]
    assert "cp.async.bulk.shared" not in head and "ld.global" not in head
    stores = ptx.count("st.global.b16 [%pb]")
    assert stores and ptx.count("ld.global.b16 %q1, [%pb];  // h") == stores == ptx.count("st.global.b16 [%pc]")
    for sh in (MOE_DOWN, *EXPERTS):
        t = _gen().generate(sh)
        for a in [m.start() for m in re.finditer(r"@%pq ld\.global\.u64 %rid", t)]:
            seg = t[a:t.index("@%pq st.shared.u32", a)]
            assert not re.search(r"(setp\.[a-z0-9.]+|and\.pred|mov\.pred) %pq", seg), sh.name
    assert c.grid_for({"M": 1, "E": NUM_EXPERTS}) == (128, 1, 1) and c.grid_for({"M": 8, "E": NUM_EXPERTS}) == (SMS, 1, 1)


def test_moe_down_framework_path_matches_float64_and_chunks_tokens():
    """moe_down on the CPU (the unfused path: silu * up, expert downs, shared down, the PyTorch
    sum and residual add) against the float64 reference, with h updated in place and out the MoE
    output; 11 tokens go as chunks of 8 and 3 with the same numbers as one call per token."""
    tb = testbeds.get(MOE_DOWN.name)
    c = tb.contract
    i = tb.make({"M": 11, "E": 12}, torch.Generator().manual_seed(4), "cpu")
    want = tb.reference(i)
    h, out = i["h"].clone(), torch.full_like(i["h"], float("nan"))
    dops.moe_down(i["x"], i["w"], i["scale"], i["ids"], i["top"], i["xs"], i["ws"], i["ss"], i["glogit"], h, out)
    assert rel_err(out, want["out"]) <= c.tolerance and rel_err(h, want["h"]) <= c.tolerance
    assert rel_err(i["h"], want["h"]) > 5 * c.tolerance  # the MoE output is not negligible here
    assert torch.equal(h, (i["h"].float() + out.float()).to(torch.bfloat16))
    for t in (0, 9):
        h1, o1 = i["h"][t:t + 1].clone(), torch.empty_like(out[:1])
        dops.moe_down(i["x"][t:t + 1], i["w"], i["scale"], i["ids"][t:t + 1], i["top"][t:t + 1], i["xs"][t:t + 1],
                      i["ws"], i["ss"], i["glogit"][t:t + 1], h1, o1)
        assert torch.equal(o1[0], out[t]) and torch.equal(h1[0], h[t])


def test_moe_down_builds_and_the_op_choice():
    """fp8_gemv_n2048_k4608_moedown_s6: the fused MoE down with 6 stages, the same contract but for
    its name and shared memory, its committed PTX current; moe_down takes it from 2 tokens."""
    from netra.contracts.proj import MOE_DOWN_S6, MOE_DOWN_WIDE_M

    from test_proj_cpu import _assembles_without_spills

    c, c6 = contracts.get(MOE_DOWN.name), contracts.get(MOE_DOWN_S6.name)
    assert MOE_DOWN.NS == 3 and MOE_DOWN_S6.NS == 6 and MOE_DOWN_S6.name == MOE_DOWN.name + "_s6"
    assert c6.params == c.params and c6.dims == c.dims and c6.grid == c.grid and c6.op == c.op == "moe_down"
    assert c6.dynamic_smem == MOE_DOWN_S6.smem <= 227 * 1024 and c.dynamic_smem == MOE_DOWN.smem
    ptx = _gen().generate(MOE_DOWN_S6)
    assert paths.ptx_path("sm_90a", "proj", MOE_DOWN_S6.name).read_text() == ptx, "run gen_fp8_gemv.py"
    assert ptx.count("mbarrier.init.shared::cta.b64 [%bars+") == 6
    assert _assembles_without_spills(MOE_DOWN_S6.name, ptx)["registers"] <= c6.max_registers
    assert MOE_DOWN_WIDE_M == 2
    assert [proj.moe_down_kernel_for(m).contract.name for m in (1, 2, 3, 4, 8, 32)] == [MOE_DOWN.name] + [
        MOE_DOWN_S6.name] * 5


def test_moe_down_guard_refuses_what_it_cannot_take():
    c = contracts.get(MOE_DOWN.name)
    fake = _Fake()
    go = make_guard_and_launch(c, function_handle=1, device=-1, launch=fake, stream=lambda d: 0)
    S, N, I = MOE_DOWN.S, MOE_DOWN.N, 512

    def args(M, E=NUM_EXPERTS, k=TOP_K, idt=torch.long, plain=False):
        w = torch.zeros(E, N, I, dtype=torch.float8_e4m3fn) if plain else torch.zeros(E, S, 4, 2048, dtype=torch.float8_e4m3fn)
        return (torch.zeros(M, k * 2 * I, dtype=torch.bfloat16), w, torch.ones(E, N // 128, 4),
                torch.zeros(M, N, dtype=torch.bfloat16), torch.zeros(M, k, dtype=idt),
                torch.zeros(M, k, dtype=torch.bfloat16), torch.zeros(M, 2 * I, dtype=torch.bfloat16),
                torch.zeros(S, 4, 2048, dtype=torch.float8_e4m3fn), torch.ones(N // 128, 4),
                torch.zeros(M, 1, dtype=torch.bfloat16), torch.zeros(M, N, dtype=torch.bfloat16))

    assert go(*args(1)) is None and go(*args(8)) is None
    assert fake.calls[-1][0] == (SMS, 1, 1)
    n = len(fake.calls)
    for a in (args(9), args(2, E=128), args(2, k=4), args(2, idt=torch.int32), args(2, plain=True)):
        assert isinstance(go(*a), str)
    assert len(fake.calls) == n


def test_moe_ops_launch_more_tokens_as_chunks(monkeypatch):
    """With the kernels bound to a fake launch: moe_down takes 19 tokens as launches of 8, 8
    and 3 tokens on its 6-stage build (where its grouped pair misses: moe_act has no device here),
    fp8_linear_experts (gate | up) 19 tokens as one launch of its 32-token grouped build (above
    EXPERTS_GROUP32_ROWS rows), with no miss; nothing falls to the framework path (the outputs stay NaN: the fake writes
    nothing)."""
    c = contracts.get(MOE_DOWN.name)
    tb = testbeds.get(MOE_DOWN.name)
    i = tb.make({"M": 19, "E": NUM_EXPERTS}, torch.Generator().manual_seed(6), "cpu")
    for k in (proj.MOE_DOWN_KERNEL_S6, proj.EXPERT_GROUP32_KERNELS[(GATE_UP.S, GATE_UP.KB)]):
        fake = _Fake()
        fn = make_guard_and_launch(k.contract, function_handle=1, device=-1, launch=fake, stream=lambda d: 0)
        monkeypatch.setattr(k, "go", fn)
        k.misses.clear()
        if k is proj.MOE_DOWN_KERNEL_S6:
            h, out = i["h"].clone(), torch.full_like(i["h"], float("nan"))
            dops.moe_down(i["x"], i["w"], i["scale"], i["ids"], i["top"], i["xs"], i["ws"], i["ss"], i["glogit"], h, out)
            assert [g for g, _, _ in fake.calls] == [c.grid_for({"M": m, "E": NUM_EXPERTS}) for m in (8, 8, 3)]
            assert out.isnan().all() and torch.equal(h, i["h"])
        else:
            x = torch.zeros(19, 2048, dtype=torch.bfloat16)
            w = torch.zeros(NUM_EXPERTS, GATE_UP.S, GATE_UP.KB, 2048, dtype=torch.float8_e4m3fn)
            out = torch.full((19, TOP_K, GATE_UP.N), float("nan"), dtype=torch.bfloat16)
            dops.fp8_linear_experts(x, w, torch.ones(NUM_EXPERTS, GATE_UP.N // 128, GATE_UP.KB), i["ids"], out)
            assert [g for g, _, _ in fake.calls] == [k.contract.grid_for({"M": 19, "E": NUM_EXPERTS})]  # one launch
            assert out.isnan().all()
        assert dict(k.misses) == {}


def test_router_norm_ptx_is_current_and_its_framework_path_is_norm_then_router():
    """moe_router_norm_e256_k2048 (promoted at this commit; first run: experiments/proj/router/
    router_norm_variant_bc23de1.json): the committed PTX is current, assembles without spills
    within the contract, writes the 8 blocks of x_out; on the CPU the op is rmsnorm then the
    router bit for bit, x_out within tolerance of float64, and the ids chained on the kernel's
    own x_out are exactly the router reference's on it."""
    from test_proj_cpu import _assembles_without_spills

    from netra import ops as nops

    name = "moe_router_norm_e256_k2048"
    g = paths.generator("proj", "gen_moe_router")
    assert g.NORM_NAME == name
    ptx = g.generate(norm=True, pdl=True)
    assert paths.ptx_path("sm_90a", "proj", name).read_text() == ptx, "run gen_moe_router.py"
    c = contracts.get(name)
    assert c.pdl and not contracts.get(g.NAME).pdl
    assert _assembles_without_spills(name, ptx)["registers"] <= c.max_registers
    assert ptx.count("st.global.v4.b32 [%pxo") == 8 and "rsqrt.approx.f32" in ptx
    assert c.exact_outputs == ("idx",) and c.op == "moe_router_norm" and c.grid_for({"M": 3}) == (24, 1, 1)
    tb = testbeds.get(name)
    M = 6
    i = tb.make({"M": M}, torch.Generator().manual_seed(7), "cpu")
    x = torch.full((M, 2048), float("nan"), dtype=torch.bfloat16)
    top = torch.full((M, TOP_K), float("nan"), dtype=torch.bfloat16)
    idx = torch.full((M, TOP_K), -1, dtype=torch.long)
    dops.moe_router_norm(i["h"], i["norm_w"], 1e-6, i["w"], x, top, idx)
    x_ref = nops.rmsnorm(i["h"], i["norm_w"], 1e-6)
    t_ref, i_ref = torch.empty_like(top), torch.empty_like(idx)
    dops.moe_router(x_ref, i["w"], t_ref, i_ref)
    assert torch.equal(x, x_ref) and torch.equal(top, t_ref) and torch.equal(idx, i_ref)
    want = tb.reference_for(i, {"x_out": x})
    assert rel_err(x, want["x_out"]) <= c.tolerance
    from netra.reference.proj import router_logits, router_topk

    assert torch.equal(want["idx"], router_topk(router_logits(x, i["w"]), TOP_K)[1])
    assert not torch.equal(tb.reference(i)["x_out"], x.double())  # the float64 x is not the BF16 one


def test_router_norm_pdl_build():
    """The promoted norm router is its pdl build: against generate(norm=True) only L2 prefetches of
    the weight rows (token 0's cluster, 4 per lane, predicated) and the cluster arrive come before
    griddepcontrol.wait, launch_dependents follows it at once, h is read after it by coherent
    loads; in SASS the prefetches (CCTL) precede the wait (ACQBULK); no spills."""
    from test_proj_cpu import _assembles_without_spills

    g = paths.generator("proj", "gen_moe_router")
    plain, pdl = g.generate(norm=True), g.generate(norm=True, pdl=True)
    head, tail = pdl.split("griddepcontrol.wait;", 1)
    assert tail.lstrip().split("\n", 1)[1].lstrip().startswith("griddepcontrol.launch_dependents;")
    assert head.count("@%p prefetch.global.L2 [%o64+") == 4 and "setp.lt.u32 %p, %t0, 8;" in head
    assert not any(w in head for w in ("ld.global", "st.global", "st.shared", "cp.async"))
    x_loads = [ln for ln in tail.splitlines() if "%pa+" in ln and "{%x" in ln and "ld.global" in ln]
    assert len(x_loads) == 8 and not any(".nc" in ln for ln in x_loads)
    assert "griddepcontrol" not in plain and "prefetch" not in plain
    from collections import Counter

    from netra.runtime import build

    norm_pdl = Counter(ln.replace("ld.global.v4", "ld.global.nc.v4") for ln in pdl.splitlines())
    assert not Counter(plain.splitlines()) - norm_pdl  # nothing of the plain build is lost
    added = norm_pdl - Counter(plain.splitlines())
    assert all(ln in head or "griddepcontrol" in ln for ln in added) and len(added) == 14, added
    _assembles_without_spills(g.NORM_NAME, pdl)
    sass = build.disasm(g.NORM_NAME)
    assert sass.count("CCTL.E.PF2") == 4 and sass.rindex("CCTL.E.PF2") < sass.index("ACQBULK") < sass.index("PREEXIT")


@pytest.mark.parametrize("norm", [False, True])
def test_router_16_rank_candidate_assembles(norm):
    """gen_moe_router.generate(ranks=16) (experiments/proj/router/router_ranks_variant.json:
    bitwise; faster at M <= 8, slower at M >= 16; not promoted): a cluster of 16, 16 experts per CTA (one pair per warp), the token from ctaid / 16, no
    spills; the promoted 8-rank PTX is untouched by the option."""
    from test_proj_cpu import _assembles_without_spills

    g = paths.generator("proj", "gen_moe_router")
    t = g.generate(norm=norm, ranks=16)
    assert ".reqnctapercluster 16, 1, 1" in t and "shr.u32 %tok, %tok, 4;" in t
    assert "mad.lo.u32 %ex, %rank, 16, 0;" in t
    _assembles_without_spills(g.NORM_NAME if norm else g.NAME, t)
    assert paths.ptx_path("sm_90a", "proj", g.NORM_NAME if norm else g.NAME).read_text() == g.generate(norm=norm, pdl=norm)


@pytest.mark.parametrize("norm", [False, True])
def test_router_expert_prefetch_candidate(norm):
    """gen_moe_router.generate(prefetch_experts=True) (experiments/proj/router/moe_prefetch_variant.json:
    bitwise, 3x slower; rejected): two more parameters (w13, w2) after the promoted ones, 48 bulk L2 prefetches of
    512 KB (the 8 chosen experts' gate | up and down) issued by rank 0 after the selection and
    before the weights are computed, no spills; the promoted PTX is untouched by the option."""
    from test_proj_cpu import _assembles_without_spills

    g = paths.generator("proj", "gen_moe_router")
    t = g.generate(norm=norm, prefetch_experts=True)
    head = t[t.index(".entry"):t.index(")", t.index(".entry"))]
    assert head.rstrip().endswith(".param .u64 w13,\n  .param .u64 w2")
    assert t.count("cp.async.bulk.prefetch.L2.global [%o64], 524288;") == 2  # a loop body emitted per 32 pieces
    assert t.index("// selection 7") < t.index("cp.async.bulk.prefetch") < t.index("// weights: exp")
    assert 8 * (g.W13_BYTES + g.W2_BYTES) // g.PIECE == 48
    _assembles_without_spills(g.NORM_NAME if norm else g.NAME, t)
    assert paths.ptx_path("sm_90a", "proj", g.NORM_NAME if norm else g.NAME).read_text() == g.generate(norm=norm, pdl=norm)


# --- moe_down once per distinct expert ----------------------------------------------------------
def test_moe_down_grp_ptx_is_current_and_assembles():
    """moe_act_i512 and fp8_gemv_n2048_k4608_moedown_grp: current, no spills, within the contracts' registers and
    shared memory (one 224 KB CTA per SM); the down kernel reads only the ids and requests only weights before
    griddepcontrol.wait, and every store of h follows its load and a store of out."""
    from netra.contracts.proj import MOE_ACT, MOE_DOWN_GRP, MOE_DOWN_GRP_CONTRACT
    from test_proj_cpu import _assembles_without_spills

    g = paths.generator("proj", "gen_moe_down_grp")
    for c, ptx in ((MOE_ACT, g.act()), (MOE_DOWN_GRP_CONTRACT, g.down())):
        assert paths.ptx_path("sm_90a", "proj", c.name).read_text() == ptx, "run gen_moe_down_grp.py"
        res = _assembles_without_spills(c.name, ptx)
        assert res["registers"] <= c.max_registers and c.dynamic_smem <= 227 * 1024, (c.name, res)
    ptx = g.down()
    head = ptx[ptx.index(".entry"):ptx.index("griddepcontrol.wait;")]
    assert "ld.global" not in head.replace("ld.relaxed.gpu.global.u64 %rid", "")
    assert head.count("ld.relaxed.gpu.global.u64 %rid") == 1 and "st.global" not in head
    assert ptx.count("ld.global.b16 %q1, [%pb];  // h") == ptx.count("st.global.b16 [%pb], %q0;") - 1 == 1
    assert MOE_DOWN_GRP.smem == MOE_DOWN_GRP_CONTRACT.dynamic_smem
    assert MOE_DOWN_GRP_CONTRACT.grid_for({"M": 32, "E": NUM_EXPERTS}) == (128, 1, 1)
    assert MOE_ACT.grid_for({"M": 32}) == (144, 1, 1) and MOE_ACT.grid_for({"M": 1}) == (5, 1, 1)
    # the promoted build triggers its dependents before its wait (nothing stored or loaded before either); the build
    # before it (step_ab.py act_trigger_prev) after it
    act = g.act()
    first = act[act.index(".entry"):act.index("griddepcontrol.wait;")]
    assert "griddepcontrol.launch_dependents;" in first and "ld.global" not in first and "st.global" not in first
    prev = g.act(trigger_first=False)
    assert prev.index("griddepcontrol.wait;") < prev.index("griddepcontrol.launch_dependents;")


def test_moe_act_order_and_the_grouped_reference():
    """act_order is a permutation that puts lane group tig's B fragments (k = 16 i + 8 kh + 2 tig, + 1) in 64
    contiguous bytes; act_natural inverts it; and the grouped kernel's reference on the reference moe_act of a
    test bed equals moe_down's reference (float64), so the two kernels' contracts describe the same product."""
    from netra.reference import proj as rp

    p = rp.act_order()
    assert sorted(p.tolist()) == list(range(128))
    assert p[:32].tolist() == [16 * (r // 2) + 8 * (r % 2) + h for r in range(16) for h in range(2)]
    assert p[32].item() == 2  # lane group 1's first column
    x = torch.randn(2, 9 * 512)
    blocks = x.view(2, 36, 128)
    assert torch.equal(rp.act_natural(blocks[..., p].reshape(2, -1)).reshape(2, -1), x)
    tb = testbeds.get("fp8_gemv_n2048_k4608_moedown_grp")
    i = tb.make({"M": 3, "E": 256}, torch.Generator().manual_seed(3), "cpu")
    want = testbeds.get(MOE_DOWN.name).reference(i)["out"]
    xa, xm = rp.moe_act(i["x"], i["top"], i["xs"], i["glogit"])
    got = rp.moe_down_grp(xa, xm, i["_w_plain"], i["scale"], i["ids"], i["_ws_plain"], i["ss"])
    assert (got - want).abs().max() <= 1e-12 * want.abs().max()
    # the test bed's f16 / fp32 inputs are the reference's exactly (a BF16 value times a power of two)
    assert torch.equal(i["xa"].double(), xa) and torch.equal(i["xm"].double(), xm)


def test_moe_down_takes_the_grouped_kernels_from_their_rows():
    """On the CPU every kernel misses: from MOE_DOWN_GRP_ROWS rows (MOE_DOWN_GRP_PDL_ROWS under set_pdl) moe_down asks
    moe_act first (counted), then the per-token kernel, then the framework path; below it only the per-token kernel;
    with plain weights not even moe_act. The answer is the framework's."""
    import netra.ops as ops
    from netra.decode import ops as dops

    tb = testbeds.get(MOE_DOWN.name)
    assert dops.MOE_DOWN_GRP_PDL_ROWS <= dops.MOE_DOWN_GRP_ROWS
    for pdl, rows in ((False, dops.MOE_DOWN_GRP_ROWS), (True, dops.MOE_DOWN_GRP_PDL_ROWS)):  # each engine's threshold
        ops.set_pdl(pdl)
        try:
            assert dops.moe_down_grp_rows() == rows
            for M in (rows - 1, rows):
                i = tb.make({"M": M, "E": NUM_EXPERTS}, torch.Generator().manual_seed(M), "cpu")
                ops.reset_stats()
                h, out = i["h"].clone(), torch.empty_like(i["h"])
                dops.moe_down(i["x"], i["w"], i["scale"], i["ids"], i["top"], i["xs"], i["ws"], i["ss"], i["glogit"], h, out)
                st = ops.stats()
                assert bool(sum(st["moe_act_i512"]["misses"].values())) == (M >= rows), (pdl, M, st["moe_act_i512"])
                ref = tb.reference(i)["out"]
                assert (out.double() - ref).abs().max() <= 0.02 * ref.abs().max()
        finally:
            ops.set_pdl(False)
    # plain (unpacked) weights: no moe_act launch is asked for at all (the down kernel would refuse them)
    ops.reset_stats()
    h, out = i["h"].clone(), torch.empty_like(i["h"])
    dops.moe_down(i["x"], i["_w_plain"], i["scale"], i["ids"], i["top"], i["xs"], i["_ws_plain"], i["ss"], i["glogit"], h,
                  out)
    assert sum(ops.stats()["moe_act_i512"]["misses"].values()) == 0
    assert (out.double() - ref).abs().max() <= 0.02 * ref.abs().max()



def test_moe_down_grp_candidates():
    """down(l2_ahead=D, h_early=...) (experiments/proj/moedown_grp_ahead_variant.py; measured and rejected): off by
    default; l2_ahead asks L2 for D tasks' strips with the first copy (before the wait) and one more with each later
    copy; h_early loads h once, right after the wait, and adds that register after the sums. Both assemble without
    spills."""
    from netra.contracts.proj import MOE_DOWN_GRP_CONTRACT as c
    from test_proj_cpu import _assembles_without_spills

    g = paths.generator("proj", "gen_moe_down_grp")
    assert g.down() == g.down(l2_ahead=0, h_early=False)
    for d in (1, 2):
        ptx = g.down(l2_ahead=d)
        head, tail = ptx.split("griddepcontrol.wait;", 1)
        assert head.count("cp.async.bulk.prefetch.L2.global") == d and tail.count("cp.async.bulk.prefetch.L2.global") == 1
        assert _assembles_without_spills(c.name, ptx)["registers"] <= c.max_registers
    # the experiment's planted ids (moedown_grp_variant.id_variants, shared by both scripts)
    grpv = paths.load_module(paths.ROOT / "experiments" / "proj" / "moedown_grp_variant.py", "moedown_grp_variant")
    paths.load_module(paths.ROOT / "experiments" / "proj" / "moedown_grp_ahead_variant.py", "moedown_grp_ahead_variant")
    ids = torch.randperm(NUM_EXPERTS, generator=torch.Generator().manual_seed(5))[:24].view(3, 8)
    v = grpv.id_variants(ids)
    assert set(v) == {"drawn", "planted", "few"} and torch.equal(v["drawn"], ids) and set(grpv.id_variants(ids[:1])) == {"drawn"}
    assert v["planted"][1, 5] == ids[1, 2] and v["planted"][2, 0] == NUM_EXPERTS and (v["few"] == ids[0]).all()
    ptx = g.down(h_early=True)
    after = ptx.split("griddepcontrol.launch_dependents;", 1)[1]
    assert after.index("@%phe ld.global.b16 %qh") < after.index("TASK:")
    assert "ld.global.b16 %q1" not in ptx and ptx.count("mov.b16 %q1, %qh;") == 1
    assert _assembles_without_spills(c.name, ptx)["registers"] <= c.max_registers


def test_moe_down_grp_rotate_candidate():
    """down(rotate=True) (experiments/decode/step_ab.py moedown_rotate, a candidate): off by default; CTA s takes task
    (u + 16 s) mod T, for the first copy before the wait, at each task's start and for each later copy; the rest of
    the kernel is the promoted build's. Assembles without spills; refuses l2_ahead (its prefetch takes the unrotated
    task)."""
    from netra.contracts.proj import MOE_DOWN_GRP_CONTRACT as c
    from test_proj_cpu import _assembles_without_spills

    g = paths.generator("proj", "gen_moe_down_grp")
    assert g.down() == g.down(rotate=False) and "%tk" not in g.down()
    ptx = g.down(rotate=True)
    assert ptx.count("rem.u32 %rot, %rot, %off;") == 1 and ptx.count("add.u32 %tk, %u, %rot;") == 3
    head, tail = ptx.split("griddepcontrol.wait;", 1)
    assert head.count("add.u32 %tk, %u, %rot;") == 1 and "setp.eq.u32 %psh, %u, 0;" not in ptx
    assert _assembles_without_spills(c.name, ptx)["registers"] <= c.max_registers
    with pytest.raises(AssertionError):
        g.down(rotate=True, l2_ahead=1)
