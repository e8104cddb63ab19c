"""Contracts of the norm family: Qwen3.6's RMSNorms at decode and verification shapes
(M = 1..16 tokens; the two the decode runner calls at every batch, rmsnorm_h2048 and
qk_rmsnorm_d256, up to 32). BF16 in and out, fp32 math, eps passed by the caller (1e-6 in Qwen3.6)."""

from .spec import Contract, Scalar, Tensor

TOKENS = tuple(range(1, 17))  # decode batch or speculative-verification tokens
# One CTA per row (grid M), so the row count is the contract's choice alone: the runner's batch-32 step called
# rmsnorm_h2048 (41 times) and qk_rmsnorm_d256 (10) as two 16-row launches each; up to 32 rows they are one.
TOKENS32 = tuple(range(1, 33))
CASES32 = tuple({"M": m} for m in TOKENS + (17, 24, 32))  # the records' shapes: every M to 16, then 17, 24, 32

# Tolerances, against float64 (lifecycle.metrics.rel_err: max |out - ref| / max |ref|): one
# round-to-nearest BF16 rounding of the output is at most 2^-8 = 3.9e-3 relative (8
# significant bits); rsqrt.approx, ex2.approx and rcp.approx add ~2^-22. The fused add
# also rounds the residual to BF16 before the norm reads it (as the model does), which can
# move the output by one more rounding: twice the budget.
BF16_OUT = 4.5e-3
BF16_TWICE = 9e-3

RMSNORM_H2048 = Contract(
    name="rmsnorm_h2048",
    family="norm",
    summary="zero-centred RMSNorm over 2048: y = x * rsqrt(mean(x^2) + eps) * (1 + w)",
    params=(
        Tensor("x", "bf16", ("M", 2048), "in"),
        Tensor("w", "bf16", (2048,), "in"),
        Tensor("y", "bf16", ("M", 2048), "out"),
        Scalar("eps", "f32"),
    ),
    dims={"M": TOKENS32},
    cases_override=CASES32,
    grid=("M", "1", "1"),
    threads=256,
    reduction_order="per row: each thread sums the squares of its 8 channels in order; "
    "shfl.bfly 16,8,4,2,1; the 8 warp sums added in warp order",
    tolerance=BF16_OUT,
    deterministic=True,
    bytes_read="M * 4096 + 4096",
    bytes_written="M * 4096",
    max_registers=40,
    max_static_smem=32,
    pdl="w (the norm weight) before griddepcontrol.wait; x after it, coherent (experiments/norm/norm_pdl.py)",
    op="rmsnorm",
    reference="netra.reference.norm.rmsnorm (float64); transformers Qwen3_5MoeRMSNorm fed float64 (fp32 inside)",
    peers=("torch_eager", "torch_compile", "transformers"),
)

ADD_RMSNORM_H2048 = Contract(
    name="add_rmsnorm_h2048",
    family="norm",
    summary="residual add then zero-centred RMSNorm over 2048: h = bf16(h + x); y = norm(h)",
    params=(
        Tensor("x", "bf16", ("M", 2048), "in"),
        Tensor("residual", "bf16", ("M", 2048), "inout", doc="h: updated in place"),
        Tensor("w", "bf16", (2048,), "in"),
        Tensor("y", "bf16", ("M", 2048), "out"),
        Scalar("eps", "f32"),
    ),
    dims={"M": TOKENS},
    grid=("M", "1", "1"),
    threads=256,
    reduction_order="as rmsnorm_h2048, over the BF16-rounded residual",
    tolerance=BF16_TWICE,
    deterministic=True,
    bytes_read="2 * M * 4096 + 4096",
    bytes_written="2 * M * 4096",
    max_registers=40,
    max_static_smem=32,
    op="add_rmsnorm",
    reference="netra.reference.norm.add_rmsnorm (float64); transformers residual add + Qwen3_5MoeRMSNorm fed float64 (fp32 inside)",
    peers=("torch_eager", "torch_compile", "transformers"),
)

QK_RMSNORM_D256 = Contract(
    name="qk_rmsnorm_d256",
    family="norm",
    summary="attention q_norm and k_norm: zero-centred RMSNorm over head_dim 256, 16 query + 2 key heads, one launch",
    params=(
        Tensor("q", "bf16", ("M", 16, 256), "in", strides=("q_row_stride", "q_head_stride", 1),
               doc="a view of q_proj's output: head h at h * 512 beside its gate"),
        Tensor("k", "bf16", ("M", 2, 256), "in", strides=("k_row_stride", "k_head_stride", 1)),
        Tensor("q_weight", "bf16", (256,), "in"),
        Tensor("k_weight", "bf16", (256,), "in"),
        Tensor("out_q", "bf16", ("M", 16, 256), "out"),
        Tensor("out_k", "bf16", ("M", 2, 256), "out"),
        Scalar("q_row_stride", "u32", value="q_row_stride"),
        Scalar("q_head_stride", "u32", value="q_head_stride"),
        Scalar("k_row_stride", "u32", value="k_row_stride"),
        Scalar("k_head_stride", "u32", value="k_head_stride"),
        Scalar("eps", "f32"),
    ),
    dims={"M": TOKENS32},
    cases_override=CASES32,
    stride_multiple={"q_row_stride": 8, "q_head_stride": 8, "k_row_stride": 8, "k_head_stride": 8},
    grid=("M", "1", "1"),
    threads=576,
    reduction_order="per head: each lane sums the squares of its 8 channels in order; shfl.bfly 16,8,4,2,1",
    tolerance=BF16_OUT,
    deterministic=True,
    bytes_read="M * 18 * 512 + 1024",
    bytes_written="M * 18 * 512",
    max_registers=40,
    pdl="q_weight and k_weight before griddepcontrol.wait; q and k after it, coherent (experiments/norm/norm_pdl.py)",
    op="qk_rmsnorm",
    reference="netra.reference.norm.rmsnorm per head (float64); transformers Qwen3_5MoeRMSNorm(256) fed float64 (fp32 inside)",
    peers=("torch_eager", "torch_compile", "transformers"),
)

GATED_RMSNORM_D128 = Contract(
    name="gated_rmsnorm_d128",
    family="norm",
    summary="GDN output norm: y = w * rmsnorm(o) * silu(z) per value head of 128, 32 heads",
    params=(
        Tensor("o", "bf16", ("M", 4096), "in", doc="32 value heads of 128, head-major"),
        Tensor("z", "bf16", ("M", 4096), "in"),
        Tensor("w", "bf16", (128,), "in"),
        Tensor("y", "bf16", ("M", 4096), "out"),
        Scalar("eps", "f32"),
    ),
    dims={"M": TOKENS},
    grid=("M", "8", "1"),  # 4 heads per CTA: spreads the silu MUFU work over 8 SMs per token
    threads=64,
    reduction_order="per head: each lane sums the squares of its 8 channels in order; shfl.bfly 8,4,2,1 in the half-warp",
    tolerance=BF16_OUT,
    deterministic=True,
    bytes_read="2 * M * 8192 + 256",
    bytes_written="M * 8192",
    max_registers=40,
    op="gated_rmsnorm",
    reference="netra.reference.norm.gated_rmsnorm (float64); transformers Qwen3_5MoeRMSNormGated fed float64 (fp32 inside)",
    peers=("torch_eager", "torch_compile", "transformers"),
)

CONTRACTS = (RMSNORM_H2048, ADD_RMSNORM_H2048, QK_RMSNORM_D256, GATED_RMSNORM_D128)
