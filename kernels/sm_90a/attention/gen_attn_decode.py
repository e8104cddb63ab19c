"""Generator of attn_decode_d256: Qwen3.6's gated full-attention decode step on a paged KV cache, one launch per
layer. Contract netra.contracts.attn.ATTN_DECODE. The generator only unrolls and names registers.

  out[b, h] = sigmoid(gate[b, h]) * softmax(rope(q[b, h]) . K[b, kvh]^T / 16) V[b, kvh],  h in kv head kvh's 8 heads
  over positions 0 .. pos[b], where the new token's rope(k) and v are written to the cache (row pos) by the same launch.

Design (split-K flash decoding, one page of 64 tokens per CTA):
- Grid (NP pages, 2 kv heads, B sequences), 128 threads. A CTA whose page is past pos's exits at once. Warp w takes
  tokens 16 w .. 16 w + 15 of the page: 32 cp.async.cg of 16 bytes per lane bring its K and V rows (512 B each) into
  its own 16 KB of shared memory (16-byte chunk c of row r at c ^ 4 (r & 1): conflict-free fragment loads); rows at or
  past pos are zero-filled (source size 0), and the warp that holds pos writes the new token's rows there itself.
  Positions, the block table, cos / sin and the cache copies come before griddepcontrol.wait; q, k, v after it.
- S = K Q^T by mma.sync m16n8k16 (bf16 in, f32 out): M = 16 tokens, N = the kv head's 8 query heads, K = 256 dims in
  16 steps. The dot product's dims are permuted the same way in both operands so that each fragment is one 16-byte
  load: lane (g, t) loads dims 32 s + 8 t .. + 7 of row g (and g + 8) for slab s, which are k columns 2t, 2t+1 (step
  2 s, first pair), 2t+8, 2t+9 (second pair), and the same of step 2 s + 1. q is roped in registers (the rotary
  partner of dim 8 t + e of slab 0 is the same lane's dim 8 t + e of slab 1) and rounded to bf16, as the model does.
- Softmax per head (a column of S) over the warp's 16 tokens: max by shfl over the 8 lanes of a column, p = 2^((s - m)
  log2(e) / 16) rounded to bf16 (l sums the rounded p), then movmatrix.trans turns the two 8 x 8 halves of P into the
  B fragments of O^T = V^T P (M = 256 dims in 16 tiles, N = 8 heads, K = 16 tokens). V^T's A fragments: each 16-byte
  V load is four 8 x 8 blocks (token rows, dim pairs) that movmatrix.trans transposes; the output dims are permuted
  accordingly (dim_of below).
- The 4 warps' (m, l, O) are combined in warp order through shared memory; each thread then owns 16 outputs of one
  head. With one page (pos < 64) the CTA writes out directly; otherwise each CTA writes its partial to ws, and the
  last to arrive on the (sequence, kv head) counter (atom.acq_rel.gpu) combines pages 0 .. n-1 in page order and
  resets the counter: deterministic whichever CTA is last. Its two loops (the max, then O and l) load 4 pages a trip
  (one L2 round trip per 4 pages; a page a trip made the combine of 16 pages a serial chain of 32 round trips).
- out = bf16(O / l * sigmoid(gate)), one rounding; every CTA loads its gate values after q (only the finishing one
  uses them: the load is then off the end of its chain). pos outside [0, min(NP * 64, T)) or a page id outside [0, P):
  NaN out, nothing written to the cache.

  python3 kernels/sm_90a/attn/gen_attn_decode.py      (rewrites attn_decode_d256.ptx)
"""

from __future__ import annotations

import math
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "src"))
from netra.contracts.attn import (ATTN_CLUSTER, ATTN_CLUSTER_CANDIDATES, ATTN_LONG, ATTN_SPLIT, ATTN_DECODE,  # noqa: E402
                                  ATTN_DECODE_QKNORM, HEAD_DIM, KV_HEADS, LONG_MAX_PAGES, LONG_PAGES, LONG_SPLITS,
                                  MAX_PAGES, PAGE, PART,  # (written once)
                                  Q_HEADS, ROTARY, SMEM, WARPS)
from netra.contracts.spec import Scalar, Tensor  # noqa: E402

GROUP = Q_HEADS // KV_HEADS  # 8 query heads per kv head: the mma's N
ROWB = HEAD_DIM * 2  # one token's K (or V) row of one kv head: 512 B
TILE = 16 * ROWB  # one warp's 16 rows: 8 KB
SLABS = HEAD_DIM // 32  # 8 slabs of 32 dims
assert PAGE == 16 * WARPS and GROUP == 8 and ROTARY == 64 and SLABS == 8
assert SMEM == WARPS * 2 * TILE
CL = math.log2(math.e) / math.sqrt(HEAD_DIM)  # scores to base-2 exponents
UNROLL = 4  # pages per trip of the last CTA's combine loops
LOG2E = math.log2(math.e)
QS_STRIDE = ROWB + 64  # (once) one normalized head in qs: the two heads of an 8-lane phase on disjoint banks


def f32(x: float) -> str:
    return "0f%08X" % struct.unpack("<I", struct.pack("<f", x))[0]


def dim_of(s: int, jj: int, g: int, half: int) -> int:
    """The head dim of O^T tile (slab s, pair jj), row g (+ 8 with half), as the V fragments permute it."""
    return 32 * s + 8 * (g // 2) + 4 * jj + 2 * half + (g % 2)


REG = {"q": "pq", "k": "pk", "v": "pvv", "gate": "pg", "q_norm": "pqw", "k_norm": "pkw", "cos": "pc", "sin": "ps",
       "positions": "ppos", "block_table": "pbt", "k_pages": "pkp", "v_pages": "pvp", "out": "pout", "ws": "pws",
       "counters": "pcnt"}
for _c in (ATTN_DECODE, ATTN_DECODE_QKNORM):
    _n = sum(isinstance(p, Tensor) for p in _c.params)
    assert all(isinstance(p, Tensor) for p in _c.params[:_n]) and all(isinstance(p, Scalar) for p in _c.params[_n:]), \
        "tensors first, then scalars"
    assert {p.name for p in _c.params[:_n]} <= set(REG)


def generate(qknorm: bool = False, once: bool = False, cluster: int = 0, split: int = 0, long: bool = False,
             push: bool = False, q_first: bool = False, trigger: bool = False, lean_split: bool = False,
             cl_restrict: bool = False) -> str:
    """attn_decode_d256; with ``qknorm`` attn_decode_d256_qknorm (q_norm and k_norm first, bitwise qk_rmsnorm_d256's).
    ``once`` (a candidate, experiments/attention/qknorm_once_variant.py; with qknorm): each CTA normalizes its 8 query
    heads once, warp w heads 2 w and 2 w + 1 in qk_rmsnorm_d256's own lane layout, into shared memory, and every warp
    reads its q fragments from there (the promoted build: every warp normalizes all 8 in its fragment layout); the
    weights in registers. The same bits.
    ``cluster`` (with qknorm): attn_decode_d256_qknorm_c{cluster}, a cluster build: CTA rank r of a (sequence, kv
    head)'s cluster walks pages r, r + cluster, .. (_cl_pages), the partials combined through distributed shared
    memory (_cl_combine). ``split`` (with qknorm; a candidate, experiments/attention/split_variant_606fb91.json):
    attn_decode_d256_qknorm_s{split}, the same walk by ``split`` CTAs without a cluster, their partials combined as
    attn_decode_d256's pages are (ws, the counter, the last CTA). ``long`` (with cluster 4 or 8):
    attn_decode_d256_qknorm_c{cluster}_long, up to S clusters per (sequence, kv head) (S = %nctaid.x / cluster), S_eff
    of them walking (_cl_long_start), their partials combined by the last to arrive (_cl_split).
    ``push`` (a candidate for the cluster builds c4, c8; measured at 2c03b57 and not promoted: experiments/attention/
    cluster_push_2c03b57.json, docs/notes/attention.md): each CTA's partial goes to the combining ranks by st.async,
    completing their mbarriers, in place of a cluster barrier and remote loads (_cl_combine). The same bits.
    ``q_first`` (a candidate for the long builds, rejected: experiments/attention/q_first_variant_0a773a1.json): the
    first page's K and V requested after q, cos / sin, the norm weights and the gate, not before them. Launched plainly,
    nothing needs the pages first, and late in long caches those small loads queued behind every CTA's first page (the
    prologue 3.5 us against 1.5: experiments/attention/long_place_phases_e744800.json). The same bits, and the same time
    within 0.3 us: the walk waits for the first page either way.
    ``trigger`` (the registered cluster builds c4, c8 since f6f3e85; measured as the candidate
    experiments/decode/step_ab.py attn_trigger: batch-1 steps 3-6 us less, docs/notes/decode.md after edf355c): still
    launched plainly, but griddepcontrol.launch_dependents at the start, so the next kernel (o_proj, launched with
    programmatic serialization) starts beside the walk and can stream its weights before its wait. The same bits. The
    long builds and the rejected candidates (push, c6, c16) are built without it, as measured.
    ``lean_split`` (the long builds; a candidate, experiments/decode/step_ab.py long_lean; measured level at d0cfc39, not
    promoted): the
    hand-off of the clusters' partials (_cl_split) without its two fence.acq_rel.gpu, every thread's after its
    partial's stores and the last CTA's after its ticket. Thread 0's atom.acq_rel.gpu is the release and the acquire,
    and a bar.sync on each side orders the CTA's other threads (as the router builds' grid barrier since 7e704bc; the
    last CTA reads the partials with ld.global.cg). The same bits.
    ``cl_restrict`` (the cluster builds without push; experiments/decode/step_ab.py cl_restrict; measured at d0cfc39 and
    rejected: level with PDL, 15 us a batch-1 step slower plainly): the partials' cluster barrier (_cl_pull) released by fence.release.sync_restrict::shared::cta.cluster and
    barrier.cluster.arrive.relaxed instead of barrier.cluster.arrive.release, which ptxas emits as MEMBAR.ALL.GPU
    (the restricted fence: FENCE.VIEW.ASYNC.S). The fence orders only this CTA's shared::cta operations, which is all
    the partial is (st.shared, read by the other ranks with ld.shared::cluster); the wait stays acquire. The ISA's own
    examples pair this fence with a relaxed mbarrier arrive and fence.mbarrier_init with a relaxed cluster arrive.
    PTX 8.6. The same bits."""
    assert not trigger or cluster, "trigger: the cluster builds (the others trigger after their wait)"
    assert not lean_split or long, "lean_split: the long builds' hand-off"
    _LEAN["split"] = lean_split
    assert not cl_restrict or (cluster and not push), "cl_restrict: the cluster builds' partials barrier (not push)"
    _LEAN["cl"] = cl_restrict
    assert qknorm or not once
    clusters = {**ATTN_CLUSTER, **ATTN_CLUSTER_CANDIDATES}
    assert not cluster or (qknorm and not once and cluster in clusters and not split)
    assert not split or (qknorm and not once and split in ATTN_SPLIT)
    assert not long or (cluster in ATTN_LONG and _combiners(cluster) == cluster)
    C = (ATTN_LONG[cluster] if long else clusters[cluster] if cluster else ATTN_SPLIT[split] if split else ATTN_DECODE_QKNORM if qknorm
         else ATTN_DECODE)
    walk = cluster or split  # CTAs per (sequence, kv head) walking its pages (0: one page a CTA)
    table = -(-(LONG_MAX_PAGES if long else MAX_PAGES) // walk) if walk else 0  # the CTA's page ids
    push = push and bool(cluster) and not long and _combiners(cluster) == cluster
    assert not q_first or long
    E = 16 // _combiners(cluster) if cluster else 0  # (cluster) outputs a thread combines
    name = C.name
    params = tuple(p.name for p in C.params if isinstance(p, Tensor))  # the contract's order, written there
    scalars = tuple(p for p in C.params if isinstance(p, Scalar))
    L: list[str] = []

    def e(s: str = ""):
        L.append(("  " + s) if s and not s.endswith(":") and not s.startswith("//") and not s.startswith(".") else s)

    e(f"// {name}: gated attention decode on a paged KV cache ({Q_HEADS} q heads, {KV_HEADS} kv heads, head dim "
      f"{HEAD_DIM}, rotary {ROTARY}, pages of {PAGE}).")
    e("// Generated by gen_attn_decode.py (the design is there).")
    e(".version 8.1  // st.async" if push else ".version 8.6  // the restricted release fence (cl_restrict)" if cl_restrict
      else ".version 8.0")
    e(".target sm_90a")
    e(".address_size 64")
    e()
    e(".extern .shared .align 128 .b8 dsm[];")
    e()
    if qknorm:
        e("// q_norm and k_norm first, as qk_rmsnorm_d256 computes them (the same sums in the same order: the same bits).")
    e(f".visible .entry {name}(")
    for p in params:
        e(f"  .param .u64 {p},")
    for i, sc in enumerate(scalars):
        e(f"  .param .{sc.ptx} {sc.name}" + ("," if i < len(scalars) - 1 else ""))
    e(")")
    e(f".reqntid {32 * WARPS}")
    if cluster:
        e(f".reqnctapercluster {cluster}, 1, 1")
    if walk:
        e(f".maxnreg {C.max_registers}  // 3 CTAs a SM (shared memory) allow 168")
    elif qknorm:
        e(".maxnreg 128  // 167 unbounded, with nothing gained: 3 CTAs a SM either way (shared memory); 128 spill nothing")
    e("{")
    e(f".shared .align 16 .b32 ml[{WARPS * 16}];  // per warp: m of its 8 heads, then l")
    if push:
        sl, hs = _slice(cluster)
        e(".shared .align 8 .b64 cmb;  // (push) completes when every partial of this CTA's slice has landed")
        e(f".shared .align 16 .f32 crx[{cluster * sl}];  // (push) sender j's {sl} outputs of this CTA's slice at j {sl}")
        e(f".shared .align 8 .f32 cmx[{cluster * hs * 2}];  // (push) sender j's (M, L) of the slice's head hh at 2 (j {hs} + hh)")
    elif cluster:
        e(f".shared .align 16 .f32 cml[{2 * GROUP}];  // the CTA's partial: M of its 8 heads, then L (O over warp 0's V tile)")
    if not cluster or long:
        e(".shared .align 4 .b32 ticket;")
    if walk:
        cl_f, cl_p = (f", %cm<{cluster}>, %cl<{cluster}>, %co<{cluster * E}>", f", %pj<{cluster}>") if cluster else ("", "")
        e(f".shared .align 4 .b32 pids[{table}];  // this CTA's page ids: pages rank, rank + "
          f"{'C S_eff' if long else walk}, ..")
        e(".reg .b32 %w16, %cpg, %pn, %it, %pidl, %pidt, %pidc, %ir<8>, %nk<8>, %nka, %gs<4>, %hd, %dm, %nv;")
        e(f".reg .f32 %mr<2>, %lr<2>, %al<2>{cl_f};")
        e(f".reg .pred %pall, %pempty, %pown, %pmore, %pw, %ptab, %pi{cl_p};")
        if cluster and _combiners(cluster) != cluster:
            e(".reg .pred %pslice;")
        e(".reg .b64 %ai, %lane16, %po2;")
        if long:
            R = -(-table // (32 * WARPS))
            e(f".reg .b32 %rk, %cj, %S, %seff, %W, %pidu<{R}>;")
            e(f".reg .pred %psplit, %ptb<{R}>, %pq<{LONG_SPLITS[cluster]}>;")
    if once:
        e(f".shared .align 16 .b8 qs[{GROUP * QS_STRIDE}];  // the 8 normalized heads, {QS_STRIDE} B apart (no bank conflict)")
        e(".reg .b32 %wq<4>, %wk<4>;")
    elif qknorm:
        e(f".shared .align 16 .f32 nw[{2 * HEAD_DIM}];  // 1 + w of q_norm, then of k_norm")
    if qknorm:
        e(".reg .b32 %qrow, %qhead, %krow;")
        e(".reg .b64 %pqw, %pkw;")
        e(".reg .b32 %nwq, %nwk;")
        e(".reg .f32 %eps, %rn;")
    e(".reg .pred %p, %pv, %pl, %pnew, %pone, %pr0, %pr1, %plo, %pu<4>;")
    e(".reg .b32 %th, %warp, %lane, %g, %t, %page, %kvh, %b, %NP, %P, %T, %pid, %last, %n, %i, %tok, %sz, %cnt;")
    e(".reg .b32 %r<16>, %sw<2>, %sb, %sk, %so, %so1, %q<32>, %k<8>, %tv<8>, %pa, %pb, %b0, %b1, %h, %d;")
    e(".reg .b32 %vrow, %grow, %ghead, %gt<8>;")
    e(".reg .f32 %s<4>, %m<2>, %mu<2>, %l<2>, %x<16>, %y<16>, %c<16>, %sn<16>, %f<8>, %M, %Lsum, %fw, %mw, %lw, %acc<16>, %mz<4>, %lz<4>, %z<64>;")
    e(f".reg .f32 %o<{SLABS * 2 * 4}>;")
    e(".reg .b64 %pos, %lim, %pq, %pk, %pvv, %pg, %pc, %ps, %ppos, %pbt, %pkp, %pvp, %pout, %pws, %pcnt, %a, %a2, %ro;")
    for p in params:
        e(f"ld.param.u64 %{REG[p]}, [{p}];")
        e(f"cvta.to.global.u64 %{REG[p]}, %{REG[p]};")
    e("ld.param.u32 %vrow, [v_row];")
    e("ld.param.u32 %grow, [gate_row];")
    e("ld.param.u32 %ghead, [gate_head];")
    e("ld.param.u32 %NP, [NP];")
    e("ld.param.u32 %P, [P];")
    e("ld.param.u32 %T, [T];")
    if qknorm:
        e("ld.param.u32 %qrow, [q_row];")
        e("ld.param.u32 %qhead, [q_head];")
        e("ld.param.u32 %krow, [k_row];")
        e("ld.param.f32 %eps, [eps];")
    e("mov.u32 %th, %tid.x;")
    e("shr.u32 %warp, %th, 5;")
    e("and.b32 %lane, %th, 31;")
    e("shr.u32 %g, %lane, 2;")
    e("and.b32 %t, %lane, 3;")
    e("mov.u32 %page, %ctaid.x;")
    e("mov.u32 %kvh, %ctaid.y;")
    e("mov.u32 %b, %ctaid.z;")
    e("mov.u32 %sb, dsm;")
    _out_addr(e)
    e("// 1. the position: valid in [0, min(NP * 64, T)), else NaN out (by page 0's CTA) and nothing else; this")
    e("// page's id (valid in [0, P)) loaded beside it")
    e("mul.wide.u32 %a, %b, 8;")
    e("add.s64 %a, %ppos, %a;")
    e("ld.global.nc.u64 %pos, [%a];")
    e("mad.lo.u32 %r0, %b, %NP, %page;")
    e("mul.wide.u32 %a, %r0, 4;")
    e("add.s64 %a, %pbt, %a;")
    if walk:
        e(f"// {'(cluster) ' if cluster else ''}the CTA's first page is its rank, which may be past NP; thread th < "
          f"{table} loads the id of its page rank + {walk} th for the table" if not long else
          "// (long) the CTA's first page is its walker index j C + r, which may be past NP (the table after pos: its "
          "stride C S_eff depends on it)")
        e("setp.lt.u32 %pi, %page, %NP;")
        e("mov.u32 %pid, 0;")
        e("@%pi ld.global.nc.u32 %pid, [%a];")
    if walk and not long:
        e(f"mad.lo.u32 %r1, %th, {walk}, %page;")
        e("setp.lt.u32 %ptab, %r1, %NP;")
        e(f"setp.lt.and.u32 %ptab, %th, {table}, %ptab;")
        e("mad.lo.u32 %r1, %b, %NP, %r1;")
        e("mul.wide.u32 %a2, %r1, 4;")
        e("add.s64 %a2, %pbt, %a2;")
        e("@%ptab ld.global.nc.u32 %pidt, [%a2];")
    else:
        e("ld.global.nc.u32 %pid, [%a];")
    e(f"mul.wide.u32 %lim, %NP, {PAGE};")
    e("cvt.u64.u32 %a, %T;")
    e("min.u64 %lim, %lim, %a;")
    e("setp.lt.u64 %pv, %pos, %lim;")
    e("@%pv bra POS_OK;")
    e("setp.ne.u32 %p, %page, 0;")
    e("@%p exit;")
    e("st.global.v4.b32 [%pout], {0x7FC07FC0, 0x7FC07FC0, 0x7FC07FC0, 0x7FC07FC0};")
    e("st.global.v4.b32 [%pout+16], {0x7FC07FC0, 0x7FC07FC0, 0x7FC07FC0, 0x7FC07FC0};")
    e("exit;")
    e("POS_OK:")
    e("cvt.u32.u64 %tok, %pos;  // pos < 2^31 here")
    e(f"shr.u32 %last, %tok, {PAGE.bit_length() - 1};")
    if long:
        _cl_long_start(e, cluster)
    if walk:
        e("add.u32 %n, %last, 1;")
        e("setp.eq.u32 %pone, %n, 1;")
        e("setp.gt.u32 %pempty, %page, %last;")
        if cluster:
            e("and.pred %p, %pempty, %pone;")
            e("@%p exit;  // one page: rank 0 alone, no cluster exchange")
            if push:
                e("@%pone bra XCH_READY;")
                e("setp.eq.u32 %p, %th, 0;")
                e("@%p mbarrier.init.shared::cta.b64 [cmb], 1;")
                e("@%p fence.mbarrier_init.release.cluster;  // visible to the cluster's st.async")
                e("barrier.cluster.arrive.relaxed.aligned;  // (after fence.mbarrier_init) this CTA's mbarrier is initialized")
                e("XCH_READY:")
            e("@%pempty bra EMPTY;  // no page of its own: it only combines its slice")
        else:
            e("@%pempty exit;  // no page of its own")
        e("rem.u32 %r0, %last, %W;" if long else f"and.b32 %r0, %last, {walk - 1};" if walk & (walk - 1) == 0
          else f"rem.u32 %r0, %last, {walk};")
        e("setp.eq.u32 %pown, %r0, %page;  // this CTA holds the last page (pos's)")
        e("mad.lo.u32 %r0, %b, %NP, %last;")
        e("mul.wide.u32 %a, %r0, 4;")
        e("add.s64 %a, %pbt, %a;")
        e("@%pown ld.global.nc.u32 %pidl, [%a];")
        if long:
            _cl_long_table(e, table)
    else:
        e("setp.gt.u32 %p, %page, %last;")
        e("@%p exit;  // a page past pos: no tokens")
        e("add.u32 %n, %last, 1;")
        e("setp.eq.u32 %pone, %n, 1;")
    e("// 2. the warp's 16 rows by cp.async; rows >= pos zero-filled")
    if walk:
        e("shl.b32 %w16, %warp, 4;")
        e("mul.wide.u32 %lane16, %lane, 16;")
        e(f"mad.lo.u32 %sk, %warp, {2 * TILE}, %sb;  // the warp's K tile, then its V tile")
        e("shl.b32 %sw0, %lane, 4;")
        e("xor.b32 %sw1, %sw0, 64;")
        if not q_first:
            _first_page(e)
    else:
        e("setp.lt.u32 %pl, %pid, %P;")
        e("selp.b32 %r1, %pid, 0, %pl;  // an address inside the pool even where no byte is read")
        e(f"// row of token i of warp w: ((pid * {PAGE} + 16 w + i) * {KV_HEADS} + kvh) * {ROWB} + 16 lane")
        e("shl.b32 %r2, %warp, 4;")
        e(f"mad.lo.u32 %r3, %r1, {PAGE}, %r2;")
        e(f"mad.lo.u32 %r3, %r3, {KV_HEADS}, %kvh;")
        e(f"mul.wide.u32 %a, %r3, {ROWB};")
        e("mul.wide.u32 %a2, %lane, 16;")
        e("add.s64 %a, %a, %a2;")
        e("add.s64 %ro, %pkp, %a;  // K source, row 0")
        e("add.s64 %a2, %pvp, %a;  // V source, row 0")
        e(f"mad.lo.u32 %sk, %warp, {2 * TILE}, %sb;  // the warp's K tile, then its V tile")
        e(f"mul.lo.u32 %r5, %page, {PAGE};")
        e("add.u32 %r5, %r5, %r2;  // the position of the warp's row 0")
        e("// chunk lane of row i at (lane ^ 4 (i & 1)) * 16")
        e("shl.b32 %sw0, %lane, 4;")
        e("xor.b32 %sw1, %sw0, 64;")
        _copy_rows(e, (("%ro", 0), ("%a2", TILE)), "%r5", "%r6", "%r7", "%p")
    e("// cos and sin of pos for dims 8 t .. 8 t + 7 and 32 + 8 t .. (the q fragments' rotary dims)")
    e(f"mul.lo.u32 %r0, %tok, {ROTARY};")
    e("shl.b32 %r1, %t, 3;")
    e("add.u32 %r0, %r0, %r1;")
    e("mul.wide.u32 %a, %r0, 4;")
    e("add.s64 %pc, %pc, %a;")
    e("add.s64 %ps, %ps, %a;")
    e("ld.global.nc.v4.f32 {%c0, %c1, %c2, %c3}, [%pc];")
    e("ld.global.nc.v4.f32 {%c4, %c5, %c6, %c7}, [%pc+16];")
    e("ld.global.nc.v4.f32 {%c8, %c9, %c10, %c11}, [%pc+128];")
    e("ld.global.nc.v4.f32 {%c12, %c13, %c14, %c15}, [%pc+144];")
    e("ld.global.nc.v4.f32 {%sn0, %sn1, %sn2, %sn3}, [%ps];")
    e("ld.global.nc.v4.f32 {%sn4, %sn5, %sn6, %sn7}, [%ps+16];")
    e("ld.global.nc.v4.f32 {%sn8, %sn9, %sn10, %sn11}, [%ps+128];")
    e("ld.global.nc.v4.f32 {%sn12, %sn13, %sn14, %sn15}, [%ps+144];")
    if once:
        e("// the norms' weights at this lane's dims 8 lane .. 8 lane + 7 (qk_rmsnorm_d256's layout, q's and k's)")
        e("mul.wide.u32 %a, %lane, 16;")
        e("add.s64 %a2, %pqw, %a;")
        e("ld.global.nc.v4.b32 {%wq0, %wq1, %wq2, %wq3}, [%a2];")
        e("add.s64 %a2, %pkw, %a;")
        e("ld.global.nc.v4.b32 {%wk0, %wk1, %wk2, %wk3}, [%a2];")
    elif qknorm:
        e("// this thread's 2 weights of each norm (dims 2 th, 2 th + 1), stored to nw after q is requested")
        e("mul.wide.u32 %a, %th, 4;")
        e("add.s64 %a2, %pqw, %a;")
        e("ld.global.nc.u32 %nwq, [%a2];")
        e("add.s64 %a2, %pkw, %a;")
        e("ld.global.nc.u32 %nwk, [%a2];")
    if cluster and trigger:
        e("// launched plainly (the previous kernel has ended); the next kernel may launch now, beside the walk")
        e("griddepcontrol.launch_dependents;")
    elif cluster:  # launched plainly: the grid is placed on free SMs (docs/notes/attention.md, after 7b4cfc9 and f3e6613)
        e(f"// ({'long' if long else 'cluster'}) launched plainly (no PDL wait or trigger): the previous kernel has ended")
    else:
        e("griddepcontrol.wait;  // q, k, v are the previous kernels' outputs (PDL; a no-op launched plainly)")
        e("griddepcontrol.launch_dependents;")
    if walk:
        e("// the page table to shared memory (read from the second page on; the norm's barrier orders it)")
        e("mov.u32 %ir0, pids;")
        e("shl.b32 %ir1, %th, 2;")
        e("add.u32 %ir0, %ir0, %ir1;")
        if long:
            for u in range(-(-table // (32 * WARPS))):
                e(f"@%ptb{u} st.shared.u32 [%ir0+{4 * 32 * WARPS * u}], %pidu{u};")
        else:
            e("@%ptab st.shared.u32 [%ir0], %pidt;")
    e("// 3. q of head kvh * 8 + g, slab s: dims 32 s + 8 t .. + 7 (one 16-byte load each), coherent")
    if once:
        _norm_q_once(e)
    elif qknorm:
        e(f"mad.lo.u32 %r0, %kvh, {GROUP}, %g;")
        e("mul.lo.u32 %r0, %r0, %qhead;")
        e("mad.lo.u32 %r0, %b, %qrow, %r0;")
        e("add.u32 %r0, %r0, %r1;")
    else:
        e(f"mad.lo.u32 %r0, %b, {Q_HEADS}, %g;")
        e(f"mad.lo.u32 %r0, %kvh, {GROUP}, %r0;")
        e(f"mad.lo.u32 %r0, %r0, {HEAD_DIM}, %r1;")
    if not once:
        e("mul.wide.u32 %a, %r0, 2;")
        e("add.s64 %pq, %pq, %a;")
        for s in range(SLABS):
            e(f"ld.global.v4.b32 {{%q{4 * s}, %q{4 * s + 1}, %q{4 * s + 2}, %q{4 * s + 3}}}, [%pq+{64 * s}];")
    e("// this thread's 16 gate values, gate[b, kvh * 8 + h, d .. d + 15], for the CTA that finishes (off its chain)")
    e(f"mad.lo.u32 %r0, %kvh, {GROUP}, %h;")
    e("mul.lo.u32 %r0, %r0, %ghead;")
    e("mad.lo.u32 %r0, %b, %grow, %r0;")
    e("add.u32 %r0, %r0, %d;")
    e("mul.wide.u32 %a, %r0, 2;")
    e("add.s64 %pg, %pg, %a;")
    pone = "@%pone " if cluster else ""  # (cluster) the 16 values for one page; else the thread's slice of the combine
    e(f"{pone}ld.global.v4.b32 {{%gt0, %gt1, %gt2, %gt3}}, [%pg];")
    e(f"{pone}ld.global.v4.b32 {{%gt4, %gt5, %gt6, %gt7}}, [%pg+16];")
    if cluster:
        _gate_slice(e, cluster, "%rk" if long else "%page")
    if q_first:
        _first_page(e)
    if qknorm and not once:
        _norm_q(e)
    e("// rope on dims 0..63: x' = x cos - x[+32] sin (slab 0), x' = x cos + x[-32] sin (slab 1); bf16 again")
    _rope(e, "q", 0, 4, "c", "sn")
    e("// 4. the new token (the warp holding pos in the last page): rope(k) and v, row pos & 15 of the tiles")
    e("mov.pred %pnew, %pown;" if walk else "setp.eq.u32 %pnew, %page, %last;")
    e("and.b32 %r0, %tok, 63;")
    e("shr.u32 %r1, %r0, 4;")
    e("setp.eq.and.u32 %pnew, %r1, %warp, %pnew;")
    e("@!%pnew bra NEW_DONE;")
    e("// lane: dims 8 lane .. 8 lane + 7 of k[b, kvh] and v[b, kvh]; rotary partner by shfl.xor 4 (lanes 0..7)")
    if qknorm:
        e(f"mul.lo.u32 %r2, %kvh, {HEAD_DIM};")
        e("mad.lo.u32 %r2, %b, %krow, %r2;")
    else:
        e(f"mad.lo.u32 %r2, %b, {KV_HEADS}, %kvh;")
        e(f"mul.lo.u32 %r2, %r2, {HEAD_DIM};")
    e("shl.b32 %r3, %lane, 3;")
    e("add.u32 %r2, %r2, %r3;")
    e("mul.wide.u32 %a, %r2, 2;")
    e("add.s64 %a, %pk, %a;")
    e("ld.global.v4.b32 {%k0, %k1, %k2, %k3}, [%a];")
    e(f"mul.lo.u32 %r2, %kvh, {HEAD_DIM};")
    e("mad.lo.u32 %r2, %b, %vrow, %r2;")
    e("add.u32 %r2, %r2, %r3;")
    e("mul.wide.u32 %a, %r2, 2;")
    e("add.s64 %a, %pvv, %a;")
    e("ld.global.v4.b32 {%k4, %k5, %k6, %k7}, [%a];")
    if once:
        e("// k_norm: qk_rmsnorm_d256's arithmetic on its own layout")
        _norm_row(e, [f"%k{j}" for j in range(4)], [f"%wk{j}" for j in range(4)])
    elif qknorm:
        _norm_k(e)
    e("setp.lt.u32 %p, %lane, 8;")
    e("@!%p bra NEW_ROPED;")
    e(f"mul.lo.u32 %r2, %tok, {ROTARY};")
    e("add.u32 %r2, %r2, %r3;")
    e("mul.wide.u32 %a, %r2, 4;")
    e("ld.param.u64 %a2, [cos];")
    e("cvta.to.global.u64 %a2, %a2;")
    e("add.s64 %a2, %a2, %a;")
    e("ld.global.nc.v4.f32 {%y0, %y1, %y2, %y3}, [%a2];")
    e("ld.global.nc.v4.f32 {%y4, %y5, %y6, %y7}, [%a2+16];")
    e("ld.param.u64 %a2, [sin];")
    e("cvta.to.global.u64 %a2, %a2;")
    e("add.s64 %a2, %a2, %a;")
    e("ld.global.nc.v4.f32 {%y8, %y9, %y10, %y11}, [%a2];")
    e("ld.global.nc.v4.f32 {%y12, %y13, %y14, %y15}, [%a2+16];")
    e("setp.lt.u32 %plo, %lane, 4;  // dims 0..31: minus the partner's sin term")
    for j in range(4):
        e(f"shfl.sync.bfly.b32 %r{8 + j}, %k{j}, 4, 0x1f, 0xff;")
    for j in range(4):
        for hi in (0, 1):
            x, xp = f"%x{2 * j + hi}", f"%x{8 + 2 * j + hi}"
            _unpack(e, x, f"%k{j}", hi)
            _unpack(e, xp, f"%r{8 + j}", hi)
    for i in range(8):
        e(f"neg.f32 %f0, %x{8 + i};")
        e(f"selp.f32 %f0, %f0, %x{8 + i}, %plo;")
        e(f"mul.f32 %f1, %f0, %y{8 + i};")
        e(f"fma.rn.f32 %x{i}, %x{i}, %y{i}, %f1;")
    for j in range(4):
        e(f"cvt.rn.bf16x2.f32 %k{j}, %x{2 * j + 1}, %x{2 * j};")
    e("NEW_ROPED:")
    e("// the cache rows (a valid page only)")
    if walk:
        e("setp.lt.u32 %pl, %pidl, %P;")
    e(f"mad.lo.u32 %r2, {'%pidl' if walk else '%pid'}, {PAGE}, %r0;")
    e(f"mad.lo.u32 %r2, %r2, {KV_HEADS}, %kvh;")
    e(f"mul.wide.u32 %a, %r2, {ROWB};")
    e("mul.wide.u32 %a2, %lane, 16;")
    e("add.s64 %a, %a, %a2;")
    e("add.s64 %a2, %pkp, %a;")
    e("@%pl st.global.v4.b32 [%a2], {%k0, %k1, %k2, %k3};")
    e("add.s64 %a2, %pvp, %a;")
    e("@%pl st.global.v4.b32 [%a2], {%k4, %k5, %k6, %k7};")
    e("NEW_DONE:")
    if walk:
        _cl_pages(e, "%W" if long else walk)
    else:
        e("cp.async.wait_all;")
        e("@!%pnew bra TILES_READY;")
        e("// the same lane zero-filled this chunk: its own cp.async completed above")
        e("and.b32 %r1, %r0, 15;")
        e(f"mad.lo.u32 %r2, %r1, {ROWB}, %sk;")
        e("and.b32 %r3, %r1, 1;")
        e("setp.eq.u32 %p, %r3, 1;")
        e("selp.b32 %r3, %sw1, %sw0, %p;")
        e("add.u32 %r2, %r2, %r3;")
        e("st.shared.v4.b32 [%r2], {%k0, %k1, %k2, %k3};")
        e(f"st.shared.v4.b32 [%r2+{TILE}], {{%k4, %k5, %k6, %k7}};")
        e("TILES_READY:")
        e("bar.warp.sync 0xffffffff;")
        _so(e)
        _scores(e)
        _softmax(e)
        _pv(e)
    e("// 8. the warp's l per head (sum over the column's 8 lanes), then (m, l, O) to shared memory: O over its K tile")
    _column_reduce(e, "%l", "add")
    e("bar.warp.sync 0xffffffff;  // every lane's K fragments read before O overwrites them")
    e("// O_w[head][dim] f32: lane (g, t) holds heads 2t, 2t+1 of dims dim_of(s, jj, g, half)")
    e("shl.b32 %r0, %t, 1;")
    e(f"mul.lo.u32 %r0, %r0, {HEAD_DIM * 4};")
    e("shr.u32 %r1, %g, 1;")
    e("shl.b32 %r1, %r1, 5;  // 8 (g / 2) dims")
    e("and.b32 %r2, %g, 1;")
    e("shl.b32 %r2, %r2, 2;")
    e("add.u32 %r1, %r1, %r2;")
    e("add.u32 %r0, %r0, %r1;")
    e("add.u32 %r0, %r0, %sk;")
    for s in range(SLABS):
        for jj in range(2):
            for half in range(2):
                off = 4 * (32 * s + 4 * jj + 2 * half)
                e(f"st.shared.f32 [%r0+{off}], %o{8 * s + 4 * jj + 2 * half};")
                e(f"st.shared.f32 [%r0+{off + HEAD_DIM * 4}], %o{8 * s + 4 * jj + 2 * half + 1};")
    e("setp.eq.u32 %p, %g, 0;")
    e("@!%p bra ML_DONE;")
    e("mov.u32 %r1, ml;")
    e("shl.b32 %r2, %warp, 6;")
    e("add.u32 %r1, %r1, %r2;")
    e("shl.b32 %r2, %t, 3;")
    e("add.u32 %r1, %r1, %r2;")
    e("st.shared.v2.f32 [%r1], {%m0, %m1};")
    e("st.shared.v2.f32 [%r1+32], {%l0, %l1};")
    e("ML_DONE:")
    e("bar.sync 0;")
    e("// 9. the CTA's (M, L, O) in warp order: thread th, head h = th / 16, dims d .. d + 15")
    e("mov.u32 %r1, ml;")
    e("shl.b32 %r2, %h, 2;")
    e("add.u32 %r1, %r1, %r2;")
    e("ld.shared.f32 %M, [%r1];")
    for w in range(1, WARPS):
        e(f"ld.shared.f32 %mw, [%r1+{64 * w}];")
        e("max.f32 %M, %M, %mw;")
    e(f"mul.f32 %mu0, %M, {f32(-CL)};")
    e(f"mad.lo.u32 %r3, %h, {HEAD_DIM}, %d;")
    e("shl.b32 %r3, %r3, 2;")
    e("add.u32 %r3, %r3, %sb;")
    for w in range(WARPS):
        e(f"ld.shared.f32 %mw, [%r1+{64 * w}];")
        e(f"ld.shared.f32 %lw, [%r1+{64 * w + 32}];")
        e(f"fma.rn.f32 %fw, %mw, {f32(CL)}, %mu0;")
        e("ex2.approx.ftz.f32 %fw, %fw;")
        for v in range(4):
            e(f"ld.shared.v4.f32 {{%y0, %y1, %y2, %y3}}, [%r3+{w * 2 * TILE + 16 * v}];")
            for i in range(4):
                a = f"%acc{4 * v + i}"
                e(f"mul.f32 {a}, %fw, %y{i};" if w == 0 else f"fma.rn.f32 {a}, %fw, %y{i}, {a};")
        e("mul.f32 %Lsum, %fw, %lw;" if w == 0 else "fma.rn.f32 %Lsum, %fw, %lw, %Lsum;")
    if walk:
        e("mov.pred %pl, %pall;  // every page of this CTA valid")
    if cluster:
        e("@%pone bra FINAL;")
        _cl_combine(e, cluster, long, push)
    else:
        if split:
            e(f"min.u32 %n, %n, {split};  // the partials: one a CTA with pages, at its rank")
        e("@%pone bra FINAL;")
        e("// 10. more than one page: this page's partial to ws, then the last CTA of (b, kvh) combines them in page order")
        e(f"mad.lo.u32 %r0, %b, {KV_HEADS}, %kvh;")
        e("mul.wide.u32 %a, %r0, 4;")
        e("add.s64 %pcnt, %pcnt, %a;")
        e("mul.lo.u32 %r0, %r0, %NP;")
        e(f"mul.wide.u32 %a, %r0, {PART * 4};")
        e("add.s64 %pws, %pws, %a;  // (b, kvh)'s page 0")
        e(f"mul.wide.u32 %a, %page, {PART * 4};")
        e("add.s64 %a, %pws, %a;")
        e(f"mad.lo.u32 %r0, %h, {HEAD_DIM}, %d;")
        e("mul.wide.u32 %a2, %r0, 4;")
        e("add.s64 %a2, %a, %a2;")
        for i in range(16):  # an invalid page: NaN partial
            e(f"selp.f32 %acc{i}, %acc{i}, 0f7FC00000, %pl;")
        for v in range(4):
            e(f"st.global.v4.f32 [%a2+{16 * v}], {{%acc{4 * v}, %acc{4 * v + 1}, %acc{4 * v + 2}, %acc{4 * v + 3}}};")
        e("setp.eq.u32 %p, %d, 0;")
        e("shl.b32 %r0, %h, 2;")
        e("cvt.u64.u32 %a2, %r0;")
        e("add.s64 %a2, %a, %a2;")
        e(f"@%p st.global.f32 [%a2+{HEAD_DIM * GROUP * 4}], %M;")
        e(f"@%p st.global.f32 [%a2+{HEAD_DIM * GROUP * 4 + 32}], %Lsum;")
        e("fence.acq_rel.gpu;")
        e("bar.sync 0;")
        e("setp.eq.u32 %p, %th, 0;")
        e("@%p atom.acq_rel.gpu.global.add.u32 %cnt, [%pcnt], 1;")
        e("@%p st.shared.u32 [ticket], %cnt;")
        e("bar.sync 0;")
        e("ld.shared.u32 %cnt, [ticket];")
        e("sub.u32 %r0, %n, 1;")
        e("setp.ne.u32 %p, %cnt, %r0;")
        e("@%p exit;")
        e("fence.acq_rel.gpu;")
        e(f"// the last CTA: M = max over pages, then O, L in page order (L2 loads: written by other CTAs of this grid); "
          f"{UNROLL} pages")
        e(f"// a trip, their loads issued together (one L2 round trip per {UNROLL} pages, not per page); pages >= n predicated off")
        e("shl.b32 %r0, %h, 2;")
        e("cvt.u64.u32 %a, %r0;")
        e("add.s64 %a, %pws, %a;  // page 0's m of head h; l at + 32")
        e(f"mad.lo.u32 %r0, %h, {HEAD_DIM}, %d;")
        e("mul.wide.u32 %a2, %r0, 4;")
        e("add.s64 %ro, %pws, %a2;  // page 0's O of this thread")
        e("mov.f32 %M, 0fFF800000;")
        e("mov.u32 %i, 0;")
        e("MAX_LOOP:")
        e(f"mul.wide.u32 %a2, %i, {PART * 4};")
        e("add.s64 %pk, %a, %a2;")
        for u in range(UNROLL):
            e(f"add.u32 %r0, %i, {u};")
            e(f"setp.lt.u32 %pu{u}, %r0, %n;")
            e(f"mov.f32 %mz{u}, 0fFF800000;")
            e(f"@%pu{u} ld.global.cg.f32 %mz{u}, [%pk+{u * PART * 4 + HEAD_DIM * GROUP * 4}];")
        for u in range(UNROLL):
            e(f"max.f32 %M, %M, %mz{u};")
        e(f"add.u32 %i, %i, {UNROLL};")
        e("setp.lt.u32 %p, %i, %n;")
        e("@%p bra MAX_LOOP;")
        e(f"mul.f32 %mu0, %M, {f32(-CL)};")
        for i in range(16):
            e(f"mov.f32 %acc{i}, 0f00000000;")
        e("mov.f32 %Lsum, 0f00000000;")
        e("mov.u32 %i, 0;")
        e("SUM_LOOP:")
        e(f"mul.wide.u32 %a2, %i, {PART * 4};")
        e("add.s64 %pk, %a, %a2;")
        e("add.s64 %pvv, %ro, %a2;")
        for u in range(UNROLL):
            e(f"add.u32 %r0, %i, {u};")
            e(f"setp.lt.u32 %pu{u}, %r0, %n;")
            e(f"@%pu{u} ld.global.cg.f32 %mz{u}, [%pk+{u * PART * 4 + HEAD_DIM * GROUP * 4}];")
            e(f"@%pu{u} ld.global.cg.f32 %lz{u}, [%pk+{u * PART * 4 + HEAD_DIM * GROUP * 4 + 32}];")
            for v in range(4):
                z = ", ".join(f"%z{16 * u + 4 * v + i}" for i in range(4))
                e(f"@%pu{u} ld.global.cg.v4.f32 {{{z}}}, [%pvv+{u * PART * 4 + 16 * v}];")
        for u in range(UNROLL):  # in page order
            e(f"@%pu{u} fma.rn.f32 %fw, %mz{u}, {f32(CL)}, %mu0;")
            e(f"@%pu{u} ex2.approx.ftz.f32 %fw, %fw;")
            for i in range(16):
                e(f"@%pu{u} fma.rn.f32 %acc{i}, %fw, %z{16 * u + i}, %acc{i};")
            e(f"@%pu{u} fma.rn.f32 %Lsum, %fw, %lz{u}, %Lsum;")
        e(f"add.u32 %i, %i, {UNROLL};")
        e("setp.lt.u32 %p, %i, %n;")
        e("@%p bra SUM_LOOP;")
        e("setp.eq.u32 %p, %th, 0;")
        e("@%p st.global.u32 [%pcnt], 0;  // the counter back to zero for the next launch")
        e("mov.pred %pl, 1;  // an invalid page already made its partial NaN")
    e("FINAL:")
    if long:
        e("// (long) the out address again: not kept live through the walk (registers)")
        e("ld.param.u64 %pout, [out];")
        e("cvta.to.global.u64 %pout, %pout;")
        _out_addr(e)
    e("// 11. out = bf16(O / L * sigmoid(gate)): gate[b, kvh * 8 + h, d .. d + 15]")
    e("rcp.rn.f32 %Lsum, %Lsum;")
    for j in range(8):
        for hi in (0, 1):
            i = 2 * j + hi
            _unpack(e, "%f0", f"%gt{j}", hi)
            e(f"mul.f32 %f0, %f0, {f32(-LOG2E)};")
            e("ex2.approx.ftz.f32 %f0, %f0;")
            e("add.f32 %f0, %f0, 0f3F800000;")
            e("rcp.approx.ftz.f32 %f0, %f0;")
            e(f"mul.f32 %f1, %acc{i}, %Lsum;")
            e(f"mul.f32 %acc{i}, %f1, %f0;")
            e(f"selp.f32 %acc{i}, %acc{i}, 0f7FC00000, %pl;")
    for j in range(8):
        e(f"cvt.rn.bf16x2.f32 %k{j}, %acc{2 * j + 1}, %acc{2 * j};")
    e("st.global.v4.b32 [%pout], {%k0, %k1, %k2, %k3};")
    e("st.global.v4.b32 [%pout+16], {%k4, %k5, %k6, %k7};")
    e("ret;")
    e("}")
    return "\n".join(L) + "\n"


def _first_page(e):
    """(walk) The CTA's first page (its rank, or walker index): K, then V, one commit group each; %pall from its id."""
    e("// K, then V of the first page (rank), one commit group each")
    _cl_issue(e, 0, "%pid", "%page")
    e("mov.pred %pall, %pl;")
    e("cp.async.commit_group;")
    _cl_issue(e, 1, "%pid", "%page")
    e("cp.async.commit_group;")


def _out_addr(e):
    """%pout += this thread's 16 outputs' offset; %h, %d: their head and first dim."""
    e("// out + ((b * 16 + kvh * 8 + h) * 256 + d) * 2 for this thread's 16 outputs (head h = th / 16, d = 16 (th % 16))")
    e("shr.u32 %h, %th, 4;")
    e("and.b32 %d, %th, 15;")
    e("shl.b32 %d, %d, 4;")
    e(f"mad.lo.u32 %r0, %b, {Q_HEADS}, %h;")
    e(f"mad.lo.u32 %r0, %kvh, {GROUP}, %r0;")
    e(f"mad.lo.u32 %r0, %r0, {HEAD_DIM}, %d;")
    e("mul.wide.u32 %a, %r0, 2;")
    e("add.s64 %pout, %pout, %a;")


def _cl_issue(e, half: int, pid: str, page: str):
    """(cluster) cp.async of the warp's 16 rows of page ``page`` (id ``pid``) into its K (``half`` 0) or V tile; rows at
    or past pos zero-filled, every row of an invalid id too (%pl: the id is valid). The caller commits."""
    base = "%pvp" if half else "%pkp"
    e(f"setp.lt.u32 %pl, {pid}, %P;")
    e(f"selp.b32 %ir1, {pid}, 0, %pl;  // an address inside the pool even where no byte is read")
    e(f"mad.lo.u32 %ir3, %ir1, {PAGE}, %w16;")
    e(f"mad.lo.u32 %ir3, %ir3, {KV_HEADS}, %kvh;")
    e(f"mul.wide.u32 %ai, %ir3, {ROWB};")
    e("add.s64 %ai, %ai, %lane16;")
    e(f"add.s64 %ai, {base}, %ai;")
    e(f"mad.lo.u32 %ir5, {page}, {PAGE}, %w16;  // the position of the warp's row 0")
    _copy_rows(e, (("%ai", 0),), "%ir5", "%ir6", "%ir7", "%pi", base=half * TILE)


def _copy_rows(e, srcs, row0: str, pos: str, dst: str, pred: str, base: int = 0):
    """The warp's 16 rows by cp.async: row i (position ``row0`` + i) from each (source row 0, tile offset) of ``srcs``
    to the tile at %sk + ``base``, chunk lane swizzled by the row's parity (%sw0 / %sw1); 16 bytes where the position
    is before pos and the page is valid (%pl), else zero-filled. ``pos``, ``dst``, ``pred``: scratch registers."""
    for i in range(16):
        e(f"add.u32 {pos}, {row0}, {i};")
        e(f"setp.lt.u32 {pred}, {pos}, %tok;")
        e(f"and.pred {pred}, {pred}, %pl;")
        e(f"selp.b32 %sz, 16, 0, {pred};")
        e(f"add.u32 {dst}, %sk, {i * ROWB + base};")
        e(f"add.u32 {dst}, {dst}, %sw{i & 1};")
        for src, off in srcs:
            e(f"cp.async.cg.shared.global [{dst}{f'+{off}' if off else ''}], [{src}+{i * KV_HEADS * ROWB}], 16, %sz;")


def _combiners(cluster: int) -> int:
    """The ranks that combine: the largest power of 2 not above the cluster size, at most 8 (each 2048 / that outputs,
    at least 2 a thread: one 4-byte gate load)."""
    return min(1 << (cluster.bit_length() - 1), 8)


def _gate_slice(e, cluster: int, rank: str = "%page"):
    """(cluster) This thread's slice of the combine: outputs 2048 / K rank + E th .. (K = _combiners, E = 16 / K) of
    the kv head's 8 heads, i.e. head %hd, dims %dm .. %dm + E - 1; their gate values (%gs) and the out address (%po2).
    Ranks K and up (a cluster size not a power of 2) combine nothing: %pslice false, no gate load. ``rank``: the
    register holding the CTA's rank in its cluster."""
    K = _combiners(cluster)
    E = 16 // K
    assert E in (2, 4, 8)
    e(f"// this thread's slice of the combine: head hd, dims dm .. dm + {E - 1} (outputs {GROUP * HEAD_DIM // K} rank "
      f"+ {E} th); its gate values and out address")
    if K != cluster:
        e(f"setp.lt.u32 %pslice, {rank}, {K};  // ranks {K}.. combine nothing")
    e(f"mul.lo.u32 %ir0, {rank}, {GROUP * HEAD_DIM // K};")
    e(f"mad.lo.u32 %ir0, %th, {E}, %ir0;")
    e(f"shr.u32 %hd, %ir0, {HEAD_DIM.bit_length() - 1};")
    e(f"and.b32 %dm, %ir0, {HEAD_DIM - 1};")
    e(f"mad.lo.u32 %ir1, %kvh, {GROUP}, %hd;")
    e("mul.lo.u32 %ir2, %ir1, %ghead;")
    e("mad.lo.u32 %ir2, %b, %grow, %ir2;")
    e("add.u32 %ir2, %ir2, %dm;")
    e("mul.wide.u32 %ai, %ir2, 2;")
    e("ld.param.u64 %po2, [gate];")
    e("cvta.to.global.u64 %po2, %po2;")
    e("add.s64 %ai, %po2, %ai;")
    gs = ", ".join(f"%gs{x}" for x in range(E // 2))
    ps = "@%pslice " if K != cluster else ""
    e(f"{ps}ld.global.b32 {gs}, [%ai];" if E == 2 else f"{ps}ld.global.v{E // 2}.b32 {{{gs}}}, [%ai];")
    e(f"mad.lo.u32 %ir2, %b, {Q_HEADS}, %ir1;")
    e(f"mad.lo.u32 %ir2, %ir2, {HEAD_DIM}, %dm;")
    e("mul.wide.u32 %ai, %ir2, 2;")
    e("ld.param.u64 %po2, [out];")
    e("cvta.to.global.u64 %po2, %po2;")
    e("add.s64 %po2, %po2, %ai;")


def _cl_pages(e, cluster: int | str):
    """(cluster) Steps 5-7 over this CTA's pages rank, rank + C, .. < n, in order. K and V are separate commit groups:
    the next page's K streams during this page's softmax and PV, its V during the next page's S. The warp's (m, l, O)
    are merged online (the running max %mr, l %lr, O %o). The new token's rows (%nk, kept from step 4) go over their
    zero-filled chunks when their page is up: this lane's own cp.async of those chunks has landed then. ``cluster``:
    the walk's stride (the long build's: the register %W = C S_eff)."""
    e("// 5-7, page by page over this CTA's pages rank, rank + C, .. (K and V double-issued, merged online)")
    e("and.b32 %r1, %tok, 15;")
    e(f"mad.lo.u32 %nka, %r1, {ROWB}, %sk;")
    e("and.b32 %r3, %r1, 1;")
    e("setp.eq.u32 %p, %r3, 1;")
    e("selp.b32 %r3, %sw1, %sw0, %p;")
    e("add.u32 %nka, %nka, %r3;  // row pos & 15 of the tile, this lane's chunk")
    for j in range(8):
        e(f"mov.b32 %nk{j}, %k{j};")
    _so(e)
    for j in (0, 1):
        e(f"mov.f32 %mr{j}, 0fFF800000;")
        e(f"mov.f32 %lr{j}, 0f00000000;")
    for i in range(SLABS * 8):
        e(f"mov.f32 %o{i}, 0f00000000;")
    e("mov.u32 %cpg, %page;")
    e("mov.u32 %it, 0;")
    e("PAGE_LOOP:")
    e(f"mad.lo.u32 %r5, %cpg, {PAGE}, %w16;  // the position of the warp's row 0")
    e("setp.eq.u32 %pw, %cpg, %last;")
    e("and.pred %pw, %pw, %pnew;")
    e("cp.async.wait_group 1;  // this page's K (its V may still be in flight)")
    e("@%pw st.shared.v4.b32 [%nka], {%nk0, %nk1, %nk2, %nk3};")
    e("bar.warp.sync 0xffffffff;")
    _scores(e)
    e("bar.warp.sync 0xffffffff;  // every lane's K fragments read: the tile takes the next page")
    e(f"add.u32 %pn, %cpg, {cluster};")
    e("setp.lt.u32 %pmore, %pn, %n;")
    e("@!%pmore bra K_ISSUED;")
    e("add.u32 %it, %it, 1;")
    e("mov.u32 %ir0, pids;")
    e("shl.b32 %ir1, %it, 2;")
    e("add.u32 %ir0, %ir0, %ir1;")
    e("ld.shared.u32 %pidc, [%ir0];")
    _cl_issue(e, 0, "%pidc", "%pn")
    e("and.pred %pall, %pall, %pl;")
    e("K_ISSUED:")
    e("cp.async.commit_group;  // (empty after the last page: the group count stays in step)")
    _softmax(e, online=True)
    e("cp.async.wait_group 1;  // this page's V")
    e(f"@%pw st.shared.v4.b32 [%nka+{TILE}], {{%nk4, %nk5, %nk6, %nk7}};")
    e("bar.warp.sync 0xffffffff;")
    _pv(e, init=False)
    e("bar.warp.sync 0xffffffff;  // every lane's V fragments read")
    e("@!%pmore bra V_ISSUED;")
    _cl_issue(e, 1, "%pidc", "%pn")
    e("V_ISSUED:")
    e("cp.async.commit_group;")
    e("mov.u32 %cpg, %pn;")
    e("@%pmore bra PAGE_LOOP;")
    for j in (0, 1):
        e(f"mov.f32 %m{j}, %mr{j};")
        e(f"mov.f32 %l{j}, %lr{j};")


def _slice(cluster: int) -> tuple[int, int]:
    """(push) The outputs each combining rank owns (a multiple of a head's 256) and the heads they span."""
    sl = GROUP * HEAD_DIM // _combiners(cluster)
    assert sl % HEAD_DIM == 0
    return sl, sl // HEAD_DIM


def _cl_push(e, cluster: int):
    """(push) Step 10: thread th's 16 outputs of the CTA's partial (head h, dims d ..) to the rank combining them
    (outputs r S .. : r = h / HS), at sender %page's place in its crx, and head h's (M, L) to its cmx, by st.async
    completing that rank's mbarrier; then the EMPTY entry's join. Every CTA of the cluster first waits on the barrier
    whose arrive followed the mbarrier's initialization (long passed by now)."""
    sl, hs = _slice(cluster)
    e(f"// 10. (push) this thread's 16 outputs and its head's (M, L) to the combining rank h / {hs}, by st.async")
    for i in range(16):  # an invalid page: NaN partial
        e(f"selp.f32 %acc{i}, %acc{i}, 0f7FC00000, %pl;")
    e("EMPTY_JOIN:")
    e("barrier.cluster.wait.aligned;  // every mbarrier of the cluster is initialized")
    e("@%pempty bra XCH_SENT;  // no partial of its own")
    e(f"shr.u32 %ir0, %h, {hs.bit_length() - 1};  // the combining rank" if hs > 1 else "mov.u32 %ir0, %h;  // the combining rank")
    e("mov.u32 %ir1, cmb;")
    e("mapa.shared::cluster.u32 %ir1, %ir1, %ir0;")
    e(f"and.b32 %ir2, %h, {hs - 1};  // the head within the slice")
    e(f"mad.lo.u32 %ir3, %ir2, {HEAD_DIM}, %d;")
    e(f"mad.lo.u32 %ir3, %page, {sl}, %ir3;")
    e("shl.b32 %ir3, %ir3, 2;")
    e("mov.u32 %ir4, crx;")
    e("add.u32 %ir3, %ir3, %ir4;")
    e("mapa.shared::cluster.u32 %ir3, %ir3, %ir0;")
    for v in range(4):
        regs = ", ".join(f"%acc{4 * v + i}" for i in range(4))
        e(f"st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%ir3+{16 * v}], {{{regs}}}, [%ir1];")
    e("setp.eq.u32 %p, %d, 0;")
    e("@!%p bra XCH_SENT;")
    e(f"mad.lo.u32 %ir3, %page, {hs}, %ir2;")
    e("shl.b32 %ir3, %ir3, 3;")
    e("mov.u32 %ir4, cmx;")
    e("add.u32 %ir3, %ir3, %ir4;")
    e("mapa.shared::cluster.u32 %ir3, %ir3, %ir0;")
    e("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%ir3], {%M, %Lsum}, [%ir1];")
    e("XCH_SENT:")


def _cl_receive(e, cluster: int):
    """(push) This thread's E outputs (slice outputs E th ..) over the nv = min(n, C) senders, from this CTA's crx and
    cmx once its mbarrier completes (thread 0 expects nv senders' bytes), into the _merge registers."""
    sl, hs = _slice(cluster)
    E = 16 // _combiners(cluster)
    e(f"// the partials of this CTA's slice from the {cluster} ranks with pages: {4 * sl + 8 * hs} bytes each")
    e(f"min.u32 %nv, %n, {cluster};")
    e("setp.eq.u32 %p, %th, 0;")
    e(f"mul.lo.u32 %ir0, %nv, {4 * sl + 8 * hs};")
    e("@%p mbarrier.arrive.expect_tx.shared::cta.b64 _, [cmb], %ir0;")
    e("XCH_WAIT:")
    e("mbarrier.try_wait.parity.shared::cta.b64 %p, [cmb], 0;")
    e("@!%p bra XCH_WAIT;")
    e("mov.u32 %r3, crx;")
    e(f"mad.lo.u32 %r3, %th, {4 * E}, %r3;")
    e("mov.u32 %r1, cmx;")
    if hs > 1:
        e(f"shr.u32 %r2, %th, {(HEAD_DIM // E).bit_length() - 1};  // the head within the slice")
        e("mad.lo.u32 %r1, %r2, 8, %r1;")
    _partials_in(e, cluster, E, lambda j: e(f"@%pj{j} ld.shared.v2.f32 {{%cm{j}, %cl{j}}}, [%r1+{8 * hs * j}];"),
                 lambda j, q, regs: e(f"@%pj{j} ld.shared.v{len(regs)}.f32 {{{', '.join(regs)}}}, [%r3+{4 * (sl * j + q)}];"))


def _partials_in(e, cluster: int, E: int, ml, o):
    """The merge's inputs from the cluster's nv partials: for each rank j, %pj{j} = j < nv, %cm{j} = -inf (an absent
    partial), then under %pj{j} ml(j) emits the loads of its M and L (%cm{j}, %cl{j}) and o(j, q, regs) those of its
    outputs q .. q + 3 of this thread's E (%co)."""
    for j in range(cluster):
        co = [f"%co{E * j + x}" for x in range(E)]
        e(f"setp.gt.u32 %pj{j}, %nv, {j};")
        e(f"mov.f32 %cm{j}, 0fFF800000;")
        ml(j)
        for q in range(0, E, 4):
            o(j, q, co[q:q + 4])


def _cl_combine(e, cluster: int, long: bool = False, push: bool = False):
    """(cluster) Step 10: the CTA's (M, L, O) to shared memory, a cluster barrier, then each CTA combines its slice of
    the outputs over the CTAs holding pages, in rank order (M first, then O and L), reading the others' shared memory;
    out = bf16(O / L * sigmoid(gate)); a second barrier keeps every CTA's partial alive until all have read it. Then
    the EMPTY entry: a CTA without pages (rank > last page) joins at the first barrier. ``long``: with S_eff > 1 the
    slice goes to ws instead (_cl_split), and the last cluster to arrive comes back to CL_OUT with the combined slice.
    ``push``: the partials come by st.async (_cl_push, _cl_receive): no cluster barrier after them, no remote load."""
    E = 16 // _combiners(cluster)
    if push:
        _cl_push(e, cluster)
        _cl_receive(e, cluster)
    else:
        _cl_pull(e, cluster, E)
    _merge(e, cluster, E, lambda j: f"%cm{j}", lambda j: f"%cl{j}", lambda j, x: f"%co{E * j + x}",
           lambda j: f"%pj{j}", max_pred=False)  # an absent partial's M is -inf: no predicate on the max
    if long:
        e(f"setp.gt.u32 %psplit, %W, {cluster};  // S_eff > 1: the slice goes through ws")
        e("@%psplit bra SPLIT_PART;")
        e("CL_OUT:")
    e("rcp.rn.f32 %Lsum, %Lsum;")
    for x in range(E):
        _unpack(e, "%f0", f"%gs{x // 2}", x % 2)
        e(f"mul.f32 %f0, %f0, {f32(-LOG2E)};")
        e("ex2.approx.ftz.f32 %f0, %f0;")
        e("add.f32 %f0, %f0, 0f3F800000;")
        e("rcp.approx.ftz.f32 %f0, %f0;")
        e(f"mul.f32 %f1, %acc{x}, %Lsum;")
        e(f"mul.f32 %acc{x}, %f1, %f0;")
    for x in range(0, E, 2):
        e(f"cvt.rn.bf16x2.f32 %k{x // 2}, %acc{x + 1}, %acc{x};")
    ks = ", ".join(f"%k{x}" for x in range(E // 2))
    e(f"st.global.b32 [%po2], {ks};" if E == 2 else f"st.global.v{E // 2}.b32 [%po2], {{{ks}}};")
    if not push:
        if _combiners(cluster) != cluster or long:
            e("COMBINED:")
        e("barrier.cluster.arrive.relaxed.aligned;")
        e("barrier.cluster.wait.aligned;  // no CTA leaves while another may still read its partial")
    e("ret;")
    if long:
        _cl_split(e, cluster)
    e("EMPTY:")
    e("// (cluster) no page of its own: it combines its slice")
    _gate_slice(e, cluster, "%rk" if long else "%page")
    e("bra EMPTY_JOIN;")


_LEAN = {"split": False, "cl": False}  # generate(lean_split): _cl_split without its two fences; (cl_restrict): _cl_pull


def _cl_pull(e, cluster: int, E: int):
    """(not push) The CTA's partial to its shared memory, a cluster barrier, then this thread's E outputs over the
    cluster's CTAs with pages read from theirs (the EMPTY entry joins at the barrier)."""
    e("// 10. (cluster) the CTA's partial for the cluster: O [8][256] f32 over warp 0's V tile (read by nobody now), M and")
    e("// L of its 8 heads to cml")
    for i in range(16):  # an invalid page: NaN partial
        e(f"selp.f32 %acc{i}, %acc{i}, 0f7FC00000, %pl;")
    e(f"mad.lo.u32 %r0, %h, {HEAD_DIM}, %d;")
    e("shl.b32 %r0, %r0, 2;")
    e("add.u32 %r0, %r0, %sb;")
    for v in range(4):
        e(f"st.shared.v4.f32 [%r0+{TILE + 16 * v}], {{%acc{4 * v}, %acc{4 * v + 1}, %acc{4 * v + 2}, %acc{4 * v + 3}}};")
    e("setp.eq.u32 %p, %d, 0;")
    e("mov.u32 %r1, cml;")
    e("shl.b32 %r2, %h, 2;")
    e("add.u32 %r1, %r1, %r2;")
    e("@%p st.shared.f32 [%r1], %M;")
    e(f"@%p st.shared.f32 [%r1+{4 * GROUP}], %Lsum;")
    e("EMPTY_JOIN:")
    if _LEAN["cl"]:
        e("fence.release.sync_restrict::shared::cta.cluster;  // this CTA's partial (shared::cta) before the arrive")
        e("barrier.cluster.arrive.relaxed.aligned;")
    else:
        e("barrier.cluster.arrive.release.aligned;")
    e("barrier.cluster.wait.acquire.aligned;  // every partial of the cluster written")
    if _combiners(cluster) != cluster:
        e("@!%pslice bra COMBINED;")
    e(f"// this thread's {E} outputs over CTAs 0 .. min(n, {cluster}) - 1 (those with pages), in rank order")
    e(f"min.u32 %nv, %n, {cluster};")
    e("mov.u32 %r1, cml;")
    e("shl.b32 %r2, %hd, 2;")
    e("add.u32 %r1, %r1, %r2;")
    e(f"mad.lo.u32 %r3, %hd, {HEAD_DIM}, %dm;")
    e("shl.b32 %r3, %r3, 2;")
    e("add.u32 %r3, %r3, %sb;")
    e(f"add.u32 %r3, %r3, {TILE};")
    def ml(j):  # rank j's M and L, then its outputs' address
        e(f"mapa.shared::cluster.u32 %r4, %r1, {j};")
        e(f"@%pj{j} ld.shared::cluster.f32 %cm{j}, [%r4];")
        e(f"@%pj{j} ld.shared::cluster.f32 %cl{j}, [%r4+{4 * GROUP}];")
        e(f"mapa.shared::cluster.u32 %r4, %r3, {j};")

    _partials_in(e, cluster, E, ml, lambda j, q, regs: e(
        f"@%pj{j} ld.shared::cluster.v{len(regs)}.f32 {{{', '.join(regs)}}}, [%r4+{4 * q}];"))


def _cl_long_start(e, cluster: int):
    """(long) The grid's S (%S = %nctaid.x / C), this sequence's S_eff = min(S, ceil(n / (C LONG_PAGES))) for its n
    pages, the walkers' stride %W = C S_eff, the CTA's rank %rk and cluster %cj; a cluster past S_eff exits (all its
    CTAs alike: no cluster barrier is pending)."""
    lc, lcp = cluster.bit_length() - 1, (cluster * LONG_PAGES).bit_length() - 1
    assert 1 << lc == cluster and 1 << lcp == cluster * LONG_PAGES
    e(f"// (long) S_eff = min(S, ceil(n / {cluster * LONG_PAGES})) clusters walk this sequence: at most {LONG_PAGES} "
      "pages a CTA before another joins; the rest exit")
    e(f"and.b32 %rk, %page, {cluster - 1};")
    e(f"shr.u32 %cj, %page, {lc};")
    e("mov.u32 %S, %nctaid.x;")
    e(f"shr.u32 %S, %S, {lc};")
    e(f"add.u32 %seff, %last, {cluster * LONG_PAGES};  // n - 1 + C LONG_PAGES")
    e(f"shr.u32 %seff, %seff, {lcp};")
    e("min.u32 %seff, %seff, %S;")
    e("setp.ge.u32 %p, %cj, %seff;")
    e("@%p exit;")
    e(f"shl.b32 %W, %seff, {lc};  // only %W stays live through the walk (registers: the rest is recomputed)")


def _cl_long_table(e, table: int):
    """(long) The CTA's page ids after pos (the stride C S_eff depends on it): thread th loads entries th + 128 u (page
    j C + r + C S_eff (th + 128 u)) where that page is live; stored to pids after q's loads are issued."""
    th = 32 * WARPS
    e(f"// (long) the page table: entry th + {th} u is page (j C + r) + C S_eff (th + {th} u), loaded where it is < n")
    for u in range(-(-table // th)):
        e(f"add.u32 %r1, %th, {th * u};")
        e("mad.lo.u32 %r1, %r1, %W, %page;")
        e(f"setp.lt.u32 %ptb{u}, %r1, %n;")
        e("mad.lo.u32 %r1, %b, %NP, %r1;")
        e("mul.wide.u32 %a2, %r1, 4;")
        e("add.s64 %a2, %pbt, %a2;")
        e(f"@%ptb{u} ld.global.nc.u32 %pidu{u}, [%a2];")


def _cl_split(e, cluster: int):
    """(long) SPLIT_PART, S_eff > 1: this thread's E outputs of the cluster's combined partial (O not yet divided by L)
    to ws[b, kvh, j] at head %hd, dims %dm.., and M, L of head %hd (the thread with %dm = 0); one arrival a CTA on
    counter (b, kvh, rank); the last of the S_eff clusters to arrive on it combines the slice over clusters 0 ..
    S_eff - 1 in order (every load first: one L2 round trip), zeroes the counter and takes the cluster path's CL_OUT
    (O / L, the gate, BF16). The others go to the cluster's second barrier."""
    E = 16 // cluster
    S = LONG_SPLITS[cluster]
    assert (E + 2) * S <= 64  # the loads' registers: %z
    v = f"v{E}." if E > 1 else ""
    lc = cluster.bit_length() - 1
    e("SPLIT_PART:")
    e("mov.u32 %ir0, %ctaid.x;")
    e(f"and.b32 %rk, %ir0, {cluster - 1};")
    e(f"shr.u32 %cj, %ir0, {lc};")
    e("mov.u32 %S, %nctaid.x;")
    e(f"shr.u32 %S, %S, {lc};")
    e(f"shr.u32 %seff, %W, {lc};")
    e("// (long) the cluster's partial of this slice to ws[b, kvh, j]: O [8][256] (not divided by L), then M [8], L [8]")
    e(f"mad.lo.u32 %ir0, %b, {KV_HEADS}, %kvh;")
    e("mad.lo.u32 %ir1, %ir0, %S, %cj;")
    e(f"mul.wide.u32 %ai, %ir1, {PART * 4};")
    e("add.s64 %ai, %pws, %ai;")
    e(f"mad.lo.u32 %ir2, %hd, {HEAD_DIM}, %dm;")
    e("mul.wide.u32 %a2, %ir2, 4;")
    e("add.s64 %a2, %ai, %a2;")
    acc = ", ".join(f"%acc{x}" for x in range(E))
    e(f"st.global.{v}f32 [%a2], {{{acc}}};")
    e("setp.eq.u32 %p, %dm, 0;")
    e("shl.b32 %ir2, %hd, 2;")
    e("cvt.u64.u32 %a2, %ir2;")
    e("add.s64 %a2, %ai, %a2;")
    e(f"@%p st.global.f32 [%a2+{HEAD_DIM * GROUP * 4}], %M;")
    e(f"@%p st.global.f32 [%a2+{HEAD_DIM * GROUP * 4 + 32}], %Lsum;")
    if not _LEAN["split"]:
        e("fence.acq_rel.gpu;")
    e("bar.sync 0;")
    e(f"mad.lo.u32 %ir2, %ir0, {cluster}, %rk;")
    e("mul.wide.u32 %a, %ir2, 4;")
    e("add.s64 %pcnt, %pcnt, %a;")
    e("setp.eq.u32 %p, %th, 0;")
    e("@%p atom.acq_rel.gpu.global.add.u32 %cnt, [%pcnt], 1;")
    e("@%p st.shared.u32 [ticket], %cnt;")
    e("bar.sync 0;")
    e("ld.shared.u32 %cnt, [ticket];")
    e("sub.u32 %ir2, %seff, 1;")
    e("setp.ne.u32 %p, %cnt, %ir2;")
    e("@%p bra COMBINED;  // not the last cluster of this slice")
    if not _LEAN["split"]:
        e("fence.acq_rel.gpu;")
    e(f"// the last: the slice over clusters 0 .. S_eff - 1 (at most {S}), every load first, then in cluster order")
    e("mul.lo.u32 %ir1, %ir0, %S;")
    e(f"mul.wide.u32 %ai, %ir1, {PART * 4};")
    e("add.s64 %ai, %pws, %ai;  // cluster 0's partial")
    e(f"mad.lo.u32 %ir2, %hd, {HEAD_DIM}, %dm;")
    e("mul.wide.u32 %a2, %ir2, 4;")
    e("add.s64 %a2, %ai, %a2;  // its O at this thread's outputs")
    e("shl.b32 %ir2, %hd, 2;")
    e("cvt.u64.u32 %ro, %ir2;")
    e("add.s64 %ro, %ai, %ro;  // its M of head hd; L at + 32")
    for j in range(S):
        z = [f"%z{(E + 2) * j + x}" for x in range(E + 2)]
        off = j * PART * 4
        e(f"setp.lt.u32 %pq{j}, {j}, %seff;")
        e(f"@%pq{j} ld.global.cg.f32 {z[E]}, [%ro+{off + HEAD_DIM * GROUP * 4}];")
        e(f"@%pq{j} ld.global.cg.f32 {z[E + 1]}, [%ro+{off + HEAD_DIM * GROUP * 4 + 32}];")
        zs = ", ".join(z[:E])
        e(f"@%pq{j} ld.global.cg.{v}f32 {{{zs}}}, [%a2+{off}];")
    _merge(e, S, E, lambda j: f"%z{(E + 2) * j + E}", lambda j: f"%z{(E + 2) * j + E + 1}",
           lambda j, x: f"%z{(E + 2) * j + x}", lambda j: f"%pq{j}", max_pred=True)
    e("setp.eq.u32 %p, %th, 0;")
    e("@%p st.global.u32 [%pcnt], 0;  // the counter back to zero for the next launch")
    e("bra CL_OUT;")


def _merge(e, n: int, E: int, m, l, o, pred, max_pred: bool):
    """%M, %Lsum and %acc0..E-1 from n partials in order (the cluster's CTAs, or the long build's clusters): partial j's
    max m(j), sum l(j) and outputs o(j, x) (registers), j > 0 under predicate pred(j) (its max too with ``max_pred``):
    M the max, then each partial weighted by 2^((m_j - M) log2(e) / 16). O is not divided by L here."""
    e(f"mov.f32 %M, {m(0)};")
    for j in range(1, n):
        e(f"{'@' + pred(j) + ' ' if max_pred else ''}max.f32 %M, %M, {m(j)};")
    e(f"mul.f32 %mu0, %M, {f32(-CL)};")
    for j in range(n):
        pj = "" if j == 0 else f"@{pred(j)} "
        e(f"{pj}fma.rn.f32 %fw, {m(j)}, {f32(CL)}, %mu0;")
        e(f"{pj}ex2.approx.ftz.f32 %fw, %fw;")
        for x in range(E):
            e(f"mul.f32 %acc{x}, %fw, {o(j, x)};" if j == 0 else f"{pj}fma.rn.f32 %acc{x}, %fw, {o(j, x)}, %acc{x};")
        e(f"mul.f32 %Lsum, %fw, {l(j)};" if j == 0 else f"{pj}fma.rn.f32 %Lsum, %fw, {l(j)}, %Lsum;")


def _so(e):
    """%so / %so1: this lane's K (and V) fragment addresses in the warp's tiles (%sk)."""
    e("// 5. S = K Q^T: rows g and g + 8 of the tile, chunk 4 s + t (swizzled by the row's parity: g and g + 8 alike)")
    e("// chunk 4 s + t of an odd row sits at chunk 4 (s ^ 1) + t: even slabs + 64, odd slabs - 64 there")
    e("and.b32 %r0, %g, 1;")
    e("shl.b32 %r0, %r0, 6;")
    e("shl.b32 %r1, %t, 4;")
    e(f"mad.lo.u32 %r3, %g, {ROWB}, %sk;")
    e("add.u32 %r3, %r3, %r1;")
    e("add.u32 %so, %r3, %r0;  // row g (and g + 8), slab s even at + 64 s")
    e("sub.u32 %so1, %r3, %r0;  // slab s odd at + 64 s")


def _scores(e):
    """%s0..3 = S = K Q^T over the warp's K tile."""
    for i in range(4):
        e(f"mov.f32 %s{i}, 0f00000000;")
    for s in range(SLABS):
        _slab_rows(e, s, 0)
        for j in range(2):
            e(f"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{%s0, %s1, %s2, %s3}}, "
              f"{{%k{2 * j}, %k{4 + 2 * j}, %k{2 * j + 1}, %k{5 + 2 * j}}}, {{%q{4 * s + 2 * j}, %q{4 * s + 2 * j + 1}}}, "
              f"{{%s0, %s1, %s2, %s3}};")


def _softmax(e, online: bool = False):
    """Mask, the heads' max, p as bf16 (%pa, %pb), this lane's l (%l0, %l1), the B fragments %b0, %b1. ``online`` (the
    cluster build's page loop): against the running max %mr0, %mr1, rescaling the running l (%lr) and O (%o) by
    2^((m_old - m_new) log2(e) / 16)."""
    e("// 6. mask positions past pos; per-head max over the 16 rows; p = 2^((s - m) log2(e) / 16) as bf16")
    e("add.u32 %r4, %r5, %g;")
    e("setp.le.u32 %pr0, %r4, %tok;")
    e("add.u32 %r4, %r4, 8;")
    e("setp.le.u32 %pr1, %r4, %tok;")
    e("selp.f32 %s0, %s0, 0fFF800000, %pr0;")
    e("selp.f32 %s1, %s1, 0fFF800000, %pr0;")
    e("selp.f32 %s2, %s2, 0fFF800000, %pr1;")
    e("selp.f32 %s3, %s3, 0fFF800000, %pr1;")
    e("max.f32 %m0, %s0, %s2;")
    e("max.f32 %m1, %s1, %s3;")
    _column_reduce(e, "%m", "max")
    if online:
        e("max.f32 %m0, %m0, %mr0;  // the running max over this warp's rows of the CTA's pages so far")
        e("max.f32 %m1, %m1, %mr1;")
    for j in (0, 1):
        e(f"setp.eq.f32 %p, %m{j}, 0fFF800000;")
        e(f"selp.f32 %mu{j}, 0f00000000, %m{j}, %p;")
        e(f"mul.f32 %mu{j}, %mu{j}, {f32(-CL)};")
    if online:
        for j in (0, 1):
            e(f"fma.rn.f32 %al{j}, %mr{j}, {f32(CL)}, %mu{j};  // alpha = 2^((m_old - m_new) log2(e) / 16); 0 from -inf")
            e(f"ex2.approx.ftz.f32 %al{j}, %al{j};")
            e(f"mov.f32 %mr{j}, %m{j};")
    for i in range(4):
        e(f"fma.rn.f32 %f{i}, %s{i}, {f32(CL)}, %mu{i % 2};")
        e(f"ex2.approx.ftz.f32 %f{i}, %f{i};")
    e("cvt.rn.bf16x2.f32 %pa, %f1, %f0;  // token g: heads 2t, 2t+1")
    e("cvt.rn.bf16x2.f32 %pb, %f3, %f2;  // token g + 8")
    e("// l of the rounded p (this lane's two tokens; summed over the column at the end)")
    _unpack(e, "%l0", "%pa", 0)
    _unpack(e, "%f4", "%pb", 0)
    e("add.f32 %l0, %l0, %f4;")
    _unpack(e, "%l1", "%pa", 1)
    _unpack(e, "%f4", "%pb", 1)
    e("add.f32 %l1, %l1, %f4;")
    if online:
        e("fma.rn.f32 %lr0, %lr0, %al0, %l0;")
        e("fma.rn.f32 %lr1, %lr1, %al1, %l1;")
    e("movmatrix.sync.aligned.m8n8.trans.b16 %b0, %pa;  // P rows (tokens) 0..7 -> B fragment: tokens 2t, 2t+1 of head g")
    e("movmatrix.sync.aligned.m8n8.trans.b16 %b1, %pb;")
    if online:
        e("// O *= alpha of its head (accumulator i: head 2t + (i & 1))")
        for i in range(SLABS * 8):
            e(f"mul.f32 %o{i}, %o{i}, %al{i % 2};")


def _pv(e, init: bool = True):
    """O^T += V^T P over the warp's V tile (``init``: O = 0 first)."""
    e("// 7. O^T = V^T P: each 16-byte V load (row g or g + 8, chunk 4 s + t) is four 8 x 8 blocks; transposed, the A")
    e("// fragments of tiles (s, 0) and (s, 1)")
    if init:
        for i in range(SLABS * 8):
            e(f"mov.f32 %o{i}, 0f00000000;")
    for s in range(SLABS):
        _slab_rows(e, s, TILE)
        for j in range(8):
            e(f"movmatrix.sync.aligned.m8n8.trans.b16 %tv{j}, %k{j};")
        for jj in range(2):
            o = [f"%o{8 * s + 4 * jj + i}" for i in range(4)]
            e(f"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{{', '.join(o)}}}, "
              f"{{%tv{2 * jj}, %tv{2 * jj + 1}, %tv{4 + 2 * jj}, %tv{5 + 2 * jj}}}, {{%b0, %b1}}, {{{', '.join(o)}}};")


def _slab_rows(e, s: int, off: int):
    """%k0..3 and %k4..7: chunk 4 s + t of the tile rows g and g + 8 (K at off 0, V at TILE), swizzled by the row's parity."""
    so = "%so1" if s % 2 else "%so"
    e(f"ld.shared.v4.b32 {{%k0, %k1, %k2, %k3}}, [{so}+{off + 64 * s}];")
    e(f"ld.shared.v4.b32 {{%k4, %k5, %k6, %k7}}, [{so}+{off + 64 * s + 8 * ROWB}];")


def _column_reduce(e, reg: str, op: str):
    """{reg}0 and {reg}1 (heads 2t, 2t+1) reduced by ``op`` over a column's 8 lanes (lane % 4 alike): shfl.bfly 4, 8, 16."""
    for x in (4, 8, 16):
        for j in (0, 1):
            e(f"shfl.sync.bfly.b32 %r{6 + j}, {reg}{j}, {x}, 0x1f, 0xffffffff;")
            e(f"mov.b32 %f{j}, %r{6 + j};")
            e(f"{op}.f32 {reg}{j}, {reg}{j}, %f{j};")


def _unpack(e, dst: str, src: str, hi: int):
    """bf16 half ``hi`` of the pair ``src`` as f32 in ``dst``."""
    e(f"{'and.b32 %r14, ' + src + ', 0xFFFF0000' if hi else 'shl.b32 %r14, ' + src + ', 16'};")
    e(f"mov.b32 {dst}, %r14;")


def _norm_weights(e):
    """Thread th: 1 + w of q_norm and k_norm at dims 2 th, 2 th + 1 (fp32, as qk_rmsnorm_d256 adds the 1) into nw,
    from %nwq, %nwk (loaded before the wait). After q's loads are issued, so q does not wait for them."""
    assert 2 * 32 * WARPS == HEAD_DIM
    e("// 1 + w of both norms into shared memory (fp32), thread th: dims 2 th, 2 th + 1")
    for reg, off in (("%nwq", 0), ("%nwk", 4 * HEAD_DIM)):
        _unpack(e, "%f0", reg, 0)
        _unpack(e, "%f1", reg, 1)
        e("add.rn.f32 %f0, %f0, 0f3F800000;")
        e("add.rn.f32 %f1, %f1, 0f3F800000;")
        e("mov.u32 %r9, nw;")
        e("shl.b32 %r10, %th, 3;")
        e("add.u32 %r9, %r9, %r10;")
        e(f"st.shared.v2.f32 [%r9+{off}], {{%f0, %f1}};")


def _norm_q(e):
    """q_norm on the q fragments %q0..31 (lane (g, t) of the quad holds slab s's dims 32 s + 8 t .. + 7 of head g in
    %q4s..): qk_rmsnorm_d256's lane c holds dims 8 c .. 8 c + 7, here c = 4 s + t, so its butterfly's steps 16, 8, 4
    pair slabs s ^ 4, s ^ 2, s ^ 1 of this thread and its steps 2, 1 the quad's lanes: the same sums, the same
    order. Then x r (1 + w) per dim, rounded to BF16."""
    e("// q_norm: the squares of each slab's 8 dims in order, then qk_rmsnorm_d256's butterfly (16, 8, 4 across this")
    e("// thread's slabs, 2 and 1 across the quad), rsqrt(mean + eps); q = bf16(q r (1 + w))")
    for s in range(SLABS):
        for j in range(4):
            for h in (0, 1):
                _unpack(e, f"%x{2 * j + h}", f"%q{4 * s + j}", h)
        e(f"mul.rn.f32 %z{s}, %x0, %x0;")
        for i in range(1, 8):
            e(f"fma.rn.f32 %z{s}, %x{i}, %x{i}, %z{s};")
    _norm_weights(e)
    for step in (4, 2, 1):  # lane c ^ 16, ^ 8, ^ 4: slab s ^ 4, ^ 2, ^ 1 (one add per pair: a + b == b + a)
        for s in range(step):
            e(f"add.rn.f32 %z{s}, %z{s}, %z{s + step};")
    for off in (2, 1):
        e(f"shfl.sync.bfly.b32 %r8, %z0, {off}, 31, -1;")
        e("mov.b32 %f0, %r8;")
        e("add.rn.f32 %z0, %z0, %f0;")
    e(f"fma.rn.f32 %z0, %z0, {f32(1.0 / HEAD_DIM)}, %eps;")
    e("rsqrt.approx.f32 %rn, %z0;")
    e("bar.sync 0;  // nw written")
    e("mov.u32 %r9, nw;")
    e("shl.b32 %r10, %t, 5;")
    e("add.u32 %r9, %r9, %r10;  // 1 + w at dims 8 t .. (+ 128 B a slab)")
    for s in range(SLABS):
        e(f"ld.shared.v4.f32 {{%y0, %y1, %y2, %y3}}, [%r9+{128 * s}];")
        e(f"ld.shared.v4.f32 {{%y4, %y5, %y6, %y7}}, [%r9+{128 * s + 16}];")
        for j in range(4):
            for h in (0, 1):
                _unpack(e, f"%x{2 * j + h}", f"%q{4 * s + j}", h)
        for i in range(8):
            e(f"mul.rn.f32 %x{i}, %x{i}, %rn;")
            e(f"mul.rn.f32 %x{i}, %x{i}, %y{i};")
        for j in range(4):
            e(f"cvt.rn.bf16x2.f32 %q{4 * s + j}, %x{2 * j + 1}, %x{2 * j};")


def _row_rsqrt(e, src: list[str]):
    """qk_rmsnorm_d256's sum on one head held as its lanes do (lane: dims 8 lane .. + 7 in the bf16 pairs ``src``): the
    8 values in %x0..7, their squares in order, butterfly 16 .. 1, %rn = rsqrt(mean + eps). The whole warp."""
    for j in range(4):
        for h in (0, 1):
            _unpack(e, f"%x{2 * j + h}", src[j], h)
    e("mul.rn.f32 %z0, %x0, %x0;")
    for i in range(1, 8):
        e(f"fma.rn.f32 %z0, %x{i}, %x{i}, %z0;")
    for off in (16, 8, 4, 2, 1):
        e(f"shfl.sync.bfly.b32 %r8, %z0, {off}, 31, -1;")
        e("mov.b32 %f0, %r8;")
        e("add.rn.f32 %z0, %z0, %f0;")
    e(f"fma.rn.f32 %z0, %z0, {f32(1.0 / HEAD_DIM)}, %eps;")
    e("rsqrt.approx.f32 %rn, %z0;")


def _norm_row(e, src: list[str], w: list[str]):
    """qk_rmsnorm_d256's arithmetic on one head held as its lanes do (lane: dims 8 lane .. + 7 in the 4 bf16 pairs
    ``src``, the weights' pairs in ``w``): 8 squares in order, butterfly 16 .. 1, rsqrt(mean + eps), x r (1 + w), BF16,
    back into ``src``. The whole warp."""
    _row_rsqrt(e, src)
    for j in range(4):
        for h in (0, 1):
            _unpack(e, f"%y{2 * j + h}", w[j], h)
    for i in range(8):
        e(f"add.rn.f32 %y{i}, %y{i}, 0f3F800000;")
        e(f"mul.rn.f32 %x{i}, %x{i}, %rn;")
        e(f"mul.rn.f32 %x{i}, %x{i}, %y{i};")
    for j in range(4):
        e(f"cvt.rn.bf16x2.f32 {src[j]}, %x{2 * j + 1}, %x{2 * j};")


def _norm_q_once(e):
    """(once) Warp w: heads 2 w, 2 w + 1 of the kv head's 8 (lane: dims 8 lane ..), normalized, to qs; one barrier;
    then every thread's fragments (head g, dims 32 s + 8 t .. of slab s) from qs."""
    e("// q_norm once a CTA: warp w normalizes heads 2 w and 2 w + 1 of the 8 (lane: dims 8 lane ..) into qs")
    e("shl.b32 %r3, %lane, 3;")
    for hh in (0, 1):
        e(f"mad.lo.u32 %r0, %kvh, {GROUP}, {hh};")
        e("mad.lo.u32 %r0, %warp, 2, %r0;")
        e("mul.lo.u32 %r0, %r0, %qhead;")
        e("mad.lo.u32 %r0, %b, %qrow, %r0;")
        e("add.u32 %r0, %r0, %r3;")
        e("mul.wide.u32 %a, %r0, 2;")
        e("add.s64 %a, %pq, %a;")
        e(f"ld.global.v4.b32 {{%q{4 * hh}, %q{4 * hh + 1}, %q{4 * hh + 2}, %q{4 * hh + 3}}}, [%a];")
    e("mov.u32 %r9, qs;")
    e(f"mad.lo.u32 %r9, %warp, {2 * QS_STRIDE}, %r9;")
    e("shl.b32 %r10, %lane, 4;")
    e("add.u32 %r9, %r9, %r10;")
    for hh in (0, 1):
        _norm_row(e, [f"%q{4 * hh + j}" for j in range(4)], [f"%wq{j}" for j in range(4)])
        e(f"st.shared.v4.b32 [%r9+{hh * QS_STRIDE}], {{%q{4 * hh}, %q{4 * hh + 1}, %q{4 * hh + 2}, %q{4 * hh + 3}}};")
    e("bar.sync 0;  // qs written")
    e("mov.u32 %r9, qs;")
    e(f"mad.lo.u32 %r9, %g, {QS_STRIDE}, %r9;")
    e("shl.b32 %r10, %t, 4;")
    e("add.u32 %r9, %r9, %r10;")
    for s in range(SLABS):
        e(f"ld.shared.v4.b32 {{%q{4 * s}, %q{4 * s + 1}, %q{4 * s + 2}, %q{4 * s + 3}}}, [%r9+{64 * s}];")


def _norm_k(e):
    """k_norm on the new token's k (lane: dims 8 lane .. 8 lane + 7 in %k0..3, qk_rmsnorm_d256's layout): its code."""
    e("// k_norm: qk_rmsnorm_d256's arithmetic on the same layout (8 squares in order, butterfly 16 .. 1)")
    _row_rsqrt(e, [f"%k{j}" for j in range(4)])
    e("mov.u32 %r9, nw;")
    e("shl.b32 %r10, %lane, 5;")
    e("add.u32 %r9, %r9, %r10;")
    e(f"ld.shared.v4.f32 {{%y0, %y1, %y2, %y3}}, [%r9+{4 * HEAD_DIM}];")
    e(f"ld.shared.v4.f32 {{%y4, %y5, %y6, %y7}}, [%r9+{4 * HEAD_DIM + 16}];")
    for i in range(8):
        e(f"mul.rn.f32 %x{i}, %x{i}, %rn;")
        e(f"mul.rn.f32 %x{i}, %x{i}, %y{i};")
    for j in range(4):
        e(f"cvt.rn.bf16x2.f32 %k{j}, %x{2 * j + 1}, %x{2 * j};")


def _rope(e, reg: str, lo: int, hi: int, cos: str, sin: str):
    """RoPE on the q fragments: registers {reg}{lo}..+3 hold dims 8t..8t+7 (slab 0), {reg}{hi}.. dims 32+8t.. (slab 1);
    %{cos}0..7 / %{sin}0..7 the tables at 8t.., %{cos}8..15 / %{sin}8..15 at 32+8t..; fp32, rounded to bf16."""
    for j in range(4):
        for h in (0, 1):
            _unpack(e, f"%x{2 * j + h}", f"%{reg}{lo + j}", h)
            _unpack(e, f"%x{8 + 2 * j + h}", f"%{reg}{hi + j}", h)
    for i in range(8):
        e(f"mul.f32 %f0, %x{8 + i}, %{sin}{i};")
        e("neg.f32 %f0, %f0;")
        e(f"fma.rn.f32 %y{i}, %x{i}, %{cos}{i}, %f0;  // dim 8t+{i}")
        e(f"mul.f32 %f1, %x{i}, %{sin}{8 + i};")
        e(f"fma.rn.f32 %y{8 + i}, %x{8 + i}, %{cos}{8 + i}, %f1;  // dim 32+8t+{i}")
    for j in range(4):
        e(f"cvt.rn.bf16x2.f32 %{reg}{lo + j}, %y{2 * j + 1}, %y{2 * j};")
        e(f"cvt.rn.bf16x2.f32 %{reg}{hi + j}, %y{8 + 2 * j + 1}, %y{8 + 2 * j};")


def main() -> int:
    for qknorm in (False, True):
        name = (ATTN_DECODE_QKNORM if qknorm else ATTN_DECODE).name
        (HERE / f"{name}.ptx").write_text(generate(qknorm))
        print(f"wrote {name}.ptx ({32 * WARPS} threads, {SMEM} B dynamic smem)")
    for c, contract in ATTN_CLUSTER.items():
        (HERE / f"{contract.name}.ptx").write_text(generate(True, cluster=c, trigger=True))
        print(f"wrote {contract.name}.ptx (clusters of {c}, triggering its dependents at the start)")
    for c, contract in ATTN_LONG.items():
        (HERE / f"{contract.name}.ptx").write_text(generate(True, cluster=c, long=True))
        print(f"wrote {contract.name}.ptx (up to {LONG_SPLITS[c]} clusters of {c})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
