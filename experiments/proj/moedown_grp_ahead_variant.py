"""The grouped moe_down (fp8_gemv_n2048_k4608_moedown_grp) with its warps' next strips asked of L2 ahead, and with h
loaded after the wait (gen_moe_down_grp.down(l2_ahead=D, h_early=...)), against the promoted build, each after the same
moe_act_i512. Assembled here from the generator, not registered.

Why: each warp of the grouped kernel holds one 8 KB stage and requests its next task's strip only once it has read the
current one, so per task it waits a whole DRAM round trip under load; at 32 tokens a warp walks ~10 tasks, at 8 ~4, and
the last round has only some of the 16 warps busy. ncu (`ncu/moe_summary_601a1d9.txt`) had the kernel at 72% of its DRAM
peak at M = 32 with 78% of cycles without an eligible warp; the records: 48.7 us at M = 32 for ~172 MB (~40 us of bytes),
19.7 at M = 8 for ~61 MB (~14). With l2_ahead = D the strips of a warp's next D tasks are already on their way to L2
while it works, so its next copy hits L2. h_early takes the h load (one L2 round trip) off the tail after the sums.
Prediction (us, promoted -> candidate, as PDL chains): l2_ahead = 1 M = 32 48.7 -> 43-46, M = 16 30 -> 27-29, M = 8
19.7 -> 16-18, M = 2 level (one task a warp); D = 2 no better than 1 at M = 32 (the L2 holds the extra 16 MB, but DRAM is
the limit there); h_early 0.3-0.6 less at every M.

Checks (M in CHECK_M, 2 seeds, NaN-poisoned out and xa, the same h): out and h bitwise the promoted build's, also planted
ids (a token repeating an expert, an id of E) and every token on token 0's experts. Times: the bench's method (CUDA-graph
replay, CUDA events, at least 16 rotated copies of every input including the 268 MB expert stack, median of the bench's
replays), plain and as PDL chains; the promoted build timed first and last.

  PYTHONPATH=src python3 experiments/proj/moedown_grp_ahead_variant.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from netra import paths

HERE = Path(__file__).resolve().parent
CHECK_M = (1, 2, 5, 8, 9, 16, 17, 32)
TIME_M = (2, 4, 8, 16, 32)
BUILDS = {"promoted": {}, "h_early": {"h_early": True}, "ahead1": {"l2_ahead": 1}, "ahead2": {"l2_ahead": 2},
          "ahead1_h_early": {"l2_ahead": 1, "h_early": True}}


def main():
    from netra.contracts import proj as pc
    from netra.lifecycle import bench
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    out = os.path.join(out_dir, "moedown_grp_ahead_variant.json")
    gen = paths.generator("proj", "gen_moe_down_grp")
    ca, cg = pc.MOE_ACT, pc.MOE_DOWN_GRP_CONTRACT
    assert gen.down() == paths.ptx_path("sm_90a", "proj", cg.name).read_text(), "the promoted build is the committed PTX"
    kinds = ({}, {"launch": rt_launch.pdl_launcher()})
    ma, fa = loader.load_text(ca.name, gen.act(), dynamic_smem=0)
    act = [rt_launch.make_guard_and_launch(ca, function_handle=int(fa), device=0, **k) for k in kinds]
    mods, grp = [ma], {}
    for name, kw in BUILDS.items():
        m, f = loader.load_text(cg.name, gen.down(**kw), dynamic_smem=cg.dynamic_smem)
        mods.append(m)
        grp[name] = [rt_launch.make_guard_and_launch(cg, function_handle=int(f), device=0, **k) for k in kinds]
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "builds": BUILDS, "correctness": {}, "timing_us": {}}
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    grpv = paths.load_module(HERE / "moedown_grp_variant.py", "moedown_grp_variant")
    draw, bufs_for, timing_copies = grpv.draw, grpv.bufs_for, grpv.timing_copies

    def pair(name):
        def go(i, b, pdl=0):
            assert act[pdl](i["x"], i["top"], i["xs"], i["glogit"], b["xa"], b["xm"]) is None
            r = grp[name][pdl](b["xa"], i["w"], i["scale"], b["h"], i["ids"], i["ws"], i["ss"], b["xm"], b["out"])
            assert r is None, r
        return go

    def run(fn, i, pdl=0):
        b = bufs_for(i)
        b["out"].fill_(float("nan"))
        b["xa"].fill_(float("nan"))
        b["xm"].fill_(float("nan"))
        fn(i, b, pdl)
        torch.cuda.synchronize()
        return b

    ok = True
    for M in CHECK_M:
        row = {n: True for n in BUILDS if n != "promoted"}
        for seed in range(2):
            i = draw(M, seed)
            for vname, v in grpv.id_variants(i["ids"]).items():
                i["ids"].copy_(v)
                want = run(pair("promoted"), i)
                assert want["out"].isnan().sum() == (2048 if vname == "planted" else 0), "promoted: unwritten rows"
                for n in row:
                    for pdl in (0, 1):
                        got = run(pair(n), i, pdl)
                        same = all(torch.equal(bits(got[k]), bits(want[k])) for k in ("out", "h"))
                        if not same:
                            row.setdefault("differs", []).append(f"{n} seed {seed} {vname} pdl {pdl}")
                        row[n] &= same
            del i
        for n in BUILDS:
            if n != "promoted":
                ok &= row[n]
        res["correctness"][f"M={M}"] = row
        print("check", M, row, flush=True)
        json.dump(res, open(out, "w"), indent=1)
    res["pass"] = ok
    order = list(BUILDS) + ["promoted_again"]
    for M in TIME_M:
        base, copies, ins, bs = timing_copies(M)
        row = {"copies": copies, "distinct_experts": int(base["ids"].unique().numel()), "scrub_wait_s": bench.settle()}
        for tag in order:
            fn = pair(tag.replace("_again", ""))
            t, _ = bench.graph_time(lambda k: fn(ins[k], bs[k]), copies)
            tp, _ = bench.graph_time(lambda k: fn(ins[k], bs[k], 1), copies)
            row[tag] = {"us": t, "pdl_chain_us": tp}
        res["timing_us"][f"M={M}"] = row
        print("time", M, json.dumps(row), flush=True)
        json.dump(res, open(out, "w"), indent=1)
        ins = bs = None  # noqa: F841  (free the copies before the next M)
        bench.release()
    print("pass", ok)
    del mods


if __name__ == "__main__":
    main()
