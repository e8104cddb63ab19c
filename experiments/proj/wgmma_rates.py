"""Throughput of wgmma.mma_async m64nNk16 f16 -> f32 with A in registers and B in shared memory (what a
swap-AB projection would issue: 64 weight rows converted to f16 in registers, x's N tokens in shared
memory), against mma.sync m16n8k16, which the projections use (pipe_rates.py --mma: 0.666 warp-level mma
per clock per SM at 1, 2, 4 or 16 chains per warp with 16 warps, 2730 flops per clock per SM).

Why: at M > 8 the projections issue twice the mma of M <= 8 (two n-tiles of 8 tokens), 256 per 16-row
strip per SM, ~384 clocks at that rate: the mma pipe, not the chain, is half of a strip's 844 ns at
4096 x 2048 (trace_v3_m89_8675eaa.json). A wgmma design is worth planning only if m64n16k16 (or n8) runs
faster per flop than two mma.sync.

Each kernel: 132 CTAs of 512 threads (4 warpgroups, one CTA per SM as the projections); each warpgroup
runs ITERS times: wgmma.fence, R wgmma into each of C accumulators, commit, wait_group 0. The values are
arbitrary (B is zeroed shared memory, A constants); thread 0 of each CTA reads %clock64 around the loop.

  PYTHONPATH=src python3 experiments/proj/wgmma_rates.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pipe_rates  # noqa: E402  (the rate kernels' epilogue and clock)

ITERS = 512
R = 8
CASES = ((8, 1), (16, 1), (32, 1), (16, 2))  # (N, accumulators)


def text(n: int, chains: int) -> str:
    nd = n // 2  # f32 accumulator registers per thread for m64nN
    lines = [".version 8.0", ".target sm_90a", ".address_size 64", "",
             f".visible .entry wg_rate_n{n}_c{chains}(", "  .param .u64 out,", "  .param .u64 clocks", ")",
             ".reqntid 512", "{", "  .shared .align 1024 .b8 buf[8192];",
             "  .reg .pred %p, %pd;", "  .reg .b32 %a<4>, %i, %th, %acc, %t, %s, %z;", f"  .reg .f32 %d<{nd * chains}>;",
             "  .reg .b64 %desc, %po, %pc, %c0, %c1, %t64;", "  mov.u32 %th, %tid.x;",
             "  mov.u32 %s, buf;", "  mov.u32 %z, 0;", "  mad.lo.u32 %t, %th, 16, %s;",
             "  st.shared.v4.u32 [%t], {%z, %z, %z, %z};  // B: zeros",
             # no swizzle; leading byte offset 128, stride byte offset 256 (core matrices of 8 x 16 bytes)
             "  cvt.u64.u32 %desc, %s;", "  shr.u64 %desc, %desc, 4;", "  and.b64 %desc, %desc, 0x3fff;",
             "  or.b64 %desc, %desc, 0x0000001000080000;"]
    for r in range(4):
        lines.append(f"  mad.lo.u32 %a{r}, %th, {2 * r + 3}, {0x3c003c00 + 977 * r};")
    for r in range(nd * chains):
        lines.append(f"  mov.f32 %d{r}, 0f00000000;")
    lines += ["  setp.eq.u32 %pd, %th, %th;  // scale-d: D = A B + D", "  fence.proxy.async.shared::cta;",
              "  bar.sync 0;", "  mov.u64 %c0, %clock64;", f"  mov.u32 %i, {ITERS};", "LOOP:",
              "  wgmma.fence.sync.aligned;"]
    for _ in range(R):
        for c in range(chains):
            d = ", ".join(f"%d{c * nd + r}" for r in range(nd))
            lines.append(f"  wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{d}}}, {{%a0, %a1, %a2, %a3}}, %desc, "
                         "%pd, 1, 1, 0;")
    lines += ["  wgmma.commit_group.sync.aligned;", "  wgmma.wait_group.sync.aligned 0;",
              "  sub.u32 %i, %i, 1;", "  setp.ne.u32 %p, %i, 0;", "  @%p bra LOOP;", "  bar.sync 0;",
              "  mov.u64 %c1, %clock64;", "  mov.u32 %acc, 0;"]
    for r in range(nd * chains):
        lines += [f"  mov.b32 %t, %d{r};", "  xor.b32 %acc, %acc, %t;"]
    lines += pipe_rates.EPILOGUE
    return "\n".join(lines) + "\n"


def main():
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    res, keep = {}, []
    out = torch.zeros(132 * 512, dtype=torch.int32, device="cuda")
    clocks = torch.zeros(132, dtype=torch.int64, device="cuda")
    for n, chains in CASES:
        mod, fn = loader.load_text(f"wg_rate_n{n}_c{chains}", text(n, chains))
        keep.append(mod)
        cycles = pipe_rates.clock_cycles(fn, out, clocks)
        per_sm = 4 * R * chains * ITERS / cycles  # wgmma per clock per SM
        flops = per_sm * 2 * 64 * n * 16
        res[f"m64n{n}k16 x{chains}"] = {"median_cycles": cycles, "wgmma_per_clock_per_sm": per_sm,
                                        "flops_per_clock_per_sm": flops, "vs_mma_sync_2730": flops / 2730.0}
        print(f"m64n{n}k16 x{chains}: {cycles:10.0f} cycles  {per_sm:6.3f} wgmma / clock / SM  {flops:7.0f} flops / clock / SM",
              flush=True)
    json.dump({"method": f"132 CTAs x 512 threads (4 warpgroups), {ITERS} iterations of fence, {R} wgmma per accumulator, "
               "commit, wait_group 0; %clock64 of thread 0 per CTA around the loop (median over CTAs, median of runs 2-5)",
               "rates": res}, open(os.path.join(out_dir, "wgmma_rates.json"), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
