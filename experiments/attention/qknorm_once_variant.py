"""attn_decode_d256_qknorm with each CTA's 8 query heads normalized once (gen_attn_decode.generate(qknorm=True,
once=True)), beside the promoted build, where each of the 4 warps normalizes all 8 heads in its fragment layout.

Why: the promoted build is 4.2 us slower than qk_rmsnorm_d256 then attn_decode_d256 at B = 32 x 16 pages (1024 CTAs,
2.6 waves), 0.7-1.1 us faster up to 256 CTAs (docs/notes/attention.md), so the runner takes it only up to one wave.
Its extra work per CTA: every warp loads all 8 heads' q (4 KB) and normalizes them. The candidate: warp w loads and
normalizes heads 2 w, 2 w + 1 (qk_rmsnorm_d256's own lane layout: its arithmetic as it is, so the same bits), stores
them to shared memory (4.5 KB, heads 576 B apart), one barrier, and every warp loads its fragments from there; the norm
weights in registers (no 2 KB table). A quarter of the q loads and of the norm arithmetic.

For the contract's cases: the candidate's outputs against the promoted kernel's on the same NaN-poisoned inputs (2 seeds,
plainly and with the PDL launcher: bitwise, cache rows included), then both timed by the bench's method (CUDA-graph
replay, >= 16 rotated copies; plainly and as a PDL chain). Prediction: B = 32 x 16 pages 47.3 -> 42-44 us (the pair:
43.1), the one-wave cases within +-0.3 us. If it is not slower anywhere than the pair, the runner's one-wave rule
(ATTN_QKNORM_MAX_CTAS) can go.

  PYTHONPATH=src python3 experiments/attention/qknorm_once_variant.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys

import torch


def main():
    from netra import contracts, paths
    from netra.contracts.attn import ATTN_QKNORM_NAME
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    g = paths.generator("attention", "gen_attn_decode")
    c = contracts.get(ATTN_QKNORM_NAME)
    tb = testbeds.get(ATTN_QKNORM_NAME)
    module, fn = loader.load_text(c.name, g.generate(True, once=True), dynamic_smem=c.dynamic_smem)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    gos = {}
    for label, handle in (("promoted", loader.load(c.name, 0).handle), ("once", int(fn))):
        gos[label] = tuple(rt_launch.make_guard_and_launch(c, function_handle=handle, device=0, **k)
                           for k in ({}, {"launch": rt_launch.pdl_launcher()}))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "candidate": "generate(qknorm=True, once=True)", "cases": {}}
    for case in c.cases():
        outs = []
        for go in (gos["promoted"][0], gos["once"][0], gos["once"][1]):
            for seed in (0, 1):
                b = check.Bench(tb, case, seed)
                b.reset()
                assert go(*tb.args(b.bufs)) is None
                torch.cuda.synchronize()
                outs.append({n: t.clone() for n, t in b.results().items() if n != "ws"})  # ws: scratch
        bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731  (a NaN equals itself)
        same = all(torch.equal(bits(outs[i][n]), bits(outs[j][n])) for n in outs[0]
                   for i, j in ((0, 2), (1, 3), (0, 4), (1, 5)))
        row = {"bitwise_equal_to_promoted": same}
        for label, (go, go_pdl) in gos.items():
            r = bench.bench_case(tb, case, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
            row[label] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
        res["cases"][str(case)] = row
        print(case, row, flush=True)
        json.dump(res, open(os.path.join(out_dir, "qknorm_once_variant.json"), "w"), indent=1)
    del module


if __name__ == "__main__":
    main()
