"""GDN's in_proj (`fp8_gemv_n12288_k2048_norm_ba`) and the residual out_proj / o_proj (`fp8_gemv_n2048_k4096_res`)
with `.maxnreg 104` (gen_fp8_gemv.generate(maxnreg=104)), beside the promoted builds, by variant_ab.run: bitwise check
on NaN-poisoned inputs (2 seeds, plain and PDL launches), then both timed by the bench's method (CUDA-graph replay,
inputs and weights rotated past 4x L2), plainly and as a PDL chain of themselves.

Why: both take 122-128 registers x 512 threads, the whole 64 K register file of an SM, so under PDL no CTA of the
kernel after them (gdn_decode, 128 threads x 80 registers = 10 K) can start on an SM before their CTA there has ended,
and none of them can start beside gdn_decode either. At 104 (no spill: ptxas -v) a CTA leaves 11.5 K registers free,
so gdn_decode's CTAs can request their state during the in_proj and out_proj's CTAs their whole 64 KB strip during
gdn_decode (experiments/decode/step_ab.py nreg104). This script checks the kernels alone: the same bits, and the
time of each launch (a chain of itself gains nothing: two 512-thread CTAs still do not fit).
Prediction: within +-0.1 us of the promoted builds at every M.

  PYTHONPATH=src python3 experiments/proj/maxnreg_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import FUSED, NORM_BA

    keep = {"fp8_gemv_n2048_k4096_res": (1, 8, 16), "fp8_gemv_n12288_k2048_norm_ba": (1, 4, 8)}

    def cases(c):
        return [d for d in c.cases() if d["M"] in keep[c.name]]

    shapes = [(sh, cases) for sh in FUSED + (NORM_BA,) if sh.name in keep]
    assert len(shapes) == len(keep), [sh.name for sh, _ in shapes]
    variant_ab.run("maxnreg104", {"maxnreg": 104}, shapes, variant_ab.out_path("maxnreg_variant.json", HERE))


if __name__ == "__main__":
    main()
