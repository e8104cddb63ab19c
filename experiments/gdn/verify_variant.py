"""Candidate builds of gdn_verify_t16 beside the promoted one, checked and timed the bench's way
at the contract's cases. Writes verify_variants.json to --out (`fast` alone: verify_variant.json,
measured at 1e73224; diagnostics alone: verify_diag.json). Default: g2 g4 g8 (the last measured).

- `fast` (gen_gdn_verify.generate(fast=True)): the per-token reductions alternate shared
  buffers and warp 0's sums of o^2 leave the token loop; same arithmetic, so bitwise the
  promoted kernel. Measured: ~0.06 us less per token, not promoted.
- `w8` (rpw=16): 8 warps of 16 state rows (256 threads) instead of 4 of 32: half the per-token
  chain per thread and twice the warps to interleave; `s4` (split=4): the two per-token sums
  over the thread's rows as 4 independent partial chains; `w8s2`, `w8s4`: both. These change
  the summation order (not bitwise the promoted kernel; checked against float64, and run
  twice for determinism).

Prediction for w8/s4 (ncu: the kernel is one long dependent chain per warp, 4 warps per SM, 9% issue):
w8 ~1.5x faster per token, s4 ~1.2x, w8s4 ~1.7x; T = 16 at B = 1 from ~23 us to ~14-16 us,
near the 3x-T = 1 bar (~15 us). Measured: all slower (verify_variants.json, c138a12).

- `g2`, `g4`, `g8` (group=): the conv, q/k-norm and gated-norm steps branch on T once per group
  of tokens instead of once per token (stores of tokens >= T predicated off) and the norm steps
  emit a group's tokens interleaved; the same arithmetic, so bitwise the promoted kernel.
  Prediction (ncu of the loop build: 42% of T = 16's samples outside the token loop, per-token
  serial chains between branches): T = 16 at B = 1 from ~24 to ~21-22 us, T = 1 within 0.2 us,
  B = 32 T = 4 possibly slower (102 registers: 4 CTAs per SM instead of 5). Measured at
  69e8a73 (kept as verify_groups.json): T = 16 at B = 1 at best 0.4 us faster (g8), every other
  case slower; rejected.

  python3 experiments/gdn/verify_variant.py [NAME ...] --out "$OUT"      (on the H200, PYTHONPATH=src)
"""

import dataclasses
import json
import os
import sys

import torch

from netra import contracts, paths
from netra.lifecycle import bench, check, testbeds
from netra.lifecycle.metrics import rel_err
from netra.runtime import launch as rt_launch
from netra.runtime import loader

C = contracts.get("gdn_verify_t16")
BUILDS = {"fast": dict(fast=True, loop=False), "w8": dict(rpw=16, loop=False), "s4": dict(split=4, loop=False),
          "w8s2": dict(rpw=16, split=2, loop=False), "w8s4": dict(rpw=16, split=4, loop=False),
          "unrolled": dict(loop=False),  # unrolled: the build promoted before the token loop (a0fc824)
          "store_last": dict(diag="store_last"),
          "g2": dict(group=2), "g4": dict(group=4), "g8": dict(group=8)}  # branch on T once per group of tokens
# Diagnostics: the promoted PTX edited to test one hypothesis; timed even though they fail the check.
# store_last: the state slice is stored after the last token only (the per-token rollback states
# are not written). Is the per-token time the 32 state stores per thread per token?


def store_last(ptx: str) -> str:
    a, b = ptx.index("TOKEN_LOOP:"), ptx.index("TOKENS_DONE:")
    body = ptx[a:b]
    n = body.count("  st.global.f32 [%pa+")
    assert n == 32, f"expected the token loop's 32 state stores, found {n}"
    body = body.replace("  st.global.f32 [%pa+", "  @%plast st.global.f32 [%pa+")
    head = "  @%pt bra TOKENS_DONE;\n"
    assert body.count(head) == 1
    body = body.replace(head, head + "  add.u32 %tl, %tt, 1;\n  setp.eq.u32 %plast, %tl, %T;\n")
    decl = "  .reg .pred %p, %pc, %pq, %pw, %pg, %pt, %pbad;\n"
    assert ptx.count(decl) == 1
    return (ptx[:a] + body + ptx[b:]).replace(decl, decl + "  .reg .pred %plast;\n  .reg .b32 %tl;\n")


DIAG = {"store_last": store_last}


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    names = [a for a in sys.argv[1:] if not a.startswith("--") and a != out_dir] or ["g2", "g4", "g8"]  # measured at 69e8a73
    tb = testbeds.get(C.name)
    gen = paths.generator("gdn", "gen_gdn_verify")
    go_prom = rt_launch.make_guard_and_launch(C, function_handle=loader.load(C.name, 0).handle, device=0)
    keep, gos = [], {}
    for name in names:
        kw = dict(BUILDS[name])
        diag = kw.pop("diag", None)
        c2 = dataclasses.replace(C, threads=32 * (128 // kw.get("rpw", 32)))
        text = gen.generate(**kw)
        module, fn = loader.load_text(C.name, DIAG[diag](text) if diag else text)
        keep.append(module)
        gos[name] = (dataclasses.replace(tb, contract=c2), rt_launch.make_guard_and_launch(c2, function_handle=int(fn), device=0))
    res = {"builds": {n: BUILDS[n] for n in names}, "correctness": {}, "timing": {}}
    for case in C.cases():
        key = f"B{case['B']}_T{case['T']}"
        b = check.Bench(tb, case, 0)
        b.reset()
        assert go_prom(*tb.args(b.bufs)) is None
        torch.cuda.synchronize()
        prom = b.results()
        ref = tb.reference(b.original_inputs())
        res["correctness"][key] = {}
        for name, (tb2, go) in gos.items():
            outs = []
            for _ in range(2):
                b2 = check.Bench(tb2, case, 0)
                b2.reset()  # NaN poison
                assert go(*tb2.args(b2.bufs)) is None
                torch.cuda.synchronize()
                outs.append(b2.results())
            r = {n: rel_err(outs[0][n], ref[n]) for n in outs[0]}
            r["deterministic_bitwise"] = all(torch.equal(outs[0][n], outs[1][n]) for n in outs[0])
            r["bitwise_equal_to_promoted"] = all(torch.equal(outs[0][n], prom[n]) for n in outs[0])
            r["pass"] = max(v for k, v in r.items() if isinstance(v, float)) <= C.tolerance and r["deterministic_bitwise"]
            res["correctness"][key][name] = r
            print(key, name, r, flush=True)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    for case in C.cases():
        key = f"B{case['B']}_T{case['T']}"
        row = {"promoted": bench.bench_case(tb, case, go_prom, floors, peers=False, log=print)["median_us"]}
        for name, (tb2, go) in gos.items():
            if BUILDS[name].get("diag") or all(res["correctness"][k][name]["pass"] for k in res["correctness"]):
                row[name] = bench.bench_case(tb2, case, go, floors, peers=False, log=print)["median_us"]
        res["timing"][key] = row
        print(key, {k: round(v, 2) for k, v in row.items()}, flush=True)
    out = ("verify_variant.json" if names == ["fast"] else "verify_diag.json" if all(BUILDS[n].get("diag") for n in names)
           else "verify_variants.json")
    json.dump({"method": bench.METHOD.format(R=bench.REPLAYS), **res}, open(os.path.join(out_dir, out), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
