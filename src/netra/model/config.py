"""The Qwen3.6 text config (the text part of Qwen3_5MoeForConditionalGeneration).

The real Qwen3.6-35B-A3B values are built in (design/qwen36.md); note that transformers'
own Qwen3_5MoeTextConfig() defaults differ in rope theta. ``from_json`` reads a real
config.json (top level or nested under ``text_config``, with ``quantization_config``)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class TextConfig:
    hidden_size: int = 2048
    num_hidden_layers: int = 40
    full_attention_interval: int = 4
    layer_types: tuple[str, ...] = ()
    vocab_size: int = 248320
    rms_norm_eps: float = 1e-6
    # full attention
    num_attention_heads: int = 16
    num_key_value_heads: int = 2
    head_dim: int = 256
    rope_theta: float = 10_000_000.0
    partial_rotary_factor: float = 0.25
    mrope_section: tuple[int, ...] = (11, 11, 10)
    # Gated DeltaNet
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    # MoE
    num_experts: int = 256
    num_experts_per_tok: int = 8
    moe_intermediate_size: int = 512
    shared_expert_intermediate_size: int = 512
    max_position_embeddings: int = 262144
    tie_word_embeddings: bool = False
    # FP8 checkpoint format
    quant_method: str | None = "fp8"
    weight_block_size: tuple[int, int] = (128, 128)
    source: str = field(default="built-in Qwen3.6-35B-A3B", compare=False)

    def __post_init__(self):
        if not self.layer_types:
            types = tuple("full_attention" if (i + 1) % self.full_attention_interval == 0 else "linear_attention"
                          for i in range(self.num_hidden_layers))
            object.__setattr__(self, "layer_types", types)
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries for {self.num_hidden_layers} layers")
        bad = set(self.layer_types) - {"linear_attention", "full_attention"}
        if bad:
            raise ValueError(f"unknown layer types {sorted(bad)}")

    # derived sizes ----------------------------------------------------------------------
    @property
    def key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    def is_full(self, layer: int) -> bool:
        return self.layer_types[layer] == "full_attention"

    def with_layers(self, n: int) -> "TextConfig":
        """The first n layers (the layer pattern kept), for reduced-size runs."""
        return dataclasses.replace(self, num_hidden_layers=n, layer_types=self.layer_types[:n])

    # io ---------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict, source: str = "dict") -> "TextConfig":
        top = d
        text = d.get("text_config", d)
        rope = dict(text.get("rope_parameters") or text.get("rope_scaling") or {})
        kw = {}
        names = {f.name for f in dataclasses.fields(cls)}
        for k in names & set(text):
            kw[k] = text[k]
        if "rope_theta" in rope or "rope_theta" in text:
            kw["rope_theta"] = float(rope.get("rope_theta", text.get("rope_theta")))
        if "partial_rotary_factor" in rope or "partial_rotary_factor" in text:
            kw["partial_rotary_factor"] = float(rope.get("partial_rotary_factor", text.get("partial_rotary_factor")))
        if "mrope_section" in rope:
            kw["mrope_section"] = tuple(rope["mrope_section"])
        q = top.get("quantization_config") or text.get("quantization_config")
        if q:
            kw["quant_method"] = q.get("quant_method")
            if q.get("weight_block_size"):
                kw["weight_block_size"] = tuple(q["weight_block_size"])
        else:
            kw["quant_method"] = None
        if "layer_types" in kw:
            kw["layer_types"] = tuple(kw["layer_types"])
        if "tie_word_embeddings" in top:
            kw["tie_word_embeddings"] = bool(top["tie_word_embeddings"])
        return cls(**kw, source=source)

    @classmethod
    def from_json(cls, path: str | Path) -> "TextConfig":
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        return cls.from_dict(json.loads(path.read_text()), source=str(path))

    def to_hf_dict(self) -> dict:
        """A config.json in the layout of the real FP8 checkpoint (text_config nested)."""
        text = {
            "model_type": "qwen3_5_moe_text",
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("source", "quant_method", "weight_block_size", "rope_theta",
                                 "partial_rotary_factor", "mrope_section", "full_attention_interval", "tie_word_embeddings")},
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta,
                                "partial_rotary_factor": self.partial_rotary_factor,
                                "mrope_section": list(self.mrope_section), "mrope_interleaved": True},
            "hidden_act": "silu",
        }
        text["layer_types"] = list(self.layer_types)
        out = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
               "text_config": text, "tie_word_embeddings": self.tie_word_embeddings}
        if self.quant_method:
            out["quantization_config"] = {"quant_method": self.quant_method, "fmt": "e4m3",
                                          "activation_scheme": "dynamic",
                                          "weight_block_size": list(self.weight_block_size)}
        return out

    def to_transformers(self, dtype=None):
        """transformers' Qwen3_5MoeTextConfig with these values (the reference model's)."""
        from transformers import Qwen3_5MoeTextConfig

        cfg = Qwen3_5MoeTextConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim, rms_norm_eps=self.rms_norm_eps, layer_types=list(self.layer_types),
            linear_conv_kernel_dim=self.linear_conv_kernel_dim, linear_key_head_dim=self.linear_key_head_dim,
            linear_value_head_dim=self.linear_value_head_dim, linear_num_key_heads=self.linear_num_key_heads,
            linear_num_value_heads=self.linear_num_value_heads, moe_intermediate_size=self.moe_intermediate_size,
            shared_expert_intermediate_size=self.shared_expert_intermediate_size,
            num_experts_per_tok=self.num_experts_per_tok, num_experts=self.num_experts,
            max_position_embeddings=self.max_position_embeddings, tie_word_embeddings=self.tie_word_embeddings,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta,
                             "partial_rotary_factor": self.partial_rotary_factor,
                             "mrope_section": list(self.mrope_section), "mrope_interleaved": True},
        )
        if dtype is not None:
            cfg.dtype = dtype
        return cfg


QWEN36_35B_A3B = TextConfig()


def tiny(layers: int = 4) -> TextConfig:
    """A small config with the same structure (every 4th layer full attention, GQA, gated
    attention, partial RoPE, GDN, routed + shared experts) for CPU tests. Projection sizes
    are multiples of 128 so the FP8 128x128 blocks tile them as in the real model, except
    where a real size is not (in_proj_a/b) and the loader must cope with partial blocks."""
    return TextConfig(
        hidden_size=256, num_hidden_layers=layers, vocab_size=512,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64, linear_value_head_dim=64,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128, shared_expert_intermediate_size=128,
        mrope_section=(3, 3, 2),  # sums to rotary_dim / 2 = 8, as (11, 11, 10) does to 32
        max_position_embeddings=4096, source="netra.model.config.tiny",
    )
