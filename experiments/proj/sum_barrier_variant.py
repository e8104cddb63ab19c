"""The 32-token grouped gate | up with its strip barrier split so that only the warps that sum a strip wait for its
partials (`gen_fp8_gemv.generate(sum_barrier=True)`), beside the promoted builds, by variant_ab.run: bitwise check on
NaN-poisoned inputs (2 seeds, plain and PDL launches), then both timed by the bench's method (CUDA-graph replay, >= 16
rotated copies), plainly and as a PDL chain. Built at 0b5e12d; not measured yet.

Why: Nsight Compute on the promoted build at M = 32 (`ncu/*_t32_m32_sass_e62210c.csv.gz`) puts 14% of the stall samples
at the strip's barrier and 25% on the mma's pipe in bursts, with 3% waiting for bytes; 1-2 of the 16 warps sum a routed
strip's outputs. Prediction: if the lock-step is the cost, 5-10% faster at M = 24 and 32; else level.

  PYTHONPATH=src python3 experiments/proj/sum_barrier_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MS = {"fp8_gemv_n1024_k2048_moe_shared_grp_t32": (1, 16, 17, 24, 32), "fp8_gemv_n1024_k2048_moe_grp_t32": (17, 32)}


def main():
    import variant_ab

    from netra.contracts.proj import EXPERTS_GROUP32, EXPERTS_SHARED_GROUP32

    by_name = {sh.name: sh for sh in (EXPERTS_GROUP32, EXPERTS_SHARED_GROUP32)}

    cases = variant_ab.cases_at(MS)

    variant_ab.run("sum_barrier", {"sum_barrier": True}, [(by_name[n], cases) for n in MS],
                   variant_ab.out_path("sum_barrier_variant.json", HERE))


if __name__ == "__main__":
    main()
