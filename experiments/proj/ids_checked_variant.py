"""moe_down (fp8_gemv_n2048_k4608_moedown and its 6-stage build) reading the expert ids and requesting every first
chunk before griddepcontrol.wait, with the ids checked after the wait (gen_fp8_gemv.generate(ids_early=True):
ids_check re-requests the chunks when an id changed), beside the promoted builds.

Why: at batch 1 the runner launches moe_down right after the router-fused launch, whose CTAs finish their gate | up
walks over ~2 us (experiments/proj/README.md, the router-fused walk). moe_down's CTAs land on the SMs the early ones
free, but today request their weights only after the wait, once the slowest CTA has ended. The 0bfb57b candidate
(ids_early_variant.py) read the ids early without a check, valid only where they were written two grids back; the
check makes it valid after the grid that wrote them.

Three builds, each against the promoted kernel on the same NaN-poisoned inputs (2 seeds, plainly and with the PDL
launcher: bitwise), then timed by the bench's method (CUDA-graph replay, inputs and weights rotated past 4x L2),
plainly and as a chain of PDL launches of itself (which the pre-wait work overlaps only with itself; the step A/B,
experiments/decode/step_ab.py moedown_ids, is the measurement that matters):
- ids: the checked build (the candidate);
- ids_force: a diagnostic build that always takes the re-request path (must be bitwise too: it tests that path);
- ids_raw: the unchecked 0bfb57b build.
Prediction (kernel alone): plain within +-0.3 us; as a chain of itself 0-1 us either way (x may queue behind the
chunks, as at 0bfb57b); ids_force ~1-2 us slower (every chunk fetched twice).

  PYTHONPATH=src python3 experiments/proj/ids_checked_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import MOE_DOWN, MOE_DOWN_S6, NUM_EXPERTS

    at = lambda *Ms: lambda c: [{"M": M, "E": NUM_EXPERTS} for M in Ms]  # noqa: E731
    for label, opts in (("ids", {"ids_early": True}), ("ids_force", {"ids_early": True, "ids_checked": "force"}),
                        ("ids_raw", {"ids_early": True, "ids_checked": False})):
        variant_ab.run(label, opts, ((MOE_DOWN, at(1, 2, 8)), (MOE_DOWN_S6, at(4, 8))),
                       variant_ab.out_path(f"{label}_variant.json", HERE))


if __name__ == "__main__":
    main()
