"""v5 candidate for the fp8_gemv kernels: a persistent weight stream (`proj_variant.py v5`
checks and times it).

What v1-v4 and the two read ceilings taught (README.md here): v4a (one strip per CTA, x
fragments per thread, no prologue barrier) is 1.4x faster than the promoted v2 at M = 1, but
each CTA still pays a load round trip and a barrier per 32 KB and converts x again, so M = 16
costs 2.6x M = 1; and a chain of PDL launches reads 25 MB in 6.1 us (95% of 4.33 TB/s)
where one plain launch needs 7.5. So:
- grid = min(S, 132) CTAs, one per SM; CTA c takes strips c, c + G, c + 2G, ...;
- one producer warp streams the CTA's weight chunks (16 k blocks of one strip, 32 KB,
  contiguous in the packed layout) into a ring of NS shared-memory stages with
  cp.async.bulk (L2 evict-first), against a full/empty mbarrier pair per stage: up to
  NS x 32 KB per SM in flight, no register cost, no per-strip round trip;
- W = min(16, K / 128) consumer warps, warp w owns k block h 16 + w of every chunk h: its x
  fragments (token g of the n-tile, k = 16 i + 2 tig, +1, +8, +9), their power-of-two scale
  and inverse are loaded and converted ONCE per CTA and stay in registers for every strip;
- per strip: wait full, four ld.shared.v4 per lane, arrive empty, 8 (16 when M > 8) mma,
  the weight-block scale (prefetched one strip ahead) times the inverse x scale; then the
  warps' 16 x 16 partials go to one of two reduction buffers, one named barrier among the
  consumers, the warp-order sum and the BF16 store (as the promoted kernel: deterministic,
  and bitwise the promoted kernel's output for K = 2048 and K = 512);
- `_pdl` builds: the producer's copies start before `griddepcontrol.wait` (weights are never
  written while kernels run); the consumers wait before they read x or write out.

Prediction: M = 1 within ~1 us of the plain read floor (7.5 us for 12288 x 2048, 8 us with
the tail of 768 / 132 strips), PDL chain near 6.5 us; M = 16 within 1.15x of M = 1 (x is
converted once per CTA; the mma work is hidden under the stream).

  python3 experiments/proj/gen_fp8_gemv_v5.py      (writes v5/ and v5_pdl/ beside this file)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))
from netra import paths  # noqa: E402
from netra.contracts.proj import SHAPES, SMS  # noqa: E402

G = paths.load_module(HERE / "gen_fp8_gemv_v2.py", "gen_fp8_gemv_v2")  # v2 emitters (the [row][token] reduction)
P = paths.generator("proj", "gen_fp8_gemv")  # the promoted v3 (from v7n3): x, bulk-copy and [token][row] emitters
Emit = G.Emit

VARIANTS = {  # name: (programmatic dependent launch, a producer warp, stages (None: what fits), partials [token][row], CTAs per SM)
    "v5": (False, True, None, False),  # a producer warp refills each stage when its empty mbarrier completes
    "v5_pdl": (True, True, None, False),
    "v6": (False, False, None, False),  # no producer warp: thread 0 refills a strip's stages after the per-strip barrier
    "v6_pdl": (True, False, None, False),
    # v7: v6 with few stages in flight (so chunks arrive in order, not all together at the end)
    # and the partials stored [token][row] (the warp-order sum reads them without bank conflicts)
    "v7n2": (False, False, 2, True),
    "v7n3": (False, False, 3, True),
    "v7n4": (False, False, 4, True),
    "v7n3_pdl": (True, False, 3, True),
    "v7n6": (False, False, None, True),
    # two CTAs per SM (grid 2 x 132, 2 stages each): one CTA's per-strip sum and barrier overlap the other's
    "v7n2x2": (False, False, 2, True, 2),
    "v7n2x2_pdl": (True, False, 2, True, 2),
}
SMEM_MAX = 227 * 1024


@dataclass(frozen=True)
class Geometry:
    name: str
    N: int
    K: int
    S: int
    KB: int
    pdl: bool
    producer_warp: bool
    stages: int | None = None
    transposed: bool = False
    ctas_per_sm: int = 1

    @property
    def W(self) -> int:  # consumer warps = k blocks per chunk
        return min(16, self.KB)

    @property
    def NC(self) -> int:  # chunks per strip
        return self.KB // self.W

    @property
    def SB(self) -> int:  # bytes per stage (one chunk)
        return self.W * 2048

    @property
    def NS(self) -> int:  # stages: what shared memory holds beside the reduction buffers, a multiple of NC
        room = (228 * 1024 // self.ctas_per_sm - 1024 if self.ctas_per_sm > 1 else SMEM_MAX) - 2 * self.W * 1024 - 256
        fit = min(room // (self.SB + 64) // self.NC * self.NC, 16)
        return fit if self.stages is None else min(fit, max(self.NC, self.stages // self.NC * self.NC))

    @property
    def threads(self) -> int:  # consumers (+ one producer warp)
        return 32 * (self.W + self.producer_warp)

    @property
    def scl_off(self) -> int:  # each stage's weight-block scales (W floats, one 16-B-multiple bulk copy)
        return self.NS * self.SB

    @property
    def red_off(self) -> int:
        return self.scl_off + self.NS * 64

    @property
    def bar_off(self) -> int:
        return self.red_off + 2 * self.W * 1024

    @property
    def smem(self) -> int:
        return self.bar_off + 16 * self.NS

    @property
    def grid(self) -> int:
        return min(self.S, SMS * self.ctas_per_sm)


def geometry(sh, variant: str = "v5") -> Geometry:
    return Geometry(sh.name, sh.N, sh.K, sh.S, sh.KB, *VARIANTS[variant])


def launch_geometry(sh, variant: str = "v5") -> tuple[int, int, int]:
    """(grid, threads, dynamic shared memory bytes)."""
    g = geometry(sh, variant)
    return g.grid, g.threads, g.smem


def _advance(e: Emit) -> None:
    """Next stage of the ring; the phase parity flips when it wraps."""
    e("  add.u32 %stage, %stage, 1;")
    e("  setp.eq.u32 %p, %stage, %ns;")
    e("  @%p mov.u32 %stage, 0;")
    e("  @%p xor.b32 %phase, %phase, 1;")


def _producer(e: Emit, sh: Geometry) -> None:
    """Warp W: lane 0 streams the CTA's chunks into the ring, each stage once its empty
    mbarrier completed (every consumer thread arrived)."""
    NS, NC, S = sh.NS, sh.NC, sh.S
    e("  // producer: lane 0 of warp W streams this CTA's chunks into the ring")
    if not sh.pdl:
        e(f"  bar.sync 2, {sh.threads};  // after the consumers issued their x loads: x is not queued behind the stream")
    e("  setp.ne.u32 %p, %lane, 0;")
    e("  @%p bra EXIT;")
    e("P_STRIP:")
    for h in range(NC):
        e(f"  // chunk {h}: wait until the consumers released the stage (the first round passes at once)")
        e("  mad.lo.u32 %be, %stage, 8, %bars;")
        e(f"  add.u32 %be, %be, {8 * NS};")
        e("  xor.b32 %t1, %phase, 1;")
        e(f"P_WAIT{h}:")
        e("  mbarrier.try_wait.parity.shared::cta.b64 %p, [%be], %t1;")
        e(f"  @!%p bra P_WAIT{h};")
        P.issue(e, sh, "%s", h, "%stage")
        _advance(e)
    e("  add.u32 %s, %s, %nct;")
    e(f"  setp.lt.u32 %p, %s, {S};")
    e("  @%p bra P_STRIP;")
    e("  bra EXIT;")


def generate(shape, variant: str = "v5") -> str:
    sh = geometry(shape, variant)
    N, K, S, W, NC, SB, NS = sh.N, sh.K, sh.S, sh.W, sh.NC, sh.SB, sh.NS
    e = Emit()
    e(f"// {sh.name} ({variant} candidate, experiments/proj/gen_fp8_gemv_v5.py): a persistent weight stream.")
    e(f"// grid min(S, {SMS * sh.ctas_per_sm}); {W} consumer warps{' + 1 producer warp' if sh.producer_warp else ''}; {NS} stages of {SB} B (cp.async.bulk),")
    e(f"// {NC} chunk(s) per strip; x fragments converted once per CTA; dynamic shared memory {sh.smem} B.")
    G.header(e)
    e()
    e(".extern .shared .align 128 .b8 dsm[];")
    e()
    G.entry(e, sh.name)
    e(f".reqntid {sh.threads}")
    e("{")
    e("  .reg .pred %p, %pm8, %pv, %pz, %pn;")
    e("  .reg .b32 %th, %warp, %lane, %g, %tig, %m, %s, %sn, %nct, %t0, %t1, %t2, %t3, %tok, %kb, %src;")
    e("  .reg .b32 %sbase, %bars, %stage, %st0, %phase, %ns, %buf, %bf, %be, %ta;")
    e("  .reg .b32 %wa<16>, %a<4>;")
    for nt in range(2):
        for h in range(NC):
            e(f"  .reg .b32 %xr{nt}_{h}_<16>, %inv{nt}_{h};")
    for h in range(NC):
        e(f"  .reg .f32 %ws{h};")
    e("  .reg .b16 %q<8>;")
    e("  .reg .f32 %c<8>, %acc<8>, %f<8>, %xs<4>, %amax, %sc;")
    e("  .reg .b64 %px, %pw, %ps, %po, %pa, %pb, %pt64, %pol;")
    G.load_params(e)
    e("  mov.u32 %s, %ctaid.x;  // this CTA's first strip; then += gridDim.x")
    e("  mov.u32 %nct, %nctaid.x;")
    e("  mov.u32 %sbase, dsm;")
    e(f"  add.u32 %bars, %sbase, {sh.bar_off};  // full[i] at bars + 8 i, empty[i] at bars + 8 (NS + i)")
    e(f"  mov.u32 %ns, {NS};")
    e("  createpolicy.fractional.L2::evict_first.b64 %pol, 1.0;  // weights are read once per step")
    e("  setp.ne.u32 %p, %th, 0;")
    e("  @%p bra INIT_DONE;")
    for i in range(NS):
        e(f"  mbarrier.init.shared::cta.b64 [%bars+{8 * i}], 1;")
        if sh.producer_warp:
            e(f"  mbarrier.init.shared::cta.b64 [%bars+{8 * (NS + i)}], {32 * W};")
    e("  fence.mbarrier_init.release.cluster;  // visible to the async proxy (the bulk copies)")
    if not sh.producer_warp and sh.pdl:
        e("  // the first NS chunks, before griddepcontrol.wait: weights do not depend on the previous kernel")
        P.issue_strips(e, sh, "%s", NS // NC, "0", "PRO_ISSUED")
    e("INIT_DONE:")
    e("  bar.sync 0;")
    if sh.pdl:
        e("  griddepcontrol.launch_dependents;  // every CTA of this grid has started: the next may launch")
    e("  mov.u32 %stage, 0;")
    e("  mov.u32 %phase, 0;")
    if not sh.producer_warp:
        e("  bra CONSUMER;")
    else:
        e(f"  setp.lt.u32 %p, %warp, {W};")
        e("  @%p bra CONSUMER;")
    # ---------------------------------------------------------------- producer
    if sh.producer_warp:
        _producer(e, sh)
    # ---------------------------------------------------------------- consumers
    e("CONSUMER:")
    if sh.pdl:
        e("  griddepcontrol.wait;  // x, and the output the previous kernel may still read, from here")
    e("  setp.gt.u32 %pm8, %m, 8;  // a second n-tile of 8 tokens")
    # every x load (both n-tiles; past M predicated off) before any is used, and before the
    # producer starts the stream; n-tile 1 without a branch (a branch made ptxas spill)
    for h in range(NC):
        for nt in range(2):
            P.x_fragments(e, h, nt, W, K)
    if not sh.pdl and sh.producer_warp:
        e(f"  bar.arrive 2, {sh.threads};  // x loads issued: the producer may start")
    if not sh.pdl and not sh.producer_warp:
        e("  // thread 0, after its x loads: the first NS chunks")
        e("  setp.ne.u32 %p, %th, 0;")
        e("  @%p bra PRO_ISSUED;")
        P.issue_strips(e, sh, "%s", NS // NC, "0", "PRO_ISSUED")
    for h in range(NC):
        for nt in range(2):
            P.x_convert(e, h, nt)
    e("  mov.u32 %buf, 0;")
    e("C_STRIP:")
    e("  mov.u32 %st0, %stage;  // this strip's first stage")
    for h in range(NC):
        e(f"  // chunk {h}: wait for its bytes, take this warp's tile, release the stage")
        e("  mad.lo.u32 %bf, %stage, 8, %bars;")
        e(f"C_WAIT{h}:")
        e("  mbarrier.try_wait.parity.shared::cta.b64 %p, [%bf], %phase;")
        e(f"  @!%p bra C_WAIT{h};")
        e(f"  mad.lo.u32 %ta, %stage, {SB}, %sbase;")
        e("  mad.lo.u32 %ta, %warp, 2048, %ta;")
        e("  mad.lo.u32 %ta, %lane, 16, %ta;")
        for j in range(4):
            e(f"  ld.shared.v4.u32 {{%wa{4 * j}, %wa{4 * j + 1}, %wa{4 * j + 2}, %wa{4 * j + 3}}}, [%ta+{512 * j}];")
        e("  mad.lo.u32 %t0, %stage, 64, %sbase;")
        e("  mad.lo.u32 %t0, %warp, 4, %t0;")
        e(f"  ld.shared.f32 %ws{h}, [%t0+{sh.scl_off}];  // weight-block scale (s / 8, h W + warp)")
        if sh.producer_warp:
            e(f"  add.u32 %be, %bf, {8 * NS};")
            e("  mbarrier.arrive.shared::cta.b64 _, [%be];  // release: the loads above are done with the stage")
        for i in range(8):
            e(f"  mov.f32 %c{i}, 0f00000000;")
        for i in range(8):
            j, half = i // 2, i % 2
            base = j * 4 + 2 * half
            e(f"  mov.b32 {{%q0, %q1}}, %wa{base};")
            e(f"  mov.b32 {{%q2, %q3}}, %wa{base + 1};")
            for r in range(4):
                e(f"  cvt.rn.f16x2.e4m3x2 %a{r}, %q{r};")
            e("  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%c0, %c1, %c2, %c3}, {%a0, %a1, %a2, %a3}, "
              f"{{%xr0_{h}_{2 * i}, %xr0_{h}_{2 * i + 1}}}, {{%c0, %c1, %c2, %c3}};")
            e("  @%pm8 mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%c4, %c5, %c6, %c7}, {%a0, %a1, %a2, %a3}, "
              f"{{%xr1_{h}_{2 * i}, %xr1_{h}_{2 * i + 1}}}, {{%c4, %c5, %c6, %c7}};")
        e("  // scale: weight block (s / 8, kb) times the inverse x scales of tokens 2 tig, 2 tig + 1 (+ 8),")
        e("  // from lanes 8 tig and 8 tig + 4 (shuffled here, not kept: fewer live registers across the loop)")
        e("  shl.b32 %src, %tig, 3;")
        e("  add.u32 %t2, %src, 4;")
        for nt in range(2):
            e(f"  shfl.sync.idx.b32 %t0, %inv{nt}_{h}, %src, 31, 0xffffffff;")
            e(f"  shfl.sync.idx.b32 %t1, %inv{nt}_{h}, %t2, 31, 0xffffffff;")
            e(f"  mov.b32 %xs{2 * nt}, %t0;")
            e(f"  mov.b32 %xs{2 * nt + 1}, %t1;")
        for r in range(4):
            e(f"  mul.f32 %xs{r}, %xs{r}, %ws{h};")
        for r in range(8):
            add = "0f00000000" if h == 0 else f"%acc{r}"
            e(f"  fma.rn.f32 %acc{r}, %c{r}, %xs{(r // 4) * 2 + (r % 2)}, {add};")
        _advance(e)
    e("  // the warps' partials to red[buf][warp][row][token]; the warp-order sum; BF16 out")
    e(f"  mad.lo.u32 %t0, %buf, {W * 1024}, %sbase;")
    e(f"  add.u32 %t0, %t0, {sh.red_off};")
    e("  mad.lo.u32 %t0, %warp, 1024, %t0;")
    if sh.transposed:
        P.store_partials(e)
    else:
        G.store_partials(e)
    e(f"  bar.sync 1, {32 * W};  // consumers only")
    if not sh.producer_warp:
        e("  // every warp is done with this strip's stages: thread 0 refills them with strip s + (NS / NC) G")
        e("  setp.ne.u32 %p, %th, 0;")
        e("  @%p bra REFILLED;")
        e("  fence.proxy.async.shared::cta;  // the generic reads of the stages before the async-proxy writes")
        e(f"  mad.lo.u32 %t2, %nct, {NS // NC}, %s;")
        P.issue_strips(e, sh, "%t2", 1, "%st0", "REFILLED")
    red = f"  mad.lo.u32 %t0, %buf, {W * 1024}, %sbase;\n  add.u32 %t0, %t0, {sh.red_off};"
    if sh.transposed:
        P.sum_warps_store(e, 32 * W, W, N, red, "SUM_DONE")
    else:
        G.sum_warps_store(e, 32 * W, W, N, red, "SUM_DONE")
    e("SUM_DONE:")
    e("  xor.b32 %buf, %buf, 1;")
    e("  add.u32 %s, %s, %nct;")
    e(f"  setp.lt.u32 %p, %s, {S};")
    e("  @%p bra C_STRIP;")
    e("EXIT:")
    e("  ret;")
    e("}")
    return e.text()


def main() -> int:
    for variant in VARIANTS:
        out = HERE / variant
        out.mkdir(exist_ok=True)
        for sh in SHAPES:
            (out / f"{sh.name}.ptx").write_text(generate(sh, variant))
        print(f"wrote {len(SHAPES)} kernels to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
