"""The router kernels with the top-8 chosen by u32 keys and redux.sync (gen_moe_router.generate(
select="redux")) against the builds before them (select="bfly"). Run at 7f8a1fd, when "bfly" was
promoted ("promoted" in router_select_variant_7f8a1fd.json) and "redux" the candidate; promoted
after it, so the script now builds "bfly" and labels the committed kernels "promoted" (redux).

Why: after the cluster barrier, rank 0's warp 0 chooses the 8 experts in 8 dependent rounds, each
a 7-step fp32 compare chain over the lane's 8 logits and 5 shfl.bfly argmax steps of (value, id)
pairs (two shuffles and four dependent predicate ops per step), then every lane divides all 8
weights: ~70 SASS instructions per round on the critical path of every router launch, ~1.3 us by
their latencies. The candidate packs each logit and its id into one orderable u32 key, so a round
is a 3-level max tree, one REDUX.MAX and the owner's compare-and-zero (~25 instructions, one
long-latency op), and lane j divides only its own weight.
Prediction: ~1 us less per launch at every M (plainly and as a PDL chain), so ~40 us per batch-1
decode step (40 MoE layers).

Checks: for both builds (plain router, norm + PDL router), at M = 1, 2, 5, 8, 9, 16, 17, 32 and
seeds 0..2, plus the same with the router weight's odd rows copies of the even ones (every logit
tied with a neighbour's), the candidate's outputs (idx, top, x_out) bitwise the promoted kernel's
on the same NaN-poisoned inputs, launched plainly and (norm build) with the PDL launcher.
Times: the bench's method at M = 1, 8, 16, 32, plainly and (norm build) as a PDL chain, same run.

  PYTHONPATH=src python3 experiments/proj/router/router_select_variant.py --out "$OUT"
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
CHECK_MS = (1, 2, 5, 8, 9, 16, 17, 32)
TIME_MS = (1, 8, 16, 32)


def main():
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    out = os.path.join(out_dir, "router_select_variant.json")
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "other": "select='bfly'", "correctness": {},
           "timing_us": {}}
    keep = []
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731  (NaN rows compare equal as bits)
    for name, norm in ((gen.NAME, False), (gen.NORM_NAME, True)):
        c = contracts.get(name)
        tb = testbeds.get(name)
        other = "bfly"  # the committed build is "redux" since 7f8a1fd
        module, fn = loader.load_text(name, gen.generate(norm=norm, pdl=norm, select=other))
        keep.append(module)
        launchers = ({},) + (({"launch": rt_launch.pdl_launcher()},) if norm else ())
        gos = {"promoted": tuple(rt_launch.make_guard_and_launch(c, function_handle=loader.load(name, 0).handle,
                                                                 device=0, **k) for k in launchers),
               other: tuple(rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0, **k)
                            for k in launchers)}
        same, cases = True, 0
        for M in CHECK_MS:
            for seed in range(3):
                for dup in (False, True):
                    outs = []
                    for go in (gos["promoted"][0],) + gos[other]:
                        b = check.Bench(tb, {"M": M}, seed)
                        if dup:  # every odd expert's row a copy of the even one before it: exact ties everywhere
                            b.inputs["w"].view(-1, 2, b.inputs["w"].shape[-1])[:, 1] = b.inputs["w"].view(
                                -1, 2, b.inputs["w"].shape[-1])[:, 0]
                        b.reset()
                        assert go(*tb.args(b.bufs)) is None
                        torch.cuda.synchronize()
                        outs.append(b.results())
                    ok = all(torch.equal(bits(outs[0][n]), bits(o[n])) for o in outs[1:] for n in o)
                    if not ok and same:
                        print(f"  {name} M={M} seed={seed} dup={dup}: differs", flush=True)
                    same &= ok
                    cases += 1
        res["correctness"][name] = {f"{other}_bitwise_the_promoted": same, "cases": cases,
                                    "launches_compared": "plain" + (" and PDL" if norm else "")}
        print(name, res["correctness"][name], flush=True)
        for M in TIME_MS:
            row = {}
            for tag, g in gos.items():
                if tag == "promoted" or same:
                    r = bench.bench_case(tb, {"M": M}, g[0], floors, peers=False, log=lambda *_: None,
                                         go_pdl=g[1] if norm else None)
                    row[tag] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
            res["timing_us"][f"{name} M={M}"] = row
            print(name, M, row, flush=True)
            json.dump(res, open(out, "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
