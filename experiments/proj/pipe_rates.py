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

  PYTHONPATH=src python3 experiments/proj/pipe_rates.py --out "$OUT"
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
    lines += ["  ld.param.u64 %po, [out];", "  cvta.to.global.u64 %po, %po;", "  mul.wide.u32 %t64, %th, 4;",
              "  add.u64 %po, %po, %t64;", "  st.global.u32 [%po], %acc;",
              "  setp.ne.u32 %p, %th, 0;", "  @%p bra DONE;", "  ld.param.u64 %pc, [clocks];",
              "  cvta.to.global.u64 %pc, %pc;", "  mov.u32 %th, %ctaid.x;", "  mul.wide.u32 %t64, %th, 8;",
              "  add.u64 %pc, %pc, %t64;", "  sub.u64 %c1, %c1, %c0;", "  st.global.u64 [%pc], %c1;", "DONE:", "  ret;", "}"]
    return "\n".join(lines) + "\n"


def main():
    import ctypes

    from cuda.bindings import driver as cu

    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    res, keep = {}, []
    out = torch.zeros(132 * 512, dtype=torch.int32, device="cuda")
    clocks = torch.zeros(132, dtype=torch.int64, device="cuda")
    for name in OPS:
        mod, fn = loader.load_text("rate_" + name.replace(".", "_"), text(name))
        keep.append(mod)
        runs = []
        for _ in range(5):
            err, = cu.cuLaunchKernel(fn, 132, 1, 1, 512, 1, 1, 0, cu.CUstream(torch.cuda.current_stream().cuda_stream),
                                     ((out.data_ptr(), clocks.data_ptr()), (ctypes.c_void_p, ctypes.c_void_p)), 0)
            assert err == cu.CUresult.CUDA_SUCCESS, err
            torch.cuda.synchronize()
            runs.append(statistics.median(clocks.tolist()))
        cycles = statistics.median(runs[1:])
        rate = 512 * CHAINS * ITERS / cycles
        res[name] = {"median_cycles": cycles, "lanes_per_clock_per_sm": rate}
        print(f"{name:24s} {cycles:10.0f} cycles  {rate:6.1f} lanes / clock / SM", flush=True)
    json.dump({"method": f"132 CTAs x 512 threads, {CHAINS} independent chains x {ITERS} iterations per thread, %clock64 "
               "of thread 0 per CTA around the loop (median over CTAs, median of runs 2-5)", "rates": res},
              open(os.path.join(out_dir, "pipe_rates.json"), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
