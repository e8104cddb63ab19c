"""The float64 references against hand-computed values and against transformers 5.17.0's
Qwen3.5-MoE norm modules, and the error metrics every tolerance is stated in.

The transformers modules upcast to float32 inside forward (``x.float()``), so even fed
float64 they agree with the float64 references to about float32 precision (~1e-7
relative), not to 1e-15."""

from __future__ import annotations

import math

import pytest
import torch

from netra.lifecycle.metrics import first_mismatch, rel_err
from netra.reference import norm as ref
from netra.reference import transformers_modules as hf

EPS = 1e-6
HF_TOL = 2e-6  # float32 arithmetic inside the transformers modules


def randn(*shape, gen, scale=1.0, offset=0.0, dtype=torch.bfloat16):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + offset).to(dtype)


# --- hand-computed -------------------------------------------------------------------------
def test_rmsnorm_by_hand_zero_weight():
    x = torch.tensor([[3.0, 4.0]])
    y = ref.rmsnorm(x, torch.zeros(2), EPS)
    assert y.dtype == torch.float64
    d = math.sqrt(12.5 + EPS)  # mean of squares (9 + 16) / 2
    assert y.flatten().tolist() == pytest.approx([3 / d, 4 / d], rel=1e-15)


def test_rmsnorm_by_hand_zero_centred_weight():
    x = torch.tensor([[3.0, 4.0], [1.0, -1.0]])
    w = torch.tensor([1.0, -0.5])  # multiplies by (1 + w) = (2, 0.5)
    y = ref.rmsnorm(x, w, EPS)
    d0, d1 = math.sqrt(12.5 + EPS), math.sqrt(1.0 + EPS)
    assert y.flatten().tolist() == pytest.approx([6 / d0, 2 / d0, 2 / d1, -0.5 / d1], rel=1e-15)


def test_rmsnorm_eps_dominates_tiny_input():
    y = ref.rmsnorm(torch.tensor([[1e-8, -1e-8]]), torch.zeros(2), 1.0)
    assert y.flatten().tolist() == pytest.approx([1e-8, -1e-8], rel=1e-12)


def test_add_rmsnorm_by_hand():
    h, y = ref.add_rmsnorm(torch.tensor([[2.0, 2.0]]), torch.tensor([[1.0, 2.0]]), torch.zeros(2), EPS)
    assert h.tolist() == [[3.0, 4.0]]
    d = math.sqrt(12.5 + EPS)
    assert y.flatten().tolist() == pytest.approx([3 / d, 4 / d], rel=1e-15)


def test_gated_rmsnorm_by_hand():
    o = torch.tensor([[3.0, 4.0, 1.0, 1.0]])  # two heads of 2 channels
    z = torch.tensor([[0.0, 2.0, 1.0, -1.0]])
    w = torch.tensor([1.5, 2.0])  # not zero-centred
    y = ref.gated_rmsnorm(o, z, w, EPS)

    def silu(v):
        return v / (1 + math.exp(-v))

    d0, d1 = math.sqrt(12.5 + EPS), math.sqrt(1.0 + EPS)
    want = [1.5 * 3 / d0 * silu(0.0), 2.0 * 4 / d0 * silu(2.0), 1.5 * 1 / d1 * silu(1.0), 2.0 * 1 / d1 * silu(-1.0)]
    assert want[0] == 0.0
    assert y.shape == (1, 4)
    assert y.flatten().tolist() == pytest.approx(want, rel=1e-15, abs=1e-300)


def test_qk_rmsnorm_is_rmsnorm_per_head():
    gen = torch.Generator().manual_seed(0)
    q, k = randn(2, 16, 256, gen=gen), randn(2, 2, 256, gen=gen)
    wq, wk = randn(256, gen=gen, scale=0.1), randn(256, gen=gen, scale=0.1)
    yq, yk = ref.qk_rmsnorm(q, k, wq, wk, EPS)
    for h in range(16):
        assert torch.equal(yq[:, h], ref.rmsnorm(q[:, h], wq, EPS))
    assert torch.equal(yk[:, 1], ref.rmsnorm(k[:, 1], wk, EPS))


def test_references_are_float64_of_any_input_dtype():
    gen = torch.Generator().manual_seed(1)
    x, w = randn(3, 64, gen=gen), randn(64, gen=gen)
    for dt in (torch.bfloat16, torch.float32, torch.float64):
        assert ref.rmsnorm(x.to(dt), w.to(dt), EPS).dtype == torch.float64
    assert torch.equal(ref.rmsnorm(x, w, EPS), ref.rmsnorm(x.double(), w.double(), EPS))


# --- against transformers 5.17.0 -----------------------------------------------------------
def test_transformers_version():
    import transformers

    assert transformers.__version__ == "5.17.0"


@pytest.mark.parametrize("m", [1, 5, 16])
def test_rmsnorm_agrees_with_transformers(m):
    gen = torch.Generator().manual_seed(10 + m)
    x, w = randn(m, 2048, gen=gen, scale=2.0, offset=0.3), randn(2048, gen=gen, scale=0.1)
    a, b = ref.rmsnorm(x, w, EPS), hf.rmsnorm(x, w, EPS)
    assert b.dtype == torch.float64 and b.shape == a.shape
    assert rel_err(b, a) <= HF_TOL
    # and they are not trivially equal by construction: a different weight is far off
    assert rel_err(hf.rmsnorm(x, torch.zeros_like(w), EPS), a) > 1e-2


def test_add_rmsnorm_agrees_with_transformers():
    gen = torch.Generator().manual_seed(20)
    x, r, w = randn(7, 2048, gen=gen, scale=0.5), randn(7, 2048, gen=gen, scale=3.0), randn(2048, gen=gen, scale=0.1)
    (ha, ya), (hb, yb) = ref.add_rmsnorm(x, r, w, EPS), hf.add_rmsnorm(x, r, w, EPS)
    assert torch.equal(ha, hb)
    assert rel_err(yb, ya) <= HF_TOL


def test_qk_rmsnorm_agrees_with_transformers():
    gen = torch.Generator().manual_seed(30)
    q, k = randn(3, 16, 256, gen=gen, scale=1.5), randn(3, 2, 256, gen=gen, scale=0.7)
    wq, wk = randn(256, gen=gen, scale=0.1), randn(256, gen=gen, scale=0.1)
    (qa, ka), (qb, kb) = ref.qk_rmsnorm(q, k, wq, wk, EPS), hf.qk_rmsnorm(q, k, wq, wk, EPS)
    assert rel_err(qb, qa) <= HF_TOL
    assert rel_err(kb, ka) <= HF_TOL


@pytest.mark.parametrize("m", [1, 4])
def test_gated_rmsnorm_agrees_with_transformers(m):
    gen = torch.Generator().manual_seed(40 + m)
    o, z = randn(m, 4096, gen=gen, scale=0.8, offset=-0.1), randn(m, 4096, gen=gen, scale=2.0)
    w = randn(128, gen=gen, scale=0.2, offset=1.0)
    a, b = ref.gated_rmsnorm(o, z, w, EPS), hf.gated_rmsnorm(o, z, w, EPS)
    assert b.shape == a.shape == (m, 4096)
    assert rel_err(b, a) <= HF_TOL


def test_transformers_modules_compute_in_float32():
    """Why the agreement above is ~1e-7 and not ~1e-15: documents the float32 upcast."""
    gen = torch.Generator().manual_seed(50)
    x, w = randn(4, 2048, gen=gen, dtype=torch.float64), randn(2048, gen=gen, scale=0.1, dtype=torch.float64)
    err = rel_err(hf.rmsnorm(x, w, EPS), ref.rmsnorm(x, w, EPS))
    assert 1e-12 < err <= HF_TOL


def test_transformers_module_has_the_given_weight():
    w = torch.linspace(-0.5, 0.5, 64)
    mod = hf.rms_module(w, EPS)
    assert mod.weight.dtype == torch.float64
    assert torch.equal(mod.weight.detach(), w.double())
    assert hf.gated_module(w, EPS).weight.detach().equal(w.double())


# --- metrics -------------------------------------------------------------------------------
def test_rel_err_value():
    ref_t = torch.tensor([1.0, -4.0, 2.0], dtype=torch.float64)
    out = torch.tensor([1.5, -4.0, 2.0])
    assert rel_err(out, ref_t) == pytest.approx(0.5 / 4.0, rel=1e-15)
    assert rel_err(ref_t, ref_t) == 0.0


def test_rel_err_zero_reference_is_absolute():
    assert rel_err(torch.tensor([0.25, 0.0]), torch.zeros(2)) == 0.25


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_rel_err_non_finite_output_is_inf(bad):
    out = torch.ones(3, 4, dtype=torch.bfloat16)
    out[2, 1] = bad
    assert rel_err(out, torch.ones(3, 4)) == math.inf


def test_rel_err_all_nan_poisoned_output_is_inf():
    assert rel_err(torch.full((2, 2048), float("nan")), torch.randn(2, 2048)) == math.inf


def test_rel_err_shape_mismatch():
    with pytest.raises(ValueError, match=r"shape \[2, 3\] vs reference \[3, 2\]"):
        rel_err(torch.zeros(2, 3), torch.zeros(3, 2))


def test_first_mismatch_identical_is_none():
    gen = torch.Generator().manual_seed(60)
    for dt in (torch.bfloat16, torch.float32, torch.float64, torch.uint8):
        a = (torch.randn(3, 5, generator=gen) * 10).to(dt)
        assert first_mismatch(a, a.clone()) is None
    nan = torch.tensor([float("nan"), 1.0])
    assert first_mismatch(nan, nan.clone()) is None  # bitwise: the same NaN matches


def test_first_mismatch_finds_first_difference():
    a = torch.arange(12, dtype=torch.float32).view(3, 4)
    b = a.clone()
    b[1, 2] = 100.0
    b[2, 0] = -1.0
    msg = first_mismatch(a, b)
    assert msg == "first difference at [1, 2]: 6.0 vs 100.0 (2 elements differ)"


def test_first_mismatch_is_bitwise():
    a = torch.tensor([0.0, 1.0], dtype=torch.bfloat16)
    b = torch.tensor([-0.0, 1.0], dtype=torch.bfloat16)
    assert a.equal(b)  # equal as numbers
    assert first_mismatch(a, b).startswith("first difference at [0]:")


def test_first_mismatch_non_contiguous():
    a = torch.arange(16, dtype=torch.float32).view(4, 4).t()
    b = a.contiguous().clone()
    assert first_mismatch(a, b) is None
    b[3, 1] = 0.5
    assert first_mismatch(a, b).startswith("first difference at [3, 1]: 7.0 vs 0.5")


def test_first_mismatch_shape_or_dtype():
    assert first_mismatch(torch.zeros(2), torch.zeros(3)).startswith("shape/dtype")
    assert first_mismatch(torch.zeros(2), torch.zeros(2, dtype=torch.float64)).startswith("shape/dtype")
