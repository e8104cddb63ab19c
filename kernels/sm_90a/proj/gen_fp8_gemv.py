"""Generator of the fp8_gemv_n<N>_k<K> kernels: out[M, N] = x[M, K] @ dequant(W)^T for
M in 1..16 (decode batch or verification tokens), FP8 E4M3 weights with 128x128 block
scales, BF16 activations and output, fp32 accumulation. Writes one .ptx per shape beside
this file; `python kernels/sm_90a/proj/gen_fp8_gemv.py` regenerates them and a CPU test
checks that the committed files are current. The generator only unrolls and names
registers; every instruction below is chosen by hand. Shapes and tiling:
netra.contracts.proj (written once).

Design (v3g: v3, a persistent weight stream, with a faster x prologue and the body emitted
once for M <= 8 and once for M > 8; v1, v2 and the candidates measured on the way are in
experiments/proj/README.md):
- mma.sync m16n8k16 f16 -> f32 with A = 16 weight rows x 16 k and B = 16 k x 8 tokens
  ("swap AB"). E4M3 converts exactly to f16 (cvt.rn.f16x2.e4m3x2, two weights per instruction).
- Weights are repacked once at load (netra.ops.proj.pack_weight): tile (strip s of 16 rows,
  k block b) is 2048 contiguous bytes; lane t's 64 bytes are its A fragments for the 8 k16
  steps, as 4 chunks of 512 B (chunk j: steps 2j and 2j+1, lane t at 16 t). A strip's W
  tiles in k order are one contiguous "chunk" of W x 2 KB.
- grid = min(S, 132), one CTA per SM, W = min(16, K / 128) warps; CTA c takes strips c,
  c + G, ... Thread 0 streams the CTA's chunks with cp.async.bulk (L2 evict-first) into a
  ring of NS stages, each with the chunk's W weight-block scales and one mbarrier (expect_tx);
  it refills a strip's stages right after the per-strip barrier. Few stages (3) keep the
  chunks arriving in order, so each strip's mma overlaps the next strip's bytes.
- Warp w owns k block h W + w of chunk h. Once per CTA each warp reads its 8 tokens x 128 k
  of x per n-tile with coalesced 16-byte loads (4 whole lines per instruction) and turns them
  into its B fragments (token 8 nt + g, k = 16 i + 2 tig, +1, +8, +9) through 2 KB of shared
  memory (the reduction buffers, free until the first strip). The (token, k block) amax is
  the max over the mma group's 4 threads (integer max of packed BF16 magnitudes, then
  shfl.bfly), and x goes to f16 scaled by a power of two that puts the amax in [2^14, 2^15)
  (exact but for values 28+ binades below it; BF16 values can exceed f16's range, so
  unscaled would be wrong). At M <= 8 the second n-tile is skipped (K = 2048 and 512). The
  fragments stay in registers for every strip. The inverse x scale and the weight block's
  scale multiply each k block's fp32 partial. (trace_v3.py measured the old prologue, 32
  four-byte loads per thread each touching 8 lines, as the critical path: 2.4 us at M = 1,
  6.1 us at M = 16, while the ring of chunks waited full.)
- Per strip: the warps' 16 x 16 partials go [token][row] to one of two reduction buffers,
  one barrier, the warp-order sum, BF16 out. Deterministic.
- The first strip's chunks are requested before `griddepcontrol.wait` (weights never change
  while kernels run), the other stages' right after the x loads, so x does not queue behind
  them; at M > 8, where a CTA streams at most two strips of K >= 2048 (`Fp8Gemv.x_first`:
  2048 x 4096, 4096 x 2048, 1024 x 2048), no chunk goes before x (the x prologue is then the
  critical path: trace_v3g.json, v3q_variant.json), and where a CTA streams one strip
  (`Fp8Gemv.pre_strips` = 0: 2048 x 4096, whose strip is two chunks) none at any M
  (v3r_variant.json; 1024 x 2048's one-chunk strip goes first: pre_strips_variant_0a74e03.json);
  x is read and out written after the wait; `griddepcontrol.launch_dependents` follows
  the wait (one dependent grid at a time). Launched plainly (the op's default) the two
  instructions are no-ops.
- Fused variants (netra.contracts.proj.FUSED): "norm" takes h and the norm weight and makes x =
  rmsnorm(h) in the x registers before the fragments (norm_prologue: bitwise rmsnorm_h2048; CTA 0
  writes x out), M <= 8 only; "res" adds the BF16 product to h in place in the final store
  and also writes the product to out (the layer shadow reads the mixer's output).
- Routed experts (netra.contracts.proj.EXPERTS, fuse "moe"): the weight is every expert's
  packed weight stacked, and the launch streams P = M pairs_per_x virtual strips blocks: strip
  s is strip s % S of pair s / S, whose expert id (ids[pair], int64, the router's top-k) the
  CTA's threads read into shared memory once after the wait (an id outside 0..E-1 becomes
  0xffffffff: its chunks are read from expert E - 1, in bounds, and its output row is NaN).
  Every chunk is requested after the wait and the x loads. Each strip computes every x row
  (the M <= 8 / M > 8 copies as above) and stores only pair j's own row (j >> pair_shift) to
  out[j]. K = 512 keeps 8 chunks in flight (MOE_STAGES).
- GDN's b | a with the norm build (netra.contracts.proj.NORM_BA, ``ba``): the last 4 CTAs compute the BF16
  in_proj_b | in_proj_a rows (ba_cta: bitwise bf16_gemv_n64_k2048), the others walk the FP8 strips.
- The shared expert with the routed ones (netra.contracts.proj.EXPERTS_SHARED, ``shared``): M more pairs after the
  8 M routed ones, id E, their weight, scales and output rows from ws, ss, sout; the last CTA is the gate CTA.
- The MoE down side (netra.contracts.proj.MOE_DOWN, fuse "moedown", M <= 8): virtual strip s is
  (token s / S, strip s % S) over K = 9 x 512: chunk h holds experts 3 h .. 3 h + 2 (4 tiles each,
  three bulk copies: the token's routed experts from the ids table, the shared expert's from ws).
  Warp w's k block belongs to expert w / 4 of its chunk; its x rows come from x (the pairs' rows)
  or xs (the shared expert's), and the expert's weight (top[t, j], or bf16(sigmoid(glogit[t])))
  multiplies the token's inverse x scale, so the weighted sum is the GEMV itself. Every strip
  computes all tokens and stores its own token's row: out = the BF16 sum, h += out (BF16).
- 32-token builds (``Fp8Gemv.tokens = 32``, named _t32): one body of 4 n-tiles (x of 32 tokens in 64 registers,
  2 KB of partials per warp) for the routed gate | up grouped by distinct expert (EXPERTS_GROUP32, whose n-tiles
  without a token that chose the strip's expert skip their mma and stores) and the runner's K = 2048 dense shapes
  (DENSE32): one launch for up to 32 rows, where the 16-token kernels took two.
- Two passes (``Fp8Gemv.passes = 2``, named _p2; the residual 2048 x 4096 build): where each CTA streams one strip
  that the ring holds whole, tokens 16 .. M - 1 are a second pass over it: the first pass runs with M clamped to 16
  (the stores go to M rows), after its sums (PASS_END) x, h and out move on 16 rows, M becomes M - 16, and the body runs again without requesting the chunks (%pp2); its waits on
  parity 0 return at once, each stage's mbarrier having completed that phase. So one launch for up to 32 rows,
  bitwise the 16-row build on rows 0 .. 15 and 16 .. M - 1, reading the weight once.
- The MoE down side once per distinct expert is gen_moe_down_grp.py's (it borrows helpers from here).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "src"))
sys.path.insert(0, str(HERE))
import rms_emit  # noqa: E402  (the warp's RMSNorm, shared with gen_moe_router.norm_prologue)
from netra.contracts.proj import BA_K, BA_ROWS, BA_STRIPS, DENSE32, PLAIN_BA, EXPERTS, EXPERTS_GROUP, EXPERTS_GROUP32, EXPERTS_ROUTER, EXPERTS_ROUTER_DOWN, EXPERTS_SHARED, EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32, FUSED, FUSED32, MOE_DOWNS, NORM_BA, NUM_EXPERTS, ROUTER_FUSED_TOKENS, ROUTER_K, ROUTER_ROWS, SHAPES, SMS, TOP_K, Fp8Gemv as Shape  # noqa: E402  (shapes and tiling, written once)
import gen_moe_router as gmr  # noqa: E402  (the router's row sum and selection, for router_phase)


class Emit:
    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, s: str = ""):
        self.lines.append(("  " + s) if s and not s.endswith(":") and not s.startswith("//") else s)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def a_fragments(e: Emit, w0: str, w1: str) -> None:
    """The mma's A fragments %a0..3 (f16x2) from two words of a packed E4M3 tile (4 weights each)."""
    e(f"  mov.b32 {{%q0, %q1}}, {w0};")
    e(f"  mov.b32 {{%q2, %q3}}, {w1};")
    for r in range(4):
        e(f"  cvt.rn.f16x2.e4m3x2 %a{r}, %q{r};")


def bf16x2_to_f32(e: Emit, word: str) -> None:
    """%f0 = the low BF16 of ``word`` as f32, %f1 = the high one (a BF16 is the top half of an f32)."""
    e(f"  shl.b32 %t1, {word}, 16;")
    e("  mov.b32 %f0, %t1;")
    e(f"  and.b32 %t1, {word}, 0xffff0000;")
    e("  mov.b32 %f1, %t1;")


def header(e: Emit, version: str = "8.0") -> None:
    e(f".version {version}")
    e(".target sm_90a")
    e(".address_size 64")


def entry(e: Emit, name: str, fuse: str = "", ba: bool = False, shared: bool = False, shared_gate: bool = True,
          router: bool = False, down: bool = False, spin: bool = False) -> None:
    """The .entry line and the parameters (netra.contracts.proj, in its order): x (h with the
    norm prologue), w, scale, out (h, in place, with the residual epilogue), M; the norm
    prologue adds norm_w, x_out, eps; the gate CTA gate_w, gate_out; the experts ids, E; the
    residual epilogue out (the BF16 product, before the add)."""
    moe = ["u32 M", "u64 ids", "u32 E"]
    tail = {"gate": ["u32 M", "u64 gate_w", "u64 gate_out"], "norm": ["u32 M", "u64 norm_w", "u64 x_out", "f32 eps"],
            "moe": moe, "moedown": moe + ["u64 top", "u64 xs", "u64 ws", "u64 ss", "u64 glogit", "u64 out"],
            "res": ["u32 M", "u64 out"]}
    params = ["u64 h" if fuse == "norm" else "u64 x", "u64 w", "u64 scale",
              "u64 h" if fuse in ("res", "moedown") else "u64 out"] + tail.get(fuse, ["u32 M"])
    if ba:  # the b | a CTAs' weights and outputs (netra.contracts.proj.NORM_BA)
        params += ["u64 w_b", "u64 w_a", "u64 out_b", "u64 out_a"]
    if shared:  # the shared expert's pairs and gate (netra.contracts.proj.EXPERTS_SHARED)
        params += ["u64 ws", "u64 ss", "u64 sout"] + (["u64 gate_w", "u64 gate_out"] if shared_gate else [])
    if router:  # x and ids are the router phase's outputs; its inputs and other outputs (netra.contracts.proj.EXPERTS_ROUTER)
        params = ["u64 x_out" if p == "u64 x" else "u64 idx" if p == "u64 ids" else p for p in params]
        params += ["u64 h", "u64 norm_w", "f32 eps", "u64 rw", "u64 top", "u64 logits", "u64 bar"]
    if spin:  # the other of the two x buffers, filled with TAG (the candidate netra.contracts.proj.RES_SPIN)
        params += ["u64 x_next"]
    if down:  # moe_down's weights and output (a candidate: Fp8Gemv.down)
        params += ["u64 w2", "u64 s2", "u64 sw2", "u64 ss2", "u64 moe_out"]
        if _DOWN["sync"] == "pairs":  # the pairs' counters (down_phase_pairs)
            params += ["u64 cnt"]
    e(f".visible .entry {name}(")
    for i, prm in enumerate(params):
        e(f"  .param .{prm}" + ("," if i < len(params) - 1 else ""))
    e(")")


def load_params(e: Emit, fuse: str = "", shared: bool = False, gate: bool = False, router: bool = False) -> None:
    """Parameters to global addresses and M; thread, warp, lane and the mma group ids g, tig."""
    e("  ld.param.u64 %px, [h];" if fuse == "norm" else "  ld.param.u64 %px, [x_out];" if router else "  ld.param.u64 %px, [x];")
    e("  ld.param.u64 %pw, [w];")
    e("  ld.param.u64 %ps, [scale];")
    e("  ld.param.u64 %po, [out];" if fuse not in ("res", "moedown") else "  ld.param.u64 %po, [h];")
    e("  ld.param.u32 %m, [M];")
    e("  cvta.to.global.u64 %px, %px;")
    e("  cvta.to.global.u64 %pw, %pw;")
    e("  cvta.to.global.u64 %ps, %ps;")
    e("  cvta.to.global.u64 %po, %po;")
    if fuse == "gate" or gate:
        e("  ld.param.u64 %pg, [gate_w];")
        e("  ld.param.u64 %pgo, [gate_out];")
        e("  cvta.to.global.u64 %pg, %pg;")
        e("  cvta.to.global.u64 %pgo, %pgo;")
    if fuse in ("moe", "moedown"):
        e("  ld.param.u64 %pid, [idx];" if router else "  ld.param.u64 %pid, [ids];")
        e("  ld.param.u32 %ne, [E];")
        e("  cvta.to.global.u64 %pid, %pid;")
    if shared:
        for r, n in (("%pws", "ws"), ("%pss", "ss"), ("%pso", "sout")):
            e(f"  ld.param.u64 {r}, [{n}];")
            e(f"  cvta.to.global.u64 {r}, {r};")
    if fuse == "moedown":
        for r, n in (("%ptop", "top"), ("%pxs", "xs"), ("%pws", "ws"), ("%pss", "ss"), ("%pgl", "glogit"), ("%pmo", "out")):
            e(f"  ld.param.u64 {r}, [{n}];")
            e(f"  cvta.to.global.u64 {r}, {r};")
    if fuse == "res":
        e("  ld.param.u64 %pmo, [out];")
        e("  cvta.to.global.u64 %pmo, %pmo;")
    if fuse == "norm":
        e("  ld.param.u64 %pn, [norm_w];")
        e("  ld.param.u64 %pxo, [x_out];")
        e("  ld.param.f32 %eps, [eps];")
        e("  cvta.to.global.u64 %pn, %pn;")
        e("  cvta.to.global.u64 %pxo, %pxo;")
    e("  mov.u32 %th, %tid.x;")
    e("  shr.u32 %warp, %th, 5;")
    e("  and.b32 %lane, %th, 31;")
    e("  shr.u32 %g, %lane, 2;")
    e("  and.b32 %tig, %lane, 3;")


def amax_update(e: Emit, word: str) -> None:
    """%amax = max(%amax, |both BF16 of word|)."""
    bf16x2_to_f32(e, word)
    e("  abs.f32 %f0, %f0;")
    e("  abs.f32 %f1, %f1;")
    e("  max.f32 %amax, %amax, %f0;")
    e("  max.f32 %amax, %amax, %f1;")


def amax_fold(e: Emit) -> None:
    """%amax = the larger of %t0's two BF16 magnitudes (sign bits clear), as an f32."""
    e("  shr.u32 %t1, %t0, 16;")
    e("  and.b32 %t0, %t0, 0xffff;")
    e("  max.u32 %t0, %t0, %t1;")
    e("  shl.b32 %t0, %t0, 16;")
    e("  mov.b32 %amax, %t0;")


def amax_packed(e: Emit, X: str) -> None:
    """%amax = max |x| over the 32 BF16 of %{X}0..15, by integer max of the magnitude bits
    (for BF16 without NaN, magnitude order is unsigned order of the bits with the sign
    cleared): 2 instructions per register instead of amax_update's 8; the same value."""
    e(f"  and.b32 %t0, {X}0, 0x7fff7fff;")
    for r in range(1, 16):
        e(f"  and.b32 %t1, {X}{r}, 0x7fff7fff;")
        e("  max.u16x2 %t0, %t0, %t1;")
    amax_fold(e)


def amax_s16(e: Emit, X: str) -> None:
    """As amax_packed, without masking each register: the unsigned max of the raw BF16 bits is
    0x8000 | the largest negative magnitude if any value is negative (else the largest positive),
    the signed max the largest positive if any is non-negative (else 0x8000 | the largest
    negative magnitude); the larger of the two magnitudes is the amax. The same value."""
    e(f"  max.u16x2 %t0, {X}0, {X}1;")
    e(f"  max.s16x2 %t1, {X}0, {X}1;")
    for r in range(2, 16):
        e(f"  max.u16x2 %t0, %t0, {X}{r};")
        e(f"  max.s16x2 %t1, %t1, {X}{r};")
    e("  and.b32 %t0, %t0, 0x7fff7fff;")
    e("  and.b32 %t1, %t1, 0x7fff7fff;")
    e("  max.u16x2 %t0, %t0, %t1;")
    amax_fold(e)


def x_scale_bits(e: Emit) -> None:
    """From %amax: %t2 = the bits of the scale 2^e, %t3 of its inverse (both 0 for an all-zero row)."""
    e("  // E = biased exponent of amax, at least 15 (inverse stays normal); scale 2^(141 - E), inverse 2^(E - 141)")
    e("  setp.eq.f32 %pz, %amax, 0f00000000;")
    e("  mov.b32 %t1, %amax;")
    e("  shr.u32 %t1, %t1, 23;")
    e("  max.u32 %t1, %t1, 15;")
    e("  sub.u32 %t2, 268, %t1;")
    e("  shl.b32 %t2, %t2, 23;")
    e("  sub.u32 %t3, %t1, 14;")
    e("  shl.b32 %t3, %t3, 23;")
    e("  selp.b32 %t2, 0, %t2, %pz;  // a padded or all-zero row: x fragments 0, inverse 0")
    e("  selp.b32 %t3, 0, %t3, %pz;")


# How the activations (the previous grid's output) are loaded after griddepcontrol.wait: ld.global
# (coherent_x, promoted after experiments/proj/coherent_x_variant_98716c5.json), not .nc: .nc is
# defined only for data read-only during the kernel's lifetime, which a PDL launch overlaps with
# the writer's (gdn_decode_b32_pdl's .nc loads broke the decode PDL engine's bitwise check:
# experiments/decode/pdl_gdn_variant.json; these kernels' never did, but were outside the contract).
_XLD = ["ld.global"]


def x_fragments(e: Emit, h: int, nt: int, W: int, K: int) -> None:
    """This thread's x words of k block h W + warp, token 8 nt + g, into %xr{nt}_{h}_0..15
    (0 for a token >= M: the loads are predicated off)."""
    X = f"%xr{nt}_{h}_"
    e(f"  // x of k block {h} * {W} + warp, n-tile {nt}: token {8 * nt} + g")
    e(f"  add.u32 %tok, %g, {8 * nt};")
    e("  setp.lt.u32 %pv, %tok, %m;")
    e("  min.u32 %tok, %tok, 15;")
    e(f"  add.u32 %kb, %warp, {h * W};")
    e(f"  mul.lo.u32 %t0, %tok, {K};")
    e("  mad.lo.u32 %t0, %kb, 128, %t0;")
    e("  shl.b32 %t1, %tig, 1;")
    e("  add.u32 %t0, %t0, %t1;  // k0 of step 0")
    e("  mul.wide.u32 %pt64, %t0, 2;")
    e("  add.u64 %pa, %px, %pt64;")
    for i in range(8):
        for hh in range(2):
            e(f"  mov.b32 {X}{2 * i + hh}, 0;")
            e(f"  @%pv {_XLD[0]}.u32 {X}{2 * i + hh}, [%pa+{32 * i + 16 * hh}];")


def x_rows_load(e: Emit, h: int, nt: int, W: int, K: int, tok_reg: str = "", smem: int | None = None,
                bound: str = "%m") -> None:
    """Coalesced: the warp's 8 tokens x 128 k of k block h W + warp, n-tile nt, as 4 16-byte
    loads per lane into %xr{nt}_{h}_0..15 (load j: tokens 8 nt + 2 j + lane / 16, k 8 (lane % 16)
    .. + 7; 0 for a token >= M). Each load instruction reads 4 whole 128-byte lines; the fragment
    layout's own loads (x_fragments) touch 8 lines each, half of every sector. ``tok_reg``: a
    register added to every token (xpair: 8 rank, into the n-tile 0 registers)."""
    X = f"%xr{nt}_{h}_"
    what = "this CTA's n-tile (tokens 8 rank ..)" if tok_reg else f"n-tile {nt}"
    e(f"  // x rows of k block {h} * {W} + warp, {what}, coalesced")
    e(f"  add.u32 %kb, %warp, {h * W};")
    e("  shr.u32 %t1, %lane, 4;")
    e("  and.b32 %t2, %lane, 15;")
    for j in range(4):
        e(f"  add.u32 %tok, %t1, {8 * nt + 2 * j};")
        if tok_reg:
            e(f"  add.u32 %tok, %tok, {tok_reg};")
        e(f"  setp.lt.u32 %pv, %tok, {bound};")
        regs = ", ".join(f"{X}{4 * j + c}" for c in range(4))
        if smem is not None:  # router_poll: the CTA's own normalized rows in shared memory
            x_row_element(e, K)
            e("  shl.b32 %t0, %t0, 1;")
            e("  add.u32 %t0, %t0, %sbase;")
            for c in range(4):
                e(f"  mov.b32 {X}{4 * j + c}, 0;")
            e(f"  @%pv ld.shared.v4.u32 {{{regs}}}, [%t0+{smem}];")
            continue
        x_row_address(e, K)
        for c in range(4):
            e(f"  mov.b32 {X}{4 * j + c}, 0;")
        e(f"  @%pv {_XLD[0]}.v4.u32 {{{regs}}}, [%pa];")


def x_row_element(e: Emit, K: int) -> None:
    """%t0 = the element x_rows_load's lane reads first: row %tok, k block %kb, 8 (lane % 16) in it (lane % 16 in %t2)."""
    e(f"  mul.lo.u32 %t0, %tok, {K};")
    e("  mad.lo.u32 %t0, %kb, 128, %t0;")
    e("  mad.lo.u32 %t0, %t2, 8, %t0;")


def x_row_address(e: Emit, K: int) -> None:
    """%pa = the global address of x_row_element's element of x (%px)."""
    x_row_element(e, K)
    e("  mul.wide.u32 %pt64, %t0, 2;")
    e("  add.u64 %pa, %px, %pt64;")


SPIN_LIMIT = 1 << 14  # spin: polls of one x vector before falling back to griddepcontrol.wait (never a hang)
# spin builds: "gate": warp 0 alone polls 32 vectors spread over x (one a lane) until none is TAG, the CTA's other
# warps held at a barrier, before every thread loads and checks its own x (db27dfd: all 512 threads polling cost
# ~2 us a GDN layer in the decode step); "land": warp 0 first waits for the strip's chunks to land (x then queues
# behind nothing)
_SPIN = {"gate": False, "land": False}


def x_gate(e: Emit, sh: Shape, NS: int, sfx: str) -> None:
    """spin with _SPIN["gate"]: warp 0 polls x at 32 points (lane l: the 16 bytes at l M 2K / 32, one for each value head
    at M = 1), warp-uniformly (vote.any), until none is TAG or after SPIN_LIMIT rounds (then the threads' own polls
    decide); the other warps wait at the barrier. With _SPIN["land"], first the strip's NS chunks (parity 0)."""
    e("  // spin gate: warp 0 alone polls x until its 32 sampled vectors are written; the other warps wait here")
    e("  setp.ne.u32 %p, %warp, 0;")
    e(f"  @%p bra XG_DONE{sfx};")
    if _SPIN["land"]:
        e("  // land: the strip's chunks first, so that x's loads queue behind none of them")
        for i in range(NS * _LAND["q"]):
            e(f"XL{i}{sfx}:")
            e(f"  mbarrier.try_wait.parity.shared::cta.b64 %p, [%bars+{8 * i}], 0;")
            e(f"  @!%p bra XL{i}{sfx};")
    e(f"  mul.lo.u32 %t0, %m, {2 * sh.K // 32};")
    e("  mul.lo.u32 %t0, %t0, %lane;")
    e("  cvt.u64.u32 %pt64, %t0;")
    e("  add.u64 %pa, %px, %pt64;")
    e("  mov.u32 %spn, 0;")
    X = [f"%xr0_0_{c}" for c in range(4)]  # (scratch here: x's loads fill them after the gate)
    e(f"XG{sfx}:")
    e(f"  ld.relaxed.gpu.global.v4.u32 {{{', '.join(X)}}}, [%pa];")
    tag_any(e, X)
    e("  vote.sync.any.pred %ptg, %ptg, 0xffffffff;")
    e(f"  @!%ptg bra XG_DONE{sfx};")
    e("  add.u32 %spn, %spn, 1;")
    e(f"  setp.gt.u32 %p, %spn, {SPIN_LIMIT};")
    e(f"  @%p bra XG_DONE{sfx};  // the threads' own polls (and their fallback) decide")
    e("  nanosleep.u32 32;")
    e(f"  bra.uni XG{sfx};")
    e(f"XG_DONE{sfx}:")
    e("  bar.sync 0;")


def x_rows_poll(e: Emit, h: int, nt: int, W: int, K: int, sfx: str) -> None:
    """spin (RES_SPIN): x_rows_load's 4 vectors (loaded ld.relaxed.gpu), each polled again until none of its 8 values is
    TAG. A vector past M is zeros (not TAG) and never polled. After SPIN_LIMIT polls the thread waits for the producer's
    grid instead and loads the final value."""
    X = f"%xr{nt}_{h}_"
    for j in range(4):
        lab = f"XP{h}_{nt}_{j}{sfx}"
        regs = [f"{X}{4 * j + c}" for c in range(4)]
        tag_any(e, regs)
        e(f"  @!%ptg bra {lab}_OK;")
        e(f"  // a TAG value: this vector's address again (x_rows_load's token {8 * nt + 2 * j} + lane / 16), polled")
        e(f"  add.u32 %kb, %warp, {h * W};")
        e("  shr.u32 %t1, %lane, 4;")
        e("  and.b32 %t2, %lane, 15;")
        e(f"  add.u32 %tok, %t1, {8 * nt + 2 * j};")
        x_row_address(e, K)
        e("  mov.u32 %spn, 0;")
        e(f"{lab}:")
        e("  add.u32 %spn, %spn, 1;")
        e(f"  setp.gt.u32 %p, %spn, {SPIN_LIMIT};")
        e(f"  @%p bra {lab}_WAIT;")
        e("  nanosleep.u32 32;")
        e(f"  ld.relaxed.gpu.global.v4.u32 {{{', '.join(regs)}}}, [%pa];")
        tag_any(e, regs)
        e(f"  @%ptg bra {lab};")
        e(f"  bra.uni {lab}_OK;")
        e(f"{lab}_WAIT:")
        e("  griddepcontrol.wait;  // the producer is complete: its values are final")
        e(f"  ld.global.v4.u32 {{{', '.join(regs)}}}, [%pa];")
        e(f"{lab}_OK:")


def tag_any(e: Emit, regs: list) -> None:
    """%ptg = some BF16 half of the 4 words ``regs`` is TAG (0xFFFF, the largest u16: the halves' maximum)."""
    e(f"  max.u16x2 %t0, {regs[0]}, {regs[1]};")
    e(f"  max.u16x2 %t1, {regs[2]}, {regs[3]};")
    e("  max.u16x2 %t0, %t0, %t1;")
    e("  and.b32 %t1, %t0, 0xffff;")
    e(f"  setp.eq.u32 %ptg, %t1, {TAG:#06x};")
    e("  shr.u32 %t1, %t0, 16;")
    e(f"  setp.eq.or.u32 %ptg, %t1, {TAG:#06x}, %ptg;")


def x_next_tags(e: Emit, sh: Shape) -> None:
    """spin (RES_SPIN), before any wait: CTA c fills bytes c q M 16 .. of x_next (M x 2K bytes, q = 2K / 16 / grid
    16-byte stores a row) with TAG, thread t < q M one store. x_next's last reader completed before this grid launched
    and its next writer launches after this grid completes (experiments/decode/step_ab.py res_spin_runner's two
    buffers), so plain stores."""
    q = 2 * sh.K // 16 // sh.grid
    assert q * 16 * sh.grid == 2 * sh.K and q * 16 <= sh.threads, (sh.name, q)
    e(f"  // spin: this CTA's share of x_next ({q} 16-byte stores a row) filled with TAG, the next consumer's poison")
    e(f"  mul.lo.u32 %t0, %m, {q};")
    e("  setp.lt.u32 %p, %th, %t0;")
    e("  mov.u32 %t1, %ctaid.x;")
    e("  mad.lo.u32 %t1, %t1, %t0, %th;")
    e("  mul.wide.u32 %pt64, %t1, 16;")
    e("  ld.param.u64 %pa, [x_next];  // (not kept: read once, here)")
    e("  cvta.to.global.u64 %pa, %pa;")
    e("  add.u64 %pa, %pa, %pt64;")
    e(f"  mov.b32 %t2, {TAG << 16 | TAG:#010x};")
    e("  @%p st.global.v4.u32 [%pa], {%t2, %t2, %t2, %t2};")


def x_direct_load(e: Emit, h: int, nt: int, W: int, K: int) -> None:
    """x_direct (weights packed by pack_weight(x_direct=True)): the thread's B fragments of k block
    h W + warp, token 8 nt + g, straight from global memory: lane (g, tig) takes columns
    32 j + 8 tig .. + 7 of the block by 16-byte load j (j = 0..3) into %xr{nt}_{h}_{4 j}..{4 j + 3};
    the packed weights put the same columns in the A fragments (netra.contracts.proj.frag_k), so no trip
    through shared memory. Each load instruction reads 64 contiguous bytes of each of 8 tokens
    (16 whole sectors); 0 for a token >= M."""
    X = f"%xr{nt}_{h}_"
    e(f"  // x of k block {h} * {W} + warp, n-tile {nt}: token {8 * nt} + g, columns 32 j + 8 tig .. + 7, fragment order")
    e(f"  add.u32 %tok, %g, {8 * nt};")
    e("  setp.lt.u32 %pv, %tok, %m;")
    e(f"  add.u32 %kb, %warp, {h * W};")
    e(f"  mul.lo.u32 %t0, %tok, {K};")
    e("  mad.lo.u32 %t0, %kb, 128, %t0;")
    e("  mad.lo.u32 %t0, %tig, 8, %t0;")
    e("  mul.wide.u32 %pt64, %t0, 2;")
    e("  add.u64 %pa, %px, %pt64;")
    for j in range(4):
        regs = ", ".join(f"{X}{4 * j + c}" for c in range(4))
        for c in range(4):
            e(f"  mov.b32 {X}{4 * j + c}, 0;")
        e(f"  @%pv {_XLD[0]}.v4.u32 {{{regs}}}, [%pa+{64 * j}];")


def x_prepped_layout(sh: Shape) -> tuple[int, int]:
    """x_prepped: (bytes of the fragments, bytes in all). Fragments: word r of lane l, k block kb, n-tile nt at
    4 (((nt KB + kb) 32 + l) 16 + r); then the inverse scales: f32 of token 8 nt + g, k block kb at
    frag_bytes + 4 ((nt KB + kb) 8 + g)."""
    frag = sh.NT * sh.KB * 32 * 64
    return frag, frag + sh.NT * sh.KB * 8 * 4


def x_prepped_load(e: Emit, sh: Shape, h: int, nt: int) -> None:
    """x_prepped: this lane's 16 fragment words of k block h W + warp, n-tile nt, and its token's inverse scale."""
    X = f"%xr{nt}_{h}_"
    e(f"  // x_prepped: n-tile {nt}, k block {h} * {sh.W} + warp: 64 bytes of fragments, the inverse scale")
    e(f"  add.u32 %kb, %warp, {h * sh.W + nt * sh.KB};")
    e("  mad.lo.u32 %t0, %kb, 32, %lane;")
    e("  mul.wide.u32 %pt64, %t0, 64;")
    e("  add.u64 %pa, %px, %pt64;")
    for j in range(4):
        regs = ", ".join(f"{X}{4 * j + c}" for c in range(4))
        e(f"  ld.global.v4.u32 {{{regs}}}, [%pa+{16 * j}];")
    e("  mad.lo.u32 %t0, %kb, 8, %g;")
    e("  mul.wide.u32 %pt64, %t0, 4;")
    e("  add.u64 %pa, %px, %pt64;")
    e(f"  ld.global.u32 %inv{nt}_{h}, [%pa+{x_prepped_layout(sh)[0]}];")


def x_rows_load_gu(e: Emit, sh: Shape, h: int) -> None:
    """moedown: as x_rows_load (n-tile 0), but x is silu(gate) * up of each expert's gate | up
    rows: k block kb = h W + warp is block kb % 4 of expert j = kb / 4, whose gate | up row of
    token t is gu[t, j] (x, [M, 8, 2 I]) for j < 8 and sgu[t] (xs, [M, 2 I]) for the shared
    expert; the gate's 8 values into %xr0_{h}_*, the up's (I further) into %u{h}_*. silu_mul
    makes the products once the weight chunks are requested."""
    I = sh.K // (TOP_K + 1)
    X, U = f"%xr0_{h}_", f"%u{h}_"
    e(f"  // gate and up rows of k block {h} * {sh.W} + warp (expert kb / 4, its block kb % 4), coalesced")
    e(f"  add.u32 %kb, %warp, {h * sh.W};")
    e("  shr.u32 %t1, %lane, 4;")
    e("  and.b32 %t2, %lane, 15;")
    shared = (h + 1) * sh.W > 4 * TOP_K
    e("  shr.u32 %t3, %kb, 2;  // expert j")
    e("  and.b32 %ej, %kb, 3;")
    e("  mul.lo.u32 %ej, %ej, 128;")
    e("  mad.lo.u32 %ej, %t2, 8, %ej;  // the lane's k within the expert's row")
    if shared:
        e(f"  setp.eq.u32 %pr, %t3, {TOP_K};  // the shared expert's (not %pq: it holds the ids-table predicate)")
    for j in range(4):
        e(f"  add.u32 %tok, %t1, {2 * j};")
        e("  setp.lt.u32 %pv, %tok, %m;")
        e(f"  mul.lo.u32 %t0, %tok, {TOP_K};")
        e("  add.u32 %t0, %t0, %t3;")
        e(f"  mul.lo.u32 %t0, %t0, {2 * I};")
        e("  add.u32 %t0, %t0, %ej;")
        e("  mul.wide.u32 %pt64, %t0, 2;")
        e("  add.u64 %pa, %px, %pt64;")
        if shared:
            e(f"  mad.lo.u32 %t0, %tok, {2 * I}, %ej;")
            e("  mul.wide.u32 %pt64, %t0, 2;")
            e("  add.u64 %pc, %pxs, %pt64;")
            e("  selp.b64 %pa, %pc, %pa, %pr;")
        for R in (X, U):
            regs = ", ".join(f"{R}{4 * j + c}" for c in range(4))
            for c in range(4):
                e(f"  mov.b32 {R}{4 * j + c}, 0;")
            e(f"  @%pv {_XLD[0]}.v4.u32 {{{regs}}}, [%pa{'+' + str(2 * I) if R == U else ''}];")


def silu_mul(e: Emit, h: int) -> None:
    """moedown: %xr0_{h}_* = bf16(bf16(silu(gate)) * up) in place, as the model's two BF16 ops
    (silu(g) = g / (1 + exp(-g)) in fp32 with ex2.approx and rcp.approx: within an fp32 ulp or
    two, so the BF16 result is the model's but at rare rounding boundaries); rows past M skipped
    (their words are 0)."""
    X, U = f"%xr0_{h}_", f"%u{h}_"
    e(f"  // chunk {h}: x = silu(gate) * up, rounded to BF16 twice as the model's ops")
    for j in range(4):
        e("  shr.u32 %tok, %lane, 4;")
        e(f"  add.u32 %tok, %tok, {2 * j};")
        e("  setp.ge.u32 %p, %tok, %m;")
        e(f"  @%p bra SILU_{h}_{j};")
        for c in range(4):
            silu_mul_word(e, f"{X}{4 * j + c}", f"{U}{4 * j + c}")
        e(f"SILU_{h}_{j}:")


def silu_mul_word(e: Emit, x: str, u: str) -> None:
    """``x`` = bf16(bf16(silu(gate)) * up) for the two BF16 of gate word ``x`` and up word ``u`` (silu_mul's
    arithmetic; also gen_moe_down_grp's moe_act). Uses %t1, %f0..%f3."""
    bf16x2_to_f32(e, x)
    for f in ("%f0", "%f1"):
        e(f"  mul.f32 %f2, {f}, 0fBFB8AA3B;  // -log2(e) g")
        e("  ex2.approx.ftz.f32 %f2, %f2;")
        e("  add.f32 %f2, %f2, 0f3F800000;")
        e("  rcp.approx.ftz.f32 %f2, %f2;")
        e(f"  mul.f32 {f}, {f}, %f2;")
    e(f"  cvt.rn.bf16x2.f32 {x}, %f1, %f0;  // silu(g), BF16")
    bf16x2_to_f32(e, x)
    e("  mov.b32 %f2, %f0;")
    e("  mov.b32 %f3, %f1;")
    bf16x2_to_f32(e, u)
    e("  mul.f32 %f0, %f0, %f2;")
    e("  mul.f32 %f1, %f1, %f3;")
    e(f"  cvt.rn.bf16x2.f32 {x}, %f1, %f0;  // silu(g) * u, BF16")


def sigmoid_bf16(e: Emit) -> None:
    """%f1 = bf16(sigmoid(bf16 %q1)) as f32 (the shared expert's weight; also gen_moe_down_grp's moe_act)."""
    e("  cvt.f32.bf16 %f1, %q1;")
    e("  // sigmoid as torch on BF16: 1 / (1 + exp(-x)) in fp32, rounded to BF16")
    e("  mul.f32 %f1, %f1, 0fBFB8AA3B;  // -log2(e)")
    e("  ex2.approx.f32 %f1, %f1;")
    e("  add.f32 %f1, %f1, 0f3F800000;")
    e("  rcp.rn.f32 %f1, %f1;")
    e("  cvt.rn.bf16.f32 %q1, %f1;")
    e("  cvt.f32.bf16 %f1, %q1;")


def act_scale_convert(e: Emit, x0: str, x1: str) -> None:
    """moe_act's warp (gen_moe_down_grp; also down_phase): the 128 values of x0, x1 (BF16x2, 4 per lane) to f16
    scaled by moedown's power-of-two scale of their amax (integer max of the magnitudes, then over the warp);
    %t3 keeps the inverse scale's bits. Uses %t0..%t3, %f0..%f2, %amax, %sc, %pz."""
    e("  // the block's amax: integer max of the BF16 magnitudes, then over the warp")
    e(f"  and.b32 %t0, {x0}, 0x7fff7fff;")
    e(f"  and.b32 %t1, {x1}, 0x7fff7fff;")
    e("  max.u16x2 %t0, %t0, %t1;")
    amax_fold(e)
    for d in (1, 2, 4, 8, 16):
        e(f"  shfl.sync.bfly.b32 %f2, %amax, {d}, 31, 0xffffffff;")
        e("  max.f32 %amax, %amax, %f2;")
    x_scale_bits(e)
    e("  mov.b32 %sc, %t2;")
    for x in (x0, x1):
        bf16x2_to_f32(e, x)
        e("  mul.f32 %f0, %f0, %sc;")
        e("  mul.f32 %f1, %f1, %sc;")
        e(f"  cvt.rn.f16x2.f32 {x}, %f1, %f0;")


def act_word(e: Emit) -> None:
    """%t0 = block %t0's word for this lane's x0 (x1's is 16 words on): 64 words per block, lane l at
    32 (l % 2) + 2 (l / 4) + (l / 2) % 2, where the down kernels' lane (g, tig) finds its B fragments."""
    e("  shl.b32 %t0, %t0, 6;  // 64 words each")
    e("  and.b32 %t1, %lane, 1;")
    e("  shl.b32 %t1, %t1, 5;")
    e("  add.u32 %t0, %t0, %t1;")
    e("  shr.u32 %t1, %lane, 2;")
    e("  mad.lo.u32 %t0, %t1, 2, %t0;")
    e("  bfe.u32 %t1, %lane, 1, 1;")
    e("  add.u32 %t0, %t0, %t1;")


def moedown_order_sum(e: Emit, part: str, part_off: int, xs: str, xs_off: int) -> None:
    """One output row's sum in moedown's order from the partials [j][q] (64 B apart, at part + part_off) and xs
    [j][q] (fp32, at xs + xs_off): warp w = 4 (j % 3) + q summed fma(p, xs, acc) over j = w / 4, + 3, + 6 from 0,
    the 12 sums in warp order; %q0 = the BF16 out (gen_moe_down_grp.down; also down_phase)."""
    for w in range(12):
        jb, q = w // 4, w % 4
        for c in range(3):
            j = jb + 3 * c
            e(f"  ld.shared.f32 %f1, [{part}+{part_off + (4 * j + q) * 64}];")
            e(f"  ld.shared.f32 %f2, [{xs}+{xs_off + (4 * j + q) * 4}];")
            e(f"  fma.rn.f32 %f3, %f1, %f2, {'0f00000000' if c == 0 else '%f3'};  // warp {w}, chunk {c}: expert {j}, block {q}")
        e("  mov.f32 %f0, %f3;" if w == 0 else "  add.f32 %f0, %f0, %f3;")
    e("  cvt.rn.bf16.f32 %q0, %f0;")


def moedown_mult(e: Emit, sh: Shape, h: int, nt: int) -> None:
    """moedown: the inverse x scale of (token 8 nt + g, k block h W + warp) times the weight of
    its expert j = k block / 4: top[token, j] (BF16) for j < 8, bf16(sigmoid(glogit[token])) for
    the shared expert (j = 8); exact in fp32 (a power of two times a BF16 value). 0 past M."""
    e(f"  // the expert weight of (token {8 * nt} + g, k block {h} * {sh.W} + warp) into the inverse x scale")
    e(f"  add.u32 %tok, %g, {8 * nt};")
    e("  setp.lt.u32 %pv, %tok, %m;")
    e(f"  add.u32 %kb, %warp, {h * sh.W};")
    e("  shr.u32 %t0, %kb, 2;  // expert j")
    shared = (h + 1) * sh.W > 32
    e("  mov.b16 %q0, 0;")
    if shared:
        e("  setp.eq.u32 %pq, %t0, 8;")
        e("  and.pred %pr, %pv, !%pq;")
    else:
        e("  mov.pred %pr, %pv;")
    if _TOPE["on"]:
        assert nt == 0, "moedown is one n-tile"
        e(f"  mov.b16 %q0, %tw{h};  // loaded with x (0 where %pr is false)")
    else:
        e("  mad.lo.u32 %t1, %tok, 8, %t0;")
        e("  mul.wide.u32 %pt64, %t1, 2;")
        e("  add.u64 %pa, %ptop, %pt64;")
        e("  @%pr ld.global.b16 %q0, [%pa];")
    e("  cvt.f32.bf16 %f0, %q0;")
    if shared:
        e("  and.pred %pr, %pv, %pq;")
        if _TOPE["on"]:
            e(f"  mov.b16 %q1, %gw{h};  // loaded with x")
        else:
            e("  mov.b16 %q1, 0;")
            e("  mul.wide.u32 %pt64, %tok, 2;")
            e("  add.u64 %pa, %pgl, %pt64;")
            e("  @%pr ld.global.b16 %q1, [%pa];")
        sigmoid_bf16(e)
        e("  selp.f32 %f0, %f1, %f0, %pr;")
    e(f"  mov.b32 %f2, %inv{nt}_{h};")
    e("  mul.f32 %f2, %f2, %f0;")
    e(f"  mov.b32 %inv{nt}_{h}, %f2;")


def moedown_weights_early(e: Emit, sh: Shape) -> None:
    """top_early: every chunk's expert weight loaded now, with x (after the wait: the router wrote them): top[token g, j]
    into %tw{h} and, for the chunk holding the shared expert, glogit[token g] into %gw{h}; 0 where moedown_mult's
    predicate is false. Its own registers: %pq holds the ids-table predicate here."""
    e("  // top_early: every chunk's expert weight now, with x (moedown_mult takes the registers)")
    e("  setp.lt.u32 %pte, %g, %m;")
    for h in range(sh.NC):
        shared = (h + 1) * sh.W > 32
        e(f"  add.u32 %te0, %warp, {h * sh.W};")
        e("  shr.u32 %te0, %te0, 2;  // expert j")
        e(f"  mov.b16 %tw{h}, 0;")
        if shared:
            e("  setp.eq.u32 %ptq, %te0, 8;")
            e("  and.pred %ptr, %pte, !%ptq;")
        else:
            e("  mov.pred %ptr, %pte;")
        e("  mad.lo.u32 %te1, %g, 8, %te0;")
        e("  mul.wide.u32 %tep, %te1, 2;")
        e("  add.u64 %tep, %ptop, %tep;")
        e(f"  @%ptr ld.global.b16 %tw{h}, [%tep];")
        if shared:
            e("  and.pred %ptr, %pte, %ptq;")
            e(f"  mov.b16 %gw{h}, 0;")
            e("  mul.wide.u32 %tep, %g, 2;")
            e("  add.u64 %tep, %pgl, %tep;")
            e(f"  @%ptr ld.global.b16 %gw{h}, [%tep];")


def x_rows_to_fragments(e: Emit, h: int, nt: int) -> None:
    """Through the warp's 2 KB of shared memory at %xst: the rows of x_rows_load (token row g
    at 256 g, its 16-byte chunk m at (m ^ g) 16: conflict-free both ways) back into the mma
    B-fragment layout in the same registers (register 2 i + hh = token g, k 16 i + 8 hh + 2 tig)."""
    X = f"%xr{nt}_{h}_"
    e(f"  // n-tile {nt}, chunk {h}: rows to shared memory, fragments back")
    e("  shr.u32 %t1, %lane, 4;")
    e("  and.b32 %t2, %lane, 15;")
    for j in range(4):
        e(f"  add.u32 %t3, %t1, {2 * j};  // token row in the n-tile")
        e("  xor.b32 %t0, %t2, %t3;")
        e("  shl.b32 %t0, %t0, 4;")
        e("  mad.lo.u32 %t0, %t3, 256, %t0;")
        e("  add.u32 %t0, %t0, %xst;")
        regs = ", ".join(f"{X}{4 * j + c}" for c in range(4))
        e(f"  st.shared.v4.u32 [%t0], {{{regs}}};")
    e("  bar.warp.sync 0xffffffff;")
    e("  shl.b32 %t1, %g, 8;")
    e("  mad.lo.u32 %t1, %tig, 4, %t1;")
    e("  add.u32 %t1, %t1, %xst;")
    for r in range(16):
        e(f"  xor.b32 %t0, %g, {r};")
        e("  shl.b32 %t0, %t0, 4;")
        e("  add.u32 %t0, %t0, %t1;")
        e(f"  ld.shared.u32 {X}{r}, [%t0];")
    e("  bar.warp.sync 0xffffffff;  // the next rows may overwrite the region")


def x_rows_to_fragments_t(e: Emit, h: int, nt: int) -> None:
    """x_tpose (promoted for the norm builds without b | a): as x_rows_to_fragments, through the same 2 KB, but laid out by fragment lane: the 16
    registers of token t, tig c are one 64-byte row r = 4 t + (c ^ (t & 1)), its 16-byte chunk q at q ^ (r / 2) % 4
    (conflict-free both ways: a 4-byte store puts a half-warp's token in 16 banks and the other half-warp's, whose
    parity flips c ^ (t & 1), in the other 16; the 8 lanes of a 16-byte load phase land in 8 bank groups). The rows
    go in as 4-byte stores, one per (row group, word), none for a token >= M; the fragments come back as four 16-byte
    loads, none (0) for a token >= M. The same registers get the same values (rows >= M were stored as 0 before).
    Why: the staging looked bound by the SM's shared-memory pipe (12 warps; moedown_trace_clock_b976963.json: ~1400
    cycles), 32 wavefronts a chunk whatever M; this takes 8 at M = 1 (4 stores of 16 lanes, 4 loads of 4 lanes) and
    32 at M = 8. Measured: moe_down's staging only 340 cycles shorter (moedown_trace_clock_x_tpose_1f70164.json), the
    norm builds 0.1-0.7 us faster at every M (x_tpose_norm_variant_eec1be8.json)."""
    X = f"%xr{nt}_{h}_"
    e(f"  // n-tile {nt}, chunk {h}: rows to shared memory by fragment lane, fragments back (x_tpose)")
    e("  {")
    e("  .reg .pred %px<4>;")
    e("  .reg .b32 %xa, %xu, %xm, %xf, %xt;")
    e("  shr.u32 %xu, %lane, 4;  // the lane's token in row group j: u + 2 j")
    e("  and.b32 %xm, %lane, 15;  // its 4 words: register m of lanes (token, tig c)")
    for j in range(4):
        e(f"  add.u32 %xt, %xu, {8 * nt + 2 * j};")
        e(f"  setp.lt.u32 %px{j}, %xt, %m;  // a token < M")
    for c in range(4):
        e(f"  xor.b32 %xt, %xu, {c};")
        e("  shl.b32 %xa, %xu, 2;")
        e(f"  add.u32 %xa, %xa, %xt;  // r of row group 0 for word {c} (r + 8 j for group j)")
        e("  shr.u32 %xf, %xa, 1;")
        e("  and.b32 %xf, %xf, 3;  // (r / 2) % 4, the same for every j")
        e("  shl.b32 %xa, %xa, 6;")
        e("  add.u32 %xa, %xa, %xst;")
        e("  shr.u32 %xt, %xm, 2;")
        e("  xor.b32 %xt, %xt, %xf;")
        e("  shl.b32 %xt, %xt, 4;")
        e("  add.u32 %xa, %xa, %xt;")
        e("  and.b32 %xt, %xm, 3;")
        e("  mad.lo.u32 %xa, %xt, 4, %xa;")
        for j in range(4):
            e(f"  @%px{j} st.shared.u32 [%xa+{512 * j}], {X}{4 * j + c};")
    e("  bar.warp.sync 0xffffffff;")
    e("  and.b32 %xt, %g, 1;")
    e("  xor.b32 %xt, %xt, %tig;")
    e("  shl.b32 %xa, %g, 2;")
    e("  add.u32 %xa, %xa, %xt;  // r of (token g, tig)")
    e("  shr.u32 %xf, %xa, 1;")
    e("  and.b32 %xf, %xf, 3;")
    e("  shl.b32 %xa, %xa, 6;")
    e("  add.u32 %xa, %xa, %xst;")
    e(f"  add.u32 %xt, %g, {8 * nt};")
    e("  setp.lt.u32 %px0, %xt, %m;")
    for q in range(4):
        regs = [f"{X}{4 * q + c}" for c in range(4)]
        for r in regs:
            e(f"  mov.b32 {r}, 0;")
        e(f"  xor.b32 %xt, %xf, {q};")
        e("  shl.b32 %xt, %xt, 4;")
        e("  add.u32 %xt, %xt, %xa;")
        e(f"  @%px0 ld.shared.v4.u32 {{{', '.join(regs)}}}, [%xt];  // registers {4 * q} .. {4 * q + 3}")
    e("  bar.warp.sync 0xffffffff;  // the next rows may overwrite the region")
    e("  }")


def x_rows_to_fragments_v4(e: Emit, h: int, nt: int) -> None:
    """As x_rows_to_fragments, for weights packed by pack_weight(x_direct=True): the fragments come
    back as 4 16-byte loads per thread (register 4 j + c = token g, columns 32 j + 8 tig + 2 c, + 1:
    16-byte chunk m = 4 j + tig of the row) instead of 16 four-byte ones. Chunk m of token row r
    sits at m ^ 4 (r % 2) ^ (r / 2) % 4: conflict-free for the row stores (one row per 8 lanes) and
    for the fragment loads (8 lanes: rows 2 q, 2 q + 1, four chunks each)."""
    X = f"%xr{nt}_{h}_"
    e(f"  // n-tile {nt}, chunk {h}: rows to shared memory, fragments back (16-byte loads)")
    e("  shr.u32 %t1, %lane, 4;")
    e("  and.b32 %t2, %lane, 15;")
    for j in range(4):
        e(f"  add.u32 %t3, %t1, {2 * j};  // token row in the n-tile")
        e("  and.b32 %t0, %t3, 1;")
        e("  shl.b32 %t0, %t0, 2;")
        e("  xor.b32 %t0, %t0, %t2;")
        e("  shr.u32 %ta, %t3, 1;")
        e("  xor.b32 %t0, %t0, %ta;")
        e("  shl.b32 %t0, %t0, 4;")
        e("  mad.lo.u32 %t0, %t3, 256, %t0;")
        e("  add.u32 %t0, %t0, %xst;")
        regs = ", ".join(f"{X}{4 * j + c}" for c in range(4))
        e(f"  st.shared.v4.u32 [%t0], {{{regs}}};")
    e("  bar.warp.sync 0xffffffff;")
    e("  // chunk 4 j + tig of row g at ((4 j) ^ t) 16, t = tig ^ 4 (g % 2) ^ g / 2: j = 0, 2 from one address, 1, 3 the other")
    e("  and.b32 %t0, %g, 1;")
    e("  shl.b32 %t0, %t0, 2;")
    e("  xor.b32 %t0, %t0, %tig;")
    e("  shr.u32 %t1, %g, 1;")
    e("  xor.b32 %t0, %t0, %t1;")
    e("  shl.b32 %t1, %g, 8;")
    e("  add.u32 %t1, %t1, %xst;")
    e("  shl.b32 %t2, %t0, 4;")
    e("  add.u32 %t2, %t2, %t1;")
    e("  xor.b32 %t0, %t0, 4;")
    e("  shl.b32 %t3, %t0, 4;")
    e("  add.u32 %t3, %t3, %t1;")
    for j in range(4):
        regs = ", ".join(f"{X}{4 * j + c}" for c in range(4))
        e(f"  ld.shared.v4.u32 {{{regs}}}, [{'%t2' if j % 2 == 0 else '%t3'}+{128 * (j // 2)}];")
    e("  bar.warp.sync 0xffffffff;  // the next rows may overwrite the region")


def x_pair_layout(sh: Shape) -> tuple[int, int, int]:
    """xpair: (offset of the x exchange region, its mbarrier's offset, the dynamic shared memory
    in all) after the contract's shared memory: [chunk][n-tile][warp] 2 KB regions, each the
    swizzled 8 token rows x 128 k of x_rows_to_fragments."""
    off = (sh.smem + 127) // 128 * 128
    bar = off + sh.NC * 2 * sh.W * 2048
    return off, bar, bar + 8


def x_pair_load_push(e: Emit, sh: Shape, h: int) -> None:
    """xpair: this CTA's n-tile (tokens 8 rank ..; 0 past M) of k block h W + warp by coalesced
    16-byte loads (as x_rows_load), stored swizzled into its region [h][rank][warp] here and,
    by st.async completing the peer's x mbarrier, in the peer CTA's same region."""
    W = sh.W
    X = f"%xr0_{h}_"  # scratch until the fragments are read back
    x_rows_load(e, h, 0, W, sh.K, tok_reg="%xr8")
    e(f"  // region [{h}][rank][warp]: token row 2 j + lane / 16 at 256 row, 16-byte chunk lane % 16 at ((lane % 16) ^ row) 16")
    e(f"  add.u32 %t3, %rank, {2 * h};")
    e(f"  mad.lo.u32 %t3, %t3, {W}, %warp;")
    e("  shl.b32 %t3, %t3, 11;")
    e("  add.u32 %t3, %t3, %xpo;")
    for j in range(4):
        e(f"  add.u32 %tok, %t1, {2 * j};")
        e("  xor.b32 %t0, %t2, %tok;")
        e("  shl.b32 %t0, %t0, 4;")
        e("  mad.lo.u32 %t0, %tok, 256, %t0;")
        e("  add.u32 %t0, %t0, %t3;")
        regs = ", ".join(f"{X}{4 * j + c}" for c in range(4))
        e(f"  st.shared.v4.u32 [%t0], {{{regs}}};")
        e("  mapa.shared::cluster.u32 %ta, %t0, %peer;")
        e(f"  st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%ta], {{{regs}}}, [%xpb];")


def x_pair_fragments(e: Emit, sh: Shape, h: int, nt: int) -> None:
    """xpair: the B fragments of n-tile nt, chunk h from region [h][nt][warp] (written by this
    CTA or its peer), as the second half of x_rows_to_fragments."""
    X = f"%xr{nt}_{h}_"
    e(f"  // n-tile {nt}, chunk {h}: fragments from the exchange region")
    e("  mad.lo.u32 %t1, %warp, 2048, %xpo;")
    e(f"  add.u32 %t1, %t1, {(2 * h + nt) * sh.W * 2048};")
    e("  shl.b32 %t0, %g, 8;")
    e("  mad.lo.u32 %t0, %tig, 4, %t0;")
    e("  add.u32 %t1, %t1, %t0;")
    for r in range(16):
        e(f"  xor.b32 %t0, %g, {r};")
        e("  shl.b32 %t0, %t0, 4;")
        e("  add.u32 %t0, %t0, %t1;")
        e(f"  ld.shared.u32 {X}{r}, [%t0];")


def x_convert(e: Emit, h: int, nt: int, packed: bool | str = False, scale_bf16x2: bool = False) -> None:
    """amax over the mma group's 4 threads (they hold the 128 values of token 8 nt + g in this
    k block), the power-of-two scale, f16 fragments in place; the inverse scale to %inv{nt}_{h}.
    ``packed``: the thread's amax by amax_packed (the same value, a quarter of the instructions).
    ``scale_bf16x2``: both BF16 of a register scaled by one mul.rn.bf16x2 before they are unpacked, not
    two f32 multiplies after (a power of two: exact in BF16 but below 2^-133, which f16 rounds to 0 either
    way; BF16 arithmetic keeps subnormals), so the same fragments."""
    X = f"%xr{nt}_{h}_"
    e(f"  // amax of (token, k block) over the group's 4 threads; scale; f16 fragments (chunk {h}, n-tile {nt})")
    if packed == "s16":
        amax_s16(e, X)
    elif packed:
        amax_packed(e, X)
    else:
        e("  mov.f32 %amax, 0f00000000;")
        for r in range(16):
            amax_update(e, f"{X}{r}")
    for d in (1, 2):
        e(f"  shfl.sync.bfly.b32 %f2, %amax, {d}, 31, 0xffffffff;")
        e("  max.f32 %amax, %amax, %f2;")
    x_scale_bits(e)
    e("  mov.b32 %sc, %t2;")
    e(f"  mov.b32 %inv{nt}_{h}, %t3;")
    if scale_bf16x2:
        e("  prmt.b32 %t2, %t2, 0, 0x3232;  // the scale (a power of two) as two BF16")
    for r in range(16):
        if scale_bf16x2:
            e(f"  mul.rn.bf16x2 {X}{r}, {X}{r}, %t2;")
        bf16x2_to_f32(e, f"{X}{r}")
        if not scale_bf16x2:
            e("  mul.f32 %f0, %f0, %sc;")
            e("  mul.f32 %f1, %f1, %sc;")
        e(f"  cvt.rn.f16x2.f32 {X}{r}, %f1, %f0;")


def x_stage_layout(sh: Shape) -> tuple[int, int, int]:
    """(offset of the staged x rows, their stride, the x mbarrier's offset) after the
    contract's shared memory: 16 rows of 2 K bytes padded by 16 so the fragment reads of a
    warp (8 tokens x 4 threads) fall in 32 different banks."""
    stride = 2 * sh.K + 16
    off = (sh.smem + 127) // 128 * 128
    return off, stride, off + 16 * stride


def x_staged_fragments(e: Emit, h: int, nt: int, W: int, K: int, stride: int) -> None:
    """As x_fragments, from the x rows staged in shared memory at %sx (0 for a token >= M)."""
    X = f"%xr{nt}_{h}_"
    e(f"  // x of k block {h} * {W} + warp, n-tile {nt}: token {8 * nt} + g, from shared memory")
    e(f"  add.u32 %tok, %g, {8 * nt};")
    e("  setp.lt.u32 %pv, %tok, %m;")
    e(f"  mad.lo.u32 %t0, %tok, {stride}, %sx;")
    e(f"  add.u32 %kb, %warp, {h * W};")
    e("  mad.lo.u32 %t0, %kb, 256, %t0;")
    e("  mad.lo.u32 %t0, %tig, 4, %t0;")
    for i in range(8):
        for hh in range(2):
            e(f"  mov.b32 {X}{2 * i + hh}, 0;")
            e(f"  @%pv ld.shared.u32 {X}{2 * i + hh}, [%t0+{32 * i + 16 * hh}];")


def issue(e: Emit, sh: Shape, strip: str, h: int, stage: str) -> None:
    """Expect the bytes on full[stage] and bulk-copy chunk h of ``strip`` (its W weight tiles
    and their W block scales) into stage ``stage``. With generate(land_split=q): q pieces, each
    the tiles and scales of W / q warps on its own mbarrier (issue_pieces)."""
    if _LAND["q"] > 1:
        issue_pieces(e, sh, strip, h, stage, _LAND["q"])
        return
    e(f"  mad.lo.u32 %bf, {stage}, 8, %bars;")
    park = _PARK["on"]  # the diagnostic: only the scales arrive; the tiles are the ring's zeros
    e(f"  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bf], {(0 if park else sh.SB) + 4 * sh.W};")
    e(f"  mad.lo.u32 %ta, {stage}, {sh.SB}, %sbase;")
    if sh.fuse == "moedown":
        issue_moedown(e, sh, strip, h, stage)
        return
    if sh.fuse == "moe":
        e("  // virtual strip -> (pair, strip of its expert): the expert from the ids table (bad: E - 1, in bounds)")
        if sh.group:
            grp_strip(e, sh, strip, "%ej", "%ls", "%t0")
        else:
            e(f"  shr.u32 %ej, {strip}, {sh.S.bit_length() - 1};")
            e(f"  and.b32 %ls, {strip}, {sh.S - 1};")
        e("  shl.b32 %t0, %ej, 2;")
        e("  add.u32 %t0, %t0, %sbase;")
        if sh.group:  # the s / S-th distinct expert (always an expert)
            e(f"  ld.shared.u32 %ej, [%t0+{group_layout(sh)[2]}];")
        else:
            e(f"  ld.shared.u32 %ej, [%t0+{sh.ids_off}];")
        if sh.shared:  # id E: the shared expert's weight (ws, ss); a bad id reads it too (in bounds), its row NaN
            e("  min.u32 %ej, %ej, %ne;")
            e("  setp.eq.u32 %psh, %ej, %ne;")
            e("  selp.b32 %ej, 0, %ej, %psh;")
            e("  selp.b64 %psb, %pws, %pw, %psh;")
        else:
            e("  sub.u32 %t0, %ne, 1;")
            e("  min.u32 %ej, %ej, %t0;")
        e(f"  mad.lo.u32 %t0, %ej, {sh.S}, %ls;")
        strip = "%ls"
        e(f"  mul.lo.u32 %t0, %t0, {sh.KB};")
    else:
        e(f"  mul.lo.u32 %t0, {strip}, {sh.KB};")
    e(f"  add.u32 %t0, %t0, {h * sh.W};")
    e("  mul.wide.u32 %pt64, %t0, 2048;")
    e("  add.u64 %pa, %psb, %pt64;" if sh.shared else "  add.u64 %pa, %pw, %pt64;")
    if not park:
        e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes{_hint()} [%ta], [%pa], {sh.SB}, [%bf]{_pol()};")
    e("  // the chunk's W weight-block scales (s / 8, h W .. h W + W - 1), 16-byte aligned and contiguous")
    e(f"  shr.u32 %t0, {strip}, 3;")
    if sh.fuse == "moe":  # the expert's scales: N / 128 rows of KB
        e(f"  mad.lo.u32 %t0, %ej, {sh.N // 128}, %t0;")
    e(f"  mul.lo.u32 %t0, %t0, {sh.KB};")
    e(f"  add.u32 %t0, %t0, {h * sh.W};")
    e("  mul.wide.u32 %pt64, %t0, 4;")
    if sh.shared:
        e("  selp.b64 %psb, %pss, %ps, %psh;")
    e("  add.u64 %pa, %psb, %pt64;" if sh.shared else "  add.u64 %pa, %ps, %pt64;")
    e(f"  mad.lo.u32 %ta, {stage}, {sh.scl_bytes}, %sbase;")
    e(f"  add.u32 %ta, %ta, {sh.scl_off};")
    e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%ta], [%pa], {4 * sh.W}, [%bf];")


def issue_pieces(e: Emit, sh: Shape, strip: str, h: int, stage: str, q: int) -> None:
    """issue() in q pieces: piece i = warps i W / q .. (i + 1) W / q - 1 of the chunk (their tiles,
    SB / q bytes, and their scales, 4 W / q bytes) on mbarrier q stage + i, so each warp starts on
    its tiles when they land rather than when the whole chunk has."""
    tb, sb = sh.SB // q, 4 * sh.W // q
    e(f"  mul.lo.u32 %t0, {strip}, {sh.KB};")
    e(f"  add.u32 %t0, %t0, {h * sh.W};")
    e("  mul.wide.u32 %pt64, %t0, 2048;")
    e("  add.u64 %pa, %pw, %pt64;")
    e(f"  shr.u32 %t0, {strip}, 3;")
    e(f"  mul.lo.u32 %t0, %t0, {sh.KB};")
    e(f"  add.u32 %t0, %t0, {h * sh.W};")
    e("  mul.wide.u32 %pt64, %t0, 4;")
    e("  add.u64 %plq, %ps, %pt64;")
    e(f"  mad.lo.u32 %ta, {stage}, {sh.SB}, %sbase;")
    e(f"  mad.lo.u32 %lsc, {stage}, {sh.scl_bytes}, %sbase;")
    e(f"  mad.lo.u32 %bf, {stage}, {8 * q}, %bars;")
    park = _PARK["on"]  # the diagnostic: only the scales arrive; the tiles are the ring's zeros
    for i in range(q):
        e(f"  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bf+{8 * i}], {(0 if park else tb) + sb};  // piece {i}")
        if not park:
            e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes{_hint()} [%ta+{i * tb}], [%pa+{i * tb}], "
              f"{tb}, [%bf+{8 * i}]{_pol()};")
        e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%lsc+{sh.scl_off + i * sb}], "
          f"[%plq+{i * sb}], {sb}, [%bf+{8 * i}];")


def issue_moedown(e: Emit, sh: Shape, strip: str, h: int, stage: str) -> None:
    """moedown: chunk h of virtual strip (token t = strip / S, strip ls = strip % S of the
    token's experts) is experts j = 3 h .. 3 h + 2, each 4 packed tiles (8 KB) and 4 scales
    (16 B): routed j < 8 from the ids table (entry 8 t + j; bad: E - 1, in bounds), j = 8 the
    shared expert. %ta holds the stage's address."""
    per = sh.W // 3  # k blocks per expert (4)
    assert sh.KB == per * (TOP_K + 1), "the token's routed experts, then the shared one"
    e(f"  shr.u32 %ej, {strip}, {sh.S.bit_length() - 1};  // token")
    e(f"  and.b32 %ls, {strip}, {sh.S - 1};")
    for q in range(3):
        j = 3 * h + q
        e(f"  // expert {j} of the token" + (" (shared)" if j == TOP_K else ""))
        if j < TOP_K:
            e(f"  shl.b32 %t0, %ej, {(4 * TOP_K).bit_length() - 1};  // the token's {TOP_K} ids")
            e("  add.u32 %t0, %t0, %sbase;")
            e(f"  ld.shared.u32 %t1, [%t0+{sh.ids_off + 4 * j}];")
            e("  sub.u32 %t0, %ne, 1;")
            e("  min.u32 %t1, %t1, %t0;")
            e(f"  mad.lo.u32 %t0, %t1, {sh.S}, %ls;")
            e(f"  mul.lo.u32 %t0, %t0, {per};")
            e("  mul.wide.u32 %pt64, %t0, 2048;")
            e("  add.u64 %pa, %pw, %pt64;")
        else:
            e(f"  mul.lo.u32 %t0, %ls, {per};")
            e("  mul.wide.u32 %pt64, %t0, 2048;")
            e("  add.u64 %pa, %pws, %pt64;")
        e(f"  add.u32 %t2, %ta, {q * per * 2048};")
        e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes{_hint()} [%t2], [%pa], {per * 2048}, [%bf]{_pol()};")
        e("  shr.u32 %t0, %ls, 3;")
        if j < TOP_K:
            e(f"  mad.lo.u32 %t0, %t1, {sh.N // 128}, %t0;")
        e(f"  mul.lo.u32 %t0, %t0, {per};")
        e("  mul.wide.u32 %pt64, %t0, 4;")
        e("  add.u64 %pa, " + ("%ps" if j < TOP_K else "%pss") + ", %pt64;")
        e(f"  mad.lo.u32 %t2, {stage}, {sh.scl_bytes}, %sbase;")
        e(f"  add.u32 %t2, %t2, {sh.scl_off + 16 * q};")
        e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%t2], [%pa], {4 * per}, [%bf];")


def issue_strips(e: Emit, sh: Shape, first: str, count: int, stage0: str, label: str) -> None:
    """(Thread 0; the caller branches the others around.) The chunks of the CTA's strips first,
    first + G, ... (count strips, none >= S) into stages stage0, stage0 + 1, ..."""
    e(f"  mov.u32 %sn, {first};")
    for i in range(count):
        e(f"  setp.ge.u32 %p, %sn, {'%sv' if sh.fuse in ('moe', 'moedown') else sh.S};")
        e(f"  @%p bra {label};")
        for h in range(sh.NC):
            e(f"  add.u32 %t3, {stage0}, {i * sh.NC + h};")
            issue(e, sh, "%sn", h, "%t3")
        e("  add.u32 %sn, %sn, %nct;")
    e(f"{label}:")


def prefetch_strips(e: Emit, sh: Shape, start: int, label: str, lines: bool = False) -> None:
    """An L2 prefetch of the weight tiles of the CTA's strips start, start + 1, ... (strip s + i G while
    < S): DRAM -> L2 only, nothing returns to the SM, so the ring's later copies hit L2. Thread 0, one
    cp.async.bulk.prefetch.L2 per strip; or (``lines``) every thread, one prefetch.global.L2 of a 128-byte
    line per step (the load path, not the CTA's bulk unit, which also serves the ring's copies)."""
    n, nlines = -(-sh.S // sh.grid), sh.KB * 2048 // 128
    if start < n:
        e(f"  mad.lo.u32 %sn, %nct, {start}, %s;")
        if lines:
            e("  mul.wide.u32 %pb, %th, 128;")
    for _ in range(start, n):
        e(f"  setp.ge.u32 %p, %sn, {sh.S};")
        e(f"  @%p bra {label};")
        e(f"  mul.lo.u32 %t0, %sn, {sh.KB};")
        e("  mul.wide.u32 %pt64, %t0, 2048;")
        e("  add.u64 %pa, %pw, %pt64;")
        if not lines:
            e(f"  cp.async.bulk.prefetch.L2.global [%pa], {sh.KB * 2048};")
        else:
            e("  add.u64 %pa, %pa, %pb;")
            for j in range(0, nlines, sh.threads):
                if nlines - j < sh.threads:
                    e(f"  setp.lt.u32 %p, %th, {nlines - j};")
                e(("  @%p " if nlines - j < sh.threads else "  ") + f"prefetch.global.L2 [%pa+{j * 128}];")
        e("  add.u32 %sn, %sn, %nct;")
    e(f"{label}:")


def prefetch_changes(sh: Shape) -> bool:
    """Whether generate(sh, l2_prefetch=...) differs from the promoted build: not with a k split, experts or
    the gate CTA, and only where a CTA streams a strip after those copied before the wait."""
    return (sh.ksplit == 1 and sh.fuse not in ("moe", "moedown", "gate")
            and (-(-sh.S // sh.grid) > 1 or sh.pre_strips == 0))


def store_partials(e: Emit, nts: tuple = (0, 1), swizzle: bool = False, pred: bool = False) -> None:
    """The warp's 16 x 16 partials %acc to [token][row] fp32 at %t0 (C fragment: rows g, g + 8;
    tokens 2 tig, 2 tig + 1, + 8); only the n-tiles in ``nts``. A warp's store of one register
    puts its 32 lanes in 8 banks (4-way conflicts: row g at 4 g, tokens 2 tig at 128 tig).
    ``swizzle``: row r of token t at r ^ 8 ((t / 2) % 2), which halves that (2-way); the sums read
    it back with red_index."""
    e("  shl.b32 %t1, %tig, 7;")
    e("  mad.lo.u32 %t1, %g, 4, %t1;")
    e("  add.u32 %t1, %t1, %t0;")
    if swizzle:  # rows g (h = 0) at 32 (tig % 2): %t2; rows g + 8 (h = 1) at 32 (1 - tig % 2): %t1 + 32
        e("  and.b32 %t3, %tig, 1;")
        e("  shl.b32 %t3, %t3, 5;")
        e("  add.u32 %t2, %t1, %t3;")
        e("  sub.u32 %t1, %t1, %t3;")
    for r in [r for r in range(4 * (max(nts) + 1)) if r // 4 in nts]:  # acc r: token 2 tig + (r % 2) + 8 (r // 4), row g + 8 ((r // 2) % 2)
        off = (r % 2) * 64 + ((r // 2) % 2) * 32 + (r // 4) * 512
        reg = "%t2" if swizzle and (r // 2) % 2 == 0 else "%t1"
        e((f"  @%pn{r // 4} " if pred else "  ") + f"st.shared.f32 [{reg}+{off}], %acc{r};")


def red_index(e: Emit, reg: str, swizzle: bool) -> None:
    """``reg`` = output o (token o / 16, row o % 16) -> its word in a warp's [token][row] partials:
    o itself, or with store_partials(swizzle=True) o ^ 8 ((o / 32) % 2). Uses %kb (free after the prologue)."""
    if swizzle:
        e(f"  shr.u32 %kb, {reg}, 2;")
        e("  and.b32 %kb, %kb, 8;")
        e(f"  xor.b32 {reg}, {reg}, %kb;")


def sum_warps_store(e: Emit, threads: int, W: int, N: int, red_base: str, done: str, res: bool = False,
                    moe: Shape | None = None, swizzle: bool = False, rb: int = 1024) -> None:
    """Output o = tid + threads r < 16 M: row o % 16, token o / 16; the W warps' [token][row]
    partials at red_base (the lines that set %t0) + 1024 w summed in warp order (consecutive
    threads read consecutive words), BF16 to out[token, 16 s + row]. ``res``: the BF16 product
    goes to out (%pmo) and is added to the residual h (%po; fp32 add, BF16 round: the model's
    two ops).
    ``moe``: only pair j = s / S's own x row (j >> pair_shift), to out[j, 16 (s % S) + row] =
    out + 2 (16 s + row); NaN where the pair's id was not an expert. A "moedown" ``moe``: only
    token t = s / S's row, to h[t, 16 (s % S) + row] (with ``res``); NaN where any of the
    token's 8 ids was not an expert."""
    down = moe is not None and moe.fuse == "moedown"
    if down:
        e(f"  shr.u32 %ej, %s, {moe.S.bit_length() - 1};  // this strip's token: the only row stored")
        e(f"  and.b32 %ls, %s, {moe.S - 1};")
        e(f"  shl.b32 %t0, %ej, {(4 * TOP_K).bit_length() - 1};")
        e("  add.u32 %t0, %t0, %sbase;")
        e(f"  ld.shared.u32 %t1, [%t0+{moe.ids_off}];")
        for j in range(1, TOP_K):
            e(f"  ld.shared.u32 %t2, [%t0+{moe.ids_off + 4 * j}];")
            e("  max.u32 %t1, %t1, %t2;")
        e("  setp.eq.u32 %pe, %t1, 0xffffffff;  // an id that was not an expert: NaN out")
    elif moe is not None:
        e(f"  shr.u32 %ej, %s, {moe.S.bit_length() - 1};  // this strip's pair")
        e("  shl.b32 %t0, %ej, 2;")
        e("  add.u32 %t0, %t0, %sbase;")
        e(f"  ld.shared.u32 %ls, [%t0+{moe.ids_off}];")
        if moe.shared and moe.router:  # the shared pairs first (pairs 0 .. M - 1)
            e("  setp.gt.u32 %pe, %ls, %ne;  // not an expert: NaN out")
            e("  setp.lt.u32 %psh, %ej, %p8m;  // a shared pair: token j, its row in sout")
            e("  sub.u32 %ls, %ej, %p8m;")
            e(f"  shr.u32 %ls, %ls, {moe.pair_shift};  // a routed pair: token (j - M) / 8, the only row stored")
            e("  @%psh mov.u32 %ls, %ej;")
            e("  selp.b64 %psb, %pso, %po, %psh;")
        elif moe.shared and not moe.group:  # id E is the shared expert's
            e("  setp.gt.u32 %pe, %ls, %ne;  // not an expert: NaN out")
            e(f"  shr.u32 %ls, %ej, {moe.pair_shift};  // the pair's x row: the only token stored")
            e("  setp.ge.u32 %psh, %ej, %p8m;")
            e("  @%psh sub.u32 %ls, %ej, %p8m;  // a shared pair: token j - 8 M, its row in sout")
            e("  selp.b64 %psb, %pso, %po, %psh;")
        elif not moe.group:
            e("  setp.ge.u32 %pe, %ls, %ne;  // not an expert: NaN out")
            e(f"  shr.u32 %ls, %ej, {moe.pair_shift};  // the pair's x row: the only token stored")
    grp = moe is not None and moe.group
    if grp:
        grp_strip(e, moe, "%s", "%ej", "%ls", "%t0", note="the distinct expert: its tokens' slot masks")
        if moe.shared:  # distinct expert 0 is the shared one: every token's row, to sout[t]; the routed ones from 1
            e("  setp.eq.u32 %psh, %ej, 0;  // a shared strip: token t's row to sout + 2 (N t + 16 ls + row)")
            e("  sub.u32 %ej, %ej, 1;")
            e("  selp.b64 %psb, %pso, %po, %psh;")
            e(f"  selp.b32 %gstr, {N}, {TOP_K * N}, %psh;  // a token's row stride in sout / out")
        e(f"  mad.lo.u32 %ej, %ej, {moe.tokens}, %sbase;")
    # rb: a warp's partials (bytes: 64 per token)
    e("  shl.b32 %t1, %m, 4;")
    for r in range(-(-rb // 4 // threads)):
        e(f"  add.u32 %t0, %th, {r * threads};")
        e("  setp.ge.u32 %p, %t0, %t1;")
        e(f"  @%p bra {done};")
        e("  and.b32 %t2, %t0, 15;")
        e("  shr.u32 %t3, %t0, 4;")
        if grp:
            slot_mask(e, moe, "%psh")
            e("  setp.eq.u32 %pq, %src, 0;")
            e(f"  @%pq bra {done}_{r};")
        elif moe is not None:
            e(f"  setp.ne.u32 %pq, %t3, {'%ej' if down else '%ls'};")
            e(f"  @%pq bra {done}_{r};")
        e("  mov.u32 %tok, %t0;")
        red_index(e, "%tok", swizzle)
        e(red_base)
        e("  mad.lo.u32 %t0, %tok, 4, %t0;")
        e("  ld.shared.f32 %f0, [%t0];")
        for w_ in range(1, W):
            e(f"  ld.shared.f32 %f1, [%t0+{w_ * rb}];")
            e("  add.f32 %f0, %f0, %f1;")
        e("  cvt.rn.bf16.f32 %q0, %f0;")
        if down:
            e("  @%pe mov.b16 %q0, 0x7FC0;  // NaN + h is NaN")
            e(f"  mad.lo.u32 %t0, %t3, {N}, %t2;")
            e("  mad.lo.u32 %t0, %ls, 16, %t0;")
        elif grp:  # every slot of this token that chose the expert (one, unless an id repeats)
            e("  mad.lo.u32 %ta, %ls, 16, %t2;")
            e(f"  mad.lo.u32 %ta, %t3, {'%gstr' if moe.shared else TOP_K * N}, %ta;")
            e(f"{done}_S{r}:")
            e("  neg.s32 %bf, %src;")
            e("  and.b32 %bf, %src, %bf;")
            e("  xor.b32 %src, %src, %bf;")
            e("  bfind.u32 %bf, %bf;  // slot j")
            e(f"  mad.lo.u32 %t0, %bf, {N}, %ta;")
            e("  mul.wide.u32 %pt64, %t0, 2;")
            store_out(e, False, "%psb" if moe.shared else "%po")
            e("  setp.ne.u32 %pq, %src, 0;")
            e(f"  @%pq bra {done}_S{r};")
            e(f"{done}_{r}:")
            continue
        elif moe is not None:
            e("  @%pe mov.b16 %q0, 0x7FC0;")
            e("  mad.lo.u32 %t0, %s, 16, %t2;")
        else:
            e(f"  mad.lo.u32 %t0, %t3, {N}, %t2;")
            e("  mad.lo.u32 %t0, %s, 16, %t0;")
        e("  mul.wide.u32 %pt64, %t0, 2;")
        store_out(e, res, "%psb" if moe is not None and moe.shared else "%po", strong=tags_build(moe))
        if moe is not None:
            e(f"{done}_{r}:")


def sum_prev(e: Emit, sh: Shape, swizzle: bool) -> None:
    """sum_late: the previous strip's (%sprev, buffer %buf ^ 1) warp-order sums and BF16 stores, as sum_warps_store
    does them for a plain build (output o = tid + threads r < 16 M: row o % 16, token o / 16), but predicated on
    %psl (a previous strip exists) instead of branching, so that they share a basic block with the mma."""
    W, N, rb, threads = sh.W, sh.N, sh.red_bytes, sh.threads
    e("  // the previous strip's warp-order sums and BF16 stores (buffer buf ^ 1): here they issue beside this")
    e("  // strip's conversions and mma instead of between its barrier and them")
    e("  shl.b32 %sl1, %m, 4;")
    e("  xor.b32 %sl2, %buf, 1;")
    e(f"  mad.lo.u32 %sl2, %sl2, {W * rb}, %sbase;")
    e(f"  add.u32 %sl2, %sl2, {sh.red_off};")
    for r in range(-(-rb // 4 // threads)):
        e(f"  add.u32 %sl0, %th, {r * threads};")
        e("  setp.lt.and.u32 %pql, %sl0, %sl1, %psl;")
        e("  and.b32 %sl3, %sl0, 15;")
        e("  shr.u32 %sl4, %sl0, 4;")
        red_index(e, "%sl0", swizzle)
        e("  mad.lo.u32 %sl0, %sl0, 4, %sl2;")
        nb = _SL["regs"]
        if nb <= 1:  # each load into one register, its add right after (ptxas spreads the pairs among the mma)
            e("  @%pql ld.shared.f32 %sf0, [%sl0];")
            for w_ in range(1, W):
                e(f"  @%pql ld.shared.f32 %sf1, [%sl0+{w_ * rb}];")
                e("  add.f32 %sf0, %sf0, %sf1;")
        else:  # nb loads in flight into their own registers, then their adds in warp order
            for b0 in range(0, W, nb):
                for w_ in range(b0, min(W, b0 + nb)):
                    e(f"  @%pql ld.shared.f32 %sv{w_ - b0}, [%sl0+{w_ * rb}];")
                for w_ in range(b0, min(W, b0 + nb)):
                    e(f"  add.f32 %sf0, %sf0, %sv{w_ - b0};" if w_ else "  mov.f32 %sf0, %sv0;")
        e("  cvt.rn.bf16.f32 %sq, %sf0;")
        e(f"  mad.lo.u32 %sl3, %sl4, {N}, %sl3;")
        e("  mad.lo.u32 %sl3, %sprev, 16, %sl3;")
        e("  mul.wide.u32 %slp, %sl3, 2;")
        e("  add.u64 %slp, %po, %slp;")
        e("  @%pql st.global.b16 [%slp], %sq;")


def ksplit_offsets(e: Emit, sh: Shape) -> None:
    """ksplit: cluster c walks strips c, c + clusters, ...; rank r takes k half r of each (x columns,
    weight tiles and scales from r K / 2, r KB / 2), so the chunks and the x prologue are those of
    a K / 2 kernel."""
    kbs = sh.KB // sh.ksplit
    e("  mov.u32 %rank, %cluster_ctarank;")
    e("  xor.b32 %peer, %rank, 1;")
    e(f"  mul.wide.u32 %pt64, %rank, {2 * sh.K // sh.ksplit};  // x: k from r K / 2 (BF16)")
    e("  add.u64 %px, %px, %pt64;")
    e(f"  mul.wide.u32 %pt64, %rank, {kbs * 2048};  // the strip's packed tiles from block r KB / 2")
    e("  add.u64 %pw, %pw, %pt64;")
    e(f"  mul.wide.u32 %pt64, %rank, {kbs * 4};  // their scales")
    e("  add.u64 %ps, %ps, %pt64;")
    e("  mov.u32 %s, %clusterid.x;  // this cluster's first strip; then += the clusters")
    e("  mov.u32 %nct, %nclusterid.x;")


def split_passes(sh: Shape) -> int:
    """ksplit: how many outputs a thread finishes (16 M outputs, one per thread up to the block: 2 for 32 tokens on
    8 warps, whose threads are 256)."""
    return -(-16 * sh.tokens // sh.threads)


def split_keep(e: Emit, sh: Shape, red_base: str, done: str, swizzle: bool = False) -> None:
    """ksplit, after a strip's partials: thread o < 16 M sums output o's (row o % 16, token o / 16)
    partials over the warps in warp order, on this rank's half of k, into slot it = the strip's
    index in the cluster, [rank][o]: here where the row is this rank's (rows 8 r .. 8 r + 7), else
    by st.async into the peer's slot (completing the peer's slot mbarrier). The sums wait until
    every strip is streamed (split_finish), so neither rank waits for the other inside the loop.
    With more outputs than threads (split_passes), thread t takes o = t, t + threads, ..."""
    passes = split_passes(sh)
    assert passes == 1 or sh.threads % 16 == 0
    for q in range(passes):
        o = "%th" if passes == 1 else "%o"
        lbl = done if q == passes - 1 else f"{done}_{q}"
        if passes > 1:
            e(f"  add.u32 %o, %th, {q * sh.threads};  // output o, pass {q}")
        e("  shl.b32 %t1, %m, 4;")
        e(f"  setp.ge.u32 %p, {o}, %t1;")
        e(f"  @%p bra {lbl};")
        if swizzle:
            e(f"  mov.u32 %tok, {o};")
            red_index(e, "%tok", swizzle)
        e(red_base)
        e(f"  mad.lo.u32 %t0, {'%tok' if swizzle else o}, 4, %t0;")
        e("  ld.shared.f32 %f0, [%t0];")
        for w_ in range(1, sh.W):
            e(f"  ld.shared.f32 %f1, [%t0+{w_ * sh.red_bytes}];")
            e("  add.f32 %f0, %f0, %f1;")
        e(f"  bfe.u32 %t2, {o}, 3, 1;  // the row's owner: row / 8")
        e("  setp.eq.u32 %pown, %t2, %rank;")
        e(f"  mad.lo.u32 %t0, %it, {sh.xch_slot}, %sbase;")
        e(f"  mad.lo.u32 %t0, %rank, {sh.xch_slot // 2}, %t0;")
        e(f"  mad.lo.u32 %t0, {o}, 4, %t0;")
        e(f"  add.u32 %t0, %t0, {sh.xch_off};  // slot it, [rank][o]")
        e("  @%pown st.shared.f32 [%t0], %f0;")
        e(f"  @%pown bra {lbl};")
        e("  mapa.shared::cluster.u32 %ta, %t0, %peer;")
        e("  mad.lo.u32 %t3, %it, 8, %xb;")
        e("  mapa.shared::cluster.u32 %t3, %t3, %peer;")
        e("  st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%ta], %f0, [%t3];")
        e(f"{lbl}:")
    e("  add.u32 %it, %it, 1;")


def split_finish(e: Emit, sh: Shape, sfx: str, res: bool = False) -> None:
    """ksplit, after the strip loop: for each strip of the cluster, this rank's rows (o < 16 M with
    row / 8 = rank): wait for the peer's half (the slot's mbarrier, one phase), rank 0's sum plus
    rank 1's, BF16 out (with ``res``: as sum_warps_store, the product, then h + product). With more
    outputs than threads, one walk over the strips per output a thread takes (split_passes)."""
    passes = split_passes(sh)
    e("  // the rows this rank owns, for every strip of the cluster: the peer's sums, added, stored")
    for q in range(passes):
        o = "%th" if passes == 1 else "%o"
        fin = f"FIN{sfx}" + ("" if q == passes - 1 else f"_{q}")
        x = "" if passes == 1 else f"_{q}"
        if passes > 1:
            e(f"  add.u32 %o, %th, {q * sh.threads};  // output o, pass {q}")
        e("  shl.b32 %t1, %m, 4;")
        e(f"  setp.ge.u32 %p, {o}, %t1;")
        e(f"  @%p bra {fin};")
        e(f"  bfe.u32 %t2, {o}, 3, 1;")
        e("  setp.ne.u32 %p, %t2, %rank;")
        e(f"  @%p bra {fin};")
        e("  mov.u32 %it, 0;")
        e("  mov.u32 %s, %clusterid.x;")
        e(f"  and.b32 %t2, {o}, 15;")
        e(f"  shr.u32 %t3, {o}, 4;")
        e(f"FINS{sfx}{x}:")
        e("  mad.lo.u32 %bf, %it, 8, %xb;")
        e(f"FINW{sfx}{x}:")
        e("  mbarrier.try_wait.parity.shared::cta.b64 %p, [%bf], 0;")
        e(f"  @!%p bra FINW{sfx}{x};")
        e(f"  mad.lo.u32 %t0, %it, {sh.xch_slot}, %sbase;")
        e(f"  mad.lo.u32 %t0, {o}, 4, %t0;")
        e(f"  ld.shared.f32 %f0, [%t0+{sh.xch_off}];")
        e(f"  ld.shared.f32 %f1, [%t0+{sh.xch_off + sh.xch_slot // 2}];")
        e("  add.f32 %f0, %f0, %f1;")
        e("  cvt.rn.bf16.f32 %q0, %f0;")
        e(f"  mad.lo.u32 %t0, %t3, {sh.N}, %t2;")
        e("  mad.lo.u32 %t0, %s, 16, %t0;")
        e("  mul.wide.u32 %pt64, %t0, 2;")
        store_out(e, res)
        e("  add.u32 %it, %it, 1;")
        e("  add.u32 %s, %s, %nct;")
        e(f"  setp.lt.u32 %p, %s, {sh.S};")
        e(f"  @%p bra FINS{sfx}{x};")
        e(f"{fin}:")


def store_out(e: Emit, res: bool, base: str = "%po", strong: bool = False) -> None:
    """The BF16 %q0 to out (%po) + %pt64. ``res``: out is h; the product goes to %pmo + %pt64 first
    (the mixer's or the MoE block's output, before the residual add), then h = bf16(h + product)
    (fp32 add: the model's two BF16 ops)."""
    e(f"  add.u64 %pb, {base}, %pt64;")
    if res:
        e("  add.u64 %pc, %pmo, %pt64;")
        e("  st.global.b16 [%pc], %q0;")
        residual_add(e)
    why = "the next grid polls it (strong_out)" if _STRONG["on"] else "other CTAs spin on it (tags)"
    e(f"  st.relaxed.gpu.global.b16 [%pb], %q0;  // strong: {why}" if (strong or _STRONG["on"]) and not res
      else "  st.global.b16 [%pb], %q0;")


def residual_add(e: Emit, h: str | None = None) -> None:
    """%q0 = bf16(h + %q0) with h the BF16 at [%pb] (fp32 add: the model's two BF16 ops); the caller stores it back.
    ``h``: the register that already holds h (gen_moe_down_grp.down's h_early)."""
    if h is not None:
        e(f"  mov.b16 %q1, {h};  // h, loaded after the wait")
    elif _HE["on"] == "split":
        e("  setp.eq.u32 %p, %it, 0;")
        e("  selp.b16 %q1, %qh0, %qh1, %p;  // h of strip it, loaded before the walk")
    elif _HE["on"]:
        e("  mov.b16 %q1, %qh;  // h, loaded at the strip's start")
    else:
        e("  ld.global.b16 %q1, [%pb];  // h: read and written by this thread only")
    e("  cvt.f32.bf16 %f1, %q1;")
    e("  cvt.f32.bf16 %f0, %q0;")
    e("  add.rn.f32 %f0, %f1, %f0;")
    e("  cvt.rn.bf16.f32 %q0, %f0;")


def h_early_load(e: Emit, sh: Shape) -> None:
    """h_early: thread o < 16 M loads h at the address sum_warps_store adds to for this strip (row o % 16, token o / 16;
    for moedown the strip's rows 16 (s % S) .. of every token: only the strip's own token's is used) into %qh."""
    e("  // h for this strip's rows now (thread o < 16 M), added after the sums: its L2 round trip off the tail")
    e("  shl.b32 %he0, %m, 4;")
    e("  setp.lt.u32 %phe, %th, %he0;")
    e("  shr.u32 %he0, %th, 4;")
    e(f"  mul.lo.u32 %he0, %he0, {sh.N};")
    e("  and.b32 %he1, %th, 15;")
    e("  add.u32 %he0, %he0, %he1;")
    if sh.fuse == "moedown":
        e(f"  and.b32 %he1, %s, {sh.S - 1};")
        e("  mad.lo.u32 %he0, %he1, 16, %he0;")
    else:
        e("  mad.lo.u32 %he0, %s, 16, %he0;")
    e("  mul.wide.u32 %hep, %he0, 2;")
    e("  add.u64 %hep, %po, %hep;")
    e("  @%phe ld.global.b16 %qh, [%hep];")


def h_early_split(e: Emit, sh: Shape) -> None:
    """h_early for a k-split build (one output a thread, at most two strips a cluster): thread o < 16 M whose row
    (o % 16) this rank owns loads h at output o of the cluster's strips %clusterid.x and + %nct into %qh0 / %qh1 before
    the walk; split_finish adds the one of strip it (selp) in place of its load after the peer's sums."""
    e("  // h of this thread's outputs in the cluster's (at most two) strips now: their L2 round trip off the tail")
    e("  shl.b32 %he0, %m, 4;")
    e("  setp.lt.u32 %phe, %th, %he0;")
    e("  bfe.u32 %he1, %th, 3, 1;")
    e("  setp.eq.and.u32 %phe, %he1, %rank, %phe;  // the row's owner finishes it")
    e("  shr.u32 %he0, %th, 4;")
    e(f"  mul.lo.u32 %he0, %he0, {sh.N};")
    e("  and.b32 %he1, %th, 15;")
    e("  add.u32 %he0, %he0, %he1;")
    e("  mov.u32 %he1, %clusterid.x;")
    e("  mad.lo.u32 %he0, %he1, 16, %he0;")
    e("  mul.wide.u32 %hep, %he0, 2;")
    e("  add.u64 %hep, %po, %hep;")
    e("  @%phe ld.global.b16 %qh0, [%hep];")
    e("  add.u32 %he1, %he1, %nct;")
    e(f"  setp.lt.and.u32 %phe, %he1, {sh.S}, %phe;  // the cluster's second strip, if it has one")
    e("  mad.wide.u32 %hep, %nct, 32, %hep;  // 16 rows x 2 bytes further a cluster")
    e("  @%phe ld.global.b16 %qh1, [%hep];")


def bfly_sum(e: Emit, reg: str, tmp: str) -> None:
    """reg = the warp's sum of reg, by shfl.bfly 16, 8, 4, 2, 1 (every lane gets the same bits)."""
    for d in (16, 8, 4, 2, 1):
        e(f"  shfl.sync.bfly.b32 {tmp}, {reg}, {d}, 31, 0xffffffff;")
        e(f"  add.rn.f32 {reg}, {reg}, {tmp};")


def unpack8(e: Emit, X: str, base: int, dst: str = "%f") -> None:
    """{dst}0..7 = the 8 BF16 of {X}base..base+3 as f32, in channel order (%t1 scratch)."""
    for c in range(4):
        e(f"  shl.b32 %t1, {X}{base + c}, 16;")
        e(f"  mov.b32 {dst}{2 * c}, %t1;")
        e(f"  and.b32 %t1, {X}{base + c}, 0xffff0000;")
        e(f"  mov.b32 {dst}{2 * c + 1}, %t1;")


def norm_load(e: Emit, sh: Shape) -> None:
    """The thread's 8 norm weights: channels 128 warp + 8 (lane % 16), the x_rows_load columns."""
    e("  // the norm weights of the thread's 8 channels (the same for every token it holds)")
    e("  and.b32 %t2, %lane, 15;")
    e("  shl.b32 %t0, %warp, 7;")
    e("  mad.lo.u32 %t0, %t2, 8, %t0;")
    e("  mul.wide.u32 %pt64, %t0, 2;")
    e("  add.u64 %pa, %pn, %pt64;")
    e("  ld.global.nc.v4.u32 {%nw0, %nw1, %nw2, %nw3}, [%pa];")


def norm_prologue(e: Emit, sh: Shape, tiles: tuple, sfx: str) -> None:
    """x = rmsnorm(h) in place in the x_rows_load registers, bitwise as rmsnorm_h2048: its
    thread t (channels 8 t .. 8 t + 7) is here warp t / 16, lane t % 16 (+ 16 for the odd token
    rows), so each thread's 8-channel sum of squares is the same; those go to shared memory
    [token][t]; warp w then reduces token w exactly as rmsnorm_h2048 does (lane i takes
    t = 32 v + i, shfl.bfly 16, 8, 4, 2, 1, the 8 sums in order) and leaves its rsqrt; every
    thread scales its words. CTA 0 writes x to x_out for the other readers of the normed input."""
    X = "%xr{nt}_0_"
    e("  // norm 1: each thread's sums of squares of its 8 channels per token row, to ss[token][t]")
    e(f"  add.u32 %nb, %sbase, {sh.norm_off};")
    e("  shr.u32 %t1, %lane, 4;")
    e("  and.b32 %t2, %lane, 15;")
    e("  shl.b32 %t3, %warp, 4;")
    e("  add.u32 %t3, %t3, %t2;  // t = 16 warp + lane % 16")
    e("  mad.lo.u32 %t3, %t1, 256, %t3;  // + 256 for the odd token rows of a load")
    e("  mad.lo.u32 %t3, %t3, 4, %nb;")
    for nt in tiles:
        for j in range(4):
            unpack8(e, X.format(nt=nt), 4 * j)
            e("  mul.rn.f32 %c0, %f0, %f0;")
            for c in range(1, 8):
                e(f"  fma.rn.f32 %c0, %f{c}, %f{c}, %c0;")
            e(f"  st.shared.f32 [%t3+{(8 * nt + 2 * j) * 1024}], %c0;  // token {8 * nt + 2 * j} + lane / 16")
    e("  bar.sync 0;")
    e(f"  // norm 2: warp w < {8 * len(tiles)} reduces token w as rmsnorm_h2048 does; lane 0 leaves its rsqrt")
    e(f"  setp.ge.u32 %p, %warp, {8 * len(tiles)};")
    e(f"  @%p bra NORM_R{sfx};")
    e("  mad.lo.u32 %t0, %warp, 1024, %nb;")
    e("  mad.lo.u32 %t0, %lane, 4, %t0;")
    for v in range(8):
        e(f"  ld.shared.f32 %f{v}, [%t0+{128 * v}];  // t = 32 {v} + lane")
    for v in range(8):
        bfly_sum(e, f"%f{v}", "%c0")
    e("  add.rn.f32 %c1, %f0, %f1;")
    for v in range(2, 8):
        e(f"  add.rn.f32 %c1, %c1, %f{v};")
    e("  fma.rn.f32 %c1, %c1, 0f3A000000, %eps;  // mean = sum / 2048 (exact), + eps")
    e("  rsqrt.approx.f32 %c1, %c1;")
    e("  setp.eq.u32 %p, %lane, 0;")
    e("  mad.lo.u32 %t0, %warp, 4, %nb;")
    e(f"  @%p st.shared.f32 [%t0+{16 * 256 * 4}], %c1;")
    e(f"NORM_R{sfx}:")
    e("  bar.sync 0;")
    e("  // norm 3: x = bf16((h * rsqrt) * (1 + w)), in place; CTA 0 also stores it to x_out")
    unpack8(e, "%nw", 0, "%nr")
    for c in range(8):
        e(f"  add.rn.f32 %nr{c}, %nr{c}, 0f3F800000;")
    e("  mov.u32 %t0, %ctaid.x;")
    e("  setp.eq.u32 %pc0, %t0, 0;")
    e("  shr.u32 %src, %lane, 4;  // not %t1: unpack8 takes it")
    e("  and.b32 %t2, %lane, 15;")
    e("  shl.b32 %t3, %src, 2;")
    e(f"  add.u32 %t3, %t3, {16 * 256 * 4};")
    e("  add.u32 %t3, %t3, %nb;  // rsqrt of token lane / 16")
    for nt in tiles:
        Xn = X.format(nt=nt)
        for j in range(4):
            e(f"  ld.shared.f32 %c1, [%t3+{(8 * nt + 2 * j) * 4}];")
            unpack8(e, Xn, 4 * j)
            for c in range(8):
                e(f"  mul.rn.f32 %f{c}, %f{c}, %c1;")
            for c in range(8):
                e(f"  mul.rn.f32 %f{c}, %f{c}, %nr{c};")
            for c in range(4):
                e(f"  cvt.rn.bf16x2.f32 {Xn}{4 * j + c}, %f{2 * c + 1}, %f{2 * c};")
            e(f"  add.u32 %tok, %src, {8 * nt + 2 * j};")
            e("  setp.lt.u32 %pv, %tok, %m;")
            e("  and.pred %pv, %pv, %pc0;")
            e(f"  mul.lo.u32 %t0, %tok, {sh.K};")
            e("  mad.lo.u32 %t0, %warp, 128, %t0;")
            e("  mad.lo.u32 %t0, %t2, 8, %t0;")
            e("  mul.wide.u32 %pt64, %t0, 2;")
            e("  add.u64 %pa, %pxo, %pt64;")
            regs = ", ".join(f"{Xn}{4 * j + c}" for c in range(4))
            e(f"  @%pv st.global.v4.b32 [%pa], {{{regs}}};")


V3 = dict(x_rows=False, skip_nt1=False, packed_amax=False, pre_strips=None, early_trigger=True, split_m8=False,
          red_swizzle=False)  # promoted at cb9faad


_L2 = {"hint": True}  # the weight copies' L2 policy in the build being generated (generate's l2_hint)
_LAND = {"q": 1}  # mbarriers (pieces) per chunk in the build being generated (generate's land_split)
_PARK = {"on": False}  # generate(parked=True): a diagnostic, the weight tiles never copied (see generate)
_GT = {"on": False}  # generate(grp_transpose=True): a candidate, the grouped walk's strips expert-fastest (grp_strip)
_EREL = {"on": False}  # generate(early_release=True): a candidate, each stage refilled once every warp has read it
_NTB = {"on": False}  # generate(nt_branch=True): a candidate (level), the 32-token grouped walk branches over n-tiles no token needs
_RL = {"on": False}  # generate(refill_last=True): a candidate (level), the last warp's lane 0 refills the stages, not thread 0
_HE = {"on": False}  # h loaded at each strip's start, not after its sums (generate's h_early)
_STRONG = {"on": False}  # generate(strong_out=True): a candidate, the outputs stored strong for a polling consumer
_XP = {"on": False}  # x as converted fragments (generate's x_prepped, a diagnostic build)
_SL = {"on": False, "regs": 1}  # each strip's sums beside the next strip's mma (generate's sum_late, sum_late_regs)
_TOPE = {"on": False}  # moedown: the expert weights loaded with x, not per chunk after its conversion (top_early)
_XT = {"on": False}  # x staged by fragment lane, stores and loads skipped past M (x_tpose; Fp8Gemv.x_tpose per build)
_RNW = {"early": False}  # router: the norm weight loaded with h, not per block after the sums (norm_w_early)
# diagnostic builds of the router phase (experiments/proj/router/router_phase_diag.py; wrong results by design):
# "nosync" leaves out the grid barrier's atomic and spin (its bar.syncs stay), so each CTA reads whatever logits are there
_DIAG = {"router": ""}
# The router phase's grid barrier (experiments/decode/step_ab.py bar_*). "lean" (promoted at 7e704bc): thread 0 runs
# atom.release.gpu.add of 1, a 64-bit division by SMS for the target and an ld.acquire.gpu spin, with no fence: the PTX
# ABI maps a C++ release fetch_add to atom.release and an acquire load to ld.acquire, and the acquire that reads the last
# add of the launch's chain of adds synchronizes with every CTA's release (C++'s release sequence); bar.sync before and
# after orders the CTA's other threads (CUTLASS's grid barrier is the same pattern). "fenced" (the form before): also
# fence.acq_rel.gpu before the atomic and after the spin, three MEMBAR.ALL.GPU in the SASS against one. "lean_p2" (a
# candidate): no division either: CTA 0 adds GBAR_P - SMS + 1 and the others 1, so each launch adds GBAR_P (a power of
# two) and the target is the arrival rounded up to a multiple of it. That needs the counter at a multiple of GBAR_P
# before each launch, which changes the contracts' `bar` (each launch adds SMS) and their references.
_GBAR = {"form": "lean"}
GBAR_P = 256


def grp_strip(e: Emit, sh: Shape, src: str, ej: str, ls: str, tmp: str, note: str = "", need_ls: bool = True) -> None:
    """group builds: virtual strip ``src`` -> distinct expert index ``ej`` and row block ``ls`` (``tmp`` scratch; none
    may alias ``src``). Promoted: ej = src / S, ls = src % S, so the CTAs' round-robin walk (src = ctaid + k G) reads the
    S strips of one or two experts at a time. grp_transpose: the shared expert's S strips first as before (CTA s < S's
    first strip since before the wait), then the routed part expert-fastest: j = src - S, ej = 1 + j % U, ls = j / U
    (U routed distinct experts), so the CTAs read row blocks of different experts at once. A bijection either way,
    and each strip's arithmetic is its own, so the outputs are the same bits."""
    assert len({src, ej, ls, tmp}) == 4
    if not _GT["on"]:
        e(f"  shr.u32 {ej}, {src}, {sh.S.bit_length() - 1};" + (f"  // {note}" if note else ""))
        if need_ls:  # (else ls is only the transposed form's scratch)
            e(f"  and.b32 {ls}, {src}, {sh.S - 1};")
        return
    sh_s = sh.S if sh.shared else 0
    e("  // grp_transpose: the routed strips expert-fastest")
    e(f"  ld.shared.u32 {ls}, [%sbase+{group_layout(sh)[1]}];  // U, the routed distinct experts")
    e(f"  sub.u32 {ej}, {src}, {sh_s};  // j")
    e(f"  div.u32 {tmp}, {ej}, {ls};")
    e(f"  mul.lo.u32 {ls}, {tmp}, {ls};")
    e(f"  sub.u32 {ej}, {ej}, {ls};")
    if sh.shared:
        e(f"  add.u32 {ej}, {ej}, 1;")
        e(f"  mov.u32 {ls}, {tmp};")
        e(f"  setp.lt.u32 %pgt, {src}, {sh.S};  // a shared strip: as before")
        e(f"  @%pgt mov.u32 {ej}, 0;")
        e(f"  @%pgt mov.u32 {ls}, {src};")
    else:
        e(f"  mov.u32 {ls}, {tmp};")


def land_layout(sh: Shape, q: int) -> tuple[int, int]:
    """Where generate(land_split=q)'s q mbarriers per stage start, and the launch's dynamic shared
    memory: the contract's (bar_off, smem) for q <= sh.pieces (mbarrier q i + j, its region holds
    pieces per stage); for more, after the contract's shared memory (16-byte aligned; the launch grows)."""
    if q <= sh.pieces:
        return sh.bar_off, sh.smem
    off = (sh.smem + 15) // 16 * 16
    return off, off + 8 * sh.NS * q


def _hint() -> str:
    return ".L2::cache_hint" if _L2["hint"] else ""


def _pol() -> str:
    return ", %pol" if _L2["hint"] else ""


def generate(sh: Shape, stage_x: bool = False, x_rows: bool = True, skip_nt1: bool = True, packed_amax: bool = True,
             pre_strips: int | None | str = "shape", early_trigger: bool = False, split_m8: bool = True,
             tgroups: bool = False, xpair: bool = False, x_first_m16: bool | None = None, coherent_x: bool = True,
             ids_early: bool = False, ids_checked: bool | str = True, l2_hint: bool = True, l2_prefetch: bool | str = False, m8_only: bool = False,
             x_direct: bool | str = False, scale_bf16x2: bool = False, x_ld: str | None = None,
             stage_x_m16: bool | str = False, red_swizzle: bool | None = None, land_split: int | None = None,
             acc_split: bool = False, p2_early: bool = False, h_early: bool | None = None,
             top_early: bool | None = None, norm_w_early: bool | str | None = None, x_tpose: bool | None = None,
             maxnreg: int | None = None, sum_late: bool | str = False, sum_late_regs: int = 1,
             x_prepped: bool = False, parked: bool = False, grp_transpose: bool = False,
             early_release: bool = False, refill_last: bool = False, nt_branch: bool = False,
             strong_out: bool | None = None, spin_gate: bool = True, spin_land: bool = False,
             grid_bar: str = "lean") -> str:
    """The PTX. The defaults are the promoted build (v3g); ``generate(sh, **V3)`` is v3 as promoted
    at cb9faad (bitwise the same outputs). ``stage_x`` (a candidate, experiments/proj/proj_variant.py v3x, on v3): x comes into
    shared memory by one bulk copy per token row instead of 32 four-byte loads per thread;
    the dynamic shared memory grows to x_stage_layout(sh)[2] + 8. ``x_rows`` (v3c):
    x by coalesced 16-byte loads, turned into fragments through each warp's 2 KB of the
    reduction buffers (free until the first strip; one barrier after the prologue). ``skip_nt1``
    (with x_rows, v3d): at M <= 8 the second n-tile's x is neither staged nor
    converted (its mma are predicated off; its inverse scales are 0); K = 4096 (two chunks per
    strip) keeps it, ptxas spills there with the branch. ``packed_amax`` (v3e): the
    amax of x by integer max over packed BF16 (the same scales). ``pre_strips`` (v3f): only
    this many strips' chunks are requested before griddepcontrol.wait, the rest right after the
    x loads, so x does not queue behind all of the first chunks (None: every stage before the
    wait; "shape": ``Fp8Gemv.pre_strips``, 0 for the one-strip shapes since v3r_variant.json). ``early_trigger`` (v3): griddepcontrol.launch_dependents before the wait instead of
    after it; with small CTAs (K = 512) a PDL chain then cascades, many later grids resident
    at once, each prefetching (experiments/proj/README.md, trace_v3). ``split_m8`` (v3g,
    promoted after experiments/proj/v3g_variant.json): everything after the wait twice, for M <= 8 without the second n-tile's registers and
    work and for M > 8 without predicates, so K = 4096 can skip that n-tile's x prologue
    without the spill a branch inside one copy costs. ``tgroups`` (a candidate, measured
    and not promoted: proj_variant.py v3t; its launch takes grid y = ceil(M / 8)): the grid's y is
    the 8-token group, and each CTA runs the M <= 8 copy on its group's rows of x and out; the
    CTAs of one strip read the same weight chunks (L2 serves the second). ``xpair`` (M > 8 copy only): clusters of 2
    CTAs; each loads the x rows of one n-tile (tokens 8 rank ..) and hands them to its peer by
    st.async, so x's L2 reads halve (trace_v3g.json: at M = 16 the x prologue, every CTA reading
    all of x from L2, ends 4.9 us into a 6 us launch at 2048 x 4096); the same fragments, so the
    same outputs (proj_variant.py v3p, rejected). ``x_first_m16``: at M > 8 no chunk is requested
    before griddepcontrol.wait; x's loads go first and every stage's chunk right after them (None:
    the shape's own ``Fp8Gemv.x_first``, promoted after proj_variant.py v3q)
    (trace_v3g.json: at M = 16 the first chunk, requested before x, still lands ~1.2 us later than
    at M = 1, and x itself waits behind the first chunks in the DRAM queues; proj_variant.py v3q).
    ``coherent_x`` (promoted after experiments/proj/coherent_x_variant_98716c5.json: bitwise, the
    times within run spread): the activations by ld.global (``_XLD``); ``coherent_x=False`` is the
    build before, with ld.global.nc; the same arithmetic, so the same outputs. ``ids_early`` (moe and
    moedown; a candidate, experiments/proj/ids_early_variant.py): the expert ids are read (coherent,
    ld.relaxed.gpu) and every stage's chunks requested before griddepcontrol.wait, so under a PDL
    launch the weights stream during the previous kernel. With ``ids_checked`` (the default) the ids
    are read again after the wait and, if any changed, the early chunks are requested again
    (``ids_check``), so it is valid whoever wrote the ids, the previous grid included (the router-fused
    launch before moe_down at batch 1); ``ids_checked=False`` (the 0bfb57b candidate) is valid only
    where the ids were written by a grid that completed before the previous kernel's own wait
    returned. Launched plainly it is always valid. The same arithmetic.
    ``l2_hint=False`` (a candidate, experiments/proj/l2_hint_variant.py): the weight copies without the
    evict-first L2 policy (the GDN pipe build was 2.4 us faster at B = 32 without it). ``l2_prefetch`` (a
    candidate, experiments/proj/l2_prefetch_variant.py; not with a k split or experts): before the wait
    thread 0 also asks L2 for every later strip of the CTA (cp.async.bulk.prefetch.L2, from the first
    strip not copied before the wait), so DRAM is busy from the CTA's start while x loads, and under a
    PDL chain during the previous grid's tail; the ring's copies then hit L2. ``l2_prefetch="lines"``: the
    same bytes by every thread's prefetch.global.L2 of single lines (prefetch_strips(lines=True)), not the bulk unit.
    The same arithmetic. ``m8_only`` (a diagnostic build, experiments/proj/small_cta_variant.py): only the
    M <= 8 body, so a build with few registers can be measured at M <= 8 (M > 8 would be wrong).
    ``x_direct`` (a candidate, experiments/proj/x_direct_variant.py; plain, residual and gate kernels): the
    weights packed by pack_weight(x_direct=True), whose A fragments take the 128 columns of a k block in
    the order that puts each thread's x fragments in 64 contiguous bytes (contracts.proj.frag_k), so x comes by
    four 16-byte loads per (n-tile, k block) straight into the fragment registers: no trip through shared
    memory and no barrier after the prologue (trace_promoted_ca007e6.json: 1.1-1.6 us from the wait to
    converted x). Not bitwise the promoted kernels (each mma sums other columns). ``packed_amax="s16"``:
    the amax by amax_s16 (the same value, no mask per register). ``scale_bf16x2``: x scaled as packed BF16
    (x_convert; the same fragments). ``x_direct="v4"``: the same packing, x by the coalesced row loads
    through shared memory as before but back as 16-byte fragment loads (x_rows_to_fragments_v4). ``x_ld``:
    the instruction that loads x (a diagnostic, e.g. "ld.global.cg"; default _XLD's). ``stage_x_m16`` (a
    candidate, experiments/proj/x_direct_variant.py; plain and residual kernels, no k split): the M > 8 copy
    takes x by one bulk copy per token row into padded shared rows after the contract's shared memory
    (x_stage_layout; the launch's dynamic shared memory grows to its end), issued before the weight chunks,
    and the fragments from there (x_staged_fragments), so x comes as a few large L2 requests per CTA
    instead of 4 * 16 per warp; the M <= 8 copy is the promoted one. ``"mc"``: clusters of 2; rank r copies
    the rows t = r (mod 2) with .multicast::cluster into both CTAs, so x is read from L2 once per pair.
    Both give the promoted fragments, so the same outputs. ``red_swizzle`` (None: the shape's
    ``Fp8Gemv.red_swizzle``, promoted after experiments/proj/red_swizzle_variant_8919b95.json and
    _8919b95_2.json): the warps' partials stored with rows swizzled by token (store_partials), halving
    the stores' bank conflicts; the same sums in the same order, so the same outputs. ``land_split``
    (experiments/proj/land_split_variant.py; plain, norm and residual kernels of 16 warps):
    each chunk comes as this many bulk copies (issue_pieces), each with its warps' scales on its own
    mbarrier (land_layout), and each warp
    waits only for its piece, so the strip's work overlaps the rest of its chunk landing (a 32 KB chunk
    lands over ~0.6 us: trace_v3_m89_8675eaa.json's chunk spacing). The same arithmetic. None: the
    shape's ``Fp8Gemv.pieces`` (promoted after land_split_4_variant_421e282.json). ``acc_split`` (a
    candidate, experiments/proj/acc_split_variant.py): a chunk's eight mma per n-tile accumulate in two
    fragments (even and odd k16 steps), added after the eighth, so the dependent mma chain is four deep,
    not eight. Not bitwise the promoted kernels (other fp32 roundings); deterministic. ``p2_early`` (a candidate with
    ``Fp8Gemv.passes = 2``, experiments/proj/p2_early_variant.py): the second pass's x rows are loaded into the fragment
    registers right after the first pass's last mma (x_rows_load with bound M - 16), so their latency overlaps the first
    pass's sums and stores, and its h lines are asked of L2 then; the second pass skips its x loads. The same
    arithmetic. ``h_early`` (None: the shape's ``Fp8Gemv.h_early``, promoted after
    experiments/proj/h_early_variant_fdd15d3.json for the residual build and moe_down's 6-stage one): thread o < 16 M
    loads its h (the residual it adds to) at each strip's start instead of after the warps' sums, so that L2 round trip
    is off the kernel's tail; the same arithmetic. ``top_early`` (moedown; None: the shape's ``Fp8Gemv.top_early``,
    promoted after experiments/proj/top_early_variant_6753f5e.json for both moe_down builds):
    every chunk's expert weight (top, and the shared expert's glogit) is loaded right after x's loads instead of after
    each chunk's conversion, taking its L2 round trip out of the x prologue; the same arithmetic. ``norm_w_early`` (the
    router-fused build; None: "pre" where ``Fp8Gemv.norm_w_pre``, else off): the router phase's
    post-attention norm weight loaded with h instead of block by block after the sums (True: cp.async into 64 KB more
    shared memory, rejected at 8cca9d2; "pre": one 4 KB bulk copy before griddepcontrol.wait, beside the router rows and
    on their mbarrier, into the partials' region, which nothing uses until the router phase ends); the same arithmetic.
    ``x_tpose`` (None: the shape's ``Fp8Gemv.x_tpose``: on for the norm builds without b | a since eec1be8;
    experiments/proj/x_tpose_variant.py):
    x_rows_to_fragments_t in place of x_rows_to_fragments (the staging laid out by fragment lane, nothing stored or
    loaded past M); the same fragments.
    ``maxnreg`` (None: the shape's ``Fp8Gemv.maxnreg``, 104 for norm_ba and the one-pass residual build since c4d8bee;
    0: none): a ``.maxnreg`` directive (ptxas ignores -maxrregcount there), so that one of gdn_decode's CTAs fits
    beside a CTA of the kernel and PDL can start it early (experiments/decode/step_ab.py nreg104).
    ``sum_late`` (a candidate, experiments/proj/sum_late_variant.py; plain and norm kernels of one pass): each strip's
    warp-order sum and BF16 store run at the next strip's start, predicated and without a branch, in the basic block
    of that strip's conversions and mma, so they overlap them instead of sitting between the strip's barrier and the
    next strip's work; the last strip's after the loop. True: every body copy; "m16": the M > 8 copy and the 32-token
    body only. The same sums in the same order. ``sum_late_regs``: how many of a sum's loads are in flight at once,
    each into its own register, before their adds (1: one load, one add, as measured first at 43fbf7c).
    ``x_prepped`` (a diagnostic build, experiments/proj/x_prepped_variant.py; the 32-token dense builds and the routed
    grouped one, whose shared variant's gate CTA reads x itself): the x
    parameter points at x already converted, as the prologue would leave it (x_prepped_layout: per n-tile, k block and
    lane the 16 f16x2 fragment registers, then per n-tile, k block and token the inverse scale), so the prologue is
    four 16-byte loads and one 4-byte load per n-tile: what a launch would cost if the kernel before it wrote x in
    that form. Not a contract's kernel (its x is not the contract's x).
    ``parked`` (a diagnostic build, experiments/decode/step_ab.py's parked forms; the one-pass plain, norm and residual
    builds): every CTA zeroes its ring before griddepcontrol.wait and no weight tile is ever copied (each chunk's
    mbarrier expects only its scales), so the launch runs as if its weights were already in shared memory when it
    started: what a persistent kernel that parked them there a phase ahead could at best make of it
    (docs/notes/persistent-proposal.md). Its outputs are the bias-free zero projection: not a contract's kernel.
    ``grp_transpose`` (a candidate, experiments/decode/step_ab.py grp_transpose; the grouped builds): the walk's
    routed strips expert-fastest (grp_strip), so the CTAs read row blocks of different experts at once instead of the
    strips of one or two; the same bits.
    ``early_release`` (a candidate, experiments/decode/step_ab.py early_release; the one-pass builds without a k split, a
    strip counter or a mid-walk down request): thread 0 refills a strip's stages once every warp has its last chunk's tile and scale in registers (one
    more bar.sync, before that chunk's mma; the earlier chunks' tiles were read before it), not after the strip's
    partials are stored, so the next strip's bytes stream during this strip's mma and sums. The same arithmetic.
    Measured at 5922835: the 32-token grouped build 15% slower, the batch-32 step 260-310 us slower; rejected.
    ``refill_last`` (a candidate, experiments/decode/step_ab.py refill_last; the same builds as early_release, less the
    router-fused ones): the refill after the partials' barrier is issued by the last warp's lane 0, not thread 0. Warp
    0 also sums the strip's first 32 outputs, so it reaches the next strip's barrier last by the refill's issue time;
    the last warp sums only when M > 30 (16 M > 32 (W - 1) outputs). The same arithmetic. Measured level at 3af5437.
    ``nt_branch`` (a candidate, experiments/decode/step_ab.py nt_branch; the 32-token grouped builds): each chunk's mma
    n-tile by n-tile, a warp-uniform branch over the n-tiles no token of the strip's expert is in, where the promoted
    build issues all 32 mma of the chunk predicated (65% of them off at M = 32: ncu_gemv's report at e62210c) and
    converts each k step's A fragments once. Each n-tile's mma chain is the same (k steps in order): the same bits.
    Measured level at afe202d (a predicated-off mma does not hold the tensor pipe).
    (``sum_barrier``, named barriers so that only the warps that sum a strip wait for its partials, was 5-9% slower at
    M = 16..32 and is gone; its code is at a044afc, its measurements in experiments/proj/README.md.)
    ``strong_out`` (a candidate with gen_gdn_decode's spin, experiments/decode/step_ab.py gdn_spin; the norm and plain
    builds): the BF16 outputs (and the b | a CTAs') stored st.relaxed.gpu, so a consumer may poll them while this grid
    runs (the rows are their own flags, as the tags build's). The same values. None: ``Fp8Gemv.strong_out`` (promoted
    for GDN's in_proj, the norm_ba build, with gdn_decode_b32_spin).
    ``Fp8Gemv.spin`` (the candidate contracts.proj.RES_SPIN, rejected at 75785c5; experiments/decode/step_ab.py
    res_spin*): x polled (x_rows_poll) instead of waited for, griddepcontrol.wait after the x prologue, x_next's share
    filled with TAG before any wait (x_next_tags); one body, M <= 8. ``spin_gate`` (default): warp 0 alone polls 32
    sampled vectors first (x_gate); ``spin_land``: it waits for the strip's chunks before that. ``grid_bar`` (the router
    builds; step_ab.py bar_*): the router phase's grid barrier without the fences the release atomic and the acquire
    spin already are ("lean", the promoted form), with them ("fenced", the form before 7e704bc), or also
    without the 64-bit division ("lean_p2", a candidate; _GBAR says what that needs of the counter)."""
    maxnreg = sh.maxnreg if maxnreg is None else maxnreg
    red_swizzle = sh.red_swizzle if red_swizzle is None else red_swizzle
    h_early = sh.h_early if h_early is None else h_early
    top_early = sh.top_early if top_early is None else top_early
    assert not top_early or sh.fuse == "moedown", f"top_early: moe_down's builds only ({sh.name})"
    _TOPE["on"] = top_early
    x_tpose = sh.x_tpose if x_tpose is None else x_tpose
    assert not x_tpose or (x_rows and not x_direct and not stage_x), "x_tpose: the x_rows staging only"
    _XT["on"] = x_tpose
    if norm_w_early is None:
        norm_w_early = "pre" if sh.norm_w_pre else False
    assert not norm_w_early or sh.router, f"norm_w_early: the router-fused build only ({sh.name})"
    _RNW["early"] = norm_w_early
    assert grid_bar == "lean" or (sh.router and not sh.router_poll), f"grid_bar: the router builds' barrier ({sh.name})"
    _GBAR["form"] = grid_bar
    assert not h_early or (sh.fuse in ("res", "moedown") and sh.ksplit == 1 and sh.passes == 1 and sh.tokens != 32
                           and sh.red_bytes // 4 <= sh.threads) or (sh.fuse == "res" and sh.ksplit == 2
                           and split_passes(sh) == 1 and -(-sh.S // sh.walkers) <= 2), \
        f"h_early: one pass of residual rows, or a k split of one output a thread and two strips a cluster ({sh.name})"
    _HE["on"] = "split" if h_early and sh.ksplit > 1 else h_early
    strong_out = sh.strong_out if strong_out is None else strong_out
    assert not strong_out or (sh.fuse in ("", "norm") and not sh.group), f"strong_out: plain and norm builds ({sh.name})"
    _STRONG["on"] = strong_out
    assert sum_late in (False, True, "m16"), sum_late
    assert not sum_late or (sh.fuse in ("", "norm") and sh.ksplit == 1 and sh.passes == 1 and not sh.group
                            and not sh.router and not h_early and not p2_early), f"sum_late: plain and norm builds ({sh.name})"
    _SL["on"] = sum_late
    _SL["regs"] = sum_late_regs
    assert not x_prepped or (sh.tokens == 32 and (sh.fuse == "" or (sh.group and not sh.shared and not sh.router))
                             and x_rows and not x_direct and not stage_x_m16), \
        f"x_prepped: the 32-token dense and routed grouped builds ({sh.name})"
    _XP["on"] = x_prepped
    assert not parked or (sh.fuse in ("", "norm", "res") and sh.passes == 1 and not l2_prefetch), \
        f"parked: the one-pass plain, norm and residual builds ({sh.name})"
    _PARK["on"] = parked
    assert not grp_transpose or sh.group, f"grp_transpose: the grouped builds ({sh.name})"
    _GT["on"] = grp_transpose
    assert not early_release or (sh.ksplit == 1 and sh.passes == 1 and not sum_late and not parked
                                 and sh.fuse in ("", "norm", "res", "moe") and not _DYN["on"]
                                 and not (sh.down and (dn_at(sh, "mid") or _DOWN["sync"] == "pairs"))), \
        f"early_release: one-pass builds without a k split, a strip counter or a mid-walk down request ({sh.name})"
    _EREL["on"] = early_release
    assert not refill_last or (sh.ksplit == 1 and sh.passes == 1 and not sum_late and not parked and not early_release
                               and not sh.router and sh.fuse in ("", "norm", "res", "moe") and not _DYN["on"]), \
        f"refill_last: one-pass builds without a k split, a strip counter or a router phase ({sh.name})"
    _RL["on"] = refill_last
    assert not nt_branch or (sh.tokens == 32 and sh.group), f"nt_branch: the 32-token grouped builds ({sh.name})"
    _NTB["on"] = nt_branch
    if land_split is None:  # the candidates measured on one-copy chunks keep them
        land_split = 1 if stage_x or stage_x_m16 or xpair or tgroups or l2_prefetch == "lines" else sh.pieces
    assert land_split in (1, 2, 4), land_split
    assert land_split == 1 or (sh.ksplit == 1 and sh.fuse in ("", "norm", "res") and 4 * sh.W // land_split >= 16
                               and not (stage_x or stage_x_m16 or xpair or tgroups or l2_prefetch == "lines"))
    _LAND["q"] = land_split
    _L2["hint"] = l2_hint
    assert l2_prefetch in (False, True, "lines"), l2_prefetch
    pf = l2_prefetch if sh.ksplit == 1 and sh.fuse not in ("moe", "moedown", "gate") else False
    _XLD[0] = x_ld or ("ld.relaxed.gpu.global" if sh.spin else "ld.global" if coherent_x else "ld.global.nc")  # see _XLD
    m8_only = m8_only or sh.spin  # (its M > 8 copy spilled at 104 registers: 12 bytes)
    assert sh.spin or not (spin_land or not spin_gate), "spin_gate, spin_land: the spin build's"
    _SPIN["gate"], _SPIN["land"] = sh.spin and spin_gate, sh.spin and spin_land
    assert not sh.spin or (sh.fuse == "res" and sh.passes == 1 and sh.ksplit == 1 and sh.tokens == 16 and x_rows
                           and not (stage_x or stage_x_m16 or xpair or tgroups or x_direct or early_trigger
                                    or p2_early or sum_late or early_release)), f"spin: the one-pass residual build ({sh.name})"
    ids_early = ids_early and sh.fuse in ("moe", "moedown")
    assert x_rows or not skip_nt1
    assert x_direct in (False, True, "v4")
    assert not x_direct or (x_rows and split_m8 and sh.fuse in ("", "res", "gate") and not (tgroups or xpair or stage_x))
    assert not (stage_x and x_rows), "stage_x is a variant of v3's x prologue: pass **V3 with it"
    assert not (stage_x and split_m8), "stage_x is v3's one body (**V3); stage_x_m16 stages x in the M > 8 copy"
    assert stage_x_m16 in (False, True, "mc")
    assert not stage_x_m16 or (split_m8 and x_rows and not x_direct and sh.fuse in ("", "res") and sh.ksplit == 1
                               and not (tgroups or xpair or stage_x) and sh.grid % 2 == 0)
    assert sh.fuse in ("", "norm", "res", "gate", "moe", "moedown") and (sh.fuse != "norm" or (x_rows and sh.NC == 1))
    assert not sh.group or (sh.fuse == "moe" and sh.pairs_per_x == TOP_K and not sh.router and not ids_early
                            and x_rows and sh.ksplit == 1), "group: the routed gate | up kernel's promoted form"
    assert not sh.ba or (sh.fuse in ("norm", "") and sh.ksplit == 1 and not tgroups), "b | a CTAs: the norm and plain kernels"
    N, K, S, W, NC, SB, NS = sh.N, sh.K, sh.S, sh.W, sh.NC, sh.SB, sh.NS
    x_first_m16 = sh.x_first if x_first_m16 is None else x_first_m16
    pre_strips = sh.pre_strips if pre_strips == "shape" else pre_strips
    xpair = xpair and split_m8 and x_rows and not tgroups and sh.fuse in ("", "res")
    assert not xpair or sh.grid % 2 == 0
    assert not (tgroups and sh.fuse in ("norm", "res")), "token groups: plain and gate kernels"
    x_off, x_stride, x_bar = x_stage_layout(sh)
    skip_nt1 = skip_nt1 and NC == 1 and not split_m8
    pre = NS // NC if pre_strips is None or ids_early else min(pre_strips, NS // NC)
    x_first_m16 = x_first_m16 and not ids_early
    assert not _SPIN["land"] or pre == NS // NC, "spin_land: the strip's chunks requested before the gate"
    assert x_rows or pre == NS // NC
    assert N % 128 == 0 and K % 128 == 0 and sh.KB % W == 0 and NS % NC == 0 and W <= 32
    p2 = sh.passes > 1
    assert not p2 or (sh.passes == 2 and sh.tokens == 16 and sh.ksplit == 1 and sh.fuse in ("", "res") and split_m8
                      and x_rows and S <= sh.walkers and NS >= NC
                      and ((pre == 0 and x_first_m16) or (pre == NS // NC and not x_first_m16))
                      and not (stage_x or stage_x_m16 or xpair or tgroups or pf or ids_early or x_direct)), \
        "two passes: one strip per CTA, held whole by the ring, requested after x or all of it before the wait"
    assert not p2_early or p2
    e = Emit()
    e(f"// {sh.name}: out[M, {N}] = x[M, {K}] @ dequant(W)^T, M in 1..{16 * sh.passes}; FP8 E4M3 weights with 128x128")
    e("// block scales, BF16 x and out, fp32 accumulation. Generated by gen_fp8_gemv.py (its docstring")
    e("// explains the design); regenerate, do not edit.")
    if sh.fuse == "moedown":
        e("// The MoE down side: out[t] = bf16(sum_j m_tj x_tj @ dequant(W_j)^T) over the token's 8 routed experts")
        e("// (W[ids[t, j]], x = the pair's silu(gate) * up, m = top[t, j]) and the shared expert (ws, x = xs[t],")
        e("// m = bf16(sigmoid(glogit[t]))), h[t] = bf16(h[t] + out[t]): one GEMV over K = 9 x 512;")
        e("// strip s = (token s / 128, rows 16 (s % 128) ..) (netra.contracts.proj.MOE_DOWN).")
    if sh.fuse == "moe":
        e(f"// Routed experts: P = {sh.pairs_per_x} M (token, expert) pairs, ids[P] int64; W = the experts' packed weights")
        e(f"// stacked [E, {S}, {sh.KB}, 2048]; out[j] = x[j >> {sh.pair_shift}] @ dequant(W[ids[j]])^T (netra.contracts.proj.EXPERTS).")
        e(f"// grid min(P {S}, 132) persistent CTAs over P x {S} strips of 16 rows; {W} warps; thread 0 streams {NC} chunk(s) of {SB} B")
    else:
        e(f"// grid {sh.grid} persistent CTAs over {S} strips of 16 rows; {W} warps; thread 0 streams {NC} chunk(s) of {SB} B")
    e(f"// per strip into {NS} shared-memory stages (cp.async.bulk + mbarrier); x converted to f16 once per CTA.")
    if sh.ba:
        e(f"// Plus {BA_STRIPS} more CTAs (the last): out_b, out_a = x @ w_b^T, x @ w_a^T, BF16, one 16-row strip each (ba_cta).")
    if p2:
        e("// Tokens 16 .. M - 1 (M > 16): a second pass over the CTA's strip, still in the ring (PASS_END).")
    e("// Reduction order: each k block's mma partial (k in mma order) scaled; the warp's k blocks in k order;")
    e("// the warps' partials added in warp order. Deterministic.")
    if sh.fuse == "gate":
        e(f"// Plus one more CTA (ctaid {sh.grid}): gate_out = x @ gate_w^T, the BF16 shared_expert_gate (gate_cta).")
    ks = sh.ksplit > 1
    assert not (ks and (xpair or tgroups or stage_x or not split_m8 or sh.fuse not in ("", "res", "gate")))
    header(e, "8.1" if xpair or ks else "8.0")  # st.async: PTX 8.1
    e()
    e(".extern .shared .align 128 .b8 dsm[];")
    e()
    entry(e, sh.name, sh.fuse, sh.ba, sh.shared, sh.shared_gate, sh.router, sh.down, sh.spin)
    e(f".reqntid {sh.threads}")
    if maxnreg:
        e(f".maxnreg {maxnreg}")
    if xpair:
        e(".reqnctapercluster 2, 1, 1  // x pairs: each CTA loads one n-tile of x for both (M > 8)")
    if ks:
        e(f".reqnctapercluster {sh.ksplit}, 1, 1  // k split: rank r streams and converts k half r of the cluster's strips")
    if stage_x_m16 == "mc":
        e(".reqnctapercluster 2, 1, 1  // M > 8: each CTA of a pair multicasts half of x's rows into both")
    e("{")
    e("  .reg .pred %p, %pm8, %pv, %pz;")
    if _GT["on"]:
        e("  .reg .pred %pgt;  // grp_transpose: a shared strip")
    if p2:
        e("  .reg .pred %pp2;  // the second pass")
    if p2_early:
        e("  .reg .b32 %mx;  // the second pass's tokens, M - 16")
    e("  .reg .b32 %th, %warp, %lane, %g, %tig, %m, %s, %sn, %nct, %t0, %t1, %t2, %t3, %tok, %kb, %src;")
    e("  .reg .b32 %sbase, %bars, %stage, %st0, %phase, %buf, %bf, %ta;")
    if stage_x or stage_x_m16:
        e("  .reg .b32 %sx, %xb;")
    if stage_x_m16 == "mc":
        e("  .reg .b32 %rank;")
        e("  .reg .b16 %cm;")
    if x_rows:
        e("  .reg .b32 %xst;")
    if xpair:
        e("  .reg .b32 %rank, %peer, %xr8, %xpo, %xpb;")
    if ks:
        e("  .reg .pred %pown;")
        e("  .reg .b32 %rank, %peer, %it, %xb;")
        if split_passes(sh) > 1:
            e("  .reg .b32 %o;")
    e("  .reg .b32 %wa<16>, %a<4>;")
    if land_split > 1:
        e("  .reg .b32 %lsc;")
        e("  .reg .b64 %plq;")
    for nt in range(max(2, sh.NT)):
        for h in range(NC):
            e(f"  .reg .b32 %xr{nt}_{h}_<16>, %inv{nt}_{h};")
    e(f"  .reg .f32 %ws<{NC}>;")
    e("  .reg .b16 %q<8>;")
    if sum_late:
        e("  .reg .b32 %sprev, %sl<5>;  // sum_late: the previous strip, its sum's addresses")
        e(f"  .reg .f32 %sf<2>, %sv<{max(1, sum_late_regs)}>;")
        e("  .reg .b16 %sq;")
        e("  .reg .b64 %slp;")
        e("  .reg .pred %psl, %pql;  // a previous strip; this thread has one of its outputs")
    if top_early:
        e("  .reg .b16 %tw<3>, %gw<3>;  // top_early: the chunks' expert weights")
        e("  .reg .b32 %te0, %te1;")
        e("  .reg .b64 %tep;")
        e("  .reg .pred %pte, %ptq, %ptr;")
    if h_early:
        e("  .reg .b16 %qh0, %qh1;  // h_early: this thread's h of the cluster's two strips" if sh.ksplit > 1
          else "  .reg .b16 %qh;  // h_early: this thread's h")
        e("  .reg .b32 %he0, %he1;")
        e("  .reg .b64 %hep;")
        e("  .reg .pred %phe;")
    e(f"  .reg .f32 %c<{max(8, 4 * sh.NT)}>, %acc<{max(8, 4 * sh.NT)}>, %f<8>, %xs<{max(4, 2 * sh.NT)}>, %amax, %sc;")
    if sh.tokens == 32 and sh.group:
        e(f"  .reg .pred %pn<{sh.NT}>;  // n-tiles with a token that chose the strip's expert")
    if acc_split:
        e("  .reg .f32 %d<8>;")
    e("  .reg .b64 %px, %pw, %ps, %po, %pa, %pb, %pt64, %pol;")
    if sh.down and _DOWN["trace"]:
        e("  .reg .b64 %gs<8>;  // the trace's clock stamps (dn_stamp)")
    if sh.down and _DOWN["trace"] == "all":
        e("  .reg .b64 %gt0, %gt1;")
    if sh.router and _DYN["on"]:
        e("  .reg .b64 %dyn;  // thread 0: the next strip from the counter")
    if dn_at(sh, "mid"):
        e("  .reg .b32 %dnf;  // the down strips requested")
        e("  mov.u32 %dnf, 0;")
    if dn_split(sh):
        e("  .reg .b32 %dnw;  // the site of this CTA's down strips (dn_site_reg)")
    if sh.down and _DOWN["sync"] == "tags":
        e("  .reg .b32 %dtv;  // the tags build's spin count")
    if sh.down and _DOWN["sync"] == "pairs":
        e("  .reg .pred %dpr;")
        e("  .reg .b32 %dpp, %dtg, %dtv;  // the last strip's pair (not yet signaled); warp 15: its lane's counter target")
        e("  .reg .b64 %pcnt, %dpa;")
        e("  ld.param.u64 %pcnt, [cnt];")
        e("  cvta.to.global.u64 %pcnt, %pcnt;")
        e("  mov.u32 %dpp, 0xffffffff;  // none")
    if sh.fuse == "norm":
        e("  .reg .pred %pc0;")
        e("  .reg .b32 %nw<4>, %nb;")
        e("  .reg .f32 %nr<8>, %eps;")
        e("  .reg .b64 %pn, %pxo;")
    if sh.fuse == "gate" or (sh.shared and sh.shared_gate):
        e("  .reg .b64 %pg, %pgo;")
    if sh.shared:
        e("  .reg .pred %psh;")
        e("  .reg .b32 %p8m;")
        if sh.group:
            e("  .reg .b32 %gstr;")
        e("  .reg .b64 %pws, %pss, %pso, %psb;")
    if sh.fuse in ("moe", "moedown"):
        e("  .reg .pred %pq, %pe;")
        e("  .reg .b32 %sv, %ej, %ls, %ne;")
        e("  .reg .b64 %pid, %rid;")
    if sh.fuse == "res":
        e("  .reg .b64 %pc, %pmo;")
    if sh.spin:
        e("  .reg .pred %ptg;  // spin: a polled x vector still holds TAG")
        e("  .reg .b32 %spn;  // spin: polls so far")
    if sh.fuse == "moedown":
        e("  .reg .pred %pr;")
        e("  .reg .b64 %ptop, %pxs, %pws, %pss, %pgl, %pc, %pmo;")
        for h in range(NC):
            e(f"  .reg .b32 %u{h}_<16>;  // the up halves of x (silu_mul)")
    load_params(e, sh.fuse, sh.shared, sh.shared and sh.shared_gate, sh.router)
    if p2:
        e("  min.u32 %m, %m, 16;  // the first pass's tokens (its partial sums hold 16; the stores go to M)")
    if tgroups:
        e("  // token group ctaid.y: rows 8 y .. 8 y + 7 of x and out (and gate_out), M - 8 y of them (at most 8)")
        e("  mov.u32 %t0, %ctaid.y;")
        e("  shl.b32 %t1, %t0, 3;")
        e("  sub.u32 %m, %m, %t1;")
        e("  min.u32 %m, %m, 8;")
        e(f"  mul.wide.u32 %pt64, %t1, {2 * K};")
        e("  add.u64 %px, %px, %pt64;")
        e(f"  mul.wide.u32 %pt64, %t1, {2 * N};")
        e("  add.u64 %po, %po, %pt64;")
        if sh.fuse == "gate":
            e("  mul.wide.u32 %pt64, %t1, 2;")
            e("  add.u64 %pgo, %pgo, %pt64;")
    if ks:
        ksplit_offsets(e, sh)
    else:
        e("  mov.u32 %s, %ctaid.x;  // this CTA's first strip; then += gridDim.x")
        e("  mov.u32 %nct, %nctaid.x;")
    e("  mov.u32 %sbase, dsm;")
    if sh.fuse in ("moe", "moedown"):
        e(f"  shl.b32 %sv, %m, {sh.pair_shift};  // " + ("M tokens" if sh.fuse == "moedown" else "P pairs") + f" of {S} strips each")
        if sh.shared and sh.router:  # the shared pairs first, so their strips can be requested before the wait
            e("  mov.u32 %p8m, %m;  // pairs 0 .. M - 1: token t's shared expert; pairs M + 8 t + j: the routed ones")
            e("  add.u32 %sv, %sv, %m;")
            e(f"  mul.wide.u32 %pt64, %m, {2 * N};")
            e("  sub.u64 %po, %po, %pt64;  // so that routed pair j's row is at %po + 2 N j")
        elif sh.shared and not sh.group:  # (group: the shared expert is the first distinct expert, group_build)
            e("  mov.u32 %p8m, %sv;  // the routed pairs; pairs 8 M + t: token t's shared expert")
            e("  add.u32 %sv, %sv, %m;")
            e(f"  mul.wide.u32 %pt64, %p8m, {2 * N};")
            e("  sub.u64 %pso, %pso, %pt64;  // so that pair j's row is at %pso + 2 N j, as out's")
        e(f"  mul.lo.u32 %sv, %sv, {S};")
    if sh.shared and sh.shared_gate:
        e("  sub.u32 %nct, %nct, 1;  // the last CTA is the gate's; the others stream the weights")
        if not sh.router:  # router: the gate CTA takes part in the router phase first (its barrier counts every CTA)
            e("  setp.eq.u32 %p, %s, %nct;")
            e("  @%p bra GATE;")
    if dn_split(sh):
        dn_site_reg(e, sh)
    if sh.fuse == "gate":
        e("  sub.u32 %nct, %nct, 1;  // the last " + ("cluster" if ks else "CTA") + " is the gate's; the others stream the weights")
        e("  setp.eq.u32 %p, %s, %nct;")
        e("  @%p bra GATE;")
    if sh.ba:
        e(f"  sub.u32 %nct, %nct, {BA_STRIPS};  // the last {BA_STRIPS} CTAs are b | a's; the others stream the FP8 weights")
        e("  setp.ge.u32 %p, %s, %nct;")
        e("  @%p bra BA;")
    if land_split > 1:
        e(f"  add.u32 %bars, %sbase, {land_layout(sh, land_split)[0]};  // full[i] piece j at bars + 8 ({land_split} i + j)")
    else:
        e(f"  add.u32 %bars, %sbase, {sh.bar_off};  // full[i] at bars + 8 i")
    if _L2["hint"]:
        e("  createpolicy.fractional.L2::evict_first.b64 %pol, 1.0;  // weights are read once per step")
    if ids_early:
        e("  // the ids before the wait: written two or more grids back (the op's PDL contract), read coherently")
        ids_load(e, sh, "ld.relaxed.gpu.global.u64")
        ids_store(e, sh, barrier=False)
    # the M > 8 copy takes x first; a 32-token build has one body for every M, which expects its first strips in flight
    xf = x_first_m16 and split_m8 and sh.fuse != "norm" and not (sh.tokens == 32 and pre)
    if pf == "lines":
        e("  // every later strip of this CTA asked of L2 by single-line prefetches (all threads), before the wait")
        if xf:
            e("  setp.gt.u32 %pm8, %m, 8;")
            e("  @%pm8 bra PFL_ALL;")
        prefetch_strips(e, sh, pre, "PFL_DONE" if xf else "PFL_END", lines=True)
        if xf:
            e("  bra.uni PFL_END;")
            e("PFL_ALL:")
            prefetch_strips(e, sh, 0, "PFL_END", lines=True)
    e("  setp.ne.u32 %p, %th, 0;")
    e("  @%p bra " + ("INIT_BARS;" if ids_early else "INIT_DONE;"))
    for i in range(NS * land_split):
        e(f"  mbarrier.init.shared::cta.b64 [%bars+{8 * i}], 1;")
    if stage_x or stage_x_m16:
        e(f"  mbarrier.init.shared::cta.b64 [%sbase+{x_bar}], 1;  // x rows")
    for i in range(sh.slots):
        e(f"  mbarrier.init.shared::cta.b64 [%sbase+{sh.xbar_off + 8 * i}], 1;  // strip {i} of the cluster: the peer's half")
    if sh.router:
        e(f"  mbarrier.init.shared::cta.b64 [%sbase+{sh.rows_off + ROUTER_ROWS * 2 * ROUTER_K}], 1;  // the router rows")
    if sh.down:
        for j in range(TOP_K + 1):
            e(f"  mbarrier.init.shared::cta.b64 [%sbase+{sh.dn_bar + 8 * j}], 1;  // down strip {j}")
        if _DOWN["sync"] == "pairs":
            for p in range(DN_PAIRS + 1):
                e(f"  mbarrier.init.shared::cta.b64 [%sbase+{dn_rdy(sh) + 8 * p}], 1;  // pair {p}'s rows stored" if p < DN_PAIRS
                  else f"  mbarrier.init.shared::cta.b64 [%sbase+{dn_rdy(sh) + 8 * p}], 1;  // the gate logit stored")
    e("  fence.mbarrier_init.release.cluster;  // visible to the async proxy (the bulk copies)" + (" and the peer" if ks else ""))
    if ks:
        e("  shl.b32 %t1, %m, 5;  // each slot expects the peer's 8 M sums of 4 bytes")
        for i in range(sh.slots):
            e(f"  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%sbase+{sh.xbar_off + 8 * i}], %t1;")
    if sh.router:
        router_rows(e, sh)
        if sh.down and _DOWN["sdn"] == "early":
            dn_issue_shared_early(e, sh)
        if sh.router_poll:
            ep = sh.xs_off + max(ROUTER_FUSED_TOKENS) * 2 * ROUTER_K
            e("  // this launch's epoch: the counter's arrivals so far / SMS (every arrival of the previous launch of this")
            e("  // kernel is in: it ended before the kernel before this one waited)")
            e("  ld.param.u64 %pa, [bar];")
            e("  cvta.to.global.u64 %pa, %pa;")
            e("  atom.relaxed.gpu.global.add.u64 %pt64, [%pa], 1;")
            e(f"  div.u64 %pt64, %pt64, {SMS};")
            e("  cvt.u32.u64 %t0, %pt64;")
            e("  add.u32 %t0, %t0, 1;  // the tag: never 0, which the zeroed workspace holds")
            e(f"  st.shared.u32 [%sbase+{ep}], %t0;")
        e("  // the shared pairs' ids (E, pairs 0 .. M - 1), then this CTA's first strip if it is a shared one (no ids")
        e("  // needed: its weight never changes), before the wait")
        for t in range(max(ROUTER_FUSED_TOKENS)):
            e(f"  setp.gt.u32 %p, %m, {t};")
            e(f"  @%p st.shared.u32 [%sbase+{sh.ids_off + 4 * t}], %ne;")
        e(f"  mul.lo.u32 %t0, %m, {sh.S};")
        e("  min.u32 %t0, %t0, %nct;  // (the gate CTA walks none)")
        e("  setp.ge.u32 %p, %s, %t0;")
        e("  @%p bra RT_PRE_DONE;")
        issue(e, sh, "%s", 0, "0")
        e("RT_PRE_DONE:")
    if ids_early:
        e("INIT_BARS:")
        e("  bar.sync 0;  // the ids table, before thread 0 requests any chunk")
        e("  setp.ne.u32 %p, %th, 0;")
        e("  @%p bra INIT_DONE;")
    e("  // the first " + ("NS chunks" if pre == NS // NC else "strip's chunks")
      + ", before griddepcontrol.wait: weights do not depend on the previous kernel")
    l2_prefetch = pf is True
    if sh.group and sh.shared:
        e("  // the shared expert is distinct expert 0 (id E): CTA s < S's first strip is its strip s, requested now")
        e(f"  st.shared.u32 [%sbase+{group_layout(sh)[2]}], %ne;")
        e(f"  setp.lt.u32 %p, %s, {S};")
        e("  @!%p bra GS_PRE_DONE;")
        issue(e, sh, "%s", 0, "0")
        e("GS_PRE_DONE:")
    if xf:
        e("  setp.gt.u32 %pm8, %m, 8;")
        e("  @%pm8 bra " + ("PF_ALL" if l2_prefetch else "INIT_DONE") + ";  // M > 8: x first, the chunks after it (the M > 8 copy)")
    issue_strips(e, sh, "%s", pre, "0", "PRE_DONE" if l2_prefetch else "INIT_DONE")
    if l2_prefetch:
        prefetch_strips(e, sh, pre, "PF_DONE" if xf else "INIT_DONE")
        if xf:
            e("  bra.uni INIT_DONE;")
            e("PF_ALL:")
            prefetch_strips(e, sh, 0, "INIT_DONE")
    if sh.group:
        bm, _, _, _, so = group_layout(sh)
        zb = sh.tokens * sh.max_pairs // sh.threads  # bytes of slot masks each thread zeroes
        assert zb in (4, 16) and zb * sh.threads == sh.tokens * sh.max_pairs
        e("  // the distinct experts' bitmap and slot masks start at zero (before the wait: shared memory only)")
        if zb == 16:
            e("  mov.u32 %t1, 0;")
            e("  shl.b32 %t0, %th, 4;")
            e("  add.u32 %t0, %t0, %sbase;")
            e(f"  st.shared.v4.u32 [%t0+{so}], {{%t1, %t1, %t1, %t1}};")
            e("  shl.b32 %t0, %th, 2;")
            e("  add.u32 %t0, %t0, %sbase;")
        else:
            e("  shl.b32 %t0, %th, 2;")
            e("  add.u32 %t0, %t0, %sbase;")
            e(f"  st.shared.u32 [%t0+{so}], 0;")
        e("  setp.lt.u32 %p, %th, 8;")
        e(f"  @%p st.shared.u32 [%t0+{bm}], 0;")
    if parked:
        e("  // parked (a diagnostic): the ring's weight tiles are zeros, stored once here (no tile is ever copied)")
        e("  shl.b32 %t0, %th, 4;")
        e("  mov.u32 %t1, 0;")
        e("PARK_ZERO:")
        e("  add.u32 %t2, %t0, %sbase;")
        e("  st.shared.v4.u32 [%t2], {%t1, %t1, %t1, %t1};")
        e(f"  add.u32 %t0, %t0, {16 * sh.threads};")
        e(f"  setp.lt.u32 %p, %t0, {NS * SB};")
        e("  @%p bra PARK_ZERO;")
    e("  bar.sync 0;")
    if ks:
        e("  barrier.cluster.arrive.relaxed.aligned;  // (after fence.mbarrier_init) this CTA's slot mbarriers are initialized")
    if stage_x_m16 == "mc":
        e("  barrier.cluster.arrive.relaxed.aligned;  // (after fence.mbarrier_init) this CTA's x mbarrier is initialized")
    if sh.spin:
        x_next_tags(e, sh)
    else:
        if early_trigger:
            e("  griddepcontrol.launch_dependents;  // every CTA of this grid has started: the next grid may launch")
        e("  griddepcontrol.wait;  // x, and the output the previous kernel may still read, from here")
        if not early_trigger:
            e("  griddepcontrol.launch_dependents;  // after the wait: one dependent grid at a time, not a cascade")
    if p2:
        e("  setp.ne.u32 %pp2, %th, %th;  // the first pass: tokens 0 .. min(M, 16) - 1")
        e("PASS:")
    e("  mov.u32 %stage, 0;")
    e("  mov.u32 %phase, 0;")
    e("  setp.gt.u32 %pm8, %m, 8;  // a second n-tile of 8 tokens")
    if sh.router:
        if sh.down:
            dn_stamp(e, 7)
        router_phase(e, sh)
        if sh.down:
            dn_stamp(e, 6)
            if _DOWN["trace"] == "all":
                dn_stamp_all(e, 0)
        e("  setp.eq.u32 %p, %s, %nct;")
        if sh.down and _DOWN["sync"] == "pairs":
            e(f"  @%p mov.u32 %dpp, {DN_PAIRS};  // the gate CTA signals the gate logit's counter")
        e("  @%p bra GATE;  // the gate CTA (the router phase done)")
        e("  // thread 0: the first NS chunks now that the ids are known (before x: x is in L2, the chunks in DRAM);")
        e("  // a CTA whose first strip is a shared one has it in flight since before the wait")
        e("  setp.ne.u32 %p, %th, 0;")
        e("  @%p bra RT_ISSUED;")
        e(f"  mul.lo.u32 %t0, %m, {S};")
        e("  setp.lt.u32 %p, %s, %t0;")
        e("  @%p bra RT_REST;")
        issue_strips(e, sh, "%s", NS // NC, "0", "RT_ISSUED_ALL")
        e("  bra.uni RT_ISSUED;")
        e("RT_REST:")
        e("  add.u32 %t2, %s, %nct;")
        issue_strips(e, sh, "%t2", NS // NC - 1, str(NC), "RT_ISSUED")
        if dn_at(sh, "select"):
            if dn_split(sh):
                e("  setp.ne.u32 %p, %dnw, 0;  // not this CTA's site")
                e("  @%p bra DN_SEL_SKIP;")
            down_issue(e, sh)
            if dn_split(sh):
                e("DN_SEL_SKIP:")
        if _DYN["on"]:
            e("  // the stages' strips (thread 0): the first NS static, then the counter's; one fetch ahead")
            e("  setp.ne.u32 %p, %th, 0;")
            e("  @%p bra DYN_INIT;")
            for k in range(NS // NC):
                e(f"  add.u32 %t0, %s, {k * (SMS - 1)};")
                e(f"  st.shared.u32 [%sbase+{dyn_sidx(sh) + 4 * k}], %t0;")
            e("  ld.param.u64 %pa, [bar];")
            e("  cvta.to.global.u64 %pa, %pa;")
            e("  atom.relaxed.gpu.global.add.u64 %dyn, [%pa+8], 1;")
            e("DYN_INIT:")
    o = dict(stage_x=stage_x, x_rows=x_rows, skip_nt1=skip_nt1, packed_amax=packed_amax, pre=pre, xpair=False,
             ids_early=ids_early, ids_checked=ids_checked, x_direct=x_direct, scale_bf16x2=scale_bf16x2, red_swizzle=red_swizzle,
             acc_split=acc_split, p2_early=p2_early)
    if sh.tokens == 32:  # one body: 4 n-tiles (tokens past M are zero columns)
        _body(e, sh, (0, 1, 2, 3), "_M32", **o)
    elif sh.fuse in ("norm", "moedown") or tgroups or m8_only or sh.router:  # M <= 8 only (the norm's contract; a token group of at most 8)
        _body(e, sh, (0,), "_M8", **o)
    elif split_m8:
        e("  @%pm8 bra BODY_M16;  // M <= 8 and M > 8: two copies of the rest, each with only its own n-tiles")
        if stage_x_m16 == "mc":
            e("  barrier.cluster.wait.aligned;  // pairs the arrive above (the M > 8 copy waits before its multicast)")
        _body(e, sh, (0,), "_M8", **o)
        e("BODY_M16:")
        o16 = dict(o, xpair=xpair, pre=0 if x_first_m16 else pre)
        if stage_x_m16:
            o16.update(stage_x=stage_x_m16, x_rows=False)
        _body(e, sh, (0, 1), "", **o16)
    else:
        _body(e, sh, None, "", **o)
    if p2:  # every body copy's ret becomes this
        assert sum(ln == "    ret;" for ln in e.lines) == 2
        e.lines = ["    bra.uni PASS_END;" if ln == "    ret;" else ln for ln in e.lines]
        e("PASS_END:")
        e("  @%pp2 ret;  // the second pass done")
        e("  ld.param.u32 %t0, [M];")
        e("  setp.le.u32 %p, %t0, 16;")
        e("  @%p ret;  // M <= 16: one pass")
        e("  bar.sync 0;  // the first pass's sums have read the reduction buffers the x prologue writes next")
        e("  setp.eq.u32 %pp2, %th, %th;  // the second pass: tokens 16 .. M - 1; the strip's chunks are in the ring")
        e("  sub.u32 %m, %t0, 16;")
        if not p2_early:  # (p2_early: moved on where the second pass's x was loaded)
            e(f"  add.u64 %px, %px, {16 * 2 * K};")
        e(f"  add.u64 %po, %po, {16 * 2 * N};")
        if sh.fuse == "res":
            e(f"  add.u64 %pmo, %pmo, {16 * 2 * N};")
        e("  mov.u32 %s, %ctaid.x;")
        e("  bra.uni PASS;")
    if sh.fuse == "gate" or (sh.shared and sh.shared_gate):
        gate_cta(e, sh)
    if sh.ba:
        ba_cta(e, sh)
    if sh.down:  # every CTA (the gate's too) goes on to the second barrier instead of returning
        assert sum(ln == "    ret;" for ln in e.lines) == 2
        e.lines = ["    bra.uni DN_PHASE;  // to the second grid barrier" if ln == "    ret;" else ln for ln in e.lines]
        (down_phase_pairs if _DOWN["sync"] in ("pairs", "tags") else down_phase)(e, sh)
    e("}")
    return e.text()


def gate_cta(e: Emit, sh: Shape) -> None:
    """The extra CTA of the "gate" variant: gate_out[m] = bf16(x[m] . gate_w), the MoE's BF16
    shared_expert_gate (1 x K), M <= 16 (a 32-token build: tokens 16 r .. 16 r + 15 in round r, the round
    kept in shared memory past the warps' sums). Thread t takes k = P t .. P t + P - 1 (P = K / threads:
    4 with 512 threads, 8-byte loads; 8 with 256, 16-byte loads, the tokens in two passes of 8; a
    warp reads contiguous bytes), a P-term fma chain in k order per token, shfl.bfly 16, 8, 4, 2, 1,
    then thread m < M adds the warps' sums in warp order. Deterministic. ksplit: the gate has a
    cluster of its own, whose rank 1 exits."""
    per = sh.K // sh.threads
    assert per in (4, 8), "one 8- or 16-byte load of x per token per thread"
    acc = [f"%c{i}" for i in range(8)] + [f"%acc{i}" for i in range(8)]
    X = [f"%xr0_0_{i}" for i in range(16)] + [f"%xr1_0_{i}" for i in range(16)]
    wf = ["%xs0", "%xs1", "%xs2", "%xs3", "%f4", "%f5", "%f6", "%f7"][:per]  # the weights as f32, k order
    words = per // 2
    e("GATE:")
    if sh.ksplit > 1:
        e("  setp.ne.u32 %p, %rank, 0;")
        e("  @%p ret;  // the gate cluster's rank 1: nothing to do")
    e("  griddepcontrol.wait;  // x is the previous kernel's output")
    e("  griddepcontrol.launch_dependents;")
    rounds = sh.tokens // 16  # tokens 16 r .. 16 r + 15 in round r (the same per-token arithmetic)
    rnd = 2048  # the round's shared word: past the warps' [warp][16 tokens] fp32 sums (64 B a warp)
    assert 64 * sh.W <= rnd
    if rounds > 1:
        e("  mov.u32 %t1, 0;")
        e("GATE_ROUND:")
        e("  ld.param.u32 %m, [M];")
        e("  sub.u32 %m, %m, %t1;  // this round's tokens, at most 16 of them")
        e("  min.u32 %m, %m, 16;")
        e("  ld.param.u64 %px, [x];")
        e("  cvta.to.global.u64 %px, %px;")
        e(f"  mul.wide.u32 %pt64, %t1, {2 * sh.K};")
        e("  add.u64 %px, %px, %pt64;")
        e("  ld.param.u64 %pgo, [gate_out];")
        e("  cvta.to.global.u64 %pgo, %pgo;")
        e("  mul.wide.u32 %pt64, %t1, 2;")
        e("  add.u64 %pgo, %pgo, %pt64;")
        e(f"  st.shared.u32 [%sbase+{rnd}], %t1;  // (the round, kept across the sums)")
    e(f"  mul.wide.u32 %pt64, %th, {2 * per};")
    e("  add.u64 %pa, %pg, %pt64;")
    wregs = ["%t2", "%t3"] if per == 4 else ["%t0", "%t2", "%t3", "%tok"]
    e(f"  ld.global.nc.v{words}.u32 {{{', '.join(wregs)}}}, [%pa];  // gate_w[{per} t .. {per} t + {per - 1}]")
    e("  add.u64 %pb, %px, %pt64;")

    def weights_f32(tmp: str) -> None:
        for j, wr in enumerate(wregs):
            e(f"  shl.b32 {tmp}, {wr}, 16;")
            e(f"  mov.b32 {wf[2 * j]}, {tmp};")
            e(f"  and.b32 {tmp}, {wr}, 0xffff0000;")
            e(f"  mov.b32 {wf[2 * j + 1]}, {tmp};")

    if per == 8:  # %t0 holds a weight word
        weights_f32("%t1")
    per_pass = 32 // words  # tokens whose x words fit the 32 X registers
    for p0 in range(0, 16, per_pass):
        for m in range(p0, p0 + per_pass):
            xs = X[words * (m - p0): words * (m - p0 + 1)]
            e(f"  setp.lt.u32 %pv, %m, {m + 1};  // token {m} >= M: zeros")
            for r in xs:
                e(f"  mov.b32 {r}, 0;")
            e(f"  @!%pv {_XLD[0]}.v{words}.u32 {{{', '.join(xs)}}}, [%pb+{m * 2 * sh.K}];")
        if per == 4:
            weights_f32("%t0")
        for m in range(p0, p0 + per_pass):
            for j in range(words):
                bf16x2_to_f32(e, X[words * (m - p0) + j])
                if j == 0:
                    e(f"  mul.rn.f32 {acc[m]}, %f0, {wf[0]};")
                else:
                    e(f"  fma.rn.f32 {acc[m]}, %f0, {wf[2 * j]}, {acc[m]};")
                e(f"  fma.rn.f32 {acc[m]}, %f1, {wf[2 * j + 1]}, {acc[m]};")
    for m in range(16):
        bfly_sum(e, acc[m], "%f2")
    e("  // lane 0 of each warp: its 16 token sums to shared [warp][token]")
    e("  setp.eq.u32 %p, %lane, 0;")
    e("  mad.lo.u32 %t0, %warp, 64, %sbase;")
    for m in range(16):
        e(f"  @%p st.shared.f32 [%t0+{4 * m}], {acc[m]};")
    e("  bar.sync 0;")
    e("  setp.ge.u32 %p, %th, %m;")
    e("  @%p bra GATE_DONE;")
    e("  mad.lo.u32 %t0, %th, 4, %sbase;  // token th: the warps' sums in warp order")
    e("  ld.shared.f32 %f0, [%t0];")
    for w_ in range(1, sh.W):
        e(f"  ld.shared.f32 %f1, [%t0+{64 * w_}];")
        e("  add.rn.f32 %f0, %f0, %f1;")
    e("  cvt.rn.bf16.f32 %q0, %f0;")
    e("  mul.wide.u32 %pt64, %th, 2;")
    e("  add.u64 %pa, %pgo, %pt64;")
    e("  st.relaxed.gpu.global.b16 [%pa], %q0;  // strong: the down phase spins on it (tags)" if tags_build(sh)
      else "  st.global.b16 [%pa], %q0;")
    e("GATE_DONE:")
    if rounds > 1:
        e(f"  ld.shared.u32 %t1, [%sbase+{rnd}];")
        e("  add.u32 %t1, %t1, 16;")
        e("  ld.param.u32 %t0, [M];")
        e("  setp.ge.u32 %p, %t1, %t0;")
        e("  @%p ret;")
        e("  bar.sync 0;  // every token sum of this round read before the next round's stores")
        e("  bra.uni GATE_ROUND;")
    e("  ret;")


# the b | a CTA's shared memory: 16 weight rows and 8 x rows, each padded to BA_RB bytes (so the 8 rows of a
# ldmatrix start in 8 different 16-byte bank groups, as bf16_gemv_n64_k2048's), the 16 warps' partials, one mbarrier
BA_RB = 2 * BA_K + 16
BA_W, BA_X = 0, 16 * BA_RB


def ba_rows(sh: Shape) -> int:
    """The b | a CTA's x rows in shared memory at once: 8 (the norm build's M <= 8; a round of the plain 16-token
    build, whose shared memory holds no more) or 16 (a round of the plain 32-token build)."""
    return 16 if sh.fuse == "" and sh.tokens == 32 else 8


def ba_layout(sh: Shape) -> tuple[int, int]:
    """The b | a CTA's partial slots and mbarrier offsets, after its ba_rows x rows."""
    red = BA_X + ba_rows(sh) * BA_RB
    return red, red + 16 * 1024


def ba_cta(e: Emit, sh: Shape) -> None:
    """The last BA_STRIPS CTAs of a ``ba`` build: CTA nct + q computes rows 16 (q % 2) .. + 15 of w_b (q < 2) or
    w_a, bitwise as bf16_gemv_n64_k2048 (its cluster of 4 ranks x 4 warps is here one CTA of 16 warps): thread 0
    bulk-copies the 16 weight rows before griddepcontrol.wait; after it the x rows go to padded shared rows (rows past
    M zero): the norm build (M <= 8) makes x[t] = rmsnorm(h[t]) by warp t (bitwise rmsnorm_h2048, as moe_router_norm's
    prologue: lane l holds channels 256 i + 8 l ..); a plain build loads x[R r + w] by warp w < R in rounds r of R
    tokens (ba_rows: 16 in the 32-token build, 8 in the 16-token one). Warp w takes the k16 steps 8 w .. 8 w + 7
    (ldmatrix, mma.sync m16n8k16 bf16 -> f32 from zero, in k order) for each n-tile of 8 tokens, stores its partial
    [n-tile][register][lane] to slot w; warps 4 nt + r add the 16 slots in slot order (k order) and store the tokens
    < M."""
    norm = sh.fuse == "norm"
    assert (norm or (sh.fuse == "" and sh.tokens in (16, 32))) and sh.W == 16 and sh.K == BA_K, sh.name
    xrows = ba_rows(sh)  # x rows in shared memory at once (one round)
    nts = xrows // 8  # n-tiles per round
    red, bar = ba_layout(sh)
    assert bar + 8 <= sh.smem, (sh.name, bar, sh.smem)
    e("BA:")
    e("  {")
    e("  .reg .pred %bp, %bq;")
    e("  .reg .b32 %bstrip, %bbar, %bsa, %bsb, %bt<6>, %bx<32>, %bnw<4>, %ba<4>, %bb<2>, %bo, %btok, %brow"
      + (";" if norm else ", %brnd;"))
    e(f"  .reg .f32 %bf<8>, %bv<8>, %bss<8>, %br, %bc<{4 * nts}>, %bacc, %bg;")
    e("  .reg .b16 %bh;")
    e("  .reg .b64 %bpw, %bpa, %bpo;")
    e("  sub.u32 %bstrip, %s, %nct;  // 0, 1: w_b's rows 0-15, 16-31; 2, 3: w_a's")
    e(f"  setp.lt.u32 %bq, %bstrip, {BA_STRIPS // 2};")
    e("  ld.param.u64 %bpw, [w_b];")
    e("  ld.param.u64 %bpa, [w_a];")
    e("  selp.b64 %bpw, %bpw, %bpa, %bq;")
    e("  cvta.to.global.u64 %bpw, %bpw;")
    e("  and.b32 %bt0, %bstrip, 1;")
    e(f"  mul.wide.u32 %bpa, %bt0, {16 * 2 * BA_K};  // the strip's first row")
    e("  add.u64 %bpw, %bpw, %bpa;")
    e(f"  add.u32 %bbar, %sbase, {bar};")
    e("  setp.ne.u32 %bp, %th, 0;")
    e("  @%bp bra BA_ISSUED;")
    e("  mbarrier.init.shared::cta.b64 [%bbar], 1;")
    e("  fence.mbarrier_init.release.cluster;  // visible to the async proxy")
    e(f"  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bbar], {16 * 2 * BA_K};")
    for r in range(16):
        e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%sbase+{BA_W + r * BA_RB}], "
          f"[%bpw+{r * 2 * BA_K}], {2 * BA_K}, [%bbar];  // row {r}: weights, before the wait")
    e("BA_ISSUED:")
    e("  griddepcontrol.wait;  // " + ("h" if norm else "x") + " is the previous kernel's output")
    e("  griddepcontrol.launch_dependents;")
    loads = BA_K // 256
    if norm:
        e("  // x[t] = rmsnorm(h[t]) by warp t < M into padded row t; warps M..7 zero their row")
        e("  setp.ge.u32 %bp, %warp, 8;")
        e("  @%bp bra BA_NORMED;")
    else:
        e("  mov.u32 %brnd, 0;  // the round's first token")
        e("BA_ROUND:")
        e(f"  // x[round + w] by warp w < {xrows} into padded row w (zero past M)")
        if xrows < sh.W:
            e(f"  setp.ge.u32 %bp, %warp, {xrows};")
            e("  @%bp bra BA_NORMED;")
    e(f"  mad.lo.u32 %bt0, %warp, {BA_RB}, %sbase;")
    e("  mad.lo.u32 %bt0, %lane, 16, %bt0;")
    e(f"  add.u32 %bt0, %bt0, {BA_X};  // row warp, channels 8 lane .. (+ 256 i)")
    if norm:
        e("  setp.ge.u32 %bp, %warp, %m;")
    else:
        e("  add.u32 %btok, %brnd, %warp;")
        e("  setp.ge.u32 %bp, %btok, %m;")
    e("  @%bp bra BA_ZERO;")
    e(f"  mad.lo.u32 %bt1, {'%warp' if norm else '%btok'}, {BA_K}, 0;")
    e("  mad.lo.u32 %bt1, %lane, 8, %bt1;")
    e("  mul.wide.u32 %bpa, %bt1, 2;")
    e("  add.u64 %bpa, %px, %bpa;")
    what = "h" if norm else "x"
    for i in range(loads):
        e(f"  {_XLD[0]}.v4.u32 {{%bx{4 * i}, %bx{4 * i + 1}, %bx{4 * i + 2}, %bx{4 * i + 3}}}, [%bpa+{512 * i}];  // {what}[t, 256 {i} + 8 lane ..]")
    ind = lambda line: e("  " + line)  # noqa: E731  (this scope's indentation)
    if norm:
        rms_emit.sums(ind, "%bx", "%bf", "%bss", "%br", "%bg", "%bt5", "%eps", loads, BA_K)
        e("  mul.wide.u32 %bpa, %lane, 16;")
        e("  add.u64 %bpa, %pn, %bpa;")
    for i in range(loads):
        if norm:
            rms_emit.scale(ind, i, "%bx", "%bf", "%bv", "%bnw", "%br", "%bt5", "%bpa")
        e(f"  st.shared.v4.b32 [%bt0+{512 * i}], {{%bx{4 * i}, %bx{4 * i + 1}, %bx{4 * i + 2}, %bx{4 * i + 3}}};")
    e("  bra.uni BA_NORMED;")
    e("BA_ZERO:")
    for i in range(loads):
        e(f"  st.shared.v4.b32 [%bt0+{512 * i}], {{0, 0, 0, 0}};")
    e("BA_NORMED:")
    e("  bar.sync 0;  // x's rows; thread 0 has initialized the mbarrier")
    e("BA_CP_WAIT:")
    e("  mbarrier.try_wait.parity.shared::cta.b64 %bp, [%bbar], 0;" + ("" if norm else "  // later rounds: at once"))
    e("  @!%bp bra BA_CP_WAIT;")
    e("  // ldmatrix rows: lane l gives row (l >> 3 & 1) 8 + l % 8, k + (l >> 4) 8 of A; token l % 8, k + (l >> 3 & 1) 8 of B")
    e("  and.b32 %bt0, %lane, 7;")
    e("  shr.u32 %bt1, %lane, 3;")
    e("  and.b32 %bt2, %bt1, 1;")
    e("  shr.u32 %bt3, %bt1, 1;")
    e("  mad.lo.u32 %bt4, %bt2, 8, %bt0;")
    e(f"  mad.lo.u32 %bsa, %bt4, {BA_RB}, %sbase;")
    e("  mad.lo.u32 %bsa, %bt3, 16, %bsa;")
    e("  mad.lo.u32 %bsa, %warp, 256, %bsa;  // k16 steps 8 warp ..")
    e(f"  add.u32 %bsa, %bsa, {BA_W};")
    e(f"  mad.lo.u32 %bsb, %bt0, {BA_RB}, %sbase;")
    e("  mad.lo.u32 %bsb, %bt2, 16, %bsb;")
    e("  mad.lo.u32 %bsb, %warp, 256, %bsb;")
    e(f"  add.u32 %bsb, %bsb, {BA_X};")
    for i in range(4 * nts):
        e(f"  mov.f32 %bc{i}, 0f00000000;")
    for i in range(8):
        e(f"  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%ba0, %ba1, %ba2, %ba3}}, [%bsa+{32 * i}];")
        for nt in range(nts):
            c = ", ".join(f"%bc{4 * nt + j}" for j in range(4))
            e(f"  ldmatrix.sync.aligned.m8n8.x2.shared.b16 {{%bb0, %bb1}}, [%bsb+{32 * i + 8 * BA_RB * nt}];")
            e(f"  mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{{c}}}, {{%ba0, %ba1, %ba2, %ba3}}, "
              f"{{%bb0, %bb1}}, {{{c}}};")
    e("  // the warp's partial to slot warp, " + ("[register][lane]" if norm else "[n-tile][register][lane]"))
    e("  mad.lo.u32 %bt0, %warp, 1024, %sbase;")
    e("  mad.lo.u32 %bt0, %lane, 4, %bt0;")
    for i in range(4 * nts):
        e(f"  st.shared.f32 [%bt0+{red + 128 * i}], %bc{i};")
    e("  bar.sync 0;")
    e(f"  setp.ge.u32 %bp, %warp, {4 * nts};")
    e("  @%bp bra " + ("BA_DONE;" if norm else "BA_NEXT;"))
    if norm:
        e("  // warps 0..3: register r = warp of every slot, summed in slot order (k order); token 2 tig + r % 2,")
        e("  // row g + 8 (r / 2)")
    else:
        e("  // warps 4 nt + r: register r of n-tile nt of every slot, summed in slot order (k order); token")
        e("  // round + 8 nt + 2 tig + r % 2, row g + 8 (r / 2)")
    e("  mad.lo.u32 %bt0, %warp, 128, %sbase;")
    e("  mad.lo.u32 %bt0, %lane, 4, %bt0;")
    e(f"  ld.shared.f32 %bacc, [%bt0+{red}];")
    for sl in range(1, 16):
        e(f"  ld.shared.f32 %bg, [%bt0+{red + 1024 * sl}];")
        e("  add.f32 %bacc, %bacc, %bg;")
    e("  shl.b32 %btok, %tig, 1;")
    e("  and.b32 %bt1, %warp, 1;")
    e("  add.u32 %btok, %btok, %bt1;")
    if not norm:
        e("  shr.u32 %bt1, %warp, 2;")
        e("  mad.lo.u32 %btok, %bt1, 8, %btok;")
        e("  add.u32 %btok, %btok, %brnd;")
        e("  and.b32 %bt1, %warp, 3;")
        e("  shr.u32 %bt1, %bt1, 1;")
    else:
        e("  shr.u32 %bt1, %warp, 1;")
    e("  mad.lo.u32 %brow, %bt1, 8, %g;")
    e("  and.b32 %bt1, %bstrip, 1;")
    e("  mad.lo.u32 %brow, %bt1, 16, %brow;  // the row of w_b or w_a")
    e("  setp.lt.u32 %bp, %btok, %m;")
    e("  cvt.rn.bf16.f32 %bh, %bacc;")
    e("  ld.param.u64 %bpo, [out_b];")
    e("  ld.param.u64 %bpa, [out_a];")
    e("  selp.b64 %bpo, %bpo, %bpa, %bq;")
    e("  cvta.to.global.u64 %bpo, %bpo;")
    e(f"  mad.lo.u32 %bt1, %btok, {BA_ROWS}, %brow;")
    e("  mul.wide.u32 %bpa, %bt1, 2;")
    e("  add.u64 %bpa, %bpo, %bpa;")
    e("  @%bp st.relaxed.gpu.global.b16 [%bpa], %bh;  // strong: the next grid polls it (strong_out)" if _STRONG["on"]
      else "  @%bp st.global.b16 [%bpa], %bh;")
    if not norm:
        e("BA_NEXT:")
        e(f"  add.u32 %brnd, %brnd, {xrows};")
        e("  setp.ge.u32 %bp, %brnd, %m;")
        e("  @%bp bra BA_DONE;")
        e("  bar.sync 0;  // every sum of this round has read the slots before the next round's partials")
        e("  bra.uni BA_ROUND;")
    e("BA_DONE:")
    e("  ret;")
    e("  }")


def ids_load(e: Emit, sh: Shape, ld: str) -> None:
    """moe, moedown: thread t < P (the pairs, or the M x 8 (token, expert) ids) loads ids[t] (int64)
    into %rid (-1 past P; %pq: t < P)."""
    e(f"  shl.b32 %t0, %m, {TOP_K.bit_length() - 1 if sh.fuse == 'moedown' else sh.pair_shift};" + (f"  // the {TOP_K} M (token, expert) ids" if sh.fuse == "moedown" else ""))
    e("  setp.lt.u32 %pq, %th, %t0;")
    e("  mul.wide.u32 %pt64, %th, 8;")
    e("  add.u64 %pa, %pid, %pt64;")
    e("  mov.u64 %rid, -1;")
    e(f"  @%pq {ld} %rid, [%pa];")
    if sh.shared and not sh.group:  # (group: the shared expert is distinct expert 0, not M more pairs)
        e("  add.u32 %t0, %t0, %m;  // and thread 8 M + t: token t's shared expert, id E")
        e("  setp.ge.u32 %p, %th, %p8m;")
        e("  cvt.u64.u32 %pt64, %ne;")
        e("  @%p mov.u64 %rid, %pt64;")
        e("  setp.lt.u32 %pq, %th, %t0;")


def ids_entry(e: Emit, sh: Shape) -> None:
    """%t0 = the ids-table entry for %rid (0xffffffff outside 0..E-1; the shared pairs' E kept), %t1 = this thread's
    slot address less ids_off."""
    e("  cvt.u64.u32 %pt64, %ne;")
    e("  setp.lt.u64 %pe, %rid, %pt64;  // unsigned: a negative id is outside too")
    if sh.shared:
        e("  setp.ge.u32 %p, %th, %p8m;")
        e("  or.pred %pe, %pe, %p;  // the shared pairs' id E (a routed id E is outside)")
    e("  cvt.u32.u64 %t0, %rid;")
    e("  selp.b32 %t0, %t0, 0xffffffff, %pe;")
    e("  shl.b32 %t1, %th, 2;")
    e("  add.u32 %t1, %t1, %sbase;")


def ids_store(e: Emit, sh: Shape, barrier: bool = True) -> None:
    """moe, moedown: %rid (0xffffffff outside 0..E-1) to the shared ids table; then (``barrier``)
    a bar.sync before thread 0 requests any chunk."""
    ids_entry(e, sh)
    e(f"  @%pq st.shared.u32 [%t1+{sh.ids_off}], %t0;")
    if barrier:
        e("  bar.sync 0;  // the ids table, before thread 0 requests any chunk")


def ids_check(e: Emit, sh: Shape, sfx: str, force: bool = False) -> None:
    """ids_early: the ids again after griddepcontrol.wait (ld.global, where the PDL contract makes the previous
    grid's writes visible) against the table read before it. If any differs (the early read found the buffer
    before its writer's store), thread 0 waits for the first chunks it requested (each issued stage's mbarrier
    completing phase 0), gives each a fresh mbarrier and requests them again from the right experts; the
    table is rewritten first. One bar.red decides for the whole CTA, so the path is uniform. ``force`` (a
    diagnostic build, generate(ids_checked="force")): every CTA takes that path, so a test can run it."""
    e("  // the ids again after the wait: a table read before it from a stale buffer is rebuilt and its chunks re-requested")
    ids_load(e, sh, "ld.global.u64")
    ids_entry(e, sh)
    e("  mov.u32 %t2, %t0;")
    e(f"  @%pq ld.shared.u32 %t2, [%t1+{sh.ids_off}];")
    e("  setp.ne.u32 %pe, %t2, %t0;")
    if force:
        e("  setp.eq.u32 %pe, %th, %th;  // diagnostic: every CTA re-requests")
    e("  bar.red.or.pred %pe, 0, %pe;  // any id of the CTA's table changed")
    e(f"  @!%pe bra IDS_OK{sfx};")
    e(f"  @%pq st.shared.u32 [%t1+{sh.ids_off}], %t0;")
    e("  setp.ne.u32 %p, %th, 0;")
    e(f"  @%p bra IDS_AGAIN{sfx};")
    e("  mov.u32 %sn, %s;")
    for k in range(sh.NS // sh.NC):
        e("  setp.ge.u32 %p, %sn, %sv;  // strips issued early: the same count (it does not depend on the ids)")
        e(f"  @%p bra IDS_LANDED{sfx};")
        for h in range(sh.NC):
            i = k * sh.NC + h
            e(f"IDS_W{i}{sfx}:")
            e(f"  mbarrier.try_wait.parity.shared::cta.b64 %p, [%bars+{8 * i}], 0;")
            e(f"  @!%p bra IDS_W{i}{sfx};")
            e(f"  mbarrier.inval.shared::cta.b64 [%bars+{8 * i}];")
            e(f"  mbarrier.init.shared::cta.b64 [%bars+{8 * i}], 1;")
        e("  add.u32 %sn, %sn, %nct;")
    e(f"IDS_LANDED{sfx}:")
    e("  fence.mbarrier_init.release.cluster;  // the fresh mbarriers, visible to the bulk copies")
    issue_strips(e, sh, "%s", sh.NS // sh.NC, "0", f"IDS_REISSUED{sfx}")
    e(f"IDS_AGAIN{sfx}:")
    e("  bar.sync 0;  // the table and the fresh mbarriers, before anyone waits on a stage")
    e(f"IDS_OK{sfx}:")


def group_layout(sh: Shape) -> tuple[int, int, int, int, int]:
    """(bitmap, U, list, pos, slots) offsets in shared memory (contracts.proj.Fp8Gemv.grp_off's layout)."""
    b = sh.grp_off
    return b, b + 32, b + 64, b + 64 + 4 * sh.grp_list, b + 64 + 4 * sh.grp_list + NUM_EXPERTS


def bitmap_set(e: Emit, bm: int) -> None:
    """Where %pe: set bit %ej of the 256-bit map at shared offset bm (group_build's; also gen_moe_down_grp's)."""
    e("  shr.u32 %t0, %ej, 5;")
    e("  shl.b32 %t0, %t0, 2;")
    e("  add.u32 %t0, %t0, %sbase;")
    e("  and.b32 %t1, %ej, 31;")
    e("  mov.u32 %t2, 1;")
    e("  shl.b32 %t1, %t2, %t1;")
    e(f"  @%pe red.shared.or.b32 [%t0+{bm}], %t1;")


def scan_up(e: Emit) -> None:
    """%t2 = the warp's inclusive prefix sum of %t2 over lanes (shfl.up 1, 2, 4, 8, 16; %t3 and %p scratch)."""
    for off in (1, 2, 4, 8, 16):
        e(f"  shfl.sync.up.b32 %t3, %t2, {off}, 0, 0xffffffff;")
        e(f"  setp.ge.u32 %p, %lane, {off};")
        e("  @%p add.u32 %t2, %t2, %t3;")


def distinct_list(e: Emit, bm: int, uo: int, lo: int, po: int, sfx: str = "", note: str = "") -> None:
    """Warp 0, from the 256-bit map of ids at bm (after a barrier): U to uo, the ids in ascending order to the u32
    list at lo, each id's index to the u8 table at po (lane l takes bitmap word l; an inclusive shfl.up scan of the
    popcounts gives each lane its first index). The other warps branch to GLIST_DONE{sfx}. Also
    gen_moe_down_grp's."""
    e("  setp.ne.u32 %p, %warp, 0;")
    e(f"  @%p bra GLIST_DONE{sfx};")
    e("  // warp 0: the ids in ascending order (lane l: bitmap word l), each id's index" + note)
    e("  setp.lt.u32 %p, %lane, 8;")
    e("  mov.u32 %t0, 0;")
    e("  shl.b32 %t1, %lane, 2;")
    e("  add.u32 %t1, %t1, %sbase;")
    e(f"  @%p ld.shared.u32 %t0, [%t1+{bm}];")
    e("  popc.b32 %t1, %t0;")
    e("  mov.u32 %t2, %t1;")
    scan_up(e)
    e("  shfl.sync.idx.b32 %t3, %t2, 31, 31, 0xffffffff;  // U")
    e("  setp.eq.u32 %p, %lane, 0;")
    e(f"  @%p st.shared.u32 [%sbase+{uo}], %t3;")
    e("  sub.u32 %t2, %t2, %t1;  // this lane's first index")
    e(f"GLIST{sfx}:")
    e("  setp.eq.u32 %p, %t0, 0;")
    e(f"  @%p bra GLIST_DONE{sfx};")
    e("  neg.s32 %t1, %t0;")
    e("  and.b32 %t1, %t0, %t1;  // the lowest set bit")
    e("  bfind.u32 %t3, %t1;")
    e("  xor.b32 %t0, %t0, %t1;")
    e("  shl.b32 %t1, %lane, 5;")
    e("  add.u32 %t3, %t3, %t1;  // the id")
    e("  shl.b32 %t1, %t2, 2;")
    e("  add.u32 %t1, %t1, %sbase;")
    e(f"  st.shared.u32 [%t1+{lo}], %t3;")
    e("  add.u32 %t1, %t3, %sbase;")
    e(f"  st.shared.u8 [%t1+{po}], %t2;")
    e("  add.u32 %t2, %t2, 1;")
    e(f"  bra.uni GLIST{sfx};")
    e(f"GLIST_DONE{sfx}:")


def group_build(e: Emit, sh: Shape, sfx: str) -> None:
    """group (after the x loads; thread t < P holds ids[t] in %rid, %pq: t < P): the distinct experts of the launch
    and, per distinct expert, which (token, slot) pairs chose it; then %sv = U S virtual strips (strip s: the
    s / S-th distinct expert in ascending id order, rows 16 (s % S) ..).
    - each valid id sets its bit of the bitmap (red.shared.or); a pair whose id is not an expert gets a NaN row here
      (its thread stores N NaN), as the per-pair build gives it;
    - warp 0: lane l < 8 takes bitmap word l, an inclusive shfl.up scan of the popcounts gives each lane its first
      index, the lane writes its ids in ascending order to the list and each id's index to pos; U to shared;
    - thread t < P with a valid id: slots[pos[id]][token t / 8] |= 1 << (t % 8) (red.shared.or on the word).
    The bitmap and the slot masks were zeroed before the wait. Three bar.sync."""
    bm, uo, lo, po, so = group_layout(sh)
    N = sh.N
    e("  // the distinct experts: the bitmap (and a NaN row for a pair whose id is not an expert)")
    e("  cvt.u64.u32 %pt64, %ne;")
    e("  setp.lt.u64 %pe, %rid, %pt64;")
    e("  and.pred %pe, %pe, %pq;")
    e("  cvt.u32.u64 %ej, %rid;")
    bitmap_set(e, bm)
    e("  not.pred %p, %pe;")
    e("  and.pred %p, %p, %pq;")
    e(f"  @!%p bra GNAN_DONE{sfx};")
    e(f"  mul.wide.u32 %pt64, %th, {2 * N};")
    e("  add.u64 %pa, %po, %pt64;")
    e("  mov.b32 %t1, 0x7FC07FC0;")
    e("  mov.u32 %t0, 0;")
    e(f"GNAN{sfx}:")
    e("  st.global.v4.b32 [%pa], {%t1, %t1, %t1, %t1};")
    e("  add.u64 %pa, %pa, 16;")
    e("  add.u32 %t0, %t0, 1;")
    e(f"  setp.lt.u32 %p, %t0, {2 * N // 16};")
    e(f"  @%p bra GNAN{sfx};")
    e(f"GNAN_DONE{sfx}:")
    e("  bar.sync 0;  // the bitmap")
    distinct_list(e, bm, uo, lo + 4 * sh.shared, po, sfx,
                  note=" (list entry 0 is the shared expert's: the routed ones from 1)" if sh.shared else "")
    e("  bar.sync 0;  // the list, pos and U")
    e("  // the slot masks: distinct expert pos[id], token t / 8's byte, bit t % 8")
    e("  add.u32 %t1, %ej, %sbase;")
    e("  mov.u32 %t0, 0;")
    e(f"  @%pe ld.shared.u8 %t0, [%t1+{po}];")
    e(f"  shr.u32 %t2, %th, {TOP_K.bit_length() - 1};  // token t")
    e("  and.b32 %t3, %t2, 3;")
    e("  shl.b32 %t3, %t3, 3;")
    e(f"  and.b32 %t1, %th, {TOP_K - 1};")
    e("  add.u32 %t3, %t3, %t1;  // bit 8 (t % 4) + j of word t / 4")
    e("  mov.u32 %t1, 1;")
    e("  shl.b32 %t1, %t1, %t3;")
    e("  shr.u32 %t2, %t2, 2;")
    e(f"  mad.lo.u32 %t0, %t0, {sh.tokens // 4}, %t2;")
    e("  shl.b32 %t0, %t0, 2;")
    e("  add.u32 %t0, %t0, %sbase;")
    e(f"  @%pe red.shared.or.b32 [%t0+{so}], %t1;")
    e(f"  ld.shared.u32 %t0, [%sbase+{uo}];")
    if sh.shared:
        e("  add.u32 %t0, %t0, 1;  // and the shared expert, distinct expert 0")
    e(f"  mul.lo.u32 %sv, %t0, {sh.S};  // U S virtual strips" + (" (U with the shared expert)" if sh.shared else ""))
    e("  bar.sync 0;  // the slot masks, before any strip's store")


def router_rows(e: Emit, sh: Shape) -> None:
    """router (thread 0, after fence.mbarrier_init, before griddepcontrol.wait: weights never change): the CTA's
    router rows, experts ctaid and ctaid + SMS (the second only below NUM_EXPERTS), one 4 KB bulk copy each into
    rows_off on their own mbarrier."""
    row, rbar = 2 * ROUTER_K, sh.rows_off + ROUTER_ROWS * 2 * ROUTER_K
    assert ROUTER_ROWS == 2 and NUM_EXPERTS - SMS > 0
    e("  // the CTA's router rows (experts ctaid, ctaid + SMS) into shared memory")
    e(f"  add.u32 %t3, %sbase, {rbar};")
    e("  mov.u32 %t0, %ctaid.x;")
    e(f"  setp.lt.u32 %p, %t0, {NUM_EXPERTS - SMS};  // a second row")
    e(f"  selp.b32 %t1, {2 * row}, {row}, %p;")
    if _RNW["early"] == "pre":
        e(f"  add.u32 %t1, %t1, {row};  // norm_w_early='pre': the norm weight's 4 KB on the same mbarrier")
    e("  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%t3], %t1;")
    if _RNW["early"] == "pre":  # into the partials' region: nothing else touches it before the router phase ends
        e("  ld.param.u64 %pa, [norm_w];")
        e("  cvta.to.global.u64 %pa, %pa;")
        e(f"  add.u32 %t2, %sbase, {sh.red_off};")
        e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%t2], [%pa], {row}, [%t3];")
    e("  ld.param.u64 %pa, [rw];")
    e("  cvta.to.global.u64 %pa, %pa;")
    e(f"  mul.wide.u32 %pt64, %t0, {row};")
    e("  add.u64 %pa, %pa, %pt64;")
    e(f"  add.u32 %t2, %sbase, {sh.rows_off};")
    e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%t2], [%pa], {row}, [%t3];")
    e(f"  add.u64 %pa, %pa, {SMS * row};")
    e(f"  @%p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%t2+{row}], [%pa], {row}, [%t3];")


def norm_w_early_smem(sh: Shape) -> tuple[int, int]:
    """norm_w_early: (offset, the build's dynamic shared memory): a 4 KB region per norm warp (2 M of them, M <= 8)
    after the build's own layout."""
    off = -(-sh.smem // 128) * 128
    return off, off + 2 * max(ROUTER_FUSED_TOKENS) * ROUTER_K * 2


def router_phase(e: Emit, sh: Shape) -> None:
    """router (after griddepcontrol.wait, every CTA, the gate CTA too): the post-attention norm, the router's logits,
    one grid-wide barrier, the top 8, as moe_router_norm_e256_k2048 computes them (bitwise: the same instructions
    per row, from gen_moe_router and rms_emit).
    - Warp w < 2 M: token m = w / 2, expert c + SMS (w % 2) of CTA c. Lane l loads h[m, 256 i + 8 l ..] (the
      router's layout), normalizes the row in registers (rms_emit: rmsnorm_h2048's order), CTA 0's slot-0 warps
      store it to x_out; then the expert's row (in shared memory since before the wait) as the router sums it
      (gen_moe_router._row_sum), lane 0 stores the BF16 logit as fp32 to logits[m, e].
    - bar.sync; thread 0: atom.add.release.gpu on the counter (u64, never wraps), spin with ld.acquire.gpu until it
      reaches the next multiple of SMS (no fences since 7e704bc: _GBAR); bar.sync. Every CTA must be
      resident (one per SM, SMS of them): the op checks the device before it launches this.
    - Warp m < M: the 256 logits of token m (ld.global.cg: not from L1), the router's selection
      (gen_moe_router._select_redux) and weights; lane j < 8 writes pair 8 m + j's id to the shared ids table (the
      body reads it there), CTA 0 also top[m, j] and idx[m, j]. bar.sync, then the body (x from x_out, coherent
      loads after the barrier).
    The pairs are ordered shared first (pairs 0 .. M - 1: token t's shared expert, id E, in the table since before
    the wait; pairs M + 8 m + j: the routed ones), so a CTA whose first strip is a shared one requests it before the
    wait and its walk after the barrier has one strip less; the rest of the first NS chunks are requested right
    after this phase, before the x loads (x_out is in L2, the chunks come from DRAM)."""
    row, rbar = 2 * ROUTER_K, sh.rows_off + ROUTER_ROWS * 2 * ROUTER_K
    loads = ROUTER_K // 256
    assert sh.router and sh.shared and sh.shared_gate and loads == gmr.LOADS and sh.W >= 2 * max(ROUTER_FUSED_TOKENS)  # 2 logit warps per token
    ee = lambda ln: e(ln if ln.endswith(":") or ln.startswith("//") else "  " + ln)  # noqa: E731

    e("  // ---- the router phase: norm, this CTA's logits, the grid barrier, every CTA's selection ----")
    e("  {")
    ee(".reg .pred %q, %pr;")
    nw_pre = _RNW["early"] == "pre"  # the weight in shared memory since before the wait (router_rows)
    nw_early = _RNW["early"] is True
    ee(f".reg .b32 %x<{4 * loads}>, %w<{4 * loads}>, %nw<4>, %k<8>, %si<8>, %bi, %oi, %rm, %rj, %re"
       + (", %nws;" if nw_early or nw_pre else ";"))
    ee(".reg .f32 %a, %b, %c, %d, %acc0, %e<8>, %ss<8>, %v<8>, %sv<8>, %ev<8>, %r, %sum, %reps;")
    ee(".reg .b16 %h;")
    ee(".reg .b64 %o64, %pn, %pl, %rb, %ro, %rt, %rv" + (", %lg<8>;" if sh.router_poll else ";"))
    ee("ld.param.u64 %pl, [logits];")
    ee("cvta.to.global.u64 %pl, %pl;")
    ee("shr.u32 %rm, %warp, 1;  // token m")
    ee("and.b32 %rj, %warp, 1;  // row slot j: expert ctaid + SMS j")
    ee("setp.ge.u32 %p, %rm, %m;")
    ee("@%p bra RT_SUMS_DONE;")
    ee("mov.u32 %re, %ctaid.x;")
    ee(f"mad.lo.u32 %re, %rj, {SMS}, %re;")
    ee("ld.param.u64 %o64, [h];")
    ee("cvta.to.global.u64 %o64, %o64;")
    ee(f"mul.lo.u32 %t0, %rm, {ROUTER_K};")
    ee("mad.lo.u32 %t0, %lane, 8, %t0;")
    ee("mul.wide.u32 %pt64, %t0, 2;")
    ee("add.u64 %pa, %o64, %pt64;  // h[m, 8 lane ..]")
    ee("add.u64 %pb, %px, %pt64;  // x_out[m, 8 lane ..]")
    for i in range(loads):
        ee(f"ld.global.v4.u32 {{%x{4 * i}, %x{4 * i + 1}, %x{4 * i + 2}, %x{4 * i + 3}}}, [%pa+{512 * i}];")

    def norm_w_ptr():
        ee("ld.param.u64 %pn, [norm_w];")
        ee("cvta.to.global.u64 %pn, %pn;")
        ee("mul.wide.u32 %o64, %lane, 16;")
        ee("add.u64 %pn, %pn, %o64;")

    if nw_early:  # the weight's L2 round trip beside h's: cp.async into this warp's 4 KB (ptxas sinks plain loads
        # of it back to their uses, volatile ones too), read back by the same lane after cp.async.wait_all
        norm_w_ptr()
        ee(f"mad.lo.u32 %nws, %warp, {ROUTER_K * 2}, %sbase;")
        ee(f"add.u32 %nws, %nws, {norm_w_early_smem(sh)[0]};")
        ee("mad.lo.u32 %nws, %lane, 16, %nws;")
        for i in range(loads):
            ee(f"cp.async.cg.shared.global [%nws+{512 * i}], [%pn+{512 * i}], 16;")
        ee("cp.async.commit_group;")
        ee("fence.acq_rel.cta;  // without it ptxas issues the copies after the sums' shuffles (SASS); the sums wait for h")
    ee("ld.param.f32 %reps, [eps];")
    rms_emit.sums(ee, "%x", "%e", "%ss", "%r", "%a", "%t0", "%reps", loads, ROUTER_K)
    if not nw_early and not nw_pre:
        norm_w_ptr()
    if nw_pre:  # requested before the wait with the router rows: landed long since; parity 0 does not consume
        ee(f"add.u32 %nws, %sbase, {rbar};")
        e("RT_NW_WAIT:")
        ee("mbarrier.try_wait.parity.shared::cta.b64 %pr, [%nws], 0;")
        ee("@!%pr bra RT_NW_WAIT;")
        ee("mad.lo.u32 %nws, %lane, 16, %sbase;")
        ee(f"add.u32 %nws, %nws, {sh.red_off};  // norm_w[8 lane ..]")
    ee("mov.u32 %t0, %ctaid.x;")
    ee("or.b32 %t0, %t0, %rj;")
    ee("setp.eq.u32 %q, %t0, 0;  // CTA 0's slot-0 warps write x_out")
    poll = sh.router_poll
    if poll:
        ep = sh.xs_off + max(ROUTER_FUSED_TOKENS) * 2 * ROUTER_K
        ee("setp.eq.u32 %pr, %rj, 0;  // slot-0 warps: row m of x into this CTA's shared rows (the body's x)")
        ee(f"mad.lo.u32 %t1, %rm, {2 * ROUTER_K}, %sbase;")
        ee("mad.lo.u32 %t1, %lane, 16, %t1;")
    if nw_early:
        ee("cp.async.wait_all;  // this lane's own copies: no barrier")
    for i in range(loads):
        rms_emit.scale(ee, i, "%x", "%e", "%v", "%nw", "%r", "%t0", "%pn", smem="%nws" if nw_early or nw_pre else None)
        regs = ", ".join(f"%x{4 * i + c}" for c in range(4))
        ee(f"@%q st.global.v4.b32 [%pb+{512 * i}], {{{regs}}};")
        if poll:
            ee(f"@%pr st.shared.v4.b32 [%t1+{sh.xs_off + 512 * i}], {{{regs}}};")
    ee(f"setp.ge.u32 %p, %re, {NUM_EXPERTS};")
    ee("@%p bra RT_SUMS_DONE;")
    ee(f"add.u32 %t0, %sbase, {rbar};")
    e("RT_ROWS_WAIT:")
    ee("mbarrier.try_wait.parity.shared::cta.b64 %pr, [%t0], 0;")
    ee("@!%pr bra RT_ROWS_WAIT;")
    ee(f"mad.lo.u32 %t1, %rj, {row}, %sbase;")
    ee("mad.lo.u32 %t1, %lane, 16, %t1;")
    for i in range(loads):
        ee(f"ld.shared.v4.u32 {{%w{4 * i}, %w{4 * i + 1}, %w{4 * i + 2}, %w{4 * i + 3}}}, [%t1+{sh.rows_off + 512 * i}];")
    gmr._row_sum(ee, 0)
    ee("cvt.f32.bf16 %acc0, %h;")
    ee(f"mad.lo.u32 %t0, %rm, {NUM_EXPERTS}, %re;")
    ee(f"mul.wide.u32 %o64, %t0, {8 if poll else 4};")
    ee("add.u64 %o64, %pl, %o64;")
    ee("setp.eq.u32 %p, %lane, 0;")
    if poll:
        ee(f"ld.shared.u32 %t1, [%sbase+{ep}];")
        ee("mov.b32 %t0, %acc0;")
        ee("mov.b64 %rv, {%t0, %t1};  // epoch << 32 | the logit's bits: one single-copy-atomic store")
        ee("@%p st.relaxed.gpu.global.u64 [%o64], %rv;")
    else:
        ee("@%p st.global.f32 [%o64], %acc0;")
    e("RT_SUMS_DONE:")
    (poll_logits if poll else barrier_and_logits)(ee, e, sh)
    select_and_publish(ee, e, sh)


def barrier_and_logits(ee, e, sh: Shape) -> None:
    """router_phase, the promoted sync: the grid barrier, then warp m < M loads token m's logits into %v0..7."""
    if sh.down and _DOWN["sync"] == "pairs":
        pair_targets(ee, e, sh)
    if sh.down and _DOWN["sync"] == "tags":
        tag_poison(ee, e, sh)
    ee("bar.sync 0;  // the CTA's logits and x_out stored")
    ee("setp.ne.u32 %p, %th, 0;")
    if _DIAG["router"] == "nosync":
        ee("bra.uni RT_ARRIVED;  // DIAGNOSTIC: no grid barrier (wrong results)")
    ee("@%p bra RT_ARRIVED;")
    ee("ld.param.u64 %rb, [bar];")
    ee("cvta.to.global.u64 %rb, %rb;")
    if _DYN["on"]:
        ee("mov.u32 %t0, %ctaid.x;")
        ee("setp.eq.u32 %q, %t0, 0;")
        ee(f"mov.u64 %rv, {sh.NS // sh.NC * (SMS - 1)};  // the strips after every CTA's first NS (static)")
        ee("@%q st.relaxed.gpu.global.u64 [%rb+8], %rv;  // CTA 0: this launch's strip counter (before the barrier)")
    form = _GBAR["form"]
    assert form in ("fenced", "lean", "lean_p2") and not (form == "lean_p2" and _DYN["on"]), form
    if form == "fenced":
        ee("fence.acq_rel.gpu;")
    if form == "lean_p2":
        assert GBAR_P & (GBAR_P - 1) == 0 and GBAR_P >= SMS
        ee("mov.u32 %t0, %ctaid.x;")
        ee("setp.eq.u32 %p, %t0, 0;")
        ee(f"selp.b64 %rv, {GBAR_P - SMS + 1}, 1, %p;  // CTA 0 brings the launch's adds to {GBAR_P}")
        ee("atom.release.gpu.global.add.u64 %ro, [%rb], %rv;")
        ee(f"and.b64 %rt, %ro, {-GBAR_P};")
        ee(f"add.u64 %rt, %rt, {GBAR_P};  // this launch's last arrival")
    else:
        ee("atom.release.gpu.global.add.u64 %ro, [%rb], 1;")
        ee(f"div.u64 %rt, %ro, {SMS};")
        ee("add.u64 %rt, %rt, 1;")
        ee(f"mul.lo.u64 %rt, %rt, {SMS};  // this launch's last arrival")
    e("RT_SPIN:")
    ee("ld.acquire.gpu.global.u64 %rv, [%rb];")
    ee("setp.lt.u64 %p, %rv, %rt;")
    ee("@%p bra RT_SPIN;")
    if form == "fenced":
        ee("fence.acq_rel.gpu;")
    e("RT_ARRIVED:")
    ee("bar.sync 0;  // every CTA's logits and x_out visible")
    ee("setp.ge.u32 %p, %warp, %m;")
    ee("@%p bra RT_SEL_DONE;")
    ee(f"mad.lo.u32 %t0, %warp, {NUM_EXPERTS}, 0;")
    ee("mad.lo.u32 %t0, %lane, 8, %t0;")
    ee("mul.wide.u32 %o64, %t0, 4;")
    ee("add.u64 %o64, %pl, %o64;  // logits[m, 8 lane ..]")
    ee("ld.global.cg.v4.f32 {%v0, %v1, %v2, %v3}, [%o64];")
    ee("ld.global.cg.v4.f32 {%v4, %v5, %v6, %v7}, [%o64+16];")


def poll_logits(ee, e, sh: Shape) -> None:
    """router_phase, router_poll: no barrier; warp m < M reads token m's 256 tagged logits (volatile 16-byte loads)
    until every entry carries this launch's epoch (a warp vote), then takes their fp32 bits into %v0..7. Other warps
    go to the phase's last bar.sync."""
    ep = sh.xs_off + max(ROUTER_FUSED_TOKENS) * 2 * ROUTER_K
    ee("setp.ge.u32 %p, %warp, %m;")
    ee("@%p bra RT_SEL_DONE;")
    ee(f"ld.shared.u32 %t2, [%sbase+{ep}];  // this launch's epoch")
    ee(f"mad.lo.u32 %t0, %warp, {NUM_EXPERTS}, 0;")
    ee("mad.lo.u32 %t0, %lane, 8, %t0;")
    ee("mul.wide.u32 %o64, %t0, 8;")
    ee("add.u64 %o64, %pl, %o64;  // logits[m, 8 lane ..], 8 bytes each")
    e("RT_POLL:")
    for q in range(4):
        ee(f"ld.volatile.global.v2.u64 {{%lg{2 * q}, %lg{2 * q + 1}}}, [%o64+{16 * q}];")
    for k in range(8):
        ee(f"mov.b64 {{%t0, %t1}}, %lg{k};")
        ee("setp.ne.u32 %pr, %t1, %t2;" if k == 0 else "setp.ne.or.u32 %pr, %t1, %t2, %pr;")
        ee(f"mov.b32 %v{k}, %t0;")
    ee("vote.sync.any.pred %pr, %pr, 0xffffffff;  // any entry not yet this launch's")
    ee("@%pr bra RT_POLL;")


def select_and_publish(ee, e, sh: Shape) -> None:
    """router_phase's end: warp m < M (with %v0..7) selects and publishes its token's 8 ids and weights."""
    gmr._select_redux(ee)
    ee("// weights: exp(l_j - l_0) / their sum, in selection order (moe_router_norm's)")
    ee("mov.f32 %sum, 0f00000000;")
    for j in range(TOP_K):
        ee(f"sub.f32 %a, %sv{j}, %sv0;")
        ee(f"mul.f32 %a, %a, {gmr.LOG2E};")
        ee(f"ex2.approx.f32 %ev{j}, %a;")
        ee(f"add.f32 %sum, %sum, %ev{j};")
    ee("mov.f32 %a, %ev0;")
    ee("mov.u32 %t1, %si0;")
    for j in range(1, TOP_K):
        ee(f"setp.eq.u32 %p, %lane, {j};")
        ee(f"@%p mov.f32 %a, %ev{j};")
        ee(f"@%p mov.u32 %t1, %si{j};")
    ee("div.rn.f32 %a, %a, %sum;")
    ee("cvt.rn.bf16.f32 %h, %a;")
    ee(f"setp.lt.u32 %p, %lane, {TOP_K};")
    ee(f"mad.lo.u32 %t0, %warp, {TOP_K}, %lane;  // (m, j): routed pair M + 8 m + j")
    ee("add.u32 %t2, %t0, %m;")
    ee("shl.b32 %t2, %t2, 2;")
    ee("add.u32 %t2, %t2, %sbase;")
    ee(f"@%p st.shared.u32 [%t2+{sh.ids_off}], %t1;  // the body's ids table")
    if sh.down:
        ee("shl.b32 %t2, %t0, 1;")
        ee("add.u32 %t2, %t2, %sbase;")
        ee(f"@%p st.shared.b16 [%t2+{sh.dn_top}], %h;  // the down phase's routing weights")
    ee("mov.u32 %t2, %ctaid.x;")
    ee("setp.eq.u32 %q, %t2, 0;")
    ee("and.pred %q, %q, %p;  // CTA 0: top and idx for moe_down")
    ee("ld.param.u64 %o64, [top];")
    ee("cvta.to.global.u64 %o64, %o64;")
    ee("mul.wide.u32 %pt64, %t0, 2;")
    ee("add.u64 %o64, %o64, %pt64;")
    ee("@%q st.global.b16 [%o64], %h;")
    ee("mul.wide.u32 %pt64, %t0, 8;")
    ee("add.u64 %o64, %pid, %pt64;")
    ee("cvt.u64.u32 %rv, %t1;")
    ee("@%q st.global.u64 [%o64], %rv;")
    e("RT_SEL_DONE:")
    ee("bar.sync 0;  // the ids table (the shared pairs' since before the wait), before thread 0 requests any chunk")
    e("  }")


# down (netra.contracts.proj.EXPERTS_ROUTER_DOWN, promoted with issue "late" and sync "tags" after b085f0b; the other
# forms are candidates, experiments/proj/router/router_down_variant.py): when thread 0 requests the down strips
# ("select": right after the selection; "mid": at its first refill with no gate | up strip left; "late": at the start of
# the down phase), a diagnostic ("nocompute": the barrier, then nothing), and how the down phase waits for the gate | up
# rows ("barrier": a second grid barrier; "pairs": per-pair counters; "tags": the rows themselves)
_DOWN = {"issue": "late", "diag": "", "trace": False, "sync": "tags", "sdn": ""}  # the promoted build (EXPERTS_ROUTER_DOWN)
# down, sync "pairs" (a candidate): no second grid barrier. Every CTA signals each gate | up strip's pair on a counter
# of its own (cnt[pair], u32, + 1 per strip; cnt[9] + 1 for the gate logit) and the down phase's (pair, k block) tasks
# each wait for their pair's counter only (down_phase_pairs); sync "tags" (a candidate): no counters either: each CTA
# poisons the gate | up rows it will write (TAG, before the grid barrier), writes them with strong relaxed stores, and a
# task spins on its own 8 values until none is TAG (the rows are their own flags: no fence in the walk)
TAG = 0xFFFF  # a BF16 NaN the kernel never writes (cvt.rn.bf16.f32 gives 0x7FFF for NaN; invalid ids 0x7FC0)


def tags_build(sh: Shape | None) -> bool:
    """The tags build: its gate | up rows and gate logit are stored strong (st.relaxed.gpu; store_out, gate_cta)."""
    return sh is not None and sh.down and _DOWN["sync"] == "tags"


_DN_SITES = ("select", "mid", "late")  # where a CTA requests its down strips: after the selection, at its first refill
# with no gate | up strip left, at the down phase


def dn_when(sh: Shape) -> tuple[str, str]:
    """_DOWN["issue"]: one site for every CTA, or "A/B" (a candidate): CTAs whose walk is one strip shorter at site A,
    the others at B (at M = 1 CTAs 0 .. 51 walk 5 gate | up strips, the rest 4; but the first strip of CTAs 0 .. 63 is
    requested before the wait, so after the router phase both walk 4, and no split moved the step: rejected at 1632bc7)."""
    a, _, b = _DOWN["issue"].partition("/")
    assert {a, b or a} <= set(_DN_SITES), f"_DOWN['issue']: expected a site of {_DN_SITES} or 'A/B', got {_DOWN['issue']!r}"
    return a, b or a


def dn_at(sh: Shape, site: str) -> bool:
    """Whether any CTA requests its down strips at ``site``."""
    return sh.down and site in dn_when(sh)


def dn_split(sh: Shape) -> bool:
    """The two walk lengths request their down strips at different sites (%dnw: this CTA's site, _DN_SITES' index)."""
    a, b = dn_when(sh)
    return sh.down and a != b


def dn_site_reg(e: Emit, sh: Shape) -> None:
    """dn_split builds (after %s = ctaid, %nct = the walkers and %sv = the strips are set): %dnw = the site index of
    this CTA's walk length (a CTA walks one strip more when s + floor(sv / nct) nct < sv)."""
    a, b = dn_when(sh)
    e("  // down: where this CTA requests its down strips, by its walk's length")
    e("  div.u32 %dnw, %sv, %nct;")
    e("  mad.lo.u32 %dnw, %dnw, %nct, %s;")
    e("  setp.lt.u32 %p, %dnw, %sv;  // one strip more")
    e(f"  selp.u32 %dnw, {_DN_SITES.index(b)}, {_DN_SITES.index(a)}, %p;")


# router builds (a candidate): the strips after each CTA's first NS taken from a counter (bar[1]) instead of
# s + NS G, ...: a CTA on a slow SM or slow bytes takes fewer (the traced spread of the gate | up walk: 7.1-11.2k
# cycles); each strip's arithmetic is unchanged, so the outputs are the same bits
_DYN = {"on": False}


def dyn_sidx(sh: Shape) -> int:
    """_DYN: the strip index of each stage (u32 [NS]) after the router build's layout."""
    return (sh.rows_off + ROUTER_ROWS * 2 * ROUTER_K + 8 + 15) // 16 * 16
DN_STRIPS = 128  # down: CTAs 0 .. 127 own output rows 16 s .. 16 s + 15 (2048 / 16); the rest only pass the barriers
DN_SB = 8192  # a down strip: 16 rows x 512 k, packed (netra.ops.proj.pack_weight: [E, 128, 4, 2048])


def down_issue(e: Emit, sh: Shape, s: str = "%s", label: str = "DN_ISSUED") -> None:
    """down (thread 0 of CTA s < 128, right after the selection, behind the first gate | up chunks): the CTA's strip
    of the 8 chosen experts' down weights (ids table: routed pair 1 + j at M = 1) and of the shared expert's, 8 KB
    each into its own stage, with its 4 block scales, on its own mbarrier. They land while gate | up streams."""
    e("  // down: this CTA's strip of the 9 experts' down weights, requested now that the ids are known")
    e("  {")
    e("  .reg .pred %dp;")
    e("  .reg .b64 %dw, %ds, %dsw, %dss;")
    e("  setp.ne.u32 %dp, %th, 0;")
    e(f"  setp.ge.or.u32 %dp, {s}, {DN_STRIPS}, %dp;  // ({s} is ctaid here)")
    e(f"  @%dp bra {label};")
    for r, n in (("%dw", "w2"), ("%ds", "s2"), ("%dsw", "sw2"), ("%dss", "ss2")):
        e(f"  ld.param.u64 {r}, [{n}];")
        e(f"  cvta.to.global.u64 {r}, {r};")
    e(f"  shr.u32 %t3, {s}, 3;  // the strip's 128-row block")
    for j in range(TOP_K + (0 if _DOWN["sdn"] == "early" else 1)):  # (sdn early: the shared one went before the wait)
        dn_issue_one(e, sh, j, s)
    e(f"{label}:")
    e("  }")


def dn_issue_one(e: Emit, sh: Shape, j: int, s: str) -> None:
    """down_issue's copies of slot j (< 8: routed, its expert from the ids table; 8: the shared expert's) for CTA ``s``:
    its 8 KB strip and its 4 block scales on mbarrier dn_bar[j] (%dw, %ds, %dsw, %dss, %t3: down_issue's)."""
    e(f"  add.u32 %bf, %sbase, {sh.dn_bar + 8 * j};")
    e(f"  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bf], {DN_SB + 16};")
    if j < TOP_K:
        e(f"  ld.shared.u32 %t1, [%sbase+{sh.ids_off + 4 * (1 + j)}];  // routed slot {j}'s expert")
        e(f"  mad.lo.u32 %t2, %t1, {DN_STRIPS}, {s};")
        e(f"  mul.wide.u32 %pt64, %t2, {DN_SB};")
        e("  add.u64 %pa, %dw, %pt64;")
    else:
        e(f"  mul.wide.u32 %pt64, {s}, {DN_SB};  // the shared expert")
        e("  add.u64 %pa, %dsw, %pt64;")
    e(f"  add.u32 %ta, %sbase, {sh.dn_off + DN_SB * j};")
    e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%ta], [%pa], {DN_SB}, [%bf], %pol;")
    if j < TOP_K:
        e(f"  mad.lo.u32 %t2, %t1, {DN_STRIPS // 8}, %t3;")
        e("  mul.wide.u32 %pt64, %t2, 16;")
        e("  add.u64 %pa, %ds, %pt64;")
    else:
        e("  mul.wide.u32 %pt64, %t3, 16;")
        e("  add.u64 %pa, %dss, %pt64;")
    e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%ta+{sh.dn_scl - sh.dn_off - DN_SB * j + 16 * j}], [%pa], 16, [%bf];")


def dn_issue_shared_early(e: Emit, sh: Shape) -> None:
    """down, _DOWN["sdn"] == "early" (a candidate; thread 0, before griddepcontrol.wait, beside the router rows): CTA
    s < 128 requests its strip of the shared expert's down weight (8 KB; it never depends on the router), so 1 of the
    down phase's 9.4 MB streams during the router phase, when DRAM is nearly idle."""
    e("  // down, sdn early: the shared expert's down strip now (it does not depend on the router)")
    e("  {")
    e("  .reg .pred %dp;")
    e("  .reg .b64 %dw, %ds, %dsw, %dss;")
    e(f"  setp.ge.u32 %dp, %s, {DN_STRIPS};")
    e("  @%dp bra SDN_ISSUED;")
    e("  ld.param.u64 %dsw, [sw2];")
    e("  cvta.to.global.u64 %dsw, %dsw;")
    e("  ld.param.u64 %dss, [ss2];")
    e("  cvta.to.global.u64 %dss, %dss;")
    e("  shr.u32 %t3, %s, 3;  // the strip's 128-row block")
    dn_issue_one(e, sh, TOP_K, "%s")
    e("SDN_ISSUED:")
    e("  }")


def dn_stamp_all(e: Emit, k: int) -> None:
    """down, _DOWN["trace"] == "all" (a diagnostic): every CTA's thread 0 keeps %clock64 at the router phase's end
    (k = 0, in %gt0), the down phase's start (1, %gt1) and the second barrier passed (2), then stores the two
    durations as u32 to x_out (dead by then) words ctaid and 256 + ctaid (x_out's output is then wrong)."""
    if k < 2:
        e(f"  mov.u64 %gt{k}, %clock64;")
        return
    e("  {")
    e("  .reg .b64 %gt2, %gp, %go;")
    e("  .reg .b32 %gd, %gc;")
    e("  mov.u64 %gt2, %clock64;")
    e("  setp.ne.u32 %p, %th, 0;")
    e("  @%p bra GT_DONE;")
    e("  mov.u32 %gc, %ctaid.x;")
    e("  ld.param.u64 %gp, [x_out];")
    e("  cvta.to.global.u64 %gp, %gp;")
    e("  mul.wide.u32 %go, %gc, 4;")
    e("  add.u64 %gp, %gp, %go;")
    e("  sub.u64 %gt1, %gt1, %gt0;")
    e("  cvt.u32.u64 %gd, %gt1;")
    e("  st.global.u32 [%gp], %gd;")
    e("  add.u64 %gt0, %gt0, %gt1;  // the down phase's start again")
    e("  sub.u64 %gt2, %gt2, %gt0;")
    e("  cvt.u32.u64 %gd, %gt2;")
    e("  st.global.u32 [%gp+1024], %gd;")
    e("  mov.u32 %gd, %smid;")
    e("  st.global.u32 [%gp+2048], %gd;  // the SM")
    e("GT_DONE:")
    e("  }")


def dn_stamp(e: Emit, k: int) -> None:
    """down, _DOWN["trace"] (a diagnostic): %clock64 at point k into %gs{k} (every thread; kept in registers: the
    logits they go to are read by every CTA's selection until the second barrier). dn_stamp_store writes them."""
    if _DOWN["trace"]:
        e(f"  mov.u64 %gs{k}, %clock64;")


def dn_stamp_store(e: Emit) -> None:
    """down, _DOWN["trace"] (at DN_END, after the second barrier: nothing reads the logits any more): thread 0 of CTAs
    0, 64 and 127 stores %gs0..7 as u64 slots 8 ((ctaid + 1) / 64) + k of the logits buffer (the logits output is
    then wrong)."""
    if not _DOWN["trace"]:
        return
    e("  {")
    e("  .reg .pred %gq;")
    e("  .reg .b32 %gc, %gi;")
    e("  .reg .b64 %gp;")
    e("  mov.u32 %gc, %ctaid.x;")
    e("  setp.eq.u32 %gq, %gc, 0;")
    e("  setp.eq.or.u32 %gq, %gc, 64, %gq;")
    e("  setp.eq.or.u32 %gq, %gc, 127, %gq;")
    e("  setp.eq.and.u32 %gq, %th, 0, %gq;")
    e("  add.u32 %gi, %gc, 1;")
    e("  shr.u32 %gi, %gi, 6;")
    e("  mul.wide.u32 %gp, %gi, 64;")
    e("  ld.param.u64 %pa, [logits];")
    e("  cvta.to.global.u64 %pa, %pa;")
    e("  add.u64 %gp, %gp, %pa;")
    for k in range(8):
        e(f"  @%gq st.global.u64 [%gp+{8 * k}], %gs{k};")
    e("  }")


def dn_h_load(e: Emit, sh: Shape, note: str) -> None:
    """down phases: %dc = ctaid; thread r < 16 of CTA s < 128 loads h[16 s + r] into %dh (then the late / mid request
    of the CTA's down strips, per _DOWN["issue"])."""
    e("  mov.u32 %dc, %ctaid.x;")
    e(f"  // thread r < 16 of CTA s < 128: h[16 s + r] now (read and written by this thread only{note})")
    e("  setp.lt.u32 %p, %th, 16;")
    e(f"  setp.lt.and.u32 %p, %dc, {DN_STRIPS}, %p;")
    e("  mad.lo.u32 %t0, %dc, 16, %th;")
    e("  mul.wide.u32 %pt64, %t0, 2;")
    e("  ld.param.u64 %pb, [h];")
    e("  cvta.to.global.u64 %pb, %pb;")
    e("  add.u64 %pb, %pb, %pt64;")
    e("  mov.b16 %dh, 0;")
    e("  @%p ld.global.b16 %dh, [%pb];")
    if not dn_split(sh):
        if _DOWN["issue"] == "late":
            down_issue(e, sh, "%dc")
        if _DOWN["issue"] == "mid":  # a CTA that never reached a refill point (no strip): now
            e("  setp.ne.u32 %p, %dnf, 0;")
            e("  @%p bra DN_LATE_SKIP;")
            down_issue(e, sh, "%dc")
            e("DN_LATE_SKIP:")
    elif dn_at(sh, "late") or dn_at(sh, "mid"):  # this CTA's site is late, or mid and it never reached a refill point
        if dn_at(sh, "select"):
            e("  setp.eq.u32 %p, %dnw, 0;  // requested after the selection")
            e("  @%p bra DN_LATE_SKIP;")
        if dn_at(sh, "mid"):
            e("  setp.ne.u32 %p, %dnf, 0;")
            e("  @%p bra DN_LATE_SKIP;")
        down_issue(e, sh, "%dc")
        e("DN_LATE_SKIP:")


def dn_row_addr(e: Emit) -> None:
    """down phases: %pa = this lane's 4 gate values of block (slot %dj, k block %dkq) in the gate | up rows (the routed
    pairs' out, or the shared expert's sout where %dq); the up values are 1024 bytes on."""
    e("  mul.wide.u32 %pt64, %dj, 2048;  // routed pair j's gate | up row (1024 BF16)")
    e("  add.u64 %pa, %dgu, %pt64;")
    e("  selp.b64 %pa, %dsg, %pa, %dq;")
    e("  shl.b32 %t0, %dkq, 7;")
    e("  mad.lo.u32 %t0, %lane, 4, %t0;  // the lane's 4 gate values")
    e("  mul.wide.u32 %pt64, %t0, 2;")
    e("  add.u64 %pa, %pa, %pt64;")


def dn_act_block(e: Emit, sh: Shape, i: int, x0: str, x1: str, u0: str, u1: str, xm: str) -> None:
    """down phases: block %db (slot %dj, %dq: the shared expert's) from its gate words x0, x1 and up words u0, u1:
    moe_act's arithmetic into the block's B-fragment slots in the ring; ``xm`` = the inverse scale times the slot's
    weight (top[j], or bf16(sigmoid(the gate logit in %q1)), %q1 kept)."""
    silu_mul_word(e, x0, u0)
    silu_mul_word(e, x1, u1)
    act_scale_convert(e, x0, x1)
    e("  mov.u32 %t0, %db;")
    act_word(e)
    e("  shl.b32 %t0, %t0, 2;")
    e("  add.u32 %t0, %t0, %sbase;")
    e(f"  st.shared.b32 [%t0+{sh.DN_ACT}], {x0};")
    e(f"  st.shared.b32 [%t0+{sh.DN_ACT + 64}], {x1};")
    e("  // xm = the inverse scale times the slot's weight" + (" (moe_act's lane 0)" if xm == "%f2" else ""))
    e(f"  @%dq bra DN_WSH_{i};")
    e("  shl.b32 %t0, %dj, 1;")
    e("  add.u32 %t0, %t0, %sbase;")
    e(f"  ld.shared.b16 %q0, [%t0+{sh.dn_top}];")
    e("  cvt.f32.bf16 %f0, %q0;")
    e(f"  bra.uni DN_W_{i};")
    e(f"DN_WSH_{i}:")
    e("  mov.b16 %q2, %q1;")
    sigmoid_bf16(e)
    e("  mov.b16 %q1, %q2;" + ("  // (sigmoid_bf16 rounds %q1 in place)" if xm == "%f2" else ""))
    e("  mov.f32 %f0, %f1;")
    e(f"DN_W_{i}:")
    e(f"  mov.b32 {xm}, %t3;")
    e(f"  mul.f32 {xm}, {xm}, %f0;")


def dn_stamp_tasks(e: Emit, sh: Shape) -> None:
    """tags, _DOWN["trace"] == "all" (a diagnostic, after the down phase's last barrier): the CTA's latest rows-ready
    (%gmr) and down-strip-landed (%gms) cycles from the phase's start, max over threads (shfl, then the 16 warps through
    the unused xm slots), stored by thread 0 as u32 to x_out words 660 + ctaid and 800 + ctaid."""
    e("  {")
    e("  .reg .b32 %gl, %gh, %gu;")
    e("  .reg .b64 %gp, %go;")
    for r in ("%gmr", "%gms"):
        for d in (16, 8, 4, 2, 1):
            e(f"  mov.b64 {{%gl, %gh}}, {r};")
            e(f"  shfl.sync.bfly.b32 %gl, %gl, {d}, 31, 0xffffffff;")
            e(f"  shfl.sync.bfly.b32 %gh, %gh, {d}, 31, 0xffffffff;")
            e("  mov.b64 %go, {%gl, %gh};")
            e(f"  max.u64 {r}, {r}, %go;")
    e("  setp.eq.u32 %p, %lane, 0;")
    e("  mad.lo.u32 %gu, %warp, 8, %sbase;")
    e("  cvt.u32.u64 %gl, %gmr;")
    e("  cvt.u32.u64 %gh, %gms;")
    e(f"  @%p st.shared.v2.u32 [%gu+{sh.DN_XM}], {{%gl, %gh}};")
    e("  bar.sync 0;")
    e("  setp.ne.u32 %p, %th, 0;")
    e("  @%p bra GTT_DONE;")
    e("  mov.u32 %gl, 0;")
    e("  mov.u32 %gh, 0;")
    for w in range(16):
        e(f"  ld.shared.v2.u32 {{%gu, %dtv}}, [%sbase+{sh.DN_XM + 8 * w}];")
        e("  max.u32 %gl, %gl, %gu;")
        e("  max.u32 %gh, %gh, %dtv;")
    e("  ld.param.u64 %gp, [x_out];")
    e("  cvta.to.global.u64 %gp, %gp;")
    e("  mul.wide.u32 %go, %dc, 4;")
    e("  add.u64 %gp, %gp, %go;")
    e("  st.global.u32 [%gp+2640], %gl;  // word 660 + ctaid: rows ready")
    e("  st.global.u32 [%gp+3200], %gh;  // word 800 + ctaid: strips landed")
    e("GTT_DONE:")
    e("  }")


def dn_rows(e: Emit, sh: Shape) -> None:
    """down phases' end (after the barrier over every partial and xs): thread r < 16 of CTA s < 128 sums row 16 s + r
    in moedown's order, moe_out = BF16, h = bf16(h + moe_out)."""
    e("  setp.ge.u32 %p, %th, 16;")
    e("  @%p bra DN_END;")
    e("  shl.b32 %t0, %th, 2;")
    e("  add.u32 %t0, %t0, %sbase;  // row th's partials")
    moedown_order_sum(e, "%t0", sh.DN_PART, "%sbase", sh.DN_XS)
    e("  mad.lo.u32 %t0, %dc, 16, %th;  // the output row")
    e("  mul.wide.u32 %pt64, %t0, 2;")
    e("  ld.param.u64 %pa, [moe_out];")
    e("  cvta.to.global.u64 %pa, %pa;")
    e("  add.u64 %pa, %pa, %pt64;")
    e("  st.global.b16 [%pa], %q0;")
    e("  ld.param.u64 %pb, [h];")
    e("  cvta.to.global.u64 %pb, %pb;")
    e("  add.u64 %pb, %pb, %pt64;")
    e("  cvt.f32.bf16 %f1, %dh;  // h, loaded at the phase's start")
    e("  cvt.f32.bf16 %f0, %q0;")
    e("  add.rn.f32 %f0, %f1, %f0;")
    e("  cvt.rn.bf16.f32 %q0, %f0;")
    e("  st.global.b16 [%pb], %q0;")


def down_phase(e: Emit, sh: Shape) -> None:
    """down (every CTA, after its gate | up strips; the gate CTA after its logit): the second grid barrier (the
    counter's next multiple of SMS: each launch adds 2 SMS), then in CTA s < 128 moe_down's arithmetic for token 0:
    - warp w takes blocks b = w, w + 16, w + 32 < 36 of (expert slot j = b / 4, k block q = b % 4): moe_act's warp
      (bf16(bf16(silu(g)) * u) from the gate | up row, the block's amax and power-of-two scale, f16 in the B
      fragments' order into the ring; lane 0: xm = the inverse scale times the slot's weight, top[j] or
      bf16(sigmoid(gate_out)));
    - warp j < 9: its strip (landed during gate | up), per q the 8 mma steps from 0 on column 0 (the grouped down
      kernel's), the partials [j][q][row] and xs = xm x the block's weight scale;
    - thread r < 16: row r in moedown's order (warp w = 4 (j % 3) + q: fma over j = w / 4, + 3, + 6 from 0, the 12
      sums in warp order), moe_out = BF16, h = bf16(h + moe_out).
    So the outputs are bitwise moe_down's (fp8_gemv_n2048_k4608_moedown at M = 1)."""
    A, P, XS, XM = sh.DN_ACT, sh.DN_PART, sh.DN_XS, sh.DN_XM
    e("DN_PHASE:")
    dn_stamp(e, 0)
    if _DOWN["trace"] == "all":
        dn_stamp_all(e, 1)
    e("  {")
    e("  .reg .pred %dq, %dk;")
    e("  .reg .b32 %dc, %db, %dj, %dkq, %dx0_<2>, %dx1_<2>, %dx2_<2>, %du0_<2>, %du1_<2>, %du2_<2>;")
    e("  .reg .b32 %dw0_<4>, %dw1_<4>, %dw2_<4>, %dw3_<4>, %db0_<4>, %db1_<4>, %db2_<4>, %db3_<4>;")
    e("  .reg .f32 %dc0_<4>, %dc1_<4>, %dc2_<4>, %dc3_<4>;")
    e("  .reg .b16 %dh;")
    e("  .reg .f32 %dws<4>, %dxm<4>;")
    e("  .reg .b64 %drb, %dro, %drt, %drv, %dgu, %dsg, %dgl;")
    dn_h_load(e, sh, "; no other reader waits")
    e("  bar.sync 0;  // this CTA's gate | up rows (or gate logit) stored")
    e("  setp.ne.u32 %p, %th, 0;")
    e("  @%p bra DN_ARRIVED;")
    e("  ld.param.u64 %drb, [bar];")
    e("  cvta.to.global.u64 %drb, %drb;")
    e("  fence.acq_rel.gpu;")
    e("  atom.release.gpu.global.add.u64 %dro, [%drb], 1;")
    e(f"  div.u64 %drt, %dro, {SMS};")
    e("  add.u64 %drt, %drt, 1;")
    e(f"  mul.lo.u64 %drt, %drt, {SMS};  // this launch's last arrival at the second barrier")
    e("DN_SPIN:")
    e("  ld.acquire.gpu.global.u64 %drv, [%drb];")
    e("  setp.lt.u64 %p, %drv, %drt;")
    e("  @%p bra DN_SPIN;")
    e("  fence.acq_rel.gpu;")
    e("DN_ARRIVED:")
    e("  bar.sync 0;  // every CTA's gate | up rows and the gate logit visible")
    dn_stamp(e, 1)
    if _DOWN["trace"] == "all":
        dn_stamp_all(e, 2)
    e(f"  setp.ge.u32 %p, %dc, {DN_STRIPS};")
    e("  @%p bra DN_END;")
    nc = _DOWN["diag"] == "nocompute"
    if nc:
        e("  bra.uni DN_ACT_DONE;  // DIAGNOSTIC: only the strips' waits after the barrier (wrong results)")
    for r, n in (("%dgu", "out"), ("%dsg", "sout"), ("%dgl", "gate_out")):
        e(f"  ld.param.u64 {r}, [{n}];")
        e(f"  cvta.to.global.u64 {r}, {r};")
    e("  fence.proxy.async.shared::cta;  // the ring: bulk-copy writes before, generic writes from here")
    nb = 4 * (TOP_K + 1)  # 36 act blocks: warp w takes w, w + 16 and (w < 4) w + 32
    e("  // every act load first (the gate | up rows are other CTAs' outputs: one L2 round trip, not three)")
    e(f"  setp.lt.u32 %dk, %warp, {nb - 32};  // a third block")
    e("  mov.b16 %q1, 0;")
    e("  ld.global.cg.b16 %q1, [%dgl];  // the gate logit (the shared expert's weight)")
    for i in range(3):
        e(f"  add.u32 %db, %warp, {16 * i};")
        e("  shr.u32 %dj, %db, 2;  // expert slot j (8: the shared expert)")
        e("  and.b32 %dkq, %db, 3;  // k block q")
        e(f"  setp.eq.u32 %dq, %dj, {TOP_K};")
        dn_row_addr(e)
        pr = "@%dk " if i == 2 else ""
        e(f"  {pr}ld.global.cg.v2.u32 {{%dx{i}_0, %dx{i}_1}}, [%pa];  // written by other CTAs before the barrier: L2")
        e(f"  {pr}ld.global.cg.v2.u32 {{%du{i}_0, %du{i}_1}}, [%pa+1024];  // up: 512 further")
    for i in range(3):
        e(f"  // act block b = warp + {16 * i}")
        e(f"  add.u32 %db, %warp, {16 * i};")
        if i == 2:
            e("  @!%dk bra DN_ACT_DONE;")
        e("  shr.u32 %dj, %db, 2;")
        e(f"  setp.eq.u32 %dq, %dj, {TOP_K};")
        dn_act_block(e, sh, i, f"%dx{i}_0", f"%dx{i}_1", f"%du{i}_0", f"%du{i}_1", "%f2")
        e("  shl.b32 %t0, %db, 2;")
        e("  add.u32 %t0, %t0, %sbase;")
        e("  setp.eq.u32 %p, %lane, 0;")
        e(f"  @%p st.shared.f32 [%t0+{XM}], %f2;")
    e("DN_ACT_DONE:")
    e("  bar.sync 0;  // every block's fragments and xm")
    dn_stamp(e, 2)
    e(f"  setp.ge.u32 %p, %warp, {TOP_K + 1};")
    e("  @%p bra DN_MMA_DONE;")
    e("  mad.lo.u32 %bf, %warp, 8, %sbase;")
    e(f"  add.u32 %bf, %bf, {sh.dn_bar};")
    e("DN_WAIT:")
    e("  mbarrier.try_wait.parity.shared::cta.b64 %p, [%bf], 0;")
    e("  @!%p bra DN_WAIT;")
    dn_stamp(e, 3)
    if nc:
        e("  bra.uni DN_MMA_DONE;")
    e("  shl.b32 %t1, %warp, 4;")
    e("  add.u32 %t1, %t1, %sbase;")
    e(f"  ld.shared.v4.f32 {{%dws0, %dws1, %dws2, %dws3}}, [%t1+{sh.dn_scl}];  // the 4 weight-block scales")
    e(f"  ld.shared.v4.f32 {{%dxm0, %dxm1, %dxm2, %dxm3}}, [%t1+{XM}];")
    for r in range(4):
        e(f"  mul.f32 %dxm{r}, %dxm{r}, %dws{r};")
    e("  setp.eq.u32 %p, %lane, 0;")
    e(f"  @%p st.shared.v4.f32 [%t1+{XS}], {{%dxm0, %dxm1, %dxm2, %dxm3}};  // xs[j][q]")
    e("  setp.eq.u32 %dk, %g, 0;  // column 0 (token 0); the other columns are zero")
    e(f"  mad.lo.u32 %ta, %warp, {DN_SB}, %sbase;")
    e("  mad.lo.u32 %ta, %lane, 16, %ta;")
    e("  mad.lo.u32 %t2, %warp, 1024, %sbase;  // the slot's B fragments: blocks 4 j ..")
    e("  mad.lo.u32 %t2, %tig, 64, %t2;")
    e("  mad.lo.u32 %t3, %warp, 256, %sbase;  // its partials [j][q][row]")
    e("  mad.lo.u32 %t3, %g, 4, %t3;")
    e("  setp.eq.u32 %dq, %tig, 0;  // this lane's accumulator columns 0, 1: column 0 is the token")
    e("  // the 4 k blocks' mma chains interleaved (each its own accumulators, 8 steps from 0: moedown's)")
    for q in range(4):
        for i in range(4):
            e(f"  mov.f32 %dc{q}_{i}, 0f00000000;")
    for jj in range(4):
        for q in range(4):
            e(f"  ld.shared.v4.u32 {{%dw{q}_0, %dw{q}_1, %dw{q}_2, %dw{q}_3}}, [%ta+{sh.dn_off + 2048 * q + 512 * jj}];")
            for c in range(4):
                e(f"  mov.b32 %db{q}_{c}, 0;")
            e(f"  @%dk ld.shared.v4.u32 {{%db{q}_0, %db{q}_1, %db{q}_2, %db{q}_3}}, [%t2+{A + 256 * q + 16 * jj}];")
        for half in range(2):
            for q in range(4):
                a_fragments(e, f"%dw{q}_{2 * half}", f"%dw{q}_{2 * half + 1}")
                acc = ", ".join(f"%dc{q}_{i}" for i in range(4))
                e(f"  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{acc}}}, {{%a0, %a1, %a2, %a3}}, "
                  f"{{%db{q}_{2 * half}, %db{q}_{2 * half + 1}}}, {{{acc}}};  // block {q}, step {2 * jj + half}")
    for q in range(4):
        e(f"  @%dq st.shared.f32 [%t3+{P + 64 * q}], %dc{q}_0;  // row g")
        e(f"  @%dq st.shared.f32 [%t3+{P + 64 * q + 32}], %dc{q}_2;  // row g + 8")
    e("DN_MMA_DONE:")
    e("  bar.sync 0;  // every partial and xs")
    dn_stamp(e, 4)
    if nc:
        e("  bra.uni DN_END;")
    dn_rows(e, sh)
    dn_stamp(e, 5)
    e("DN_END:")
    dn_stamp_store(e)
    e("  ret;")
    e("  }")


DN_PAIRS = TOP_K + 1  # down, sync "pairs": at M = 1 the gate | up pairs (0: the shared expert's, 1 + j: routed slot j)


def dn_rdy(sh: Shape) -> int:
    """down, sync "pairs": DN_PAIRS + 1 mbarriers after the routing weights (pair p's rows stored; the gate logit)."""
    return sh.dn_top + 2 * TOP_K


def dn_smem(sh: Shape) -> int:
    """The down build's dynamic shared memory (sync "pairs": its mbarriers on top of the contract's layout)."""
    return dn_rdy(sh) + 8 * (DN_PAIRS + 1) if _DOWN["sync"] == "pairs" else sh.smem


def pair_targets(ee, e, sh: Shape) -> None:
    """down, sync "pairs" (router_phase, before this CTA arrives at the grid barrier): lane p < 10 of warp 15 reads
    cnt[p] and keeps the value this launch will bring it to (+ S strips per pair, + 1 for the gate logit). Read before
    the arrival, so no strip of this launch can have been signaled yet (every walk starts after the barrier); the
    counters only grow (u32, compared by signed difference: they may wrap)."""
    ee("// down, pairs: warp 15's lanes 0 .. 9 take their counter's target for this launch (before the barrier)")
    ee("setp.ne.u32 %p, %warp, 15;")
    ee(f"setp.ge.or.u32 %p, %lane, {DN_PAIRS + 1}, %p;")
    ee("@%p bra DN_TARGETS;")
    ee("mul.wide.u32 %dpa, %lane, 4;")
    ee("add.u64 %dpa, %pcnt, %dpa;")
    ee("ld.relaxed.gpu.global.u32 %dtg, [%dpa];")
    ee(f"setp.lt.u32 %p, %lane, {DN_PAIRS};")
    ee(f"selp.u32 %dtv, {sh.S}, 1, %p;")
    ee("add.u32 %dtg, %dtg, %dtv;  // (used here: the load completes before the CTA arrives)")
    e("DN_TARGETS:")


def tag_poison(ee, e, sh: Shape) -> None:
    """down, sync "tags" (router_phase, before this CTA arrives at the grid barrier): lane r < 16 of warp 15 stores TAG
    (strong relaxed) to row r of every gate | up strip this CTA will walk (s = ctaid, + walkers, ... < the strips; at
    M = 1 strip s's rows are sout + 32 s for the shared pair's 64 strips, out - 2 N + 32 s for the routed ones, as
    sum_warps_store writes them); the gate CTA's lane 0 to gate_out. The barrier orders these before every reader,
    and the real value (the same location, later) after them."""
    ee("// down, tags: poison the rows this CTA will write (before the barrier: every reader comes after it)")
    ee("setp.ne.u32 %p, %warp, 15;")
    ee("@%p bra DN_POISONED;")
    ee("mov.u32 %t0, %ctaid.x;")
    ee("setp.eq.u32 %p, %t0, %nct;")
    ee("@%p bra DN_POISON_GATE;")
    ee("setp.ge.u32 %p, %lane, 16;")
    ee("@%p bra DN_POISONED;")
    ee(f"mov.b16 %h, {TAG:#06x};")
    e("DN_POISON:")
    ee("setp.ge.u32 %p, %t0, %sv;")
    ee("@%p bra DN_POISONED;")
    ee("mad.lo.u32 %t1, %t0, 16, %lane;")
    ee("mul.wide.u32 %pt64, %t1, 2;")
    ee(f"setp.lt.u32 %p, %t0, {sh.S};  // the shared pair's strips (M = 1)")
    ee("selp.b64 %pa, %pso, %po, %p;")
    ee("add.u64 %pa, %pa, %pt64;")
    ee("st.relaxed.gpu.global.b16 [%pa], %h;")
    ee("add.u32 %t0, %t0, %nct;")
    ee("bra.uni DN_POISON;")
    e("DN_POISON_GATE:")
    ee("setp.ne.u32 %p, %lane, 0;")
    ee("@%p bra DN_POISONED;")
    ee(f"mov.b16 %h, {TAG:#06x};")
    ee("st.relaxed.gpu.global.b16 [%pgo], %h;")
    e("DN_POISONED:")


def pair_signal(e: Emit, label: str, last: bool = False) -> None:
    """down, sync "pairs" (after a CTA-wide bar.sync): thread 480 (warp 15, lane 0; warp 0 stores the rows) signals
    the pair of the strip stored before the barrier: fence.acq_rel.gpu (cumulative over the barrier), cnt[%dpp] + 1.
    ``last``: the walk's end. Diagnostics (_DOWN["diag"], not valid builds): "nofence" signals the walk's strips
    without the fence (only the last signal has it); "endsig" signals nothing during the walk and every strip of the
    CTA at its end (one fence; the pairs then complete with the CTAs' walks, as at a barrier)."""
    diag = _DOWN["diag"]
    if diag == "endsig" and not last:
        return
    e("  setp.ne.u32 %dpr, %th, 480;")
    e("  setp.eq.or.u32 %dpr, %dpp, 0xffffffff, %dpr;")
    e(f"  @%dpr bra {label};")
    if diag != "nofence" or last:
        e("  fence.acq_rel.gpu;  // the rows stored before the barrier, by warp 0")
    if diag == "endsig":
        e(f"  setp.eq.u32 %dpr, %dpp, {DN_PAIRS};  // the gate CTA: its logit only")
        e(f"  @%dpr bra {label}_G;")
        e("  mov.u32 %dtv, %ctaid.x;  // DIAGNOSTIC: every strip this CTA walked")
        e(f"{label}_L:")
        e(f"  shr.u32 %dpp, %dtv, {6};")
        e("  mul.wide.u32 %dpa, %dpp, 4;")
        e("  add.u64 %dpa, %pcnt, %dpa;")
        e("  red.relaxed.gpu.global.add.u32 [%dpa], 1;")
        e("  add.u32 %dtv, %dtv, %nct;")
        e("  setp.lt.u32 %dpr, %dtv, %sv;")
        e(f"  @%dpr bra {label}_L;")
        e(f"  bra.uni {label};")
        e(f"{label}_G:")
    e("  mul.wide.u32 %dpa, %dpp, 4;")
    e("  add.u64 %dpa, %pcnt, %dpa;")
    e("  red.relaxed.gpu.global.add.u32 [%dpa], 1;")
    e(f"{label}:")


def down_phase_pairs(e: Emit, sh: Shape) -> None:
    """down, sync "pairs": down_phase without the second grid barrier. After its own walk each CTA signals its last
    strip's pair (the gate CTA the gate logit) and CTAs s >= 128 exit. In CTA s < 128 warp 15 polls the 10 counters
    (lane p: ld.acquire.gpu until cnt[p] reaches its target) and arrives on pair p's mbarrier; warps 0 .. 14 take the
    36 (pair, k block) tasks t = warp, warp + 15, warp + 30 (pair t / 4: the shared expert's first, then routed slots
    0 .. 7, the order in which the walk stores them), each: wait for its pair, moe_act's arithmetic for the block
    (down_phase's, into the same B-fragment slots), xm and xs, its expert's down strip, the block's 8 mma steps from
    0, the partials [j][q][row]. Then one barrier and the rows in moedown's order, as down_phase: the same arithmetic
    per block, so the outputs are bitwise down_phase's (and the pair's).
    sync "tags": no signal and no poller; every warp takes tasks (t = warp, + 16, + 32) and each spins on its own 8
    gate | up values (ld.relaxed.gpu, strong like their stores) until none is TAG (tag_poison), the shared expert's
    tasks on the gate logit too."""
    A, P, XS = sh.DN_ACT, sh.DN_PART, sh.DN_XS
    RDY = dn_rdy(sh)
    nb = 4 * (TOP_K + 1)
    tags = _DOWN["sync"] == "tags"
    tw = 16 if tags else 15  # the task warps
    e("DN_PHASE:")
    if _DOWN["trace"] == "all":  # (the trace's "barrier2" column is then the tasks' end)
        dn_stamp_all(e, 1)
    e("  {")
    if tags and _DOWN["trace"] == "all":
        e("  .reg .b64 %gmr, %gms, %gtt;")
    e("  .reg .pred %dq, %dk, %dz;")
    e("  .reg .b32 %dc, %db, %dj, %dkq, %dx0, %dx1, %du0, %du1, %drd;")
    e("  .reg .b32 %dw<4>, %dbf<4>;")
    e("  .reg .f32 %dacc<4>, %dws, %dxm;")
    e("  .reg .b16 %dh;")
    e("  .reg .b64 %dgu, %dsg, %dgl;")
    dn_h_load(e, sh, "")
    e("  bar.sync 0;  // this CTA's last gate | up rows (or the gate logit) stored; its ring read")
    if not tags:
        pair_signal(e, "DN_SIGNALED", last=True)
    e(f"  setp.ge.u32 %p, %dc, {DN_STRIPS};")
    e("  @%p bra DN_END;")
    # the poller (pairs); with tags warp 15 takes tasks too
    if not tags:
        e("  setp.ne.u32 %p, %warp, 15;")
        e("  @%p bra DN_TASKS;")
        e("  // warp 15: lane p < 10 polls cnt[p] until it reaches this launch's target, then arrives on its mbarrier")
        e(f"  setp.ge.u32 %dz, %lane, {DN_PAIRS + 1};  // done (lanes past the counters: nothing to wait for)")
        e("  mul.wide.u32 %dpa, %lane, 4;")
        e("  add.u64 %dpa, %pcnt, %dpa;")
        e("  shl.b32 %drd, %lane, 3;")
        e("  add.u32 %drd, %drd, %sbase;")
        e(f"  add.u32 %drd, %drd, {RDY};")
        e("  mov.u32 %dj, 0;  // polls (a counter that never arrives traps instead of hanging)")
        e("DN_POLL:")
        e("  @!%dz ld.acquire.gpu.global.u32 %dtv, [%dpa];")
        e("  sub.u32 %dtv, %dtv, %dtg;")
        e("  setp.ge.and.s32 %dk, %dtv, 0, !%dz;  // reached now")
        e("  @%dk fence.acq_rel.gpu;")
        e("  @%dk mbarrier.arrive.shared::cta.b64 _, [%drd];")
        e("  or.pred %dz, %dz, %dk;")
        e("  vote.sync.all.pred %dk, %dz, 0xffffffff;")
        e("  @%dk bra DN_MMA_DONE;")
        e("  add.u32 %dj, %dj, 1;")
        e("  setp.gt.u32 %dk, %dj, 4000000;  // ~0.2 s")
        e("  @%dk trap;")
        e("  nanosleep.u32 32;")
        e("  bra.uni DN_POLL;")
    e("DN_TASKS:")
    tt = tags and _DOWN["trace"] == "all"  # each thread's latest rows-ready and strip-landed cycles from the phase's start
    if tt:
        e("  mov.u64 %gmr, 0;")
        e("  mov.u64 %gms, 0;")
    for r, n in (("%dgu", "out"), ("%dsg", "sout"), ("%dgl", "gate_out")):
        e(f"  ld.param.u64 {r}, [{n}];")
        e(f"  cvta.to.global.u64 {r}, {r};")
    e("  fence.proxy.async.shared::cta;  // the ring: bulk-copy writes before, generic writes from here")
    e("  setp.eq.u32 %dk, %g, 0;  // column 0 (token 0); the other columns are zero")
    for i in range(3):
        e(f"  // task warp + {tw * i}")
        e(f"  add.u32 %db, %warp, {tw * i};")
        if tw * i + tw - 1 >= nb:
            e(f"  setp.ge.u32 %p, %db, {nb};")
            e("  @%p bra DN_MMA_DONE;")
        e("  shr.u32 %dj, %db, 2;  // pair p")
        e("  and.b32 %dkq, %db, 3;  // k block q")
        if not tags:
            e("  shl.b32 %t0, %dj, 3;")
            e("  add.u32 %t0, %t0, %sbase;")
            e(f"DN_RW_{i}:")
            e(f"  mbarrier.try_wait.parity.shared::cta.b64 %p, [%t0+{RDY}], 0;")
            e(f"  @!%p bra DN_RW_{i};")
        e("  setp.eq.u32 %dq, %dj, 0;  // pair 0: the shared expert, slot 8")
        e("  sub.u32 %dj, %dj, 1;")
        e(f"  @%dq mov.u32 %dj, {TOP_K};  // slot j")
        e(f"  @!%dq bra DN_GL_{i};")
        e(f"DN_GW_{i}:")
        if tags:
            e("  ld.relaxed.gpu.global.b16 %q1, [%dgl];  // the gate logit (the shared expert's weight), until not TAG")
            e(f"  setp.eq.u16 %p, %q1, {TAG:#06x};")
            e(f"  @%p bra DN_GW_{i};")
        else:
            e(f"  mbarrier.try_wait.parity.shared::cta.b64 %p, [%sbase+{RDY + 8 * DN_PAIRS}], 0;")
            e(f"  @!%p bra DN_GW_{i};")
            e("  ld.global.cg.b16 %q1, [%dgl];  // the gate logit (the shared expert's weight)")
        e(f"DN_GL_{i}:")
        e("  shl.b32 %db, %dj, 2;")
        e("  add.u32 %db, %db, %dkq;  // block b = 4 j + q (down_phase's slots)")
        dn_row_addr(e)
        if tags:
            e("  mov.u32 %dtv, 0;")
            e(f"DN_TG_{i}:")
            e("  ld.relaxed.gpu.global.v2.u32 {%dx0, %dx1}, [%pa];  // other CTAs' rows, strong: until none is TAG")
            e("  ld.relaxed.gpu.global.v2.u32 {%du0, %du1}, [%pa+1024];  // up: 512 further")
            e("  not.b32 %t0, %dx0;  // a TAG half is a zero half of the complement")
            e("  not.b32 %t1, %dx1;")
            e("  min.u16x2 %t0, %t0, %t1;")
            e("  not.b32 %t1, %du0;")
            e("  min.u16x2 %t0, %t0, %t1;")
            e("  not.b32 %t1, %du1;")
            e("  min.u16x2 %t0, %t0, %t1;")
            e("  and.b32 %t1, %t0, 0xffff;")
            e("  setp.eq.u32 %p, %t1, 0;")
            e("  shr.u32 %t1, %t0, 16;")
            e("  setp.eq.or.u32 %p, %t1, 0, %p;")
            e("  vote.sync.any.pred %p, %p, 0xffffffff;")
            e(f"  @!%p bra DN_TV_{i};")
            e("  add.u32 %dtv, %dtv, 1;")
            e(f"  setp.gt.u32 %p, %dtv, {1 << 30};  // a row that never comes traps (after tens of seconds) instead of hanging")
            e("  @%p trap;")
            e("  nanosleep.u32 32;")
            e(f"  bra.uni DN_TG_{i};")
            e(f"DN_TV_{i}:")
            if tt:
                e("  mov.u64 %gtt, %clock64;")
                e("  sub.u64 %gtt, %gtt, %gt1;")
                e("  max.u64 %gmr, %gmr, %gtt;")
        else:
            e("  ld.global.cg.v2.u32 {%dx0, %dx1}, [%pa];  // other CTAs' rows: L2")
            e("  ld.global.cg.v2.u32 {%du0, %du1}, [%pa+1024];  // up: 512 further")
        dn_act_block(e, sh, i, "%dx0", "%dx1", "%du0", "%du1", "%dxm")
        e("  bar.warp.sync 0xffffffff;  // the block's fragments, stored by this warp, for its lanes")
        e("  mad.lo.u32 %bf, %dj, 8, %sbase;")
        e(f"  add.u32 %bf, %bf, {sh.dn_bar};")
        e(f"DN_SW_{i}:")
        e("  mbarrier.try_wait.parity.shared::cta.b64 %p, [%bf], 0;  // slot j's down strip")
        e(f"  @!%p bra DN_SW_{i};")
        if tt:
            e("  mov.u64 %gtt, %clock64;")
            e("  sub.u64 %gtt, %gtt, %gt1;")
            e("  max.u64 %gms, %gms, %gtt;")
        e("  shl.b32 %t1, %db, 2;")
        e("  add.u32 %t1, %t1, %sbase;")
        e(f"  ld.shared.f32 %dws, [%t1+{sh.dn_scl}];  // the weight block's scale")
        e("  mul.f32 %dxm, %dxm, %dws;")
        e("  setp.eq.u32 %p, %lane, 0;")
        e(f"  @%p st.shared.f32 [%t1+{XS}], %dxm;  // xs[j][q]")
        e(f"  mad.lo.u32 %ta, %dj, {DN_SB}, %sbase;")
        e("  mad.lo.u32 %ta, %lane, 16, %ta;")
        e("  shl.b32 %t0, %dkq, 11;")
        e("  add.u32 %ta, %ta, %t0;  // block q's tile")
        e("  shl.b32 %t2, %db, 8;")
        e("  add.u32 %t2, %t2, %sbase;")
        e("  mad.lo.u32 %t2, %tig, 64, %t2;  // the block's B fragments")
        e("  shl.b32 %t1, %db, 6;")
        e("  add.u32 %t1, %t1, %sbase;")
        e("  mad.lo.u32 %t1, %g, 4, %t1;  // its partials [j][q][row]")
        for r in range(4):
            e(f"  mov.f32 %dacc{r}, 0f00000000;")
        for jj in range(4):
            e(f"  ld.shared.v4.u32 {{%dw0, %dw1, %dw2, %dw3}}, [%ta+{sh.dn_off + 512 * jj}];")
            for c in range(4):
                e(f"  mov.b32 %dbf{c}, 0;")
            e(f"  @%dk ld.shared.v4.u32 {{%dbf0, %dbf1, %dbf2, %dbf3}}, [%t2+{A + 16 * jj}];")
            for half in range(2):
                a_fragments(e, f"%dw{2 * half}", f"%dw{2 * half + 1}")
                e("  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%dacc0, %dacc1, %dacc2, %dacc3}, {%a0, %a1, %a2, %a3}, "
                  f"{{%dbf{2 * half}, %dbf{2 * half + 1}}}, {{%dacc0, %dacc1, %dacc2, %dacc3}};  // step {2 * jj + half}")
        e("  setp.eq.u32 %p, %tig, 0;  // this lane's accumulator columns 0, 1: column 0 is the token")
        e(f"  @%p st.shared.f32 [%t1+{P}], %dacc0;  // row g")
        e(f"  @%p st.shared.f32 [%t1+{P + 32}], %dacc2;  // row g + 8")
    e("DN_MMA_DONE:")
    e("  bar.sync 0;  // every partial and xs")
    if _DOWN["trace"] == "all":
        dn_stamp_all(e, 2)
    if tags and _DOWN["trace"] == "all":
        dn_stamp_tasks(e, sh)
    dn_rows(e, sh)
    e("DN_END:")
    e("  ret;")
    e("  }")


def _body(e: Emit, sh: Shape, nts: tuple | None, sfx: str, stage_x: bool | str, x_rows: bool, skip_nt1: bool,
          packed_amax: bool | str, pre: int, xpair: bool = False, ids_early: bool = False, ids_checked: bool | str = True,
          x_direct: bool | str = False, scale_bf16x2: bool = False, red_swizzle: bool = False,
          acc_split: bool = False, p2_early: bool = False) -> None:
    """Everything after griddepcontrol.wait, to ret: the x prologue and the strip loop. ``nts``:
    the n-tiles this copy computes ((0,) for M <= 8, (0, 1) for M > 8: no predicate on the
    second n-tile), or None for one copy for every M (the second n-tile's mma predicated on
    %pm8). ``sfx`` makes its labels unique."""
    N, K, S, W, NC, SB, NS = sh.N, sh.K, sh.S, sh.W, sh.NC, sh.SB, sh.NS
    x_off, x_stride, x_bar = x_stage_layout(sh)
    tiles = (0, 1) if nts is None else nts
    assert nts is None or not skip_nt1
    assert not stage_x or nts in (None, (0, 1)), "x staged in the M > 8 copy only (stage_x_m16)"
    late = stage_x and nts is not None  # stage_x_m16: the chunks are requested before everyone waits for x
    issued = "X_ISSUED" + (sfx if late else "")
    if stage_x == "mc":
        e("  // x rows multicast: rank r copies rows r, r + 2, ... into both CTAs of the pair; each CTA's x")
        e("  // mbarrier expects all M rows. The peer's mbarrier must be initialized first: the cluster wait")
        e(f"  add.u32 %sx, %sbase, {x_off};")
        e(f"  add.u32 %xb, %sbase, {x_bar};")
        e("  barrier.cluster.wait.acquire.aligned;")
        e("  setp.ne.u32 %p, %th, 0;")
        e(f"  @%p bra X_ISSUED{sfx};")
        e(f"  mul.lo.u32 %t0, %m, {2 * K};")
        e("  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%xb], %t0;")
        e("  mov.u32 %rank, %cluster_ctarank;")
        e("  mov.u16 %cm, 3;")
        e(f"  mul.wide.u32 %pt64, %rank, {2 * K};")
        e("  add.u64 %pa, %px, %pt64;")
        e(f"  mad.lo.u32 %ta, %rank, {x_stride}, %sx;")
        e("  mov.u32 %t1, %rank;  // the row")
        for i in range(8):
            e("  setp.ge.u32 %p, %t1, %m;")
            e(f"  @%p bra X_ISSUED{sfx};")
            e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%ta], [%pa], {2 * K}, [%xb], %cm;")
            e("  add.u32 %t1, %t1, 2;")
            e(f"  add.u64 %pa, %pa, {4 * K};")
            e(f"  add.u32 %ta, %ta, {2 * x_stride};")
        e(f"X_ISSUED{sfx}:")
    elif stage_x:
        e("  // thread 0: the M rows of x by bulk copies into padded shared rows; everyone waits for them")
        e(f"  add.u32 %sx, %sbase, {x_off};")
        e(f"  add.u32 %xb, %sbase, {x_bar};")
        e("  setp.ne.u32 %p, %th, 0;")
        e(f"  @%p bra {issued};")
        e(f"  mul.lo.u32 %t0, %m, {2 * K};")
        e("  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%xb], %t0;")
        for t in range(16):
            e(f"  setp.le.u32 %p, %m, {t};")
            e(f"  @%p bra {issued};")
            e(f"  add.u64 %pa, %px, {t * 2 * K};")
            e(f"  add.u32 %ta, %sx, {t * x_stride};")
            e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%ta], [%pa], {2 * K}, [%xb];")
        e(f"{issued}:")
        if not late:
            e("X_WAIT:")
            e("  mbarrier.try_wait.parity.shared::cta.b64 %p, [%xb], 0;")
            e("  @!%p bra X_WAIT;")
    elif xpair:
        xp_off, xp_bar, _ = x_pair_layout(sh)
        e("  // x pairs: this CTA's x mbarrier expects the peer's n-tile (W x NC x 2 KB); the cluster barrier")
        e("  // (arrive now, wait before the first st.async) makes sure the peer has initialized its own")
        e("  mov.u32 %rank, %cluster_ctarank;")
        e("  xor.b32 %peer, %rank, 1;")
        e("  shl.b32 %xr8, %rank, 3;")
        e(f"  add.u32 %xpo, %sbase, {xp_off};")
        e(f"  add.u32 %xpb, %sbase, {xp_bar};")
        e("  setp.ne.u32 %p, %th, 0;")
        e(f"  @%p bra XP_INIT{sfx};")
        e("  mbarrier.init.shared::cta.b64 [%xpb], 1;")
        e(f"  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%xpb], {W * NC * 2048};")
        e("  fence.mbarrier_init.release.cluster;")
        e(f"XP_INIT{sfx}:")
        e("  barrier.cluster.arrive.relaxed.aligned;")
        e("  mapa.shared::cluster.u32 %xpb, %xpb, %peer;  // from here: the peer's x mbarrier")
    else:
        if sh.fuse in ("moe", "moedown") and not ids_early and not sh.router:
            e("  // the pairs' expert ids: thread t < P loads ids[t] (int64), stored to shared after the x loads")
            ids_load(e, sh, "ld.global.u64")
        e("  // every x load (both n-tiles; past M predicated off) before any is used; n-tile 1 without a")
        e("  // branch (a branch made ptxas spill; this runs once per CTA)")
    if xpair:
        e("  barrier.cluster.wait.aligned;  // the peer's x mbarrier is initialized")
        for h in range(NC):
            x_pair_load_push(e, sh, h)
    if _SPIN["gate"]:
        x_gate(e, sh, NS, sfx)
    if p2_early:
        e(f"  @%pp2 bra XL_DONE{sfx};  // the second pass: its x was loaded after the first pass's mma")
    for h in range(NC):
        for nt in (() if xpair else tiles):
            if late:
                pass  # after the chunks are requested and the rows have landed (below)
            elif stage_x:
                x_staged_fragments(e, h, nt, W, K, x_stride)
            elif x_rows and sh.fuse == "moedown":  # gate and up rows: the pairs', then the shared expert's
                x_rows_load_gu(e, sh, h)
            elif x_direct is True:
                x_direct_load(e, h, nt, W, K)
            elif _XP["on"]:
                x_prepped_load(e, sh, h, nt)
            elif x_rows:
                x_rows_load(e, h, nt, W, K, smem=sh.xs_off if sh.router_poll else None)
            else:
                x_fragments(e, h, nt, W, K)
    if sh.spin:
        for h in range(NC):
            for nt in tiles:
                x_rows_poll(e, h, nt, W, K, sfx)
    if _TOPE["on"]:
        moedown_weights_early(e, sh)
    if p2_early:
        e(f"XL_DONE{sfx}:")
    if ids_early and ids_checked:
        ids_check(e, sh, sfx, force=ids_checked == "force")
    if sh.fuse == "norm":
        norm_load(e, sh)
    if sh.group:
        group_build(e, sh, sfx)
        e("  setp.ge.u32 %p, %s, %sv;")
        e("  @%p ret;  // no strip for this CTA (fewer distinct experts than CTAs)")
    elif sh.fuse in ("moe", "moedown") and not ids_early and not sh.router:
        ids_store(e, sh)
    if sh.group and sh.shared:  # CTA s < S: its first strip (the shared expert's) in stage 0 since before the wait
        assert pre == 0 and NC == 1
        e("  // thread 0: the first NS chunks; a CTA s < S has its first (a shared strip) in flight since before the wait")
        e("  setp.ne.u32 %p, %th, 0;")
        e(f"  @%p bra REST_ISSUED{sfx};")
        e(f"  setp.lt.u32 %p, %s, {S};")
        e(f"  @%p bra GS_REST{sfx};")
        issue_strips(e, sh, "%s", NS // NC, "0", "GS_ALL" + sfx)
        e(f"  bra.uni REST_ISSUED{sfx};")
        e(f"GS_REST{sfx}:")
        e("  add.u32 %t2, %s, %nct;")
        issue_strips(e, sh, "%t2", NS // NC - 1, str(NC), "REST_ISSUED" + sfx)
    elif pre < NS // NC and not sh.router:  # router: issued after the router phase
        e("  // thread 0: the remaining first chunks, now that x is requested")
        e("  setp.ne.u32 %p, %th, 0;")
        e(f"  @%p bra REST_ISSUED{sfx};")
        if sh.passes > 1:
            e(f"  @%pp2 bra REST_ISSUED{sfx};  // the second pass: the strip is still in the ring")
        e(f"  mad.lo.u32 %t2, %nct, {pre}, %s;")
        issue_strips(e, sh, "%t2", NS // NC - pre, str(pre * NC), "REST_ISSUED" + sfx)
    if late:
        e(f"X_WAIT{sfx}:")
        e("  mbarrier.try_wait.parity.shared::cta.b64 %p, [%xb], 0;")
        e(f"  @!%p bra X_WAIT{sfx};")
        for h in range(NC):
            for nt in tiles:
                x_staged_fragments(e, h, nt, W, K, x_stride)
    if sh.fuse == "norm":
        norm_prologue(e, sh, tiles, sfx)
    if sh.fuse == "moedown":  # after the chunks are requested: the products wait on the gate | up loads
        for h in range(NC):
            silu_mul(e, h)
    if x_rows and x_direct is not True and not _XP["on"]:
        e("  mad.lo.u32 %xst, %warp, 2048, %sbase;  // the warp's 2 KB of the reduction buffers")
        e(f"  add.u32 %xst, %xst, {sh.red_off};")
    if skip_nt1:
        for h in range(NC):
            (x_rows_to_fragments_t if _XT["on"] else x_rows_to_fragments)(e, h, 0)
            x_convert(e, h, 0, packed_amax, scale_bf16x2)
        for h in range(NC):
            e(f"  mov.b32 %inv1_{h}, 0;")
        e("  @!%pm8 bra NT1_DONE;  // M <= 8: no second n-tile")
        for h in range(NC):
            (x_rows_to_fragments_t if _XT["on"] else x_rows_to_fragments)(e, h, 1)
            x_convert(e, h, 1, packed_amax, scale_bf16x2)
        e("NT1_DONE:")
    elif xpair:
        e(f"  add.u32 %xpb, %sbase, {x_pair_layout(sh)[1]};  // this CTA's x mbarrier: the peer's n-tile has landed")
        e(f"XP_WAIT{sfx}:")
        e("  mbarrier.try_wait.parity.shared::cta.b64 %p, [%xpb], 0;")
        e(f"  @!%p bra XP_WAIT{sfx};")
        e("  bar.warp.sync 0xffffffff;  // this warp's own stores of its region, visible to the warp")
        for h in range(NC):
            for nt in tiles:
                x_pair_fragments(e, sh, h, nt)
        for h in range(NC):
            for nt in tiles:
                x_convert(e, h, nt, packed_amax, scale_bf16x2)
    elif _XP["on"]:
        e("  // x_prepped: the fragments and inverse scales came converted")
    else:
        if x_rows and x_direct is not True:
            for h in range(NC):
                for nt in tiles:
                    (x_rows_to_fragments_v4 if x_direct == "v4" else
                     x_rows_to_fragments_t if _XT["on"] else x_rows_to_fragments)(e, h, nt)
        for h in range(NC):
            for nt in tiles:
                x_convert(e, h, nt, packed_amax, scale_bf16x2)
                if sh.fuse == "moedown":
                    moedown_mult(e, sh, h, nt)
    if x_rows and x_direct is not True and not _XP["on"]:
        e("  bar.sync 0;  // every warp is done with its x region before any strip's partials land there")
    if sh.ksplit > 1:
        e("  barrier.cluster.wait.acquire.aligned;  // the peer's slot mbarriers are initialized")
        e("  mov.u32 %it, 0;  // the strip's index in the cluster: its slot")
        e(f"  add.u32 %xb, %sbase, {sh.xbar_off};")
    late = _SL["on"] is True or (_SL["on"] == "m16" and nts != (0,))
    if late:
        e("  setp.ne.u32 %psl, %th, %th;  // no previous strip yet")
    if _HE["on"] == "split":
        h_early_split(e, sh)
    if sh.spin:
        e("  // spin: x is in; the producer's grid (and every grid before it) complete before h is read or written")
        e("  griddepcontrol.wait;")
        e("  griddepcontrol.launch_dependents;  // after the wait: one dependent grid at a time, not a cascade")
    e("  mov.u32 %buf, 0;")
    e(f"STRIP{sfx}:")
    e("  mov.u32 %st0, %stage;  // this strip's first stage")
    if _HE["on"] is True:
        h_early_load(e, sh)
    for h in range(NC):
        e(f"  // chunk {h}: wait for its bytes, take this warp's tile and scale")
        q = _LAND["q"]
        if q > 1:
            e(f"  shr.u32 %ta, %warp, {(W // q).bit_length() - 1};  // this warp's piece of the chunk")
            e("  mad.lo.u32 %ta, %ta, 8, %bars;")
            e(f"  mad.lo.u32 %bf, %stage, {8 * q}, %ta;")
        else:
            e("  mad.lo.u32 %bf, %stage, 8, %bars;")
        e(f"WAIT{h}{sfx}:")
        e("  mbarrier.try_wait.parity.shared::cta.b64 %p, [%bf], %phase;")
        e(f"  @!%p bra WAIT{h}{sfx};")
        e(f"  mad.lo.u32 %ta, %stage, {SB}, %sbase;")
        e("  mad.lo.u32 %ta, %warp, 2048, %ta;")
        e("  mad.lo.u32 %ta, %lane, 16, %ta;")
        for j in range(4):
            e(f"  ld.shared.v4.u32 {{%wa{4 * j}, %wa{4 * j + 1}, %wa{4 * j + 2}, %wa{4 * j + 3}}}, [%ta+{512 * j}];")
        e(f"  mad.lo.u32 %t0, %stage, {sh.scl_bytes}, %sbase;")
        e("  mad.lo.u32 %t0, %warp, 4, %t0;")
        e(f"  ld.shared.f32 %ws{h}, [%t0+{sh.scl_off}];  // weight-block scale (s / 8, h W + warp)")
        if late and h == 0:
            sum_prev(e, sh, red_swizzle)
        skip = sh.tokens == 32 and sh.group
        if skip and h == 0:  # the n-tiles some token of which chose this strip's expert (its token bytes, 8 per n-tile)
            grp_strip(e, sh, "%s", "%t0", "%t1", "%t2", need_ls=False)  # (%t1, %t2: scratch, loaded below)
            if sh.shared:  # distinct expert 0 is the shared one (every token < M); the routed ones' masks from 1
                e("  setp.eq.u32 %psh, %t0, 0;")
                e("  sub.u32 %t0, %t0, 1;")
            e(f"  mad.lo.u32 %t0, %t0, {sh.tokens}, %sbase;")
            for nt in tiles:  # (no predicated instruction here: ptxas then fenced every predicated mma with a WARPSYNC)
                e(f"  ld.shared.v2.u32 {{%t1, %t2}}, [%t0+{group_layout(sh)[4] + 8 * nt}];"
                  + ("  // (a shared strip reads the pos table: unused)" if sh.shared else ""))
                e("  or.b32 %t1, %t1, %t2;")
                if sh.shared:  # a shared strip: the n-tiles with a token < M
                    e("  selp.b32 %t1, 0, %t1, %psh;")
                    e(f"  setp.gt.and.u32 %p, %m, {8 * nt}, %psh;")
                    e(f"  setp.ne.or.u32 %pn{nt}, %t1, 0, %p;")
                else:
                    e(f"  setp.ne.u32 %pn{nt}, %t1, 0;")
        if _EREL["on"] and h == NC - 1:  # the stages are read: refill them before this chunk's mma, not after the sums
            e("  bar.sync 0;  // early_release: every warp's tile and scale of this strip are in registers")
            refill(e, sh, sfx, NS, NC, "EREL")
        nacc = max(8, 4 * (max(tiles) + 1))
        live = [r for r in range(nacc) if r // 4 in tiles]
        for i in range(nacc):
            e(f"  mov.f32 %c{i}, 0f00000000;")
        if acc_split:  # the odd k16 steps' own fragments: two chains of four mma, not one of eight
            for r in live:
                e(f"  mov.f32 %d{r}, 0f00000000;")
        for nt in (tiles if skip and _NTB["on"] else ()):  # nt_branch: n-tile by n-tile, the A fragments per n-tile
            e(f"  @!%pn{nt} bra.uni NTSKIP{nt}_{h}{sfx};  // no token of this strip's expert in n-tile {nt}")
            for i in range(8):
                base = (i // 2) * 4 + 2 * (i % 2)
                a_fragments(e, f"%wa{base}", f"%wa{base + 1}")
                acc = "%d" if acc_split and i % 2 else "%c"
                d = ", ".join(f"{acc}{4 * nt + c}" for c in range(4))
                e(f"  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{d}}}, {{%a0, %a1, %a2, %a3}}, "
                  f"{{%xr{nt}_{h}_{2 * i}, %xr{nt}_{h}_{2 * i + 1}}}, {{{d}}};")
            e(f"NTSKIP{nt}_{h}{sfx}:")
        for i in range(8 if not (skip and _NTB["on"]) else 0):
            j, half = i // 2, i % 2
            base = j * 4 + 2 * half
            acc = "%d" if acc_split and i % 2 else "%c"
            a_fragments(e, f"%wa{base}", f"%wa{base + 1}")
            e(("  @%pn0 " if skip else "  ") + f"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{acc}0, {acc}1, {acc}2, {acc}3}}, {{%a0, %a1, %a2, %a3}}, "
              f"{{%xr0_{h}_{2 * i}, %xr0_{h}_{2 * i + 1}}}, {{{acc}0, {acc}1, {acc}2, {acc}3}};")
            for nt in tiles[1:]:
                d = ", ".join(f"{acc}{4 * nt + c}" for c in range(4))
                e(("  @%pm8 " if nts is None else f"  @%pn{nt} " if skip else "  ") + f"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{{d}}}, "
                  f"{{%a0, %a1, %a2, %a3}}, {{%xr{nt}_{h}_{2 * i}, %xr{nt}_{h}_{2 * i + 1}}}, {{{d}}};")
        if acc_split:
            for r in live:
                e(f"  add.rn.f32 %c{r}, %c{r}, %d{r};")
        e("  // scale: weight block times the inverse x scales of tokens 2 tig, 2 tig + 1 (+ 8), from lanes")
        e("  // 8 tig and 8 tig + 4 (shuffled here, not kept: fewer live registers across the loop)")
        e("  shl.b32 %src, %tig, 3;")
        e("  add.u32 %t2, %src, 4;")
        for nt in tiles:
            e(f"  shfl.sync.idx.b32 %t0, %inv{nt}_{h}, %src, 31, 0xffffffff;")
            e(f"  shfl.sync.idx.b32 %t1, %inv{nt}_{h}, %t2, 31, 0xffffffff;")
            e(f"  mov.b32 %xs{2 * nt}, %t0;")
            e(f"  mov.b32 %xs{2 * nt + 1}, %t1;")
        for r in range(2 * len(tiles)):
            e(f"  mul.f32 %xs{r}, %xs{r}, %ws{h};")
        for r in live:
            add = "0f00000000" if h == 0 else f"%acc{r}"
            e(f"  fma.rn.f32 %acc{r}, %c{r}, %xs{(r // 4) * 2 + (r % 2)}, {add};")
        e("  add.u32 %stage, %stage, 1;  // the next stage; the phase parity flips when the ring wraps")
        e(f"  setp.eq.u32 %p, %stage, {NS};")
        e("  @%p mov.u32 %stage, 0;")
        e("  @%p xor.b32 %phase, %phase, 1;")
        if p2_early and h == NC - 1 and tiles == (0, 1):  # the M > 8 copy: the first pass when M > 16
            e("  // the second pass's x (tokens 16 .. M - 1, both n-tiles) into the fragment registers, free since the")
            e("  // mma above; its h lines asked of L2 (this CTA's 16 columns of rows 16 ..)")
            e(f"  @%pp2 bra XE_DONE{sfx};")
            e("  ld.param.u32 %t0, [M];")
            e("  setp.le.u32 %p, %t0, 16;")
            e(f"  @%p bra XE_DONE{sfx};")
            e("  sub.u32 %mx, %t0, 16;")
            e(f"  add.u64 %px, %px, {16 * 2 * K};")
            for hh in range(NC):
                for nt in tiles:
                    x_rows_load(e, hh, nt, W, K, bound="%mx")
            e("  setp.lt.u32 %p, %th, %mx;")
            e("  add.u32 %t0, %th, 16;")
            e(f"  mul.lo.u32 %t0, %t0, {N};")
            e("  mad.lo.u32 %t0, %s, 16, %t0;")
            e("  mul.wide.u32 %pt64, %t0, 2;")
            e("  add.u64 %pa, %po, %pt64;")
            e("  @%p prefetch.global.L2 [%pa];")
            e(f"XE_DONE{sfx}:")
    e("  // the warps' partials to red[buf][warp][token][row]; one barrier")
    e(f"  mad.lo.u32 %t0, %buf, {W * sh.red_bytes}, %sbase;")
    e(f"  add.u32 %t0, %t0, {sh.red_off};")
    e(f"  mad.lo.u32 %t0, %warp, {sh.red_bytes}, %t0;")
    store_partials(e, tiles, red_swizzle, pred=sh.tokens == 32 and sh.group)
    e("  bar.sync 0;")
    if _EREL["on"]:
        e("  // (early_release: the stage was refilled before the mma)")
    else:
        refill(e, sh, sfx, NS, NC)
    _body_after_refill(e, sh, sfx, tiles, W, N, NS, NC, late, red_swizzle)


def refill(e: Emit, sh: Shape, sfx: str, NS: int, NC: int, label: str = "REFILLED") -> None:
    """_body: thread 0 refills this strip's stages with strip s + (NS / NC) G. The promoted site (label REFILLED) is
    after the partials' barrier; early_release's (EREL) after the barrier that follows the tile loads, where generate
    has refused the strip counter, the mid-walk down request and the pair counters."""
    if label == "REFILLED" and _RL["on"]:
        e("  // every warp is done with this strip's stages: the last warp's lane 0 (refill_last) refills them with strip")
        e("  // s + (NS / NC) G")
    elif label == "REFILLED":
        e("  // every warp is done with this strip's stages: thread 0 refills them with strip s + (NS / NC) G")
    e(f"  setp.ne.u32 %p, %th, {32 * (sh.W - 1) if _RL['on'] and label == 'REFILLED' else 0};")
    e(f"  @%p bra {label}{sfx};")
    e("  fence.proxy.async.shared::cta;  // the generic reads of the stages before the async-proxy writes")
    if sh.router and _DYN["on"]:
        e("  cvt.u32.u64 %t2, %dyn;  // fetched one refill ago")
        e("  setp.lt.u32 %p, %t2, %sv;")
        e("  ld.param.u64 %pa, [bar];")
        e("  cvta.to.global.u64 %pa, %pa;")
        e("  @%p atom.relaxed.gpu.global.add.u64 %dyn, [%pa+8], 1;  // the next one (a CTA overshoots once)")
        e("  shl.b32 %t0, %st0, 2;")
        e("  add.u32 %t0, %t0, %sbase;")
        e(f"  st.shared.u32 [%t0+{dyn_sidx(sh)}], %t2;  // the stage's strip (>= the strips: none; the walk ends there)")
    else:
        e(f"  mad.lo.u32 %t2, %nct, {NS // NC}, %s;")
    if dn_at(sh, "mid"):  # no strip left to request: the down strips, once
        e("  setp.lt.u32 %p, %t2, %sv;")
        if dn_split(sh):
            e("  setp.ne.or.u32 %p, %dnw, 1, %p;  // (or not this CTA's site)")
        e(f"  @%p bra DN_MID_NO{sfx};")
        e("  setp.ne.u32 %p, %dnf, 0;")
        e(f"  @%p bra REFILLED{sfx};")
        e("  mov.u32 %dnf, 1;")
        e("  mov.u32 %sn, %ctaid.x;")
        down_issue(e, sh, "%sn", f"DN_ISSUED_MID{sfx}")
        e(f"  bra.uni REFILLED{sfx};")
        e(f"DN_MID_NO{sfx}:")
    issue_strips(e, sh, "%t2", 1, "%st0", label + sfx)
    if sh.down and _DOWN["sync"] == "pairs":
        pair_signal(e, f"SIGNALED{sfx}")
        e(f"  shr.u32 %dpp, %s, {sh.S.bit_length() - 1};  // this strip's pair, signaled after the next strip's barrier")


def _body_after_refill(e: Emit, sh: Shape, sfx: str, tiles: tuple, W: int, N: int, NS: int, NC: int, late: bool,
                       red_swizzle: bool) -> None:
    """_body's end: the strip's warp-order sums and stores, the next strip, and after the walk its last sums."""
    S = sh.S
    e("  // the warp-order sum, BF16 out")
    red = f"  mad.lo.u32 %t0, %buf, {W * sh.red_bytes}, %sbase;\n  add.u32 %t0, %t0, {sh.red_off};"
    if sh.ksplit > 1:
        split_keep(e, sh, red, "SUM_DONE" + sfx, red_swizzle)
    elif late:
        e("  mov.u32 %sprev, %s;  // summed at the next strip's start (sum_prev), or after the loop")
        e("  setp.eq.u32 %psl, %th, %th;")
    else:
        sum_warps_store(e, sh.threads, W, N, red, "SUM_DONE" + sfx, res=sh.fuse in ("res", "moedown"),
                        moe=sh if sh.fuse in ("moe", "moedown") else None, swizzle=red_swizzle, rb=sh.red_bytes)
        e(f"SUM_DONE{sfx}:")
    e("  xor.b32 %buf, %buf, 1;  // two buffers: the next strip's partials never overwrite ones still being summed")
    if sh.router and _DYN["on"]:
        e("  shl.b32 %t0, %stage, 2;")
        e("  add.u32 %t0, %t0, %sbase;")
        e(f"  ld.shared.u32 %s, [%t0+{dyn_sidx(sh)}];  // the next stage's strip")
    else:
        e("  add.u32 %s, %s, %nct;")
    e(f"  setp.lt.u32 %p, %s, {'%sv' if sh.fuse in ('moe', 'moedown') else S};")
    e(f"  @%p bra STRIP{sfx};")
    if late:
        sum_prev(e, sh, red_swizzle)
    if sh.ksplit > 1:  # every write into this CTA's slots has landed before it exits (it waits for them)
        split_finish(e, sh, sfx, res=sh.fuse == "res")
    e("  ret;")


def slot_mask(e: Emit, sh: Shape, shared_pred: str) -> None:
    """group builds: %src = the slot mask of token %t3 for the distinct expert whose table row %ej points at (1 for a
    shared strip, ``shared_pred``): the slots whose id is this expert, none if the token did not choose it."""
    e("  add.u32 %src, %ej, %t3;")
    if sh.shared:
        e(f"  @!{shared_pred} ld.shared.u8 %src, [%src+{group_layout(sh)[4]}];  // the slots whose id is this expert")
        e(f"  @{shared_pred} mov.u32 %src, 1;  // a shared strip: one row per token (slot 0, stride N)")
    else:
        e(f"  ld.shared.u8 %src, [%src+{group_layout(sh)[4]}];  // the slots whose id is this expert")


def main(argv=None) -> int:
    experts = (EXPERTS_GROUP, EXPERTS_GROUP32, EXPERTS_SHARED, EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32, EXPERTS_ROUTER,
               EXPERTS_ROUTER_DOWN)  # (contracts.proj.EXPERTS_SHARED_NOGATE: a candidate)
    for sh in SHAPES + DENSE32 + FUSED + FUSED32 + (NORM_BA,) + PLAIN_BA + EXPERTS + experts + MOE_DOWNS:
        (HERE / f"{sh.name}.ptx").write_text(generate(sh))
        grid = "min(P S, 132)" if sh.fuse == "moe" else sh.grid
        print(f"wrote {sh.name}.ptx ({sh.threads} threads, grid {grid}, {sh.NS} stages, {sh.smem} B dynamic smem)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
