"""Evidence checks (CPU): every kernel has a record under results/sm_90a/, made from the
committed PTX (a stale record fails), assembled to the same cubin here, and complete."""

import hashlib
import json

import pytest

from netra import contracts, paths
from netra.lifecycle import records
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


def test_report_is_rendered_from_the_records():
    text = (paths.results_dir() / "README.md").read_text()
    for c in CONTRACTS:
        assert c.name in text
    assert json.loads(json.dumps(records.load("rmsnorm_h2048")))  # records are plain JSON
