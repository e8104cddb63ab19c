"""The FP8 projection kernels with their weight copies issued without the evict-first L2 policy
(gen_fp8_gemv.generate(l2_hint=False)), beside the promoted builds, by variant_ab.run: bitwise check
on NaN-poisoned inputs (2 seeds, plain and PDL launches), then both timed by the bench's method
(CUDA-graph replay, inputs and weights rotated past 4x L2), plainly and as a PDL chain.

Why (after a844010): the GDN pipe build was 2.4 us faster at B = 32 plainly (43.1 -> 40.7) when its
state's cp.async.bulk lost the same policy (experiments/gdn/pipe_variant_f936d85.json). Prediction: the
weights are read once and never written, unlike the GDN state, so within +-2% here; a gain, if any, at
the >= 8 MB shapes at M = 1 (issue 4's roofline and cuBLAS bars).

  PYTHONPATH=src python3 experiments/proj/l2_hint_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import FUSED, SHAPES

    ends = lambda c: (c.cases()[0], c.cases()[-1])  # noqa: E731
    variant_ab.run("l2_hint_off", {"l2_hint": False}, [(sh, ends) for sh in SHAPES + FUSED],
                   variant_ab.out_path("l2_hint_variant.json", HERE))


if __name__ == "__main__":
    main()
