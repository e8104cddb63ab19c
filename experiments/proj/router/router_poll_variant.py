"""The router-fused gate | up without its grid barrier (fp8_gemv_n1024_k2048_moe_shared_router_poll:
contracts.proj.EXPERTS_ROUTER_POLL) against the promoted fp8_gemv_n1024_k2048_moe_shared_router. CPU-built after
eb09b3d, not registered: this script builds and launches it from the generator.

Why: the promoted kernel's router phase costs ~3.2 us at M = 1 (router_fused_variant, README); of it the barrier
(fence, one atomic per CTA, the spin, fence, two bar.sync) and then the logits' L2 round trip are serial. Here each
CTA takes its epoch from the counter before the wait (one relaxed atomic, off the critical path), stores each logit
as one 8-byte word epoch << 32 | fp32 bits, and the selecting warps poll the 256 words of their token until every tag
is this launch's: the data and the synchronization arrive together. The body's x comes from the CTA's own normalized
rows in shared memory instead of x_out (which CTA 0 still writes, an output), so nothing else crosses CTAs. Every
CTA must still be resident (the polls wait for all of them).
Prediction: 0.5-1 us faster at M = 1..4, plainly and as a PDL chain.

Checks (M = 1..8, 2 seeds, NaN-poisoned outputs, plain and PDL, three launches in a row on one counter and one
workspace): x_out, top, idx, out, sout, gate_out bitwise the promoted kernel's on the same inputs; the workspace's
low words bitwise the promoted kernel's fp32 logits, its tags this launch's. Times: the bench's method, both
builds on the same inputs, M = 1, 2, 4, 8.

  PYTHONPATH=src python3 experiments/proj/router/router_poll_variant.py --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

from netra import paths

HERE = Path(__file__).resolve().parent


def main():
    from netra.contracts import proj as pc
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    out = os.path.join(out_dir, "router_poll_variant.json")
    base = pc.EXPERTS_ROUTER
    tb = testbeds.get(base.name)
    cc = pc._contract(pc.EXPERTS_ROUTER_POLL)

    def make(dims, gen, device):
        return {**tb.make(dims, gen, device), "logits": torch.zeros(8, pc.NUM_EXPERTS, dtype=torch.int64, device=device)}

    # the promoted name (the bench draws the same inputs for both), the candidate's parameters and shared memory
    cand = dataclasses.replace(tb, contract=dataclasses.replace(cc, name=base.name), make=make, peers={})
    module, fn = loader.load_text(cc.name, paths.generator("proj", "gen_fp8_gemv").generate(pc.EXPERTS_ROUTER_POLL),
                                  dynamic_smem=cc.dynamic_smem)
    launchers = ({}, {"launch": rt_launch.pdl_launcher()})
    gp = tuple(rt_launch.make_guard_and_launch(tb.contract, function_handle=loader.load(base.name, 0).handle, device=0, **k)
               for k in launchers)
    gc = tuple(rt_launch.make_guard_and_launch(cand.contract, function_handle=int(fn), device=0, **k) for k in launchers)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "kernel": cc.name, "correctness": {}, "timing_us": {}}
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    names = ("x_out", "top", "idx", "out", "sout", "gate_out")
    ok = True
    for M in range(1, 9):
        dims = {"M": M, "E": 256}
        row = {"bitwise": True, "logits_bitwise": True, "tags_ok": True}
        for seed in range(2):
            b = check.Bench(tb, dims, seed)
            b.reset()
            assert gp[0](*tb.args(b.bufs)) is None
            torch.cuda.synchronize()
            want = b.results()
            ws = torch.zeros(8, 256, dtype=torch.int64, device="cuda")
            bar = torch.zeros(1, dtype=torch.int64, device="cuda")
            for launch_i, go in enumerate(gc + gc[:1]):  # plain, PDL, plain again: tags 1, 2, 3
                b.reset()
                bufs = {**b.bufs, "logits": ws, "bar": bar}
                assert go(*cand.args(bufs)) is None
                torch.cuda.synchronize()
                same = all(torch.equal(bits(b.bufs[n]), bits(want[n])) for n in names)
                row["bitwise"] &= same
                words = ws[:M].contiguous().view(torch.int32).view(M, 256, 2)  # little-endian: (low, high)
                lo = words[..., 0].contiguous().view(torch.float32)
                row["logits_bitwise"] &= torch.equal(bits(lo), bits(want["logits"]))
                row["tags_ok"] &= bool((words[..., 1] == launch_i + 1).all()) and int(bar.item()) == 132 * (launch_i + 1)
                if not same:
                    row.setdefault("differs", []).append([n for n in names if not torch.equal(bits(b.bufs[n]), bits(want[n]))])
        row["pass"] = row["bitwise"] and row["logits_bitwise"] and row["tags_ok"]
        ok &= row["pass"]
        res["correctness"][f"M={M}"] = row
        print("check", M, row, flush=True)
        json.dump(res, open(out, "w"), indent=1)
    res["pass"] = ok
    for M in (1, 2, 4, 8):
        dims = {"M": M, "E": 256}
        row = {}
        for tag, t, (go, go_pdl) in (("promoted", tb, gp), ("candidate", cand, gc)):
            r = bench.bench_case(t, dims, go, floors, peers=False, log=print, go_pdl=go_pdl)
            row[tag] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
        res["timing_us"][f"M={M}"] = row
        print("time", M, row, flush=True)
        json.dump(res, open(out, "w"), indent=1)
    del module


if __name__ == "__main__":
    main()
