"""The long-context attention builds with the first page requested after q, cos / sin, the norm weights and the gate
(gen_attn_decode.generate(q_first=True)) against the committed builds (the first page first).

Why: launched plainly, nothing needs the pages first, and the phase trace at e744800
(long_place_phases_e744800.json) had the prologue of c8_long at 1 x 512 pages take 3.5 us against 1.5 at 16 pages: its
small loads queued behind 120 CTAs' first pages (7.7 MB). Prediction: the walk starts when the first page has landed
either way, so the gain is at most what q's loads wait behind the pages: 0.3-1 us a launch late in long caches (B = 1
at 512 and 2048 pages), none at 128 pages or B = 8 / 32 (more work per CTA, the prologue a smaller share); the same
bits.

For each case (inputs made once, >= 16 rotated copies as the bench, every launch cold): the committed build, the
candidate and the committed build again, plainly, CUDA-graph replay, median of 7; out and the cache rows of one launch
of each on the same made inputs compared bitwise, and the candidate's out against the float64 reference.

  PYTHONPATH=src python3 experiments/attention/q_first_variant.py --out "$OUT"

Measured at 0a773a1 (q_first_variant_0a773a1.json), us committed / q_first / committed again: c8_long 1 x 128 pages 13.51 /
13.59 / 13.54, 1 x 512 26.49 / 26.32 / 26.58, 1 x 2048 71.87 / 72.16 / 72.12; c4_long 8 x 512 131.59 / 131.52 / 131.64,
32 x 128 135.98 / 136.03 / 135.29. The same bits (out and cache rows) at every case; rel err 3-5e-3. Within the two
committed runs' spread everywhere: the walk begins when the first page has landed, and that page does not land sooner.
Rejected; the generator option stays.
"""

from __future__ import annotations

import json
import os
import sys

import torch

CASES = {8: ((1, 128, 8), (1, 512, 8), (1, 2048, 8)), 4: ((8, 512, 2), (32, 128, 1))}


def main():
    from netra import paths
    from netra.contracts import attn as A
    from netra.lifecycle import bench, metrics, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    g = paths.generator("attention", "gen_attn_decode")
    sweep = paths.load_module(paths.ROOT / "experiments" / "attention" / "long_sweep.py")
    res = {"method": "plain launches, CUDA-graph replay of one launch per rotated copy (>= 16, past 4x L2), CUDA events, "
                     "median of 7 replays (netra.lifecycle.bench.graph_time); committed, candidate, committed again",
           "cases": {}}
    keep = []
    for c, cases in CASES.items():
        k = A.ATTN_LONG[c]
        tb = testbeds.get(k.name)
        module, fn = loader.load_text(k.name, g.generate(True, cluster=c, long=True, q_first=True),
                                      dynamic_smem=k.dynamic_smem)
        keep.append(module)
        gos = {"committed": rt_launch.make_guard_and_launch(k, function_handle=loader.load(k.name, 0).handle, device=0),
               "q_first": rt_launch.make_guard_and_launch(k, function_handle=int(fn), device=0)}
        for B, NP, S in cases:
            dims = {"B": B, "NP": NP, "S": S, "P": B * NP + 3, "T": NP * A.PAGE}
            base, ins, outs = sweep.rotated_case(tb, k, dims)
            want = tb.reference_for(base.inputs, {"ws": base.inputs["ws"]})["out"]
            row = {"copies": len(ins), "kv_bytes": B * NP * A.PAGE * A.KV_HEADS * A.HEAD_DIM * 4}
            got = {}
            for form in ("committed", "q_first", "committed_again"):
                go = gos[form.replace("_again", "")]
                ws = torch.zeros(B, A.KV_HEADS, S, A.PART, device="cuda")
                cnt = torch.zeros(B, A.KV_HEADS, c, dtype=torch.int32, device="cuda")
                row[f"{form}_us"] = sweep.graph_us(go, tb, ins, outs, {"ws": ws, "counters": cnt})
                base.reset()  # the made inputs again, out NaN-poisoned
                bufs = {**base.bufs, "ws": ws, "counters": cnt.zero_()}
                assert go(*tb.args(bufs)) is None
                torch.cuda.synchronize()
                got[form] = tuple(bufs[n].clone() for n in ("out", "k_pages", "v_pages"))
                assert not cnt.any()
            row["q_first_rel_err"] = metrics.rel_err(got["q_first"][0], want)
            row["q_first_same_bits"] = all(torch.equal(x, y) for x, y in zip(got["q_first"], got["committed"]))
            res["cases"][f"c{c} B={B} NP={NP} S={S}"] = row
            print(c, B, NP, S, {kk: (round(v, 3) if isinstance(v, float) else v) for kk, v in row.items()}, flush=True)
            del ins, outs, base, got
            bench.release()
            json.dump(res, open(os.path.join(out_dir, "q_first_variant.json"), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
