"""gdn_decode_b32_pipe (kernels/sm_90a/gdn/gen_gdn_decode_pipe.py: a persistent pipeline of whole
value-head states, one CTA of 512 threads per SM, no clusters) beside the builds netra::gdn_decode
takes now: the register builds (gdn_decode_b32, _pdl) and the smem builds (_smem, _smem_pdl).

1. Bitwise: at every contract case and 2 seeds, the outputs and both pools of the pipe builds must
   equal the register builds' (plain against gdn_decode_b32, PDL against gdn_decode_b32_pdl, both
   launched plainly); and with two slot ids outside the pool (B = 16: one past the end, one negative)
   the NaN rows and the untouched pools must match too.
2. Times by the bench's method (CUDA-graph replay, states rotated past 4x L2, median of 7), each build
   launched plainly and as a chain of PDL launches.

Prediction (written before the run): B = 32 41 -> 36-39 us (the 80% bar of the state roofline is 39.97
us), B = 16 21.8 -> 18-20, B = 8 11.8 -> 9-10.5; B <= 4 slower than the register builds (16 B CTAs,
one item each: the step's latency chain on 512 threads), so the op would take the pipe from 8 or 16.

  PYTHONPATH=src python3 experiments/gdn/pipe_variant.py --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
BUILDS = {"plain": ("gdn_decode_b32", "gdn_decode_b32_smem", "gdn_decode_b32_pipe"),
          "pdl": ("gdn_decode_b32_pdl", "gdn_decode_b32_smem_pdl", "gdn_decode_b32_pipe_pdl")}
# candidates beside the pipe build (gen_gdn_decode_pipe.generate options, the pipe contract), plain only.
# late_second (after the first run at 7c79002, pipe_variant_7c79002.json: the pipe build 43.0 us at B = 32
# plainly against 41.4 for the smem build, but 39.2 against 40.8 as a PDL chain, so its start costs ~4 us
# that a neighbour hides): the first item's head 1 requested only once head 0 has landed. Prediction: plain
# B = 32 43.0 -> 41.5-42.5, B = 16 22.2 -> 21-21.7, B = 8 11.9 -> 10.5-11.3.
# stages=3 (after 362ca3b, pipe_variant_362ca3b.json: late_second gained 0.1-0.9 us at B <= 16 and nothing at
# B = 32, so the start is not what B = 32 pays plainly): three 64 KB stages, the state requested three
# sub-items ahead instead of two. Prediction: B = 32 42.9 -> 41.5-42.5 plain, 39.3-39.6 -> 38-39 as a PDL chain
# (the PDL build), B = 8 unchanged (two sub-items per CTA).
# (measured at 67a3106, pipe_variant_67a3106.json: stages=3 1.3 us slower plainly at B = 32 and the same as a
# PDL chain, 39.24 us: the reads are not late; rejected.) Then (after 67a3106): tma_store (with 3 stages: S back
# into its stage and one thread's cp.async.bulk stores of 64 KB instead of 32 st.global.cs per thread) and
# norm_bar (the gated norm's barrier among warps 0-3 only). Prediction: tma_store B = 32 42.7 -> 41-42 plain,
# 39.2 -> 38-39 as a chain, if the per-thread stores are what keeps the steady state at ~91% of a copy; norm_bar
# 0.1-0.3 us at B = 32 (eight norms per CTA).
# (measured at f904141, pipe_variant_f904141.json: tma_store 42.17 / 41.99 with norm_bar plainly at B = 32, 39.83
# as a chain against the promoted 39.24; norm_bar alone 42.95: none promoted.) Then (after 3109c13: a copy of
# the B = 32 state bytes reaches 93.7% and an in-place pass 92.7%, the pipe's items stream at ~87% of that):
# the cache hints (no evict-first policy on the bulk loads: rd_normal; and no .cs on the stores: nohint), and
# stagger (odd CTAs sleep 2 us, about half a head, before their first item, so the SMs' read / compute / write
# phases are not in step). Prediction: hints within +-0.5 us; stagger 0.5-2 us less at B = 32 if the phases in
# step make the DRAM traffic bursty, else up to 2 us more.
# (measured at f936d85, pipe_variant_f936d85.json: without the evict-first policy on the state's bulk loads B = 32
# 43.13 -> 40.69 us plainly (40.65 without .cs on the stores too), B = 16 22.35 -> 21.57; stagger: no change.)
# The pipe builds are since then generated without that policy (read_hint=False; records at 6cfddfe: B = 32
# 40.53 plain, 37.86 as a PDL chain). Then (after 142a0d2) the earlier candidates again on that base, and the
# smem cluster build without its evict-first policy (smem_nohint: 40.33 at B = 32 in decode_variant_smem_nohint_6cfddfe.json),
# for the plain 80% bar (39.97 us). Prediction: each within +-0.7 us of the pipe build; tma_store the likeliest
# to gain (0.8 us on the evict-first base).
CANDIDATES = {"plain": {"pipe_late": dict(late_second=True), "pipe_s3tn": dict(stages=3, tma_store=True, norm_bar=True),
                        "pipe_nb": dict(norm_bar=True), "smem_nohint": dict(gen="gdn_decode", smem_state=True, smem_hint=False)},
              "pdl": {"pipe_s3tn_pdl": dict(stages=3, tma_store=True, norm_bar=True, pdl=True),
                      "smem_nohint_pdl": dict(gen="gdn_decode", smem_state=True, smem_hint=False, pdl=True)}}


def main():
    from netra import contracts, paths
    from netra.contracts.gdn import PIPE_SMEM
    from netra.lifecycle import bench, check, metrics, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "bitwise": {}, "cases": {}}
    path = os.path.join(out_dir, "pipe_variant.json")
    keep = []
    for kind, names in BUILDS.items():
        gos = {}
        for n in names:
            c = contracts.get(n)
            h = loader.load(n, 0).handle
            gos[n] = (testbeds.get(n),
                      rt_launch.make_guard_and_launch(c, function_handle=h, device=0),
                      rt_launch.make_guard_and_launch(c, function_handle=h, device=0, launch=rt_launch.pdl_launcher()))
        gp = paths.generator("gdn", "gen_gdn_decode_pipe")
        for cand, kw in CANDIDATES[kind].items():
            if kw.get("gen") == "gdn_decode":  # a cluster build of gen_gdn_decode, on the smem build's contract
                kw = {k: v for k, v in kw.items() if k != "gen"}
                c = contracts.get(names[1])
                ptx = paths.generator("gdn", "gen_gdn_decode").generate(name=c.name, **kw)
            else:
                c = dataclasses.replace(contracts.get(names[2]), dynamic_smem=kw.get("stages", 2) * PIPE_SMEM // 2)
                ptx = gp.generate(name=c.name, **kw)
            module, fn = loader.load_text(c.name, ptx, dynamic_smem=c.dynamic_smem)
            keep.append(module)
            gos[cand] = (gos[names[2]][0], rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0),
                         rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0,
                                                         launch=rt_launch.pdl_launcher()))
        ref, pipe = names[0], names[2]
        ok = {n: True for n in gos if n not in names[:2]}
        cases = [(case, seed, False) for case in contracts.get(ref).cases() for seed in (0, 1)] + [({"B": 16, "P": 37}, 2, True)]
        for case, seed, bad in cases:
            outs = {}
            tb = gos[ref][0]
            b = check.Bench(tb, case, seed)  # one set of inputs (the generator's seed depends on the contract name)
            for n in (ref, *ok):
                go = gos[n][1]
                b.reset()
                if bad:
                    b.bufs["slots"][3] = case["P"]
                    b.bufs["slots"][9] = -1
                assert go(*tb.args(b.bufs)) is None, f"{n}: guard refused {case}"
                torch.cuda.synchronize()
                outs[n] = b.results()
            eq = {n: {o: metrics.first_mismatch(outs[ref][o], outs[n][o]) is None for o in outs[ref]} for n in ok}
            for n in ok:
                ok[n] &= all(eq[n].values())
            print(kind, case, "seed", seed, "bad slots" if bad else "", eq, flush=True)
            if bad:
                o = outs[pipe]["out"]
                res[f"{kind} bad slots: NaN rows"] = [int(i) for i in torch.nonzero(o.float().isnan().all(1)).flatten()]
        res["bitwise"][kind] = ok
        json.dump(res, open(path, "w"), indent=1)
        for case in contracts.get(ref).cases():
            row = {}
            for n in gos:
                tb, go, go_pdl = gos[n]
                if not ok.get(n, True):
                    continue
                r = bench.bench_case(tb, case, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
                row[n] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
            res["cases"][f"{kind} {case}"] = row
            print(kind, case, {k: (round(v["us"], 2), round(v["pdl_chain_us"], 2)) for k, v in row.items()}, flush=True)
            json.dump(res, open(path, "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
