"""The routed gate | up once per distinct expert for up to 32 tokens in one launch (fp8_gemv_n1024_k2048_moe_grp_t32:
Fp8Gemv.tokens = 32, one body of 4 n-tiles) against the 16-token build (fp8_gemv_n1024_k2048_moe_grp) launched on
chunks of at most 16 rows, as fp8_linear_experts did above 16 rows.

Why: a batch of 32 ran the grouped kernel twice, each launch reading its own distinct experts: ~2 x 101 (uniform
routing) where the batch's distinct experts are ~164. Prediction: M = 32 ~120 -> ~95-100 us (bytes, at the 16-token
build's rate; the x prologue of 4 n-tiles and the second n-tile pair's mma cost a few us), M = 17..24 a smaller gain,
M <= 16 slower (the runner keeps the 16-token build there).

Checks (M = 1, 9, 16, 17, 24, 31, 32; drawn ids, a token repeating an expert, an id of E, every token on one token's
experts; NaN-poisoned out): bitwise the 16-token build's chunks. Times: the bench's method, plain and as PDL chains.

  PYTHONPATH=src python3 experiments/proj/experts_group32_variant.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
CHECK_M = (1, 9, 16, 17, 24, 31, 32)
TIME_M = (16, 17, 24, 32)


def main():
    from netra import contracts
    from netra.contracts import proj as pc
    from netra.lifecycle import bench, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    out = os.path.join(out_dir, "experts_group32_variant.json")
    kinds = ({}, {"launch": rt_launch.pdl_launcher()})
    g16 = [rt_launch.make_guard_and_launch(contracts.get(pc.EXPERTS_GROUP.name),
                                           function_handle=loader.load(pc.EXPERTS_GROUP.name, 0).handle, device=0, **k)
           for k in kinds]
    g32 = [rt_launch.make_guard_and_launch(contracts.get(pc.EXPERTS_GROUP32.name),
                                           function_handle=loader.load(pc.EXPERTS_GROUP32.name, 0).handle, device=0, **k)
           for k in kinds]
    tb = testbeds.get(pc.EXPERTS_GROUP32.name)
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "correctness": {}, "timing_us": {}}
    bits = lambda t: t.contiguous().view(torch.uint16)  # noqa: E731

    def chunks(i, out, ids, pdl=0):
        M = i["x"].shape[0]
        for lo in range(0, M, 16):
            s = slice(lo, min(M, lo + 16))
            assert g16[pdl](i["x"][s], i["w"], i["scale"], out[s], ids[s]) is None

    def one(i, out, ids, pdl=0):
        assert g32[pdl](i["x"], i["w"], i["scale"], out, ids) is None

    ok = True
    for M in CHECK_M:
        i = tb.make({"M": M, "E": 256}, torch.Generator().manual_seed(40 + M), "cuda")
        row = {"bitwise": True}
        variants = {"drawn": i["ids"]}
        if M >= 2:
            p = i["ids"].clone()
            p[1, 5] = p[1, 2]
            p[M - 1, 0] = 256
            variants["planted"] = p
            variants["few"] = i["ids"][:1].repeat(M, 1)
        for name, ids in variants.items():
            outs = []
            for fn in (chunks, one):
                o = torch.full((M, 8, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
                fn(i, o, ids)
                torch.cuda.synchronize()
                outs.append(o)
            same = torch.equal(bits(outs[0]), bits(outs[1]))
            row["bitwise"] &= same
            if not same:
                row.setdefault("differs", []).append(f"{name}: {int((bits(outs[0]) != bits(outs[1])).sum())} elements")
        ok &= row["bitwise"]
        res["correctness"][f"M={M}"] = row
        print("check", M, row, flush=True)
        json.dump(res, open(out, "w"), indent=1)
    res["pass"] = ok
    for M in TIME_M:
        base = {k: v for k, v in tb.make({"M": M, "E": 256}, torch.Generator().manual_seed(5), "cuda").items()
                if not k.startswith("_")}
        copies = bench.copies_for(M * 8 * 1024 * 2048)
        ins = [bench.replicate(base) for _ in range(copies)]
        outs = [torch.empty(M, 8, 1024, dtype=torch.bfloat16, device="cuda") for _ in range(copies)]
        row = {"copies": copies, "distinct_experts": int(base["ids"].unique().numel())}
        for tag, fn in (("chunks_of_16", chunks), ("t32", one)):
            t, _ = bench.graph_time(lambda k: fn(ins[k], outs[k], ins[k]["ids"]), copies)
            tp, _ = bench.graph_time(lambda k: fn(ins[k], outs[k], ins[k]["ids"], 1), copies)
            row[tag] = {"us": t, "pdl_chain_us": tp}
        res["timing_us"][f"M={M}"] = row
        print("time", M, row, flush=True)
        json.dump(res, open(out, "w"), indent=1)
        ins = outs = None  # noqa: F841
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
