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
    # a captured step continues from the state prefill leaves, as eager steps do
    eager.reset()
    graphed.reset()
    eager.prefill(ids[:, :8])
    graphed.prefill(ids[:, :8])
    for t in range(8, 12):
        assert torch.equal(graphed.step(ids[:, t]), eager.step(ids[:, t])), f"after prefill, step {t}"


def test_runner_spin_pair_cpu():
    """Up to GDN_SPIN_MAX_B sequences the runner owns the spin pair's buffers, TAG from allocation; under set_pdl its
    GDN layers write the in_proj's outputs there and gdn_decode_spin leaves them TAG (here both ops' framework paths:
    the protocol is the op's, whichever path runs), with the logits of the plain runner; reset() re-tags them. Above
    GDN_SPIN_MAX_B there are none."""
    import netra.ops as nops
    from netra.contracts.gdn import TAG
    from netra.decode import ops as dops

    cfg = tiny(layers=4)
    c = ck.synthetic_checkpoint(cfg, seed=23)
    B = dops.GDN_SPIN_MAX_B
    assert B >= 1 and not DecodeRunner(c, batch=B + 1, max_context=32, device="cpu", page_size=16).spin
    ids = torch.randint(0, cfg.vocab_size, (B, 6), generator=torch.Generator().manual_seed(3))
    plain = DecodeRunner(c, batch=B, max_context=32, device="cpu", page_size=16)
    want = [plain.step(ids[:, t]).clone() for t in range(ids.shape[1])]
    runner = DecodeRunner(c, batch=B, max_context=32, device="cpu", page_size=16)
    bufs = (runner.qkvz_s, runner.bb_s, runner.aa_s)
    tagged = lambda: all(bool((t.view(torch.int16) == TAG - (1 << 16)).all()) for t in bufs)  # noqa: E731
    assert runner.spin and tagged()
    calls = []
    real = dops.gdn_decode_spin
    dops.gdn_decode_spin = lambda *a: (calls.append(a[0].data_ptr()), real(*a))
    nops.set_pdl(True)
    try:
        for t in range(ids.shape[1]):
            assert torch.equal(runner.step(ids[:, t]), want[t]), t
            assert tagged(), t
    finally:
        nops.set_pdl(False)
        dops.gdn_decode_spin = real
    n_gdn = sum(not cfg.is_full(L) for L in range(cfg.num_hidden_layers))
    assert calls == [runner.qkvz_s.data_ptr()] * (n_gdn * ids.shape[1])
    runner.qkvz_s.fill_(1.0)
    runner.reset()
    assert tagged()


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


def test_truncate_keeps_the_first_layers_without_copies():
    c = ck.synthetic_checkpoint(tiny(layers=4), seed=27)
    t = ck.truncate(c, 2)
    assert t.cfg.num_hidden_layers == 2
    assert {n for n in t.tensors if not n.endswith("_scale_inv")} == set(ck.expected(t.cfg))
    name = ck.PREFIX + "layers.1.input_layernorm.weight"
    assert t.tensors[name] is c.tensors[name]
    with pytest.raises(ValueError, match="1..4 layers"):
        ck.truncate(c, 5)


def test_layer_shadow_catches_a_wrong_op(monkeypatch):
    from netra.decode import gates
    from netra.decode import ops as dops

    cfg = tiny(layers=4)
    c = ck.synthetic_checkpoint(cfg, seed=24)
    runner = DecodeRunner(c, batch=1, max_context=32, device="cpu", page_size=16)
    real = dops.attention_decode_ctx

    def wrong(q, k, v, gate, c, s, *rest, **kw):  # RoPE with the sign of sin flipped
        return real(q, k, v, gate, c, -s, *rest, **kw)

    monkeypatch.setattr(dops, "attention_decode_ctx", wrong)
    shadow = gates.layer_shadow(runner, c, torch.arange(1, 13), dtype=torch.float64)
    bad = [r["layer"] for r in shadow["layers"] if not r["pass"]]
    assert bad == [3], shadow  # the one attention layer


def test_decode_main_gates_and_record_on_tiny_checkpoint(tmp_path, monkeypatch):
    import json

    from netra.decode import main as decode

    ck.write_synthetic(tmp_path, tiny(layers=8), seed=25)
    monkeypatch.setattr(decode.paths, "results_dir", lambda arch="sm_90a": tmp_path / "results")
    lines = []
    rec = decode.run(str(tmp_path), batches=(), n_prompts=2, prompt_len=12, free_steps=8, shadow_len=8,
                     gate_layers=4, device="cpu", write=True, log=lines.append)
    written = json.loads((tmp_path / "results" / "decode.json").read_text())  # written once: no run to profile
    assert written["gates"]["depth_limited"]["teacher_forced"]["pass"] and written["runs"] == []
    assert "positions" not in written["gates"]["teacher_forced"]  # those go to decode_positions.json
    assert len(json.loads((tmp_path / "results" / "decode_positions.json").read_text())["full"]["truth_margin"]) == 2
    assert [ln for ln in lines if ln.startswith("wrote ")] == [f"wrote {tmp_path / 'results' / 'decode.json'}"]
    depth = rec["gates"]["depth_limited"]
    assert depth["layers"] == 4 and depth["teacher_forced"]["steps"] == 12 and depth["teacher_forced"]["pass"]
    assert all("framework_moe_max_rel_err" in r for r in rec["gates"]["layer_shadow"]["layers"])
    assert set(decode.GATE_KEYS) <= set(rec["gates"])
    assert rec["gates"]["layer_shadow_pass"] and rec["gates"]["teacher_forced"]["pass"]
    tf = rec["gates"]["teacher_forced"]
    assert tf["median_rel_err"] <= 1.5 * tf["framework_median_rel_err"]  # transformers ran in BF16
    assert len(tf["positions"]["truth_margin"]) == 2 and "framework" in rec["gates"]["free_running"]
    assert rec["model"]["checkpoint"] == str(tmp_path) and rec["model"]["config"]["num_hidden_layers"] == 8
    assert rec["runs"] == []  # the speed A/B needs the GPU
    r = decode._run_record("netra-kernels-graph", 8, tiny(), 1024, 2.0, ["rmsnorm_h2048"], "m")
    assert set(decode.RUN_KEYS) <= set(r) and r["tokens_per_s"] == 4000.0


def test_op_breakdown_names_the_decode_ops_cpu():
    from netra.decode import main as decode

    c = ck.synthetic_checkpoint(tiny(layers=4), seed=26)
    runner = DecodeRunner(c, batch=1, max_context=16, device="cpu", page_size=16)
    names = {r["name"] for r in decode.op_breakdown(runner, steps=2)}
    assert {"netra::fp8_linear_add", "netra::fp8_linear_norm", "netra::gdn_decode", "netra::attention_decode_ctx",
            "netra::moe_decode", "netra::moe_router_norm",
            "netra::lm_head_argmax"} <= names


def test_prefill_matches_token_by_token_cpu():
    cfg = tiny(layers=4)
    c = ck.synthetic_checkpoint(cfg, seed=31)
    ids = torch.randint(0, cfg.vocab_size, (2, 21), generator=torch.Generator().manual_seed(4))
    a = DecodeRunner(c, batch=2, max_context=48, device="cpu", page_size=16)
    b = DecodeRunner(c, batch=2, max_context=48, device="cpu", page_size=16)
    ref = Reference(c, torch.float64)
    st = ref.new_state(2, 48)
    for t in range(20):
        want = ref.step(ids[:, t], st)
        b.step(ids[:, t])
    got = a.prefill(ids[:, :20]).double()
    assert a.positions.tolist() == [20, 20] and torch.equal(a.next_tokens, got.argmax(-1))
    # prefill is as close to the float64 truth as 20 decode steps are (both ~7% on this tiny model)
    err = lambda x: ((x - want).abs().max() / want.abs().max()).item()  # noqa: E731
    assert err(got) < 1.5 * err(b.logits.double()) + 1e-2, (err(got), err(b.logits.double()))
    # and it left the same state behind: the next decode step agrees
    want = ref.step(ids[:, 20], st)
    assert err(a.step(ids[:, 20]).double()) < 1.5 * err(b.step(ids[:, 20]).double()) + 1e-2
    for L in a.state_pool:
        assert torch.allclose(a.state_pool[L], b.state_pool[L], rtol=0, atol=5e-2 * b.state_pool[L].abs().max())
    with pytest.raises(RuntimeError, match="reset"):
        a.prefill(ids[:, :4])
    a.reset()
    with pytest.raises(ValueError, match=r"expected prompts \[2, T\]"):
        a.prefill(ids[:1, :4])
    with pytest.raises(ValueError, match="max_context"):
        a.prefill(torch.zeros(2, 49, dtype=torch.long))


def test_lazy_reference_equals_eager_reference(monkeypatch):
    cfg = tiny(layers=4)
    c = ck.synthetic_checkpoint(cfg, seed=32)
    monkeypatch.setattr(Reference, "LAZY_CACHE", 0)  # dequantize every layer tensor on use
    lazy, eager = Reference(c, torch.float64, lazy=True), Reference(c, torch.float64)
    assert not any(".layers." in n for n in lazy.w)
    ids = torch.randint(0, cfg.vocab_size, (2, 6), generator=torch.Generator().manual_seed(5))
    assert torch.equal(lazy.teacher_forced(ids, torch.float64), eager.teacher_forced(ids, torch.float64))
    tok, margins = lazy.greedy(ids[0], 5)
    assert tok.shape == (5,) and (margins >= 0).all()


def test_teacher_forced_gate_fails_on_a_different_model_and_judges_drift():
    from netra.decode import gates

    cfg = tiny(layers=4)
    c, other = ck.synthetic_checkpoint(cfg, seed=33), ck.synthetic_checkpoint(cfg, seed=34)
    ids = torch.randint(0, cfg.vocab_size, (2, 10), generator=torch.Generator().manual_seed(6))
    truth = Reference(c, torch.float64).teacher_forced(ids)
    runner = DecodeRunner(c, batch=2, max_context=16, device="cpu", page_size=16)
    ok = gates.teacher_forced(runner, truth, ids, framework=truth + 0.02 * truth.abs().amax(-1, keepdim=True))
    assert ok["tolerance"] == gates.LOGIT_TOL and ok["framework_median_rel_err"] > 0
    wrong = gates.teacher_forced(DecodeRunner(other, batch=2, max_context=16, device="cpu", page_size=16), truth, ids,
                                 framework=truth)
    assert not wrong["pass"] and wrong["disagreements"], "another model's tokens must fail the gate"
    # the framework's median drift sets the tolerance when it exceeds LOGIT_TOL
    noisy = truth + 0.2 * truth.abs().amax(-1, keepdim=True) * torch.randn(truth.shape, generator=torch.Generator().manual_seed(7)).sign()
    assert abs(gates.teacher_forced(runner, truth, ids, framework=noisy)["tolerance"] - 0.2) < 1e-3


def test_reference_routes_are_the_moe_choices_and_leave_the_logits_alone():
    cfg = tiny(layers=3)
    c = ck.synthetic_checkpoint(cfg, seed=35)
    ref = Reference(c, torch.float64)
    ids = torch.randint(0, cfg.vocab_size, (2, 5), generator=torch.Generator().manual_seed(8))
    logits, routes = ref.teacher_forced(ids, torch.float64, routes=True)
    assert torch.equal(logits, ref.teacher_forced(ids, torch.float64)) and ref.routes is None
    k = cfg.num_experts_per_tok
    assert routes["ids"].shape == (2, 5, 3, k) and routes["margin"].shape == (2, 5, 3)
    assert (routes["ids"].diff(dim=-1) > 0).all() and (routes["margin"] >= 0).all()
    # position 0 of layer 0 by hand: the top k of softmax(rmsnorm(embedding) @ router^T)
    from netra.reference.qwen36 import PREFIX, rmsnorm

    h = ref.w[PREFIX + "embed_tokens.weight"][ids[:, 0]]
    x = rmsnorm(h, ref.p(0, "input_layernorm.weight"), cfg.rms_norm_eps)
    st = ref.new_state(2, 1)
    h = h + (ref.attention(0, x, st) if cfg.is_full(0) else ref.gdn(0, x, st))
    x = rmsnorm(h, ref.p(0, "post_attention_layernorm.weight"), cfg.rms_norm_eps)
    probs = torch.softmax(x @ ref.p(0, "mlp.gate.weight").T, -1)
    assert torch.equal(routes["ids"][:, 0, 0], probs.topk(k, -1).indices.sort(-1).values)


def test_teacher_forced_gate_excuses_a_few_disagreements_after_a_router_near_tie_flip():
    """A token disagreement is excused if a router near-tie flip (the runner chose another
    expert set than the truth where the truth's boundary margin is under ROUTER_TIE) came at or
    before it in that sequence, up to ROUTER_TIE_SHARE of the judged positions; every position
    is still judged. A flip at a clear margin, or after the disagreement, excuses nothing."""
    import math

    from netra.decode import gates

    cfg = tiny(layers=3)
    c = ck.synthetic_checkpoint(cfg, seed=36)
    ids = torch.randint(0, cfg.vocab_size, (2, 8), generator=torch.Generator().manual_seed(9))
    truth, routes = Reference(c, torch.float64).teacher_forced(ids, routes=True)
    runner = DecodeRunner(c, batch=2, max_context=16, device="cpu", page_size=16)

    def bend(*ts):  # the truth made sure at (0, t) and wrong there: its top-1 moved far above the rest
        bent = truth.clone()
        for t in ts:
            j = int((truth[0, t].argmax() + 1) % cfg.vocab_size)
            bent[0, t, j] = truth[0, t].max() + 10 * (truth[0, t].max() - truth[0, t].min())
        return bent

    one = bend(5)
    routes["margin"].fill_(1.0)  # every choice clear: natural flips are clear ones
    base = gates.teacher_forced(runner, one, ids, truth_routes=routes)
    assert not base["pass"] and (0, 5) in base["disagreements"]
    assert base["router_ties"]["tie_flips"] == 0 and base["router_ties"]["positions_after"] == 0

    def flip_at(t, margin, truth=one):
        r = {"ids": routes["ids"].clone(), "margin": routes["margin"].clone()}
        r["ids"][0, t, 1] = -1  # no router chooses these
        r["margin"][0, t, 1] = margin
        return gates.teacher_forced(runner, truth, ids, truth_routes=r)

    before = flip_at(4, 0.0)  # a near-tie flip before the disagreement excuses it
    rt = before["router_ties"]
    assert before["pass"] and (0, 5) in rt["disagreements_after"] and rt["tie_flips"] == 1 and rt["excused"] == 1
    assert rt["tie_flip_sites"][0][:3] == (0, 4, 1) and rt["tainted_sequences"] == 1 and rt["positions_after"] == 4
    assert before["top1_checked"] == base["top1_checked"], "every sure position is still judged"
    assert rt["excused_budget"] == math.ceil(gates.ROUTER_TIE_SHARE * before["top1_checked"]) == 1
    many = flip_at(4, 0.0, bend(5, 6))  # two disagreements after the flip: over the budget of one
    assert not many["pass"] and many["router_ties"]["excused"] == 2 and not many["router_ties"]["within_budget"]
    assert {(0, 5), (0, 6)} <= set(many["disagreements"])
    assert not flip_at(6, 0.0)["pass"], "a flip after the disagreement excuses nothing"
    clear = flip_at(4, 0.5)
    assert not clear["pass"] and clear["router_ties"]["clear_flips"] >= 1, "a flip at a clear margin excuses nothing"


def test_netra_decode_without_a_gpu_runs_the_gates_on_a_tiny_model(capsys):
    from netra import cli
    from netra.runtime import gpu

    if gpu.unavailable_reason(None) is None:
        pytest.skip("a GPU is visible: `netra decode` runs the full-size job")
    assert cli.main(["decode"]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "needs an NVIDIA H200" in text and "depth-limited token gate (4 layers)" in text


def test_speed_engines_measure_each_promoted_family_alone():
    """The decode record's speed A/B: the framework path and all kernels at every batch, and
    all kernels but one op at the first batch, for each promoted op family, in one run."""
    import netra.ops
    from netra.decode import main as dmain

    e = dmain.engines((1, 8, 32))
    assert e[:2] == [("netra-framework-graph", ("all",), (1, 8, 32)), ("netra-kernels-graph", (), (1, 8, 32))]
    assert [(n, off, b) for n, off, b in e[2:]] == [(f"netra-kernels-minus-{op}-graph", dmain.ABLATE_OPS.get(op, (op,)), (1,))
                                                   for op in dmain.ABLATE]
    from netra import contracts
    assert set(dmain.ABLATE_OPS["fp8_linear"]) == {c.op for c in contracts.all_contracts()  # every FP8 projection
                                                   if (c.op or "").startswith("fp8_linear") or c.op == "moe_down"}
    for op in dmain.ABLATE:  # every ablated name is an op set_framework knows, or a group of kernels it knows
        assert all(any(k.op == o or key == o for key, k in netra.ops.OPS.items()) for o in dmain.ABLATE_OPS.get(op, (op,))), op
    assert set(dmain.LATE_TOO) <= {n for n, _, _ in e}


def test_decode_ops_skip_the_dispatcher_in_eager_code():
    """The runner's ops call their bodies directly (the custom op's dispatcher layers cost tens
    of microseconds per eager call); under named_ops() (and torch.compile) they go through
    torch.ops.netra.<op>, which the profiler then names."""
    from torch.profiler import ProfilerActivity, profile

    from netra.decode import ops as dops

    x = torch.randn(2, 64).bfloat16()
    wb, wa = torch.randn(32, 64).bfloat16(), torch.randn(32, 64).bfloat16()
    ob, oa = torch.empty(2, 32, dtype=torch.bfloat16), torch.empty(2, 32, dtype=torch.bfloat16)

    def names(ctx):
        with ctx, profile(activities=[ProfilerActivity.CPU]) as prof:
            dops.bf16_linear2(x, wb, wa, ob, oa)
        return {e.key for e in prof.key_averages()}

    import contextlib

    assert "netra::bf16_linear2" not in names(contextlib.nullcontext())
    assert "netra::bf16_linear2" in names(dops.named_ops())
    assert torch.equal(ob, x @ wb.T) and torch.equal(oa, x @ wa.T)


def test_attention_decode_is_bitwise_the_measured_forms_cpu():
    """attention_decode (the lean SDPA form since 7b16591, on a step context since e029eb4) gives
    bitwise the output and caches of the SDPA and ctx forms measured before it (experiments/attention/sdpa_variant.py), and agrees
    with that script's float64 reference; random block tables and positions."""
    from pathlib import Path

    from netra import paths
    from netra.decode import ops as dops
    from netra.lifecycle.metrics import rel_err

    sv = paths.load_module(Path(__file__).resolve().parents[1] / "experiments" / "attention" / "sdpa_variant.py",
                           "sdpa_variant")
    for B in (1, 3):
        a0 = sv.make(B, 40 + B, "cpu")
        got = {}
        for name, fn in (("op", dops.attention_decode), ("sdpa", sv.sdpa_form), ("ctx", sv._ctx_call)):
            a = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in a0.items()}
            out = torch.full((B, sv.NH * sv.HD), float("nan"), dtype=torch.bfloat16)
            fn(**a, out=out)
            got[name] = (out, a["k_pages"], a["v_pages"])
        assert all(torch.equal(x, y) for x, y in zip(got["op"], got["sdpa"])), B
        assert all(torch.equal(x, y) for x, y in zip(got["op"], got["ctx"])), B
        ao = sv.in_order_pages(a0)  # the runner's block table: view_form (a candidate) is bitwise ctx_form
        pair = {}
        for name, fn in (("view", sv._view_call), ("ctx", sv._ctx_call)):
            a = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in ao.items()}
            out = torch.full((B, sv.NH * sv.HD), float("nan"), dtype=torch.bfloat16)
            fn(**a, out=out)
            pair[name] = (out, a["k_pages"], a["v_pages"])
        assert all(torch.equal(x, y) for x, y in zip(pair["view"], pair["ctx"])), B
        a = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in ao.items()}  # the op's pages_in_order path
        out = torch.full((B, sv.NH * sv.HD), float("nan"), dtype=torch.bfloat16)
        ctx = dops.attention_context(a["cos"], a["sin"], a["block_table"], a["positions"], a["k_pages"].shape[1])
        dops.attention_decode_ctx(a["q"], a["k"], a["v"], a["gate"], *ctx, a["k_pages"], a["v_pages"], out,
                                  pages_in_order=True)
        assert all(torch.equal(x, y) for x, y in zip((out, a["k_pages"], a["v_pages"]), pair["ctx"])), B
        bigger = torch.cat([a["k_pages"], a["k_pages"][:1]])  # not B x pages: refused before any write
        kept = bigger.clone()
        with pytest.raises(ValueError, match="pages_in_order"):
            dops.attention_decode_ctx(a["q"], a["k"], a["v"], a["gate"], *ctx, bigger, torch.cat([a["v_pages"], a["v_pages"][:1]]),
                                      out, pages_in_order=True)
        assert torch.equal(bigger, kept)
        assert rel_err(got["op"][0], sv.reference(**a0)) < 1e-2


@pytest.mark.parametrize("shared_first", [False, True])
def test_moe_shared_first_only_reorders_two_independent_launches(monkeypatch, shared_first):
    """netra.decode.ops.MOE_SHARED_FIRST (a candidate for the PDL engine, experiments/decode/step_ab.py
    shared_first): the shared gate | up goes before the routed experts' instead of after; nothing
    else moves, and the block's outputs are the same bits (a small synthetic MoE on the CPU)."""
    from netra.decode import ops as dops
    from netra.model.packed import pack

    cfg = tiny(layers=1)
    lw = pack(ck.synthetic_checkpoint(cfg, seed=1)).layer(0, "cpu")
    calls = []
    for name in ("moe_router_norm", "fp8_linear_experts", "fp8_linear_gate", "moe_down"):
        real = getattr(dops, name)
        monkeypatch.setattr(dops, name, lambda *a, _r=real, _n=name, **k: (calls.append(_n), _r(*a, **k))[1])
    monkeypatch.setattr(dops, "MOE_SHARED_MERGED", False)  # the two launches (test_moe_shared_merged below)
    outs = {}
    for flag in (False, shared_first):
        monkeypatch.setattr(dops, "MOE_SHARED_FIRST", flag)
        calls.clear()
        h = (torch.randn(2, cfg.hidden_size, generator=torch.Generator().manual_seed(4)) * 2).to(torch.bfloat16)
        x, out = torch.empty_like(h), torch.empty_like(h)
        dops.moe_decode(x, lw["router"], lw["w13"], lw["s13"], lw["w2"], lw["s2"], *lw["sw13"], *lw["sw2"], lw["sgate"],
                        cfg.num_experts_per_tok, out, h, lw["post_norm"], 1e-6)
        outs[flag] = (list(calls), h, x, out)
    order = ["moe_router_norm", "fp8_linear_experts", "fp8_linear_gate", "moe_down"]
    if shared_first:
        order[1:3] = order[2:0:-1]
    assert outs[shared_first][0][:4] == order  # (moe_down's framework path calls fp8_linear_experts after)
    assert all(torch.equal(a, b) for a, b in zip(outs[False][1:], outs[shared_first][1:]))


def _moe_calls_by_flag(monkeypatch, B: int, flag: str, fixed: dict, seed: int) -> dict:
    """moe_decode on one tiny layer at B tokens (the framework path) with netra.decode.ops.<flag> off, then on (the
    flags in ``fixed`` set throughout): {False / True: (the MoE ops called, in order, h, x, out)}."""
    from netra.decode import ops as dops
    from netra.model.packed import pack

    cfg = tiny(layers=1)
    lw = pack(ck.synthetic_checkpoint(cfg, seed=1)).layer(0, "cpu")
    calls = []
    for name in ("moe_router_norm", "fp8_linear_experts_shared", "fp8_linear_experts", "fp8_linear_gate", "moe_down"):
        real = getattr(dops, name)
        monkeypatch.setattr(dops, name, lambda *a, _r=real, _n=name, **k: (calls.append(_n), _r(*a, **k))[1])
    for k, v in fixed.items():
        monkeypatch.setattr(dops, k, v)
    outs = {}
    for on in (False, True):
        monkeypatch.setattr(dops, flag, on)
        calls.clear()
        h = (torch.randn(B, cfg.hidden_size, generator=torch.Generator().manual_seed(seed)) * 2).to(torch.bfloat16)
        x, out = torch.empty_like(h), torch.empty_like(h)
        dops.moe_decode(x, lw["router"], lw["w13"], lw["s13"], lw["w2"], lw["s2"], *lw["sw13"], *lw["sw2"], lw["sgate"],
                        cfg.num_experts_per_tok, out, h, lw["post_norm"], 1e-6)
        outs[on] = (list(calls), h, x, out)
    return outs


@pytest.mark.parametrize("B", [2, 5])
def test_moe_shared_merged_takes_one_launch_up_to_its_rows(monkeypatch, B):
    """netra.decode.ops.MOE_SHARED_MERGED: up to MOE_SHARED_MERGED_ROWS tokens the MoE block calls
    fp8_linear_experts_shared in place of fp8_linear_experts and fp8_linear_gate (above them, those two), and on the
    framework path the block's outputs are the same bits either way."""
    from netra.decode import ops as dops

    outs = _moe_calls_by_flag(monkeypatch, B, "MOE_SHARED_MERGED", {"MOE_SHARED_GROUP": False}, seed=4)
    merged = B <= dops.MOE_SHARED_MERGED_ROWS
    assert outs[True][0][1] == ("fp8_linear_experts_shared" if merged else "fp8_linear_experts")
    assert outs[False][0][1:3] == ["fp8_linear_experts", "fp8_linear_gate"]
    assert all(torch.equal(a, b) for a, b in zip(outs[False][1:], outs[True][1:]))


@pytest.mark.parametrize("B", [4, 5, 16, 17, 32, 33])
def test_moe_shared_group_takes_one_launch_from_the_group_rows(monkeypatch, B):
    """netra.decode.ops.MOE_SHARED_GROUP: from EXPERTS_GROUP_ROWS to MOE_SHARED_GROUP_ROWS tokens the MoE block calls
    fp8_linear_experts_shared (whose kernel there is the grouped build with the shared expert in it) in place of
    fp8_linear_experts and fp8_linear_gate; below, MOE_SHARED_MERGED decides; above, the two launches. On the
    framework path the block's outputs are the same bits either way."""
    from netra.decode import ops as dops

    outs = _moe_calls_by_flag(monkeypatch, B, "MOE_SHARED_GROUP", {"MOE_SHARED_MERGED": False}, seed=5)
    grouped = dops.EXPERTS_GROUP_ROWS <= B <= dops.MOE_SHARED_GROUP_ROWS
    assert outs[True][0][1] == ("fp8_linear_experts_shared" if grouped else "fp8_linear_experts")
    assert outs[False][0][1:3] == ["fp8_linear_experts", "fp8_linear_gate"]
    assert all(torch.equal(a, b) for a, b in zip(outs[False][1:], outs[True][1:]))


def test_step_ab_forms_swap_in_ptx_whose_entry_is_the_kernel_they_replace():
    """experiments/decode/step_ab.py loads each form's swapped PTX with loader.load_text(name, ptx), which looks the
    function up by that name: a build whose entry carries another name (router_regs after its build got its own name)
    would fail only on the device."""
    import re

    from netra import paths

    sa = paths.load_module(paths.ROOT / "experiments" / "decode" / "step_ab.py", "step_ab")
    wrong = [(form, name, re.findall(r"\.entry\s+(\w+)", ptx)) for form in sa.FORMS
             for name, (ptx, _) in sa.previous_builds(form).items() if name not in re.findall(r"\.entry\s+(\w+)", ptx)]
    assert not wrong, wrong
