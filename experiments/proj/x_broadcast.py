"""What every CTA taking in all of x costs by itself: a kernel of the projections' geometry (grid 128 or
132, 512 threads, one CTA per SM by 100 KB of dynamic shared memory, as theirs) whose threads only
load x [M, K] BF16 with the promoted kernels' x loads (gen_fp8_gemv.x_rows_load: coalesced 16-byte
loads, 4 whole lines per instruction) or the x_direct candidate's (x_direct_load: 8 half lines per
instruction), XOR what they loaded (after a CTA barrier, so every load is in flight at
once, as in the kernels) and store one word if it equals a constant (so nothing is dropped).
No weights, no conversion, no mma.

Why (x_direct_variant_25a5a8c.json, x_direct_variant_2_31c539c.json): the promoted kernels' M = 9..16
cost 0.8-1.2 us over M = 1 at 4096 x 2048 and 2048 x 4096; cutting the x prologue's instructions by
up to a third changed nothing, while changing how x comes from L2 (half lines, bulk row copies) cost
0.5-3 us. So the bound should be L2 delivering x to every SM: at M = 16 that is 132 x 64 KB = 8.4 MB
(K = 2048) or 128 x 128 KB = 16.8 MB (K = 4096), as much as or twice the weights. Prediction: this
kernel alone takes ~1-1.5 us over the empty kernel at M = 16 K = 2048, ~2-3 at K = 4096; M = 1 near
the empty kernel; the half-line pattern slower at M = 8 and 16.

The promoted 4096 x 2048 and 2048 x 4096 kernels are timed in the same run (the bench's method, plainly).
The "prologue" pattern is the promoted x prologue itself (row loads, the trip through shared memory,
amax, f16 conversion: gen_fp8_gemv's own functions), without the weights.

Timed by the bench's graph method (CUDA events, median of 7 replays), x either one buffer for every
launch (hot in L2, as in the decode step) or rotated over enough copies to pass 4x the L2 (cold, as
the lifecycle bench's inputs), plainly; the empty kernel with the same grid in the same run.

``--t32``: the same for the 32-token dense builds' x (4 n-tiles, K = 2048, grid 132, M = 1, 16, 32; patterns rows and
prologue): trace_v3_t32_8217d9d.json has their x prologue ending 3.1 / 4.1 / 4.8 us into the CTA at M = 1 / 16 / 32.

  PYTHONPATH=src python3 experiments/proj/x_broadcast.py [--bulk | --t32] --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys

import torch

PATTERNS = ["rows", "direct", "prologue", "bulk", "bulk_stagger", "bulk_mc2", "bulk_mc4"]
SMEM = 136 << 10  # one CTA per SM, as the projection kernels' 98-131 KB; room for every thread's x words
CONST = 0x9E3779B9


def text(K: int, pattern: str, nts: int = 2) -> str:
    from netra import paths

    g = paths.generator("proj", "gen_fp8_gemv")
    W, NC = 16, K // (128 * 16)
    e = g.Emit()
    g.header(e)
    e()
    e(".extern .shared .align 128 .b8 dsm[];")
    e(f".visible .entry x_broadcast_{pattern}_k{K}{'_t32' if nts == 4 else ''}(")
    e("  .param .u64 x,")
    e("  .param .u64 sink,")
    e("  .param .u32 M")
    e(")")
    e(".reqntid 512")
    e("{")
    e("  .reg .pred %p, %pv;")
    e("  .reg .b32 %th, %warp, %lane, %g, %tig, %m, %t0, %t1, %t2, %tok, %kb, %acc;")
    for nt in range(nts):
        for h in range(NC):
            e(f"  .reg .b32 %xr{nt}_{h}_<16>, %inv{nt}_{h};")
    e("  .reg .b64 %px, %pa, %pt64, %ps;")
    e("  ld.param.u64 %px, [x];")
    e("  cvta.to.global.u64 %px, %px;")
    e("  ld.param.u32 %m, [M];")
    e("  mov.u32 %th, %tid.x;")
    e("  shr.u32 %warp, %th, 5;")
    e("  and.b32 %lane, %th, 31;")
    e("  shr.u32 %g, %lane, 2;")
    e("  and.b32 %tig, %lane, 3;")
    for h in range(NC):
        for nt in range(nts):
            (g.x_direct_load if pattern == "direct" else g.x_rows_load)(e, h, nt, W, K)
    if pattern == "prologue":  # the promoted kernels' x prologue itself: rows -> fragments, amax, f16
        e("  .reg .b32 %xst, %t3, %inv<1>;")
        e("  .reg .f32 %amax, %sc, %f<4>;")
        e("  .reg .pred %pz;")
        e("  mov.u32 %xst, dsm;")
        e("  mad.lo.u32 %xst, %warp, 2048, %xst;")
        for h in range(NC):
            for nt in range(nts):
                g.x_rows_to_fragments(e, h, nt)
                g.x_convert(e, h, nt, True)
                e(f"  xor.b32 %inv0, %inv0, %inv{nt}_{h};")
    e("  bar.sync 0;  // every load (and conversion) before the stores below, which cannot move above it")
    e("  // each word to its own shared address after the barrier: the loads stay in flight together")
    e("  mov.u32 %t0, dsm;")
    e("  mad.lo.u32 %t0, %th, 16, %t0;")
    i = 0
    for h in range(NC):
        for nt in range(nts):
            for j in range(4):
                regs = ", ".join(f"%xr{nt}_{h}_{4 * j + c}" for c in range(4))
                e(f"  st.shared.v4.u32 [%t0+{8192 * i}], {{{regs}}};")
                i += 1
    e("  mov.b32 %acc, 0;")
    e(f"  setp.ne.u32 %p, %acc, {CONST};")
    e("  @%p bra DONE;")
    e("  ld.param.u64 %ps, [sink];")
    e("  cvta.to.global.u64 %ps, %ps;")
    e("  st.global.u32 [%ps], %acc;")
    e("DONE:")
    e("  ret;")
    e("}")
    return e.text()


def bulk_text(K: int, pattern: str) -> str:
    """x rows by bulk copies into padded shared rows (stride 2 K + 16, as gen_fp8_gemv.x_stage_layout),
    everyone waits on one mbarrier. ``bulk``: thread 0 copies rows 0 .. M - 1 in order (as stage_x_m16);
    ``bulk_stagger``: each row in 4 pieces, the CTA starting at row ctaid % M and piece ctaid % 4, so the
    SMs do not all ask L2 for the same lines at once; ``bulk_mc2`` / ``bulk_mc4``: clusters of 2 / 4,
    rank r copies rows r, r + C, ... (staggered by cluster id) with .multicast::cluster into every CTA."""
    C = {"bulk_mc2": 2, "bulk_mc4": 4}.get(pattern, 1)
    stride, piece = 2 * K + 16, 2 * K // 4
    e = []
    a = e.append
    a(".version 8.0\n.target sm_90a\n.address_size 64\n")
    a(".extern .shared .align 128 .b8 dsm[];")
    a(f".visible .entry x_broadcast_{pattern}_k{K}(\n  .param .u64 x,\n  .param .u64 sink,\n  .param .u32 M\n)")
    a(".reqntid 512")
    if C > 1:
        a(f".reqnctapercluster {C}, 1, 1")
    a("{")
    a("  .reg .pred %p;")
    a("  .reg .b32 %th, %m, %sb, %xb, %t0, %t1, %row, %pc, %i, %st, %acc, %rank;")
    a("  .reg .b16 %cm;")
    a("  .reg .b64 %px, %pa, %pt, %ps;")
    a("  ld.param.u64 %px, [x];")
    a("  cvta.to.global.u64 %px, %px;")
    a("  ld.param.u32 %m, [M];")
    a("  mov.u32 %th, %tid.x;")
    a("  mov.u32 %sb, dsm;")
    a(f"  add.u32 %xb, %sb, {16 * stride};")
    a("  setp.ne.u32 %p, %th, 0;")
    a("  @%p bra INIT_DONE;")
    a("  mbarrier.init.shared::cta.b64 [%xb], 1;")
    a("  fence.mbarrier_init.release.cluster;")
    a("INIT_DONE:")
    a("  bar.sync 0;")
    if C > 1:
        a("  barrier.cluster.arrive.release.aligned;")
        a("  barrier.cluster.wait.acquire.aligned;  // every CTA's mbarrier is initialized")
    a("  @%p bra ISSUED;")
    a(f"  mul.lo.u32 %t0, %m, {2 * K};")
    a("  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%xb], %t0;")
    if pattern == "bulk":
        a("  mov.u32 %i, 0;")
        a("ROW:")
        a("  setp.ge.u32 %p, %i, %m;")
        a("  @%p bra ISSUED;")
        a(f"  mul.wide.u32 %pt, %i, {2 * K};")
        a("  add.u64 %pa, %px, %pt;")
        a(f"  mad.lo.u32 %t1, %i, {stride}, %sb;")
        a(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%t1], [%pa], {2 * K}, [%xb];")
        a("  add.u32 %i, %i, 1;")
        a("  bra.uni ROW;")
    elif pattern == "bulk_stagger":
        a("  mov.u32 %st, %ctaid.x;")
        a("  mul.lo.u32 %i, %m, 4;  // M rows x 4 pieces, from (ctaid % M, ctaid % 4)")
        a("  mov.u32 %t0, 0;")
        a("PIECE:")
        a("  setp.ge.u32 %p, %t0, %i;")
        a("  @%p bra ISSUED;")
        a("  add.u32 %t1, %t0, %st;")
        a("  rem.u32 %row, %t1, %m;")
        a("  and.b32 %pc, %t1, 3;")
        a(f"  mul.lo.u32 %acc, %row, {2 * K};")
        a(f"  mad.lo.u32 %acc, %pc, {piece}, %acc;")
        a("  cvt.u64.u32 %pt, %acc;")
        a("  add.u64 %pa, %px, %pt;")
        a(f"  mad.lo.u32 %t1, %row, {stride}, %sb;")
        a(f"  mad.lo.u32 %t1, %pc, {piece}, %t1;")
        a(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%t1], [%pa], {piece}, [%xb];")
        a("  add.u32 %t0, %t0, 1;")
        a("  bra.uni PIECE;")
    else:
        a("  mov.u32 %rank, %cluster_ctarank;")
        a(f"  mov.u16 %cm, {(1 << C) - 1};")
        a("  mov.u32 %st, %clusterid.x;")
        a("  mov.u32 %t0, %rank;")
        a("MROW:")
        a("  setp.ge.u32 %p, %t0, %m;")
        a("  @%p bra ISSUED;")
        a("  add.u32 %t1, %t0, %st;")
        a("  rem.u32 %row, %t1, %m;")
        a(f"  mul.wide.u32 %pt, %row, {2 * K};")
        a("  add.u64 %pa, %px, %pt;")
        a(f"  mad.lo.u32 %t1, %row, {stride}, %sb;")
        a(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%t1], [%pa], {2 * K}, [%xb], %cm;")
        a(f"  add.u32 %t0, %t0, {C};")
        a("  bra.uni MROW;")
    a("ISSUED:")
    a("WAIT:")
    a("  mbarrier.try_wait.parity.shared::cta.b64 %p, [%xb], 0;")
    a("  @!%p bra WAIT;")
    a("  mul.lo.u32 %t0, %th, 16;")
    a("  add.u32 %t0, %t0, %sb;")
    a("  ld.shared.u32 %acc, [%t0];")
    a(f"  setp.ne.u32 %p, %acc, {CONST};")
    a("  @%p bra DONE;")
    a("  ld.param.u64 %ps, [sink];")
    a("  cvta.to.global.u64 %ps, %ps;")
    a("  st.global.u32 [%ps], %acc;")
    a("DONE:")
    a("  ret;")
    a("}")
    return "\n".join(e) + "\n"


def launcher(fn):
    """cuLaunchKernel of (x, sink, M) with SMEM bytes of dynamic shared memory on PyTorch's stream."""
    import ctypes

    from cuda.bindings import driver as cu

    types = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32)

    def go(grid, x, sink, M):
        err, = cu.cuLaunchKernel(fn, grid, 1, 1, 512, 1, 1, SMEM, cu.CUstream(torch.cuda.current_stream().cuda_stream),
                                 ((x, sink, M), types), 0)
        assert err == cu.CUresult.CUDA_SUCCESS, err

    return go


def time_row(go, empty, xs, sink, grid: int, M: int, K: int, most: int) -> dict:
    """One case: the kernel with x the same buffer every launch and rotated over min(most, copies_for) copies, and the
    empty kernel of the same grid, by the bench's graph method."""
    from netra.lifecycle import bench

    copies = min(most, bench.copies_for(M * K * 2))
    row = {}
    row["x_same_us"], _ = bench.graph_time(lambda i: go(grid, xs[0].data_ptr(), sink.data_ptr(), M), copies)
    row["x_rotated_us"], _ = bench.graph_time(lambda i: go(grid, xs[i].data_ptr(), sink.data_ptr(), M), copies)
    row["empty_kernel_us"], _ = bench.graph_time(lambda i: empty((grid, 1, 1), (512, 1, 1)), copies)
    row["copies"] = copies
    row["x_bytes_from_l2"] = grid * M * K * 2
    return row


def main():
    from netra.lifecycle import bench
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    if "--bulk" in sys.argv:  # the second run: the bulk-copy patterns beside the promoted row loads
        PATTERNS[:] = ["rows", "bulk", "bulk_stagger", "bulk_mc2", "bulk_mc4"]
    empty = rt_launch.raw_launcher(loader.load("empty_kernel", 0))
    sink = torch.zeros(4, dtype=torch.int32, device="cuda")
    res, keep = {}, []
    if "--t32" in sys.argv:  # the 32-token builds' x: 4 n-tiles of 8 tokens, K = 2048, grid 132, M up to 32
        K, grid = 2048, 132
        xs = torch.randn(1024, 32, K, device="cuda").to(torch.bfloat16)  # 1024 x 128 KB: past 4x the L2
        for pattern in ("rows", "prologue"):
            mod, fn = loader.load_text(f"x_broadcast_{pattern}_k{K}_t32", text(K, pattern, 4), dynamic_smem=SMEM)
            keep.append(mod)
            go = launcher(fn)
            for M in (1, 16, 32):
                row = time_row(go, empty, xs, sink, grid, M, K, 1024)
                res[f"{pattern} K={K} grid={grid} M={M} t32"] = row
                print(pattern, K, grid, M, "t32", {k2: round(v, 2) for k2, v in row.items()}, flush=True)
        json.dump({"method": bench.METHOD.format(R=bench.REPLAYS) + "; plain launches; x rotated over min(1024, "
                   "copies_for) copies or the same buffer; one CTA per SM (136 KB dynamic shared memory)",
                   "kernel": "x_broadcast_{rows,prologue}_k2048_t32: every CTA loads all of x [M, 2048] BF16 for 4 "
                             "n-tiles with the promoted row loads (rows), and turns them into the f16 fragments "
                             "(prologue), nothing else", "cases": res},
                  open(os.path.join(out_dir, "x_broadcast_t32.json"), "w"), indent=1)
        del keep
        return
    for K in (2048, 4096):
        xs = torch.randn(2048, 16, K, device="cuda").to(torch.bfloat16)  # 2048 x 64-128 KB: past 4x the L2 at M = 16
        for pattern in PATTERNS:
            src = text(K, pattern) if pattern in ("rows", "direct", "prologue") else bulk_text(K, pattern)
            mod, fn = loader.load_text(f"x_broadcast_{pattern}_k{K}", src, dynamic_smem=SMEM)
            keep.append(mod)
            go = launcher(fn)
            for grid in (128, 132):
                for M in (1, 4, 8, 9, 16):
                    row = time_row(go, empty, xs, sink, grid, M, K, 2048)
                    res[f"{pattern} K={K} grid={grid} M={M}"] = row
                    print(pattern, K, grid, M, {k2: round(v, 2) for k2, v in row.items()}, flush=True)
        xs = None
        torch.cuda.empty_cache()
    # the promoted kernels of these K in the same run (the bench's method: inputs and weights rotated)
    from netra import contracts
    from netra.lifecycle import testbeds

    floors = (empty, rt_launch.raw_launcher(loader.load("read_floor", 0)))
    for name in ("fp8_gemv_n4096_k2048", "fp8_gemv_n2048_k4096"):
        c, tb = contracts.get(name), testbeds.get(name)
        go = rt_launch.make_guard_and_launch(c, function_handle=loader.load(name, 0).handle, device=0)
        for M in (1, 4, 8, 9, 16):
            r = bench.bench_case(tb, {"M": M}, go, floors, peers=False, log=lambda *_: None)
            res[f"{name} M={M}"] = {"us": r["median_us"], "empty_kernel_us": r["peers"]["empty_kernel"],
                                   "read_floor_us": r["peers"]["read_floor"]}
            print(name, M, res[f"{name} M={M}"], flush=True)
    json.dump({"method": bench.METHOD.format(R=bench.REPLAYS) + "; plain launches; x rotated over min(2048, "
               "copies_for) copies or the same buffer; one CTA per SM (100 KB dynamic shared memory)",
               "kernel": "x_broadcast_{rows,direct}_k{K}: every CTA loads all of x [M, K] BF16 with the promoted "
                         "(rows) or x_direct (direct) loads, nothing else", "cases": res},
              open(os.path.join(out_dir, "x_broadcast_bulk.json" if "--bulk" in sys.argv else "x_broadcast.json"), "w"),
              indent=1)
    del keep


if __name__ == "__main__":
    main()
