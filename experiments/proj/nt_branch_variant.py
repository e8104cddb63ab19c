"""The 32-token grouped gate | up with each chunk's mma issued n-tile by n-tile behind a warp-uniform branch over the
n-tiles no token of the strip's expert is in (`gen_fp8_gemv.generate(nt_branch=True)`), beside the promoted build
(all 32 mma of a chunk issued, predicated), by variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds, plain and
PDL launches), then both timed by the bench's method (CUDA-graph replay, >= 16 rotated copies), plainly and as a PDL
chain.

Why: Nsight Compute on the promoted build at M = 32 (`ncu_gemv.sh` at e62210c) puts 25% of the stall samples on the
tensor pipe (stall_math, on the mma), 14% on the strip's barrier, 3% on the weight wait; 65% of the issued mma are
predicated off. Prediction: if a predicated-off mma holds the pipe, 8-15% faster at M = 24 and 32; if not, level.
Also `red_swizzle` on these builds (the partials' stores 2-way bank conflicted instead of 4.4-way: MIO was 6% of the
samples; measured slower on the 16-token experts build at 8919b95, never on these), alone and with nt_branch:
prediction 0-3% faster.

  PYTHONPATH=src python3 experiments/proj/nt_branch_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MS = {"fp8_gemv_n1024_k2048_moe_shared_grp_t32": (17, 24, 32), "fp8_gemv_n1024_k2048_moe_grp_t32": (32,)}


def main():
    import variant_ab

    cases = variant_ab.cases_at(MS)

    for label, options in (("nt_branch", {"nt_branch": True}), ("red_swizzle", {"red_swizzle": True}),
                           ("nt_branch_red_swizzle", {"nt_branch": True, "red_swizzle": True})):
        variant_ab.run(label, options, [(sh, cases) for sh in variant_ab.shapes_named(MS)], variant_ab.out_path(f"{label}_t32_variant.json", HERE))


if __name__ == "__main__":
    main()
