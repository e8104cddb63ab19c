"""Generator of gdn_verify_chunk_t16 and gdn_verify_chunk_t16_w8: the Gated DeltaNet step for T <= 16 draft
tokens of B <= 32 sequences in the chunk form, writing what restores the state after any
accepted prefix (k, delta and the decay per token) instead of the T states; gen_gdn_commit.py's
kernel then writes the accepted state. The pools are only read. Math (per value head, tokens
t, s < T, c_t = log2 of the decay product through token t, e_t = 2^c_t):
  kv0_t = S_0^T k_t, qs0_t = S_0^T q_t                     (the only pass over the state)
  A[t][s] = beta_t 2^(c_t - c_s) k_t.k_s (s < t),  P[t][s] = 2^(c_t - c_s) q_t.k_s (s <= t)
  delta_t = beta_t (v_t - e_t kv0_t) - sum_{s<t} A[t][s] delta_s   (forward substitution)
  o_t = e_t qs0_t + sum_{s<=t} P[t][s] delta_s
which is the sequential rule's o_t and delta_t exactly (netra.reference.gdn.verify_restore is
that rule in float64; the state after j tokens is 2^c_{j-1} S_0 + sum_{s<j} 2^(c_{j-1}-c_s)
k_s delta_s^T). The per-token serial part is one FMA per (t, s) pair; the state is read once.

Work split: a cluster of 4 CTAs per (sequence, value head h), rank r = column chunk (32 of
the head's 128 columns); 128 threads, warp w holds state rows 32 w .. 32 w + 31, lane = column.
The _w8 build has 8 warps: warps 0-3 compute S_0^T k and 4-7 S_0^T q over the same rows, the
q/k conv is split into two token groups, and the per-token steps spread over twice the warps
(faster at B = 1, where one CTA per SM has no other warps to hide its latencies; slower at
larger B, where it loads every state element twice: the op takes it at B = 1 only).
Both builds divide silu's denominator by div.full.f32 (the BF16 rounding that follows hides
its 2 ulp almost always; measured, experiments/gdn/verify_chunk_variant.json).
Every CTA computes the conv and l2norm of all 128 q and 128 k channels of its key head for the
T tokens itself (no exchange: 8 KB of L2 reads instead of st.async fan-out); only the gated
norm's sums of o^2 cross CTAs (st.async into the 4 ranks, one mbarrier).
1. loads: slot id, per-token b and a (warp 0), q/k inputs and conv weights (threads 0-63: q
   channels 2 th, 2 th + 1 of the key head; 64-127: the k pair; by 4-byte loads), v inputs of
   the CTA's 32 channels (thread (w, lane): tokens w + 4m), z and the norm weight; then the conv
   windows and the 32 state values per thread;
2. conv + SiLU (BF16-rounded, as the model) of q, k (per thread, tokens in order) and v (from
   shared memory); the q/k sums of squares (shfl.bfly, then warps 0 + 1 for q, 2 + 3 for k);
   the gates and the inclusive scan of the log2 decays (warp 0, shfl.up in a fixed order);
3. kv0 and qs0 (a runtime loop over the T tokens, 4 partial chains of 8 rows per vector, the
   4 warps' partials added in warp order);
4. the Gram products (warp w: tokens w + 4m; lane l < 16: k_t.k_l, else q_t.k_(l-16); 4
   partial chains of 32 channels) scaled into -A (stored transposed) and P;
5. the forward substitution (warp 0, lane = column), delta to shared memory and dsave;
6. o_t (warp w: tokens w + 4m), the sums of o^2 pushed to the head's 4 ranks, the gated
   RMSNorm with silu(z), BF16 out.
Restore data: dsave [B, T, NV, DV] (every CTA its columns), ksave [B, T, NK, DK] (rank 0 of even
value heads), gsave [B, T, NV] = c_t (rank 0). Deterministic: every sum has a fixed order.
A slot id outside [0, pool_slots) makes the sequence's outputs NaN and writes no restore data.

  python3 kernels/sm_90a/gdn/gen_gdn_verify_chunk.py      (rewrites both .ptx)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "src"))
from netra import paths  # noqa: E402
from netra.contracts.gdn import MAX_TOKENS as MAXT  # noqa: E402

d = paths.generator("gdn", "gen_gdn_decode")
NAME = "gdn_verify_chunk_t16"
CONV, DK, DV, KW, NK, NV = d.CONV, d.DK, d.DV, d.KW, d.NK, d.NV
f32, LOG2E = d.f32, d.LOG2E
RANKS, CHUNK = 4, 32
TS = 2 * DK + 4  # token t's q | k in shared memory, padded: the Gram loads of 16 tokens' k spread over the banks
PARAMS = ("qkv", "z", "b_in", "a_in", "conv_w", "a_log", "dt_bias", "norm_w", "conv_pool", "state_pool", "slot_in",
          "out", "ksave", "dsave", "gsave")
SCALARS = ("qkv_seq", "qkv_tok", "z_seq", "z_tok", "tokens", "pool_slots")
STATE_SLOT = NV * DK * DV * 4


def _silu_round(e, x: str, div: str) -> None:
    """x = bf16-rounded silu(x) as f32 (%f9, %u0 scratch), as gen_gdn_decode._silu_bf16; ``div``:
    "rn", or "full" (2 ulp; generate(fast_silu=True))."""
    e(f"mul.f32 %f9, {x}, {f32(-LOG2E)};")
    e("ex2.approx.ftz.f32 %f9, %f9;")
    e(f"add.f32 %f9, %f9, {f32(1.0)};")
    e(f"div.{div}.f32 {x}, {x}, %f9;")
    e(f"cvt.rn.bf16.f32 %u0, {x};")
    e(f"cvt.f32.bf16 {x}, %u0;")


def _unpack_w(e, lo: str, hi: str, dst: list[str]) -> None:
    """The 4 BF16 conv weights in (lo, hi) as f32."""
    e(f"shl.b32 %t0, {lo}, 16;")
    e(f"mov.b32 {dst[0]}, %t0;")
    e(f"and.b32 %t0, {lo}, 0xffff0000;")
    e(f"mov.b32 {dst[1]}, %t0;")
    e(f"shl.b32 %t0, {hi}, 16;")
    e(f"mov.b32 {dst[2]}, %t0;")
    e(f"and.b32 %t0, {hi}, 0xffff0000;")
    e(f"mov.b32 {dst[3]}, %t0;")


def _conv(e, w: list[str], hist: list, out: str, div: str) -> None:
    """out = w . hist (4 BF16 inputs, oldest first) in decode's order, then silu and the BF16
    rounding. An input is a b16 register, or (word, hi): a half of a packed pair (two channels per
    thread)."""
    for i, src in enumerate(hist):
        if isinstance(src, tuple):
            word, hi = src
            e(f"and.b32 %t0, {word}, 0xffff0000;" if hi else f"shl.b32 %t0, {word}, 16;")
            e(f"mov.b32 %f{4 + i}, %t0;")
        else:
            e(f"cvt.f32.bf16 %f{4 + i}, {src};")
    e(f"mul.f32 {out}, {w[0]}, %f4;")
    for i in range(1, 4):
        e(f"fma.rn.f32 {out}, {w[i]}, %f{4 + i}, {out};")
    _silu_round(e, out, div)


BUILDS = {NAME: dict(nw=4, fast_silu=True), f"{NAME}_w8": dict(nw=8, fast_silu=True)}  # the promoted kernels


def generate(nw: int = 4, fast_silu: bool = False) -> str:
    """The PTX. ``nw`` warps: 4 (each warp both S_0^T k and S_0^T q over its 32 rows, one
    thread per q/k channel pair for all T tokens), or 8 (warps 0-3 S_0^T k, 4-7 S_0^T q, over
    the same rows; threads 128.. run the q/k conv of tokens 8..15): half the serial work per
    warp and two warps per scheduler to hide each other's latencies. ``fast_silu``: the conv's
    silu by div.full.f32 (the BF16 rounding after it hides the 2 ulp almost always)."""
    assert nw in (4, 8)
    div = "full" if fast_silu else "rn"
    TPW, G = MAXT // nw, nw // 4  # tokens per warp slot (w + nw m); token groups of the q/k conv
    TG = MAXT // G  # tokens per q/k conv group
    name = NAME if nw == 4 else f"{NAME}_w{nw}"
    e = d.Emit()
    e(f"// {name}: Gated DeltaNet verification of T <= {MAXT} tokens of B <= 32 sequences in the chunk form, "
      "restore data instead of states. Generated by kernels/sm_90a/gdn/gen_gdn_verify_chunk.py (the design is there)."
      + (" 8 warps." if nw == 8 else "") + (" silu by div.full." if fast_silu else ""))
    e(".version 8.1  // st.async")
    e(".target sm_90a")
    e(".address_size 64")
    e()
    e(f".visible .entry {name}(")
    for p in PARAMS:
        e(f"  .param .u64 {p},")
    for s in SCALARS:
        e(f"  .param .u32 {s},")
    e("  .param .f32 eps")
    e(")")
    e(f".reqntid {32 * nw}")
    e(f".reqnctapercluster {RANKS}, 1, 1")
    e("{")
    e(".reg .pred %p, %pt, %pw, %pg, %pk0, %pr0, %pg1;")
    e(".reg .b32 %th, %warp, %lane, %r, %cl, %seq, %h, %kh, %col, %T, %np, %qseq, %qtok, %zseq, %ztok, %t<6>, %tt, %sb, %sq, %tb;")
    e(f".reg .b32 %cw<4>, %vwlo, %vwhi, %xr<{TG + 3}>;")
    e(f".reg .b16 %u<4>, %bb, %ab, %nwb, %zb<{TPW}>, %xv<{TPW}>, %wv<3>;")
    e(f".reg .f32 %s<32>, %f<16>, %ca<4>, %cb<4>, %cv<4>, %aq<4>, %ak<4>, %g<16>, %rr<{MAXT}>, %o<{TPW}>;")
    e(".reg .f32 %x, %y, %beta, %lg, %cc, %eps, %alog, %dtb, %ss;")
    e(".reg .b64 %a<15>, %pa, %pb, %slot;")
    e(f".shared .align 16 .f32 qk_s[{MAXT * TS}];  // token t: q | k of the key head (raw, then normed)")
    e(f".shared .align 16 .f32 red[{MAXT * 2 * 4 * CHUNK}];  // token t, kv0 | qs0, warp w: partials; w = 0: the sums")
    e(f".shared .align 16 .b16 vraw[{(MAXT + 3) * CHUNK}];  // the CTA's 32 v channels: old window (3 rows), then tokens")
    e(f".shared .align 16 .f32 v_s[{MAXT * CHUNK}];")
    e(f".shared .align 16 .f32 wsum[{MAXT * 4}];  // token t, warp w: sum of squares (warps 0, 1: q; 2, 3: k)")
    e(f".shared .align 16 .f32 gate_s[{MAXT * 2}];  // token t: beta, c (log2 of the decay product)")
    e(f".shared .align 16 .f32 at_s[{MAXT * MAXT}];  // [s][t] = -A[t][s]")
    e(f".shared .align 16 .f32 p_s[{MAXT * MAXT}];  // [t][s] = P[t][s]")
    e(f".shared .align 16 .f32 d_s[{MAXT * CHUNK}];  // [t][col]: delta")
    e(f".shared .align 16 .f32 norm_s[{MAXT * 4}];  // token t: the head's 4 ranks' sums of o^2")
    e(".shared .align 8 .b64 bar_norm;")
    for i, p in enumerate(PARAMS):
        e(f"ld.param.u64 %a{i}, [{p}];")
        e(f"cvta.to.global.u64 %a{i}, %a{i};")
    A = {p: f"%a{i}" for i, p in enumerate(PARAMS)}
    for reg, s in (("%qseq", "qkv_seq"), ("%qtok", "qkv_tok"), ("%zseq", "z_seq"), ("%ztok", "z_tok"), ("%T", "tokens"),
                   ("%np", "pool_slots")):
        e(f"ld.param.u32 {reg}, [{s}];")
    e("ld.param.f32 %eps, [eps];")
    e("mov.u32 %th, %tid.x;")
    e("shr.u32 %warp, %th, 5;")
    e("and.b32 %lane, %th, 31;")
    e("mov.u32 %r, %cluster_ctarank;")
    e("mov.u32 %cl, %clusterid.x;  // seq * 32 + h")
    e("shr.u32 %seq, %cl, 5;")
    e(f"and.b32 %h, %cl, {NV - 1};")
    e("shr.u32 %kh, %h, 1;")
    e(f"mad.lo.u32 %col, %r, {CHUNK}, %lane;  // this thread's state column in the head")
    e("setp.lt.u32 %pw, %th, 32;")
    e("setp.eq.u32 %pr0, %r, 0;")
    e("and.b32 %t0, %h, 1;")
    e("setp.eq.and.u32 %pk0, %t0, 0, %pr0;  // the CTA that writes the key head's ksave")
    e("setp.eq.u32 %p, %th, 0;")
    e("@!%p bra INIT_DONE;")
    e("mbarrier.init.shared::cta.b64 [bar_norm], 1;")
    e("shl.b32 %t0, %T, 4;")
    e("mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar_norm], %t0;  // 4 ranks x 4 B per token")
    e("fence.mbarrier_init.release.cluster;")
    e("INIT_DONE:")
    e("barrier.cluster.arrive.relaxed.aligned;")

    e("// 1. the slot id, then everything that needs no slot")
    e("mul.wide.u32 %pa, %seq, 8;")
    e(f"add.u64 %pa, {A['slot_in']}, %pa;")
    e("ld.global.nc.u64 %slot, [%pa];")
    e("setp.lt.u32 %pg, %th, %T;  // warp 0, lane t: token t's gates")
    e("mad.lo.u32 %t0, %seq, %T, %th;")
    e(f"mad.lo.u32 %t0, %t0, {NV}, %h;")
    e("mul.wide.u32 %pa, %t0, 2;")
    e(f"add.u64 %pb, {A['b_in']}, %pa;")
    e("@%pg ld.global.nc.b16 %bb, [%pb];")
    e(f"add.u64 %pb, {A['a_in']}, %pa;")
    e("@%pg ld.global.nc.b16 %ab, [%pb];")
    e("mul.wide.u32 %pa, %h, 4;")
    e(f"add.u64 %pb, {A['a_log']}, %pa;")
    e("ld.global.nc.f32 %alog, [%pb];")
    e(f"add.u64 %pb, {A['dt_bias']}, %pa;")
    e("ld.global.nc.f32 %dtb, [%pb];")
    e("// q (th < 64) or k (th >= 64) channels ch0, ch0 + 1 = 2048 j + 128 kh + 2 (th % 64): token inputs, weights")
    e("shr.u32 %t0, %th, 6;")
    e("and.b32 %t0, %t0, 1;  // j")
    e("and.b32 %t1, %th, 63;")
    e("shr.u32 %tb, %th, 7;")
    e("setp.eq.u32 %pg1, %tb, 1;  // the second token group (8 warps)")
    e(f"mul.lo.u32 %tb, %tb, {TG};  // its first token")
    e(f"mad.lo.u32 %sq, %kh, {DK // 2}, %t1;")
    e(f"mad.lo.u32 %sq, %t0, {NK * DK // 2}, %sq;")
    e("shl.b32 %sq, %sq, 1;  // ch0")
    e("mad.lo.u32 %t1, %seq, %qseq, %sq;")
    e("mad.lo.u32 %t1, %tb, %qtok, %t1;  // token tb")
    for t in range(TG):
        e(f"mov.b32 %xr{t + 3}, 0;")
        e(f"add.u32 %t2, %tb, {t};")
        e("setp.lt.u32 %p, %t2, %T;")
        e("mul.wide.u32 %pa, %t1, 2;")
        e(f"add.u64 %pa, {A['qkv']}, %pa;")
        e(f"@%p ld.global.nc.b32 %xr{t + 3}, [%pa];  // channels ch0 (low half), ch0 + 1")
        if t + 1 < TG:
            e("add.u32 %t1, %t1, %qtok;")
    if G > 1:
        e("// the second group's history: tokens tb - 3 .. tb - 1, rearranged as a window: (a, a), (a, b), (b, b)")
        e("setp.lt.and.u32 %p, %tb, %T, %pg1;")
        e("mad.lo.u32 %t1, %seq, %qseq, %sq;")
        e(f"mad.lo.u32 %t1, %qtok, {TG - 3}, %t1;")
        for i in range(3):
            e("mul.wide.u32 %pa, %t1, 2;")
            e(f"add.u64 %pa, {A['qkv']}, %pa;")
            e(f"@%p ld.global.nc.b32 %cw{i}, [%pa];")
            if i < 2:
                e("add.u32 %t1, %t1, %qtok;")
        e("@%p prmt.b32 %xr0, %cw0, %cw1, 0x5410;")
        e("@%p prmt.b32 %xr1, %cw2, %cw0, 0x7610;")
        e("@%p prmt.b32 %xr2, %cw1, %cw2, 0x7632;")
    e("mul.wide.u32 %pa, %sq, 8;")
    e(f"add.u64 %pa, {A['conv_w']}, %pa;")
    e("ld.global.nc.v4.b32 {%cw0, %cw1, %cw2, %cw3}, [%pa];  // conv_w[ch0, 0..3], conv_w[ch0 + 1, 0..3]")
    e(f"// v channel 4096 + h*128 + col (this lane's): tokens warp + {nw}m, weights")
    e(f"mad.lo.u32 %t2, %h, {DV}, %col;")
    e(f"add.u32 %t2, %t2, {2 * NK * DK};  // v channel")
    e("mad.lo.u32 %t1, %seq, %qseq, %t2;")
    e("mad.lo.u32 %t1, %warp, %qtok, %t1;")
    e(f"mul.lo.u32 %t3, %qtok, {nw};")
    for m in range(TPW):
        e(f"add.u32 %t0, %warp, {nw * m};")
        e("setp.lt.u32 %p, %t0, %T;")
        e("mul.wide.u32 %pa, %t1, 2;")
        e(f"add.u64 %pa, {A['qkv']}, %pa;")
        e(f"@%p ld.global.nc.b16 %xv{m}, [%pa];")
        if m < TPW - 1:
            e("add.u32 %t1, %t1, %t3;")
    e("mul.wide.u32 %pa, %t2, 8;")
    e(f"add.u64 %pa, {A['conv_w']}, %pa;")
    e("ld.global.nc.v2.b32 {%vwlo, %vwhi}, [%pa];")
    e(f"// z of tokens warp + {nw}m at this column, the norm weight")
    e("mul.wide.u32 %pa, %col, 2;")
    e(f"add.u64 %pa, {A['norm_w']}, %pa;")
    e("ld.global.nc.b16 %nwb, [%pa];")
    e(f"mad.lo.u32 %t0, %h, {DV}, %col;")
    e("mad.lo.u32 %t0, %seq, %zseq, %t0;")
    e("mad.lo.u32 %t0, %warp, %ztok, %t0;")
    e(f"mul.lo.u32 %t3, %ztok, {nw};")
    for m in range(TPW):
        e(f"add.u32 %t1, %warp, {nw * m};")
        e("setp.lt.u32 %p, %t1, %T;")
        e("mul.wide.u32 %pa, %t0, 2;")
        e(f"add.u64 %pa, {A['z']}, %pa;")
        e(f"@%p ld.global.nc.b16 %zb{m}, [%pa];")
        if m < TPW - 1:
            e("add.u32 %t0, %t0, %t3;")
    e("// the slot id outside the pool: nothing is read at it")
    e("cvt.u64.u32 %pa, %np;")
    e("setp.ge.u64 %p, %slot, %pa;")
    e("@%p bra BAD_SLOT;")
    e("// conv windows at the slot: q, k channels (every thread), v channels (warp 0)")
    e(f"mul.lo.u64 %pb, %slot, {CONV * (KW - 1) * 2};")
    e(f"add.u64 %pb, {A['conv_pool']}, %pb;")
    e("mul.wide.u32 %pa, %sq, 6;")
    e("add.u64 %pa, %pb, %pa;")
    for i in range(3):
        e(f"{'@!%pg1 ' if G > 1 else ''}ld.global.b32 %xr{i}, [%pa+{4 * i}];  // the two windows: (a0, a1), (a2, b0), (b1, b2)")
    e(f"mad.lo.u32 %t2, %h, {DV}, %col;")
    e(f"add.u32 %t2, %t2, {2 * NK * DK};")
    e("mul.wide.u32 %pa, %t2, 6;")
    e("add.u64 %pa, %pb, %pa;")
    for i in range(3):
        e(f"@%pw ld.global.b16 %wv{i}, [%pa+{2 * i}];")
    e(f"// the state slice: state_pool + ((slot * {NV} + h) * {DK} + 32 (warp % 4) + i) * {DV} + col")
    e(f"mul.lo.u64 %pa, %slot, {NV};")
    e("cvt.u64.u32 %pb, %h;")
    e("add.u64 %pa, %pa, %pb;")
    e(f"mul.lo.u64 %pa, %pa, {DK};")
    e("and.b32 %t0, %warp, 3;")
    e("shl.b32 %t0, %t0, 5;")
    e("cvt.u64.u32 %pb, %t0;")
    e("add.u64 %pa, %pa, %pb;")
    e(f"mul.lo.u64 %pa, %pa, {DV};")
    e("cvt.u64.u32 %pb, %col;")
    e("add.u64 %pa, %pa, %pb;")
    e("shl.b64 %pa, %pa, 2;")
    e(f"add.u64 %pa, {A['state_pool']}, %pa;")
    for i in range(32):
        e(f"ld.global.f32 %s{i}, [%pa+{i * DV * 4}];")
    e(f"// v inputs to shared memory: tokens warp + {nw}m (row 3 + t), the old window (warp 0, rows 0..2)")
    e("mov.u32 %t2, vraw;")
    e("shl.b32 %t3, %lane, 1;")
    e("add.u32 %t2, %t2, %t3;")
    for m in range(TPW):
        e(f"add.u32 %t0, %warp, {nw * m};")
        e("setp.lt.u32 %p, %t0, %T;")
        e(f"mad.lo.u32 %t1, %t0, {2 * CHUNK}, %t2;")
        e(f"@%p st.shared.b16 [%t1+{3 * 2 * CHUNK}], %xv{m};")
    for i in range(3):
        e(f"@%pw st.shared.b16 [%t2+{i * 2 * CHUNK}], %wv{i};")

    e("// 2. q, k conv of the T tokens (groups of 4): raw values to qk_s, sums of squares per warp to wsum")
    _unpack_w(e, "%cw0", "%cw1", ["%ca0", "%ca1", "%ca2", "%ca3"])
    _unpack_w(e, "%cw2", "%cw3", ["%cb0", "%cb1", "%cb2", "%cb3"])
    e("mov.u32 %sb, qk_s;")
    e("and.b32 %t0, %th, 127;")
    e("mad.lo.u32 %sb, %t0, 8, %sb;  // element 128 j + 2 (th % 64) of token 0's q | k ...")
    e(f"mad.lo.u32 %sb, %tb, {4 * TS}, %sb;  // ... of token tb")
    e("mov.u32 %t4, wsum;")
    e("and.b32 %t0, %warp, 3;")
    e("mad.lo.u32 %t4, %t0, 4, %t4;")
    e("mad.lo.u32 %t4, %tb, 16, %t4;  // token tb, this warp of the group")
    e("setp.eq.u32 %p, %lane, 0;")
    ha = [("%xr0", 0), ("%xr0", 1), ("%xr1", 0)] + [(f"%xr{t + 3}", 0) for t in range(TG)]
    hb = [("%xr1", 1), ("%xr2", 0), ("%xr2", 1)] + [(f"%xr{t + 3}", 1) for t in range(TG)]
    for g0 in range(0, TG, 4):
        e(f"add.u32 %t0, %tb, {g0};")
        e("setp.le.u32 %pt, %T, %t0;")
        e("@%pt bra QK_CONV_DONE;")
        for t in range(g0, g0 + 4):
            j = t - g0
            _conv(e, ["%ca0", "%ca1", "%ca2", "%ca3"], ha[t:t + 4], f"%g{2 * j}", div)
            _conv(e, ["%cb0", "%cb1", "%cb2", "%cb3"], hb[t:t + 4], f"%g{2 * j + 1}", div)
            e(f"st.shared.v2.f32 [%sb+{4 * TS * t}], {{%g{2 * j}, %g{2 * j + 1}}};")
        for j in range(4):
            e(f"mul.f32 %g{8 + j}, %g{2 * j}, %g{2 * j};")
            e(f"fma.rn.f32 %g{8 + j}, %g{2 * j + 1}, %g{2 * j + 1}, %g{8 + j};")
        for k in (16, 8, 4, 2, 1):
            for j in range(4):
                e(f"shfl.sync.bfly.b32 %g{j}, %g{8 + j}, {k}, 31, 0xffffffff;")
            for j in range(4):
                e(f"add.f32 %g{8 + j}, %g{8 + j}, %g{j};")
        for j in range(4):
            e(f"@%p st.shared.f32 [%t4+{16 * (g0 + j)}], %g{8 + j};")
    e("QK_CONV_DONE:")
    e("// gates (warp 0, lane t < T): beta_t, the log2 decay, its inclusive scan over the tokens")
    e("@!%pw bra GATES_DONE;")
    e("mov.f32 %beta, 0f00000000;")
    e("mov.f32 %lg, 0f00000000;")
    e("@!%pg bra GATE_SCAN;")
    d.gates_log2(e, "%bb", "%ab", "%beta", "%lg", notes=True)
    e("GATE_SCAN:")
    for k in (1, 2, 4, 8):
        e(f"shfl.sync.up.b32 %f0, %lg, {k}, 0, 0xffffffff;")
        e(f"setp.ge.u32 %p, %lane, {k};")
        e("@%p add.f32 %lg, %lg, %f0;")
    e("@!%pg bra GATES_DONE;")
    e("mov.u32 %t0, gate_s;")
    e("mad.lo.u32 %t0, %lane, 8, %t0;")
    e("st.shared.v2.f32 [%t0], {%beta, %lg};")
    e("@!%pr0 bra GATES_DONE;")
    e("mad.lo.u32 %t0, %seq, %T, %lane;")
    e(f"mad.lo.u32 %t0, %t0, {NV}, %h;")
    e("mul.wide.u32 %pa, %t0, 4;")
    e(f"add.u64 %pa, {A['gsave']}, %pa;")
    e("st.global.f32 [%pa], %lg;")
    e("GATES_DONE:")
    e("bar.sync 0;  // vraw, wsum, qk_s raw, gate_s")

    e(f"// v conv: thread (warp, lane) computes tokens warp + {nw}m of channel lane from vraw")
    _unpack_w(e, "%vwlo", "%vwhi", ["%cv0", "%cv1", "%cv2", "%cv3"])
    e("mov.u32 %t2, vraw;")
    e("shl.b32 %t3, %lane, 1;")
    e("add.u32 %t2, %t2, %t3;")
    e("mov.u32 %t5, v_s;")
    e("shl.b32 %t3, %lane, 2;")
    e("add.u32 %t5, %t5, %t3;")
    for m in range(TPW):
        e(f"add.u32 %t0, %warp, {nw * m};")
        e("setp.ge.u32 %pt, %t0, %T;")
        e("@%pt bra V_CONV_DONE;")
        e(f"mad.lo.u32 %t1, %t0, {2 * CHUNK}, %t2;")
        for i in range(4):
            e(f"ld.shared.b16 %u{i}, [%t1+{2 * CHUNK * i}];")
        _conv(e, ["%cv0", "%cv1", "%cv2", "%cv3"], ["%u0", "%u1", "%u2", "%u3"], "%x", div)
        e(f"mad.lo.u32 %t1, %t0, {4 * CHUNK}, %t5;")
        e("st.shared.f32 [%t1], %x;")
    e("V_CONV_DONE:")
    e("// q, k l2norm: warps 0 + 1 (q), 2 + 3 (k); q scaled by dk^-1/2; k also to ksave")
    e("mov.u32 %t4, wsum;")
    e("mad.lo.u32 %t4, %tb, 16, %t4;  // token tb")
    e("shr.u32 %t0, %th, 6;")
    e("and.b32 %t0, %t0, 1;")
    e("setp.eq.u32 %pg, %t0, 1;  // a k thread")
    e("and.pred %pk0, %pk0, %pg;")
    e("and.b32 %t0, %sq, 127;  // 2 (th % 64)")
    e("mad.lo.u32 %t1, %seq, %T, %tb;")
    e(f"mad.lo.u32 %t1, %t1, {NK}, %kh;")
    e(f"mad.lo.u32 %t1, %t1, {DK}, %t0;  // ksave[seq, tb, kh, 2 (th % 64)]")
    e(f"selp.f32 %y, {f32(1.0)}, {f32(DK ** -0.5)}, %pg;")
    for t in range(TG):
        e(f"add.u32 %t2, %tb, {t};")
        e("setp.le.u32 %pt, %T, %t2;")
        e("@%pt bra NORMED;")
        e(f"ld.shared.v4.f32 {{%f0, %f1, %f2, %f3}}, [%t4+{16 * t}];")
        e("add.f32 %x, %f0, %f1;")
        e("add.f32 %f2, %f2, %f3;")
        e("selp.f32 %x, %f2, %x, %pg;")
        e(f"ld.shared.v2.f32 {{%f8, %f9}}, [%sb+{4 * TS * t}];")
        e(f"add.f32 %x, %x, {f32(1e-6)};")
        e("rsqrt.approx.ftz.f32 %x, %x;")
        e("mul.f32 %f8, %f8, %x;")
        e("mul.f32 %f9, %f9, %x;")
        e("mul.f32 %f8, %f8, %y;")
        e("mul.f32 %f9, %f9, %y;")
        e(f"st.shared.v2.f32 [%sb+{4 * TS * t}], {{%f8, %f9}};")
        e("mul.wide.u32 %pa, %t1, 4;")
        e(f"add.u64 %pa, {A['ksave']}, %pa;")
        e("@%pk0 st.global.v2.f32 [%pa], {%f8, %f9};")
        e(f"add.u32 %t1, %t1, {NK * DK};")
    e("NORMED:")
    e("bar.sync 0;  // normed q, k; v_s")

    e("// 3. kv0_t = S_0^T k_t, qs0_t = S_0^T q_t over the warp's 32 rows (4 chains of 8), partials to red")
    e("// (8 warps: warps 0-3 the k products, 4-7 the q products, of rows 32 (warp % 4) ..)")
    e("mov.u32 %t4, qk_s;")
    e("and.b32 %t0, %warp, 3;")
    e("shl.b32 %t0, %t0, 7;")
    e("add.u32 %t4, %t4, %t0;  // token 0's q of the warp's rows")
    if nw == 8:
        e("setp.lt.u32 %p, %warp, 4;")
        e(f"@%p add.u32 %t4, %t4, {4 * DK};  // k")
    e("mov.u32 %t5, red;")
    e(f"mad.lo.u32 %t0, %warp, {4 * CHUNK}, %t5;")
    e("shl.b32 %t1, %lane, 2;")
    e("add.u32 %t5, %t0, %t1;  // red[0][0][warp][lane] (8 warps: red[0][warp / 4][warp % 4][lane])")
    e("mov.u32 %tt, 0;")
    e("KQ_LOOP:")
    for blk in range(8):
        if nw == 4:
            e(f"ld.shared.v4.f32 {{%f0, %f1, %f2, %f3}}, [%t4+{4 * (DK + 4 * blk)}];  // k rows {4 * blk}..")
            e(f"ld.shared.v4.f32 {{%f4, %f5, %f6, %f7}}, [%t4+{16 * blk}];  // q rows")
        else:
            e(f"ld.shared.v4.f32 {{%f0, %f1, %f2, %f3}}, [%t4+{16 * blk}];  // k or q rows {4 * blk}..")
        for i in range(4):
            row = 4 * blk + i
            c = row // 8
            op = "mul.f32 {0}, %s{1}, %f{2};" if row % 8 == 0 else "fma.rn.f32 {0}, %s{1}, %f{2}, {0};"
            e(op.format(f"%ak{c}", row, i))
            if nw == 4:
                e(op.format(f"%aq{c}", row, 4 + i))
    e("add.f32 %ak0, %ak0, %ak1;")
    e("add.f32 %ak2, %ak2, %ak3;")
    e("add.f32 %ak0, %ak0, %ak2;")
    e("st.shared.f32 [%t5], %ak0;")
    if nw == 4:
        e("add.f32 %aq0, %aq0, %aq1;")
        e("add.f32 %aq2, %aq2, %aq3;")
        e("add.f32 %aq0, %aq0, %aq2;")
        e(f"st.shared.f32 [%t5+{4 * 4 * CHUNK}], %aq0;")
    e(f"add.u32 %t4, %t4, {4 * TS};")
    e(f"add.u32 %t5, %t5, {4 * 2 * 4 * CHUNK};")
    e("add.u32 %tt, %tt, 1;")
    e("setp.lt.u32 %p, %tt, %T;")
    e("@%p bra KQ_LOOP;")
    e("bar.sync 0;")
    e(f"// the 4 warps' partials in warp order: thread (warp, lane) sums pairs p = 2t + j = warp + {nw}m")
    e("mov.u32 %t5, red;")
    e("shl.b32 %t1, %lane, 2;")
    e("add.u32 %t5, %t5, %t1;")
    e(f"mad.lo.u32 %t5, %warp, {4 * 4 * CHUNK}, %t5;")
    e("shl.b32 %t2, %T, 1;")
    for m in range(2 * MAXT // nw):
        e(f"add.u32 %t0, %warp, {nw * m};")
        e("setp.ge.u32 %pt, %t0, %t2;")
        e("@%pt bra KQ_SUMMED;")
        o = nw * 4 * 4 * CHUNK * m
        for w in range(4):
            e(f"ld.shared.f32 %f{w}, [%t5+{o + 4 * CHUNK * w}];")
        e("add.f32 %x, %f0, %f1;")
        e("add.f32 %x, %x, %f2;")
        e("add.f32 %x, %x, %f3;")
        e(f"st.shared.f32 [%t5+{o}], %x;")
    e("KQ_SUMMED:")

    e(f"// 4. Gram products of warp w's tokens t = w + {nw}m: lane l < 16: k_t.k_l -> at_s[l][t] = -beta_t 2^(c_t - c_l) k_t.k_l")
    e("// (l < t); lane l >= 16: q_t.k_(l-16) -> p_s[t][l-16] = 2^(c_t - c_s) q_t.k_s (s <= t)")
    e("and.b32 %t3, %lane, 15;  // s")
    e("mov.u32 %t4, qk_s;")
    e(f"mad.lo.u32 %t4, %t3, {4 * TS}, %t4;")
    e(f"add.u32 %t4, %t4, {4 * DK};  // k_s")
    e("setp.lt.u32 %pg, %lane, 16;  // the k.k lanes")
    e("mov.u32 %t2, gate_s;")
    e("mad.lo.u32 %t5, %t3, 8, %t2;")
    e("ld.shared.f32 %cc, [%t5+4];  // c_s")
    for m in range(TPW):
        e(f"add.u32 %t0, %warp, {nw * m};  // t")
        e("setp.ge.u32 %pt, %t0, %T;")
        e("@%pt bra GRAM_DONE;")
        e("mov.u32 %t1, qk_s;")
        e(f"mad.lo.u32 %t1, %t0, {4 * TS}, %t1;")
        e(f"@%pg add.u32 %t1, %t1, {4 * DK};  // k_t, else q_t")
        for blk in range(32):
            e(f"ld.shared.v4.f32 {{%f0, %f1, %f2, %f3}}, [%t1+{16 * blk}];")
            e(f"ld.shared.v4.f32 {{%f4, %f5, %f6, %f7}}, [%t4+{16 * blk}];")
            c = blk // 8
            for i in range(4):
                if blk % 8 == 0 and i == 0:
                    e(f"mul.f32 %ak{c}, %f0, %f4;")
                else:
                    e(f"fma.rn.f32 %ak{c}, %f{i}, %f{4 + i}, %ak{c};")
        e("add.f32 %ak0, %ak0, %ak1;")
        e("add.f32 %ak2, %ak2, %ak3;")
        e("add.f32 %ak0, %ak0, %ak2;")
        e("mad.lo.u32 %t5, %t0, 8, %t2;")
        e("ld.shared.v2.f32 {%beta, %f8}, [%t5];  // beta_t, c_t")
        e("sub.f32 %f8, %f8, %cc;")
        e("ex2.approx.ftz.f32 %f8, %f8;  // 2^(c_t - c_s)")
        e("mul.f32 %ak0, %ak0, %f8;")
        e(f"@!%pg bra GRAM_P_{m};")
        e("neg.f32 %f9, %beta;")
        e("mul.f32 %ak0, %ak0, %f9;")
        e("setp.lt.u32 %p, %t3, %t0;")
        e("mov.u32 %t5, at_s;")
        e(f"mad.lo.u32 %t5, %t3, {4 * MAXT}, %t5;")
        e("mad.lo.u32 %t5, %t0, 4, %t5;")
        e("@%p st.shared.f32 [%t5], %ak0;")
        e(f"bra.uni GRAM_NEXT_{m};")
        e(f"GRAM_P_{m}:")
        e("setp.le.u32 %p, %t3, %t0;")
        e("mov.u32 %t5, p_s;")
        e(f"mad.lo.u32 %t5, %t0, {4 * MAXT}, %t5;")
        e("mad.lo.u32 %t5, %t3, 4, %t5;")
        e("@%p st.shared.f32 [%t5], %ak0;")
        e(f"GRAM_NEXT_{m}:")
    e("GRAM_DONE:")
    e("bar.sync 0;")

    e("// 5. forward substitution (warp 0, lane = column): r_t = beta_t (v_t - e_t kv0_t); delta_s = r_s; r_t += -A[t][s] delta_s")
    e("@!%pw bra SOLVED;")
    e("mov.u32 %t1, v_s;")
    e("shl.b32 %t0, %lane, 2;")
    e("add.u32 %t1, %t1, %t0;")
    e("mov.u32 %t2, red;")
    e("add.u32 %t2, %t2, %t0;")
    e("mov.u32 %t3, gate_s;")
    for t in range(MAXT):
        e(f"setp.le.u32 %pt, %T, {t};")
        e("@%pt bra RHS_DONE;")
        e(f"ld.shared.v2.f32 {{%beta, %cc}}, [%t3+{8 * t}];")
        e(f"ld.shared.f32 %x, [%t1+{4 * CHUNK * t}];  // v_t")
        e(f"ld.shared.f32 %y, [%t2+{4 * 2 * 4 * CHUNK * t}];  // kv0_t")
        e("ex2.approx.ftz.f32 %cc, %cc;  // e_t")
        e("neg.f32 %cc, %cc;")
        e("fma.rn.f32 %x, %cc, %y, %x;")
        e(f"mul.f32 %rr{t}, %x, %beta;")
    e("RHS_DONE:")
    e("mov.u32 %t4, at_s;")
    e("mov.u32 %t5, d_s;")
    e("add.u32 %t5, %t5, %t0;")
    e("mad.lo.u32 %t2, %seq, %T, 0;")
    e(f"mad.lo.u32 %t2, %t2, {NV}, %h;")
    e(f"mad.lo.u32 %t2, %t2, {DV}, %col;  // dsave[seq, 0, h, col]")
    for s in range(MAXT):
        e(f"setp.le.u32 %pt, %T, {s};")
        e("@%pt bra SOLVE_DONE;")
        e(f"st.shared.f32 [%t5+{4 * CHUNK * s}], %rr{s};")
        e("mul.wide.u32 %pa, %t2, 4;")
        e(f"add.u64 %pa, {A['dsave']}, %pa;")
        e(f"st.global.f32 [%pa], %rr{s};")
        e(f"add.u32 %t2, %t2, {NV * DV};")
        rest = list(range(s + 1, MAXT))
        for b0 in range(0, MAXT, 4):  # the row of -A entries for t > s, 4 at a time
            ts = [t for t in range(b0, b0 + 4) if t in rest]
            if not ts:
                continue
            e(f"ld.shared.v4.f32 {{%f0, %f1, %f2, %f3}}, [%t4+{4 * (MAXT * s + b0)}];")
            for t in ts:
                e(f"fma.rn.f32 %rr{t}, %f{t - b0}, %rr{s}, %rr{t};")
    e("SOLVE_DONE:")
    e("SOLVED:")
    e("bar.sync 0;  // d_s")
    e("barrier.cluster.wait.aligned;  // every rank has started: st.async may target it")

    e(f"// 6. o_t = e_t qs0_t + sum_(s<=t) P[t][s] delta_s (warp w: t = w + {nw}m); sums of o^2 to the head's 4 ranks")
    e("mov.u32 %t1, d_s;")
    e("shl.b32 %t0, %lane, 2;")
    e("add.u32 %t1, %t1, %t0;")
    e("mov.u32 %t2, red;")
    e(f"add.u32 %t2, %t2, {4 * 4 * CHUNK};  // qs0 of token 0 (warp slot 0)")
    e("add.u32 %t2, %t2, %t0;")
    for m in range(TPW):
        e(f"add.u32 %tt, %warp, {nw * m};  // t")
        e("setp.ge.u32 %pt, %tt, %T;")
        e("@%pt bra O_DONE;")
        e("mov.u32 %t3, gate_s;")
        e("mad.lo.u32 %t3, %tt, 8, %t3;")
        e("ld.shared.f32 %cc, [%t3+4];")
        e("ex2.approx.ftz.f32 %cc, %cc;")
        e(f"mad.lo.u32 %t3, %tt, {4 * 2 * 4 * CHUNK}, %t2;")
        e("ld.shared.f32 %x, [%t3];")
        e(f"mul.f32 %o{m}, %cc, %x;")
        e("mov.u32 %t3, p_s;")
        e(f"mad.lo.u32 %t3, %tt, {4 * MAXT}, %t3;")
        for s in range(MAXT):
            if s >= nw * m:  # s <= t needs s <= w + nw m: a branch only where some warp stops
                e(f"setp.lt.u32 %p, %tt, {s};")
                e(f"@%p bra O_SUM_{m};")
            e(f"ld.shared.f32 %f0, [%t3+{4 * s}];")
            e(f"ld.shared.f32 %f1, [%t1+{4 * CHUNK * s}];")
            e(f"fma.rn.f32 %o{m}, %f0, %f1, %o{m};")
        e(f"O_SUM_{m}:")
        e(f"mul.f32 %f10, %o{m}, %o{m};")
        for k in (16, 8, 4, 2, 1):
            e(f"shfl.sync.bfly.b32 %f11, %f10, {k}, 31, 0xffffffff;")
            e("add.f32 %f10, %f10, %f11;")
        e("setp.lt.u32 %p, %lane, 4;")
        e(f"@!%p bra PUSHED_{m};")
        e("mov.u32 %t3, norm_s;")
        e("mad.lo.u32 %t3, %tt, 16, %t3;")
        e("mad.lo.u32 %t3, %r, 4, %t3;  // token t, slot r of rank lane")
        e("mapa.shared::cluster.u32 %t4, %t3, %lane;")
        e("mov.u32 %t3, bar_norm;")
        e("mapa.shared::cluster.u32 %t5, %t3, %lane;")
        e("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%t4], %f10, [%t5];")
        e(f"PUSHED_{m}:")
    e("O_DONE:")
    e("setp.ge.u32 %p, %warp, %T;")
    e("@%p bra OUT_DONE;  // a warp with no token (T < 4) has nothing to write")
    d._wait(e, "bar_norm", "WAIT_NORM")
    e("cvt.f32.bf16 %f12, %nwb;")
    e(f"mad.lo.u32 %t0, %h, {DV}, %col;")
    for m in range(TPW):
        e(f"add.u32 %tt, %warp, {nw * m};")
        e("setp.ge.u32 %pt, %tt, %T;")
        e("@%pt bra OUT_DONE;")
        e("mov.u32 %t3, norm_s;")
        e("mad.lo.u32 %t3, %tt, 16, %t3;")
        e("ld.shared.v4.f32 {%f0, %f1, %f2, %f3}, [%t3];")
        e("add.f32 %ss, %f0, %f1;")
        e("add.f32 %ss, %ss, %f2;")
        e("add.f32 %ss, %ss, %f3;")
        e(f"fma.rn.f32 %ss, %ss, {f32(1.0 / DV)}, %eps;")
        e("rsqrt.approx.ftz.f32 %ss, %ss;")
        e(f"mul.f32 %x, %o{m}, %ss;")
        e("mul.f32 %x, %x, %f12;")
        e(f"cvt.f32.bf16 %f5, %zb{m};")
        e(f"mul.f32 %f6, %f5, {f32(-LOG2E)};")
        e("ex2.approx.ftz.f32 %f6, %f6;")
        e(f"add.f32 %f6, %f6, {f32(1.0)};")
        e("div.rn.f32 %f5, %f5, %f6;  // silu(z)")
        e("mul.f32 %x, %x, %f5;")
        e("cvt.rn.bf16.f32 %u0, %x;")
        e("mad.lo.u32 %t1, %seq, %T, %tt;")
        e(f"mad.lo.u32 %t1, %t1, {NV * DV}, %t0;")
        e("mul.wide.u32 %pa, %t1, 2;")
        e(f"add.u64 %pa, {A['out']}, %pa;")
        e("st.global.b16 [%pa], %u0;")
    e("OUT_DONE:")
    e("ret;")
    e("BAD_SLOT:  // a slot id outside the pool: this head's outputs are NaN, no restore data")
    e("barrier.cluster.wait.aligned;")
    e(f"mad.lo.u32 %t0, %h, {DV}, %col;")
    e("mov.b16 %u0, 0x7FC0;")
    for m in range(TPW):
        e(f"add.u32 %tt, %warp, {nw * m};")
        e("setp.ge.u32 %pt, %tt, %T;")
        e("@%pt bra BAD_DONE;")
        e("mad.lo.u32 %t1, %seq, %T, %tt;")
        e(f"mad.lo.u32 %t1, %t1, {NV * DV}, %t0;")
        e("mul.wide.u32 %pa, %t1, 2;")
        e(f"add.u64 %pa, {A['out']}, %pa;")
        e("st.global.b16 [%pa], %u0;")
    e("BAD_DONE:")
    e("ret;")
    e("}")
    return e.text()


def main() -> int:
    for name, kw in BUILDS.items():
        (HERE / f"{name}.ptx").write_text(generate(**kw))
        print(f"wrote {name}.ptx: grid {RANKS} x {NV} x B CTAs of {32 * kw['nw']} threads, clusters of {RANKS}, T <= {MAXT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
