"""Verification in the chunk form (gdn_verify_chunk_t16, its 8-warp build, and gdn_commit_t16):
the committed PTX is its generators' output, the restore data rebuilds exactly the states the
sequential rule reaches, the framework paths agree with the float64 references, the guards take
the verification layout and refuse what the kernels cannot read, and the op picks its kernel by B."""

from __future__ import annotations

import pytest
import torch

from netra import contracts, paths
from netra.contracts import gdn as G
from netra.decode import ops as dops
from netra.lifecycle import testbeds
from netra.lifecycle.metrics import rel_err
from netra.ops import gdn
from netra.reference import gdn as rg
from test_guard_cpu import make

V, V8, CM = (contracts.get(n) for n in ("gdn_verify_chunk_t16", "gdn_verify_chunk_t16_w8", "gdn_commit_t16"))


def test_ptx_is_current():
    gv, gc = paths.generator("gdn", "gen_gdn_verify_chunk"), paths.generator("gdn", "gen_gdn_commit")
    assert set(gv.BUILDS) == {V.name, V8.name} and gv.MAXT == G.MAX_TOKENS == max(V.dims["T"])
    for name, kw in gv.BUILDS.items():
        assert paths.ptx_path("sm_90a", "gdn", name).read_text() == gv.generate(**kw), "run gen_gdn_verify_chunk.py"
        assert contracts.get(name).threads == 32 * kw["nw"]
    assert paths.ptx_path("sm_90a", "gdn", CM.name).read_text() == gc.generate(), "run gen_gdn_commit.py"


def _inputs(B, T, seed=0):
    return testbeds.get(V.name).make({"B": B, "T": T, "P": B * (T + 1)}, torch.Generator().manual_seed(seed), "cpu")


def _outputs(B, T):
    f = lambda *s: torch.full(s, float("nan"))  # noqa: E731
    return (torch.full((B, T, G.VALUE_DIM), float("nan"), dtype=torch.bfloat16), f(B, T, G.NK, G.DK),
            f(B, T, G.NV, G.DV), f(B, T, G.NV))


def test_restore_data_rebuilds_the_sequential_states():
    """float64: verify_restore's outputs are verify_steps' and commit(j) is the state verify_steps
    leaves after j tokens, for every j, with the conv window bitwise."""
    B, T = 2, 6
    i = _inputs(B, T, seed=5)
    seq = rg.verify_steps(*testbeds._gdn_args(i), 16, 1e-6)
    r = rg.verify_restore(*testbeds._chunk_args(i), 16, 1e-6)
    assert rel_err(r["out"], seq["out"]) < 1e-12
    so = i["slots_out"][:, 0]
    for j in range(T + 1):
        acc = torch.tensor([j, T - j])
        cm = rg.commit(i["qkv"], i["conv_pool"], i["state_pool"], i["slot_in"], so, acc, r["ksave"], r["dsave"], r["gsave"])
        for b in range(B):
            jb = int(acc[b])
            want = i["slot_in"][b] if jb == 0 else i["slots_out"][b, jb - 1]
            assert rel_err(cm["state_pool"][so[b]], seq["state_pool"][want]) < 1e-12
            assert torch.equal(cm["conv_pool"][so[b]], seq["conv_pool"][want])


def test_framework_paths_agree_with_float64_and_leave_the_pools():
    B, T = 3, 5
    i = _inputs(B, T, seed=2)
    before = (i["conv_pool"].clone(), i["state_pool"].clone())
    out, ks, ds, gs = _outputs(B, T)
    dops.gdn_verify_chunk(*testbeds._chunk_args(i), 16, 1e-6, out, ks, ds, gs)  # no GPU: the framework path
    assert torch.equal(i["conv_pool"], before[0]) and torch.equal(i["state_pool"], before[1])
    ref = rg.verify_restore(*testbeds._chunk_args(i), 16, 1e-6)
    for name, got in (("out", out), ("ksave", ks), ("dsave", ds), ("gsave", gs)):
        assert rel_err(got, ref[name]) <= V.tolerance, name
    seq = rg.verify_steps(*testbeds._gdn_args(i), 16, 1e-6)
    acc = torch.tensor([T, 0, 2])
    so = i["slots_out"][:, 0].clone()
    dops.gdn_commit(i["qkv"], i["conv_pool"], i["state_pool"], i["slot_in"], so, acc, ks, ds, gs)
    for b, j in enumerate(acc.tolist()):
        want = i["slot_in"][b] if j == 0 else i["slots_out"][b, j - 1]
        assert rel_err(i["state_pool"][so[b]], seq["state_pool"][want]) < 1e-5
        assert torch.equal(i["conv_pool"][so[b]], seq["conv_pool"][want] if j else before[0][want])


def test_commit_framework_masks_unaccepted_tokens_and_skips_bad_slots():
    """Tokens past the accepted count are not read (NaN there changes nothing); a slot id outside
    the pool (in or out) writes nothing and does not raise, as the kernel."""
    B, T = 3, 4
    i = _inputs(B, T, seed=9)
    r = rg.verify_restore(*testbeds._chunk_args(i), 16, 1e-6)
    ks, ds, gs = (r[n].float().clone() for n in ("ksave", "dsave", "gsave"))
    ds[0, 2:] = float("nan")
    ks[0, 2:] = float("nan")
    conv, state = i["conv_pool"].clone(), i["state_pool"].clone()
    P = state.shape[0]
    so = i["slots_out"][:, 0].clone()
    sin = i["slot_in"].clone()
    sin[2] = P + 3
    dops.gdn_commit_framework(i["qkv"], conv, state, sin, so, torch.tensor([2, 1, 1]), ks, ds, gs)
    seq = rg.verify_steps(*testbeds._gdn_args(i), 16, 1e-6)
    assert rel_err(state[so[0]], seq["state_pool"][i["slots_out"][0, 1]]) < 1e-5
    assert rel_err(state[so[1]], seq["state_pool"][i["slots_out"][1, 0]]) < 1e-5
    assert torch.equal(state[so[2]], i["state_pool"][so[2]]) and torch.equal(conv[so[2]], i["conv_pool"][so[2]])


def test_commit_framework_in_place_and_bad_counts():
    """slot_out = slot_in commits in place; a count outside 0..T leaves that sequence's slot alone."""
    B, T = 2, 4
    i = _inputs(B, T, seed=8)
    r = rg.verify_restore(*testbeds._chunk_args(i), 16, 1e-6)
    ks, ds, gs = (r[n].float() for n in ("ksave", "dsave", "gsave"))
    seq = rg.verify_steps(*testbeds._gdn_args(i), 16, 1e-6)
    conv, state = i["conv_pool"].clone(), i["state_pool"].clone()
    dops.gdn_commit_framework(i["qkv"], conv, state, i["slot_in"], i["slot_in"], torch.tensor([3, T + 1]), ks, ds, gs)
    assert rel_err(state[i["slot_in"][0]], seq["state_pool"][i["slots_out"][0, 2]]) < 1e-5
    assert torch.equal(state[i["slot_in"][1]], i["state_pool"][i["slot_in"][1]])
    assert torch.equal(conv[i["slot_in"][1]], i["conv_pool"][i["slot_in"][1]])


@pytest.mark.parametrize("name", [V.name, V8.name])
def test_verify_guard_takes_token_major_rows(name):
    B, T = 2, 5
    i = _inputs(B, T)
    _, go, fake, _ = make(name)
    assert go(*testbeds._chunk_args(i), *_outputs(B, T), 1e-6) is None
    (call,) = fake.calls
    s = call["seen"]
    assert call["grid"] == (256, 1, 1) and call["block"] == (contracts.get(name).threads, 1, 1)
    assert (s["qkv_seq"], s["qkv_tok"], s["z_seq"], s["z_tok"]) == (5 * G.QKVZ, G.QKVZ, 5 * G.QKVZ, G.QKVZ)
    assert (s["tokens"], s["pool_slots"]) == (5, 12)


@pytest.mark.parametrize("bad", ["int32 slots", "odd token stride", "T differs", "ksave f16"])
def test_verify_guard_refuses(bad):
    B, T = 2, 3
    i = _inputs(B, T)
    outs = list(_outputs(B, T))
    if bad == "int32 slots":
        i["slot_in"] = i["slot_in"].int()
    elif bad == "odd token stride":  # the q/k channel pairs are read by 4-byte loads
        wide = torch.zeros(B, T, G.QKVZ + 1, dtype=torch.bfloat16)
        i["qkv"], i["z"] = wide[..., :G.CONV_DIM], wide[..., G.CONV_DIM:G.QKVZ]
    elif bad == "T differs":
        outs[1] = outs[1][:, :2]
    else:
        outs[1] = outs[1].half()
    _, go, fake, _ = make(V.name)
    assert go(*testbeds._chunk_args(i), *outs, 1e-6) is not None and not fake.calls


def test_commit_guard():
    i = testbeds.get(CM.name).make({"B": 2, "T": 3, "P": 8}, torch.Generator().manual_seed(1), "cpu")
    _, go, fake, _ = make(CM.name)
    assert go(*testbeds._commit_args(i)) is None
    (call,) = fake.calls
    assert call["grid"] == (256, 1, 1) and call["seen"]["tokens"] == 3
    i["accepted"] = i["accepted"].int()
    _, go, fake, _ = make(CM.name)
    assert go(*testbeds._commit_args(i)) is not None and not fake.calls


@pytest.mark.parametrize("B", [1, 3])
def test_op_picks_the_8_warp_kernel_at_batch_1(monkeypatch, B):
    seen = []
    for k in (gdn.VERIFY_CHUNK, gdn.VERIFY_CHUNK_W8):
        monkeypatch.setattr(k, "go", lambda *a, k=k: seen.append(k.contract.name))
    i = _inputs(B, 2)
    dops.gdn_verify_chunk(*testbeds._chunk_args(i), 16, 1e-6, *_outputs(B, 2))
    assert seen == [V8.name if B == 1 else V.name]


@pytest.mark.parametrize("kw", [dict(nw=4), dict(nw=4, fast_silu=True), dict(nw=8), dict(nw=8, fast_silu=True)],
                         ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_measured_builds_assemble_without_spills(kw):
    """The four builds of experiments/gdn/verify_chunk_variant.json stay buildable, without spills."""
    from test_gdn_cpu import _ptxas_usage

    res = _ptxas_usage("gdn_verify_chunk_t16", paths.generator("gdn", "gen_gdn_verify_chunk").generate(**kw))
    assert res["spill_stores"] == res["spill_loads"] == 0, res
