"""Check and time bf16_gemv_n64_k2048 row builds beside the promoted one, by the bench's own
method, after a correctness check of their own.

  python3 experiments/proj/bf16_variant.py [ROWS ...] --out "$OUT"   (on the H200, PYTHONPATH=src)

ROWS: `gen_bf16_gemv.generate(rows=...)`, default `bulk cp_async`. All builds fill the same
shared rows, so their outputs must be bitwise the promoted kernel's; each is also checked at
M in (1, 5, 8, 9, 16) against the float64 reference with NaN-poisoned outputs, twice
(bitwise equal), then timed with the promoted kernel at M = 1, 2, 8, 16 (CUDA-graph replay,
cold weights, each against the read floor of the 16-CTA grid). Writes bf16_variant.json.
Prediction for cp_async: M = 1 at or below bulk's 2.66 us (all 16 chunks per thread in
flight at once, no serial copy issue), M = 16 about bulk's 2.81.
"""

import json
import os
import sys

import torch
from cuda.bindings import driver as cu

from netra import contracts, paths
from netra.lifecycle import bench, check, testbeds
from netra.lifecycle.metrics import rel_err
from netra.runtime import launch as rt_launch
from netra.runtime import loader
from netra.runtime.driver import check as check_cu

C = contracts.get("bf16_gemv_n64_k2048")


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    names = [a for a in sys.argv[1:] if not a.startswith("--") and a != out_dir] or ["bulk", "cp_async"]
    gen = paths.generator("proj", "gen_bf16_gemv")
    tb = testbeds.get(C.name)
    go_prom = rt_launch.make_guard_and_launch(C, function_handle=loader.load(C.name, 0).handle, device=0)
    keep, gos = [], {}
    for name in names:
        module, fn = loader.load_text(C.name, gen.generate(name))
        check_cu(cu.cuFuncSetAttribute(fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       C.dynamic_smem), "max dynamic smem")
        keep.append(module)
        gos[name] = rt_launch.make_guard_and_launch(C, function_handle=int(fn), device=0)
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "builds": {}}
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    for name, go in gos.items():
        worst, bitwise, same = 0.0, True, True
        for M in (1, 5, 8, 9, 16):
            b = check.Bench(tb, {"M": M}, 0)
            outs = []
            for launch in (go, go, go_prom):
                b.reset()  # NaN poison
                assert launch(*tb.args(b.bufs)) is None
                torch.cuda.synchronize()
                outs.append(b.results())
            ref = tb.reference(b.original_inputs())
            worst = max(worst, max(rel_err(outs[0][n], ref[n]) for n in ref))
            bitwise &= all(torch.equal(outs[0][n], outs[1][n]) for n in ref)
            same &= all(torch.equal(outs[0][n], outs[2][n]) for n in ref)
        entry = {"max_rel_err": worst, "tolerance": C.tolerance, "deterministic_bitwise": bitwise,
                 "bitwise_equal_to_promoted": same, "pass": worst <= C.tolerance and bitwise, "cases": {}}
        print(name, {k: v for k, v in entry.items() if k != "cases"}, flush=True)
        if entry["pass"]:
            for M in (1, 2, 8, 16):
                cand = bench.bench_case(tb, {"M": M}, go, floors, peers=False, log=print)
                prom = bench.bench_case(tb, {"M": M}, go_prom, floors, peers=False, log=print)
                entry["cases"][M] = {"candidate_us": cand["median_us"], "promoted_us": prom["median_us"],
                                     "read_floor_us": cand["peers"]["read_floor"]}
        res["builds"][name] = entry
        json.dump(res, open(os.path.join(out_dir, "bf16_variant.json"), "w"), indent=1)
    for name, e in res["builds"].items():
        print(name, e["pass"], {M: (round(c["candidate_us"], 2), round(c["promoted_us"], 2)) for M, c in e["cases"].items()})
    del keep


if __name__ == "__main__":
    main()
