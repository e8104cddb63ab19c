"""Generator of gdn_verify_t16: the Gated DeltaNet step for T <= 16 consecutive tokens of
each of B <= 32 sequences in one launch (speculative verification), writing the state after
every token to its own pool slot so a rejected draft rolls back by choosing a slot, with no
recomputation. Contract netra.contracts.gdn; the decode kernel's generator
(gen_gdn_decode.py) holds the shared pieces and the design this one extends:

- the same cluster of 8 CTAs per (sequence, key head), each holding a 128 x 32 fp32 slice of
  a value head's state in registers for all T tokens (read once from slot_in, written once
  per token to slots_out[t]);
- each conv channel's thread runs its window through the T tokens, writes the window after
  every token to slots_out[t], and pushes the T outputs (q, k) to all 8 ranks or keeps them (v);
  one mbarrier completes when all T x 1 KB of q and k have landed;
- the T q/k norms take one barrier; beta and exp(g) per token come from 16 threads;
- per token: the delta rule exactly as the decode kernel orders it (so T = 1 is bitwise the
  decode kernel, and T tokens are bitwise T decode steps), the state slice stored to
  slots_out[t], the sum of o^2 pushed to the value head's 4 ranks;
- warp 0 then waits for the T x 4 sums and writes the gated-norm output of every token.
A slot id outside [0, pool_slots) in slot_in or slots_out touches nothing and makes the
sequence's outputs NaN.

  python3 kernels/sm_90a/gdn/gen_gdn_verify.py      (rewrites gdn_verify_t16.ptx)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "src"))
from netra import paths  # noqa: E402
from netra.contracts.gdn import MAX_TOKENS as MAXT  # noqa: E402  (shapes, written once)

d = paths.generator("gdn", "gen_gdn_decode")

NAME = "gdn_verify_t16"
CONV, DK, DV, KW, NK, NV = d.CONV, d.DK, d.DV, d.KW, d.NK, d.NV
THREADS, CLUSTER, CHUNK, QKR = d.THREADS, d.CLUSTER, d.CHUNK, d.QK_PER_RANK
f32, LOG2E = d.f32, d.LOG2E
PARAMS = ("qkv", "z", "b_in", "a_in", "conv_w", "a_log", "dt_bias", "norm_w", "conv_pool", "state_pool", "slot_in",
          "slots_out", "out")
SCALARS = ("qkv_seq", "qkv_tok", "z_seq", "z_tok", "tokens", "pool_slots")
STATE_SLOT = NV * DK * DV * 4  # bytes of one slot of the state pool
CONV_SLOT = CONV * (KW - 1) * 2


def _token_step(e, t: int | None, nw: int = 4, rpw: int = 32, split: int = 1, fast: bool = False) -> None:
    """Step 4 for one token: token ``t`` of the unrolled build (offsets immediate), or, with
    t None, the body of the runtime loop over %tt (offsets from %tt; %sr and %sq advanced by the
    caller; warp 0 keeps each token's o in ot_s for step 5 instead of a register per token).
    The arithmetic and its order are the same either way."""
    loop = t is None

    def token(base: str, stride: int) -> str:
        """The address of the token's element: base + stride x token."""
        if loop:
            e(f"mad.lo.u32 {base}, %tt, {stride}, {base};")
            return f"[{base}]"
        return f"[{base}+{stride * t}]"

    kt, qt = ("%sr", "%sq") if loop else (f"%sr+{4 * 2 * DK * t}", f"%sq+{4 * 2 * DK * t}")
    e("mov.u32 %t0, gate_s;")
    e(f"ld.shared.v2.f32 {{%beta, %dec}}, {token('%t0', 8)};")
    kv = (lambda i: "%kv") if split == 1 else (lambda i: f"%kvp{i % split}")
    for j in range(split):
        e(f"mov.f32 {kv(j)}, 0f00000000;")
    for i in range(rpw):
        e(f"mul.f32 %s{i}, %s{i}, %dec;")
        e(f"ld.shared.f32 %f0, [{kt}+{4 * i}];")
        e(f"fma.rn.f32 {kv(i)}, %s{i}, %f0, {kv(i)};")
    if split > 1:
        e("add.f32 %kv, %kvp0, %kvp1;")
        for j in range(2, split):
            e(f"add.f32 %kv, %kv, %kvp{j};")
    d.warp_partials(e, "%kv", "%kv", trailing=not fast, nw=nw)
    e("mov.u32 %t0, v_s;")
    e("shl.b32 %t1, %lane, 2;")
    e("add.u32 %t0, %t0, %t1;")
    e(f"ld.shared.f32 %v, {token('%t0', 4 * CHUNK)};")
    e("sub.f32 %dl, %v, %kv;")
    e("mul.f32 %dl, %dl, %beta;")
    oo = (lambda i: "%o") if split == 1 else (lambda i: f"%op{i % split}")
    for j in range(split):
        e(f"mov.f32 {oo(j)}, 0f00000000;")
    for i in range(rpw):
        e(f"ld.shared.f32 %f0, [{kt}+{4 * i}];")
        e(f"fma.rn.f32 %s{i}, %f0, %dl, %s{i};")
        e(f"ld.shared.f32 %f1, [{qt}+{4 * i}];")
        e(f"fma.rn.f32 {oo(i)}, %s{i}, %f1, {oo(i)};")
    if split > 1:
        e("add.f32 %o, %op0, %op1;")
        for j in range(2, split):
            e(f"add.f32 %o, %o, %op{j};")
    e("mov.u32 %t0, slot_s;")
    e(f"ld.shared.u64 %pa, {token('%t0', 8)};")
    e(f"mad.lo.u64 %pa, %pa, {STATE_SLOT}, %poff;")
    for i in range(rpw):
        e(f"st.global.f32 [%pa+{i * DV * 4}], %s{i};")
    if fast:
        d.warp_partials(e, "%o", "%o", red="red2", trailing=False, nw=nw)
        e(f"mov.f32 %ot{t}, %o;")
        return
    d.warp_partials(e, "%o", "%o", nw=nw)
    done = "SUMSQ" if loop else f"SUMSQ_{t}"
    e(f"@!%pw bra {done};")
    if loop:
        e("mov.u32 %t0, ot_s;")
        e(f"mad.lo.u32 %t0, %tt, {4 * CHUNK}, %t0;")
        e("mad.lo.u32 %t0, %lane, 4, %t0;")
        e("st.shared.f32 [%t0], %o;  // token tt's o of this column, for step 5")
    else:
        e(f"mov.f32 %ot{t}, %o;")
    e("mul.f32 %f10, %o, %o;")
    for k in (16, 8, 4, 2, 1):
        e(f"shfl.sync.bfly.b32 %f11, %f10, {k}, 31, 0xffffffff;")
        e("add.f32 %f10, %f10, %f11;")
    e("setp.lt.u32 %p, %lane, 4;")
    e(f"@!%p bra {done};")
    e("mov.u32 %t0, norm_s;")
    e("mad.lo.u32 %t0, %r, 4, %t0;")
    if loop:
        e("mad.lo.u32 %t0, %tt, 16, %t0;  // token tt, slot r of ...")
    else:
        e(f"add.u32 %t0, %t0, {16 * t};  // token t, slot r of ...")
    e("and.b32 %t1, %rank, 4;")
    e("add.u32 %t1, %t1, %lane;  // ... rank (rank & 4) + lane")
    e("mapa.shared::cluster.u32 %t2, %t0, %t1;")
    e("mov.u32 %t0, bar_norm;")
    e("mapa.shared::cluster.u32 %t4, %t0, %t1;")
    e("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%t2], %f10, [%t4];")
    e(f"{done}:")


def _norm_regs(G: int, j: int) -> dict:
    """Token j's registers in step 3: the promoted build's names for a group of 1, else per token."""
    if G == 1:
        return dict(q="%q", k="%k", a="%f10", b="%f11", c="%f8", d="%f9", qn="%qn", kn="%kn",
                    v=[f"%f{i}" for i in range(8)])
    return dict(q=f"%gq{j}", k=f"%gk{j}", a=f"%ga{j}", b=f"%gb{j}", c=f"%gc{j}", d=f"%gd{j}", qn=f"%ga{j}",
                kn=f"%gb{j}", v=[f"%gv{8 * j + i}" for i in range(8)])


def _norm_sums(e, G: int) -> None:
    """Step 3's warp sums of q^2 and k^2, G tokens at a time: one branch on T per group, each
    phase emitted for the group's tokens in turn (G = 1: token by token, the promoted build).
    Tokens >= T of the last group read and write unused slots (qk_s and wsum hold MAXT)."""
    for t0 in range(0, MAXT, G):
        R = [_norm_regs(G, j) for j in range(G)]
        e(f"setp.le.u32 %pt, %T, {t0};")
        e("@%pt bra NORM_SUMS_DONE;")
        for j, r in enumerate(R):
            e(f"ld.shared.f32 {r['q']}, [%t3+{4 * 2 * DK * (t0 + j)}];")
            e(f"ld.shared.f32 {r['k']}, [%t3+{4 * (2 * DK * (t0 + j) + DK)}];")
        for r in R:
            e(f"mul.f32 {r['a']}, {r['q']}, {r['q']};")
            e(f"mul.f32 {r['b']}, {r['k']}, {r['k']};")
        for k in (16, 8, 4, 2, 1):
            for r in R:
                e(f"shfl.sync.bfly.b32 {r['c']}, {r['a']}, {k}, 31, 0xffffffff;")
                e(f"shfl.sync.bfly.b32 {r['d']}, {r['b']}, {k}, 31, 0xffffffff;")
            for r in R:
                e(f"add.f32 {r['a']}, {r['a']}, {r['c']};")
                e(f"add.f32 {r['b']}, {r['b']}, {r['d']};")
        for j, r in enumerate(R):
            e(f"@%p st.shared.v2.f32 [%t4+{32 * (t0 + j)}], {{{r['a']}, {r['b']}}};")


def _norm_apply(e, G: int) -> None:
    """Step 3's normalization, G tokens at a time, phase by phase as _norm_sums."""
    for t0 in range(0, MAXT, G):
        R = [_norm_regs(G, j) for j in range(G)]
        e(f"setp.le.u32 %pt, %T, {t0};")
        e("@%pt bra NORMED;")
        for j, r in enumerate(R):
            v = r["v"]
            e(f"ld.shared.v4.f32 {{{v[0]}, {v[1]}, {v[2]}, {v[3]}}}, [%t4+{32 * (t0 + j)}];")
            e(f"ld.shared.v4.f32 {{{v[4]}, {v[5]}, {v[6]}, {v[7]}}}, [%t4+{32 * (t0 + j) + 16}];")
        for n, first in (("qn", 0), ("kn", 1)):  # the 4 warps' sums in warp order
            for r in R:
                e(f"add.f32 {r[n]}, {r['v'][first]}, {r['v'][first + 2]};")
            for i in (4, 6):
                for r in R:
                    e(f"add.f32 {r[n]}, {r[n]}, {r['v'][first + i]};")
        for j, r in enumerate(R):
            e(f"ld.shared.f32 {r['q']}, [%t3+{4 * 2 * DK * (t0 + j)}];")
            e(f"ld.shared.f32 {r['k']}, [%t3+{4 * (2 * DK * (t0 + j) + DK)}];")
        for r in R:
            e(f"add.f32 {r['qn']}, {r['qn']}, {f32(1e-6)};")
        for r in R:
            e(f"rsqrt.approx.ftz.f32 {r['qn']}, {r['qn']};")
        for r in R:
            e(f"mul.f32 {r['q']}, {r['q']}, {r['qn']};")
        for r in R:
            e(f"mul.f32 {r['q']}, {r['q']}, {f32(DK ** -0.5)};")
        for r in R:
            e(f"add.f32 {r['kn']}, {r['kn']}, {f32(1e-6)};")
        for r in R:
            e(f"rsqrt.approx.ftz.f32 {r['kn']}, {r['kn']};")
        for r in R:
            e(f"mul.f32 {r['k']}, {r['k']}, {r['kn']};")
        for j, r in enumerate(R):
            e(f"st.shared.f32 [%t3+{4 * 2 * DK * (t0 + j)}], {r['q']};")
            e(f"st.shared.f32 [%t3+{4 * (2 * DK * (t0 + j) + DK)}], {r['k']};")


def generate(fast: bool = False, rpw: int = 32, split: int = 1, loop: bool = True, group: int = 1) -> str:
    """The PTX. ``fast`` (experiments/gdn/verify_variant.py, not promoted): the two per-token
    reductions alternate shared buffers (one barrier each instead of two), and warp 0's sums of
    o^2 and their pushes leave the token loop for one interleaved pass after it. The same
    arithmetic in the same order: the outputs should be bitwise those of the promoted build.
    ``rpw`` (state rows per warp; 16: 8 warps of 256 threads, twice the warps to interleave, half
    the chain per thread) and ``split`` (independent partial sums in each of the per-token
    chains over the thread's rows) are candidates too (verify_variant.py); they change the
    summation order, so the decode kernel would have to change with them (they need
    ``loop=False``). ``loop`` (the promoted build): the token loop of step 4 as a runtime loop;
    unrolled (``loop=False``, promoted until this change) the kernel is ~7100 SASS instructions,
    113 KB, streamed through the instruction cache once per CTA (ncu's largest stall reason was
    no_instruction, 42%). The same arithmetic in the same order: bitwise the unrolled build.
    ``group`` (candidates g2, g4, g8; 1 is the promoted build): the per-token work of the conv
    (step 2), the q/k norms (step 3) and the gated norm (step 5) branches on T once per
    ``group`` tokens instead of once per token, the stores of tokens >= T predicated off, so
    ptxas can interleave a group's independent tokens (ncu: 42% of T = 16's samples are in
    these steps, each token's work a serial chain between branches). The same arithmetic:
    bitwise the promoted build; T not a multiple of ``group`` computes (and discards) up to
    ``group`` - 1 tokens more."""
    assert group in (1, 2, 4, 8, 16) and (group == 1 or (loop and not fast)), "group is built on the promoted build"
    NW = DK // rpw  # warps
    assert NW * rpw == DK and rpw % split == 0
    assert not loop or (rpw == 32 and split == 1 and not fast), "loop is built on the promoted arithmetic only"
    e = d.Emit()
    e(f"// {NAME}: Gated DeltaNet step for T <= {MAXT} tokens of B <= 32 sequences, a state slot per token. "
      "Generated by gen_gdn_verify.py (the design is there).")
    e(".version 8.1  // st.async")
    e(".target sm_90a")
    e(".address_size 64")
    e()
    e(f".visible .entry {NAME}(")
    for p in PARAMS:
        e(f"  .param .u64 {p},")
    for s in SCALARS:
        e(f"  .param .u32 {s},")
    e("  .param .f32 eps")
    e(")")
    e(f".reqntid {32 * NW}")
    e(f".reqnctapercluster {CLUSTER}, 1, 1")
    e("{")
    e(".reg .pred %p, %pc, %pq, %pw, %pg, %pt, %pbad;")
    if NW != 4:
        e(".reg .pred %pn;")
    if split > 1:
        e(f".reg .f32 %kvp<{split}>, %op<{split}>;")
    if loop:
        e(".reg .b32 %tt;")
    if group > 1:
        e(".reg .pred %pk, %pnq, %pkv, %pkq;  // token t < T; not a q/k thread; both combined")
        e(f".reg .f32 %gq<{group}>, %gk<{group}>, %ga<{group}>, %gb<{group}>, %gc<{group}>, %gd<{group}>, %gv<{8 * group}>;")
    e(".reg .b32 %th, %warp, %lane, %rank, %cl, %seq, %kh, %h, %r, %col, %ch, %t<5>, %wlo, %whi, %sq, %sr, %T, %np;")
    e(".reg .b32 %qseq, %qtok, %zseq, %ztok;")
    e(f".reg .b16 %u<4>, %bb, %ab, %nwb, %xb<{MAXT}>, %zb<{MAXT}>;")
    e(f".reg .f32 %s<{rpw}>, %f<12>, %x, %q, %k, %v, %qn, %kn, %beta, %dec, %kv, %dl, %o, %ss, %eps, %alog, %dtb, %ot<{MAXT}>;")
    if fast:
        e(f".reg .f32 %os<{MAXT}>;")
    e(".reg .b64 %a<13>, %pa, %pb, %pcv, %poff, %slot, %so;")
    e(f".shared .align 16 .f32 qk_s[{MAXT * 2 * DK}];  // token t: q | k of the key head from all 8 ranks")
    e(f".shared .align 16 .f32 v_s[{MAXT * CHUNK}];")
    if loop:
        e(f".shared .align 16 .f32 ot_s[{MAXT * CHUNK}];  // warp 0: token t's o of its 32 columns")
    e(f".shared .align 16 .f32 red[{NW * CHUNK}];")
    if fast:
        e(f".shared .align 16 .f32 red2[{NW * CHUNK}];")
    e(f".shared .align 16 .f32 wsum[{MAXT * 8}];  // token t: warp w's sums of q^2, k^2")
    e(f".shared .align 16 .f32 gate_s[{MAXT * 2}];  // token t: beta, exp(g)")
    e(f".shared .align 16 .f32 norm_s[{MAXT * 4}];  // token t: the value head's 4 ranks' sums of o^2")
    e(f".shared .align 8 .u64 slot_s[{MAXT}];")
    e(".shared .align 8 .b64 bar_qk;")
    e(".shared .align 8 .b64 bar_norm;")
    for i, p in enumerate(PARAMS):
        e(f"ld.param.u64 %a{i}, [{p}];")
        e(f"cvta.to.global.u64 %a{i}, %a{i};")
    A = {p: f"%a{i}" for i, p in enumerate(PARAMS)}
    for reg, s in (("%qseq", "qkv_seq"), ("%qtok", "qkv_tok"), ("%zseq", "z_seq"), ("%ztok", "z_tok"), ("%T", "tokens"),
                   ("%np", "pool_slots")):
        e(f"ld.param.u32 {reg}, [{s}];")
    e("ld.param.f32 %eps, [eps];")
    d.cluster_coords(e, col_note="")
    e("setp.eq.u32 %p, %th, 0;")
    e("@!%p bra INIT_DONE;")
    e("mbarrier.init.shared::cta.b64 [bar_qk], 1;")
    e("mbarrier.init.shared::cta.b64 [bar_norm], 1;")
    e(f"mul.lo.u32 %t0, %T, {2 * DK * 4};")
    e("mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar_qk], %t0;")
    e("shl.b32 %t0, %T, 4;")
    e("mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar_norm], %t0;")
    e("fence.mbarrier_init.release.cluster;")
    e("INIT_DONE:")
    e("barrier.cluster.arrive.relaxed.aligned;")

    e("// 1. slot_in first, then what needs no slot: slots_out (threads < T), per-token b and a (threads 64 + t),")
    e("// per-token z and the norm weight (warp 0), per-token qkv and the conv weights (conv threads)")
    e("mul.wide.u32 %pa, %seq, 8;")
    e(f"add.u64 %pa, {A['slot_in']}, %pa;")
    e("ld.global.nc.u64 %slot, [%pa];")
    e("setp.lt.u32 %pt, %th, %T;")
    e("mad.lo.u32 %t0, %seq, %T, %th;")
    e("mul.wide.u32 %pa, %t0, 8;")
    e(f"add.u64 %pa, {A['slots_out']}, %pa;")
    e("@%pt ld.global.nc.u64 %so, [%pa];")
    e("sub.u32 %t1, %th, 64;")
    e("setp.lt.u32 %pg, %t1, %T;  // gate thread of token th - 64")
    e("mad.lo.u32 %t0, %seq, %T, %t1;")
    e(f"mad.lo.u32 %t0, %t0, {NV}, %h;")
    e("mul.wide.u32 %pa, %t0, 2;")
    e(f"add.u64 %pb, {A['b_in']}, %pa;")
    e("@%pg ld.global.nc.b16 %bb, [%pb];")
    e(f"add.u64 %pb, {A['a_in']}, %pa;")
    e("@%pg ld.global.nc.b16 %ab, [%pb];")
    e("mul.wide.u32 %pa, %h, 4;")
    e(f"add.u64 %pb, {A['a_log']}, %pa;")
    e("@%pg ld.global.nc.f32 %alog, [%pb];")
    e(f"add.u64 %pb, {A['dt_bias']}, %pa;")
    e("@%pg ld.global.nc.f32 %dtb, [%pb];")
    e("setp.lt.u32 %pw, %th, 32;")
    e("mul.wide.u32 %pa, %col, 2;")
    e(f"add.u64 %pa, {A['norm_w']}, %pa;")
    e("@%pw ld.global.nc.b16 %nwb, [%pa];")
    e(f"mad.lo.u32 %t0, %h, {DV}, %col;")
    e("mad.lo.u32 %t0, %seq, %zseq, %t0;")
    for t in range(MAXT):
        e(f"setp.gt.and.u32 %p, %T, {t}, %pw;")
        e("mul.wide.u32 %pa, %t0, 2;")
        e(f"add.u64 %pa, {A['z']}, %pa;")
        e(f"@%p ld.global.nc.b16 %zb{t}, [%pa];")
        if t + 1 < MAXT:
            e("add.u32 %t0, %t0, %ztok;")
    e("// the conv channel of this thread: q (th < 16), k (th < 32), v (th < 64), as in the decode kernel")
    d.conv_channel(e, notes=False)
    e("mad.lo.u32 %t0, %seq, %qseq, %ch;")
    for t in range(MAXT):
        e(f"setp.gt.and.u32 %p, %T, {t}, %pc;")
        e("mul.wide.u32 %pa, %t0, 2;")
        e(f"add.u64 %pa, {A['qkv']}, %pa;")
        e(f"@%p ld.global.nc.b16 %xb{t}, [%pa];")
        if t + 1 < MAXT:
            e("add.u32 %t0, %t0, %qtok;")
    e("mul.wide.u32 %pa, %ch, 8;")
    e(f"add.u64 %pa, {A['conv_w']}, %pa;")
    e("@%pc ld.global.nc.v2.b32 {%wlo, %whi}, [%pa];")
    e("// slot_in outside the pool: nothing is read at it")
    e("cvt.u64.u32 %pa, %np;")
    e("setp.ge.u64 %pbad, %slot, %pa;")
    e("@%pbad bra BAD_SLOT;")
    e(f"mul.lo.u64 %pcv, %slot, {CONV_SLOT};")
    e("mul.wide.u32 %pa, %ch, 6;")
    e("add.u64 %pcv, %pcv, %pa;")
    e(f"add.u64 %pcv, {A['conv_pool']}, %pcv;")
    e("@%pc ld.global.b16 %u1, [%pcv];")
    e("@%pc ld.global.b16 %u2, [%pcv+2];")
    e("@%pc ld.global.b16 %u3, [%pcv+4];")
    e(f"// this thread's offset in a state slot: ((h * {DK} + {rpw} warp) * {DV} + col) * 4")
    e(f"mul.lo.u32 %t0, %h, {DK};")
    e("shl.b32 %t1, %warp, 5;" if rpw == 32 else f"mul.lo.u32 %t1, %warp, {rpw};")
    e("add.u32 %t0, %t0, %t1;")
    e(f"mul.lo.u32 %t0, %t0, {DV};")
    e("add.u32 %t0, %t0, %col;")
    e("mul.wide.u32 %poff, %t0, 4;")
    e(f"add.u64 %poff, {A['state_pool']}, %poff;")
    e(f"mad.lo.u64 %pa, %slot, {STATE_SLOT}, %poff;")
    for i in range(rpw):
        e(f"ld.global.f32 %s{i}, [%pa+{i * DV * 4}];")
    e("// every slots_out[t] inside the pool, else nothing is written (the whole cluster agrees: same sequence)")
    e("cvt.u64.u32 %pa, %np;")
    e("setp.ge.and.u64 %p, %so, %pa, %pt;")
    e("mov.u32 %t0, slot_s;")
    e("mad.lo.u32 %t0, %th, 8, %t0;")
    e("@%pt st.shared.u64 [%t0], %so;")
    e("bar.red.or.pred %pbad, 0, %p;  // also publishes slot_s")
    e("@%pbad bra BAD_SLOT;")
    e("barrier.cluster.wait.aligned;  // every rank has started: st.async may target it")

    e("// 2. conv: the window runs through the T tokens; after each, its window goes to slots_out[t]")
    e("@!%pc bra CONV_DONE;")
    d.conv_weights(e)
    e(f"and.b32 %t2, %th, {QKR - 1};")
    e(f"mad.lo.u32 %t2, %rank, {QKR}, %t2;")
    e(f"setp.ge.u32 %p, %th, {QKR};")
    e(f"@%p add.u32 %t2, %t2, {DK};")
    e("mov.u32 %t1, qk_s;")
    e("mad.lo.u32 %t2, %t2, 4, %t1;  // this q/k channel's place in token 0's q | k")
    e(f"sub.u32 %t3, %th, {2 * QKR};")
    e("mov.u32 %t1, v_s;")
    e("mad.lo.u32 %t3, %t3, 4, %t1;  // this v channel's place in token 0's v")
    e("mul.wide.u32 %pb, %ch, 6;")
    e(f"add.u64 %pb, {A['conv_pool']}, %pb;")
    if group > 1:
        e("not.pred %pnq, %pq;")
    for t in range(MAXT):
        if t % group == 0:
            e(f"setp.le.u32 %p, %T, {t};")
            e("@%p bra CONV_DONE;")
        if group > 1:
            e(f"setp.gt.u32 %pk, %T, {t};")
        st = "@%pk " if group > 1 else ""
        e("cvt.f32.bf16 %f4, %u1;")
        e("cvt.f32.bf16 %f5, %u2;")
        e("cvt.f32.bf16 %f6, %u3;")
        e(f"cvt.f32.bf16 %f7, %xb{t};")
        e("mul.f32 %x, %f0, %f4;")
        e("fma.rn.f32 %x, %f1, %f5, %x;")
        e("fma.rn.f32 %x, %f2, %f6, %x;")
        e("fma.rn.f32 %x, %f3, %f7, %x;")
        e("mov.u32 %t0, slot_s;")
        e(f"ld.shared.u64 %pa, [%t0+{8 * t}];")
        e(f"mad.lo.u64 %pa, %pa, {CONV_SLOT}, %pb;")
        e(f"{st}st.global.b16 [%pa], %u2;")
        e(f"{st}st.global.b16 [%pa+2], %u3;")
        e(f"{st}st.global.b16 [%pa+4], %xb{t};")
        e("mov.b16 %u1, %u2;")
        e("mov.b16 %u2, %u3;")
        e(f"mov.b16 %u3, %xb{t};")
        d._silu_bf16(e, "%x", "%x")
        if group > 1:  # no branch: the v store and the pushes predicated on the token and the thread's role
            e("and.pred %pkv, %pnq, %pk;")
            e("and.pred %pkq, %pq, %pk;")
            e(f"@%pkv st.shared.f32 [%t3+{4 * CHUNK * t}], %x;")
        else:
            e(f"@!%pq st.shared.f32 [%t3+{4 * CHUNK * t}], %x;")
            e(f"@!%pq bra PUSHED_{t};")
        e(f"add.u32 %t1, %t2, {4 * 2 * DK * t};")
        e("mov.u32 %t0, bar_qk;")
        for j in range(CLUSTER):
            e(f"mapa.shared::cluster.u32 %t4, %t1, {j};")
            e(f"mapa.shared::cluster.u32 %sr, %t0, {j};")
            e(("@%pkq " if group > 1 else "") + "st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%t4], %x, [%sr];")
        if group == 1:
            e(f"PUSHED_{t}:")
    e("CONV_DONE:")
    e("// beta and exp(g) of token th - 64")
    e("@!%pg bra GATES_DONE;")
    d.gates(e, "%bb", "%ab", "%beta", "%dec")
    e("mov.u32 %t0, gate_s;")
    e("sub.u32 %t1, %th, 64;")
    e("mad.lo.u32 %t0, %t1, 8, %t0;")
    e("st.shared.v2.f32 [%t0], {%beta, %dec};")
    e("GATES_DONE:")
    d._wait(e, "bar_qk", "WAIT_QK")

    e("// 3. l2norm of every token's q and k (one barrier for all T): warp sums, then the 4 in warp order")
    e("mov.u32 %sq, qk_s;")
    e("shl.b32 %t3, %th, 2;")
    e("add.u32 %t3, %sq, %t3;  // this thread's q element of token 0")
    e("mov.u32 %t4, wsum;")
    e("mad.lo.u32 %t4, %warp, 8, %t4;")
    e("setp.eq.u32 %p, %lane, 0;")
    if NW != 4:
        e(f"setp.ge.u32 %pn, %th, {DK};  // warps past the 128 q/k elements: only the barriers")
        e("@%pn bra NORM_SUMS_DONE;")
    _norm_sums(e, group)
    e("NORM_SUMS_DONE:")
    e("bar.sync 0;")
    e("mov.u32 %t4, wsum;")
    if NW != 4:
        e("@%pn bra NORMED;")
    _norm_apply(e, group)
    e("NORMED:")
    e("bar.sync 0;")

    e("// 4. the T tokens' delta rule, ordered as in the decode kernel; the state after token t to slots_out[t]")
    e("shl.b32 %t0, %warp, 7;" if rpw == 32 else f"mul.lo.u32 %t0, %warp, {4 * rpw};")
    e(f"add.u32 %sr, %sq, {4 * DK};")
    e("add.u32 %sr, %sr, %t0;  // token 0's k of the warp's rows")
    e("add.u32 %sq, %sq, %t0;  // token 0's q of the warp's rows")
    if loop:
        e("mov.u32 %tt, 0;")
        e("TOKEN_LOOP:")
        e("setp.ge.u32 %pt, %tt, %T;")
        e("@%pt bra TOKENS_DONE;")
        _token_step(e, None)
        e(f"add.u32 %sr, %sr, {4 * 2 * DK};")
        e(f"add.u32 %sq, %sq, {4 * 2 * DK};")
        e("add.u32 %tt, %tt, 1;")
        e("bra.uni TOKEN_LOOP;")
    else:
        for t in range(MAXT):
            e(f"// token {t}")
            e(f"setp.le.u32 %pt, %T, {t};")
            e("@%pt bra TOKENS_DONE;")
            _token_step(e, t, NW, rpw, split, fast)
    e("TOKENS_DONE:")
    if fast:
        e("// warp 0: the sums of o^2 of all T tokens, interleaved, then the pushes of those below T")
        e("@!%pw bra OUT_DONE;")
        for t in range(MAXT):
            e(f"mul.f32 %os{t}, %ot{t}, %ot{t};")
        for k in (16, 8, 4, 2, 1):
            for t in range(MAXT):
                e(f"shfl.sync.bfly.b32 %f11, %os{t}, {k}, 31, 0xffffffff;")
                e(f"add.f32 %os{t}, %os{t}, %f11;")
        e("setp.lt.u32 %p, %lane, 4;")
        e("mov.u32 %t0, norm_s;")
        e("mad.lo.u32 %t0, %r, 4, %t0;")
        e("and.b32 %t1, %rank, 4;")
        e("add.u32 %t1, %t1, %lane;")
        e("mapa.shared::cluster.u32 %t2, %t0, %t1;")
        e("mov.u32 %t0, bar_norm;")
        e("mapa.shared::cluster.u32 %t4, %t0, %t1;")
        for t in range(MAXT):
            e(f"setp.gt.and.u32 %pt, %T, {t}, %p;")
            e(f"@%pt st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%t2+{16 * t}], %os{t}, [%t4];")

    e("// 5. gated RMSNorm of every token (warp 0), once the head's 4 sums of o^2 of all T tokens have landed")
    e("@!%pw bra OUT_DONE;")
    d._wait(e, "bar_norm", "WAIT_NORM")
    e("cvt.f32.bf16 %f4, %nwb;")
    e(f"mad.lo.u32 %t0, %h, {DV}, %col;")
    e("mad.lo.u32 %t1, %seq, %T, 0;")
    e(f"mad.lo.u32 %t1, %t1, {NV * DV}, %t0;  // out[seq, 0, h * 128 + col]")
    e("mov.u32 %t2, norm_s;")
    for t in range(MAXT):
        if t % group == 0:
            e(f"setp.le.u32 %pt, %T, {t};")
            e("@%pt bra OUT_DONE;")
        if group > 1:
            e(f"setp.gt.u32 %pk, %T, {t};")
        e(f"ld.shared.v4.f32 {{%f0, %f1, %f2, %f3}}, [%t2+{16 * t}];")
        e("add.f32 %ss, %f0, %f1;")
        e("add.f32 %ss, %ss, %f2;")
        e("add.f32 %ss, %ss, %f3;")
        e(f"fma.rn.f32 %ss, %ss, {f32(1.0 / DV)}, %eps;")
        e("rsqrt.approx.ftz.f32 %ss, %ss;")
        if loop:
            e("mov.u32 %t0, ot_s;")
            e("mad.lo.u32 %t0, %lane, 4, %t0;")
            e(f"ld.shared.f32 %o, [%t0+{4 * CHUNK * t}];")
            e("mul.f32 %o, %o, %ss;")
        else:
            e(f"mul.f32 %o, %ot{t}, %ss;")
        e("mul.f32 %o, %o, %f4;")
        e(f"cvt.f32.bf16 %f5, %zb{t};")
        e(f"mul.f32 %f6, %f5, {f32(-LOG2E)};")
        e("ex2.approx.ftz.f32 %f6, %f6;")
        e(f"add.f32 %f6, %f6, {f32(1.0)};")
        e("div.rn.f32 %f5, %f5, %f6;  // silu(z)")
        e("mul.f32 %o, %o, %f5;")
        e("cvt.rn.bf16.f32 %u0, %o;")
        e("mul.wide.u32 %pa, %t1, 2;")
        e(f"add.u64 %pa, {A['out']}, %pa;")
        e(("@%pk " if group > 1 else "") + "st.global.b16 [%pa], %u0;")
        e(f"add.u32 %t1, %t1, {NV * DV};")
    e("OUT_DONE:")
    e("ret;")
    e("BAD_SLOT:  // a slot id outside the pool: nothing written, this head's outputs are NaN")
    e("barrier.cluster.wait.aligned;")
    e("@!%pw bra OUT_DONE;")
    e(f"mad.lo.u32 %t0, %h, {DV}, %col;")
    e("mul.lo.u32 %t1, %seq, %T;")
    e(f"mad.lo.u32 %t1, %t1, {NV * DV}, %t0;")
    e("mov.b16 %u0, 0x7FC0;")
    for t in range(MAXT):
        e(f"setp.le.u32 %pt, %T, {t};")
        e("@%pt bra OUT_DONE;")
        e("mul.wide.u32 %pa, %t1, 2;")
        e(f"add.u64 %pa, {A['out']}, %pa;")
        e("st.global.b16 [%pa], %u0;")
        e(f"add.u32 %t1, %t1, {NV * DV};")
    e("bra.uni OUT_DONE;")
    e("}")
    return e.text()


def main() -> int:
    (HERE / f"{NAME}.ptx").write_text(generate())
    print(f"wrote {NAME}.ptx: grid {CLUSTER} x {NK} x B CTAs of {THREADS} threads, clusters of {CLUSTER}, T <= {MAXT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
