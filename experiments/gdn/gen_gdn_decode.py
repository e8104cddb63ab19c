"""Candidate for issue 5 (NOT MEASURED YET; `gdn_variant.py` checks and times it): one
launch for the whole Gated DeltaNet decode step of B sequences, from the projection outputs
to the gated-norm output, on slot-indexed state pools (the signature of netra::gdn_decode).

Work split: a cluster of 8 CTAs per (sequence, key head kh): ranks 0-3 take value head 2 kh,
ranks 4-7 value head 2 kh + 1, each rank a chunk of 32 of the head's 128 state columns (the
delta rule is independent per column dv; only q.k-style sums over dk mix rows). Grid
8 x 16 x B CTAs of 128 threads (4 warps; warp w holds rows 32 w .. 32 w + 31 of the chunk,
lane = column), so B = 1 spreads over 128 SMs.

Per CTA:
1. its 32 x 128 fp32 state slice is loaded first (32 coalesced loads per thread);
2. causal conv update with SiLU for the 128 q and 128 k channels of kh (every CTA of the
   cluster, redundantly) and the CTA's 32 v channels; the model's BF16 rounding after the
   SiLU; new conv state written by the v owner, and for q/k by rank 0 after a cluster barrier
   (so no CTA reads a window another has already advanced);
3. q, k L2-normalized over dk (CTA reductions in warp order), q scaled by dk^-1/2;
   beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias);
4. S *= exp(g); kv = S^T k; S += k (beta (v - kv))^T; o = S^T q: per-warp partial sums over
   the warp's rows, added in warp order through shared memory; S written back;
5. gated RMSNorm over the head's 128 columns: each CTA's sum of o^2 summed over its value
   head's 4 ranks in rank order through distributed shared memory; y = w o rsqrt(mean + eps)
   silu(z), BF16 out; a last cluster barrier keeps shared memory alive until all have read.
Deterministic: every sum has a fixed order.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))
from netra import paths  # noqa: E402

_gen = paths.generator("proj", "gen_fp8_gemv")
Emit = _gen.Emit

NAME = "gdn_decode_b32"
NK, NV, DK, DV, KW = 16, 32, 128, 128, 4  # key heads, value heads, head dims, conv width
CONV = 2 * NK * DK + NV * DV  # 8192 conv channels: q | k | v
THREADS, CLUSTER, CHUNK = 128, 8, 32
LOG2E = 1.4426950408889634


def f32(x: float) -> str:
    import struct

    return "0f%08X" % struct.unpack("<I", struct.pack("<f", x))[0]


def generate() -> str:
    e = Emit()
    e(f"// {NAME}: Gated DeltaNet decode step for B <= 32 sequences (experiments/gdn/gen_gdn_decode.py: design).")
    _gen.header(e)
    e()
    e(f".visible .entry {NAME}(")
    params = ["qkv", "z", "b_in", "a_in", "conv_w", "a_log", "dt_bias", "norm_w", "conv_pool", "state_pool", "slots", "out"]
    for p in params:
        e(f"  .param .u64 {p},")
    e("  .param .u32 qkv_row,")
    e("  .param .u32 z_row,")
    e("  .param .f32 eps")
    e(")")
    e(f".reqntid {THREADS}")
    e(f".reqnctapercluster {CLUSTER}, 1, 1")
    e("{")
    e("  .reg .pred %p, %p0, %pw;")
    e("  .reg .b32 %th, %warp, %lane, %rank, %cl, %seq, %kh, %h, %r, %col, %t0, %t1, %t2, %qrow, %zrow;")
    e("  .reg .b16 %u<4>;")
    e(f"  .reg .f32 %s<{CHUNK}>, %f<12>, %q, %k, %v, %kn, %qn, %beta, %dec, %kv, %dl, %o, %ss, %eps;")
    e("  .reg .b64 %pq, %pz, %pb, %pa, %pcw, %pal, %pdt, %pnw, %pcp, %psp, %psl, %po, %pt, %pst, %slot;")
    e("  .reg .b32 %sq, %sk, %sv, %sred, %snorm, %sr;")
    e(f"  .shared .align 16 .f32 q_s[{DK}];")
    e(f"  .shared .align 16 .f32 k_s[{DK}];")
    e(f"  .shared .align 16 .f32 v_s[{CHUNK}];")
    e(f"  .shared .align 16 .f32 red[{4 * CHUNK}];")
    e("  .shared .align 16 .f32 wsum[8];")
    e("  .shared .align 16 .f32 norm_part[1];")
    regs = dict(qkv="%pq", z="%pz", b_in="%pb", a_in="%pa", conv_w="%pcw", a_log="%pal", dt_bias="%pdt", norm_w="%pnw",
                conv_pool="%pcp", state_pool="%psp", slots="%psl", out="%po")
    for p, r in regs.items():
        e(f"  ld.param.u64 {r}, [{p}];")
        e(f"  cvta.to.global.u64 {r}, {r};")
    e("  ld.param.u32 %qrow, [qkv_row];")
    e("  ld.param.u32 %zrow, [z_row];")
    e("  ld.param.f32 %eps, [eps];")
    e("  mov.u32 %th, %tid.x;")
    e("  shr.u32 %warp, %th, 5;")
    e("  and.b32 %lane, %th, 31;")
    e("  mov.u32 %rank, %cluster_ctarank;")
    e("  mov.u32 %cl, %clusterid.x;  // seq * 16 + kh")
    e(f"  shr.u32 %seq, %cl, 4;")
    e(f"  and.b32 %kh, %cl, 15;")
    e("  shr.u32 %t0, %rank, 2;")
    e("  mad.lo.u32 %h, %kh, 2, %t0;  // value head")
    e("  and.b32 %r, %rank, 3;  // column chunk")
    e(f"  mad.lo.u32 %col, %r, {CHUNK}, %lane;  // this thread's state column")
    e("  mov.u32 %sq, q_s;")
    e("  mov.u32 %sk, k_s;")
    e("  mov.u32 %sv, v_s;")
    e("  mov.u32 %sred, red;")
    e("  mov.u32 %snorm, norm_part;")
    e("  mul.wide.u32 %pt, %seq, 8;")
    e("  add.u64 %pt, %psl, %pt;")
    e("  ld.global.nc.u64 %slot, [%pt];")
    e(f"  // 1. the state slice: rows 32 warp + i, column col: state_pool + ((slot * {NV} + h) * {DK} + row) * {DV} + col")
    e(f"  mul.lo.u64 %pst, %slot, {NV};")
    e("  cvt.u64.u32 %pt, %h;")
    e("  add.u64 %pst, %pst, %pt;")
    e(f"  mul.lo.u64 %pst, %pst, {DK};")
    e("  shl.b32 %t0, %warp, 5;")
    e("  cvt.u64.u32 %pt, %t0;")
    e("  add.u64 %pst, %pst, %pt;")
    e(f"  mul.lo.u64 %pst, %pst, {DV};")
    e("  cvt.u64.u32 %pt, %col;")
    e("  add.u64 %pst, %pst, %pt;")
    e("  shl.b64 %pst, %pst, 2;")
    e("  add.u64 %pst, %psp, %pst;")
    for i in range(CHUNK):
        e(f"  ld.global.f32 %s{i}, [%pst+{i * DV * 4}];")

    def conv_channel(ch_reg: str, out_reg: str, write_pred: str | None):
        """out = bf16-rounded silu(conv of channel ch); writes the new window when write_pred."""
        e(f"  // conv channel {ch_reg}")
        e(f"  mul.lo.u64 %pt, %slot, {CONV};")
        e(f"  cvt.u64.u32 %pa, {ch_reg};")
        e("  add.u64 %pt, %pt, %pa;")
        e("  mul.lo.u64 %pt, %pt, 6;")
        e("  add.u64 %pt, %pcp, %pt;  // conv_pool[slot, ch, 0..2]")
        e("  ld.global.b16 %u0, [%pt];")
        e("  ld.global.b16 %u1, [%pt+2];")
        e("  ld.global.b16 %u2, [%pt+4];")
        e(f"  mul.lo.u32 %t1, %seq, %qrow;")
        e(f"  add.u32 %t1, %t1, {ch_reg};")
        e("  mul.wide.u32 %pb, %t1, 2;")
        e("  add.u64 %pb, %pq, %pb;")
        e("  ld.global.nc.b16 %u3, [%pb];")
        e(f"  mul.wide.u32 %pb, {ch_reg}, 8;")
        e("  add.u64 %pb, %pcw, %pb;")
        e("  ld.global.nc.v2.b32 {%t1, %t2}, [%pb];  // conv_w[ch, 0..3]")
        for idx, (wsrc, hi) in enumerate((("%t1", False), ("%t1", True), ("%t2", False), ("%t2", True))):
            if hi:
                e(f"  and.b32 %t0, {wsrc}, 0xffff0000;")
            else:
                e(f"  shl.b32 %t0, {wsrc}, 16;")
            e(f"  mov.b32 %f{idx}, %t0;")
        for idx in range(4):
            e(f"  cvt.f32.bf16 %f{4 + idx}, %u{idx};")
        e("  mul.f32 %f8, %f0, %f4;")
        e("  fma.rn.f32 %f8, %f1, %f5, %f8;")
        e("  fma.rn.f32 %f8, %f2, %f6, %f8;")
        e("  fma.rn.f32 %f8, %f3, %f7, %f8;")
        e(f"  mul.f32 %f9, %f8, {f32(-LOG2E)};")
        e("  ex2.approx.ftz.f32 %f9, %f9;")
        e(f"  add.f32 %f9, %f9, {f32(1.0)};")
        e("  div.rn.f32 %f8, %f8, %f9;  // silu")
        e("  cvt.rn.bf16.f32 %u0, %f8;  // the model rounds the conv output to BF16")
        e(f"  cvt.f32.bf16 {out_reg}, %u0;")
        if write_pred:
            e(f"  @{write_pred} st.global.b16 [%pt], %u1;")
            e(f"  @{write_pred} st.global.b16 [%pt+2], %u2;")
            e(f"  @{write_pred} st.global.b16 [%pt+4], %u3;")

    e("  // 2. conv: q channel kh * 128 + tid, k channel 2048 + kh * 128 + tid (every rank); v channel of this chunk")
    e(f"  mad.lo.u32 %t2, %kh, {DK}, %th;")
    e("  mov.u32 %t0, %t2;")
    conv_channel("%t0", "%q", None)
    e(f"  mad.lo.u32 %t2, %kh, {DK}, %th;")
    e(f"  add.u32 %t0, %t2, {NK * DK};")
    conv_channel("%t0", "%k", None)
    e(f"  setp.lt.u32 %pw, %th, {CHUNK};")
    e("  @!%pw bra V_DONE;")
    e(f"  mad.lo.u32 %t0, %h, {DV}, %col;")
    e(f"  add.u32 %t0, %t0, {2 * NK * DK};")
    conv_channel("%t0", "%v", "%pw")
    e("  shl.b32 %t0, %th, 2;")
    e("  add.u32 %t0, %sv, %t0;")
    e("  st.shared.f32 [%t0], %v;")
    e("V_DONE:")
    e("  barrier.cluster.arrive.release.aligned;  // every rank has read the q/k conv windows")
    e("  barrier.cluster.wait.acquire.aligned;")
    e("  setp.eq.u32 %p0, %rank, 0;")
    e("  @!%p0 bra QK_STATE_DONE;")
    for which, base in (("q", 0), ("k", NK * DK)):
        e(f"  mad.lo.u32 %t0, %kh, {DK}, %th;")
        if base:
            e(f"  add.u32 %t0, %t0, {base};")
        e(f"  mul.lo.u64 %pt, %slot, {CONV};")
        e("  cvt.u64.u32 %pa, %t0;")
        e("  add.u64 %pt, %pt, %pa;")
        e("  mul.lo.u64 %pt, %pt, 6;")
        e("  add.u64 %pt, %pcp, %pt;")
        e("  ld.global.b16 %u1, [%pt+2];")
        e("  ld.global.b16 %u2, [%pt+4];")
        e("  mul.lo.u32 %t1, %seq, %qrow;")
        e("  add.u32 %t1, %t1, %t0;")
        e("  mul.wide.u32 %pb, %t1, 2;")
        e("  add.u64 %pb, %pq, %pb;")
        e("  ld.global.nc.b16 %u3, [%pb];")
        e("  st.global.b16 [%pt], %u1;")
        e("  st.global.b16 [%pt+2], %u2;")
        e("  st.global.b16 [%pt+4], %u3;")
    e("QK_STATE_DONE:")

    def block_sum(src: str, dst: str, tag: str):
        """dst = sum over the CTA's 128 threads of src: shfl.bfly in the warp, then the 4 warp sums in order."""
        e(f"  mov.f32 %f10, {src};")
        for k in (16, 8, 4, 2, 1):
            e(f"  shfl.sync.bfly.b32 %f11, %f10, {k}, 31, 0xffffffff;")
            e("  add.f32 %f10, %f10, %f11;")
        e("  mov.u32 %t0, wsum;")
        e(f"  mad.lo.u32 %t1, %warp, 4, %t0;")
        e("  setp.eq.u32 %p, %lane, 0;")
        e("  @%p st.shared.f32 [%t1], %f10;")
        e("  bar.sync 0;")
        e("  ld.shared.v4.f32 {%f0, %f1, %f2, %f3}, [%t0];")
        e(f"  add.f32 {dst}, %f0, %f1;")
        e(f"  add.f32 {dst}, {dst}, %f2;")
        e(f"  add.f32 {dst}, {dst}, %f3;")
        e("  bar.sync 0;")

    e("  // 3. l2norm of q and k over dk (fp32), q scaled by dk^-1/2")
    e("  mul.f32 %f9, %q, %q;")
    block_sum("%f9", "%qn", "q")
    e("  mul.f32 %f9, %k, %k;")
    block_sum("%f9", "%kn", "k")
    e(f"  add.f32 %qn, %qn, {f32(1e-6)};")
    e("  rsqrt.approx.ftz.f32 %qn, %qn;")
    e("  mul.f32 %q, %q, %qn;")
    e(f"  mul.f32 %q, %q, {f32(DK ** -0.5)};")
    e(f"  add.f32 %kn, %kn, {f32(1e-6)};")
    e("  rsqrt.approx.ftz.f32 %kn, %kn;")
    e("  mul.f32 %k, %k, %kn;")
    e("  shl.b32 %t0, %th, 2;")
    e("  add.u32 %t1, %sq, %t0;")
    e("  st.shared.f32 [%t1], %q;")
    e("  add.u32 %t1, %sk, %t0;")
    e("  st.shared.f32 [%t1], %k;")
    e("  // beta = sigmoid(b[seq, h]); decay = exp(-exp(A_log[h]) softplus(a[seq, h] + dt_bias[h]))")
    e(f"  mad.lo.u32 %t0, %seq, {NV}, %h;")
    e("  mul.wide.u32 %pt, %t0, 2;")
    e("  mul.wide.u32 %pt, %t0, 2;")
    e("  ld.param.u64 %pb, [b_in];")
    e("  cvta.to.global.u64 %pb, %pb;")
    e("  add.u64 %pb, %pb, %pt;")
    e("  ld.global.nc.b16 %u0, [%pb];")
    e("  ld.param.u64 %pa, [a_in];")
    e("  cvta.to.global.u64 %pa, %pa;")
    e("  add.u64 %pa, %pa, %pt;")
    e("  ld.global.nc.b16 %u1, [%pa];")
    e("  cvt.f32.bf16 %f0, %u0;")
    e("  cvt.f32.bf16 %f1, %u1;")
    e(f"  mul.f32 %f2, %f0, {f32(-LOG2E)};")
    e("  ex2.approx.ftz.f32 %f2, %f2;")
    e(f"  add.f32 %f2, %f2, {f32(1.0)};")
    e("  rcp.rn.f32 %beta, %f2;")
    e("  mul.wide.u32 %pt, %h, 4;")
    e("  add.u64 %pa, %pal, %pt;")
    e("  ld.global.nc.f32 %f3, [%pa];  // A_log")
    e("  add.u64 %pa, %pdt, %pt;")
    e("  ld.global.nc.f32 %f4, [%pa];  // dt_bias")
    e("  add.f32 %f1, %f1, %f4;")
    e(f"  setp.gt.f32 %p, %f1, {f32(20.0)};  // torch softplus threshold")
    e(f"  mul.f32 %f5, %f1, {f32(LOG2E)};")
    e("  ex2.approx.ftz.f32 %f5, %f5;")
    e(f"  add.f32 %f5, %f5, {f32(1.0)};")
    e("  lg2.approx.ftz.f32 %f5, %f5;")
    e(f"  mul.f32 %f5, %f5, {f32(1 / LOG2E)};")
    e("  selp.f32 %f5, %f1, %f5, %p;  // softplus")
    e(f"  mul.f32 %f3, %f3, {f32(LOG2E)};")
    e("  ex2.approx.ftz.f32 %f3, %f3;  // exp(A_log)")
    e("  mul.f32 %f5, %f5, %f3;")
    e(f"  mul.f32 %f5, %f5, {f32(-LOG2E)};")
    e("  ex2.approx.ftz.f32 %dec, %f5;  // exp(g)")
    e("  bar.sync 0;")
    e("  // 4. S *= decay; kv = S^T k over the warp's rows; partials in warp order")
    e("  mov.f32 %kv, 0f00000000;")
    e("  shl.b32 %t0, %warp, 7;  // 32 rows x 4 B")
    e("  add.u32 %sr, %sk, %t0;")
    for i in range(CHUNK):
        e(f"  mul.f32 %s{i}, %s{i}, %dec;")
        e(f"  ld.shared.f32 %f0, [%sr+{4 * i}];")
        e(f"  fma.rn.f32 %kv, %s{i}, %f0, %kv;")

    def warp_partials(src: str, dst: str):
        e(f"  mad.lo.u32 %t0, %warp, {4 * CHUNK}, %sred;")
        e("  shl.b32 %t1, %lane, 2;")
        e("  add.u32 %t0, %t0, %t1;")
        e(f"  st.shared.f32 [%t0], {src};")
        e("  bar.sync 0;")
        e("  add.u32 %t0, %sred, %t1;")
        e("  ld.shared.f32 %f0, [%t0];")
        e(f"  ld.shared.f32 %f1, [%t0+{4 * CHUNK}];")
        e(f"  ld.shared.f32 %f2, [%t0+{8 * CHUNK}];")
        e(f"  ld.shared.f32 %f3, [%t0+{12 * CHUNK}];")
        e(f"  add.f32 {dst}, %f0, %f1;")
        e(f"  add.f32 {dst}, {dst}, %f2;")
        e(f"  add.f32 {dst}, {dst}, %f3;")
        e("  bar.sync 0;")

    warp_partials("%kv", "%kv")
    e("  // delta = beta (v - kv); S += k delta; o = S^T q")
    e("  shl.b32 %t0, %lane, 2;")
    e("  add.u32 %t0, %sv, %t0;")
    e("  ld.shared.f32 %v, [%t0];")
    e("  sub.f32 %dl, %v, %kv;")
    e("  mul.f32 %dl, %dl, %beta;")
    e("  mov.f32 %o, 0f00000000;")
    e("  shl.b32 %t0, %warp, 7;")
    e("  add.u32 %t1, %sq, %t0;")
    for i in range(CHUNK):
        e(f"  ld.shared.f32 %f0, [%sr+{4 * i}];")
        e(f"  fma.rn.f32 %s{i}, %f0, %dl, %s{i};")
        e(f"  ld.shared.f32 %f1, [%t1+{4 * i}];")
        e(f"  fma.rn.f32 %o, %s{i}, %f1, %o;")
    for i in range(CHUNK):
        e(f"  st.global.f32 [%pst+{i * DV * 4}], %s{i};")
    warp_partials("%o", "%o")
    e("  // 5. gated RMSNorm over the value head's 128 columns: this CTA's sum of o^2 (warp 0), then the 4 ranks")
    e("  mul.f32 %f9, %o, %o;")
    e("  mov.f32 %f10, %f9;")
    for k in (16, 8, 4, 2, 1):
        e(f"  shfl.sync.bfly.b32 %f11, %f10, {k}, 31, 0xffffffff;")
        e("  add.f32 %f10, %f10, %f11;")
    e("  setp.eq.u32 %p, %th, 0;")
    e("  @%p st.shared.f32 [%snorm], %f10;")
    e("  barrier.cluster.arrive.release.aligned;")
    e("  barrier.cluster.wait.acquire.aligned;")
    e("  and.b32 %t2, %rank, 4;  // first rank of this value head")
    e("  mov.f32 %ss, 0f00000000;")
    for j in range(4):
        e(f"  add.u32 %t1, %t2, {j};")
        e("  mapa.shared::cluster.u32 %t0, %snorm, %t1;")
        e("  ld.shared::cluster.f32 %f0, [%t0];")
        e("  add.f32 %ss, %ss, %f0;")
    e(f"  fma.rn.f32 %ss, %ss, {f32(1.0 / DV)}, %eps;")
    e("  rsqrt.approx.ftz.f32 %ss, %ss;")
    e("  setp.lt.u32 %pw, %th, 32;")
    e("  @!%pw bra OUT_DONE;")
    e("  mul.f32 %o, %o, %ss;")
    e("  mul.wide.u32 %pt, %col, 2;")
    e("  add.u64 %pt, %pnw, %pt;")
    e("  ld.global.nc.b16 %u0, [%pt];")
    e("  cvt.f32.bf16 %f0, %u0;")
    e("  mul.f32 %o, %o, %f0;")
    e(f"  mad.lo.u32 %t0, %h, {DV}, %col;")
    e("  mad.lo.u32 %t1, %seq, %zrow, %t0;")
    e("  mul.wide.u32 %pt, %t1, 2;")
    e("  add.u64 %pt, %pz, %pt;")
    e("  ld.global.nc.b16 %u0, [%pt];")
    e("  cvt.f32.bf16 %f1, %u0;")
    e(f"  mul.f32 %f2, %f1, {f32(-LOG2E)};")
    e("  ex2.approx.ftz.f32 %f2, %f2;")
    e(f"  add.f32 %f2, %f2, {f32(1.0)};")
    e("  div.rn.f32 %f1, %f1, %f2;  // silu(z)")
    e("  mul.f32 %o, %o, %f1;")
    e("  cvt.rn.bf16.f32 %u0, %o;")
    e(f"  mad.lo.u32 %t1, %seq, {NV * DV}, %t0;")
    e("  mul.wide.u32 %pt, %t1, 2;")
    e("  add.u64 %pt, %po, %pt;")
    e("  st.global.b16 [%pt], %u0;")
    e("OUT_DONE:")
    e("  barrier.cluster.arrive.release.aligned;")
    e("  barrier.cluster.wait.acquire.aligned;")
    e("  ret;")
    e("}")
    return e.text()


def main() -> int:
    (HERE / f"{NAME}.ptx").write_text(generate())
    print(f"wrote {NAME}.ptx: grid 8 x 16 x B CTAs of {THREADS} threads, clusters of {CLUSTER}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
