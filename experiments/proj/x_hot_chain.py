"""How much of a chained projection's time is the bench's cold x? The bench rotates every input over C
copies (> 4x the L2), so each launch reads its x (the previous kernel's output in the model) from DRAM;
in the decode step x was just written and sits in L2. The trace of the promoted kernels as PDL chains
(trace_promoted_ca007e6.json) puts 1.1-1.6 us between the wait and the converted x. Here the promoted
kernels are timed the bench's way (bench.graph_time over C copies of the weights and outputs, CUDA
events, median of 7) with x rotated as the bench does and with one x shared by every launch (hot in L2),
plainly and as a PDL chain, at M = 1 and 8. The outputs are checked bitwise between the two forms.

  PYTHONPATH=src python3 experiments/proj/x_hot_chain.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys

import torch


def main():
    from netra import contracts
    from netra.contracts.proj import SHAPES
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; x_same: every launch reads copy 0's x", "kernels": {}}
    for sh in [s for s in SHAPES if s.N * s.K >= 8 << 20]:
        c, tb = contracts.get(sh.name), testbeds.get(sh.name)
        h = loader.load(c.name, 0).handle
        go, go_pdl = (rt_launch.make_guard_and_launch(c, function_handle=h, device=0, **k)
                      for k in ({}, {"launch": rt_launch.pdl_launcher()}))
        rows = {}
        for m in (1, 8):
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
            rows[f"M={m}"] = row
            print(sh.name, m, row, flush=True)
            del bufs, shared
            torch.cuda.empty_cache()
        res["kernels"][sh.name] = rows
    json.dump(res, open(os.path.join(out_dir, "x_hot_chain.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
