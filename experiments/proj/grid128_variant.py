"""The dense projections whose strips are a multiple of 128 (12288, 8192 and 4096 x 2048, and the 12288 x 2048
norm build) launched on 128 CTAs instead of 132: the same PTX (a CTA walks strips c, c + nctaid.x, ...), so the
same strips per CTA at most (768 / 132 -> 6 for 108 CTAs and 5 for 24; 768 / 128 -> 6 for all), the same outputs.

Why: in one run at 2696924 (docs/notes/h200-router-redux-records-2696924.log) fp8_gemv_n12288_k2048_norm_ba,
whose FP8 part is the norm build's PTX walked by 128 CTAs (its last 4 CTAs compute b | a), took 8.27 us plainly and
7.10 as a PDL chain at M = 1 against 8.49 / 7.37 for the norm build on 132 CTAs. If the grid is the reason (four
fewer CTAs streaming, every one ending after its sixth strip), the plain builds gain the same; if not, the fused
build's other code (122 registers against 60) is. 9216 x 2048 (576 strips: 5 at most either way) is timed too.
Prediction: 0.1-0.3 us less at M = 1 for 12288 x 2048, within +-0.1 us for the others.
Measured at 5fa7d79 (grid128_variant_5fa7d79.json; bitwise everywhere): within +-0.1 us both ways at every shape and
M but two single PDL-chain cases of 9216 x 2048 (+0.29 at M = 1, -0.22 at M = 8), no sign either way; 12288 x 2048's
norm build 8.55 / 7.38 us on 128 CTAs against 8.60 / 7.34 on 132 at M = 1. So the grid is not why the b | a build
was faster; not promoted.

Checks: outputs bitwise the 132-CTA launch's at M = 1, 8 (and 16 where the contract takes it), 2 seeds, plain and PDL
launches. Times: the bench's method, plainly and as a PDL chain, both grids in the same run.

  PYTHONPATH=src python3 experiments/proj/grid128_variant.py --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
NAMES = ("fp8_gemv_n12288_k2048", "fp8_gemv_n12288_k2048_norm", "fp8_gemv_n8192_k2048", "fp8_gemv_n4096_k2048",
         "fp8_gemv_n9216_k2048", "fp8_gemv_n9216_k2048_norm")


def main():
    from netra import contracts, paths
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    variant_ab = paths.load_module(HERE / "variant_ab.py", "variant_ab")
    out = variant_ab.out_path("grid128_variant.json", HERE)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "kernels": {}}
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    for name in NAMES:
        c = contracts.get(name)
        tb = testbeds.get(name)
        h = loader.load(name, 0).handle
        c128 = dataclasses.replace(c, grid=("128", "1", "1"))
        gos = {g: tuple(rt_launch.make_guard_and_launch(cc, function_handle=h, device=0, **k)
                        for k in ({}, {"launch": rt_launch.pdl_launcher()}))
               for g, cc in (("grid_132", c), ("grid_128", c128))}
        rows = {}
        for m in (1, 8) + ((16,) if 16 in c.dims["M"] else ()):
            outs = []
            for go in (gos["grid_132"][0], *gos["grid_128"]):
                for seed in (0, 1):
                    b = check.Bench(tb, {"M": m}, seed)
                    b.reset()
                    assert go(*tb.args(b.bufs)) is None
                    torch.cuda.synchronize()
                    outs.append(b.results())
            row = {"bitwise": all(torch.equal(bits(outs[i][n]), bits(outs[j][n])) for n in outs[0]
                                  for i, j in ((0, 2), (1, 3), (0, 4), (1, 5)))}
            for g, (go, go_pdl) in gos.items():
                r = bench.bench_case(tb, {"M": m}, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
                row[g] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
            rows[f"M={m}"] = row
            print(name, m, row, flush=True)
        res["kernels"][name] = rows
        json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
