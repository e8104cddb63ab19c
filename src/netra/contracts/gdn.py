"""Contracts of the Gated DeltaNet family: Qwen3.6's linear-attention decode step on
slot-indexed state pools. The model's GDN shapes are written here once;
kernels/sm_90a/gdn/gen_gdn_decode.py reads them to emit the PTX."""

from __future__ import annotations

import dataclasses

from .spec import Contract, Scalar, Tensor

NK, NV, DK, DV, KW = 16, 32, 128, 128, 4  # key heads, value heads, key/value head dims, conv width
KEY_DIM, VALUE_DIM = NK * DK, NV * DV  # 2048, 4096
CONV_DIM = 2 * KEY_DIM + VALUE_DIM  # 8192 conv channels: q | k | v
QKVZ = CONV_DIM + VALUE_DIM  # the fused in_proj_qkv | in_proj_z output row: 12288
BATCH = tuple(range(1, 33))
MAX_TOKENS = 16  # verification: draft tokens per sequence in one launch
STATE_BYTES = NV * DK * DV * 4  # one sequence's recurrent state, fp32: 2 MiB

# Tolerance against float64: the output is rounded to BF16 once (2^-8 = 3.9e-3 relative at
# most), and the conv output is rounded to BF16 as the model does, where an fp32 sum on the
# other side of a rounding boundary from the float64 one moves a channel by one BF16 step
# (measured 1e-7 to 2e-4 on the state, 1e-3 to 3.5e-3 on the output).
GDN_TOL = 5e-3

GDN_DECODE_B32 = Contract(
    name="gdn_decode_b32",
    family="gdn",
    summary="Gated DeltaNet decode step of B <= 32 sequences on slot-indexed pools: conv update + SiLU, "
    "q/k l2norm, g and beta, the delta rule on the fp32 state in place, gated RMSNorm with silu(z); BF16 o",
    params=(
        Tensor("qkv", "bf16", ("B", CONV_DIM), "in", strides=("qkv_row", 1), doc="in_proj_qkv output (a view of qkvz)"),
        Tensor("z", "bf16", ("B", VALUE_DIM), "in", strides=("z_row", 1), doc="in_proj_z output (a view of qkvz)"),
        Tensor("b_in", "bf16", ("B", NV), "in", align=4),
        Tensor("a_in", "bf16", ("B", NV), "in", align=4),
        Tensor("conv_w", "bf16", (CONV_DIM, KW), "in", align=8),
        Tensor("a_log", "f32", (NV,), "in", align=4),
        Tensor("dt_bias", "f32", (NV,), "in", align=4),
        Tensor("norm_w", "bf16", (DV,), "in", align=4),
        Tensor("conv_pool", "bf16", ("P", CONV_DIM, KW - 1), "inout", align=4, doc="conv windows, by slot"),
        Tensor("state_pool", "f32", ("P", NV, DK, DV), "inout", align=4, doc="recurrent states, by slot"),
        Tensor("slots", "i64", ("B",), "in", align=8, doc="each sequence's pool slot, in [0, P): else NaN out"),
        Tensor("out", "bf16", ("B", VALUE_DIM), "out"),
        Scalar("qkv_row", "u32", value="qkv_row"),
        Scalar("z_row", "u32", value="z_row"),
        Scalar("pool_slots", "u32", value="P"),
        Scalar("eps", "f32"),
    ),
    dims={"B": BATCH, "P": range(1, 1 << 16)},
    grid=("128 * B", "1", "1"),
    threads=128,
    reduction_order="clusters of 8 CTAs per (sequence, key head); q/k l2norm sums: shfl.bfly 16..1 then the 4 "
    "warp sums in warp order (the same in every rank); S^T k and S^T q: each thread sums its 32 rows in order, "
    "the 4 warp partials added in warp order; the head's sum of o^2: the 4 ranks' sums in rank order",
    tolerance=GDN_TOL,
    deterministic=True,
    bytes_read=f"B * ({STATE_BYTES} + {CONV_DIM * (KW - 1) * 2} + {QKVZ * 2} + {NV * 4} + 8) + {CONV_DIM * KW * 2 + NV * 8 + DV * 2}",
    bytes_written=f"B * ({STATE_BYTES} + {CONV_DIM * (KW - 1) * 2} + {VALUE_DIM * 2})",
    max_registers=80,
    max_static_smem=1792,
    op="gdn_decode",
    reference="netra.reference.gdn.decode_step (float64); transformers 5.17.0 causal_conv1d_update, "
    "torch_recurrent_gated_delta_rule (fp32 inside) and Qwen3_5MoeRMSNormGated fed float64",
    peers=("framework_op", "fla_0_6_0"),
    cases_override=tuple({"B": b, "P": p} for b, p in ((1, 3), (2, 5), (4, 9), (8, 11), (16, 37), (32, 40))),
)

# The same step for the decode runner's PDL engine (gen_gdn_decode.generate(pdl=True)): the state is
# loaded while the kernel before it (bf16_linear2) finishes. Measured in a chain of whole GDN mixers:
# experiments/gdn/pdl_chain_variant.json (19.60 us per layer plain, 18.28 FP8-only PDL, 16.66 chain).
GDN_DECODE_B32_PDL = dataclasses.replace(
    GDN_DECODE_B32,
    name="gdn_decode_b32_pdl",
    summary=GDN_DECODE_B32.summary + "; the build for programmatic dependent launch (the decode runner's PDL engine)",
    pdl="the slot ids, A_log, dt_bias, the norm and conv weights, the conv windows and the state slices before "
    "griddepcontrol.wait; qkv, z, b, a after it by coherent loads, then launch_dependents. Safe only where the kernel launched "
    "just before does not write the pools and triggers its dependents only after its own griddepcontrol.wait, so "
    "every earlier grid (the last writer of the pools) has completed: the decode runner, where it is bf16_linear2. "
    "netra::gdn_decode picks this kernel only while set_pdl is on",
)

# the verification kernels' scalars: token-major row strides of qkv and z, T, the pool size, eps
_VERIFY_SCALARS = (
    Scalar("qkv_seq", "u32", value="qkv_seq"),
    Scalar("qkv_tok", "u32", value="qkv_tok"),
    Scalar("z_seq", "u32", value="z_seq"),
    Scalar("z_tok", "u32", value="z_tok"),
    Scalar("tokens", "u32", value="T"),
    Scalar("pool_slots", "u32", value="P"),
    Scalar("eps", "f32"),
)

GDN_VERIFY_T16 = Contract(
    name="gdn_verify_t16",
    family="gdn",
    summary="Gated DeltaNet step for T <= 16 consecutive (draft) tokens of B <= 32 sequences: the decode step per "
    "token, the state and conv window after token t written to pool slot slots_out[b, t] (rollback = pick a slot)",
    params=(
        Tensor("qkv", "bf16", ("B", "T", CONV_DIM), "in", strides=("qkv_seq", "qkv_tok", 1)),
        Tensor("z", "bf16", ("B", "T", VALUE_DIM), "in", strides=("z_seq", "z_tok", 1)),
        Tensor("b_in", "bf16", ("B", "T", NV), "in", align=4),
        Tensor("a_in", "bf16", ("B", "T", NV), "in", align=4),
        Tensor("conv_w", "bf16", (CONV_DIM, KW), "in", align=8),
        Tensor("a_log", "f32", (NV,), "in", align=4),
        Tensor("dt_bias", "f32", (NV,), "in", align=4),
        Tensor("norm_w", "bf16", (DV,), "in", align=4),
        Tensor("conv_pool", "bf16", ("P", CONV_DIM, KW - 1), "inout", align=4),
        Tensor("state_pool", "f32", ("P", NV, DK, DV), "inout", align=4),
        Tensor("slot_in", "i64", ("B",), "in", align=8, doc="the slot each sequence starts from (read only)"),
        Tensor("slots_out", "i64", ("B", "T"), "in", align=8, doc="the slot that receives the state after token t"),
        Tensor("out", "bf16", ("B", "T", VALUE_DIM), "out"),
        *_VERIFY_SCALARS,
    ),
    dims={"B": BATCH, "T": tuple(range(1, MAX_TOKENS + 1)), "P": range(1, 1 << 16)},
    grid=("128 * B", "1", "1"),
    threads=128,
    reduction_order="as gdn_decode_b32 for every token, tokens in order (T = 1 is bitwise gdn_decode_b32, T tokens "
    "bitwise T decode steps)",
    tolerance=GDN_TOL,
    deterministic=True,
    bytes_read=f"B * ({STATE_BYTES} + {CONV_DIM * (KW - 1) * 2} + 8 + T * ({QKVZ * 2} + {NV * 4} + 8)) "
    f"+ {CONV_DIM * KW * 2 + NV * 8 + DV * 2}",
    bytes_written=f"B * T * ({STATE_BYTES} + {CONV_DIM * (KW - 1) * 2} + {VALUE_DIM * 2})",
    max_registers=128,
    max_static_smem=22528,
    op="gdn_verify",
    reference="netra.reference.gdn.verify_steps (float64: decode_step per token); transformers' functions per token",
    peers=("framework_op",),
    cases_override=tuple({"B": b, "T": t, "P": b * (t + 1)} for b, t in ((1, 1), (1, 4), (1, 16), (4, 16), (32, 4))),
)

# Verification in the chunk form (kernels/sm_90a/gdn/gen_gdn_verify_chunk.py): the state is read
# once and, per token, only what restores the state after any accepted prefix is written; the
# accepted prefix's state and conv window are then written by gdn_commit_t16.
RESTORE_BYTES = (NK * DK + NV * DV + NV) * 4  # per token and sequence: k, delta, the cumulative log2 decay
_RESTORE = (
    Tensor("ksave", "f32", ("B", "T", NK, DK), "out", doc="the l2-normed k of every token"),
    Tensor("dsave", "f32", ("B", "T", NV, DV), "out",
           doc="delta_t = beta_t (v_t - (exp(g_t) S_(t-1))^T k_t) of every token"),
    Tensor("gsave", "f32", ("B", "T", NV), "out", align=4, doc="c_t: log2 of the decay product through token t"),
)
VERIFY_CASES = tuple({"B": b, "T": t, "P": b * (t + 1)} for b, t in ((1, 1), (1, 4), (1, 16), (4, 16), (32, 4)))


def _verify_chunk(name: str, threads: int, note: str) -> Contract:
    return Contract(
        name=name,
        family="gdn",
        summary="Gated DeltaNet verification of T <= 16 tokens of B <= 32 sequences in the chunk form: out for every "
        "token and the restore data (k, delta, cumulative log2 decay per token); the pools are only read" + note,
        params=(
            Tensor("qkv", "bf16", ("B", "T", CONV_DIM), "in", strides=("qkv_seq", "qkv_tok", 1), align=4),
            Tensor("z", "bf16", ("B", "T", VALUE_DIM), "in", strides=("z_seq", "z_tok", 1)),
            Tensor("b_in", "bf16", ("B", "T", NV), "in", align=4),
            Tensor("a_in", "bf16", ("B", "T", NV), "in", align=4),
            Tensor("conv_w", "bf16", (CONV_DIM, KW), "in", align=16),
            Tensor("a_log", "f32", (NV,), "in", align=4),
            Tensor("dt_bias", "f32", (NV,), "in", align=4),
            Tensor("norm_w", "bf16", (DV,), "in", align=4),
            Tensor("conv_pool", "bf16", ("P", CONV_DIM, KW - 1), "in", align=16),
            Tensor("state_pool", "f32", ("P", NV, DK, DV), "in", align=16),
            Tensor("slot_in", "i64", ("B",), "in", align=8, doc="each sequence's pool slot, in [0, P): else NaN out"),
            Tensor("out", "bf16", ("B", "T", VALUE_DIM), "out"),
            *_RESTORE,
            *_VERIFY_SCALARS,
        ),
        dims={"B": BATCH, "T": tuple(range(1, MAX_TOKENS + 1)), "P": range(1, 1 << 16)},
        grid=("128 * B", "1", "1"),
        threads=threads,
        reduction_order="clusters of 4 CTAs per (sequence, value head); q/k sums of squares: each thread's 2 channels, "
        "shfl.bfly, then the 2 warps' sums in order; S_0^T k_t, S_0^T q_t: 4 chains of 8 rows per thread, then "
        "(0 + 1) + (2 + 3), then the 4 row warps in order; Gram products: 4 chains of 32 channels, (0 + 1) + (2 + 3); "
        "delta_t: beta_t (v_t - e_t kv0_t), then -A[t][s] delta_s for s = 0 .. t - 1 in order; o_t: e_t qs0_t, then "
        "P[t][s] delta_s for s = 0 .. t in order; the head's sum of o^2: the 4 ranks in order",
        tolerance=GDN_TOL,
        deterministic=True,
        bytes_read=f"B * ({STATE_BYTES} + {CONV_DIM * (KW - 1) * 2} + 8 + T * ({QKVZ * 2} + {NV * 4}))",
        bytes_written=f"B * T * ({VALUE_DIM * 2} + {RESTORE_BYTES})",
        stride_multiple={"qkv_seq": 2, "qkv_tok": 2},  # q/k channel pairs by 4-byte loads
        max_registers=128,
        max_static_smem=42 * 1024,
        op="gdn_verify_chunk",
        reference="netra.reference.gdn.verify_restore (float64: the sequential rule per token, pools untouched)",
        peers=("framework_op", "gdn_verify_t16"),
        cases_override=VERIFY_CASES,
    )


GDN_VERIFY_CHUNK_T16 = _verify_chunk("gdn_verify_chunk_t16", 128, "")
GDN_VERIFY_CHUNK_T16_W8 = _verify_chunk("gdn_verify_chunk_t16_w8", 256, "; 8 warps (the op's choice at B = 1)")

GDN_COMMIT_T16 = Contract(
    name="gdn_commit_t16",
    family="gdn",
    summary="the conv window and state after the first accepted[b] (0..T) verified tokens of sequence b, from slot_in "
    "and gdn_verify_chunk's restore data, into pool slot slot_out (slot_in itself: in place)",
    params=(
        Tensor("qkv", "bf16", ("B", "T", CONV_DIM), "in", strides=("qkv_seq", "qkv_tok", 1), align=4),
        Tensor("conv_pool", "bf16", ("P", CONV_DIM, KW - 1), "inout", align=16),
        Tensor("state_pool", "f32", ("P", NV, DK, DV), "inout", align=16),
        Tensor("slot_in", "i64", ("B",), "in", align=8),
        Tensor("slot_out", "i64", ("B",), "in", align=8,
               doc="distinct across the sequences and not another sequence's slot_in"),
        Tensor("accepted", "i64", ("B",), "in", align=8, doc="0..T; else nothing is written for that sequence"),
        # k and delta by 16-byte cp.async; c by scalar loads
        *(Tensor(t.name, t.dtype, t.shape, "in", align=4 if t.name == "gsave" else 16, doc=t.doc) for t in _RESTORE),
        Scalar("qkv_seq", "u32", value="qkv_seq"),
        Scalar("qkv_tok", "u32", value="qkv_tok"),
        Scalar("tokens", "u32", value="T"),
        Scalar("pool_slots", "u32", value="P"),
    ),
    dims={"B": BATCH, "T": tuple(range(1, MAX_TOKENS + 1)), "P": range(1, 1 << 16)},
    grid=("128 * B", "1", "1"),
    threads=128,
    reduction_order="S_j = 2^c_(j-1) S_0, then the accepted tokens' terms 2^(c_(j-1) - c_s) k_s delta_s in token order",
    tolerance=GDN_TOL,
    deterministic=True,
    bytes_read=f"B * ({STATE_BYTES} + {CONV_DIM * (KW - 1) * 2} + T * {RESTORE_BYTES})",
    bytes_written=f"B * ({STATE_BYTES} + {CONV_DIM * (KW - 1) * 2})",
    max_registers=64,
    max_static_smem=11 * 1024,
    op="gdn_commit",
    reference="netra.reference.gdn.commit (float64 on the same restore data)",
    peers=("framework_op",),
    cases_override=VERIFY_CASES,
)

# The state slice through shared memory (gen_gdn_decode.generate(smem_state=True)): 48 registers, so 10 CTAs
# per SM instead of 7. netra::gdn_decode takes it from GDN_SMEM_B sequences: measured against the
# register builds (experiments/gdn/decode_variant_smem_0a74e03.json, us, plain / as a PDL chain): B = 8
# 12.86 / 12.29 -> 11.52 / 11.10, B = 16 23.51 / 22.73 -> 22.17 / 21.54, B = 32 42.21 / 41.89 -> 41.04 /
# 40.80; B <= 4 0.1-0.4 slower (the shared-memory round trip). Bitwise the register builds.
GDN_SMEM_B = 8
_SMEM = "; the state slice through shared memory (cp.async, 10 CTAs per SM): netra::gdn_decode's build from 8 sequences"
GDN_DECODE_B32_SMEM = dataclasses.replace(GDN_DECODE_B32, name="gdn_decode_b32_smem", summary=GDN_DECODE_B32.summary + _SMEM,
                                          max_registers=48, max_static_smem=18 * 1024)
GDN_DECODE_B32_SMEM_PDL = dataclasses.replace(GDN_DECODE_B32_PDL, name="gdn_decode_b32_smem_pdl",
                                              summary=GDN_DECODE_B32_PDL.summary + _SMEM, max_registers=48,
                                              max_static_smem=18 * 1024)

# The smem build under PDL without waiting for its producer's grid (gen_gdn_decode.generate(spin=True)): each thread
# polls its own q | k | v, z, b and a values (ld.relaxed.gpu) until they are not TAG, and writes TAG back after reading
# them, so the recurrence starts as the in_proj's rows land. The producer / consumer protocol, held by the decode runner
# (netra::gdn_decode_spin): the four inputs hold TAG before the in_proj (fp8_gemv_n12288_k2048_norm_ba, whose stores are
# strong) writes them, and only that pair touches them. A poll still at TAG after SPIN_LIMIT rounds falls back to
# griddepcontrol.wait, and every thread runs it before it exits, so the grid after this one still follows the in_proj.
# Bitwise the smem build. Measured in the step with PDL at the SPIN_CARVEOUT below (experiments/decode/step_ab.py
# spin_off / spin_max3, docs/notes/decode.md "After efc4214"): batch 1 11-13 us less, batch 2 25-29 less, batch 3 24
# more (at 228 KB, "After 78b3396": batch 1 13-27 less, 2 32 less, 4 57 more).
TAG = 0xFFFF  # a BF16 NaN that cvt.rn.bf16.f32 never gives (a NaN converts to 0x7FFF)
# The shared-memory carveout of the spin pair (percent of 228 KB: 85 -> the 196 KB configuration). An SM changes its
# carveout only when empty; at the driver's own choice for the in_proj (164 KB for its 145 KB) its SMs keep no room
# for two of this build's CTAs (2 x 18.7 KB); at 196 KB they have it and keep 60 KB of L1. Measured first at 228 KB (100):
# the in_proj's record then lost ~1 us at M = 6..8 (its norm prologue reads h, up to 32 KB a CTA, through a 28 KB L1)
# and the residual out_proj 0.2-0.4 us at M = 11..16 (records at 5244e48 / 2c66c9e, docs/notes/decode.md)
SPIN_CARVEOUT = 85
_CONSUMED = ("qkv", "z", "b_in", "a_in")  # the spin build's inputs, left TAG
GDN_DECODE_B32_SPIN = dataclasses.replace(
    GDN_DECODE_B32_SMEM_PDL, name="gdn_decode_b32_spin",
    summary=GDN_DECODE_B32_SMEM_PDL.summary + "; its inputs polled until not TAG and left TAG (netra::gdn_decode_spin)",
    params=tuple(dataclasses.replace(p, role="inout", doc=p.doc + (": " if p.doc else "") + "TAG after the launch")
                 if p.name in _CONSUMED else p for p in GDN_DECODE_B32_SMEM_PDL.params),
    pdl="the slot ids, A_log, dt_bias, the norm and conv weights, the conv windows and the state slices at once; qkv, z, "
    "b, a polled (ld.relaxed.gpu) until not TAG, without griddepcontrol.wait (after 16384 polls: the wait, then the "
    "load); launch_dependents where the smem build waits; griddepcontrol.wait before every exit. Safe only as "
    "gdn_decode_b32_smem_pdl is, and only after a producer that stores the four inputs strong into buffers that held "
    "TAG: netra::gdn_decode_spin after fp8_gemv_n12288_k2048_norm_ba in the decode runner",
    bytes_written=GDN_DECODE_B32_SMEM_PDL.bytes_written + f" + B * ({QKVZ * 2} + {NV * 4})",  # TAG written back
    exact_outputs=_CONSUMED,
    consumes=_CONSUMED,
    row_views=(("qkv", "z"),),  # both written (TAG): they may be the two column ranges of the runner's qkvz rows
    max_registers=40,
    carveout=SPIN_CARVEOUT,
    op="gdn_decode_spin",
)

# A persistent pipeline of whole value-head states (kernels/sm_90a/gdn/gen_gdn_decode_pipe.py; the design is
# there): min(16 B, SMS) CTAs of 512 threads, one per SM, each streaming its items (sequence, key head)
# through 2 stages of 64 KB filled by cp.async.bulk; no clusters. The same arithmetic in the same order as
# gdn_decode_b32, so bitwise. The batch size is a parameter (the grid no longer says it).
PIPE_SMS = 132  # H200 multiprocessors: one CTA each
PIPE_ITEMS = 4  # items per CTA at most: ceil(16 * 32 / 132)
assert NK * max(BATCH) <= PIPE_ITEMS * PIPE_SMS
PIPE_SMEM = 2 * DK * DV * 4  # dynamic shared memory: two value-head states
# netra::gdn_decode takes the PDL build from 8 sequences under set_pdl (the decode runner's PDL engine), where
# as a PDL chain it beat the smem build (experiments/gdn/pipe_variant_7c79002.json, us: B = 8 10.75 / 11.19,
# 16 20.19 / 21.48, 32 39.26 / 40.78, with the evict-first state loads of that build; 37.86 at B = 32 without
# them, records at 6cfddfe)
GDN_PIPE_PDL_B = 8
# and launched plainly from 16 sequences since its state loads lost the evict-first L2 policy
# (experiments/gdn/pipe_variant_f936d85.json, us, pipe / smem plainly: B = 16 21.57 / 22.20, 32 40.69 / 41.41;
# B = 8 12.31 / 11.67, so the plain engine keeps the smem build there)
GDN_PIPE_B = 16
_PIPE = dict(
    # the state pool 16-byte aligned (cp.async.bulk's source), the batch size after pool_slots
    params=tuple(dataclasses.replace(p, align=16) if p.name == "state_pool" else p for p in GDN_DECODE_B32.params[:-1])
    + (Scalar("batch", "u32", value="B"), GDN_DECODE_B32.params[-1]),
    grid=(f"({NK} * B if {NK} * B < {PIPE_SMS} else {PIPE_SMS})", "1", "1"),
    threads=512,
    max_registers=128,
    max_static_smem=6400,
    dynamic_smem=PIPE_SMEM,
    reduction_order="one CTA per SM walking items (sequence, key head); q/k l2norm sums: shfl.bfly 16..1 then the 4 "
    "warp sums in warp order; S^T k and S^T q: each thread sums its 32 rows in order, the 4 row groups' partials "
    "added in order; the head's sum of o^2: four 32-column shfl.bfly sums in order (gdn_decode_b32's order: bitwise)",
)
_PIPE_NOTE = "; a persistent pipeline of value-head states (2 x 64 KB stages by cp.async.bulk, one CTA per SM)"
GDN_DECODE_B32_PIPE = dataclasses.replace(GDN_DECODE_B32, name="gdn_decode_b32_pipe",
                                          summary=GDN_DECODE_B32.summary + _PIPE_NOTE, **_PIPE)
GDN_DECODE_B32_PIPE_PDL = dataclasses.replace(GDN_DECODE_B32_PDL, name="gdn_decode_b32_pipe_pdl",
                                              summary=GDN_DECODE_B32_PDL.summary + _PIPE_NOTE, **_PIPE)

CONTRACTS = (GDN_DECODE_B32, GDN_DECODE_B32_PDL, GDN_DECODE_B32_SMEM, GDN_DECODE_B32_SMEM_PDL, GDN_DECODE_B32_SPIN,
             GDN_DECODE_B32_PIPE,
             GDN_DECODE_B32_PIPE_PDL, GDN_VERIFY_T16, GDN_VERIFY_CHUNK_T16, GDN_VERIFY_CHUNK_T16_W8, GDN_COMMIT_T16)
