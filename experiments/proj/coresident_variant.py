"""Builds of the >= 8 MB FP8 projections whose CTAs fit two to an SM, for the decode runner's PDL
engine: a launch's CTAs can then start beside the previous grid's and stream their weights
during its tail.

Why: as a chain of PDL launches a plain PTX reader takes 25.2 MB in 6.10 us (95% of the roofline)
and 8.4 MB in 2.12 us (91%) (pdl_ceiling.json), but the promoted kernels only 7.53 us (77%) at
12288 x 2048 and 3.29 / 4.31 us (59% / 45%) at 4096 x 2048 / 2048 x 4096. The reader's best chains
put 2+ CTAs on an SM. The promoted kernels take 128 KB of shared memory (3 stages of 32 KB and two
16 KB reduction buffers; 144 KB with the norm prologue) or 128 registers x 512 threads (K = 4096):
one CTA per SM, so the next grid's CTAs wait for this grid's to exit, and only the first strip is
requested before griddepcontrol.wait.

Candidates (every CTA 64 registers x 512 threads at most, <= 113 KB of shared memory, the
preferred carveout the largest so that two fit an SM):
- s2_all: 2 stages (96 KB; 112 KB with the norm prologue), both stages' chunks requested before
  the wait at every M (pre_strips=None, x_first_m16=False);
- s2: 2 stages, the promoted rule for what goes before the wait (co-residency alone);
- s2_all_default_carveout (12288 x 2048, 4096 x 2048): s2_all without the carveout attribute (does
  the driver's default already allow two per SM?);
- ks2_s2_all (2048 x 4096 and its residual build): the k split over clusters of 2 (64 registers),
  2 stages, everything before the wait. Not bitwise (the halves of k meet in one more fp32 add).

Prediction (as PDL chains, M = 1): 12288 x 2048 7.5 -> 6.5-6.8 us (85-89%), 8192 5.3 -> ~4.5, 9216
5.9 -> ~5.0, 4096 x 2048 3.3 -> 2.4-2.7, 2048 x 4096 4.3 / 3.7 (ks2) -> 2.5-2.9. Launched plainly
0.2-0.6 us slower at M = 1 (x queues behind the chunks; 2 stages were slower than 3 on v7). Such
builds would be PDL-only (the op takes them under set_pdl, as gdn_decode's PDL build).

  PYTHONPATH=src python3 experiments/proj/coresident_variant.py [pre_all | early] --out "$OUT"

pre_all (after 9a29372): the promoted 3-stage builds with every stage before the wait, for step_ab.py pre_all.
early (after e084559): s2_all and ks2_s2_all with launch_dependents at the start.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MAX_SHARED = 100  # CU_SHAREDMEM_CARVEOUT_MAX_SHARED (percent)
ALL = {"pre_strips": None, "x_first_m16": False}


def main():
    import variant_ab

    from netra.contracts.proj import FUSED, SHAPES

    at = lambda *Ms: lambda c: [{"M": M} for M in Ms if M in c.dims["M"]]  # noqa: E731
    big = [sh for sh in SHAPES + FUSED if sh.N * sh.K >= 8 << 20 and sh.K == 2048 and sh.fuse in ("", "norm")]
    k4096 = [sh for sh in SHAPES + FUSED if sh.K == 4096 and sh.fuse in ("", "res")]
    s2 = lambda sh: dataclasses.replace(sh, stages=2)  # noqa: E731
    ks2_s2 = lambda sh: dataclasses.replace(sh, stages=2, ksplit=2)  # noqa: E731
    path = lambda label: variant_ab.out_path(f"coresident_{label}_variant.json", HERE)  # noqa: E731
    cases = [(sh, at(1, 8, 16)) for sh in big]
    variant_ab.run("s2_all", ALL, cases, path("s2_all"), candidate_shape=s2, carveout=MAX_SHARED)
    variant_ab.run("ks2_s2_all", ALL, [(sh, at(1, 8, 16)) for sh in k4096], path("ks2_s2_all"),
                   candidate_shape=ks2_s2, carveout=MAX_SHARED)
    variant_ab.run("s2", {}, cases, path("s2"), candidate_shape=s2, carveout=MAX_SHARED)
    variant_ab.run("s2_all_default_carveout", ALL, [(sh, at(1, 16)) for sh in big if sh.fuse == "" and sh.N in (12288, 4096)],
                   path("s2_all_default_carveout"), candidate_shape=s2)


def pre_all():
    """The promoted 3-stage builds with every stage before the wait (v3's rule), plainly and as a PDL
    chain: what the step form step_ab.py pre_all swaps in."""
    import variant_ab

    from netra.contracts.proj import FUSED, SHAPES

    at = lambda *Ms: lambda c: [{"M": M} for M in Ms if M in c.dims["M"]]  # noqa: E731
    big = [sh for sh in SHAPES + FUSED if sh.N * sh.K >= 8 << 20 and sh.fuse in ("", "norm", "res")]
    variant_ab.run("pre_all", ALL, [(sh, at(1, 8, 16)) for sh in big], variant_ab.out_path("pre_all_variant.json", HERE))


def early():
    """s2_all and ks2_s2_all again with launch_dependents at the start (early_trigger), as the GEMV-shaped
    reader of gemv_chain_ceiling.py triggers: a grid's whole share is requested before its wait, and the
    next grid launches as soon as every CTA of this one has started, so it can take the second slot of
    each SM and stream during this grid's work (the 2-CTA builds above triggered after the wait)."""
    import variant_ab

    from netra.contracts.proj import SHAPES

    at = lambda *Ms: lambda c: [{"M": M} for M in Ms if M in c.dims["M"]]  # noqa: E731
    path = lambda label: variant_ab.out_path(f"coresident_{label}_variant.json", HERE)  # noqa: E731
    big = [sh for sh in SHAPES if sh.N * sh.K >= 8 << 20 and sh.K == 2048]
    variant_ab.run("s2_all_early", dict(ALL, early_trigger=True), [(sh, at(1, 8)) for sh in big], path("s2_all_early"),
                   candidate_shape=lambda sh: dataclasses.replace(sh, stages=2), carveout=MAX_SHARED)
    variant_ab.run("ks2_s2_all_early", dict(ALL, early_trigger=True), [(sh, at(1, 8)) for sh in SHAPES if sh.K == 4096],
                   path("ks2_s2_all_early"), candidate_shape=lambda sh: dataclasses.replace(sh, stages=2, ksplit=2),
                   carveout=MAX_SHARED)


if __name__ == "__main__":
    {"pre_all": pre_all, "early": early}.get(next((a for a in sys.argv[1:] if a in ("pre_all", "early")), ""), main)()
