"""Dispatch of the Gated DeltaNet decode step (netra::gdn_decode, in netra.decode.ops) to
its kernel: gdn_decode_b32 takes Qwen3.6's shapes at B <= 32 with int64 slot ids."""

from __future__ import annotations

from ._dispatch import KernelOp

DECODE = KernelOp("gdn_decode", "gdn_decode_b32")
