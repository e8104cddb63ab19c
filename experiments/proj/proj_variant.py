"""Check and time fp8_gemv candidates beside the promoted kernels, by the bench's own method,
after a correctness check of their own.

  python3 experiments/proj/proj_variant.py CANDIDATE [CANDIDATE ...] --out "$OUT"   (on the H200, PYTHONPATH=src)

CANDIDATE (`--shapes=fp8_gemv_n1024_k2048,...` limits the shapes): `cluster` (gen_fp8_gemv_cluster.py, v3, measured and rejected), `v4a`, `v4b`,
`v4a_pdl`, `v4b_pdl` (gen_fp8_gemv_v4.py), `v3x` (the promoted generator, x staged in
shared memory by bulk copies), `v3c` (x by coalesced 16-byte loads through shared memory), `v3d`
(v3c without the second n-tile's x work at M <= 8), `v3e` (v3d with the amax of x by packed integer
max), `v3f` (v3e with one strip requested before griddepcontrol.wait, the rest after the x loads),
`v3g` (the promoted v3f with everything after the wait emitted twice, for M <= 8 without the
second n-tile and for M > 8; prediction: 2048 x 4096 at M = 1 from 6.6 to ~5.4 us, its x
prologue halved without the spill a branch costs; other shapes and M = 16 unchanged), `v3t` (v3g
with token groups: grid y = ceil(M / 8), each CTA the M <= 8 body on its 8 rows; for 1024 x 2048,
whose 64 CTAs leave half the SMs idle, and 2048 x 512, whose 128-thread CTAs fit two per SM), `v3p`
(v3g with x pairs at M > 8: clusters of 2 CTAs, each loading one n-tile of x and handing it to
the other by st.async, so x's L2 reads halve; trace_v3g.json had the M = 16 x prologue end at
4.9 us at 2048 x 4096; prediction: M = 16 there from 7.7 to ~6.2 us, 4096 x 2048 from 5.8 to ~5.2,
the large shapes -0.3 to -0.5 us, M <= 8 unchanged; measured: correct, bitwise, slower at M = 16
everywhere: rejected), `v3q` (v3g with x's loads before every chunk request at M > 8; prediction:
M = 16 at 2048 x 4096 from 7.7 to ~6.5 us, at 4096 x 2048 from 5.8 to ~5.2, 12288 x 2048 unchanged,
M <= 8 unchanged; the PDL chain at M > 8 loses its weight prefetch; promoted per shape), `v3r`
(x first at every M, `pre_strips=0`; prediction from the records at 0dcc14b, where 2048 x 4096
at M = 9 (x first) took 5.64 us against 5.86 at M = 8: M = 2..8 there ~0.3 us faster, M = 1
unchanged; measured (v3r_variant.json): M = 1 also 0.9 us faster there, 4096 x 2048 slower at
M <= 8; promoted for the one-strip shapes as `Fp8Gemv.pre_strips`), `v5`, `v5_pdl`, `v6`, `v6_pdl` (gen_fp8_gemv_v5.py; the PDL builds are also timed as a chain of
cuLaunchKernelEx launches with programmatic stream serialization). For each shape: assemble with the pinned ptxas and flags; check at
M in (1, 5, 8, 9, 16) against the float64 reference with NaN-poisoned outputs, twice
(bitwise equal), and against the promoted kernel's output bitwise (v4 keeps its arithmetic);
then time the candidate and the promoted kernel at M = 1, 8, 16 (CUDA-graph replay, cold
weights, each against the read floor of its own grid). Writes <candidate>_variant.json to
--out (default: beside this file).
"""

import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

from netra import contracts, paths
from netra.contracts.proj import SHAPES
from netra.lifecycle import bench, check, testbeds
from netra.lifecycle.metrics import rel_err
from netra.runtime import launch as rt_launch
from netra.runtime import loader

HERE = Path(__file__).resolve().parent
# candidates of the promoted generator (gen_fp8_gemv.generate's options)
_V3 = paths.generator("proj", "gen_fp8_gemv").V3  # the build promoted at cb9faad; the steps from it to v3f
V3_BUILDS = {"v3": _V3, "v3c": dict(_V3, x_rows=True), "v3d": dict(_V3, x_rows=True, skip_nt1=True),
             "v3e": dict(_V3, x_rows=True, skip_nt1=True, packed_amax=True),
             "v3f": dict(_V3, x_rows=True, skip_nt1=True, packed_amax=True, pre_strips=1),  # + late trigger: promoted at db6fda2
             "v3g": dict(split_m8=True, x_first_m16=False, pre_strips=1),  # v3f with the body twice (M <= 8, M > 8): promoted after v3g_variant.json
             "v3r": dict(pre_strips=0)}  # x first at every M: promoted for the one-strip shapes (Fp8Gemv.pre_strips)


def candidate(name: str):
    """(generate(shape) -> ptx, geometry(shape) -> (grid, threads, dynamic smem)) of a candidate."""
    if name == "cluster":
        gen = paths.load_module(HERE / "gen_fp8_gemv_cluster.py", "gen_cluster")
        return (lambda sh: gen.generate(gen.Tiling(sh))), (lambda sh: (gen.Tiling(sh).grid, gen.THREADS, 0))
    if name == "v3x":  # the promoted generator with x staged by bulk copies
        gen = paths.generator("proj", "gen_fp8_gemv")
        return (lambda sh: gen.generate(sh, stage_x=True, **gen.V3)), (lambda sh: (sh.grid, sh.threads, gen.x_stage_layout(sh)[2] + 8))
    if name == "v3p":  # x pairs: clusters of 2 share the x rows at M > 8
        gen = paths.generator("proj", "gen_fp8_gemv")
        return (lambda sh: gen.generate(sh, xpair=True, x_first_m16=False)), (lambda sh: (sh.grid, sh.threads, gen.x_pair_layout(sh)[2]))
    if name == "v3q":  # x first at M > 8, every chunk after it
        gen = paths.generator("proj", "gen_fp8_gemv")
        return (lambda sh: gen.generate(sh, x_first_m16=True)), (lambda sh: (sh.grid, sh.threads, sh.smem))
    if name == "v3t":  # token groups: grid y = ceil(M / 8)
        gen = paths.generator("proj", "gen_fp8_gemv")
        return (lambda sh: gen.generate(sh, tgroups=True)), (lambda sh: ((str(sh.grid), "(M + 7) // 8", "1"), sh.threads, sh.smem))
    if name in V3_BUILDS:  # x by coalesced 16-byte loads through shared memory, and more (V3_BUILDS)
        gen = paths.generator("proj", "gen_fp8_gemv")
        return (lambda sh: gen.generate(sh, **V3_BUILDS[name])), (lambda sh: (sh.grid, sh.threads, sh.smem))
    if name.startswith(("v5", "v6", "v7")):
        gen = paths.load_module(HERE / "gen_fp8_gemv_v5.py", "gen_v5")
        return (lambda sh: gen.generate(sh, name)), (lambda sh: gen.launch_geometry(sh, name))
    gen = paths.load_module(HERE / "gen_fp8_gemv_v4.py", "gen_v4")
    return (lambda sh: gen.generate(sh, name)), (lambda sh: (*gen.launch_geometry(sh, name), 0))


def correctness(tb, go, go_promoted) -> dict:
    worst, bitwise, same_as_promoted = 0.0, True, True
    for M in (1, 5, 8, 9, 16):
        b = check.Bench(tb, {"M": M}, 0)
        outs = []
        for launch in (go, go, go_promoted):
            b.reset()  # NaN poison
            reason = launch(*tb.args(b.bufs))
            assert reason is None, reason
            torch.cuda.synchronize()
            outs.append(b.bufs["out"].clone())
        bitwise &= torch.equal(outs[0], outs[1])
        same_as_promoted &= torch.equal(outs[0], outs[2])
        worst = max(worst, rel_err(outs[0], tb.reference(b.original_inputs())["out"]))
    return {"max_rel_err": worst, "tolerance": tb.contract.tolerance, "pass": worst <= tb.contract.tolerance,
            "deterministic_bitwise": bitwise, "bitwise_equal_to_promoted": same_as_promoted}


def run(name: str, out_dir: str, floors) -> dict:
    generate, geometry = candidate(name)
    keep, res = [], {}
    only = [a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--shapes=")]
    for sh in SHAPES:
        if only and sh.name not in only[0]:
            continue
        grid, threads, smem = geometry(sh)
        base_tb = testbeds.get(sh.name)
        grid = grid if isinstance(grid, tuple) else (str(grid), "1", "1")
        c2 = dataclasses.replace(contracts.get(sh.name), grid=grid, threads=threads, dynamic_smem=smem)
        tb2 = dataclasses.replace(base_tb, contract=c2)
        module, fn = loader.load_text(sh.name, generate(sh), dynamic_smem=smem)
        keep.append(module)
        go2 = rt_launch.make_guard_and_launch(c2, function_handle=int(fn), device=0)
        pdl = name.endswith("_pdl")
        if pdl:  # the same function launched by cuLaunchKernelEx with programmatic serialization
            go3 = rt_launch.make_guard_and_launch(c2, function_handle=int(fn), device=0, launch=rt_launch.pdl_launcher())
        k = loader.load(sh.name, 0)
        go1 = rt_launch.make_guard_and_launch(base_tb.contract, function_handle=k.handle, device=0)
        entry = {"geometry": {"grid": grid, "threads": threads, "dynamic_smem": smem}}
        try:
            entry["correctness"] = correctness(tb2, go2, go1)
            if pdl:
                entry["correctness_pdl_launch"] = correctness(tb2, go3, go1)
                entry["correctness"]["pass"] &= entry["correctness_pdl_launch"]["pass"]
        except Exception as e:  # a candidate that fails is recorded, not fatal
            entry["correctness"] = {"pass": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(name, sh.name, entry["correctness"], flush=True)
        if entry["correctness"].get("pass"):
            entry["cases"] = {}
            for M in (1, 8, 16):
                cand = bench.bench_case(tb2, {"M": M}, go2, floors, peers=False, log=print)
                prom = bench.bench_case(base_tb, {"M": M}, go1, floors, peers=False, log=print)
                entry["cases"][M] = {"candidate_us": cand["median_us"], "candidate_read_floor_us": cand["peers"]["read_floor"],
                                     "candidate_roofline_fraction": cand["roofline_fraction"],
                                     "promoted_us": prom["median_us"], "promoted_read_floor_us": prom["peers"]["read_floor"]}
                if pdl:  # a chain of PDL launches: each one's weight reads overlap the previous one's tail
                    cp = bench.bench_case(tb2, {"M": M}, go3, floors, peers=False, log=print)
                    entry["cases"][M]["candidate_pdl_chain_us"] = cp["median_us"]
                    entry["cases"][M]["candidate_pdl_chain_roofline_fraction"] = cp["roofline_fraction"]
        res[sh.name] = entry
        json.dump({"method": bench.METHOD.format(R=bench.REPLAYS), "candidate": name, "shapes": res},
                  open(os.path.join(out_dir, f"{name}_variant.json"), "w"), indent=1)
    for n, e in res.items():
        print(name, n, e["correctness"].get("pass"), {M: tuple(round(c[k], 2) for k in ("candidate_us", "promoted_us", "candidate_pdl_chain_us") if k in c)
                                                       for M, c in e.get("cases", {}).items()})
    return res


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    names = [a for a in sys.argv[1:] if not a.startswith("--") and a != out_dir] or ["v3g"]  # --shapes=NAME,NAME: only those  # the promoted build, measured
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    for name in names:
        run(name, out_dir, floors)


if __name__ == "__main__":
    main()
