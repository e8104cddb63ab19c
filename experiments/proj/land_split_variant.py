"""Each weight chunk as q bulk copies on q mbarriers (gen_fp8_gemv.generate(land_split=q)), so a warp
starts on its 2 KB tile when its piece lands rather than when the whole 32 KB chunk has; beside the
promoted builds (red_swizzle included) by variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds,
plain and PDL launches), then both timed by the bench's method (CUDA-graph replay, inputs and weights
rotated past 4x L2), plainly and as a PDL chain.

Why (trace_v3_m89_8675eaa.json, 4096 x 2048): a CTA's chunks land ~600 ns apart (its share of the HBM:
32 KB at ~4.3 TB/s / 132 SMs takes ~1 us), and nothing of a strip starts before the last byte of its
chunk is in; after the last chunk lands the tail is 470 ns at M = 1 and each strip's work 844 ns at
M > 8 (16 warps' mma on the SM's 4 tensor pipes). With pieces, the warps of the early pieces finish
while the later pieces land; the tail is the last piece's warps (one per SMSP with q = 4).
Prediction (written before the run): 4096 x 2048 M = 1 0.05-0.15 us faster, M = 16 0.15-0.3 (M16 / M1
1.18 -> ~1.13); 2048 x 4096 (one strip of two chunks per CTA) 0.1-0.2 at every M; 12288 / 9216 / 8192
the same absolute gain, a smaller fraction; q = 2 about half of q = 4's. The cost: 4 q copies per strip
instead of 2 for thread 0 to issue (~20 instructions each, in the refill's path).

Run 1 at 421e282 (land_split_{4,2}_variant_421e282.json; the candidate against the promoted one-copy builds).
Promoted after it (Fp8Gemv.pieces = 4); ``prev`` then times the build before (land_split=1) against the
promoted one over every 16-warp plain, norm and residual build: the second run.

  PYTHONPATH=src python3 experiments/proj/land_split_variant.py --out "$OUT" [q ... | prev]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra import paths
    from netra.contracts.proj import FUSED, SHAPES

    g = paths.generator("proj", "gen_fp8_gemv")
    qs = [int(a) for a in sys.argv[1:] if a.isdigit()] or [4]
    names = ("fp8_gemv_n4096_k2048", "fp8_gemv_n2048_k4096", "fp8_gemv_n12288_k2048", "fp8_gemv_n9216_k2048_norm")

    def cases(c):
        return [d for d in c.cases() if d["M"] in (1, 8, 9, 16)]

    if "prev" in sys.argv[1:]:  # after the promotion: the one-copy build against the promoted pieces
        shapes = [(sh, cases) for sh in SHAPES + FUSED if sh.pieces > 1]
        variant_ab.run("land_split_1", {"land_split": 1}, shapes, variant_ab.out_path("land_split_prev_variant.json", HERE))
        return
    shapes = [(sh, cases) for sh in SHAPES + FUSED if sh.name in names]
    for q in qs:
        variant_ab.run(f"land_split_{q}", {"land_split": q}, shapes,
                       variant_ab.out_path(f"land_split_{q}_variant.json", HERE),
                       candidate_smem=lambda sh, q=q: g.land_layout(sh, q)[1])


if __name__ == "__main__":
    main()
