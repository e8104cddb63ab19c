"""The hand-written diagnosis PTX under experiments/ (not registered kernels, so `netra build` does not assemble it)
stays assemblable with the pinned ptxas and flags, with no spills or local memory; and the CPU evidence scripts still
reproduce what the notes say they show."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from netra.runtime import build, toolchain

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
DIAGNOSES = sorted([*(EXPERIMENTS / "runtime").glob("*.ptx"), *(EXPERIMENTS / "decode").glob("*.ptx")])


@pytest.mark.parametrize("ptx", DIAGNOSES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_diagnosis_ptx_assembles(ptx):
    res = build.resource_usage(toolchain.ptxas(), ptx)
    assert res["spill_stores"] == res["spill_loads"] == res["stack_frame"] == 0, (ptx.name, res)
    assert re.search(r"^\.visible \.entry \w+\(", ptx.read_text(), re.M), f"{ptx.name}: no entry"


def test_wait_release_protocol():
    """wait_release.ptx: the producer triggers its dependents before its work and stores its row strong; the
    consumer's spin form polls with a gpu-scope load (not one ptxas may hoist); the wait form waits before its rows and
    the spin_wait form only before it exits."""
    text = (EXPERIMENTS / "runtime" / "wait_release.ptx").read_text()
    producer, consumer = text.split(".visible .entry wr_consumer(")
    assert producer.index("griddepcontrol.launch_dependents;") < producer.index("SPIN:")
    assert "st.relaxed.gpu.global.u32 [%a], %g;" in producer
    poll = consumer[consumer.index("POLL:"):consumer.index("SEEN:")]
    assert "ld.relaxed.gpu.global.u32" in poll and "@%p bra POLL;" in poll
    assert consumer.count("griddepcontrol.wait;") == 2  # mode 0 before the rows; mode 2 after its work, before exit
    assert consumer.index("griddepcontrol.wait;") < consumer.index("POLL_ROW:")
    assert consumer.rindex("griddepcontrol.wait;") > consumer.index("WORK:")


def test_sum_barrier_sim_reproduces_the_deadlock():
    """experiments/proj/sum_barrier_sim.py: the barrier counts of the form built at 0b5e12d deadlock when consecutive
    strips have different summing warps; the correction measured at a044afc completes every walk."""
    spec = importlib.util.spec_from_file_location("sum_barrier_sim", EXPERIMENTS / "proj" / "sum_barrier_sim.py")
    sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sim)
    assert all(sim.walk("a044afc", n, seed) for n in (1, 2, 5, 40) for seed in range(50))
    assert all(sim.walk("0b5e12d", 1, seed) for seed in range(50))  # one strip: nothing to cycle on
    assert not any(sim.walk("0b5e12d", 40, seed) for seed in range(50))


def test_param_pointers():
    """loader.param_pointers: one pointer per field, in field order, at each field's address; one NULL entry for a
    struct without fields (what the guard builder and the experiments launch with)."""
    import ctypes

    from netra.runtime import loader

    class Args(ctypes.Structure):
        _fields_ = [("a", ctypes.c_uint64), ("b", ctypes.c_uint32), ("c", ctypes.c_uint64)]

    args = Args(1, 2, 3)
    ptrs = loader.param_pointers(args)
    assert [ptrs[i] for i in range(3)] == [ctypes.addressof(args) + o for o in (0, 8, 16)]
    assert ctypes.c_uint32.from_address(ptrs[1]).value == 2 and ctypes.c_uint64.from_address(ptrs[2]).value == 3

    class Empty(ctypes.Structure):
        _fields_ = []

    empty = loader.param_pointers(Empty())
    assert len(empty) == 1 and empty[0] is None


def test_write_experiment(tmp_path, monkeypatch):
    import json

    from netra.lifecycle import records

    monkeypatch.setenv("NETRA_COMMIT", "0123456789abcdef")
    path = records.write_experiment(str(tmp_path), "probe_u57", {"x": [1.5]})
    assert path == str(tmp_path / "probe_u57_0123456.json") and json.loads(open(path).read()) == {"x": [1.5]}
    monkeypatch.delenv("NETRA_COMMIT")
    assert records.write_experiment(str(tmp_path), "probe", {}).endswith("probe_local.json")


def test_variant_ab_shapes_named():
    """variant_ab.shapes_named: the contracts' Fp8Gemv shapes by name, in the order asked; an unknown name fails."""
    import sys

    sys.path.insert(0, str(EXPERIMENTS / "proj"))
    import variant_ab

    from netra.contracts.proj import EXPERTS_SHARED_GROUP32, NORM_BA

    names = [EXPERTS_SHARED_GROUP32.name, NORM_BA.name]
    assert variant_ab.shapes_named(names) == [EXPERTS_SHARED_GROUP32, NORM_BA]
    with pytest.raises(KeyError):
        variant_ab.shapes_named(["fp8_gemv_no_such_shape"])


def _spin_builds():
    from netra import paths

    g = paths.generator("gdn", "gen_gdn_decode")
    kw = dict(pdl=True, name="gdn_decode_b32_pdl", spin=True)
    return g, {"spin": g.generate(**kw), "spin2": g.generate(**kw, spin_ba_late=True, spin_z_early=True),
               "spin2_trace": g.generate(**kw, spin_ba_late=True, spin_z_early=True, spin_trace=True),
               # the promoted build (netra::gdn_decode_spin), as committed
               "spin_smem": (Path(g.HERE) / f"{g.SPIN_NAME}.ptx").read_text(),
               # a candidate (step_ab spin_backoff): the sleep between polls growing to 512 ns
               "spin_smem_backoff": g.generate(pdl=True, smem_state=True, spin=True, name=g.SPIN_NAME, spin_backoff=512)}


def _assembled_body(tmp_path, form: str, text: str, max_registers: int) -> tuple[str, list[int]]:
    """A candidate's PTX assembled (no spill, at most ``max_registers``): its body from the entry's brace, and where each
    griddepcontrol.wait in it starts."""
    p = tmp_path / f"{form}.ptx"
    p.write_text(text)
    r = build.resource_usage(toolchain.ptxas(), p)
    assert r["spill_stores"] == r["stack_frame"] == 0 and r["registers"] <= max_registers, (form, r)
    body = text[text.index("{"):]
    return body, [m.start() for m in re.finditer(r"griddepcontrol\.wait;", body)]


def test_attn_trigger_promoted():
    """gen_attn_decode trigger, promoted at f6f3e85 for the cluster builds (c4, c8; measured as step_ab.py's
    attn_trigger; its peer now attn_notrigger): the committed build is the one measured without it plus one
    griddepcontrol.launch_dependents, before its first page is walked, and still no griddepcontrol.wait (launched
    plainly); nothing else differs. Builds without a cluster refuse the option; the long builds are committed without it
    and its candidate (step_ab.py attn_trigger_long) differs from them by the same one instruction."""
    from netra import paths
    from netra.contracts.attn import ATTN_CLUSTER, ATTN_LONG

    g = paths.generator("attention", "gen_attn_decode")
    for c, contract in ATTN_CLUSTER.items():
        b = (Path(g.HERE) / f"{contract.name}.ptx").read_text().splitlines()
        a = g.generate(True, cluster=c).splitlines()
        added = [ln for ln in b if ln not in a]
        assert len(b) == len(a) + 1 and [ln.strip() for ln in added if not ln.strip().startswith("//")] == \
            ["griddepcontrol.launch_dependents;"], (c, added)
        assert [ln for ln in a if ln not in b] == [ln for ln in a if ln.strip().startswith("// (cluster) launched")]
        text = "\n".join(b)
        assert "griddepcontrol.wait" not in text and text.index("griddepcontrol.launch_dependents") < text.index("mma.sync")
    for c, contract in ATTN_LONG.items():  # committed without it; the candidate (step_ab attn_trigger_long) adds it
        a = (Path(g.HERE) / f"{contract.name}.ptx").read_text()
        b = g.generate(True, cluster=c, long=True, trigger=True)
        assert "griddepcontrol" not in a and "griddepcontrol.wait" not in b
        assert [ln.strip() for ln in b.splitlines() if ln not in a.splitlines() and not ln.strip().startswith("//")] \
            == ["griddepcontrol.launch_dependents;"] and b.index("griddepcontrol") < b.index("mma.sync")
    with pytest.raises(AssertionError):
        g.generate(True, trigger=True)


def test_res_spin_candidate(tmp_path):
    """The out_proj spin candidate (contracts.proj.RES_SPIN; experiments/decode/step_ab.py res_spin*), as built by
    gen_fp8_gemv: before any wait its strip is requested (res_spin, res_spin_land; not res_spin_x_first), then x_next's
    TAG stores, then warp 0's gate (not res_spin_nogate), then x's 16-byte loads, strong; each of the 8 vectors a
    thread loads is polled, and griddepcontrol.wait appears only in the polls' fallbacks and once after the x
    prologue, followed by launch_dependents, before the strip walk. From the walk on the text is the residual build's
    M <= 8 copy (bitwise). No spills; its producer's spin_strong_out changes only gdn_decode_b32_spin's two o stores."""
    from netra import contracts, paths
    from netra.contracts.gdn import TAG
    from netra.contracts.proj import FUSED, RES_SPIN, _contract

    gf = paths.generator("proj", "gen_fp8_gemv")
    res = next(sh for sh in FUSED if sh.fuse == "res")
    plain = (Path(gf.HERE) / f"{res.name}.ptx").read_text()
    walk = lambda t: t[t.index("STRIP_M8:"):t.index("ret;", t.index("STRIP_M8:"))]  # noqa: E731
    forms = {"res_spin": {}, "res_spin_land": dict(spin_land=True), "res_spin_nogate": dict(spin_gate=False),
             "res_spin_x_first": dict(pre_strips=0)}
    for form, kw in forms.items():
        text = gf.generate(RES_SPIN, **kw)
        body, waits = _assembled_body(tmp_path, form, text, 104)
        fallbacks = [m.start() for m in re.finditer(r"XP\w+_WAIT:\n", body)]
        oks = [m.start() for m in re.finditer(r"XP\w+_OK:\n", body)]
        loads = [m.start() for m in re.finditer(r"ld\.relaxed\.gpu\.global\.v4\.u32", body)]
        gated = form != "res_spin_nogate"
        assert len(fallbacks) == len(oks) == 8 and len(loads) == 16 + gated and "ld.global.nc" not in body, form
        assert len(waits) == 9 and all(any(0 < w - f < 80 for f in fallbacks) for w in waits[:8]), form
        assert waits[-1] > max(oks) and body.index("STRIP_M8:") > waits[-1], form
        assert re.match(r"griddepcontrol\.wait;\s*griddepcontrol\.launch_dependents;", body[waits[-1]:]), form
        tags = body.index("@%p st.global.v4.u32 [%pa], {%t2, %t2, %t2, %t2};")
        assert body.index(f"mov.b32 %t2, {TAG << 16 | TAG:#010x};") < tags < min(loads), form
        assert (body.index("cp.async.bulk") < tags) == (form != "res_spin_x_first"), form
        if gated:  # warp 0 polls 32 sampled vectors, the others wait at the barrier after it
            gate = body.index("XG_DONE_M8:")
            assert loads[0] < gate < loads[1] and re.match(r"XG_DONE_M8:\s*bar\.sync 0;", body[gate:]), form
            assert "vote.sync.any.pred %ptg, %ptg, 0xffffffff;" in body[loads[0]:gate], form
            assert ("mbarrier.try_wait.parity" in body[:loads[0]]) == (form == "res_spin_land"), form
        assert walk(text) == walk(plain), form
    c = _contract(RES_SPIN)
    assert RES_SPIN.name not in contracts.REGISTRY and c.exact_outputs == ("x_next",) and c.dims["M"] == tuple(range(1, 9))
    assert [q.name for q in c.params] == [q.name for q in contracts.get(res.name).params] + ["x_next"]
    g = paths.generator("gdn", "gen_gdn_decode")
    a = (Path(g.HERE) / f"{g.SPIN_NAME}.ptx").read_text().splitlines()
    b = g.generate(pdl=True, smem_state=True, spin=True, name=g.SPIN_NAME, spin_strong_out=True).splitlines()
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    assert len(a) == len(b) and len(diff) == 2 and all(y.strip() == "st.relaxed.gpu.global.b16 [%pt], %u0;" for _, y in diff)


def test_gdn_spin_candidate(tmp_path):
    """gen_gdn_decode spin (experiments/decode/step_ab.py gdn_spin*): each build assembles without spills; no
    griddepcontrol.wait before the projection outputs except inside a poll's fallback; every exit after a wait (the
    chain); every value read by a poll gets TAG back (qkv and z by their reader, b and a by rank r = 0 after the norm
    exchange); the promoted PDL build is unchanged. gen_fp8_gemv strong_out changes only the in_proj's two stores."""
    from netra import paths
    from netra.contracts.proj import NORM_BA

    g, builds = _spin_builds()
    promoted = (Path(g.HERE) / "gdn_decode_b32_pdl.ptx").read_text()
    assert g.generate(pdl=True, name="gdn_decode_b32_pdl") == promoted
    assert g.generate(pdl=True, smem_state=True, spin=True, name=g.SPIN_NAME) == builds["spin_smem"]
    # the back-off changes only the sleep between polls: each poll loop sleeps %sns, doubled up to its cap
    a, b = builds["spin_smem"], builds["spin_smem_backoff"]
    assert a.count("nanosleep.u32 32;") == b.count("nanosleep.u32 %sns;") == b.count("min.u32 %sns, %sns, 512;") > 0
    strip = lambda t: [ln for ln in t.splitlines()  # noqa: E731
                       if "%sns" not in ln and "nanosleep" not in ln and ".reg .b32 %spn" not in ln]
    assert strip(a) == strip(b)
    for form, text in builds.items():
        body, waits = _assembled_body(tmp_path, form, text, 80)
        fallbacks = [m.start() for m in re.finditer(r"\w+_WAIT:\n", body)]
        polls = {lab: body.index(f"{lab}_OK:") for lab in ("SPIN_X", "SPIN_B", "SPIN_A", "SPIN_Z")}
        assert len(fallbacks) == 4 and all(any(0 < w - f < 80 for f in fallbacks) for w in waits[:4]), form
        assert re.search(r"OUT_DONE:\n\s*griddepcontrol\.wait;", body) and body.index("BAD_SLOT:") < waits[-1], form
        assert body.count("ret;") == 2
        for reg, addr, lab in (("%xb", "%pqa", "SPIN_X"), ("%zb", "%pza", "SPIN_Z")):
            assert body.index(f"st.global.b16 [{addr}], %ut;") > polls[lab], (form, lab)
        tags_ba = [m.start() for m in re.finditer(r"@%ps st\.global\.b16 \[%p[ba]a\], %ut;", body)]
        assert len(tags_ba) == 4 and min(tags_ba) > body.index("WAIT_NORM:"), form  # good path + BAD_SLOT path
        if "spin2" in form:
            assert polls["SPIN_B"] > body.index("WAIT_QK:") and "SPIN_Z_CHK:" in body
    gf = paths.generator("proj", "gen_fp8_gemv")
    a, b = gf.generate(NORM_BA, strong_out=False).splitlines(), gf.generate(NORM_BA).splitlines()  # strong: promoted
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    assert len(a) == len(b) and len(diff) == 2 and all("st.relaxed.gpu.global.b16" in y for _, y in diff), diff
    assert gf.generate(NORM_BA) == (Path(gf.HERE) / f"{NORM_BA.name}.ptx").read_text()


def _candidate_sass(tmp_path, name: str, text: str) -> tuple[dict[str, int], str]:
    """A candidate build's PTX assembled with the pinned ptxas and flags: its resource usage and its SASS."""
    import subprocess

    path = tmp_path / f"{name}.ptx"
    path.write_text(text)
    cubin, _ = build._assemble(toolchain.ptxas(), path, tmp_path)
    sass = subprocess.run([*toolchain.disassembler(), str(cubin)], capture_output=True, text=True, check=True).stdout
    return build.resource_usage(toolchain.ptxas(), path), sass


def test_lean_handoffs(tmp_path):
    """The split router's hand-off without its two fence.acq_rel.gpu (split_lean, its default since a8d67e9;
    step_ab.py split_fenced is the former build) and the long attention builds' (long_lean, a candidate
    measured level): the fenced text is the lean one plus the two fences around the atom.acq_rel.gpu, nothing else; in
    the SASS two MEMBAR.ALL.GPU more (1 -> 3 and 2 -> 4), within the contracts' registers and without spills."""
    from netra import contracts, paths
    from netra.contracts.attn import ATTN_LONG

    gr = paths.generator("proj", "gen_moe_router")
    ga = paths.generator("attention", "gen_attn_decode")
    split = paths.ptx_path("sm_90a", "proj", gr.SPLIT_NAME).read_text()
    assert gr.generate_split() == split == gr.generate_split(lean=True) and "fence.acq_rel.gpu" not in split
    # (name, lean text, fenced text, whether the lean one is committed, MEMBAR.ALL.GPU in the lean SASS)
    builds = [(gr.SPLIT_NAME, split, gr.generate_split(lean=False), True, 1)]
    builds += [(c.name, ga.generate(True, cluster=cl, long=True, lean_split=True),
                paths.ptx_path("sm_90a", "attention", c.name).read_text(), False, 2) for cl, c in ATTN_LONG.items()]
    for name, lean, fenced, committed, membars in builds:
        gone = [ln.strip() for ln in fenced.splitlines() if ln not in lean.splitlines()]
        assert len(gone) == 2 and all(ln.startswith("fence.acq_rel.gpu;") for ln in gone), (name, gone)
        assert len(lean.splitlines()) == len(fenced.splitlines()) - 2
        assert lean.count("atom.acq_rel.gpu") == fenced.count("atom.acq_rel.gpu") == 1
        (tmp_path / "lean").mkdir(exist_ok=True)
        (tmp_path / "fenced").mkdir(exist_ok=True)
        sass = {}
        for form, text in (("lean", lean), ("fenced", fenced)):
            res, sass[form] = _candidate_sass(tmp_path / form, name, text)
            assert res["spill_stores"] == res["stack_frame"] == 0 and res["registers"] <= contracts.get(name).max_registers
        assert (sass["lean"].count("MEMBAR.ALL.GPU"), sass["fenced"].count("MEMBAR.ALL.GPU")) == (membars, membars + 2), name
        assert build.disasm(name).count("MEMBAR.ALL.GPU") == sass["lean" if committed else "fenced"].count("MEMBAR.ALL.GPU")
    with pytest.raises(AssertionError):
        ga.generate(True, cluster=8, lean_split=True)


def test_cl_restrict_candidate(tmp_path):
    """step_ab.py cl_restrict (measured at d0cfc39 and rejected: level with PDL, slower plainly): the c4 / c8 builds
    with the partials' cluster barrier released by fence.release.sync_restrict::shared::cta.cluster and a relaxed
    arrive; otherwise the committed text (PTX 8.6 for the fence); in the SASS no MEMBAR.ALL.GPU (the committed builds: one, the release arrive's) and the same registers.
    Builds without a cluster, and the push builds, refuse it."""
    from netra import paths
    from netra.contracts.attn import ATTN_CLUSTER

    g = paths.generator("attention", "gen_attn_decode")
    for c, k in ATTN_CLUSTER.items():
        committed = paths.ptx_path("sm_90a", "attention", k.name).read_text()
        text = g.generate(True, cluster=c, trigger=True, cl_restrict=True)
        assert committed.count("barrier.cluster.arrive.release.aligned;") == 1
        assert "barrier.cluster.arrive.release" not in text and text.count("fence.release.sync_restrict") == 1
        a, b = committed.splitlines(), text.splitlines()
        assert len(b) == len(a) + 1 and [ln for ln in a if ln not in b] == [".version 8.0",
                                                                           "  barrier.cluster.arrive.release.aligned;"]
        fence = b.index("  fence.release.sync_restrict::shared::cta.cluster;  // this CTA's partial (shared::cta) before the arrive")
        assert b[fence + 1] == "  barrier.cluster.arrive.relaxed.aligned;" and b[fence - 1] == "EMPTY_JOIN:"
        res, sass = _candidate_sass(tmp_path, k.name, text)
        assert res["registers"] == build.resource_usage(toolchain.ptxas(), paths.ptx_path("sm_90a", "attention", k.name))["registers"]
        assert res["spill_stores"] == res["stack_frame"] == 0
        assert build.disasm(k.name).count("MEMBAR.ALL.GPU") == 1 and sass.count("MEMBAR.ALL.GPU") == 0
    with pytest.raises(AssertionError):
        g.generate(True, cl_restrict=True)
    with pytest.raises(AssertionError):
        g.generate(True, cluster=8, push=True, cl_restrict=True)
