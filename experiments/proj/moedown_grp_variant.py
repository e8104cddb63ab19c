"""moe_down once per distinct expert (moe_act_i512, then fp8_gemv_n2048_k4608_moedown_grp: gen_moe_down_grp.py)
against the promoted path (the moe_down op: fp8_gemv_n2048_k4608_moedown, _s6 from 4 rows, 8 tokens per launch).
CPU-built, not registered: this script assembles both kernels from the generator and launches them.

Why: the promoted kernel reads each token's 9 experts, so a shared expert is read once per token and the shared
expert once per token: at 32 tokens ~302 MB per layer against ~164 MB of distinct experts (uniform routing).
Prediction (bytes at the promoted kernel's rate; moe_act ~2-3 us): M = 32 ~89 -> 45-50 us, M = 16 ~45 -> 28-32,
M = 8 ~22 -> 20-23, M = 1 ~6 -> 8 (no sharing to gain, one more launch).

Checks (M = 1..32, 2 seeds, NaN-poisoned out and the same h, plain launches): out and h bitwise the op's; also
planted ids (a token repeating an expert, an id of E: that token's rows NaN) and every token on token 0's experts.
Times: the bench's method (CUDA-graph replay, CUDA events, at least 16 rotated copies of every input including
the 268 MB expert stack), plain and as PDL chains (each launch of both paths with programmatic serialization).

  PYTHONPATH=src python3 experiments/proj/moedown_grp_variant.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from netra import paths

HERE = Path(__file__).resolve().parent
CHECK_M = (1, 2, 3, 5, 8, 9, 12, 16, 17, 24, 31, 32)
TIME_M = (1, 4, 8, 16, 24, 32)


def draw(M: int, seed: int) -> dict:
    """A moe_down test bed's inputs on the GPU (the bench's draw: uniform expert ids)."""
    from netra.lifecycle import testbeds

    return testbeds._make_moe_down({"M": M, "E": 256}, torch.Generator().manual_seed(1000 * M + seed), "cuda")


def bufs_for(i: dict) -> dict:
    """The grouped pair's buffers for inputs ``i``: moe_act's xa and xm, out, and a copy of h."""
    M = i["x"].shape[0]
    return {"xa": torch.empty(M, 9 * 512, dtype=torch.float16, device="cuda"),
            "xm": torch.empty(M, 36, dtype=torch.float32, device="cuda"),
            "out": torch.empty(M, 2048, dtype=torch.bfloat16, device="cuda"), "h": i["h"].clone()}


def id_variants(ids: torch.Tensor) -> dict:
    """The expert-id tables each check runs: as drawn; from 2 tokens also planted (token 1 repeating an expert, the
    last token's first id E: that token's rows NaN) and few (every token on token 0's experts)."""
    M = ids.shape[0]
    out = {"drawn": ids.clone()}
    if M >= 2:
        planted = ids.clone()
        planted[1, 5] = planted[1, 2]  # a token repeating an expert
        planted[M - 1, 0] = 256  # not an expert: that token's rows NaN
        out["planted"] = planted
        few = ids.clone()
        few[:, :] = ids[0][None, :]
        out["few"] = few
    return out


def timing_copies(M: int) -> tuple:
    """(inputs, copies, input copies, buffer copies) for timing at M: enough rotated copies of every input, the 268 MB
    expert stack included, to pass 4x the L2 (netra.lifecycle.bench.copies_for)."""
    from netra.lifecycle import bench

    base = {k: v for k, v in draw(M, 5).items() if not k.startswith("_")}
    copies = bench.copies_for(M * 9 * (2048 * 512) + M * 4 * 1024 * 9)
    ins = [bench.replicate(base) for _ in range(copies)]
    return base, copies, ins, [bufs_for(x) for x in ins]


def main():
    from netra.contracts import proj as pc
    from netra.lifecycle import bench
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    out = os.path.join(out_dir, "moedown_grp_variant.json")
    gen = paths.generator("proj", "gen_moe_down_grp")
    ca, cg = pc.MOE_ACT, pc.MOE_DOWN_GRP_CONTRACT
    ma, fa = loader.load_text(ca.name, gen.act(), dynamic_smem=0)
    mg, fg = loader.load_text(cg.name, gen.down(), dynamic_smem=cg.dynamic_smem)
    kinds = ({}, {"launch": rt_launch.pdl_launcher()})
    act = [rt_launch.make_guard_and_launch(ca, function_handle=int(fa), device=0, **k) for k in kinds]
    grp = [rt_launch.make_guard_and_launch(cg, function_handle=int(fg), device=0, **k) for k in kinds]
    prom = {}
    for sh in pc.MOE_DOWNS:
        prom[sh.name] = [rt_launch.make_guard_and_launch(pc._contract_moe_down(sh), function_handle=loader.load(sh.name, 0).handle,
                                                         device=0, **k) for k in kinds]
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "kernels": [ca.name, cg.name], "correctness": {},
           "timing_us": {}}
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731

    def cand(i, b, pdl=0):
        assert act[pdl](i["x"], i["top"], i["xs"], i["glogit"], b["xa"], b["xm"]) is None
        r = grp[pdl](b["xa"], i["w"], i["scale"], b["h"], i["ids"], i["ws"], i["ss"], b["xm"], b["out"])
        assert r is None, r

    def promoted(i, b, pdl=0):
        M = i["x"].shape[0]
        go = prom[(pc.MOE_DOWN_S6 if M >= pc.MOE_DOWN_WIDE_M else pc.MOE_DOWN).name][pdl]
        for lo in range(0, M, 8):
            s = slice(lo, min(M, lo + 8))
            r = go(i["x"][s], i["w"], i["scale"], b["h"][s], i["ids"][s], i["top"][s], i["xs"][s], i["ws"], i["ss"],
                   i["glogit"][s], b["out"][s])
            assert r is None, r

    def run(fn, i):
        b = bufs_for(i)
        b["out"].fill_(float("nan"))
        b["xa"].fill_(float("nan"))
        b["xm"].fill_(float("nan"))
        fn(i, b)
        torch.cuda.synchronize()
        return b

    ok = True
    for M in CHECK_M:
        row = {"bitwise": True}
        for seed in range(2):
            i = draw(M, seed)
            for name, v in id_variants(i["ids"]).items():
                i["ids"].copy_(v)
                want, got = run(promoted, i), run(cand, i)
                same = all(torch.equal(bits(got[k]), bits(want[k])) for k in ("out", "h"))
                row["bitwise"] &= same
                if not same:
                    d = (got["out"].float() - want["out"].float()).abs()
                    row.setdefault("differs", []).append(
                        f"seed {seed} {name}: out elements differing {int((bits(got['out']) != bits(want['out'])).sum())}, "
                        f"max abs {float(d[d == d].max()) if (d == d).any() else 'nan'}, "
                        f"NaN out cand {int(got['out'].isnan().sum())} prom {int(want['out'].isnan().sum())}")
                if name == "planted":
                    row["planted_nan_only_there"] = bool(got["out"][M - 1].isnan().all()
                                                         and not got["out"][:M - 1].isnan().any())
            del i
        ok &= row["bitwise"]
        res["correctness"][f"M={M}"] = row
        print("check", M, row, flush=True)
        json.dump(res, open(out, "w"), indent=1)
    res["pass"] = ok
    for M in TIME_M:
        base, copies, ins, bs = timing_copies(M)
        row = {"copies": copies, "distinct_experts": int(base["ids"].unique().numel())}
        for tag, fn in (("promoted", promoted), ("candidate", cand)):
            t, _ = bench.graph_time(lambda k: fn(ins[k], bs[k]), copies)
            tp, _ = bench.graph_time(lambda k: fn(ins[k], bs[k], 1), copies)
            row[tag] = {"us": t, "pdl_chain_us": tp}
        res["timing_us"][f"M={M}"] = row
        print("time", M, row, flush=True)
        json.dump(res, open(out, "w"), indent=1)
        ins = bs = None  # noqa: F841  (free the copies before the next M)
        torch.cuda.empty_cache()
    del ma, mg


if __name__ == "__main__":
    main()
