"""moe_router_norm with the experts split across CTAs (gen_moe_router.generate_split) against the promoted build,
which gives each token a cluster of 8 CTAs that each read 32 expert rows (128 KB).

Why: the promoted router moves M MB of router weight from L2 into the SMs (32 MB at M = 32) and is bound by each SM's
share of it: 5.3 us plainly / 4.5 as a PDL chain at M = 1..15, 6.2-7.2 at 16..30, 10.1 at 32 (records at d3acdef),
where its DRAM bytes (1 MB) take 0.25 us. The candidate's CTA (e, g) owns epc experts and 8 tokens: its epc rows
(4 KB each) land in shared memory by one bulk copy before griddepcontrol.wait, its warps (one per token) normalize h
and sum as the promoted kernel does (the same order: the same logits), store them to a scratch [M, 256], and the
token group's last CTA (a u64 arrival counter per token group, never reset) selects the top 8 as the promoted
kernel's rank 0. epc = 4: 64 x ceil(M / 8) CTAs, 16 KB of rows each; epc = 2: 128 x ceil(M / 8), 8 KB.
Prediction: M = 1..8 ~3 us plainly and ~2.5 as a chain (the launch, h, the norm, ~0.5 us of sums, the counter's
round trip, the selection), M = 32 ~4 us (8 KB x 32 tokens of h per CTA at most); in the decode step (40 layers)
batch 8 ~60 us less per PDL step, batch 32 ~0.2 ms.

Checks: top, idx and x_out bitwise the promoted kernel's and logits exactly netra.reference.proj.router_logits on
the kernel's x_out, at M = 1, 2, 5, 8, 9, 16, 17, 24, 31, 32, 2 seeds, plain and PDL launches, one counter buffer
for every launch of a build (so the counter's state across launches of any M is exercised). Times: the bench's
method (graph replay, weights and h rotated past 4x L2), plainly and as a PDL chain, in the same run.

  PYTHONPATH=src python3 experiments/proj/router/router_split_variant.py --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

from netra import contracts, paths
from netra.contracts import Tensor

HERE = Path(__file__).resolve().parent
gen = paths.generator("proj", "gen_moe_router")
EPCS = (4, 2)
GROUPS = 4  # token groups at M = 32


def split_name(epc: int) -> str:
    return f"moe_router_norm_split{epc}_e256_k2048"


def split_contract(epc: int):
    from netra.contracts.proj import NUM_EXPERTS, ROUTER_K

    c = contracts.get(gen.NORM_NAME)
    return dataclasses.replace(
        c, name=split_name(epc),
        summary=c.summary + f"; the experts split across CTAs ({epc} per CTA, 8 tokens per CTA), the last CTA of each "
                            "token group selecting",
        params=c.params + (
            Tensor("logits", "bf16", ("M", NUM_EXPERTS), "out", doc="the router's BF16 logits (the CTAs' scratch)"),
            Tensor("cnt", "i64", (GROUPS,), "inout", align=8,
                   doc=f"per token group, its CTAs' arrivals: each launch adds {NUM_EXPERTS // epc} to each group's; "
                       "zero at allocation, touched by nothing else"),
        ),
        grid=(str(NUM_EXPERTS // epc), f"(M + {gen.SPLIT_TOKENS - 1}) // {gen.SPLIT_TOKENS}", "1"),
        max_static_smem=epc * ROUTER_K * 2 + 16,
        exact_outputs=("idx", "logits", "cnt"),
        pdl="the CTA's expert rows (one bulk copy) before griddepcontrol.wait; h after it, launch_dependents right "
            "after it",
    )


def split_testbed(epc: int):
    from netra.lifecycle import testbeds

    tb = testbeds.get(gen.NORM_NAME)

    def make(dims, g, device):
        return {**tb.make(dims, g, device), "cnt": torch.zeros(GROUPS, dtype=torch.int64, device=device)}

    return dataclasses.replace(tb, contract=split_contract(epc), make=make, peers={})


def split_launchers(epc: int, device: int = 0):
    """(module, plain guard-and-launch, PDL guard-and-launch) of the candidate build."""
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    module, fn = loader.load_text(split_name(epc), gen.generate_split(epc, split_name(epc)))
    c = split_contract(epc)
    return (module, rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=device),
            rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=device, launch=rt_launch.pdl_launcher()))


def main():
    from netra.lifecycle import bench, check, testbeds
    from netra.reference.proj import router_logits
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    commit = os.environ.get("NETRA_COMMIT", "unknown")
    out = os.path.join(out_dir, f"router_split_variant_{commit}.json")
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    name = gen.NORM_NAME
    c = contracts.get(name)
    tb = testbeds.get(name)
    promoted = tuple(rt_launch.make_guard_and_launch(c, function_handle=loader.load(name, 0).handle, device=0, **k)
                     for k in ({}, {"launch": rt_launch.pdl_launcher()}))
    cands = {epc: split_launchers(epc) for epc in EPCS}
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    res = {"commit": commit, "method": bench.METHOD.format(R=bench.REPLAYS), "doc": __doc__.split("\n\n")[1],
           "correctness": {}, "timing_us": {}}
    cnts = {epc: torch.zeros(GROUPS, dtype=torch.int64, device="cuda") for epc in EPCS}
    ok = {epc: True for epc in EPCS}
    fails = []
    for M in (1, 2, 5, 8, 9, 16, 17, 24, 31, 32):
        for seed in range(2):
            b = check.Bench(tb, {"M": M}, seed)
            b.reset()
            assert promoted[0](*tb.args(b.bufs)) is None
            torch.cuda.synchronize()
            want = b.results()
            for epc in EPCS:
                for li, go in enumerate(cands[epc][1:]):
                    b.reset()
                    lg = torch.full((M, 256), float("nan"), dtype=torch.bfloat16, device="cuda")
                    reason = go(*tb.args(b.bufs), lg, cnts[epc])
                    assert reason is None, reason
                    torch.cuda.synchronize()
                    got = b.results()
                    same = all(torch.equal(bits(want[n]), bits(got[n])) for n in want)
                    lg_ok = torch.equal(bits(lg), bits(router_logits(got["x_out"], b.bufs["w"])))
                    if not (same and lg_ok):
                        fails.append({"epc": epc, "M": M, "seed": seed, "launch": ("plain", "pdl")[li],
                                      "outputs_bitwise": same, "logits_exact": lg_ok})
                    ok[epc] &= same and lg_ok
    res["correctness"] = {"bitwise_the_promoted_and_logits_exact": {f"epc{k}": v for k, v in ok.items()},
                          "counters_after": {f"epc{k}": cnts[k].tolist() for k in EPCS}, "failures": fails[:20],
                          "launches_compared": "plain and PDL, one counter buffer per build across every launch"}
    print(res["correctness"], flush=True)
    json.dump(res, open(out, "w"), indent=1)
    for M in (1, 4, 8, 16, 24, 32):
        row = {}
        r = bench.bench_case(tb, {"M": M}, promoted[0], floors, peers=False, log=lambda *_: None, go_pdl=promoted[1])
        row["promoted"] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
        for epc in EPCS:
            if ok[epc]:
                r = bench.bench_case(split_testbed(epc), {"M": M}, cands[epc][1], floors, peers=False,
                                     log=lambda *_: None, go_pdl=cands[epc][2])
                row[f"split{epc}"] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
        res["timing_us"][f"M={M}"] = row
        print(M, row, flush=True)
        json.dump(res, open(out, "w"), indent=1)
    del cands


if __name__ == "__main__":
    main()
