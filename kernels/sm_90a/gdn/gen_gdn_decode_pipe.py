"""Generator of gdn_decode_b32_pipe: the Gated DeltaNet decode step of B <= 32 sequences (the same
signature, arithmetic and bits as gdn_decode_b32, plus the batch size) as a persistent pipeline of
whole value-head states, for the bandwidth-bound batches.

Why: at B = 32 gdn_decode_b32 (and its smem build) reach 77-79% of the state roofline where a copy of
the same bytes reaches 89-94%. Each CTA of a cluster of 8 loads its 16 KB slice once, computes, stores
and exits, so no loads are in flight while it computes; more CTAs per SM did not help, and the driver
keeps at most 124 clusters of 8 resident (occupancy_diag.json) whatever the occupancy. Here no cluster
is needed and each SM streams. Measured (experiments/gdn/README.md, last sections): as a PDL chain
B = 32 37.4-37.9 us (85%); launched plainly 40.5-41 us, where a launch's start is not hidden.

Work split: an item is (sequence, key head kh): its two value heads 2 kh and 2 kh + 1 share q and k.
G = min(16 B, 132) CTAs of 512 threads, one per SM (2 x 64 KB stages of dynamic shared memory); CTA c
takes items c, c + G, ... (at most 4). Per item:
1. the conv update of its 512 channels, one per thread (q: th < 128, k: th < 256, the two heads' v:
   th >= 256), each window written by its only reader; the model's BF16 rounding; x to shared memory;
2. q, k l2-normalized over dk by warps 0-3 (shfl.bfly then the 4 warp sums in warp order), q scaled;
3. per value head (sub-item hh = 0, 1): beta and exp(g); the head's 128 x 128 fp32 state, which a
   cp.async.bulk (no L2 policy: evict-first cost 2.4 us at B = 32) brought into stage hh while the item
   before was computed, is read by
   warp w = 4 g + r as rows 32 g .. 32 g + 31 of columns 32 r + lane: S *= exp(g); kv = S^T k (each
   thread's 32 rows in order, the 4 row groups' partials in order); the stage is then free and thread 0
   requests the next item's state of this head into it; delta = beta (v - kv); S += k delta^T, stored
   by st.global.cs from registers; o = S^T q (partials as kv); the gated RMSNorm over the head's 128
   columns (warps 0-3: each 32-column sum of o^2 by shfl.bfly, the 4 added in order), BF16 out.
The loads of the next item's qkv, conv windows and weights, b, a, z, A_log and dt_bias are issued when
an item starts, so only the first item pays their latency. Every sum has gdn_decode_b32's order and
every arithmetic instruction is its (the same helper functions), so the outputs and pools are bitwise.
A slot id outside [0, pool_slots) touches no state and makes that sequence's outputs NaN.

  python3 kernels/sm_90a/gdn/gen_gdn_decode_pipe.py      (rewrites gdn_decode_b32_pipe.ptx and _pipe_pdl.ptx)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "src"))
from netra import paths  # noqa: E402
from netra.contracts.gdn import CONV_DIM as CONV, DK, DV, KW, NK, NV, PIPE_ITEMS, PIPE_SMEM  # noqa: E402

G = paths.generator("gdn", "gen_gdn_decode")
Emit, f32 = G.Emit, G.f32

NAME = "gdn_decode_b32_pipe"
PDL_NAME = f"{NAME}_pdl"
THREADS = 512
STAGE = DK * DV * 4  # one value head's state: 64 KB, contiguous in the pool
PIECE = STAGE // 4  # bytes per cp.async.bulk
PARAMS = G.PARAMS
_OPT = {"read_hint": False, "st": ".cs"}  # cache options of the build being generated (set by generate)
assert PIPE_SMEM == 2 * STAGE


def _item_const_loads(e: Emit, A: dict) -> None:
    """For item %it1 (if %pn) at slot %nslot: its sequence and key head, this thread's conv channel,
    conv weights, window (if the slot is valid: %pg), and both heads' A_log and dt_bias."""
    e("shr.u32 %nseq, %it1, 4;")
    e(f"and.b32 %nkh, %it1, {NK - 1};")
    e("shr.u32 %t0, %th, 7;")
    e("and.b32 %t1, %th, 127;")
    e(f"mad.lo.u32 %t2, %t0, {NK * DK}, %t1;")
    e(f"mad.lo.u32 %t2, %nkh, {DK}, %t2;  // q (th < 128) or k channel")
    e("sub.u32 %t3, %th, 256;")
    e(f"mad.lo.u32 %t3, %nkh, {2 * DV}, %t3;")
    e(f"add.u32 %t3, %t3, {2 * NK * DK};  // v channel of head 2 kh (th < 384) or 2 kh + 1")
    e("setp.lt.u32 %p, %th, 256;")
    e("selp.b32 %nch, %t2, %t3, %p;")
    e("mul.wide.u32 %pt, %nch, 8;")
    e(f"add.u64 %pt, {A['conv_w']}, %pt;")
    e("@%pn ld.global.nc.v2.b32 {%nwlo, %nwhi}, [%pt];  // conv_w[ch, 0..3]")
    e("mul.wide.u32 %pt, %nkh, 8;  // heads 2 kh, 2 kh + 1")
    e(f"add.u64 %pcw, {A['a_log']}, %pt;")
    e("@%pn ld.global.nc.f32 %nal0, [%pcw];")
    e("@%pn ld.global.nc.f32 %nal1, [%pcw+4];")
    e(f"add.u64 %pcw, {A['dt_bias']}, %pt;")
    e("@%pn ld.global.nc.f32 %ndt0, [%pcw];")
    e("@%pn ld.global.nc.f32 %ndt1, [%pcw+4];")
    e("setp.lt.u64 %pg, %nslot, %np64;  // also a negative slot id")
    e("and.pred %pg, %pg, %pn;")
    e(f"mul.lo.u64 %npcv, %nslot, {CONV};")
    e("cvt.u64.u32 %pt, %nch;")
    e("add.u64 %npcv, %npcv, %pt;")
    e(f"mul.lo.u64 %npcv, %npcv, {2 * (KW - 1)};")
    e(f"add.u64 %npcv, {A['conv_pool']}, %npcv;  // conv_pool[slot, ch, 0..2]")
    e("@%pg ld.global.b16 %nu1, [%npcv];")
    e("@%pg ld.global.b16 %nu2, [%npcv+2];")
    e("@%pg ld.global.b16 %nu3, [%npcv+4];")


def _item_act_loads(e: Emit, A: dict, nc: str) -> None:
    """For item %it1 (if %pn): the projection outputs: this thread's qkv value, both heads' b and a
    (one 32-bit word each), and warps 0-3's z of column th of both heads."""
    e("mad.lo.u32 %t1, %nseq, %qrow, %nch;")
    e("mul.wide.u32 %pt, %t1, 2;")
    e(f"add.u64 %pt, {A['qkv']}, %pt;")
    e(f"@%pn ld.global{nc}.b16 %nxb, [%pt];")
    e("shl.b32 %t1, %nkh, 1;")
    e(f"mad.lo.u32 %t0, %nseq, {NV}, %t1;")
    e("mul.wide.u32 %pt, %t0, 2;")
    e(f"add.u64 %pcw, {A['b_in']}, %pt;")
    e(f"@%pn ld.global{nc}.b32 %nbp, [%pcw];  // b of heads 2 kh | 2 kh + 1")
    e(f"add.u64 %pcw, {A['a_in']}, %pt;")
    e(f"@%pn ld.global{nc}.b32 %nap, [%pcw];")
    e("and.pred %p, %pw, %pn;")
    e(f"mad.lo.u32 %t0, %nkh, {2 * DV}, %th;")
    e("mad.lo.u32 %t1, %nseq, %zrow, %t0;")
    e("mul.wide.u32 %pt, %t1, 2;")
    e(f"add.u64 %pt, {A['z']}, %pt;")
    e(f"@%p ld.global{nc}.b16 %nz0, [%pt];")
    e(f"@%p ld.global{nc}.b16 %nz1, [%pt+{2 * DV}];")


def _request_state(e: Emit, A: dict, hh: int, tag: str, slot: str = "%nslot", kh: str = "%nkh", exists: str = "%pn",
                   valid: str = "%pg", stage=None) -> None:
    """Thread 0: the state of head 2 kh + hh of item %it1 (if ``exists``) into stage hh, completing its
    mbarrier; a plain arrive where the slot is invalid (``valid`` false), so the phase still completes.
    ``exists`` and ``valid`` are predicates, or "" for true. ``stage``: another stage than hh (an int, or
    a register holding it: the 3-stage build)."""
    stage = hh if stage is None else stage
    e(f"and.pred %p, %p0, {exists};" if exists else "mov.pred %p, %p0;")
    e(f"@!%p bra REQ_DONE_{tag};")
    e("mov.u32 %sb, bar_st;")
    if isinstance(stage, str):
        e(f"mad.lo.u32 %sb, {stage}, 8, %sb;")
    elif stage:
        e(f"add.u32 %sb, %sb, {8 * stage};")
    if valid:
        e(f"@!{valid} bra REQ_BAD_{tag};")
    e(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%sb], {STAGE};")
    e(f"mul.lo.u64 %psrc, {slot}, {NV};")
    e(f"shl.b32 %t0, {kh}, 1;")
    if hh:
        e("add.u32 %t0, %t0, 1;")
    e("cvt.u64.u32 %pt, %t0;")
    e("add.u64 %psrc, %psrc, %pt;")
    e(f"shl.b64 %psrc, %psrc, {(STAGE - 1).bit_length()};")
    e(f"add.u64 %psrc, {A['state_pool']}, %psrc;  // state_pool[slot, h]: 64 KB")
    e("mov.u32 %sd, st_dyn;")
    if isinstance(stage, str):
        e(f"shl.b32 %t0, {stage}, {(STAGE - 1).bit_length()};")
        e("add.u32 %sd, %sd, %t0;")
    elif stage:
        e(f"add.u32 %sd, %sd, {STAGE * stage};")
    for j in range(STAGE // PIECE):
        if _OPT["read_hint"]:
            e(f"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%sd+{j * PIECE}], "
              f"[%psrc+{j * PIECE}], {PIECE}, [%sb], %pol;")
        else:
            e(f"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%sd+{j * PIECE}], "
              f"[%psrc+{j * PIECE}], {PIECE}, [%sb];")
    e(f"bra.uni REQ_DONE_{tag};")
    e(f"REQ_BAD_{tag}:")
    e("mbarrier.arrive.shared::cta.b64 _, [%sb];")
    e(f"REQ_DONE_{tag}:")


def _partials(e: Emit, src: str, dst: str, buf: str) -> None:
    """dst = the sum over the 4 row groups of src (per column), in group order, through ``buf``
    ([4][128] f32): gdn_decode_b32's warp order. One bar.sync; ``buf`` is rewritten only after
    later barriers."""
    e(f"mov.u32 %t2, {buf};")
    e("shl.b32 %t1, %col, 2;")
    e(f"mad.lo.u32 %t0, %g, {4 * DV}, %t1;")
    e("add.u32 %t0, %t0, %t2;")
    e(f"st.shared.f32 [%t0], {src};")
    e("bar.sync 0;")
    e("add.u32 %t0, %t2, %t1;")
    for w in range(4):
        e(f"ld.shared.f32 %f{w}, [%t0+{4 * DV * w}];")
    e(f"add.f32 {dst}, %f0, %f1;")
    e(f"add.f32 {dst}, {dst}, %f2;")
    e(f"add.f32 {dst}, {dst}, %f3;")


def _request_ahead(e: Emit, A: dict, hh: int, tag: str, tma_store: bool = False) -> None:
    """3 stages: every thread has read this sub-item's stage %stg; the sub-item 3 on goes there (head 1
    of the next item after head 0, head 0 of the item after next after head 1). Then the stage and
    parity of the following sub-item. ``tma_store``: this stage still holds S until its bulk store has
    read it, so the request goes into the stage before (%stg + 2 mod 3), whose store (the sub-item
    before) thread 0 waits to have been read: the next item's head hh (the first sub-item's is the
    prologue's)."""
    if tma_store:
        e("// the stage of the sub-item before: its bulk store read, the next item's head hh goes there")
        e("add.u32 %t2, %stg, 2;")
        e("setp.ge.u32 %p, %t2, 3;")
        e("@%p sub.u32 %t2, %t2, 3;")
        if hh == 0:
            e("setp.ne.and.u32 %p, %n, 0, %p0;")
        else:
            e("mov.pred %p, %p0;")
        e(f"@!%p bra AHEAD_DONE{tag};")
        e("cp.async.bulk.wait_group.read 0;")
        _request_state(e, A, hh, f"A{tag}", stage="%t2")
        e(f"AHEAD_DONE{tag}:")
        _advance(e)
        return
    e("// every thread has read stage %stg: the sub-item three on goes there")
    if hh == 0:
        _request_state(e, A, 1, f"A{tag}", stage="%stg")
    else:
        _request_state(e, A, 0, f"A{tag}", slot="%n2slot", kh="%n2kh", exists="%pn2", valid="%pg2", stage="%stg")
    _advance(e)


def _advance(e: Emit) -> None:
    e("add.u32 %stg, %stg, 1;")
    e("setp.eq.u32 %p, %stg, 3;")
    e("selp.u32 %stg, 0, %stg, %p;")
    e("xor.b32 %t0, %par, 1;")
    e("selp.u32 %par, %t0, %par, %p;")


def _item_after_next(e: Emit) -> None:
    """3 stages: slot, key head, existence and validity of item %it + 2 G (for the request at head 1)."""
    e("add.u32 %t0, %it1, %ng;")
    e("setp.lt.u32 %pn2, %t0, %nit;")
    e("and.b32 %n2kh, %t0, 15;")
    e("mov.u32 %t1, slot_s;")
    e("mad.lo.u32 %t1, %n, 8, %t1;")
    e("@%pn2 ld.shared.u64 %n2slot, [%t1+16];")
    e("setp.lt.u64 %pg2, %n2slot, %np64;")
    e("and.pred %pg2, %pg2, %pn2;")


def _head(e: Emit, A: dict, hh: int, late_second: bool = False, stages: int = 2, tma_store: bool = False,
          norm_bar: bool = False) -> None:
    """Sub-item hh: value head h = 2 kh + hh of the current item (``late_second``, ``stages``: see
    generate; with 3 stages the sub-item's stage is %stg and its phase parity %par)."""
    e(f"// value head 2 kh + {hh}: beta = sigmoid(b), exp(g)")
    e(f"mov.f32 %alog, %al{hh};")
    e(f"mov.f32 %dtb, %dt{hh};")
    G.gates(e, f"%bg{hh}", f"%ag{hh}", "%beta", "%dec")
    if stages == 3:
        e("mov.u32 %sb, bar_st;")
        e("mov.u32 %t3, %par;")
        e("mad.lo.u32 %sb, %stg, 8, %sb;")
    else:
        e("and.b32 %t3, %n, 1;")
        e("mov.u32 %sb, bar_st;")
        if hh:
            e(f"add.u32 %sb, %sb, {8 * hh};")
    e(f"WAIT_ST{hh}:")
    e("mbarrier.try_wait.parity.shared::cta.b64 %p, [%sb], %t3;")
    e(f"@!%p bra WAIT_ST{hh};")
    if late_second and hh == 0:
        e("// the first item's head 0 has landed: now its head 1 (late_second)")
        e("setp.eq.and.u32 %p, %n, 0, %p0;")
        e("@!%p bra LATE_DONE;")
        _request_state(e, A, 1, "L", slot="%slot", kh="%kh", exists="", valid="")
        e("LATE_DONE:")
    e("// S *= exp(g); kv = S^T k over the thread's 32 rows; the 4 row groups' partials in order")
    e("mov.u32 %sa, st_dyn;")
    if stages == 3:
        e(f"shl.b32 %t1, %stg, {(STAGE - 1).bit_length()};")
        e(f"mad.lo.u32 %t0, %g, {32 * DV * 4}, %t1;")
    else:
        e(f"mad.lo.u32 %t0, %g, {32 * DV * 4}, {STAGE * hh};")
    e("add.u32 %sa, %sa, %t0;")
    e("shl.b32 %t0, %col, 2;")
    e("add.u32 %sa, %sa, %t0;  // this thread's column of its first row, in stage hh")
    e("mov.u32 %sr, xs_s;")
    e(f"mad.lo.u32 %sr, %g, 128, %sr;  // q of the thread's rows; k is {4 * DK} B on")
    e("mov.f32 %kv, 0f00000000;")
    for i in range(32):
        e(f"ld.shared.f32 %s{i}, [%sa+{i * DV * 4}];")
        e(f"mul.f32 %s{i}, %s{i}, %dec;")
        e(f"ld.shared.f32 %f0, [%sr+{4 * DK + 4 * i}];")
        e(f"fma.rn.f32 %kv, %s{i}, %f0, %kv;")
    _partials(e, "%kv", "%kv", "red")
    if stages == 3:
        _request_ahead(e, A, hh, str(hh), tma_store)
    else:
        e("// every thread has read stage hh: the next item's state of this head goes there")
        _request_state(e, A, hh, str(hh))
    e("// delta = beta (v - kv); S += k delta; o = S^T q; S stored")
    e("mov.u32 %t0, xs_s;")
    e("shl.b32 %t1, %col, 2;")
    e("add.u32 %t0, %t0, %t1;")
    e(f"ld.shared.f32 %v, [%t0+{4 * 2 * DK + 4 * DV * hh}];")
    e("sub.f32 %dl, %v, %kv;")
    e("mul.f32 %dl, %dl, %beta;")
    e("mov.f32 %o, 0f00000000;")
    e("shl.b32 %t1, %kh, 1;")
    if hh:
        e("add.u32 %t1, %t1, 1;  // h")
    G.state_address(e, A["state_pool"], head="%t1", group="%g", note="  // state_pool[slot, h, 32 g, col]")
    for i in range(32):
        e(f"ld.shared.f32 %f0, [%sr+{4 * DK + 4 * i}];")
        e(f"fma.rn.f32 %s{i}, %f0, %dl, %s{i};")
        e(f"ld.shared.f32 %f1, [%sr+{4 * i}];")
        e(f"fma.rn.f32 %o, %s{i}, %f1, %o;")
        if tma_store:
            e(f"st.shared.f32 [%sa+{i * DV * 4}], %s{i};  // S back into its stage, for the bulk store")
        else:
            e(f"st.global{_OPT['st']}.f32 [%pst+{i * DV * 4}], %s{i};")
    if tma_store:
        e("fence.proxy.async.shared::cta;  // this thread's S visible to the bulk store")
    _partials(e, "%o", "%o", "red2")
    if tma_store:
        e("// every thread's S is in the stage: thread 0 stores it (64 KB) to state_pool[slot, h]")
        e(f"@!%p0 bra STORED{hh};")
        e("// thread 0's %pst and %sa (row 0, column 0) are the head's first element and its stage (%stg has moved on)")
        for j in range(STAGE // PIECE):
            e(f"cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%pst+{j * PIECE}], [%sa+{j * PIECE}], {PIECE}, %pol;")
        e("cp.async.bulk.commit_group;")
        e(f"STORED{hh}:")
    e("// gated RMSNorm over the head's 128 columns: warps 0-3, each 32 columns' sum of o^2, then in order")
    e(f"@!%pw bra NORM_SUMS{hh};")
    e("mul.f32 %f10, %o, %o;")
    for k in (16, 8, 4, 2, 1):
        e(f"shfl.sync.bfly.b32 %f11, %f10, {k}, 31, 0xffffffff;")
        e("add.f32 %f10, %f10, %f11;")
    e("setp.eq.u32 %p, %lane, 0;")
    e("mov.u32 %t0, norm_s;")
    e("mad.lo.u32 %t0, %warp, 4, %t0;")
    e("@%p st.shared.f32 [%t0], %f10;")
    e(f"NORM_SUMS{hh}:")
    e("bar.sync 1, 128;  // warps 0-3 only" if norm_bar else "bar.sync 0;")
    e(f"@!%pw bra OUT_DONE{hh};")
    e("mov.u32 %t0, norm_s;")
    e("ld.shared.v4.f32 {%f0, %f1, %f2, %f3}, [%t0];")
    e("add.f32 %ss, %f0, %f1;")
    e("add.f32 %ss, %ss, %f2;")
    e("add.f32 %ss, %ss, %f3;")
    G.norm_scale(e)
    e(f"mov.b16 %zb, %z{hh};")
    G.gate_z(e)
    e(f"mad.lo.u32 %t0, %kh, {2 * DV}, %th;")
    if hh:
        e(f"add.u32 %t0, %t0, {DV};")
    e(f"mad.lo.u32 %t1, %seq, {NV * DV}, %t0;")
    e("mul.wide.u32 %pt, %t1, 2;")
    e(f"add.u64 %pt, {A['out']}, %pt;")
    e("st.global.b16 [%pt], %u0;")
    e(f"OUT_DONE{hh}:")


def generate(pdl: bool = False, name: str = NAME, late_second: bool = False, stages: int = 2, tma_store: bool = False,
             norm_bar: bool = False, read_hint: bool = False, st: str = ".cs", stagger_ns: int = 0) -> str:
    """The PTX. ``pdl``: the build for the decode runner's PDL engine (as gdn_decode_b32_pdl): the slot
    ids, the first item's states, conv windows and weights before ``griddepcontrol.wait``, the
    projection outputs after it by coherent loads, then launch_dependents. ``late_second`` (a
    candidate, experiments/gdn/pipe_variant.py): the first item's head 1 is requested only when its
    head 0 has landed, so at the launch's start every SM asks for 64 KB instead of 128 and head 0
    arrives in about half the time (launched plainly, the start is not hidden behind a neighbour).
    ``stages=3`` (a candidate, the same script): three 64 KB stages (192 KB), the state requested three
    sub-items ahead instead of two, so more of it is in flight while a head computes. ``tma_store`` (with
    3 stages; a candidate): S goes back into its stage and thread 0 stores the 64 KB by cp.async.bulk
    (evict-first) instead of 32 st.global.cs per thread; the stage is refilled once the store has read it.
    ``norm_bar`` (a candidate): the gated norm's barrier is a named one of warps 0-3, so warps 4-15 go on
    to the next head at once."""
    assert not (pdl and late_second) and stages in (2, 3) and not (late_second and stages == 3)
    assert not tma_store or stages == 3
    # read_hint: the state's bulk loads with the evict-first L2 policy (the build measured until f936d85; without it
    # B = 32 is 2.4 us faster plainly: experiments/gdn/pipe_variant_f936d85.json, promoted at the commit after);
    # st="" (a candidate): the stores without .cs. stagger_ns (a candidate, no gain): odd CTAs sleep that long
    # before their first item, so the SMs' read, compute and write phases are not in step.
    _OPT.update(read_hint=read_hint, st=st)
    nc = "" if pdl else ".nc"
    e = Emit()
    e(f"// {name}: Gated DeltaNet decode step for B <= 32 sequences, a persistent pipeline of value-head states.")
    e("// Generated by gen_gdn_decode_pipe.py (the design is there).")
    e(".version 8.1")
    e(".target sm_90a")
    e(".address_size 64")
    e()
    e(".extern .shared .align 128 .b8 st_dyn[];  // 2 stages of one value head's 128 x 128 fp32 state")
    e()
    G.entry_params(e, name, ("batch",))
    e(f".reqntid {THREADS}")
    e("{")
    e(".reg .pred %p, %p0, %pn, %pg, %pw, %pb;")
    e(".reg .b32 %th, %warp, %lane, %r, %g, %col, %c, %ng, %nit, %n, %it, %it1, %seq, %kh, %nseq, %nkh, %nch, "
      "%t<4>, %qrow, %zrow, %npool, %sa, %sb, %sd, %sr, %wlo, %whi, %nwlo, %nwhi, %bp, %ap, %nbp, %nap;")
    e(".reg .b16 %u<4>, %nu<4>, %xb, %nxb, %bg0, %bg1, %ag0, %ag1, %nwb, %zb, %z0, %z1, %nz0, %nz1;")
    e(".reg .f32 %s<32>, %f<12>, %q, %k, %v, %x, %kn, %qn, %beta, %dec, %kv, %dl, %o, %ss, %eps, %alog, %dtb, "
      "%al0, %al1, %dt0, %dt1, %nal0, %nal1, %ndt0, %ndt1;")
    e(".reg .b64 %a<12>, %pt, %pst, %pcv, %npcv, %pcw, %psrc, %slot, %nslot, %np64, %pol;")
    if stages == 3:
        e(".reg .pred %pn2, %pg2;")
        e(".reg .b32 %stg, %par, %n2kh;")
        e(".reg .b64 %n2slot;")
    e(f".shared .align 16 .f32 xs_s[{2 * DK + 2 * DV}];  // the item's conv outputs: q | k | v of both heads")
    e(f".shared .align 16 .f32 red[{4 * DV}];  // kv partials [row group][column]")
    e(f".shared .align 16 .f32 red2[{4 * DV}];  // o partials")
    e(".shared .align 16 .f32 wsum[8];")
    e(".shared .align 16 .f32 norm_s[4];")
    e(f".shared .align 8 .b64 slot_s[{PIPE_ITEMS}];  // the slot ids of this CTA's items")
    e(f".shared .align 8 .b64 bar_st[{stages}];  // stage hh's state has landed")
    A = G.load_params(e)
    e("ld.param.u32 %nit, [batch];")
    e(f"mul.lo.u32 %nit, %nit, {NK};  // items: (sequence, key head)")
    e("cvt.u64.u32 %np64, %npool;")
    e("mov.u32 %th, %tid.x;")
    e("shr.u32 %warp, %th, 5;")
    e("and.b32 %lane, %th, 31;")
    e("and.b32 %r, %warp, 3;")
    e("shr.u32 %g, %warp, 2;  // row group: rows 32 g .. 32 g + 31")
    e("mad.lo.u32 %col, %r, 32, %lane;  // state column")
    e("mov.u32 %c, %ctaid.x;")
    e("mov.u32 %ng, %nctaid.x;")
    e("setp.eq.u32 %p0, %th, 0;")
    e("setp.lt.u32 %pw, %th, 128;  // warps 0-3: z, the norm, the output")
    e("createpolicy.fractional.L2::evict_first.b64 %pol, 1.0;")
    e("// the slot ids of the CTA's items (threads 0-3); thread 0 requests the first item's two states at once")
    e(f"setp.lt.u32 %p, %th, {PIPE_ITEMS};")
    e("mad.lo.u32 %it1, %th, %ng, %c;")
    e("setp.lt.and.u32 %pn, %it1, %nit, %p;")
    e("shr.u32 %t0, %it1, 4;")
    e("mul.wide.u32 %pt, %t0, 8;")
    e(f"add.u64 %pt, {A['slots']}, %pt;")
    e("@%pn ld.global.nc.u64 %nslot, [%pt];")
    e("mov.u32 %t0, slot_s;")
    e("mad.lo.u32 %t0, %th, 8, %t0;")
    e("@%pn st.shared.u64 [%t0], %nslot;")
    e("@!%p0 bra INIT_DONE;")
    e("mbarrier.init.shared::cta.b64 [bar_st], 1;")
    e("mbarrier.init.shared::cta.b64 [bar_st+8], 1;")
    if stages == 3:
        e("mbarrier.init.shared::cta.b64 [bar_st+16], 1;")
    e("fence.mbarrier_init.release.cluster;")
    e("fence.proxy.async.shared::cta;")
    e("and.b32 %nkh, %c, 15;")
    e("setp.lt.u64 %pg, %nslot, %np64;")
    _request_state(e, A, 0, "P0")
    if late_second:  # head 1 after head 0 has landed (in the first item), or a plain arrive for a bad slot
        e("setp.ge.u64 %p, %nslot, %np64;")
        e("@%p mbarrier.arrive.shared::cta.b64 _, [bar_st+8];")
    else:
        _request_state(e, A, 1, "P1")
    e("INIT_DONE:")
    e("bar.sync 0;")
    e("// the first item's loads (%it1 = c < 16 B)")
    e("mov.u32 %it1, %c;")
    e("setp.eq.u32 %pn, %th, %th;")
    e("ld.shared.u64 %nslot, [slot_s];")
    _item_const_loads(e, A)
    e("mul.wide.u32 %pt, %th, 2;")
    e(f"add.u64 %pt, {A['norm_w']}, %pt;")
    e("@%pw ld.global.nc.b16 %nwb, [%pt];  // warps 0-3: the norm weight of column th")
    if stages == 3:
        e("// the second item's head 0 into stage 2")
        e("add.u32 %t0, %c, %ng;")
        e("setp.lt.u32 %pn2, %t0, %nit;")
        e("and.b32 %n2kh, %t0, 15;")
        e("@%pn2 ld.shared.u64 %n2slot, [slot_s+8];")
        e("setp.lt.u64 %pg2, %n2slot, %np64;")
        e("and.pred %pg2, %pg2, %pn2;")
        _request_state(e, A, 0, "P2", slot="%n2slot", kh="%n2kh", exists="%pn2", valid="%pg2", stage=2)
        e("mov.u32 %stg, 0;")
        e("mov.u32 %par, 0;")
    if pdl:
        e("griddepcontrol.wait;  // the projection outputs are complete from here")
        e("griddepcontrol.launch_dependents;")
    _item_act_loads(e, A, nc)
    e("mov.u32 %n, 0;")
    e("mov.u32 %it, %c;")
    if stagger_ns:
        e("and.b32 %t0, %c, 1;")
        e("setp.ne.u32 %p, %t0, 0;")
        e(f"@%p nanosleep.u32 {stagger_ns};  // odd CTAs: their phase half a head behind (stagger_ns)")
    e("ITEM:")
    e("// the item's values, loaded during the item before; then the next item's loads")
    e("mov.u64 %slot, %nslot;")
    e("mov.u32 %seq, %nseq;")
    e("mov.u32 %kh, %nkh;")
    e("mov.u64 %pcv, %npcv;")
    e("mov.b32 %wlo, %nwlo;")
    e("mov.b32 %whi, %nwhi;")
    for a, b in (("%u1", "%nu1"), ("%u2", "%nu2"), ("%u3", "%nu3"), ("%xb", "%nxb"), ("%z0", "%nz0"), ("%z1", "%nz1")):
        e(f"mov.b16 {a}, {b};")
    for a, b in (("%al0", "%nal0"), ("%al1", "%nal1"), ("%dt0", "%ndt0"), ("%dt1", "%ndt1")):
        e(f"mov.f32 {a}, {b};")
    e("mov.b32 {%bg0, %bg1}, %nbp;")
    e("mov.b32 {%ag0, %ag1}, %nap;")
    e("add.u32 %it1, %it, %ng;")
    e("setp.lt.u32 %pn, %it1, %nit;")
    e("mov.u32 %t0, slot_s;")
    e("mad.lo.u32 %t0, %n, 8, %t0;")
    e("@%pn ld.shared.u64 %nslot, [%t0+8];")
    _item_const_loads(e, A)
    _item_act_loads(e, A, nc)
    if stages == 3:
        _item_after_next(e)
    e("setp.ge.u64 %pb, %slot, %np64;  // a slot id outside the pool (the whole CTA shares it)")
    e("@%pb bra BAD_ITEM;")
    e("// 1. conv update of this thread's channel; its new window is written by its only reader")
    G.conv_sum(e, "%wlo", "%whi", ("%u1", "%u2", "%u3"), "%xb", "%x")
    e("st.global.b16 [%pcv], %u2;")
    e("st.global.b16 [%pcv+2], %u3;")
    e("st.global.b16 [%pcv+4], %xb;")
    G._silu_bf16(e, "%x", "%x")
    e("mov.u32 %t0, xs_s;")
    e("mad.lo.u32 %t0, %th, 4, %t0;")
    e("st.shared.f32 [%t0], %x;")
    e("bar.sync 0;")
    e("// 2. q and k l2-normalized over dk (warps 0-3), q scaled by dk^-1/2")
    e("@!%pw bra QK_SUMS;")
    e("mov.u32 %sr, xs_s;")
    e("mad.lo.u32 %sr, %th, 4, %sr;")
    e("ld.shared.f32 %q, [%sr];")
    e(f"ld.shared.f32 %k, [%sr+{4 * DK}];")
    e("mul.f32 %f10, %q, %q;")
    e("mul.f32 %f11, %k, %k;")
    G.warp_sums2(e, "%f10", "%f11")  # gdn_decode_b32's block_sum2 over warps 0-3, the barrier shared with warps 4-15
    e("QK_SUMS:")
    e("bar.sync 0;")
    e("@!%pw bra QK_DONE;")
    e("mov.u32 %t0, wsum;")
    G.add_warp_sums2(e, "%qn", "%kn")
    G.qk_scale(e, "%sr")
    e("QK_DONE:")
    e("bar.sync 0;")
    for hh in (0, 1):
        _head(e, A, hh, late_second, stages, tma_store, norm_bar)
    e("NEXT_ITEM:")
    e("add.u32 %n, %n, 1;")
    e("mov.u32 %it, %it1;")
    e("@%pn bra ITEM;")
    if tma_store:
        e("@%p0 cp.async.bulk.wait_group 0;  // the last stores done before the CTA's shared memory goes")
    e("ret;")
    e("BAD_ITEM:  // a slot id outside the pool: no state is touched, both heads' outputs are NaN")
    e("@!%pw bra BAD_OUT;")
    e(f"mad.lo.u32 %t0, %kh, {2 * DV}, %th;")
    e(f"mad.lo.u32 %t1, %seq, {NV * DV}, %t0;")
    e("mul.wide.u32 %pt, %t1, 2;")
    e(f"add.u64 %pt, {A['out']}, %pt;")
    e("mov.b16 %u0, 0x7FC0;")
    e("st.global.b16 [%pt], %u0;")
    e(f"st.global.b16 [%pt+{2 * DV}], %u0;")
    e("BAD_OUT:")
    for hh in (0, 1):
        if stages == 3:
            _request_ahead(e, A, hh, f"B{hh}", tma_store)
        else:
            _request_state(e, A, hh, f"B{hh}")
    e("bra.uni NEXT_ITEM;")
    e("}")
    return e.text()


def main() -> int:
    (HERE / f"{NAME}.ptx").write_text(generate())
    (HERE / f"{PDL_NAME}.ptx").write_text(generate(pdl=True, name=PDL_NAME))
    print(f"wrote {NAME}.ptx and {PDL_NAME}.ptx: min(16 B, 132) CTAs of {THREADS} threads, {2 * STAGE} B of dynamic shared memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
