"""The router-fused launch with its norm weight requested before griddepcontrol.wait
(gen_fp8_gemv.generate(EXPERTS_ROUTER, norm_w_early="pre"), promoted with this run: Fp8Gemv.norm_w_pre), beside the
build before it ("norm_w_prev"), by variant_ab.run: bitwise check
on NaN-poisoned inputs (2 seeds, plain and PDL launches), then both timed by the bench's method (CUDA-graph replay,
inputs and weights rotated past 4x L2), plainly and as a PDL chain.

Why: norm_w_early (the weight copied in beside h, 64 KB more shared memory) took 8 us off the batch-1 step plainly but
added 37-42 us with PDL (step_ab_current_norm_w_early_current_again_8cca9d2.json): its 205 KB is the one change under
PDL, so the idea is kept and the shared memory is not. The weight does not depend on the previous kernel, so thread 0
requests it before the wait as one 4 KB bulk copy beside the router rows, on their mbarrier, into the partials' region
(idle until the router phase ends: the body's x staging and partials come after its last bar.sync); the norm warps wait
on that mbarrier's phase 0 (long complete) and read their 16 bytes from shared memory. Same shared memory (140,168 B),
128 registers, no spills, the same arithmetic.
Prediction: 0.2-0.4 us less a launch at M = 1..4 plainly and as a chain; 6-12 us a batch-1 step, plain and PDL alike
(`step_ab.py norm_w_pre`).

  PYTHONPATH=src python3 experiments/proj/router/norm_w_pre_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def main():
    import variant_ab

    from netra.contracts.proj import EXPERTS_ROUTER

    def cases(c):
        return [d for d in c.cases() if d["M"] in (1, 2, 4)]

    # promoted with this run (Fp8Gemv.norm_w_pre): the "promoted" build is the candidate, and the build before it is
    # timed as "norm_w_prev"
    variant_ab.run("norm_w_prev", {"norm_w_early": False}, [(EXPERTS_ROUTER, cases)],
                   variant_ab.out_path("norm_w_pre_variant.json", HERE))


if __name__ == "__main__":
    main()
