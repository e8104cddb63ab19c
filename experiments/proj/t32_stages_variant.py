"""The 32-token dense builds (netra.contracts.proj.DENSE32, 3 stages of 32 KB) with 4 and 5 stages (Fp8Gemv.stages;
the dynamic shared memory grows from 164 KB to 197 / 230 KB, one CTA a SM either way), beside the promoted builds by
variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds, plain and PDL launches), then both timed by the bench's
method (CUDA-graph replay, inputs and weights rotated past 4x L2), plainly and as a PDL chain.

Why: at M = 32 every CTA reads all of x (32 rows x 2048, 128 KB) from L2 and turns it into 64 registers of fragments
before its first strip; meanwhile only the ring's 3 chunks (96 KB of the CTA's ~6 x 32 KB at 12288 x 2048) can land.
If the prologue outlasts 3 chunks' arrival, more stages put more of the weights under it. Run beside trace_v3.py
--t32, which says how long the prologue and each strip take. Prediction: 0-1 us faster at M = 32 (0.3 us a chunk that
lands under the prologue instead of after it), level at M = 16.

  PYTHONPATH=src python3 experiments/proj/t32_stages_variant.py --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import DENSE32

    shapes = [(sh, lambda c: [d for d in c.cases() if d["M"] in (17, 32)]) for sh in DENSE32]
    for st in (4, 5):
        variant_ab.run(f"t32_s{st}", {}, shapes, variant_ab.out_path(f"t32_s{st}_variant.json", HERE),
                       candidate_shape=lambda sh, st=st: dataclasses.replace(sh, stages=st))


if __name__ == "__main__":
    main()
