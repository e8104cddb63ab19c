"""Candidate builds of the GDN decode step beside the promoted kernels, measured at 98716c5
(decode_variant.json; `stream` promoted after it, so run at a later commit the promoted row is the
stream build; `git checkout 98716c5` reproduces the JSON):

- `local_qk` (gen_gdn_decode.generate(local_qk=True)): every rank of a cluster convolves all 256
  q and k channels of its key head itself (two per thread; warp 0 also its 32 v channels)
  instead of each rank computing 16 + 16 and pushing them to the 8 ranks by st.async, so the
  critical path loses the fan-out and the wait for the last rank's q and k. Every q/k window now
  has 8 readers and one writer, so the writer stores it after a cluster barrier whose arrive
  follows every rank's conv. 78 registers (72 promoted): 6 CTAs per SM instead of 7.
- `stream` (stream_state=True): the state slice loaded and stored with the .cs cache operator
  (streaming, evict-first). ncu measured the B = 32 kernel at 36.5 us alone and 43 back to back,
  where the previous launch's dirty state lines are written back during it.
- `local_qk_stream`: both.
Each is the same arithmetic as the promoted kernel, so outputs and pools should be bitwise
gdn_decode_b32's (plain builds) and gdn_decode_b32_pdl's (PDL builds); checked at every contract
case, 2 seeds, before timing. Times by the bench's method, launched plainly and as a PDL chain.

Prediction: local_qk: B = 1 4.5 -> ~4.0 us plain, 2.72 -> ~2.3 as a PDL chain (issue 5's 2.5 us
bar); B = 16, 32 within +-5%. stream: B = 1 unchanged; B = 32 43 -> ~39-41 (80% of the state
roofline is 38.7).

  PYTHONPATH=src python3 experiments/gdn/decode_variant.py [BUILD ...] --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
BUILDS = {"local_qk": dict(local_qk=True), "stream": dict(stream_state=True),
          "local_qk_stream": dict(local_qk=True, stream_state=True),
          # after stream's promotion (0bfb57b): the .maxnreg 64 builds again (8 CTAs per SM instead of 7),
          # with z and the norm weight by cp.async (no spill) or without (an 8-byte spill); B = 32 at
          # 78.5% of the state roofline plainly, 79.6% as a PDL chain in the 0bfb57b records (bar: 80%)
          "r64": dict(maxnreg=64), "r64_zn": dict(maxnreg=64, zn_async=True),
          # the slice in shared memory by cp.async (CPU-built after 0bfb57b): 48 registers, 17.7 KB of
          # shared memory, 10 CTAs per SM instead of 7; prediction: B = 32 40.7 -> 36-38 us (the 80% bar
          # is 38.7), B = 1 within +0.3 us (the shared-memory round trip on the critical path)
          "smem": dict(smem_state=True),
          # after the smem builds' promotion (b09d45c): .maxnreg 36 (no spill in either build; 32 and 40 spill
          # 8 bytes, 48 is the promoted count), so 40 registers are allocated per thread: 12 CTAs per SM (shared
          # memory's limit, 18.1 KB each) instead of 10. Prediction: B = 16 21.8 -> 20.5-21 us (2048 CTAs in
          # 1.3 waves instead of 1.55), B = 32 40.6 -> 39.5-40, B = 8 (one wave either way) within +-0.2
          "smem_r36": dict(smem_state=True, maxnreg=36),
          # the smem build launched with the load-balancing cluster scheduling policy (132 resident clusters of 8
          # instead of 124: occupancy_diag.json); the register build at 8 CTAs per SM gained 7% at B = 8 with it
          # and nothing at 16 and 32. Prediction: B = 8 11.6 -> ~11.0 us, B = 16 and 32 within +-0.3
          "smem_lb": dict(smem_state=True),
          # after f936d85 (experiments/gdn/pipe_variant_f936d85.json: the pipe build 2.4 us faster at B = 32 without
          # the evict-first policy on its state loads): the smem build's cp.async without it. Prediction: B = 32
          # 41.4 -> 39.5-41, B = 16 22.1 -> 21.5-22, bitwise
          "smem_nohint": dict(smem_state=True, smem_hint=False)}
LAUNCH = {"smem_lb": "load_balancing"}  # builds launched by cuLaunchKernelEx with this cluster scheduling policy


def main():
    from netra import contracts, paths
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    names = [a for a in sys.argv[1:] if a in BUILDS] or list(BUILDS)
    out_name = "decode_variant.json" if names == list(BUILDS)[:3] else f"decode_variant_{'_'.join(names)}.json"
    g = paths.generator("gdn", "gen_gdn_decode")
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "builds": {n: BUILDS[n] for n in names}, "cases": {}}
    keep = []
    for kname, kw in (("gdn_decode_b32", {}), ("gdn_decode_b32_pdl", {"pdl": True, "name": "gdn_decode_b32_pdl"})):
        c = contracts.get(kname)
        tb = testbeds.get(kname)

        def mk(handle, **k):
            return rt_launch.make_guard_and_launch(c, function_handle=handle, device=0, **k)  # noqa: B023

        h = loader.load(kname, 0).handle
        gos = {"promoted": (mk(h), mk(h, launch=rt_launch.pdl_launcher()))}
        for n in names:
            module, fn = loader.load_text(kname, g.generate(**BUILDS[n], **kw))
            keep.append(module)
            pol = LAUNCH.get(n, "")
            gos[n] = (mk(int(fn), **({"launch": rt_launch.ex_launcher(cluster_policy=pol)} if pol else {})),
                      mk(int(fn), launch=rt_launch.ex_launcher(pdl=True, cluster_policy=pol)))
        same = {n: True for n in names}
        for case in c.cases():
            for seed in (0, 1):
                outs = {}
                for n, (go, _) in gos.items():
                    b = check.Bench(tb, case, seed)
                    b.reset()
                    assert go(*tb.args(b.bufs)) is None
                    torch.cuda.synchronize()
                    outs[n] = b.results()
                for n in names:
                    same[n] &= all(torch.equal(outs["promoted"][o], outs[n][o]) for o in outs[n])
        res[f"{kname} bitwise the promoted"] = same
        print(kname, "bitwise the promoted", same, flush=True)
        for case in c.cases():
            row = {}
            for n, (go, go_pdl) in gos.items():
                if n == "promoted" or same[n]:
                    r = bench.bench_case(tb, case, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
                    row[n] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
            res["cases"][f"{kname} {case}"] = row
            print(kname, case, {k: (round(v["us"], 2), round(v["pdl_chain_us"], 2)) for k, v in row.items()}, flush=True)
            json.dump(res, open(os.path.join(out_dir, out_name), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
