"""The router-fused launch copying its norm weight into shared memory beside h's loads
(gen_fp8_gemv.generate(EXPERTS_ROUTER, norm_w_early=True); CPU-built, not yet run), beside the promoted build, by
variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds, plain and PDL launches), then both timed by the bench's
method (CUDA-graph replay, inputs and weights rotated past 4x L2), plainly and as a PDL chain.

Why: the router phase is the serial chain h -> norm -> row sums -> grid barrier -> logits -> selection
(router_phase_diag_d5aa510.json: ~1.8 us of it besides the barrier at M = 1). In the promoted SASS the post-attention
norm weight's eight 16-byte loads (rms_emit.scale, ld.global.nc) come after the sum of squares' shuffles, which wait for
h: a second L2 round trip after h's. Loading it with h (registers) did not move them: ptxas sinks plain, .nc and even
volatile loads of it back to the shuffles. The candidate copies it by cp.async.cg into a 4 KB region per norm warp
(64 KB more dynamic shared memory, after the build's own layout: gen_fp8_gemv.norm_w_early_smem) with a
fence.acq_rel.cta after the copies, which keeps them beside h's loads (SASS: the LDGSTS between the LDG.E.128 of h, a
MEMBAR.ALL.CTA before the shuffles), and each lane reads back its own 16 bytes after cp.async.wait_all. 128 registers,
no spills. The same arithmetic: every output bitwise the promoted kernel's.
Prediction: 0.2-0.4 us less per launch at M = 1..4 (one L2 round trip less the fence), 8-16 us a batch-1 step
(`step_ab.py norm_w_early`).

  PYTHONPATH=src python3 experiments/proj/router/norm_w_early_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def main():
    import variant_ab

    from netra import paths
    from netra.contracts.proj import EXPERTS_ROUTER

    g = paths.generator("proj", "gen_fp8_gemv")

    def cases(c):
        return [d for d in c.cases() if d["M"] in (1, 2, 4)]

    variant_ab.run("norm_w_early", {"norm_w_early": True}, [(EXPERTS_ROUTER, cases)],
                   variant_ab.out_path("norm_w_early_variant.json", HERE),
                   candidate_smem=lambda sh: g.norm_w_early_smem(sh)[1])


if __name__ == "__main__":
    main()
