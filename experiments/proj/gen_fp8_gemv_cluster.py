"""v3 candidate of the fp8_gemv kernels (measured and rejected: README.md; `proj_variant.py cluster` re-runs it):
split K across the CTAs of a thread-block cluster, so each CTA converts only its K slice of
x, and many small CTAs keep many weight bytes in flight.

Same math, packed weight layout, scales and reduction precision as the promoted kernels
(kernels/sm_90a/proj/gen_fp8_gemv.py, whose docstring explains the fragments). Differences:
- cluster of C CTAs (.reqnctapercluster C): CTA rank r owns k blocks [r KBC, (r + 1) KBC);
  the cluster owns 4 strips (64 rows); grid C x S / 4 CTAs of 4 warps, warp w = strip w;
- every weight load of the CTA (KBC tiles per warp, 4 x 16 B per lane each) is issued first;
- x prologue over the CTA's slice only: amax by TPP threads per (token, k block) pair with a
  shfl.bfly max, then the f16 B fragments, branch-free;
- no reduction across warps (each warp owns a strip); across the cluster, each CTA writes its
  4 x 16 x 16 fp32 partials to shared memory, barrier.cluster, then output o = r * 128 + tid
  sums the C partials in rank order through ld.shared::cluster (deterministic), and a second
  barrier.cluster keeps every CTA's shared memory alive until all have read it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))
from netra import paths  # noqa: E402
from netra.contracts.proj import SHAPES, Fp8Gemv  # noqa: E402

_gen = paths.load_module(HERE / "gen_fp8_gemv_v2.py", "gen_fp8_gemv_v2")
Emit, G = _gen.Emit, _gen  # the promoted generator's emitters, shared

THREADS = 128  # 4 warps, one strip each
SPC = 4  # strips per cluster


@dataclass(frozen=True)
class Tiling:
    sh: Fp8Gemv

    @property
    def C(self) -> int:  # CTAs per cluster (portable maximum 8)
        return min(8, self.sh.KB)

    @property
    def KBC(self) -> int:  # k blocks per CTA
        return self.sh.KB // self.C

    @property
    def grid(self) -> int:
        return self.C * self.sh.S // SPC

    @property
    def TPP(self) -> int:  # threads per (token, k block) amax pair
        return min(8, THREADS // (16 * self.KBC))

    @property
    def name(self) -> str:
        return self.sh.name  # the same entry name: a drop-in candidate


def generate(t: Tiling) -> str:
    sh, C, KBC, TPP = t.sh, t.C, t.KBC, t.TPP
    N, K, KB = sh.N, sh.K, sh.KB
    assert sh.S % SPC == 0 and KB % C == 0 and 16 * KBC * TPP <= THREADS and 128 % (TPP * 8) == 0
    per_tpp = 128 // TPP  # x elements per amax thread
    nw = KBC * 16
    xf_bytes = KBC * 8 * 512
    e = Emit()
    e(f"// {sh.name} (cluster split-K candidate, experiments/proj/gen_fp8_gemv_cluster.py): C = {C} CTAs per cluster")
    e(f"// over K ({KBC} k block(s) each), 4 strips per cluster, grid {t.grid} CTAs x {THREADS} threads.")
    G.header(e)
    e()
    G.entry(e, sh.name)
    e(f".reqntid {THREADS}")
    e(f".reqnctapercluster {C}, 1, 1")
    e("{")
    e("  .reg .pred %p, %pm8, %pv, %pz;")
    e("  .reg .b32 %th, %warp, %lane, %g, %tig, %m, %rank, %cl, %strip, %t0, %t1, %t2, %t3, %tok, %kb, %kbl;")
    e(f"  .reg .b32 %wa<{nw}>, %a<4>, %b<4>, %xw<4>, %h<2>;")
    e("  .reg .b16 %q<4>;")
    e("  .reg .f32 %c<8>, %acc<8>, %f<4>, %ws, %xi<4>, %amax, %sc, %sum;")
    e("  .reg .b64 %px, %pw, %ps, %po, %pa, %pb, %pt64;")
    e("  .reg .b32 %sxf, %sxs, %sxi, %spart, %sb, %rem;")
    e(f"  .shared .align 16 .b8 xfrag[{xf_bytes}];")
    e(f"  .shared .align 16 .f32 xscale[{16 * KBC}];")
    e(f"  .shared .align 16 .f32 xinv[{16 * KBC}];")
    e(f"  .shared .align 16 .f32 part[{SPC * 256}];")
    e()
    G.load_params(e)
    e("  mov.u32 %rank, %cluster_ctarank;")
    e("  mov.u32 %cl, %clusterid.x;")
    e(f"  mad.lo.u32 %strip, %cl, {SPC}, %warp;")
    e("  setp.gt.u32 %pm8, %m, 8;")
    e("  mov.u32 %sxf, xfrag;")
    e("  mov.u32 %sxs, xscale;")
    e("  mov.u32 %sxi, xinv;")
    e("  mov.u32 %spart, part;")
    e("  // every weight load first: tiles (strip, rank * KBC + q), lane's 4 x 16 B each")
    e(f"  mul.lo.u32 %t0, %strip, {KB};")
    e(f"  mad.lo.u32 %t0, %rank, {KBC}, %t0;")
    e("  mul.wide.u32 %pt64, %t0, 2048;")
    e("  add.u64 %pa, %pw, %pt64;")
    e("  mul.wide.u32 %pt64, %lane, 16;")
    e("  add.u64 %pa, %pa, %pt64;")
    for q in range(KBC):
        for j in range(4):
            r = (q * 4 + j) * 4
            e(f"  ld.global.nc.L1::no_allocate.v4.u32 {{%wa{r}, %wa{r + 1}, %wa{r + 2}, %wa{r + 3}}}, [%pa+{q * 2048 + j * 512}];")
    e()
    e(f"  // 1. amax per (token, local k block): {TPP} threads per pair, {per_tpp} elements each, shfl.bfly max")
    e(f"  div.u32 %t0, %th, {TPP};  // pair")
    e(f"  rem.u32 %t1, %th, {TPP};  // part of the pair")
    e(f"  div.u32 %tok, %t0, {KBC};")
    e(f"  rem.u32 %kbl, %t0, {KBC};")
    e("  setp.lt.u32 %pv, %tok, %m;")
    e("  min.u32 %tok, %tok, 15;")
    e(f"  mad.lo.u32 %kb, %rank, {KBC}, %kbl;")
    e(f"  mul.lo.u32 %t2, %tok, {K};")
    e("  mad.lo.u32 %t2, %kb, 128, %t2;")
    e(f"  mad.lo.u32 %t2, %t1, {per_tpp}, %t2;")
    e("  mul.wide.u32 %pt64, %t2, 2;")
    e("  add.u64 %pb, %px, %pt64;")
    e("  mov.f32 %amax, 0f00000000;")
    for i in range(per_tpp // 8):
        e("  mov.b32 %xw0, 0;")
        e("  mov.b32 %xw1, 0;")
        e("  mov.b32 %xw2, 0;")
        e("  mov.b32 %xw3, 0;")
        e(f"  @%pv ld.global.nc.v4.u32 {{%xw0, %xw1, %xw2, %xw3}}, [%pb+{16 * i}];")
        for r in range(4):
            G.amax_update(e, f"%xw{r}")
    k = 1
    while k < TPP:
        e(f"  shfl.sync.bfly.b32 %t3, %amax, {k}, 31, 0xffffffff;")
        e("  mov.b32 %f0, %t3;")
        e("  max.f32 %amax, %amax, %f0;")
        k *= 2
    G.x_scale_bits(e)
    e(f"  rem.u32 %t1, %th, {TPP};")
    e("  setp.ne.u32 %p, %t1, 0;")
    e(f"  mad.lo.u32 %t0, %tok, {KBC}, %kbl;")
    e("  shl.b32 %t0, %t0, 2;")
    e("  add.u32 %t1, %sxs, %t0;")
    e("  @!%p st.shared.b32 [%t1], %t2;")
    e("  add.u32 %t1, %sxi, %t0;")
    e("  @!%p st.shared.b32 [%t1], %t3;")
    e("  bar.sync 0;")
    per_thread = KBC * 8 * 64 // THREADS
    e(f"  // 2. f16 B fragments of the slice: entry id = tid + {THREADS} r (r < {per_thread}), branch-free")
    for r in range(per_thread):
        e(f"  add.u32 %t0, %th, {r * THREADS};")
        e("  and.b32 %t1, %t0, 31;")
        e("  shr.u32 %t2, %t1, 2;")
        e("  shr.u32 %t3, %t0, 5;")
        e("  and.b32 %t3, %t3, 1;")
        e("  mad.lo.u32 %tok, %t3, 8, %t2;")
        e("  setp.lt.u32 %pv, %tok, %m;")
        e("  min.u32 %tok, %tok, 15;")
        e("  shr.u32 %t3, %t0, 6;  // local k step")
        e("  and.b32 %t2, %t1, 3;")
        e("  shl.b32 %t2, %t2, 1;")
        e("  mad.lo.u32 %t2, %t3, 16, %t2;  // local k0")
        e("  shr.u32 %kbl, %t3, 3;")
        e(f"  mad.lo.u32 %t1, %tok, {KBC}, %kbl;")
        e("  shl.b32 %t1, %t1, 2;")
        e("  add.u32 %t1, %sxs, %t1;")
        e("  ld.shared.f32 %sc, [%t1];")
        e(f"  mad.lo.u32 %t2, %rank, {KBC * 128}, %t2;  // global k0")
        e(f"  mad.lo.u32 %t2, %tok, {K}, %t2;")
        e("  mul.wide.u32 %pt64, %t2, 2;")
        e("  add.u64 %pa, %px, %pt64;")
        G.fragment_store(e)
    e("  bar.sync 0;")
    e()
    e("  // 3. this warp's strip over the CTA's k blocks")
    for i in range(8):
        e(f"  mov.f32 %acc{i}, 0f00000000;")
    e("  mad.lo.u32 %sb, %lane, 8, %sxf;")
    for q in range(KBC):
        for i in range(8):
            e(f"  mov.f32 %c{i}, 0f00000000;")
        G.mma_steps(e, "%wa", q, q * 8 * 512)
        e(f"  mad.lo.u32 %kb, %rank, {KBC}, {q};")
        G.scale_accumulate(e, "%strip", KB, KBC, str(q))
    e("  // 4. partials to part[warp][row][token]")
    e("  mad.lo.u32 %t0, %warp, 1024, %spart;")
    G.store_partials(e)
    e("  barrier.cluster.arrive.release.aligned;")
    e("  barrier.cluster.wait.acquire.aligned;")
    passes = -(-SPC * 16 * 16 // (C * THREADS))
    e(f"  // 5. output o = rank * {THREADS} + tid + {C * THREADS} p (p < {passes}) < 64 M: token o / 64, strip (o % 64) / 16,")
    e("  //    row o % 16; the C partials summed in rank order through distributed shared memory")
    e("  shl.b32 %rem, %m, 6;")
    for p_ in range(passes):
        e(f"  mad.lo.u32 %t0, %rank, {THREADS}, %th;")
        e(f"  add.u32 %t0, %t0, {p_ * C * THREADS};")
        e("  setp.ge.u32 %p, %t0, %rem;")
        e(f"  @%p bra OUT_DONE_{p_};")
        e("  shr.u32 %tok, %t0, 6;")
        e("  and.b32 %t1, %t0, 63;  // strip * 16 + row")
        e("  shr.u32 %t2, %t1, 4;")
        e("  and.b32 %t3, %t1, 15;")
        e("  mad.lo.u32 %t0, %t2, 256, %tok;")
        e("  mad.lo.u32 %t0, %t3, 16, %t0;")
        e("  shl.b32 %t0, %t0, 2;")
        e("  add.u32 %t0, %spart, %t0;")
        e("  mov.f32 %sum, 0f00000000;")
        for j in range(C):
            e(f"  mov.u32 %t1, {j};")
            e("  mapa.shared::cluster.u32 %sb, %t0, %t1;")
            e(f"  ld.shared::cluster.f32 %f{j % 2 + 2}, [%sb];")
            e(f"  add.f32 %sum, %sum, %f{j % 2 + 2};")
        e("  cvt.rn.bf16.f32 %q0, %sum;")
        e(f"  mad.lo.u32 %t2, %cl, {SPC}, %t2;  // global strip")
        e("  shl.b32 %t2, %t2, 4;")
        e("  add.u32 %t2, %t2, %t3;  // output column")
        e(f"  mad.lo.u32 %t2, %tok, {N}, %t2;")
        e("  mul.wide.u32 %pt64, %t2, 2;")
        e("  add.u64 %pb, %po, %pt64;")
        e("  st.global.b16 [%pb], %q0;")
        e(f"OUT_DONE_{p_}:")
    e("  barrier.cluster.arrive.release.aligned;  // every CTA's partials stay until all have read them")
    e("  barrier.cluster.wait.acquire.aligned;")
    e("  ret;")
    e("}")
    return e.text()


def main() -> int:
    out = HERE / "cluster"
    out.mkdir(exist_ok=True)
    for sh in SHAPES:
        t = Tiling(sh)
        (out / f"{sh.name}.ptx").write_text(generate(t))
        print(f"{sh.name}: cluster {t.C}, {t.KBC} k block(s) per CTA, grid {t.grid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
