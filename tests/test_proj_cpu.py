"""The projection family on the CPU: the generated PTX is current, the packed weight layout is
the documented mma fragment order and round-trips, and netra::fp8_linear takes the framework
path (with the same answer for packed and plain weights) wherever the kernel cannot run."""


import dataclasses
import re

import pytest
import torch

import netra.ops as ops
from netra import contracts, paths
from netra.contracts.proj import DENSE32, EXPERTS, EXPERTS_GROUP, EXPERTS_GROUP32, EXPERTS_ROUTER, EXPERTS_ROUTER_DOWN, EXPERTS_SHARED, EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32, FUSED, FUSED32, MOE_DOWN_S6, MOE_DOWNS, NORM_BA, PLAIN_BA, RES32, RES_P2, SHAPES, Fp8Gemv

KSPLIT = tuple(s for s in SHAPES + FUSED if s.ksplit > 1)
UNSPLIT = tuple(dataclasses.replace(s, ksplit=1) for s in SHAPES)  # the builds the candidates were measured on
from netra.decode import ops as dops
from netra.model import checkpoint as ck
from netra.ops import proj
from netra.reference.proj import fp8_linear as ref_fp8_linear


def _generator():
    return paths.generator("proj", "gen_fp8_gemv")


@pytest.mark.parametrize("sh", SHAPES + DENSE32 + FUSED + FUSED32 + (NORM_BA,) + PLAIN_BA + (EXPERTS_GROUP, EXPERTS_GROUP32, EXPERTS_SHARED,
                                                                EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32, EXPERTS_ROUTER,
                                                                EXPERTS_ROUTER_DOWN),
                         ids=lambda s: s.name)
def test_generated_ptx_is_current(sh):
    committed = paths.ptx_path("sm_90a", "proj", sh.name).read_text()
    assert committed == _generator().generate(sh), f"{sh.name}.ptx differs from its generator: run gen_fp8_gemv.py"


@pytest.mark.parametrize("sh", SHAPES + FUSED, ids=lambda s: s.name)
def test_contract_tiling(sh):
    c = contracts.get(sh.name)
    assert c.threads == sh.threads <= 512 and sh.K % (128 * sh.W) == 0 and sh.N % 128 == 0
    assert c.dynamic_smem == sh.smem <= 227 * 1024
    assert c.shape_of(c.tensors[1], {"M": 1}) == (sh.N // 16, sh.K // 128, 2048)
    assert sorted(c.dims["M"]) == list(range(1, 9 if sh.fuse == "norm" else 17))  # norm: M <= 8 (contracts.proj)
    # v3: W warps own the W k blocks of a chunk; the ring holds whole strips; the shared-memory
    # regions follow each other and bulk copies land 16-byte aligned; one CTA per SM
    assert sh.W * sh.NC * sh.ksplit == sh.KB and sh.NS % sh.NC == 0 and sh.SB == 2048 * sh.W
    assert sh.scl_off == sh.NS * sh.SB and sh.red_off == sh.scl_off + 64 * sh.NS
    norm = 16 * 256 * 4 + 64 if sh.fuse == "norm" else 0  # the norm prologue's sums of squares and rsqrts
    assert sh.bar_off == sh.red_off + 2 * 1024 * sh.W
    xch = (2048 + 8) * sh.slots  # ksplit: the slots of the exchange and their mbarriers (test_ksplit_builds)
    assert sh.smem == (sh.norm_off + norm if norm else (sh.xch_off if xch else sh.bar_off + 8 * sh.NS * sh.pieces) + xch)
    assert sh.norm_off >= sh.bar_off + 8 * sh.NS
    assert sh.scl_off % 16 == 0 and sh.red_off % 16 == 0 and sh.bar_off % 8 == 0 and 4 * sh.W % 16 == 0
    assert sh.grid == min(sh.ksplit * sh.S, 132) // sh.ksplit * sh.ksplit and c.pdl


@pytest.mark.parametrize("sh", KSPLIT, ids=lambda s: s.name)
def test_ksplit_builds(sh):
    """The k-split builds (clusters of 2, docs/notes/proj.md): the plain kernel's arguments, shapes,
    tolerance and bytes; each rank's chunks are half of a strip's k blocks; the exchange buffer
    slots (one per strip of a cluster) and their mbarriers follow the ring's; one CTA per SM; the
    PTX asks for the cluster, offsets x, the tiles and the scales by the rank, and exchanges by
    st.async in both bodies (M <= 8 and M > 8) after one cluster barrier; no spills."""
    from netra.contracts.proj import _contract

    c, plain = contracts.get(sh.name), _contract(dataclasses.replace(sh, ksplit=1))  # the unsplit build's
    assert sh.name == plain.name + "_ks2" and c.op == plain.op and sh.fuse in ("", "gate")
    assert (c.params, c.dims, c.tolerance, c.bytes_read, c.bytes_written) == (
        plain.params, plain.dims, plain.tolerance, plain.bytes_read, plain.bytes_written)
    assert sh.W * sh.NC * 2 == sh.KB and sh.grid % 2 == 0 and sh.walkers * 2 == sh.grid <= 132
    gate = 2 if sh.fuse == "gate" else 0  # the gate CTA: a cluster of its own, whose rank 1 exits
    assert c.grid == (str(sh.grid + gate), "1", "1") and c.threads == sh.threads >= 256  # one output per thread
    assert sh.NS * sh.SB == 3 * 32768 and sh.x_first and sh.pre_strips == 1
    assert sh.slots == -(-sh.S // sh.walkers) and sh.xch_off >= sh.bar_off + 8 * sh.NS and sh.xch_off % 16 == 0
    assert c.dynamic_smem == sh.smem == sh.xch_off + (2048 + 8) * sh.slots <= 227 * 1024
    ptx = paths.ptx_path("sm_90a", "proj", sh.name).read_text()
    assert ".reqnctapercluster 2, 1, 1" in ptx and "mov.u32 %rank, %cluster_ctarank;" in ptx
    assert f"mul.wide.u32 %pt64, %rank, {sh.K};" in ptx and f"mul.wide.u32 %pt64, %rank, {sh.KB // 2 * 2048};" in ptx
    assert ptx.count("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32") == 2
    assert ptx.count("barrier.cluster.arrive.relaxed.aligned") == 1 and ptx.count("barrier.cluster.wait") == 2
    assert ptx.count("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%sbase+") == sh.slots
    _assembles_without_spills(sh.name, ptx)


def test_pack_layout_is_the_mma_fragment_order():
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(256, 384, generator=g) * 0.02)
    q, _ = ck.quantize(w)
    p = proj.pack_weight(q)
    assert p.shape == (16, 3, 2048) and p.dtype == torch.float8_e4m3fn
    u, pu = q.view(torch.uint8), p.view(torch.uint8)
    # lane t = 5 (g 1, tig 1), chunk j = 1, byte 10: k step 3, byte 2 of the step = (row g + 8, k 2 tig)
    s, b = 7, 2
    assert pu[s, b, 1 * 512 + 5 * 16 + 10] == u[s * 16 + 9, b * 128 + 3 * 16 + 2]
    # byte 5 of chunk 0 for lane 0: k step 0, (row 0, k 8 + 1)
    assert pu[s, b, 5] == u[s * 16 + 0, b * 128 + 9]
    assert torch.equal(proj.unpack_weight(p).view(torch.uint8), u)
    with pytest.raises(ValueError, match="multiples of 128"):
        proj.pack_weight(q[:100])


def test_x_direct_packing_puts_each_threads_x_in_64_contiguous_bytes():
    """pack_weight(x_direct=True) (a measured, rejected candidate: x_direct_variant_25a5a8c.json): the
    columns of each k block are permuted so that lane (g, tig)'s 16 fragment registers are columns
    32 j + 8 tig + 2 q, + 1 (j, q = divmod(register, 4)), which x_direct_load reads as 4 16-byte loads;
    a bijection of the block, inverted by unpack_weight, and the promoted packing is unchanged."""
    from netra.contracts.proj import frag_k

    for tig in range(4):
        cols = [frag_k(step, tig, kk, x_direct=True) for step in range(8) for kk in (0, 1, 8, 9)]
        assert cols == [32 * j + 8 * tig + e for j in range(4) for e in range(8)]
        assert [frag_k(step, tig, kk) for step in range(8) for kk in (0, 1, 8, 9)] == \
            [16 * step + 2 * tig + kk for step in range(8) for kk in (0, 1, 8, 9)]
    g = torch.Generator().manual_seed(3)
    q, _ = ck.quantize(torch.randn(256, 384, generator=g) * 0.02)
    u = q.view(torch.uint8)
    p = proj.pack_weight(q, x_direct=True)
    assert not torch.equal(p.view(torch.uint8), proj.pack_weight(q).view(torch.uint8))
    assert torch.equal(proj.unpack_weight(p, x_direct=True).view(torch.uint8), u)
    # lane t = 5 (g 1, tig 1), chunk j = 1, byte 10: step 3, byte 2 of the step = (row g + 8, k index 2 tig)
    s, b = 7, 2
    assert p.view(torch.uint8)[s, b, 1 * 512 + 5 * 16 + 10] == u[s * 16 + 9, b * 128 + frag_k(3, 1, 0, x_direct=True)]


def test_fp8_linear_framework_path_packed_equals_plain_and_reference():
    g = torch.Generator().manual_seed(1)
    q, s = ck.quantize(torch.randn(1024, 2048, generator=g) * 0.02)
    x = torch.randn(3, 2048, generator=g).to(torch.bfloat16)
    a, b = torch.empty(3, 1024, dtype=torch.bfloat16), torch.empty(3, 1024, dtype=torch.bfloat16)
    ops.reset_stats()
    dops.fp8_linear(x, q, s, a)
    dops.fp8_linear(x, proj.pack_weight(q), s, b)
    assert torch.equal(a, b)
    want = ref_fp8_linear(x, q, s)
    assert ((a.double() - want).abs().max() / want.abs().max()) < 1e-2
    # the packed call reached the kernel's guard, which refused it here (no GPU), visibly
    assert sum(ops.stats()["fp8_gemv_n1024_k2048_ks2"]["misses"].values()) == 1


def test_fp8_linear_without_a_kernel_shape_takes_the_framework_path():
    q, s = ck.quantize(torch.randn(256, 256) * 0.02)
    x = torch.randn(2, 256).to(torch.bfloat16)
    out = torch.empty(2, 256, dtype=torch.bfloat16)
    assert proj.kernel_for(proj.pack_weight(q)) is None
    dops.fp8_linear(x, proj.pack_weight(q), s, out)
    want = ref_fp8_linear(x, q, s)
    assert ((out.double() - want).abs().max() / want.abs().max()) < 1e-2


def test_set_framework_switches_every_kernel_of_an_op():
    ops.set_framework("fp8_linear", True)
    try:
        assert not any(ops.stats()[sh.name]["enabled"] for sh in SHAPES)
        assert ops.stats()["rmsnorm"]["enabled"]
    finally:
        ops.set_framework("fp8_linear", False)
    assert all(ops.stats()[sh.name]["enabled"] for sh in SHAPES)
    with pytest.raises(KeyError, match="no op or kernel"):
        ops.set_framework("nonexistent", True)


def test_runner_with_real_projection_shapes_packs_and_matches_the_reference():
    """The real model's projection shapes (so every projection is packed for its kernel and
    qkvz / attention qkv are fused), few experts and a small vocabulary: the runner's packed
    path (the kernel guard refuses on the CPU, the framework path unpacks) against float64."""
    import dataclasses

    from netra.decode.runner import DecodeRunner
    from netra.model.config import QWEN36_35B_A3B
    from netra.model import packed as pk
    from netra.model.packed import pack
    from netra.reference.qwen36 import Reference

    def pack_plain(ckpt):  # the same fusions, no kernel layout
        saved, saved_e = dict(pk.BY_NK), set(pk.EXPERT_NK)
        pk.BY_NK.clear()
        pk.EXPERT_NK.clear()
        try:
            return pack(ckpt)
        finally:
            pk.BY_NK.update(saved)
            pk.EXPERT_NK.update(saved_e)

    cfg = dataclasses.replace(QWEN36_35B_A3B.with_layers(4), num_experts=8, num_experts_per_tok=2, vocab_size=1024)
    c = ck.synthetic_checkpoint(cfg, seed=41)
    p = pack(c)
    for key, shape in (("layers.0.qkvz.w", (768, 16, 2048)), ("layers.3.qkv_attn.w", (576, 16, 2048)),
                       ("layers.0.out.w", (128, 32, 2048)), ("layers.3.o.w", (128, 32, 2048)),
                       ("layers.1.sw13.w", (64, 16, 2048)), ("layers.1.sw2.w", (128, 4, 2048)),
                       ("layers.1.w13", (8, 64, 16, 2048)), ("layers.1.w2", (8, 128, 4, 2048))):
        assert tuple(p.tensors[key].shape) == shape, key
    assert tuple(p.tensors["layers.0.qkvz.s"].shape) == (96, 16)
    ops.reset_stats()
    runner = DecodeRunner(p, batch=2, max_context=16, device="cpu", page_size=16)
    plain = DecodeRunner(pack_plain(c), batch=2, max_context=16, device="cpu", page_size=16)
    ids = torch.randint(0, cfg.vocab_size, (2, 4), generator=torch.Generator().manual_seed(8))
    ref = Reference(c, torch.float64)
    st = ref.new_state(2, 16)
    for t in range(4):
        want = ref.step(ids[:, t], st)
        got = runner.step(ids[:, t]).double()
        # the packed layout changes no number on the framework path
        assert torch.equal(got, plain.step(ids[:, t]).double()), t
        # BF16 against float64 at the real widths: 4-9% of the largest logit here; a wrong
        # fusion order (q | k | v, qkv | z) is off by the logits' own size
        assert ((got - want).abs().max() / want.abs().max()) < 0.15, t
    missed = {n for n, v in ops.stats().items() if v["kernel"].startswith("fp8_gemv") and v["misses"]}
    # the runner calls the norm-prologue (GDN's with b | a), residual-epilogue and gate kernels, whose fallback
    # is the plain kernel (missed too here)
    assert missed == ({sh.name for sh in SHAPES if (sh.N, sh.K) not in ((8192, 2048), (4096, 2048))}
                      | {sh.name for sh in FUSED if sh.fuse in ("norm", "gate", "res")}
                      | {NORM_BA.name, EXPERTS_SHARED.name, EXPERTS_ROUTER.name}
                      | {sh.name for sh in EXPERTS}
                      | {MOE_DOWN_S6.name})  # moe_down at 2 rows: the 6-stage build (MOE_DOWN_WIDE_M)


def test_bf16_gemv_ptx_is_current_and_framework_path_matches():
    from netra import contracts, paths
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds
    from netra.lifecycle.metrics import rel_err

    g = paths.generator("proj", "gen_bf16_gemv")
    c = contracts.get("bf16_gemv_n64_k2048")
    assert g.NAME == c.name
    assert paths.ptx_path("sm_90a", "proj", c.name).read_text() == g.generate(**g.PROMOTED), "run gen_bf16_gemv.py"
    tb = testbeds.get(c.name)
    i = tb.make({"M": 3}, torch.Generator().manual_seed(0), "cpu")
    ob, oa = torch.empty(3, 32, dtype=torch.bfloat16), torch.empty(3, 32, dtype=torch.bfloat16)
    dops.bf16_linear2(i["x"], i["w_b"], i["w_a"], ob, oa)  # no GPU: the guard refuses, two matmuls run
    want = tb.reference(i)
    assert rel_err(ob, want["out_b"]) <= c.tolerance and rel_err(oa, want["out_a"]) <= c.tolerance


def _assembles_without_spills(name: str, ptx: str) -> dict:
    import tempfile
    from pathlib import Path

    from netra.runtime import build, toolchain

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{name}.ptx"
        path.write_text(ptx)
        res = build.resource_usage(toolchain.ptxas(), path)
    assert res["spill_stores"] == res["spill_loads"] == res["stack_frame"] == 0, (name, res)
    return res


@pytest.mark.parametrize("sh", UNSPLIT, ids=lambda s: s.name)
def test_stage_x_candidate_assembles(sh):
    """The generator's kept candidate (x staged by bulk copies, measured and rejected) stays
    buildable, and its shared memory fits."""
    g = _generator()
    _assembles_without_spills(sh.name, g.generate(sh, stage_x=True, **g.V3))
    assert g.x_stage_layout(sh)[2] + 8 <= 227 * 1024


@pytest.mark.parametrize("sh", UNSPLIT, ids=lambda s: s.name)
def test_v3_candidates_assemble_and_v3_is_reproduced(sh):
    """The options of the promoted generator stay buildable; V3 reproduces the build promoted
    at cb9faad (the records of experiments/proj/README.md), which the default replaced."""
    g = _generator()
    for kw in (g.V3, dict(g.V3, x_rows=True), dict(g.V3, x_rows=True, skip_nt1=True, packed_amax=True), dict(split_m8=False)):
        _assembles_without_spills(sh.name, g.generate(sh, **kw))
    assert "griddepcontrol.launch_dependents;  // every CTA" in g.generate(sh, **g.V3)


@pytest.mark.parametrize("sh", UNSPLIT, ids=lambda s: s.name)
def test_measured_candidates_assemble_and_x_first_follows_the_shape(sh):
    """This session's measured candidates (token groups v3t, x pairs v3p, x first v3q:
    experiments/proj/README.md) stay buildable within the shared memory limit; x first (no
    chunk requested before griddepcontrol.wait at M > 8) is in the promoted PTX exactly for the
    shapes of Fp8Gemv.x_first, and leaves the M <= 8 copy as it was."""
    g = _generator()
    for kw in (dict(tgroups=True), dict(xpair=True), dict(x_first_m16=True)):
        _assembles_without_spills(sh.name, g.generate(sh, **kw))
    assert g.x_pair_layout(sh)[2] <= 227 * 1024
    promoted = g.generate(sh)
    assert ("@%pm8 bra INIT_DONE;" in promoted) == sh.x_first
    m8 = lambda t: t[t.index("BODY_M16;"):t.index("BODY_M16:")]  # noqa: E731  (the M <= 8 copy)
    assert m8(promoted) == m8(g.generate(sh, x_first_m16=False))
    assert sh.x_first == (sh.name in ("fp8_gemv_n4096_k2048", "fp8_gemv_n2048_k4096", "fp8_gemv_n1024_k2048"))
    # x first at every M (v3r) where a CTA streams one strip of two chunks: no chunk before griddepcontrol.wait
    assert sh.pre_strips == (0 if sh.name == "fp8_gemv_n2048_k4096" else 1)
    head = promoted[promoted.index(".entry"):promoted.index("griddepcontrol.wait;")]
    assert ("cp.async.bulk.shared" in head) == (sh.pre_strips > 0)


@pytest.mark.parametrize("sh", UNSPLIT, ids=lambda s: s.name)
def test_x_prologue_candidates_assemble(sh):
    """The x-prologue candidates measured and rejected after eb934d2 (experiments/proj/README.md, the
    last sections) stay buildable: x straight into the fragments (x_direct, with the lean conversion and
    with .cg loads), the 16-byte fragment reads (x_direct="v4"), bulk-copied x at M > 8 (stage_x_m16,
    its cluster multicast) and, at K = 4096, 32 warps; the lean conversion alone leaves the promoted
    build's structure (the same x loads) and only swaps the amax and the scaling."""
    g = _generator()
    lean = dict(packed_amax="s16", scale_bf16x2=True)
    for kw in (dict(x_direct=True), dict(x_direct=True, **lean), dict(x_direct="v4", **lean),
               dict(x_direct=True, x_ld="ld.global.cg", **lean), lean):
        _assembles_without_spills(sh.name, g.generate(sh, **kw))
    if sh.ksplit == 1:
        for mode in (True, "mc"):
            ptx = g.generate(sh, stage_x_m16=mode)
            _assembles_without_spills(sh.name, ptx)
            assert ptx.count(".multicast::cluster") == (8 if mode == "mc" else 0)
        assert g.x_stage_layout(sh)[2] + 8 <= 227 * 1024
    if sh.K == 4096:
        s2 = dataclasses.replace(sh, warps=32, stages=2)
        assert (s2.name, s2.threads, s2.NC, s2.scl_bytes) == (sh.name + "_s2_w32", 1024, 1, 128)
        assert _assembles_without_spills(s2.name, g.generate(s2, pre_strips=0))["registers"] <= 64
        assert s2.smem <= 227 * 1024
    promoted, leaned = g.generate(sh), g.generate(sh, **lean)
    assert promoted.count("ld.global.v4.u32") == leaned.count("ld.global.v4.u32")
    assert "mul.rn.bf16x2" in leaned and "max.s16x2" in leaned and "mul.rn.bf16x2" not in promoted


def _run_emitted(lines, regs):
    """Interpret the few integer instructions store_partials / red_index emit; returns the stores'
    (address, register) in order."""

    ops = {"shl.b32": lambda a, b: a << b, "shr.u32": lambda a, b: a >> b, "add.u32": lambda a, b: a + b,
           "sub.u32": lambda a, b: a - b, "and.b32": lambda a, b: a & b, "xor.b32": lambda a, b: a ^ b}
    val = lambda x: regs[x] if x.startswith("%") else int(x, 0)  # noqa: E731
    stores = []
    for line in lines:
        line = line.split("//")[0].strip().rstrip(";")
        if not line:
            continue
        op, args = line.split(None, 1)
        a = [x.strip() for x in args.split(",")]
        if op in ops:
            regs[a[0]] = ops[op](val(a[1]), val(a[2]))
        elif op == "mad.lo.u32":
            regs[a[0]] = val(a[1]) * val(a[2]) + val(a[3])
        elif op == "mov.u32":
            regs[a[0]] = val(a[1])
        elif op == "st.shared.f32":
            m = re.match(r"\[(%\w+)\+(\d+)\]", a[0])
            stores.append((regs[m.group(1)] + int(m.group(2)), a[1]))
        else:
            raise AssertionError(f"unexpected instruction {op}")
    return stores


@pytest.mark.parametrize("swizzle", (False, True))
def test_partials_layout_stores_and_reads_agree(swizzle):
    """store_partials puts partial (token t, row r) of every lane where the warps' sums read output
    o = 16 t + r (red_index): the identity, or with ``red_swizzle`` o ^ 8 ((o / 32) % 2); the swizzle makes
    each warp-wide store 2-way bank-conflicted instead of 4-way (a measured candidate:
    red_swizzle_variant_8919b95.json; bitwise the promoted outputs)."""
    g = _generator()
    where, ways = {}, []
    for r in range(8):
        banks = {}
        for lane in range(32):
            e = g.Emit()
            g.store_partials(e, (0, 1), swizzle)
            stores = _run_emitted(e.lines, {"%tig": lane % 4, "%g": lane // 4, "%t0": 0})
            addr, reg = stores[r]
            assert reg == f"%acc{r}"
            token, row = 2 * (lane % 4) + r % 2 + 8 * (r // 4), lane // 4 + 8 * ((r // 2) % 2)
            where[(token, row)] = addr
            banks[addr // 4 % 32] = banks.get(addr // 4 % 32, 0) + 1
        ways.append(max(banks.values()))
    assert ways == [2 if swizzle else 4] * 8
    for (token, row), addr in where.items():
        e = g.Emit()
        g.red_index(e, "%tok", swizzle)
        regs = {"%tok": 16 * token + row}
        _run_emitted(e.lines, regs)
        assert addr == 4 * regs["%tok"], (token, row)
    assert sorted(where.values()) == list(range(0, 1024, 4))


RED_SWIZZLED = {"fp8_gemv_n8192_k2048", "fp8_gemv_n4096_k2048", "fp8_gemv_n9216_k2048", "fp8_gemv_n2048_k4096",
                "fp8_gemv_n12288_k2048_norm", "fp8_gemv_n9216_k2048_norm", "fp8_gemv_n2048_k4096_res"}


@pytest.mark.parametrize("sh", SHAPES + FUSED + EXPERTS + MOE_DOWNS, ids=lambda s: s.name)
def test_red_swizzle_builds_assemble_and_the_promoted_choice(sh):
    """Both forms assemble without spills and differ; the committed build takes Fp8Gemv.red_swizzle: on
    for the 16-warp dense builds but 12288 x 2048's plain one (red_swizzle_variant_8919b95*.json)."""
    g = _generator()
    on, off = g.generate(sh, red_swizzle=True), g.generate(sh, red_swizzle=False)
    _assembles_without_spills(sh.name, on)
    assert on != off
    assert sh.red_swizzle == (sh.name in RED_SWIZZLED)
    assert g.generate(sh) == (on if sh.red_swizzle else off)


LAND_SPLIT = {"fp8_gemv_n12288_k2048", "fp8_gemv_n8192_k2048", "fp8_gemv_n4096_k2048", "fp8_gemv_n9216_k2048",
              "fp8_gemv_n12288_k2048_norm", "fp8_gemv_n9216_k2048_norm", "fp8_gemv_n2048_k4096_res"}


@pytest.mark.parametrize("sh", SHAPES + FUSED + EXPERTS + MOE_DOWNS, ids=lambda s: s.name)
def test_land_split_builds(sh):
    """generate(land_split=q) (Fp8Gemv.pieces; experiments/proj/land_split_variant.py): only the plain, norm
    and residual 16-warp builds; each chunk's q pieces expect exactly the chunk's tiles and scales and copy
    them to where the one-copy build puts them; each warp waits on its own piece; the contract's mbarrier
    region holds NS x pieces and overlaps nothing; the committed build takes Fp8Gemv.pieces; no spills."""
    g = _generator()
    assert sh.pieces == (4 if sh.name in LAND_SPLIT else 1)
    assert sh.bar_off + 8 * sh.NS * sh.pieces <= (sh.norm_off if sh.fuse == "norm" else sh.xch_off if sh.ksplit > 1 else sh.smem)
    assert g.generate(sh) == g.generate(sh, land_split=sh.pieces)
    for q in (2, 4):
        if not (sh.ksplit == 1 and sh.fuse in ("", "norm", "res") and sh.W == 16):
            with pytest.raises(AssertionError):
                g.generate(sh, land_split=q)
            continue
        ptx = g.generate(sh, land_split=q)
        _assembles_without_spills(sh.name, ptx)
        off, smem = g.land_layout(sh, q)  # the contract's region, or after the contract's shared memory
        assert (off, smem) == (sh.bar_off, sh.smem) if q <= sh.pieces else off >= sh.smem and smem == off + 8 * sh.NS * q
        assert f"add.u32 %bars, %sbase, {off};" in ptx
        assert ptx.count("mbarrier.init.shared::cta.b64 [%bars+") == sh.NS * q
        expects = re.findall(r"mbarrier.arrive.expect_tx.shared::cta.b64 _, \[%bf\+(\d+)\], (\d+);", ptx)
        assert expects and len(expects) % q == 0
        for i in range(0, len(expects), q):  # one issue: pieces 0 .. q - 1, the chunk's bytes in all
            assert [int(o) for o, _ in expects[i:i + q]] == [8 * j for j in range(q)]
            assert sum(int(b) for _, b in expects[i:i + q]) == sh.SB + 4 * sh.W
        tiles = re.findall(r"bytes\.L2::cache_hint \[%ta\+(\d+)\], \[%pa\+(\d+)\], (\d+), \[%bf\+(\d+)\]", ptx)
        assert tiles[:q] == [(str(j * sh.SB // q),) * 2 + (str(sh.SB // q), str(8 * j)) for j in range(q)]
        scales = re.findall(r"bytes \[%lsc\+(\d+)\], \[%plq\+(\d+)\], (\d+), \[%bf\+(\d+)\]", ptx)
        sb = 4 * sh.W // q
        assert scales[:q] == [(str(sh.scl_off + j * sb), str(j * sb), str(sb), str(8 * j)) for j in range(q)]
        assert f"shr.u32 %ta, %warp, {(sh.W // q).bit_length() - 1};" in ptx
    one = g.generate(sh, land_split=1)  # the build before: one copy per chunk part, one mbarrier per stage
    assert "issue_pieces" not in one and "piece 0" not in one and "%plq" not in one
    if sh.pieces > 1:
        assert g.generate(sh) != one


def test_bf16_gemv_row_builds_assemble_and_differ_only_in_the_row_fill():
    from netra import paths

    g = paths.generator("proj", "gen_bf16_gemv")
    for rows in g.ROWS:  # the 16-row builds, which the earlier candidates were written for
        _assembles_without_spills(g.NAME, g.generate(rows, tokens=16))
    assert "cp.async.cg.shared.global" in g.generate("cp_async", tokens=16) and "cp.async.bulk" in g.generate("bulk")
    with pytest.raises(AssertionError, match="rows: expected one of"):
        g.generate("tma")
    with pytest.raises(AssertionError, match="tokens"):
        g.generate("loads", tokens=32)


def test_bf16_gemv_32_rows_keeps_the_16_row_instructions():
    """The 32-row build (since 9ca73b3) adds tokens 16..31 under M > 16 predicates; its 16-row form is the build before
    it, instruction for instruction (its comments aside), and both assemble without spills."""
    import re

    from netra import paths

    g = paths.generator("proj", "gen_bf16_gemv")
    code = lambda t: [re.sub(r"\s*//.*", "", ln) for ln in t.splitlines() if not ln.lstrip().startswith("//")]  # noqa: E731
    b16, b32 = g.generate(pdl=True, tokens=16), g.generate(**g.PROMOTED)
    assert g.PROMOTED["tokens"] == 32 == max(contracts.get(g.NAME).dims["M"])
    assert len(code(b16)) < len(code(b32))
    assert b32.count("@%pm16 ldmatrix") == 8 and b32.count("@%pm24 mma") == 8 and b32.count("@%pm16 st.async") == 8
    for b in (b16, b32):
        _assembles_without_spills(g.NAME, b)
    old = paths.ptx_path("sm_90a", "proj", g.NAME).read_text()
    assert old == b32


def test_set_pdl_rebinds_only_pdl_kernels_with_the_pdl_launcher(monkeypatch):
    """netra.ops.set_pdl: the kernels whose contract allows it are rebound with the
    programmatic-serialization launcher, the others keep the plain launch; set_pdl(False)
    undoes it. (Driver calls faked: no GPU here.)"""
    from types import SimpleNamespace

    from netra.ops import _dispatch
    from netra.runtime import gpu, launch, loader

    made = {}
    monkeypatch.setattr(gpu, "unavailable_reason", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(loader, "load", lambda name, device: SimpleNamespace(handle=1))
    monkeypatch.setattr(launch, "pdl_launcher", lambda: "PDL")
    # a cooperative kernel (Contract.cooperative) gets cuLaunchKernelEx with that attribute, and PDL's where set
    monkeypatch.setattr(launch, "ex_launcher", lambda pdl=False, cluster_policy="", cooperative=False: ("EX", pdl, cooperative))

    def fake_make(contract, *, function_handle, device, launch=None, **kw):
        made[contract.name] = launch
        return lambda *a: None

    monkeypatch.setattr(launch, "make_guard_and_launch", fake_make)
    saved = {n: (k._launch, k.go, k.launches_bound, k.kernel) for n, k in ops.OPS.items()}
    try:
        for k in ops.OPS.values():
            k._launch = None
        ops.set_pdl(True)
        ops.prepare()
        pdl_names = {k.contract.name for k in ops.OPS.values() if k.contract.pdl}
        assert pdl_names == {sh.name for sh in SHAPES + DENSE32 + FUSED + FUSED32 + (NORM_BA,) + PLAIN_BA + (EXPERTS_GROUP, EXPERTS_GROUP32, EXPERTS_SHARED, EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32, EXPERTS_ROUTER, EXPERTS_ROUTER_DOWN) + EXPERTS + MOE_DOWNS} | {"bf16_gemv_n64_k2048",
                                                                                     "gdn_decode_b32_pdl",
                                                                                     "gdn_decode_b32_smem_pdl", "gdn_decode_b32_pipe_pdl",
                                                                                     "gdn_decode_b32_spin",
                                                                                     "moe_router_norm_e256_k2048", "moe_router_norm_split_e256_k2048", "moe_router_norm_regs_e256_k2048",
                                                                                     "moe_act_i512",
                                                                                     "fp8_gemv_n2048_k4608_moedown_grp",
                                                                                     "bf16_gemv_n248320_k2048_argmax",
                                                                                     "rmsnorm_h2048", "qk_rmsnorm_d256",
                                                                                     "attn_decode_d256", "attn_decode_d256_qknorm"}
        # the cluster and long attention builds launch plainly, PDL engine included (contracts.attn)
        coop = {k.contract.name for k in ops.OPS.values() if k.contract.cooperative}
        assert coop == {EXPERTS_ROUTER.name, EXPERTS_ROUTER_DOWN.name}
        assert all(made[n] == (("EX", True, True) if n in coop else "PDL" if n in pdl_names else None) for n in made)
        assert pdl_names <= set(made)
        made.clear()
        ops.set_pdl(False)
        ops.prepare()
        assert set(made) == pdl_names  # only they were rebound
        assert all(v == (("EX", False, True) if n in coop else None) for n, v in made.items())
    finally:
        _dispatch._PDL = False
        for n, (lch, go, bound, kern) in saved.items():
            k = ops.OPS[n]
            k._launch, k.go, k.launches_bound, k.kernel = lch, go, bound, kern


def test_fused_ops_fall_back_to_the_unfused_ops():
    """On the framework path (no GPU here) fp8_linear_norm is rmsnorm then fp8_linear, and
    fp8_linear_add is fp8_linear then the BF16 add, bit for bit; packed or plain weights."""
    from netra.decode import ops as dops

    g = torch.Generator().manual_seed(3)
    q, s = ck.quantize(torch.randn(9216, 2048, generator=g) * 0.02)
    h = (torch.randn(2, 2048, generator=g) * 4).to(torch.bfloat16)
    nw = (0.1 * torch.randn(2048, generator=g)).to(torch.bfloat16)
    for w in (q, proj.pack_weight(q)):
        out, x = torch.empty(2, 9216, dtype=torch.bfloat16), torch.empty(2, 2048, dtype=torch.bfloat16)
        dops.fp8_linear_norm(h, nw, 1e-6, w, s, out, x)
        x_ref = ops.rmsnorm(h, nw, 1e-6)
        out_ref = torch.empty_like(out)
        dops.fp8_linear(x_ref, w, s, out_ref)
        assert torch.equal(x, x_ref) and torch.equal(out, out_ref)
    q, s = ck.quantize(torch.randn(2048, 4096, generator=g) * 0.02)
    xo = torch.randn(3, 4096, generator=g).to(torch.bfloat16)
    for w in (q, proj.pack_weight(q)):
        hh = torch.randn(3, 2048, generator=g).to(torch.bfloat16)
        h0 = hh.clone()
        prod = torch.full_like(h0, float("nan"))
        dops.fp8_linear_add(xo, w, s, hh, prod)
        y = torch.empty_like(h0)
        dops.fp8_linear(xo, w, s, y)
        assert torch.equal(prod, y) and torch.equal(hh, h0 + y) and not torch.equal(hh, h0)


def test_norm_ba_build():
    """fp8_gemv_n12288_k2048_norm_ba: the norm kernel's PTX with the b | a CTAs branched off first and their code
    after it (the FP8 path is the same text but for the stride, against the norm build with the b | a build's x staging:
    x_tpose is on for the norm build alone), assembled without spills within the contract's
    registers; its walkers take 6 strips each, as the plain build's busiest CTAs; its shared memory holds the b | a
    CTA's rows; the contract adds the four tensors after the norm kernel's."""
    g = _generator()
    sh = next(s for s in FUSED if s.N == 12288)
    ba, plain = g.generate(NORM_BA), g.generate(sh, x_tpose=NORM_BA.x_tpose, maxnreg=NORM_BA.maxnreg,
                                                 strong_out=NORM_BA.strong_out)
    assert NORM_BA.name == sh.name + "_ba" and NORM_BA.walkers == 128 and NORM_BA.S % NORM_BA.walkers == 0
    assert -(-sh.S // sh.walkers) == NORM_BA.S // NORM_BA.walkers  # the busiest CTA's strips: no more than before
    _check_ba_build(g, NORM_BA, sh, ba, plain, "fp8_linear_norm_ba")
    assert ba.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%sbase+") >= 16


def _check_ba_build(g, ba, sh, ptx: str, plain: str, op: str):
    """A b | a build's PTX is its FP8 build's (``plain``, of shape ``sh``) with the b | a CTAs branched off first and
    their code after it, assembles without spills within its contract's registers, fits its CTA's rows in its shared
    memory; the contract adds the four tensors after the FP8 build's, keeps its grid. Returns both contracts."""
    fp8_part = ptx.split("\nBA:\n")[0]
    branch = ("    sub.u32 %nct, %nct, 4;  // the last 4 CTAs are b | a's; the others stream the FP8 weights\n"
              "    setp.ge.u32 %p, %s, %nct;\n    @%p bra BA;\n")
    assert branch in fp8_part
    body = lambda t: t.split(".reqntid")[1]  # noqa: E731  (after the entry's parameters)
    assert body(fp8_part.replace(branch, "")).rstrip() == body(plain).rsplit("}", 1)[0].rstrip()
    res = _assembles_without_spills(ba.name, ptx)
    c, cp = contracts.get(ba.name), contracts.get(sh.name)
    assert res["registers"] <= c.max_registers and c.dynamic_smem == ba.smem >= g.ba_layout(ba)[1] + 8
    assert [t.name for t in c.params] == [t.name for t in cp.params] + ["w_b", "w_a", "out_b", "out_a"]
    assert c.grid == cp.grid == ("132", "1", "1") and c.op == op and "bitwise" in c.reduction_order
    assert ptx.count("griddepcontrol.wait;") == plain.count("griddepcontrol.wait;") + 1
    return c, cp


@pytest.mark.parametrize("ba", PLAIN_BA, ids=lambda s: s.name)
def test_plain_ba_build(ba):
    """fp8_gemv_n12288_k2048_ba and _ba_t32: the plain 16- / 32-token build's PTX with the b | a CTAs branched off first
    and their code after it (the FP8 path the same text but for the stride), assembled without spills within the
    contract's registers; the 128 walkers take 6 strips each, as the plain build's busiest CTAs; the shared memory holds
    a round of x rows (8 / 16), the 16 weight rows, the slots and the mbarrier within the plain build's; the contract
    adds the four tensors after the plain kernel's and keeps its rows."""
    g = _generator()
    sh = next(s for s in SHAPES + DENSE32 if s.N == 12288 and s.tokens == ba.tokens)
    ptx, plain = g.generate(ba), g.generate(sh)
    assert ba.name == sh.name + "_ba" if ba.tokens == 16 else ba.name == "fp8_gemv_n12288_k2048_ba_t32"
    assert ba.walkers == 128 and -(-sh.S // sh.walkers) == ba.S // ba.walkers == 6
    c, cp = _check_ba_build(g, ba, sh, ptx, plain, "fp8_linear_ba")
    assert c.max_registers == cp.max_registers and c.dynamic_smem == cp.dynamic_smem and g.ba_rows(ba) == ba.tokens // 2
    assert c.dims["M"] == cp.dims["M"] == tuple(range(1, ba.tokens + 1))
    assert "BA_ROUND:" in ptx and ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == ba.tokens // 2


@pytest.mark.parametrize("M", [12, 20])
def test_ba_op_is_the_ba_op_then_the_linear_op_on_the_framework_path(M):
    """fp8_linear_ba without a device (the kernel's miss) is bf16_linear2 then fp8_linear, bit for bit, at 12 and 20
    rows, within the contract's tolerance of the float64 reference."""
    from netra.decode import ops as dops
    from netra.lifecycle import metrics, testbeds

    tb = testbeds.get(next(s for s in PLAIN_BA if s.tokens >= M).name)
    i = tb.make({"M": M}, torch.Generator().manual_seed(7), "cpu")
    o = [torch.empty(M, n, dtype=torch.bfloat16) for n in (12288, 32, 32)]
    dops.fp8_linear_ba(i["x"], i["w"], i["scale"], o[0], i["w_b"], i["w_a"], o[1], o[2])
    peer = tb.peers["netra_unfused"](i, {})
    got = dict(zip(("out", "out_b", "out_a"), o))
    assert all(torch.equal(got[n], peer[n]) for n in got)
    ref = tb.reference(i)
    assert max(metrics.output_error(got[n], ref[n]) for n in ref) <= tb.contract.tolerance


def test_maxnreg_builds_leave_room_for_gdn_decode():
    """GDN's in_proj (norm_ba) and the one-pass residual build carry Fp8Gemv.maxnreg as a .maxnreg directive, assemble
    within it without spills, and their contract's register bound plus gdn_decode's (both engines' builds) fit one SM's
    64 K registers (allocated per warp in units of 256), so under PDL a gdn_decode CTA can start beside one of theirs.
    No other build of the generator is capped."""
    g = _generator()
    capped = [sh for sh in FUSED + (NORM_BA,) if sh.maxnreg]
    assert sorted(sh.name for sh in capped) == ["fp8_gemv_n12288_k2048_norm_ba", "fp8_gemv_n2048_k4096_res"]
    regs = lambda c: c.threads // 32 * -(-c.max_registers * 32 // 256) * 256  # noqa: E731
    for sh in capped:
        ptx = g.generate(sh)
        assert re.findall(r"^\s*\.maxnreg (\d+)$", ptx, re.M) == [str(sh.maxnreg)]
        assert paths.ptx_path("sm_90a", "proj", sh.name).read_text() == ptx
        c = contracts.get(sh.name)
        assert c.max_registers == sh.maxnreg == 104
        assert _assembles_without_spills(sh.name, ptx)["registers"] <= sh.maxnreg
        for gdn in ("gdn_decode_b32", "gdn_decode_b32_pdl"):
            assert regs(c) + regs(contracts.get(gdn)) <= 65536, (sh.name, gdn)
        assert regs(dataclasses.replace(c, max_registers=128)) + regs(contracts.get("gdn_decode_b32_pdl")) > 65536
    for sh in SHAPES + DENSE32 + FUSED32 + EXPERTS + PLAIN_BA:
        assert not sh.maxnreg and ".maxnreg" not in g.generate(sh), sh.name


def test_norm_ba_op_falls_back_to_the_two_ops():
    """On the framework path fp8_linear_norm_ba is fp8_linear_norm then bf16_linear2, bit for bit, and within
    the contract's tolerance of the float64 reference."""
    from netra.decode import ops as dops
    from netra.lifecycle import metrics, testbeds

    tb = testbeds.get(NORM_BA.name)
    i = tb.make({"M": 3}, torch.Generator().manual_seed(4), "cpu")
    out, x = torch.empty(3, 12288, dtype=torch.bfloat16), torch.empty(3, 2048, dtype=torch.bfloat16)
    ob, oa = torch.empty(3, 32, dtype=torch.bfloat16), torch.empty(3, 32, dtype=torch.bfloat16)
    dops.fp8_linear_norm_ba(i["h"], i["norm_w"], 1e-6, i["w"], i["scale"], out, x, i["w_b"], i["w_a"], ob, oa)
    peer = tb.peers["netra_unfused"](i, {"eps": 1e-6})
    assert all(torch.equal(a, peer[n]) for a, n in ((out, "out"), (x, "x_out"), (ob, "out_b"), (oa, "out_a")))
    ref = tb.reference(i)
    got = {"out": out, "x_out": x, "out_b": ob, "out_a": oa}
    assert max(metrics.output_error(got[n], ref[n]) for n in ref) <= contracts.get(NORM_BA.name).tolerance


def test_norm_ba_op_above_the_kernel_rows_runs_b_a_first_under_ba_first(monkeypatch):
    """Above the norm_ba kernel's 8 rows fp8_linear_norm_ba falls back to the norm, in_proj_qkv | z and b | a; with
    decode.ops.BA_FIRST b | a comes right after the norm (so under PDL the in_proj's weights stream while it runs),
    with the same outputs bit for bit; at the kernel's rows nothing changes."""
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds

    tb = testbeds.get(NORM_BA.name)
    a, b = (tb.make({"M": 8}, torch.Generator().manual_seed(s), "cpu") for s in (5, 6))
    i = {**a, "h": torch.cat([a["h"], b["h"][:4]])}
    M = i["h"].shape[0]
    assert M > max(contracts.get(NORM_BA.name).dims["M"])
    calls = []
    for name in ("rmsnorm", "bf16_linear2", "linear"):
        real = getattr(dops, name)
        monkeypatch.setattr(dops, name, lambda *x, _r=real, _n=name, **k: (calls.append(_n), _r(*x, **k))[1])
    outs = {}
    for first in (False, True):
        monkeypatch.setattr(dops, "BA_FIRST", first)
        o = (torch.empty(M, 12288, dtype=torch.bfloat16), torch.empty(M, 2048, dtype=torch.bfloat16),
             torch.empty(M, 32, dtype=torch.bfloat16), torch.empty(M, 32, dtype=torch.bfloat16))
        calls.clear()
        dops.fp8_linear_norm_ba(i["h"], i["norm_w"], 1e-6, i["w"], i["scale"], o[0], o[1], i["w_b"], i["w_a"], o[2], o[3])
        outs[first] = (o, list(calls))
    assert outs[False][1] == ["rmsnorm", "linear", "bf16_linear2"] and outs[True][1] == ["rmsnorm", "bf16_linear2", "linear"]
    assert all(torch.equal(x, y) for x, y in zip(outs[False][0], outs[True][0]))
    calls.clear()  # at the kernel's rows (its miss here: no device) the order is the norm-fused op's
    o = (torch.empty(8, 12288, dtype=torch.bfloat16), torch.empty(8, 2048, dtype=torch.bfloat16),
         torch.empty(8, 32, dtype=torch.bfloat16), torch.empty(8, 32, dtype=torch.bfloat16))
    dops.fp8_linear_norm_ba(a["h"], a["norm_w"], 1e-6, a["w"], a["scale"], o[0], o[1], a["w_b"], a["w_a"], o[2], o[3])
    assert dops.BA_FIRST and calls == ["rmsnorm", "linear", "bf16_linear2"]


def test_experts_shared_build():
    """fp8_gemv_n1024_k2048_moe_shared: the gate | up experts' PTX with the shared expert's pairs (id E, its own weight
    and scale bases, rows to sout) and the gate CTA (the last, as the unsplit gate build's), assembled without spills;
    its contract adds the five tensors after the experts kernel's, its grid keeps one CTA for the gate."""
    g = _generator()
    ptx = g.generate(EXPERTS_SHARED)
    res = _assembles_without_spills(EXPERTS_SHARED.name, ptx)
    c, ce = contracts.get(EXPERTS_SHARED.name), contracts.get(EXPERTS[0].name)
    assert res["registers"] <= c.max_registers and c.dynamic_smem == EXPERTS_SHARED.smem <= 227 * 1024
    assert [t.name for t in c.params] == [t.name for t in ce.params] + ["ws", "ss", "sout", "gate_w", "gate_out"]
    assert c.grid_for({"M": 1, "E": 256}) == (132, 1, 1) and c.op == "fp8_linear_experts_shared"
    assert "GATE:" in ptx and "@%p bra GATE;" in ptx and ptx.count("selp.b64 %psb, %pws, %pw, %psh;") >= 1
    assert "or.pred %pe, %pe, %p;  // the shared pairs' id E (a routed id E is outside)" in ptx
    assert "setp.gt.u32 %pe, %ls, %ne;" in ptx
    plain = g.generate(EXPERTS[0])
    assert "GATE:" not in plain and "%psh" not in plain  # the routed build is untouched


@pytest.mark.parametrize("sh", (EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32), ids=lambda s: s.name)
def test_experts_shared_group_build(sh):
    """fp8_gemv_n1024_k2048_moe_shared_grp (and _t32): the grouped gate | up with the shared expert as distinct expert
    0, assembled without spills; its contract is the merged build's (the same tensors, grid SMS with the gate CTA last),
    its PDL note says what goes before the wait. The PTX: list entry 0 set to E and CTA s < S's shared strip requested
    before the wait; the routed experts listed from entry 1, U + 1 distinct experts; the ids table only the 8 M routed
    pairs (no shared pairs: a pair of id E would be a NaN row); a shared strip stores every token's row to sout, stride
    N; _t32: a shared strip's n-tiles are those with a token < M, the gate CTA in rounds of 16 tokens. The grouped and
    merged builds are untouched (their committed PTX: test_generated_ptx_is_current)."""
    g = _generator()
    ptx = g.generate(sh)
    res = _assembles_without_spills(sh.name, ptx)
    c, cm = contracts.get(sh.name), contracts.get(EXPERTS_SHARED.name)
    assert res["registers"] <= c.max_registers and c.dynamic_smem == sh.smem <= 227 * 1024
    assert [t.name for t in c.params] == [t.name for t in cm.params] and c.op == cm.op == "fp8_linear_experts_shared"
    assert all(c.grid_for({"M": m, "E": 256}) == (132, 1, 1) for m in c.dims["M"]) and max(c.dims["M"]) == sh.tokens
    assert "before griddepcontrol.wait" in c.pdl and "each distinct expert" in c.reduction_order
    bm, uo, lo, po, so = g.group_layout(sh)
    assert po == lo + 4 * (sh.max_pairs + 4) and so == po + 256  # one more list entry (16-aligned)
    pre, post = ptx.split("griddepcontrol.wait;", 1)
    assert f"st.shared.u32 [%sbase+{lo}], %ne;" in pre and pre.count("cp.async.bulk.shared::cluster.global") == 2
    assert f"setp.lt.u32 %p, %s, {sh.S};" in pre
    bodies = 1 if sh.tokens == 32 else 2
    assert post.count(f"st.shared.u32 [%t1+{lo + 4}], %t3;") == bodies  # the routed list from entry 1
    assert post.count("add.u32 %t0, %t0, 1;  // and the shared expert, distinct expert 0") == bodies
    assert "id E" not in post.split("GATE:")[0].split("// the distinct experts")[0]  # no shared pairs in the ids
    assert post.count("selp.b32 %gstr, 1024, 8192, %psh;") == bodies
    assert post.count("selp.b64 %psb, %pso, %po, %psh;") == bodies
    assert "GATE:" in post and ("GATE_ROUND:" in post) == (sh.tokens == 32)
    if sh.tokens == 32:
        # unpredicated (a predicated setp there made ptxas fence every predicated mma with a WARPSYNC: 33 in the loop)
        assert all(f"setp.gt.and.u32 %p, %m, {8 * nt}, %psh;" in post and f"setp.ne.or.u32 %pn{nt}, %t1, 0, %p;" in post
                   for nt in range(4)) and "@%psh setp" not in post and "@!%psh ld.shared.v2" not in post


def test_experts_router_build():
    """fp8_gemv_n1024_k2048_moe_shared_router: the merged gate | up with the router phase first, assembled without
    spills within one CTA per SM; its contract renames x and ids to the outputs x_out and idx and appends the router's
    tensors, grid SMS at every M; the PTX: the router rows and the first shared strip requested before the wait, one
    arrival on the barrier counter (u64, release) and an acquire spin, the router's 8 redux selections, the shared
    pairs first; the merged build is untouched."""
    from netra.contracts import proj as pc

    g = _generator()
    ptx = g.generate(EXPERTS_ROUTER)
    res = _assembles_without_spills(EXPERTS_ROUTER.name, ptx)
    c = contracts.get(EXPERTS_ROUTER.name)
    assert res["registers"] <= c.max_registers and c.dynamic_smem == EXPERTS_ROUTER.smem <= 227 * 1024
    assert EXPERTS_ROUTER.smem > 114 * 1024, "two CTAs on one SM would leave others empty: the barrier needs one per SM"
    names = [t.name for t in c.params]
    assert names[:12] == ["x_out" if n == "x" else "idx" if n == "ids" else n
                          for n in (t.name for t in contracts.get(EXPERTS_SHARED.name).params)]
    assert names[12:] == ["h", "norm_w", "eps", "rw", "top", "logits", "bar"]
    assert all(c.grid_for({"M": m, "E": 256}) == (pc.SMS, 1, 1) for m in c.dims["M"]) and max(c.dims["M"]) == 8
    assert c.op == "fp8_linear_experts_router" and set(c.exact_outputs) == {"idx", "logits", "bar"}
    pre, post = ptx.split("griddepcontrol.wait;", 1)
    assert pre.count("cp.async.bulk.shared::cluster.global") >= 4  # two router rows, the shared strip's tiles and scales
    assert "RT_PRE_DONE:" in pre and "RT_SPIN:" in post
    assert ptx.count("atom.release.gpu.global.add.u64") == 1 and ptx.count("ld.acquire.gpu.global.u64") == 1
    assert "fence.acq_rel.gpu" not in ptx  # the barrier's release and acquire are the atomic and the spin (lean)
    assert post.count("redux.sync.max.u32") == 8 and "ld.global.cg.v4.f32" in post
    assert "mov.u32 %p8m, %m;" in ptx and "setp.lt.u32 %psh, %ej, %p8m;" in ptx
    assert post.index("RT_ISSUED:") < post.index("x rows of k block")  # the chunks before the x loads
    assert "RT_" not in g.generate(EXPERTS_SHARED)


def test_experts_router_down_build():
    """fp8_gemv_n1024_k2048_moe_shared_router_down: the router-fused launch with moe_down as its third phase, assembled
    without spills within one CTA per SM; its contract is the router-fused one at M = 1 with h in place and moe_down's
    weights and output appended; the PTX: one grid barrier (no second one, no counters), the rows this CTA will write
    poisoned before it, the rows and the gate logit stored strong, each task's spin on its own rows (strong loads, a
    bounded count), moe_down's 36 blocks of 8 mma steps; the router-fused build is untouched."""
    from netra.contracts import proj as pc

    g = _generator()
    ptx = g.generate(EXPERTS_ROUTER_DOWN)
    res = _assembles_without_spills(EXPERTS_ROUTER_DOWN.name, ptx)
    c = contracts.get(EXPERTS_ROUTER_DOWN.name)
    assert res["registers"] <= c.max_registers and c.dynamic_smem == EXPERTS_ROUTER_DOWN.smem <= 227 * 1024
    names = [t.name for t in c.params]
    assert names[:-5] == [t.name for t in contracts.get(EXPERTS_ROUTER.name).params]
    assert names[-5:] == ["w2", "s2", "sw2", "ss2", "moe_out"] and c.dims["M"] == (1,) and c.cooperative
    assert next(t for t in c.params if t.name == "h").role == "inout" and c.op == "fp8_linear_experts_router_down"
    assert c.grid_for({"M": 1, "E": 256}) == (pc.SMS, 1, 1) and set(c.exact_outputs) == {"idx", "logits", "bar"}
    pre_barrier, post = ptx.split("RT_SPIN:", 1)
    assert ptx.count("atom.release.gpu.global.add.u64") == 1 and "DN_SPIN" not in ptx and "cnt" not in ptx
    assert pre_barrier.count("st.relaxed.gpu.global.b16") == 2  # the rows' and the gate logit's poison
    assert "mov.b16 %h, 0xffff;" in pre_barrier and "fence.acq_rel" not in post.split("DN_PHASE:")[0].split("STRIP_M8:")[1]
    assert post.count("st.relaxed.gpu.global.b16 [%pb], %q0;") == 1 and post.count("st.relaxed.gpu.global.b16 [%pa], %q0;") == 1
    assert post.count("ld.relaxed.gpu.global.v2.u32") == 6 and post.count("@%p trap;") == 3
    assert post.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%dacc0") == 3 * 8
    assert "st.relaxed.gpu" not in g.generate(EXPERTS_ROUTER) and "DN_PHASE" not in g.generate(EXPERTS_ROUTER)


def test_experts_group_build():
    """fp8_gemv_n1024_k2048_moe_grp: the routed gate | up walking the launch's distinct experts (the bitmap, the
    ascending list, the slot masks zeroed before the wait), assembled without spills; its contract is the per-pair
    kernel's but for its name and shared memory; fp8_linear_experts takes it from EXPERTS_GROUP_ROWS rows."""
    from netra.decode import ops as dops

    g = _generator()
    ptx = g.generate(EXPERTS_GROUP)
    res = _assembles_without_spills(EXPERTS_GROUP.name, ptx)
    c, cp = contracts.get(EXPERTS_GROUP.name), contracts.get(EXPERTS[0].name)
    assert res["registers"] <= c.max_registers and c.dynamic_smem == EXPERTS_GROUP.smem <= 227 * 1024
    assert c.params == cp.params and c.dims == cp.dims and c.op == cp.op == "fp8_linear_experts"
    pre, post = ptx.split("griddepcontrol.wait;", 1)
    assert pre.count("st.shared.u32") == 2  # the slot masks and the bitmap zeroed
    assert post.count("red.shared.or.b32") == 4 and post.count("U S virtual strips") == 2  # both bodies
    assert "GNAN_M8:" in post and "@%p ret;  // no strip" in post
    assert "GNAN" not in g.generate(EXPERTS[0])
    assert proj.EXPERT_GROUP_KERNELS[(EXPERTS_GROUP.S, EXPERTS_GROUP.KB)].contract.name == EXPERTS_GROUP.name
    assert 2 <= dops.EXPERTS_GROUP_ROWS <= 16


@pytest.mark.parametrize("sh", DENSE32, ids=lambda s: s.name)
def test_dense32_build(sh):
    """The 32-token dense builds: one body of 4 n-tiles (x and fragments of 32 tokens; 2 KB of partials per warp), no
    spills at 128 registers, no n-tile skip (every token's row is an output), the plain contract but for M <= 32;
    linear takes them above DENSE32_ROWS rows, and more than 32 rows as launches of 32."""
    from netra.decode import ops as dops

    ptx = _generator().generate(sh)
    res = _assembles_without_spills(sh.name, ptx)
    c, cp = contracts.get(sh.name), contracts.get(Fp8Gemv(sh.N, sh.K, sh.use).name)
    assert res["registers"] <= c.max_registers and c.dynamic_smem == sh.smem <= 227 * 1024
    assert c.params == cp.params and c.dims["M"] == tuple(range(1, 33)) and c.op == cp.op == "fp8_linear"
    post = ptx.split("griddepcontrol.wait;", 1)[1]
    assert post.count("mma.sync") == 4 * 8 and "@%pn" not in post and "_M8" not in post and "%xr3_0_15" in post
    assert proj.KERNELS32[(sh.S, sh.KB)].contract.name == sh.name and proj.KERNELS32[(sh.S, sh.KB)].max_rows == 32
    assert dops.DENSE32_ROWS == 16


def test_res32_build():
    """fp8_gemv_n2048_k4096_res_p2: the residual build for up to 32 rows as two passes over each CTA's one strip. Its PTX
    is the 16-row build's plus the second pass (PASS_END: a barrier, x, h and out 16 rows on, M - 16, back to PASS)
    and a skip of the chunk requests in that pass, nothing else; no spills at 128 registers; the residual contract
    but for M <= 32 (both body copies in pass 2 among its check and sanitizer cases); fp8_linear_add takes it above
    RES32_ROWS rows until RES32 replaced it (now RES32's bench peer)."""
    from netra.decode import ops as dops

    sh = RES_P2
    one = Fp8Gemv(sh.N, sh.K, sh.use, sh.fuse)
    g = _generator()
    ptx, ptx16 = g.generate(sh), g.generate(one, h_early=False)  # (h_early: the 16-row build's since fdd15d3, not p2's)
    res = _assembles_without_spills(sh.name, ptx)
    c, c16 = contracts.get(sh.name), contracts.get(one.name)
    assert res["registers"] <= c.max_registers and c.dynamic_smem == c16.dynamic_smem == sh.smem
    assert c.params == c16.params and c.dims["M"] == tuple(range(1, 33)) and c.op == c16.op == "fp8_linear_add"
    assert c.grid == c16.grid and sh.S == sh.grid and sh.NS == sh.NC == 2  # one strip per CTA, held whole by the ring
    assert {8 < m - 16 <= 16 for m in (d["M"] for d in c.sanitize_cases) if m > 16} == {True, False}
    added = [ln for ln in ptx.splitlines() if ln not in ptx16.replace(one.name, sh.name).splitlines()]
    assert added[0].startswith("// ") and "M in 1..32" in added[0] and added[1].startswith("// Tokens 16")
    body = [ln.split("//")[0].strip() for ln in added[2:]]
    # the first pass with M clamped to 16: the stores run to M rows, and its partials hold 16 tokens
    assert body == [".reg .pred %pp2;", "min.u32 %m, %m, 16;", "setp.ne.u32 %pp2, %th, %th;", "PASS:",
                    "@%pp2 bra REST_ISSUED_M8;", "bra.uni PASS_END;", "@%pp2 bra REST_ISSUED;", "bra.uni PASS_END;",
                    "PASS_END:", "@%pp2 ret;", "ld.param.u32 %t0, [M];", "setp.le.u32 %p, %t0, 16;", "@%p ret;",
                    "bar.sync 0;", "setp.eq.u32 %pp2, %th, %th;", "sub.u32 %m, %t0, 16;", f"add.u64 %px, %px, {32 * sh.K};",
                    f"add.u64 %po, %po, {32 * sh.N};", f"add.u64 %pmo, %pmo, {32 * sh.N};", "mov.u32 %s, %ctaid.x;",
                    "bra.uni PASS;"], body
    assert ptx16.count("    ret;") == 2 and ptx.count("    ret;") == 0  # each body copy's ret became the branch
    assert proj.RES_P2_KERNELS[(sh.S, sh.KB)].contract.name == sh.name and proj.RES_P2_KERNELS[(sh.S, sh.KB)].max_rows == 32
    assert dops.RES32_ROWS == 16 == max(c16.dims["M"])
    # the rejected strip-first form (step_ab.py res_pre_all): the whole strip before the wait, no request after it
    pre = g.generate(sh, pre_strips=1, x_first_m16=False)
    _assembles_without_spills(sh.name, pre)
    copies = lambda text: sum(ln.strip().startswith("cp.async.bulk") for ln in text.splitlines())  # noqa: E731
    head, tail = pre.split("griddepcontrol.wait;", 1)
    head16, tail16 = ptx.split("griddepcontrol.wait;", 1)
    # the strip's 2 chunks as 4 pieces and their scales before the wait, where the promoted build has none; after it
    # the two body copies' requests of the strip (16 each) are gone, the strip loop's requests of later strips stay
    assert (copies(head), copies(head16)) == (16, 0) and copies(tail) == copies(tail16) - 32 and "REST_ISSUED" not in pre
    with pytest.raises(AssertionError, match="two passes"):
        g.generate(sh, pre_strips=1)  # x first above 8 rows with the strip before the wait: a second request


def test_p2_early_candidate_assembles():
    """The two-pass candidate (experiments/proj/p2_early_variant.py): no spills at 128 registers; the second pass's x
    loads (both n-tiles, bounded by M - 16) once, in the M > 8 copy after the last chunk's mma; each body copy skips
    its own loads in the second pass, and PASS_END no longer moves x; the committed build untouched."""
    sh = RES_P2
    g = _generator()
    ptx = g.generate(sh, p2_early=True)
    res = _assembles_without_spills(sh.name, ptx)
    assert res["registers"] <= contracts.get(sh.name).max_registers
    early = ptx.split("@%pp2 bra XE_DONE;", 1)[1].split("XE_DONE:", 1)[0]
    assert early.count("setp.lt.u32 %pv, %tok, %mx;") == 4 * 2 * sh.NC and early.count("prefetch.global.L2") == 1
    assert ptx.count("XE_DONE:") == 1 and ptx.count("@%pp2 bra XL_DONE") == 2 and ptx.count("add.u64 %px") == 1
    assert ptx.index("XE_DONE:") > ptx.index("BODY_M16:") and paths.ptx_path("sm_90a", "proj", sh.name).read_text() == g.generate(sh)


@pytest.mark.parametrize("sh", [s for s in FUSED + MOE_DOWNS if s.fuse in ("res", "moedown") and s.passes == 1
                                and s.ksplit == 1], ids=lambda s: s.name)
def test_h_early_candidate_assembles(sh):
    """The residual builds loading h at each strip's start (experiments/proj/h_early_variant.py; the committed build
    since ef66686 where Fp8Gemv.h_early says so): no spills within the contract's registers; one predicated h load at
    the top of each strip loop copy and none after the sums (the add takes the register); the committed PTX is the
    generator's default."""
    g = _generator()
    ptx = g.generate(sh, h_early=True)
    res = _assembles_without_spills(sh.name, ptx)
    assert res["registers"] <= contracts.get(sh.name).max_registers
    assert "ld.global.b16 %q1, [%pb]" not in ptx
    assert ptx.count("mov.b16 %q1, %qh;") == ptx.count("add.rn.f32 %f0, %f1, %f0;")
    loops = re.findall(r"\nSTRIP(_M\d+)?:\n(.*?)WAIT0", ptx, re.S)
    assert loops and all(body.count("@%phe ld.global.b16 %qh, [%hep];") == 1 for _, body in loops)
    assert ptx.count("@%phe ld.global.b16 %qh") == len(loops)
    assert paths.ptx_path("sm_90a", "proj", sh.name).read_text() == g.generate(sh)
    with pytest.raises(AssertionError, match="h_early"):
        g.generate(SHAPES[0], h_early=True)


def test_h_early_split_candidate_assembles():
    """RES32 loading h of its cluster's (at most two) strips before the walk (generate(h_early=True): h_early_split;
    experiments/proj/h_early_split_variant.py): no spills within the contract's registers; the two predicated loads
    once, after the x prologue and before the strip loop; split_finish selects one (selp) instead of loading h after
    the peer's sums; the committed PTX is the generator's default; builds of two passes still refuse h_early."""
    g = _generator()
    ptx = g.generate(RES32, h_early=True)
    res = _assembles_without_spills(RES32.name, ptx)
    assert res["registers"] <= contracts.get(RES32.name).max_registers
    assert "ld.global.b16 %q1, [%pb]" not in ptx
    assert ptx.count("selp.b16 %q1, %qh0, %qh1, %p;") == ptx.count("add.rn.f32 %f0, %f1, %f0;") >= 1
    for q in ("%qh0", "%qh1"):
        assert ptx.count(f"@%phe ld.global.b16 {q}, [%hep];") == 1
        at = ptx.index(f"@%phe ld.global.b16 {q}")
        assert ptx.index("griddepcontrol.wait;") < ptx.index("barrier.cluster.wait") < at < ptx.index("\nSTRIP")
    assert -(-RES32.S // RES32.walkers) <= 2
    assert paths.ptx_path("sm_90a", "proj", RES32.name).read_text() == g.generate(RES32)
    with pytest.raises(AssertionError, match="h_early"):
        g.generate(RES_P2, h_early=True)


@pytest.mark.parametrize("sh,stages", [(EXPERTS_SHARED_GROUP, 4), (EXPERTS_SHARED_GROUP, 5), (EXPERTS_SHARED_GROUP32, 4)],
                         ids=lambda v: getattr(v, "name", str(v)))
def test_grp_stages_candidate_assembles(sh, stages):
    """The grouped gate | up builds with a deeper ring (experiments/proj/grp_stages_variant.py, step forms grp_s4 / grp_s5):
    no spills, the shared memory within the SM's 227 KB; the t32 build has no room for 5."""
    u = dataclasses.replace(sh, stages=stages)
    res = _assembles_without_spills(u.name, _generator().generate(u))
    assert res["registers"] <= contracts.get(sh.name).max_registers and u.NS == stages
    assert sh.smem < u.smem <= 227 * 1024 < dataclasses.replace(EXPERTS_SHARED_GROUP32, stages=5).smem


@pytest.mark.parametrize("sh", MOE_DOWNS, ids=lambda s: s.name)
def test_top_early_build(sh):
    """moe_down's builds loading every chunk's expert weight with x (Fp8Gemv.top_early, the committed builds since
    8cca9d2; experiments/proj/top_early_variant.py): no spills within the contract's registers; the top / glogit loads
    all before the ids barrier, none after it (moedown_mult takes the registers); the committed PTX is this build;
    other shapes refuse the option."""
    g = _generator()
    ptx = g.generate(sh, top_early=True)
    res = _assembles_without_spills(sh.name, ptx)
    assert res["registers"] <= contracts.get(sh.name).max_registers
    pre, post = ptx.split("bar.sync 0;  // the ids table", 1)
    assert pre.count("ld.global.b16 %tw") == sh.NC and pre.count("ld.global.b16 %gw") == 1
    assert "ld.global.b16" not in post.split("ret;")[0].replace("ld.global.b16 %qh", "").replace(
        "ld.global.b16 %q1, [%pb]", "")
    assert post.count("mov.b16 %q0, %tw") == sh.NC and post.count("mov.b16 %q1, %gw") == 1
    assert sh.top_early and paths.ptx_path("sm_90a", "proj", sh.name).read_text() == ptx
    with pytest.raises(AssertionError, match="top_early"):
        g.generate(FUSED[0], top_early=True)


def test_norm_w_early_candidate_assembles():
    """The router-fused launch copying its norm weight into shared memory beside h's loads
    (experiments/proj/router/norm_w_early_variant.py; rejected at 8cca9d2): no spills within the contract's registers; the
    region after the build's layout and within 227 KB; in the router phase eight cp.async after h's eight loads and
    before the first shuffle, a fence between, the wait before the first read back, no global load of the weight; the
    promoted build untouched; other shapes refuse the option."""
    g = _generator()
    ptx = g.generate(EXPERTS_ROUTER, norm_w_early=True)
    res = _assembles_without_spills(EXPERTS_ROUTER.name, ptx)
    assert res["registers"] <= contracts.get(EXPERTS_ROUTER.name).max_registers
    off, smem = g.norm_w_early_smem(EXPERTS_ROUTER)
    assert off >= contracts.get(EXPERTS_ROUTER.name).dynamic_smem and smem <= 227 * 1024
    phase = ptx.split("the router phase", 1)[1]
    h_loads, rest = phase.split("cp.async.cg.shared.global", 1)
    assert h_loads.count("ld.global.v4.u32 {%x") == 8 and "shfl" not in h_loads
    copies, after = phase.split("cp.async.commit_group;", 1)
    assert copies.count("cp.async.cg.shared.global [%nws+") == 8 and after.lstrip().startswith("fence.acq_rel.cta;")
    assert after.index("cp.async.wait_all;") < after.index("ld.shared.v4.u32 {%nw0") and "ld.global.nc.v4.u32 {%nw" not in ptx
    assert paths.ptx_path("sm_90a", "proj", EXPERTS_ROUTER.name).read_text() == g.generate(EXPERTS_ROUTER)
    with pytest.raises(AssertionError, match="norm_w_early"):
        g.generate(FUSED[0], norm_w_early=True)


def test_norm_w_pre_build():
    """The router-fused launch with its norm weight requested before griddepcontrol.wait (Fp8Gemv.norm_w_pre, the
    committed build since 19c7d40; experiments/proj/router/norm_w_pre_variant.py): no spills within the contract's registers, the build's own shared
    memory; thread 0's bulk copy of 4 KB into the partials' region before the wait, on the router rows' mbarrier with
    its bytes expected; in the router phase the wait on that mbarrier before the first read back and no global load of
    the weight; the partials' region holds the 4 KB and is not written before the router phase's end."""
    g = _generator()
    ptx = g.generate(EXPERTS_ROUTER, norm_w_early="pre")
    res = _assembles_without_spills(EXPERTS_ROUTER.name, ptx)
    assert res["registers"] <= contracts.get(EXPERTS_ROUTER.name).max_registers
    sh = EXPERTS_ROUTER
    pre, post = ptx.split("griddepcontrol.wait;", 1)
    assert f"add.u32 %t1, %t1, {2 * 2048};" in pre and f"add.u32 %t2, %sbase, {sh.red_off};" in pre
    assert pre.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%t2], [%pa], 4096, [%t3];") == 2
    assert sh.red_off % 16 == 0 and sh.red_off + 4096 <= sh.bar_off  # the copy stays inside the partials' region
    phase = post.split("the router phase", 1)[1]
    rbar = sh.rows_off + 2 * 2 * 2048
    wait = phase.index("RT_NW_WAIT:")
    assert f"add.u32 %nws, %sbase, {rbar};" in phase[:wait] and wait < phase.index("ld.shared.v4.u32 {%nw0")
    assert "ld.global.nc.v4.u32 {%nw" not in ptx and phase.count("ld.shared.v4.u32 {%nw0") == 8
    router = phase.split("(the router phase done)", 1)[0]  # the region's writers (x staging, partials) come after it
    assert "%xst" not in router and "red[buf]" not in router and "st.shared.v4" not in router
    assert sh.norm_w_pre and paths.ptx_path("sm_90a", "proj", EXPERTS_ROUTER.name).read_text() == ptx
    assert "RT_NW_WAIT" not in g.generate(EXPERTS_ROUTER, norm_w_early=False)  # the build before it, for the A/B


def _staging(fn, nt: int, M: int):
    """fn(e, 0, nt) run by warp_sim on rows as x_rows_load leaves them (token t's words tagged, 0 past M)."""
    import warp_sim

    lines = []
    fn(lines.append, 0, nt)
    X = f"%xr{nt}_0_"

    def regs(lane):
        r = {"%lane": lane, "%g": lane >> 2, "%tig": lane & 3, "%m": M, "%xst": 2048 * 5}
        for j in range(4):
            t = 8 * nt + lane // 16 + 2 * j
            r.update({f"{X}{4 * j + c}": (t, lane % 16, c) if t < M else 0 for c in range(4)})
        return r

    lanes, acc = warp_sim.run(lines, regs)
    for lane, L in enumerate(lanes):  # register r of (token g, tig): k 8 r + 2 tig of token g (0 past M)
        t = 8 * nt + (lane >> 2)
        assert [L[f"{X}{r}"] for r in range(16)] == [(t, r, lane & 3) if t < M else 0 for r in range(16)], (fn, nt, M)
    return sum(warp_sim.wavefronts(op, a) for op, a in acc)


def test_x_tpose_candidate():
    """x staged by fragment lane (gen_fp8_gemv.x_rows_to_fragments_t; experiments/proj/x_tpose_variant.py; promoted for
    the norm builds without b | a): a warp interpreter of the emitted PTX gives every lane the fragments the promoted staging gives, at
    every M of both n-tiles; conflict-free at a full n-tile (32 wavefronts a chunk, as the promoted one), 8 at M = 1
    and 2, 16 at M = 4; the batch-1 kernels assemble with it, without spills, within their registers; the committed
    PTX is each build's Fp8Gemv.x_tpose choice (the two norm builds without b | a, no other)."""
    g = _generator()
    for nt, Ms in ((0, range(1, 9)), (1, range(9, 17))):
        for M in Ms:
            assert _staging(g.x_rows_to_fragments, nt, M) == 32
            want = {1: 8, 2: 8, 3: 16, 4: 16, 5: 24, 6: 24}.get(M - 8 * nt, 32)
            assert _staging(g.x_rows_to_fragments_t, nt, M) == want, (nt, M)
    x_tpose = paths.load_module(paths.ROOT / "experiments" / "proj" / "x_tpose_variant.py", "x_tpose_variant")
    for sh in x_tpose.shapes():
        ptx = g.generate(sh, x_tpose=True)
        assert "(x_tpose)" in ptx and "ld.shared.u32 %xr" not in ptx
        assert _assembles_without_spills(sh.name, ptx)["registers"] <= contracts.get(sh.name).max_registers
        assert paths.ptx_path("sm_90a", "proj", sh.name).read_text() == g.generate(sh)
    on = sorted(sh.name for sh in SHAPES + FUSED + (NORM_BA, EXPERTS_ROUTER) + MOE_DOWNS if sh.x_tpose)
    assert on == ["fp8_gemv_n12288_k2048_norm", "fp8_gemv_n9216_k2048_norm"], on
    for name in on:
        assert "(x_tpose)" in paths.ptx_path("sm_90a", "proj", name).read_text()


def test_experts_group32_build():
    """fp8_gemv_n1024_k2048_moe_grp_t32: the grouped gate | up for up to 32 tokens in one launch: one body of 4
    n-tiles (4 mma per k16 step, each skipped where no token of its n-tile chose the strip's expert), 32-byte token masks zeroed by one 16-byte store per thread, 2 KB of
    partials per warp; no spills at 128 registers; the per-pair contract but for M <= 32; fp8_linear_experts takes it
    above EXPERTS_GROUP32_ROWS rows."""
    from netra.decode import ops as dops

    g = _generator()
    ptx = g.generate(EXPERTS_GROUP32)
    res = _assembles_without_spills(EXPERTS_GROUP32.name, ptx)
    c, cp = contracts.get(EXPERTS_GROUP32.name), contracts.get(EXPERTS[0].name)
    assert res["registers"] <= c.max_registers and c.dynamic_smem == EXPERTS_GROUP32.smem <= 227 * 1024
    assert c.params == cp.params and c.dims["M"] == tuple(range(1, 33)) and c.op == cp.op == "fp8_linear_experts"
    pre, post = ptx.split("griddepcontrol.wait;", 1)
    assert pre.count("st.shared.v4.u32") == 1 and "_M8" not in post and post.count("U S virtual strips") == 1
    assert post.count("mma.sync") == 4 * 8 and "%xr3_0_15" in post and "mad.lo.u32 %ej, %ej, 32, %sbase;" in post
    # n-tiles where no token chose the strip's expert skip their mma and partial stores (their outputs are never read)
    assert post.count("@%pn") == 4 * 8 + 16 and post.count("setp.ne.u32 %pn") == 4
    assert f"mad.lo.u32 %t0, %warp, {EXPERTS_GROUP32.red_bytes}, %t0;" in post and EXPERTS_GROUP32.red_bytes == 2048
    assert proj.EXPERT_GROUP32_KERNELS[(EXPERTS_GROUP32.S, EXPERTS_GROUP32.KB)].contract.name == EXPERTS_GROUP32.name
    assert dops.EXPERTS_GROUP32_ROWS == 16 == max(contracts.get(EXPERTS_GROUP.name).dims["M"])


def test_router_poll_candidate_assembles():
    """The CPU-built candidate (not registered): the router-fused launch without its grid barrier assembles without
    spills within one CTA per SM; before the wait one relaxed arrival (the epoch), after it no acquire spin, one
    tagged store per logit, the poll loop with its vote, x from the CTA's shared rows; the promoted build untouched."""
    from netra.contracts import proj as pc

    sh = pc.EXPERTS_ROUTER_POLL
    ptx = _generator().generate(sh)
    assert _assembles_without_spills(sh.name, ptx)["registers"] <= 128 and sh.smem <= 227 * 1024
    pre, post = ptx.split("griddepcontrol.wait;", 1)
    assert "atom.relaxed.gpu.global.add.u64" in pre and "ld.acquire" not in ptx and "atom.release" not in ptx
    assert post.count("st.relaxed.gpu.global.u64") == 1 and "vote.sync.any.pred" in post and "RT_POLL:" in post
    assert f"[%t0+{sh.xs_off}]" in post and sh.name not in contracts.REGISTRY
    assert "RT_POLL" not in _generator().generate(EXPERTS_ROUTER)
    assert [t.dtype for t in pc._contract(sh).params if t.name == "logits"] == ["i64"]


def test_experts_router_op_falls_back_to_the_router_and_the_merged_op():
    """On the framework path fp8_linear_experts_router is moe_router_norm then fp8_linear_experts_shared, bit for bit,
    within the contract's tolerance of float64 (the ids exactly the reference's on the same x_out; the routed rows
    within two BF16 roundings: that path rounds the dequantized weights first)."""
    from netra.contracts.proj import BF16_TWICE
    from netra.decode import ops as dops
    from netra.lifecycle import metrics, testbeds

    tb = testbeds.get(EXPERTS_ROUTER.name)
    i = tb.make({"M": 2, "E": 256}, torch.Generator().manual_seed(8), "cpu")
    o = tb.alloc_outputs({"M": 2, "E": 256}, "cpu")
    for t in o.values():
        t.fill_(float("nan")) if t.dtype.is_floating_point else t.fill_(-1)
    dops.fp8_linear_experts_router(i["h"], i["norm_w"], 1e-6, i["rw"], i["w"], i["scale"], i["ws"], i["ss"],
                                   i["gate_w"], i["bar"], o["x_out"], o["top"], o["idx"], o["logits"], o["out"],
                                   o["sout"], o["gate_out"])
    peer = tb.peers["netra_unfused"](i, {"eps": 1e-6})
    for n in ("x_out", "top", "idx", "out", "sout", "gate_out"):
        assert torch.equal(o[n], peer[n]), n
    ref = tb.reference_for(i, o)
    assert torch.equal(o["idx"], ref["idx"])
    tol = contracts.get(EXPERTS_ROUTER.name).tolerance
    errs = {n: metrics.output_error(o[n], ref[n]) for n in ("x_out", "top", "out", "sout", "gate_out")}
    # the framework path dequantizes the routed experts' weights to BF16 before its bmm: two roundings
    assert errs.pop("out") <= BF16_TWICE and max(errs.values()) <= tol, errs


def test_gate_in_router_candidates_assemble():
    """The CPU-built candidates (not registered): the router with the shared_expert_gate (rank 1's warp 0, after the
    cluster barrier) and the merged gate | up without the gate CTA (all 132 CTAs walk the strips); both assemble
    without spills and their contracts add / drop exactly the gate's tensors."""
    from netra.contracts import proj as pc

    gr, gf = paths.generator("proj", "gen_moe_router"), _generator()
    rp = gr.generate(norm=True, pdl=True, gate=True)
    assert "GATE_DONE:" in rp and rp.count("redux.sync.max.u32") == 8 and ".param .u64 glogit" in rp
    assert rp.split("barrier.cluster.wait.acquire.aligned;")[1].count("ld.global.nc.v4.u32") == 8  # gate_w after it
    assert _assembles_without_spills(gr.GATE_NAME, rp)["registers"] <= 128
    assert [t.name for t in pc.MOE_ROUTER_NORM_GATE.params][-2:] == ["gate_w", "glogit"]
    sh = pc.EXPERTS_SHARED_NOGATE
    ep = gf.generate(sh)
    assert sh.name == pc.EXPERTS_SHARED.name + "_nogate" and "GATE:" not in ep and "gate_w" not in ep
    assert _assembles_without_spills(sh.name, ep)["registers"] <= 64
    c = pc._contract(sh)
    assert [t.name for t in c.params][-3:] == ["ws", "ss", "sout"] and c.grid_for({"M": 1, "E": 256}) == (132, 1, 1)
    assert sh.name not in contracts.REGISTRY and pc.MOE_ROUTER_NORM_GATE.name not in contracts.REGISTRY


def test_experts_shared_op_falls_back_to_the_two_ops():
    """On the framework path fp8_linear_experts_shared is fp8_linear_experts then fp8_linear_gate, bit for bit, and
    within the contract's tolerance of float64."""
    from netra.decode import ops as dops
    from netra.lifecycle import metrics, testbeds

    tb = testbeds.get(EXPERTS_SHARED.name)
    i = tb.make({"M": 3, "E": 256}, torch.Generator().manual_seed(6), "cpu")
    got = {"out": torch.empty(3, 8, 1024, dtype=torch.bfloat16), "sout": torch.empty(3, 1024, dtype=torch.bfloat16),
           "gate_out": torch.empty(3, 1, dtype=torch.bfloat16)}
    dops.fp8_linear_experts_shared(i["x"], i["w"], i["scale"], i["ids"], i["ws"], i["ss"], i["gate_w"], got["out"],
                                   got["sout"], got["gate_out"])
    peer = tb.peers["netra_unfused"](i, {})
    assert all(torch.equal(got[n], peer[n]) for n in got)
    ref = tb.reference(i)
    assert max(metrics.output_error(got[n], ref[n]) for n in ref) <= contracts.get(EXPERTS_SHARED.name).tolerance


def test_gate_op_falls_back_to_the_plain_op_and_a_matmul():
    from netra.decode import ops as dops

    g = torch.Generator().manual_seed(4)
    q, s = ck.quantize(torch.randn(1024, 2048, generator=g) * 0.02)
    x = torch.randn(3, 2048, generator=g).to(torch.bfloat16)
    gw = (torch.randn(1, 2048, generator=g) * 0.02).to(torch.bfloat16)
    out, gate = torch.empty(3, 1024, dtype=torch.bfloat16), torch.empty(3, 1, dtype=torch.bfloat16)
    dops.fp8_linear_gate(x, proj.pack_weight(q), s, gw, out, gate)
    ref = torch.empty_like(out)
    dops.fp8_linear(x, proj.pack_weight(q), s, ref)
    assert torch.equal(out, ref) and torch.equal(gate, x @ gw.T)
    c = contracts.get("fp8_gemv_n1024_k2048_gate_ks2")  # the gate's CTA is a cluster of 2 of its own
    assert c.grid_for({"M": 1})[0] == contracts.get("fp8_gemv_n1024_k2048_ks2").grid_for({"M": 1})[0] + 2


def test_coherent_x_differs_only_in_the_activation_loads():
    """coherent_x (promoted after experiments/proj/coherent_x_variant_98716c5.json): every
    activation load after griddepcontrol.wait is ld.global, not .nc (the PDL contract of .nc);
    against the build before (coherent_x=False) nothing else changes."""
    from netra import paths
    g = paths.generator("proj", "gen_fp8_gemv")
    for sh in SHAPES + FUSED + EXPERTS + MOE_DOWNS:
        plain, coh = g.generate(sh, coherent_x=False), g.generate(sh)
        assert paths.ptx_path("sm_90a", "proj", sh.name).read_text() == coh
        a, b = plain.splitlines(), coh.splitlines()
        assert len(a) == len(b)
        diff = [(x, y) for x, y in zip(a, b) if x != y]
        assert diff and all(y == x.replace("ld.global.nc.", "ld.global.") for x, y in diff), sh.name
        tail = coh[coh.index("griddepcontrol.wait"):]
        # what stays .nc after the wait is a weight (the norm weight, the gate's weight row)
        assert all("%nw" in ln or "gate_w" in ln for ln in tail.splitlines() if "ld.global.nc" in ln), sh.name


def test_ids_early_candidates_read_the_ids_and_request_every_chunk_before_the_wait():
    """gen_fp8_gemv.generate(ids_early=True) (experiments/proj/ids_early_variant.py): for the expert
    kernels, the ids are loaded by ld.relaxed.gpu and every stage's chunks requested before
    griddepcontrol.wait; after it, unchecked (the 0bfb57b build) nothing of the ids is left, checked (the default,
    ids_check) one coherent load of them, a bar.red.or and the same chunks requested again on the path where an id
    changed (the forced diagnostic build takes it unconditionally); no spills; other shapes are untouched by the
    option, and the promoted PTX is the build without it."""
    from netra import paths
    from netra.contracts.proj import EXPERTS, MOE_DOWNS

    g = paths.generator("proj", "gen_fp8_gemv")
    cp = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
    for sh in EXPERTS + MOE_DOWNS:
        raw, t = g.generate(sh, ids_early=True, ids_checked=False), g.generate(sh, ids_early=True)
        assert paths.ptx_path("sm_90a", "proj", sh.name).read_text() == g.generate(sh) != t != raw
        issued = (sh.NS // sh.NC) * sh.NC * (3 if sh.fuse == "moedown" else 1)
        for build, checked in ((raw, False), (t, True)):
            head, tail = build.split("  griddepcontrol.wait;", 1)
            assert head.count("ld.relaxed.gpu.global.u64 %rid") == 1
            assert head.count(cp) == issued, (sh.name, head.count(cp))
            assert head.index("INIT_BARS:") < head.index("cp.async.bulk.shared::cluster")
            n = tail.count("bar.red.or.pred")  # one check per body copy (M <= 8, M > 8)
            assert tail.count("ld.global.u64 %rid") == n and (n >= 1) == checked
            if checked:
                again = tail[tail.index("bar.red.or.pred"):tail.index("\nIDS_OK")]
                assert again.count(cp) == issued and again.count("mbarrier.inval") == sh.NS
            else:
                assert "%rid" not in tail
        assert "setp.eq.u32 %pe, %th, %th;" in g.generate(sh, ids_early=True, ids_checked="force")
        _assembles_without_spills(sh.name, t)
    assert g.generate(SHAPES[0], ids_early=True) == g.generate(SHAPES[0])


@pytest.mark.parametrize("stages", [4, 5])
def test_more_stages_candidate_for_the_expert_gate_up(stages):
    """Fp8Gemv.stages (experiments/proj/moe_stages_variant.py): the expert gate | up kernel with 4 or
    5 weight stages keeps its arithmetic, is named _s<stages>, fits one CTA per SM (dynamic shared
    memory under 227 KB), assembles without spills; the promoted kernel keeps 3 stages (the 4-stage
    build was promoted at 0fee1a5 and withdrawn: experiments/decode/experts_graph_c7bfb0f.json)."""
    import dataclasses

    from netra import paths
    from netra.contracts.proj import EXPERTS

    g = paths.generator("proj", "gen_fp8_gemv")
    sh = EXPERTS[0]
    s2 = dataclasses.replace(sh, stages=stages)
    assert sh.NS == 3 and s2.NS == stages and s2.name == f"{sh.name}_s{stages}" and s2.smem <= 227 * 1024
    t = g.generate(s2)
    assert t.count("mbarrier.init.shared::cta.b64 [%bars+") == stages
    assert paths.ptx_path("sm_90a", "proj", sh.name).read_text() == g.generate(sh) != t
    assert s2.name not in {e.name for e in EXPERTS} and not paths.ptx_path("sm_90a", "proj", s2.name).exists()
    _assembles_without_spills(sh.name, t)


def test_bench_public_call_follows_the_contracts_op():
    """netra bench's public-op call (host dispatch, and the chunked-rows GPU test) exists for every
    benched op and is chosen by the contract's op, so a build named past its op's suffix (_gate_ks2,
    _moedown_s6, gdn_decode_b32_smem) calls its own op;
    an fp8 contract of an unknown op fails here, not with a silently wrong call on the H200."""
    from netra.lifecycle import bench

    for c in contracts.all_contracts():  # every benched op has a call (host dispatch stopped the bench at a new build)
        if c.bench and c.op:
            assert callable(bench._public_call(c.name, {})), c.name
    names = [c.name for c in contracts.all_contracts() if c.name.startswith("fp8_gemv_")]
    assert "fp8_gemv_n1024_k2048_gate_ks2" in names
    for n in names:
        call = bench._public_call(n, {})
        op = contracts.get(n).op
        assert callable(call) and {"fp8_linear": "linear"}.get(op, op) in call.__code__.co_names, n  # linear: fp8_linear's body


def test_rejected_ksplit_builds_are_reproduced():
    """The k-split builds measured and not promoted (experiments/proj/README.md, k split): the PTX kept
    under experiments/proj/ksplit is the generator's; the unsplit 1024 x 2048 builds the k split replaced
    are too; and a `_res` k-split build of 2048 x 4096 (not measured) assembles without spills."""
    from netra import paths

    g = _generator()
    kept = paths.ROOT / "experiments" / "proj" / "ksplit"
    for sh in (Fp8Gemv(4096, 2048, "GDN in_proj_z", ksplit=2), Fp8Gemv(2048, 4096, "GDN out_proj, attention o_proj", ksplit=2)):
        assert (kept / f"{sh.name}.ptx").read_text() == g.generate(sh, red_swizzle=False), sh.name  # as measured
    for sh in SHAPES + FUSED:
        if sh.ksplit > 1:
            u = dataclasses.replace(sh, ksplit=1)
            assert (kept / f"{u.name}.ptx").read_text() == g.generate(u, red_swizzle=False, land_split=1), u.name  # as measured
    res = dataclasses.replace(next(s for s in FUSED if s.fuse == "res"), ksplit=2)
    _assembles_without_spills(res.name, g.generate(res))


@pytest.mark.parametrize("sh", SHAPES + FUSED + EXPERTS + MOE_DOWNS, ids=lambda s: s.name)
def test_acc_split_candidate(sh):
    """generate(acc_split=True) (experiments/proj/acc_split_variant.py; not promoted): every chunk's mma of
    the odd k16 steps accumulate in %d, the even ones in %c, one add per live accumulator after the
    eighth; the same mma count; it assembles without spills; off by default (the committed builds). Built as measured
    (2e6110e), without Fp8Gemv.maxnreg's cap: at 104 registers the residual build's candidate spills 40 B."""
    g = _generator()
    assert g.generate(sh) == g.generate(sh, acc_split=False)
    on, off = g.generate(sh, acc_split=True, maxnreg=0), g.generate(sh, maxnreg=0)
    assert on != off
    _assembles_without_spills(sh.name, on)
    mma = re.compile(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32 \{(%[cd])(\d)")
    assert len(mma.findall(on)) == len(mma.findall(off))
    targets = [a for a, _ in mma.findall(on)]
    assert targets.count("%d") == targets.count("%c") > 0
    assert all(a == "%c" for a, _ in mma.findall(off))
    adds = re.findall(r"add\.rn\.f32 %c(\d), %c\1, %d\1;", on)
    assert len(adds) == len(re.findall(r"mov\.f32 %d\d, 0f00000000;", on)) > 0


def test_lm_head_ptx_is_current_and_framework_path_is_the_reference():
    """bf16_gemv_n248320_k2048_argmax: the committed PTX is the generator's; its contract's shapes are the model's;
    without a GPU the op takes cuBLAS-then-argmax (here torch on the CPU), on a head small enough for the CPU, and
    the guard's miss is counted (a CPU tensor)."""
    from netra import contracts, ops, paths
    from netra.contracts.proj import LM_HEAD
    from netra.decode import ops as dops
    from netra.model.config import TextConfig

    g = paths.generator("proj", "gen_lm_head")
    c = contracts.get(LM_HEAD.name)
    assert paths.ptx_path("sm_90a", "proj", c.name).read_text() == g.generate(), "run gen_lm_head.py"
    cfg = TextConfig()
    assert (LM_HEAD.V, LM_HEAD.K) == (cfg.vocab_size, cfg.hidden_size)
    assert LM_HEAD.V % 16 == 0 and LM_HEAD.smem == c.dynamic_smem <= 227 * 1024
    assert c.pdl and "tokens" in c.exact_outputs
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(3, 64, generator=gen).to(torch.bfloat16)
    w = torch.randn(1000, 64, generator=gen).to(torch.bfloat16)
    w[7] = w[5]  # a tie: the lower index wins
    h[1] = 0.0
    h[1, 0] = 1.0
    w[:, 0] = -1.0
    w[5, 0] = w[7, 0] = 2.0
    logits, tokens = torch.empty(3, 1000, dtype=torch.bfloat16), torch.full((3,), -1, dtype=torch.long)
    ws = torch.zeros(LM_HEAD.counter + 1, dtype=torch.long)
    before = sum(ops.OPS["lm_head_argmax"].misses.values())
    dops.lm_head_argmax(h, w, logits, tokens, ws)
    assert torch.equal(logits, h @ w.T) and torch.equal(tokens, torch.argmax(logits.float(), -1))
    assert tokens[1] == 5
    assert sum(ops.OPS["lm_head_argmax"].misses.values()) == before + 1  # the guard refused the shape
    dops.lm_head_argmax(h, w, logits, tokens)  # without a workspace: the framework path, no guard call
    assert sum(ops.OPS["lm_head_argmax"].misses.values()) == before + 1


@pytest.mark.parametrize("sh", DENSE32 + tuple(s for s in SHAPES if s.name == "fp8_gemv_n12288_k2048"), ids=lambda s: s.name)
def test_sum_late_candidate(sh):
    """generate(sum_late=..., sum_late_regs=...) (experiments/proj/sum_late_variant.py; measured and rejected): off by
    default; the strip loop's sums move out of the loop's tail (no SUM_DONE label in the copies it changes) to the
    next strip's start and once after the loop, predicated (%pql), with the same 16 loads and 15 adds per output; it
    assembles without spills in both forms; a residual build is refused."""
    g = _generator()
    off = g.generate(sh)
    assert off == g.generate(sh, sum_late=False)
    for regs in (1, 16):
        on = g.generate(sh, sum_late="m16", sum_late_regs=regs)
        assert on != off and "%pql" in on
        _assembles_without_spills(sh.name, on)
        body = on.split("BODY_M16:", 1)[1] if sh.tokens == 16 else on.split("griddepcontrol.wait;", 1)[1]
        assert "SUM_DONE" not in body
        assert body.count("@%pql ld.shared.f32") == 2 * sh.W and body.count("@%pql st.global.b16") == 2
        assert len(re.findall(r"add\.f32 %sf0, %sf0, %s[fv]\d+;", body)) == 2 * (sh.W - 1)
    with pytest.raises(AssertionError, match="sum_late"):
        g.generate(next(s for s in FUSED if s.fuse == "res"), sum_late=True)


@pytest.mark.parametrize("sh", DENSE32, ids=lambda s: s.name)
def test_x_prepped_diagnostic(sh):
    """generate(x_prepped=True) (experiments/proj/x_prepped_variant.py, a diagnostic): its prologue loads x's
    fragments (4 16-byte loads per n-tile) and inverse scales from the x parameter and converts nothing; it assembles
    without spills. The experiment's torch `prep` lays them out as x_prepped_layout says: each word's two f16, times
    its token's inverse scale, are x (zeros past M)."""
    g = _generator()
    ptx = g.generate(sh, x_prepped=True)
    _assembles_without_spills(sh.name, ptx)
    pro = ptx.split("griddepcontrol.wait;", 1)[1].split("STRIP_M32:", 1)[0]
    assert "cvt.rn.f16x2.f32" not in pro and "st.shared" not in pro
    assert pro.count("ld.global.v4.u32") == 4 * sh.NT and pro.count("ld.global.u32 %inv") == sh.NT
    with pytest.raises(AssertionError, match="x_prepped"):
        g.generate(next(s for s in SHAPES if s.name == "fp8_gemv_n12288_k2048"), x_prepped=True)
    xv = paths.load_module(paths.ROOT / "experiments" / "proj" / "x_prepped_variant.py", "x_prepped_variant")
    M = 20
    x = (torch.randn(M, sh.K, generator=torch.Generator().manual_seed(1)) * 3).to(torch.bfloat16)
    x[3, 128:256] = 0
    buf = xv.prep(x, sh)
    frag_bytes, total = g.x_prepped_layout(sh)
    assert buf.numel() == total
    frag = buf[:frag_bytes].view(torch.float16).view(sh.NT, sh.KB, 32, 16, 2).float()
    inv = buf[frag_bytes:].view(torch.float32).view(sh.NT, sh.KB, 8)
    got = frag * inv[:, :, torch.arange(32) // 4, None, None]  # lane l = 4 g + tig: token 8 nt + g
    # word r = 2 i + hh of lane (g, tig), half e: token 8 nt + g, k = 128 kb + 16 i + 8 hh + 2 tig + e
    want = torch.zeros(sh.NT * 8, sh.K)
    want[:M] = x.float()
    want = want.view(sh.NT, 8, sh.KB, 8, 2, 4, 2).permute(0, 2, 1, 5, 3, 4, 6).reshape(sh.NT, sh.KB, 32, 16, 2)
    assert torch.allclose(got, want, rtol=2 ** -10, atol=0)


@pytest.mark.parametrize("sh", (NORM_BA,) + tuple(s for s in FUSED if s.fuse in ("norm", "res")) + PLAIN_BA + DENSE32
                         + (RES32,), ids=lambda s: s.name)
def test_parked_diagnostic(sh):
    """generate(parked=True) (experiments/decode/step_ab.py's parked forms, a diagnostic): no weight tile is copied
    (each chunk's mbarrier expects its scales' bytes alone), the ring is zeroed before the wait, the default build is
    unchanged, and it assembles without spills. Builds it does not model are refused."""
    g = _generator()
    ptx, plain = g.generate(sh, parked=True), g.generate(sh)
    assert plain == g.generate(sh) and "PARK_ZERO" not in plain
    _assembles_without_spills(sh.name, ptx)
    tiles = f"], {sh.SB // sh.pieces}, [%bf"  # a piece's weight tiles: the only copies of that size
    assert tiles in plain and tiles not in ptx
    assert "PARK_ZERO" in ptx.split("griddepcontrol.wait;", 1)[0]
    expects = re.findall(r"expect_tx\.shared::cta\.b64 _, \[%bf(?:\+\d+)?\], (\d+);", ptx)  # the chunks' mbarriers
    assert expects and all(int(n) == 4 * sh.W // sh.pieces for n in expects)
    for bad in (EXPERTS_GROUP, RES_P2):  # experts (their strips depend on the ids), two passes (the ring re-read)
        with pytest.raises(AssertionError, match="parked"):
            g.generate(bad, parked=True)


@pytest.mark.parametrize("sh", DENSE32 + (RES_P2,), ids=lambda s: s.name)
def test_ksplit_32_tokens(sh):
    """The k split at 32 tokens (experiments/proj/ks2_t32_variant.py; the dense builds measured and rejected; the
    residual one hung on the device, was fixed, and is the runner's above 16 rows since f851efc: RES32): the exchange
    slot holds both ranks' 16 x 32 sums, the contract takes M up to 32 on a grid of clusters, the 8-warp builds finish two
    outputs a thread (each a send per strip and a walk over the slots), and every build assembles without spills."""
    import dataclasses

    from netra.contracts.proj import _contract

    g = _generator()
    ks = dataclasses.replace(sh, ksplit=2, tokens=32, passes=1)
    c = _contract(ks)
    assert ks.xch_slot == 2 * 16 * 32 * 4 and ks.xbar_off == ks.xch_off + ks.xch_slot * ks.slots
    assert max(c.dims["M"]) == 32 and c.dynamic_smem == ks.smem <= 227 * 1024
    assert g.split_passes(ks) == 16 * 32 // ks.threads and g.split_passes(dataclasses.replace(ks, tokens=16)) == 1
    ptx = g.generate(ks)
    assert ".reqnctapercluster 2, 1, 1" in ptx
    # one body for every M: its first strip is requested before the wait at every M (the residual build skipped it at
    # M > 8 for a 16-token build's M > 8 copy it does not have, and hung on the device waiting for it)
    assert "M > 8: x first" not in ptx and "bar.sync 0;" in ptx.split("griddepcontrol.wait;")[0]
    head = ptx.split("INIT_DONE:")[0]
    assert head.count("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bf]") == 1
    assert ptx.count("st.async.shared::cluster") == g.split_passes(ks)  # one body of 4 n-tiles
    assert ptx.count("mbarrier.try_wait.parity.shared::cta.b64 %p, [%bf], 0;") == g.split_passes(ks)
    _assembles_without_spills(ks.name, ptx)


def test_res32_is_the_runners_build_above_16_rows():
    """RES32 (fp8_gemv_n2048_k4096_res_ks2_t32, promoted after f851efc): fp8_linear_add's kernel above RES32_ROWS rows;
    the residual contract's arguments and tolerance at M up to 32 over clusters of 2 (66 clusters walk the 128 strips);
    the contract names the k split in its reduction order and the PDL range as every M; its bench peers include the
    two-pass build it replaced; the committed PTX is the generator's."""
    from netra.decode import ops as dops
    from netra.lifecycle import testbeds

    one = next(s for s in FUSED if s.fuse == "res")
    c, p2, c16 = contracts.get(RES32.name), contracts.get(RES_P2.name), contracts.get(one.name)
    assert RES32 == dataclasses.replace(RES_P2, ksplit=2, tokens=32, passes=1) == dataclasses.replace(one, ksplit=2, tokens=32)
    assert proj.RES_KERNELS32[(RES32.S, RES32.KB)].contract.name == RES32.name
    assert proj.RES_KERNELS32[(RES32.S, RES32.KB)].max_rows == 32 and dops.RES32_ROWS == 16 == max(c16.dims["M"])
    assert c.params == p2.params == c16.params and c.dims == p2.dims and c.tolerance == p2.tolerance
    assert c.op == "fp8_linear_add" and c.grid == ("132", "1", "1") and RES32.walkers == 66 and RES32.slots == 2
    assert "k split" in c.reduction_order and "M <= 8" not in c.pdl and c.max_registers == 128
    assert {"netra_res_p2", "netra_res_16_rows", "cublas_bf16"} <= set(testbeds.get(RES32.name).peers)
    assert paths.ptx_path("sm_90a", "proj", RES32.name).read_text() == _generator().generate(RES32)


def test_grp_transpose_candidate():
    """generate(grp_transpose=True) (experiments/decode/step_ab.py grp_transpose, a candidate): the grouped builds'
    routed strips expert-fastest. Off by default (the committed PTX is the promoted build); the mapping replaces the
    three strip -> (distinct expert, row block) sites of the 32-token builds (issue, the n-tile masks, the stores) and
    two of the 16-token builds (no n-tile masks there), in each copy of the body; assembles without spills at the
    promoted registers; refused for builds that do not group."""
    g = _generator()
    for sh in (EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32, EXPERTS_GROUP32):
        base, ptx = g.generate(sh), g.generate(sh, grp_transpose=True)
        assert g.generate(sh, grp_transpose=False) == base and "grp_transpose" not in base
        n = ptx.count("// grp_transpose: the routed strips expert-fastest")
        assert n == ptx.count("div.u32") and n >= 3
        assert ("@%pgt mov" in ptx) == sh.shared
        a, b = _assembles_without_spills(sh.name, ptx), _assembles_without_spills(sh.name, base)
        assert a["registers"] <= b["registers"], (sh.name, a, b)
    with pytest.raises(AssertionError):
        g.generate(SHAPES[0], grp_transpose=True)


def test_early_release_candidate(tmp_path):
    """generate(early_release=True) (experiments/decode/step_ab.py early_release, a candidate): thread 0 refills each
    stage once every warp has read it (a bar.sync before the mma), and not again after the partials' barrier. Off by
    default; one refill site per body copy; assembles without spills within the contract's registers; refused for the
    k-split and two-pass builds and a mid-walk down request. (The 104-register residual build spills 20 bytes with it: not in the step
    forms.) In the 32-token grouped build's SASS the refill's bulk copy sits between the tile loads' barrier and the
    strip's first HMMA."""
    from netra.contracts.proj import EXPERTS_SHARED_GROUP32, RES32

    g = _generator()
    for sh in (EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32, NORM_BA, SHAPES[0], SHAPES[4], EXPERTS_ROUTER_DOWN):
        base, ptx = g.generate(sh), g.generate(sh, early_release=True)
        assert g.generate(sh, early_release=False) == base and "early_release" not in base
        copies = ptx.count("bar.sync 0;  // early_release")
        assert copies >= 1 and ptx.count("(early_release: the stage was refilled before the mma)") == copies
        assert base.count("thread 0 refills them with strip s + (NS / NC) G") == copies
        assert "thread 0 refills them with strip s + (NS / NC) G" not in ptx
        assert _assembles_without_spills(sh.name, ptx)["registers"] <= contracts.get(sh.name).max_registers
    assert SHAPES[4].NC == 2 and SHAPES[5].ksplit == 2
    for sh in (RES32, RES_P2, SHAPES[5]):  # (SHAPES[4]: two chunks; SHAPES[5]: a k split)
        with pytest.raises(AssertionError):
            g.generate(sh, early_release=True)
    g._DOWN["issue"] = "mid"  # the down strips requested mid-walk: refused
    try:
        with pytest.raises(AssertionError):
            g.generate(EXPERTS_ROUTER_DOWN, early_release=True)
    finally:
        g._DOWN["issue"] = "late"
    # SASS of the 32-token grouped build: after a strip's chunk lands (SYNCS.PHASECHK), the tile loads, a barrier, then
    # the refill's bulk copy before the strip's first HMMA; the promoted build has no copy there
    for early in (False, True):
        sass = _sass(EXPERTS_SHARED_GROUP32.name, g.generate(EXPERTS_SHARED_GROUP32, early_release=early), tmp_path)
        ops = re.findall(r"\b(SYNCS\.PHASECHK|LDS|BAR\.SYNC|UBLKCP|HMMA)\b", sass)
        first = ops.index("HMMA")
        last_wait = max(i for i in range(first) if ops[i] == "SYNCS.PHASECHK")
        between = ops[last_wait:first]
        assert ("UBLKCP" in between) == early and "LDS" in between, between
        if early:
            assert between.index("LDS") < between.index("BAR.SYNC") < between.index("UBLKCP"), between


def test_refill_last_candidate():
    """generate(refill_last=True) (experiments/decode/step_ab.py refill_last, a candidate; measured level at 3af5437):
    the refill after the partials' barrier is issued by the last warp's lane 0, not thread 0; nothing else changes. Off
    by default; refused for the k-split and router builds."""
    from netra.contracts.proj import EXPERTS_SHARED_GROUP32

    g = _generator()
    for sh in (EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32, NORM_BA, SHAPES[0], SHAPES[4], SHAPES[6]):
        base, ptx = g.generate(sh), g.generate(sh, refill_last=True)
        assert g.generate(sh, refill_last=False) == base and "refill_last" not in base
        sites = base.count("thread 0 refills them with strip s + (NS / NC) G")
        assert sites >= 1 and ptx.count("the last warp's lane 0 (refill_last) refills them") == sites
        assert ptx.count(f"setp.ne.u32 %p, %th, {32 * (sh.W - 1)};") == sites
        assert len(ptx.splitlines()) == len(base.splitlines()) + sites  # the comment's second line, the thread
        assert _assembles_without_spills(sh.name, ptx)["registers"] <= contracts.get(sh.name).max_registers
    for sh in (SHAPES[5], EXPERTS_ROUTER_DOWN):  # a k split; a router phase
        with pytest.raises(AssertionError):
            g.generate(sh, refill_last=True)


def test_nt_branch_candidate(tmp_path):
    """generate(nt_branch=True) (experiments/decode/step_ab.py nt_branch, a candidate): the 32-token grouped walk issues
    each n-tile's 8 mma behind a warp-uniform branch (no predicated HMMA left in the SASS), the A fragments converted per
    n-tile; the promoted build predicates all 32. Off by default, the grouped 32-token builds only, no spills."""
    from netra.contracts.proj import EXPERTS_GROUP32, EXPERTS_SHARED_GROUP32

    g = _generator()
    for sh in (EXPERTS_GROUP32, EXPERTS_SHARED_GROUP32):
        base, ptx = g.generate(sh), g.generate(sh, nt_branch=True)
        assert g.generate(sh, nt_branch=False) == base and "NTSKIP" not in base
        assert ptx.count("bra.uni NTSKIP") == 4 and base.count("mma.sync") == ptx.count("mma.sync") == 32
        assert _assembles_without_spills(sh.name, ptx)["registers"] <= contracts.get(sh.name).max_registers
        for build, predicated in ((base, 32), (ptx, 0)):
            hmma = re.findall(r"(@!?U?P\d+\s+)?HMMA", _sass(sh.name, build, tmp_path))
            assert len(hmma) == 32 and sum(1 for p in hmma if p) == predicated, hmma
    for sh in (EXPERTS_SHARED_GROUP, SHAPES[0]):
        with pytest.raises(AssertionError):
            g.generate(sh, nt_branch=True)


def _sass(name: str, ptx: str, tmp_path) -> str:
    """The SASS of a PTX text assembled with the pinned ptxas and flags."""
    import subprocess

    from netra.runtime import build, toolchain

    path = tmp_path / f"{name}.ptx"
    path.write_text(ptx)
    cubin, _ = build._assemble(toolchain.ptxas(), path, tmp_path)
    return subprocess.run([*toolchain.disassembler(), str(cubin)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("sh", [EXPERTS_ROUTER, EXPERTS_ROUTER_DOWN], ids=lambda sh: sh.name)
def test_grid_barrier_forms(sh, tmp_path):
    """The router builds' grid barrier (gen_fp8_gemv._GBAR; step_ab.py bar_fenced, bar_lean_p2): the committed form
    (lean) has one MEMBAR.ALL.GPU in its SASS, the release atomic's, and no fence.acq_rel.gpu; the form before (fenced)
    is it plus the fence before the atomic and the one after the spin, nothing else; lean_p2 differs from lean only in
    the add (CTA 0 adds 256 - SMS + 1) and the target (no div.u64: one CALL fewer in the SASS). The builds without a
    router refuse the option."""
    from netra.contracts import proj as pc
    from netra.runtime import build, toolchain

    g = _generator()
    lean = paths.ptx_path("sm_90a", "proj", sh.name).read_text()
    assert g.generate(sh) == lean and "fence.acq_rel.gpu" not in lean
    fenced = g.generate(sh, grid_bar="fenced")
    added = [ln.strip() for ln in fenced.splitlines() if ln not in lean.splitlines()]
    assert added == ["fence.acq_rel.gpu;"] * 2 and len(fenced.splitlines()) == len(lean.splitlines()) + 2
    body = fenced.split("RT_SUMS_DONE:", 1)[1]
    assert body.index("fence.acq_rel.gpu;") < body.index("atom.release.gpu") < body.index("RT_SPIN:") \
        < body.rindex("fence.acq_rel.gpu;") < body.index("RT_ARRIVED:")
    p2 = g.generate(sh, grid_bar="lean_p2")
    assert "div.u64" in lean and "div.u64" not in p2.split("RT_SUMS_DONE:", 1)[1].split("RT_ARRIVED:")[0]
    assert f"selp.b64 %rv, {256 - pc.SMS + 1}, 1, %p;" in p2 and "and.b64 %rt, %ro, -256;" in p2
    sass = {}
    for form, text in (("lean", lean), ("fenced", fenced), ("lean_p2", p2)):
        d = tmp_path / form
        d.mkdir()
        sass[form] = _sass(sh.name, text, d)
        res = build.resource_usage(toolchain.ptxas(), d / f"{sh.name}.ptx")
        assert res["spill_stores"] == res["stack_frame"] == 0 and res["registers"] <= contracts.get(sh.name).max_registers
    assert [sass[f].count("MEMBAR.ALL.GPU") for f in ("lean", "fenced", "lean_p2")] == [1, 3, 1]
    assert sass["lean_p2"].count("CALL.REL") == sass["lean"].count("CALL.REL") - 1
    with pytest.raises(AssertionError):
        g.generate(EXPERTS_SHARED, grid_bar="fenced")

