"""One-chunk builds with each stage refilled once every warp has read it (`gen_fp8_gemv.generate(early_release=True)`)
beside the promoted builds, by variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds, plain and PDL launches),
then both timed by the bench's method (CUDA-graph replay, >= 16 rotated copies of inputs and weights), plainly and as
a PDL chain.

Why: the grouped gate | up's copies alone (`../runtime/stride_read.py`, U = 162: batch 32's walk) move 4.45 TB/s where
the kernel moves 3.66, and ~330 cycles more on each strip's refill path (the grp_transpose candidate's mapping) cost it
16% at M = 32 (`grp_transpose_variant_*.json`). The promoted builds refill a stage only after the strip's mma, scales,
partial stores and barrier; the tile and scale are in registers long before. Prediction: the grouped builds 5-15%
faster at M >= 8 (M = 32 89 -> 76-85 us); the dense one-chunk builds 0-5% at M = 1 and more at M = 16.

  PYTHONPATH=src python3 experiments/proj/early_release_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MS = {"fp8_gemv_n1024_k2048_moe_shared_grp": (8, 16), "fp8_gemv_n1024_k2048_moe_shared_grp_t32": (24, 32),
      "fp8_gemv_n12288_k2048_norm_ba": (1, 8), "fp8_gemv_n12288_k2048": (1, 16), "fp8_gemv_n12288_k2048_ba_t32": (32,)}


def main():
    import variant_ab

    cases = variant_ab.cases_at(MS)

    variant_ab.run("early_release", {"early_release": True}, [(sh, cases) for sh in variant_ab.shapes_named(MS)],
                   variant_ab.out_path("early_release_variant.json", HERE))


if __name__ == "__main__":
    main()
