"""The one-strip FP8 kernels (2048 x 4096 and its residual build, 1024 x 2048 and its gate build) with
their first strip requested before griddepcontrol.wait (pre_strips=1) instead of x first with
nothing before the wait (pre_strips=0, promoted after v3r_variant.json), timed plainly and, for the
first time, as a PDL chain.

Why: v3r measured only plain launches: x first won by 0.9 us at 2048 x 4096 M = 1 (4.56 against
5.45), because x's loads queued behind every CTA's chunk requests. In the decode runner's PDL
engine these kernels start during the previous kernel's tail (the residual build after
gdn_decode or attention, 40 launches per step; the gate build after the experts' gate | up). There
a strip requested before the wait streams during that tail, and x comes after the wait anyway.

Prediction: plain 0.5-0.9 us slower (as v3r); as a PDL chain between 0.5 us faster and 0.3 us
slower. A PDL-only build would be worth it at 0.5 us or more for the residual build (~20 us per
batch-1 PDL step). Bitwise by construction (the same arithmetic); variant_ab.run checks it.

  PYTHONPATH=src python3 experiments/proj/pre_strips_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import FUSED, SHAPES

    at = lambda *Ms: lambda c: [{"M": M} for M in Ms]  # noqa: E731
    picked = [sh for sh in SHAPES + FUSED if (sh.N, sh.K) in ((2048, 4096), (1024, 2048)) and sh.fuse in ("", "res", "gate")]
    assert all(sh.pre_strips == 0 for sh in picked), [sh.name for sh in picked]
    variant_ab.run("pre1", {"pre_strips": 1}, [(sh, at(1, 8, 16)) for sh in picked],
                   variant_ab.out_path("pre_strips_variant.json", HERE))


if __name__ == "__main__":
    main()
