"""Throughput of the instructions the FP8 projections' loops are made of, per SM and clock, on the H200:
the weight conversion (cvt.rn.f16x2.e4m3x2), the x conversion (cvt.rn.f16x2.f32), the integer ops a
bit-level conversion would use (lop3, prmt, shl, add), the packed BF16 multiply and the mma.

Why: the traces put 581 ns between a strip's chunk landing and the next at M <= 8 (4096 x 2048,
trace_v3_m89_8675eaa.json), about what 512 warp-level cvt.rn.f16x2.e4m3x2 per 32 KB chunk cost if a
conversion issues at 16 lanes per clock per SM (a quarter of the integer rate); and cutting a third of
the x prologue's integer instructions (x_direct_variant, promoted_lean) measured nothing while its
16 cvt.rn.f16x2.f32 per fragment set stayed. If conversions run at a quarter rate, doing part of the
weight conversion with integer ops (e4m3 -> f16 is exact as a bit shuffle, times 2^-8) would shorten
every strip.

Each kernel: 132 CTAs of 512 threads (one per SM, as the projections), every thread runs ITERS times 16
independent chains of one instruction (so latency is hidden); thread 0 of each CTA reads %clock64 before
and after. Rate = lanes x chains x ITERS / median cycles, per SM.

  PYTHONPATH=src python3 experiments/proj/pipe_rates.py --out "$OUT" [--mma [--e4m3]]  (--mma: only the mma chains;
  --e4m3: with the FP8 mma's)
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import torch

ITERS = 2048
CHAINS = 16

# name -> (register type, the op on chain register %r{i}, with %r{j} another chain)
OPS = {
    "cvt.rn.f16x2.e4m3x2": ("b32", "  mov.b32 {{%h0, %h1}}, %r{i};\n  cvt.rn.f16x2.e4m3x2 %r{i}, %h0;"),
    "cvt.rn.f16x2.f32": ("b32", "  mov.b32 %f0, %r{i};\n  mov.b32 %f1, %r{j};\n  cvt.rn.f16x2.f32 %r{i}, %f0, %f1;"),
    "lop3.b32": ("b32", "  lop3.b32 %r{i}, %r{i}, %r{j}, 0x5a5a5a5a, 0x96;"),
    "prmt.b32": ("b32", "  prmt.b32 %r{i}, %r{i}, %r{j}, 0x5140;"),
    "shl.b32": ("b32", "  shl.b32 %r{i}, %r{i}, %r{j};"),
    "add.u32": ("b32", "  add.u32 %r{i}, %r{i}, %r{j};"),
    "mul.rn.bf16x2": ("b32", "  mul.rn.bf16x2 %r{i}, %r{i}, %r{j};"),
    "mul.f32": ("b32", "  mov.b32 %f0, %r{i};\n  mov.b32 %f1, %r{j};\n  mul.f32 %f0, %f0, %f1;\n  mov.b32 %r{i}, %f0;"),
}


# every rate kernel's end: %acc (the chains folded, so nothing is dead) to out[tid], thread 0 the CTA's
# %clock64 difference (%c1 - %c0) to clocks[ctaid]
EPILOGUE = ["  ld.param.u64 %po, [out];", "  cvta.to.global.u64 %po, %po;", "  mul.wide.u32 %t64, %th, 4;",
            "  add.u64 %po, %po, %t64;", "  st.global.u32 [%po], %acc;",
            "  setp.ne.u32 %p, %th, 0;", "  @%p bra DONE;", "  ld.param.u64 %pc, [clocks];",
            "  cvta.to.global.u64 %pc, %pc;", "  mov.u32 %th, %ctaid.x;", "  mul.wide.u32 %t64, %th, 8;",
            "  add.u64 %pc, %pc, %t64;", "  sub.u64 %c1, %c1, %c0;", "  st.global.u64 [%pc], %c1;", "DONE:", "  ret;", "}"]


def clock_cycles(fn, out, clocks) -> float:
    """Five launches of a rate kernel (132 CTAs x 512 threads); the median over CTAs of each, the median of
    launches 2-5."""
    import ctypes

    from cuda.bindings import driver as cu

    runs = []
    for _ in range(5):
        err, = cu.cuLaunchKernel(fn, 132, 1, 1, 512, 1, 1, 0, cu.CUstream(torch.cuda.current_stream().cuda_stream),
                                 ((out.data_ptr(), clocks.data_ptr()), (ctypes.c_void_p, ctypes.c_void_p)), 0)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        torch.cuda.synchronize()
        runs.append(statistics.median(clocks.tolist()))
    return statistics.median(runs[1:])


def text(name: str) -> str:
    _, op = OPS[name]
    tag = name.replace(".", "_")
    lines = [".version 8.0", ".target sm_90a", ".address_size 64", "",
             f".visible .entry rate_{tag}(", "  .param .u64 out,", "  .param .u64 clocks", ")", ".reqntid 512", "{",
             "  .reg .pred %p;", f"  .reg .b32 %r<{CHAINS}>, %i, %th, %acc;", "  .reg .b16 %h<2>;", "  .reg .f32 %f<2>;",
             "  .reg .b64 %po, %pc, %c0, %c1, %t64;",
             "  mov.u32 %th, %tid.x;"]
    for i in range(CHAINS):
        lines.append(f"  mad.lo.u32 %r{i}, %th, {2 * i + 3}, {0x3c003c00 + 977 * i};")
    lines += ["  bar.sync 0;", "  mov.u64 %c0, %clock64;", f"  mov.u32 %i, {ITERS};", "LOOP:"]
    for i in range(CHAINS):
        lines.append(op.format(i=i, j=(i + 1) % CHAINS))
    lines += ["  sub.u32 %i, %i, 1;", "  setp.ne.u32 %p, %i, 0;", "  @%p bra LOOP;", "  bar.sync 0;",
              "  mov.u64 %c1, %clock64;", "  mov.u32 %acc, 0;"]
    for i in range(CHAINS):
        lines.append(f"  xor.b32 %acc, %acc, %r{i};")
    lines += EPILOGUE
    return "\n".join(lines) + "\n"


MMA = {"f16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",  # the projections' instruction
       "e4m3": "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"}  # the FP8 one: twice the k, the same registers


def text_mma(chains: int, kind: str = "f16") -> str:
    """16 warps per CTA, each running ``chains`` independent accumulator chains of MMA[kind] (the
    projections run one chain per n-tile, the acc_split candidate two): chains = 1 is its latency as 16
    warps see it, 16 its throughput."""
    lines = [".version 8.0" if kind == "f16" else ".version 8.4", ".target sm_90a", ".address_size 64", "",  # FP8 mma: 8.4
             f".visible .entry rate_mma_c{chains}{'' if kind == 'f16' else '_' + kind}(", "  .param .u64 out,", "  .param .u64 clocks", ")", ".reqntid 512", "{",
             "  .reg .pred %p;", "  .reg .b32 %a<4>, %b<2>, %i, %th, %acc;", f"  .reg .f32 %m<{4 * chains}>;",
             "  .reg .b64 %po, %pc, %c0, %c1, %t64;", "  mov.u32 %th, %tid.x;"]
    for r in range(4):
        lines.append(f"  mad.lo.u32 %a{r}, %th, {2 * r + 3}, {0x3c003c00 + 977 * r};")
    for r in range(2):
        lines.append(f"  mad.lo.u32 %b{r}, %th, {2 * r + 5}, {0x38003800 + 311 * r};")
    for r in range(4 * chains):
        lines.append(f"  mov.f32 %m{r}, 0f00000000;")
    lines += ["  bar.sync 0;", "  mov.u64 %c0, %clock64;", f"  mov.u32 %i, {ITERS};", "LOOP:"]
    for c in range(chains):
        m = ", ".join(f"%m{4 * c + r}" for r in range(4))
        lines.append(f"  {MMA[kind]} {{{m}}}, {{%a0, %a1, %a2, %a3}}, {{%b0, %b1}}, {{{m}}};")
    lines += ["  sub.u32 %i, %i, 1;", "  setp.ne.u32 %p, %i, 0;", "  @%p bra LOOP;", "  bar.sync 0;",
              "  mov.u64 %c1, %clock64;", "  mov.u32 %acc, 0;"]
    for r in range(4 * chains):
        lines += [f"  mov.b32 %i, %m{r};", "  xor.b32 %acc, %acc, %i;"]
    lines += EPILOGUE
    return "\n".join(lines) + "\n"


MMA_CHAINS = (1, 2, 4, 16)


def main():
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    res, keep = {}, []
    out = torch.zeros(132 * 512, dtype=torch.int32, device="cuda")
    clocks = torch.zeros(132, dtype=torch.int64, device="cuda")
    only_mma = "--mma" in sys.argv
    jobs = [] if only_mma else [(name, "rate_" + name.replace(".", "_"), text(name), 512 * CHAINS) for name in OPS]
    jobs += [(f"mma.m16n8k16 x{c} chains", f"rate_mma_c{c}", text_mma(c), 16 * c) for c in MMA_CHAINS]  # per warp
    if "--e4m3" in sys.argv:  # the FP8 mma (k32): what E4M3 activations would give the M > 8 n-tile
        jobs += [(f"mma.m16n8k32.e4m3 x{c} chains", f"rate_mma_c{c}_e4m3", text_mma(c, "e4m3"), 16 * c) for c in (1, 16)]
    for name, entry, ptx, per_iter in jobs:
        mod, fn = loader.load_text(entry, ptx)
        keep.append(mod)
        cycles = clock_cycles(fn, out, clocks)
        rate = per_iter * ITERS / cycles
        unit = "warp-level mma / clock / SM" if entry.startswith("rate_mma") else "lanes / clock / SM"
        res[name] = {"median_cycles": cycles, unit.replace(" ", "_").replace("/", "per").replace("-", "_"): rate}
        print(f"{name:24s} {cycles:10.0f} cycles  {rate:6.2f} {unit}", flush=True)
    json.dump({"method": f"132 CTAs x 512 threads, {CHAINS} independent chains (mma: 1-16 per warp) x {ITERS} iterations "
               "per thread, %clock64 of thread 0 per CTA around the loop (median over CTAs, median of runs 2-5)",
               "rates": res},
              open(os.path.join(out_dir, ("pipe_rates_mma" + ("_e4m3" if "--e4m3" in sys.argv else "") + ".json")
                                if only_mma else "pipe_rates.json"), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
