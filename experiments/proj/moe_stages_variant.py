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
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import EXPERTS, NUM_EXPERTS

    at = lambda *Ms: lambda c: [{"M": M, "E": NUM_EXPERTS} for M in Ms]  # noqa: E731
    for n in (4, 5):
        variant_ab.run(f"stages_{n}", {}, ((EXPERTS[0], at(1, 2, 4, 8, 16)),),
                       variant_ab.out_path(f"moe_stages_{n}_variant.json", HERE),
                       candidate_shape=lambda sh, n=n: dataclasses.replace(sh, stages=n))


if __name__ == "__main__":
    main()
