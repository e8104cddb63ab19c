"""The expert kernels (the routed gate | up and down, moe_down) with their expert ids read and every
stage's weight chunks requested before griddepcontrol.wait (gen_fp8_gemv.generate(ids_early=True)),
beside the promoted builds, which read the ids and request every chunk after the wait.

Why: in the decode chain the expert kernels cannot start their weight reads before the wait,
because the ids are the router's output; by bytes they run at 52% (gate | up) and 38% (moe_down)
of the roofline at M = 1 (docs/notes/decode.md). With the MoE block ordered router -> shared
gate | up -> experts -> moe_down, the router is two or three grids back: it has completed before
the previous kernel's wait returned, and that kernel triggers only after its wait, so the ids are
final when an expert kernel starts under PDL, and its weights can stream during the previous
kernel. Launched plainly the build is always valid. Here each kernel is timed alone (its ids made
beforehand), plainly and as a chain of PDL launches of itself, which is what the pre-wait work
overlaps in a chain.

For each kernel at M = 1, 8 (and 16 for gate | up): the candidate's outputs bitwise the promoted
kernel's on the same inputs (NaN-poisoned outputs), then both timed by the bench's method
(CUDA-graph replay, inputs and weights rotated past 4x L2). Prediction: plain within +-0.3 us
(x's loads now queue behind the chunks), PDL chain 1-2 us less at M = 1 (the ids' L2 round trip
and the first chunks' DRAM latency leave the critical path).

  PYTHONPATH=src python3 experiments/proj/ids_early_variant.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def main():
    from netra import contracts, paths
    from netra.contracts.proj import EXPERTS, MOE_DOWN, NUM_EXPERTS
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    g = paths.generator("proj", "gen_fp8_gemv")
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "kernels": {}}
    keep = []
    for sh, Ms in ((EXPERTS[0], (1, 8, 16)), (EXPERTS[1], (1, 8)), (MOE_DOWN, (1, 8))):
        c = contracts.get(sh.name)
        tb = testbeds.get(sh.name)
        module, fn = loader.load_text(c.name, g.generate(sh, ids_early=True), dynamic_smem=c.dynamic_smem)
        keep.append(module)
        mk = lambda h, **k: rt_launch.make_guard_and_launch(c, function_handle=h, device=0, **k)  # noqa: E731, B023
        h = loader.load(c.name, 0).handle
        gos = {"promoted": (mk(h), mk(h, launch=rt_launch.pdl_launcher())),
               "ids_early": (mk(int(fn)), mk(int(fn), launch=rt_launch.pdl_launcher()))}
        rows = {}
        for M in Ms:
            case = {"M": M, "E": NUM_EXPERTS}
            outs = []
            for go in (gos["promoted"][0], gos["ids_early"][0], gos["ids_early"][1]):
                for seed in (0, 1):
                    b = check.Bench(tb, case, seed)
                    b.reset()
                    assert go(*tb.args(b.bufs)) is None
                    torch.cuda.synchronize()
                    outs.append(b.results())
            bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731  (a NaN row, for a bad id, equals itself)
            same = all(torch.equal(bits(outs[i][n]), bits(outs[j][n])) for n in outs[0] for i, j in ((0, 2), (1, 3), (0, 4), (1, 5)))
            row = {"bitwise_equal_to_promoted": same,
                   "finite": all(bool(torch.isfinite(v.float()).all()) for v in outs[0].values() if v.is_floating_point())}
            for label, (go, go_pdl) in gos.items():
                r = bench.bench_case(tb, case, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
                row[label] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
            rows[str(M)] = row
            print(sh.name, case, row, flush=True)
        res["kernels"][sh.name] = rows
        json.dump(res, open(os.path.join(out_dir, "ids_early_variant.json"), "w"), indent=1)  # after every kernel
    del keep


if __name__ == "__main__":
    main()
