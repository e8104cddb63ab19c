"""Each strip's warp-order sums and BF16 stores moved to the next strip's start (gen_fp8_gemv.generate(sum_late=...)),
predicated and branch-free in the basic block of that strip's conversions and mma, so ptxas interleaves them with the
mma (read in the SASS: the sum's 16 LDS sit between the HMMA); the last strip's after the loop. Beside the promoted
builds by variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds, plain and PDL launches), then both timed by
the bench's method (CUDA-graph replay, inputs and weights rotated past 4x L2), plainly and as a PDL chain.

Why: in the promoted strip loop every warp stores its partials, meets the others at one barrier, then sums one output
(16 shared loads and a chain of 15 adds) before the next strip's mma can start, and the 16 warps do it in lock step, so
the tensor pipe idles through the sum and the shared-memory pipe through the mma. At 32 tokens a strip's sum is 512
outputs x 16 loads (256 shared-memory wavefronts); at 16, 256 outputs. The 32-token builds are 1.74-1.83x their read
floors at M = 32 (docs/notes/decode.md, "After ffd615d"), and 4096 x 2048 is 0.05 us over the M16 / M1 <= 1.15 bar.

Prediction (written before the run): M = 32 t32 builds 0.5-1.0 us faster (5 of their ~6 strips overlap a sum);
16-token builds at M = 9..16: 12288 x 2048 0.2-0.5 us, 9216 / 8192 0.1-0.3, 4096 x 2048 0.05-0.15 (one overlap), 2048 x
4096 nothing (one strip a CTA); M <= 8 (option True) within 0.05 (16 threads' sums at M = 1).

Measured at 43fbf7c (sum_late_m16_variant_43fbf7c.json, sum_late_all_variant_43fbf7c.json; bitwise everywhere), us
plain / PDL chain, promoted -> candidate: 12288 x 2048 _t32 M = 32 14.37 / 13.03 -> 13.77 / 12.49 (as predicted), but
M = 17 and 24 0.5-0.7 slower, 9216 x 2048 _t32 0.6-1.3 slower at every M; the 16-token builds' M > 8 copy much slower
(12288 x 2048 M = 16 9.08 / 7.76 -> 10.71 / 9.42, 4096 x 2048 4.92 -> 5.37, 2048 x 4096 5.75 -> 6.12); True (the M <= 8
copy too) 0.4 us slower at M = 1 and 8. The miss, read in the SASS: ptxas spread the 16 (load, add) pairs of one
register among the HMMA, so each add waits ~30 cycles for its load in the middle of the warp's in-order mma stream:
~16 stalls a strip. ``--regs=R`` (sum_late_regs): R loads in flight, each into its own register, then their adds.

  PYTHONPATH=src python3 experiments/proj/sum_late_variant.py [--regs=R ...] --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import DENSE32, SHAPES

    names16 = ("fp8_gemv_n12288_k2048", "fp8_gemv_n9216_k2048", "fp8_gemv_n8192_k2048", "fp8_gemv_n4096_k2048",
               "fp8_gemv_n2048_k4096")
    shapes = [(sh, lambda c: [d for d in c.cases() if d["M"] in (17, 24, 32)]) for sh in DENSE32]
    shapes += [(sh, lambda c: [d for d in c.cases() if d["M"] in (1, 8, 9, 16)]) for sh in SHAPES if sh.name in names16]
    regs = [int(a[len("--regs="):]) for a in sys.argv[1:] if a.startswith("--regs=")]
    if regs:  # the loads of a sum in flight at once (sum_late_regs), the M > 8 copy and the 32-token body
        for r in regs:
            variant_ab.run(f"sum_late_m16_r{r}", {"sum_late": "m16", "sum_late_regs": r}, shapes,
                           variant_ab.out_path(f"sum_late_m16_r{r}_variant.json", HERE))
        return
    variant_ab.run("sum_late_m16", {"sum_late": "m16"}, shapes, variant_ab.out_path("sum_late_m16_variant.json", HERE))
    both = [(sh, lambda c: [d for d in c.cases() if d["M"] in (1, 8)]) for sh in SHAPES
            if sh.name in ("fp8_gemv_n12288_k2048", "fp8_gemv_n4096_k2048")]
    variant_ab.run("sum_late_all", {"sum_late": True}, both, variant_ab.out_path("sum_late_all_variant.json", HERE))


if __name__ == "__main__":
    main()
