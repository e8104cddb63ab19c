"""Generator of moe_act_i512 and fp8_gemv_n2048_k4608_moedown_grp: the MoE block's down side with each
distinct expert's weight read once per launch (netra.contracts.proj.MOE_ACT, MOE_DOWN_GRP). Writes the two
.ptx beside this file; a CPU test checks that the committed files are current. The generator only unrolls
and names registers; every instruction is chosen by hand, and the arithmetic is gen_fp8_gemv's moedown
build's (silu_mul_word, sigmoid_bf16, the x scale, the mma steps), so the outputs are bitwise its.

Why: fp8_gemv_n2048_k4608_moedown walks (token, strip) virtual strips and reads each token's 9 experts, so
tokens that share an expert read its tiles again (and every token the shared expert's): at 32 tokens ~302 MB
per layer where the distinct experts hold ~164 MB (uniform routing; real routers repeat more).

Design:
- moe_act (one warp per (token t, expert j, 128-k block q), 8 per CTA): lane l takes k 4 l .. 4 l + 3 of the
  gate and the up half (x[t, j] for the routed j < 8, xs[t] for the shared j = 8), makes
  bf16(bf16(silu(g)) * u), the block's amax (integer max of the BF16 magnitudes, shfl.bfly), moedown's
  power-of-two scale, f16 values stored where the down kernel's lane (g, tig) finds its B fragments as 64
  contiguous bytes; lane 0 stores xm = the inverse scale times the pair's weight (top[t, j] or
  bf16(sigmoid(glogit[t]))), as moedown_mult.
- The down kernel: CTA s (128, one per SM: 224 KB of shared memory) owns rows 16 s .. 16 s + 15 for every token.
  Before griddepcontrol.wait (the ids were written two or more grids back: the op launches moe_act between)
  its threads read the 8 M ids, build the distinct experts' bitmap, warp 0 their ascending list (as
  gen_fp8_gemv.group_build), and per distinct expert a byte per token (bit j: slot j chose it); a token with
  an id outside 0..E-1 is marked bad (its rows NaN, as moedown). Task 0 is the shared expert (every token,
  slot 8), task u the (u - 1)-th distinct expert; warp w takes tasks w, w + 16, ... into its own 8 KB stage
  (the strip's 4 packed tiles by one cp.async.bulk, its 4 scales by another, on the warp's mbarrier), the
  first one requested before the wait, each next one as soon as the warp has read the stage.
- A task: the pairs that chose the expert, in (token, slot) order, as columns of 8-pair n-tiles (the warp's
  column table: a popc scan over the token bytes); lane (g, tig) loads column g's B fragments of the 4 k
  blocks from xa (L2: written by moe_act) before it waits for the stage, then per block 8 mma.sync m16n8k16
  from 0 (moedown's steps), and the fp32 partials of its columns 2 tig, 2 tig + 1 go to shared memory
  [token][j][q][row]; lane 4 g stores xs = xm x the block's weight scale for its column.
- After one barrier, thread o < 16 M finishes (token o / 16, row o % 16) in moedown's order: its warp
  w = 4 (j % 3) + q summed fma(p, xs, acc) over j = w / 4, + 3, + 6 from 0, the 12 sums in warp order,
  BF16 out, h = bf16(h + out).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "src"))
sys.path.insert(0, str(HERE))
from gen_fp8_gemv import (Emit, a_fragments, act_scale_convert, act_word, bitmap_set, distinct_list, header,  # noqa: E402
                          moedown_order_sum, residual_add, scan_up, sigmoid_bf16, silu_mul_word)
from netra.contracts.proj import (MOE_ACT, MOE_ACT_NAME, MOE_ACT_WARPS, MOE_DOWN_GRP, MOE_DOWN_GRP_CONTRACT,  # noqa: E402
                                  NUM_EXPERTS, TOP_K, MoeDownGrp)

J = TOP_K + 1  # the 8 routed experts and the shared one


def entry(e: Emit, c) -> None:
    """The .entry line and its parameters in the contract's order (netra.contracts.proj)."""
    e(f".visible .entry {c.name}(")
    for i, p in enumerate(c.params):
        e(f"  .param .{p.ptx} {p.name}" + ("," if i < len(c.params) - 1 else ""))
    e(")")


def act(g: MoeDownGrp = MOE_DOWN_GRP, trigger_first: bool = True) -> str:
    """moe_act's PTX. ``trigger_first`` (promoted after 2bd29f9): griddepcontrol.launch_dependents before
    griddepcontrol.wait, so under PDL the grouped moe_down's CTAs launch once every moe_act CTA is resident, during the
    gate | up launch's tail, and read the ids and request their first strips there (the ids are the router's, complete
    before the gate | up launch's wait returned, and that launch triggers after its wait, so before any moe_act CTA
    launched). moe_down's own wait still waits for moe_act's end. Nothing is written before the wait; the same
    arithmetic. Measured (step_ab.py act_trigger_first, logits bitwise, ms with PDL): at 03bb931 batch 16 100-107 us and
    batch 32 43-53 us less a step; at 3e48abe 93-101 and 57-77; plainly level. False: the build before (wait, then
    trigger), the step form act_trigger_prev."""
    I, KB = g.I, g.KB
    e = Emit()
    e(f"// {MOE_ACT_NAME}: each (token, expert, 128-k block)'s down input as moedown converts it (netra.contracts.proj.MOE_ACT).")
    e("// Generated by gen_moe_down_grp.py (its docstring explains the design); regenerate, do not edit.")
    header(e)
    e()
    entry(e, MOE_ACT)
    e(f".reqntid {32 * MOE_ACT_WARPS}")
    e("{")
    e("  .reg .pred %p, %pz, %psh;")
    e("  .reg .b32 %th, %warp, %lane, %m, %gw, %tok, %j, %q, %pi, %t0, %t1, %t2, %t3, %x0, %x1, %u0, %u1;")
    e("  .reg .b16 %q0, %q1;")
    e("  .reg .f32 %f<4>, %amax, %sc;")
    e("  .reg .b64 %px, %ptop, %pxs, %pgl, %pxa, %pxm, %pa, %pt64;")
    for r, n in (("%px", "x"), ("%ptop", "top"), ("%pxs", "xs"), ("%pgl", "glogit"), ("%pxa", "xa"), ("%pxm", "xm")):
        e(f"  ld.param.u64 {r}, [{n}];")
        e(f"  cvta.to.global.u64 {r}, {r};")
    e("  ld.param.u32 %m, [M];")
    e("  mov.u32 %th, %tid.x;")
    e("  shr.u32 %warp, %th, 5;")
    e("  and.b32 %lane, %th, 31;")
    e("  mov.u32 %t0, %ctaid.x;")
    e(f"  mad.lo.u32 %gw, %t0, {MOE_ACT_WARPS}, %warp;  // block (token, j, q) = gw / {J * KB}, gw % {J * KB} / {KB}, gw % {KB}")
    if trigger_first:
        e("  griddepcontrol.launch_dependents;  // first: moe_down reads only the ids (the router's) and weights before its wait")
    e("  griddepcontrol.wait;  // x, xs, top and glogit are the previous kernels' outputs")
    if not trigger_first:
        e("  griddepcontrol.launch_dependents;")
    e(f"  div.u32 %tok, %gw, {J * KB};")
    e("  setp.ge.u32 %p, %tok, %m;")
    e("  @%p ret;")
    e(f"  rem.u32 %pi, %gw, {J * KB};  // j KB + q")
    e(f"  shr.u32 %j, %pi, {KB.bit_length() - 1};")
    e(f"  and.b32 %q, %pi, {KB - 1};")
    e(f"  setp.eq.u32 %psh, %j, {TOP_K};  // the shared expert's row (xs)")
    e(f"  mad.lo.u32 %t0, %tok, {TOP_K}, %j;")
    e(f"  mul.lo.u32 %t0, %t0, {2 * I};")
    e(f"  mul.lo.u32 %t1, %tok, {2 * I};")
    e("  selp.b32 %t0, %t1, %t0, %psh;")
    e("  mad.lo.u32 %t0, %q, 128, %t0;")
    e("  mad.lo.u32 %t0, %lane, 4, %t0;  // the lane's 4 gate values")
    e("  mul.wide.u32 %pt64, %t0, 2;")
    e("  selp.b64 %pa, %pxs, %px, %psh;")
    e("  add.u64 %pa, %pa, %pt64;")
    e("  ld.global.v2.u32 {%x0, %x1}, [%pa];")
    e(f"  ld.global.v2.u32 {{%u0, %u1}}, [%pa+{2 * I}];  // up: I further")
    e("  // x = silu(gate) * up, rounded to BF16 twice as the model's ops (moedown's silu_mul)")
    silu_mul_word(e, "%x0", "%u0")
    silu_mul_word(e, "%x1", "%u1")
    act_scale_convert(e, "%x0", "%x1")
    e("  // k 4 l, 4 l + 1 (word x0) and 4 l + 2, + 3 (x1): lane group tig = 2 (l % 2) (+ 1), word 2 (l / 4) + (l / 2) % 2")
    e(f"  mad.lo.u32 %t0, %tok, {J * KB}, %pi;  // the block")
    act_word(e)
    e("  mul.wide.u32 %pt64, %t0, 4;")
    e("  add.u64 %pa, %pxa, %pt64;")
    e("  st.global.b32 [%pa], %x0;")
    e("  st.global.b32 [%pa+64], %x1;  // tig + 1: 16 words on")
    e("  setp.ne.u32 %p, %lane, 0;")
    e("  @%p ret;")
    e("  // lane 0: xm = the inverse scale times the pair's weight (moedown_mult's)")
    e("  mov.b32 %f0, 0f00000000;")
    e("  @%psh bra ACT_SHARED;")
    e(f"  mad.lo.u32 %t0, %tok, {TOP_K}, %j;")
    e("  mul.wide.u32 %pt64, %t0, 2;")
    e("  add.u64 %pa, %ptop, %pt64;")
    e("  ld.global.b16 %q0, [%pa];")
    e("  cvt.f32.bf16 %f0, %q0;")
    e("  bra.uni ACT_W;")
    e("ACT_SHARED:")
    e("  mul.wide.u32 %pt64, %tok, 2;")
    e("  add.u64 %pa, %pgl, %pt64;")
    e("  ld.global.b16 %q1, [%pa];")
    sigmoid_bf16(e)
    e("  mov.f32 %f0, %f1;")
    e("ACT_W:")
    e("  mov.b32 %f2, %t3;")
    e("  mul.f32 %f2, %f2, %f0;")
    e(f"  mad.lo.u32 %t0, %tok, {J * KB}, %pi;")
    e("  mul.wide.u32 %pt64, %t0, 4;")
    e("  add.u64 %pa, %pxm, %pt64;")
    e("  st.global.f32 [%pa], %f2;")
    e("  ret;")
    e("}")
    return e.text()


def issue(e: Emit, g: MoeDownGrp, u: str = "%u") -> None:
    """(Lane 0.) Task ``u``'s strip into warp %warp's stage: 4 packed tiles (one bulk copy) and 4 scales, on the
    warp's mbarrier. Task 0: the shared expert (ws, ss); task u: the (u - 1)-th distinct expert (w, scale)."""
    S, KB = g.S, g.KB
    e("  mad.lo.u32 %bf, %warp, 8, %sbase;")
    e(f"  add.u32 %bf, %bf, {g.bar_off};")
    e(f"  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bf], {g.SB + 4 * KB};")
    e(f"  setp.eq.u32 %psh, {u}, 0;")
    e(f"  shl.b32 %t0, {u}, 2;")
    e("  add.u32 %t0, %t0, %sbase;")
    e("  mov.u32 %t1, 0;")
    e(f"  @!%psh ld.shared.u32 %t1, [%t0+{g.list_off - 4}];  // the expert id")
    e(f"  mad.lo.u32 %t2, %t1, {S}, %s;")
    e("  selp.b32 %t2, %s, %t2, %psh;")
    e(f"  mul.wide.u32 %pt64, %t2, {g.SB};")
    e("  selp.b64 %pa, %pws, %pw, %psh;")
    e("  add.u64 %pa, %pa, %pt64;")
    e(f"  mad.lo.u32 %ta, %warp, {g.SB}, %sbase;")
    e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%ta], [%pa], {g.SB}, [%bf], %pol;")
    e("  shr.u32 %t3, %s, 3;")
    e(f"  mad.lo.u32 %t2, %t1, {g.N // 128}, %t3;")
    e("  selp.b32 %t2, %t3, %t2, %psh;")
    e(f"  mul.wide.u32 %pt64, %t2, {4 * KB};")
    e("  selp.b64 %pa, %pss, %ps, %psh;")
    e("  add.u64 %pa, %pa, %pt64;")
    e(f"  mad.lo.u32 %ta, %warp, {4 * KB}, %sbase;")
    e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%ta+{g.scl_off}], [%pa], {4 * KB}, [%bf];")


def task_of(e: Emit) -> None:
    """rotate: %tk = (%u + %rot) mod %off (both below %off)."""
    e("  add.u32 %tk, %u, %rot;")
    e("  setp.ge.u32 %prt, %tk, %off;")
    e("  @%prt sub.u32 %tk, %tk, %off;")


def prefetch_task(e: Emit, g: MoeDownGrp, k: int, label: str) -> None:
    """(Lane 0.) An L2 prefetch of the strip of task %u + k W (a routed expert's: k >= 1), if that task exists:
    DRAM -> L2 only, so the warp's later copy of it into its stage hits L2 (down's l2_ahead)."""
    e(f"  add.u32 %un, %u, {k * g.W};")
    e("  setp.ge.u32 %pp, %un, %off;")
    e(f"  @%pp bra {label};")
    e("  shl.b32 %t0, %un, 2;")
    e("  add.u32 %t0, %t0, %sbase;")
    e(f"  ld.shared.u32 %t1, [%t0+{g.list_off - 4}];  // the expert id")
    e(f"  mad.lo.u32 %t2, %t1, {g.S}, %s;")
    e(f"  mul.wide.u32 %pt64, %t2, {g.SB};")
    e("  add.u64 %pa, %pw, %pt64;")
    e(f"  cp.async.bulk.prefetch.L2.global [%pa], {g.SB};")
    e(f"{label}:")


def down(g: MoeDownGrp = MOE_DOWN_GRP, l2_ahead: int = 0, h_early: bool = False, rotate: bool = False) -> str:
    """The grouped down kernel's PTX. The defaults are the promoted build. Candidates (experiments/proj/
    moedown_grp_ahead_variant.py; the same arithmetic, so the same bits): ``l2_ahead`` = D > 0: each warp's lane 0
    also asks L2 for the strips of its next D tasks (the first D with its first copy before the wait, then task
    u + D W with each copy of task u), so a warp, which holds one stage, finds its next strip in L2 instead of
    waiting a DRAM round trip after each task; ``h_early``: thread o < 16 M loads the h it adds to right after
    griddepcontrol.wait instead of after the sums (the residual builds' h_early), its round trip off the tail.
    ``rotate`` (a candidate, experiments/decode/step_ab.py moedown_rotate): CTA s takes task (u + 16 s) mod T where
    the promoted build takes task u (T tasks), so at any moment the CTAs read different experts' strips instead of
    all 128 reading 8 KB pieces of the same ones (each warp still takes the same number of tasks, and the partials
    are stored by pair, so the bits are the same)."""
    assert not (rotate and l2_ahead), "rotate: prefetch_task takes the unrotated task"
    N, KB, W, MX = g.N, g.KB, g.W, g.M_MAX
    assert KB == 4 and W == 16 and g.threads >= 16 * MX and MX == 32 and g.threads >= TOP_K * MX
    assert g.threads * 16 == NUM_EXPERTS * MX, "one 16-byte store per thread zeroes the token masks"
    e = Emit()
    e(f"// {g.name}: the MoE down side, each distinct expert's strip read once per launch (netra.contracts.proj.MOE_DOWN_GRP);")
    e(f"// out[t] = bf16(sum_j of the pairs' down), h[t] = bf16(h[t] + out[t]), bitwise fp8_gemv_n2048_k4608_moedown, M <= {MX}.")
    e("// Generated by gen_moe_down_grp.py (its docstring explains the design); regenerate, do not edit.")
    header(e)
    e()
    e(".extern .shared .align 128 .b8 dsm[];")
    e()
    entry(e, MOE_DOWN_GRP_CONTRACT)
    e(f".reqntid {g.threads}")
    e("{")
    e("  .reg .pred %p, %pq, %pe, %pv, %psh, %pka, %pkb;")
    e("  .reg .b32 %th, %warp, %lane, %g, %tig, %m, %s, %ne, %sbase, %t0, %t1, %t2, %t3, %ej, %bf, %ta;")
    if l2_ahead:
        e("  .reg .pred %pp;")
        e("  .reg .b32 %un;")
    if h_early:
        e("  .reg .pred %phe;")
        e("  .reg .b16 %qh;")
    e("  .reg .b32 %u, %nt, %phase, %total, %col, %pi, %pa_, %pb_, %off;")
    if rotate:
        e("  .reg .pred %prt;")
        e("  .reg .b32 %rot, %tk;")
    e("  .reg .b32 %b<64>, %wa<16>, %a<4>;")
    e("  .reg .b16 %q<4>;")
    e("  .reg .f32 %c<4>, %ws<4>, %f<4>, %xm<4>;")
    e("  .reg .b64 %pxa, %pw, %ps, %ph, %pid, %pws, %pss, %pxm, %pout, %pa, %pb, %pt64, %rid, %pol;")
    for r, n in (("%pxa", "xa"), ("%pw", "w"), ("%ps", "scale"), ("%ph", "h"), ("%pid", "ids"), ("%pws", "ws"),
                 ("%pss", "ss"), ("%pxm", "xm"), ("%pout", "out")):
        e(f"  ld.param.u64 {r}, [{n}];")
        e(f"  cvta.to.global.u64 {r}, {r};")
    e("  ld.param.u32 %m, [M];")
    e("  ld.param.u32 %ne, [E];")
    e("  mov.u32 %th, %tid.x;")
    e("  shr.u32 %warp, %th, 5;")
    e("  and.b32 %lane, %th, 31;")
    e("  shr.u32 %g, %lane, 2;")
    e("  and.b32 %tig, %lane, 3;")
    e("  mov.u32 %s, %ctaid.x;  // the strip: rows 16 s .. 16 s + 15")
    e("  mov.u32 %sbase, dsm;")
    e("  createpolicy.fractional.L2::evict_first.b64 %pol, 1.0;  // each strip is read once per launch")
    e("  setp.ne.u32 %p, %th, 0;")
    e("  @%p bra INIT_DONE;")
    for i in range(W):
        e(f"  mbarrier.init.shared::cta.b64 [%sbase+{g.bar_off + 8 * i}], 1;  // warp {i}'s stage")
    e("  fence.mbarrier_init.release.cluster;  // visible to the async proxy (the bulk copies)")
    e(f"  st.shared.u32 [%sbase+{g.bad_off}], 0;")
    e("INIT_DONE:")
    e("  // zero the token masks (one 16-byte store per thread) and the bitmap")
    e("  mov.u32 %t1, 0;")
    e("  shl.b32 %t0, %th, 4;")
    e("  add.u32 %t0, %t0, %sbase;")
    e(f"  st.shared.v4.u32 [%t0+{g.mask_off}], {{%t1, %t1, %t1, %t1}};")
    e("  setp.lt.u32 %p, %th, 8;")
    e("  shl.b32 %t0, %th, 2;")
    e("  add.u32 %t0, %t0, %sbase;")
    e(f"  @%p st.shared.u32 [%t0+{g.bm_off}], 0;")
    e("  bar.sync 0;")
    e("  // the ids before the wait (written two or more grids back, read coherently): thread t < 8 M takes ids[t];")
    e("  // outside 0..E-1: 0xffffffff in the table and the token marked bad")
    e(f"  shl.b32 %t0, %m, {TOP_K.bit_length() - 1};")
    e("  setp.lt.u32 %pq, %th, %t0;")
    e("  mul.wide.u32 %pt64, %th, 8;")
    e("  add.u64 %pa, %pid, %pt64;")
    e("  mov.u64 %rid, -1;")
    e("  @%pq ld.relaxed.gpu.global.u64 %rid, [%pa];")
    e("  cvt.u64.u32 %pt64, %ne;")
    e("  setp.lt.u64 %pe, %rid, %pt64;  // unsigned: a negative id is outside too")
    e("  and.pred %pe, %pe, %pq;")
    e("  cvt.u32.u64 %ej, %rid;")
    e("  selp.b32 %ej, %ej, 0xffffffff, %pe;")
    e("  shl.b32 %t0, %th, 2;")
    e("  add.u32 %t0, %t0, %sbase;")
    e(f"  @%pq st.shared.u32 [%t0+{g.ids_off}], %ej;")
    e("  not.pred %p, %pe;")
    e("  and.pred %p, %p, %pq;")
    e(f"  shr.u32 %t2, %th, {TOP_K.bit_length() - 1};")
    e("  mov.u32 %t3, 1;")
    e("  shl.b32 %t3, %t3, %t2;")
    e(f"  @%p red.shared.or.b32 [%sbase+{g.bad_off}], %t3;")
    bitmap_set(e, g.bm_off)
    e("  bar.sync 0;  // the bitmap")
    distinct_list(e, g.bm_off, g.u_off, g.list_off, g.pos_off, note=" (gen_fp8_gemv.group_build's)")
    e("  bar.sync 0;  // the list, pos and U")
    e("  // the token masks: distinct expert pos[id], token t's byte, bit j (thread 8 t + j)")
    e("  add.u32 %t1, %ej, %sbase;")
    e("  mov.u32 %t0, 0;")
    e(f"  @%pe ld.shared.u8 %t0, [%t1+{g.pos_off}];")
    e(f"  shr.u32 %t2, %th, {TOP_K.bit_length() - 1};  // token t")
    e(f"  and.b32 %t3, %th, {TOP_K - 1};")
    e("  and.b32 %t1, %t2, 3;")
    e("  mad.lo.u32 %t3, %t1, 8, %t3;  // bit 8 (t % 4) + j of word t / 4")
    e("  mov.u32 %t1, 1;")
    e("  shl.b32 %t1, %t1, %t3;")
    e("  and.b32 %t2, %t2, 0xfffffffc;")
    e(f"  mad.lo.u32 %t0, %t0, {MX}, %t2;")
    e("  add.u32 %t0, %t0, %sbase;")
    e(f"  @%pe red.shared.or.b32 [%t0+{g.mask_off}], %t1;")
    e(f"  ld.shared.u32 %total, [%sbase+{g.u_off}];")
    e("  add.u32 %total, %total, 1;  // tasks: the shared expert, then the U distinct ones")
    e("  bar.sync 0;  // the masks, before any task reads them")
    e("  mov.u32 %off, %total;  // %off: the task count from here")
    e("  mov.u32 %u, %warp;  // this warp's tasks: warp, warp + 16, ...")
    tk = "%tk" if rotate else "%u"
    if rotate:
        e(f"  mul.lo.u32 %rot, %s, {W};")
        e("  rem.u32 %rot, %rot, %off;  // rotate: CTA s starts at task 16 s (mod T)")
        task_of(e)
    e("  setp.ge.u32 %p, %u, %off;")
    e("  @%p bra ISSUED0;")
    e("  setp.ne.u32 %p, %lane, 0;")
    e("  @%p bra ISSUED0;")
    e("  // lane 0: this warp's first strip, before the wait (weights never change while kernels run)")
    issue(e, g, tk)
    for k in range(1, l2_ahead + 1):
        prefetch_task(e, g, k, f"PF0_{k}")
    e("ISSUED0:")
    e("  griddepcontrol.wait;  // xa, xm (moe_act's) and h from here")
    e("  griddepcontrol.launch_dependents;")
    if h_early:
        e("  // h_early: thread o < 16 M loads its h (token o / 16, row o % 16) now, added after the sums")
        e("  shl.b32 %t1, %m, 4;")
        e("  setp.lt.u32 %phe, %th, %t1;")
        e("  shr.u32 %t2, %th, 4;")
        e("  and.b32 %t3, %th, 15;")
        e(f"  mad.lo.u32 %t0, %t2, {N}, %t3;")
        e("  mad.lo.u32 %t0, %s, 16, %t0;")
        e("  mul.wide.u32 %pt64, %t0, 2;")
        e("  add.u64 %pb, %ph, %pt64;")
        e("  @%phe ld.global.b16 %qh, [%pb];")
    e("  mov.u32 %phase, 0;")
    e("TASK:")
    e("  setp.ge.u32 %p, %u, %off;")
    e("  @%p bra TASKS_DONE;")
    if rotate:
        task_of(e)
    e("  // the task's columns: the shared expert's are tokens 0 .. M - 1 (slot 8); a routed expert's its (token, slot)")
    e("  // pairs in order, from the token bytes by a popc scan into the warp's column table")
    e(f"  setp.eq.u32 %psh, {tk}, 0;")
    e("  mov.u32 %total, %m;")
    e("  @%psh bra COLS_DONE;")
    e(f"  sub.u32 %t0, {tk}, 1;")
    e(f"  mad.lo.u32 %t0, %t0, {MX}, %lane;")
    e("  add.u32 %t0, %t0, %sbase;")
    e(f"  ld.shared.u8 %t0, [%t0+{g.mask_off}];  // lane l: token l's slots")
    e("  popc.b32 %t1, %t0;")
    e("  mov.u32 %t2, %t1;")
    scan_up(e)
    e("  shfl.sync.idx.b32 %total, %t2, 31, 31, 0xffffffff;")
    e("  sub.u32 %t2, %t2, %t1;  // this token's first column")
    e(f"  mad.lo.u32 %t2, %warp, {TOP_K * MX}, %t2;")
    e("  add.u32 %t2, %t2, %sbase;")
    e("COLS:")
    e("  setp.eq.u32 %p, %t0, 0;")
    e("  @%p bra COLS_W;")
    e("  neg.s32 %t1, %t0;")
    e("  and.b32 %t1, %t0, %t1;")
    e("  bfind.u32 %t3, %t1;  // slot j")
    e("  xor.b32 %t0, %t0, %t1;")
    e(f"  mad.lo.u32 %t3, %lane, {TOP_K}, %t3;")
    e(f"  st.shared.u8 [%t2+{g.col_off}], %t3;  // 8 t + j")
    e("  add.u32 %t2, %t2, 1;")
    e("  bra.uni COLS;")
    e("COLS_W:")
    e("  bar.warp.sync 0xffffffff;  // the column table, visible to the warp")
    e("COLS_DONE:")
    e("  mov.u32 %nt, 0;")
    e("NTILE:")
    e("  // column 8 nt + g: its pair (token t, slot j) as pi = 9 t + j (0xffffffff past the columns)")
    e("  add.u32 %col, %nt, %g;")
    e("  setp.lt.u32 %pv, %col, %total;")
    e("  mad.lo.u32 %pi, %col, 9, 8;")
    e("  @%psh bra PI_DONE;")
    e(f"  mad.lo.u32 %t0, %warp, {TOP_K * MX}, %col;")
    e("  add.u32 %t0, %t0, %sbase;")
    e("  mov.u32 %t1, 0;")
    e(f"  @%pv ld.shared.u8 %t1, [%t0+{g.col_off}];")
    e("  shr.u32 %t2, %t1, 3;")
    e("  and.b32 %t1, %t1, 7;")
    e(f"  mad.lo.u32 %pi, %t2, {J}, %t1;")
    e("PI_DONE:")
    e("  selp.b32 %pi, %pi, 0xffffffff, %pv;")
    e("  // the column's B fragments of the 4 k blocks (xa, L2), before the stage is waited for")
    e(f"  mul.lo.u32 %t0, %pi, {KB * 256};")
    e("  mad.lo.u32 %t0, %tig, 64, %t0;")
    e("  mul.wide.u32 %pt64, %t0, 1;")
    e("  add.u64 %pa, %pxa, %pt64;")
    for q in range(KB):
        for jj in range(4):
            regs = [f"%b{16 * q + 4 * jj + c}" for c in range(4)]
            for r in regs:
                e(f"  mov.b32 {r}, 0;")
            e(f"  @%pv ld.global.v4.u32 {{{', '.join(regs)}}}, [%pa+{256 * q + 16 * jj}];")
    e("  // and its xm row (lane 4 g stores xs below)")
    e("  mul.wide.u32 %pt64, %pi, 16;")
    e("  add.u64 %pb, %pxm, %pt64;")
    e("  setp.eq.u32 %p, %tig, 0;")
    e("  and.pred %p, %p, %pv;")
    for r in range(4):
        e(f"  mov.f32 %xm{r}, 0f00000000;")
    e("  @%p ld.global.v4.f32 {%xm0, %xm1, %xm2, %xm3}, [%pb];")
    e("  setp.ne.u32 %p, %nt, 0;")
    e("  @%p bra STAGED;")
    e("  mad.lo.u32 %bf, %warp, 8, %sbase;")
    e(f"  add.u32 %bf, %bf, {g.bar_off};")
    e("WAIT:")
    e("  mbarrier.try_wait.parity.shared::cta.b64 %p, [%bf], %phase;")
    e("  @!%p bra WAIT;")
    e("STAGED:")
    e(f"  mad.lo.u32 %t0, %warp, {4 * KB}, %sbase;")
    e(f"  ld.shared.v4.f32 {{%ws0, %ws1, %ws2, %ws3}}, [%t0+{g.scl_off}];  // the 4 weight-block scales")
    e("  // xs = xm x the block's weight scale (moedown: the inverse x scale times the expert weight, times ws)")
    e("  setp.eq.u32 %p, %tig, 0;")
    e("  and.pred %p, %p, %pv;")
    for r in range(4):
        e(f"  mul.f32 %xm{r}, %xm{r}, %ws{r};")
    e("  shl.b32 %t0, %pi, 4;")
    e("  add.u32 %t0, %t0, %sbase;")
    e(f"  @%p st.shared.v4.f32 [%t0+{g.xs_off}], {{%xm0, %xm1, %xm2, %xm3}};")
    e("  // the pairs of this lane's accumulator columns 2 tig, 2 tig + 1 (from lanes 8 tig, 8 tig + 4)")
    e("  shl.b32 %t0, %tig, 3;")
    e("  shfl.sync.idx.b32 %pa_, %pi, %t0, 31, 0xffffffff;")
    e("  add.u32 %t0, %t0, 4;")
    e("  shfl.sync.idx.b32 %pb_, %pi, %t0, 31, 0xffffffff;")
    e("  setp.ne.u32 %pka, %pa_, 0xffffffff;")
    e("  setp.ne.u32 %pkb, %pb_, 0xffffffff;")
    e(f"  mad.lo.u32 %pa_, %pa_, {KB * 64}, %sbase;  // partials [pi][q][row] fp32")
    e("  mad.lo.u32 %pa_, %g, 4, %pa_;")
    e(f"  mad.lo.u32 %pb_, %pb_, {KB * 64}, %sbase;")
    e("  mad.lo.u32 %pb_, %g, 4, %pb_;")
    e(f"  mad.lo.u32 %ta, %warp, {g.SB}, %sbase;")
    e("  mad.lo.u32 %ta, %lane, 16, %ta;")
    for q in range(KB):
        e(f"  // k block {q}: the warp's A fragments, 8 mma steps from 0 (moedown's)")
        for jj in range(4):
            e(f"  ld.shared.v4.u32 {{%wa{4 * jj}, %wa{4 * jj + 1}, %wa{4 * jj + 2}, %wa{4 * jj + 3}}}, [%ta+{2048 * q + 512 * jj}];")
        for i in range(4):
            e(f"  mov.f32 %c{i}, 0f00000000;")
        for i in range(8):
            jj, half = i // 2, i % 2
            base = jj * 4 + 2 * half
            a_fragments(e, f"%wa{base}", f"%wa{base + 1}")
            e(f"  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%c0, %c1, %c2, %c3}}, {{%a0, %a1, %a2, %a3}}, "
              f"{{%b{16 * q + 2 * i}, %b{16 * q + 2 * i + 1}}}, {{%c0, %c1, %c2, %c3}};")
        e(f"  @%pka st.shared.f32 [%pa_+{g.part_off + 64 * q}], %c0;  // row g")
        e(f"  @%pka st.shared.f32 [%pa_+{g.part_off + 64 * q + 32}], %c2;  // row g + 8")
        e(f"  @%pkb st.shared.f32 [%pb_+{g.part_off + 64 * q}], %c1;")
        e(f"  @%pkb st.shared.f32 [%pb_+{g.part_off + 64 * q + 32}], %c3;")
    e("  add.u32 %nt, %nt, 8;")
    e("  setp.lt.u32 %p, %nt, %total;")
    e("  @%p bra NTILE;")
    e("  // the stage is read: lane 0 requests the warp's next task into it")
    e("  bar.warp.sync 0xffffffff;")
    e("  xor.b32 %phase, %phase, 1;")
    e(f"  add.u32 %u, %u, {W};")
    e("  setp.ge.u32 %p, %u, %off;")
    e("  @%p bra TASK;")
    e("  setp.ne.u32 %p, %lane, 0;")
    e("  @%p bra TASK;")
    e("  fence.proxy.async.shared::cta;  // the generic reads of the stage before the async-proxy writes")
    if rotate:
        task_of(e)
    issue(e, g, tk)
    if l2_ahead:
        prefetch_task(e, g, l2_ahead, "PFL")
    e("  bra.uni TASK;")
    e("TASKS_DONE:")
    e("  bar.sync 0;  // every partial and xs")
    e("  // thread o < 16 M: token o / 16, row o % 16, in moedown's order")
    e("  shl.b32 %t1, %m, 4;")
    e("  setp.ge.u32 %p, %th, %t1;")
    e("  @%p bra END;")
    e("  shr.u32 %t2, %th, 4;  // token")
    e("  and.b32 %t3, %th, 15;  // row")
    e(f"  mul.lo.u32 %t0, %t2, {J * KB * 64};")
    e("  mad.lo.u32 %t0, %t3, 4, %t0;")
    e("  add.u32 %t0, %t0, %sbase;  // the token's partials, this row")
    e(f"  mad.lo.u32 %t1, %t2, {J * KB * 4}, %sbase;  // its xs")
    moedown_order_sum(e, "%t0", g.part_off, "%t1", g.xs_off)
    e(f"  ld.shared.u32 %t1, [%sbase+{g.bad_off}];")
    e("  shr.u32 %t1, %t1, %t2;")
    e("  and.b32 %t1, %t1, 1;")
    e("  setp.ne.u32 %p, %t1, 0;")
    e("  @%p mov.b16 %q0, 0x7FC0;  // an id that was not an expert: NaN out (NaN + h is NaN)")
    e(f"  mad.lo.u32 %t0, %t2, {N}, %t3;")
    e("  mad.lo.u32 %t0, %s, 16, %t0;")
    e("  mul.wide.u32 %pt64, %t0, 2;")
    e("  add.u64 %pb, %pout, %pt64;")
    e("  st.global.b16 [%pb], %q0;")
    e("  add.u64 %pb, %ph, %pt64;")
    residual_add(e, h="%qh" if h_early else None)
    e("  st.global.b16 [%pb], %q0;")
    e("END:")
    e("  ret;")
    e("}")
    return e.text()


def main(argv=None) -> int:
    (HERE / f"{MOE_ACT_NAME}.ptx").write_text(act())
    (HERE / f"{MOE_DOWN_GRP.name}.ptx").write_text(down())
    print(f"wrote {MOE_ACT_NAME}.ptx and {MOE_DOWN_GRP.name}.ptx ({MOE_DOWN_GRP.smem} B dynamic smem)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
