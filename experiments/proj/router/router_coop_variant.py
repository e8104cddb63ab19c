"""The router-fused gate | up launched cooperatively (CU_LAUNCH_ATTRIBUTE_COOPERATIVE, alone and with programmatic
stream serialization), against the promoted plain / PDL launches of the same cubin. Why: its grid barrier needs every
CTA resident at once; a cooperative launch makes the driver refuse a grid that cannot be, where a plain launch would
wait forever (another context holding SMs). Whether the attribute combines with PDL in a captured graph, and what it
costs, is what this measures. Prediction: the same bits; within +-0.2 us.

Checks (M = 1, 4, 8, 2 seeds): eager and CUDA-graph launches of each form bitwise the promoted plain launch.
Times: the bench's method (the plain and PDL-chain columns with the cooperative launchers), M = 1, 2, 4.

  PYTHONPATH=src python3 experiments/proj/router/router_coop_variant.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def main():
    from netra.contracts import proj as pc
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    out = os.path.join(out_dir, "router_coop_variant.json")
    tb = testbeds.get(pc.EXPERTS_ROUTER.name)
    h = loader.load(tb.contract.name, 0).handle
    mk = lambda launch: rt_launch.make_guard_and_launch(tb.contract, function_handle=h, device=0, launch=launch)  # noqa: E731
    forms = {"plain": mk(None), "pdl": mk(rt_launch.pdl_launcher()),
             "coop": mk(rt_launch.ex_launcher(cooperative=True)),
             "coop_pdl": mk(rt_launch.ex_launcher(pdl=True, cooperative=True))}
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "correctness": {}, "timing_us": {}}
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    ok = True
    for M in (1, 4, 8):
        row = {}
        for seed in range(2):
            b = check.Bench(tb, {"M": M, "E": 256}, seed)
            b.reset()
            assert forms["plain"](*tb.args(b.bufs)) is None
            torch.cuda.synchronize()
            want = {n: v for n, v in b.results().items() if n != "bar"}
            for name, go in forms.items():
                for graph in (False, True):
                    b.reset()
                    if graph:
                        s = torch.cuda.Stream()
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g, stream=s):
                            r = go(*tb.args(b.bufs))
                        b.reset()
                        g.replay()
                    else:
                        r = go(*tb.args(b.bufs))
                    torch.cuda.synchronize()
                    same = r is None and all(torch.equal(bits(b.bufs[n]), bits(v)) for n, v in want.items())
                    row[f"{name}{' graph' if graph else ''}"] = row.get(f"{name}{' graph' if graph else ''}", True) and same
        ok &= all(row.values())
        res["correctness"][f"M={M}"] = row
        print("check", M, row, flush=True)
    res["pass"] = ok
    for M in (1, 2, 4):
        dims = {"M": M, "E": 256}
        row = {}
        for tag, (go, go_pdl) in (("promoted", (forms["plain"], forms["pdl"])), ("cooperative", (forms["coop"], forms["coop_pdl"]))):
            r = bench.bench_case(tb, dims, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
            row[tag] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
        res["timing_us"][f"M={M}"] = row
        print("time", M, row, flush=True)
        json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
