"""Measure the cluster split-K candidate (gen_fp8_gemv_cluster.py) beside the promoted
fp8_gemv kernels, by the bench's own method, after a correctness check of its own.

For each shape: assemble the candidate with the pinned ptxas and flags; check it at
M in (1, 5, 8, 9, 16) against the float64 reference with NaN-poisoned outputs, twice
(bitwise equal); then time the candidate and the promoted kernel at M = 1, 8, 16 (CUDA-graph
replay, cold weights, each against the read floor of its own grid). Writes
cluster_variant.json to --out (default: beside this file).

  python3 experiments/proj/cluster_variant.py --out "$OUT"      (on the H200, PYTHONPATH=src)
"""

import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

from netra import contracts, paths
from netra.lifecycle import bench, check, testbeds
from netra.lifecycle.metrics import rel_err
from netra.runtime import launch as rt_launch
from netra.runtime import loader

HERE = Path(__file__).resolve().parent
gen = paths.load_module(HERE / "gen_fp8_gemv_cluster.py", "gen_cluster")


def correctness(tb, go) -> dict:
    worst, bitwise = 0.0, True
    for M in (1, 5, 8, 9, 16):
        b = check.Bench(tb, {"M": M}, 0)
        outs = []
        for _ in range(2):
            b.reset()  # NaN poison
            reason = go(*tb.args(b.bufs))
            assert reason is None, reason
            torch.cuda.synchronize()
            outs.append(b.bufs["out"].clone())
        bitwise &= torch.equal(outs[0], outs[1])
        worst = max(worst, rel_err(outs[0], tb.reference(b.original_inputs())["out"]))
    return {"max_rel_err": worst, "tolerance": tb.contract.tolerance, "pass": worst <= tb.contract.tolerance,
            "deterministic_bitwise": bitwise}


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    keep, res = [], {}
    for sh in gen.SHAPES:
        t = gen.Tiling(sh)
        base_tb = testbeds.get(sh.name)
        c2 = dataclasses.replace(contracts.get(sh.name), grid=(str(t.grid), "1", "1"), threads=gen.THREADS,
                                 dynamic_smem=0)
        tb2 = dataclasses.replace(base_tb, contract=c2)
        module, fn = loader.load_text(sh.name, gen.generate(t))
        keep.append(module)
        go2 = rt_launch.make_guard_and_launch(c2, function_handle=int(fn), device=0)
        entry = {"tiling": {"cluster": t.C, "k_blocks_per_cta": t.KBC, "grid": t.grid, "threads": gen.THREADS}}
        try:
            entry["correctness"] = correctness(tb2, go2)
        except Exception as e:  # a candidate that fails is recorded, not fatal
            entry["correctness"] = {"pass": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(sh.name, entry["correctness"], flush=True)
        if entry["correctness"].get("pass"):
            k = loader.load(sh.name, 0)
            go1 = rt_launch.make_guard_and_launch(base_tb.contract, function_handle=k.handle, device=0)
            entry["cases"] = {}
            for M in (1, 8, 16):
                cand = bench.bench_case(tb2, {"M": M}, go2, floors, peers=False, log=print)
                prom = bench.bench_case(base_tb, {"M": M}, go1, floors, peers=False, log=print)
                entry["cases"][M] = {"candidate_us": cand["median_us"], "candidate_read_floor_us": cand["peers"]["read_floor"],
                                     "candidate_roofline_fraction": cand["roofline_fraction"],
                                     "promoted_us": prom["median_us"], "promoted_read_floor_us": prom["peers"]["read_floor"]}
        res[sh.name] = entry
        json.dump({"method": bench.METHOD.format(R=bench.REPLAYS), "shapes": res},
                  open(os.path.join(out_dir, "cluster_variant.json"), "w"), indent=1)
    for name, e in res.items():
        print(name, e["correctness"].get("pass"), {M: (round(c["candidate_us"], 2), round(c["promoted_us"], 2))
                                                   for M, c in e.get("cases", {}).items()})


if __name__ == "__main__":
    main()
