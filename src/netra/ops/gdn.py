"""Dispatch of the Gated DeltaNet decode and verification steps (netra::gdn_decode and
netra::gdn_verify, in netra.decode.ops) to their kernels: Qwen3.6's shapes, B <= 32, int64
slot ids, T <= 16 draft tokens; and of the chunk-form verification with restore data
(netra::gdn_verify_chunk: the 8-warp kernel at B = 1, the 4-warp one otherwise) and its
commit (netra::gdn_commit)."""

from __future__ import annotations

from ._dispatch import KernelOp

DECODE = KernelOp("gdn_decode", "gdn_decode_b32")
DECODE_PDL = KernelOp("gdn_decode", "gdn_decode_b32_pdl", key="gdn_decode_b32_pdl")  # while set_pdl is on
# the same two with the state slice through shared memory, from GDN_SMEM_B sequences (netra.contracts.gdn)
DECODE_SMEM = KernelOp("gdn_decode", "gdn_decode_b32_smem", key="gdn_decode_b32_smem")
DECODE_SMEM_PDL = KernelOp("gdn_decode", "gdn_decode_b32_smem_pdl", key="gdn_decode_b32_smem_pdl")
# the smem PDL build polling its inputs, left TAG (netra::gdn_decode_spin; the decode runner's spin pair)
DECODE_SPIN = KernelOp("gdn_decode_spin", "gdn_decode_b32_spin")
# the persistent pipeline of value-head states (netra.contracts.gdn, gen_gdn_decode_pipe.py)
DECODE_PIPE = KernelOp("gdn_decode", "gdn_decode_b32_pipe", key="gdn_decode_b32_pipe")
DECODE_PIPE_PDL = KernelOp("gdn_decode", "gdn_decode_b32_pipe_pdl", key="gdn_decode_b32_pipe_pdl")
VERIFY = KernelOp("gdn_verify", "gdn_verify_t16")
VERIFY_CHUNK = KernelOp("gdn_verify_chunk", "gdn_verify_chunk_t16", key="gdn_verify_chunk_t16")
VERIFY_CHUNK_W8 = KernelOp("gdn_verify_chunk", "gdn_verify_chunk_t16_w8", key="gdn_verify_chunk_t16_w8")  # B = 1
COMMIT = KernelOp("gdn_commit", "gdn_commit_t16")
