"""Generator of gdn_decode_b32: the whole Gated DeltaNet decode step of B <= 32 sequences in
one launch, from the projection outputs to the gated-norm output, on slot-indexed state
pools (the signature of netra::gdn_decode; contract netra.contracts.gdn).

Work split: a cluster of 8 CTAs per (sequence, key head kh); ranks 0-3 take value head 2 kh,
ranks 4-7 value head 2 kh + 1, each rank 32 of the head's 128 state columns (the delta rule
is independent per column; only sums over dk mix rows). 128 threads: warp w holds rows
32 w .. 32 w + 31 of the CTA's 128 x 32 fp32 state slice, lane = column.

The critical path is latency at B = 1, so every load that does not need the slot id is
issued first, the state loads right after the slot id, and data crosses CTAs only by
st.async into the receiver's shared memory, completing the receiver's mbarrier (no
cluster-wide barrier and no memory fence after the start, when one barrier makes sure every
rank has started and initialized its mbarriers):
1. slot-independent loads (qkv, conv weights, b, a, A_log, dt_bias, z, norm weight), then
   the slot id, then the conv windows and the 32 state loads per thread; a slot id outside
   [0, pool_slots) touches no state and makes the sequence's output NaN (a visible failure,
   not a write out of bounds);
2. conv update with SiLU, each conv channel computed by exactly one thread of the cluster
   (rank r: q and k channels kh*128 + 16 r .. +15, and its own 32 v channels), which also
   writes that channel's new window (no other CTA reads it); the model rounds the conv output
   to BF16; q and k values are pushed to all 8 ranks (1 KB lands in each);
3. q, k L2-normalized over dk (shfl.bfly then the 4 warp sums in warp order, identical in
   every rank), q scaled by dk^-1/2; beta = sigmoid(b), exp(g), g = -exp(A_log) softplus(a + dt_bias);
4. S *= exp(g); kv = S^T k; S += k (beta (v - kv))^T; o = S^T q: per-warp partial sums over
   the warp's rows, added in warp order through shared memory; S written back;
5. gated RMSNorm over the head's 128 columns: each rank's sum of o^2 is pushed to the 4 ranks
   of its value head, the 4 sums added in rank order; y = w o rsqrt(mean + eps) silu(z), BF16
   out. A CTA exits only after both of its mbarriers completed, so nothing lands in a
   finished CTA.
Deterministic: every sum has a fixed order.

  python3 kernels/sm_90a/gdn/gen_gdn_decode.py      (rewrites gdn_decode_b32.ptx)
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "src"))
from netra import paths  # noqa: E402
from netra.contracts.gdn import CONV_DIM as CONV, DK, DV, KW, NK, NV, TAG  # noqa: E402  (shapes, written once)

Emit = paths.generator("proj", "gen_fp8_gemv").Emit

NAME = "gdn_decode_b32"
THREADS, CLUSTER, CHUNK = 128, 8, 32
QK_PER_RANK = DK // CLUSTER  # 16 q and 16 k channels per rank
LOG2E = 1.4426950408889634
PARAMS = ("qkv", "z", "b_in", "a_in", "conv_w", "a_log", "dt_bias", "norm_w", "conv_pool", "state_pool", "slots", "out")


def f32(x: float) -> str:
    return "0f%08X" % struct.unpack("<I", struct.pack("<f", x))[0]


def _silu_bf16(e: Emit, x: str, out: str) -> None:
    """out = bf16-rounded silu(x), as f32 (%f9 and %u0 are scratch)."""
    e(f"mul.f32 %f9, {x}, {f32(-LOG2E)};")
    e("ex2.approx.ftz.f32 %f9, %f9;")
    e(f"add.f32 %f9, %f9, {f32(1.0)};")
    e(f"div.rn.f32 {x}, {x}, %f9;")
    e(f"cvt.rn.bf16.f32 %u0, {x};  // the model rounds the conv output to BF16")
    e(f"cvt.f32.bf16 {out}, %u0;")


def _wait(e: Emit, bar: str, label: str) -> None:
    """Spin until the mbarrier's phase 0 completes (its one local arrival and all its bytes)."""
    e(f"{label}:")
    e(f"mbarrier.try_wait.parity.shared::cta.b64 %p, [{bar}], 0;")
    e(f"@!%p bra {label};")


def cluster_coords(e: Emit, col_note: str = "  // this thread's state column") -> None:
    """Thread, warp, lane; cluster rank, sequence, key head kh, value head h, column chunk r and column."""
    e("mov.u32 %th, %tid.x;")
    e("shr.u32 %warp, %th, 5;")
    e("and.b32 %lane, %th, 31;")
    e("mov.u32 %rank, %cluster_ctarank;")
    e("mov.u32 %cl, %clusterid.x;  // seq * 16 + kh")
    e("shr.u32 %seq, %cl, 4;")
    e("and.b32 %kh, %cl, 15;")
    e("shr.u32 %t0, %rank, 2;")
    e("mad.lo.u32 %h, %kh, 2, %t0;  // value head")
    e("and.b32 %r, %rank, 3;  // column chunk")
    e(f"mad.lo.u32 %col, %r, {CHUNK}, %lane;{col_note}")


def conv_channel(e: Emit, notes: bool = True) -> None:
    """%ch = this thread's conv channel (%pq: q or k, th < 32; %pc: any, th < 64)."""
    n = (lambda s: "  // " + s) if notes else (lambda s: "")  # noqa: E731
    e(f"setp.lt.u32 %pq, %th, {2 * QK_PER_RANK};")
    e(f"setp.lt.u32 %pc, %th, {2 * QK_PER_RANK + CHUNK};")
    e(f"and.b32 %t0, %th, {QK_PER_RANK - 1};")
    e(f"mad.lo.u32 %t0, %rank, {QK_PER_RANK}, %t0;")
    e(f"mad.lo.u32 %t0, %kh, {DK}, %t0;{n('q channel')}")
    e(f"setp.ge.u32 %p, %th, {QK_PER_RANK};")
    e(f"@%p add.u32 %t0, %t0, {NK * DK};{n('k channel')}")
    e(f"sub.u32 %t1, %th, {2 * QK_PER_RANK};")
    e(f"mad.lo.u32 %t1, %r, {CHUNK}, %t1;")
    e(f"mad.lo.u32 %t1, %h, {DV}, %t1;")
    e(f"add.u32 %t1, %t1, {2 * NK * DK};{n('v channel')}")
    e("selp.b32 %ch, %t0, %t1, %pq;")


def block_sum2(e: Emit, a: str, b: str, da: str, db: str) -> None:
    """da, db = sums over the CTA's 128 threads of a, b: shfl.bfly, then the 4 warp sums in order."""
    warp_sums2(e, a, b)
    e("bar.sync 0;")
    add_warp_sums2(e, da, db)


def warp_sums2(e: Emit, a: str, b: str) -> None:
    """block_sum2's first half: each warp's sums of a and b by shfl.bfly, lane 0's to wsum[2 warp] (a, b
    may already be %f10, %f11)."""
    for reg, src in (("%f10", a), ("%f11", b)):
        if src != reg:
            e(f"mov.f32 {reg}, {src};")
    for k in (16, 8, 4, 2, 1):
        e(f"shfl.sync.bfly.b32 %f8, %f10, {k}, 31, 0xffffffff;")
        e(f"shfl.sync.bfly.b32 %f9, %f11, {k}, 31, 0xffffffff;")
        e("add.f32 %f10, %f10, %f8;")
        e("add.f32 %f11, %f11, %f9;")
    e("mov.u32 %t0, wsum;")
    e("mad.lo.u32 %t1, %warp, 8, %t0;")
    e("setp.eq.u32 %p, %lane, 0;")
    e("@%p st.shared.v2.f32 [%t1], {%f10, %f11};")


def add_warp_sums2(e: Emit, da: str, db: str) -> None:
    """block_sum2's second half, after a barrier: da, db = warps 0-3's sums in warp order (%t0 = wsum)."""
    e("ld.shared.v4.f32 {%f0, %f1, %f2, %f3}, [%t0];")
    e("ld.shared.v4.f32 {%f4, %f5, %f6, %f7}, [%t0+16];")
    e(f"add.f32 {da}, %f0, %f2;")
    e(f"add.f32 {da}, {da}, %f4;")
    e(f"add.f32 {da}, {da}, %f6;")
    e(f"add.f32 {db}, %f1, %f3;")
    e(f"add.f32 {db}, {db}, %f5;")
    e(f"add.f32 {db}, {db}, %f7;")


def warp_partials(e: Emit, src: str, dst: str, red: str = "red", trailing: bool = True, nw: int = 4) -> None:
    """dst = sum over the nw warps of src (per lane), added in warp order through shared memory
    ``red``; ``trailing=False`` leaves out the barrier that lets ``red`` be reused at once (the
    caller alternates buffers instead). Uses %f0 .. %f{nw - 1}."""
    assert 2 <= nw <= 8
    e(f"mov.u32 %t2, {red};")
    e(f"mad.lo.u32 %t0, %warp, {4 * CHUNK}, %t2;")
    e("shl.b32 %t1, %lane, 2;")
    e("add.u32 %t0, %t0, %t1;")
    e(f"st.shared.f32 [%t0], {src};")
    e("bar.sync 0;")
    e("add.u32 %t0, %t2, %t1;")
    e("ld.shared.f32 %f0, [%t0];")
    for w in range(1, nw):
        e(f"ld.shared.f32 %f{w}, [%t0+{4 * CHUNK * w}];")
    e(f"add.f32 {dst}, %f0, %f1;")
    for w in range(2, nw):
        e(f"add.f32 {dst}, {dst}, %f{w};")
    if trailing:
        e("bar.sync 0;")


def gates(e: Emit, b: str, a: str, beta: str, dec: str) -> None:
    """beta = sigmoid(b), dec = exp(g) from BF16 b and a (%alog, %dtb loaded; %f0-%f5 scratch)."""
    e("// beta = sigmoid(b); exp(g), g = -exp(A_log) softplus(a + dt_bias)")
    gates_log2(e, b, a, beta, "%f5")
    e(f"ex2.approx.ftz.f32 {dec}, %f5;  // exp(g)")


def gates_log2(e: Emit, b: str, a: str, beta: str, lg: str, notes: bool = False) -> None:
    """beta = sigmoid(b), lg = g log2(e) (the log2 of exp(g)); as gates, without the last ex2.
    ``notes``: two more comments (gdn_verify_chunk's PTX has them)."""
    e(f"cvt.f32.bf16 %f0, {b};")
    e(f"cvt.f32.bf16 %f1, {a};")
    e(f"mul.f32 %f2, %f0, {f32(-LOG2E)};")
    e("ex2.approx.ftz.f32 %f2, %f2;")
    e(f"add.f32 %f2, %f2, {f32(1.0)};")
    e(f"rcp.rn.f32 {beta}, %f2;" + ("  // sigmoid(b)" if notes else ""))
    e("add.f32 %f1, %f1, %dtb;")
    e(f"setp.gt.f32 %p, %f1, {f32(20.0)};  // torch softplus threshold")
    e(f"mul.f32 %f5, %f1, {f32(LOG2E)};")
    e("ex2.approx.ftz.f32 %f5, %f5;")
    e(f"add.f32 %f5, %f5, {f32(1.0)};")
    e("lg2.approx.ftz.f32 %f5, %f5;")
    e(f"mul.f32 %f5, %f5, {f32(1 / LOG2E)};")
    e("selp.f32 %f5, %f1, %f5, %p;  // softplus")
    e(f"mul.f32 %f3, %alog, {f32(LOG2E)};")
    e("ex2.approx.ftz.f32 %f3, %f3;  // exp(A_log)")
    e("mul.f32 %f5, %f5, %f3;")
    e(f"mul.f32 {lg}, %f5, {f32(-LOG2E)};" + ("  // log2 of exp(g)" if notes else ""))


def entry_params(e: Emit, name: str, extra_u32: tuple = ()) -> None:
    """The entry and its parameters (the contract's order): the pointers, the row strides, the pool size,
    ``extra_u32`` (gdn_decode_b32_pipe's batch), eps."""
    e(f".visible .entry {name}(")
    for p in PARAMS:
        e(f"  .param .u64 {p},")
    for p in ("qkv_row", "z_row", "pool_slots", *extra_u32):
        e(f"  .param .u32 {p},")
    e("  .param .f32 eps")
    e(")")


def load_params(e: Emit) -> dict:
    """The pointer parameters to global addresses in %a0.. (returned by name), the row strides,
    the pool size and eps."""
    for i, p in enumerate(PARAMS):
        e(f"ld.param.u64 %a{i}, [{p}];")
        e(f"cvta.to.global.u64 %a{i}, %a{i};")
    e("ld.param.u32 %qrow, [qkv_row];")
    e("ld.param.u32 %zrow, [z_row];")
    e("ld.param.u32 %npool, [pool_slots];")
    e("ld.param.f32 %eps, [eps];")
    return {p: f"%a{i}" for i, p in enumerate(PARAMS)}


def slot_free_loads(e: Emit, A: dict, act=None, zn_async: bool = False, conv: bool = True) -> None:
    """The loads that need no slot id: b, a, A_log, dt_bias (all threads), z and the norm weight
    (warp 0; %pw), this thread's conv channel (%ch, %pc, %pq), its qkv value and conv weights.
    ``act`` emits the loads of the projection outputs (a no-op under pdl: they follow the wait);
    ``zn_async``: z and the norm weight by cp.async (zn_async_loads). ``conv=False`` (local_qk):
    without the conv channel's loads."""
    act = e if act is None else act
    e(f"mad.lo.u32 %t0, %seq, {NV}, %h;")
    e("mul.wide.u32 %pt, %t0, 2;")
    e(f"add.u64 %pt, {A['b_in']}, %pt;")
    act("ld.global.nc.b16 %bb, [%pt];")
    e("mul.wide.u32 %pt, %t0, 2;")
    e(f"add.u64 %pt, {A['a_in']}, %pt;")
    act("ld.global.nc.b16 %ab, [%pt];")
    e("mul.wide.u32 %pt, %h, 4;")
    e(f"add.u64 %pcv, {A['a_log']}, %pt;")
    e("ld.global.nc.f32 %alog, [%pcv];")
    e(f"add.u64 %pcv, {A['dt_bias']}, %pt;")
    e("ld.global.nc.f32 %dtb, [%pcv];")
    e("setp.lt.u32 %pw, %th, 32;")
    if zn_async:
        zn_async_loads(e, A, after_wait=False, act=act)
    else:
        e("mul.wide.u32 %pt, %col, 2;")
        e(f"add.u64 %pt, {A['norm_w']}, %pt;")
        e("@%pw ld.global.nc.b16 %nwb, [%pt];")
        e(f"mad.lo.u32 %t0, %h, {DV}, %col;")
        e("mad.lo.u32 %t1, %seq, %zrow, %t0;")
        e("mul.wide.u32 %pt, %t1, 2;")
        e(f"add.u64 %pt, {A['z']}, %pt;")
        act("@%pw ld.global.nc.b16 %zb, [%pt];")
    if not conv:
        return
    e("// this thread's conv channel: q (th < 16), k (th < 32), v (th < 64)")
    conv_channel(e)
    e("mad.lo.u32 %t1, %seq, %qrow, %ch;")
    e("mul.wide.u32 %pt, %t1, 2;")
    e(f"add.u64 %pt, {A['qkv']}, %pt;")
    act("@%pc ld.global.nc.b16 %xb, [%pt];")
    e("mul.wide.u32 %pt, %ch, 8;")
    e(f"add.u64 %pt, {A['conv_w']}, %pt;")
    e("@%pc ld.global.nc.v2.b32 {%wlo, %whi}, [%pt];  // conv_w[ch, 0..3]")


def conv_window_address(e: Emit, pool: str) -> None:
    """%pcv = this thread's conv window in the pool at the slot id: pool[slot, ch, 0..2] (BF16)."""
    e(f"mul.lo.u64 %pcv, %slot, {CONV};")
    e("cvt.u64.u32 %pt, %ch;")
    e("add.u64 %pcv, %pcv, %pt;")
    e(f"mul.lo.u64 %pcv, %pcv, {2 * (KW - 1)};")
    e(f"add.u64 %pcv, {pool}, %pcv;  // conv_pool[slot, ch, 0..2]")


def conv_weights(e: Emit) -> None:
    """%f0..%f3 = the channel's 4 BF16 conv weights (%wlo, %whi) as f32."""
    e("shl.b32 %t0, %wlo, 16;")
    e("mov.b32 %f0, %t0;")
    e("and.b32 %t0, %wlo, 0xffff0000;")
    e("mov.b32 %f1, %t0;")
    e("shl.b32 %t0, %whi, 16;")
    e("mov.b32 %f2, %t0;")
    e("and.b32 %t0, %whi, 0xffff0000;")
    e("mov.b32 %f3, %t0;")


def state_address(e: Emit, pool: str, head: str = "%h", group: str = "%warp", note: str = "") -> None:
    """%pst = this thread's first state element: pool + ((slot NV + head) DK + 32 group) DV + col, fp32."""
    e(f"mul.lo.u64 %pst, %slot, {NV};")
    e(f"cvt.u64.u32 %pt, {head};")
    e("add.u64 %pst, %pst, %pt;")
    e(f"mul.lo.u64 %pst, %pst, {DK};")
    e(f"shl.b32 %t0, {group}, 5;")
    e("cvt.u64.u32 %pt, %t0;")
    e("add.u64 %pst, %pst, %pt;")
    e(f"mul.lo.u64 %pst, %pst, {DV};")
    e("cvt.u64.u32 %pt, %col;")
    e("add.u64 %pst, %pst, %pt;")
    e("shl.b64 %pst, %pst, 2;")
    e(f"add.u64 %pst, {pool}, %pst;{note}")


def conv_math(e: Emit) -> None:
    """%x = the conv of the thread's channel: conv_w (%wlo, %whi) . (window %u1..%u3, new %xb), fp32."""
    conv_sum(e, "%wlo", "%whi", ("%u1", "%u2", "%u3"), "%xb", "%x")


def conv_sum(e: Emit, lo: str, hi: str, w: tuple, xb: str, out: str) -> None:
    """out = conv weights (lo, hi: 4 BF16) . (window w, oldest first, then xb), fp32 in k order
    (%f0..%f7 scratch)."""
    for i, (reg, mask) in enumerate(((lo, False), (lo, True), (hi, False), (hi, True))):
        e(f"and.b32 %t0, {reg}, 0xffff0000;" if mask else f"shl.b32 %t0, {reg}, 16;")
        e(f"mov.b32 %f{i}, %t0;")
    for i, u in enumerate((*w, xb)):
        e(f"cvt.f32.bf16 %f{4 + i}, {u};")
    e(f"mul.f32 {out}, %f0, %f4;")
    for i in range(1, 4):
        e(f"fma.rn.f32 {out}, %f{i}, %f{4 + i}, {out};")


def qk_norms_gates(e: Emit, qk: str) -> None:
    """Step 3: q and k (at ``qk``, a symbol or register) l2-normalized over dk in place, q scaled
    by dk^-1/2; beta and exp(g); one bar.sync. Leaves %sq = qk."""
    e(f"mov.u32 %sq, {qk};")
    e("shl.b32 %t3, %th, 2;")
    e("add.u32 %t3, %sq, %t3;")
    e("ld.shared.f32 %q, [%t3];")
    e(f"ld.shared.f32 %k, [%t3+{4 * DK}];")
    e("mul.f32 %f0, %q, %q;")
    e("mul.f32 %f1, %k, %k;")
    block_sum2(e, "%f0", "%f1", "%qn", "%kn")
    qk_scale(e, "%t3", "  // each thread rewrites only its own q and k; read after the next bar.sync")
    gates(e, "%bb", "%ab", "%beta", "%dec")
    e("bar.sync 0;")


def qk_scale(e: Emit, addr: str, note: str = "") -> None:
    """q, k (sums of squares in %qn, %kn) l2-normalized, q scaled by dk^-1/2, both stored back at ``addr``."""
    e(f"add.f32 %qn, %qn, {f32(1e-6)};")
    e("rsqrt.approx.ftz.f32 %qn, %qn;")
    e("mul.f32 %q, %q, %qn;")
    e(f"mul.f32 %q, %q, {f32(DK ** -0.5)};")
    e(f"add.f32 %kn, %kn, {f32(1e-6)};")
    e("rsqrt.approx.ftz.f32 %kn, %kn;")
    e("mul.f32 %k, %k, %kn;")
    e(f"st.shared.f32 [{addr}], %q;{note}")
    e(f"st.shared.f32 [{addr}+{4 * DK}], %k;")


def delta_rule(e: Emit, store_guard: str = "", st: str = "st.global", smem: bool = False) -> None:
    """Step 4 on the state registers, q and k at %sq: decay, kv = S^T k, delta, S += k delta,
    o = S^T q (partials in warp order), S stored at %pst (each store under ``store_guard``).
    ``smem`` (smem_state): the slice is in st_s and each s is read from there in both passes (the
    decay multiplied again in the second: the same product), the same arithmetic in the same order,
    so the same bits; nothing of the slice is held in registers."""
    e("// 4. S *= exp(g); kv = S^T k over the warp's rows; partials in warp order")
    if smem:
        e("mov.u32 %sa, st_s;")
        e(f"mad.lo.u32 %sa, %warp, {32 * CHUNK * 4}, %sa;")
        e("shl.b32 %t0, %lane, 2;")
        e("add.u32 %sa, %sa, %t0;  // this thread's column of the warp's first row, in st_s")
    e("mov.f32 %kv, 0f00000000;")
    e("shl.b32 %t0, %warp, 7;  // 32 rows x 4 B")
    e(f"add.u32 %sr, %sq, {4 * DK};")
    e("add.u32 %sr, %sr, %t0;  // k of the warp's rows")

    def s_of(i: int, second: bool) -> str:  # the register holding row i's s (decayed), loaded from st_s under smem
        if not smem:
            return f"%s{i}"
        r = f"%s{8 * second + i % 8}"
        e(f"ld.shared.f32 {r}, [%sa+{i * CHUNK * 4}];")
        if second:
            e(f"mul.f32 {r}, {r}, %dec;")
        return r

    for i in range(CHUNK):
        r = s_of(i, False)
        e(f"mul.f32 {r}, {r}, %dec;")
        e(f"ld.shared.f32 %f0, [%sr+{4 * i}];")
        e(f"fma.rn.f32 %kv, {r}, %f0, %kv;")

    warp_partials(e, "%kv", "%kv")
    e("// delta = beta (v - kv); S += k delta; o = S^T q")
    e("mov.u32 %t0, v_s;")
    e("shl.b32 %t1, %lane, 2;")
    e("add.u32 %t0, %t0, %t1;")
    e("ld.shared.f32 %v, [%t0];")
    e("sub.f32 %dl, %v, %kv;")
    e("mul.f32 %dl, %dl, %beta;")
    e("mov.f32 %o, 0f00000000;")
    e("shl.b32 %t0, %warp, 7;")
    e("add.u32 %t1, %sq, %t0;  // q of the warp's rows")
    for i in range(CHUNK):
        r = s_of(i, True)
        e(f"ld.shared.f32 %f0, [%sr+{4 * i}];")
        e(f"fma.rn.f32 {r}, %f0, %dl, {r};")
        e(f"ld.shared.f32 %f1, [%t1+{4 * i}];")
        e(f"fma.rn.f32 %o, {r}, %f1, %o;")
        if smem:
            e(f"{store_guard}{st}.f32 [%pst+{i * DV * 4}], {r};")
    if not smem:
        for i in range(CHUNK):
            e(f"{store_guard}{st}.f32 [%pst+{i * DV * 4}], %s{i};")
    warp_partials(e, "%o", "%o")


def state_async_loads(e: Emit, hint: bool = True) -> None:
    """smem_state: the warp's 32 rows of the CTA's 128 x 32 slice into st_s (row-major, 128 B per
    row) by cp.async: lane l copies 16 B of row 32 warp + 4 j + l / 8 at byte 16 (l % 8), j = 0..7,
    so each warp instruction moves 4 whole 128-byte lines; evict-first in L2 (each state line is
    touched once per step). %pst (this thread's column of row 32 warp) must be set."""
    if hint:
        e("createpolicy.fractional.L2::evict_first.b64 %pol, 1.0;")
    e("shr.u32 %t0, %lane, 3;")
    e("and.b32 %t1, %lane, 7;")
    e(f"mul.lo.u32 %t2, %t0, {DV * 4};")
    e("mad.lo.u32 %t2, %t1, 16, %t2;")
    e("shl.b32 %t3, %lane, 2;")
    e("sub.u32 %t2, %t2, %t3;  // from this thread's column of row 32 warp to its 16 B of row 32 warp + l / 8")
    e("cvt.u64.u32 %pt, %t2;")
    e("add.u64 %pt, %pst, %pt;")
    e("mov.u32 %sa, st_s;")
    e(f"mad.lo.u32 %sa, %warp, {32 * CHUNK * 4}, %sa;")
    e(f"mad.lo.u32 %sa, %t0, {CHUNK * 4}, %sa;")
    e("mad.lo.u32 %sa, %t1, 16, %sa;")
    for j in range(8):
        if hint:
            e(f"cp.async.cg.shared.global.L2::cache_hint [%sa+{j * 4 * CHUNK * 4}], [%pt+{j * 4 * DV * 4}], 16, %pol;")
        else:  # smem_hint=False (a candidate): no evict-first policy
            e(f"cp.async.cg.shared.global [%sa+{j * 4 * CHUNK * 4}], [%pt+{j * 4 * DV * 4}], 16;")
    e("cp.async.commit_group;")


def norm_scale(e: Emit) -> None:
    """%o *= rsqrt(the head's mean of o^2 + eps), the sum already in %ss."""
    e(f"fma.rn.f32 %ss, %ss, {f32(1.0 / DV)}, %eps;")
    e("rsqrt.approx.ftz.f32 %ss, %ss;")
    e("mul.f32 %o, %o, %ss;")


def gate_z(e: Emit) -> None:
    """%u0 = bf16(o * norm weight * silu(z)) from %nwb and %zb."""
    e("cvt.f32.bf16 %f0, %nwb;")
    e("mul.f32 %o, %o, %f0;")
    e("cvt.f32.bf16 %f1, %zb;")
    e(f"mul.f32 %f2, %f1, {f32(-LOG2E)};")
    e("ex2.approx.ftz.f32 %f2, %f2;")
    e(f"add.f32 %f2, %f2, {f32(1.0)};")
    e("div.rn.f32 %f1, %f1, %f2;  // silu(z)")
    e("mul.f32 %o, %o, %f1;")
    e("cvt.rn.bf16.f32 %u0, %o;")


# spin: TAG (netra.contracts.gdn) is the poison of a projection output not yet written
SPIN_LIMIT = 1 << 14  # spin: polls before falling back to griddepcontrol.wait (never a hang, never a stale value)
_BACKOFF = {"cap": 0}  # generate(spin_backoff=N): the sleep between polls doubles from 32 ns up to N ns (0: 32 ns each)


def spin_load(e: Emit, reg: str, addr: str, label: str, pred: str = "", loaded: bool = False) -> None:
    """spin: reg = the BF16 at [addr], polled (strong, gpu scope) until it is not TAG; after SPIN_LIMIT polls the
    thread waits for the producer grid instead and reads the final value. ``pred``: only where it holds. ``loaded``:
    reg already holds one strong load of it (spin_z_early), checked first."""
    if pred:
        e(f"@!{pred} bra {label}_OK;")
    e("mov.u32 %spn, 0;")
    if _BACKOFF["cap"]:
        e("mov.u32 %sns, 32;")
    if loaded:
        e(f"bra.uni {label}_CHK;")
    e(f"{label}:")
    e(f"ld.relaxed.gpu.global.b16 {reg}, [{addr}];")
    if loaded:
        e(f"{label}_CHK:")
    e(f"setp.eq.b16 %ps, {reg}, {TAG:#06X};")
    e(f"@!%ps bra {label}_OK;")
    e("add.u32 %spn, %spn, 1;")
    e(f"setp.ge.u32 %ps, %spn, {SPIN_LIMIT};")
    e(f"@%ps bra {label}_WAIT;")
    if _BACKOFF["cap"]:  # fewer L2 polls while the producer still walks; a value is read at most one sleep late
        e("nanosleep.u32 %sns;")
        e("shl.b32 %sns, %sns, 1;")
        e(f"min.u32 %sns, %sns, {_BACKOFF['cap']};")
    else:
        e("nanosleep.u32 32;")
    e(f"bra.uni {label};")
    e(f"{label}_WAIT:")
    e("griddepcontrol.wait;  // the producer is complete: its value is final")
    e(f"ld.global.b16 {reg}, [{addr}];")
    e(f"{label}_OK:")


TRACE_POINTS = ("start", "qkv", "ba", "qk_all", "delta", "norm_all", "z", "exit")  # spin_trace's stamps, in order
TRACE_CTAS, TRACE_LAUNCHES = 128, 64  # spin_trace: the first 128 CTAs (batch 1's grid), the last 64 launches of each


def _stamp(e: Emit, on: bool, point: str) -> None:
    """spin_trace: thread 0 (of a traced CTA: %ptr) stores %globaltimer at ``point``'s slot."""
    if on:
        e(f"@%ptr mov.u64 %tnow, %globaltimer;  // spin_trace: {point}")
        e(f"@%ptr st.global.u64 [%tsa+{8 * TRACE_POINTS.index(point)}], %tnow;")


def _spin_ba(e: Emit, trace: bool) -> None:
    """spin: every thread's b and a of its value head (TAG goes back after the norm exchange)."""
    e("// b and a of the value head (every thread; TAG goes back after the norm exchange)")
    spin_load(e, "%bb", "%pba", "SPIN_B")
    spin_load(e, "%ab", "%paa", "SPIN_A")
    _stamp(e, trace, "ba")


def poison(e: Emit, addr: str, pred: str = "") -> None:
    """spin: TAG back into a projection output this thread was its only reader of (the next producer overwrites it)."""
    e(f"mov.b16 %ut, {TAG:#06X};")
    e(f"{'@' + pred + ' ' if pred else ''}st.global.b16 [{addr}], %ut;")


# --- local_qk (a candidate): every rank convolves all 256 q/k channels of its key head itself ---
def _lqk_channels(e: Emit) -> None:
    """local_qk: %ch = q channel kh 128 + th, %ck = k channel 2048 + %ch (every thread); %cv = this
    rank's v channel 4096 + h 128 + 32 r + th (warp 0, %pw); %pc: the thread writes the q and k
    windows (th / 16 == rank: each channel's window has one writer in the cluster), after the
    cluster barrier that follows every rank's reads of them (8 readers, one writer)."""
    e(f"mad.lo.u32 %ch, %kh, {DK}, %th;  // q channel")
    e(f"add.u32 %ck, %ch, {NK * DK};  // k channel")
    e(f"mad.lo.u32 %cv, %h, {DV}, %col;")
    e(f"add.u32 %cv, %cv, {2 * NK * DK};  // v channel (warp 0)")
    e(f"shr.u32 %t0, %th, {(QK_PER_RANK - 1).bit_length()};")
    e("setp.eq.u32 %pc, %t0, %rank;  // this rank writes the q, k windows of threads 16 rank ..")


def _lqk_act_loads(e: Emit, A: dict, nc: str) -> None:
    """local_qk: the token's qkv values of the thread's q, k (and, warp 0, v) channels."""
    e("mad.lo.u32 %t1, %seq, %qrow, %ch;")
    e("mul.wide.u32 %pt, %t1, 2;")
    e(f"add.u64 %pt, {A['qkv']}, %pt;")
    e(f"ld.global{nc}.b16 %xb, [%pt];")
    e(f"ld.global{nc}.b16 %xk, [%pt+{2 * NK * DK}];")
    e("mad.lo.u32 %t1, %seq, %qrow, %cv;")
    e("mul.wide.u32 %pt, %t1, 2;")
    e(f"add.u64 %pt, {A['qkv']}, %pt;")
    e(f"@%pw ld.global{nc}.b16 %xv, [%pt];")


def _lqk_weights(e: Emit, A: dict) -> None:
    e("mul.wide.u32 %pt, %ch, 8;")
    e(f"add.u64 %pt, {A['conv_w']}, %pt;")
    e("ld.global.nc.v2.b32 {%wlo, %whi}, [%pt];  // conv_w[q channel]")
    e(f"ld.global.nc.v2.b32 {{%klo, %khi}}, [%pt+{8 * NK * DK}];  // conv_w[k channel]")
    e("mul.wide.u32 %pt, %cv, 8;")
    e(f"add.u64 %pt, {A['conv_w']}, %pt;")
    e("@%pw ld.global.nc.v2.b32 {%vlo, %vhi}, [%pt];  // conv_w[v channel]")


def _lqk_windows(e: Emit, pool: str) -> None:
    """local_qk: the three channels' conv windows at the slot (%pcv: q's; k's is 2048 channels on)."""
    conv_window_address(e, pool)
    for i, (q, k) in enumerate((("%u1", "%y1"), ("%u2", "%y2"), ("%u3", "%y3"))):
        e(f"ld.global.b16 {q}, [%pcv+{2 * i}];")
        e(f"ld.global.b16 {k}, [%pcv+{2 * i + 6 * NK * DK}];")
    e(f"mul.lo.u64 %pcw, %slot, {CONV};")
    e("cvt.u64.u32 %pt, %cv;")
    e("add.u64 %pcw, %pcw, %pt;")
    e(f"mul.lo.u64 %pcw, %pcw, {2 * (KW - 1)};")
    e(f"add.u64 %pcw, {pool}, %pcw;  // conv_pool[slot, v channel, 0..2]")
    for i, v in enumerate(("%v1", "%v2", "%v3")):
        e(f"@%pw ld.global.b16 {v}, [%pcw+{2 * i}];")


def _conv_of(e: Emit, lo: str, hi: str, w: tuple, xb: str, out: str) -> None:
    """out = bf16(silu(conv)) of one channel: weights (lo, hi), window w (oldest first), new xb;
    the same instructions as conv_math + _silu_bf16."""
    conv_sum(e, lo, hi, w, xb, out)
    _silu_bf16(e, out, out)


def _lqk_conv(e: Emit) -> None:
    """local_qk step 2: q and k of channel th to qk_s[th], qk_s[128 + th] (no exchange), v of the
    rank's column th to v_s (warp 0); each window written by its one writer."""
    _conv_of(e, "%wlo", "%whi", ("%u1", "%u2", "%u3"), "%xb", "%q")
    _conv_of(e, "%klo", "%khi", ("%y1", "%y2", "%y3"), "%xk", "%k")
    e("shl.b32 %t1, %th, 2;")
    e("mov.u32 %t0, qk_s;")
    e("add.u32 %t0, %t0, %t1;")
    e("st.shared.f32 [%t0], %q;")
    e(f"st.shared.f32 [%t0+{4 * DK}], %k;")
    e("@!%pw bra V_DONE;")
    _conv_of(e, "%vlo", "%vhi", ("%v1", "%v2", "%v3"), "%xv", "%x")
    for i, v in enumerate(("%v2", "%v3", "%xv")):
        e(f"st.global.b16 [%pcw+{2 * i}], {v};")
    e("mov.u32 %t0, v_s;")
    e("add.u32 %t0, %t0, %t1;")
    e("st.shared.f32 [%t0], %x;")
    e("V_DONE:")
    e("barrier.cluster.arrive.relaxed.aligned;  // this rank has read (and used) every q/k window it needs")


def _lqk_window_stores(e: Emit) -> None:
    """local_qk: after every rank's arrive (each has consumed the old q/k windows), the owners
    (th / 16 == rank) write the new ones; the v windows were written at the conv (one reader)."""
    e("@!%pc bra QK_WINDOWS_DONE;")
    for i, (q, k) in enumerate((("%u2", "%y2"), ("%u3", "%y3"), ("%xb", "%xk"))):
        e(f"st.global.b16 [%pcv+{2 * i}], {q};")
        e(f"st.global.b16 [%pcv+{2 * i + 6 * NK * DK}], {k};")
    e("QK_WINDOWS_DONE:")


def zn_async_loads(e: Emit, A: dict, after_wait: bool, act) -> None:
    """Warp 0 lanes 0-3 copy the CTA's 32 norm weights (64 B) and lanes 4-7 its 32 z values by
    16-byte cp.async into zn_s (no register holds them until the end). The norm weight goes
    before the wait under pdl (``after_wait=False`` issues it; z follows through ``act``)."""
    e("setp.lt.u32 %p, %th, 8;")
    e("and.b32 %t2, %th, 3;")
    e("shl.b32 %t2, %t2, 4;  // 16 B piece")
    e("mov.u32 %t3, zn_s;")
    e("setp.lt.u32 %pv, %th, 4;")
    if not after_wait:
        e(f"mul.lo.u32 %t0, %r, {CHUNK};")
        e("mul.wide.u32 %pt, %t0, 2;")
        e(f"add.u64 %pt, {A['norm_w']}, %pt;")
        e("cvt.u64.u32 %pcv, %t2;")
        e("add.u64 %pt, %pt, %pcv;")
        e("add.u32 %t1, %t3, %t2;")
        e("@%pv cp.async.ca.shared.global [%t1], [%pt], 16;")
    e(f"mad.lo.u32 %t0, %h, {DV}, %col;")
    e("sub.u32 %t0, %t0, %lane;  // the CTA's first column")
    e("mad.lo.u32 %t1, %seq, %zrow, %t0;")
    e("mul.wide.u32 %pt, %t1, 2;")
    e(f"add.u64 %pt, {A['z']}, %pt;")
    e("cvt.u64.u32 %pcv, %t2;")
    e("add.u64 %pt, %pt, %pcv;")
    e(f"add.u32 %t1, %t3, {4 * CHUNK // 2};")
    e("add.u32 %t1, %t1, %t2;")
    e("setp.ge.and.u32 %pv, %th, 4, %p;")
    act("@%pv cp.async.ca.shared.global [%t1], [%pt], 16;")
    e("cp.async.commit_group;")


def generate(pdl: bool = False, maxnreg: int = 0, zn_async: bool = False, name: str = NAME, coherent: bool = True,
             local_qk: bool = False, stream_state: bool = True, smem_state: bool = False, smem_hint: bool = True,
             early_trigger: bool = False, spin: bool = False, spin_exit_wait: bool = True, spin_trace: bool = False,
             spin_ba_late: bool = False, spin_z_early: bool = False, spin_backoff: int = 0,
             spin_strong_out: bool = False) -> str:
    """The PTX. ``pdl`` (experiments/gdn/pdl_variant.py, not promoted): for a programmatic
    dependent launch, let the next grid launch at once and load the slot id, the weights, the
    conv windows and the state before ``griddepcontrol.wait``; the projection outputs (qkv,
    z, b, a) only after it. Valid only where the pools were last written by a grid that has
    completed (any ordinary launch boundary in between).
    ``maxnreg`` (experiments/gdn/occupancy_variant.py): a ``.maxnreg`` directive (ptxas ignores
    -maxrregcount here); 64 registers fit 8 CTAs per SM instead of 7. ``zn_async``: warp 0's z
    and norm weight (used only at the very end) go global -> shared by cp.async instead of
    into two registers, which at 64 registers were the spill. ``name``: the entry's (the promoted
    PDL build is gdn_decode_b32_pdl, for the decode runner's PDL engine only). ``coherent`` (with
    pdl; promoted): the projection outputs are read after the wait by ld.global, not .nc (the
    non-coherent path is defined only for data read-only for the kernel's lifetime, which under
    PDL overlaps the writer's), and launch_dependents follows the wait. coherent=False is the
    build measured by experiments/gdn/pdl_variant.py and pdl_chain_variant.py: in the decode
    runner's PDL engine its logits differed from plain launches at batch 1 and 8
    (experiments/decode/pdl_gdn_variant.json; either change alone made them bitwise).
    ``local_qk`` (a candidate, CPU-built): every rank convolves all 256 q and k channels of its
    key head itself (two per thread; warp 0 also its 32 v channels) instead of 16 + 16 pushed to
    the 8 ranks by st.async: no q/k exchange and no wait for it on the critical path, the cluster
    barrier only before the norm exchange. Each channel's conv is the same instructions and each
    thread holds the same q[th], k[th] as after the exchange, so the outputs are bitwise the
    promoted kernel's; each q/k window has 8 readers and one writer (rank th / 16), which writes
    it only after the cluster barrier whose arrive follows every rank's conv (the arrive moves
    from the start to there). ``stream_state`` (promoted
    after experiments/gdn/decode_variant.json: bitwise; B = 1 PDL chain 2.72 -> 2.50 us, B = 32
    43.2 -> 41.3 us plain; ``stream_state=False`` is the build before): the state slice loaded and stored with the .cs (streaming, evict-first)
    cache operator: each is touched once per step, and ncu put the B = 32 kernel at 36.5 us alone
    against 43 back to back, where the previous launch's dirty state lines are written back
    during it (experiments/gdn/README.md, occupancy); the same arithmetic, so bitwise.
    ``smem_state`` (a candidate, CPU-built; experiments/gdn/decode_variant.py smem): the slice
    comes into shared memory by cp.async (16 KB per CTA, evict-first) instead of 32 registers per
    thread, and the delta rule reads it from there in both passes (delta_rule(smem=True): the
    same arithmetic in the same order, so bitwise). Why: at B = 32 the kernel is at 78.5% of the state
    roofline where a copy reaches 88-89%, because each CTA holds its 16 KB in registers from load to
    store and only 7 CTAs (72 registers) fit per SM; with the slice in shared memory the registers
    fall and shared memory (17.8 KB per CTA) allows 12 per SM, so more state is in flight.
    ``early_trigger`` (a candidate with pdl and coherent; experiments/decode/step_ab.py gdn_early): launch_dependents
    at the start, not after the wait, so the next grid (out_proj) is launched while this one still waits for the
    in_proj and its CTAs take each SM as an in_proj CTA leaves it (since 15fc351 one fits beside a CTA of this
    kernel); the projection outputs are still read after the wait by coherent loads. The same arithmetic: bitwise.
    ``spin`` (a candidate with pdl and coherent; experiments/decode/step_ab.py gdn_spin): no griddepcontrol.wait before
    the projection outputs. Each is polled (ld.relaxed.gpu) until it is not TAG, so the recurrence runs as soon as the
    in_proj has stored q | k | v (its strips 0 .. 511, rounds 0-3 of 6), and z (the last strips) is polled only at the
    gated norm. Contract: every element this grid reads held TAG before the producer grid began, and the producer
    stores it strong (fp8_gemv generate(strong_out=True)). The grid keeps it: each q, k, v and z value has one reader in
    the grid, which writes TAG back after reading it; b and a (4 reader CTAs each) are written back by the value
    head's rank r = 0 once the 4 ranks' sums of o^2 have landed (each depends on every thread's b and a). A poll
    that still sees TAG after SPIN_LIMIT rounds waits for the producer grid and reads the final value; every thread
    runs griddepcontrol.wait before it exits, so a grid after this one still follows the producer. The trigger
    moves to where the wait was (the next grid launches while this one polls). The same arithmetic: bitwise.
    ``spin_exit_wait=False`` (a diagnostic, not a valid build: a grid after this one no longer follows the in_proj):
    no griddepcontrol.wait before exit, to measure what that wait holds the grid's end to.
    ``spin_trace`` (a diagnostic with spin): thread 0 of CTAs 0 .. TRACE_CTAS - 1 stores %globaltimer at the 8 points
    of TRACE_POINTS into the module's gdn_stamps[launch % TRACE_LAUNCHES][cta][point] (launch: the CTA's own count in
    gdn_slot), read back by experiments/decode/step_ab.py gdn_spin_trace. The same outputs.
    ``spin_ba_late`` (with spin; step_ab gdn_spin2): b and a polled after the q | k exchange, just before the gates use
    them, not before the conv (traced at 131eed1: they were seen 0.8 us after the qkv values, median CTA).
    ``spin_z_early`` (with spin; step_ab gdn_spin2): warp 0 issues one strong load of z after the delta rule, so at the
    gated norm the poll starts from its value (traced: the poll's first round trip was 0.26 us of the grid's end).
    ``spin_backoff`` (a candidate with spin; step_ab spin_backoff): the sleep between a thread's polls doubles from 32 ns
    up to this many ns instead of 32 ns each, so ~16 K pollers load L2 less while the in_proj walks beside them (its
    increment rose 0.5 us a layer with the pair: docs/notes/decode.md, "After efc4214"). The same values: bitwise.
    ``spin_strong_out`` (with spin; step_ab res_spin*): the output o stored with st.relaxed.gpu, for the out_proj
    candidate that polls it (contracts.proj.RES_SPIN). The same values."""
    assert not early_trigger or (pdl and coherent), "early_trigger: the coherent PDL build"
    assert not (spin_trace or spin_ba_late or spin_z_early or spin_backoff or spin_strong_out) or spin, \
        "spin_trace, spin_ba_late, spin_z_early, spin_backoff, spin_strong_out: spin builds"
    assert spin_backoff == 0 or 64 <= spin_backoff <= 1 << 20, spin_backoff
    _BACKOFF["cap"] = spin_backoff
    assert not spin or (pdl and coherent and not (early_trigger or local_qk or zn_async)), \
        "spin: the coherent PDL build (or its smem_state build), without early_trigger, local_qk or zn_async"
    assert not (local_qk and zn_async), "local_qk is built on the promoted build"
    assert not (smem_state and (local_qk or zn_async)), "smem_state is built on the promoted build"
    e = Emit()
    act = (lambda line: None) if pdl else e  # the loads of the projection outputs, moved after the wait under pdl
    e(f"// {name}: Gated DeltaNet decode step for B <= 32 sequences. Generated by gen_gdn_decode.py (the design is there).")
    e(".version 8.1  // st.async")
    e(".target sm_90a")
    e(".address_size 64")
    e()
    if spin_trace:
        e(f".global .align 8 .u64 gdn_stamps[{TRACE_LAUNCHES * TRACE_CTAS * len(TRACE_POINTS)}];  // spin_trace")
        e(f".global .align 4 .u32 gdn_slot[{TRACE_CTAS}];  // spin_trace: each CTA's launch count")
        e()
    entry_params(e, name)
    e(f".reqntid {THREADS}")
    e(f".reqnctapercluster {CLUSTER}, 1, 1")
    if maxnreg:
        e(f".maxnreg {maxnreg}")
    e("{")
    e(".reg .pred %p, %pc, %pq, %pv, %pw;")
    e(".reg .b32 %th, %warp, %lane, %rank, %cl, %seq, %kh, %h, %r, %col, %ch, %t<4>, %qrow, %zrow, %npool, %wlo, %whi, %sr, %sq;")
    e(".reg .b16 %u<4>, %xb, %bb, %ab, %nwb, %zb;")
    if local_qk:
        e(".reg .b32 %ck, %cv, %klo, %khi, %vlo, %vhi;")
        e(".reg .b16 %xk, %xv, %y<4>, %v<4>;")
        e(".reg .b64 %pcw;")
    e(f".reg .f32 %s<{CHUNK}>, %f<12>, %q, %k, %v, %x, %kn, %qn, %beta, %dec, %kv, %dl, %o, %ss, %eps, %alog, %dtb;")
    e(".reg .b64 %a<12>, %pt, %pst, %pcv, %slot;")
    if spin:
        e(".reg .pred %ps;")
        e(".reg .b32 %spn;" if not spin_backoff else ".reg .b32 %spn, %sns;")
        e(".reg .b16 %ut;")
        e(".reg .b64 %pqa, %pba, %paa, %pza;  // spin: this thread's qkv value, b and a of its head, its z value")
    if spin_trace:
        e(".reg .pred %ptr;")
        e(".reg .b32 %tcta, %tslot;")
        e(".reg .b64 %tsa, %tnow;")
    if smem_state:
        e(".reg .b32 %sa;")
        e(".reg .b64 %pol;")
        e(f".shared .align 128 .f32 st_s[{DK * CHUNK}];  // the CTA's 128 x 32 state slice (smem_state)")
    e(f".shared .align 16 .f32 qk_s[{2 * DK}];  // q | k of the key head, from all 8 ranks")
    e(f".shared .align 16 .f32 v_s[{CHUNK}];")
    e(f".shared .align 16 .f32 red[{4 * CHUNK}];")
    e(".shared .align 16 .f32 wsum[8];")
    e(".shared .align 16 .f32 norm_s[4];  // sum of o^2 of each of the value head's 4 ranks")
    if zn_async:
        e(f".shared .align 16 .b16 zn_s[{2 * CHUNK}];  // warp 0: the 32 norm weights | the 32 z values, by cp.async")
    if not local_qk:
        e(".shared .align 8 .b64 bar_qk;  // completes when the 8 ranks' q and k (1 KB) have landed")
    e(".shared .align 8 .b64 bar_norm;  // completes when the head's 4 sums of o^2 (16 B) have landed")
    A = load_params(e)
    cluster_coords(e)
    e("setp.eq.u32 %p, %th, 0;")
    e("@!%p bra INIT_DONE;")
    if not local_qk:
        e("mbarrier.init.shared::cta.b64 [bar_qk], 1;")
    e("mbarrier.init.shared::cta.b64 [bar_norm], 1;")
    if not local_qk:
        e(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar_qk], {2 * DK * 4};")
    e("mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar_norm], 16;")
    e("fence.mbarrier_init.release.cluster;")
    e("INIT_DONE:")
    if not local_qk:  # local_qk arrives after its conv: every rank has read the windows the owners then rewrite
        e("barrier.cluster.arrive.relaxed.aligned;  // started, barriers initialized: waited on before the first st.async")
    if pdl and (not coherent or early_trigger):
        e("griddepcontrol.launch_dependents;")
    if spin_trace:
        e("// spin_trace: thread 0 of the first CTAs stamps %globaltimer at TRACE_POINTS")
        e("mov.u32 %tcta, %ctaid.x;")
        e(f"setp.lt.u32 %ptr, %tcta, {TRACE_CTAS};")
        e("setp.eq.and.u32 %ptr, %th, 0, %ptr;")
        e("@!%ptr bra TRACE_SET;")
        e("mov.u64 %tsa, gdn_slot;")
        e("mul.wide.u32 %tnow, %tcta, 4;")
        e("add.u64 %tsa, %tsa, %tnow;")
        e("atom.global.add.u32 %tslot, [%tsa], 1;")
        e(f"and.b32 %tslot, %tslot, {TRACE_LAUNCHES - 1};")
        e(f"mad.lo.u32 %tslot, %tslot, {TRACE_CTAS}, %tcta;")
        e(f"mul.wide.u32 %tnow, %tslot, {8 * len(TRACE_POINTS)};")
        e("mov.u64 %tsa, gdn_stamps;")
        e("add.u64 %tsa, %tsa, %tnow;")
        e("TRACE_SET:")
        _stamp(e, spin_trace, "start")

    e("// 1. the slot id first (the state's address waits on it), then the loads that need no slot id:")
    e("// b, a, A_log, dt_bias (all threads), z and norm weight (warp 0), qkv and conv weights (conv threads)")
    e("mul.wide.u32 %pt, %seq, 8;")
    e(f"add.u64 %pt, {A['slots']}, %pt;")
    e("ld.global.nc.u64 %slot, [%pt];")
    if local_qk:
        slot_free_loads(e, A, act, zn_async, conv=False)
        _lqk_channels(e)
        if not pdl:
            _lqk_act_loads(e, A, ".nc")
        _lqk_weights(e, A)
    else:
        slot_free_loads(e, A, act, zn_async)
    if spin:
        e("// spin: the addresses of the projection outputs this thread polls (and writes TAG back to)")
        e("mad.lo.u32 %t1, %seq, %qrow, %ch;")
        e("mul.wide.u32 %pqa, %t1, 2;")
        e(f"add.u64 %pqa, {A['qkv']}, %pqa;")
        e(f"mad.lo.u32 %t0, %seq, {NV}, %h;")
        e("mul.wide.u32 %pba, %t0, 2;")
        e(f"add.u64 %paa, {A['a_in']}, %pba;")
        e(f"add.u64 %pba, {A['b_in']}, %pba;")
        e(f"mad.lo.u32 %t0, %h, {DV}, %col;")
        e("mad.lo.u32 %t1, %seq, %zrow, %t0;")
        e("mul.wide.u32 %pza, %t1, 2;")
        e(f"add.u64 %pza, {A['z']}, %pza;")
    e("// the conv window and the state slice, at the slot id")
    e("cvt.u64.u32 %pt, %npool;")
    e("setp.ge.u64 %p, %slot, %pt;  // also a negative slot id: the whole cluster shares it")
    e("@%p bra BAD_SLOT;")
    if local_qk:
        _lqk_windows(e, A["conv_pool"])
    else:
        conv_window_address(e, A["conv_pool"])
        e("@%pc ld.global.b16 %u1, [%pcv];")
        e("@%pc ld.global.b16 %u2, [%pcv+2];")
        e("@%pc ld.global.b16 %u3, [%pcv+4];")
    e(f"// state_pool + ((slot * {NV} + h) * {DK} + 32 warp + i) * {DV} + col")
    state_address(e, A["state_pool"])
    if smem_state:
        state_async_loads(e, smem_hint)
    else:
        for i in range(CHUNK):
            e(f"{'ld.global.cs' if stream_state else 'ld.global'}.f32 %s{i}, [%pst+{i * DV * 4}];")
    if spin:
        e("griddepcontrol.launch_dependents;  // spin: no wait here; the next grid launches while this one polls")
        e("// the conv channel's qkv value as soon as the in_proj has stored it; then TAG back (its only reader)")
        spin_load(e, "%xb", "%pqa", "SPIN_X", "%pc")
        poison(e, "%pqa", "%pc")
        _stamp(e, spin_trace, "qkv")
        if not spin_ba_late:
            _spin_ba(e, spin_trace)
    elif pdl:
        e("griddepcontrol.wait;  // the projection outputs are complete from here")
        nc = "" if coherent else ".nc"  # written by the grids before: not read-only for this kernel's lifetime
        if coherent and not early_trigger:
            e("griddepcontrol.launch_dependents;")
        e(f"mad.lo.u32 %t0, %seq, {NV}, %h;")
        e("mul.wide.u32 %pt, %t0, 2;")
        e(f"add.u64 %pt, {A['b_in']}, %pt;")
        e(f"ld.global{nc}.b16 %bb, [%pt];")
        e("mul.wide.u32 %pt, %t0, 2;")
        e(f"add.u64 %pt, {A['a_in']}, %pt;")
        e(f"ld.global{nc}.b16 %ab, [%pt];")
        if zn_async:
            zn_async_loads(e, A, after_wait=True, act=e)
        else:
            e(f"mad.lo.u32 %t0, %h, {DV}, %col;")
            e("mad.lo.u32 %t1, %seq, %zrow, %t0;")
            e("mul.wide.u32 %pt, %t1, 2;")
            e(f"add.u64 %pt, {A['z']}, %pt;")
            e(f"@%pw ld.global{nc}.b16 %zb, [%pt];")
        if local_qk:
            _lqk_act_loads(e, A, nc)
        else:
            e("mad.lo.u32 %t1, %seq, %qrow, %ch;")
            e("mul.wide.u32 %pt, %t1, 2;")
            e(f"add.u64 %pt, {A['qkv']}, %pt;")
            e(f"@%pc ld.global{nc}.b16 %xb, [%pt];")

    if local_qk:
        e("// 2. conv of the key head's q and k channel th (every rank) and of v column th (warp 0)")
        _lqk_conv(e)
    else:
        e("// 2. conv update of this thread's channel; its new window is written by its only reader")
        e("@!%pc bra CONV_DONE;")
        conv_math(e)
        e("st.global.b16 [%pcv], %u2;")
        e("st.global.b16 [%pcv+2], %u3;")
        e("st.global.b16 [%pcv+4], %xb;")
        _silu_bf16(e, "%x", "%x")
        e("CONV_DONE:")
        e("barrier.cluster.wait.aligned;  // every rank has started")
        e("@!%pq bra PUSH_V;")
        e("// q or k: pushed to qk_s of all 8 ranks at (th < 16 ? 0 : 128) + 16 rank + th % 16")
        e(f"and.b32 %t0, %th, {QK_PER_RANK - 1};")
        e(f"mad.lo.u32 %t0, %rank, {QK_PER_RANK}, %t0;")
        e(f"setp.ge.u32 %p, %th, {QK_PER_RANK};")
        e(f"@%p add.u32 %t0, %t0, {DK};")
        e("mov.u32 %t1, qk_s;")
        e("mad.lo.u32 %t1, %t0, 4, %t1;")
        e("mov.u32 %t0, bar_qk;")
        for j in range(CLUSTER):
            e(f"mapa.shared::cluster.u32 %t2, %t1, {j};")
            e(f"mapa.shared::cluster.u32 %t3, %t0, {j};")
            e("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%t2], %x, [%t3];")
        e("bra.uni PUSHED;")
        e("PUSH_V:")
        e("@!%pc bra PUSHED;")
        e(f"sub.u32 %t0, %th, {2 * QK_PER_RANK};")
        e("mov.u32 %t1, v_s;")
        e("mad.lo.u32 %t1, %t0, 4, %t1;")
        e("st.shared.f32 [%t1], %x;")
        e("PUSHED:")
        _wait(e, "bar_qk", "WAIT_QK")
        _stamp(e, spin_trace, "qk_all")
        if spin_ba_late:
            _spin_ba(e, spin_trace)

    if smem_state:
        e("cp.async.wait_all;  // this thread's pieces of the slice; the bar.sync in step 3 shows every warp's to all")
    e("// 3. l2norm of q and k over dk, q scaled by dk^-1/2 (the same sums in every rank)")
    qk_norms_gates(e, "qk_s")
    delta_rule(e, st="st.global.cs" if stream_state else "st.global", smem=smem_state)
    if local_qk:
        e("barrier.cluster.wait.aligned;  // every rank has started and read its conv windows")
        _lqk_window_stores(e)
    _stamp(e, spin_trace, "delta")
    if spin_z_early:
        e("@%pw ld.relaxed.gpu.global.b16 %zb, [%pza];  // spin_z_early: z's first poll now, checked at the gated norm")
    e("// 5. gated RMSNorm over the value head's 128 columns: this rank's sum of o^2 to the head's 4 ranks")
    e("@!%pw bra NORM_PUSHED;")
    e("mul.f32 %f10, %o, %o;")
    for k in (16, 8, 4, 2, 1):
        e(f"shfl.sync.bfly.b32 %f11, %f10, {k}, 31, 0xffffffff;")
        e("add.f32 %f10, %f10, %f11;")
    e("setp.lt.u32 %p, %lane, 4;")
    e("@!%p bra NORM_PUSHED;")
    e("mov.u32 %t0, norm_s;")
    e("mad.lo.u32 %t0, %r, 4, %t0;  // slot r of ...")
    e("and.b32 %t1, %rank, 4;")
    e("add.u32 %t1, %t1, %lane;  // ... rank (rank & 4) + lane")
    e("mapa.shared::cluster.u32 %t2, %t0, %t1;")
    e("mov.u32 %t0, bar_norm;")
    e("mapa.shared::cluster.u32 %t3, %t0, %t1;")
    e("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%t2], %f10, [%t3];")
    e("NORM_PUSHED:")
    e("@!%pw bra OUT_DONE;")
    _wait(e, "bar_norm", "WAIT_NORM")
    _stamp(e, spin_trace, "norm_all")
    e("mov.u32 %t0, norm_s;")
    e("ld.shared.v4.f32 {%f0, %f1, %f2, %f3}, [%t0];")
    e("add.f32 %ss, %f0, %f1;")
    e("add.f32 %ss, %ss, %f2;")
    e("add.f32 %ss, %ss, %f3;")
    norm_scale(e)
    if spin:
        e("// z (the in_proj's last strips) only now; then TAG back to it, and rank r = 0 to b and a: the head's 4")
        e("// ranks have pushed their sums of o^2, which every thread's b and a went into")
        spin_load(e, "%zb", "%pza", "SPIN_Z", loaded=spin_z_early)
        poison(e, "%pza")
        _stamp(e, spin_trace, "z")
        e("or.b32 %t0, %r, %lane;")
        e("setp.eq.u32 %ps, %t0, 0;")
        poison(e, "%pba", "%ps")
        poison(e, "%paa", "%ps")
    if zn_async:
        e("cp.async.wait_all;  // lanes 0-7's pieces have landed ...")
        e("bar.warp.sync 0xffffffff;  // ... and are visible to the whole warp")
        e("mov.u32 %t0, zn_s;")
        e("shl.b32 %t1, %lane, 1;")
        e("add.u32 %t0, %t0, %t1;")
        e("ld.shared.b16 %nwb, [%t0];")
        e(f"ld.shared.b16 %zb, [%t0+{2 * CHUNK}];")
    gate_z(e)
    e(f"mad.lo.u32 %t0, %h, {DV}, %col;")
    e(f"mad.lo.u32 %t1, %seq, {NV * DV}, %t0;")
    e("mul.wide.u32 %pt, %t1, 2;")
    e(f"add.u64 %pt, {A['out']}, %pt;")
    # spin_strong_out: o is polled by the next grid (the out_proj candidate contracts.proj.RES_SPIN), so stored strong
    e("st.relaxed.gpu.global.b16 [%pt], %u0;" if spin_strong_out else "st.global.b16 [%pt], %u0;")
    e("OUT_DONE:")
    if spin and spin_exit_wait:
        e("griddepcontrol.wait;  // spin: a grid after this one still follows the in_proj")
    _stamp(e, spin_trace, "exit")
    e("ret;")
    e("BAD_SLOT:  // a slot id outside the pool: no state is touched, this head's output is NaN")
    if local_qk:
        e("barrier.cluster.arrive.relaxed.aligned;")
    e("barrier.cluster.wait.aligned;")
    if pdl:
        e("griddepcontrol.wait;")
    if spin:  # nothing of this sequence was read: TAG back to all of it, the producer being complete
        poison(e, "%pqa", "%pc")
        poison(e, "%pza", "%pw")
        e("or.b32 %t0, %r, %th;")
        e("setp.eq.u32 %ps, %t0, 0;")
        poison(e, "%pba", "%ps")
        poison(e, "%paa", "%ps")
    e("@!%pw bra OUT_DONE;")
    e(f"mad.lo.u32 %t0, %h, {DV}, %col;")
    e(f"mad.lo.u32 %t1, %seq, {NV * DV}, %t0;")
    e("mul.wide.u32 %pt, %t1, 2;")
    e(f"add.u64 %pt, {A['out']}, %pt;")
    e("mov.b16 %u0, 0x7FC0;")
    e("st.relaxed.gpu.global.b16 [%pt], %u0;" if spin_strong_out else "st.global.b16 [%pt], %u0;")
    e("ret;")
    e("}")
    return e.text()


PDL_NAME = f"{NAME}_pdl"
SMEM_NAME, SMEM_PDL_NAME = f"{NAME}_smem", f"{NAME}_smem_pdl"  # smem_state builds, taken from 8 sequences
SPIN_NAME = f"{NAME}_spin"  # the smem_state PDL build polling its inputs (spin): netra::gdn_decode_spin


def main() -> int:
    (HERE / f"{NAME}.ptx").write_text(generate())
    (HERE / f"{PDL_NAME}.ptx").write_text(generate(pdl=True, name=PDL_NAME))
    (HERE / f"{SMEM_NAME}.ptx").write_text(generate(smem_state=True, name=SMEM_NAME))
    (HERE / f"{SMEM_PDL_NAME}.ptx").write_text(generate(pdl=True, smem_state=True, name=SMEM_PDL_NAME))
    (HERE / f"{SPIN_NAME}.ptx").write_text(generate(pdl=True, smem_state=True, spin=True, name=SPIN_NAME))
    print(f"wrote {NAME}.ptx: grid {CLUSTER} x {NK} x B CTAs of {THREADS} threads, clusters of {CLUSTER}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
