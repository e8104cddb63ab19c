"""The FP8 kernels with their activations read by ld.global instead of ld.global.nc after
griddepcontrol.wait (gen_fp8_gemv.generate(coherent_x=True)), beside the promoted builds.
Measured at d0e3321 (coherent_x_variant.json) and 98716c5 (coherent_x_variant_98716c5.json), then
promoted: at a later commit both rows are the same build (`git checkout 98716c5` reproduces it).
Since 0bfb57b the measurement is variant_ab.run (2 seeds, the candidate also launched with the PDL
launcher); the two JSONs were written by this script's earlier form (1 seed, plain launches).

Why: .nc is defined only for data that is read-only while the kernel runs; under programmatic
dependent launch the kernel starts while the grid that writes its x is still running. The GDN
kernel's PDL build broke the decode PDL engine's bitwise check that way
(experiments/decode/pdl_gdn_variant.json); these kernels' have not, so far. Coherent loads are
the contract-abiding form; this measures what they cost.

For every FP8 kernel (the seven projections, the norm, residual and gate fusions, the expert
and moe_down kernels) at its contract's first and last case: the candidate's outputs bitwise the
promoted kernel's on the same inputs (NaN-poisoned outputs), then both timed by the bench's
method (CUDA-graph replay, inputs and weights rotated past 4x L2), launched plainly and as a
PDL chain. Prediction: within 0.1 us of the promoted build everywhere (the loads are the same
bytes through L1 instead of the texture path).

  PYTHONPATH=src python3 experiments/proj/coherent_x_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import EXPERTS, FUSED, MOE_DOWN, SHAPES

    ends = lambda c: (c.cases()[0], c.cases()[-1])  # noqa: E731
    variant_ab.run("coherent_x", {"coherent_x": True}, [(sh, ends) for sh in SHAPES + FUSED + EXPERTS + (MOE_DOWN,)],
                   variant_ab.out_path("coherent_x_variant.json", HERE))


if __name__ == "__main__":
    main()
