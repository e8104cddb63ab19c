"""Where the router-fused launch's time goes (a diagnosis; the diagnostic build computes wrong results on purpose):
fp8_gemv_n1024_k2048_moe_shared_router as promoted, the same without its grid barrier's atomic and spin (gen_fp8_gemv
_DIAG["router"] = "nosync": each CTA selects from whatever logits the buffer holds), and the merged kernel without
the router phase (fp8_gemv_n1024_k2048_moe_shared, reading x and ids), each timed by the bench's method on the same
shapes at M = 1, 2, 4. The promoted time less nosync's is what the barrier costs on the critical path; nosync less
the merged kernel is the rest of the phase (h, norm, two row sums, the logits' load, the selection).

  PYTHONPATH=src python3 experiments/proj/router/router_phase_diag.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from netra import paths

HERE = Path(__file__).resolve().parent


def main():
    from netra.contracts import proj as pc
    from netra.lifecycle import bench, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    out = os.path.join(out_dir, "router_phase_diag.json")
    g = paths.generator("proj", "gen_fp8_gemv")
    g._DIAG["router"] = "nosync"
    ptx = g.generate(pc.EXPERTS_ROUTER).replace(pc.EXPERTS_ROUTER.name, pc.EXPERTS_ROUTER.name + "_nosync")
    g._DIAG["router"] = ""
    tb = testbeds.get(pc.EXPERTS_ROUTER.name)
    module, fn = loader.load_text(pc.EXPERTS_ROUTER.name + "_nosync", ptx, dynamic_smem=tb.contract.dynamic_smem)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    kinds = ({}, {"launch": rt_launch.pdl_launcher()})
    builds = {"promoted": (tb, loader.load(tb.contract.name, 0).handle),
              "nosync (wrong results)": (tb, int(fn)),
              "merged, no router phase": (testbeds.get(pc.EXPERTS_SHARED.name), loader.load(pc.EXPERTS_SHARED.name, 0).handle)}
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "timing_us": {}}
    for M in (1, 2, 4):
        row = {}
        for tag, (t, h) in builds.items():
            go, go_pdl = (rt_launch.make_guard_and_launch(t.contract, function_handle=h, device=0, **k) for k in kinds)
            r = bench.bench_case(t, {"M": M, "E": 256}, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
            row[tag] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
        res["timing_us"][f"M={M}"] = row
        print("time", M, row, flush=True)
        json.dump(res, open(out, "w"), indent=1)
    del module


if __name__ == "__main__":
    main()
