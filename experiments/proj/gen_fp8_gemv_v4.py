"""v4 candidate for the fp8_gemv kernels (NOT MEASURED YET; `proj_variant.py v4` checks and
times it): one 16-row strip per CTA, no CTA-wide x prologue.

What v1-v3 taught (experiments/proj/README.md): the per-CTA conversion of all of x into
shared-memory fragments costs two dependent round trips and a barrier before the first mma,
and grows with M; cluster barriers per strip cost more than they save; and a launch timed by
graph replay reads 25 MB no faster than 7.8 us. So:
- grid = S strips (768 CTAs for 12288 x 2048), W = min(16, K / 128) warps, warp w owns
  k blocks [w KBW, (w + 1) KBW) of the CTA's strip: every weight load (the packed tiles,
  16-byte LDG) and every x load is issued at the start, independent of each other;
- each thread loads exactly the x values of its own B fragments (token g of its n-tile,
  k = 16 i + 2 tig, +1, +8, +9), so no shared memory and no barrier before the mma; the
  (token, k block) amax is the max over the 4 threads of the group (shfl.bfly 1, 2), and the
  power-of-two scale, the f16 conversion, the mma order, the weight-scale and inverse
  x-scale products are those of the promoted kernel: the outputs should be bitwise equal
  to it (the variant script checks that, besides float64);
- the inverse x scales of the C fragment's tokens (2 tig, 2 tig + 1) come by shfl.sync.idx
  from the lanes that computed them;
- one barrier: the W warps' 16 x 16 partials, then the warp-order sum and the BF16 store.
Registers: 16 per weight tile, 16 (32 with a second n-tile) of x per k block, 8 accumulators.

Prediction: M = 1 near the read ceiling of a 768 x 512 grid (7.8-8.5 us for 12288 x 2048),
M = 16 within 1.2x of M = 1 (only the mma and x loads double).

  python3 experiments/proj/gen_fp8_gemv_v4.py      (writes v4/*.ptx beside this file)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))
from netra import paths  # noqa: E402
from netra.contracts.proj import SHAPES  # noqa: E402

G = paths.load_module(HERE / "gen_fp8_gemv_v2.py", "gen_fp8_gemv_v2")  # v2 emitters (the [row][token] reduction)
Emit = G.Emit


VARIANTS = {  # name: (k blocks per warp, at most; .maxnreg or None; programmatic dependent launch)
    "v4a": (1, 64, False),  # 16 warps, one k block each; 64 registers for two 512-thread CTAs per SM (ptxas spills 32 B)
    "v4b": (4, None, False),  # 4 k blocks per warp: 128 threads at K = 2048, no register cap
    # PDL builds: the weight tiles are loaded before griddepcontrol.wait (weights are never
    # written while kernels run), x after it; the next grid may launch once every CTA started
    "v4a_pdl": (1, 64, True),
    "v4b_pdl": (4, None, True),
}


@dataclass(frozen=True)
class Geometry:
    """A shape with this candidate's split of its k blocks over warps."""

    name: str
    N: int
    K: int
    S: int
    KB: int
    KBW: int
    maxnreg: int | None
    pdl: bool = False

    @property
    def W(self) -> int:
        return self.KB // self.KBW


def geometry(sh, variant: str = "v4a") -> Geometry:
    kbw, maxnreg, pdl = VARIANTS[variant]
    return Geometry(sh.name, sh.N, sh.K, sh.S, sh.KB, min(kbw, sh.KB), maxnreg, pdl)


def launch_geometry(sh, variant: str = "v4a") -> tuple[int, int]:
    """(grid, threads): one CTA per strip, 32 W threads."""
    g = geometry(sh, variant)
    return g.S, 32 * g.W


def _x_fragments(e: Emit, q: int, nt: int) -> None:
    """x words of k block (warp's q-th) for n-tile nt into %xr{nt}_{q}_0..15 (the scale and
    the f16 conversion follow in _x_scale_and_convert, in place)."""
    X = f"%xr{nt}_{q}_"
    e(f"  // x of k block {q} of this warp, n-tile {nt}: token {8 * nt} + g")
    e(f"  add.u32 %tok, %g, {8 * nt};")
    e("  setp.lt.u32 %pv, %tok, %m;")
    e("  min.u32 %tok, %tok, 15;")
    e(f"  mad.lo.u32 %kb, %warp, %kbw, {q};")
    e("  mul.lo.u32 %t0, %tok, %K;")
    e("  mad.lo.u32 %t0, %kb, 128, %t0;")
    e("  shl.b32 %t1, %tig, 1;")
    e("  add.u32 %t0, %t0, %t1;  // k0 of step 0")
    e("  mul.wide.u32 %pt64, %t0, 2;")
    e("  add.u64 %pa, %px, %pt64;")
    for i in range(8):
        for h in range(2):
            e(f"  mov.b32 {X}{2 * i + h}, 0;")
            e(f"  @%pv ld.global.nc.u32 {X}{2 * i + h}, [%pa+{32 * i + 16 * h}];")


def _x_scale_and_convert(e: Emit, q: int, nt: int) -> None:
    X = H = f"%xr{nt}_{q}_"  # converted in place: the f16 fragments replace the BF16 words
    e(f"  // amax of (token, k block) over the group's 4 threads; scale; f16 fragments (k block {q}, n-tile {nt})")
    e("  mov.f32 %amax, 0f00000000;")
    for r in range(16):
        G.amax_update(e, f"{X}{r}")
    e("  shfl.sync.bfly.b32 %f2, %amax, 1, 31, 0xffffffff;")
    e("  max.f32 %amax, %amax, %f2;")
    e("  shfl.sync.bfly.b32 %f2, %amax, 2, 31, 0xffffffff;")
    e("  max.f32 %amax, %amax, %f2;")
    G.x_scale_bits(e)
    e("  mov.b32 %sc, %t2;")
    e(f"  mov.b32 %inv{nt}_{q}, %t3;")
    for r in range(16):
        G.bf16x2_to_f32(e, f"{X}{r}")
        e("  mul.f32 %f0, %f0, %sc;")
        e("  mul.f32 %f1, %f1, %sc;")
        e(f"  cvt.rn.f16x2.f32 {H}{r}, %f1, %f0;")


def generate(shape, variant: str = "v4a") -> str:
    sh = geometry(shape, variant)
    N, K, S, KB, W, KBW = sh.N, sh.K, sh.S, sh.KB, sh.W, sh.KBW
    e = Emit()
    e(f"// {sh.name} ({variant} candidate, experiments/proj/gen_fp8_gemv_v4.py): one strip of 16 rows per CTA, {W} warps,")
    e(f"// {KBW} k block(s) each; x fragments loaded per thread (no shared-memory prologue); grid {S}.")
    G.header(e)
    e()
    G.entry(e, sh.name)
    e(f".reqntid {32 * W}")
    if sh.maxnreg:
        e(f".maxnreg {sh.maxnreg}")
    e("{")
    e("  .reg .pred %p, %pm8, %pv, %pz;")
    e("  .reg .b32 %th, %warp, %lane, %g, %tig, %m, %s, %t0, %t1, %t2, %t3, %tok, %kb, %kbw, %K, %src;")
    e(f"  .reg .b32 %wa<{KBW * 16}>;")
    for nt in range(2):
        for q in range(KBW):
            e(f"  .reg .b32 %xr{nt}_{q}_<16>, %inv{nt}_{q};")
    e("  .reg .b32 %a<4>;")
    e("  .reg .b16 %q<8>;")
    e("  .reg .f32 %c<8>, %acc<8>, %f<8>, %ws, %xi<4>, %amax, %sc;")
    e("  .reg .b64 %px, %pw, %ps, %po, %pa, %pb, %pt64;")
    e(f"  .shared .align 16 .f32 red[{W * 256}];  // [warp][row][token]")
    G.load_params(e)
    e("  mov.u32 %s, %ctaid.x;  // this CTA's strip")
    e("  setp.gt.u32 %pm8, %m, 8;  // a second n-tile of 8 tokens")
    e(f"  mov.u32 %kbw, {KBW};")
    e(f"  mov.u32 %K, {K};")
    e("  // 1. the warp's weight tiles: w + (s * KB + warp * KBW + q) * 2048 + lane * 16 + 512 j")
    e(f"  mul.lo.u32 %t0, %s, {KB};")
    e(f"  mad.lo.u32 %t0, %warp, {KBW}, %t0;")
    e("  mul.wide.u32 %pt64, %t0, 2048;")
    e("  add.u64 %pa, %pw, %pt64;")
    e("  mul.wide.u32 %pt64, %lane, 16;")
    e("  add.u64 %pa, %pa, %pt64;")
    for q in range(KBW):
        for j in range(4):
            r = (q * 4 + j) * 4
            e(f"  ld.global.nc.L1::no_allocate.v4.u32 {{%wa{r}, %wa{r + 1}, %wa{r + 2}, %wa{r + 3}}}, [%pa+{q * 2048 + j * 512}];")
    if sh.pdl:
        e("  griddepcontrol.launch_dependents;  // every CTA of this grid has started: the next may launch")
        e("  griddepcontrol.wait;  // x (and the output, which the previous kernel may still read) from here")
    e("  // 2. per k block and n-tile: this thread's own x fragment values (n-tile 0's in flight with the")
    e("  //    weights; n-tile 1's, when M > 8, after n-tile 0's mma, to keep 2 CTAs of 512 threads per SM)")
    for i in range(8 if KBW > 1 else 0):
        e(f"  mov.f32 %acc{i}, 0f00000000;")
    for q in range(KBW):  # n-tile 0's x of every k block, issued before any is used
        _x_fragments(e, q, 0)
    for q in range(KBW):
        e(f"  mov.b32 %inv1_{q}, 0;  // stays 0 when M <= 8")
        for i in range(8):
            e(f"  mov.f32 %c{i}, 0f00000000;")
        for nt in range(2):
            if nt:
                e(f"  @!%pm8 bra NT1_SKIP_{q};")
                _x_fragments(e, q, nt)
            _x_scale_and_convert(e, q, nt)
            e(f"  // 3. k block {q}, n-tile {nt}: 8 k16 steps")
            for i in range(8):
                j, half = i // 2, i % 2
                base = (q * 4 + j) * 4 + 2 * half
                e(f"  mov.b32 {{%q0, %q1}}, %wa{base};")
                e(f"  mov.b32 {{%q2, %q3}}, %wa{base + 1};")
                for r in range(4):
                    e(f"  cvt.rn.f16x2.e4m3x2 %a{r}, %q{r};")
                c = ", ".join(f"%c{4 * nt + r}" for r in range(4))
                e(f"  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{c}}}, {{%a0, %a1, %a2, %a3}}, "
                  f"{{%xr{nt}_{q}_{2 * i}, %xr{nt}_{q}_{2 * i + 1}}}, {{{c}}};")
            if nt:
                e(f"NT1_SKIP_{q}:")
        e("  // scale: weight block (s / 8, kb) times the inverse x scales of tokens 2 tig, 2 tig + 1 (+ 8)")
        e(f"  mad.lo.u32 %kb, %warp, {KBW}, {q};")
        e("  shr.u32 %t0, %s, 3;")
        e(f"  mad.lo.u32 %t0, %t0, {KB}, %kb;")
        e("  mul.wide.u32 %pt64, %t0, 4;")
        e("  add.u64 %pb, %ps, %pt64;")
        e("  ld.global.nc.f32 %ws, [%pb];")
        e("  shl.b32 %src, %tig, 3;  // lane 4 (2 tig): token 2 tig of its n-tile")
        for nt in range(2):
            e(f"  shfl.sync.idx.b32 %t0, %inv{nt}_{q}, %src, 31, 0xffffffff;")
            e("  add.u32 %t1, %src, 4;")
            e(f"  shfl.sync.idx.b32 %t1, %inv{nt}_{q}, %t1, 31, 0xffffffff;")
            e(f"  mov.b32 %xi{2 * nt}, %t0;")
            e(f"  mov.b32 %xi{2 * nt + 1}, %t1;")
        for r in range(4):
            e(f"  mul.f32 %xi{r}, %xi{r}, %ws;")
        for r in range(8):  # acc starts at 0: with one k block per warp, c itself holds the scaled partial
            acc = f"%c{r}" if KBW == 1 else f"%acc{r}"
            add = "0f00000000" if KBW == 1 else f"%acc{r}"
            e(f"  fma.rn.f32 {acc}, %c{r}, %xi{(r // 4) * 2 + (r % 2)}, {add};")
    e("  // 4. partials to red[warp][row][token]; the warp-order sum; BF16 out")
    e("  mov.u32 %t0, red;")
    e("  mad.lo.u32 %t0, %warp, 1024, %t0;")
    if KBW == 1:
        for r in range(8):
            e(f"  mov.f32 %acc{r}, %c{r};")
    G.store_partials(e)
    e("  bar.sync 0;")
    G.sum_warps_store(e, 32 * W, W, N, "  mov.u32 %t0, red;", "DONE")
    e("DONE:")
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
