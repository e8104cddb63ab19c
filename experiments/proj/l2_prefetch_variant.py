"""The FP8 projection kernels with every later strip of each CTA asked of L2 before griddepcontrol.wait
(gen_fp8_gemv.generate(l2_prefetch=True): cp.async.bulk.prefetch.L2, DRAM -> L2 only), beside the
promoted builds, by variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds, plain and PDL
launches), then both timed by the bench's method (CUDA-graph replay, inputs and weights rotated past
4x L2), plainly and as a PDL chain. Two candidates: ``l2_prefetch`` (the promoted ring rule: the first
strip copied before the wait) and ``l2_prefetch_x_first`` (no copy before the wait: x's loads first, every
strip already requested from DRAM by the prefetch); ``l2_prefetch_lines`` (the same bytes by every
thread's prefetch.global.L2 of single 128-byte lines, not the CTA's bulk unit, which also serves the
ring's copies). ``python3 l2_prefetch_variant.py [CANDIDATE ...] --out DIR`` (default: all three).

Why (after 0f8a5ea): plainly, until x is loaded (~1.5 us at M = 1) only the first strip's 32 KB per SM
(4.2 MB in all) is requested, less than DRAM delivers in that time; as a PDL chain the next grid can
only fill its 96 KB ring once it is resident, while the chain's same-bytes reader reaches 91-96% of the
roofline and the kernels 48-80% (docs/notes/bars.md). A bulk L2 prefetch returns nothing to the SM, so,
unlike copying every stage before the wait (pre_all, rejected: x queued behind the chunks), it should not
delay x. Prediction: >= 8 MB shapes at M = 1 0.2-0.5 us faster plainly, 0.2-0.6 us as a chain; M = 16
within +-0.2 us; the shapes with one strip per CTA (2048 x 512, 1024 x 2048) are not built.

  PYTHONPATH=src python3 experiments/proj/l2_prefetch_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


CANDIDATES = {"l2_prefetch": {"l2_prefetch": True}, "l2_prefetch_x_first": {"l2_prefetch": True, "pre_strips": 0},
              "l2_prefetch_lines": {"l2_prefetch": "lines"}}


def main():
    import variant_ab

    from netra import paths
    from netra.contracts.proj import FUSED, SHAPES

    ends = lambda c: (c.cases()[0], c.cases()[-1])  # noqa: E731
    g = paths.generator("proj", "gen_fp8_gemv")
    shapes = [(sh, ends) for sh in SHAPES + FUSED if g.prefetch_changes(sh)]
    which = [a for a in sys.argv[1:] if a in CANDIDATES] or list(CANDIDATES)
    for label in which:
        variant_ab.run(label, CANDIDATES[label], shapes, variant_ab.out_path(f"{label}_variant.json", HERE))


if __name__ == "__main__":
    main()
