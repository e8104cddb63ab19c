"""Contracts of the projection family: FP8 E4M3 W8A16 GEMV / skinny GEMM with 128x128 block
scales at Qwen3.6's decode and verification shapes (M = 1..16 tokens). The shapes and the
tiling are written here once; kernels/sm_90a/proj/gen_fp8_gemv.py reads them to emit the
PTX, and netra.ops.proj to pack weights and dispatch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .gdn import SPIN_CARVEOUT, TAG
from .spec import Contract, Scalar, Tensor

TOKENS = tuple(range(1, 17))
SMS = 132  # H200 multiprocessors
# GDN in_proj_b and in_proj_a: BF16 [32, 2048] each, computed together: 64 rows, BA_STRIPS strips of 16
BA_ROWS, BA_K = 32, 2048
BA_STRIPS = 2 * BA_ROWS // 16
STAGES = 3  # weight chunks in flight per CTA: 2, 3, 4 and 6 measured, 3 fastest (experiments/proj/README.md)


@dataclass(frozen=True)
class Fp8Gemv:
    """One weight shape [N, K] and the kernel's tiling of it."""

    N: int
    K: int
    use: str
    fuse: str = ""  # "": plain; "norm": the input RMSNorm as a prologue; "res": the residual add as an epilogue;
    # "gate": one more CTA computes the BF16 shared_expert_gate; "moe": routed experts (EXPERTS);
    # "moedown": a candidate (experiments/proj/moedown): the 8 routed experts' and the shared expert's
    # down as one GEMV over K = 9 x 512, weighted, added to the residual
    pairs_per_x: int = 1  # "moe": (token, expert) pairs that share one row of x (top-k for gate | up, 1 for down)
    stages: int = 0  # the ring's stages when not 0 (named _s<stages>); otherwise the rule in NS
    ksplit: int = 1  # 2: clusters of 2 CTAs split k in halves (named _ks2); rank r adds the peer's sums of rows 8 r ..
    warps: int = 0  # the warps per CTA when not 0 (named _w<warps>; a candidate: 32 at K = 4096, one k block per warp)
    ba: bool = False  # "norm", or a plain 16- or 32-token build (named _ba): BA_STRIPS more CTAs compute GDN in_proj_b |
    # in_proj_a (gen_fp8_gemv.ba_cta)
    shared: bool = False  # "moe" gate | up only (named _shared): M more pairs, the shared expert's, and its gate by one CTA
    shared_gate: bool = True  # with shared: False (named _shared_nogate): no gate CTA (the router computes the logit)
    group: bool = False  # "moe" gate | up (named _grp): each distinct expert's strips once for every token that chose
    # it (gen_fp8_gemv.group_build); bitwise the per-pair build. With shared (not router): the shared expert is the
    # launch's first distinct expert (virtual strips 0 .. S - 1, requested before the wait), its rows to sout
    router_poll: bool = False  # with router (named _poll; a candidate): no barrier: each CTA takes an epoch from the
    # counter before the wait, logits go out tagged with it, the selecting warps poll them; x from the CTA's own norm
    tokens: int = 16  # 32 (named _t32; group, or a plain K = 2048 shape): one body of 4 n-tiles, up to 32 tokens a launch
    router: bool = False  # with shared (named _router): the post-attention norm, the router and its top 8 first, every
    # CTA a share of the logits, a grid-wide barrier, then every CTA selects the same 8 (gen_fp8_gemv.router_phase)
    down: bool = False  # with router, M = 1 (named _down; EXPERTS_ROUTER_DOWN): moe_down as a third phase: each CTA
    # s < 128 requests its 16-row strip of the 9 experts' down weights, and its (expert, k block) tasks each wait for
    # their own gate | up rows, which are their own flags (gen_fp8_gemv.down_phase_pairs, sync "tags")
    passes: int = 1  # 2 (named _p2; the residual 2048 x 4096 build, FUSED32): up to 32 tokens as two passes of 16 over the
    # CTA's one strip, whose chunks stay in the ring after the first (gen_fp8_gemv.generate's PASS_END)
    spin: bool = False  # "res" (named _spin; the candidate RES_SPIN, M <= 8): x polled until not TAG instead of waiting
    # for its producer's grid, griddepcontrol.wait after the x prologue (before h is read); x_next's share filled with TAG

    @property
    def name(self) -> str:
        return (f"fp8_gemv_n{self.N}_k{self.K}" + (f"_{self.fuse}" if self.fuse else "")
                + (f"_s{self.stages}" if self.stages else "") + (f"_ks{self.ksplit}" if self.ksplit > 1 else "")
                + (f"_w{self.warps}" if self.warps else "") + ("_ba" if self.ba else "")
                + ("_shared" if self.shared else "") + ("_nogate" if self.shared and not self.shared_gate else "")
                + ("_grp" if self.group else "") + (f"_t{self.tokens}" if self.tokens != 16 else "")
                + ("_router" if self.router else "") + ("_poll" if self.router_poll else "") + ("_down" if self.down else "")
                + (f"_p{self.passes}" if self.passes > 1 else "") + ("_spin" if self.spin else ""))

    @property
    def NT(self) -> int:  # n-tiles of 8 tokens in the largest body
        return self.tokens // 8

    @property
    def max_pairs(self) -> int:
        return self.tokens * TOP_K

    @property
    def S(self) -> int:  # 16-row strips (the mma's M side)
        return self.N // 16

    @property
    def KB(self) -> int:  # 128-wide k blocks (one weight scale column each)
        return self.K // 128

    @property
    def W(self) -> int:  # warps per CTA = k blocks per chunk; warp w owns k block h W + w of chunk h
        if self.fuse == "moedown":  # 36 k blocks: 3 chunks of 3 experts x 4 blocks
            return 12
        if self.warps:
            assert self.KB // self.ksplit % self.warps == 0, (self.name, self.KB, self.warps)
            return self.warps
        return min(16, self.KB // self.ksplit)

    @property
    def NC(self) -> int:  # chunks per strip (per rank's half of k where ksplit = 2)
        return self.KB // self.ksplit // self.W

    @property
    def SB(self) -> int:  # bytes of one chunk = one stage of the ring (W packed tiles)
        return self.W * 2048

    @property
    def NS(self) -> int:  # stages, a multiple of NC
        if self.stages:
            assert self.stages % self.NC == 0, (self.name, self.stages, self.NC)
            return self.stages
        if self.fuse == "moe" and self.SB <= 8192:  # K = 512: 8 KB chunks; more of them in flight (MOE_STAGES)
            return MOE_STAGES
        if self.ksplit > 1:  # as many bytes in flight per SM as the 3 x 32 KB of the unsplit kernels
            return max(self.NC, STAGES * 32768 // self.SB)
        return max(self.NC, STAGES // self.NC * self.NC)

    @property
    def threads(self) -> int:
        return 32 * self.W

    @property
    def max_registers(self) -> int:  # one CTA per SM (maxnreg: with room beside it for gdn_decode's)
        return self.maxnreg or min(248, 65536 // self.threads // 8 * 8)

    @property
    def maxnreg(self) -> int:
        """A ``.maxnreg`` cap (0: none) on GDN's in_proj (norm_ba) and the one-pass residual out_proj / o_proj: at 104
        registers x 512 threads a CTA leaves 11.5 K of the SM's 64 K registers, enough for one gdn_decode CTA (128 x
        80), so under PDL gdn_decode's CTAs start beside the in_proj's and request their state before their wait, and
        out_proj's beside gdn_decode's and request their whole 64 KB strip (at 122 / 128 registers neither could start
        on an SM before the other kernel's CTA there had ended). No spill (ptxas -v); the same arithmetic, bitwise.
        Measured at c4d8bee (experiments/decode/step_ab_current_nreg104_nreg104_nocarve_carve_gdn_current_again_c4d8bee
        .json): batch-1 step 1.427-1.431 ms with PDL against 1.466-1.479 (late positions 1.446-1.452 against
        1.487-1.497), plainly within 13 us; the same carveout for the GDN layer's kernels added nothing. The kernels
        alone (experiments/proj/maxnreg_variant_c4d8bee.json): within 0.1 us as PDL chains at every M run, plainly
        res M = 1 and 16 0.13 / 0.19 us slower, norm_ba within 0.09."""
        return 104 if (self.fuse == "res" and self.passes == 1 and self.ksplit == 1) or (self.ba and self.fuse == "norm") \
            else 0

    @property
    def strong_out(self) -> bool:
        """GDN's in_proj (norm_ba) stores qkvz, b and a with st.relaxed.gpu (gen_fp8_gemv.generate(strong_out)): the
        producer side of netra::gdn_decode_spin, whose threads poll those values while this grid runs. The same
        values; the two store instructions differ. Measured alone in the batch-1 step (experiments/decode/step_ab.py
        inproj_strong, docs/notes/decode.md "After 78b3396"): nothing measurable."""
        return self.ba and self.fuse == "norm"

    @property
    def carveout(self) -> int:
        """GDN's in_proj (norm_ba) runs at the spin pair's shared-memory carveout (contracts.gdn.SPIN_CARVEOUT), as
        gdn_decode_b32_spin does, so two of that build's CTAs fit beside each of its CTAs; every other build at the
        driver's choice (-1)."""
        return SPIN_CARVEOUT if self.strong_out else -1

    @property
    def grid(self) -> int:  # persistent: CTA c takes strips c, c + grid, ... (ksplit: cluster c, c + walkers, ...)
        return min(self.S * self.ksplit, SMS) // self.ksplit * self.ksplit

    @property
    def walkers(self) -> int:  # what walks the strips: the CTAs, or with ksplit the clusters (ba: the last BA_STRIPS CTAs do not)
        return (self.grid - (BA_STRIPS if self.ba else 0)) // self.ksplit

    @property
    def x_first(self) -> bool:
        """At M > 8, x's loads before any weight chunk is requested (none before griddepcontrol.wait):
        where a CTA streams at most two strips of K >= 2048, the x prologue is the M = 16 critical
        path. Measured (experiments/proj/v3q_variant.json, M = 16, us, x first / chunks first):
        2048 x 4096 5.97 / 7.65, 4096 x 2048 5.41 / 5.84, 1024 x 2048 3.92 / 4.10; slower where CTAs
        stream more strips (9216 x 2048 8.66 / 8.37) and at K = 512 (2.69 / 2.55)."""
        if self.fuse in ("moe", "moedown"):  # the expert ids come from the previous kernel: nothing before the wait
            return True
        # at most 64 KB of weights per CTA (S <= 2 grid at K = 2048, as measured; the ksplit builds' halves too)
        return self.K >= 2048 and self.S * self.K <= 4096 * self.grid and self.fuse != "norm"

    @property
    def red_swizzle(self) -> bool:
        """The warps' partials stored with rows swizzled by token (gen_fp8_gemv.store_partials: 2-way bank
        conflicts instead of 4-way; bitwise the same outputs): on where 16 warps share the SM's shared
        memory, off for the experts and for 12288 x 2048's plain build. Measured twice beside the builds
        before (experiments/proj/red_swizzle_variant_8919b95.json, _8919b95_2.json, us, plain): M = 9..16
        0.2-0.5 faster at 9216, 8192 and 4096 x 2048, the norm builds 0.1-0.3 faster at M = 1 and 8; the
        experts' gate | up +0.4 at M = 1 and +3.7 at M = 8, 12288 x 2048 plain +0.22 at M = 1 (both runs,
        not explained; it would lose that shape's 1.8x cuBLAS bar); the 4- and 8-warp builds within 0.05.
        Also on for the 32-token shared grouped gate | up (the batch 17-32 MoE walk; its stores were 4.4-way
        conflicted under ncu): alone M = 32 87.6 -> 82.9 us as a PDL chain, M = 17 / 24 level
        (experiments/proj/red_swizzle_t32_variant_afe202d.json); the batch-32 step 8.068-8.078 -> 8.032-8.037 ms with
        PDL in two runs, batch 20 6.200-6.221 -> 6.194 (step_ab t32_swizzle at afe202d). The routed-only 32-token build
        (not the runner's) took +1.2 us with it, so it stays off."""
        return ((self.W == 16 and self.fuse not in ("moe", "moedown") and not (self.N == 12288 and self.fuse == ""))
                or (self.group and self.shared and self.tokens == 32))

    @property
    def pre_strips(self) -> int:
        """Strips whose chunks are requested before griddepcontrol.wait at M <= 8: none where x goes
        first and each CTA streams one strip of two or more chunks (x's prologue is then the critical
        path at every M), else the first. Measured (experiments/proj/v3r_variant.json, plain, us,
        none / one): 2048 x 4096 M = 1 4.56 / 5.45, M = 8 4.64 / 5.81; slower where CTAs stream two
        strips (4096 x 2048 M = 1 4.68 / 4.44). Where the strip is one 32 KB chunk (1024 x 2048 and
        its gate build) the first strip goes before the wait: as a PDL chain, the way the decode
        runner launches them, M = 1 2.40 / 2.09 and 2.41 / 2.18, M = 8 2.45 / 2.21; plainly within
        +0.03 at M = 1, +0.12-0.18 at M = 8 (experiments/proj/pre_strips_variant_0a74e03.json)."""
        if self.fuse in ("moe", "moedown"):
            return 0
        if self.spin:  # RES_SPIN (a candidate): its CTAs start while the producer runs; x polled after the strip's request
            return 1
        return 0 if self.x_first and self.S <= self.walkers and self.NC > 1 else 1

    @property
    def h_early(self) -> bool:
        """Thread o < 16 M loads the residual h it adds to at each strip's start, not after the warps' sums
        (gen_fp8_gemv.h_early_load; the same outputs): on for the one-pass residual build and moe_down's 6-stage build.
        Measured (experiments/proj/h_early_variant_fdd15d3.json, us plain / PDL chain, against the builds before):
        2048 x 4096 res M = 1 4.60 / 3.94 against 4.57 / 4.13, M = 16 5.88 / 5.24 against 6.03 / 5.52; moedown_s6
        M = 4 12.37 / 11.91 against 13.29 / 12.68, M = 8 20.74 / 20.27 against 20.91 / 20.48; the 3-stage moedown
        (M <= 3) 0.02-0.15 slower, so off there. On RES32 (the k split for 32 rows) since 415d92d: h of the cluster's
        two strips before the walk (gen_fp8_gemv.h_early_split), M = 17 / 32 7.56 / 8.31 us plainly against 8.18 /
        8.72, as a chain 6.66 / 7.31 against 7.02 / 7.77; the batch-32 step 8.115 ms with PDL against 8.157 / 8.131
        (experiments/proj/h_early_split_variant_415d92d.json, experiments/decode/step_ab_current_res32_he_grp_s4_
        current_again_b32_415d92d.json)."""
        return (self.fuse == "res" and self.passes == 1 and self.ksplit == 1) or (self.fuse == "moedown"
                                                                                  and self.stages == 6) \
            or (self.fuse == "res" and self.ksplit == 2 and self.tokens == 32 and self.passes == 1)

    @property
    def top_early(self) -> bool:
        """moe_down's builds: every chunk's expert weight (top, glogit) loaded with x, not after each chunk's conversion
        (gen_fp8_gemv.moedown_weights_early; the same outputs). Measured at 6753f5e, bitwise, and ready: moedown M = 1
        5.56 / 5.08 us plain / PDL chain against 5.74 / 5.33, M = 4 (_s6) 11.44 / 10.82 against 12.30 / 11.80; the
        batch-1 step 6-7 us less with PDL (experiments/proj/top_early_variant_6753f5e.json,
        experiments/decode/step_ab_current_top_early_current_again_6753f5e.json). Promoted after 37d5ae8."""
        return self.fuse == "moedown"

    @property
    def norm_w_pre(self) -> bool:
        """The router-fused build: its post-attention norm weight requested before griddepcontrol.wait, one 4 KB bulk
        copy beside the router rows on their mbarrier, into the partials' region (gen_fp8_gemv.generate(norm_w_early=
        "pre"); the same arithmetic and shared memory). Before, the weight's L2 round trip came after h's sums of
        squares, inside the router chain. Promoted at 19c7d40 and measured at b976963 (bitwise): the batch-1 step with PDL
        1.567-1.568 ms against 1.587 for the build before (late 1.587-1.588 against 1.598), plainly neutral early and
        6-10 us slower late (experiments/decode/step_ab_current_norm_w_prev_current_again_b976963.json); the kernel
        0.05-0.09 us faster at M = 1 and 4, 0.2-0.35 slower at M = 2 (experiments/proj/router/
        norm_w_pre_variant_b976963.json). Not the poll or down candidates."""
        return self.router and not self.router_poll and not self.down

    @property
    def x_tpose(self) -> bool:
        """x staged by fragment lane, nothing stored or loaded past M (gen_fp8_gemv.x_rows_to_fragments_t; the same
        fragments): on for the norm builds without b | a. Measured at e40df94 (bitwise; experiments/proj/
        x_tpose_variant_e40df94.json), us plain / PDL chain against the builds before: 9216 x 2048 norm M = 1 7.25 / 5.88
        against 7.56 / 6.23, M = 8 7.93 / 6.19 against 8.36 / 6.60, faster at every M run; the other batch-1 builds
        (moe_down, res, norm_ba, the router-fused launch) and the bars' plain shapes (x_tpose_dense_variant_e40df94.json)
        within +-0.1 or slower (norm_ba M = 4 +0.32 / +0.37, 12288 x 2048 M = 1 +0.28 / +0.16), so off there. The
        batch-1 step with every one of the six on: 5 / 2 us less plain / PDL (step_ab_current_x_tpose_current_again_e40df94.json).
        Promoted at eec1be8 after both norm builds were faster at all 16 cases of their contracts
        (x_tpose_norm_variant_eec1be8.json); their records and a decode record at eec1be8."""
        return self.fuse == "norm" and not self.ba

    @property
    def pieces(self) -> int:
        """Bulk copies (each on its own mbarrier) per weight chunk: warp w waits only for piece
        w // (W / pieces) (gen_fp8_gemv.issue_pieces), so a strip's work overlaps the rest of its chunk
        landing. 4 for the 16-warp plain, norm and residual builds (a piece's 4 scales are the bulk
        copy's 16-byte minimum) but 2048 x 4096's plain one; else 1. Measured twice, bitwise the same
        outputs (experiments/proj/land_split_4_variant_421e282.json, land_split_prev_variant_172b25b.json):
        0.1-0.3 us faster at most shapes and M, 0.06-0.43 at the norm builds as PDL chains, 18 / 8 us less
        per batch-1 decode step plain / PDL (experiments/decode/step_ab_land_split_prev_172b25b.json);
        2048 x 4096's plain build (not launched by the decode runner, which takes its residual build) was
        0.11 / 0.15 us slower plainly at M = 16 in both runs."""
        if self.W != 16 or self.ksplit != 1 or self.fuse not in ("", "norm", "res"):
            return 1
        return 1 if self.K == 4096 and self.fuse == "" else 4

    # dynamic shared memory: NS stages | their W weight scales (scl_bytes each) | 2 reduction buffers |
    # NS x pieces mbarriers (stage i, piece j at 8 (pieces i + j))
    @property
    def scl_off(self) -> int:
        return self.NS * self.SB

    @property
    def scl_bytes(self) -> int:  # one stage's slot of weight-block scales: 64 B up to 16 warps
        return max(64, 4 * self.W)

    @property
    def red_off(self) -> int:
        return self.scl_off + self.NS * self.scl_bytes

    @property
    def red_bytes(self) -> int:  # one warp's [token][row] partials
        return self.tokens * 64

    @property
    def bar_off(self) -> int:
        return self.red_off + 2 * self.W * self.red_bytes

    # fuse == "norm": then the per-thread sums of squares [16 tokens][256] and the 16 rsqrt
    @property
    def norm_off(self) -> int:
        return (self.bar_off + 8 * self.NS * self.pieces + 15) // 16 * 16

    # fuse == "moe": then the pairs' expert ids (u32; 0xffffffff for an id outside the experts)
    @property
    def ids_off(self) -> int:
        return self.norm_off

    # ksplit: then per strip of a cluster (slots) both ranks' partials [rank][token][row] (fp32) of the
    # rows this rank owns, then one mbarrier per slot
    @property
    def slots(self) -> int:
        return -(-self.S // self.walkers) if self.ksplit > 1 else 0

    @property
    def xch_off(self) -> int:
        return (self.bar_off + 8 * self.NS * self.pieces + 15) // 16 * 16

    @property
    def xch_slot(self) -> int:  # one slot: [rank][16 rows x tokens] fp32
        return 2 * 16 * self.tokens * 4

    @property
    def xbar_off(self) -> int:
        return self.xch_off + self.xch_slot * self.slots

    # router: then the CTA's ROUTER_ROWS router rows (BF16, bulk-copied before the wait) and their mbarrier
    @property
    def rows_off(self) -> int:
        return (self.ids_off + 4 * (MAX_PAIRS + max(TOKENS)) + 127) // 128 * 128

    # group: then the distinct experts' bitmap (8 words), their count U, their ids in ascending order (grp_list
    # u32), each id's index among them (NUM_EXPERTS u8), and per distinct expert the tokens' slot masks (16 bytes:
    # token t's byte, bit j: ids[t, j] is that expert)
    @property
    def grp_off(self) -> int:
        return (self.ids_off + 4 * self.max_pairs + 15) // 16 * 16

    @property
    def grp_list(self) -> int:  # entries of the distinct experts' list: with shared, the shared expert's (id E) first
        return self.max_pairs + 4 * self.shared  # (4: the pos table after it stays 16-byte aligned)

    # router_poll: then the M normalized x rows (BF16, 2 K bytes each) the body reads, and the launch's epoch
    @property
    def xs_off(self) -> int:
        return (self.rows_off + ROUTER_ROWS * 2 * ROUTER_K + 8 + 127) // 128 * 128

    # down: then the 9 experts' down strips (8 KB each: 16 rows x 512 k, packed), their 4 scales (16 B each), one
    # mbarrier each, and the 8 routing weights (BF16); after the second barrier the ring (free then) holds the down
    # phase's B fragments [j][q] (256 B), partials [j][q][row] (fp32), xs and xm [j][q] (fp32)
    @property
    def dn_off(self) -> int:
        return self.xs_off

    DN_ACT, DN_PART, DN_XS, DN_XM = 0, 9216, 11520, 11664  # in the ring, after the second barrier (36 blocks each)

    @property
    def dn_scl(self) -> int:
        return self.dn_off + (TOP_K + 1) * 16 * MOE_I

    @property
    def dn_bar(self) -> int:
        return self.dn_scl + 16 * (TOP_K + 1)

    @property
    def dn_top(self) -> int:
        return self.dn_bar + 8 * (TOP_K + 1)

    @property
    def smem(self) -> int:
        if self.down:
            return self.dn_top + 2 * TOP_K
        if self.router_poll:
            return self.xs_off + max(ROUTER_FUSED_TOKENS) * 2 * ROUTER_K + 16
        if self.group:
            return self.grp_off + 64 + 4 * self.grp_list + NUM_EXPERTS + self.tokens * self.max_pairs
        if self.router:
            return self.rows_off + ROUTER_ROWS * 2 * ROUTER_K + 8
        if self.fuse in ("moe", "moedown"):
            return self.ids_off + 4 * (MAX_PAIRS + (max(TOKENS) if self.shared else 0))
        if self.ksplit > 1:
            return self.xbar_off + 8 * self.slots
        return self.norm_off + 16 * 256 * 4 + 64 if self.fuse == "norm" else self.bar_off + 8 * self.NS * self.pieces

    @property
    def pair_shift(self) -> int:  # pair j's x row is j >> pair_shift
        assert self.pairs_per_x & (self.pairs_per_x - 1) == 0
        return self.pairs_per_x.bit_length() - 1


# 1024 x 2048 (64 strips, one per CTA) splits k over clusters of 2: 128 CTAs, each streams and converts
# half a strip; faster at every M (M = 1 2.98 -> 2.79 us, 8 3.18 -> 2.91, 16 3.88 -> 3.28: records at
# 6e78c34). The same split at 4096 x 2048 and 2048 x 4096, where a cluster walks 2-4 strips, was slower
# at M <= 8 and gained at most 0.16 us at M = 16 (experiments/proj/README.md, k split)
KSPLIT_1024 = 2


def frag_k(step: int, tig: int, kk: int, x_direct: bool = False) -> int:
    """The column, within a 128-k block, that mma step ``step`` (0..7) takes at its k index
    2 tig + kk (kk in 0, 1, 8, 9) in the packed weight layout (netra.ops.proj.pack_weight) and in
    the kernels' x fragments. The promoted layout: 16 step + 2 tig + kk. ``x_direct`` (a candidate:
    gen_fp8_gemv.generate(x_direct=True)): fragment register r = 2 step + kk // 8 of lane (g, tig)
    holds columns 32 j + 8 tig + 2 q, + 1 with j, q = divmod(r, 4), so each thread's 32 x values of
    the block are 64 contiguous bytes."""
    if not x_direct:
        return 16 * step + 2 * tig + kk
    j, q = divmod(2 * step + kk // 8, 4)
    return 32 * j + 8 * tig + 2 * q + kk % 2


SHAPES = (
    Fp8Gemv(12288, 2048, "GDN in_proj_qkv | in_proj_z, one launch"),
    Fp8Gemv(8192, 2048, "GDN in_proj_qkv"),
    Fp8Gemv(4096, 2048, "GDN in_proj_z"),
    Fp8Gemv(9216, 2048, "attention q (with its gate) | k | v, one launch"),
    Fp8Gemv(2048, 4096, "GDN out_proj, attention o_proj"),
    Fp8Gemv(1024, 2048, "shared expert gate | up", ksplit=KSPLIT_1024),
    Fp8Gemv(2048, 512, "shared expert down"),
)
BY_NK = {(s.N, s.K): s for s in SHAPES}
# the dense K = 2048 projections the decode runner launches (GDN in_proj_qkv | z, attention q | k | v) for up to 32 tokens
# in one launch (experiments/proj/dense32_variant.py): above 16 rows fp8_linear took launches of 16, each reading the
# weight again
DENSE32 = tuple(dataclasses.replace(s, tokens=32) for s in SHAPES if s.K == 2048 and s.N in (12288, 9216))
NORM_K = 2048  # the hidden size: the input RMSNorm's width
# the fused kernels: the input norm into the projections that read it (GDN in_proj_qkv | z,
# attention q | k | v), the residual add into the ones whose output goes to it (out_proj, o_proj)
FUSED = (
    Fp8Gemv(12288, 2048, "input_layernorm, then GDN in_proj_qkv | in_proj_z", "norm"),
    Fp8Gemv(9216, 2048, "input_layernorm, then attention q | k | v", "norm"),
    Fp8Gemv(2048, 4096, "GDN out_proj or attention o_proj, added to the residual", "res"),
    Fp8Gemv(1024, 2048, "shared expert gate | up, and the BF16 shared_expert_gate by one more CTA", "gate",
            ksplit=KSPLIT_1024),
)
# the residual build for up to 32 rows in one launch (GDN out_proj, attention o_proj at batch 32): two passes of 16 tokens
# over each CTA's one strip (128 strips, 128 CTAs, both chunks in the ring), so the weight is read once where two launches
# of 16 rows read it twice; its x of 32 tokens at K = 4096 would not fit the registers the 4-n-tile _t32 builds use.
# The runner's above 16 rows from 444ca0f until RES32 replaced it; kept as RES32's peer
RES_P2 = dataclasses.replace(next(s for s in FUSED if s.fuse == "res"), passes=2)
# the same rows with k split over clusters of 2 (66 clusters walk the 128 strips): each CTA loads and converts half of x,
# so 32 tokens fit the 4-n-tile body in one pass. M = 32 10.74 -> 8.81 us plainly, 10.32 -> 7.81 as a PDL chain; the
# batch-32 step 115 us less with PDL (experiments/proj/ks2_t32_variant_res_f851efc.json). Not bitwise RES_P2: the two
# halves of k meet in one more fp32 add
RES32 = dataclasses.replace(RES_P2, ksplit=2, tokens=32, passes=1)
FUSED32 = (RES_P2, RES32)
# A candidate, rejected at 75785c5 (experiments/decode/step_ab.py res_spin*; not in CONTRACTS, built by that script):
# GDN's out_proj as the consumer of a spin boundary after gdn_decode_b32_spin (its o stored strong): x is polled until
# no value is TAG (contracts.gdn.TAG), the wait for the recurrence's grid comes before h is read, x alternates between
# two buffers by GDN layer and each CTA fills its share of x_next, the one the next GDN layer's out_proj polls, with TAG.
# Batch 1 with PDL: +42 us a step with every thread polling, +4..8 gated, level with its strip landed first
RES_SPIN = dataclasses.replace(next(s for s in FUSED if s.fuse == "res"), spin=True)
# its rows: one body for M <= 8 (with the M > 8 copy as well the build spilled 12 bytes at its 104 registers)
SPIN_TOKENS = tuple(range(1, 9))
# GDN's first projections in one launch: the input norm, in_proj_qkv | in_proj_z (FP8, 128 CTAs walking the
# strips) and in_proj_b | in_proj_a (BF16, BA_STRIPS more CTAs, bitwise bf16_gemv_n64_k2048 on the same x), so
# the GDN layer loses the b | a launch (the "may be fused into a neighbouring FP8 launch")
NORM_BA = Fp8Gemv(12288, 2048, "input_layernorm, then GDN in_proj_qkv | in_proj_z, and in_proj_b | in_proj_a "
                  "(BF16) by 4 more CTAs", "norm", ba=True)
# the same above NORM_TOKENS rows, after the norm's own launch: the 32-token in_proj_qkv | z (DENSE32) with the b | a
# CTAs, which read the normed x in rounds of 16 tokens. Its 768 strips are 6 for each of 128 CTAs, where 132 CTAs walked 6
# or 5, so the b | a launch (2.6-3.4 us a GDN layer at batch 32: experiments/decode/timeline_b1_b8_b32_3f95dc0.json)
# goes without lengthening the walk
DENSE32_BA = dataclasses.replace(next(s for s in DENSE32 if s.N == 12288), ba=True,
                                 use="GDN in_proj_qkv | in_proj_z, and in_proj_b | in_proj_a (BF16) by 4 more CTAs")
# and the 16-token build with them (9..16 rows), rounds of 8 tokens (its shared memory holds no more)
DENSE16_BA = dataclasses.replace(DENSE32_BA, tokens=16)
PLAIN_BA = (DENSE16_BA, DENSE32_BA)

# The routed experts of Qwen3.6's MoE block (256 experts, top 8, width 512: design/qwen36.md),
# whose shapes are the shared expert's: the same kernels with an expert id per (token, expert)
# pair, read on the device from the router's top-k (so the step still captures into one graph).
# Strip s of the launch is strip s % S of pair s / S's expert; pair j's output row is written
# only for its own x row (j >> pair_shift): out [P, N] holds each pair's product.
TOP_K = 8
NUM_EXPERTS = 256
MAX_PAIRS = max(TOKENS) * TOP_K  # 16 tokens of 8 experts
MOE_STAGES = 8  # K = 512 (down): 8 chunks of 8 KB in flight per CTA instead of 3
EXPERTS = (
    Fp8Gemv(1024, 2048, "routed experts' gate | up: pair j = (token j / 8, its j % 8-th expert)", "moe", TOP_K),
    Fp8Gemv(2048, 512, "routed experts' down: pair j's own input row silu(gate) * up", "moe", 1),
    # (a 4-stage gate | up build, fp8_gemv_n1024_k2048_moe_s4, was promoted for M > 8 at 0fee1a5 and
    # withdrawn at 8fe3aaa: 10% faster in its kernel record at M = 16, the same as this build in
    # a 40-layer graph of real expert stacks; experiments/decode/experts_graph_c7bfb0f.json)
)
# the routed experts' gate | up once per distinct expert (Fp8Gemv.group; experiments/proj/experts_group_variant.py,
# promoted after 0a1ec6d for 5 tokens and more: netra.decode.ops.EXPERTS_GROUP_ROWS): each distinct expert's strips
# stored to every (token, slot) that chose it, bitwise the per-pair build; M = 16 70.2 -> 58.6 us, M = 1 7.0 -> 7.9
EXPERTS_GROUP = dataclasses.replace(EXPERTS[0], group=True)
# the same for up to 32 tokens in one launch (experiments/proj/experts_group32_variant.py): 4 n-tiles of x, so a batch of
# 32 reads each distinct expert once instead of once per 16-token launch (~164 against ~2 x 101 experts, uniform routing)
EXPERTS_GROUP32 = dataclasses.replace(EXPERTS_GROUP, tokens=32)
# the routed experts' gate | up and the shared expert's (as M more pairs on its own weight) in one launch, the
# shared_expert_gate by one more CTA: the MoE block's shared gate | up launch gone from between the router and the
# experts (experiments/decode/step_ab.py no_shared: that launch costs 127-130 us per batch-1 step plainly, 72-74 with PDL)
EXPERTS_SHARED = Fp8Gemv(1024, 2048, "routed and shared experts' gate | up: pairs 0 .. 8 M - 1 = (token j / 8, its j % 8-th "
                         "expert), pairs 8 M + t = (token t, the shared expert)", "moe", TOP_K, shared=True)
# the same without the gate CTA (a candidate, not registered; measured at fde3786 and rejected: experiments/proj/README.md): the router computes the gate logit (MOE_ROUTER_NORM_GATE),
# so all 132 CTAs stream the weights (the build above loses from 9 tokens: its gate CTA takes an SM)
EXPERTS_SHARED_NOGATE = dataclasses.replace(EXPERTS_SHARED, shared_gate=False)
# the routed gate | up once per distinct expert with the shared expert's gate | up as one more distinct expert, the first,
# and the shared_expert_gate by one more CTA (promoted from 5 to 16 tokens after 4f19b08: netra.decode.ops.MOE_SHARED_GROUP;
# experiments/proj/README.md, its section): the shared expert's own launch (fp8_gemv_n1024_k2048_gate_ks2) gone from the
# MoE block there, its strips requested before the wait
EXPERTS_SHARED_GROUP = dataclasses.replace(EXPERTS_SHARED, group=True,
                                           use="routed (once per distinct expert) and shared experts' gate | up")
# the same for up to 32 tokens in one launch (EXPERTS_GROUP32's 4 n-tiles; the gate CTA in rounds of 16 tokens), which
# fp8_linear_experts_shared takes above 16 rows. Its first build (0650515) was 6-11 us slower than the grouped t32 kernel
# alone: a predicated setp made ptxas fence its mma with 33 WARPSYNC. Without it (59ebcec) M = 32 89.65 us against 89.49
# for the two launches it replaces, M = 17 59.80 against 64.10; the batch-32 step 8.758 / 8.529 ms plain / PDL against
# 9.000 / 8.731 (experiments/decode/step_ab_current_shared_grp32_b32_59ebcec.json). The runner takes it at 17-32
# tokens (netra.decode.ops.MOE_SHARED_GROUP_ROWS = 32) since the decode gates ran at 32 sequences with it
EXPERTS_SHARED_GROUP32 = dataclasses.replace(EXPERTS_SHARED_GROUP, tokens=32)
# the post-attention norm, the router and its top 8 inside that launch (experiments/proj/router/router_fused_variant.py,
# promoted up to 4 tokens after e4d20da; netra.decode.ops.MOE_ROUTER_FUSED): CTA c computes the logits of experts c and c + 132 for every
# token, a grid-wide barrier (all 132 CTAs resident, one per SM), then every CTA selects the same 8 per token (the
# router's keys and order: bitwise moe_router_norm's ids) and streams its strips; the router launch is gone.
EXPERTS_ROUTER = dataclasses.replace(EXPERTS_SHARED, router=True)
# the same without the grid barrier (a candidate, not registered; measured at 12b4e2d and rejected: 0.7-2.8 us slower,
# experiments/proj/router/router_poll_variant_12b4e2d.json)
EXPERTS_ROUTER_POLL = dataclasses.replace(EXPERTS_ROUTER, router_poll=True)
# moe_down inside that launch at M = 1 (the batch-1 MoE block in one launch): promoted after b085f0b
# (experiments/proj/router/router_down_variant_b085f0b.json: bitwise the pair; the batch-1 step 1.570 / 1.468 ms plain /
# PDL against 1.652-1.656 / 1.566). No second grid barrier: each CTA poisons the gate | up rows it will write before the
# first one (gen_fp8_gemv.tag_poison), and each down task spins on its own rows (the counters form, "pairs", paid a
# gpu-scope fence per strip in the walk: 25 us a step slower, router_down_variant_0fda117.json)
EXPERTS_ROUTER_DOWN = dataclasses.replace(EXPERTS_ROUTER, down=True)
MOE_I = 512  # moe_intermediate_size: the experts' (and the shared expert's) width
# the MoE block after gate | up in one launch: silu(gate) * up, then the 8 routed experts' and
# the shared expert's down as one GEMV over K = 9 x 512, weighted, into the residual (M <= 8)
MOE_DOWN = Fp8Gemv(2048, (TOP_K + 1) * MOE_I, "the 8 routed experts' and the shared expert's down, weighted, "
                   "added to the residual", "moedown")
MOE_DOWN_TOKENS = tuple(range(1, 9))
# the same with 6 stages (two strips in flight), which moe_down takes from MOE_DOWN_WIDE_M tokens:
# M = 8 25.3 -> 22.3 us, M = 4 14.6 -> 13.8, M = 1 0.2 us slower plainly
# (experiments/proj/moedown_stages_6_variant_59299e0.json); in the decode step 0.09 ms less at
# batch 8, 0.4 at batch 32 (experiments/decode/step_ab_moedown_s6_*_76bc758.json). From 2 tokens since c109e20:
# with top_early on both builds the 6-stage one is the faster kernel at every M (records at 8cca9d2: M = 2 7.69 /
# 7.06 us plain / chain against 8.51 / 8.01), the batch-2 step 53 us less plainly, 10-21 with PDL; batch 1 was
# neutral (+3.6 us plainly, -2 with PDL), so M = 1 keeps the 3-stage build
# (experiments/decode/step_ab_current_moedown_s6_current_again_b2_c109e20.json and the batch-1 file beside it)
MOE_DOWN_S6 = dataclasses.replace(MOE_DOWN, use=MOE_DOWN.use + ", from 2 tokens (a deeper ring)", stages=6)
MOE_DOWNS = (MOE_DOWN, MOE_DOWN_S6)
MOE_DOWN_WIDE_M = 2
ROUTER_K = 2048  # the router's input: the hidden size
ROUTER_RANKS = 8  # moe_router: a cluster of 8 CTAs per token, 32 experts each
ROUTER_TOKENS = tuple(range(1, 33))  # any decode batch up to 32 (one cluster per token)
ROUTER_FUSED_TOKENS = tuple(range(1, 9))  # EXPERTS_ROUTER: 2 M warps compute the CTA's logits: 16 warps
ROUTER_ROWS = -(-NUM_EXPERTS // SMS)  # EXPERTS_ROUTER: router rows per CTA (experts c, c + SMS)

# Against float64 on the same (exactly dequantized) weights and BF16 x: the kernel's only
# roundings are fp32 accumulation (~K * 2^-24) and the BF16 output (2^-9 relative to the
# element); x goes to f16 exactly (power-of-two scaled per 128-k block).
BF16_OUT = 4.5e-3
BF16_TWICE = 9e-3  # the residual epilogue rounds twice (the product, then the sum), as the model does


def _contract(s: Fp8Gemv) -> Contract:
    if s.fuse == "moe":
        return _contract_moe(s)
    if s.fuse == "norm":
        return _contract_norm(s)
    if s.fuse == "res":
        return _contract_res_spin(s) if s.spin else _contract_res(s)
    if s.fuse == "gate":
        return _contract_gate(s)
    if s.ksplit > 1:
        return _contract_ksplit(s)
    if s.ba:
        return _contract_ba(s)
    return Contract(
        name=s.name,
        family="proj",
        summary=f"out[M, {s.N}] = x[M, {s.K}] @ dequant(W)^T, FP8 E4M3 weights with 128x128 block scales ({s.use})",
        params=(
            Tensor("x", "bf16", ("M", s.K), "in"),
            Tensor("w", "fp8e4m3", (s.S, s.KB, 2048), "in",
                   doc="packed by netra.ops.proj.pack_weight: tile (strip of 16 rows, 128-k block) = the A fragments "
                       "of 8 mma k-steps, 64 bytes per lane"),
            Tensor("scale", "f32", (s.N // 128, s.KB), "in", align=4, doc="weight_scale_inv, one per 128x128 block"),
            Tensor("out", "bf16", ("M", s.N), "out"),
            Scalar("M", "u32", value="M"),
        ),
        dims={"M": tuple(range(1, s.tokens + 1))},
        cases_override=None if s.tokens == 16 else tuple({"M": m} for m in (1, 8, 16, 17, 24, 32)),
        grid=(str(s.grid), "1", "1"),
        threads=s.threads,
        reduction_order="per strip and k block: mma.sync k16 steps in k order (fp32), times the block's weight scale "
                        "and the token's inverse x scale (K = 4096: the warp's two k blocks in k order); the warps' "
                        "partials added in warp order",
        tolerance=BF16_OUT,
        deterministic=True,
        bytes_read=f"{s.N * s.K} + {s.N // 128 * s.KB * 4} + M * {2 * s.K}",
        bytes_written=f"M * {2 * s.N}",
        max_registers=s.max_registers,
        dynamic_smem=s.smem,
        quantization="W8A16: weights FP8 E4M3, 128x128 block scales (fp32); x BF16 converted in-kernel to f16 with a "
                     "power-of-two scale per (token, 128-k block)",
        op="fp8_linear",
        pdl="w and scale (the first strip's chunks): weights are never written while kernels run",
        reference="netra.reference.proj.fp8_linear (float64 on the exactly dequantized weights)",
        peers=("cublas_bf16", "scaled_mm_1x128", "dequant_matmul"),
    )


def _contract_ksplit(s: Fp8Gemv) -> Contract:
    plain = _contract(Fp8Gemv(s.N, s.K, s.use, tokens=s.tokens))
    return dataclasses.replace(
        plain, name=s.name,
        summary=plain.summary[:-1] + f"; k split in halves over clusters of {s.ksplit} CTAs)",
        grid=(str(s.grid), "1", "1"), threads=s.threads, max_registers=s.max_registers, dynamic_smem=s.smem,
        reduction_order=f"per strip, on each rank's half of k: mma.sync k16 steps in k order (fp32), times the "
                        f"block's weight scale and the token's inverse x scale, the {s.W} warps' partials in warp "
                        "order; then rank 0's sum plus rank 1's (one fp32 add)",
        pdl=f"w and scale (the first strip's chunks{', M <= 8' if s.tokens == 16 else ''}): weights are never written "
            "while kernels run")  # (a 32-token build has one body for every M: it requests them before the wait at every M)


# The norm prologue is serial work before the first mma (all x loads, two block barriers, the
# normalization) that grows with the token rows: measured at 3c2942e (experiments/proj/README.md,
# fused kernels), 12288 x 2048 fused against rmsnorm_h2048 + the plain kernel: M = 1 8.62 / 9.44 us,
# M = 8 9.48 / 9.73, M = 16 11.50 / 10.78. So M <= 8; beyond, the op runs the two kernels.
NORM_TOKENS = tuple(range(1, 9))


def _common(s: Fp8Gemv) -> dict:
    plain = _contract(Fp8Gemv(s.N, s.K, s.use, ksplit=s.ksplit, tokens=s.tokens))
    rows = max(16 * s.passes, s.tokens)
    return dict(family="proj", dims={"M": NORM_TOKENS if s.fuse == "norm" else tuple(range(1, rows + 1))},
                grid=plain.grid,
                threads=s.threads, deterministic=True, max_registers=s.max_registers, dynamic_smem=s.smem,
                quantization=plain.quantization, pdl=plain.pdl, peers=("netra_unfused", "cublas_bf16"),
                carveout=s.carveout)


def _contract_norm(s: Fp8Gemv) -> Contract:
    assert s.K == NORM_K and s.NC == 1 and s.W == 16
    c = _contract_norm_plain(s)
    if not s.ba:
        return c
    return _with_ba(c, s, "fp8_linear_norm_ba", "", "h", "on the BF16-rounded float64 norm")


def _contract_ba(s: Fp8Gemv) -> Contract:
    """A plain build with the b | a CTAs (PLAIN_BA): the plain contract, plus w_b, w_a, out_b, out_a."""
    assert s.fuse == "" and s.tokens in (16, 32), s.name
    c = _contract(dataclasses.replace(s, ba=False))
    return _with_ba(dataclasses.replace(c, name=s.name), s, "fp8_linear_ba", f", in rounds of {s.tokens // 2} tokens", "x",
                    "on x", sanitize_cases=({"M": 1}, {"M": 17}, {"M": 32}) if s.tokens == 32 else
                    ({"M": 1}, {"M": 9}, {"M": 16}))


def _with_ba(c: Contract, s: Fp8Gemv, op: str, rounds: str, x: str, ref: str, **kw) -> Contract:
    """The FP8 build's contract c with the last BA_STRIPS CTAs computing GDN's in_proj_b | in_proj_a of its x."""
    assert s.K == BA_K and s.walkers * -(-s.S // s.walkers) == s.S, "the FP8 CTAs take the same number of strips each"
    return dataclasses.replace(
        c,
        summary=c.summary + f"; and out_b[M, {BA_ROWS}] = x @ w_b^T, out_a[M, {BA_ROWS}] = x @ w_a^T (BF16 GDN in_proj_b, "
                f"in_proj_a) by the last {BA_STRIPS} CTAs, one 16-row strip each{rounds}",
        params=c.params + (
            Tensor("w_b", "bf16", (BA_ROWS, BA_K), "in"),
            Tensor("w_a", "bf16", (BA_ROWS, BA_K), "in"),
            Tensor("out_b", "bf16", ("M", BA_ROWS), "out", align=4),
            Tensor("out_a", "bf16", ("M", BA_ROWS), "out", align=4),
        ),
        reduction_order=c.reduction_order + "; out_b, out_a: as bf16_gemv_n64_k2048 on the same x (per strip, warp w "
                        "the k16 steps 8 w .. 8 w + 7 by mma.sync bf16 in k order, the 16 warp partials added in warp "
                        "order), so bitwise its outputs",
        bytes_read=c.bytes_read + f" + {2 * 2 * BA_ROWS * BA_K}",
        bytes_written=c.bytes_written + f" + M * {2 * 2 * BA_ROWS}",
        op=op,
        pdl=c.pdl + f"; the b | a CTAs: their 16 weight rows (bulk copies) before the wait, {x} after it, "
            "launch_dependents right after it",
        reference=c.reference + f"; out_b, out_a: x @ w^T in float64 {ref}",
        peers=("netra_unfused", "cublas_bf16"),
        **kw,
    )


def _contract_norm_plain(s: Fp8Gemv) -> Contract:
    return Contract(
        name=s.name,
        summary=f"x = rmsnorm(h) (zero-centred, as rmsnorm_h2048, bitwise), then out[M, {s.N}] = x @ dequant(W)^T "
                f"({s.use}); x is also written (x_out) for the other readers of the normed input",
        params=(
            Tensor("h", "bf16", ("M", s.K), "in", doc="the residual stream"),
            Tensor("w", "fp8e4m3", (s.S, s.KB, 2048), "in", doc="packed by netra.ops.proj.pack_weight"),
            Tensor("scale", "f32", (s.N // 128, s.KB), "in", align=4),
            Tensor("out", "bf16", ("M", s.N), "out"),
            Scalar("M", "u32", value="M"),
            Tensor("norm_w", "bf16", (s.K,), "in", doc="the RMSNorm's weight (the model's, applied as 1 + w)"),
            Tensor("x_out", "bf16", ("M", s.K), "out", doc="rmsnorm(h), written by CTA 0"),
            Scalar("eps", "f32"),
        ),
        reduction_order="the norm: as rmsnorm_h2048 (8-channel sums in channel order, shfl.bfly 16, 8, 4, 2, 1 over "
                        "each 256 channels, the 8 sums in order), computed by every CTA; the projection: as "
                        f"{Fp8Gemv(s.N, s.K, s.use).name} on the BF16 x",
        tolerance=BF16_OUT,
        bytes_read=f"{s.N * s.K} + {s.N // 128 * s.KB * 4} + M * {2 * s.K} + {2 * s.K}",
        bytes_written=f"M * {2 * s.N} + M * {2 * s.K}",
        op="fp8_linear_norm",
        reference="x_out: netra.reference.norm.rmsnorm (float64); out: netra.reference.proj.fp8_linear (float64) of "
                  "the BF16-rounded float64 norm (the model hands the projection a BF16 x)",
        **_common(s),
    )


def _contract_res(s: Fp8Gemv) -> Contract:
    return Contract(
        name=s.name,
        summary=f"out[M, {s.N}] = bf16(x[M, {s.K}] @ dequant(W)^T), h = bf16(h + out) in place ({s.use})",
        params=(
            Tensor("x", "bf16", ("M", s.K), "in"),
            Tensor("w", "fp8e4m3", (s.S, s.KB, 2048), "in", doc="packed by netra.ops.proj.pack_weight"),
            Tensor("scale", "f32", (s.N // 128, s.KB), "in", align=4),
            Tensor("h", "bf16", ("M", s.N), "inout", doc="the residual stream, updated in place"),
            Scalar("M", "u32", value="M"),
            Tensor("out", "bf16", ("M", s.N), "out", doc="the product (the mixer's output, for the layer shadow)"),
        ),
        reduction_order=(f"as {Fp8Gemv(s.N, s.K, s.use).name}" if s.ksplit == 1 else
                         f"k split in halves over clusters of {s.ksplit}: "
                         + _contract_ksplit(Fp8Gemv(s.N, s.K, s.use, ksplit=s.ksplit)).reduction_order)
                        + "; the BF16 product then added to h in fp32 and rounded "
                        "(as the model's two BF16 ops)" + ("; tokens 16 .. M - 1 in a second pass over the same strip, "
                                                           "so bitwise the 16-row build on rows 0 .. 15 and 16 .. M - 1"
                                                           if s.passes > 1 else ""),
        cases_override=None if s.passes == 1 and s.tokens == 16 else tuple({"M": m} for m in (1, 8, 9, 16, 17, 24, 25, 32)),
        sanitize_cases=None if s.passes == 1 and s.tokens == 16 else ({"M": 1}, {"M": 24}, {"M": 32}),  # pass 2 by each body copy
        tolerance=BF16_TWICE,
        bytes_read=f"{s.N * s.K} + {s.N // 128 * s.KB * 4} + M * {2 * s.K} + M * {2 * s.N}",
        bytes_written=f"M * {4 * s.N}",
        op="fp8_linear_add",
        reference="out: netra.reference.proj.fp8_linear; h: h + that, float64",
        **_common(s),
    )


def _contract_res_spin(s: Fp8Gemv) -> Contract:
    """RES_SPIN (a candidate, built and launched by experiments/decode/step_ab.py res_spin_runner): the residual
    contract, x polled, and x_next (the other of the two x buffers) left TAG."""
    c = _contract_res(dataclasses.replace(s, spin=False))
    assert 2 * s.K % (16 * s.grid) == 0 and 2 * s.K // s.grid // 16 * 16 <= s.threads, "x_next: 16-byte stores, M a CTA"
    return dataclasses.replace(
        c, name=s.name,
        summary=c.summary + f"; x polled until no value is TAG ({TAG:#06x}), x_next[M, {s.K}] filled with TAG "
                "(a candidate: experiments/decode/step_ab.py res_spin*)",
        params=c.params + (Tensor("x_next", "bf16", ("M", s.K), "out",
                                  doc="the buffer the next consumer polls: every element TAG after the launch"),),
        dims={"M": SPIN_TOKENS},
        exact_outputs=("x_next",),
        bytes_written=c.bytes_written + f" + M * {2 * s.K}",
        op="fp8_linear_add_spin",
        pdl="w and scale (the whole strip) and the TAG stores into x_next before any wait; x polled (ld.relaxed.gpu, "
            "16-byte loads) until none of its values is TAG (after 16384 polls: griddepcontrol.wait, then the load); "
            "griddepcontrol.wait and launch_dependents after the x prologue, before h is read. Safe only after a "
            "producer that stores x strong into a buffer that held TAG, whose last reader completed before this grid "
            "launched: after gdn_decode_b32_spin's spin_strong_out build in step_ab's res_spin_runner, x and x_next "
            "alternating by GDN layer",
    )


def _contract_gate(s: Fp8Gemv) -> Contract:
    plain = Fp8Gemv(s.N, s.K, s.use, ksplit=s.ksplit).name
    per = s.K // s.threads
    return Contract(
        name=s.name,
        summary=f"out[M, {s.N}] = x[M, {s.K}] @ dequant(W)^T as {plain}, and gate_out[M, 1] = x @ gate_w^T (BF16 "
                f"shared_expert_gate) by one more CTA" + (" (a cluster of its own)" if s.ksplit > 1 else "") + f" ({s.use})",
        params=(
            Tensor("x", "bf16", ("M", s.K), "in"),
            Tensor("w", "fp8e4m3", (s.S, s.KB, 2048), "in", doc="packed by netra.ops.proj.pack_weight"),
            Tensor("scale", "f32", (s.N // 128, s.KB), "in", align=4),
            Tensor("out", "bf16", ("M", s.N), "out"),
            Scalar("M", "u32", value="M"),
            Tensor("gate_w", "bf16", (1, s.K), "in", doc="shared_expert_gate.weight"),
            Tensor("gate_out", "bf16", ("M", 1), "out", align=4, doc="the gate's logit (the model applies sigmoid)"),
        ),
        reduction_order=f"out: as {plain}; gate_out: per thread {per} k in order, shfl.bfly 16, 8, 4, 2, 1, the "
                        f"{s.W} warps in order",
        tolerance=BF16_OUT,
        bytes_read=f"{s.N * s.K} + {s.N // 128 * s.KB * 4} + M * {2 * s.K} + {2 * s.K}",
        bytes_written=f"M * {2 * s.N} + M * 2",
        op="fp8_linear_gate",
        reference="netra.reference.proj.fp8_linear and x @ gate_w^T, float64",
        **dict(_common(s), grid=(str(s.grid + s.ksplit), "1", "1")),
    )


def _contract_moe(s: Fp8Gemv) -> Contract:
    if s.router:
        return _contract_moe_router(s)
    c = _contract_moe_routed(s)
    if not s.shared:
        return c
    P, strips = f"{s.pairs_per_x + 1} * M", f"{(s.pairs_per_x + 1) * s.S} * M"
    g = s.shared_gate  # the gate logit by the launch's last CTA, or (not) by the router
    return dataclasses.replace(
        c,
        summary=c.summary + f"; and sout[M, {s.N}] = x @ dequant(ws)^T (the shared expert's gate | up as M more pairs)"
                + (f" and gate_out[M, 1] = x @ gate_w^T (BF16 shared_expert_gate) by the last CTA: the MoE block's gate | "
                   "up in one launch" if g else ": the MoE block's gate | up in one launch, its gate logit by the router "
                   "(moe_router_norm_gate)"),
        params=c.params + (
            Tensor("ws", "fp8e4m3", (s.S, s.KB, 2048), "in", doc="the shared expert's gate | up, packed"),
            Tensor("ss", "f32", (s.N // 128, s.KB), "in", align=4, doc="its weight_scale_inv"),
            Tensor("sout", "bf16", ("M", s.N), "out", doc="the shared expert's gate | up rows (moe_down's xs)"),
        ) + ((
            Tensor("gate_w", "bf16", (1, s.K), "in", doc="shared_expert_gate.weight"),
            Tensor("gate_out", "bf16", ("M", 1), "out", align=4, doc="the gate's logit (the model applies sigmoid)"),
        ) if g else ()),
        grid=(f"({strips} if {strips} < {SMS - 1} else {SMS - 1}) + 1" if g else f"({strips} if {strips} < {SMS} else {SMS})",
              "1", "1"),
        reduction_order=c.reduction_order + "; the shared expert's pairs the same on ws"
                        + (f"; gate_out as {Fp8Gemv(s.N, s.K, s.use, 'gate').name}'s gate CTA" if g else ""),
        bytes_read=f"{P} * {s.N * s.K + s.N // 128 * s.KB * 4} + M * {2 * s.K} + M * {8 * s.pairs_per_x}"
                   + (f" + {2 * s.K}" if g else ""),
        bytes_written=f"{P} * {2 * s.N}" + (" + M * 2" if g else ""),
        op="fp8_linear_experts_shared" if g else "fp8_linear_experts_and_shared",
        peers=("netra_unfused",),
        **({"pdl": f"CTA s < {s.S}: its first strip, the shared expert's strip s (distinct expert 0: its weight never "
                   "changes), before griddepcontrol.wait; the ids, x and every routed strip after it"} if s.group else {}),
    )


def _contract_moe_router(s: Fp8Gemv) -> Contract:
    """EXPERTS_ROUTER: the merged gate | up (_contract_moe's shared build with its gate CTA) with the post-attention
    norm and the router first: x and ids become outputs (x_out = rmsnorm(h), idx = the top 8), h, the norm and router
    weights and the router's outputs are appended. router_poll: logits is an i64 [8, 256] workspace the caller keeps
    (entry = epoch << 32 | the logit's fp32 bits), zero at allocation. down (EXPERTS_ROUTER_DOWN): moe_down's weights
    and its output appended, h updated in place, M = 1."""
    if s.down:
        return _contract_moe_router_down(s)
    if s.router_poll:
        c = _contract_moe_router(dataclasses.replace(s, router_poll=False))
        return dataclasses.replace(
            c, name=s.name, dynamic_smem=s.smem,
            params=tuple(Tensor("logits", "i64", (max(ROUTER_FUSED_TOKENS), NUM_EXPERTS), "inout", align=8,
                                doc="the router's logits as epoch << 32 | fp32 bits (CTA c writes experts c, c + "
                                    f"{SMS}; the selecting warps poll them until every epoch is this launch's); "
                                    "zero at allocation, the caller's, for this kernel alone")
                         if isinstance(p, Tensor) and p.name == "logits" else p for p in c.params),
            exact_outputs=("idx", "bar"))
    c = _contract_moe(dataclasses.replace(s, router=False))
    by = {p.name: p for p in c.params}
    K, E = s.K, NUM_EXPERTS
    return dataclasses.replace(
        c, name=s.name,
        summary=f"x_out = rmsnorm(h) (the post-attention norm), the router's logits[M, {E}] = bf16(x_out @ rw^T), "
                f"idx / top = its top {TOP_K} and their renormalized softmax (moe_router_norm's), then "
                + c.summary.split(" = ", 1)[0] + " = " + c.summary.split(" = ", 1)[1].replace("x[", "x_out[")
                .replace("ids[", "idx[").replace("x @", "x_out @")
                + f". One grid-wide barrier between the logits and the selection: the {SMS} CTAs must all be "
                  "resident (one per SM), which the op checks before it takes this kernel",
        params=(
            Tensor("x_out", "bf16", ("M", K), "out", doc="rmsnorm(h) (CTA 0 writes it; every CTA reads it after the barrier)"),
            by["w"], by["scale"], by["out"], by["M"],
            Tensor("idx", "i64", ("M", TOP_K), "out", align=8, doc="the router's top-8 expert ids, in selection order"),
            by["E"], by["ws"], by["ss"], by["sout"], by["gate_w"], by["gate_out"],
            Tensor("h", "bf16", ("M", K), "in", doc="the residual stream after the mixer's add"),
            Tensor("norm_w", "bf16", (K,), "in", doc="post_attention_layernorm.weight (applied as 1 + w)"),
            Scalar("eps", "f32"),
            Tensor("rw", "bf16", (E, K), "in", doc="mlp.gate.weight (the router)"),
            Tensor("top", "bf16", ("M", TOP_K), "out", doc="the 8 renormalized routing weights"),
            Tensor("logits", "f32", ("M", E), "out", doc="the router's BF16 logits (as fp32): CTA c writes experts c, c + "
                                                        f"{SMS}; every CTA reads them all after the barrier"),
            Tensor("bar", "i64", (1,), "inout", align=8,
                   doc=f"the grid barrier's arrival counter: each launch adds {SMS}; zero (or a multiple of {SMS}) "
                       "at allocation, and touched by nothing else"),
        ),
        dims={"M": ROUTER_FUSED_TOKENS, "E": (E,)},
        grid=(str(SMS), "1", "1"),
        dynamic_smem=s.smem,
        reduction_order="x_out: rmsnorm_h2048's order (moe_router_norm's prologue, every logit warp on its own copy of "
                        "the row); logits: moe_router_norm's per-expert order (lane l's 64 fma in k order, shfl.bfly "
                        "16, 8, 4, 2, 1, BF16); the selection and weights as moe_router_norm's (u32 keys and redux); "
                        "then " + c.reduction_order,
        exact_outputs=("idx", "logits", "bar"),
        bytes_read=c.bytes_read + f" + M * {2 * K} + {2 * E * K} + {2 * K} + {SMS} * M * {4 * E}",
        bytes_written=c.bytes_written + f" + M * {2 * K + TOP_K * (2 + 8) + 4 * E} + 8",
        op="fp8_linear_experts_router",
        pdl="the CTA's router rows (one bulk copy each) before griddepcontrol.wait: weights are never written while "
            "kernels run; h after it, launch_dependents right after it (every CTA is resident from then on)",
        reference="x_out: netra.reference.norm.rmsnorm (float64); logits, idx, top: netra.reference.proj.router_logits "
                  "and router_topk on the kernel's x_out (exact: the kernel's fp32 order); out, sout, gate_out: as "
                  f"{EXPERTS_SHARED.name}'s on the kernel's x_out and the reference's ids",
        peers=("netra_unfused",),
        sanitize_cases=({"M": 1, "E": E}, {"M": 8, "E": E}),
        # the driver refuses a grid that cannot be resident at once (a clear LaunchError, not a hang when another
        # context or stream holds SMs); measured at bdae2df (experiments/proj/router/router_coop_variant_bdae2df.json,
        # experiments/decode/step_ab_router_coop_bdae2df.json): bitwise, with PDL in captured graphs too; the kernel
        # within 0.06-0.14 us plainly and 0.2-0.5 us as a PDL chain; the batch-1 step the same plainly, 15-18 us slower
        # with PDL
        cooperative=True,
    )


def _contract_moe_router_down(s: Fp8Gemv) -> Contract:
    """EXPERTS_ROUTER_DOWN: EXPERTS_ROUTER's contract at M = 1 with moe_down (MOE_DOWN's arithmetic, bitwise) as a
    third phase: its weights and output appended, h the residual updated in place (h += moe_out)."""
    c = _contract_moe_router(dataclasses.replace(s, down=False))
    d = _contract_moe_down(MOE_DOWN)
    by = {p.name: p for p in d.params}
    I = MOE_I
    return dataclasses.replace(
        c, name=s.name,
        summary=c.summary + f"; then, without a second barrier, moe_down on those rows: moe_out = {MOE_DOWN.name}'s out "
                            "and h = bf16(h + moe_out) in place. Each CTA poisons the gate | up rows it will write before "
                            "the barrier (0xFFFF, a NaN no step writes) and the down phase's tasks spin on their own rows "
                            "(strong stores and loads) until none is the poison: the batch-1 MoE block in one launch",
        params=tuple(dataclasses.replace(p, role="inout", doc="the residual stream after the mixer's add: the norm's "
                                         "input, then h += moe_out in place") if p.name == "h" else p for p in c.params) + (
            dataclasses.replace(by["w"], name="w2"), dataclasses.replace(by["scale"], name="s2"),
            dataclasses.replace(by["ws"], name="sw2"), dataclasses.replace(by["ss"], name="ss2"),
            Tensor("moe_out", "bf16", ("M", MOE_DOWN.N), "out", doc="the MoE block's output (before the residual add)"),
        ),
        dims={"M": (1,), "E": (NUM_EXPERTS,)},
        dynamic_smem=s.smem,
        reduction_order=c.reduction_order + f"; moe_out and h: as {MOE_DOWN.name} at M = 1 (" + d.reduction_order + ")",
        tolerance=max(c.tolerance, d.tolerance),
        bytes_read=c.bytes_read + f" + {(TOP_K + 1) * (MOE_DOWN.N * I + MOE_DOWN.N // 128 * I // 128 * 4)} + M * "
                                  f"{2 * MOE_DOWN.N}",
        bytes_written=c.bytes_written + f" + M * {4 * MOE_DOWN.N}",
        op="fp8_linear_experts_router_down",
        pdl=c.pdl,
        reference=c.reference + f"; moe_out, h: {MOE_DOWN.name}'s reference (netra.reference.proj.moe_down) on the "
                                "kernel's gate | up rows and the reference's ids, added to h in float64",
        peers=("netra_pair",),
        sanitize_cases=({"M": 1, "E": NUM_EXPERTS},),
    )


def _contract_moe_routed(s: Fp8Gemv) -> Contract:
    plain = "the plain kernel's unsplit build"
    k, S = s.pairs_per_x, s.S
    P = f"{k} * M" if k > 1 else "M"
    ids_shape = ("M", k) if k > 1 else ("M",)
    strips = f"{k * S} * M"
    return Contract(
        name=s.name,
        family="proj",
        summary=f"out[j, {s.N}] = x[j / {k}] @ dequant(W[ids[j]])^T for the P = {P} (token, expert) pairs j ({s.use})"
        if k > 1 else f"out[j, {s.N}] = x[j] @ dequant(W[ids[j]])^T for the M (token, expert) pairs j ({s.use})",
        params=(
            Tensor("x", "bf16", ("M", s.K), "in", doc="one row per token" if k > 1 else "one row per pair"),
            Tensor("w", "fp8e4m3", ("E", S, s.KB, 2048), "in",
                   doc="every expert's weight packed by netra.ops.proj.pack_weight, stacked"),
            Tensor("scale", "f32", ("E", s.N // 128, s.KB), "in", align=4, doc="weight_scale_inv per expert"),
            Tensor("out", "bf16", (("M", k, s.N) if k > 1 else ("M", s.N)), "out",
                   doc="pair j's product (a NaN row where ids[j] is not an expert)"),
            Scalar("M", "u32", value="M"),
            Tensor("ids", "i64", ids_shape, "in", align=8,
                   doc="the expert of each pair (the router's top-k indices, read on the device)"),
            Scalar("E", "u32", value="E"),
        ),
        dims={"M": tuple(range(1, s.tokens + 1)), "E": (NUM_EXPERTS,)},
        grid=(f"({strips} if {strips} < {SMS} else {SMS})", "1", "1"),
        threads=s.threads,
        reduction_order=f"per pair, as {plain} (the same tiles and order on the chosen expert's weight)"
                        + ("; each distinct expert's strips computed once and stored to every pair that chose it "
                           "(bitwise the per-pair build); bytes_read counts every pair: an upper bound" if s.group else ""),
        tolerance=BF16_OUT,
        deterministic=True,
        bytes_read=f"{P} * {s.N * s.K + s.N // 128 * s.KB * 4} + M * {2 * s.K} + {P} * 8",
        bytes_written=f"{P} * {2 * s.N}",
        max_registers=s.max_registers,
        dynamic_smem=s.smem,
        quantization=_contract(Fp8Gemv(s.N, s.K, s.use)).quantization,
        op="fp8_linear_experts",
        pdl="nothing: the expert ids are the previous kernel's output, so every chunk is requested after the wait",
        reference="netra.reference.proj.fp8_linear per pair on its expert's weight, float64",
        peers=("framework_gather_dequant_bmm", "cublas_bf16_bmm"),
        # both bodies (M <= 8, M > 8) with few strips: racecheck at M = 16 (up to 8192 strips) takes minutes
        sanitize_cases=({"M": 1, "E": NUM_EXPERTS}, {"M": 9 if s.tokens == 16 else 17, "E": NUM_EXPERTS}),
        cases_override=None if s.tokens == 16 else tuple({"M": m, "E": NUM_EXPERTS} for m in (1, 8, 16, 17, 24, 32)),
    )


# GDN in_proj_b and in_proj_a: BF16 [BA_ROWS, BA_K] each (above), computed together (64 rows, one launch)
BA_RANKS, BA_WARPS = 4, 4  # a cluster of 4 CTAs per 16-row strip splits k; 4 warps per CTA
BA_ROWB = 2 * BA_K // BA_RANKS + 16  # a weight or x row of a rank's k range in shared memory, padded
# up to 32 rows in one launch since 9ca73b3 (the runner's batch-32 step launched it on two 16-row chunks)
BA_TOKENS = tuple(range(1, 33))
# 16 weight rows, 32 x rows, 16 partial slots of [16 registers][32 lanes] fp32, 2 mbarriers
BA_SMEM = 16 * BA_ROWB + max(BA_TOKENS) * BA_ROWB + BA_RANKS * BA_WARPS * max(BA_TOKENS) // 2 * 128 + 16

BF16_GEMV_N64_K2048 = Contract(
    name="bf16_gemv_n64_k2048",
    family="proj",
    summary="GDN in_proj_b and in_proj_a in one launch: out_b[M, 32] = x @ w_b^T, out_a[M, 32] = x @ w_a^T, BF16",
    params=(
        Tensor("x", "bf16", ("M", BA_K), "in"),
        Tensor("w_b", "bf16", (BA_ROWS, BA_K), "in"),
        Tensor("w_a", "bf16", (BA_ROWS, BA_K), "in"),
        Tensor("out_b", "bf16", ("M", BA_ROWS), "out", align=4),
        Tensor("out_a", "bf16", ("M", BA_ROWS), "out", align=4),
        Scalar("M", "u32", value="M"),
    ),
    dims={"M": BA_TOKENS},
    cases_override=tuple({"M": m} for m in TOKENS + (17, 24, 32)),
    grid=(str(2 * BA_ROWS // 16 * BA_RANKS), "1", "1"),
    threads=32 * BA_WARPS,
    reduction_order="per 16-row strip, clusters of 4 CTAs (k split in 4): per warp, mma.sync m16n8k16 (bf16 -> fp32) "
                    "over its 8 k16 steps in k order; the 16 warp partials of the cluster added in (rank, warp) order "
                    "(k order) by rank 0",
    tolerance=BF16_OUT,
    deterministic=True,
    bytes_read=f"{2 * BA_ROWS * BA_K * 2} + M * {2 * BA_K}",
    bytes_written=f"M * {2 * 2 * BA_ROWS}",
    max_registers=128,
    dynamic_smem=BA_SMEM,
    op="bf16_linear2",
    pdl="the 16 weight rows (bulk copies) before griddepcontrol.wait; x after it; launch_dependents only after every "
    "thread's wait (so the GDN kernel after it may prefetch its state: gdn_decode_b32_pdl)",
    reference="x @ w^T in float64 for each of the two weights",
    peers=("cublas_bf16_x2",),
)

MOE_ROUTER = Contract(
    name=f"moe_router_e{NUM_EXPERTS}_k{ROUTER_K}",
    family="proj",
    summary=f"the MoE router and its top {TOP_K}: logits = bf16(x[M, {ROUTER_K}] @ w^T) (BF16 [{NUM_EXPERTS}, "
            f"{ROUTER_K}]); idx[M, {TOP_K}] = the {TOP_K} largest (ties: the lower id), in descending order; "
            f"top[M, {TOP_K}] = softmax(logits)[idx] renormalized over them, BF16",
    params=(
        Tensor("x", "bf16", ("M", ROUTER_K), "in"),
        Tensor("w", "bf16", (NUM_EXPERTS, ROUTER_K), "in", doc="mlp.gate.weight"),
        Tensor("top", "bf16", ("M", TOP_K), "out"),
        Tensor("idx", "i64", ("M", TOP_K), "out", doc="expert ids, as torch.topk's indices"),
        Scalar("M", "u32", value="M"),
    ),
    dims={"M": ROUTER_TOKENS},
    grid=(f"{ROUTER_RANKS} * M", "1", "1"),
    threads=256,
    reduction_order="per expert: lane l sums x[256 i + 8 l + c] w[..] for i = 0..7, c = 0..7 in that order (fma; "
                    "the products are exact), then shfl.bfly 16, 8, 4, 2, 1 adds; rounded to BF16. Weights: "
                    "ex2.approx of (l_j - l_0) log2(e), summed in selection order, one division each",
    # the weights: BF16 values <= 1 (2^-9) of an approximate exp; the ids are compared exactly
    # (an id off by one is only 1/255 of the largest; the reference emulates the kernel's fp32
    # order, so the BF16 logits and their ties agree)
    tolerance=BF16_OUT,
    exact_outputs=("idx",),
    deterministic=True,
    bytes_read=f"M * {2 * ROUTER_K} + {2 * NUM_EXPERTS * ROUTER_K}",
    bytes_written=f"M * {TOP_K * (2 + 8)}",
    max_registers=128,
    max_static_smem=4 * NUM_EXPERTS,  # rank 0's logits
    op="moe_router",
    reference="netra.reference.proj.router_topk: the logits in the kernel's fp32 order (exact), BF16-rounded, "
              "then the top 8 and their renormalized softmax in float64",
    peers=("torch_router_topk",),
)


MOE_ROUTER_NORM = dataclasses.replace(
    MOE_ROUTER,
    name=f"moe_router_norm_e{NUM_EXPERTS}_k{ROUTER_K}",
    summary="x_out = rmsnorm(h) (the post-attention norm, zero-centred, bitwise rmsnorm_h2048), then "
            + MOE_ROUTER.summary.split(": ", 1)[1] + " on x_out",
    params=(
        Tensor("h", "bf16", ("M", ROUTER_K), "in", doc="the residual stream after the mixer's add"),
        Tensor("w", "bf16", (NUM_EXPERTS, ROUTER_K), "in", doc="mlp.gate.weight"),
        Tensor("top", "bf16", ("M", TOP_K), "out"),
        Tensor("idx", "i64", ("M", TOP_K), "out", doc="expert ids, as torch.topk's indices"),
        Scalar("M", "u32", value="M"),
        Tensor("norm_w", "bf16", (ROUTER_K,), "in", doc="post_attention_layernorm.weight (applied as 1 + w)"),
        Tensor("x_out", "bf16", ("M", ROUTER_K), "out", doc="rmsnorm(h), for the gate | up kernels"),
        Scalar("eps", "f32"),
    ),
    reduction_order="x_out: rmsnorm_h2048's order (each lane's 8-channel sums of squares, shfl.bfly over each 256, "
                    "the 8 block sums in order; (h * rsqrt) * (1 + w)); then " + MOE_ROUTER.reduction_order,
    bytes_read=f"M * {2 * ROUTER_K} + {2 * NUM_EXPERTS * ROUTER_K} + {2 * ROUTER_K}",
    bytes_written=f"M * {TOP_K * (2 + 8) + 2 * ROUTER_K}",
    op="moe_router_norm",
    pdl="only L2 prefetches of w (token 0's cluster) before griddepcontrol.wait; h by coherent loads after it, "
        "launch_dependents right after it",
    reference="x_out: netra.reference.norm.rmsnorm (float64); top, idx: netra.reference.proj.router_topk on the "
              "kernel's x_out (checked first; the ids are exactly defined only on a BF16 x) in the kernel's fp32 order",
    peers=("rmsnorm_then_router",),
)


# The same outputs (bitwise) with the experts split across CTAs instead of the tokens across clusters
# (gen_moe_router.generate_split; experiments/proj/router/router_split_variant.py, measured at 9a7452f): CTA (e, g) owns
# ROUTER_SPLIT_EXPERTS experts and ROUTER_SPLIT_TOKENS tokens, so M tokens move 64 x M x 4 KB of h and ceil(M / 8) MB of
# rows into the SMs instead of M MB; the last CTA of each token group (a u64 arrival counter, never reset) selects.
# us plain / PDL chain against moe_router_norm: M = 32 7.56 / 7.03 against 10.10 / 9.37, M = 16 6.03 / 5.25 against
# 6.23 / 5.85, but M = 8 5.85 / 5.11 against 5.31 / 4.53 and M = 24 7.55 / 6.64 against 6.96 / 5.84: the op takes it
# from netra.decode.ops.ROUTER_SPLIT_ROWS rows (31 until its lean hand-off, where the cluster build needs a second
# wave; 17 since: decode/ops.py says why)
ROUTER_SPLIT_EXPERTS, ROUTER_SPLIT_TOKENS = 4, 8
ROUTER_SPLIT_GROUPS = max(ROUTER_TOKENS) // ROUTER_SPLIT_TOKENS  # token groups at the largest M
MOE_ROUTER_NORM_SPLIT = dataclasses.replace(
    MOE_ROUTER_NORM,
    name=f"moe_router_norm_split_e{NUM_EXPERTS}_k{ROUTER_K}",
    summary=MOE_ROUTER_NORM.summary + f"; CTA (e, g) owns experts {ROUTER_SPLIT_EXPERTS} e .. and tokens "
            f"{ROUTER_SPLIT_TOKENS} g .. (one warp each), and each token group's last CTA selects its tokens' top {TOP_K}",
    params=MOE_ROUTER_NORM.params + (
        Tensor("logits", "bf16", ("M", NUM_EXPERTS), "out",
               doc="the router's BF16 logits (the CTAs write them, the token group's last CTA reads them)"),
        Tensor("cnt", "i64", (ROUTER_SPLIT_GROUPS,), "inout", align=8,
               doc=f"per token group, its CTAs' arrivals: each launch adds {NUM_EXPERTS // ROUTER_SPLIT_EXPERTS} to "
                   "each group it has; zero (or multiples of that) at allocation, touched by nothing else"),
    ),
    grid=(str(NUM_EXPERTS // ROUTER_SPLIT_EXPERTS), f"(M + {ROUTER_SPLIT_TOKENS - 1}) // {ROUTER_SPLIT_TOKENS}", "1"),
    max_static_smem=ROUTER_SPLIT_EXPERTS * ROUTER_K * 2 + 16,  # the CTA's rows, their mbarrier, the last-CTA flag
    reduction_order=MOE_ROUTER_NORM.reduction_order + " (each warp its token's x, as fp32 once, against each row)",
    exact_outputs=("idx", "logits", "cnt"),
    bytes_written=MOE_ROUTER_NORM.bytes_written + f" + M * {2 * NUM_EXPERTS} + {8 * ROUTER_SPLIT_GROUPS}",
    pdl="the CTA's expert rows (one bulk copy into shared memory) before griddepcontrol.wait: weights never change "
        "while kernels run; h after it, launch_dependents right after it",
    reference=MOE_ROUTER_NORM.reference + "; logits: netra.reference.proj.router_logits on the kernel's x_out (exact); "
              "cnt: + 64 in each token group",
    peers=("moe_router_norm",),
    sanitize_cases=({"M": 1}, {"M": 9}, {"M": 32}),
)


# The same outputs (bitwise) with each warp's 4 expert rows loaded into registers before griddepcontrol.wait
# (gen_moe_router.generate(reg_rows=True); experiments/proj/router/router_regs_variant.py, measured at 4f7f359), in place
# of token 0's L2 prefetch and the two row round trips after the norm. 251 registers a thread, so one CTA per SM: 8 M
# CTAs in one wave up to 12 tokens (at 16, a second wave: 8.77 us). us plain / PDL chain against moe_router_norm: M = 1
# 5.24 / 3.80 against 5.38 / 4.55, M = 5 5.27 / 4.06 against 5.31 / 4.48, M = 8 5.35 / 4.40 against 5.34 / 4.58,
# M = 12 5.43 / 4.70 against 5.42 / 4.65; in the PDL decode step at batch 8, 44 us less (its rows load while out_proj
# runs). The op takes it up to netra.decode.ops.ROUTER_REGS_ROWS rows
ROUTER_REGS_TOKENS = tuple(range(1, 13))
MOE_ROUTER_NORM_REGS = dataclasses.replace(
    MOE_ROUTER_NORM,
    name=f"moe_router_norm_regs_e{NUM_EXPERTS}_k{ROUTER_K}",
    summary=MOE_ROUTER_NORM.summary + "; each warp's 4 expert rows held in registers from the kernel's start",
    dims={"M": ROUTER_REGS_TOKENS},
    max_registers=255,  # 251: one 256-thread CTA per SM
    pdl="each warp's expert rows into registers (ld.global.nc) before griddepcontrol.wait: weights never change while "
        "kernels run; h by coherent loads after it, launch_dependents right after it",
    peers=("moe_router_norm",),
)


# The same with the MoE block's BF16 shared_expert_gate computed by rank 1 while rank 0 selects (a candidate, not registered:
# gen_moe_router.generate(gate=True)), so the gate | up launch after it needs no gate CTA (EXPERTS_SHARED_NOGATE)
MOE_ROUTER_NORM_GATE = dataclasses.replace(
    MOE_ROUTER_NORM,
    name=f"moe_router_norm_gate_e{NUM_EXPERTS}_k{ROUTER_K}",
    summary=MOE_ROUTER_NORM.summary + "; and glogit[M, 1] = bf16(x_out @ gate_w^T), the shared_expert_gate's logit",
    params=MOE_ROUTER_NORM.params + (
        Tensor("gate_w", "bf16", (1, ROUTER_K), "in", doc="shared_expert_gate.weight"),
        Tensor("glogit", "bf16", ("M", 1), "out", align=2, doc="the gate's logit (the model applies sigmoid)"),
    ),
    reduction_order=MOE_ROUTER_NORM.reduction_order + "; glogit: as an expert's logit (rank 1's warp 0)",
    bytes_read=MOE_ROUTER_NORM.bytes_read + f" + {2 * ROUTER_K}",
    bytes_written=MOE_ROUTER_NORM.bytes_written + " + M * 2",
    op="moe_router_norm_gate",
    reference=MOE_ROUTER_NORM.reference + "; glogit: the kernel's x_out @ gate_w^T in float64",
)


def _contract_moe_down(s: Fp8Gemv) -> Contract:
    I, S = MOE_I, s.S
    return Contract(
        name=s.name,
        family="proj",
        summary=f"out[t] = bf16(sum_j top[t, j] a[t, j] @ dequant(W[ids[t, j]])^T + bf16(sigmoid(glogit[t])) as[t] @ "
                f"dequant(ws)^T), h[t] = bf16(h[t] + out[t]) for t < M <= 8, where a = bf16(bf16(silu(gate)) * up) of "
                f"each gate | up row (x for the pairs, xs for the shared expert): the MoE block after gate | up ({s.use})",
        params=(
            Tensor("x", "bf16", ("M", TOP_K * 2 * I), "in", doc="each pair's gate | up (the expert kernel's out), "
                   "[M, 8, 1024] flattened"),
            Tensor("w", "fp8e4m3", ("E", S, I // 128, 2048), "in", doc="the experts' down weights, packed, stacked"),
            Tensor("scale", "f32", ("E", s.N // 128, I // 128), "in", align=4),
            Tensor("h", "bf16", ("M", s.N), "inout", doc="the residual stream"),
            Scalar("M", "u32", value="M"),
            Tensor("ids", "i64", ("M", TOP_K), "in", align=8, doc="the router's top-k ids (read on the device)"),
            Scalar("E", "u32", value="E"),
            Tensor("top", "bf16", ("M", TOP_K), "in", doc="the routing weights"),
            Tensor("xs", "bf16", ("M", 2 * I), "in", doc="the shared expert's gate | up"),
            Tensor("ws", "fp8e4m3", (S, I // 128, 2048), "in", doc="the shared expert's down, packed"),
            Tensor("ss", "f32", (s.N // 128, I // 128), "in", align=4),
            Tensor("glogit", "bf16", ("M", 1), "in", align=4, doc="the shared expert gate's logit"),
            Tensor("out", "bf16", ("M", s.N), "out", doc="the MoE block's output (NaN rows for a bad id)"),
        ),
        dims={"M": MOE_DOWN_TOKENS, "E": (NUM_EXPERTS,)},
        grid=(f"({S} * M if {S} * M < {SMS} else {SMS})", "1", "1"),
        threads=s.threads,
        reduction_order=f"silu(g) = g / (1 + ex2.approx(-g log2 e)) with rcp.approx, rounded to BF16, times up, "
                        f"rounded; per strip: the {s.KB} k blocks' mma partials (k in mma order), each times its weight-block "
                        "scale and the token's inverse x scale times the expert's weight (exact: a power of two times "
                        "a BF16 value); the warps' partials in warp order; BF16 out, then added to h in fp32 and "
                        "rounded (as the model's two BF16 ops)",
        tolerance=BF16_TWICE,
        deterministic=True,
        bytes_read=f"M * {(TOP_K + 1) * (s.N * I + s.N // 128 * I // 128 * 4) + 4 * (TOP_K + 1) * I + 8 * TOP_K + 2 * TOP_K + 2 + 2 * s.N}",
        bytes_written=f"M * {4 * s.N}",
        max_registers=s.max_registers,
        dynamic_smem=s.smem,
        quantization=_contract(Fp8Gemv(s.N, I, s.use)).quantization,
        op="moe_down",
        pdl="nothing: the ids and weights are the previous kernels' outputs, so every chunk is requested after the wait",
        reference="netra.reference.proj.moe_down: a = bf16(bf16(silu(gate)) * up) as the model's ops, then the "
                  "float64 sum of the pairs' products times their weights and the shared expert's times "
                  "bf16(sigmoid(glogit)), added to h",
        peers=("moe_decode_unfused",),
        sanitize_cases=({"M": 1, "E": NUM_EXPERTS}, {"M": 8, "E": NUM_EXPERTS}),
    )


# (not registered: the candidates EXPERTS_SHARED_NOGATE and MOE_ROUTER_NORM_GATE, built and launched by
# experiments/decode/step_ab.py gate_in_router and experiments/proj/router/gate_in_router_variant.py; rejected at fde3786)



# --- moe_down once per distinct expert (experiments/proj/moedown_grp_variant.py; netra.decode.ops.MOE_DOWN_GRP_ROWS) -------
# Two launches: moe_act makes every (token, expert) pair's down input once (silu(gate) * up as moedown's, f16 in the
# mma B-fragment order with its power-of-two x scale, the scale's inverse times the routing weight); then each CTA of
# fp8_gemv_n2048_k4608_moedown_grp streams one 16-row strip of every distinct expert's down weight once (and the
# shared expert's), computes the pairs that chose it, keeps each (token, expert, k block) fp32 partial and finishes
# every token in moedown's order (bitwise fp8_gemv_n2048_k4608_moedown). moedown reads each token's 9 experts: at 32
# tokens ~302 MB per layer where the distinct experts are ~164 MB (uniform routing).
MOE_GRP_TOKENS = tuple(range(1, 33))  # up to the decode batch in one launch
MOE_ACT_BLOCKS = (TOP_K + 1) * MOE_I // 128  # (expert j, k block q) blocks of 128 per token: 36
MOE_ACT_WARPS = 8  # moe_act: one warp per (token, expert, k block), 8 per CTA


@dataclass(frozen=True)
class MoeDownGrp:
    """The grouped down kernel's tiling and shared memory (fp8_gemv_n2048_k4608_moedown_grp)."""

    N: int = 2048
    I: int = MOE_I
    W: int = 16  # warps; warp w takes tasks w, w + 16, ... (task 0: the shared expert, task u: distinct expert u - 1)
    M_MAX: int = max(MOE_GRP_TOKENS)

    @property
    def name(self) -> str:
        return f"fp8_gemv_n{self.N}_k{(TOP_K + 1) * self.I}_moedown_grp"

    @property
    def S(self) -> int:
        return self.N // 16

    @property
    def KB(self) -> int:  # k blocks of one expert
        return self.I // 128

    @property
    def threads(self) -> int:
        return 32 * self.W

    @property
    def SB(self) -> int:  # one stage: one expert's strip (KB packed tiles); warp w's own stage
        return self.KB * 2048

    # dynamic shared memory: W stages | their KB scales each | W mbarriers | partials [M][9][KB][16] fp32 | xs [M][9][KB]
    # fp32 | ids [8 M] u32 | distinct bitmap (8 words) | U (16 B) | list (NUM_EXPERTS u32) | pos (NUM_EXPERTS u8) |
    # token masks [NUM_EXPERTS][M_MAX] u8 (bit j: slot j) | per-warp column tables [W][8 M_MAX] u8 | bad tokens (u32)
    @property
    def scl_off(self) -> int:
        return self.W * self.SB

    @property
    def bar_off(self) -> int:
        return self.scl_off + self.W * 4 * self.KB

    @property
    def part_off(self) -> int:
        return self.bar_off + 8 * self.W

    @property
    def xs_off(self) -> int:
        return self.part_off + self.M_MAX * (TOP_K + 1) * self.KB * 16 * 4

    @property
    def ids_off(self) -> int:
        return self.xs_off + self.M_MAX * (TOP_K + 1) * self.KB * 4

    @property
    def bm_off(self) -> int:
        return self.ids_off + 4 * TOP_K * self.M_MAX

    @property
    def u_off(self) -> int:
        return self.bm_off + 32

    @property
    def list_off(self) -> int:
        return self.u_off + 16

    @property
    def pos_off(self) -> int:
        return self.list_off + 4 * NUM_EXPERTS

    @property
    def mask_off(self) -> int:
        return self.pos_off + NUM_EXPERTS

    @property
    def col_off(self) -> int:
        return self.mask_off + NUM_EXPERTS * self.M_MAX

    @property
    def bad_off(self) -> int:
        return self.col_off + self.W * TOP_K * self.M_MAX

    @property
    def smem(self) -> int:
        return self.bad_off + 16


MOE_DOWN_GRP = MoeDownGrp()
MOE_ACT_NAME = f"moe_act_i{MOE_I}"


def _contract_moe_act() -> Contract:
    I, J, KB = MOE_I, TOP_K + 1, MOE_I // 128
    return Contract(
        name=MOE_ACT_NAME,
        family="proj",
        summary=f"each (token t, expert j) pair's down input a = bf16(bf16(silu(gate)) * up) of its gate | up row (x[t, j] "
                f"for the {TOP_K} routed experts, xs[t] for the shared one, j = {TOP_K}), per 128-k block q as moedown "
                "converts it: xa[t, j, q] = f16(a * 2^e) in the mma B-fragment order, xm[t, j, q] = 2^-e times the "
                "pair's weight (top[t, j], or bf16(sigmoid(glogit[t])))",
        params=(
            Tensor("x", "bf16", ("M", TOP_K * 2 * I), "in", doc="each pair's gate | up, [M, 8, 1024] flattened"),
            Tensor("top", "bf16", ("M", TOP_K), "in", doc="the routing weights"),
            Tensor("xs", "bf16", ("M", 2 * I), "in", doc="the shared expert's gate | up"),
            Tensor("glogit", "bf16", ("M", 1), "in", align=4, doc="the shared expert gate's logit"),
            Tensor("xa", "f16", ("M", J * KB * 128), "out",
                   doc=f"[M, {J}, {KB}, 4, 32]: block (t, j, q), lane group tig's 32 values: k = 16 i + 8 kh + 2 tig + "
                       "(0, 1) at 2 (2 i + kh) .. (the B fragments of mma step i)"),
            Tensor("xm", "f32", ("M", J * KB), "out", doc="the inverse x scale times the pair's weight"),
            Scalar("M", "u32", value="M"),
        ),
        dims={"M": MOE_GRP_TOKENS},
        grid=(f"(M * {J * KB} + {MOE_ACT_WARPS - 1}) // {MOE_ACT_WARPS}", "1", "1"),
        threads=32 * MOE_ACT_WARPS,
        reduction_order="none: elementwise (silu(g) = g / (1 + ex2.approx(-g log2 e)) with rcp.approx, BF16, times up, "
                        "BF16, as moedown's silu_mul); the block's amax by integer max (exact)",
        tolerance=BF16_OUT,
        deterministic=True,
        bytes_read=f"M * {(TOP_K + 1) * 2 * I * 2 + TOP_K * 2 + 2}",
        bytes_written=f"M * {J * I * 2 + J * KB * 4}",
        max_registers=64,
        op="moe_down",
        pdl="nothing before griddepcontrol.wait; launch_dependents right after it",
        cases_override=tuple({"M": m} for m in (1, 5, 8, 16, 32)),
        reference="a = bf16(bf16(silu(gate)) * up) by PyTorch's BF16 ops; xa * 2^-e against it, xm against the weight",
        peers=(),
    )


def _contract_moe_down_grp(g: MoeDownGrp = MOE_DOWN_GRP) -> Contract:
    I, J, KB, S = g.I, TOP_K + 1, g.KB, g.S
    base = _contract_moe_down(MOE_DOWN)
    by = {p.name: p for p in base.params}
    return dataclasses.replace(
        base,
        name=g.name,
        summary=base.summary.replace("t < M <= 8", f"t < M <= {g.M_MAX}") + "; each distinct expert's strip read once "
                f"per launch, the pairs' inputs from {MOE_ACT_NAME}",
        params=(
            Tensor("xa", "f16", ("M", J * KB * 128), "in", doc=f"{MOE_ACT_NAME}'s xa"),
            by["w"], by["scale"], by["h"], by["M"], by["ids"], by["E"], by["ws"], by["ss"],
            Tensor("xm", "f32", ("M", J * KB), "in", doc=f"{MOE_ACT_NAME}'s xm"),
            by["out"],
        ),
        dims={"M": MOE_GRP_TOKENS, "E": (NUM_EXPERTS,)},
        grid=(str(S), "1", "1"),
        threads=g.threads,
        reduction_order=f"as {MOE_DOWN.name} (bitwise): per (token, expert j, k block q) the mma partial of 8 k16 steps "
                        "from 0, kept in fp32; then per token and row, warp w = 4 (j % 3) + q of that kernel: "
                        "fma(p, xm x ws, acc) over its chunks j = w / 4, + 3, + 6 in order (from 0), the 12 sums in "
                        "warp order; BF16 out, then added to h in fp32 and rounded",
        bytes_read=f"M * {TOP_K * 8 + 2 * g.N + J * I * 2 + J * KB * 4} + {g.N * I + g.N // 128 * KB * 4} * "
                   f"(1 + (M * {TOP_K} if M * {TOP_K} < {NUM_EXPERTS} else {NUM_EXPERTS}))",
        max_registers=128,
        dynamic_smem=g.smem,
        pdl="the ids (ld.relaxed.gpu) and every warp's first strip before griddepcontrol.wait: valid where the ids were "
            "written two or more grids back (the op launches moe_act between); xa, xm and h after it",
        reference="netra.reference.proj.moe_down_grp on the kernel's inputs (xa in k order times xm, the pairs' down in "
                  "float64, summed), added to h; equal to moe_down's reference on the reference moe_act's xa and xm",
        peers=("moe_down_per_token",),
        cases_override=tuple({"M": m, "E": NUM_EXPERTS} for m in (1, 4, 5, 8, 9, 16, 17, 24, 32)),
        sanitize_cases=({"M": 1, "E": NUM_EXPERTS}, {"M": 32, "E": NUM_EXPERTS}),
    )


MOE_ACT = _contract_moe_act()
MOE_DOWN_GRP_CONTRACT = _contract_moe_down_grp()


# The LM head and the greedy argmax in one launch (kernels/sm_90a/proj/gen_lm_head.py)
LM_VOCAB, LM_K = 248320, 2048
LM_TOKENS = tuple(range(1, 33))  # decode batch or verification tokens: up to 4 n-tiles of 8


@dataclass(frozen=True)
class LmHead:
    """bf16_gemv_n248320_k2048_argmax's tiling and shared memory: strips of 16 rows, each copied into a padded
    stage (rows ``rowb`` bytes apart), ``warps`` warps of one 128-k block each, up to ``ntiles`` n-tiles of 8 tokens;
    after each CTA's first ``stages`` strips, the next strips are claimed from a counter (ws[counter])."""

    V: int = LM_VOCAB
    K: int = LM_K
    stages: int = 3  # 64 KB each: 2 left the stream short of bytes in flight (experiments/proj/lm_head/README.md)
    warps: int = LM_K // 128
    ntiles: int = max(LM_TOKENS) // 8
    grid: int = SMS
    ticket: int = max(LM_TOKENS)  # ws[ticket]: the CTAs' arrival count; ws[0 .. M): each token's best
    pad: int = 16  # bytes after each weight row in a stage (0: a candidate, one bulk copy per strip, gen_lm_head's one_copy)

    @property
    def counter(self) -> int:  # ws[counter]: strips claimed after every CTA's first ones
        return self.ticket + 1

    @property
    def name(self) -> str:
        return f"bf16_gemv_n{self.V}_k{self.K}_argmax"

    @property
    def rowb(self) -> int:  # a weight row in shared memory, padded so that ldmatrix's 8 rows hit 8 bank groups
        return 2 * self.K + self.pad

    # dynamic shared memory: stages [stages][16][rowb] | partials [warps][ntiles][4][32] fp32 | mbarriers [stages] |
    # each stage's strip [stages] u32 | the last-CTA flag
    @property
    def part_off(self) -> int:
        return self.stages * 16 * self.rowb

    @property
    def part_buf(self) -> int:
        return self.warps * self.ntiles * 512

    @property
    def bar_off(self) -> int:
        return self.part_off + self.part_buf

    @property
    def slot_off(self) -> int:
        return self.bar_off + 8 * self.stages

    @property
    def flag_off(self) -> int:
        return self.slot_off + 4 * self.stages

    @property
    def smem(self) -> int:
        return self.flag_off + 4


LM_HEAD = LmHead()
LM_HEAD_CONTRACT = Contract(
    name=LM_HEAD.name,
    family="proj",
    summary=f"the LM head and greedy decoding in one launch: logits[M, {LM_VOCAB}] = bf16(x[M, {LM_K}] @ w^T) (BF16 "
            "w as the checkpoint stores it), tokens[M] = each row's argmax (the lowest index on ties; a NaN logit "
            "counts as the largest)",
    params=(
        Tensor("x", "bf16", ("M", LM_K), "in", doc="the final norm's output"),
        Tensor("w", "bf16", (LM_VOCAB, LM_K), "in", doc="lm_head.weight, unpacked"),
        Tensor("logits", "bf16", ("M", LM_VOCAB), "out"),
        Tensor("tokens", "i64", ("M",), "out", align=8),
        Tensor("ws", "i64", (LM_HEAD.counter + 1,), "inout", align=8,
               doc="the kernel's workspace (each token's best so far, the CTAs' arrival count, the strip counter): "
                   "zero at allocation, and every launch leaves it zero; the caller's, for this kernel alone"),
        Scalar("M", "u32", value="M"),
    ),
    dims={"M": LM_TOKENS},
    grid=(str(LM_HEAD.grid), "1", "1"),
    threads=32 * LM_HEAD.warps,
    reduction_order="per 16-row strip, whichever CTA claims it: per warp (a 128-k block), mma.sync m16n8k16 (bf16 -> "
                    "fp32) over its 8 k16 steps from 0 in k order; the 16 warp partials added in warp order (k order), "
                    "BF16; tokens: the maximum of (logit key, lowest row), an order-independent rule",
    tolerance=BF16_OUT,
    deterministic=True,
    bytes_read=f"{2 * LM_VOCAB * LM_K} + M * {2 * LM_K}",
    bytes_written=f"M * {2 * LM_VOCAB + 8} + {8 * (LM_HEAD.counter + 1)}",
    max_registers=128,
    dynamic_smem=LM_HEAD.smem,
    op="lm_head_argmax",
    pdl="the CTA's first three strips (bulk copies) before griddepcontrol.wait: weights never change while kernels "
        "run; x and the workspace after it, launch_dependents right after it",
    reference="logits: x @ w^T in float64; tokens: torch.argmax of the kernel's own BF16 logits (exact)",
    peers=("cublas_bf16_argmax",),
    exact_outputs=("tokens", "ws"),
    cases_override=tuple({"M": m} for m in (1, 2, 8, 9, 16, 17, 32)),
    sanitize_cases=({"M": 1}, {"M": 32}),
)


CONTRACTS = tuple(_contract(s) for s in SHAPES + DENSE32 + FUSED + FUSED32 + (NORM_BA,) + PLAIN_BA + EXPERTS + (EXPERTS_GROUP, EXPERTS_GROUP32, EXPERTS_SHARED,
                                                                               EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32,
                                                                               EXPERTS_ROUTER,
                                                                               EXPERTS_ROUTER_DOWN)) + (
    BF16_GEMV_N64_K2048, MOE_ROUTER, MOE_ROUTER_NORM, MOE_ROUTER_NORM_SPLIT, MOE_ROUTER_NORM_REGS, *(_contract_moe_down(s) for s in MOE_DOWNS),
    MOE_ACT,
    MOE_DOWN_GRP_CONTRACT, LM_HEAD_CONTRACT)
