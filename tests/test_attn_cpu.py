"""The attention family on the CPU: the generated PTX is current and assembles as intended, the contract's shapes, the
float64 reference against the framework path, and the op's framework fallback."""

from __future__ import annotations

import re

import pytest
import torch

from netra import contracts, paths
from netra.contracts import attn as A
from netra.lifecycle import metrics, testbeds
from netra.reference import attn as ra
from netra.runtime import build, toolchain


def test_generated_ptx_is_current():
    g = paths.generator("attention", "gen_attn_decode")
    assert paths.ptx_path("sm_90a", "attention", A.ATTN_NAME).read_text() == g.generate(), "run gen_attn_decode.py"


def test_sass_has_the_intended_instructions(tmp_path):
    """32 HMMA (16 k-steps of S, 16 tiles of O^T), the movmatrix transposes (64 of V, 2 of P), 32 cp.async per thread,
    one atomic, no local memory, within the contract's registers."""
    path = tmp_path / "a.ptx"
    path.write_text(paths.ptx_path("sm_90a", "attention", A.ATTN_NAME).read_text())
    res = build.resource_usage(toolchain.ptxas(), path)
    assert res["spill_stores"] == res["spill_loads"] == res["stack_frame"] == 0, res
    assert res["registers"] <= A.ATTN_DECODE.max_registers
    sass = build.disasm(A.ATTN_NAME)
    ops = re.findall(r"\b(HMMA|MOVM|LDGSTS|ATOMG|LDL|STL)[.A-Z0-9]*", sass)
    assert ops.count("HMMA") == 32 and ops.count("MOVM") == 66 and ops.count("LDGSTS") == 32
    assert ops.count("ATOMG") == 1 and "LDL" not in ops and "STL" not in ops


@pytest.mark.parametrize("dims", [dict(B=1, NP=1, P=3, T=64), dict(B=3, NP=2, P=9, T=128), dict(B=5, NP=3, P=17, T=192)])
def test_reference_against_the_framework_path(dims):
    """attention_decode's framework path (RoPE in fp32, the append, SDPA in BF16) against the float64 reference, on the
    testbed's inputs: within the contract's tolerance; the cache rows it appends equal the reference's within BF16
    rounding, and nothing else in the pool moves."""
    from netra.decode import ops as dops

    i = testbeds.get(A.ATTN_NAME).make(dims, torch.Generator().manual_seed(3), "cpu")
    kp0, vp0 = i["k_pages"].clone(), i["v_pages"].clone()
    want = ra.decode_step(i["q"], i["k"], i["v"], i["gate"], i["cos"], i["sin"], i["positions"], i["block_table"],
                          kp0, vp0)
    B = dims["B"]
    out = torch.full((B, A.Q_HEADS * A.HEAD_DIM), float("nan"), dtype=torch.bfloat16)
    dops.attention_decode(i["q"], i["k"], i["v"], i["gate"].reshape(B, -1), i["cos"], i["sin"], i["k_pages"],
                          i["v_pages"], i["block_table"], i["positions"], out)
    assert metrics.rel_err(out, want["out"]) <= A.ATTN_TOL
    assert metrics.rel_err(i["k_pages"], want["k_pages"]) <= 2 ** -8
    assert torch.equal(i["v_pages"].double(), want["v_pages"])
    changed = (i["k_pages"] != kp0).flatten(2).any(-1)  # [P, page]
    rows = {(int(i["block_table"][b, int(p) // A.PAGE]), int(p) % A.PAGE) for b, p in enumerate(i["positions"])}
    assert {tuple(x) for x in changed.nonzero().tolist()} <= rows


def test_testbed_positions_and_pages():
    """Every sequence's position is inside its pages and the table, and the first cases hit a page's last row, its
    first row and the row before it; the block table draws distinct pages of the pool."""
    i = testbeds.get(A.ATTN_NAME).make(dict(B=5, NP=3, P=17, T=192), torch.Generator().manual_seed(1), "cpu")
    assert i["positions"].tolist()[:4] == [191, 128, 127, 190]
    assert len(set(i["block_table"].flatten().tolist())) == 15 and int(i["block_table"].max()) < 17
    one = testbeds.get(A.ATTN_NAME).make(dict(B=3, NP=1, P=3, T=64), torch.Generator().manual_seed(1), "cpu")
    assert one["positions"].tolist() == [63, 0, 0]


def test_op_falls_back_to_the_framework_path_without_the_gpu():
    """On the CPU the guard misses and attention_decode_paged runs attention_decode on the same inputs: the same bits."""
    from netra import ops
    from netra.decode import ops as dops

    dims = dict(B=2, NP=2, P=6, T=128)
    i = testbeds.get(A.ATTN_NAME).make(dims, torch.Generator().manual_seed(5), "cpu")
    kp, vp = i["k_pages"].clone(), i["v_pages"].clone()
    out = torch.empty(2, A.Q_HEADS * A.HEAD_DIM, dtype=torch.bfloat16)
    ops.reset_stats()
    dops.attention_decode_paged(i["q"], i["k"], i["v"], i["gate"], i["cos"], i["sin"], i["positions"],
                                i["block_table"], i["k_pages"], i["v_pages"], out, i["ws"], i["counters"])
    assert sum(ops.stats()["attention_decode_paged"]["misses"].values()) == 1
    want = torch.empty_like(out)
    dops.attention_decode(i["q"], i["k"], i["v"], i["gate"].reshape(2, -1), i["cos"], i["sin"], kp, vp,
                          i["block_table"], i["positions"], want)
    assert torch.equal(out, want) and torch.equal(i["k_pages"], kp) and torch.equal(i["v_pages"], vp)


def test_contract_shapes():
    c = contracts.get(A.ATTN_NAME)
    assert c.grid_for({"B": 3, "NP": 16, "P": 50, "T": 1024}) == (16, A.KV_HEADS, 3)
    assert A.PART == 8 * 256 + 16 and A.SMEM == 64 * 1024 and c.dynamic_smem == A.SMEM
    assert all(case["T"] == case["NP"] * A.PAGE and case["P"] >= case["B"] * case["NP"] for case in c.cases())
