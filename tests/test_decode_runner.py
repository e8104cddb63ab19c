"""The decode runner's op plumbing on a tiny config through the framework path (CPU), against
the float64 decode reference; CUDA-graph capture on the H200."""

import pytest
import torch

from netra.decode.runner import DecodeRunner
from netra.model import checkpoint as ck
from netra.model.config import tiny
from netra.reference.qwen36 import Reference

# BF16 activations and weights against float64: a few BF16 roundings per layer give ~2%
# of the largest logit. A router near-tie can send a token to another expert, which moves
# the logits further at that step (16% was seen once in 20 steps): hence the median bound,
# and top-1 agreement only where the reference's top-2 margin exceeds the tolerance.
from netra.decode.gates import LOGIT_TOL as EPS_TOL


def _compare(runner, ref, ids):
    st = ref.new_state(ids.shape[0], 64)
    errs, agree, ties = [], 0, 0
    for t in range(ids.shape[1]):
        want = ref.step(ids[:, t].to(ref.device), st)
        got = runner.step(ids[:, t].to(runner.device)).double().cpu()
        want = want.cpu()
        errs.append(((got - want).abs().max() / want.abs().max()).item())
        top2 = want.topk(2, -1).values
        margin = (top2[:, 0] - top2[:, 1]) / want.abs().max()
        sure = margin > EPS_TOL
        agree += int((got.argmax(-1) == want.argmax(-1))[sure].all())
        ties += int((~sure).sum())
    return sorted(errs)[len(errs) // 2], agree, ties


def test_runner_matches_reference_teacher_forced_cpu():
    cfg = tiny(layers=4)
    c = ck.synthetic_checkpoint(cfg, seed=21)
    runner = DecodeRunner(c, batch=3, max_context=40, device="cpu", page_size=16)
    ref = Reference(c, torch.float64)
    ids = torch.randint(0, cfg.vocab_size, (3, 20), generator=torch.Generator().manual_seed(1))
    median, agree, ties = _compare(runner, ref, ids)
    assert median < EPS_TOL, median
    assert agree == ids.shape[1], "top-1 disagreed at a position whose reference margin exceeds the tolerance"
    # positions advanced and pages filled across the page boundary (page 16, 20 tokens)
    assert runner.positions.tolist() == [20, 20, 20]
    runner.reset()
    assert runner.positions.tolist() == [0, 0, 0] and not any(t.any() for t in runner.state_pool.values())


@pytest.mark.gpu
def test_runner_graph_replay_equals_eager():
    cfg = tiny(layers=4)
    c = ck.synthetic_checkpoint(cfg, seed=22)
    ids = torch.randint(0, cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(2)).cuda()
    eager = DecodeRunner(c, batch=2, max_context=32, device="cuda", page_size=16)
    want = [eager.step(ids[:, t]).clone() for t in range(ids.shape[1])]
    graphed = DecodeRunner(c, batch=2, max_context=32, device="cuda", page_size=16)
    graphed.capture()
    got = [graphed.step(ids[:, t]).clone() for t in range(ids.shape[1])]
    for t, (a, b) in enumerate(zip(got, want)):
        assert torch.equal(a, b), f"graph replay differs from eager at step {t}"
    ref = Reference(c, torch.float64, device="cuda")
    median, agree, _ = _compare(DecodeRunner(c, batch=2, max_context=32, device="cuda", page_size=16), ref, ids.cpu())
    assert median < EPS_TOL and agree == ids.shape[1]


def test_gates_on_tiny_model_cpu():
    from netra.decode import gates

    cfg = tiny(layers=4)
    c = ck.synthetic_checkpoint(cfg, seed=23)
    runner = DecodeRunner(c, batch=2, max_context=48, device="cpu", page_size=16)
    model = ck.transformers_model(c, torch.float64)
    prompts = torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(3))
    tf = gates.teacher_forced(runner, gates.reference_logits(model, prompts), prompts)
    assert tf["pass"] and tf["top1_checked"] > 0 and tf["median_rel_err"] < gates.LOGIT_TOL, tf
    shadow = gates.layer_shadow(runner, c, prompts[0], dtype=torch.float64)
    assert [r["layer"] for r in shadow["layers"]] == [0, 1, 2, 3]
    assert shadow["pass"], shadow
    assert all(r["mixer_max_rel_err"] > 0 for r in shadow["layers"]), "BF16 against float64 cannot be exact"
    ref_tok, margins = gates.reference_greedy(model, prompts[0, :8], 12)
    run_tok = gates.runner_greedy(runner, prompts[0, :8], 12)
    fd = gates.first_divergence(ref_tok, margins, run_tok)
    assert fd["steps"] == 12
    assert fd["first_divergence"] is None or fd["at_near_tie"] is not None


def test_layer_shadow_catches_a_wrong_op(monkeypatch):
    from netra.decode import gates
    from netra.decode import ops as dops

    cfg = tiny(layers=4)
    c = ck.synthetic_checkpoint(cfg, seed=24)
    runner = DecodeRunner(c, batch=1, max_context=32, device="cpu", page_size=16)
    real = dops.attention_decode

    def wrong(q, k, v, gate, cos, sin, *rest):  # RoPE with the sign of sin flipped
        return real(q, k, v, gate, cos, -sin, *rest)

    monkeypatch.setattr(dops, "attention_decode", wrong)
    shadow = gates.layer_shadow(runner, c, torch.arange(1, 13), dtype=torch.float64)
    bad = [r["layer"] for r in shadow["layers"] if not r["pass"]]
    assert bad == [3], shadow  # the one attention layer


def test_decode_main_gates_and_record_on_tiny_checkpoint(tmp_path):
    from netra.decode import main as decode

    ck.write_synthetic(tmp_path, tiny(layers=4), seed=25)
    rec = decode.run(str(tmp_path), batches=(), n_prompts=2, prompt_len=12, free_steps=8, shadow_len=8,
                     device="cpu", write=False, log=lambda *_: None)
    assert set(decode.GATE_KEYS) <= set(rec["gates"])
    assert rec["gates"]["layer_shadow_pass"] and rec["gates"]["teacher_forced"]["pass"]
    assert rec["model"]["checkpoint"] == str(tmp_path) and rec["model"]["config"]["num_hidden_layers"] == 4
    assert rec["runs"] == []  # the speed A/B needs the GPU
    r = decode._run_record("netra-kernels-graph", 8, tiny(), 1024, 2.0, ["rmsnorm_h2048"], "m")
    assert set(decode.RUN_KEYS) <= set(r) and r["tokens_per_s"] == 4000.0


def test_op_breakdown_names_the_decode_ops_cpu():
    from netra.decode import main as decode

    c = ck.synthetic_checkpoint(tiny(layers=4), seed=26)
    runner = DecodeRunner(c, batch=1, max_context=16, device="cpu", page_size=16)
    names = {r["name"] for r in decode.op_breakdown(runner, steps=2)}
    assert {"netra::fp8_linear", "netra::gdn_decode", "netra::attention_decode", "netra::moe_decode",
            "netra::lm_head_argmax"} <= names
