"""The FP8 kernels with their activations read by ld.global instead of ld.global.nc after
griddepcontrol.wait (gen_fp8_gemv.generate(coherent_x=True)), beside the promoted builds.
Measured at d0e3321 (coherent_x_variant.json) and 98716c5 (coherent_x_variant_98716c5.json), then
promoted: at a later commit both rows are the same build (`git checkout 98716c5` reproduces it).

Why: .nc is defined only for data that is read-only while the kernel runs; under programmatic
dependent launch the kernel starts while the grid that writes its x is still running. The GDN
kernel's PDL build broke the decode PDL engine's bitwise check that way
(experiments/decode/pdl_gdn_variant.json); these kernels' have not, so far. Coherent loads are
the contract-abiding form; this measures what they cost.

For every FP8 kernel (the seven projections, the norm, residual and gate fusions, the expert
and moe_down kernels) at its contract's first and last case: the candidate's outputs bitwise the
promoted kernel's on the same inputs (NaN-poisoned outputs), then both timed by the bench's
method (CUDA-graph replay, inputs and weights rotated past 4x L2), launched plainly and as a
PDL chain. Prediction: within 0.1 us of the promoted build everywhere (the loads are the same
bytes through L1 instead of the texture path).

  PYTHONPATH=src python3 experiments/proj/coherent_x_variant.py --out "$OUT"
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
    from netra.contracts.proj import EXPERTS, FUSED, MOE_DOWN, SHAPES
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    g = paths.generator("proj", "gen_fp8_gemv")
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "kernels": {}}
    keep = []
    for sh in SHAPES + FUSED + EXPERTS + (MOE_DOWN,):
        c = contracts.get(sh.name)
        tb = testbeds.get(sh.name)
        module, fn = loader.load_text(c.name, g.generate(sh, coherent_x=True), dynamic_smem=c.dynamic_smem)
        keep.append(module)
        go_c = rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0)
        go_c_pdl = rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0, launch=rt_launch.pdl_launcher())
        h = loader.load(c.name, 0).handle
        go_p = rt_launch.make_guard_and_launch(c, function_handle=h, device=0)
        go_p_pdl = rt_launch.make_guard_and_launch(c, function_handle=h, device=0, launch=rt_launch.pdl_launcher())
        cases = c.cases()
        rows = {}
        for case in (cases[0], cases[-1]):
            outs = []
            for go in (go_p, go_c):
                b = check.Bench(tb, case, 0)
                b.reset()
                assert go(*tb.args(b.bufs)) is None
                torch.cuda.synchronize()
                outs.append(b.results())
            same = all(torch.equal(outs[0][n], outs[1][n]) for n in outs[0])
            row = {"bitwise_equal_to_promoted": same}
            for label, go, go_pdl in (("promoted", go_p, go_p_pdl), ("coherent_x", go_c, go_c_pdl)):
                r = bench.bench_case(tb, case, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
                row[label] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
            rows[str(case)] = row
            print(sh.name, case, row, flush=True)
        res["kernels"][sh.name] = rows
        json.dump(res, open(os.path.join(out_dir, "coherent_x_variant.json"), "w"), indent=1)  # after every kernel
    del keep


if __name__ == "__main__":
    main()
