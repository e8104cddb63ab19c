"""What the batch-1 step's kernels would take with their weights already in L2: the bound on any scheme that
prefetches a kernel's weights into L2 during an earlier kernel's idle DRAM time.

Why: at batch 1 the MoE block is the step's largest gap to its bytes (router-fused gate | up ~10 us and moe_down ~5 us a
layer as PDL chains for 19 + 9.5 MB: 6.6 us at 4.33 TB/s; docs/notes/decode.md). moe_down cannot request its weights
before its wait (the ids are the router's output), and the router-fused grid's slowest CTA ends 2.6-3.4 us after the
median one (experiments/proj/README.md, "moe_down as a third phase"), so DRAM idles through that tail while the chosen
experts' down weights (known since the router phase) wait for the next launch. The earlier prefetch attempts (a
launch between the router and the experts, a side stream) were slower and were not traced: whether the later kernel
ever sped up is not known. Here, no prefetch at all: each kernel timed as the bench does (every input rotated over C
copies past 4x the L2, so every launch's weights are cold) and with every launch on copy 0's buffers (weights, x and
outputs hot in L2 after the first launch), plainly and as a PDL chain, M = 1.
Prediction: moe_down 5.2 -> ~2.5-3 us as a chain if its time is bytes from DRAM; if it stays above 4, the kernel's own
chain (ids, addresses, x, the sums) is its time and prefetching its weights cannot pay.

Measured at 307cc69 (hot_weights_307cc69.json, log docs/notes/h200-hot-weights-307cc69.log), us cold -> hot, plain |
PDL chain: moe_down 5.79 -> 5.58 | 5.36 -> 5.25; the router-fused gate | up 10.68 -> 10.02 | 9.76 -> 9.16; out_proj /
o_proj (residual) 4.99 -> 4.06 | 4.10 -> 3.69; GDN in_proj (norm, b | a) 8.41 -> 8.51 | 7.27 -> 7.27; attention q | k | v
(norm) 7.34 -> 7.35 | 6.12 -> 6.04. So the prediction missed: moe_down with all 9.5 MB in L2 is 0.1 us faster as a
chain. Its time is its own chain (ids, x and silu_mul, the 72 KB a CTA, the sums), not DRAM; no L2 prefetch of its
weights can pay more than that, which also bounds what the rejected moe_prefetch launch could have given. Only the
8.4 MB out_proj / o_proj gains (0.4 us as a chain); the 19-25 MB input projections gain nothing (either L2 does not keep
them across launches, evict-first as they are loaded, or their time is not the DRAM's).

  PYTHONPATH=src python3 experiments/proj/hot_weights.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys

import torch

KERNELS = ("fp8_gemv_n2048_k4608_moedown", "fp8_gemv_n1024_k2048_moe_shared_router", "fp8_gemv_n2048_k4096_res",
           "fp8_gemv_n12288_k2048_norm_ba", "fp8_gemv_n9216_k2048_norm")


def time_forms(tb, go, go_pdl, forms: dict) -> dict:
    """{form: {"us": plain, "pdl_chain_us": as a PDL chain (if go_pdl)}} for each form's list of buffer sets (one launch
    a set, captured in one graph; the bench's method). Also experiments/gdn/hot_state.py's."""
    from netra.lifecycle import bench

    out = {}
    for form, bb in forms.items():
        args = [tb.args(b) for b in bb]

        def run(i, g=go):
            assert g(*args[i]) is None

        bench.settle()
        out[form] = {"us": bench.graph_time(run, len(bb))[0]}
        if go_pdl is not None:
            out[form]["pdl_chain_us"] = bench.graph_time(lambda i: run(i, go_pdl), len(bb))[0]
        torch.cuda.synchronize()
    return out


def main():
    from netra import contracts
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; hot: every launch on copy 0's buffers (inputs and "
                                                             "outputs), so after the first launch its bytes are in L2",
           "kernels": {}}
    for name in KERNELS:
        c, tb = contracts.get(name), testbeds.get(name)
        h = loader.load(name, 0).handle
        go = rt_launch.make_guard_and_launch(c, function_handle=h, device=0)
        go_pdl = (rt_launch.make_guard_and_launch(c, function_handle=h, device=0, launch=rt_launch.pdl_launcher())
                  if c.pdl else None)
        dims = next(d for d in c.cases() if d["M"] == 1)  # with the contract's other dims (E, the counters' ..)
        nread, nwrite = c.nbytes(dims)
        copies = bench.copies_for(nread + nwrite)
        base = check.Bench(tb, dims, 5)
        base.reset()
        bufs = [{**bench.replicate(base.inputs), **tb.alloc_outputs(dims, "cuda")} for _ in range(copies)]
        row = {"copies": copies, "bytes_read": nread, "pdl": bool(c.pdl)}
        row.update(time_forms(tb, go, go_pdl, {"cold": bufs, "hot": [bufs[0]] * copies}))
        for k in ("us", "pdl_chain_us"):
            if k in row["hot"]:
                row[f"hot_over_cold_{k}"] = row["hot"][k] / row["cold"][k]
        res["kernels"][name] = row
        print(name, row, flush=True)
        del bufs, base
        bench.release()
        json.dump(res, open(os.path.join(out_dir, "hot_weights.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
