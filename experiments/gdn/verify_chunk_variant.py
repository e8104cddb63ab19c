"""Verification in the chunk form with restore data (kernels/sm_90a/gdn/gen_gdn_verify_chunk.py and
gen_gdn_commit.py; candidates here until promoted after the run of verify_chunk_variant.json),
checked and timed against the sequential gdn_verify_t16. The contracts and test beds are the
promoted ones (netra.contracts.gdn, netra.lifecycle.testbeds); the builds are generate()'s
variants: v4 (4 warps), v4f (and silu by div.full: promoted as gdn_verify_chunk_t16), v8 (8
warps), v8f (promoted as gdn_verify_chunk_t16_w8, the op's choice at B = 1).

The promoted kernel runs the sequential rule token by token (a serial chain of ~1.2 us per
token at B = 1) and writes the state after every token to its own slot (2 MiB per token per
sequence). The candidate reads the state once, computes every token's delta and output from
S_0^T k_t, S_0^T q_t and the 16 x 16 Gram products (one FMA per (t, s) pair left serial), and
writes per token only k, delta and the decay (24 KB per sequence). gdn_commit_t16 then writes
the accepted prefix's state and conv window into a slot (one read and one write of the state).

Checks, at the contract cases (B, T) = (1, 1), (1, 4), (1, 16), (4, 16), (32, 4), 2 seeds:
- verify_chunk against netra.reference.gdn.verify_restore (float64, the sequential rule): out,
  ksave, dsave, gsave; NaN-poisoned outputs; two runs bitwise equal;
- commit against netra.reference.gdn.commit (float64 on the same restore data): both pools;
- end to end: verify_chunk then commit with accepted counts 0, 1, T // 2, T (per sequence,
  mixed), the slot's state and window against the sequential float64 state after j tokens
  (netra.reference.gdn.verify_steps), and with a slot id outside the pool (NaN out, pools
  untouched).
Timing (netra.lifecycle.bench.bench_case: CUDA-graph replay, inputs rotated past 4x L2,
median): verify_chunk, commit, and the promoted gdn_verify_t16 in the same run.

Prediction (written before the run): B = 1, T = 1 ~4 us (the state read, as the decode kernel);
T = 16 ~6-8 us (<= 2x T = 1: the 3x bar); commit ~4-5 us at B = 1; B = 32, T = 4 slower than it
should be (130 registers: 3 CTAs per SM).

  PYTHONPATH=src python3 experiments/gdn/verify_chunk_variant.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
from netra import paths  # noqa: E402
from netra.contracts import gdn as G  # noqa: E402

CASES = G.VERIFY_CASES
VERIFY, COMMIT = G.GDN_VERIFY_CHUNK_T16, G.GDN_COMMIT_T16


def testbeds():
    from netra.lifecycle import testbeds as tbs

    return tbs.get(VERIFY.name), tbs.get(COMMIT.name)


VARIANTS = {"v4": dict(nw=4), "v4f": dict(nw=4, fast_silu=True), "v8": dict(nw=8), "v8f": dict(nw=8, fast_silu=True)}


def main():
    import dataclasses

    from netra import contracts
    from netra.lifecycle import bench, check
    from netra.lifecycle import testbeds as tbs
    from netra.lifecycle.metrics import rel_err
    from netra.reference import gdn as rg
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    names = [a for a in sys.argv[1:] if a in VARIANTS] or list(VARIANTS)
    tv, tc = testbeds()
    keep, go, beds = [], {}, {}
    gv = paths.generator("gdn", "gen_gdn_verify_chunk")
    for n in names:
        c = dataclasses.replace(VERIFY, threads=32 * VARIANTS[n]["nw"])
        module, fn = loader.load_text(c.name, gv.generate(**VARIANTS[n]))
        keep.append(module)
        go[n] = rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0)
        beds[n] = dataclasses.replace(tv, contract=c)
    gc = paths.generator("gdn", "gen_gdn_commit")
    module, fn = loader.load_text(COMMIT.name, gc.generate())
    keep.append(module)
    go["commit"] = rt_launch.make_guard_and_launch(COMMIT, function_handle=int(fn), device=0)
    beds["commit"] = tc
    res = {"variants": {n: VARIANTS[n] for n in names}, "correctness": {}, "end_to_end": {}, "timing_us": {}}
    ok = {n: True for n in [*names, "commit"]}
    for case in CASES:
        for seed in (0, 1):
            refs = {}
            for n in [*names, "commit"]:
                tb = beds[n]
                outs = []
                for _ in range(2):
                    b = check.Bench(tb, case, seed)
                    b.reset()
                    reason = go[n](*tb.args(b.bufs))
                    assert reason is None, reason
                    torch.cuda.synchronize()
                    outs.append(b.results())
                kind = "commit" if n == "commit" else "verify"
                if kind not in refs:
                    refs[kind] = tb.reference(b.original_inputs())
                ref = refs[kind]
                r = {k: rel_err(outs[0][k], ref[k]) for k in outs[0]}
                r["bitwise_repeat"] = all(torch.equal(outs[0][k], outs[1][k]) for k in outs[0])
                r["pass"] = max(v for v in r.values() if isinstance(v, float)) <= G.GDN_TOL and r["bitwise_repeat"]
                ok[n] &= r["pass"]
                res["correctness"][f"{n} B{case['B']} T{case['T']} seed {seed}"] = r
                print(n, case, seed, r, flush=True)
    # end to end: each verify variant, then the commit, against the sequential float64 states
    for case in CASES:
        B, T = case["B"], case["T"]
        seq = None
        for n in names:
            b = check.Bench(beds[n], case, 7)
            b.reset()
            assert go[n](*beds[n].args(b.bufs)) is None
            ins = b.original_inputs()
            if seq is None:
                seq = rg.verify_steps(ins["qkv"], ins["z"], ins["b_in"], ins["a_in"], ins["conv_w"], ins["a_log"],
                                      ins["dt_bias"], ins["norm_w"], ins["conv_pool"], ins["state_pool"], ins["slot_in"],
                                      ins["slots_out"], 16, 1e-6)
            for js in sorted({0, 1, T // 2, T}):
                acc = torch.tensor([(js + i) % (T + 1) for i in range(B)], device="cuda")
                conv, state = ins["conv_pool"].clone(), ins["state_pool"].clone()
                so = ins["slots_out"][:, 0].contiguous()
                args = dict(qkv=ins["qkv"], conv_pool=conv, state_pool=state, slot_in=ins["slot_in"], slot_out=so,
                            accepted=acc, ksave=b.bufs["ksave"], dsave=b.bufs["dsave"], gsave=b.bufs["gsave"])
                assert go["commit"](*tc.args(args)) is None
                torch.cuda.synchronize()
                es, ec = 0.0, True
                for i in range(B):
                    j = int(acc[i])
                    want = ins["slot_in"][i] if j == 0 else ins["slots_out"][i, j - 1]
                    es = max(es, rel_err(state[so[i]], seq["state_pool"][want]))
                    ec &= torch.equal(conv[so[i]], seq["conv_pool"][want] if j else ins["conv_pool"][want])
                key = f"{n} B{B} T{T} accepted from {js}"
                res["end_to_end"][key] = {"state_rel_err": es, "conv_bitwise": bool(ec),
                                          "out_rel_err": rel_err(b.bufs["out"], seq["out"])}
                ok[n] &= es <= G.GDN_TOL and ec
                print("end to end", key, res["end_to_end"][key], flush=True)
    # a slot id outside the pool: NaN outputs
    for n in names:
        bad = check.Bench(beds[n], CASES[1], 3)
        bad.reset()
        bad.bufs["slot_in"][0] = CASES[1]["P"] + 5
        assert go[n](*beds[n].args(bad.bufs)) is None
        torch.cuda.synchronize()
        res[f"{n} bad_slot_out_all_nan"] = nan = bool(torch.isnan(bad.bufs["out"].float()).all())
        ok[n] &= nan
    # timing, with the promoted kernel in the same run
    tp = tbs.get("gdn_verify_t16")
    go_p = rt_launch.make_guard_and_launch(tp.contract, function_handle=loader.load("gdn_verify_t16", 0).handle, device=0)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    assert contracts.get("gdn_verify_t16").cases() == [dict(c) for c in CASES]
    for case in CASES:
        key = f"B{case['B']} T{case['T']}"
        row = {"gdn_verify_t16 (promoted)": bench.bench_case(tp, case, go_p, floors, peers=False, log=print)["median_us"]}
        for n in [*names, "commit"]:
            if ok[n]:
                row[n] = bench.bench_case(beds[n], case, go[n], floors, peers=False, log=print)["median_us"]
        res["timing_us"][key] = row
        print(key, {k: round(v, 2) for k, v in row.items()}, flush=True)
    res["pass"] = ok
    json.dump({"method": bench.METHOD.format(R=bench.REPLAYS), **res},
              open(os.path.join(out_dir, "verify_chunk_variant.json"), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
