"""Generator of moe_router_e256_k2048: the MoE router of Qwen3.6 and its top-k in one launch.
logits[t] = bf16(x[t] @ w^T) (BF16 [256, 2048], the model's `mlp.gate`), then the top 8 by
logit (ties: the lower expert id) and their weights softmax(logits)[top] / sum(softmax[top])
= exp(l_j - l_max) / sum_k exp(l_k - l_max) over the 8, BF16; the ids int64, in selection
order (descending). Contract: netra.contracts.proj.MOE_ROUTER. The kernel measured at bab7443
lacked the start-of-cluster barrier below, which racecheck flagged (experiments/proj/router/);
with it, racecheck found no hazard at 9e1c98e. The generator only
unrolls and names registers.

Design (replaces ~9 small PyTorch kernels per layer: matmul, casts, softmax, top-k (two
kernels), sum, divide):
- One cluster of 8 CTAs per token; rank r computes experts 32 r .. 32 r + 31, warp w four of
  them (32 r + 4 w + e). Lane l holds x[t, 256 i + 8 l .. + 7] for i = 0..7 (16-byte loads,
  each warp instruction 512 contiguous bytes) and streams each expert row the same way.
- Per expert: lane l sums its 64 products in k order with fma (a product of two BF16 values
  is exact in fp32, so fma = the rounded add); then shfl.bfly 16, 8, 4, 2, 1 adds (every lane
  ends with the same sum); the logit is rounded to BF16, as the model's BF16 matmul output.
  This order is what the reference emulates in float32 (netra.reference.proj.router_logits),
  so the ids are compared exactly.
- A relaxed cluster barrier arrive at the start and its wait before the first remote store:
  no CTA writes into rank 0's shared memory before rank 0 has started (the bab7443 build had
  no such barrier: racecheck's "block that might not have entered yet").
- Lane 0 of each warp stores its 4 logits into rank 0's shared memory (st.shared::cluster);
  one release/acquire cluster barrier; rank 0's warp 0 takes the 256 logits (8 per lane) and
  selects 8 times on u32 keys, (the BF16 logit's bits made orderable) << 16 | (255 - id): each
  round a max tree over the lane's 8 keys and one redux.sync.max.u32 (a larger key: a larger
  logit, or on a tie the lower id), the owner lane zeroing the chosen key (select="redux"; the
  shfl.bfly argmax of (value, id) pairs before it was ~1 us slower). Weights by ex2.approx on
  (l_j - l_0) log2(e), summed in selection order; lane j < 8 divides its own and stores
  top[t, j] and idx[t, j].

moe_router_norm_split_e256_k2048 (generate_split, its docstring) computes the norm build's outputs, bitwise, with
the experts split across CTAs instead of the tokens across clusters; the op takes it from 31 tokens.

moe_router_norm_regs_e256_k2048 (generate(reg_rows=True), its docstring) is the norm build with each warp's rows in
registers from the start; the op takes it up to 12 tokens (netra.decode.ops.ROUTER_REGS_ROWS).

  python3 kernels/sm_90a/proj/gen_moe_router.py      (rewrites the four .ptx beside it)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "src"))
sys.path.insert(0, str(HERE))
import rms_emit  # noqa: E402  (the warp's RMSNorm, shared with gen_fp8_gemv.ba_cta)
from netra.contracts.proj import (MOE_I, MOE_ROUTER_NORM_REGS, MOE_ROUTER_NORM_SPLIT, NUM_EXPERTS, ROUTER_K, ROUTER_RANKS,  # noqa: E402
                                  ROUTER_SPLIT_EXPERTS, ROUTER_SPLIT_TOKENS, TOP_K)  # (written once)

NAME = f"moe_router_e{NUM_EXPERTS}_k{ROUTER_K}"
WARPS = 8
PER_RANK = NUM_EXPERTS // ROUTER_RANKS  # experts per CTA
PER_WARP = PER_RANK // WARPS
LOADS = ROUTER_K // (32 * 8)  # 16-byte loads per lane per row
assert PER_WARP * WARPS * ROUTER_RANKS == NUM_EXPERTS and LOADS * 256 == ROUTER_K
assert NUM_EXPERTS == 32 * 8, "rank 0's warp 0 holds 8 logits per lane"
LOG2E = "0f3FB8AA3B"  # log2(e) in fp32
NEG_INF = "0fFF800000"


NORM_NAME = f"moe_router_norm_e{NUM_EXPERTS}_k{ROUTER_K}"  # with the post-attention norm (netra::moe_router_norm)
GATE_NAME = f"moe_router_norm_gate_e{NUM_EXPERTS}_k{ROUTER_K}"  # and the shared_expert_gate (a candidate)
REGS_NAME = MOE_ROUTER_NORM_REGS.name  # the norm build with its rows in registers (reg_rows): up to 12 tokens
SMEM_BYTES = PER_RANK * ROUTER_K * 2 + 8 * WARPS  # smem_rows: the CTA's expert rows and the warps' mbarriers


# prefetch_experts: the chosen experts' packed gate | up (the expert kernel's [E, 64, 16, 2048]) and
# down ([E, 128, 4, 2048], moe_down's) bytes per expert, prefetched into L2 in pieces of PIECE bytes
W13_BYTES, W2_BYTES, PIECE = 2 * MOE_I * ROUTER_K, ROUTER_K * MOE_I, 512 * 1024  # FP8: one byte per weight
PREFETCH_MAX_M = 2  # beyond it every token's cluster would prefetch its own 24 MB: the L2 holds 60 MB


def generate(start_barrier: bool = True, norm: bool = False, warps: int = WARPS, prefetch: bool = False,
             ranks: int = ROUTER_RANKS, prefetch_experts: bool = False, pdl: bool = False,
             select: str = "redux", smem_rows: bool = False, gate: bool = False, reg_rows: bool = False,
             name: str | None = None) -> str:
    """The PTX; ``start_barrier=False`` is the build measured at bab7443 (racecheck hazards).
    ``warps`` (a candidate at 16: experiments/proj/router/router_warps_variant.py): warps per
    CTA; each takes PER_RANK / warps experts, two rows' loads in flight at a time, so 16 warps
    have every row of the CTA in flight at once (8: two round trips per warp). The same sums in
    the same order: bitwise the same outputs. ``prefetch`` (a candidate, the same script): at
    the start each lane asks L2 for one 128-byte line of each of its warp's expert rows
    (``prefetch.global.L2``: no registers), so every row's DRAM round trip starts at once and
    the loads after x (and the norm) and after the first pair's sums hit L2. (Issuing the
    first pair's loads before x in PTX does not do it: ptxas sinks them below the norm.)
    ``norm`` (NORM_NAME; first measured by experiments/proj/router/router_norm_variant.py): the
    input is the residual h, and x = rmsnorm(h) (the post-attention norm, zero-centred, bitwise
    rmsnorm_h2048's) is computed first by every warp from the registers it already holds: lane l holds channels 256 i + 8 l + c, which is
    rmsnorm_h2048's thread 32 i + l; so its 8-channel sums of squares, the shfl.bfly over each
    256 and the 8 block sums in order are rmsnorm_h2048's. Rank r's warp 0 writes block r of x
    to x_out for the other readers (the expert and shared gate | up kernels).
    ``ranks`` (a candidate at 16: experiments/proj/router/router_ranks_variant.py; CPU-built): CTAs
    per token's cluster, each taking NUM_EXPERTS / ranks experts, so a token's 1 MB of router
    weight streams into twice the SMs (the 8-rank kernel reads 128 KB per SM: per-SM bandwidth,
    not DRAM, bounds it). A cluster of 16 is non-portable (the function attribute must allow it);
    each expert's sum is the same instructions wherever it runs, so the outputs are bitwise the
    8-rank kernel's. Rank 0 still selects from all 256 logits; ranks 0..7 write x_out's blocks.
    ``prefetch_experts`` (a candidate, experiments/proj/router/moe_prefetch_variant.py; CPU-built):
    two more parameters, the packed expert weights w13 and w2 the next kernels read (gate | up,
    down); as soon as rank 0 has selected the 8 experts, its warp asks L2 for their weights
    (cp.async.bulk.prefetch.L2, 512 KB pieces: 24 MB per token). The expert kernel cannot request
    them before its griddepcontrol.wait (the ids are this kernel's output), so today its first
    bytes leave DRAM only after this grid has ended and it has launched. At M > PREFETCH_MAX_M
    nothing is prefetched (every token's cluster would ask for its own 24 MB).
    ``pdl`` (the norm build promoted as moe_router_norm_e256_k2048, for the decode runner's PDL
    engine; plainly launched, griddepcontrol is a no-op): token 0's cluster asks L2 for the whole
    router weight (each lane one 128-byte line of each of its warp's rows, ``prefetch.global.L2``,
    no registers) before ``griddepcontrol.wait``, so the rows' DRAM round trips overlap the
    previous kernel's tail (the other clusters' loads then hit L2 too; every cluster asking
    cost 1.9 us at M = 32: router_warps_variant_7b16591.json); h is read after the wait by
    ld.global, not .nc (the previous kernel writes it); launch_dependents right after the wait
    (one dependent grid at a time); nothing is written before the wait.
    ``select`` (rank 0's warp 0 choosing the 8 from the 256 logits): "bfly" (the builds until 7f8a1fd),
    each of the 8 rounds an fp32 compare chain over the lane's 8 and five shfl.bfly argmax steps of
    (value, id) pairs, every lane then dividing all 8 weights; "redux" (promoted after
    experiments/proj/router/router_select_variant_7f8a1fd.json: bitwise, 0.5-1.0 us faster per launch),
    each logit as one u32 key, (the BF16 logit's bits made orderable) << 16 | (255 - id), so a larger
    key is a larger logit or, on a tie, the lower id (the same order; -0 is made +0 first, as the fp32
    compare has them equal); a round is a max.u32 tree over the lane's 8 keys and one
    redux.sync.max.u32, the owner zeroing the chosen key; lane j < 8 divides only its own weight. The
    same ids, values and weight arithmetic, so the same outputs (NaN logits aside: no finite h gives one).
    ``smem_rows`` (a candidate, experiments/proj/router/router_smem_variant.py; 8 ranks): lane 0 of each warp
    bulk-copies the warp's expert rows (4 x 4 KB) into the CTA's dynamic shared memory on the warp's own mbarrier
    at the very start (before griddepcontrol.wait: weights never change), and the sums read them from there
    (16-byte ld.shared, a warp's 512 contiguous bytes) instead of two L2 round trips after the norm; no L2
    prefetch. 128 KB per CTA, so one CTA per SM (M <= 16 in one wave). The same sums in the same order: bitwise.
    ``gate`` (GATE_NAME; a candidate, CPU-built: experiments/decode/step_ab.py gate_in_router): two more parameters,
    the BF16 shared_expert_gate row gate_w [1, K] and glogit [M, 1]; after the cluster barrier, while rank 0
    selects, rank 1's warp 0 sums x . gate_w as every expert row (the same lanes and order) into glogit[tok], BF16,
    so the MoE block's gate | up launch needs no gate CTA.
    ``reg_rows`` (REGS_NAME, promoted after experiments/proj/router/router_regs_variant.py; the PDL norm build): every lane loads
    its warp's 4 expert rows (128 words) into registers at the very start, before griddepcontrol.wait (weights never
    change), in place of token 0's L2 prefetch and the two ld.global round trips after the norm; the sums then need
    only h. 251 registers a thread, so one 256-thread CTA per SM (8 M CTAs in one wave up to 12 tokens; at 16 a second
    wave). The same sums in the same order: bitwise. Measured at 4f7f359: the batch-8 PDL step 42-47 us faster; the op
    takes it up to 8 tokens since 1afa351 (its records), up to 12 since c2d934c's step A/B (batch 12, 41-44 us).
    ``name``: the entry's name, when an experiment swaps a build in under another kernel's (default: the build's own)."""
    assert select in ("bfly", "redux"), select
    assert not smem_rows or (ranks == ROUTER_RANKS and warps == WARPS and not prefetch), "smem_rows: the 8-rank build"
    assert not reg_rows or (norm and pdl and not smem_rows and not gate and ranks == ROUTER_RANKS and warps == WARPS), \
        "reg_rows: the 8-rank PDL norm build"
    assert ranks in (8, 16) and LOADS == 8, "x_out is written by ranks 0..7 (one 256-channel block each)"
    per_rank = NUM_EXPERTS // ranks
    assert not gate or (norm and ranks >= 2), "gate: the norm build (rank 1 sums the gate)"
    name = name or (GATE_NAME if gate else REGS_NAME if reg_rows else NORM_NAME if norm else NAME)
    L: list[str] = []

    def e(s: str = ""):
        L.append(("  " + s) if s and not s.endswith(":") and not s.startswith("//") and not s.startswith(".") else s)

    e(f"// {name}: the MoE router (BF16 [{NUM_EXPERTS}, {ROUTER_K}]) and its top {TOP_K}, one cluster of "
      f"{ranks} CTAs per token" + (", on x = rmsnorm(h) computed in the prologue." if norm else "."))
    e("// Generated by gen_moe_router.py (the design is there); regenerate, do not edit.")
    e(".version 8.0")
    e(".target sm_90a")
    e(".address_size 64")
    e()
    e(f".shared .align 16 .f32 logits[{NUM_EXPERTS}];  // rank 0's: every rank's logits")
    if smem_rows:
        e(f".extern .shared .align 128 .b8 dsm[];  // the CTA's {PER_RANK} expert rows, then one mbarrier per warp")
    e()
    e(f".visible .entry {name}(")
    for p in ("h" if norm else "x", "w", "top", "idx"):
        e(f"  .param .u64 {p},")
    tail = ",\n  .param .u64 w13,\n  .param .u64 w2" if prefetch_experts else ""
    if norm:
        e("  .param .u32 M,")
        e("  .param .u64 norm_w,")
        e("  .param .u64 x_out,")
        e("  .param .f32 eps" + (",\n  .param .u64 gate_w,\n  .param .u64 glogit" if gate else "") + tail)
    else:
        e("  .param .u32 M" + tail)
    e(")")
    per_warp = per_rank // warps
    assert per_warp % 2 == 0 and per_warp * warps == per_rank
    e(f".reqntid {32 * warps}")
    e(f".reqnctapercluster {ranks}, 1, 1")
    e("{")
    e(".reg .pred %p, %q;")
    e(".reg .b32 %th, %warp, %lane, %rank, %tok, %t0, %t1, %ex, %dst, %bi, %oi;")
    e(f".reg .b32 %x<{4 * LOADS}>, %w<{(4 * per_warp if reg_rows else 8) * LOADS}>;")
    e(".reg .f32 %a, %b, %c, %d, %acc<2>, %bv, %ov;")
    e(".reg .f32 %v<8>, %sv<8>, %ev<8>, %sum;")
    e(".reg .b32 %si<8>;")
    if select == "redux":
        e(".reg .b32 %k<8>;")
    e(".reg .b16 %h;")
    e(".reg .b64 %px, %pw, %pt, %pi, %pa, %o64;")
    if prefetch_experts:
        e(".reg .b64 %p13, %p2;")
        e(".reg .b32 %pe, %pp;")
    if smem_rows:
        e(".reg .b32 %rows, %bar;")
    if norm:
        e(".reg .b32 %nw<4>;")
        e(".reg .f32 %eps, %ss<8>, %r, %e<8>;")
        e(".reg .b64 %pn, %pxo;")
    e("ld.param.u64 %px, [h];" if norm else "ld.param.u64 %px, [x];")
    e("ld.param.u64 %pw, [w];")
    e("ld.param.u64 %pt, [top];")
    e("ld.param.u64 %pi, [idx];")
    e("cvta.to.global.u64 %px, %px;")
    e("cvta.to.global.u64 %pw, %pw;")
    e("cvta.to.global.u64 %pt, %pt;")
    e("cvta.to.global.u64 %pi, %pi;")
    def thread_ids():
        e("mov.u32 %th, %tid.x;")
        e("shr.u32 %warp, %th, 5;")
        e("and.b32 %lane, %th, 31;")
        e("mov.u32 %rank, %cluster_ctarank;")

    assert not (prefetch and pdl), "pdl prefetches from token 0's cluster only"
    if smem_rows:  # first of all: the rows do not depend on the previous kernel
        thread_ids()
        _rows_to_smem(e, per_warp)
    if reg_rows:  # first of all: the rows do not depend on the previous kernel
        thread_ids()
        e(f"mad.lo.u32 %ex, %rank, {per_rank}, 0;")
        e(f"mad.lo.u32 %ex, %warp, {per_warp}, %ex;  // this warp's first expert")
        e(f"mul.lo.u32 %t0, %ex, {ROUTER_K};")
        e("mad.lo.u32 %t0, %lane, 8, %t0;")
        e("mul.wide.u32 %o64, %t0, 2;")
        e("add.u64 %pa, %pw, %o64;")
        e(f"// the warp's {per_warp} rows into registers: row r's word q in %w(32 r + q), as x's in %x")
        for r in range(per_warp):
            for i in range(LOADS):
                b = 4 * LOADS * r + 4 * i
                e(f"ld.global.nc.v4.u32 {{%w{b}, %w{b + 1}, %w{b + 2}, %w{b + 3}}}, [%pa+{r * ROUTER_K * 2 + 512 * i}];")
    if (prefetch or pdl) and not smem_rows and not reg_rows:  # first of all, and before the barrier: ptxas sinks them otherwise
        thread_ids()
        if pdl:
            e("mov.u32 %t0, %ctaid.x;")
            e(f"setp.lt.u32 %p, %t0, {ranks};  // token 0's cluster asks for the whole weight")
        e(f"mad.lo.u32 %t0, %rank, {per_rank}, 0;")
        e(f"mad.lo.u32 %t0, %warp, {per_warp}, %t0;")
        e(f"mul.lo.u32 %t0, %t0, {ROUTER_K * 2};")
        e("mad.lo.u32 %t0, %lane, 128, %t0;")
        e("cvt.u64.u32 %o64, %t0;")
        e("add.u64 %o64, %pw, %o64;")
        for r in range(per_warp):
            e(f"{'@%p ' if pdl else ''}prefetch.global.L2 [%o64+{r * ROUTER_K * 2}];  // line lane of the warp's row {r}")
    if start_barrier:
        e("barrier.cluster.arrive.relaxed.aligned;  // this CTA has started (waited for before the first remote store)")
    if pdl:
        e("griddepcontrol.wait;  // h, and the outputs the previous kernels may still read, from here")
        e("griddepcontrol.launch_dependents;  // after the wait: one dependent grid at a time")
    if not (prefetch or pdl or smem_rows):
        thread_ids()
    e("mov.u32 %tok, %ctaid.x;")
    e(f"shr.u32 %tok, %tok, {ranks.bit_length() - 1};  // one cluster per token")
    e("// x[tok, 256 i + 8 lane ..]: 8 BF16 per load")
    e(f"mad.lo.u32 %t0, %tok, {ROUTER_K}, 0;")
    e("mad.lo.u32 %t0, %lane, 8, %t0;")
    e("mul.wide.u32 %o64, %t0, 2;")
    e("add.u64 %pa, %px, %o64;")
    xld = "ld.global" if pdl else "ld.global.nc"  # under PDL the previous grid writes h while this one runs
    for i in range(LOADS):
        e(f"{xld}.v4.u32 {{%x{4 * i}, %x{4 * i + 1}, %x{4 * i + 2}, %x{4 * i + 3}}}, [%pa+{512 * i}];")
    if norm:
        norm_prologue(e)
    if not reg_rows:
        e(f"mad.lo.u32 %ex, %rank, {per_rank}, 0;")
        e(f"mad.lo.u32 %ex, %warp, {per_warp}, %ex;  // this warp's first expert")
    e("mov.u32 %t0, logits;")
    e("mapa.shared::cluster.u32 %dst, %t0, 0;  // rank 0's logits")
    first_store = [True]
    for pair in range(per_warp // 2):
        e(f"// experts ex + {2 * pair}, ex + {2 * pair + 1}: both rows' loads, then the sums")
        if smem_rows and pair == 0:
            e("ROWS_WAIT:")
            e("mbarrier.try_wait.parity.shared::cta.b64 %q, [%bar], 0;")
            e("@!%q bra ROWS_WAIT;")
        for j in range(2 if smem_rows else 0):
            e(f"mad.lo.u32 %t0, %lane, 16, %rows;  // row {2 * pair + j} of the warp's, in shared memory")
            for i in range(LOADS):
                b = 4 * LOADS * j + 4 * i
                e(f"ld.shared.v4.u32 {{%w{b}, %w{b + 1}, %w{b + 2}, %w{b + 3}}}, [%t0+{(2 * pair + j) * ROUTER_K * 2 + 512 * i}];")
        for j in range(0 if smem_rows or reg_rows else 2):
            e(f"add.u32 %t0, %ex, {2 * pair + j};")
            e(f"mul.lo.u32 %t0, %t0, {ROUTER_K};")
            e("mad.lo.u32 %t0, %lane, 8, %t0;")
            e("mul.wide.u32 %o64, %t0, 2;")
            e("add.u64 %pa, %pw, %o64;")
            for i in range(LOADS):
                b = 4 * LOADS * j + 4 * i
                e(f"ld.global.nc.v4.u32 {{%w{b}, %w{b + 1}, %w{b + 2}, %w{b + 3}}}, [%pa+{512 * i}];")
        for j in range(2):
            _row_sum(e, j, 2 * pair + j if reg_rows else j)
            e(f"cvt.f32.bf16 %acc{j}, %h;")
            if start_barrier and first_store[0]:
                e("barrier.cluster.wait.aligned;  // every CTA of the cluster has started: rank 0's shared memory exists")
                first_store[0] = False
            e("setp.eq.u32 %p, %lane, 0;")
            e(f"add.u32 %t0, %ex, {2 * pair + j};")
            e("mad.lo.u32 %t0, %t0, 4, %dst;")
            e(f"@%p st.shared::cluster.f32 [%t0], %acc{j};")
    e("barrier.cluster.arrive.release.aligned;  // every rank's logits are in rank 0's shared memory")
    e("barrier.cluster.wait.acquire.aligned;")
    if gate:
        _gate_sum(e)
    e("setp.ne.u32 %p, %rank, 0;")
    e("setp.ne.u32 %q, %warp, 0;")
    e("or.pred %p, %p, %q;")
    e("@%p bra DONE;")
    e("// rank 0, warp 0: lane l holds logits 8 l .. 8 l + 7")
    e("mov.u32 %t0, logits;")
    e("mad.lo.u32 %t0, %lane, 32, %t0;")
    e("ld.shared.v4.f32 {%v0, %v1, %v2, %v3}, [%t0];")
    e("ld.shared.v4.f32 {%v4, %v5, %v6, %v7}, [%t0+16];")
    if select == "redux":
        _select_redux(e)
    for rnd in range(TOP_K if select == "bfly" else 0):
        e(f"// selection {rnd}: the lane's best (ties: the lower id), then the warp's")
        e("mov.f32 %bv, %v0;")
        e("shl.b32 %t1, %lane, 3;")
        e("mov.u32 %bi, %t1;")
        for j in range(1, 8):
            e(f"setp.gt.f32 %p, %v{j}, %bv;")
            e(f"@%p mov.f32 %bv, %v{j};")
            e(f"@%p add.u32 %bi, %t1, {j};")
        for off in (16, 8, 4, 2, 1):
            e(f"shfl.sync.bfly.b32 %ov, %bv, {off}, 31, 0xffffffff;")
            e(f"shfl.sync.bfly.b32 %oi, %bi, {off}, 31, 0xffffffff;")
            e("setp.gt.f32 %p, %ov, %bv;")
            e("setp.eq.f32 %q, %ov, %bv;")
            e("setp.lt.and.u32 %q, %oi, %bi, %q;")
            e("or.pred %p, %p, %q;")
            e("@%p mov.f32 %bv, %ov;")
            e("@%p mov.u32 %bi, %oi;")
        e(f"mov.f32 %sv{rnd}, %bv;")
        e(f"mov.u32 %si{rnd}, %bi;")
        e("shl.b32 %t1, %lane, 3;")
        e("sub.u32 %t1, %bi, %t1;  // the owner lane marks it taken")
        for j in range(8):
            e(f"setp.eq.u32 %p, %t1, {j};")
            e(f"@%p mov.f32 %v{j}, {NEG_INF};")
    if prefetch_experts:
        _prefetch_experts(e)
    _weights(e)
    if select == "redux":  # lane j < 8: its own weight and id
        _store_redux(e)
    for j in range(TOP_K if select == "bfly" else 0):
        e(f"setp.eq.u32 %p, %lane, {j};")
        e(f"div.rn.f32 %a, %ev{j}, %sum;")
        e("cvt.rn.bf16.f32 %h, %a;")
        e("@%p st.global.b16 [%pt], %h;")
        e(f"cvt.u64.u32 %o64, %si{j};")
        e("@%p st.global.u64 [%pi], %o64;")
    e("DONE:")
    e("ret;")
    e("}")
    return "\n".join(L) + "\n"


def _weights(e) -> None:
    """%ev0..7 = exp(l_j - l_0) of the selection (%sv0..7), %sum their sum in selection order; %pt, %pi advanced to
    top[tok, lane], idx[tok, lane]."""
    e("// weights: exp(l_j - l_0) / their sum, in selection order")
    e("mov.f32 %sum, 0f00000000;")
    for j in range(TOP_K):
        e(f"sub.f32 %a, %sv{j}, %sv0;")
        e(f"mul.f32 %a, %a, {LOG2E};")
        e(f"ex2.approx.f32 %ev{j}, %a;")
        e(f"add.f32 %sum, %sum, %ev{j};")
    e(f"mad.lo.u32 %t0, %tok, {TOP_K}, %lane;  // lane j < 8 writes top[tok, j], idx[tok, j]")
    e("mul.wide.u32 %o64, %t0, 2;")
    e("add.u64 %pt, %pt, %o64;")
    e("mul.wide.u32 %o64, %t0, 8;")
    e("add.u64 %pi, %pi, %o64;")


def _store_redux(e) -> None:
    """select="redux": lane j < 8 divides only its own weight and stores it and its id."""
    e("mov.f32 %a, %ev0;")
    e("mov.u32 %t1, %si0;")
    for j in range(1, TOP_K):
        e(f"setp.eq.u32 %p, %lane, {j};")
        e(f"@%p mov.f32 %a, %ev{j};")
        e(f"@%p mov.u32 %t1, %si{j};")
    e("div.rn.f32 %a, %a, %sum;")
    e("cvt.rn.bf16.f32 %h, %a;")
    e(f"setp.lt.u32 %p, %lane, {TOP_K};")
    e("@%p st.global.b16 [%pt], %h;")
    e("cvt.u64.u32 %o64, %t1;")
    e("@%p st.global.u64 [%pi], %o64;")


def _row_sum(e, j: int, row: int | None = None) -> None:
    """%h = bf16(x . row): lane l's 64 products (words %x0..31 against %w{32 row}.., row = j unless given) in k order
    by fma, low half then high, then shfl.bfly 16, 8, 4, 2, 1 adds (every lane the same sum), rounded to BF16 (into
    %acc{j} first)."""
    row = j if row is None else row
    e(f"mov.f32 %acc{j}, 0f00000000;")
    for q in range(4 * LOADS):  # k order: word q of the lane's 32, low half then high
        xw, ww = f"%x{q}", f"%w{4 * LOADS * row + q}"
        e(f"shl.b32 %t0, {xw}, 16;")
        e(f"shl.b32 %t1, {ww}, 16;")
        e("mov.b32 %a, %t0;")
        e("mov.b32 %b, %t1;")
        e(f"fma.rn.f32 %acc{j}, %a, %b, %acc{j};")
        e(f"and.b32 %t0, {xw}, 0xffff0000;")
        e(f"and.b32 %t1, {ww}, 0xffff0000;")
        e("mov.b32 %c, %t0;")
        e("mov.b32 %d, %t1;")
        e(f"fma.rn.f32 %acc{j}, %c, %d, %acc{j};")
    for off in (16, 8, 4, 2, 1):
        e(f"shfl.sync.bfly.b32 %a, %acc{j}, {off}, 31, 0xffffffff;")
        e(f"add.rn.f32 %acc{j}, %acc{j}, %a;")
    e(f"cvt.rn.bf16.f32 %h, %acc{j};  // the model's BF16 logit")


def _gate_sum(e) -> None:
    """gate: rank 1's warp 0 (idle while rank 0 selects) sums x . gate_w as an expert row and lane 0 stores
    glogit[tok]; the other warps and ranks go on."""
    e("setp.ne.u32 %p, %rank, 1;")
    e("setp.ne.u32 %q, %warp, 0;")
    e("or.pred %p, %p, %q;")
    e("@%p bra GATE_DONE;")
    e("// rank 1, warp 0: glogit[tok] = bf16(x . gate_w), the shared_expert_gate, in the experts' order")
    e("ld.param.u64 %pa, [gate_w];")
    e("cvta.to.global.u64 %pa, %pa;")
    e("mul.wide.u32 %o64, %lane, 16;")
    e("add.u64 %pa, %pa, %o64;")
    for i in range(LOADS):
        e(f"ld.global.nc.v4.u32 {{%w{4 * i}, %w{4 * i + 1}, %w{4 * i + 2}, %w{4 * i + 3}}}, [%pa+{512 * i}];")
    _row_sum(e, 0)
    e("ld.param.u64 %pa, [glogit];")
    e("cvta.to.global.u64 %pa, %pa;")
    e("mul.wide.u32 %o64, %tok, 2;")
    e("add.u64 %pa, %pa, %o64;")
    e("setp.eq.u32 %p, %lane, 0;")
    e("@%p st.global.b16 [%pa], %h;")
    e("bra.uni DONE;")
    e("GATE_DONE:")


def _rows_to_smem(e, per_warp: int) -> None:
    """smem_rows: %rows = the warp's first row in shared memory (rows 4 warp .. of the CTA's), %bar its mbarrier;
    lane 0 initializes the mbarrier and bulk-copies the warp's per_warp rows onto it (expect_tx first)."""
    row = ROUTER_K * 2
    e(f"// the warp's {per_warp} expert rows into shared memory, lane 0 by bulk copies on the warp's mbarrier")
    e("mov.u32 %rows, dsm;")
    e("mad.lo.u32 %bar, %warp, 8, %rows;")
    e(f"add.u32 %bar, %bar, {PER_RANK * row};")
    e(f"mad.lo.u32 %rows, %warp, {per_warp * row}, %rows;")
    e("setp.ne.u32 %p, %lane, 0;")
    e("@%p bra ROWS_ISSUED;")
    e("mbarrier.init.shared::cta.b64 [%bar], 1;")
    e("fence.mbarrier_init.release.cluster;  // visible to the async proxy")
    e(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bar], {per_warp * row};")
    e(f"mad.lo.u32 %t0, %rank, {PER_RANK}, 0;")
    e(f"mad.lo.u32 %t0, %warp, {per_warp}, %t0;")
    e(f"mul.wide.u32 %o64, %t0, {row};")
    e("add.u64 %o64, %pw, %o64;")
    for r in range(per_warp):
        e(f"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%rows+{r * row}], [%o64+{r * row}], {row}, [%bar];")
    e("ROWS_ISSUED:")
    e("bar.warp.sync 0xffffffff;  // the mbarrier is initialized before any lane waits on it")


def _select_redux(e) -> None:
    """select="redux": %v0..7 (lane l's logits 8 l .. 8 l + 7, BF16 values in f32) -> the 8 largest in
    descending order (ties: the lower id) as %sv0..7 (values) and %si0..7 (ids), the same in every lane."""
    e("// keys: (orderable BF16 bits) << 16 | (255 - id): a larger key is a larger logit, on a tie the lower id")
    e("shl.b32 %t1, %lane, 3;")
    for j in range(8):
        e(f"mov.b32 %k{j}, %v{j};")
        e(f"setp.eq.u32 %p, %k{j}, 0x80000000;  // -0: +0 (equal under the fp32 compare)")
        e(f"selp.b32 %k{j}, 0, %k{j}, %p;")
        e(f"shr.s32 %t0, %k{j}, 31;")
        e("or.b32 %t0, %t0, 0x80000000;  // negative: flip every bit; else the sign bit")
        e(f"xor.b32 %k{j}, %k{j}, %t0;")
        e(f"and.b32 %k{j}, %k{j}, 0xffff0000;")
        e(f"sub.u32 %t0, {255 - j}, %t1;  // 255 - (8 lane + {j})")
        e(f"or.b32 %k{j}, %k{j}, %t0;")
    for rnd in range(TOP_K):
        e(f"// selection {rnd}: the lane's largest key (a max tree), the warp's (redux), the owner zeroes it")
        e("max.u32 %t0, %k0, %k1;")
        e("max.u32 %t1, %k2, %k3;")
        e("max.u32 %bi, %k4, %k5;")
        e("max.u32 %oi, %k6, %k7;")
        e("max.u32 %t0, %t0, %t1;")
        e("max.u32 %bi, %bi, %oi;")
        e("max.u32 %t0, %t0, %bi;")
        e(f"redux.sync.max.u32 %si{rnd}, %t0, 0xffffffff;")
        for j in range(8):
            e(f"setp.eq.u32 %p, %k{j}, %si{rnd};")
            e(f"@%p mov.b32 %k{j}, 0;  // below every key of a finite logit")
    for rnd in range(TOP_K):
        e(f"and.b32 %t0, %si{rnd}, 0xffff0000;  // selection {rnd}: its logit's bits back, and its id")
        e("shr.s32 %t1, %t0, 31;")
        e("not.b32 %t1, %t1;")
        e("or.b32 %t1, %t1, 0x80000000;")
        e("xor.b32 %t0, %t0, %t1;")
        e("and.b32 %t0, %t0, 0xffff0000;")
        e(f"mov.b32 %sv{rnd}, %t0;")
        e(f"and.b32 %t0, %si{rnd}, 255;")
        e(f"sub.u32 %si{rnd}, 255, %t0;")


def _prefetch_experts(e) -> None:
    """Rank 0's warp 0, every lane holding the 8 selected ids (%si0..7): the experts' gate | up
    (W13_BYTES each) and down (W2_BYTES each) into L2, piece p = lane + 32 i of the 8 x
    (W13 + W2) / PIECE: expert p / per, piece p % per of its gate | up, then of its down."""
    per13, per2 = W13_BYTES // PIECE, W2_BYTES // PIECE
    per = per13 + per2
    e(f"// the 8 experts' weights into L2 for the kernels after this one ({TOP_K} x {per} pieces of {PIECE} B),")
    e(f"// at M <= {PREFETCH_MAX_M} only")
    e("ld.param.u32 %pp, [M];")
    e(f"setp.gt.u32 %p, %pp, {PREFETCH_MAX_M};")
    e("@%p bra PREFETCHED;")
    e("ld.param.u64 %p13, [w13];")
    e("ld.param.u64 %p2, [w2];")
    e("cvta.to.global.u64 %p13, %p13;")
    e("cvta.to.global.u64 %p2, %p2;")
    for i in range(-(-TOP_K * per // 32)):
        e(f"add.u32 %pp, %lane, {32 * i};  // piece")
        e(f"setp.lt.u32 %p, %pp, {TOP_K * per};")
        e(f"@!%p bra PREFETCHED_{i};")
        e(f"div.u32 %t0, %pp, {per};  // which of the 8")
        e(f"rem.u32 %pp, %pp, {per};  // which piece of it")
        e("mov.u32 %pe, %si0;")
        for j in range(1, TOP_K):
            e(f"setp.eq.u32 %q, %t0, {j};")
            e(f"@%q mov.u32 %pe, %si{j};")
        e(f"setp.lt.u32 %q, %pp, {per13};  // gate | up, else down")
        e(f"@%q mul.wide.u32 %o64, %pe, {W13_BYTES};")
        e(f"@%q mad.wide.u32 %o64, %pp, {PIECE}, %o64;")
        e("@%q add.u64 %o64, %p13, %o64;")
        e(f"@!%q sub.u32 %pp, %pp, {per13};")
        e(f"@!%q mul.wide.u32 %o64, %pe, {W2_BYTES};")
        e(f"@!%q mad.wide.u32 %o64, %pp, {PIECE}, %o64;")
        e("@!%q add.u64 %o64, %p2, %o64;")
        e(f"cp.async.bulk.prefetch.L2.global [%o64], {PIECE};")
        e(f"PREFETCHED_{i}:")
    e("PREFETCHED:")


def _norm_sums(e) -> None:
    """The norm's parameters, %r = rsqrt(mean(h^2) + eps) of the lane's row in %x* (rms_emit.sums), %o64 = 16 lane and
    %pa = norm_w + 16 lane for rms_emit.scale."""
    e("// x = rmsnorm(h): lane l's channels 256 i + 8 l + c are rmsnorm_h2048's thread 32 i + l")
    e("ld.param.u64 %pn, [norm_w];")
    e("ld.param.u64 %pxo, [x_out];")
    e("ld.param.f32 %eps, [eps];")
    e("cvta.to.global.u64 %pn, %pn;")
    e("cvta.to.global.u64 %pxo, %pxo;")
    rms_emit.sums(e, "%x", "%e", "%ss", "%r", "%a", "%t0", "%eps", LOADS, ROUTER_K)
    e("mul.wide.u32 %o64, %lane, 16;")
    e("add.u64 %pa, %pn, %o64;")


def norm_prologue(e) -> None:
    """norm: %x* (h) -> rmsnorm(h) in BF16, in place, bitwise as rmsnorm_h2048 (its instruction
    sequence: mul and fma in channel order, add.rn butterflies, the block sums in order, fma by
    1/2048 plus eps, rsqrt.approx, times rsqrt, times (1 + w), cvt.rn); rank r's warp 0 stores
    block r to x_out."""
    _norm_sums(e)
    e(f"mad.lo.u32 %t1, %tok, {ROUTER_K}, 0;")
    e("mad.lo.u32 %t1, %lane, 8, %t1;")
    e("mul.wide.u32 %o64, %t1, 2;")
    e("add.u64 %pxo, %pxo, %o64;  // x_out[tok, 8 lane ..]")
    e("setp.eq.u32 %q, %warp, 0;")
    for i in range(LOADS):
        rms_emit.scale(e, i, "%x", "%e", "%v", "%nw", "%r", "%t0", "%pa")
        e(f"setp.eq.u32 %p, %rank, {i};")
        e("and.pred %p, %p, %q;")
        regs = ", ".join(f"%x{4 * i + c}" for c in range(4))
        e(f"@%p st.global.v4.b32 [%pxo+{512 * i}], {{{regs}}};  // rank {i}'s warp 0: block {i} of x")


SPLIT_NAME = MOE_ROUTER_NORM_SPLIT.name  # measured by experiments/proj/router/router_split_variant.py
SPLIT_TOKENS = ROUTER_SPLIT_TOKENS  # tokens per CTA: one warp each


def generate_split(epc: int = ROUTER_SPLIT_EXPERTS, name: str = SPLIT_NAME, lean: bool = True) -> str:
    """moe_router_norm's outputs (bitwise) with the experts split across CTAs instead of the tokens across clusters.

    Why: moe_router_norm gives each token a cluster of 8 CTAs that each read 32 expert rows (128 KB), so M tokens
    move M MB from L2 into the SMs (32 MB at M = 32: 10 us) and each SM's share bounds it at any M.
    Here CTA (e, g) of the grid (256 / epc, ceil(M / 8)) owns experts epc e .. epc e + epc - 1 and tokens 8 g ..
    8 g + 7, one warp per token: its epc rows (epc x 4 KB) land in shared memory by one bulk copy before
    griddepcontrol.wait (weights never change), so M tokens move 256 / epc x M x 4 KB of h plus ceil(M / 8) MB of rows.
    - warp w (token t = 8 g + w < M): h[t] by coherent loads after the wait, x = rmsnorm(h) as moe_router_norm
      (rms_emit: bitwise rmsnorm_h2048), x_out[t] stored by the CTAs with e = 0; x as fp32 once, then per expert
      row lane l's 64 products in k order by fma and the shfl.bfly sum (moe_router_norm's order: the same logits),
      BF16; lane 0 stores the epc logits into logits[t, epc e ..] (the caller's scratch, BF16 [M, 256]).
    - bar.sync; thread 0: atom.acq_rel.gpu add 1 on cnt[g] (u64: every launch adds 256 / epc per
      token group, so it stays a multiple of that between launches and never needs a reset); the CTA that brings it
      to a multiple is the group's last, and its warps select their tokens' top 8 from the 256 logits as
      moe_router_norm's rank 0 (the u32 keys and redux, the same weights), so top and idx are bitwise its.
    No CTA waits for another: no residency requirement.
    ``lean`` (default since a8d67e9; ``lean=False`` is the former build, step_ab.py split_fenced): no
    fence.acq_rel.gpu, neither thread 0's before its atom.acq_rel.gpu (the atomic is itself the release) nor the last
    CTA's after the count (thread 0's atomic is the acquire; bar.sync orders the CTA's other threads, as the router
    builds' grid barrier since 7e704bc). The same bits; SASS one MEMBAR.ALL.GPU against three; 0-40 us less a batch
    31 / 32 step in three A/Bs (docs/notes/decode.md, "After d0cfc39")."""
    assert NUM_EXPERTS % epc == 0 and epc in (2, 4, 8)
    eg = NUM_EXPERTS // epc
    row = ROUTER_K * 2
    L: list[str] = []

    def e(s: str = ""):
        L.append(("  " + s) if s and not s.endswith(":") and not s.startswith("//") and not s.startswith(".") else s)

    e(f"// {name}: x = rmsnorm(h), the MoE router (BF16 [{NUM_EXPERTS}, {ROUTER_K}]) and its top {TOP_K}; CTA (e, g) "
      f"owns experts {epc} e .. and tokens {SPLIT_TOKENS} g .., the last CTA of each token group selects.")
    e("// Generated by gen_moe_router.py (generate_split's docstring has the design); regenerate, do not edit.")
    e(".version 8.0")
    e(".target sm_90a")
    e(".address_size 64")
    e()
    e(f".shared .align 128 .b8 rows[{epc * row}];  // the CTA's expert rows")
    e(".shared .align 8 .b64 rbar;  // their bulk copy's mbarrier")
    e(".shared .align 4 .u32 last;  // 1: this CTA is its token group's last")
    e()
    e(f".visible .entry {name}(")
    for p in ("h", "w", "top", "idx"):
        e(f"  .param .u64 {p},")
    e("  .param .u32 M,")
    e("  .param .u64 norm_w,")
    e("  .param .u64 x_out,")
    e("  .param .f32 eps,")
    e("  .param .u64 logits,")
    e("  .param .u64 cnt")
    e(")")
    e(f".reqntid {32 * SPLIT_TOKENS}")
    e("{")
    e(".reg .pred %p, %q, %pv;")
    e(".reg .b32 %th, %warp, %lane, %eg, %tg, %tok, %m, %t0, %t1, %rows, %bar, %bi, %oi;")
    e(f".reg .b32 %x<{4 * LOADS}>, %w<{4 * LOADS}>;")
    e(f".reg .f32 %xf<{8 * LOADS}>;")
    e(".reg .f32 %a, %b, %acc, %sum;")
    e(".reg .f32 %v<8>, %sv<8>, %ev<8>;")
    e(".reg .b32 %si<8>, %k<8>;")
    e(f".reg .b16 %h, %hl<{epc}>;")
    e(".reg .b64 %px, %pw, %pt, %pi, %pa, %o64, %pl, %pc, %old;")
    e(".reg .b32 %nw<4>;")
    e(".reg .f32 %eps, %ss<8>, %r, %e<8>;")
    e(".reg .b64 %pn, %pxo;")
    e("mov.u32 %th, %tid.x;")
    e("shr.u32 %warp, %th, 5;")
    e("and.b32 %lane, %th, 31;")
    e("mov.u32 %eg, %ctaid.x;  // expert group")
    e("mov.u32 %tg, %ctaid.y;  // token group")
    e("mov.u32 %rows, rows;")
    e("mov.u32 %bar, rbar;")
    e(f"// first of all: thread 0 bulk-copies the CTA's {epc} rows ({epc * row} contiguous bytes) on the mbarrier")
    e("setp.ne.u32 %p, %th, 0;")
    e("@%p bra ROWS_INIT;")
    e("mbarrier.init.shared::cta.b64 [%bar], 1;")
    e("fence.mbarrier_init.release.cluster;  // visible to the async proxy")
    e("ROWS_INIT:")
    e("bar.sync 0;  // the mbarrier is initialized before any thread uses it (ptxas runs the init on the uniform")
    e("// datapath, for the whole warp: racecheck saw that write race thread 0's arrive without this barrier)")
    e("@%p bra ROWS_ISSUED;")
    e("ld.param.u64 %pw, [w];")
    e("cvta.to.global.u64 %pw, %pw;")
    e(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bar], {epc * row};")
    e(f"mul.wide.u32 %o64, %eg, {epc * row};")
    e("add.u64 %o64, %pw, %o64;")
    e(f"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%rows], [%o64], {epc * row}, [%bar];")
    e("ROWS_ISSUED:")
    e("griddepcontrol.wait;  // h, and the outputs the previous kernels may still read, from here")
    e("griddepcontrol.launch_dependents;  // after the wait: one dependent grid at a time")
    e("ld.param.u64 %px, [h];")
    e("ld.param.u64 %pt, [top];")
    e("ld.param.u64 %pi, [idx];")
    e("ld.param.u64 %pl, [logits];")
    e("ld.param.u64 %pc, [cnt];")
    e("cvta.to.global.u64 %px, %px;")
    e("cvta.to.global.u64 %pt, %pt;")
    e("cvta.to.global.u64 %pi, %pi;")
    e("cvta.to.global.u64 %pl, %pl;")
    e("cvta.to.global.u64 %pc, %pc;")
    e("ld.param.u32 %m, [M];")
    e(f"mad.lo.u32 %tok, %tg, {SPLIT_TOKENS}, %warp;")
    e("setp.ge.u32 %pv, %tok, %m;  // a warp past the last token only counts the CTA in")
    e("@%pv bra SUMS_DONE;")
    e("// h[tok, 256 i + 8 lane ..]: 8 BF16 per load (coherent: the previous kernel wrote h)")
    e(f"mad.lo.u32 %t0, %tok, {ROUTER_K}, 0;")
    e("mad.lo.u32 %t0, %lane, 8, %t0;")
    e("mul.wide.u32 %o64, %t0, 2;")
    e("add.u64 %pa, %px, %o64;")
    for i in range(LOADS):
        e(f"ld.global.v4.u32 {{%x{4 * i}, %x{4 * i + 1}, %x{4 * i + 2}, %x{4 * i + 3}}}, [%pa+{512 * i}];")
    _norm_sums(e)
    e("add.u64 %pxo, %pxo, %o64;")
    e(f"mul.wide.u32 %o64, %tok, {row};")
    e("add.u64 %pxo, %pxo, %o64;  // x_out[tok, 8 lane ..]")
    e("setp.eq.u32 %q, %eg, 0;  // expert group 0 stores x_out")
    for i in range(LOADS):
        rms_emit.scale(e, i, "%x", "%e", "%v", "%nw", "%r", "%t0", "%pa")
        regs = ", ".join(f"%x{4 * i + c}" for c in range(4))
        e(f"@%q st.global.v4.b32 [%pxo+{512 * i}], {{{regs}}};")
    e("// x as fp32 once, in k order (word q: its low half, then its high half)")
    rms_emit.unpack(e, [f"%x{q}" for q in range(4 * LOADS)], "%xf", "%t0")
    e("ROWS_WAIT:")
    e("mbarrier.try_wait.parity.shared::cta.b64 %p, [%bar], 0;")
    e("@!%p bra ROWS_WAIT;")
    e("mad.lo.u32 %t1, %lane, 16, %rows;")
    for r in range(epc):
        e(f"// expert {epc} e + {r}: lane l's 64 products in k order (moe_router_norm's), the butterfly, BF16")
        for i in range(LOADS):
            e(f"ld.shared.v4.u32 {{%w{4 * i}, %w{4 * i + 1}, %w{4 * i + 2}, %w{4 * i + 3}}}, [%t1+{r * row + 512 * i}];")
        e("mov.f32 %acc, 0f00000000;")
        for q in range(4 * LOADS):
            e(f"shl.b32 %t0, %w{q}, 16;")
            e("mov.b32 %b, %t0;")
            e(f"fma.rn.f32 %acc, %xf{2 * q}, %b, %acc;")
            e(f"and.b32 %t0, %w{q}, 0xffff0000;")
            e("mov.b32 %b, %t0;")
            e(f"fma.rn.f32 %acc, %xf{2 * q + 1}, %b, %acc;")
        for off in (16, 8, 4, 2, 1):
            e(f"shfl.sync.bfly.b32 %a, %acc, {off}, 31, 0xffffffff;")
            e("add.rn.f32 %acc, %acc, %a;")
        e(f"cvt.rn.bf16.f32 %hl{r}, %acc;  // the model's BF16 logit")
    e("// lane 0: logits[tok, epc e ..]")
    e(f"mad.lo.u32 %t0, %tok, {NUM_EXPERTS}, 0;")
    e(f"mad.lo.u32 %t0, %eg, {epc}, %t0;")
    e("mul.wide.u32 %o64, %t0, 2;")
    e("add.u64 %pa, %pl, %o64;")
    e("setp.eq.u32 %p, %lane, 0;")
    words = []
    for j in range(epc // 2):
        e(f"mov.b32 %w{j}, {{%hl{2 * j}, %hl{2 * j + 1}}};")
        words.append(f"%w{j}")
    if len(words) == 1:
        e(f"@%p st.global.b32 [%pa], {words[0]};")
    else:
        e(f"@%p st.global.v{len(words)}.b32 [%pa], {{{', '.join(words)}}};")
    e("SUMS_DONE:")
    e("bar.sync 0;  // every warp's logits are stored")
    e("setp.ne.u32 %p, %th, 0;")
    e("@%p bra COUNTED;")
    e("mul.wide.u32 %o64, %tg, 8;")
    e("add.u64 %pa, %pc, %o64;")
    if not lean:
        e("fence.acq_rel.gpu;")
    e("atom.acq_rel.gpu.global.add.u64 %old, [%pa], 1;")
    e(f"and.b64 %old, %old, {eg - 1};")
    e(f"setp.eq.u64 %q, %old, {eg - 1};  // the token group's last CTA")
    e("selp.u32 %t0, 1, 0, %q;")
    e("st.shared.u32 [last], %t0;")
    e("COUNTED:")
    e("bar.sync 0;")
    e("ld.shared.u32 %t0, [last];")
    e("setp.eq.u32 %p, %t0, 0;")
    e("or.pred %p, %p, %pv;")
    e("@%p bra DONE;")
    if not lean:
        e("fence.acq_rel.gpu;  // every group CTA's logits, after thread 0's acquire")
    e("// the group's last CTA, warp w: lane l holds logits[tok, 8 l .. 8 l + 7]")
    e(f"mad.lo.u32 %t0, %tok, {NUM_EXPERTS}, 0;")
    e("mad.lo.u32 %t0, %lane, 8, %t0;")
    e("mul.wide.u32 %o64, %t0, 2;")
    e("add.u64 %pa, %pl, %o64;")
    e("ld.relaxed.gpu.global.v4.b32 {%w0, %w1, %w2, %w3}, [%pa];")
    rms_emit.unpack(e, [f"%w{c}" for c in range(4)], "%v", "%t0")
    _select_redux(e)
    _weights(e)
    _store_redux(e)
    e("DONE:")
    e("ret;")
    e("}")
    return "\n".join(L) + "\n"


def main() -> int:
    (HERE / f"{NAME}.ptx").write_text(generate())
    (HERE / f"{NORM_NAME}.ptx").write_text(generate(norm=True, pdl=True))
    (HERE / f"{SPLIT_NAME}.ptx").write_text(generate_split())
    (HERE / f"{REGS_NAME}.ptx").write_text(generate(norm=True, pdl=True, reg_rows=True))
    print(f"wrote {NAME}.ptx, {NORM_NAME}.ptx, {SPLIT_NAME}.ptx, {REGS_NAME}.ptx")  # (GATE_NAME: a candidate, built by its experiment scripts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
