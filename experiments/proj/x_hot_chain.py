"""How much of a chained projection's time is the bench's cold x? The bench rotates every input over C
copies (> 4x the L2), so each launch reads its x (the previous kernel's output in the model) from DRAM;
in the decode step x was just written and sits in L2. The trace of the promoted kernels as PDL chains
(trace_promoted_ca007e6.json) puts 1.1-1.6 us between the wait and the converted x. Here the promoted
kernels are timed the bench's way (bench.graph_time over C copies of the weights and outputs, CUDA
events, median of 7) with x rotated as the bench does and with one x shared by every launch (hot in L2),
plainly and as a PDL chain, at M = 1 and 8. The outputs are checked bitwise between the two forms.
``--chunks-first``: the K = 4096 kernels (out_proj / o_proj) instead, each also built with its strip
requested before x at M <= 8 (pre_strips=1), the rule v3r replaced on cold-x bench numbers; the rows are
keyed by build (x_hot_chain_666a149.json, the first run, has one build and no such key).

``--m16``: every plain projection at M = 1, 8, 9, 16 (the M16 / M1 bar with x hot, as in the step, beside
x rotated, as the bench: x_broadcast_bulk_a868a88.json and x_broadcast_d27ac55.json have x's delivery alone costing 0.75-0.95 us more at
M = 16 than at M = 1 when cold, 0.35-0.55 when hot).

  PYTHONPATH=src python3 experiments/proj/x_hot_chain.py [--chunks-first | --m16] --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys

import torch


def candidates(sh) -> dict:
    """name -> PTX of the builds timed beside the promoted one (``--chunks-first``: the K = 4096 kernels with
    their strip requested before x at M <= 8, pre_strips=1, the rule before v3r)."""
    from netra import paths

    if "--chunks-first" not in sys.argv or sh.K != 4096 or sh.ksplit != 1:
        return {}
    return {"chunks_first": paths.generator("proj", "gen_fp8_gemv").generate(sh, pre_strips=1)}


def main():
    from netra import contracts
    from netra.contracts.proj import FUSED, SHAPES
    from netra.lifecycle import bench, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; x_same: every launch reads copy 0's x", "kernels": {}}
    keep = []
    chunks_first = "--chunks-first" in sys.argv
    shapes = [s for s in SHAPES + FUSED if s.K == 4096 and s.fuse in ("", "res")] if chunks_first else \
        list(SHAPES) if "--m16" in sys.argv else [s for s in SHAPES if s.N * s.K >= 8 << 20]
    for sh in shapes:
        c, tb = contracts.get(sh.name), testbeds.get(sh.name)
        builds = {"promoted": loader.load(c.name, 0).handle}
        for name, ptx in candidates(sh).items():
            module, fn = loader.load_text(sh.name, ptx, dynamic_smem=c.dynamic_smem)
            keep.append(module)
            builds[name] = int(fn)
        rows = {}
        for bname, h in builds.items():
            go, go_pdl = (rt_launch.make_guard_and_launch(c, function_handle=h, device=0, **k)
                          for k in ({}, {"launch": rt_launch.pdl_launcher()}))
            rows[bname] = one_build(sh, c, tb, go, go_pdl)
        res["kernels"][sh.name] = rows
    tag = "_chunks_first" if chunks_first else "_m16" if "--m16" in sys.argv else ""
    json.dump(res, open(os.path.join(out_dir, "x_hot_chain" + tag + ".json"), "w"),
              indent=1)
    del keep


def one_build(sh, c, tb, go, go_pdl) -> dict:
    from netra.lifecycle import bench, check

    rows = {}
    for m in (1, 8, 9, 16) if "--m16" in sys.argv else (1, 8):
        dims = {"M": m}
        nread, nwrite = c.nbytes(dims)
        copies = bench.copies_for(nread + nwrite)
        base = check.Bench(tb, dims, 5)
        base.reset()
        bufs = [{**bench.replicate(base.inputs), **tb.alloc_outputs(dims, "cuda")} for _ in range(copies)]
        shared = [dict(b, x=bufs[0]["x"]) for b in bufs]
        row = {"copies": copies}
        outs = {}
        for form, bb in (("x_rotated", bufs), ("x_same", shared)):
            args = [tb.args(b) for b in bb]
            row[form] = {"us": bench.graph_time(lambda i: go(*args[i]), copies)[0],
                         "pdl_chain_us": bench.graph_time(lambda i: go_pdl(*args[i]), copies)[0]}
            torch.cuda.synchronize()
            outs[form] = bb[0]["out"].clone()
        row["outputs_bitwise_equal"] = torch.equal(outs["x_rotated"].view(torch.int16), outs["x_same"].view(torch.int16))
        row["out_sum"] = float(outs["x_same"].float().sum())  # the same across builds where they are bitwise equal
        rows[f"M={m}"] = row
        print(sh.name, m, row, flush=True)
        del bufs, shared
        torch.cuda.empty_cache()
    return rows


if __name__ == "__main__":
    main()
