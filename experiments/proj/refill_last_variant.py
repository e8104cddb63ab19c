"""The promoted builds with each strip's refill issued by the last warp's lane 0 instead of thread 0
(`gen_fp8_gemv.generate(refill_last=True)`) beside the promoted builds, by variant_ab.run: bitwise check on NaN-poisoned
inputs (2 seeds, plain and PDL launches), then both timed by the bench's method (CUDA-graph replay, >= 16 rotated copies
of inputs and weights), plainly and as a PDL chain.

Why: early_release (`early_release_variant_*.json`) put one more barrier in each strip and lost 15% at M = 32, and
grp_transpose's ~330 more cycles on thread 0's refill path lost 16%. So each strip's time follows the slowest warp to its
barrier, and warp 0 is that warp: after the partials' barrier it issues the refill (a shared-table load, the address
math, the expect_tx and the bulk copies) and then sums outputs 0..31 with warp 0's lanes. The last warp sums only when
M > 30. Prediction: the grouped gate | up 3-8% faster at M = 8 and 16, less at 24, level at 32; the dense builds 0-3% at
M = 1 (warp 0 sums 16 outputs) and more at M = 8 and 16.

  PYTHONPATH=src python3 experiments/proj/refill_last_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MS = {"fp8_gemv_n1024_k2048_moe_shared_grp": (8, 16), "fp8_gemv_n1024_k2048_moe_shared_grp_t32": (24, 32),
      "fp8_gemv_n12288_k2048_norm_ba": (1, 8), "fp8_gemv_n12288_k2048": (1, 16), "fp8_gemv_n2048_k4096_res": (1, 8),
      "fp8_gemv_n2048_k512": (1, 16)}


def main():
    import variant_ab

    cases = variant_ab.cases_at(MS)

    variant_ab.run("refill_last", {"refill_last": True}, [(sh, cases) for sh in variant_ab.shapes_named(MS)],
                   variant_ab.out_path("refill_last_variant.json", HERE))


if __name__ == "__main__":
    main()
