"""The residual k-split build for up to 32 rows (`fp8_gemv_n2048_k4096_res_ks2_t32`, out_proj / o_proj above 16 rows)
loading h before its strip walk (gen_fp8_gemv.generate(h_early=True): h_early_split), beside the promoted build, by
variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds, plain and PDL launches), then both timed by the bench's
method (CUDA-graph replay, inputs and weights rotated past 4x L2), plainly and as a PDL chain.

Why: the 16-row residual build gained 0.1-0.3 us a launch from loading h at each strip's start
(h_early_variant_fdd15d3.json), and the k-split build still loads h in split_finish, after the peer's sums: one L2
round trip at the end of every launch. Here thread o < 16 M whose row the rank owns loads h of both of its cluster's
strips (at most two) after the x prologue, and split_finish selects the one of strip it. The same arithmetic: bitwise.
Prediction: 0.1-0.3 us less a launch at M = 17..32, plainly and as a chain; the batch-32 step 5-12 us less (40 launches).

  PYTHONPATH=src python3 experiments/proj/h_early_split_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MS = (1, 16, 17, 24, 32)


def main():
    import variant_ab

    from netra.contracts.proj import RES32

    def cases(c):
        return [d for d in c.cases() if d["M"] in MS]

    variant_ab.run("h_early_split", {"h_early": True}, [(RES32, cases)],
                   variant_ab.out_path("h_early_split_variant.json", HERE))


if __name__ == "__main__":
    main()
