"""A chunk's eight mma per n-tile in two accumulator chains (gen_fp8_gemv.generate(acc_split=True)): the
even k16 steps into one fragment, the odd ones into another, added after the eighth, so the dependent
mma chain after a chunk lands is four deep instead of eight.

Why (trace_v3_m89_8675eaa.json, pipe_rates_fd1020f.json): at 4096 x 2048 a strip takes 581 ns after its
chunk lands at M <= 8 and 844 ns at M > 8, and the conversions run at the integer rate, so the strip's
time is its dependent chain: the chunk's mbarrier, the shared loads, eight mma into one fragment
(HMMA.16816.F32, each waiting for the previous one's result), the scale, the partials' stores, the
barrier, the warps' sum. Halving the mma chain takes ~4 HMMA latencies (~33 cycles each) off every
chunk of every warp. ptxas 13.0.88: 64 -> 100-102 registers at K = 2048 (one CTA of 512 threads per SM
either way), 128 at K = 4096 (unchanged), no spills; the SASS keeps 8 / 16 HMMA per chunk, two chains.
Prediction (written before the run): each strip ~60-70 ns shorter; 4096 x 2048 and 2048 x 4096 M = 1
0.05-0.1 us faster, M = 16 0.1-0.15 (4096 x 2048 M16 / M1 1.16 -> ~1.14); the persistent shapes (12288,
9216, 8192 x 2048: 3-6 strips per CTA) 0.1-0.3 at every M; as PDL chains about the same.

Not bitwise the promoted kernels (the mma's fp32 roundings are another order): each build is checked
against the float64 reference on NaN-poisoned outputs (M = 1, 5, 8, 9, 16 where the contract has them,
2 seeds, launched plainly and as PDL), for 5 bitwise repeats and plain == PDL; then timed beside the
promoted kernel by the bench's method (CUDA-graph replay, >= 16 rotated copies of inputs and weights),
plainly and as a PDL chain.

  PYTHONPATH=src python3 experiments/proj/acc_split_variant.py --out "$OUT"
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CHECK_M = (1, 5, 8, 9, 16)
TIME_M = (1, 8, 9, 16)
LABEL, OPTIONS = "acc_split", {"acc_split": True}


def main():
    import variant_ab

    from netra import contracts, paths
    from netra.contracts.proj import FUSED, SHAPES
    from netra.lifecycle import bench, metrics, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    g = paths.generator("proj", "gen_fp8_gemv")
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "candidate": {LABEL: OPTIONS}, "kernels": {}}
    out = variant_ab.out_path("acc_split_variant.json", HERE)
    keep = []
    for sh in SHAPES + FUSED:
        c, tb = contracts.get(sh.name), testbeds.get(sh.name)
        module, fn = loader.load_text(sh.name, g.generate(sh, **OPTIONS), dynamic_smem=c.dynamic_smem)
        keep.append(module)
        gos = {"promoted": variant_ab.plain_and_pdl(c, loader.load(c.name, 0).handle), LABEL: variant_ab.plain_and_pdl(c, int(fn))}
        rows, firsts = {}, {}
        variant_ab.f64_checks(gos, tb, c, CHECK_M, rows, firsts)
        rows[LABEL + "_check"]["bitwise_promoted"] = all(
            metrics.first_mismatch(firsts[(LABEL, m, s)][n], firsts[("promoted", m, s)][n]) is None
            for (_, m, s) in [k for k in firsts if k[0] == "promoted"] for n in firsts[("promoted", m, s)])
        print(sh.name, rows, flush=True)
        variant_ab.time_rows(gos, tb, c, TIME_M, floors, rows, sh.name)
        res["kernels"][sh.name] = rows
        json.dump(res, open(out, "w"), indent=1)  # after every kernel
    del keep


if __name__ == "__main__":
    main()
