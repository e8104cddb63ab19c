"""x straight into the mma fragments: the weights packed with the 128 columns of each k block in the
order that puts every thread's x fragments in 64 contiguous bytes (pack_weight(x_direct=True),
netra.contracts.proj.frag_k), so the x prologue is four 16-byte loads per (n-tile, k block) per thread,
then the amax and the conversion, with no trip through shared memory and no CTA barrier after it
(gen_fp8_gemv.generate(x_direct=True)). ``x_direct_lean`` adds two cuts to the conversion that give the
same fragments: the amax by signed and unsigned packed max without a mask per register (amax_s16), and the
power-of-two scale applied to both BF16 of a register by one mul.rn.bf16x2 (scale_bf16x2).

Why (docs/notes/bars.md; trace_promoted_ca007e6.json): each CTA spends 1.1-1.6 us between
griddepcontrol.wait and its converted x, and at M > 8 every CTA converts all of x (the M = 9 jump of
0.8-1.0 us at 4096 x 2048, 2048 x 4096). SASS from the wait to the first mma, per thread (ptxas 13.0.88):
4096 x 2048 M <= 8 365 -> 275 (x_direct) -> 255 (lean), M > 8 496 -> 366 -> 326; 2048 x 4096 M > 8
820 -> 659 -> 542. Prediction: M = 16 at 4096 x 2048 and 2048 x 4096 0.3-0.5 us faster (M16 / M1 from
1.22 / 1.27 toward 1.15), M = 1 0.1-0.3 us faster plainly and as a PDL chain; the persistent shapes
(12288, 9216, 8192 x 2048) less, their weight stream leads.

Not bitwise the promoted kernels (each mma sums other columns; the same products, another order): each
build is checked against the float64 reference on NaN-poisoned outputs (M = 1, 5, 8, 9, 16, 2 seeds,
launched plainly and as PDL), for 5 bitwise repeats and plain == PDL, and x_direct_lean bitwise against
x_direct; then timed beside the promoted kernel (its own packing) by the bench's method (CUDA-graph
replay, >= 16 rotated copies of inputs and weights), plainly and as a PDL chain.

  PYTHONPATH=src python3 experiments/proj/x_direct_variant.py [CANDIDATE ...] --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

LEAN = {"packed_amax": "s16", "scale_bf16x2": True}
CANDIDATES = {"x_direct": {"x_direct": True},
              "x_direct_lean": {"x_direct": True, **LEAN},
              # second run (after the first showed x_direct slower, more so with M):
              "promoted_lean": LEAN,  # the promoted kernel with only the conversion cut: bitwise it
              "x_rows_v4_lean": {"x_direct": "v4", **LEAN},  # whole-line row loads, 16-byte fragment reads
              "x_direct_cg": {"x_direct": True, **LEAN, "x_ld": "ld.global.cg"},  # diagnostic: x not through L1
              "stage_x_m16": {"stage_x_m16": True},  # M > 8: x rows by bulk copies, before the chunks
              "stage_x_m16_mc": {"stage_x_m16": "mc"}}  # the same, multicast over clusters of 2
CANDIDATES.update({  # third run: 32 warps at K = 4096 (one k block and one chunk per warp: half of each warp's x
    # prologue at M > 8, trace_v3_m89_8675eaa.json: there it ends 1.1 us later than at M = 8, after the strip landed)
    "w32": {"pre_strips": 0}, "w32_lean": {"pre_strips": 0, **LEAN}})
REPACKED = ("x_direct", "x_direct_lean", "x_rows_v4_lean", "x_direct_cg")
SHAPED = {"w32": lambda sh: dataclasses.replace(sh, warps=32, stages=2)}  # 2 stages of 64 KB: 197 KB in all


def shape_of(label: str, sh):
    return SHAPED.get(label.split("_")[0], lambda s: s)(sh)


def applies(label: str, sh) -> bool:
    if label.startswith("w32"):
        return sh.K == 4096 and sh.fuse in ("", "res")
    return not label.startswith("stage_x") or (sh.fuse in ("", "res") and sh.ksplit == 1)
CHECK_M = (1, 5, 8, 9, 16)
TIME_M = (1, 8, 9, 16)


def repacked(tb):
    """The test bed with every weight packed for the x_direct kernels (the same values)."""
    from netra.ops.proj import pack_weight

    def make(dims, gen, device, _make=tb.make):
        i = _make(dims, gen, device)
        i["w"] = pack_weight(i["_w_plain"], x_direct=True)
        return i

    return dataclasses.replace(tb, make=make)


def main():
    import variant_ab

    from netra import contracts, paths
    from netra.contracts import proj as pc
    from netra.contracts.proj import FUSED, SHAPES
    from netra.lifecycle import bench, metrics, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    g = paths.generator("proj", "gen_fp8_gemv")
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    which = [a for a in sys.argv[1:] if a in CANDIDATES] or list(CANDIDATES)[:2]
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "candidates": {k: CANDIDATES[k] for k in which}, "kernels": {}}
    keep = []
    out = variant_ab.out_path("x_direct_variant.json" if which == list(CANDIDATES)[:2] else
                              "x_direct_variant_3.json" if which[0].startswith("w32") else "x_direct_variant_2.json", HERE)
    for sh in [s for s in SHAPES + FUSED if s.fuse in ("", "res", "gate") and any(applies(w, s) for w in which)]:
        c, tb = contracts.get(sh.name), testbeds.get(sh.name)
        tbx = repacked(tb)
        beds = {}
        gos = {"promoted": variant_ab.plain_and_pdl(c, loader.load(c.name, 0).handle)}
        beds["promoted"] = tb
        for label in [w for w in which if applies(w, sh)]:
            opts, s2 = CANDIDATES[label], shape_of(label, sh)
            c2 = pc._contract(s2) if s2 is not sh else c  # its own threads and shared memory
            c2 = dataclasses.replace(c2, dynamic_smem=g.x_stage_layout(sh)[2] + 8) if "stage_x_m16" in opts else c2
            module, fn = loader.load_text(s2.name, g.generate(s2, **opts), dynamic_smem=c2.dynamic_smem)
            keep.append(module)
            gos[label] = variant_ab.plain_and_pdl(c2, int(fn))
            beds[label] = tbx if label in REPACKED else tb
        rows = {}
        firsts = {}
        for label in gos:  # correctness first: float64 reference, NaN-poisoned outputs
            rows[label + "_check"] = variant_ab.f64_check(gos[label], beds[label], CHECK_M, c.tolerance, firsts, label)
            if label != "promoted" and beds[label] is tb:  # the promoted fragments: the promoted bits
                rows[label + "_check"]["bitwise_promoted"] = all(
                    metrics.first_mismatch(firsts[(label, m, s)][n], firsts[("promoted", m, s)][n]) is None
                    for m in CHECK_M for s in (0, 1) for n in firsts[("promoted", m, s)])
            print(sh.name, label, rows[label + "_check"], flush=True)
        if "x_direct" in which and "x_direct_lean" in which:
            rows["lean_bitwise_x_direct"] = all(
                metrics.first_mismatch(firsts[("x_direct_lean", m, s)][n], firsts[("x_direct", m, s)][n]) is None
                for m in CHECK_M for s in (0, 1) for n in firsts[("x_direct", m, s)])
        for m in TIME_M:
            row = {}
            for name, (go, go_pdl) in gos.items():
                if not rows[name + "_check"]["pass"]:
                    continue
                r = bench.bench_case(beds[name], {"M": m}, go, floors, peers=False,
                                     log=lambda *_: None, go_pdl=go_pdl)
                row[name] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us"),
                             "read_floor_us": r["peers"]["read_floor"]}
            rows[f"M={m}"] = row
            print(sh.name, m, row, flush=True)
        res["kernels"][sh.name] = rows
        json.dump(res, open(out, "w"), indent=1)  # after every kernel
    del keep


if __name__ == "__main__":
    main()
