"""The grouped routed + shared gate | up builds (`fp8_gemv_n1024_k2048_moe_shared_grp`, the runner's from 5 to 16 tokens,
and `_t32`, above 16) with a deeper ring of weight stages (Fp8Gemv.stages = 4 or 5, named _s4 / _s5) beside the promoted
3-stage builds, by variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds, plain and PDL launches), then both
timed by the bench's method (CUDA-graph replay, >= 16 rotated copies of inputs and weights), plainly and as a PDL chain.

Why: the timeline at 9ca14dc charges these launches 32.9 us a layer at batch 8 and 89.8 at batch 32, against ~28 and
~79 us for their distinct experts' bytes at 4.33 TB/s; ncu (601a1d9) had them at 3.64 / 3.89 TB/s over the launch.
Each CTA walks ~28 (batch 8) to ~80 (batch 32) strips of 32 KB through 3 stages, and a stage is refilled only after its
strip's sums, so about two strips (64 KB) are in flight per SM: at ~33 GB/s a SM that covers only ~2 us of loaded
DRAM latency. A fourth (fifth) stage keeps 96 (128) KB in flight. The per-pair 16-token build gained 10% at M = 16
from 4 stages at 0a74e03 (moe_stages_4_variant_0a74e03.json) but not in the step; that bench ran before the scrub
wait (d3acdef), so it is re-asked here on the grouped builds the runner takes now. The same arithmetic: bitwise.
Prediction: M = 8 0-2 us less, M = 32 0-5 us less, plainly and as a chain; the t32 build has room for 4 stages only.

  PYTHONPATH=src python3 experiments/proj/grp_stages_variant.py [--stages=4] --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SMEM_MAX = 227 * 1024
MS = {"fp8_gemv_n1024_k2048_moe_shared_grp": (5, 8, 16), "fp8_gemv_n1024_k2048_moe_shared_grp_t32": (17, 24, 32)}


def main():
    import variant_ab

    from netra.contracts.proj import EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32

    stages = int(next((a.split("=")[1] for a in sys.argv if a.startswith("--stages=")), "4"))
    shapes = [sh for sh in (EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32)
              if dataclasses.replace(sh, stages=stages).smem <= SMEM_MAX]

    cases = variant_ab.cases_at(MS)

    variant_ab.run(f"s{stages}", {}, [(sh, cases) for sh in shapes],
                   variant_ab.out_path(f"grp_stages_{stages}_variant.json", HERE),
                   candidate_shape=lambda sh: dataclasses.replace(sh, stages=stages))


if __name__ == "__main__":
    main()
