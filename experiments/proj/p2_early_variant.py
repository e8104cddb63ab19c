"""The two-pass residual build (fp8_gemv_n2048_k4096_res_p2) with its second pass's x loaded early
(gen_fp8_gemv.generate(p2_early=True)), beside the promoted two-pass build.

Why: in the promoted build the second pass starts after the first pass's sums and stores, then waits for its own x
loads (16 rows x 8 KB, from L2 in the decode step, cold in the bench) before its mma; at 9d04b2f's bench (a build with
a bug in the first pass's stores, its times representative) M = 17 took 8.89 us against 6.30 at M = 16, M = 32 11.05,
so the second pass is ~2.6-4.7 us of serial work. The candidate issues those loads right after the first pass's last
mma (the fragment registers are free then) and asks L2 for the second pass's h lines, so the loads overlap the first
pass's partial sums, barrier, h reads and stores. Prediction: M = 17..32 0.3-0.8 us faster (the x-load latency),
M <= 16 unchanged (one branch), bitwise the promoted build.

variant_ab.run: the candidate's outputs bitwise the promoted kernel's (2 seeds, plainly and with the PDL launcher, NaN
poisoned), both timed by the bench's method, plainly and as a PDL chain.

  PYTHONPATH=src python3 experiments/proj/p2_early_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import RES_P2

    cases = lambda c: [{"M": m} for m in (1, 16, 17, 24, 25, 32)]  # noqa: E731
    variant_ab.run("p2_early", {"p2_early": True}, [(sh, cases) for sh in (RES_P2,)],
                   variant_ab.out_path("p2_early_variant.json", HERE))


if __name__ == "__main__":
    main()
