"""The Gated DeltaNet decode kernel's CPU-side checks: the committed PTX is its generator's
output, the guard takes the runner's tensors and refuses everything else, and the framework
path and both references agree at the model's shapes."""

from __future__ import annotations

import pytest
import torch

from netra import contracts, paths
from netra.contracts import gdn as G
from netra.decode import ops as dops
from netra.lifecycle import testbeds
from netra.lifecycle.metrics import rel_err
from netra.reference import gdn as rg
from test_guard_cpu import make

C = contracts.get("gdn_decode_b32")


def _generator():
    return paths.generator("gdn", "gen_gdn_decode")


def test_generated_ptx_is_current():
    g = _generator()
    assert g.NAME == C.name and (g.NK, g.NV, g.DK, g.DV, g.KW) == (G.NK, G.NV, G.DK, G.DV, G.KW)
    committed = paths.ptx_path("sm_90a", "gdn", C.name).read_text()
    assert committed == g.generate(), "gdn_decode_b32.ptx differs from its generator: run gen_gdn_decode.py"


def _inputs(B: int, P: int, seed: int = 0) -> dict:
    return testbeds.get(C.name).make({"B": B, "P": P}, torch.Generator().manual_seed(seed), "cpu")


def _args(i: dict, out) -> list:
    return [*testbeds._gdn_args(i), out, 1e-6]


def test_early_trigger_candidate():
    """generate(pdl=True, early_trigger=True) (experiments/decode/step_ab.py gdn_early; measured at 4c3658a, neutral, not
    promoted): the one launch_dependents moves before the first griddepcontrol.wait, everything else is the promoted PDL
    build's text; off by default; refused without the coherent PDL build."""
    g = _generator()
    on, off = g.generate(pdl=True, name="gdn_decode_b32_pdl", early_trigger=True), g.generate(pdl=True, name="gdn_decode_b32_pdl")
    trig, wait = "  griddepcontrol.launch_dependents;", "  griddepcontrol.wait;"
    assert on.count(trig) == off.count(trig) == 1
    assert on.index(trig) < on.index(wait) and off.index(trig) > off.index(wait)
    assert on.replace(trig + "\n", "") == off.replace(trig + "\n", "")
    with pytest.raises(AssertionError):
        g.generate(early_trigger=True)


def test_guard_launches_the_runner_layout_once():
    i = _inputs(3, 5)
    out = torch.empty(3, G.VALUE_DIM, dtype=torch.bfloat16)
    _, go, fake, _ = make(C.name)
    assert go(*_args(i, out)) is None
    (call,) = fake.calls
    assert call["grid"] == (128 * 3, 1, 1) and call["block"] == (128, 1, 1)
    seen = call["seen"]
    assert seen["qkv_row"] == G.QKVZ and seen["z_row"] == G.QKVZ and seen["pool_slots"] == 5
    assert seen["z"] == i["qkv"].data_ptr() + 2 * G.CONV_DIM  # z is the same row's tail


@pytest.mark.parametrize("bad", ["int32 slots", "B 33", "conv_w shape", "state bf16", "out overlaps state",
                                 "non-contiguous pool", "4 key heads"])
def test_guard_refuses(bad):
    B = 33 if bad == "B 33" else 2
    i = _inputs(B, B + 1)
    out = torch.empty(B, G.VALUE_DIM, dtype=torch.bfloat16)
    if bad == "int32 slots":
        i["slots"] = i["slots"].int()
    elif bad == "conv_w shape":
        i["conv_w"] = i["conv_w"][:, :3].contiguous()
    elif bad == "state bf16":
        i["state_pool"] = i["state_pool"].bfloat16()
    elif bad == "out overlaps state":
        out = i["state_pool"].view(torch.bfloat16).view(-1)[: B * G.VALUE_DIM].view(B, G.VALUE_DIM)
    elif bad == "non-contiguous pool":
        i["state_pool"] = i["state_pool"].transpose(2, 3)
    elif bad == "4 key heads":  # a config the kernel was not built for: shapes differ
        i["qkv"] = i["qkv"][:, :4096]
    _, go, fake, _ = make(C.name)
    reason = go(*_args(i, out))
    assert reason and not fake.calls, reason


def test_framework_path_and_both_references_agree():
    i = _inputs(3, 6, seed=1)
    want = rg.decode_step(*testbeds._gdn_args(i), 16, 1e-6)
    tf = rg.transformers_step(*testbeds._gdn_args(i), 16, 1e-6)
    for k in want:  # transformers' recurrent rule is float32 inside
        assert rel_err(tf[k], want[k]) < 1e-5, k
    out = torch.full((3, G.VALUE_DIM), float("nan"), dtype=torch.bfloat16)
    before = i["state_pool"].clone()
    dops.gdn_decode(*testbeds._gdn_args(i), 16, 1e-6, out)  # no GPU: the guard refuses, the framework runs
    assert rel_err(out, want["out"]) <= C.tolerance
    assert rel_err(i["state_pool"], want["state_pool"]) < 1e-5
    assert torch.equal(i["conv_pool"], want["conv_pool"])
    untouched = torch.ones(6, dtype=torch.bool)
    untouched[i["slots"]] = False
    assert torch.equal(i["state_pool"][untouched], before[untouched])


def test_reference_can_fail():
    """The check compares against a reference that notices a wrong step: a state decayed
    twice, or a conv window not advanced, is far outside the tolerance."""
    i = _inputs(2, 3, seed=2)
    want = rg.decode_step(*testbeds._gdn_args(i), 16, 1e-6)
    j = dict(i, a_in=(i["a_in"].float() + 1.0).bfloat16())
    assert rel_err(rg.decode_step(*testbeds._gdn_args(j), 16, 1e-6)["state_pool"], want["state_pool"]) > 10 * C.tolerance
    j = dict(i, qkv=i["qkv"] * 1.01)
    assert rel_err(rg.decode_step(*testbeds._gdn_args(j), 16, 1e-6)["out"], want["out"]) > C.tolerance


V = contracts.get("gdn_verify_t16")


def _verify_generator():
    return paths.generator("gdn", "gen_gdn_verify")


def test_verify_ptx_is_current():
    g = _verify_generator()
    assert g.NAME == V.name and g.MAXT == G.MAX_TOKENS == max(V.dims["T"])
    assert paths.ptx_path("sm_90a", "gdn", V.name).read_text() == g.generate(), "run gen_gdn_verify.py"


def _vinputs(B, T, seed=0):
    return testbeds.get(V.name).make({"B": B, "T": T, "P": B * (T + 1)}, torch.Generator().manual_seed(seed), "cpu")


def test_verify_guard_takes_token_major_rows():
    i = _vinputs(2, 5)
    out = torch.empty(2, 5, G.VALUE_DIM, dtype=torch.bfloat16)
    _, go, fake, _ = make(V.name)
    assert go(*testbeds._gdn_args(i), out, 1e-6) is None
    (call,) = fake.calls
    s = call["seen"]
    assert call["grid"] == (256, 1, 1)
    assert (s["qkv_seq"], s["qkv_tok"], s["z_seq"], s["z_tok"]) == (5 * G.QKVZ, G.QKVZ, 5 * G.QKVZ, G.QKVZ)
    assert (s["tokens"], s["pool_slots"]) == (5, 12)
    i["slots_out"] = i["slots_out"][:, :4]  # T differs between tensors
    _, go, fake, _ = make(V.name)
    assert "differs" in go(*testbeds._gdn_args(i), out, 1e-6) and not fake.calls


def test_verify_framework_path_is_decode_steps_and_rolls_back_by_slot():
    """Token t's state lands in slots_out[:, t] and equals t + 1 decode steps from slot_in;
    slot_in itself is untouched (the rejected-draft case needs nothing restored)."""
    B, T = 2, 3
    i = _vinputs(B, T, seed=3)
    before = i["state_pool"].clone()
    out = torch.full((B, T, G.VALUE_DIM), float("nan"), dtype=torch.bfloat16)
    want = rg.verify_steps(*testbeds._gdn_args(i), 16, 1e-6)
    tf = rg.verify_steps(*testbeds._gdn_args(i), 16, 1e-6, step=rg.transformers_step)
    assert rel_err(tf["out"], want["out"]) < 1e-5 and rel_err(tf["state_pool"], want["state_pool"]) < 1e-5
    dops.gdn_verify(*testbeds._gdn_args(i), 16, 1e-6, out)
    assert rel_err(out, want["out"]) <= V.tolerance
    assert rel_err(i["state_pool"], want["state_pool"]) < 1e-5
    assert torch.equal(i["state_pool"][i["slot_in"]], before[i["slot_in"]])
    # sequential decode steps on a copy reach the same states token by token
    j = _vinputs(B, T, seed=3)
    pool, conv = j["state_pool"].clone(), j["conv_pool"].clone()
    for t in range(T):
        o = torch.empty(B, G.VALUE_DIM, dtype=torch.bfloat16)
        dops.gdn_decode(j["qkv"][:, t], j["z"][:, t], j["b_in"][:, t], j["a_in"][:, t], j["conv_w"], j["a_log"],
                        j["dt_bias"], j["norm_w"], conv, pool, j["slot_in"], 16, 1e-6, o)
        assert torch.equal(o, out[:, t])
        assert torch.equal(pool[j["slot_in"]], i["state_pool"][i["slots_out"][:, t]])
        assert torch.equal(conv[j["slot_in"]], i["conv_pool"][i["slots_out"][:, t]])


@pytest.mark.parametrize("kw", [dict(loop=False), dict(fast=True, loop=False), dict(rpw=16, loop=False),
                                dict(split=4, loop=False), dict(group=2), dict(group=4), dict(group=8)],
                         ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_verify_candidates_assemble(kw):
    """The verification generator's measured candidates (experiments/gdn/README.md) stay buildable."""
    res = _ptxas_usage("gdn_verify_t16", paths.generator("gdn", "gen_gdn_verify").generate(**kw))
    assert res["spill_stores"] == res["spill_loads"] == 0 and res["registers"] <= 128, res


def _ptxas_usage(name: str, ptx: str) -> dict:
    """ptxas -v of a candidate's PTX (registers, spills, stack), with the pinned ptxas and flags."""
    import tempfile
    from pathlib import Path

    from netra.runtime import build, toolchain

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{name}.ptx"
        path.write_text(ptx)
        return build.resource_usage(toolchain.ptxas(), path)


@pytest.mark.parametrize("kw", [dict(zn_async=True), dict(maxnreg=64, zn_async=True), dict(maxnreg=64),
                                dict(pdl=True, maxnreg=64, zn_async=True)],
                         ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_decode_occupancy_candidates_assemble(kw):
    """The decode generator's measured occupancy builds (experiments/gdn/README.md) stay
    buildable; with z and the norm weight in shared memory, 64 registers do not spill."""
    res = _ptxas_usage("gdn_decode_b32", paths.generator("gdn", "gen_gdn_decode").generate(**kw))
    if kw.get("maxnreg"):
        assert res["registers"] <= kw["maxnreg"], res
    if kw.get("zn_async") and not kw.get("pdl"):
        assert res["spill_stores"] == res["stack_frame"] == 0, res


def test_persistent_decode_candidate_assembles():
    """experiments/gdn/gen_gdn_decode_persist.py (built, not yet measured) stays buildable: its
    cp.async prefetch (8 pieces per thread, twice) and its item-count parameter in the PTX, and no
    spills at its own register count."""
    from pathlib import Path

    g = paths.load_module(Path(__file__).resolve().parents[1] / "experiments/gdn/gen_gdn_decode_persist.py",
                          "gen_gdn_decode_persist")
    ptx = g.generate()
    assert ptx.count("cp.async.cg.shared.global") == 16 and "ld.param.u32 %nit, [items];" in ptx
    res = _ptxas_usage("gdn_decode_b32", ptx)
    assert res["spill_stores"] == res["stack_frame"] == 0, res


def test_pdl_chain_candidates_assemble_and_order_their_loads():
    """experiments/gdn/pdl_chain_variant.py (CPU-built, not yet run): the b | a kernel's PDL build
    issues the weight rows' bulk copies before griddepcontrol.wait and x's after, then lets the
    next grid launch; the GDN PDL build lets it launch first and waits before the projection
    outputs; both assemble without spills; the promoted PTX is unchanged by the options."""
    gb, gg = paths.generator("proj", "gen_bf16_gemv"), paths.generator("gdn", "gen_gdn_decode")
    assert paths.ptx_path("sm_90a", "proj", gb.NAME).read_text() == gb.generate(**gb.PROMOTED)
    ba = gb.generate(pdl=True)
    first_wait = ba.index("griddepcontrol.wait")
    w_copies = [i for i in range(len(ba)) if ba.startswith("cp.async.bulk", i)]
    assert len(w_copies) == 16 + gb.MAXM and all(i < first_wait for i in w_copies[:16]) and all(i > first_wait for i in w_copies[16:])
    assert ba.index("griddepcontrol.launch_dependents") > ba.rindex("griddepcontrol.wait")
    res = _ptxas_usage(gb.NAME, ba)
    assert res["spill_stores"] == res["stack_frame"] == 0, res
    gd = gg.generate(pdl=True, coherent=False)  # the build the candidate scripts measured
    assert gd.index("griddepcontrol.launch_dependents") < gd.index("griddepcontrol.wait")
    promoted = gg.generate(pdl=True)  # gdn_decode_b32_pdl: coherent loads after the wait, then the trigger
    tail = promoted[promoted.index("griddepcontrol.wait"):]
    assert promoted.index("griddepcontrol.launch_dependents") > promoted.index("griddepcontrol.wait")
    assert "ld.global.nc.b16 %xb" not in tail and "ld.global.b16 %xb" in tail and "ld.global.b16 %bb" in tail
    res = _ptxas_usage("gdn_decode_b32", gd)
    assert res["spill_stores"] == res["stack_frame"] == 0, res
    with pytest.raises(AssertionError):
        gb.generate(rows="loads", pdl=True)


def test_pdl_build_is_promoted_beside_the_plain_one_and_picked_only_under_set_pdl(monkeypatch):
    """gdn_decode_b32_pdl is gen_gdn_decode.generate(pdl=True) under its own name (same
    contract otherwise); netra::gdn_decode launches it only while set_pdl is on (the decode
    runner's PDL capture, where bf16_linear2 runs just before it and triggers after its wait)."""
    from netra.ops import _dispatch, gdn

    g = _generator()
    P = contracts.get("gdn_decode_b32_pdl")
    assert paths.ptx_path("sm_90a", "gdn", P.name).read_text() == g.generate(pdl=True, name=P.name)
    assert P.pdl and not C.pdl and P.params == C.params and P.grid == C.grid
    assert contracts.get("bf16_gemv_n64_k2048").pdl  # the kernel the runner launches before it
    seen = []
    for k in (gdn.DECODE, gdn.DECODE_PDL, gdn.DECODE_SMEM, gdn.DECODE_SMEM_PDL, gdn.DECODE_PIPE, gdn.DECODE_PIPE_PDL):
        monkeypatch.setattr(k, "go", lambda *a, k=k: seen.append(k.contract.name))
    want = []
    # below GDN_SMEM_B the register builds, from it the smem builds; under PDL from GDN_PIPE_PDL_B the pipe build
    for B in sorted({G.GDN_SMEM_B - 1, G.GDN_SMEM_B, G.GDN_PIPE_PDL_B - 1, G.GDN_PIPE_PDL_B, G.GDN_PIPE_B - 1,
                     G.GDN_PIPE_B, 32}):
        i = _inputs(B, B + 1)
        out = torch.empty(B, G.VALUE_DIM, dtype=torch.bfloat16)
        monkeypatch.setattr(_dispatch, "_PDL", False)
        dops.gdn_decode(*testbeds._gdn_args(i), 16, 1e-6, out)
        monkeypatch.setattr(_dispatch, "_PDL", True)
        dops.gdn_decode(*testbeds._gdn_args(i), 16, 1e-6, out)
        want += ["gdn_decode_b32_pipe" if B >= G.GDN_PIPE_B else "gdn_decode_b32_smem" if B >= G.GDN_SMEM_B else C.name,
                 "gdn_decode_b32_pipe_pdl" if B >= G.GDN_PIPE_PDL_B else "gdn_decode_b32_smem_pdl" if B >= G.GDN_SMEM_B else P.name]
    assert seen == want and {"gdn_decode_b32_pipe", "gdn_decode_b32_pipe_pdl"} <= set(seen)


@pytest.mark.parametrize("pdl", [False, True])
def test_local_qk_candidate_assembles_without_the_exchange(pdl):
    """gen_gdn_decode.generate(local_qk=True) (experiments/gdn/decode_variant.py, not yet run):
    no q/k pushes and no bar_qk, one st.async left (the norm sums), each q/k window written under
    the one-writer predicate and only after the cluster barrier that follows every rank's reads
    (the first draft wrote it right after its own conv: a race with the other 7 readers, found in
    review before any run), no spills; the promoted PTX is untouched by the option."""
    g = _generator()
    kw = dict(pdl=True, name="gdn_decode_b32_pdl") if pdl else {}
    t = g.generate(local_qk=True, **kw)
    assert "bar_qk" not in t and t.count("st.async.shared::cluster") == 1
    assert t.count("barrier.cluster.wait.aligned") == 2  # before the norm exchange, and on the bad-slot path
    assert t.count("barrier.cluster.arrive.relaxed.aligned") == 2  # after the conv, and on the bad-slot path
    # 8 ranks read each q/k window, one writes it: only after every rank's arrive (after its conv)
    arrive, wait = t.index("barrier.cluster.arrive.relaxed.aligned"), t.index("barrier.cluster.wait.aligned")
    first_q_window_store = t.index("st.global.b16 [%pcv+0], %u2;")
    assert t.index("cvt.f32.bf16 %f7, %xk;") < arrive < wait < first_q_window_store
    res = _ptxas_usage(kw.get("name", C.name), t)
    assert res["spill_stores"] == res["stack_frame"] == 0, res
    assert paths.ptx_path("sm_90a", "gdn", C.name).read_text() == g.generate()


def test_smem_state_candidate():
    """generate(smem_state=True) (experiments/gdn/decode_variant.py smem, CPU-built): the slice comes
    by 8 cp.async of 16 B per thread (4 whole 128-byte lines per warp instruction, evict-first)
    instead of 32 register loads; the delta rule's arithmetic lines are the promoted kernel's, in
    the same order, up to register names; no spills, fewer registers, and the promoted PTX is
    untouched by the option."""
    import re

    g = _generator()
    t = g.generate(smem_state=True)
    assert paths.ptx_path("sm_90a", "gdn", C.name).read_text() == g.generate() != t
    assert t.count("cp.async.cg.shared.global.L2::cache_hint") == 8 and "ld.global.cs.f32 %s" not in t
    assert t.index("cp.async.wait_all;") < t.index("// 3. l2norm")
    arith = lambda ptx: [re.sub(r"%s\d+", "%s", ln.split("//")[0].strip()) for ln in ptx.splitlines()  # noqa: E731
                         if re.match(r"\s*(fma\.rn|mul)\.f32 %(s|kv|o)\d*,", ln)]
    promoted = arith(g.generate())
    mine = [ln for ln in arith(t) if ln != "mul.f32 %s, %s, %dec;"]
    assert promoted.count("mul.f32 %s, %s, %dec;") == 32 and arith(t).count("mul.f32 %s, %s, %dec;") == 64
    assert mine == [ln for ln in promoted if ln != "mul.f32 %s, %s, %dec;"]
    res = _ptxas_usage(C.name, t)
    assert res["spill_stores"] == res["stack_frame"] == 0 and res["registers"] <= 48, res
    assert res["static_smem"] <= 18 * 1024, res
    # promoted for B >= GDN_SMEM_B as gdn_decode_b32_smem and its PDL build, the same contracts otherwise
    for name, kw in (("gdn_decode_b32_smem", {}), ("gdn_decode_b32_smem_pdl", dict(pdl=True))):
        S, R = contracts.get(name), contracts.get(name.replace("_smem", ""))
        assert paths.ptx_path("sm_90a", "gdn", name).read_text() == g.generate(smem_state=True, name=name, **kw)
        assert (S.params, S.grid, S.threads, S.pdl, S.tolerance) == (R.params, R.grid, R.threads, R.pdl, R.tolerance)
        assert S.max_registers == 48 and S.max_static_smem == 18 * 1024


def test_stream_state_only_changes_the_state_cache_operator():
    """stream_state (promoted after experiments/gdn/decode_variant.json): against the build
    before (stream_state=False), the 32 state loads and 32 stores per thread carry .cs, nothing
    else; no spills."""
    g = _generator()
    a, b = g.generate(stream_state=False).splitlines(), g.generate().splitlines()
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    assert len(a) == len(b) and len(diff) == 64
    assert all(y in (x.replace("ld.global.f32", "ld.global.cs.f32"), x.replace("st.global.f32", "st.global.cs.f32"))
               for x, y in diff)
    res = _ptxas_usage(C.name, g.generate())
    assert res["spill_stores"] == res["stack_frame"] == 0, res


def test_pipe_builds():
    """gdn_decode_b32_pipe and _pipe_pdl (gen_gdn_decode_pipe.py): the committed PTX is current; per value
    head the delta rule's arithmetic lines are the register build's, in the same order, up to register
    names (so the bits are the same: experiments/gdn/pipe_variant.py checks them on the device); the
    state comes by 4 cp.async.bulk of 16 KB per head request (no L2 policy since f936d85); the PDL build requests the
    first item's states before griddepcontrol.wait and reads qkv, b, a and z after it by coherent loads;
    the contracts differ from gdn_decode_b32's only where the design does (grid, threads, shared memory,
    the batch parameter, the state pool's 16-byte alignment); no spills."""
    import re

    gp = paths.generator("gdn", "gen_gdn_decode_pipe")
    for name, kw in (("gdn_decode_b32_pipe", {}), ("gdn_decode_b32_pipe_pdl", dict(pdl=True))):
        assert paths.ptx_path("sm_90a", "gdn", name).read_text() == gp.generate(name=name, **kw), "run gen_gdn_decode_pipe.py"
    t, tp = gp.generate(), gp.generate(pdl=True, name="gdn_decode_b32_pipe_pdl")
    arith = lambda ptx: [re.sub(r"%s\d+", "%s", ln.split("//")[0].strip()) for ln in ptx.splitlines()  # noqa: E731
                         if re.match(r"\s*(fma\.rn|mul)\.f32 %(s|kv|o)\d*,", ln)]
    promoted = arith(_generator().generate())
    assert arith(t) == 2 * promoted and len(promoted) == 4 * 32 + 3  # per head: decay, kv, S += k delta, o; the norm, w, silu(z)
    # since f936d85 without the evict-first policy on these loads (read_hint=False)
    assert t.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [") == 6 * 4 and "cache_hint" not in t
    assert "griddepcontrol" not in t and ".nc.b16 %nxb" in t
    w = tp.index("griddepcontrol.wait;")
    assert tp.index("cp.async.bulk") < w < tp.index("griddepcontrol.launch_dependents;") < tp.index("ld.global.b16 %nxb")
    assert "ld.global.nc.b16 %nxb" not in tp and "ld.global.nc.b32 %nbp" not in tp
    for name, src in (("gdn_decode_b32_pipe", t), ("gdn_decode_b32_pipe_pdl", tp)):
        P, R = contracts.get(name), contracts.get(name.replace("_pipe", ""))
        assert (P.pdl, P.tolerance, P.op, P.bytes_read, P.bytes_written) == (R.pdl, R.tolerance, R.op, R.bytes_read, R.bytes_written)
        assert [p.name for p in P.params if p not in R.params] == ["state_pool", "batch"]
        assert [p.align for p in (*P.params, *R.params) if p.name == "state_pool"] == [16, 4]
        assert P.threads == 512 and P.dynamic_smem == 2 * 65536
        assert [P.grid_for({"B": b, "P": 40})[0] for b in (1, 8, 9, 32)] == [16, 128, 132, 132]
        res = _ptxas_usage(name, src)
        assert res["spill_stores"] == res["stack_frame"] == 0 and res["registers"] <= P.max_registers, res


@pytest.mark.parametrize("kw", [dict(late_second=True), dict(stages=3), dict(stages=3, pdl=True), dict(norm_bar=True),
                                dict(stages=3, tma_store=True), dict(stages=3, tma_store=True, norm_bar=True, pdl=True),
                                dict(read_hint=False, st=""), dict(stagger_ns=2000, pdl=True)],
                         ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_pipe_candidates_assemble(kw):
    """The pipe generator's candidates (experiments/gdn/pipe_variant.py) stay buildable without spills, with
    the same arithmetic lines as the promoted build; three stages wait on a runtime stage and parity."""
    import re

    gp = paths.generator("gdn", "gen_gdn_decode_pipe")
    t = gp.generate(**kw)
    arith = lambda ptx: [re.sub(r"%s\d+", "%s", ln.split("//")[0].strip()) for ln in ptx.splitlines()  # noqa: E731
                         if re.match(r"\s*(fma\.rn|mul)\.f32 %(s|kv|o)\d*,", ln)]
    assert arith(t) == arith(gp.generate())
    if kw.get("stages") == 3:
        assert ".b64 bar_st[3]" in t and t.count("mad.lo.u32 %sb, %stg, 8, %sb;") == 2 + 4 * (not kw.get("tma_store"))
    if kw.get("tma_store"):  # the 32 state stores per thread become one thread's 4 bulk stores per head
        assert "st.global.cs.f32" not in t and t.count("cp.async.bulk.global.shared::cta.bulk_group") == 2 * 4
    res = _ptxas_usage("gdn_decode_b32_pipe", t)
    assert res["spill_stores"] == res["stack_frame"] == 0 and res["registers"] <= 128, res
