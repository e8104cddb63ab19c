"""The grouped routed + shared gate | up builds (`fp8_gemv_n1024_k2048_moe_shared_grp`, 5-16 tokens, and `_t32`, above 16)
with their routed strips walked expert-fastest (`gen_fp8_gemv.generate(grp_transpose=True)`) beside the promoted
builds, by variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds, plain and PDL launches), then both timed by
the bench's method (CUDA-graph replay, >= 16 rotated copies of inputs and weights), plainly and as a PDL chain.

Why: in the decode step this candidate was 450 us slower at batch 32 (`../decode/step_ab.py grp_transpose`, at
aa15e6b), and the same copies alone in the same orders were level (`../runtime/stride_read.py`, f0ce9c1). So is the
kernel itself slower, and by how much at each M? Prediction: M = 32 5-12 us slower, M = 8 0.5-1.5.

  PYTHONPATH=src python3 experiments/proj/grp_transpose_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MS = {"fp8_gemv_n1024_k2048_moe_shared_grp": (8, 16), "fp8_gemv_n1024_k2048_moe_shared_grp_t32": (24, 32)}


def main():
    import variant_ab

    from netra.contracts.proj import EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32

    cases = variant_ab.cases_at(MS)

    variant_ab.run("grp_transpose", {"grp_transpose": True}, [(sh, cases) for sh in (EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32)],
                   variant_ab.out_path("grp_transpose_variant.json", HERE))


if __name__ == "__main__":
    main()
