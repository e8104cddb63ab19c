"""The contract registry against the kernels on disk and the public ops: one name per kernel
(file stem == .entry == contract == registry key), the same parameter list in the PTX and
the contract, and dimension, grid and byte expressions that evaluate for every case."""

from __future__ import annotations

import pytest

import netra.ops
from netra import contracts, paths
from netra.contracts import Scalar, Tensor
from netra.runtime.build import parse_ptx

ALL = contracts.all_contracts()
NAMES = [c.name for c in ALL]
ARCH_DIR = paths.KERNELS / "sm_90a"
NORM = [c for c in ALL if c.family == "norm"]


def test_registry_is_keyed_by_name():
    assert len(ALL) >= 7
    assert len(set(NAMES)) == len(NAMES)
    assert list(contracts.REGISTRY) == NAMES
    for key, c in contracts.REGISTRY.items():
        assert key == c.name
        assert contracts.get(key) is c
    with pytest.raises(KeyError, match="no kernel contract named 'nope'"):
        contracts.get("nope")


@pytest.mark.parametrize("name", NAMES)
def test_ptx_file_location_and_names(name):
    c = contracts.get(name)
    assert c.family in contracts.FAMILIES
    assert c.arch == "sm_90a"
    ptx = paths.ptx_path(c.arch, c.family, c.name)
    assert ptx == paths.ROOT / "kernels" / "sm_90a" / c.family / f"{name}.ptx"
    assert ptx.is_file()
    entries = parse_ptx(ptx.read_text())
    assert [e.name for e in entries] == [ptx.stem] == [c.name]


@pytest.mark.parametrize("name", NAMES)
def test_ptx_parameters_match_contract(name):
    c = contracts.get(name)
    (entry,) = parse_ptx(paths.ptx_path(c.arch, c.family, c.name).read_text())
    assert list(entry.params) == [(p.ptx, p.name) for p in c.params]
    for p in c.params:
        if isinstance(p, Tensor):
            assert p.ptx == "u64"  # a global address
            assert p.align >= 4 and p.align & (p.align - 1) == 0
    if c.threads is not None:
        assert entry.reqntid == c.threads
        assert c.threads <= c.max_threads
    else:
        assert entry.maxntid is not None and entry.maxntid <= c.max_threads


def test_every_ptx_file_has_a_contract():
    files = sorted(ARCH_DIR.glob("*/*.ptx"))
    assert files, "no kernels found"
    for f in files:
        c = contracts.REGISTRY.get(f.stem)
        assert c is not None, f"{f} has no contract"
        assert f.parent.name == c.family, f"{f} is filed under {f.parent.name}, its contract says {c.family}"


def test_family_folders():
    """Each folder under kernels/sm_90a is a family; each family that has a contract has its
    folder, holding .ptx files. (Git does not track empty folders, so families without
    kernels yet may have no folder; they are only checked when they hold a .ptx.)"""
    assert set(contracts.FAMILIES) == {"norm", "proj", "gdn", "moe", "attention", "lm_head", "runtime"}
    folders = {p.name for p in ARCH_DIR.iterdir() if p.is_dir()}
    assert folders <= set(contracts.FAMILIES), folders - set(contracts.FAMILIES)
    with_ptx = {p.name for p in ARCH_DIR.iterdir() if p.is_dir() and any(p.glob("*.ptx"))}
    with_contract = {c.family for c in ALL}
    assert with_ptx == with_contract
    assert {"norm", "runtime"} <= with_ptx


def test_select():
    assert contracts.select(None) == list(ALL)
    assert contracts.select(["norm"]) == NORM
    assert [c.name for c in contracts.select(["smoke_copy", "norm"])] == ["smoke_copy"] + [c.name for c in NORM]


@pytest.mark.parametrize("name", NAMES)
def test_cases_are_accepted_by_dims(name):
    c = contracts.get(name)
    cases = c.cases()
    if c.dims and all(len(v) for v in c.dims.values()):
        assert cases, name
    for case in cases:
        assert set(case) == set(c.dims)
        for k, v in case.items():
            assert isinstance(v, int)
            if len(c.dims[k]):
                assert v in c.dims[k], (name, k, v)


@pytest.mark.parametrize("name", NAMES)
def test_grid_evaluates_for_every_case(name):
    c = contracts.get(name)
    for case in c.cases():
        grid = c.grid_for(case)
        assert len(grid) == 3 and all(isinstance(g, int) and g >= 1 for g in grid), (case, grid)
        assert grid[0] < 2**31 and grid[1] < 65536 and grid[2] < 65536


@pytest.mark.parametrize("name", NAMES)
def test_value_scalars_evaluate(name):
    c = contracts.get(name)
    for p in c.params:
        if isinstance(p, Scalar) and p.value is not None:
            strides = {s: 8 for t in c.tensors for s in (t.strides or ()) if isinstance(s, str)}
            for case in c.cases():
                v = c.eval(p.value, case | strides)
                assert isinstance(v, int) and 0 <= v < 2**32


@pytest.mark.parametrize("name", [c.name for c in NORM])
def test_norm_grids_have_one_row_of_ctas_per_token(name):
    """grid.x is the token; y and z (a split of the token's work, if any) do not depend on M."""
    c = contracts.get(name)
    grids = [c.grid_for({"M": m}) for m in range(1, 17)]
    assert [g[0] for g in grids] == list(range(1, 17))
    assert len({g[1:] for g in grids}) == 1


def test_smoke_copy_grid_covers_every_vector():
    c = contracts.get("smoke_copy")
    assert [case["N"] for case in c.cases()] == [4, 1024, 1028, 1 << 20]
    for n in (4, 1020, 1024, 1028, 4096, 1 << 20):
        gx, gy, gz = c.grid_for({"N": n})
        assert gx * c.threads >= n // 4 > (gx - 1) * c.threads
        assert (gy, gz) == (1, 1)


@pytest.mark.parametrize("name", [c.name for c in ALL if c.bench])
def test_bench_contracts_byte_counts(name):
    c = contracts.get(name)
    assert c.cases()
    for case in c.cases():
        r, w = c.nbytes(case)
        assert isinstance(r, int) and isinstance(w, int)
        assert r > 0 and w > 0, (case, r, w)
        # at least the tensors' own bytes
        min_out = sum(t_bytes(c, t, case) for t in c.tensors if t.role != "in")
        assert w >= min_out


def t_bytes(c, t, case):
    """A tensor's bytes; of a pool (first dimension P, indexed by slot ids) only the B slots a call addresses; of a
    paged cache (P pages of rows) the B rows a call appends."""
    n = 1
    paged = c.family == "attention" and t.shape[0] == "P"
    for i, d in enumerate(c.shape_of(t, case)):
        n *= case["B"] if i == 0 and t.shape[0] == "P" else 1 if i == 1 and paged else d
    return n * contracts.DTYPES[t.dtype][1]


def test_bench_set():
    assert {c.name for c in ALL if c.bench} == {c.name for c in NORM} | {c.name for c in ALL if c.family in ("proj", "gdn", "attention")}


@pytest.mark.parametrize("name", [c.name for c in NORM])
def test_norm_contracts_accept_exactly_their_rows(name):
    """M = 1..16, and up to 32 for the two the decode runner calls at every batch (one CTA per row); their records
    time every M to 16, then 17, 24 and 32."""
    c = contracts.get(name)
    top = 32 if name in ("rmsnorm_h2048", "qk_rmsnorm_d256") else 16
    assert list(c.dims) == ["M"]
    assert sorted(c.dims["M"]) == list(range(1, top + 1))
    assert 0 not in c.dims["M"] and top + 1 not in c.dims["M"]
    assert [case["M"] for case in c.cases()] == list(range(1, 17)) + ([17, 24, 32] if top == 32 else [])
    assert c.describe_dims().startswith(f"M in 1..{top}")
    assert c.grid[0] == "M", "one CTA (row) per token: the row count is the contract's alone"
    assert all(t.dtype == "bf16" for t in c.tensors)
    assert [p.name for p in c.caller_scalars] == ["eps"]


@pytest.mark.parametrize("name", NAMES)
def test_op_names_exist(name):
    c = contracts.get(name)
    if c.op is None:
        assert c.family == "runtime" and not c.bench
        return
    if c.name in netra.ops.OPS:  # one op, a kernel per shape (fp8_linear, gdn_verify_chunk): keyed by kernel name
        assert netra.ops.OPS[c.name].contract is c and netra.ops.OPS[c.name].op == c.op
    else:
        assert c.op in netra.ops.OPS
        assert netra.ops.OPS[c.op].contract is c
    if c.family in ("gdn", "proj", "attention"):  # a decode op: netra.decode.ops and torch.ops.netra
        import torch

        from netra.decode import ops as decode_ops

        assert callable(getattr(decode_ops, c.op)) and hasattr(torch.ops.netra, c.op)
        return
    assert callable(getattr(netra.ops, c.op))


def test_every_op_has_its_contract():
    proj = {c.name for c in ALL if c.family == "proj" and c.op.startswith("fp8_linear")}
    assert set(netra.ops.OPS) == {"rmsnorm", "add_rmsnorm", "qk_rmsnorm", "gated_rmsnorm", "smoke_copy", "gdn_decode", "gdn_verify", "bf16_linear2", "moe_router", "moe_router_norm", "moe_router_norm_split_e256_k2048", "moe_router_norm_regs_e256_k2048", "moe_down", "gdn_commit", "gdn_verify_chunk_t16", "gdn_decode_b32_pdl",
                                "gdn_verify_chunk_t16_w8", "fp8_gemv_n2048_k4608_moedown_s6", "moe_act_i512",
                                "fp8_gemv_n2048_k4608_moedown_grp", "gdn_decode_b32_smem",
                                "gdn_decode_b32_smem_pdl", "gdn_decode_spin", "gdn_decode_b32_pipe", "gdn_decode_b32_pipe_pdl", "lm_head_argmax",
                                "attention_decode_paged", "attention_decode_paged_qknorm",
                                "attn_decode_d256_qknorm_c4", "attn_decode_d256_qknorm_c8",
                                "attn_decode_d256_qknorm_c4_long", "attn_decode_d256_qknorm_c8_long"} | proj
    for key, k in netra.ops.OPS.items():
        assert contracts.REGISTRY[k.contract.name].op == k.op and key in (k.op, k.contract.name)


@pytest.mark.parametrize("name", NAMES)
def test_tolerance_and_budgets(name):
    c = contracts.get(name)
    assert 0 <= c.tolerance < 1e-2
    assert 0 < c.max_registers <= 255
    assert 0 <= c.max_static_smem <= 48 * 1024
    if c.family == "norm":
        assert c.tolerance >= 2**-9  # at least one BF16 rounding of the output
        assert c.deterministic


def test_describe_dims_is_short():
    """A stepped range is described by its ends and step, not listed (it was 2 MB once)."""
    assert contracts.get("smoke_copy").describe_dims() == "N in 4..1048576 step 4"
    assert contracts.get("qk_rmsnorm_d256").describe_dims() == (
        "M in 1..32, q_row_stride, q_head_stride, k_row_stride, k_head_stride multiples of 8")
    assert all(len(c.describe_dims()) < 200 for c in ALL if c.dims and all(len(v) for v in c.dims.values()))
