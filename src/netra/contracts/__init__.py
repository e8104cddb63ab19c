"""The registry of kernel contracts: one per kernel, keyed by the kernel's name."""

from __future__ import annotations

from . import attn, gdn, norm, proj, runtime
from .spec import DTYPES, PTX_SCALARS, Contract, Param, Scalar, Tensor

_ALL: tuple[Contract, ...] = runtime.CONTRACTS + norm.CONTRACTS + proj.CONTRACTS + gdn.CONTRACTS + attn.CONTRACTS
REGISTRY: dict[str, Contract] = {c.name: c for c in _ALL}
assert len(REGISTRY) == len(_ALL), "two contracts share a name"

FAMILIES = ("runtime", "norm", "proj", "gdn", "moe", "attention", "lm_head")


def get(name: str) -> Contract:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no kernel contract named {name!r}; known: {', '.join(sorted(REGISTRY))}") from None


def all_contracts() -> tuple[Contract, ...]:
    return _ALL


def select(names: list[str] | None) -> list[Contract]:
    """The named contracts (a family name selects the family), or every one."""
    if not names:
        return list(_ALL)
    out: list[Contract] = []
    for n in names:
        if n in FAMILIES:
            out.extend(c for c in _ALL if c.family == n)
        else:
            out.append(get(n))
    return out


__all__ = ["Contract", "Param", "Scalar", "Tensor", "DTYPES", "PTX_SCALARS", "REGISTRY", "FAMILIES", "get", "all_contracts", "select"]
