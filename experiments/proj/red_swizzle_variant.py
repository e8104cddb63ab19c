"""The warps' partials stored without 4-way bank conflicts (gen_fp8_gemv.generate(red_swizzle=True)),
beside the promoted builds, by variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds, plain
and PDL launches), then both timed by the bench's method (CUDA-graph replay, inputs and weights rotated
past 4x L2), plainly and as a PDL chain.

Why (trace_v3_m89_8675eaa.json): at 4096 x 2048 a strip takes 581 ns after its chunk lands at M <= 8
and 844 ns at M > 8, and the instruction rates (pipe_rates_fd1020f.json) rule out the conversions.
store_partials writes each accumulator register of a warp as one st.shared.f32 whose 32 lanes fall in
8 banks (row g at word g, token 2 tig at word 32 tig): 4 wavefronts per store, 4 stores per thread at
M <= 8 and 8 at M > 8, so 256 / 512 shared-memory cycles per strip for a 16-warp CTA before its barrier
can complete. Rows swizzled by token (row r of token t at r ^ 8 ((t / 2) % 2)) make them 2-way, and the
warps' sums read the same words back conflict-free (red_index); the sums are the same numbers added in
the same order, so the outputs must be bitwise the promoted kernels'. Prediction: each strip 70 ns
(M <= 8) to 140 ns (M > 8) shorter: 4096 x 2048 M = 16 0.2-0.3 us faster, M = 1 0.05-0.1; the expert
kernels (many strips per CTA) more in total.

  PYTHONPATH=src python3 experiments/proj/red_swizzle_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import EXPERTS, FUSED, MOE_DOWNS, SHAPES

    def cases(c):  # the experts' M = 9..16 stacks are 0.3-0.5 GB per copy: M = 1 and 8 there
        keep = (1, 8) if "E" in c.cases()[0] else (1, 8, 9, 16)
        return [d for d in c.cases() if d["M"] in keep]

    shapes = [(sh, cases) for sh in SHAPES + FUSED + EXPERTS + MOE_DOWNS]
    variant_ab.run("red_swizzle", {"red_swizzle": True}, shapes, variant_ab.out_path("red_swizzle_variant.json", HERE))


if __name__ == "__main__":
    main()
