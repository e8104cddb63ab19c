"""The runner's K = 2048 dense projections (GDN in_proj_qkv | z 12288 x 2048, attention q | k | v 9216 x 2048) for up to
32 rows in one launch (netra.contracts.proj.DENSE32: Fp8Gemv.tokens = 32, one body of 4 n-tiles) against the 16-token
kernels on chunks of 16 rows, as fp8_linear did above 16 rows (each chunk reads the whole weight).

Prediction: M = 32 12288 x 2048 ~18.4 -> ~11-12 us (25 MB once instead of twice, plus the 4-n-tile x prologue and
mma), 9216 x 2048 ~16 -> ~9-10; in the batch-32 step ~0.25 ms (30 + 10 layers). M = 17 about even.

Checks (M = 1, 16, 17, 24, 32; NaN-poisoned out): bitwise the chunks of 16. Times: the bench's method, plain and as
PDL chains.

  PYTHONPATH=src python3 experiments/proj/dense32_variant.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def main():
    from netra import contracts
    from netra.contracts import proj as pc
    from netra.lifecycle import bench, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    out = os.path.join(out_dir, "dense32_variant.json")
    kinds = ({}, {"launch": rt_launch.pdl_launcher()})
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "correctness": {}, "timing_us": {}}
    bits = lambda t: t.contiguous().view(torch.uint16)  # noqa: E731
    ok = True
    for sh in pc.DENSE32:
        base16 = pc.Fp8Gemv(sh.N, sh.K, sh.use).name
        g16 = [rt_launch.make_guard_and_launch(contracts.get(base16), function_handle=loader.load(base16, 0).handle,
                                               device=0, **k) for k in kinds]
        g32 = [rt_launch.make_guard_and_launch(contracts.get(sh.name), function_handle=loader.load(sh.name, 0).handle,
                                               device=0, **k) for k in kinds]
        tb = testbeds.get(sh.name)

        def chunks(i, o, pdl=0):
            M = i["x"].shape[0]
            for lo in range(0, M, 16):
                s = slice(lo, min(M, lo + 16))
                assert g16[pdl](i["x"][s], i["w"], i["scale"], o[s]) is None

        def one(i, o, pdl=0):
            assert g32[pdl](i["x"], i["w"], i["scale"], o) is None

        for M in (1, 16, 17, 24, 32):
            i = tb.make({"M": M}, torch.Generator().manual_seed(60 + M), "cuda")
            outs = []
            for fn in (chunks, one):
                o = torch.full((M, sh.N), float("nan"), dtype=torch.bfloat16, device="cuda")
                fn(i, o)
                torch.cuda.synchronize()
                outs.append(o)
            same = torch.equal(bits(outs[0]), bits(outs[1])) and not outs[1].isnan().any()
            ok &= same
            res["correctness"][f"{sh.name} M={M}"] = same
            print("check", sh.name, M, same, flush=True)
        for M in (16, 17, 24, 32):
            base = {k: v for k, v in tb.make({"M": M}, torch.Generator().manual_seed(5), "cuda").items()
                    if not k.startswith("_")}
            copies = bench.copies_for(sh.N * sh.K)
            ins = [bench.replicate(base) for _ in range(copies)]
            outs = [torch.empty(M, sh.N, dtype=torch.bfloat16, device="cuda") for _ in range(copies)]
            row = {"copies": copies}
            for tag, fn in (("chunks_of_16", chunks), ("t32", one)):
                t, _ = bench.graph_time(lambda k: fn(ins[k], outs[k]), copies)
                tp, _ = bench.graph_time(lambda k: fn(ins[k], outs[k], 1), copies)
                row[tag] = {"us": t, "pdl_chain_us": tp}
            res["timing_us"][f"{sh.name} M={M}"] = row
            print("time", sh.name, M, row, flush=True)
            json.dump(res, open(out, "w"), indent=1)
            ins = outs = None  # noqa: F841
            torch.cuda.empty_cache()
    res["pass"] = ok
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
