"""The expert kernels (the routed gate | up and down, moe_down) with their expert ids read and every
stage's weight chunks requested before griddepcontrol.wait (gen_fp8_gemv.generate(ids_early=True)),
beside the promoted builds, which read the ids and request every chunk after the wait.

Why: in the decode chain the expert kernels cannot start their weight reads before the wait,
because the ids are the router's output; by bytes they run at 52% (gate | up) and 38% (moe_down)
of the roofline at M = 1 (docs/notes/decode.md). With the MoE block ordered router -> shared
gate | up -> experts -> moe_down, the router is two or three grids back: it has completed before
the previous kernel's wait returned, and that kernel triggers only after its wait, so the ids are
final when an expert kernel starts under PDL, and its weights can stream during the previous
kernel. Launched plainly the build is always valid. Here each kernel is timed alone (its ids made
beforehand), plainly and as a chain of PDL launches of itself, which is what the pre-wait work
overlaps in a chain.

For each kernel at M = 1, 8 (and 16 for gate | up): the candidate's outputs bitwise the promoted
kernel's on the same inputs (NaN-poisoned outputs), then both timed by the bench's method
(CUDA-graph replay, inputs and weights rotated past 4x L2). Prediction: plain within +-0.3 us
(x's loads now queue behind the chunks), PDL chain 1-2 us less at M = 1 (the ids' L2 round trip
and the first chunks' DRAM latency leave the critical path).

  PYTHONPATH=src python3 experiments/proj/ids_early_variant.py --out "$OUT"

ids_early_variant.json (0bfb57b) was written by this script's first form, the same measurement
before it moved into variant_ab.run.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main():
    import variant_ab

    from netra.contracts.proj import EXPERTS, MOE_DOWN, NUM_EXPERTS

    at = lambda *Ms: lambda c: [{"M": M, "E": NUM_EXPERTS} for M in Ms]  # noqa: E731
    variant_ab.run("ids_early", {"ids_early": True}, ((EXPERTS[0], at(1, 8, 16)), (EXPERTS[1], at(1, 8)), (MOE_DOWN, at(1, 8))),
                   variant_ab.out_path("ids_early_variant.json", HERE))


if __name__ == "__main__":
    main()
