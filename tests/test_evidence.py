"""Evidence checks (CPU): every kernel has a record under results/sm_90a/, made from the
committed PTX (a stale record fails), assembled to the same cubin here, and complete."""

import hashlib
import json

import pytest

from netra import contracts, paths
from netra.lifecycle import bench, records
from netra.runtime import build

CONTRACTS = contracts.all_contracts()


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    # Assemble into a private folder so the check does not depend on (or disturb) build/.
    import netra.paths as p

    old = p.BUILD
    p.BUILD = tmp_path_factory.mktemp("build")
    try:
        yield build.build(log=lambda *_: None)
    finally:
        p.BUILD = old


@pytest.mark.parametrize("c", CONTRACTS, ids=lambda c: c.name)
def test_record_exists_and_is_current(c, manifest):
    rec = records.load(c.name)
    assert rec is not None, f"{c.name}: no record at {records.record_path(c.name)}; run `netra run` on an H200"
    ptx = paths.ptx_path(c.arch, c.family, c.name).read_bytes()
    assert rec["ptx_sha256"] == hashlib.sha256(ptx).hexdigest(), (
        f"{c.name}: the record was measured on other PTX (stale evidence); re-run check/sanitize/bench on an H200")
    assert rec["cubin_sha256"] == manifest["kernels"][c.name]["cubin_sha256"], (
        f"{c.name}: ptxas {manifest['ptxas_version']} here assembles a different cubin than the one measured")
    assert rec["ptxas_flags"] == manifest["flags"]


@pytest.mark.parametrize("c", CONTRACTS, ids=lambda c: c.name)
def test_record_is_complete_and_passes_its_gates(c):
    rec = records.load(c.name)
    assert rec is not None
    assert records.validate(rec, c.name) == []
    corr = rec["correctness"]
    assert corr["pass"] is True
    assert corr["max_rel_err"] <= corr["tolerance"] == c.tolerance
    assert corr["graph_replay_bitwise"] is True
    if c.name not in ("empty_kernel", "read_floor"):
        assert corr["deterministic_bitwise"] is True and corr["determinism_runs"] >= 100
        assert len(corr["seeds"]) >= 3
    san = corr["sanitizer"]
    assert san["memcheck"] == "clean" and san["racecheck"] == "clean"
    assert san["planted_oob_detected"] is True, "the memcheck gate must be shown able to fail"
    assert rec["device"].startswith("NVIDIA H200")


@pytest.mark.parametrize("c", [c for c in CONTRACTS if c.bench], ids=lambda c: c.name)
def test_timing_record_covers_every_contract_shape(c):
    rec = records.load(c.name)
    shapes = [case["shape"] for case in rec["cases"]]
    assert shapes == c.cases(), f"{c.name}: timed shapes differ from the contract's"
    for case in rec["cases"]:
        assert case["median_us"] > 0 and case["bytes"] == sum(c.nbytes(case["shape"]))
        assert {"empty_kernel", "read_floor", *c.peers} <= set(case["peers"])
        assert abs(case["roofline_fraction"] - case["bytes"] / 4.33e12 / (case["median_us"] * 1e-6)) < 1e-9
        # every launch cold, and over at least bench.MIN_COPIES copies, so that one or two placements in
        # memory do not decide the time (experiments/proj/experts_bench_alloc*.json)
        assert case["copies"] == bench.copies_for(case["bytes"]), (c.name, case["shape"], case["copies"])
        # timed after the driver had cleared what the previous case freed (bench.SCRUB_BYTES_PER_S)
        assert case.get("scrub_wait_s", -1) >= 0, (c.name, case["shape"], "timed before bench.settle existed")


def test_bench_waits_for_the_scrub_of_what_it_freed(monkeypatch):
    """bench.release notes the bytes empty_cache gave back; bench.settle then waits freed / SCRUB_BYTES_PER_S
    from the free, once; nothing freed, no wait."""
    import torch

    reserved, slept, now = [40e9], [], [100.0]
    monkeypatch.setattr(bench, "_scrub_done_at", 0.0)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: int(reserved[0]))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: reserved.__setitem__(0, 10e9))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(bench.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(bench.time, "sleep", lambda s: (slept.append(s), now.__setitem__(0, now[0] + s)))
    assert bench.release() == 30e9
    now[0] += 0.02  # the next case's allocations and capture overlap the wait
    assert bench.settle() == pytest.approx(30e9 / bench.SCRUB_BYTES_PER_S - 0.02)
    assert slept == [pytest.approx(30e9 / bench.SCRUB_BYTES_PER_S - 0.02)]
    assert bench.settle() == 0.0 and bench.release() == 0 and bench.settle() == 0.0 and len(slept) == 1


def test_report_is_rendered_from_the_records():
    text = (paths.results_dir() / "README.md").read_text()
    for c in CONTRACTS:
        assert c.name in text
    assert json.loads(json.dumps(records.load("rmsnorm_h2048")))  # records are plain JSON


def test_decode_record_is_complete_current_and_passes():
    """results/sm_90a/decode.json: the issue-3 gate on the full-size model. Its schema, the
    three engines at batch 1 (and the runner at 8 and 32), kernels named by the PTX they
    ran (stale PTX fails), and the gates passed."""
    from netra.decode import main as decode

    path = paths.results_dir() / "decode.json"
    assert path.is_file(), f"no {path}; run `netra decode` on an H200"
    rec = json.loads(path.read_text())
    assert rec["commit"] and rec["model"]["config"]["num_hidden_layers"] == 40
    for r in rec["runs"]:
        assert set(decode.RUN_KEYS) <= set(r), r
        for k in r["kernels"]:
            ptx = paths.ptx_path("sm_90a", contracts.get(k["name"]).family, k["name"]).read_bytes()
            assert k["ptx_sha256"] == hashlib.sha256(ptx).hexdigest(), f"{k['name']}: decode.json ran other PTX"
    b1 = {r["engine"]: r["ms_per_token"] for r in rec["runs"] if r["batch"] == 1}
    assert {"transformers-eager", "netra-framework-graph", "netra-kernels-graph"} <= set(b1)
    eager = min(r["ms_per_token"] for r in rec["runs"] if r["engine"] == "transformers-eager")
    assert b1["netra-framework-graph"] < eager, "the framework-path runner must beat transformers eager at batch 1"
    for engine in ("netra-framework-graph", "netra-kernels-graph"):
        assert {8, 32} <= {r["batch"] for r in rec["runs"] if r["engine"] == engine}
    for engine in ("netra-kernels-graph", "netra-kernels-pdl-graph"):  # from an empty cache, and at its end
        for suffix, where in (("", "at positions 3.."), ("-late", f"..{rec['runs'][0]['context'] - 1}")):
            rows = [r for r in rec["runs"] if r["engine"] == engine + suffix]
            assert {1, 8, 32} <= {r["batch"] for r in rows} and all(where in r["method"] for r in rows), engine + suffix
    g = rec["gates"]
    assert set(decode.GATE_KEYS) <= set(g)
    assert g["layer_shadow_pass"] and len(g["layer_shadow"]["layers"]) == 40
    assert g["teacher_forced"]["pass"] and g["teacher_forced"]["steps"] == 256
    d = g["depth_limited"]["teacher_forced"]
    # every sure position judged; any disagreement only one excused after a router near-tie flip (gates.ROUTER_TIE_SHARE)
    assert d["pass"] and d["top1_checked"] > 0
    assert d["top1_agreement_non_tie"] == 1.0 or d["router_ties"]["within_budget"] and not d["disagreements"]
