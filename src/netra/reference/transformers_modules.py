"""The transformers 5.17.0 Qwen3.5-MoE norm modules (the architecture of Qwen3.6), built
with given weights and fed float64 tensors, as a second, independent reference. The
modules upcast to float32 inside (``x.float()``) by design, so they agree with the float64
references to about 1e-7, not 1e-15."""

from __future__ import annotations

import torch
from torch import Tensor


def _classes():
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as m

    return m.Qwen3_5MoeRMSNorm, m.Qwen3_5MoeRMSNormGated


def _module(cls, w: Tensor, eps: float, dtype):
    mod = cls(w.shape[-1], eps=eps).to(device=w.device, dtype=dtype)
    with torch.no_grad():
        mod.weight.copy_(w.to(dtype))
    return mod


def rms_module(w: Tensor, eps: float, dtype=torch.float64):
    return _module(_classes()[0], w, eps, dtype)


def gated_module(w: Tensor, eps: float, dtype=torch.float64):
    return _module(_classes()[1], w, eps, dtype)


@torch.no_grad()
def rmsnorm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    return rms_module(w, eps)(x.double())


@torch.no_grad()
def add_rmsnorm(x: Tensor, residual: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    h = residual.double() + x.double()  # the decoder layer's `hidden_states = residual + hidden_states`
    return h, rms_module(w, eps)(h)


@torch.no_grad()
def qk_rmsnorm(q: Tensor, k: Tensor, wq: Tensor, wk: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    return rms_module(wq, eps)(q.double()), rms_module(wk, eps)(k.double())


@torch.no_grad()
def gated_rmsnorm(o: Tensor, z: Tensor, w: Tensor, eps: float) -> Tensor:
    hd = w.shape[-1]
    mod = gated_module(w, eps)
    y = mod(o.double().reshape(-1, hd), z.double().reshape(-1, hd))
    return y.reshape(o.shape)
