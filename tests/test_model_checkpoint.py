"""CPU tests of the model config and the checkpoint: the real FP8 and BF16 layouts,
synthetic checkpoints, refusal of malformed ones, and the transformers reference bridge."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file

from netra.model import checkpoint as ck
from netra.model.config import QWEN36_35B_A3B, TextConfig, tiny


def test_builtin_config_is_qwen36():
    c = QWEN36_35B_A3B
    assert (c.hidden_size, c.num_hidden_layers, c.vocab_size) == (2048, 40, 248320)
    assert [i for i, t in enumerate(c.layer_types) if t == "full_attention"] == list(range(3, 40, 4))
    assert c.rope_theta == 1e7 and c.rotary_dim == 64 and c.conv_dim == 8192
    assert TextConfig.from_dict(c.to_hf_dict()) == c
    hf = c.to_transformers()
    assert hf.rope_parameters["rope_theta"] == 1e7 and hf.layer_types == list(c.layer_types)


def test_config_from_nested_real_layout(tmp_path):
    d = QWEN36_35B_A3B.to_hf_dict()
    d["text_config"]["num_hidden_layers"] = 8
    d["text_config"]["layer_types"] = d["text_config"]["layer_types"][:8]
    d["vision_config"] = {"depth": 27}
    (tmp_path / "config.json").write_text(json.dumps(d))
    c = TextConfig.from_json(tmp_path)
    assert c.num_hidden_layers == 8 and c.quant_method == "fp8" and c.weight_block_size == (128, 128)
    with pytest.raises(ValueError, match="layer_types"):
        TextConfig(num_hidden_layers=3, layer_types=("linear_attention",))


def test_full_size_byte_budget_matches_design():
    """The per-token FP8 bytes of design/qwen36.md, counted from the expected tensors."""
    c = QWEN36_35B_A3B
    spec = ck.expected(c)
    n = lambda name: math.prod(spec[name].shape)  # noqa: E731
    p = ck.PREFIX + "layers.{}."
    gdn = sum(n(p.format(0) + f"linear_attn.{k}.weight") for k in ("in_proj_qkv", "in_proj_z", "out_proj"))
    attn = sum(n(p.format(3) + f"self_attn.{k}_proj.weight") for k in "qkvo")
    shared = sum(n(p.format(0) + f"mlp.shared_expert.{k}_proj.weight") for k in ("gate", "up", "down"))
    expert = sum(n(p.format(0) + f"mlp.experts.0.{k}_proj.weight") for k in ("gate", "up", "down"))
    assert round(gdn / 1e6, 1) == 33.6 and round(attn / 1e6, 1) == 27.3 and round(shared / 1e6, 2) == 3.15
    assert round(8 * expert * 40 / 1e6) == 1007  # 8 routed experts a token, 40 layers
    assert round(n("lm_head.weight") * 2 / 1e6) == 1017
    quantized = sum(1 for s in spec.values() if s.quantized)
    assert quantized == 30 * 3 + 10 * 4 + 40 * 3 + 40 * 256 * 3


def test_quantize_dequantize():
    g = torch.Generator().manual_seed(0)
    w = 0.02 * torch.randn(300, 200, generator=g)  # partial blocks on both axes
    q, s = ck.quantize(w)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (3, 2)
    d = ck.dequantize(q, s)
    assert torch.equal(d[:128, :128], q[:128, :128].float() * s[0, 0])  # exact: one scale a block
    assert torch.equal(d[256:, 128:], q[256:, 128:].float() * s[2, 1])
    assert ((d - w).abs().max() / w.abs().max()).item() < 2 ** -4  # e4m3: 3 mantissa bits
    assert q.float().abs().amax().item() == 448.0  # each block's amax maps to the FP8 max


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-fp8")
    ck.write_synthetic(path, tiny(), seed=3, shard_bytes=1 << 20)
    return path


def test_synthetic_roundtrip_through_sharded_files(tiny_dir):
    index = json.loads((tiny_dir / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1, "expected several shards"
    loaded = ck.load(tiny_dir, progress=False)
    mem = ck.synthetic_checkpoint(tiny(), seed=3)
    assert loaded.fp8 and set(loaded.tensors) == set(mem.tensors)
    for k, v in mem.tensors.items():
        assert torch.equal(loaded.tensors[k].view(torch.uint8) if v.dtype == torch.float8_e4m3fn else loaded.tensors[k],
                           v.view(torch.uint8) if v.dtype == torch.float8_e4m3fn else v), k
    other = ck.synthetic_checkpoint(tiny(), seed=4)
    name = ck.PREFIX + "layers.0.linear_attn.in_proj_qkv.weight"
    assert not torch.equal(other.tensors[name].view(torch.uint8), mem.tensors[name].view(torch.uint8))


def test_synthetic_statistics_are_realistic():
    c = ck.synthetic_checkpoint(tiny(), seed=0)
    w = c.weight(ck.PREFIX + "layers.0.linear_attn.in_proj_qkv.weight", torch.float32)
    assert 0.018 < w.std().item() < 0.022
    a_log = c.tensors[ck.PREFIX + "layers.0.linear_attn.A_log"]
    assert (a_log >= 0).all() and (a_log <= math.log(16) + 1e-6).all()
    dt = torch.nn.functional.softplus(c.tensors[ck.PREFIX + "layers.0.linear_attn.dt_bias"].float())
    assert (dt > 9e-4).all() and (dt < 0.11).all()
    assert not any((t.float() == 0).all() for t in c.tensors.values()), "an all-zero tensor"


def test_bf16_scales_are_accepted_and_converted(tmp_path):
    ck.write_synthetic(tmp_path, tiny(), seed=5, scale_dtype=torch.bfloat16)
    c = ck.load(tmp_path, progress=False)
    s = c.tensors[ck.PREFIX + "layers.0.linear_attn.in_proj_qkv.weight_scale_inv"]
    assert s.dtype == torch.float32


def test_bf16_layout_loads(tmp_path):
    cfg = TextConfig(**{**tiny().__dict__, "quant_method": None})
    ck.write_synthetic(tmp_path, cfg, seed=6)
    c = ck.load(tmp_path, progress=False)
    assert not c.fp8
    assert c.tensors[ck.PREFIX + "layers.0.linear_attn.in_proj_qkv.weight"].dtype == torch.bfloat16
    assert not any(k.endswith("_scale_inv") for k in c.tensors)


def _corrupt(src, dst, edit):
    """Copy a checkpoint folder, editing one shard's tensors with edit(dict)."""
    import shutil

    shutil.copytree(src, dst)
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    shards = {}
    for name, f in index["weight_map"].items():
        shards.setdefault(f, []).append(name)
    for f in shards:
        tensors = load_file(str(dst / f))
        if edit(tensors, index["weight_map"]):
            save_file(tensors, str(dst / f))
    (dst / "model.safetensors.index.json").write_text(json.dumps(index))


QKV = ck.PREFIX + "layers.0.linear_attn.in_proj_qkv.weight"


@pytest.mark.parametrize("case, edit, message", [
    ("missing tensor", lambda t, m: QKV in t and (t.pop(QKV), m.pop(QKV)), f"{QKV}: missing"),
    ("missing scale", lambda t, m: QKV + "_scale_inv" in t and (t.pop(QKV + "_scale_inv"), m.pop(QKV + "_scale_inv")),
     f"{QKV}_scale_inv: missing"),
    ("wrong dtype", lambda t, m: QKV in t and t.update({QKV: t[QKV].to(torch.bfloat16)}) is None, f"{QKV}: expected dtype float8_e4m3fn"),
    ("wrong shape", lambda t, m: QKV in t and t.update({QKV: t[QKV][:-1].contiguous()}) is None, f"{QKV}: expected shape"),
    ("NaN scale", lambda t, m: QKV + "_scale_inv" in t and t[QKV + "_scale_inv"].view(-1)[0].fill_(float("nan")) is not None,
     f"{QKV}_scale_inv: 1 scales are NaN"),
    ("zero scale", lambda t, m: QKV + "_scale_inv" in t and t[QKV + "_scale_inv"].view(-1)[1].fill_(0.0) is not None,
     f"{QKV}_scale_inv: 1 scales are zero"),
])
def test_malformed_checkpoint_is_refused_naming_the_tensor(tiny_dir, tmp_path, case, edit, message):
    bad = tmp_path / "bad"
    _corrupt(tiny_dir, bad, edit)
    with pytest.raises(ck.CheckpointError) as e:
        ck.load(bad, progress=False)
    assert message in str(e.value), str(e.value)


def test_transformers_reference_runs_on_dequantized_weights():
    c = ck.synthetic_checkpoint(tiny(), seed=7)
    model = ck.transformers_model(c, torch.float64)
    name = ck.PREFIX + "layers.3.self_attn.o_proj.weight"
    assert torch.equal(model.model.layers[3].self_attn.o_proj.weight, c.weight(name, torch.float64))
    e3 = model.model.layers[0].mlp.experts.gate_up_proj[3]
    assert torch.equal(e3[:128], c.weight(ck.PREFIX + "layers.0.mlp.experts.3.gate_proj.weight", torch.float64))
    ids = torch.randint(0, 512, (2, 9), generator=torch.Generator().manual_seed(0))
    logits = model(ids).logits
    assert logits.shape == (2, 9, 512) and torch.isfinite(logits).all() and logits.std() > 0


def test_repack_roundtrip_and_runner_from_packed(tiny_dir, tmp_path):
    from netra.cli import main
    from netra.decode.runner import DecodeRunner
    from netra.model import packed

    assert main(["repack", str(tiny_dir), str(tmp_path / "packed")]) == 0
    p = packed.load(tmp_path / "packed")
    direct = packed.pack(ck.load(tiny_dir, progress=False))
    assert p.cfg == direct.cfg and set(p.tensors) == set(direct.tensors)
    for k, v in direct.tensors.items():
        a, b = p.tensors[k], v
        if v.dtype == torch.float8_e4m3fn:
            a, b = a.view(torch.uint8), b.view(torch.uint8)
        assert torch.equal(a, b), k
    # the stacked experts keep each expert's gate | up rows and their block scales
    c = ck.load(tiny_dir, progress=False)
    e = ck.PREFIX + "layers.1.mlp.experts.5."
    assert torch.equal(ck.dequantize(p.tensors["layers.1.w13"][5], p.tensors["layers.1.s13"][5])[:128],
                       c.weight(e + "gate_proj.weight", torch.float32))
    ids = torch.tensor([3, 7])
    r1 = DecodeRunner(p, batch=2, max_context=16, device="cpu", page_size=16)
    r2 = DecodeRunner(c, batch=2, max_context=16, device="cpu", page_size=16)
    assert torch.equal(r1.step(ids), r2.step(ids))


def test_packed_load_refuses_other_folders(tiny_dir):
    from netra.model import packed

    with pytest.raises(ck.CheckpointError, match="netra.json"):
        packed.load(tiny_dir)
