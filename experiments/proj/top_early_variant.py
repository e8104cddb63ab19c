"""moe_down's builds loading every chunk's expert weight with x (gen_fp8_gemv.generate(top_early=True)), beside the
promoted builds, by variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds, plain and PDL launches), then both
timed by the bench's method (CUDA-graph replay, inputs and weights rotated past 4x L2), plainly and as a PDL chain.

Why: moedown_trace_304eaa6.json puts moe_down's x prologue (the 9 experts' gate | up rows, silu(gate) * up, the
conversion to fragments, each chunk's expert weight) at 2.3-2.5 us of its ~4.6 us after the wait at M = 1, with the
weight chunks landed before it ends, so the prologue is the critical path (which is why the weights hot in L2 saved
0.1 us). In it, moedown_mult loads top[token, j] (and glogit for the shared expert) only after each chunk's
conversion: in the SASS the four LDG.E.U16 sit after the last STS / LDS staging, one L2 round trip (~0.5-0.7 us)
in the middle of the chain. top_early issues them right after x's loads (SASS: before the ids barrier), into registers
(146 registers instead of 154, no spills). The same arithmetic: the outputs bitwise the promoted kernels'.
Prediction: 0.4-0.7 us less per launch at M = 1..8, plainly and as a chain; the batch-1 step 15-25 us less.

Measured at 6753f5e (top_early_variant_6753f5e.json, log docs/notes/h200-top-early-6753f5e.log), bitwise at every
case, us plain / PDL chain, candidate against the promoted build in the same run: moedown M = 1 5.56 / 5.08 against
5.74 / 5.33, M = 2 8.52 / 8.07 against 8.72 / 8.22, M = 3 11.65 / 11.21 against 11.76 / 11.27; moedown_s6 M = 4 11.44 /
10.82 against 12.30 / 11.80, M = 8 20.41 / 19.89 against 20.55 / 20.23. Batch-1 step (step_ab, bitwise): 1.654 / 1.553
ms plain / PDL against 1.660-1.663 / 1.559-1.560 (late 1.676 / 1.572 against 1.678-1.681 / 1.577-1.578). The
prediction was high: 0.05-0.25 us a launch at M <= 3 (the round trip was partly under the conversions), 6-7 us a step;
faster everywhere, beyond the currents' spread. Ready to promote (Fp8Gemv.top_early says how); not promoted this
session because the decode record, which pins moe_down's PTX, could not be re-taken in the device time left.

  PYTHONPATH=src python3 experiments/proj/top_early_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import MOE_DOWNS

    keep = {"fp8_gemv_n2048_k4608_moedown": (1, 2, 3), "fp8_gemv_n2048_k4608_moedown_s6": (4, 8)}

    def cases(c):
        return [d for d in c.cases() if d["M"] in keep[c.name]]

    shapes = [(sh, cases) for sh in MOE_DOWNS if sh.name in keep]
    assert len(shapes) == len(keep), [sh.name for sh, _ in shapes]
    variant_ab.run("top_early", {"top_early": True}, shapes, variant_ab.out_path("top_early_variant.json", HERE))


if __name__ == "__main__":
    main()
