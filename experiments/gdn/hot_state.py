"""What gdn_decode would take with its recurrent state already in L2: the bound on any scheme that asks L2 for the
next GDN layer's state while DRAM idles earlier in the step (the MoE router's chain: ~4.5 us a layer at batch 8,
~6 at 32; docs/notes/decode.md), before building one.

Why: from 8 sequences the decode runner's gdn_decode (the pipe build) cannot start beside GDN's in_proj (128 KB of
shared memory beside 164 KB), so its state (2 MiB a sequence read, the same written) streams only after the in_proj
ends: the timeline at 7d8bd43 charges it 8.9 us a layer at batch 8 (34 MB of state read and written: 7.7 us at
4.33 TB/s), 32 at batch 32. The router's chain before it leaves DRAM nearly idle, and the state does not depend on
anything in the step before gdn_decode, so it could be asked of L2 there (cp.async.bulk.prefetch.L2). Whether that
can pay depends on how much faster the kernel is with its reads from L2 (its writes go to DRAM either way).

Forms, each kernel timed as the bench times it (CUDA-graph replay, CUDA events, median of 7):
- cold: every input and output rotated over C copies past 4x the 60 MiB L2 (the bench's method);
- hot: two copies alternated (each launch's pools last touched two launches before: in L2 where they fit, i.e. at
  B <= 8 wholly, at 16 about half, at 32 not);
plainly and as a PDL chain; the pool holds exactly the batch's slots (P = B).
Prediction: batch 8 8.9 -> ~5 us (reads from L2, writes to DRAM); batch 32 unchanged (does not fit); if batch 8
gains under 2 us, a prefetch of the state cannot pay more than ~60 us a batch-8 step and is not worth building.

  PYTHONPATH=src python3 experiments/gdn/hot_state.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys


# (kernel, batch sizes): the PDL builds the runner takes under its PDL engine, and the plain pipe build
CASES = (("gdn_decode_b32_pdl", (1,)), ("gdn_decode_b32_pipe_pdl", (8, 16, 32)), ("gdn_decode_b32_pipe", (8, 16, 32)))


def main():
    from netra import contracts, paths
    from netra.lifecycle import bench, check, records, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    hw = paths.load_module(paths.ROOT / "experiments" / "proj" / "hot_weights.py", "hot_weights")
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; hot: two copies alternated (P = B slots a pool)",
           "kernels": {}}
    for name, batches in CASES:
        c, tb = contracts.get(name), testbeds.get(name)
        h = loader.load(name, 0).handle
        go = rt_launch.make_guard_and_launch(c, function_handle=h, device=0)
        go_pdl = (rt_launch.make_guard_and_launch(c, function_handle=h, device=0, launch=rt_launch.pdl_launcher())
                  if c.pdl else None)
        for B in batches:
            dims = {"B": B, "P": B}
            nread, nwrite = c.nbytes(dims)
            copies = bench.copies_for(nread + nwrite)
            base = check.Bench(tb, dims, 5)
            base.reset()
            bufs = [{**bench.replicate(base.inputs), **tb.alloc_outputs(dims, "cuda")} for _ in range(copies)]
            row = {"B": B, "copies": copies, "bytes_read": nread, "bytes_written": nwrite, "pdl": bool(c.pdl)}
            row.update(hw.time_forms(tb, go, go_pdl, {"cold": bufs, "hot": [bufs[i % 2] for i in range(copies)]}))
            for k in ("us", "pdl_chain_us"):
                if k in row["hot"]:
                    row[f"hot_minus_cold_{k}"] = row["hot"][k] - row["cold"][k]
                    row[f"cold_tb_s_{k}"] = (nread + nwrite) / row["cold"][k] / 1e6
            res["kernels"][f"{name} B={B}"] = row
            print(name, B, json.dumps(row), flush=True)
            del bufs, base
            bench.release()
    print("wrote", records.write_experiment(out_dir, "hot_state", res))


if __name__ == "__main__":
    main()
