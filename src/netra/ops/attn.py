"""Dispatch of the gated attention decode step on a paged KV cache (netra::attention_decode_paged, in
netra.decode.ops) to its kernel: Qwen3.6's attention shapes, B <= 32, pages of 64 tokens, up to 64 pages a sequence
(4096 with the long-context builds)."""

from __future__ import annotations

from ..contracts.attn import ATTN_CLUSTER, ATTN_LONG
from ._dispatch import KernelOp

DECODE = KernelOp("attention_decode_paged", "attn_decode_d256")
# The same with q_norm and k_norm inside (netra::attention_decode_paged_qknorm): the runner's qk_rmsnorm launch folded in
DECODE_QKNORM = KernelOp("attention_decode_paged_qknorm", "attn_decode_d256_qknorm")
# The cluster builds of the same (attn_decode_d256_qknorm_c4 / _c8): no scratch; the op picks one by the batch
DECODE_QKNORM_CL = {c: KernelOp("attention_decode_paged_qknorm", contract.name, key=contract.name)
                    for c, contract in ATTN_CLUSTER.items()}
# The long-context builds (attn_decode_d256_qknorm_c4_long / _c8_long): up to S clusters per (sequence, kv head), S the
# caller's (ws's third dimension); the op takes them where one cluster would walk too many pages, or past 64 pages
DECODE_QKNORM_LONG = {c: KernelOp("attention_decode_paged_qknorm", contract.name, key=contract.name)
                      for c, contract in ATTN_LONG.items()}
