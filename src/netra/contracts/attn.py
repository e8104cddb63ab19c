"""Contract of the attention family: Qwen3.6's gated full-attention decode step on a paged KV cache (10 of the 40
layers). The model's attention shapes are written here once; kernels/sm_90a/attention/gen_attn_decode.py reads them to
emit the PTX."""

from __future__ import annotations

import dataclasses

from .spec import Contract, Scalar, Tensor

ATTN_NAME = "attn_decode_d256"
Q_HEADS, KV_HEADS, HEAD_DIM, ROTARY = 16, 2, 256, 64  # partial rotary: the first 64 of 256 dims, rotate_half
PAGE = 64  # tokens per cache page: one CTA each
WARPS = 4  # 16 tokens of the page each
PART = Q_HEADS // KV_HEADS * HEAD_DIM + 2 * Q_HEADS // KV_HEADS  # one page's partial: O [8, 256], then m [8], l [8]
SMEM = WARPS * 2 * 16 * HEAD_DIM * 2  # each warp's 16 K rows and 16 V rows (bf16): 64 KB
BATCH = tuple(range(1, 33))
MAX_PAGES = 64  # pages per sequence: context up to 4096 (the runner's is 1024)

# Tolerance against float64 (lifecycle.metrics.rel_err, max |out - ref| / max |ref|): out is rounded to BF16 once
# (2^-8 relative at most); q after RoPE, the new k and the softmax weights p are rounded to BF16 on the way into the
# mma (as the model rounds q and k), each moving o by ~2^-9 relative; the cache rows written are BF16 of the float64
# RoPE (2^-8 at most).
ATTN_TOL = 9e-3

ATTN_DECODE = Contract(
    name=ATTN_NAME,
    family="attention",
    summary="gated attention decode on a paged BF16 KV cache: RoPE on q and k at each sequence's position, k and v "
    "appended to the cache, GQA softmax(q K^T / 16) V over positions 0..pos, out = that * sigmoid(gate); BF16 out",
    params=(
        Tensor("q", "bf16", ("B", Q_HEADS, HEAD_DIM), "in", doc="q_norm'ed q, before RoPE"),
        Tensor("k", "bf16", ("B", KV_HEADS, HEAD_DIM), "in", doc="k_norm'ed k, before RoPE"),
        Tensor("v", "bf16", ("B", KV_HEADS, HEAD_DIM), "in", strides=("v_row", HEAD_DIM, 1),
               doc="a view of the q | k | v projection's output"),
        Tensor("gate", "bf16", ("B", Q_HEADS, HEAD_DIM), "in", strides=("gate_row", "gate_head", 1),
               doc="a view of q_proj's output: head h's gate beside its q"),
        Tensor("cos", "f32", ("T", ROTARY), "in", doc="RoPE table, rotate_half layout (cos repeated over the halves)"),
        Tensor("sin", "f32", ("T", ROTARY), "in"),
        Tensor("positions", "i64", ("B",), "in", align=8,
               doc="each sequence's new token's position: valid in [0, min(NP * 64, T)), else NaN out"),
        Tensor("block_table", "i32", ("B", "NP"), "in", align=4,
               doc="each sequence's pages in order: valid in [0, P), else NaN out"),
        Tensor("k_pages", "bf16", ("P", PAGE, KV_HEADS, HEAD_DIM), "inout", doc="the cache: row pos written"),
        Tensor("v_pages", "bf16", ("P", PAGE, KV_HEADS, HEAD_DIM), "inout"),
        Tensor("out", "bf16", ("B", Q_HEADS * HEAD_DIM), "out"),
        Tensor("ws", "f32", ("B", KV_HEADS, "NP", PART), "inout",
               doc="scratch, the caller's, for this kernel alone: each page's partial (O, m, l); not a result"),
        Tensor("counters", "i32", ("B", KV_HEADS), "inout", align=4,
               doc="arrival counters: zero at allocation, and every launch leaves them zero"),
        Scalar("v_row", "u32", value="v_row"),
        Scalar("gate_row", "u32", value="gate_row"),
        Scalar("gate_head", "u32", value="gate_head"),
        Scalar("NP", "u32", value="NP"),
        Scalar("P", "u32", value="P"),
        Scalar("T", "u32", value="T"),
    ),
    dims={"B": BATCH, "NP": range(1, MAX_PAGES + 1), "P": range(1, 1 << 24), "T": range(1, 1 << 24)},
    stride_multiple={"v_row": 8, "gate_row": 8, "gate_head": 8},
    grid=("NP", str(KV_HEADS), "B"),
    threads=32 * WARPS,
    reduction_order="per (sequence, kv head): each warp's 16 tokens by mma.sync (dims in 16 k-steps of a fixed "
    "permutation); the 4 warps' (m, l, O) in warp order; the pages' partials in page order by the last CTA to arrive",
    tolerance=ATTN_TOL,
    deterministic=True,
    # an upper bound: every page of every sequence (the cases put each position in its last page) and its partial
    bytes_read=f"B * NP * {PAGE * KV_HEADS * HEAD_DIM * 4} + B * {2 * Q_HEADS * HEAD_DIM * 2 + 2 * KV_HEADS * HEAD_DIM * 2 + ROTARY * 8 + 8} "
    f"+ B * NP * {4 + KV_HEADS * PART * 4}",
    bytes_written=f"B * ({Q_HEADS * HEAD_DIM * 2 + 2 * KV_HEADS * HEAD_DIM * 2 + KV_HEADS * 4}) + B * NP * {KV_HEADS * PART * 4}",
    max_registers=128,  # 120 used: 4 CTAs a SM by registers (3 by shared memory)
    max_static_smem=512,  # ml (256 B) and the ticket; ptxas reports 384
    dynamic_smem=SMEM,
    op="attention_decode_paged",
    pdl="positions, the block table, cos / sin and the cache pages (cp.async) before griddepcontrol.wait; q, k, v and "
    "gate after it, then launch_dependents. Safe where the kernel launched just before triggers its dependents only "
    "after its own wait and nothing in flight writes the cache, positions or tables (the decode runner: qk_rmsnorm)",
    reference="netra.reference.attn.decode_step (float64)",
    peers=("framework_op", "sdpa_dense"),
    cases_override=tuple({"B": b, "NP": n, "P": p, "T": t} for b, n, p, t in (
        (1, 1, 3, 64), (1, 2, 5, 128), (1, 16, 21, 1024), (3, 5, 17, 320), (8, 16, 133, 1024), (32, 4, 131, 256),
        (32, 16, 515, 1024))),
    sanitize_cases=({"B": 3, "NP": 5, "P": 17, "T": 320}, {"B": 8, "NP": 16, "P": 133, "T": 1024}),
)

# The same step with q_norm and k_norm inside (the runner launched qk_rmsnorm_d256 before it): q and k are the q | k | v
# projection's rows, each head normalized as qk_rmsnorm_d256 does it (the same sums in the same order, so its q and k are
# those bits) and rounded to BF16 before RoPE.
ATTN_QKNORM_NAME = "attn_decode_d256_qknorm"
_QK_PARAMS = {
    "q": Tensor("q", "bf16", ("B", Q_HEADS, HEAD_DIM), "in", strides=("q_row", "q_head", 1),
                doc="q before q_norm: a view of q_proj's output, head h beside its gate"),
    "k": Tensor("k", "bf16", ("B", KV_HEADS, HEAD_DIM), "in", strides=("k_row", HEAD_DIM, 1),
                doc="k before k_norm: a view of the q | k | v projection's output"),
}
ATTN_DECODE_QKNORM = dataclasses.replace(
    ATTN_DECODE,
    name=ATTN_QKNORM_NAME,
    summary="gated attention decode on a paged BF16 KV cache with the heads' q_norm and k_norm (zero-centred RMSNorm "
    "over 256, as qk_rmsnorm_d256) first: then RoPE at each sequence's position, k and v appended to the cache, GQA "
    "softmax(q K^T / 16) V over positions 0..pos, out = that * sigmoid(gate); BF16 out",
    params=tuple(_QK_PARAMS.get(p.name, p) for p in ATTN_DECODE.params if isinstance(p, Tensor))[:4]
    + (Tensor("q_norm", "bf16", (HEAD_DIM,), "in"), Tensor("k_norm", "bf16", (HEAD_DIM,), "in"))
    + tuple(p for p in ATTN_DECODE.params if isinstance(p, Tensor))[4:]
    + tuple(p for p in ATTN_DECODE.params if isinstance(p, Scalar))
    + (Scalar("q_row", "u32", value="q_row"), Scalar("q_head", "u32", value="q_head"),
       Scalar("k_row", "u32", value="k_row"), Scalar("eps", "f32")),
    stride_multiple={**ATTN_DECODE.stride_multiple, "q_row": 8, "q_head": 8, "k_row": 8},
    bytes_read=ATTN_DECODE.bytes_read + f" + {2 * HEAD_DIM * 2}",
    max_static_smem=512 + 2 * HEAD_DIM * 4,  # and 1 + w of both norms as f32 (2 KB)
    op="attention_decode_paged_qknorm",
    pdl="positions, the block table, cos / sin, the norm weights and the cache pages (cp.async) before "
    "griddepcontrol.wait; q, k, v and gate after it, then launch_dependents. Safe where the kernel launched just before "
    "triggers its dependents only after its own wait and nothing in flight writes the cache, positions or tables (the "
    "decode runner: the q | k | v projection)",
    reference="netra.reference.norm.qk_rmsnorm then netra.reference.attn.decode_step (float64)",
    peers=("framework_op", "unfused"),  # unfused: qk_rmsnorm_d256, then attn_decode_d256 (the runner's two launches)
)

# The cluster builds (attn_decode_d256_qknorm_c4, _c8): the qknorm step with C CTAs per (sequence, kv head), one
# cluster each. CTA rank r takes pages r, r + C, .. up to pos's page, streaming the next page's K and V while it
# computes this one, and merges them online; the CTAs then combine their partials through distributed shared memory,
# each CTA C-th of the outputs. No scratch, no counters, no second wave: the grid is C x 2 x B whatever the context.
ATTN_CLUSTER_SIZES = (4, 8)
ATTN_CLUSTER_REGS = 168  # 3 CTAs a SM by shared memory: 3 x 128 x 168 registers fit the 64 K


# what a page walk reads besides partials: K and V of every page, q | k | v, gate, cos / sin, positions, the block table
# and the two norm weights
_WALK_READ = (f"B * NP * {PAGE * KV_HEADS * HEAD_DIM * 4} + B * {2 * Q_HEADS * HEAD_DIM * 2 + 2 * KV_HEADS * HEAD_DIM * 2 + ROTARY * 8 + 8} "
              f"+ B * NP * 4 + {2 * HEAD_DIM * 2}")


def _walk_order(c: int, who: str) -> str:
    """The reduction order of a page walk by ``c`` CTAs (``who``: what they are, and how their partials meet)."""
    return (f"per (sequence, kv head), {who}; CTA r: pages r, r + {c}, .. in order, each warp's 16 tokens of a page by "
            "mma.sync (dims in 16 k-steps of a fixed permutation), merged online per warp (running max, l and O rescaled "
            "by 2^(m_old - m_new)); the 4 warps' (m, l, O) in warp order; the CTAs' partials in rank order")


def _cluster(c: int) -> Contract:
    q = ATTN_DECODE_QKNORM
    return dataclasses.replace(
        q,
        name=f"{ATTN_QKNORM_NAME}_c{c}",
        summary=q.summary + f"; {c} CTAs per (sequence, kv head) in one cluster, combined through shared memory",
        params=tuple(p for p in q.params if p.name not in ("ws", "counters")),
        grid=(str(c), str(KV_HEADS), "B"),
        reduction_order=_walk_order(c, f"a cluster of {c} CTAs") + " (the max first, then O and l)",
        bytes_read=_WALK_READ,
        bytes_written=f"B * ({Q_HEADS * HEAD_DIM * 2 + 2 * KV_HEADS * HEAD_DIM * 2})",
        max_registers=ATTN_CLUSTER_REGS,
        max_static_smem=512 + 2 * HEAD_DIM * 4 + 2 * 8 * 4 + -(-MAX_PAGES // c) * 4,  # ml, nw, the CTA's M and L, its page ids
        peers=("framework_op", "unfused", "qknorm"),  # qknorm: attn_decode_d256_qknorm (one page a CTA, ws and counters)
        # launched plainly, PDL engine included (no griddepcontrol.wait in the PTX), as the long builds since dc4f533:
        # launched with PDL the clusters start while the q | k | v projection holds the SMs and the walk late in a 4K cache
        # was 27 / 62 us a step slower at batch 1 / 32 (experiments/decode/step_ab_current_cluster_plain*_ctx4096_113d9d7
        # .json). Since f6f3e85 the PTX runs griddepcontrol.launch_dependents at its start, so o_proj (a PDL launch) starts
        # beside the walk and streams its weights before its own wait, which still waits for this grid to complete
        # (batch-1 steps 3-6 us less: experiments/decode/step_ab_current_attn_trigger_*.json). Nothing here reads
        # anything before a wait, so pdl stays empty: how it is launched is unchanged.
        pdl="",
        cases_override=q.cases_override + tuple({"B": b, "NP": n, "P": p, "T": t} for b, n, p, t in (
            (1, 64, 67, 4096), (8, 64, 515, 4096), (32, 64, 2051, 4096))),
    )


ATTN_CLUSTER = {c: _cluster(c) for c in ATTN_CLUSTER_SIZES}
# A rejected candidate, not registered: clusters of 6, so that at B = 32 the grid fills 3 CTAs a SM (384 of 396) where c4
# leaves ~2. Registered and gated at 74282c6 (experiments/attention/cluster6_record_74282c6.json: check, sanitizers, GPU
# test), then slower than c4 where it was meant to help: 29.40 against 26.54 us at B = 32, 16 pages, and 20-120 us per
# batch-32 step (docs/notes/attention.md). The generator emits it from this contract.
# Clusters of 16 (non-portable; ranks 8..15 walk pages but combine nothing), rejected too: registered at 97ea05b
# (experiments/attention/cluster16_record_97ea05b.json), its check failed (9.82e-3 against 9e-3 at B = 1, 2 pages, seed
# 0: the c8 build's arithmetic there, on its own input draw) and the step gained 20 us at batch 1 at 4K positions only.
ATTN_CLUSTER_CANDIDATES = {6: _cluster(6), 16: _cluster(16)}


# Candidates, not registered (experiments/attention/split_variant_606fb91.json; docs/notes/attention.md): the split
# builds attn_decode_d256_qknorm_s4, _s8, the cluster builds' page walk by C CTAs per (sequence, kv head) without a
# cluster; each CTA with pages writes one partial to ws, the last to arrive combines them (at most C, in rank order) as
# attn_decode_d256 combines its pages. A CTA without pages exits at once, as there. The generator emits them from these.
ATTN_SPLIT_SIZES = (4, 8)


def _parts(c: int) -> str:
    """min(NP, c) as a contract expression (no builtins there): the partials of a (sequence, kv head)."""
    return f"((NP < {c}) * NP + (NP >= {c}) * {c})"


def _split(c: int) -> Contract:
    q = ATTN_DECODE_QKNORM
    return dataclasses.replace(
        q,
        name=f"{ATTN_QKNORM_NAME}_s{c}",
        summary=q.summary + f"; {c} CTAs per (sequence, kv head), their partials combined by the last to arrive",
        grid=(str(c), str(KV_HEADS), "B"),
        reduction_order=_walk_order(c, f"{c} CTAs") + " by the last CTA to arrive",
        bytes_read=_WALK_READ + f" + B * {_parts(c)} * {KV_HEADS * PART * 4}",
        bytes_written=f"B * ({Q_HEADS * HEAD_DIM * 2 + 2 * KV_HEADS * HEAD_DIM * 2 + KV_HEADS * 4}) + B * {_parts(c)} * "
        f"{KV_HEADS * PART * 4}",
        max_registers=ATTN_CLUSTER_REGS,
        max_static_smem=512 + 2 * HEAD_DIM * 4 + MAX_PAGES // c * 4,  # ml and the ticket, nw, its page ids
        peers=("framework_op", "unfused", "qknorm"),
        cases_override=ATTN_CLUSTER[c].cases_override,
    )


ATTN_SPLIT = {c: _split(c) for c in ATTN_SPLIT_SIZES}


# The long-context builds (attn_decode_d256_qknorm_c4_long / _c8_long): the cluster builds' walk by up to S clusters per
# (sequence, kv head) instead of one, so that a long context is walked by up to C x S CTAs, not C (at B = 1 and 4K
# positions c8's 16 CTAs walk 8 pages each, one after another: latency-bound, 12% of the HBM's bandwidth). The caller
# picks S (ws's third dimension: the grid is C x S x 2 x B); each launch takes, per sequence, S_eff = min(S, ceil(n / (C
# x LONG_PAGES))) clusters for its n pages (so at most LONG_PAGES pages a CTA before another cluster joins) and the
# other clusters exit at once. With S_eff = 1 the cluster's arithmetic is the cluster build's (the same bits); with
# S_eff > 1 cluster j's CTA rank r writes its slice of the cluster's partial (O unnormalized, M and L) to ws[b, kvh, j],
# and the last of the S_eff clusters to arrive on counter (b, kvh, r) combines the slice over clusters 0 .. S_eff - 1
# in order: deterministic whichever arrives last. Up to LONG_MAX_PAGES pages a sequence: the model's 262144 positions.
LONG_MAX_PAGES = 4096
LONG_PAGES = 4  # pages a CTA (C x LONG_PAGES a cluster) before one more cluster of the sequence joins
LONG_SPLITS = {8: 16, 4: 8}  # the most clusters per (sequence, kv head): ws holds one partial each


def _long(c: int) -> Contract:
    q = ATTN_DECODE_QKNORM
    s_max = LONG_SPLITS[c]
    part = f"B * S * {KV_HEADS * PART * 4} + B * {KV_HEADS * c * 4}"  # an upper bound: S_eff <= S partials; counters
    return dataclasses.replace(
        q,
        name=f"{ATTN_QKNORM_NAME}_c{c}_long",
        summary=q.summary + f"; up to S clusters of {c} CTAs per (sequence, kv head), each combining its CTAs' partials "
        "through shared memory, the clusters' partials combined by the last to arrive (long contexts)",
        params=tuple(p for p in q.params if p.name not in ("ws", "counters") and isinstance(p, Tensor))
        + (Tensor("ws", "f32", ("B", KV_HEADS, "S", PART), "inout",
                  doc="scratch, the caller's, for this kernel alone: each cluster's partial (O, m, l); not a result"),
           Tensor("counters", "i32", ("B", KV_HEADS, c), "inout", align=4,
                  doc="arrival counters, one a (sequence, kv head, rank): zero at allocation, every launch leaves them zero"))
        + tuple(p for p in q.params if isinstance(p, Scalar)),
        dims={"B": BATCH, "NP": range(1, LONG_MAX_PAGES + 1), "S": range(1, s_max + 1), "P": range(1, 1 << 24),
              "T": range(1, 1 << 24)},
        grid=(f"{c} * S", str(KV_HEADS), "B"),
        reduction_order=_walk_order(c, f"S_eff clusters of {c} CTAs, walker j {c} + r taking pages j {c} + r, "
                                       f"+ {c} S_eff, ..") + " (the max first, then O and l) within a cluster; the "
        "clusters' partials in cluster order by the last to arrive",
        bytes_read=_WALK_READ + f" + {part}",
        bytes_written=f"B * ({Q_HEADS * HEAD_DIM * 2 + 2 * KV_HEADS * HEAD_DIM * 2}) + {part}",
        max_registers=ATTN_CLUSTER_REGS,
        # ml, nw, the CTA's M and L, the ticket, its page ids (pages r, r + C S_eff, .. : at most LONG_MAX_PAGES / C)
        max_static_smem=512 + 2 * HEAD_DIM * 4 + 2 * 8 * 4 + 4 + LONG_MAX_PAGES // c * 4,
        peers=("framework_op", "one_cluster", "cluster"),  # one_cluster: this kernel at S = 1; cluster: _c{c} (NP <= 64)
        # launched plainly, PDL engine included (no griddepcontrol in the PTX): a PDL launch lets the grid start while the
        # q | k | v projection still holds the SMs, and its clusters were then placed so that late in long caches the
        # step lost 0.22 ms at batch 1 (128K) and 0.62 at batch 32 (32K) against plain launches, for 13-18 us gained
        # early (experiments/decode/step_ab_current_long_plain*_d47926b.json; docs/notes/attention.md, after 7b4cfc9)
        pdl="",
        # S as the op picks it (netra.decode.ops.attn_splits: about one CTA a SM, at most the CTAs its clusters place
        # one a SM where S > 2), and the largest S once
        cases_override=tuple({"B": b, "NP": n, "S": s, "P": p, "T": n * PAGE} for b, n, s, p in (
            ((1, 1, 7, 3), (1, 16, 7, 21), (1, 64, 7, 67), (1, 512, 7, 515), (1, 512, s_max, 515), (1, 2048, 7, 2051),
             (3, 200, 2, 607), (4, 512, 2, 2051)) if c == 8 else
            ((5, 1, 3, 7), (8, 16, 2, 133), (8, 64, 2, 515), (8, 512, 2, 4099), (16, 512, 1, 8195),
             (32, 128, 1, 4099), (7, 333, s_max, 2333)))),
        sanitize_cases=({"B": 1, "NP": 200, "S": s_max, "P": 203, "T": 200 * PAGE},
                        {"B": 3, "NP": 100, "S": 2, "P": 307, "T": 100 * PAGE}),
    )


ATTN_LONG = {c: _long(c) for c in ATTN_CLUSTER_SIZES}

CONTRACTS = (ATTN_DECODE, ATTN_DECODE_QKNORM, *ATTN_CLUSTER.values(), *ATTN_LONG.values())
