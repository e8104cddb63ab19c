"""One warp's RMSNorm of a 2048-wide BF16 row, bitwise rmsnorm_h2048: lane l holds channels 256 i + 8 l + c
(rmsnorm_h2048's thread 32 i + l) as 4 words per block i. Emitted by the router's norm prologue
(gen_moe_router.norm_prologue) and the b | a CTAs (gen_fp8_gemv.ba_cta), each with its own register names and
indentation (``emit`` takes a line without it). Only unrolls and names registers."""

from __future__ import annotations


def unpack(emit, words: list[str], dst: str, scr: str) -> None:
    """{dst}0..7 = the 8 BF16 of the 4 words as f32, in channel order (``scr`` scratch)."""
    for c, w in enumerate(words):
        emit(f"shl.b32 {scr}, {w}, 16;")
        emit(f"mov.b32 {dst}{2 * c}, {scr};")
        emit(f"and.b32 {scr}, {w}, 0xffff0000;")
        emit(f"mov.b32 {dst}{2 * c + 1}, {scr};")


def sums(emit, x: str, f: str, ss: str, r: str, tmp: str, scr: str, eps: str, blocks: int, width: int) -> None:
    """{r} = rsqrt(mean(h^2) + eps) of the row in {x}0..: each block's 8-channel sum of squares (mul, then fma in
    channel order), shfl.bfly 16, 8, 4, 2, 1 adds, the block sums in order, fma by 1 / width plus eps, rsqrt.approx."""
    assert width == 2048, "0f3A000000 is 1 / 2048"
    for i in range(blocks):
        unpack(emit, [f"{x}{4 * i + c}" for c in range(4)], f, scr)
        emit(f"mul.rn.f32 {ss}{i}, {f}0, {f}0;")
        for c in range(1, 8):
            emit(f"fma.rn.f32 {ss}{i}, {f}{c}, {f}{c}, {ss}{i};")
        for off in (16, 8, 4, 2, 1):
            emit(f"shfl.sync.bfly.b32 {tmp}, {ss}{i}, {off}, 31, 0xffffffff;")
            emit(f"add.rn.f32 {ss}{i}, {ss}{i}, {tmp};")
    emit(f"add.rn.f32 {r}, {ss}0, {ss}1;")
    for i in range(2, blocks):
        emit(f"add.rn.f32 {r}, {r}, {ss}{i};")
    emit(f"fma.rn.f32 {r}, {r}, 0f3A000000, {eps};  // mean = sum / {width} (exact), + eps")
    emit(f"rsqrt.approx.f32 {r}, {r};")


def scale(emit, i: int, x: str, f: str, v: str, nw: str, r: str, scr: str, ptr: str, smem: str | None = None) -> None:
    """Block i of {x}: bf16((h * rsqrt) * (1 + w)) in place, w = norm_w[256 i + 8 lane ..] loaded from {ptr} (``smem``:
    from shared memory at {smem} + 512 i instead, where the caller's cp.async put this lane's 16 bytes)."""
    if smem:
        emit(f"ld.shared.v4.u32 {{{nw}0, {nw}1, {nw}2, {nw}3}}, [{smem}+{512 * i}];  // norm_w[256 {i} + 8 lane ..]")
    else:
        emit(f"ld.global.nc.v4.u32 {{{nw}0, {nw}1, {nw}2, {nw}3}}, [{ptr}+{512 * i}];  // norm_w[256 {i} + 8 lane ..]")
    words = [f"{nw}{c}" for c in range(4)]
    unpack(emit, words, v, scr)
    unpack(emit, [f"{x}{4 * i + c}" for c in range(4)], f, scr)
    for c in range(8):
        emit(f"add.rn.f32 {v}{c}, {v}{c}, 0f3F800000;")
    for c in range(8):
        emit(f"mul.rn.f32 {f}{c}, {f}{c}, {r};")
    for c in range(8):
        emit(f"mul.rn.f32 {f}{c}, {f}{c}, {v}{c};")
    for c in range(4):
        emit(f"cvt.rn.bf16x2.f32 {x}{4 * i + c}, {f}{2 * c + 1}, {f}{2 * c};")
