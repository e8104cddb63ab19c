"""v2 of the fp8_gemv kernels (promoted at cdce753, replaced by the persistent weight stream
of kernels/sm_90a/proj/gen_fp8_gemv.py; kept so its numbers can be reproduced and because
the v3/v4 candidates reuse its emitters). `python3 experiments/proj/gen_fp8_gemv_v2.py`
writes v2/*.ptx beside it. Its original docstring follows.

Generator of the fp8_gemv_n<N>_k<K> kernels: out[M, N] = x[M, K] @ dequant(W)^T for
M in 1..16 (decode batch or verification tokens), FP8 E4M3 weights with 128x128 block
scales, BF16 activations and output, fp32 accumulation. Writes one .ptx per shape beside
this file; `python kernels/sm_90a/proj/gen_fp8_gemv.py` regenerates them and a CPU test
checks that the committed files are current. The generator only unrolls and names
registers; every instruction below is chosen by hand.

Design (a memory-bound skinny GEMM, "swap AB" on the tensor cores):
- mma.sync m16n8k16 f16 -> f32 with A = 16 weight rows x 16 k and B = 16 k x 8 tokens.
  E4M3 converts exactly to f16 (cvt.rn.f16x2.e4m3x2, two weights per instruction).
- BF16 activations are not all representable in f16, so each CTA first converts x once to
  f16 in the B-fragment order in shared memory, each (token, 128-k block) scaled by a power
  of two that puts its largest |x| in [2^14, 2^15): exact except for values 28+ binades
  below that maximum. The inverse scale and the weight block's scale are applied to each
  k block's fp32 partial sum.
- Weights are repacked once at load (netra.ops.proj.pack_weight): tile (strip s of 16 rows,
  k block b) is 2048 contiguous bytes; lane t's 64 bytes are its A fragments for the 8
  k16 steps, stored as 4 chunks of 512 B (chunk j: steps 2j and 2j+1, lane t at 16 t), so a
  warp reads each tile with four fully coalesced 16-byte loads per lane.
- CTA: W = min(16, K / 128) warps, warp w owns k blocks [w KBW, (w + 1) KBW). The CTA walks
  strips s = blockIdx.x, += gridDim.x; the next strip's weights are loaded while the
  current one is multiplied. Per strip, the warps' 16 x 16 partials are summed in warp
  order through shared memory (two buffers, one barrier per strip): deterministic.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))
from netra import paths  # noqa: E402
from netra.contracts.proj import SHAPES, Fp8Gemv  # noqa: E402


P = paths.generator("proj", "gen_fp8_gemv")  # the promoted generator: the emitters both share
Emit, bf16x2_to_f32, header, entry, load_params = P.Emit, P.bf16x2_to_f32, P.header, P.entry, P.load_params
amax_update, x_scale_bits = P.amax_update, P.x_scale_bits
SMS = 132


@dataclass(frozen=True)
class Shape:
    """v2's tiling of a contract shape (netra.contracts.proj.Fp8Gemv at cdce753)."""

    shape: Fp8Gemv

    def __getattr__(self, k):
        return getattr(self.shape, k)

    @property
    def W(self) -> int:
        return min(16, self.shape.KB)

    @property
    def KBW(self) -> int:
        return self.shape.KB // self.W

    @property
    def threads(self) -> int:
        return 32 * self.W

    @property
    def ctas_per_sm(self) -> int:
        return 2 if 2 * self.smem <= 227 * 1024 and 2 * self.threads <= 1024 else 1

    @property
    def max_registers(self) -> int:
        return min(248, 65536 // (self.threads * self.ctas_per_sm) // 8 * 8)

    @property
    def grid(self) -> int:
        return min(self.shape.S, SMS * self.ctas_per_sm)

    @property
    def xs_off(self) -> int:
        return self.shape.K * 32

    @property
    def xi_off(self) -> int:
        return self.xs_off + 64 * self.shape.KB

    @property
    def red_off(self) -> int:
        return self.xi_off + 64 * self.shape.KB

    @property
    def smem(self) -> int:
        return self.red_off + 2 * self.W * 1024


def fragment_store(e: Emit) -> None:
    """Fragment entry %t0: x[k0, k0 + 1] and x[k0 + 8, k0 + 9] at [%pa] (when %pv) times %sc,
    as two f16x2, to shared memory at %sxf + 8 %t0."""
    e("  mov.b32 %xw0, 0;")
    e("  mov.b32 %xw1, 0;")
    e("  @%pv ld.global.nc.u32 %xw0, [%pa];")
    e("  @%pv ld.global.nc.u32 %xw1, [%pa+16];")
    for w_ in range(2):
        bf16x2_to_f32(e, f"%xw{w_}")
        e("  mul.f32 %f0, %f0, %sc;")
        e("  mul.f32 %f1, %f1, %sc;")
        e(f"  cvt.rn.f16x2.f32 %h{w_}, %f1, %f0;  // upper half k0 + 1, lower k0")
    e("  shl.b32 %t1, %t0, 3;")
    e("  add.u32 %t1, %sxf, %t1;")
    e("  st.shared.v2.b32 [%t1], {%h0, %h1};")


def mma_steps(e: Emit, regs: str, q: int, off0: int) -> None:
    """The 8 k16 steps of weight tile q (registers regs), B fragments at %sb + off0 + 512 i."""
    for i in range(8):
        j, half = i // 2, i % 2
        base = (q * 4 + j) * 4 + 2 * half
        e(f"  mov.b32 {{%q0, %q1}}, {regs}{base};")
        e(f"  mov.b32 {{%q2, %q3}}, {regs}{base + 1};")
        for r in range(4):
            e(f"  cvt.rn.f16x2.e4m3x2 %a{r}, %q{r};")
        e(f"  ld.shared.v2.b32 {{%b0, %b1}}, [%sb+{off0 + i * 512}];")
        e("  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%c0, %c1, %c2, %c3}, {%a0, %a1, %a2, %a3}, "
          "{%b0, %b1}, {%c0, %c1, %c2, %c3};")
        e(f"  @%pm8 ld.shared.v2.b32 {{%b2, %b3}}, [%sb+{off0 + i * 512 + 256}];")
        e("  @%pm8 mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%c4, %c5, %c6, %c7}, {%a0, %a1, %a2, %a3}, "
          "{%b2, %b3}, {%c4, %c5, %c6, %c7};")


def scale_accumulate(e: Emit, strip: str, KB: int, xi_kb: int, xi_kb_op: str) -> None:
    """%acc += %c x weight scale (strip / 8, %kb) x each token's inverse x scale, read from
    %sxi + 4 (token xi_kb + xi_kb_op)."""
    e("  // scale: weight block (s / 8, kb) times each token's inverse x scale")
    e(f"  shr.u32 %t0, {strip}, 3;")
    e(f"  mad.lo.u32 %t0, %t0, {KB}, %kb;")
    e("  mul.wide.u32 %pt64, %t0, 4;")
    e("  add.u64 %pb, %ps, %pt64;")
    e("  ld.global.nc.f32 %ws, [%pb];")
    e("  shl.b32 %t0, %tig, 1;")
    e(f"  mad.lo.u32 %t0, %t0, {xi_kb}, {xi_kb_op};  // token 2 tig")
    e("  shl.b32 %t0, %t0, 2;")
    e("  add.u32 %t0, %sxi, %t0;")
    e("  ld.shared.f32 %xi0, [%t0];")
    e(f"  ld.shared.f32 %xi1, [%t0+{xi_kb * 4}];")
    e(f"  ld.shared.f32 %xi2, [%t0+{xi_kb * 4 * 8}];")
    e(f"  ld.shared.f32 %xi3, [%t0+{xi_kb * 4 * 9}];")
    for r in range(4):
        e(f"  mul.f32 %xi{r}, %xi{r}, %ws;")
    for r in range(8):
        e(f"  fma.rn.f32 %acc{r}, %c{r}, %xi{(r // 4) * 2 + (r % 2)}, %acc{r};")


def store_partials(e: Emit) -> None:
    """The warp's 16 x 16 partials %acc to [row][token] fp32 at %t0 (rows g and g + 8)."""
    e("  mad.lo.u32 %t1, %g, 64, %t0;")
    e("  mad.lo.u32 %t1, %tig, 8, %t1;")
    e("  st.shared.v2.f32 [%t1], {%acc0, %acc1};")
    e("  st.shared.v2.f32 [%t1+512], {%acc2, %acc3};")
    e("  st.shared.v2.f32 [%t1+32], {%acc4, %acc5};")
    e("  st.shared.v2.f32 [%t1+544], {%acc6, %acc7};")


def sum_warps_store(e: Emit, threads: int, W: int, N: int, red_base: str, done: str) -> None:
    """Output o = tid + threads r < 16 M: row o % 16, token o / 16; the W warps' partials at
    red_base (the line that sets %t0) + 1024 w summed in warp order, BF16 to out[token, 16 s + row]."""
    e("  shl.b32 %t1, %m, 4;")
    for r in range(-(-256 // threads)):
        e(f"  add.u32 %t0, %th, {r * threads};")
        e("  setp.ge.u32 %p, %t0, %t1;")
        e(f"  @%p bra {done};")
        e("  and.b32 %t2, %t0, 15;")
        e("  shr.u32 %t3, %t0, 4;")
        e(red_base)
        e("  mad.lo.u32 %t0, %t2, 64, %t0;")
        e("  mad.lo.u32 %t0, %t3, 4, %t0;")
        e("  ld.shared.f32 %f0, [%t0];")
        for w_ in range(1, W):
            e(f"  ld.shared.f32 %f1, [%t0+{w_ * 1024}];")
            e("  add.f32 %f0, %f0, %f1;")
        e("  cvt.rn.bf16.f32 %q0, %f0;")
        e(f"  mad.lo.u32 %t0, %t3, {N}, %t2;")
        e("  mad.lo.u32 %t0, %s, 16, %t0;")
        e("  mul.wide.u32 %pt64, %t0, 2;")
        e("  add.u64 %pb, %po, %pt64;")
        e("  st.global.b16 [%pb], %q0;")


def generate(shape: Fp8Gemv) -> str:
    sh = Shape(shape)
    N, K, S, KB, W, KBW = sh.N, sh.K, sh.S, sh.KB, sh.W, sh.KBW
    assert N % 128 == 0 and K % 128 == 0 and KB % W == 0
    nwreg = KBW * 16  # weight registers per set: KBW tiles x 4 chunks x 4 words
    e = Emit()
    e(f"// {sh.name}: out[M, {N}] = x[M, {K}] @ dequant(W)^T, M in 1..16; FP8 E4M3 weights with 128x128")
    e("// block scales, BF16 x and out, fp32 accumulation. Generated by gen_fp8_gemv.py (its docstring")
    e("// explains the design); regenerate, do not edit.")
    e(f"// CTA: {W} warps ({sh.threads} threads), each warp {KBW} k block(s) of 128; grid {sh.grid} CTAs walking {S} strips")
    e("// of 16 rows. Shared memory: x as f16 B fragments, per-(token, k block) power-of-two scales, two")
    e("// reduction buffers. Reduction order: each k block's mma partial (k in mma order) scaled, then the")
    e("// warps' partials added in warp order. Deterministic.")
    header(e)
    e()
    e(".extern .shared .align 16 .b8 smem[];")
    e()
    entry(e, sh.name)
    e(f".reqntid {sh.threads}")
    e(f".maxnreg {sh.max_registers}")
    e("{")
    e("  .reg .pred %p, %pm8, %pnext, %pt, %pz, %pv;")
    e("  .reg .b32 %th, %warp, %lane, %g, %tig, %m, %s, %snext, %G, %t0, %t1, %t2, %t3, %tok, %kb, %par;")
    e(f"  .reg .b32 %wa<{nwreg}>, %wb<{nwreg}>;")
    e("  .reg .b32 %a<4>, %b<4>, %xw<4>, %h<4>;")
    e("  .reg .b16 %q<8>;")
    e("  .reg .f32 %c<8>, %acc<8>, %f<8>, %ws, %xi<4>, %amax, %sc;")
    e("  .reg .b64 %px, %pw, %ps, %po, %pa, %pb, %pt64, %pwarp;")
    e("  .reg .b32 %sxf, %sxs, %sxi, %sred, %sa, %sb;")
    e()
    load_params(e)
    e("  mov.u32 %s, %ctaid.x;")
    e("  mov.u32 %G, %nctaid.x;")
    e("  setp.gt.u32 %pm8, %m, 8;  // a second n-tile of 8 tokens")
    e("  mov.u32 %sxf, smem;")
    e(f"  add.u32 %sxs, %sxf, {sh.xs_off};")
    e(f"  add.u32 %sxi, %sxf, {sh.xi_off};")
    e(f"  add.u32 %sred, %sxf, {sh.red_off};")
    e("  // this warp's first tile: w + (s * KB + warp * KBW) * 2048 + lane * 16")
    e(f"  mul.lo.u32 %t0, %warp, {KBW * 2048};")
    e("  mad.lo.u32 %t0, %lane, 16, %t0;")
    e("  cvt.u64.u32 %pwarp, %t0;")
    e("  add.u64 %pwarp, %pw, %pwarp;")

    def load_strip(regs: str, s_reg: str):
        e(f"  mul.wide.u32 %pt64, {s_reg}, {KB * 2048};")
        e("  add.u64 %pa, %pwarp, %pt64;")
        for q in range(KBW):
            for j in range(4):
                r = (q * 4 + j) * 4
                e(f"  ld.global.nc.L1::no_allocate.v4.u32 {{{regs}{r}, {regs}{r + 1}, {regs}{r + 2}, {regs}{r + 3}}}, "
                  f"[%pa+{q * 2048 + j * 512}];")

    e("  // the first strip's weights are in flight while x is prepared")
    load_strip("%wa", "%s")
    e()
    e("  // 1. per (token, k block): amax of x -> scale 2^e with amax * 2^e in [2^14, 2^15) and its inverse")
    e(f"  setp.ge.u32 %p, %th, {16 * KB};")
    e("  @%p bra X_SCALES_DONE;")
    e(f"  div.u32 %tok, %th, {KB};")
    e(f"  rem.u32 %kb, %th, {KB};")
    e("  mov.f32 %amax, 0f00000000;")
    e("  setp.ge.u32 %p, %tok, %m;")
    e("  @%p bra X_AMAX_DONE;")
    e(f"  mul.lo.u32 %t0, %tok, {K};")
    e("  mad.lo.u32 %t0, %kb, 128, %t0;")
    e("  mul.wide.u32 %pt64, %t0, 2;")
    e("  add.u64 %pa, %px, %pt64;")
    for i in range(16):
        e(f"  ld.global.nc.v4.u32 {{%xw0, %xw1, %xw2, %xw3}}, [%pa+{16 * i}];")
        for r in range(4):
            amax_update(e, f"%xw{r}")
    e("X_AMAX_DONE:")
    x_scale_bits(e)
    e(f"  mad.lo.u32 %t0, %tok, {KB}, %kb;")
    e("  shl.b32 %t0, %t0, 2;")
    e("  add.u32 %t1, %sxs, %t0;")
    e("  st.shared.b32 [%t1], %t2;")
    e("  add.u32 %t1, %sxi, %t0;")
    e("  st.shared.b32 [%t1], %t3;")
    e("X_SCALES_DONE:")
    e("  bar.sync 0;")
    e()
    per_thread = K // 16 * 64 // sh.threads
    e(f"  // 2. x -> f16 B fragments: entry id = tid + r * {sh.threads} (r < {per_thread}): lane id % 32, n-tile")
    e("  //    (id / 32) % 2, k step id / 64; b0b1 = x[tok][k0, k0 + 1], b2b3 = x[tok][k0 + 8, k0 + 9], k0 = 16 step + 2 tig")
    for r in range(per_thread):  # branch-free, so the loads of every entry can be in flight at once
        e(f"  add.u32 %t0, %th, {r * sh.threads};")
        e("  and.b32 %t1, %t0, 31;")
        e("  shr.u32 %t2, %t1, 2;  // g of the entry")
        e("  shr.u32 %t3, %t0, 5;")
        e("  and.b32 %t3, %t3, 1;  // n-tile")
        e("  mad.lo.u32 %tok, %t3, 8, %t2;")
        e("  setp.lt.u32 %pv, %tok, %m;")
        e("  min.u32 %tok, %tok, 15;")
        e("  shr.u32 %t3, %t0, 6;  // k step")
        e("  and.b32 %t2, %t1, 3;  // tig")
        e("  shl.b32 %t2, %t2, 1;")
        e("  mad.lo.u32 %t2, %t3, 16, %t2;  // k0")
        e("  shr.u32 %kb, %t3, 3;")
        e(f"  mad.lo.u32 %t1, %tok, {KB}, %kb;")
        e("  shl.b32 %t1, %t1, 2;")
        e("  add.u32 %t1, %sxs, %t1;")
        e("  ld.shared.f32 %sc, [%t1];  // 0 for a token >= M")
        e(f"  mad.lo.u32 %t2, %tok, {K}, %t2;")
        e("  mul.wide.u32 %pt64, %t2, 2;")
        e("  add.u64 %pa, %px, %pt64;")
        fragment_store(e)
    e("  bar.sync 0;")
    e()
    e("  mov.u32 %par, 0;")
    e("  // c fragment tokens: c0, c2 -> 2 tig, c1, c3 -> 2 tig + 1 (n-tile 1: + 8); rows g, g + 8")

    def compute_and_reduce(regs: str, tag: str):
        for i in range(8):
            e(f"  mov.f32 %acc{i}, 0f00000000;")
        for q in range(KBW):
            kb_expr = f"warp * {KBW} + {q}"
            for i in range(8):
                e(f"  mov.f32 %c{i}, 0f00000000;")
            e(f"  // k block {kb_expr}")
            e(f"  mad.lo.u32 %kb, %warp, {KBW}, {q};")
            e("  shl.b32 %t0, %kb, 12;  // 8 steps x 512 B of fragments per k block")
            e("  mad.lo.u32 %t0, %lane, 8, %t0;")
            e("  add.u32 %sb, %sxf, %t0;")
            mma_steps(e, regs, q, 0)
            scale_accumulate(e, "%s", KB, KB, "%kb")
        e("  // partials to red[par][warp][row][token]; row g (c0, c1, c4, c5), g + 8 (c2, c3, c6, c7)")
        e(f"  mad.lo.u32 %t0, %par, {W * 1024}, %sred;")
        e("  mad.lo.u32 %t0, %warp, 1024, %t0;")
        store_partials(e)
        e("  bar.sync 0;")
        e(f"  // output o = tid + {sh.threads} r < 16 M (r < {-(-256 // sh.threads)}): row o % 16, token o / 16; "
          "sum over warps in order")
        sum_warps_store(e, sh.threads, W, N, f"  mad.lo.u32 %t0, %par, {W * 1024}, %sred;", f"RED_DONE_{tag}")
        e(f"RED_DONE_{tag}:")
        e("  xor.b32 %par, %par, 1;")

    e("STRIP_LOOP:")
    e("  add.u32 %snext, %s, %G;")
    e(f"  setp.lt.u32 %pnext, %snext, {S};")
    if S > sh.grid:
        e("  @!%pnext bra COMPUTE_A;")
        load_strip("%wb", "%snext")
    e("COMPUTE_A:")
    compute_and_reduce("%wa", "A")
    e("  @!%pnext bra DONE;")
    e("  mov.u32 %s, %snext;")
    if S > sh.grid:
        e("  add.u32 %snext, %s, %G;")
        e(f"  setp.lt.u32 %pnext, %snext, {S};")
        e("  @!%pnext bra COMPUTE_B;")
        load_strip("%wa", "%snext")
        e("COMPUTE_B:")
        compute_and_reduce("%wb", "B")
        e("  @!%pnext bra DONE;")
        e("  mov.u32 %s, %snext;")
        e("  bra STRIP_LOOP;")
    e("DONE:")
    e("  ret;")
    e("}")
    return e.text()


def main(argv=None) -> int:
    (HERE / "v2").mkdir(exist_ok=True)
    for shape in SHAPES:
        sh = Shape(shape)
        (HERE / "v2" / f"{sh.name}.ptx").write_text(generate(shape))
        print(f"wrote v2/{sh.name}.ptx ({sh.threads} threads, grid {sh.grid}, {sh.smem} B dynamic smem)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
