"""Public ops. Each runs its kernel when the contract's exact-shape guard passes and the
framework path otherwise; each is also registered as ``torch.ops.netra.<op>``."""

from ._dispatch import OPS, count_launches, pdl_enabled, prepare, reset_stats, set_framework, set_pdl, stats
from .norm import add_rmsnorm, gated_rmsnorm, qk_rmsnorm, rmsnorm
from . import attn, gdn, proj
from .runtime import smoke_copy

__all__ = ["OPS", "count_launches", "pdl_enabled", "prepare", "reset_stats", "set_framework", "set_pdl", "stats",
           "rmsnorm", "add_rmsnorm", "qk_rmsnorm", "gated_rmsnorm", "smoke_copy"]
