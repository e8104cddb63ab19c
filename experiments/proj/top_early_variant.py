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
