"""The residual builds loading h at each strip's start (gen_fp8_gemv.generate(h_early=True)), beside the promoted
builds, by variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds, plain and PDL launches), then both timed by
the bench's method (CUDA-graph replay, inputs and weights rotated past 4x L2), plainly and as a PDL chain.

Why: hot_weights_307cc69.json has moe_down (`fp8_gemv_n2048_k4608_moedown`) 5.25 us as a PDL chain at M = 1 with all
its weights in L2, 0.1 us under cold: its time is its own dependent chain. That chain ends with thread o < 16 M of every
CTA loading its h from global memory after the warps' sums (sum_warps_store -> residual_add), one L2 round trip
(~0.5 us) between the last mma and the kernel's end; out_proj / o_proj's residual build (`fp8_gemv_n2048_k4096_res`)
ends the same way. h is final from griddepcontrol.wait on (the previous kernel wrote it; this thread alone writes it
after), so the load can go at the strip's start, its latency under the strip's chunks and mma (SASS: the LDG.E.U16 before
the first mbarrier wait, none after the last bar.sync). The same arithmetic: the outputs bitwise the promoted kernels'.
Prediction: 0.3-0.6 us less per launch at every M, plainly and as a chain; the batch-1 step 25-45 us less (40 of each).

  PYTHONPATH=src python3 experiments/proj/h_early_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import FUSED, MOE_DOWNS

    keep = {"fp8_gemv_n2048_k4096_res": (1, 2, 8, 9, 16), "fp8_gemv_n2048_k4608_moedown": (1, 2, 3),
            "fp8_gemv_n2048_k4608_moedown_s6": (4, 8)}

    def cases(c):
        return [d for d in c.cases() if d["M"] in keep[c.name]]

    shapes = [(sh, cases) for sh in FUSED + MOE_DOWNS if sh.name in keep]
    assert len(shapes) == len(keep), [sh.name for sh, _ in shapes]
    variant_ab.run("h_early", {"h_early": True}, shapes, variant_ab.out_path("h_early_variant.json", HERE))


if __name__ == "__main__":
    main()
