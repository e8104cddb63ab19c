"""Per-kernel test beds: realistic inputs, the references, and the peers the bench times.

Inputs are fresh random draws at the scale the model produces (never zeros): residual
stream values with per-channel scales spread over an order of magnitude and a few outlier
channels, norm weights near their trained range. Every tensor is made from a seeded
generator so a failure can be replayed."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

from .. import contracts
from ..contracts import Contract
from ..reference import norm as ref
from ..reference import transformers_modules as tfm

EPS = 1e-6  # Qwen3.6 rms_norm_eps


def _channels(gen: torch.Generator, n: int, device, outliers: int = 4, spread: float = 0.6) -> Tensor:
    """Per-channel scales: log-normal, with a few outlier channels 20x larger."""
    s = torch.exp(spread * torch.randn(n, generator=gen))
    idx = torch.randperm(n, generator=gen)[:outliers]
    s[idx] *= 20.0
    return s.to(device)


def _randn(gen, shape, device, scale=1.0) -> Tensor:
    return (torch.randn(shape, generator=gen) * scale).to(device)


@dataclass
class Testbed:
    contract: Contract
    make: Callable  # (dims, gen, device) -> {input or inout name: tensor}
    reference: Callable  # (inputs) -> {output name: float64 tensor}
    transformers: Callable | None  # (inputs) -> {output name: tensor} from transformers modules
    peers: dict[str, Callable] = field(default_factory=dict)  # name -> (inputs, scalars) -> outputs
    scalars: dict = field(default_factory=lambda: {"eps": EPS})
    # outputs of the kernel that the reference also takes, as "kernel_<name>" (checked
    # themselves against float64 first): a result exactly defined only on a rounded
    # intermediate, such as the router's ids on the kernel's BF16 x_out
    chained: tuple[str, ...] = ()

    def reference_for(self, inputs: dict, outputs: dict) -> dict:
        return self.reference({**inputs, **{f"kernel_{n}": outputs[n] for n in self.chained}})

    def output_names(self) -> list[str]:
        return [t.name for t in self.contract.tensors if t.role in ("out", "inout")]

    def alloc_outputs(self, dims: dict, device) -> dict[str, Tensor]:
        import torch

        dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "u8": torch.uint8, "i32": torch.int32,
              "i64": torch.int64}
        return {t.name: torch.empty(self.contract.shape_of(t, dims), dtype=dt[t.dtype], device=device)
                for t in self.contract.tensors if t.role == "out"}

    def args(self, bufs: dict) -> list:
        """Positional arguments of the guard-and-launch function, in contract order."""
        out = []
        for p in self.contract.params:
            if isinstance(p, contracts.Tensor):
                out.append(bufs[p.name])
            elif p.value is None:
                out.append(self.scalars[p.name])
        return out


# --- norm ----------------------------------------------------------------------------------
def _hidden(dims, gen, device) -> Tensor:
    M = dims["M"]
    return (torch.randn(M, 2048, generator=gen) * _channels(gen, 2048, "cpu")).to(torch.bfloat16).to(device)


def _norm_weight(gen, n, device) -> Tensor:
    return (0.1 * torch.randn(n, generator=gen)).to(torch.bfloat16).to(device)


def _make_rmsnorm(dims, gen, device):
    return {"x": _hidden(dims, gen, device), "w": _norm_weight(gen, 2048, device)}


def _make_add_rmsnorm(dims, gen, device):
    M = dims["M"]
    x = (0.5 * torch.randn(M, 2048, generator=gen) * _channels(gen, 2048, "cpu", outliers=2)).to(torch.bfloat16).to(device)
    return {"x": x, "residual": _hidden(dims, gen, device), "w": _norm_weight(gen, 2048, device)}


def _make_qk(dims, gen, device):
    """q and k as views of a fused q|gate, k, v projection output [M, 9216]: q head h at
    h * 512 (its gate follows it), k at 8192 + 256 * h."""
    M = dims["M"]
    qkv = (torch.randn(M, 9216, generator=gen) * 2.0).to(torch.bfloat16).to(device)
    q = qkv[:, :8192].view(M, 16, 512)[:, :, :256]
    k = qkv[:, 8192:8704].view(M, 2, 256)
    k.mul_(_channels(gen, 256, device, outliers=2).to(torch.bfloat16))
    return {"q": q, "k": k, "q_weight": _norm_weight(gen, 256, device), "k_weight": _norm_weight(gen, 256, device), "_qkv": qkv}


def _make_gated(dims, gen, device):
    M = dims["M"]
    o = (0.05 * torch.randn(M, 4096, generator=gen) * _channels(gen, 4096, "cpu", outliers=8)).to(torch.bfloat16).to(device)
    z = (2.0 * torch.randn(M, 4096, generator=gen)).to(torch.bfloat16).to(device)
    w = (1.0 + 0.2 * torch.randn(128, generator=gen)).to(torch.bfloat16).to(device)
    return {"o": o, "z": z, "w": w}


def _zc(x, w, eps):  # the model's zero-centred RMSNorm as plain PyTorch, BF16 out
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())).to(x.dtype)


def _eager_rmsnorm(i, s):
    return {"y": _zc(i["x"], i["w"], s["eps"])}


def _eager_add_rmsnorm(i, s):
    h = i["residual"] + i["x"]
    return {"residual": h, "y": _zc(h, i["w"], s["eps"])}


def _eager_qk(i, s):
    return {"out_q": _zc(i["q"], i["q_weight"], s["eps"]), "out_k": _zc(i["k"], i["k_weight"], s["eps"])}


def _eager_gated(i, s):
    o, z, w = i["o"], i["z"], i["w"]
    of = o.float().unflatten(-1, (-1, 128))
    y = w * (of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + s["eps"])).to(o.dtype)
    y = y * torch.nn.functional.silu(z.float().unflatten(-1, (-1, 128)))
    return {"y": y.to(o.dtype).flatten(-2)}


@functools.cache
def _compiled(fn):
    return torch.compile(fn)


def _compile_peer(fn):
    def peer(i, s):
        return _compiled(fn)(i, s)

    return peer


def _tf_rms_peer(kind):
    """The transformers modules in the model's dtype (BF16), as a model runs them. One
    module per role; each call points its weight at that copy's weight tensor."""
    mods = {}

    def mod(role, w, eps, gated=False):
        m = mods.get(role)
        if m is None:
            m = mods[role] = (tfm.gated_module if gated else tfm.rms_module)(w, eps, dtype=torch.bfloat16)
        m.weight.data = w
        return m

    def peer(i, s):
        eps = s["eps"]
        if kind == "rmsnorm":
            return {"y": mod("w", i["w"], eps)(i["x"])}
        if kind == "add_rmsnorm":
            h = i["residual"] + i["x"]
            return {"residual": h, "y": mod("w", i["w"], eps)(h)}
        if kind == "qk":
            return {"out_q": mod("q", i["q_weight"], eps)(i["q"]), "out_k": mod("k", i["k_weight"], eps)(i["k"])}
        o = i["o"]
        y = mod("g", i["w"], eps, gated=True)(o.reshape(-1, 128), i["z"].reshape(-1, 128))
        return {"y": y.reshape(o.shape)}

    return peer


def _peers(eager, kind):
    return {"torch_eager": eager, "torch_compile": _compile_peer(eager), "transformers": _tf_rms_peer(kind)}


# --- proj ----------------------------------------------------------------------------------
def _make_fp8_gemv(shape):
    def make(dims, gen, device):
        from ..model.checkpoint import quantize
        from ..ops.proj import pack_weight

        M, N, K = dims["M"], shape.N, shape.K
        # N(0, 0.02) weights with the spread of trained blocks: a log-normal scale per 128-row
        # block and per input channel, a few outlier channels.
        w = torch.randn(N, K, generator=gen) * 0.02
        w *= torch.exp(0.5 * torch.randn(N // 128, 1, generator=gen)).repeat_interleave(128, 0)
        w *= _channels(gen, K, "cpu", outliers=2, spread=0.3)
        q, sc = quantize(w.to(device))
        x = (torch.randn(M, K, generator=gen) * _channels(gen, K, "cpu")).to(torch.bfloat16).to(device)
        return {"x": x, "w": pack_weight(q), "scale": sc, "_w_plain": q,
                "_w_bf16": _dequant(q, sc).to(torch.bfloat16)}

    return make


def _dequant(q, sc):
    from ..model.checkpoint import dequantize

    return dequantize(q, sc, (128, 128), torch.float32)


def _scaled_mm_peer(i, s):
    """torch._scaled_mm with 1x128 block scales on both sides: x quantized per (row, 128 k)
    in the timed call, the weight's 128x128 scales expanded to 1x128; rows padded to a multiple of 16 (the 32-token
    records at ee2e327 ran it with 16 rows only: it failed above 16, fixed after)."""
    x, q, sc = i["x"], i["_w_plain"], i["scale"]
    M, K = x.shape
    N = q.shape[0]
    P = -(-M // 16) * 16
    xp = torch.zeros(P, K, dtype=x.dtype, device=x.device)
    xp[:M] = x
    xb = xp.float().view(P, K // 128, 128)
    sa = (xb.abs().amax(-1) / 448.0).clamp_min(1e-12)  # [P, K/128]
    xq = (xb / sa[:, :, None]).to(torch.float8_e4m3fn).view(P, K)
    sb = sc.repeat_interleave(128, 0)[:N]  # [N, K/128]
    sa = sa.t().contiguous().t()  # [P, K/128], outer dim (M) major
    try:
        out = torch._scaled_mm(xq, q.T, scale_a=sa, scale_b=sb.t().contiguous(), out_dtype=torch.bfloat16)
    except RuntimeError:  # the other reading of "outer-dim-major" for b
        out = torch._scaled_mm(xq, q.T, scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)
    return {"out": out[:M]}


def _proj_peers():
    return {
        "cublas_bf16": lambda i, s: {"out": i["x"] @ i["_w_bf16"].T},
        "scaled_mm_1x128": _scaled_mm_peer,
        "dequant_matmul": lambda i, s: {"out": i["x"] @ _dequant(i["_w_plain"], i["scale"]).to(torch.bfloat16).T},
    }


def _make_ba(dims, gen, device):
    """x at the scale the input norm produces; w_b, w_a N(0, 0.02) with a log-normal spread per row."""
    from ..contracts.proj import BA_K, BA_ROWS

    x = (torch.randn(dims["M"], BA_K, generator=gen) * _channels(gen, BA_K, "cpu")).to(torch.bfloat16).to(device)
    w = [(torch.randn(BA_ROWS, BA_K, generator=gen) * 0.02 * torch.exp(0.5 * torch.randn(BA_ROWS, 1, generator=gen)))
         .to(torch.bfloat16).to(device) for _ in range(2)]
    return {"x": x, "w_b": w[0], "w_a": w[1]}


def _make_lm_head(dims, gen, device):
    """x at the final norm's scale; the head N(0, 0.02) with a log-normal spread per row (drawn on the device from a
    seed of ``gen``: 508M values); ws zero, as the contract asks at allocation."""
    from ..contracts.proj import LM_HEAD

    x = (torch.randn(dims["M"], LM_HEAD.K, generator=gen) * _channels(gen, LM_HEAD.K, "cpu")).to(torch.bfloat16)
    dgen = torch.Generator(device).manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
    w = torch.randn(LM_HEAD.V, LM_HEAD.K, generator=dgen, device=device, dtype=torch.bfloat16)
    w *= (0.02 * torch.exp(0.5 * torch.randn(LM_HEAD.V, 1, generator=dgen, device=device))).to(torch.bfloat16)
    return {"x": x.to(device), "w": w, "ws": torch.zeros(LM_HEAD.counter + 1, dtype=torch.int64, device=device)}


def _lm_head_ref(i):
    """logits in float64 (by chunks of rows of the head: 4 GB at once otherwise); tokens the argmax of the kernel's own
    BF16 logits (a result defined exactly only on them: a near tie rounds either way); ws back to zero."""
    x = i["x"].double()
    logits = torch.cat([x @ w.double().T for w in i["w"].split(1 << 16)], dim=1)
    return {"logits": logits, "tokens": torch.argmax(i["kernel_logits"], -1), "ws": torch.zeros_like(i["ws"])}


def _lm_head_peer(i, s):
    """The framework path before the kernel: cuBLAS, then torch.argmax (design/h200.md's 'LM head + argmax')."""
    logits = i["x"] @ i["w"].T
    return {"logits": logits, "tokens": torch.argmax(logits.float(), -1)}


def _make_fp8_norm(shape):
    """h at the residual stream's scale, the norm weight as the norm family's, W as the plain kernel's."""
    plain = _make_fp8_gemv(shape)

    def make(dims, gen, device):
        i = plain(dims, gen, device)
        h = i.pop("x")
        return {**i, "h": (h.float() * 8).to(torch.bfloat16), "norm_w": _norm_weight(gen, shape.K, device)}

    return make


def _make_fp8_res(shape):
    plain = _make_fp8_gemv(shape)

    def make(dims, gen, device):
        i = plain(dims, gen, device)
        h = (torch.randn(dims["M"], shape.N, generator=gen) * _channels(gen, shape.N, "cpu")).to(torch.bfloat16)
        return {**i, "h": h.to(device)}

    return make


def _make_fp8_gate(shape):
    """As the plain kernel's, and a shared_expert_gate row N(0, 0.02)."""
    plain = _make_fp8_gemv(shape)

    def make(dims, gen, device):
        i = plain(dims, gen, device)
        return {**i, "gate_w": (torch.randn(1, shape.K, generator=gen) * 0.02).to(torch.bfloat16).to(device)}

    return make


def _gate_ref(i):
    from ..reference.proj import fp8_linear

    return {"out": fp8_linear(i["x"], i["_w_plain"], i["scale"]), "gate_out": i["x"].double() @ i["gate_w"].double().T}


def _gate_unfused_peer(i, s):
    """What the MoE op runs today: the plain kernel, then the gate as a cuBLAS GEMV."""
    from ..decode.ops import linear

    out = torch.empty(i["x"].shape[0], i["w"].shape[0] * 16, dtype=i["x"].dtype, device=i["x"].device)
    linear(i["x"], i["w"], i["scale"], out)
    return {"out": out, "gate_out": i["x"] @ i["gate_w"].T}


def _norm_ref(i):
    from ..reference.norm import rmsnorm
    from ..reference.proj import fp8_linear

    x = rmsnorm(i["h"], i["norm_w"], EPS)
    return {"x_out": x, "out": fp8_linear(x.to(torch.bfloat16), i["_w_plain"], i["scale"])}


def _norm_unfused_peer(i, s):
    """The same work unfused: rmsnorm_h2048, then the plain kernel (what the runner ran before)."""
    from ..decode.ops import linear
    from ..ops.norm import rmsnorm

    x = rmsnorm(i["h"], i["norm_w"], s["eps"])
    out = torch.empty(x.shape[0], i["w"].shape[0] * 16, dtype=x.dtype, device=x.device)
    linear(x, i["w"], i["scale"], out)
    return {"x_out": x, "out": out}


def _with_ba_weights(fp8_make):
    """An FP8 kernel's bed (``fp8_make``), plus w_b and w_a as bf16_gemv_n64_k2048's: the b | a builds' beds."""
    def make(dims, gen, device):
        i = fp8_make(dims, gen, device)
        ba = _make_ba(dims, gen, device)
        return {**i, "w_b": ba["w_b"], "w_a": ba["w_a"]}

    return make


def _norm_ba_ref(i):
    out = _norm_ref(i)
    xb = out["x_out"].to(torch.bfloat16).double()
    return {**out, "out_b": xb @ i["w_b"].double().T, "out_a": xb @ i["w_a"].double().T}


def _norm_ba_unfused_peer(i, s):
    """What the runner ran before: the norm kernel (fp8_linear_norm), then the b | a kernel (bf16_linear2)."""
    from ..decode import ops as dops

    M = i["h"].shape[0]
    x = torch.empty_like(i["h"])
    out = torch.empty(M, i["w"].shape[0] * 16, dtype=x.dtype, device=x.device)
    ob, oa = (torch.empty(M, i[w].shape[0], dtype=x.dtype, device=x.device) for w in ("w_b", "w_a"))
    dops.fp8_linear_norm(i["h"], i["norm_w"], s["eps"], i["w"], i["scale"], out, x)
    dops.bf16_linear2(x, i["w_b"], i["w_a"], ob, oa)
    return {"x_out": x, "out": out, "out_b": ob, "out_a": oa}


def _ba_ref(i):
    from ..reference.proj import fp8_linear

    x = i["x"].double()
    return {"out": fp8_linear(i["x"], i["_w_plain"], i["scale"]), "out_b": x @ i["w_b"].double().T,
            "out_a": x @ i["w_a"].double().T}


def _ba_unfused_peer(i, s):
    """What the runner ran before above 8 rows: the b | a kernel (bf16_linear2), then the in_proj (fp8_linear: the 16-row
    build up to 16 rows, the 32-token one above)."""
    from ..decode import ops as dops

    x = i["x"]
    out = torch.empty(x.shape[0], i["w"].shape[0] * 16, dtype=x.dtype, device=x.device)
    ob, oa = (torch.empty(x.shape[0], i[w].shape[0], dtype=x.dtype, device=x.device) for w in ("w_b", "w_a"))
    dops.bf16_linear2(x, i["w_b"], i["w_a"], ob, oa)
    dops.linear(x, i["w"], i["scale"], out)
    return {"out": out, "out_b": ob, "out_a": oa}


def _res_unfused_peer(i, s):
    """fp8_gemv_n2048_k4096, then the BF16 add in PyTorch (out of place: the bench replays it)."""
    from ..decode.ops import linear

    y = torch.empty_like(i["h"])
    linear(i["x"], i["w"], i["scale"], y)
    return {"h": i["h"] + y, "out": y}


def _res_kernel_rows(i, table: str) -> dict:
    """The residual kernel of netra.ops.proj's ``table`` on every row (in launches of its rows), h in place."""
    from ..ops import proj

    out = torch.empty_like(i["h"])
    k = proj.kernel_for(i["w"], getattr(proj, table))
    if k.rows(i["x"], i["w"], i["scale"], i["h"], out):
        raise RuntimeError(f"{k.contract.name} refused rows")
    return {"h": i["h"], "out": out}


def _res16_peer(i, s):
    """fp8_gemv_n2048_k4096_res on chunks of 16 rows, h in place (what fp8_linear_add launched above 16 rows before the
    two-pass build, netra.contracts.proj.RES_P2)."""
    return _res_kernel_rows(i, "RES_KERNELS")


def _res_p2_peer(i, s):
    """fp8_gemv_n2048_k4096_res_p2, h in place (the two-pass build fp8_linear_add launched above 16 rows before
    netra.contracts.proj.RES32)."""
    return _res_kernel_rows(i, "RES_P2_KERNELS")


def _res_cublas_peer(i, s):
    y = i["x"] @ i["_w_bf16"].T
    return {"h": i["h"] + y, "out": y}


def _res_ref(i):
    from ..reference.proj import fp8_linear

    y = fp8_linear(i["x"], i["_w_plain"], i["scale"])
    return {"h": i["h"].double() + y, "out": y}


def _make_fp8_experts(shape):
    """The chosen experts' weights as the plain kernels' (N(0, 0.02), a log-normal scale per
    128-row block and per input channel), drawn on the device from a seed of ``gen``; every
    other expert's weight is zero (a kernel reading a wrong expert fails the reference, and
    the sanitizer's run stays short); each token's top-k expert ids distinct (as torch.topk
    gives), the down's ids independent per pair."""

    def make(dims, gen, device):
        from ..model.checkpoint import quantize
        from ..ops.proj import pack_weight

        M, E, N, K, k = dims["M"], dims["E"], shape.N, shape.K, shape.pairs_per_x
        if k > 1:
            ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(M)])
        else:
            ids = torch.randint(0, E, (M,), generator=gen)
        ids = ids.to(device)
        e = ids.reshape(-1)
        chosen = e.unique()
        n = chosen.numel()
        g = torch.Generator(device=device).manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
        w = torch.randn(n, N, K, generator=g, device=device) * 0.02
        w *= torch.exp(0.5 * torch.randn(n, N // 128, 1, generator=g, device=device)).repeat_interleave(128, 1)
        w *= _channels(gen, K, device, outliers=2, spread=0.3)
        qc, scc = quantize(w.view(n * N, K))
        del w
        q = torch.zeros(E, N, K, dtype=qc.dtype, device=device)
        sc = torch.ones(E, N // 128, K // 128, device=device)
        q[chosen], sc[chosen] = qc.view(n, N, K), scc.view(n, N // 128, K // 128)
        x = (torch.randn(M, K, generator=gen) * _channels(gen, K, "cpu")).to(torch.bfloat16).to(device)
        return {"x": x, "w": pack_weight(q), "scale": sc, "ids": ids, "_w_plain": q,
                "_w_sel_bf16": _dequant(q[e].reshape(-1, K), sc[e].reshape(-1, K // 128)).to(torch.bfloat16).view(-1, N, K)}

    return make


def _experts_ref(shape):
    def ref(i):
        from ..reference.proj import fp8_linear

        k, x, e = shape.pairs_per_x, i["x"], i["ids"].reshape(-1)
        rows = [fp8_linear(x[j // k:j // k + 1], i["_w_plain"][e[j]], i["scale"][e[j]]) for j in range(e.numel())]
        return {"out": torch.cat(rows).view(i["ids"].shape + (shape.N,))}

    return ref


def _experts_peers(shape):
    from ..decode.ops import experts_framework

    def framework(i, s):  # what the runner's MoE block ran before these kernels
        out = torch.empty(i["ids"].shape + (shape.N,), dtype=torch.bfloat16, device=i["x"].device)
        experts_framework(i["x"], i["_w_plain"], i["scale"], i["ids"], out)
        return {"out": out}

    def bmm(i, s):  # cuBLAS on the pairs' weights dequantized to BF16 beforehand (not timed: an advantage)
        k = shape.pairs_per_x
        xr = i["x"].repeat_interleave(k, 0) if k > 1 else i["x"]
        return {"out": torch.bmm(i["_w_sel_bf16"], xr[:, :, None])[:, :, 0].view(i["ids"].shape + (shape.N,))}

    return {"framework_gather_dequant_bmm": framework, "cublas_bf16_bmm": bmm}


def _make_experts_shared(shape):
    """The routed experts' bed, and a shared expert's gate | up and gate as the gate kernel's bed draws them."""
    routed = _make_fp8_experts(shape)
    shared = _make_fp8_gate(shape)

    def make(dims, gen, device):
        i = routed(dims, gen, device)
        sh = shared({"M": dims["M"]}, gen, device)
        return {**i, "ws": sh["w"], "ss": sh["scale"], "_ws_plain": sh["_w_plain"], "gate_w": sh["gate_w"]}

    return make


def _experts_shared_ref(shape):
    routed = _experts_ref(shape)

    def ref(i):
        from ..reference.proj import fp8_linear

        return {**routed(i), "sout": fp8_linear(i["x"], i["_ws_plain"], i["ss"]),
                "gate_out": i["x"].double() @ i["gate_w"].double().T}

    return ref


def _experts_shared_unfused_peer(i, s):
    """What the MoE block ran before: fp8_linear_experts, then fp8_linear_gate (their kernels)."""
    from ..decode import ops as dops

    M, k = i["ids"].shape
    x = i["x"]
    out = torch.empty(M, k, i["w"].shape[1] * 16, dtype=x.dtype, device=x.device)
    sout = torch.empty(M, i["ws"].shape[0] * 16, dtype=x.dtype, device=x.device)
    g = torch.empty(M, 1, dtype=x.dtype, device=x.device)
    dops.fp8_linear_experts(x, i["w"], i["scale"], i["ids"], out)
    dops.fp8_linear_gate(x, i["ws"], i["ss"], i["gate_w"], sout, g)
    return {"out": out, "sout": sout, "gate_out": g}


def _make_experts_router(shape):
    """The router-fused gate | up (contracts.proj.EXPERTS_ROUTER): the router-with-norm bed's h, router and norm
    weights (its logits have exact ties at the top-8 boundary), every expert's gate | up nonzero (16 distinct
    quantized weights, expert e on weight e % 16 with its own log-normal block scales: a wrong expert fails the
    reference), the shared expert's gate | up and gate as the merged kernel's bed, the barrier counter at 0."""

    def make(dims, gen, device):
        from ..contracts.proj import NUM_EXPERTS
        from ..model.checkpoint import quantize
        from ..ops.proj import pack_weight

        M, E, N, K = dims["M"], NUM_EXPERTS, shape.N, shape.K
        r = _make_router_norm({"M": M}, gen, device)
        sh = _make_fp8_gate(shape)({"M": M}, gen, device)
        g = torch.Generator(device=device).manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
        w = torch.randn(16, N, K, generator=g, device=device) * 0.02
        w *= _channels(gen, K, device, outliers=2, spread=0.3)
        qc, scc = quantize(w.view(16 * N, K))
        del w
        pick = torch.arange(E, device=device) % 16
        q = qc.view(16, N, K)[pick]
        sc = scc.view(16, N // 128, K // 128)[pick] * torch.exp(
            0.5 * torch.randn(E, N // 128, 1, generator=g, device=device))
        return {"h": r["h"], "norm_w": r["norm_w"], "rw": r["w"], "w": pack_weight(q), "scale": sc, "_w_plain": q,
                "ws": sh["w"], "ss": sh["scale"], "_ws_plain": sh["_w_plain"], "gate_w": sh["gate_w"],
                "bar": torch.zeros(1, dtype=torch.int64, device=device)}

    return make


def _experts_router_ref(shape):
    def ref(i):
        from ..contracts.proj import SMS, TOP_K
        from ..reference.norm import rmsnorm
        from ..reference.proj import fp8_linear, router_logits, router_topk

        x = rmsnorm(i["h"], i["norm_w"], EPS)
        xb = i.get("kernel_x_out", x.to(torch.bfloat16))
        logits = router_logits(xb, i["rw"])
        top, idx = router_topk(logits, TOP_K)
        rows = [fp8_linear(xb[t:t + 1], i["_w_plain"][e], i["scale"][e]) for t in range(xb.shape[0]) for e in idx[t]]
        return {"x_out": x, "logits": logits.double(), "top": top, "idx": idx,
                "out": torch.cat(rows).view(xb.shape[0], TOP_K, shape.N),
                "sout": fp8_linear(xb, i["_ws_plain"], i["ss"]), "gate_out": xb.double() @ i["gate_w"].double().T,
                "bar": i["bar"] + SMS}

    return ref


def _experts_router_unfused_peer(i, s):
    """What the MoE block runs without it: moe_router_norm, then fp8_linear_experts_shared (their kernels)."""
    from ..contracts.proj import TOP_K
    from ..decode import ops as dops

    h, M = i["h"], i["h"].shape[0]
    x = torch.empty_like(h)
    top = torch.empty(M, TOP_K, dtype=h.dtype, device=h.device)
    idx = torch.empty(M, TOP_K, dtype=torch.long, device=h.device)
    out = torch.empty(M, TOP_K, i["w"].shape[1] * 16, dtype=h.dtype, device=h.device)
    sout = torch.empty(M, i["ws"].shape[0] * 16, dtype=h.dtype, device=h.device)
    g = torch.empty(M, 1, dtype=h.dtype, device=h.device)
    dops.moe_router_norm(h, i["norm_w"], s["eps"], i["rw"], x, top, idx)
    dops.fp8_linear_experts_shared(x, i["w"], i["scale"], idx, i["ws"], i["ss"], i["gate_w"], out, sout, g)
    return {"x_out": x, "top": top, "idx": idx, "out": out, "sout": sout, "gate_out": g}


def _make_experts_router_down(shape):
    """The router-fused bed (_make_experts_router) at one token, plus every expert's down weight (16 distinct quantized
    weights as that bed's gate | up, expert e on weight e % 16 with its own log-normal block scales: a wrong expert fails
    the reference) and the shared expert's, packed."""

    def make(dims, gen, device):
        from ..contracts.proj import MOE_DOWN, MOE_I, NUM_EXPERTS
        from ..model.checkpoint import quantize
        from ..ops.proj import pack_weight

        i = _make_experts_router(shape)(dims, gen, device)
        E, N = NUM_EXPERTS, MOE_DOWN.N
        g = torch.Generator(device=device).manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
        w = torch.randn(17, N, MOE_I, generator=g, device=device) * 0.02
        w *= torch.exp(0.5 * torch.randn(17, N // 128, 1, generator=g, device=device)).repeat_interleave(128, 1)
        q, sc = quantize(w.view(-1, MOE_I))
        del w
        q, sc = q.view(17, N, MOE_I), sc.view(17, N // 128, MOE_I // 128)
        pick = torch.arange(E, device=device) % 16
        s2 = sc[pick] * torch.exp(0.5 * torch.randn(E, N // 128, 1, generator=g, device=device))
        return {**i, "w2": pack_weight(q[pick]), "s2": s2, "_w2_plain": q[pick], "sw2": pack_weight(q[16]),
                "ss2": sc[16].contiguous(), "_sw2_plain": q[16]}

    return make


def _experts_router_down_ref(shape):
    """The router-fused reference, then moe_down's on the kernel's own gate | up rows, routing weights and gate logit
    (the reference's ids: they must equal the kernel's), added to h in float64."""
    router = _experts_router_ref(shape)

    def ref(i):
        from ..reference.proj import moe_down

        r = router(i)
        gu = i.get("kernel_out", r["out"].to(torch.bfloat16))
        M = gu.shape[0]
        out = moe_down(gu.reshape(M, -1), i["_w2_plain"], i["s2"], r["idx"], i.get("kernel_top", r["top"]),
                       i.get("kernel_sout", r["sout"].to(torch.bfloat16)), i["_sw2_plain"], i["ss2"],
                       i.get("kernel_gate_out", r["gate_out"].to(torch.bfloat16)))
        return {**r, "moe_out": out, "h": i["h"].double() + out}

    return ref


def _experts_router_down_pair_peer(i, s):
    """What the batch-1 MoE block ran before: fp8_linear_experts_router, then moe_down (their kernels)."""
    from ..contracts.proj import TOP_K
    from ..decode import ops as dops

    h, M = i["h"].clone(), i["h"].shape[0]
    x = torch.empty_like(h)
    top = torch.empty(M, TOP_K, dtype=h.dtype, device=h.device)
    idx = torch.empty(M, TOP_K, dtype=torch.long, device=h.device)
    logits = torch.empty(M, i["rw"].shape[0], dtype=torch.float32, device=h.device)
    out = torch.empty(M, TOP_K, i["w"].shape[1] * 16, dtype=h.dtype, device=h.device)
    sout = torch.empty(M, i["ws"].shape[0] * 16, dtype=h.dtype, device=h.device)
    g = torch.empty(M, 1, dtype=h.dtype, device=h.device)
    moe_out = torch.empty_like(h)
    dops.fp8_linear_experts_router(h, i["norm_w"], s["eps"], i["rw"], i["w"], i["scale"], i["ws"], i["ss"],
                                   i["gate_w"], i["bar"], x, top, idx, logits, out, sout, g)
    dops.moe_down(out.view(M, -1), i["w2"], i["s2"], idx, top, sout, i["sw2"], i["ss2"], g, h, moe_out)
    return {"x_out": x, "top": top, "idx": idx, "logits": logits, "out": out, "sout": sout, "gate_out": g,
            "moe_out": moe_out, "h": h}


def _make_router(dims, gen, device):
    """x at the scale of the post-attention norm's output, the router N(0, 0.02) per row with a
    log-normal spread (BF16 logits of order 1: exact ties at the top-8 boundary occur and test
    the tie rule)."""
    from ..contracts.proj import NUM_EXPERTS, ROUTER_K

    x = (torch.randn(dims["M"], ROUTER_K, generator=gen) * _channels(gen, ROUTER_K, "cpu")).to(torch.bfloat16)
    w = torch.randn(NUM_EXPERTS, ROUTER_K, generator=gen) * 0.02 * torch.exp(0.3 * torch.randn(NUM_EXPERTS, 1, generator=gen))
    return {"x": x.to(device), "w": w.to(torch.bfloat16).to(device)}


def _router_ref(i):
    from ..contracts.proj import TOP_K
    from ..reference.proj import router_logits, router_topk

    top, idx = router_topk(router_logits(i["x"], i["w"]), TOP_K)
    return {"top": top, "idx": idx}


def _router_peer(i, s):
    """The model's form in PyTorch (what moe_decode ran before the kernel)."""
    from ..contracts.proj import TOP_K

    probs = torch.softmax((i["x"] @ i["w"].T).float(), -1)
    top, idx = torch.topk(probs, TOP_K, -1)
    return {"top": (top / top.sum(-1, keepdim=True)).to(torch.bfloat16), "idx": idx}


def _make_router_norm(dims, gen, device):
    """The router's x scaled per token by U(0, 4) as the residual h (the norm undoes the scale),
    the router weight as the router's bed, a norm weight N(0, 0.1) (applied as 1 + w)."""
    from ..contracts.proj import ROUTER_K

    i = _make_router(dims, gen, device)
    h = (i["x"].float() * (4 * torch.rand(dims["M"], 1, generator=gen)).to(device)).to(torch.bfloat16)
    nw = (torch.randn(ROUTER_K, generator=gen) * 0.1).to(torch.bfloat16).to(device)
    return {"h": h, "w": i["w"], "norm_w": nw}


def _router_norm_ref(i):
    """x_out in float64; the ids (exact) and weights on the kernel's own x_out when given (the
    ids are exactly defined only on a BF16 x; rmsnorm_h2048's rsqrt.approx is not emulated),
    else on the float64 x rounded to BF16."""
    from ..contracts.proj import TOP_K
    from ..reference.norm import rmsnorm
    from ..reference.proj import router_logits, router_topk

    x = rmsnorm(i["h"], i["norm_w"], EPS)
    xb = i.get("kernel_x_out", x.to(torch.bfloat16))
    top, idx = router_topk(router_logits(xb, i["w"]), TOP_K)
    return {"x_out": x, "top": top, "idx": idx}


def _router_norm_peer(i, s):
    """What the runner ran before: rmsnorm_h2048 (add_rmsnorm's there), then the router kernel."""
    from .. import ops
    from ..contracts.proj import TOP_K
    from ..decode import ops as dops

    x = ops.rmsnorm(i["h"], i["norm_w"], s["eps"])
    top = torch.empty(x.shape[0], TOP_K, dtype=torch.bfloat16, device=x.device)
    idx = torch.empty(x.shape[0], TOP_K, dtype=torch.long, device=x.device)
    dops.moe_router(x, i["w"], top, idx)
    return {"x_out": x, "top": top, "idx": idx}


def _make_router_split(dims, gen, device):
    """The router-with-norm bed, and the split build's counters at zero."""
    from ..contracts.proj import ROUTER_SPLIT_GROUPS

    return {**_make_router_norm(dims, gen, device),
            "cnt": torch.zeros(ROUTER_SPLIT_GROUPS, dtype=torch.int64, device=device)}


def _router_split_ref(i):
    """The router-with-norm reference; logits exactly on the kernel's own x_out (as the ids); each token group's counter
    one launch further (+ 256 / experts per CTA)."""
    from ..contracts.proj import NUM_EXPERTS, ROUTER_SPLIT_EXPERTS, ROUTER_SPLIT_TOKENS
    from ..reference.proj import router_logits

    r = _router_norm_ref(i)
    xb = i.get("kernel_x_out", r["x_out"].to(torch.bfloat16))
    cnt = i["cnt"].clone()
    cnt[: -(-i["h"].shape[0] // ROUTER_SPLIT_TOKENS)] += NUM_EXPERTS // ROUTER_SPLIT_EXPERTS
    return {**r, "logits": router_logits(xb, i["w"]), "cnt": cnt}


def _router_norm_cluster_peer(i, s):
    """moe_router_norm_e256_k2048 (what the op takes from ROUTER_REGS_ROWS + 1 to ROUTER_SPLIT_ROWS - 1 rows): the
    cluster build, the peer of the split and register builds."""
    from ..contracts.proj import TOP_K
    from ..ops import proj

    M = i["h"].shape[0]
    x = torch.empty(M, i["h"].shape[1], dtype=torch.bfloat16, device=i["h"].device)
    top = torch.empty(M, TOP_K, dtype=torch.bfloat16, device=x.device)
    idx = torch.empty(M, TOP_K, dtype=torch.long, device=x.device)
    if not proj.ROUTER_NORM(i["h"], i["w"], top, idx, i["norm_w"], x, s["eps"]):
        raise RuntimeError("moe_router_norm_e256_k2048's guard refused the bed")
    return {"x_out": x, "top": top, "idx": idx}


def _make_moe_down(dims, gen, device):
    """Each token's 8 distinct experts (as torch.topk gives) with down weights as the expert
    kernels' test bed draws them (every other expert zero: reading a wrong one fails), the
    shared expert's the same way; the pairs' and the shared expert's gate | up rows of order 1
    (with outlier channels), softmax routing weights, a gate logit of order 1 and a residual of
    order 1."""
    from ..contracts.proj import MOE_DOWN, MOE_I, TOP_K
    from ..model.checkpoint import quantize
    from ..ops.proj import pack_weight

    M, E, N, I = dims["M"], dims["E"], MOE_DOWN.N, MOE_I
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOP_K] for _ in range(M)]).to(device)
    chosen = ids.reshape(-1).unique()
    n = chosen.numel()
    g = torch.Generator(device=device).manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
    w = torch.randn(n + 1, N, I, generator=g, device=device) * 0.02
    w *= torch.exp(0.5 * torch.randn(n + 1, N // 128, 1, generator=g, device=device)).repeat_interleave(128, 1)
    q, sc = quantize(w.view(-1, I))
    del w
    q, sc = q.view(n + 1, N, I), sc.view(n + 1, N // 128, I // 128)
    wq = torch.zeros(E, N, I, dtype=q.dtype, device=device)
    ws = torch.ones(E, N // 128, I // 128, device=device)
    wq[chosen], ws[chosen] = q[:n], sc[:n]
    gu = (torch.randn(M, TOP_K * 2 * I, generator=gen) * 0.5 * _channels(gen, TOP_K * 2 * I, "cpu")).to(torch.bfloat16)
    sgu = (torch.randn(M, 2 * I, generator=gen) * 0.5).to(torch.bfloat16)
    top = torch.softmax(torch.randn(M, TOP_K, generator=gen), -1).to(torch.bfloat16)
    glogit = (torch.randn(M, 1, generator=gen) * 2).to(torch.bfloat16)
    h = torch.randn(M, N, generator=gen).to(torch.bfloat16)
    return {"x": gu.to(device), "w": pack_weight(wq), "scale": ws, "h": h.to(device), "ids": ids,
            "top": top.to(device), "xs": sgu.to(device), "ws": pack_weight(q[n]), "ss": sc[n].contiguous(),
            "glogit": glogit.to(device), "_w_plain": wq, "_ws_plain": q[n]}


def _moe_down_ref(i):
    from ..reference.proj import moe_down

    out = moe_down(i["x"], i["_w_plain"], i["scale"], i["ids"], i["top"], i["xs"], i["_ws_plain"], i["ss"], i["glogit"])
    return {"out": out, "h": i["h"].double() + out}


def _moe_down_peer(i, s):
    """What moe_decode ran before this kernel, from gate | up on: PyTorch's silu and products, the
    expert down kernel, the shared down kernel, then PyTorch's weighted sum, sigmoid, product and
    add (out of place: the bench replays it)."""
    from ..decode.ops import moe_down_unfused

    out = torch.empty_like(i["h"])
    h = i["h"].clone()
    moe_down_unfused(i["x"], i["w"], i["scale"], i["ids"], i["top"], i["xs"], i["ws"], i["ss"], i["glogit"], h, out)
    return {"out": out, "h": h}


def _make_moe_act(dims, gen, device):
    """moe_down's test bed's gate | up rows, routing weights and gate logit."""
    i = _make_moe_down(dict(dims, E=256), gen, device)
    return {k: i[k] for k in ("x", "top", "xs", "glogit")}


def _moe_act_ref(i):
    from ..reference.proj import moe_act

    xa, xm = moe_act(i["x"], i["top"], i["xs"], i["glogit"])
    return {"xa": xa, "xm": xm}


def _make_moe_down_grp(dims, gen, device):
    """moe_down's test bed, with the pairs' inputs made from its gate | up rows by the reference moe_act (rounded to
    the kernel's f16 and fp32); the gate | up rows stay for the per-token peer."""
    from ..reference.proj import moe_act

    i = _make_moe_down(dims, gen, device)
    xa, xm = moe_act(i["x"], i["top"], i["xs"], i["glogit"])
    return {**i, "xa": xa.to(torch.float16), "xm": xm.float()}


def _moe_down_grp_ref(i):
    from ..reference.proj import moe_down_grp

    out = moe_down_grp(i["xa"], i["xm"], i["_w_plain"], i["scale"], i["ids"], i["_ws_plain"], i["ss"])
    return {"out": out, "h": i["h"].double() + out}


def _moe_down_grp_peer(i, s):
    """The per-token kernels (fp8_gemv_n2048_k4608_moedown, _s6 from 4 rows; 8 tokens per launch), silu * up in their
    x prologue (this kernel's moe_act launch is not in its own time)."""
    from ..ops import proj

    out = torch.empty_like(i["h"])
    h = i["h"].clone()
    refused = proj.moe_down_kernel_for(h.shape[0]).rows(i["x"], i["w"], i["scale"], h, i["ids"], i["top"], i["xs"], i["ws"],
                                                         i["ss"], i["glogit"], out)
    assert not refused, refused
    return {"out": out, "h": h}


def _proj_testbeds() -> dict:
    from ..contracts.proj import (DENSE32, EXPERTS, EXPERTS_GROUP, EXPERTS_GROUP32, EXPERTS_ROUTER, EXPERTS_ROUTER_DOWN, EXPERTS_SHARED, EXPERTS_SHARED_GROUP,
                                  EXPERTS_SHARED_GROUP32, FUSED,
                                  FUSED32,
                                  MOE_ACT, MOE_DOWN_GRP,
                                  MOE_DOWNS, NORM_BA, PLAIN_BA, SHAPES)
    from ..reference.proj import fp8_linear

    beds = {sh.name: Testbed(contracts.get(sh.name), _make_fp8_gemv(sh),
                             lambda i: {"out": fp8_linear(i["x"], i["_w_plain"], i["scale"])}, None,
                             _proj_peers(), scalars={}) for sh in SHAPES + DENSE32}
    for sh in FUSED + FUSED32:
        if sh.fuse == "norm":
            beds[sh.name] = Testbed(contracts.get(sh.name), _make_fp8_norm(sh), _norm_ref, None, {
                "netra_unfused": _norm_unfused_peer,
                "cublas_bf16": lambda i, s: {"out": _zc(i["h"], i["norm_w"], s["eps"]) @ i["_w_bf16"].T}})
        elif sh.fuse == "gate":
            beds[sh.name] = Testbed(contracts.get(sh.name), _make_fp8_gate(sh), _gate_ref, None, {
                "netra_unfused": _gate_unfused_peer,
                "cublas_bf16": lambda i, s: {"out": i["x"] @ i["_w_bf16"].T, "gate_out": i["x"] @ i["gate_w"].T}},
                scalars={})
        else:
            peers = {"netra_unfused": _res_unfused_peer, "cublas_bf16": _res_cublas_peer}
            if sh.passes > 1 or sh.tokens > 16:
                peers["netra_res_16_rows"] = _res16_peer
            if sh.tokens > 16:
                peers["netra_res_p2"] = _res_p2_peer
            beds[sh.name] = Testbed(contracts.get(sh.name), _make_fp8_res(sh), _res_ref, None, peers, scalars={})
    for sh in PLAIN_BA:
        beds[sh.name] = Testbed(contracts.get(sh.name), _with_ba_weights(_make_fp8_gemv(sh)), _ba_ref, None, {
            "netra_unfused": _ba_unfused_peer,
            "cublas_bf16": lambda i, s: {"out": i["x"] @ i["_w_bf16"].T, "out_b": i["x"] @ i["w_b"].T,
                                         "out_a": i["x"] @ i["w_a"].T}}, scalars={})
    beds[NORM_BA.name] = Testbed(contracts.get(NORM_BA.name), _with_ba_weights(_make_fp8_norm(NORM_BA)), _norm_ba_ref, None, {
        "netra_unfused": _norm_ba_unfused_peer,
        "cublas_bf16": lambda i, s: (lambda x: {"out": x @ i["_w_bf16"].T, "out_b": x @ i["w_b"].T,
                                                "out_a": x @ i["w_a"].T})(_zc(i["h"], i["norm_w"], s["eps"]))})
    for sh in (EXPERTS_SHARED, EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32):  # (the peer: the two launches the op replaces at that M)
        beds[sh.name] = Testbed(contracts.get(sh.name), _make_experts_shared(sh), _experts_shared_ref(sh), None,
                                {"netra_unfused": _experts_shared_unfused_peer}, scalars={})
    beds[EXPERTS_ROUTER.name] = Testbed(contracts.get(EXPERTS_ROUTER.name), _make_experts_router(EXPERTS_ROUTER),
                                        _experts_router_ref(EXPERTS_ROUTER), None,
                                        {"netra_unfused": _experts_router_unfused_peer}, chained=("x_out",))
    beds[EXPERTS_ROUTER_DOWN.name] = Testbed(
        contracts.get(EXPERTS_ROUTER_DOWN.name), _make_experts_router_down(EXPERTS_ROUTER_DOWN),
        _experts_router_down_ref(EXPERTS_ROUTER_DOWN), None, {"netra_pair": _experts_router_down_pair_peer},
        chained=("x_out", "out", "sout", "gate_out", "top"))
    for sh in EXPERTS + (EXPERTS_GROUP, EXPERTS_GROUP32):
        beds[sh.name] = Testbed(contracts.get(sh.name), _make_fp8_experts(sh), _experts_ref(sh), None,
                                _experts_peers(sh), scalars={})
    beds["moe_router_e256_k2048"] = Testbed(contracts.get("moe_router_e256_k2048"), _make_router, _router_ref, None,
                                            {"torch_router_topk": _router_peer}, scalars={})
    beds["moe_router_norm_e256_k2048"] = Testbed(contracts.get("moe_router_norm_e256_k2048"), _make_router_norm,
                                                 _router_norm_ref, None, {"rmsnorm_then_router": _router_norm_peer},
                                                 chained=("x_out",))
    from ..contracts.proj import MOE_ROUTER_NORM_SPLIT

    beds[MOE_ROUTER_NORM_SPLIT.name] = Testbed(MOE_ROUTER_NORM_SPLIT, _make_router_split, _router_split_ref, None,
                                               {"moe_router_norm": _router_norm_cluster_peer}, chained=("x_out",))
    from ..contracts.proj import MOE_ROUTER_NORM_REGS  # the cluster build's bed, reference and outputs

    beds[MOE_ROUTER_NORM_REGS.name] = Testbed(MOE_ROUTER_NORM_REGS, _make_router_norm, _router_norm_ref, None,
                                              {"moe_router_norm": _router_norm_cluster_peer}, chained=("x_out",))
    for sh in MOE_DOWNS:
        beds[sh.name] = Testbed(contracts.get(sh.name), _make_moe_down, _moe_down_ref, None,
                                {"moe_decode_unfused": _moe_down_peer}, scalars={})
    beds[MOE_ACT.name] = Testbed(contracts.get(MOE_ACT.name), _make_moe_act, _moe_act_ref, None, {}, scalars={})
    beds[MOE_DOWN_GRP.name] = Testbed(contracts.get(MOE_DOWN_GRP.name), _make_moe_down_grp, _moe_down_grp_ref, None,
                                      {"moe_down_per_token": _moe_down_grp_peer}, scalars={})
    from ..contracts.proj import LM_HEAD

    beds[LM_HEAD.name] = Testbed(contracts.get(LM_HEAD.name), _make_lm_head, _lm_head_ref, None,
                                 {"cublas_bf16_argmax": _lm_head_peer}, scalars={}, chained=("logits",))
    beds["bf16_gemv_n64_k2048"] = Testbed(
        contracts.get("bf16_gemv_n64_k2048"), _make_ba,
        lambda i: {"out_b": i["x"].double() @ i["w_b"].double().T, "out_a": i["x"].double() @ i["w_a"].double().T},
        None, {"cublas_bf16_x2": lambda i, s: {"out_b": i["x"] @ i["w_b"].T, "out_a": i["x"] @ i["w_a"].T}},
        scalars={})
    return beds


# --- gdn -----------------------------------------------------------------------------------
def _make_gdn(dims, gen, device):
    """The projection outputs at the scale in_proj produces (qkv and z as views of one fused
    qkvz row per token), trained-range gates, and pools of P slots holding states of a running
    sequence, addressed by a shuffled subset of slot ids. With T (verification): B sequences
    of T tokens, the rows token-major per sequence; slot_in [B] and slots_out [B, T] distinct."""
    from ..contracts import gdn as G

    B, P, T = dims["B"], dims["P"], dims.get("T")
    r = lambda *shape, sc=1.0: torch.randn(*shape, generator=gen) * sc  # noqa: E731
    lead = (B,) if T is None else (B, T)
    qkvz = r(*lead, G.QKVZ).to(torch.bfloat16).to(device)
    perm = torch.randperm(P, generator=gen)
    i = {
        "qkv": qkvz[..., :G.CONV_DIM], "z": qkvz[..., G.CONV_DIM:], "_qkvz": qkvz,
        "b_in": r(*lead, G.NV).to(torch.bfloat16).to(device), "a_in": r(*lead, G.NV).to(torch.bfloat16).to(device),
        "conv_w": r(G.CONV_DIM, G.KW, sc=0.3).to(torch.bfloat16).to(device),
        "a_log": torch.log(torch.empty(G.NV).uniform_(1, 16, generator=gen)).to(device),
        "dt_bias": r(G.NV, sc=0.5).to(device),
        "norm_w": (1 + r(G.DV, sc=0.1)).to(torch.bfloat16).to(device),
        "conv_pool": r(P, G.CONV_DIM, G.KW - 1).to(torch.bfloat16).to(device),
        "state_pool": r(P, G.NV, G.DK, G.DV, sc=0.05).to(device),
    }
    if T is not None:
        i["slot_in"] = perm[:B].to(device)
        i["slots_out"] = perm[B:B + B * T].view(B, T).to(device)
        return i
    i["slots"] = perm[:B].to(device)
    # flash-linear-attention's layout of the same states, for its peer: dense per sequence,
    # its conv cache holds K columns and reads the old window from columns 1..K-1
    i["_fla_conv"] = torch.cat([torch.zeros_like(i["conv_pool"][i["slots"], :, :1]), i["conv_pool"][i["slots"]]], -1)
    i["_fla_state"] = i["state_pool"][i["slots"]].contiguous()
    return i


def _gdn_args(i):
    """The op's tensor arguments in order: decode (slots) or verification (slot_in, slots_out)."""
    tail = (i["slots"],) if "slots" in i else (i["slot_in"], i["slots_out"])
    return (i["qkv"], i["z"], i["b_in"], i["a_in"], i["conv_w"], i["a_log"], i["dt_bias"], i["norm_w"], i["conv_pool"],
            i["state_pool"], *tail)


def _gdn_framework_peer(i, s):
    from ..decode import ops as dops

    out = torch.empty(i["qkv"].shape[0], i["z"].shape[1], dtype=torch.bfloat16, device=i["qkv"].device)
    dops.gdn_decode_framework(*_gdn_args(i), 16, s["eps"], out)
    return {"out": out}


def _gdn_fla_peer(i, s):
    """flash-linear-attention 0.6.0's decode path: its conv update, the fused recurrent rule
    (gate, beta and q/k l2norm in-kernel) and its fused gated norm."""
    from fla.modules.causal_conv1d.ops import causal_conv1d_update
    from fla.modules.norm.fused_norm_gate import rms_norm_gated
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    B = i["qkv"].shape[0]
    x, _ = causal_conv1d_update(i["qkv"], i["_fla_conv"], weight=i["conv_w"], activation="silu")
    q, k, v = torch.split(x, [2048, 2048, 4096], -1)
    o, state = fused_recurrent_gated_delta_rule(
        q.reshape(B, 1, 16, 128), k.reshape(B, 1, 16, 128), v.reshape(B, 1, 32, 128), g=i["a_in"].view(B, 1, 32),
        beta=i["b_in"].view(B, 1, 32), initial_state=i["_fla_state"], output_final_state=True,
        use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, A_log=i["a_log"], dt_bias=i["dt_bias"],
        use_beta_sigmoid_in_kernel=True)
    out = rms_norm_gated(o.reshape(B * 32, 128), i["z"].reshape(B * 32, 128), i["norm_w"], None, activation="swish",
                         eps=s["eps"]).view(B, 4096)
    return {"out": out, "state": state}


def _gdn_verify_framework_peer(i, s):
    from ..decode import ops as dops

    out = torch.empty(*i["qkv"].shape[:2], i["z"].shape[-1], dtype=torch.bfloat16, device=i["qkv"].device)
    dops.gdn_verify_framework(*_gdn_args(i), 16, s["eps"], out)
    return {"out": out}


def _chunk_args(i):
    """gdn_verify_chunk's inputs in op order (up to num_k_heads)."""
    return (i["qkv"], i["z"], i["b_in"], i["a_in"], i["conv_w"], i["a_log"], i["dt_bias"], i["norm_w"], i["conv_pool"],
            i["state_pool"], i["slot_in"])


def _restore_outputs(i):
    from ..contracts import gdn as G

    B, T = i["qkv"].shape[:2]
    dev = i["qkv"].device
    f = lambda *s: torch.empty(*s, dtype=torch.float32, device=dev)  # noqa: E731
    return {"out": torch.empty(B, T, G.VALUE_DIM, dtype=torch.bfloat16, device=dev), "ksave": f(B, T, G.NK, G.DK),
            "dsave": f(B, T, G.NV, G.DV), "gsave": f(B, T, G.NV)}


def _gdn_chunk_framework_peer(i, s):
    from ..decode import ops as dops

    o = _restore_outputs(i)
    dops.gdn_verify_chunk_framework(*_chunk_args(i), 16, s["eps"], o["out"], o["ksave"], o["dsave"], o["gsave"])
    return o


def _gdn_chunk_sequential_peer(i, s):
    """The promoted sequential kernel (gdn_verify_t16 through its op): a state written per token."""
    from ..decode import ops as dops

    out = torch.empty(*i["qkv"].shape[:2], i["z"].shape[-1], dtype=torch.bfloat16, device=i["qkv"].device)
    dops.gdn_verify(*_gdn_args(i), 16, s["eps"], out)
    return {"out": out}


def _make_commit(dims, gen, device):
    """_make_gdn's verification inputs, their restore data from the float64 reference (as fp32),
    slot_out distinct from slot_in, accepted counts in 0..T (sequence 0: T, sequence 1: 0)."""
    from ..reference import gdn as rg

    i = _make_gdn(dims, gen, device)
    r = rg.verify_restore(*_chunk_args(i), 16, EPS)
    B, T = dims["B"], dims["T"]
    acc = torch.randint(0, T + 1, (B,), generator=gen)
    acc[0] = T
    if B > 1:
        acc[1] = 0
    return {**i, "slot_out": i["slots_out"][:, 0].contiguous(), "accepted": acc.to(device),
            **{n: r[n].float().contiguous() for n in ("ksave", "dsave", "gsave")}}


def _commit_args(i):
    return (i["qkv"], i["conv_pool"], i["state_pool"], i["slot_in"], i["slot_out"], i["accepted"], i["ksave"], i["dsave"],
            i["gsave"])


def _gdn_commit_framework_peer(i, s):
    from ..decode import ops as dops

    conv, state = i["conv_pool"].clone(), i["state_pool"].clone()
    a = _commit_args(i)
    dops.gdn_commit_framework(a[0], conv, state, *a[3:])
    return {"conv_pool": conv, "state_pool": state}


def _gdn_testbeds() -> dict:
    from ..reference import gdn as rg

    chunk = {name: Testbed(contracts.get(name), _make_gdn, lambda i: rg.verify_restore(*_chunk_args(i), 16, EPS), None,
                           {"framework_op": _gdn_chunk_framework_peer, "gdn_verify_t16": _gdn_chunk_sequential_peer})
             for name in ("gdn_verify_chunk_t16", "gdn_verify_chunk_t16_w8")}
    chunk["gdn_commit_t16"] = Testbed(contracts.get("gdn_commit_t16"), _make_commit,
                                      lambda i: rg.commit(*_commit_args(i)), None,
                                      {"framework_op": _gdn_commit_framework_peer}, scalars={})
    return {**chunk,"gdn_verify_t16": Testbed(
        contracts.get("gdn_verify_t16"), _make_gdn,
        lambda i: rg.verify_steps(*_gdn_args(i), 16, EPS),
        lambda i: rg.verify_steps(*_gdn_args(i), 16, EPS, step=rg.transformers_step),
        {"framework_op": _gdn_verify_framework_peer},
    ), **{name: Testbed(
        contracts.get(name), _make_gdn,
        lambda i: rg.decode_step(*_gdn_args(i), 16, EPS),
        lambda i: rg.transformers_step(*_gdn_args(i), 16, EPS),
        {"framework_op": _gdn_framework_peer, "fla_0_6_0": _gdn_fla_peer},
    ) for name in ("gdn_decode_b32", "gdn_decode_b32_pdl", "gdn_decode_b32_smem", "gdn_decode_b32_smem_pdl",
                     "gdn_decode_b32_pipe", "gdn_decode_b32_pipe_pdl")},
        # the spin build: the same outputs, and its four consumed inputs TAG (compared exactly, bit for bit)
        "gdn_decode_b32_spin": Testbed(
            contracts.get("gdn_decode_b32_spin"), _make_gdn,
            lambda i: {**rg.decode_step(*_gdn_args(i), 16, EPS),
                       **_tagged(i, contracts.get("gdn_decode_b32_spin").consumes)},
            lambda i: rg.transformers_step(*_gdn_args(i), 16, EPS),
            {"framework_op": _gdn_framework_peer, "fla_0_6_0": _gdn_fla_peer},
        )}


def _tagged(i: dict, names) -> dict:
    """The consumed inputs as a consumer leaves them: every element TAG (contracts.gdn.TAG), BF16."""
    from ..decode import ops as dops

    out = {n: torch.empty(i[n].shape, dtype=torch.bfloat16, device=i[n].device) for n in names}
    dops.tag_(*out.values())
    return out


# --- attention ------------------------------------------------------------------------------
def _make_attn(dims, gen, device):
    """q and k at the scale q_norm / k_norm give (unit RMS per head times a trained-range weight), v and the gate at the
    projection's; q and k their own tensors (qk_rmsnorm's outputs), v and the gate views of one q | gate | k | v row, the
    gate beside each head's q (the runner's buffers; the row's q and k slots are not read);
    a cache of P pages filled with earlier tokens' rows; each sequence's pages a random draw of the pool (the block
    table); positions near each sequence's end: the first sequences at the last page's last row, its first row (a page
    boundary) and the row before that, the rest spread over the last page, so every case reads nearly every page (the
    bench's bytes)."""
    from ..contracts import attn as A
    from ..decode.ops import rope_tables
    from ..model.config import TextConfig

    B, NP, P, T = dims["B"], dims["NP"], dims["P"], dims["T"]
    nh, nkv, hd = A.Q_HEADS, A.KV_HEADS, A.HEAD_DIM
    r = lambda *shape, sc=1.0: torch.randn(*shape, generator=gen) * sc  # noqa: E731
    wq, wk = torch.exp(0.3 * torch.randn(hd, generator=gen)), torch.exp(0.3 * torch.randn(hd, generator=gen))
    row = torch.empty(B, 2 * nh * hd + 2 * nkv * hd, dtype=torch.bfloat16)
    qg = row[:, :2 * nh * hd].view(B, nh, 2 * hd)
    qg[..., :hd] = r(B, nh, hd) * wq
    qg[..., hd:] = r(B, nh, hd, sc=2.0)
    row[:, 2 * nh * hd:2 * nh * hd + nkv * hd] = r(B, nkv * hd)
    row[:, 2 * nh * hd + nkv * hd:] = r(B, nkv * hd, sc=0.7)
    row = row.to(device)
    qg = row[:, :2 * nh * hd].view(B, nh, 2 * hd)
    cos, sin = rope_tables(T, A.ROTARY, TextConfig.rope_theta, device)
    pos = []
    for b in range(B):
        off = (0, A.PAGE - 1, A.PAGE, 1)[b] if b < 4 else (29 * b) % A.PAGE  # last row, first row, the row before
        pos.append(max(0, min(NP * A.PAGE, T) - 1 - off))  # with one page: positions 63, 0, 0, 62, ...
    table = torch.randperm(P, generator=gen)[:B * NP].view(B, NP).to(torch.int32)
    i = {
        "q": (r(B, nh, hd) * wq).to(torch.bfloat16).to(device),
        "k": (r(B, nkv, hd) * wk).to(torch.bfloat16).to(device),
        "v": row[:, 2 * nh * hd + nkv * hd:].view(B, nkv, hd), "gate": qg[..., hd:], "_row": row,
        "cos": cos, "sin": sin,
        "positions": torch.tensor(pos, dtype=torch.int64, device=device),
        "block_table": table.to(device),
        "k_pages": (r(P, A.PAGE, nkv, hd) * wk).to(torch.bfloat16).to(device),
        "v_pages": r(P, A.PAGE, nkv, hd, sc=0.7).to(torch.bfloat16).to(device),
        "ws": torch.zeros(B, nkv, NP, A.PART, dtype=torch.float32, device=device),
        "counters": torch.zeros(B, nkv, dtype=torch.int32, device=device),
    }
    bt = i["block_table"].long()  # the sdpa_dense peer's cache, dense per sequence (made here: not timed)
    i["_dense_k"] = i["k_pages"][bt].flatten(1, 2).transpose(1, 2).contiguous()
    i["_dense_v"] = i["v_pages"][bt].flatten(1, 2).transpose(1, 2).contiguous()
    i["_valid"] = torch.arange(NP * A.PAGE, device=device) <= i["positions"][:, None]
    return i


def _attn_ref(i):
    """The float64 step; ws is scratch (its contents are not a result: the kernel's own are returned), the counters
    back to zero."""
    from ..reference import attn as ra

    r = ra.decode_step(i["q"], i["k"], i["v"], i["gate"], i["cos"], i["sin"], i["positions"], i["block_table"],
                       i["k_pages"], i["v_pages"])
    return {**r, "ws": i["kernel_ws"], "counters": torch.zeros_like(i["counters"])} if "counters" in i else r


def _attn_framework_peer(i, s):
    """The op's framework path for any block table (the positions' context, RoPE, the append, the page gather, one
    SDPA call): what netra::attention_decode runs without the kernel."""
    from ..decode import ops as dops

    B, nh, hd = i["q"].shape
    out = torch.empty(B, nh * hd, dtype=torch.bfloat16, device=i["q"].device)
    dops.attention_decode(i["q"], i["k"], i["v"], i["gate"].reshape(B, nh * hd), i["cos"], i["sin"], i["k_pages"],
                          i["v_pages"], i["block_table"], i["positions"], out)
    return {"out": out}


def _attn_sdpa_peer(i, s):
    """SDPA alone (the flash / efficient kernel torch picks) on the cache already laid out dense per sequence and a
    length mask: no RoPE, no append, no gate. Less work than the step: a floor for the framework path's attention."""
    import torch.nn.functional as F

    K, V, valid = i["_dense_k"], i["_dense_v"], i["_valid"]
    o = F.scaled_dot_product_attention(i["q"][:, :, None, :], K, V, attn_mask=valid[:, None, None, :], enable_gqa=True)
    return {"out": o.flatten(1)}


def _make_attn_qknorm(dims, gen, device):
    """_make_attn's inputs with q and k before q_norm / k_norm: at the projection's scale, in the row's q and k slots
    (the runner's views: q beside its gate, k after the q | gate half), and the two norm weights (1 + w in a trained
    range)."""
    from ..contracts import attn as A

    i = _make_attn(dims, gen, device)
    B, nh, nkv, hd = dims["B"], A.Q_HEADS, A.KV_HEADS, A.HEAD_DIM
    row = i["_row"]
    qg = row[:, :2 * nh * hd].view(B, nh, 2 * hd)
    qg[..., :hd] = (torch.randn(B, nh, hd, generator=gen) * 1.5).to(torch.bfloat16).to(device)
    row[:, 2 * nh * hd:2 * nh * hd + nkv * hd] = (torch.randn(B, nkv * hd, generator=gen) * 1.5).to(torch.bfloat16).to(device)
    i["q"], i["k"] = qg[..., :hd], row[:, 2 * nh * hd:2 * nh * hd + nkv * hd].view(B, nkv, hd)
    for n in ("q_norm", "k_norm"):
        i[n] = (torch.exp(0.3 * torch.randn(hd, generator=gen)) - 1.0).to(torch.bfloat16).to(device)
    return i


def _attn_qknorm_ref(i):
    """qk_rmsnorm then the attention step, both in float64."""
    q, k = ref.qk_rmsnorm(i["q"], i["k"], i["q_norm"], i["k_norm"], EPS)
    return _attn_ref({**i, "q": q, "k": k})


def _attn_qknorm_framework_peer(i, s):
    """The two norms and the step on the framework paths (torch ops only)."""
    from ..ops.norm import _zero_centred

    n = {**i, "q": _zero_centred(i["q"], i["q_norm"], s["eps"]).to(torch.bfloat16),
         "k": _zero_centred(i["k"], i["k_norm"], s["eps"]).to(torch.bfloat16)}
    return _attn_framework_peer(n, s)


def _attn_qknorm_unfused_peer(i, s):
    """What the runner launched before: qk_rmsnorm_d256, then attn_decode_d256 (two kernels; the same bits)."""
    from ..decode import ops as dops
    from ..ops.norm import qk_rmsnorm

    B, nh, hd = i["q"].shape
    qn, kn = qk_rmsnorm(i["q"], i["k"], i["q_norm"], i["k_norm"], s["eps"])
    out = torch.empty(B, nh * hd, dtype=torch.bfloat16, device=i["q"].device)
    dops.attention_decode_paged(qn, kn, i["v"], i["gate"], i["cos"], i["sin"], i["positions"], i["block_table"],
                                i["k_pages"], i["v_pages"], out, i["ws"], i["counters"])  # in place, as the kernel
    return {"out": out}


def _attn_qknorm_kernel_peer(i, s):
    """attn_decode_d256_qknorm, the build the cluster ones replace (one page a CTA, partials through ws, the last CTA
    of a (sequence, kv head) combining them): launched by its own guard, whatever the op would pick."""
    from ..ops import attn

    B, nh, hd = i["q"].shape
    out = torch.empty(B, nh * hd, dtype=torch.bfloat16, device=i["q"].device)
    reason = attn.DECODE_QKNORM.go(i["q"], i["k"], i["v"], i["gate"], i["q_norm"], i["k_norm"], i["cos"], i["sin"],
                                   i["positions"], i["block_table"], i["k_pages"], i["v_pages"], out, i["ws"],
                                   i["counters"], s["eps"])
    assert reason is None, reason
    return {"out": out}


TESTBEDS: dict[str, Testbed] = {
    "rmsnorm_h2048": Testbed(
        contracts.get("rmsnorm_h2048"), _make_rmsnorm,
        lambda i: {"y": ref.rmsnorm(i["x"], i["w"], EPS)},
        lambda i: {"y": tfm.rmsnorm(i["x"], i["w"], EPS)},
        _peers(_eager_rmsnorm, "rmsnorm"),
    ),
    "add_rmsnorm_h2048": Testbed(
        contracts.get("add_rmsnorm_h2048"), _make_add_rmsnorm,
        lambda i: dict(zip(("residual", "y"), ref.add_rmsnorm(i["x"], i["residual"], i["w"], EPS))),
        lambda i: dict(zip(("residual", "y"), tfm.add_rmsnorm(i["x"], i["residual"], i["w"], EPS))),
        _peers(_eager_add_rmsnorm, "add_rmsnorm"),
    ),
    "qk_rmsnorm_d256": Testbed(
        contracts.get("qk_rmsnorm_d256"), _make_qk,
        lambda i: dict(zip(("out_q", "out_k"), ref.qk_rmsnorm(i["q"], i["k"], i["q_weight"], i["k_weight"], EPS))),
        lambda i: dict(zip(("out_q", "out_k"), tfm.qk_rmsnorm(i["q"], i["k"], i["q_weight"], i["k_weight"], EPS))),
        _peers(_eager_qk, "qk"),
    ),
    "gated_rmsnorm_d128": Testbed(
        contracts.get("gated_rmsnorm_d128"), _make_gated,
        lambda i: {"y": ref.gated_rmsnorm(i["o"], i["z"], i["w"], EPS)},
        lambda i: {"y": tfm.gated_rmsnorm(i["o"], i["z"], i["w"], EPS)},
        _peers(_eager_gated, "gated"),
    ),
    "smoke_copy": Testbed(
        contracts.get("smoke_copy"),
        lambda d, g, dev: {"src": torch.randn(d["N"], generator=g).to(dev)},
        lambda i: {"dst": i["src"].double()},
        None,
        scalars={},
    ),
}


TESTBEDS.update(_proj_testbeds())
TESTBEDS.update(_gdn_testbeds())
TESTBEDS["attn_decode_d256"] = Testbed(contracts.get("attn_decode_d256"), _make_attn, _attn_ref, None,
                                       {"framework_op": _attn_framework_peer, "sdpa_dense": _attn_sdpa_peer}, scalars={},
                                       chained=("ws",))
TESTBEDS["attn_decode_d256_qknorm"] = Testbed(contracts.get("attn_decode_d256_qknorm"), _make_attn_qknorm, _attn_qknorm_ref,
                                              None, {"framework_op": _attn_qknorm_framework_peer,
                                                     "unfused": _attn_qknorm_unfused_peer}, chained=("ws",))


for _c in contracts.attn.ATTN_CLUSTER.values():  # no scratch: the float64 step without ws and counters
    TESTBEDS[_c.name] = Testbed(_c, _make_attn_qknorm,
                                lambda i: _attn_qknorm_ref({k: v for k, v in i.items() if k not in ("ws", "counters")}),
                                None, {"framework_op": _attn_qknorm_framework_peer, "unfused": _attn_qknorm_unfused_peer,
                                       "qknorm": _attn_qknorm_kernel_peer})


def _make_attn_long(c: int):
    """_make_attn_qknorm's inputs with the long-context build's scratch: ws [B, kv heads, S, PART] and counters [B, kv
    heads, C] (zero)."""
    from ..contracts import attn as A

    def make(dims, gen, device):
        i = _make_attn_qknorm(dims, gen, device)
        i["ws"] = torch.zeros(dims["B"], A.KV_HEADS, dims["S"], A.PART, dtype=torch.float32, device=device)
        i["counters"] = torch.zeros(dims["B"], A.KV_HEADS, c, dtype=torch.int32, device=device)
        return i

    return make


def _attn_long_peer(c: int, one: bool):
    """``one``: the long-context build itself at S = 1 (one cluster per (sequence, kv head) whatever the context: what
    the cluster build would do past its 64 pages), on the first partial of ws; else the cluster build _c{c} (up to 64
    pages: its guard refuses more, and the bench records the peer as failed)."""
    from ..ops import attn

    def peer(i, s):
        B, nh, hd = i["q"].shape
        out = torch.empty(B, nh * hd, dtype=torch.bfloat16, device=i["q"].device)
        a = (i["q"], i["k"], i["v"], i["gate"], i["q_norm"], i["k_norm"], i["cos"], i["sin"], i["positions"],
             i["block_table"], i["k_pages"], i["v_pages"], out)
        if one:
            ws = i["ws"].view(-1)[:i["ws"][:, :, :1].numel()].view(B, i["ws"].shape[1], 1, i["ws"].shape[3])
            reason = attn.DECODE_QKNORM_LONG[c].go(*a, ws, i["counters"], s["eps"])
        else:
            reason = attn.DECODE_QKNORM_CL[c].go(*a, s["eps"])
        assert reason is None, reason
        return {"out": out}

    return peer


for _c, _k in contracts.attn.ATTN_LONG.items():
    TESTBEDS[_k.name] = Testbed(_k, _make_attn_long(_c), _attn_qknorm_ref, None,
                                {"framework_op": _attn_qknorm_framework_peer, "one_cluster": _attn_long_peer(_c, True),
                                 "cluster": _attn_long_peer(_c, False)}, chained=("ws",))


def get(name: str) -> Testbed | None:
    return TESTBEDS.get(name)
