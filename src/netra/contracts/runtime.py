"""Contracts of the runtime's own kernels: the smoke kernel and the two benchmark floors."""

from .spec import Contract, Scalar, Tensor

SMOKE_COPY = Contract(
    name="smoke_copy",
    family="runtime",
    summary="dst = src for N float32 (16 bytes per thread); pushes a trivial kernel through the whole runtime",
    params=(
        Tensor("src", "f32", ("N",), "in"),
        Tensor("dst", "f32", ("N",), "out"),
        Scalar("n16", "u32", value="N // 4", doc="number of 16-byte vectors"),
    ),
    dims={"N": range(4, (1 << 20) + 1, 4)},
    grid=("(N // 4 + 255) // 256", "1", "1"),
    threads=256,
    reduction_order="none",
    tolerance=0.0,
    deterministic=True,
    bytes_read="4 * N",
    bytes_written="4 * N",
    max_registers=32,
    op="smoke_copy",
    reference="src itself (bitwise)",
    bench=False,
    cases_override=({"N": 4}, {"N": 1024}, {"N": 1028}, {"N": 1 << 20}),
)

EMPTY_KERNEL = Contract(
    name="empty_kernel",
    family="runtime",
    summary="the launch floor: does nothing, launched with the geometry of the kernel it is compared with",
    params=(),
    dims={},
    grid=("1", "1", "1"),
    threads=None,
    reduction_order="none",
    tolerance=0.0,
    deterministic=True,
    bytes_read="0",
    bytes_written="0",
    max_registers=16,
    bench=False,
)

READ_FLOOR = Contract(
    name="read_floor",
    family="runtime",
    summary="the read floor: each CTA reads bytes_per_cta bytes with 16-byte loads and writes nothing",
    params=(
        Tensor("src", "u8", ("B",), "in"),
        Tensor("sink", "u8", (4,), "out", align=4),
        Scalar("bytes_per_cta", "u32", value=None),
    ),
    dims={"B": ()},  # any size; launched only by the bench with its own geometry
    grid=("1", "1", "1"),
    threads=None,
    reduction_order="none",
    tolerance=0.0,
    deterministic=True,
    bytes_read="B",
    bytes_written="0",
    max_registers=40,
    bench=False,
)

CONTRACTS = (SMOKE_COPY, EMPTY_KERNEL, READ_FLOOR)
