"""The routed experts' gate | up kernel (fp8_gemv_n1024_k2048_moe) with 4 and 5 weight stages
instead of 3 (Fp8Gemv.stages), beside the promoted build.

Why: at M = 1 the launch streams 8 pairs x 64 strips = 512 strips of 32 KB over 132 CTAs, so most
CTAs take 4 strips (127 KB). With 3 stages, the 4th strip's chunk is requested only after the first
has arrived and been used: one more DRAM round trip at the end of every CTA. 4 stages request a
CTA's whole share at once (162 KB of shared memory; one CTA per SM either way). The plain shapes
found 3 stages fastest (experiments/proj/README.md, v7), but they request a strip before the wait
and stream more strips per CTA; the expert kernel requests nothing before the wait.

Prediction: M = 1 6.95 -> 6.0-6.3 us plain (and as a PDL chain 6.4 -> 5.5-5.8); M = 2 and up within
+-0.3 us; the same arithmetic, so bitwise. Checked and timed by variant_ab.run (2 seeds, the
candidate also launched with the PDL launcher; the bench's method, plain and as a PDL chain).

  PYTHONPATH=src python3 experiments/proj/moe_stages_variant.py --out "$OUT"

Measured at 0a74e03 (moe_stages_{4,5}_variant_0a74e03.json): M = 1 0.7 us slower, M = 16 10% faster;
promoted as fp8_gemv_n1024_k2048_moe_s4 for M > 8.

`down` (after a8cba41): the fused MoE down (fp8_gemv_n2048_k4608_moedown, 3 chunks of 24 KB per
strip, 3 stages) with 6 stages (two strips in flight, 169 KB of shared memory; 9 would not fit).
At M = 1 each of its 128 CTAs streams one strip, all of it already requested, so nothing should
change; at M = 8 each streams 8 strips, as the gate | up did at M = 16 where 4 stages gave 10%.
Prediction: M = 1 within +-0.2 us; M = 8 24.5 -> 22-23 us (the read floor is 22.2); bitwise.

  PYTHONPATH=src python3 experiments/proj/moe_stages_variant.py down --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import EXPERTS, MOE_DOWN, NUM_EXPERTS

    at = lambda *Ms: lambda c: [{"M": M, "E": NUM_EXPERTS} for M in Ms]  # noqa: E731
    if "down" in sys.argv[1:]:
        variant_ab.run("stages_6", {}, ((MOE_DOWN, at(1, 2, 4, 8)),),
                       variant_ab.out_path("moedown_stages_6_variant.json", HERE),
                       candidate_shape=lambda sh: dataclasses.replace(sh, stages=6))
        return
    for n in (4, 5):
        variant_ab.run(f"stages_{n}", {}, ((EXPERTS[0], at(1, 2, 4, 8, 16)),),
                       variant_ab.out_path(f"moe_stages_{n}_variant.json", HERE),
                       candidate_shape=lambda sh, n=n: dataclasses.replace(sh, stages=n))


if __name__ == "__main__":
    main()
