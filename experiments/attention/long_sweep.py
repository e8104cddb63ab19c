"""The long-context attention builds (attn_decode_d256_qknorm_c4_long / _c8_long) over the grid's S (clusters per
(sequence, kv head)) and LONG_PAGES (pages a CTA before another cluster joins: S_eff = min(S, ceil(n / (C x
LONG_PAGES)))), to set the op's rule (netra.decode.ops.attn_splits, contracts.attn.LONG_PAGES).

Why: the first records (a9d9422) had the builds 2.6-3.6x faster than one cluster per (sequence, kv head) at B = 1 and
512 / 2048 pages, but slower where one cluster already fills the GPU (B = 16, 512 pages: 264 against 251 us at S = 2)
and at 64 pages (B = 1 S_eff = 2: 15.97 against c8's 14.36 us). Prediction: LONG_PAGES = 8 takes the 64-page loss away
and costs little at 512 pages; the best S falls as B rises, one CTA a SM (S = 132 / (2 C B)) about right.

For each case (inputs made once, >= 16 rotated copies as the bench, every launch cold): the kernel at each S, for
LONG_PAGES 4 (the committed build) and 8 (generated with the generator's LONG_PAGES patched), plainly, CUDA-graph
replay, median of 7; and, for LONG_PAGES = 8, out at the largest S against the float64 reference (rel err, tolerance
ATTN_TOL) and against LONG_PAGES = 4's (not bitwise where the splits differ).

  PYTHONPATH=src python3 experiments/attention/long_sweep.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys

import torch

CASES = {8: ((1, 64), (1, 128), (1, 512), (1, 2048), (2, 512), (4, 512)), 4: ((8, 128), (8, 512), (16, 512))}
SPLITS = (1, 2, 4, 8, 16)


def rotated_case(tb, k, dims: dict):
    """One case as `netra bench` times it: the testbed's made inputs (check.Bench, seed 5, reset) and enough rotated
    copies of them and of the outputs to pass 4x the L2 (at least 16). Returns (base, ins, outs). Shared by this
    directory's long-build experiments (long_place.py, q_first_variant.py)."""
    from netra.lifecycle import bench, check

    base = check.Bench(tb, dims, 5)
    base.reset()
    nread, nwrite = k.nbytes(dims)
    copies = bench.copies_for(nread + nwrite)
    ins = [bench.replicate(base.inputs) for _ in range(copies)]
    return base, ins, [tb.alloc_outputs(dims, "cuda") for _ in range(copies)]


def graph_us(go, tb, ins: list, outs: list, scratch: dict) -> float:
    """``go`` over the rotated copies (each launch with ``scratch``, e.g. ws and counters), plainly: one CUDA graph of
    a launch per copy, replayed after the freed memory is scrubbed (bench.settle); median of 7 replays per launch."""
    from netra.lifecycle import bench

    args = [tb.args({**a, **o, **scratch}) for a, o in zip(ins, outs)]

    def launch(i):
        assert go(*args[i]) is None

    bench.settle()
    return bench.graph_time(launch, len(ins))[0]


def main():
    from netra.contracts import attn as A
    from netra import paths
    from netra.lifecycle import bench, metrics, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    g = paths.generator("attention", "gen_attn_decode")
    res = {"method": "plain launches, CUDA-graph replay of one launch per rotated copy (>= 16, past 4x L2), CUDA events, "
                     "median of 7 replays (netra.lifecycle.bench.graph_time); inputs as the testbed makes them "
                     "(positions in each sequence's last page)", "cases": {}}
    keep = []
    for c, cases in CASES.items():
        k = A.ATTN_LONG[c]
        tb = testbeds.get(k.name)
        g.LONG_PAGES = 8
        module, fn = loader.load_text(k.name, g.generate(True, cluster=c, long=True), dynamic_smem=k.dynamic_smem)
        g.LONG_PAGES = A.LONG_PAGES
        keep.append(module)
        builds = {A.LONG_PAGES: loader.load(k.name, 0).handle, 8: int(fn)}
        gos = {lp: rt_launch.make_guard_and_launch(k, function_handle=h, device=0) for lp, h in builds.items()}
        for B, NP in cases:
            smax = A.LONG_SPLITS[c]
            dims = {"B": B, "NP": NP, "S": smax, "P": B * NP + 3, "T": NP * A.PAGE}
            base, ins, outs = rotated_case(tb, k, dims)
            want = tb.reference_for(base.inputs, {"ws": base.inputs["ws"]})["out"]
            row = {"copies": len(ins), "kv_bytes": B * NP * A.PAGE * A.KV_HEADS * A.HEAD_DIM * 4}
            for lp, go in gos.items():
                for S in (s for s in SPLITS if s <= smax):
                    ws = torch.zeros(B, A.KV_HEADS, S, A.PART, device="cuda")
                    cnt = torch.zeros(B, A.KV_HEADS, c, dtype=torch.int32, device="cuda")
                    row[f"lp{lp}_s{S}_us"] = graph_us(go, tb, ins, outs, {"ws": ws, "counters": cnt})
                    if S == max(s for s in SPLITS if s <= smax):
                        base.reset()  # the made inputs again, out NaN-poisoned
                        bufs = {**base.bufs, "ws": ws, "counters": cnt.zero_()}
                        assert go(*tb.args(bufs)) is None
                        torch.cuda.synchronize()
                        row[f"lp{lp}_rel_err"] = metrics.rel_err(bufs["out"], want)
                        row[f"lp{lp}_out"] = bufs["out"].clone()
                        assert not cnt.any()
            row["lp8_same_bits_as_lp4"] = torch.equal(row.pop(f"lp{A.LONG_PAGES}_out"), row.pop("lp8_out"))
            res["cases"][f"c{c} B={B} NP={NP}"] = row
            print(c, B, NP, {kk: (round(v, 2) if isinstance(v, float) else v) for kk, v in row.items()}, flush=True)
            del ins, outs, base
            bench.release()
            json.dump(res, open(os.path.join(out_dir, "long_sweep.json"), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
