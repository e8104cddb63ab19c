"""moe_router_norm_e256_k2048 with each warp's 4 expert rows loaded into registers before griddepcontrol.wait
(gen_moe_router.generate(norm=True, pdl=True, reg_rows=True)) against the promoted build, which has token 0's cluster
ask L2 for the whole weight before the wait and loads the rows by ld.global after the norm, two rows a warp at a time
(two L2 round trips after h's).

Why: the router's launch is 5.4 us a layer of the batch-8 step (timeline_b8_434a18f.json) for 1 MB of weight; its time
is a chain after the wait (h, the norm, the rows, the sums, the cluster exchange, the selection). With the rows in
registers before the wait, the chain loses the two row round trips. The cost: 251 registers a thread (ptxas -v, no
spills), so one 256-thread CTA per SM, and every cluster reads the whole 1 MB (from L2 after the first).
Prediction: 0.5-1 us less per launch at M = 1..16 as a PDL chain and plainly; over 16 tokens (more than 132 CTAs) a
second wave, so only M <= 16 would take it.

Checks: bitwise the promoted kernel (idx, top, x_out) at M = 1, 2, 5, 8, 9, 16, 2 seeds, plain and PDL launches.
Times: the bench's method at M = 1, 5, 8, 12, 16, plainly and as a PDL chain, both builds in the same run.

  PYTHONPATH=src python3 experiments/proj/router/router_regs_variant.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from netra import contracts, paths

HERE = Path(__file__).resolve().parent
gen = paths.generator("proj", "gen_moe_router")


def main():
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    out = os.path.join(out_dir, "router_regs_variant.json")
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    name = gen.NORM_NAME
    c = contracts.get(name)
    tb = testbeds.get(name)
    module, fn = loader.load_text(name, gen.generate(norm=True, pdl=True, reg_rows=True, name=name))
    launchers = ({}, {"launch": rt_launch.pdl_launcher()})
    gos = {"promoted": tuple(rt_launch.make_guard_and_launch(c, function_handle=loader.load(name, 0).handle, device=0, **k)
                             for k in launchers),
           "reg_rows": tuple(rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0, **k)
                             for k in launchers)}
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "candidate": "reg_rows", "correctness": {}, "timing_us": {}}
    same, compared = True, 0
    for M in (1, 2, 5, 8, 9, 16):
        for seed in range(2):
            outs = []
            for go in (gos["promoted"][0], *gos["reg_rows"]):
                b = check.Bench(tb, {"M": M}, seed)
                b.reset()
                assert go(*tb.args(b.bufs)) is None
                torch.cuda.synchronize()
                outs.append(b.results())
            same &= all(torch.equal(bits(outs[0][n]), bits(o[n])) for o in outs[1:] for n in o)
            same &= not any(bool(torch.isnan(o[n].float()).any()) for o in outs for n in o if o[n].is_floating_point())
            compared += 1
    res["correctness"] = {"reg_rows_bitwise_the_promoted": same, "launches_compared": "plain and PDL",
                          "cases": compared, "no_nan_in_outputs": "checked (the bench poisons outputs before each launch)"}
    print(res["correctness"], flush=True)
    for M in (1, 5, 8, 12, 16):
        row = {}
        for tag, (go, go_pdl) in gos.items():
            if tag == "promoted" or same:
                r = bench.bench_case(tb, {"M": M}, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
                row[tag] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
        res["timing_us"][f"M={M}"] = row
        print(M, row, flush=True)
        json.dump(res, open(out, "w"), indent=1)
    del module


if __name__ == "__main__":
    main()
