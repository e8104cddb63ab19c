"""The long-context builds at the S values that keep every cluster at one CTA a SM (a candidate rule for
netra.decode.ops.attn_splits).

Why: the op picks S = min(LONG_SPLITS, SMS // (B x kv heads x C)), so at B = 1, 2 and 4 the grid is 128 CTAs in 16
clusters of 8. The trace (long_place_dd43954.json) found at most 15 clusters of 8 resident at one CTA a SM (120 SMs):
the 16th shares 8 SMs, its CTAs end 4-7 us after the median, and the kernel ends with them. S = 7 at B = 1 (14
clusters, 112 CTAs) and S = 3 at B = 2 (12 clusters) avoid that, each CTA walking ~14% / 33% more pages. Prediction: at
B = 1 x 512 pages 26.2 -> 23-25 us (the tail gone, the walk 8 -> 9-10 pages of 2.1 us); at 2048 pages the walk's extra
pages (37 against 32 a CTA) cost about what the tail gives back, so level; B = 2 x 512 S = 3 level with S = 4 at best.
B = 4 has no S between 1 and 2 for clusters of 8, so clusters of 4 at S = 3 (24 clusters, 96 CTAs) are timed beside.

For each case (inputs made once, >= 16 rotated copies as the bench, every launch cold): the committed build at each S,
the op's S first and again last (the spread), plainly, CUDA-graph replay, median of 7 (long_sweep.graph_us); out at
every S against the float64 reference (rel err, tolerance ATTN_TOL; not bitwise across S: the splits change the sums).

Measured at a5048c1 (long_splits_a5048c1.json, log docs/notes/h200-long-splits-a5048c1.log), us, the op's S first and
last: B = 1 x 512 pages S = 8 26.29 / 26.63, 7 25.13, 6 25.04, 5 26.34; x 2048 S = 8 72.91 / 72.92, 7 70.67, 6 73.16;
x 256 S = 8 18.46 / 18.45, 7 16.93; B = 2 x 512 S = 4 41.82 / 41.67, 3 41.63; B = 4 x 512 c8 S = 2 72.68 / 72.39, 1
83.88, c4 S = 3 72.29 / 72.23, 4 73.04, 2 85.00. Every out within tolerance (2.7-4.4e-3). So S = 7 at B = 1 (1.2-2.2 us
less), level at B = 2, and no gain at B = 4 from clusters of 4: the op's rule since (netra.decode.ops.attn_splits) drops
one split where the grid passes what its clusters place one a SM and S > 2.

  PYTHONPATH=src python3 experiments/attention/long_splits.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys

import torch

# (cluster, B, pages, the S values: the op's first)
CASES = ((8, 1, 512, (8, 7, 6, 5)), (8, 1, 2048, (8, 7, 6)), (8, 1, 256, (8, 7)), (8, 2, 512, (4, 3)),
         (8, 4, 512, (2, 1)), (4, 4, 512, (3, 4, 2)))


def main():
    from netra import paths
    from netra.contracts import attn as A
    from netra.decode import ops as dops
    from netra.lifecycle import bench, metrics, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    sweep = paths.load_module(paths.ROOT / "experiments" / "attention" / "long_sweep.py")
    res = {"method": "plain launches, CUDA-graph replay of one launch per rotated copy (>= 16, past 4x L2), CUDA events, "
                     "median of 7 replays (long_sweep.graph_us); inputs as the testbed makes them (positions in each "
                     "sequence's last page); out against the float64 reference at every S",
           "op_splits": {f"c{c} B={B}": dops.attn_splits(B, c) for c, B, _, _ in CASES}, "cases": {}}
    for c, B, NP, splits in CASES:
        k = A.ATTN_LONG[c]
        tb = testbeds.get(k.name)
        go = rt_launch.make_guard_and_launch(k, function_handle=loader.load(k.name, 0).handle, device=0)
        dims = {"B": B, "NP": NP, "S": max(splits), "P": B * NP + 3, "T": NP * A.PAGE}
        base, ins, outs = sweep.rotated_case(tb, k, dims)
        want = tb.reference_for(base.inputs, {"ws": base.inputs["ws"]})["out"]
        row = {"copies": len(ins), "kv_bytes": B * NP * A.PAGE * A.KV_HEADS * A.HEAD_DIM * 4}
        for i, S in enumerate(splits + splits[:1]):
            ws = torch.zeros(B, A.KV_HEADS, S, A.PART, device="cuda")
            cnt = torch.zeros(B, A.KV_HEADS, c, dtype=torch.int32, device="cuda")
            key = f"s{S}_us" if i < len(splits) else f"s{S}_again_us"
            row[key] = sweep.graph_us(go, tb, ins, outs, {"ws": ws, "counters": cnt})
            row[f"s{S}_ctas"] = c * S * A.KV_HEADS * B
            if i < len(splits):
                base.reset()  # the made inputs again, out NaN-poisoned
                bufs = {**base.bufs, "ws": ws, "counters": cnt.zero_()}
                assert go(*tb.args(bufs)) is None
                torch.cuda.synchronize()
                err = metrics.rel_err(bufs["out"], want)
                row[f"s{S}_rel_err"] = err
                assert err < A.ATTN_TOL, (c, B, NP, S, err)
                assert not cnt.any()
        res["cases"][f"c{c} B={B} NP={NP}"] = row
        print(c, B, NP, {kk: (round(v, 2) if isinstance(v, float) and kk.endswith("us") else v)
                         for kk, v in row.items()}, flush=True)
        del ins, outs, base
        bench.release()
        json.dump(res, open(os.path.join(out_dir, "long_splits.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
