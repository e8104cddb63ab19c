"""Dispatch of the Gated DeltaNet decode and verification steps (netra::gdn_decode and
netra::gdn_verify, in netra.decode.ops) to their kernels: Qwen3.6's shapes, B <= 32, int64
slot ids, T <= 16 draft tokens."""

from __future__ import annotations

from ._dispatch import KernelOp

DECODE = KernelOp("gdn_decode", "gdn_decode_b32")
VERIFY = KernelOp("gdn_verify", "gdn_verify_t16")
