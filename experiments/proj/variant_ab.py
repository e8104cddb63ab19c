"""Shared by the FP8 candidate scripts that time a build option of gen_fp8_gemv beside the promoted
kernels (coherent_x_variant.py, ids_early_variant.py): for each (shape, cases), the candidate's
outputs against the promoted kernel's on the same NaN-poisoned inputs (2 seeds, the candidate
launched plainly and with the PDL launcher: bitwise, NaN rows included), then both timed by the
bench's method (CUDA-graph replay, inputs and weights rotated past 4x L2), plainly and as a chain
of PDL launches of itself."""

from __future__ import annotations

import dataclasses
import json
import os

import torch


def run(label: str, options: dict, shape_cases, out_path: str, candidate_shape=None, carveout: int | None = None,
        candidate_smem=None) -> dict:
    """``candidate_shape`` (sh -> a replaced Fp8Gemv, e.g. more stages): the candidate is built
    from it and launched with its dynamic shared memory; the promoted kernel as registered.
    ``candidate_smem`` (sh -> bytes): the candidate's dynamic shared memory where its build grows it.
    ``carveout``: the candidate function's preferred shared-memory carveout (percent; 100: the
    largest), so that two of its CTAs, or one of it beside another kernel's, fit on one SM."""
    from netra import contracts, paths
    from netra.contracts import proj as proj_contracts
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    g = paths.generator("proj", "gen_fp8_gemv")
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "candidate": {label: options}, "kernels": {}}
    if candidate_shape or carveout is not None:
        res["candidate_shape"] = {sh.name: candidate_shape(sh).name if candidate_shape else sh.name for sh, _ in shape_cases}
        res["carveout"] = carveout
    keep = []
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731  (a NaN row, for a bad id, equals itself)
    for sh, cases in shape_cases:
        c = contracts.get(sh.name)
        tb = testbeds.get(sh.name)
        sh2 = candidate_shape(sh) if candidate_shape else sh
        # the candidate's own grid, threads and shared memory (a k split or fewer stages change them)
        c2 = proj_contracts._contract(sh2) if candidate_shape else c
        if candidate_smem:
            c2 = dataclasses.replace(c2, dynamic_smem=candidate_smem(sh2))
        module, fn = loader.load_text(sh2.name, g.generate(sh2, **options), dynamic_smem=c2.dynamic_smem)  # its .entry
        keep.append(module)
        if carveout is not None:
            set_carveout(fn, carveout)
        h = loader.load(c.name, 0).handle
        gos = {"promoted": plain_and_pdl(c, h), label: plain_and_pdl(c2, int(fn))}
        rows = {}
        for case in cases(c):
            outs = []
            for go in (gos["promoted"][0], gos[label][0], gos[label][1]):
                for seed in (0, 1):
                    b = check.Bench(tb, case, seed)
                    b.reset()
                    assert go(*tb.args(b.bufs)) is None
                    torch.cuda.synchronize()
                    outs.append(b.results())
            row = {"bitwise_equal_to_promoted": all(torch.equal(bits(outs[i][n]), bits(outs[j][n])) for n in outs[0]
                                                    for i, j in ((0, 2), (1, 3), (0, 4), (1, 5)))}
            for name, (go, go_pdl) in gos.items():
                r = bench.bench_case(tb, case, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
                row[name] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
            rows[str(case)] = row
            print(sh.name, case, row, flush=True)
        res["kernels"][sh.name] = rows
        json.dump(res, open(out_path, "w"), indent=1)  # after every kernel
    del keep
    return res


def shapes_named(names) -> list:
    """The Fp8Gemv shapes of netra.contracts.proj with these contract names, in that order (a KeyError for a name no
    shape has)."""
    from netra.contracts import proj

    every = {s.name: s for v in vars(proj).values() for s in (v if isinstance(v, tuple) else (v,))
             if isinstance(s, proj.Fp8Gemv)}
    return [every[n] for n in names]


def cases_at(ms: dict):
    """run's per-shape case filter: the contract's cases whose M is in ms[contract name] (a KeyError for a shape
    ms does not name)."""
    return lambda c: [d for d in c.cases() if d["M"] in ms[c.name]]


def plain_and_pdl(c, handle: int) -> tuple:
    """The guard-and-launch of function ``handle`` under contract ``c``, plainly and with programmatic serialization."""
    from netra.runtime import launch as rt_launch

    return tuple(rt_launch.make_guard_and_launch(c, function_handle=handle, device=0, **k)
                 for k in ({}, {"launch": rt_launch.pdl_launcher()}))


def f64_check(gos: tuple, tb, ms, tolerance: float, firsts: dict, name: str) -> dict:
    """A build that need not be bitwise the promoted one (``gos``: its plain and PDL launches): for every M in
    ``ms`` and seeds 0 and 1, the worst relative error against the float64 reference on NaN-poisoned
    outputs, plain == PDL bitwise, and 5 bitwise repeats at the largest M. ``firsts[(name, M, seed)]``
    keeps the plain outputs for comparisons between builds."""
    from netra.lifecycle import check, metrics

    worst, same_pdl = 0.0, True
    for m in ms:
        for seed in (0, 1):
            got = []
            for launch in gos:
                b = check.Bench(tb, {"M": m}, seed)
                b.reset()
                r = launch(*tb.args(b.bufs))
                assert r is None, r
                torch.cuda.synchronize()
                ref = tb.reference_for(b.original_inputs(), b.bufs)
                worst = max(worst, max(metrics.output_error(b.bufs[n], ref[n]) for n in tb.output_names()))
                got.append(b.results())
            same_pdl = same_pdl and all(metrics.first_mismatch(got[0][n], got[1][n]) is None for n in got[0])
            firsts[(name, m, seed)] = got[0]
    return {"max_rel_err": worst, "tolerance": tolerance, "pass": worst <= tolerance,
            "deterministic": repeats_bitwise(gos[0], tb, {"M": max(ms)}), "pdl_bitwise_plain": same_pdl}


def f64_checks(gos: dict, tb, c, check_ms, rows: dict, firsts: dict) -> None:
    """f64_check of every build in ``gos`` (name -> (plain, PDL) launches) at the Ms of ``check_ms`` that contract
    ``c`` has, into rows[name + "_check"]; correctness first, before any timing."""
    ms = {d["M"] for d in c.cases()}
    for name, pair in gos.items():  # float64 reference, NaN-poisoned outputs
        rows[name + "_check"] = f64_check(pair, tb, [m for m in check_ms if m in ms], c.tolerance, firsts, name)


def time_rows(gos: dict, tb, c, time_ms, floors, rows: dict, tag: str) -> None:
    """time_builds at every M of ``time_ms`` that contract ``c`` has, into rows["M=m"], each printed with ``tag``."""
    ms = {d["M"] for d in c.cases()}
    for m in [m for m in time_ms if m in ms]:
        rows[f"M={m}"] = time_builds(gos, tb, m, floors, rows)
        print(tag, m, rows[f"M={m}"], flush=True)


def time_builds(gos: dict, tb, m: int, floors, checks: dict) -> dict:
    """Each build in ``gos`` (name -> (plain, PDL) launches) that passed its check, timed at M = ``m`` by the
    bench's method, plainly and as a PDL chain, with the read floor of the same run."""
    from netra.lifecycle import bench

    row = {}
    for name, (go, go_pdl) in gos.items():
        if checks[name + "_check"]["pass"]:
            r = bench.bench_case(tb, {"M": m}, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
            row[name] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us"),
                         "read_floor_us": r["peers"]["read_floor"]}
    return row


def repeats_bitwise(go, tb, dims: dict, seed: int = 7, runs: int = 5) -> bool:
    """``runs`` launches of ``go`` on the same inputs (NaN-poisoned outputs each time) give the same bits."""
    from netra.lifecycle import check, metrics

    b = check.Bench(tb, dims, seed)
    first, same = None, True
    for _ in range(runs):
        b.reset()
        go(*tb.args(b.bufs))
        torch.cuda.synchronize()
        r = b.results()
        same = same and (first is None or all(metrics.first_mismatch(r[n], first[n]) is None for n in r))
        first = first or r
    return same


def set_carveout(function, percent: int) -> None:
    from netra.runtime import loader

    loader.set_carveout(function, percent, "variant")


def out_path(name: str, here) -> str:
    import sys

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(here)
    return os.path.join(out_dir, name)
