"""The router kernels with a cluster of 16 CTAs per token instead of 8
(gen_moe_router.generate(ranks=16); CPU-built, not yet run: 94 registers plain, 128 norm, no
spills), each CTA taking 16 experts instead of 32.

Why: at M = 1 a token's 1 MB of router weight streams into the 8 SMs of its cluster, 128 KB each,
in ~6.2 us (norm build): ~20 GB/s per SM... per-SM bandwidth bounds it, not DRAM
(router_warps_variant: more loads in flight per SM and an L2 prefetch did not help). 16 SMs halve
each one's share. A cluster of 16 is non-portable: the function attribute is set here (and, since this
commit, by the loader itself for any kernel compiled with a cluster of more than 8). The scheduler may place two CTAs of a cluster on
one SM (256 threads, 94-128 registers): the `_1sm` builds also ask for 120 KB of dynamic shared
memory they do not use, which leaves room for one CTA per SM.

Checks at M = 1, 2, 5, 8, 16, 32, 2 seeds: top, idx (and x_out) bitwise the promoted kernel's on the
same inputs (every expert's sum is the same instructions wherever it runs). Times (the bench's
method) at M = 1, 8, 16, 32 for every build, same run.
Prediction: M = 1 norm 6.5 -> ~4 us, plain 5.7 -> ~3.5; M = 32 within +-15% (twice the CTAs,
each half the rows).

  PYTHONPATH=src python3 experiments/proj/router/router_ranks_variant.py --out "$OUT"
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
RANKS = 16
PAD = 120 * 1024  # dynamic shared memory the _1sm builds reserve and do not use


def main():
    from cuda.bindings import driver as cu

    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "ranks": RANKS, "correctness": {}, "timing_us": {}}
    keep = []
    for name, norm in ((gen.NAME, False), (gen.NORM_NAME, True)):
        base = contracts.get(name)
        tb0 = testbeds.get(name)
        beds = {"promoted_8_ranks": (tb0, rt_launch.make_guard_and_launch(base, function_handle=loader.load(name, 0).handle,
                                                                          device=0))}
        for tag, smem in ((f"{RANKS}_ranks", 0), (f"{RANKS}_ranks_1sm", PAD)):
            c = dataclasses.replace(base, grid=(f"{RANKS} * M", "1", "1"), dynamic_smem=smem)
            module, fn = loader.load_text(name, gen.generate(norm=norm, ranks=RANKS), dynamic_smem=smem)
            keep.append(module)
            err, = cu.cuFuncSetAttribute(fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
            assert int(err) == 0, f"non-portable cluster size: {err}"
            beds[tag] = (dataclasses.replace(tb0, contract=c),
                         rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0))
        same = {tag: True for tag in beds if tag != "promoted_8_ranks"}
        for M in (1, 2, 5, 8, 16, 32):
            for seed in range(2):
                outs = {}
                for tag, (tb, go) in beds.items():
                    b = check.Bench(tb, {"M": M}, seed)
                    b.reset()
                    reason = go(*tb.args(b.bufs))
                    assert reason is None, reason
                    torch.cuda.synchronize()
                    outs[tag] = {n: b.bufs[n].clone() for n in tb.output_names()}
                for tag in same:
                    same[tag] &= all(torch.equal(outs["promoted_8_ranks"][n], outs[tag][n]) for n in outs[tag])
        res["correctness"][name] = {f"{tag}_bitwise_the_promoted": v for tag, v in same.items()}
        print(name, res["correctness"][name], flush=True)
        for M in (1, 8, 16, 32):
            row = {}
            for tag, (tb, go) in beds.items():
                if tag == "promoted_8_ranks" or same[tag]:
                    row[tag] = bench.bench_case(tb, {"M": M}, go, floors, peers=False, log=lambda *_: None)["median_us"]
            res["timing_us"][f"{name} M={M}"] = row
            print(name, M, {k: round(v, 2) for k, v in row.items()}, flush=True)
            json.dump(res, open(os.path.join(out_dir, "router_ranks_variant.json"), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
