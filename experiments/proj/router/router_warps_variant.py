"""The router kernels with 16 warps per CTA instead of 8 (gen_moe_router.generate(warps=16); 97
registers (plain) and 126 (norm), no spills), and with an L2 prefetch of every expert row at the
start (generate(prefetch=True), 8 warps; 102 and 126 registers). Run 1 (0b3bbc3, 16 warps only):
router_warps_variant_0b3bbc3.json.

Why: at b6e8212 the batch-1 profile has moe_router_norm at 6.2 us per layer (0.25 ms per step)
for 1 MB of router weight, 0.17 TB/s. A token's cluster is 8 CTAs (8 SMs); each warp reads its
4 expert rows as two pairs, the second pair's loads issued only after the first pair's sums, so
an SM has 64 KB in flight and pays two DRAM round trips. With 16 warps each warp takes one pair:
the CTA's 128 KB are all requested at once. The sums are the same in the same order, so the
outputs must be bitwise the promoted kernels'.

Checks at M = 1..32, 2 seeds: top, idx (and x_out) bitwise the promoted kernel's on the same
inputs. Times (the bench's method) at M = 1, 2, 8, 16, 32 for every build, same run.
Prediction (run 1): M = 1 ~6.7 -> ~4.5-5 us (one round trip less); M = 32 may be slower (512
threads at ~126 registers: one CTA per SM, so 256 CTAs are two waves instead of one). Measured:
plain 5.71 -> 5.06, norm 6.52 -> 6.21 at M = 1; M = 16 and 32 slower (7.62, 10.67 plain).
The prefetch build (run 2) keeps 8 warps and one wave at M = 32; the SASS has the 4 CCTL.E.PF2
first (before the cluster arrive; placed after h's loads in the PTX, ptxas sank them past the
norm). Prediction: M = 1 norm 6.5 -> ~5.5, plain 5.7 -> ~5.0; M = 32 unchanged.

  PYTHONPATH=src python3 experiments/proj/router/router_warps_variant.py --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

from netra import contracts, paths

HERE = Path(__file__).resolve().parent
gen = paths.generator("proj", "gen_moe_router")
WARPS = 16


def main():
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "warps": WARPS, "correctness": {}, "timing_us": {}}
    builds = {f"{WARPS}_warps": dict(warps=WARPS), "prefetch_8_warps": dict(prefetch=True),
              f"prefetch_{WARPS}_warps": dict(prefetch=True, warps=WARPS)}
    for name, norm in ((gen.NAME, False), (gen.NORM_NAME, True)):
        base = contracts.get(name)
        gos = {"promoted_8_warps": rt_launch.make_guard_and_launch(base, function_handle=loader.load(name, 0).handle,
                                                                   device=0)}
        for tag, kw in builds.items():
            c = dataclasses.replace(base, threads=32 * kw.get("warps", 8))
            _, fn = loader.load_text(name, gen.generate(norm=norm, **kw))
            gos[tag] = rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0)
        tb = testbeds.get(name)
        same = {tag: True for tag in builds}
        for M in base.dims["M"]:
            for seed in range(2):
                outs = {}
                for tag, go in gos.items():
                    b = check.Bench(tb, {"M": M}, seed)
                    b.reset()
                    assert go(*tb.args(b.bufs)) is None
                    torch.cuda.synchronize()
                    outs[tag] = {n: b.bufs[n].clone() for n in tb.output_names()}
                for tag in builds:
                    same[tag] &= all(torch.equal(outs["promoted_8_warps"][n], outs[tag][n]) for n in outs[tag])
        res["correctness"][name] = {f"{tag}_bitwise_the_promoted": v for tag, v in same.items()}
        print(name, res["correctness"][name], flush=True)
        for M in (1, 2, 8, 16, 32):
            row = {}
            for tag, go in gos.items():
                r = bench.bench_case(tb, {"M": M}, go, floors, peers=False, log=print)
                row[tag] = r["median_us"]
            res["timing_us"][f"{name} M={M}"] = row
            print(name, M, {k: round(v, 2) for k, v in row.items()}, flush=True)
    json.dump(res, open(os.path.join(out_dir, "router_warps_variant.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
