"""Candidate (built, not yet measured): gdn_decode_b32 as persistent clusters that prefetch
the next item's state while computing the current one (the design in docs/notes/gdn.md, "a
persistent, prefetching decode"). The promoted kernel is at 74% of the state roofline at
B = 32 where a copy of the same bytes reaches 88-89%: each CTA has no loads in flight while it
computes (experiments/gdn/README.md, occupancy).

- Grid: G clusters of 8 (G = min(16 B, the clusters that stay resident), chosen by the
  experiment from cuOccupancyMaxActiveClusters); cluster c takes items (sequence, key head)
  c, c + G, ... < 16 B (the kernel's extra parameter ``items``).
- Each rank's 128 x 32 state slice of the next item comes by cp.async (8 x 16 B per thread) into
  one 16 KB shared stage while the current item computes; the slot id of item i + 1 is loaded at
  the start of item i.
- The exchanges are double-buffered by item parity: qk_s[2], norm_s[2], bar_qk[2], bar_norm[2],
  waited on with parity (i / 2) & 1 and re-armed by thread 0 after its wait. A rank pushes item
  i + 2 into buffer i & 1 only after its wait on item i + 1, which every rank's push of item
  i + 1 precedes; the q/k pushes come from warp 0, which finishes item i (its output) before
  item i + 1's conv, and every warp has passed item i's delta rule by then. The norm sums: the
  same argument.
- A slot id outside the pool: no state or window is touched, that item's output is NaN, the
  exchanges still run (so the barrier phases stay in step).
- The arithmetic and its order are the promoted kernel's per item (the same helpers), so the
  outputs must be bitwise the promoted kernel's: persist_variant.py checks it.
"""

from __future__ import annotations

from pathlib import Path

from netra import paths

d = paths.generator("gdn", "gen_gdn_decode")
Emit = d.Emit
CONV, DK, DV, KW, NK, NV = d.CONV, d.DK, d.DV, d.KW, d.NK, d.NV
THREADS, CLUSTER, CHUNK, QKR = d.THREADS, d.CLUSTER, d.CHUNK, d.QK_PER_RANK
PARAMS = d.PARAMS
f32, LOG2E = d.f32, d.LOG2E
HERE = Path(__file__).resolve().parent


def _prefetch(e: Emit, A: dict, item: str, slot: str, valid: str) -> None:
    """cp.async of ``item``'s state slice (this rank's 32 columns of its value head, at ``slot``)
    into the stage, predicated on ``valid``; one commit group."""
    e(f"and.b32 %t0, {item}, 15;")
    e("mad.lo.u32 %t0, %t0, 2, %hr;  // the item's value head")
    e("cvt.u64.u32 %pt, %t0;")
    e(f"mad.lo.u64 %pp, {slot}, {NV}, %pt;")
    e(f"mul.lo.u64 %pp, %pp, {DK * DV * 4};")
    e(f"add.u64 %pp, %pp, {A['state_pool']};")
    e(f"mul.wide.u32 %pt, %r, {CHUNK * 4};")
    e("add.u64 %pp, %pp, %pt;  // row 0, this rank's first column")
    e("mov.u32 %t1, stage;")
    for j in range(8):
        e(f"add.u32 %t0, %th, {128 * j};  // 16-byte piece: row p / 8, column group p % 8")
        e("shr.u32 %t2, %t0, 3;")
        e("and.b32 %t3, %t0, 7;")
        e(f"mul.wide.u32 %pt, %t2, {DV * 4};")
        e("add.u64 %pt, %pt, %pp;")
        e("mul.wide.u32 %pq64, %t3, 16;")
        e("add.u64 %pt, %pt, %pq64;")
        e(f"mad.lo.u32 %t2, %t2, {CHUNK * 4}, %t1;")
        e("mad.lo.u32 %t2, %t3, 16, %t2;")
        e(f"@{valid} cp.async.cg.shared.global [%t2], [%pt], 16;")
    e("cp.async.commit_group;")


def generate(maxnreg: int = 0) -> str:
    """The PTX; ``maxnreg``: a .maxnreg directive (ptxas gives the build 95 registers: 5 CTAs per SM)."""
    e = Emit()
    e("// gdn_decode_b32, persistent and prefetching: a candidate of experiments/gdn/gen_gdn_decode_persist.py")
    e(".version 8.1  // st.async")
    e(".target sm_90a")
    e(".address_size 64")
    e()
    e(f".visible .entry {d.NAME}(")
    for p in PARAMS:
        e(f"  .param .u64 {p},")
    e("  .param .u32 qkv_row,")
    e("  .param .u32 z_row,")
    e("  .param .u32 pool_slots,")
    e("  .param .f32 eps,")
    e("  .param .u32 items")
    e(")")
    e(f".reqntid {THREADS}")
    e(f".reqnctapercluster {CLUSTER}, 1, 1")
    if maxnreg:
        e(f".maxnreg {maxnreg}")
    e("{")
    e(".reg .pred %p, %pc, %pq, %pv, %pw, %pbad, %pnx;")
    e(".reg .b32 %th, %warp, %lane, %rank, %hr, %seq, %kh, %h, %r, %col, %ch, %t<4>, %qrow, %zrow, %npool, %wlo, %whi, "
      "%sr, %sq, %it, %nit, %ncl, %ii, %par, %bq, %bqb, %bn, %bnb, %nx;")
    e(".reg .b16 %u<4>, %xb, %bb, %ab, %nwb, %zb;")
    e(f".reg .f32 %s<{CHUNK}>, %f<12>, %q, %k, %v, %x, %kn, %qn, %beta, %dec, %kv, %dl, %o, %ss, %eps, %alog, %dtb;")
    e(".reg .b64 %a<12>, %pt, %pst, %pcv, %slot, %slotn, %pp, %pq64, %npool64;")
    e(f".shared .align 16 .f32 stage[{DK * CHUNK}];  // the next item's 128 x 32 state slice (cp.async)")
    e(f".shared .align 16 .f32 qk_s[{4 * DK}];  // [item parity][q 128 | k 128], from all 8 ranks")
    e(f".shared .align 16 .f32 v_s[{CHUNK}];")
    e(f".shared .align 16 .f32 red[{4 * CHUNK}];")
    e(".shared .align 16 .f32 wsum[8];")
    e(".shared .align 16 .f32 norm_s[8];  // [item parity][the value head's 4 ranks' sums of o^2]")
    e(".shared .align 8 .b64 bar_qk[2];")
    e(".shared .align 8 .b64 bar_norm[2];")
    A = d.load_params(e)
    e("ld.param.u32 %nit, [items];")
    e("cvt.u64.u32 %npool64, %npool;")
    e("mov.u32 %th, %tid.x;")
    e("shr.u32 %warp, %th, 5;")
    e("and.b32 %lane, %th, 31;")
    e("mov.u32 %rank, %cluster_ctarank;")
    e("shr.u32 %hr, %rank, 2;  // value head 2 kh + hr")
    e("and.b32 %r, %rank, 3;  // column chunk")
    e(f"mad.lo.u32 %col, %r, {CHUNK}, %lane;")
    e("setp.eq.u32 %p, %th, 0;")
    e("@!%p bra INIT_DONE;")
    for b in range(2):
        e(f"mbarrier.init.shared::cta.b64 [bar_qk+{8 * b}], 1;")
        e(f"mbarrier.init.shared::cta.b64 [bar_norm+{8 * b}], 1;")
        e(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar_qk+{8 * b}], {2 * DK * 4};")
        e(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar_norm+{8 * b}], 16;")
    e("fence.mbarrier_init.release.cluster;")
    e("INIT_DONE:")
    e("barrier.cluster.arrive.relaxed.aligned;")
    e("mov.u32 %it, %clusterid.x;")
    e("mov.u32 %ncl, %nclusterid.x;")
    e("mov.u32 %ii, 0;")
    e("// the first item's slot id and state slice")
    e("shr.u32 %t0, %it, 4;")
    e("mul.wide.u32 %pt, %t0, 8;")
    e(f"add.u64 %pt, {A['slots']}, %pt;")
    e("setp.lt.u32 %pnx, %it, %nit;")
    e("mov.u64 %slot, 0xFFFFFFFFFFFFFFFF;")
    e("@%pnx ld.global.nc.u64 %slot, [%pt];")
    e("setp.lt.u64 %pv, %slot, %npool64;")
    e("and.pred %pv, %pv, %pnx;")
    _prefetch(e, A, "%it", "%slot", "%pv")
    e("barrier.cluster.wait.aligned;  // every rank's barriers are initialized")

    e("LOOP:")
    e("setp.ge.u32 %p, %it, %nit;")
    e("@%p bra EXIT;")
    e("shr.u32 %seq, %it, 4;")
    e("and.b32 %kh, %it, 15;")
    e("mad.lo.u32 %h, %kh, 2, %hr;")
    e("and.b32 %t0, %ii, 1;")
    e("shr.u32 %par, %ii, 1;")
    e("and.b32 %par, %par, 1;  // the parity of this buffer's phase")
    e("mov.u32 %bq, qk_s;")
    e(f"mad.lo.u32 %bq, %t0, {2 * DK * 4}, %bq;")
    e("mov.u32 %bqb, bar_qk;")
    e("mad.lo.u32 %bqb, %t0, 8, %bqb;")
    e("mov.u32 %bn, norm_s;")
    e("mad.lo.u32 %bn, %t0, 16, %bn;")
    e("mov.u32 %bnb, bar_norm;")
    e("mad.lo.u32 %bnb, %t0, 8, %bnb;")
    e("setp.ge.u64 %pbad, %slot, %npool64;  // also a negative slot id: the whole cluster shares it")
    e("// the next item's slot id, early (its prefetch is issued once this item's slice is read)")
    e("add.u32 %nx, %it, %ncl;")
    e("setp.lt.u32 %pnx, %nx, %nit;")
    e("shr.u32 %t0, %nx, 4;")
    e("mul.wide.u32 %pt, %t0, 8;")
    e(f"add.u64 %pt, {A['slots']}, %pt;")
    e("mov.u64 %slotn, 0xFFFFFFFFFFFFFFFF;")
    e("@%pnx ld.global.nc.u64 %slotn, [%pt];")
    e("// 1. the loads of this item (as the promoted kernel)")
    d.slot_free_loads(e, A)
    d.conv_window_address(e, A["conv_pool"])
    e("not.pred %pv, %pbad;")
    e("and.pred %pv, %pv, %pc;  // a conv thread of a valid slot")
    e("mov.b16 %u1, 0;")
    e("mov.b16 %u2, 0;")
    e("mov.b16 %u3, 0;")
    e("@%pv ld.global.b16 %u1, [%pcv];")
    e("@%pv ld.global.b16 %u2, [%pcv+2];")
    e("@%pv ld.global.b16 %u3, [%pcv+4];")
    d.state_address(e, A["state_pool"])

    e("// 2. conv update (windows written only for a valid slot)")
    e("@!%pc bra CONV_DONE;")
    d.conv_math(e)
    e("@!%pbad st.global.b16 [%pcv], %u2;")
    e("@!%pbad st.global.b16 [%pcv+2], %u3;")
    e("@!%pbad st.global.b16 [%pcv+4], %xb;")
    d._silu_bf16(e, "%x", "%x")
    e("CONV_DONE:")
    e("@!%pq bra PUSH_V;")
    e(f"and.b32 %t0, %th, {QKR - 1};")
    e(f"mad.lo.u32 %t0, %rank, {QKR}, %t0;")
    e(f"setp.ge.u32 %p, %th, {QKR};")
    e(f"@%p add.u32 %t0, %t0, {DK};")
    e("mad.lo.u32 %t1, %t0, 4, %bq;")
    for j in range(CLUSTER):
        e(f"mapa.shared::cluster.u32 %t2, %t1, {j};")
        e(f"mapa.shared::cluster.u32 %t3, %bqb, {j};")
        e("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%t2], %x, [%t3];")
    e("bra.uni PUSHED;")
    e("PUSH_V:")
    e("@!%pc bra PUSHED;")
    e(f"sub.u32 %t0, %th, {2 * QKR};")
    e("mov.u32 %t1, v_s;")
    e("mad.lo.u32 %t1, %t0, 4, %t1;")
    e("st.shared.f32 [%t1], %x;")
    e("PUSHED:")
    e("WAIT_QK:")
    e("mbarrier.try_wait.parity.shared::cta.b64 %p, [%bqb], %par;")
    e("@!%p bra WAIT_QK;")
    e("setp.eq.u32 %p, %th, 0;")
    e(f"@%p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bqb], {2 * DK * 4};  // re-armed for item + 2")
    e("// this item's state slice: landed in the stage (cp.async), read into registers, then the next one's")
    e("cp.async.wait_all;")
    e("bar.sync 0;")
    e("mov.u32 %t1, stage;")
    e(f"mad.lo.u32 %t1, %warp, {32 * CHUNK * 4}, %t1;")
    e("mad.lo.u32 %t1, %lane, 4, %t1;")
    for i in range(CHUNK):
        e(f"ld.shared.f32 %s{i}, [%t1+{i * CHUNK * 4}];")
    e("bar.sync 0;")
    e("setp.lt.u64 %pv, %slotn, %npool64;")
    e("and.pred %pv, %pv, %pnx;")
    _prefetch(e, A, "%nx", "%slotn", "%pv")

    e("// 3. l2norm of q and k, q scaled; beta and exp(g); 4. the delta rule (the promoted kernel's code)")
    d.qk_norms_gates(e, "%bq")
    d.delta_rule(e, store_guard="@!%pbad ")
    e("// 5. gated RMSNorm (as the promoted kernel), sums through norm_s[parity]")
    e("@!%pw bra NEXT;")
    e("mul.f32 %f10, %o, %o;")
    for k in (16, 8, 4, 2, 1):
        e(f"shfl.sync.bfly.b32 %f11, %f10, {k}, 31, 0xffffffff;")
        e("add.f32 %f10, %f10, %f11;")
    e("setp.lt.u32 %p, %lane, 4;")
    e("@!%p bra NORM_PUSHED;")
    e("mad.lo.u32 %t0, %r, 4, %bn;")
    e("and.b32 %t1, %rank, 4;")
    e("add.u32 %t1, %t1, %lane;")
    e("mapa.shared::cluster.u32 %t2, %t0, %t1;")
    e("mapa.shared::cluster.u32 %t3, %bnb, %t1;")
    e("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%t2], %f10, [%t3];")
    e("NORM_PUSHED:")
    e("WAIT_NORM:")
    e("mbarrier.try_wait.parity.shared::cta.b64 %p, [%bnb], %par;")
    e("@!%p bra WAIT_NORM;")
    e("setp.eq.u32 %p, %th, 0;")
    e("@%p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bnb], 16;  // re-armed for item + 2")
    e("ld.shared.v4.f32 {%f0, %f1, %f2, %f3}, [%bn];")
    e("add.f32 %ss, %f0, %f1;")
    e("add.f32 %ss, %ss, %f2;")
    e("add.f32 %ss, %ss, %f3;")
    d.norm_scale(e)
    d.gate_z(e)
    e("@%pbad mov.b16 %u0, 0x7FC0;  // a slot id outside the pool: NaN")
    e(f"mad.lo.u32 %t0, %h, {DV}, %col;")
    e(f"mad.lo.u32 %t1, %seq, {NV * DV}, %t0;")
    e("mul.wide.u32 %pt, %t1, 2;")
    e(f"add.u64 %pt, {A['out']}, %pt;")
    e("st.global.b16 [%pt], %u0;")
    e("NEXT:")
    e("mov.u32 %it, %nx;")
    e("add.u32 %ii, %ii, 1;")
    e("mov.b64 %slot, %slotn;")
    e("bra.uni LOOP;")
    e("EXIT:")
    e("cp.async.wait_all;  // a prefetch predicated off leaves nothing; none may be in flight at exit")
    e("ret;")
    e("}")
    return e.text()
