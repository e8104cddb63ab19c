"""Generator of bf16_gemv_n64_k2048: the Gated DeltaNet's two small BF16 projections in one
launch, out_b[M, 32] = x[M, 2048] @ w_b^T and out_a[M, 32] = x @ w_a^T (in_proj_b and
in_proj_a together: 64 rows), M in 1..32. Contract netra.contracts.proj.BF16_GEMV_N64_K2048.
The generator only unrolls and names registers.

Design (v4; 256 KB of weights, latency-bound; v1-v3 in experiments/proj/bf16_variants/):
- 4 strips of 16 rows (w_b 0-15, 16-31, w_a 0-15, 16-31), one cluster of 4 CTAs per strip;
  rank r takes k in [512 r, 512 r + 512), so each CTA reads 16 KB of weights and M KB of x.
- Thread 0 bulk-copies (cp.async.bulk, one mbarrier) the strip's 16 weight rows and the M x
  rows of its k range into shared memory, rows padded to 1040 B so ldmatrix is
  conflict-free; x rows M..15 are zeroed by the other threads meanwhile.
- 4 warps, warp w the k16 steps 8 w .. 8 w + 7 of the CTA's range: ldmatrix.x4 gives the A
  fragments (16 rows x 16 k) and the B fragments of two n-tiles (16 tokens x 16 k: BF16 x
  is the mma's own input type, no conversion); mma.sync m16n8k16 bf16 -> f32, n-tile t (tokens
  8 t ..) only at M > 8 t; tokens 16..31 by a second ldmatrix.x4 only at M > 16 (since 9ca73b3:
  the runner's batch-32 step launched it twice, on 16-row chunks; each n-tile's mma is the
  chunk's, so the same bits).
- Every warp pushes its 16 x 8 t fp32 partial (t = 2 n-tiles, 4 at M > 16) to rank 0's shared
  memory with st.async ([warp slot][register][lane]), completing rank 0's mbarrier (which expects
  the bytes M calls for); rank 0 sums the 16 slots in slot order (rank-major, warp-minor: k order),
  rounds to BF16 and stores token < M.
  Deterministic. One cluster barrier at the start (the mbarriers initialized before any
  st.async), none at the end: rank 0 leaves after its mbarrier completed.
Measured against v1 (one weight row per warp, per-token FMA chains; M = 16 was 3.9x M = 1):
experiments/proj/bf16_variants/README.md.

  python3 kernels/sm_90a/proj/gen_bf16_gemv.py      (rewrites bf16_gemv_n64_k2048.ptx)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "src"))
from netra.contracts.proj import BA_K, BA_RANKS, BA_ROWB, BA_ROWS, BA_SMEM, BA_TOKENS, BA_WARPS  # noqa: E402  (written once)

NAME = f"bf16_gemv_n{2 * BA_ROWS}_k{BA_K}"
WARPS, RANKS, ROWB = BA_WARPS, BA_RANKS, BA_ROWB  # ROWB: padded rows, so the 8 rows of a ldmatrix hit 8 bank groups
STRIPS = 2 * BA_ROWS // 16
KR = BA_K // RANKS  # k per rank
MAXM = max(BA_TOKENS)
GRID = STRIPS * RANKS
assert KR == 8 * 16 * WARPS, "each warp takes 8 k16 steps"


def layout(tokens: int) -> tuple[int, int, int, int, int]:
    """(X_OFF, RED_OFF, SLOT, BAR_OFF, SMEM) for x rows of up to ``tokens``: 16 weight rows, the x rows,
    RANKS * WARPS partial slots of [tokens / 2 registers][32 lanes] fp32, two mbarriers (the copies, the partials)."""
    x_off = 16 * ROWB
    red_off = x_off + tokens * ROWB
    slot = tokens // 2 * 32 * 4
    bar_off = red_off + RANKS * WARPS * slot
    return x_off, red_off, slot, bar_off, bar_off + 16


W_OFF = 0
X_OFF, RED_OFF, SLOT, BAR_OFF, SMEM = layout(MAXM)
assert SMEM == BA_SMEM, "the contract's shared memory and this layout disagree"


ROWS = ("loads", "bulk", "cp_async")


PROMOTED = dict(rows="bulk", pdl=True, tokens=MAXM)  # the build in bf16_gemv_n64_k2048.ptx (32 rows since 9ca73b3)


def generate(rows: str = "bulk", pdl: bool = False, tokens: int = MAXM) -> str:
    """The PTX. ``rows``: how the weight and x rows reach shared memory. "loads" (promoted at
    e42af1d): 16-byte loads of every thread, then stores; ptxas interleaves each store right
    after its load, so only ~4 loads are in flight before the first store waits a DRAM round
    trip (SASS), which made it 0.6 us slower than "bulk" at M = 1. "bulk" (promoted; measured at
    58c88f0 and in experiments/proj/bf16_variant.json): 16 + M bulk copies from thread 0 onto an
    mbarrier. "cp_async" (measured beside it, slower at M = 1: 2.68 against 2.35 us): every
    thread's 16 LDGSTS, all in flight, x rows >= M zero-filled by a source size of 0. The same shared rows, so the same outputs bitwise.
    ``pdl`` (promoted: measured in experiments/gdn/pdl_chain_variant.json; "bulk" only): for a programmatic
    dependent launch, the weight rows' copies are issued before ``griddepcontrol.wait`` and the
    x rows' after it; every thread waits, then lets the next grid launch. ``tokens``: the largest M, 16 (the
    build before 9ca73b3, and the only one the "loads" and "cp_async" rows were written for) or 32 (promoted)."""
    assert rows in ROWS, f"rows: expected one of {ROWS}, got {rows!r}"
    assert not pdl or rows == "bulk", "pdl: the bulk-copy build only"
    assert tokens in (16, 32) and (rows == "bulk" or tokens == 16), "tokens: 16, or 32 with the bulk copies"
    tma = rows == "bulk"
    x_off, red_off, slot, bar_off, _ = layout(tokens)
    L: list[str] = []

    def e(s: str = ""):
        L.append(("  " + s) if s and not s.endswith(":") and not s.startswith("//") and not s.startswith(".") else s)

    e(f"// {NAME}: GDN in_proj_b and in_proj_a (BF16, {BA_ROWS} rows each, K = {BA_K}) in one launch, M <= {tokens}.")
    e("// Generated by gen_bf16_gemv.py (the design is there).")
    e(".version 8.1  // st.async")
    e(".target sm_90a")
    e(".address_size 64")
    e()
    e(".extern .shared .align 128 .b8 dsm[];")
    e()
    e(f".visible .entry {NAME}(")
    for p in ("x", "w_b", "w_a", "out_b", "out_a"):
        e(f"  .param .u64 {p},")
    e("  .param .u32 M")
    e(")")
    e(f".reqntid {32 * WARPS}")
    e(f".reqnctapercluster {RANKS}, 1, 1")
    e("{")
    e(".reg .pred %p, %pb, %pm8, %p0;" if tokens == 16 else ".reg .pred %p, %pb, %pm8, %pm16, %pm24, %p0;")
    e(".reg .b32 %th, %warp, %lane, %rank, %strip, %M, %s, %bcp, %bred, %sa, %sb, %t<6>, %g, %tig, %r, %tok, %row;")
    e(".reg .b32 %a<4>, %b<4>;" if rows != "loads" else ".reg .b32 %a<4>, %b<4>, %w<32>, %v<32>;")
    e(f".reg .f32 %c<{tokens // 2}>, %acc, %f0;")
    e(".reg .b16 %h;")
    e(".reg .b64 %px, %pw, %po, %pa, %pd;")
    e("ld.param.u64 %px, [x];")
    e("cvta.to.global.u64 %px, %px;")
    e("ld.param.u32 %M, [M];")
    e("mov.u32 %th, %tid.x;")
    e("shr.u32 %warp, %th, 5;")
    e("and.b32 %lane, %th, 31;")
    e("mov.u32 %rank, %cluster_ctarank;")
    e("mov.u32 %strip, %clusterid.x;")
    e(f"setp.lt.u32 %pb, %strip, {STRIPS // 2};  // w_b's strips, then w_a's")
    e("ld.param.u64 %pw, [w_b];")
    e("ld.param.u64 %pa, [w_a];")
    e("selp.b64 %pw, %pw, %pa, %pb;")
    e("cvta.to.global.u64 %pw, %pw;")
    e("mov.u32 %s, dsm;")
    e(f"add.u32 %bcp, %s, {bar_off};")
    e(f"add.u32 %bred, %s, {bar_off + 8};")
    e("setp.gt.u32 %pm8, %M, 8;  // a second n-tile of 8 tokens")
    if tokens == 32:
        e("setp.gt.u32 %pm16, %M, 16;  // tokens 16..23: the third n-tile, and its partials")
        e("setp.gt.u32 %pm24, %M, 24;")
    if tma:
        _rows_by_bulk_copies(e, pdl, tokens)
    else:
        _rows_by_loads(e, cp_async=rows == "cp_async")
    e("// 3. wait for the rows; warp w: k16 steps 8 w .. 8 w + 7 of this rank's range" if tma
      else "// 3. warp w: k16 steps 8 w .. 8 w + 7 of this rank's range")
    if tma:
        e("CP_WAIT:")
        e("mbarrier.try_wait.parity.shared::cta.b64 %p, [%bcp], 0;")
        e("@!%p bra CP_WAIT;")
    e("// ldmatrix row addresses: lane l gives row (l >> 3 & 1) 8 + l % 8, k + (l >> 4) 8 of A; token (l >> 4) 8 + l % 8,")
    e("// k + (l >> 3 & 1) 8 of B (tokens 16 + that from 16 rows further)")
    e("and.b32 %t0, %lane, 7;")
    e("shr.u32 %t1, %lane, 3;")
    e("and.b32 %t2, %t1, 1;")
    e("shr.u32 %t3, %t1, 1;")
    e("mad.lo.u32 %t4, %t2, 8, %t0;")
    e(f"mad.lo.u32 %sa, %t4, {ROWB}, %s;")
    e("mad.lo.u32 %sa, %t3, 16, %sa;")
    e(f"mad.lo.u32 %sa, %warp, {2 * 128}, %sa;")
    e(f"add.u32 %sa, %sa, {W_OFF};")
    e("mad.lo.u32 %t4, %t3, 8, %t0;")
    e(f"mad.lo.u32 %sb, %t4, {ROWB}, %s;")
    e("mad.lo.u32 %sb, %t2, 16, %sb;")
    e(f"mad.lo.u32 %sb, %warp, {2 * 128}, %sb;")
    e(f"add.u32 %sb, %sb, {x_off};")
    for i in range(tokens // 2):
        e(f"mov.f32 %c{i}, 0f00000000;")
    for i in range(8):
        e(f"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%a0, %a1, %a2, %a3}}, [%sa+{32 * i}];")
        e(f"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%b0, %b1, %b2, %b3}}, [%sb+{32 * i}];")
        e("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%c0, %c1, %c2, %c3}, {%a0, %a1, %a2, %a3}, {%b0, %b1}, "
          "{%c0, %c1, %c2, %c3};")
        e("@%pm8 mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%c4, %c5, %c6, %c7}, {%a0, %a1, %a2, %a3}, {%b2, %b3}, "
          "{%c4, %c5, %c6, %c7};")
        if tokens == 32:  # warp-uniform predicates: the ldmatrix is .aligned
            e(f"@%pm16 ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%b0, %b1, %b2, %b3}}, [%sb+{16 * ROWB + 32 * i}];")
            e("@%pm16 mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%c8, %c9, %c10, %c11}, {%a0, %a1, %a2, %a3}, "
              "{%b0, %b1}, {%c8, %c9, %c10, %c11};")
            e("@%pm24 mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%c12, %c13, %c14, %c15}, {%a0, %a1, %a2, %a3}, "
              "{%b2, %b3}, {%c12, %c13, %c14, %c15};")
    e(f"// 4. the warp's partial to rank 0's slot 4 rank + warp, [register][lane] ({slot} B; registers 8.. only at M > 16)")
    e("barrier.cluster.wait.aligned;  // every rank has started: rank 0's mbarrier is initialized")
    e(f"mad.lo.u32 %t0, %rank, {WARPS}, %warp;")
    e(f"mad.lo.u32 %t0, %t0, {slot}, %s;")
    e(f"add.u32 %t0, %t0, {red_off};")
    e("mad.lo.u32 %t0, %lane, 4, %t0;")
    e("mapa.shared::cluster.u32 %t1, %t0, 0;")
    e("mapa.shared::cluster.u32 %t2, %bred, 0;")
    for i in range(tokens // 2):
        e(f"{'@%pm16 ' if i >= 8 else ''}st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%t1+{128 * i}], %c{i}, [%t2];")
    e("setp.ne.u32 %p, %rank, 0;")
    e("@%p bra DONE;")
    e("// 5. rank 0: the 16 slots summed in slot order (k order); thread t: lane t % 32, registers t / 32 + 4 q")
    e("RED_WAIT:")
    e("mbarrier.try_wait.parity.shared::cta.b64 %p, [%bred], 0;")
    e("@!%p bra RED_WAIT;")
    e("ld.param.u64 %po, [out_b];")
    e("ld.param.u64 %pa, [out_a];")
    e("selp.b64 %po, %po, %pa, %pb;")
    e("cvta.to.global.u64 %po, %po;")
    e("shr.u32 %g, %lane, 2;")
    e("and.b32 %tig, %lane, 3;")
    for q in range(tokens // 8):
        if q == 2:
            e("@!%pm16 bra DONE;  // tokens 16.. pushed no partials")
        e(f"add.u32 %r, %warp, {4 * q};  // C register: n-tile r / 4, row g + 8 (r / 2 % 2), token 8 (r / 4) + 2 tig + r % 2")
        e(f"mad.lo.u32 %t0, %r, 128, %s;")
        e(f"add.u32 %t0, %t0, {red_off};")
        e("mad.lo.u32 %t0, %lane, 4, %t0;")
        e("ld.shared.f32 %acc, [%t0];")
        for sl in range(1, RANKS * WARPS):
            e(f"ld.shared.f32 %f0, [%t0+{slot * sl}];")
            e("add.f32 %acc, %acc, %f0;")
        e("shl.b32 %tok, %tig, 1;")
        e("and.b32 %t1, %r, 1;")
        e("add.u32 %tok, %tok, %t1;")
        e("shr.u32 %t1, %r, 2;")
        e("mad.lo.u32 %tok, %t1, 8, %tok;")
        e("shr.u32 %t1, %r, 1;")
        e("and.b32 %t1, %t1, 1;")
        e("mad.lo.u32 %row, %t1, 8, %g;")
        e("and.b32 %t1, %strip, 1;")
        e("mad.lo.u32 %row, %t1, 16, %row;  // the row of w_b or w_a")
        e("setp.lt.u32 %p, %tok, %M;")
        e("cvt.rn.bf16.f32 %h, %acc;")
        e(f"mad.lo.u32 %t1, %tok, {BA_ROWS}, %row;")
        e("mul.wide.u32 %pd, %t1, 2;")
        e("add.u64 %pd, %po, %pd;")
        e("@%p st.global.b16 [%pd], %h;")
    e("DONE:")
    e("ret;")
    e("}")
    return "\n".join(L) + "\n"


def _init_barriers(e, tokens: int = 16) -> None:
    """Thread 0 (the caller branches the others to ISSUED): the mbarriers; rank 0's expects every warp's partial
    (8 registers of each lane, 16 at M > 16)."""
    e("mbarrier.init.shared::cta.b64 [%bcp], 1;")
    e("mbarrier.init.shared::cta.b64 [%bred], 1;")
    e("setp.eq.u32 %p0, %rank, 0;")
    if tokens == 16:
        e(f"@%p0 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bred], {RANKS * WARPS * 1024};  // rank 0: every warp's partial")
    else:
        e(f"selp.b32 %t5, {RANKS * WARPS * 2048}, {RANKS * WARPS * 1024}, %pm16;")
        e("@%p0 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bred], %t5;  // rank 0: every warp's partial")
    e("fence.mbarrier_init.release.cluster;  // visible to the async proxy and to the other ranks")


def _rows_by_loads(e, cp_async: bool = False) -> None:
    """Every thread: 16-byte loads of the strip's weight rows and the x rows of this rank's k
    range (chunk c = th + 128 i: row c / 64, 0 for an x row >= M), issued before any store
    into the padded shared rows (in program order: ptxas moves the stores up); one barrier.
    ``cp_async``: the same chunks by cp.async.cg (global -> shared, no registers), one
    wait_all."""
    chunks = KR * 2 // 16  # 16-byte chunks per row
    per = 16 * chunks // (32 * WARPS)
    e("// 1. thread 0: mbarriers; every thread: the rows by 16-byte loads, all in flight at once")
    e("setp.ne.u32 %p, %th, 0;")
    e("@%p bra ISSUED;")
    _init_barriers(e)
    e("ISSUED:")
    e("barrier.cluster.arrive.relaxed.aligned;  // started, mbarriers initialized: waited on before the first st.async")
    e("and.b32 %t1, %strip, 1;")
    e(f"mul.lo.u32 %t1, %t1, {16 * 2 * BA_K};  // the strip's first row")
    e(f"mad.lo.u32 %t1, %rank, {2 * KR}, %t1;")
    e("and.b32 %t2, %th, 63;")
    e("mad.lo.u32 %t1, %t2, 16, %t1;")
    e("shr.u32 %t3, %th, 6;  // the thread's first row")
    e(f"mad.lo.u32 %t1, %t3, {2 * BA_K}, %t1;")
    e("cvt.u64.u32 %pd, %t1;")
    e("add.u64 %pa, %pw, %pd;")
    rows_per = 32 * WARPS // chunks

    def x_base() -> None:  # %pa = the thread's first chunk of x (row th / 64 of this rank's k range)
        e(f"mul.lo.u32 %t1, %rank, {2 * KR};")
        e("mad.lo.u32 %t1, %t2, 16, %t1;")
        e(f"mad.lo.u32 %t1, %t3, {2 * BA_K}, %t1;")
        e("cvt.u64.u32 %pd, %t1;")
        e("add.u64 %pa, %px, %pd;")

    if cp_async:
        e(f"mad.lo.u32 %t0, %t3, {ROWB}, %s;")
        e("mad.lo.u32 %t0, %t2, 16, %t0;")
        for i in range(per):
            e(f"cp.async.cg.shared.global [%t0+{W_OFF + i * rows_per * ROWB}], [%pa+{i * rows_per * 2 * BA_K}], 16;")
        x_base()
        for i in range(per):
            e(f"add.u32 %t4, %t3, {i * rows_per};")
            e("setp.lt.u32 %p, %t4, %M;")
            e("selp.b32 %t5, 16, 0, %p;  // a row >= M: nothing read, 16 zero bytes written")
            e(f"@%p cp.async.cg.shared.global [%t0+{X_OFF + i * rows_per * ROWB}], [%pa+{i * rows_per * 2 * BA_K}], 16, %t5;")
            e(f"@!%p cp.async.cg.shared.global [%t0+{X_OFF + i * rows_per * ROWB}], [%px], 16, %t5;  // x's row 0: in bounds")
        e("cp.async.wait_all;")
        e("bar.sync 0;")
        return
    for i in range(per):
        e(f"ld.global.nc.L1::no_allocate.v4.b32 {{%w{4 * i}, %w{4 * i + 1}, %w{4 * i + 2}, %w{4 * i + 3}}}, "
          f"[%pa+{i * rows_per * 2 * BA_K}];")
    x_base()
    for i in range(per):
        for q in range(4):
            e(f"mov.b32 %v{4 * i + q}, 0;")
        e(f"add.u32 %t4, %t3, {i * rows_per};")
        e("setp.lt.u32 %p, %t4, %M;")
        e(f"@%p ld.global.nc.v4.b32 {{%v{4 * i}, %v{4 * i + 1}, %v{4 * i + 2}, %v{4 * i + 3}}}, [%pa+{i * rows_per * 2 * BA_K}];")
    e(f"mad.lo.u32 %t0, %t3, {ROWB}, %s;")
    e("mad.lo.u32 %t0, %t2, 16, %t0;")
    for i in range(per):
        e(f"st.shared.v4.b32 [%t0+{W_OFF + i * rows_per * ROWB}], {{%w{4 * i}, %w{4 * i + 1}, %w{4 * i + 2}, %w{4 * i + 3}}};")
    for i in range(per):
        e(f"st.shared.v4.b32 [%t0+{X_OFF + i * rows_per * ROWB}], {{%v{4 * i}, %v{4 * i + 1}, %v{4 * i + 2}, %v{4 * i + 3}}};")
    e("bar.sync 0;")


def _rows_by_bulk_copies(e, pdl: bool = False, tokens: int = 16) -> None:
    """Thread 0: 16 + M bulk copies of 1 KB onto one mbarrier; the others zero x rows M..15 (M..31 at M > 16).
    ``pdl``: x's copies after griddepcontrol.wait (the weights' before it), then every thread
    waits and lets the dependent grid launch."""
    e("// 1. thread 0: mbarriers, then the strip's 16 weight rows and the M x rows of this rank's k range")
    e("setp.ne.u32 %p, %th, 0;")
    e("@%p bra ISSUED;")
    _init_barriers(e, tokens)
    e("add.u32 %t0, %M, 16;")
    e(f"mul.lo.u32 %t0, %t0, {2 * KR};")
    e("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bcp], %t0;")
    e("and.b32 %t1, %strip, 1;")
    e(f"mul.lo.u32 %t1, %t1, {16 * 2 * BA_K};  // the strip's first row")
    e(f"mad.lo.u32 %t1, %rank, {2 * KR}, %t1;")
    e("cvt.u64.u32 %pd, %t1;")
    e("add.u64 %pa, %pw, %pd;")
    for r in range(16):
        e(f"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%s+{W_OFF + r * ROWB}], [%pa+{r * 2 * BA_K}], "
          f"{2 * KR}, [%bcp];")
    if pdl:
        e("griddepcontrol.wait;  // x is the previous grid's output")
    e(f"mul.lo.u32 %t1, %rank, {2 * KR};")
    e("cvt.u64.u32 %pd, %t1;")
    e("add.u64 %pa, %px, %pd;")
    for t in range(tokens):
        e(f"setp.le.u32 %p, %M, {t};")
        e("@%p bra ISSUED;")
        e(f"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%s+{X_OFF + t * ROWB}], [%pa+{t * 2 * BA_K}], "
          f"{2 * KR}, [%bcp];")
    e("ISSUED:")
    if pdl:
        e("griddepcontrol.wait;  // every thread: its stores (out) follow the previous grid")
        e("griddepcontrol.launch_dependents;")
    e("barrier.cluster.arrive.relaxed.aligned;  // started, mbarriers initialized: waited on before the first st.async")
    chunks = KR * 2 // 16  # 16-byte chunks per row
    if tokens == 16:
        e("// 2. x rows M..15 to zero (the mma reads 8 or 16 token rows; disjoint from the bulk copies' rows)")
    else:
        e("// 2. x rows M..15, or M..31 at M > 16, to zero (the mma reads 8, 16, 24 or 32 token rows; disjoint from the")
        e("// bulk copies' rows)")
        e("selp.b32 %t5, 32, 16, %pm16;")
    for i in range(tokens * chunks // (32 * WARPS)):
        e(f"add.u32 %t0, %th, {32 * WARPS * i};")
        e(f"shr.u32 %t1, %t0, {chunks.bit_length() - 1};  // row")
        e("setp.ge.u32 %p, %t1, %M;")
        if tokens == 32 and i >= 16 * chunks // (32 * WARPS):  # rows 16..31: only where M > 16 reads them
            e("setp.lt.and.u32 %p, %t1, %t5, %p;")
        e(f"and.b32 %t2, %t0, {chunks - 1};")
        e(f"mad.lo.u32 %t3, %t1, {ROWB}, %s;")
        e("mad.lo.u32 %t3, %t2, 16, %t3;")
        e(f"@%p st.shared.v4.b32 [%t3+{X_OFF}], {{0, 0, 0, 0}};")
    e("bar.sync 0;")


def main() -> int:
    (HERE / f"{NAME}.ptx").write_text(generate(**PROMOTED))
    print(f"wrote {NAME}.ptx (grid {GRID}, clusters of {RANKS}, {32 * WARPS} threads, {SMEM} B dynamic smem)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
