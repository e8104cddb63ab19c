"""Generator of bf16_gemv_n248320_k2048_argmax: the LM head and greedy argmax in one launch,
logits[M, V] = bf16(x[M, K] @ w^T) (BF16 w [V, K] as the checkpoint stores it, fp32 accumulation) and
tokens[M] = the index of each row's largest logit (the lowest on ties; a NaN logit counts as the
largest), M in 1..32. Contract netra.contracts.proj.LM_HEAD. The generator only unrolls and names
registers; every instruction is chosen by hand.

Why: the head is 1017 MB of the 3.63 GB a decoded token reads. cuBLAS reads it at ~94% of 4.33 TB/s
and the framework's argmax adds four small launches (design/h200.md: 247 us, 256 with the argmax).

Design (v2; v1 at 08b667a and why it was replaced: experiments/proj/lm_head/README.md):
- 132 CTAs (one per SM, 16 warps). Thread 0 bulk-copies a strip's 16 rows (4 KB each, L2 evict-first)
  into a padded stage (rows 4112 B apart, so ldmatrix's 8 rows hit 8 bank groups); 3 stages, each on
  its own mbarrier. CTA c's first strips are c, c + 132, c + 264, requested before griddepcontrol.wait
  (weights never change while kernels run); every later one is claimed from a counter in ws (one
  atom.add, issued a strip ahead of its use), so a CTA on a slower SM streams fewer strips and the
  grid ends together (one launch: 102-162 strips per CTA; fixed strips, the `static` candidate, were
  4-6 us slower). Thread 0 writes each stage's strip to shared memory; 15520 or more there means none,
  and the CTA stops.
- Warp w owns k 128 w .. 128 w + 127. After the wait it loads its B fragments of x once (BF16 is the
  mma's own type: no scale, no conversion; tokens >= M are 0), 16 registers per 8-token n-tile, up to
  4 n-tiles; n-tiles without a token are skipped (a warp-uniform predicate).
- Per strip: 8 ldmatrix.x4 (A: 16 rows x 16 k) and mma.sync m16n8k16 bf16 -> fp32 from 0 in k order
  per n-tile; a barrier (the stage is read, the last strip's sums are done); thread 0 refills the
  stage; the warp's partial goes to [warp][n-tile][register][lane]; a barrier; summing warp q
  (n-tile q / 4, row half q / 2 % 2, token parity q % 2) lane (g, tig) reads its own lane's word of
  the 16 warps (no bank conflicts), adds them in warp order (k order), rounds to BF16 and stores logit
  (token 8 (q / 4) + 2 tig + q % 2, row 16 strip + 8 (q / 2 % 2) + g). Which CTA computes a strip
  does not change its bits.
- Argmax: each summing thread keeps max(key << 32 | ~row) over its rows (u64), key the BF16 logit's
  order-preserving u32 (-0 as +0, every NaN the largest key), so the maximum is the largest logit
  and, on ties, the lowest row: an order-independent rule, so the result is deterministic. Lanes
  combine by shfl.bfly over g, then atom.max.u64 into ws[token]; the last CTA to arrive (a ticket on
  ws[32]) takes each ws[token] by atom.exch (leaving 0), writes tokens, and zeroes the ticket and the
  strip counter (ws[33]; every CTA has made its last claim before it arrives).

  python3 kernels/sm_90a/proj/gen_lm_head.py      (rewrites bf16_gemv_n248320_k2048_argmax.ptx)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "src"))
sys.path.insert(0, str(HERE))
from gen_fp8_gemv import Emit, header  # noqa: E402
from netra.contracts.proj import LM_HEAD, LmHead  # noqa: E402  (shapes and tiling, written once)


def generate(g: LmHead = LM_HEAD, trace: bool = False, l2_hint: bool = True, rotate: bool = False,
             static: bool = False, store_logits: bool = True, gather: bool = False) -> str:
    """The PTX. ``trace`` (a diagnostic, experiments/proj/lm_head/trace.py): one more parameter, ``trace``, where
    thread 0 of CTA c stores u64 [c][8]: %globaltimer at entry, at its first strip's data, after its last strip,
    before ret, then %smid and its strips. ``l2_hint`` False: the weight copies without the evict-first policy.
    ``rotate``: a strip's 16 row copies issued from row strip % 16 on (the CTAs' simultaneous copies then start at
    different 4 KB offsets of their strips, not all at the same one). ``static``: CTA c streams strips c, c + 132,
    ... (v1's rule, no counter), with v2's stages. ``store_logits`` False (a diagnostic: logits never written):
    what the logits' 2-byte stores cost. ``gather``: each token's 8 rows of a summing warp gathered by shfl.down
    to one lane and stored as 16 bytes (full 32-byte sectors with the other row half's warp), not 8 two-byte stores.
    ``g`` with ``pad`` 0 (the one_copy candidate): a strip as one 64 KB bulk copy into unpadded rows."""
    V, K, NS, ROWB, WARPS, NT = g.V, g.K, g.stages, g.rowb, g.warps, g.ntiles
    b = Build(trace, l2_hint, rotate, static, store_logits, gather)
    S = V // 16
    assert K == 128 * WARPS and NS == 3, "each warp one 128-k block; the body rotates three stages"
    e = Emit()
    e(f"// {g.name}: logits = x @ w^T (BF16 [{V}, {K}]) and each token's argmax, M <= {8 * NT} "
      "(netra.contracts.proj.LM_HEAD).")
    e("// Generated by gen_lm_head.py (the design is there); regenerate, do not edit.")
    header(e, "8.0")
    e()
    e(".extern .shared .align 128 .b8 dsm[];")
    e()
    e(f".visible .entry {g.name}(")
    params = ("u64 x", "u64 w", "u64 logits", "u64 tokens", "u64 ws", "u32 M") + (("u64 trace",) if trace else ())
    for i, p in enumerate(params):
        e(f"  .param .{p}" + ("," if i < len(params) - 1 else ""))
    e(")")
    e(f".reqntid {32 * WARPS}")
    e(".maxnreg 128")
    e("{")
    e("  .reg .pred %p, %pl, %pact, %pn<4>;" if not gather else "  .reg .pred %p, %pl, %pact, %pwarp, %pn<4>;")
    e("  .reg .b32 %th, %warp, %lane, %g, %tig, %M, %s, %strip, %nct, %nxt, %ph, %sa, %sp, %sr, %tok, %row, %t<6>, %key;")
    e("  .reg .b32 %a<4>, %x<64>;")
    e("  .reg .f32 %c<16>, %acc, %f0;")
    e("  .reg .b16 %hb;")
    e("  .reg .b64 %px, %pw, %plog, %ptok, %pws, %pd, %pa, %pol, %best, %cand, %q64;")
    if rotate:
        e("  .reg .b32 %rr, %rd;")
        e("  .reg .b64 %rs;")
    for r, n in (("%px", "x"), ("%pw", "w"), ("%plog", "logits"), ("%ptok", "tokens"), ("%pws", "ws")):
        e(f"  ld.param.u64 {r}, [{n}];")
        e(f"  cvta.to.global.u64 {r}, {r};")
    e("  ld.param.u32 %M, [M];")
    e("  mov.u32 %th, %tid.x;")
    e("  shr.u32 %warp, %th, 5;")
    e("  and.b32 %lane, %th, 31;")
    e("  shr.u32 %g, %lane, 2;")
    e("  and.b32 %tig, %lane, 3;")
    e("  mov.u32 %nct, %nctaid.x;")
    e("  mov.u32 %s, dsm;")
    if trace:
        e("  .reg .b64 %trp, %trc;")
        e("  .reg .b32 %trn;")
        e("  .reg .pred %ptr;")
        e("  ld.param.u64 %trp, [trace];")
        e("  cvta.to.global.u64 %trp, %trp;")
        e("  mov.u32 %t0, %ctaid.x;")
        e("  mul.wide.u32 %trc, %t0, 64;")
        e("  add.u64 %trp, %trp, %trc;")
        e("  setp.eq.u32 %ptr, %th, 0;")
        e("  mov.u32 %trn, 0;")
        _stamp(e, 0)
        e("  mov.u32 %t0, %smid;")
        e("  cvt.u64.u32 %trc, %t0;")
        e("  @%ptr st.global.u64 [%trp+32], %trc;")
    for nt in range(NT):
        e(f"  setp.gt.u32 %pn{nt}, %M, {8 * nt};  // n-tile {nt} holds a token")
    e(f"  // 1. thread 0: the stages' mbarriers and the CTA's first {NS} strips, before the wait")
    e("  setp.ne.u32 %p, %th, 0;")
    e("  @%p bra ISSUED;")
    for i in range(NS):
        e(f"  mbarrier.init.shared::cta.b64 [%s+{g.bar_off + 8 * i}], 1;")
    e("  fence.mbarrier_init.release.cluster;")
    if l2_hint:
        e("  createpolicy.fractional.L2::evict_first.b64 %pol, 1.0;  // read once per step")
    e("  mov.u32 %t0, %ctaid.x;")
    for i in range(NS):
        if i:
            e("  add.u32 %t0, %t0, %nct;")
        _issue(e, g, b, i, "%t0")
    e("ISSUED:")
    e("  bar.sync 0;")
    e("  griddepcontrol.wait;  // x is the previous grid's output; ws the previous launch's")
    e("  griddepcontrol.launch_dependents;")
    e("  setp.ne.u32 %p, %th, 0;")
    if not static:
        e(f"  @!%p atom.global.add.u32 %nxt, [%pws+{8 * g.counter}], 1;  // thread 0: the next claim, used a strip later")
    e("  // 2. the warp's B fragments: token 8 nt + g, k = 128 warp + 16 i + 2 tig (+8); 0 for tokens >= M")
    e("  shl.b32 %t0, %warp, 7;")
    e("  mad.lo.u32 %t0, %tig, 2, %t0;")
    for nt in range(NT):
        e(f"  add.u32 %tok, %g, {8 * nt};")
        e("  setp.lt.u32 %p, %tok, %M;")
        e(f"  mad.lo.u32 %t1, %tok, {K}, %t0;")
        e("  mul.wide.u32 %pd, %t1, 2;")
        e("  add.u64 %pa, %px, %pd;")
        for i in range(8):
            for h in range(2):
                r = f"%x{16 * nt + 2 * i + h}"
                e(f"  mov.b32 {r}, 0;")
                e(f"  @%p ld.global.cg.b32 {r}, [%pa+{2 * (16 * i + 8 * h)}];")
    e("  // ldmatrix row address: lane l gives row (l >> 3 & 1) 8 + l % 8, k 128 warp + (l >> 4) 8")
    e("  and.b32 %t0, %lane, 7;")
    e("  shr.u32 %t1, %lane, 3;")
    e("  and.b32 %t2, %t1, 1;")
    e("  mad.lo.u32 %t0, %t2, 8, %t0;")
    e(f"  mad.lo.u32 %sa, %t0, {ROWB}, %s;")
    e("  shr.u32 %t1, %lane, 4;")
    e("  mad.lo.u32 %sa, %t1, 16, %sa;")
    e("  mad.lo.u32 %sa, %warp, 256, %sa;")
    e(f"  // partial store: [warp][n-tile][register][lane] at {g.part_off}")
    e(f"  mad.lo.u32 %sp, %warp, {NT * 512}, %s;")
    e("  mad.lo.u32 %sp, %lane, 4, %sp;")
    e(f"  add.u32 %sp, %sp, {g.part_off};")
    e("  // summing thread: warp q = 4 nt + 2 hi + parity, lane (g, tig): token 8 nt + 2 tig + parity, row 8 hi + g")
    e("  shr.u32 %t0, %warp, 2;")
    e("  and.b32 %t1, %warp, 1;")
    e("  shl.b32 %tok, %tig, 1;")
    e("  add.u32 %tok, %tok, %t1;")
    e("  mad.lo.u32 %tok, %t0, 8, %tok;")
    e("  setp.lt.u32 %pact, %tok, %M;")
    if gather:
        e("  shl.b32 %t4, %t0, 3;")
        e("  setp.lt.u32 %pwarp, %t4, %M;  // the warp's n-tile holds a token")
    e("  shr.u32 %t2, %warp, 1;")
    e("  and.b32 %t2, %t2, 1;")
    e("  mad.lo.u32 %row, %t2, 8, %g;")
    e("  mad.lo.u32 %t3, %t2, 2, %t1;  // register 2 hi + parity")
    e("  mad.lo.u32 %t3, %t3, 32, %lane;")
    e("  mad.lo.u32 %t3, %t0, 128, %t3;  // n-tile")
    e("  mad.lo.u32 %sr, %t3, 4, %s;")
    e(f"  add.u32 %sr, %sr, {g.part_off};")
    e(f"  mul.wide.u32 %pd, %tok, {2 * V};")
    e("  add.u64 %plog, %plog, %pd;  // the token's logits row")
    e("  mov.b64 %best, 0;")
    e("  mov.u32 %ph, 0;")
    e(f"  // 3. the strips, {NS} per round (stage i, its strip in slot i)")
    e("LOOP:")
    for i in range(NS):
        e(f"  ld.shared.u32 %strip, [%s+{g.slot_off + 4 * i}];")
        e(f"  setp.ge.u32 %p, %strip, {S};")
        e("  @%p bra END;")
        _strip(e, g, b, i)
    e("  xor.b32 %ph, %ph, 1;")
    e("  bra LOOP;")
    e("END:")
    if trace:
        _stamp(e, 2)
        e("  cvt.u64.u32 %trc, %trn;")
        e("  @%ptr st.global.u64 [%trp+40], %trc;")
    e("  // 4. the token's best over the CTA: lanes of one tig combine over g (shfl.bfly 4, 8, 16), then ws[token]")
    e("  mov.b64 {%t0, %t1}, %best;")
    for d in (4, 8, 16):
        e(f"  shfl.sync.bfly.b32 %t2, %t0, {d}, 31, -1;")
        e(f"  shfl.sync.bfly.b32 %t3, %t1, {d}, 31, -1;")
        e("  mov.b64 %cand, {%t2, %t3};")
        e("  max.u64 %best, %best, %cand;")
        e("  mov.b64 {%t0, %t1}, %best;")
    e("  setp.eq.and.u32 %p, %g, 0, %pact;")
    e("  mul.wide.u32 %pd, %tok, 8;")
    e("  add.u64 %pa, %pws, %pd;")
    e("  @%p atom.global.max.u64 %q64, [%pa], %best;")
    e("  fence.acq_rel.gpu;")
    e("  bar.sync 0;")
    e(f"  // 5. the ticket (ws[{g.ticket}]): the last CTA takes every token's best and leaves ws zero")
    e("  setp.ne.u32 %p, %th, 0;")
    e("  @%p bra TICKET;")
    e(f"  atom.global.acq_rel.gpu.add.u32 %t0, [%pws+{8 * g.ticket}], 1;")
    e("  sub.u32 %t1, %nct, 1;")
    e("  setp.eq.u32 %pl, %t0, %t1;")
    e("  selp.u32 %t0, 1, 0, %pl;")
    e(f"  st.shared.u32 [%s+{g.flag_off}], %t0;")
    e("TICKET:")
    e("  bar.sync 0;")
    e(f"  ld.shared.u32 %t0, [%s+{g.flag_off}];")
    e("  setp.eq.u32 %p, %t0, 0;")
    e("  @%p bra DONE;")
    e("  fence.acq_rel.gpu;")
    e("  setp.ge.u32 %p, %th, %M;")
    e("  @%p bra RESET;")
    e("  mul.wide.u32 %pd, %th, 8;")
    e("  add.u64 %pa, %pws, %pd;")
    e("  atom.global.exch.b64 %best, [%pa], 0;")
    e("  mov.b64 {%t0, %t1}, %best;")
    e("  not.b32 %t0, %t0;  // the row")
    e("  cvt.u64.u32 %q64, %t0;")
    e("  add.u64 %pa, %ptok, %pd;")
    e("  st.global.u64 [%pa], %q64;")
    e("RESET:")
    e("  setp.ne.u32 %p, %th, 0;")
    e(f"  @!%p st.global.u64 [%pws+{8 * g.ticket}], 0;  // every CTA has arrived and made its last claim")
    e(f"  @!%p st.global.u64 [%pws+{8 * g.counter}], 0;")
    e("DONE:")
    if trace:
        _stamp(e, 3)
    e("  ret;")
    e("}")
    return e.text()


@dataclass(frozen=True)
class Build:
    """generate's options, for the helpers that emit the copies and the strip."""

    trace: bool
    l2_hint: bool
    rotate: bool
    static: bool
    store_logits: bool
    gather: bool

    @property
    def copy(self) -> tuple[str, str]:  # the bulk copy's L2 qualifier and its policy operand
        return (".L2::cache_hint", ", %pol") if self.l2_hint else ("", "")


def _stamp(e: Emit, slot: int) -> None:
    e("  mov.u64 %trc, %globaltimer;")
    e(f"  @%ptr st.global.u64 [%trp+{8 * slot}], %trc;")


def _issue(e: Emit, g: LmHead, b: Build, stage: int, strip: str) -> None:
    """Thread 0: strip ``strip``'s 16 rows into ``stage`` when it exists; the stage's slot = ``strip``."""
    e(f"  st.shared.u32 [%s+{g.slot_off + 4 * stage}], {strip};")
    e(f"  setp.lt.u32 %p, {strip}, {g.V // 16};")
    e(f"  @%p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%s+{g.bar_off + 8 * stage}], {16 * 2 * g.K};")
    e(f"  mul.wide.u32 %pd, {strip}, {16 * 2 * g.K};")
    e("  add.u64 %pa, %pw, %pd;")
    e(f"  add.u32 %t1, %s, {g.bar_off + 8 * stage};")
    if g.pad == 0:  # one_copy: the strip's 64 KB as one bulk copy, rows unpadded (ldmatrix's 8 rows then share banks)
        e(f"  @%p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes{b.copy[0]} "
          f"[%s+{stage * 16 * g.rowb}], [%pa], {16 * 2 * g.K}, [%t1]{b.copy[1]};")
        return
    if b.rotate:
        for j in range(16):
            e(f"  add.u32 %rr, {strip}, {j};")
            e("  and.b32 %rr, %rr, 15;  // row (strip + j) % 16")
            e(f"  mad.lo.u32 %rd, %rr, {g.rowb}, %s;")
            e(f"  mul.wide.u32 %rs, %rr, {2 * g.K};")
            e("  add.u64 %rs, %pa, %rs;")
            e(f"  @%p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes{b.copy[0]} "
              f"[%rd+{stage * 16 * g.rowb}], [%rs], {2 * g.K}, [%t1]{b.copy[1]};")
        return
    for r in range(16):
        e(f"  @%p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes{b.copy[0]} "
          f"[%s+{stage * 16 * g.rowb + r * g.rowb}], [%pa+{r * 2 * g.K}], {2 * g.K}, [%t1]{b.copy[1]};")


def _strip(e: Emit, g: LmHead, b: Build, i: int) -> None:
    """One strip (%strip, the caller checked it exists) from stage ``i``."""
    NT = g.ntiles
    e(f"WAIT{i}:")
    e(f"  mbarrier.try_wait.parity.shared::cta.b64 %p, [%s+{g.bar_off + 8 * i}], %ph;")
    e(f"  @!%p bra WAIT{i};")
    if b.trace:
        e("  setp.eq.and.u32 %p, %trn, 0, %ptr;")
        e("  mov.u64 %trc, %globaltimer;")
        e("  @%p st.global.u64 [%trp+8], %trc;")
        e("  add.u32 %trn, %trn, 1;")
    for c in range(4 * NT):
        e(f"  mov.f32 %c{c}, 0f00000000;")
    for k in range(8):
        e(f"  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%a0, %a1, %a2, %a3}}, [%sa+{i * 16 * g.rowb + 32 * k}];")
        for nt in range(NT):
            c = 4 * nt
            e(f"  @%pn{nt} mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{%c{c}, %c{c + 1}, %c{c + 2}, %c{c + 3}}}, "
              f"{{%a0, %a1, %a2, %a3}}, {{%x{16 * nt + 2 * k}, %x{16 * nt + 2 * k + 1}}}, {{%c{c}, %c{c + 1}, %c{c + 2}, %c{c + 3}}};")
    e("  bar.sync 0;  // every warp has read the stage; the last strip's sums are done")
    e("  setp.ne.u32 %p, %th, 0;")
    e(f"  @%p bra REFILLED{i};")
    if b.static:
        e(f"  mad.lo.u32 %t0, %nct, {g.stages}, %strip;")
        _issue(e, g, b, i, "%t0")
    else:
        e(f"  mad.lo.u32 %t0, %nct, {g.stages}, %nxt;  // claims count from the strips after every CTA's first ones")
        _issue(e, g, b, i, "%t0")
        e(f"  @%p atom.global.add.u32 %nxt, [%pws+{8 * g.counter}], 1;  // the one after: its result is read a strip later")
    e(f"REFILLED{i}:")
    for nt in range(NT):
        for r in range(4):
            e(f"  @%pn{nt} st.shared.f32 [%sp+{nt * 512 + r * 128}], %c{4 * nt + r};")
    e("  bar.sync 0;  // every partial is written")
    if b.gather:
        e(f"  @!%pwarp bra SUMMED{i};  // this warp's n-tile holds no token (warp-uniform); its lanes all sum")
    else:
        e(f"  @!%pact bra SUMMED{i};")
    e("  ld.shared.f32 %acc, [%sr];")
    for w in range(1, g.warps):
        e(f"  ld.shared.f32 %f0, [%sr+{w * NT * 512}];")
        e("  add.rn.f32 %acc, %acc, %f0;")
    e("  cvt.rn.bf16.f32 %hb, %acc;")
    e("  shl.b32 %t0, %strip, 4;")
    e("  add.u32 %t0, %t0, %row;  // the logit's row of w")
    e("  mul.wide.u32 %pd, %t0, 2;")
    e("  add.u64 %pa, %plog, %pd;")
    if b.store_logits and b.gather:
        e("  // the token's 8 rows gathered to lane g = 0 (rows g + 1, + 2, + 4 are lanes + 4, + 8, + 16): one 16-byte store")
        e("  cvt.u32.u16 %t1, %hb;")
        e("  shfl.sync.down.b32 %t2, %t1, 4, 31, -1;")
        e("  shl.b32 %t2, %t2, 16;")
        e("  or.b32 %t1, %t1, %t2;")
        e("  shfl.sync.down.b32 %t2, %t1, 8, 31, -1;")
        e("  shfl.sync.down.b32 %t3, %t1, 16, 31, -1;")
        e("  shfl.sync.down.b32 %t4, %t2, 16, 31, -1;")
        e("  setp.eq.and.u32 %p, %g, 0, %pact;")
        e("  @%p st.global.v4.b32 [%pa], {%t1, %t2, %t3, %t4};")
    elif b.store_logits:
        e("  st.global.b16 [%pa], %hb;")
    e("  // key: the BF16's order-preserving u32 (-0 as +0, NaN the largest); candidate key << 32 | ~row")
    e("  cvt.f32.bf16 %f0, %hb;")
    e("  add.rn.f32 %f0, %f0, 0f00000000;")
    e("  mov.b32 %t1, %f0;")
    e("  shr.s32 %t2, %t1, 31;")
    e("  or.b32 %t2, %t2, 0x80000000;")
    e("  xor.b32 %key, %t1, %t2;")
    e("  testp.notanumber.f32 %p, %f0;")
    e("  selp.b32 %key, -1, %key, %p;")
    e("  not.b32 %t0, %t0;")
    e("  mov.b64 %cand, {%t0, %key};")
    e(f"  {'@%pact ' if b.gather else ''}max.u64 %best, %best, %cand;")
    e(f"SUMMED{i}:")


def main() -> int:
    (HERE / f"{LM_HEAD.name}.ptx").write_text(generate())
    print(f"wrote {LM_HEAD.name}.ptx ({LM_HEAD.grid} CTAs, {32 * LM_HEAD.warps} threads, {LM_HEAD.smem} B dynamic smem)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
