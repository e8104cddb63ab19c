"""The batch-1 kernels with x staged by fragment lane (gen_fp8_gemv.generate(x_tpose=True):
x_rows_to_fragments_t), beside the promoted builds, by variant_ab.run: bitwise check on NaN-poisoned inputs (2 seeds,
plain and PDL launches), then both timed by the bench's method (CUDA-graph replay, inputs and weights rotated past 4x
L2), plainly and as a PDL chain. CPU-built after 4bceb0e, not yet run.

Why: moedown_trace_clock_b976963.json has the batch-1 moe_down's x staging (rows into shared memory, B fragments back)
at ~1400 SM cycles after the products, 120 instructions: the SM's shared-memory pipe, not latency. Every warp moves
32 wavefronts a chunk (4 STS.128 of 4, 16 LDS.32 of 1) whatever M; 7 of the 8 token rows are zeros at M = 1.
x_rows_to_fragments_t lays the 2 KB out by fragment lane (each (token, tig)'s 16 registers in one 64-byte row,
swizzled) so that the rows go in as 4-byte stores and the fragments come back as four 16-byte loads, and a token >= M is
neither stored nor loaded (its registers are set to 0, as its stored zeros gave before). 32 wavefronts a chunk at
M = 8 (conflict-free both ways), 16 at M = 4, 8 at M = 1 and 2 (a 32-lane interpreter of the emitted PTX checks the
fragments and the conflicts on the CPU: tests/test_proj_cpu.py::test_x_tpose_candidate). The same fragments, so every
output bitwise the promoted kernels'. Registers: moedown 146 / 144 (146), norm_ba 120 (122), norm 64 (60), res 128
(128), the router-fused 128 (128), no spills.
Prediction: at M = 1 ~3 x 24 x 12 = 860 cycles less for moe_down (0.3-0.4 us, the prologue being its critical path),
~0.1-0.2 us for the one-chunk norm and router builds, ~0.2 for res (2 chunks); as chains about the same. The batch-1
step 15-30 us less (`step_ab.py x_tpose`); nothing at M = 8 and above.

  PYTHONPATH=src python3 experiments/proj/x_tpose_variant.py --out "$OUT"
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# the kernels the batch-1 step launches, with the staging (the cases: M the step's batches take them at)
KEEP = {"fp8_gemv_n2048_k4608_moedown": (1, 2), "fp8_gemv_n2048_k4608_moedown_s6": (2, 4, 8),
        "fp8_gemv_n2048_k4096_res": (1, 2, 4, 8, 16), "fp8_gemv_n12288_k2048_norm_ba": (1, 2, 4, 8),
        "fp8_gemv_n9216_k2048_norm": (1, 2, 4, 8), "fp8_gemv_n1024_k2048_moe_shared_router": (1, 2, 4)}


DENSE_M = (1, 2, 8, 16)


def dense_shapes():
    from netra.contracts import proj as pc

    return list(pc.SHAPES)


def shapes():
    from netra.contracts import proj as pc

    every = {s.name: s for s in pc.SHAPES + pc.FUSED + (pc.NORM_BA, pc.EXPERTS_ROUTER) + pc.MOE_DOWNS}
    return [every[n] for n in KEEP]


def main():
    import variant_ab

    dense, norm = "--dense" in sys.argv, "--norm" in sys.argv
    if norm:
        from netra.contracts import proj as pc

        builds = [sh for sh in pc.FUSED if sh.fuse == "norm" and not sh.ba]
        on = {sh.x_tpose for sh in builds}
        assert len(on) == 1, "the two norm builds promoted together"
        on = on.pop()
        variant_ab.run("x_tpose_prev" if on else "x_tpose", {"x_tpose": not on}, [(sh, lambda c: c.cases()) for sh in builds],
                       variant_ab.out_path("x_tpose_norm_variant.json", HERE))
        return

    def cases(c):
        return [d for d in c.cases() if d["M"] in (DENSE_M if dense else KEEP[c.name])]

    variant_ab.run("x_tpose", {"x_tpose": True}, [(sh, cases) for sh in (dense_shapes() if dense else shapes())],
                   variant_ab.out_path("x_tpose_dense_variant.json" if dense else "x_tpose_variant.json", HERE))


if __name__ == "__main__":
    main()
