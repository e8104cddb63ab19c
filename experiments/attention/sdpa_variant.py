"""attention_decode's first framework path (einsum form) against an SDPA form of it. Measured at
bc23de1 (sdpa_variant_bc23de1.json): the SDPA form is promoted as attention_decode; the einsum
form is kept here (einsum_form) so the comparison stays reproducible. Since ef09019 also
lean_form: the SDPA form in ~10 fewer PyTorch kernels per layer, bitwise the same (checked:
outputs and caches); prediction B = 1 ~62 -> ~45 us per layer (~1.6 us per small kernel in a
graph at b6e8212's profile). Since c54cb71 also ctx_form (a candidate, not yet run): lean_form
on a step_context computed once per step and shared by the 10 layers (RoPE rows, block table,
flat cache rows, mask: ~10 kernels per layer), bitwise lean_form; the timing graph now puts every
layer at the same positions and block table, as in a runner step. Prediction: ~48 -> ~36 us per
layer at B = 1 (~0.12 ms per batch-1 step). Measured at e029eb4 (sdpa_variant_e029eb4.json):
48.7 -> 39.7 us at B = 1; promoted (attention_context + attention_decode_ctx). Since this
commit also view_form (a candidate, not yet run): with the runner's in-order block table the cache
is read as a view, without the two gathers of every sequence's K and V (2 MB per layer at B = 1,
64 MB at B = 32), bitwise ctx_form (checked: outputs and caches). Prediction: ~3-5 us less per
layer at B = 1, ~25-35 us at B = 32 (0.25-0.35 ms of a 14.5 ms batch-32 step).

Why: at 4fce6e6 attention (framework path, 10 layers) was 1.18 ms of device time per batch-1 step,
now about a third of the step, and no kernel covers it. The framework path gathers every page of
the block table, repeats K and V 8x for the 16:2 GQA and converts them to float32 before two
einsums and a masked softmax (~25 small kernels, and traffic that grows with batch x context).
The variant keeps RoPE and the page append as they are and replaces the rest with one
F.scaled_dot_product_attention on BF16 with enable_gqa and a length mask (no repeat, no float
copies). design/h200.md measured SDPA decode at these heads: 8.8 us at a 1K context.

Checks, at B = 1, 8, 32, context 1024 (pages of 64, the runner's layout), positions random in
the second half: both forms against a float64 reference of the same math (RoPE on the BF16
q and k, attention over positions 0..pos, times sigmoid(gate)), the caches they write equal
bitwise, 10 repeated calls bitwise. Times: a CUDA graph of 10 calls on 10 separate caches (as
10 layers; K and V pages of every call together past 4x L2 at B >= 8), replayed 20 times, median
per call. Prediction: B = 1 ~118 -> ~30 us per layer (RoPE and the append stay in PyTorch);
the step ~0.8 ms faster at batch 1. Writes sdpa_variant.json to --out.

  PYTHONPATH=src python3 experiments/attention/sdpa_variant.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
NH, NKV, HD, ROT, PAGE, CTX = 16, 2, 256, 64, 64, 1024  # Qwen3.6's full attention (design/qwen36.md)


def rope_append(q, k, v, cos, sin, k_pages, v_pages, block_table, positions):
    """The first half of attention_decode up to 7b16591 (RoPE on q and k separately, the append
    by index_put), as the einsum and SDPA forms measured it."""
    from netra.decode.ops import _rope

    B = q.shape[0]
    page = k_pages.shape[1]
    c, s = cos[positions], sin[positions]
    q = _rope(q, c, s)
    k = _rope(k, c, s)
    rows = torch.arange(B, device=q.device)
    pg = block_table[rows, positions // page].long()
    off = (positions % page).long()
    k_pages[pg, off] = k
    v_pages[pg, off] = v
    return q


def sdpa_form(q, k, v, gate, cos, sin, k_pages, v_pages, block_table, positions, out):
    """attention_decode at 2b6ce30..7b16591: the attention as one SDPA call (same RoPE and page
    append as the einsum form)."""
    B, nh, hd = q.shape
    q = rope_append(q, k, v, cos, sin, k_pages, v_pages, block_table, positions)
    K = k_pages[block_table.long()].flatten(1, 2).transpose(1, 2)  # [B, nkv, N, hd], BF16
    V = v_pages[block_table.long()].flatten(1, 2).transpose(1, 2)
    valid = torch.arange(K.shape[2], device=q.device)[None, :] <= positions[:, None]
    o = F.scaled_dot_product_attention(q[:, :, None, :], K, V, attn_mask=valid[:, None, None, :], enable_gqa=True)
    out.copy_(o.reshape(B, nh * hd) * torch.sigmoid(gate))


def einsum_form(q, k, v, gate, cos, sin, k_pages, v_pages, block_table, positions, out):
    """attention_decode up to bc23de1: K and V gathered, repeated 8x and cast to float32."""
    B, nh, hd = q.shape
    nkv = k.shape[1]
    q = rope_append(q, k, v, cos, sin, k_pages, v_pages, block_table, positions)
    K = k_pages[block_table.long()].flatten(1, 2).repeat_interleave(nh // nkv, 2).float()
    V = v_pages[block_table.long()].flatten(1, 2).repeat_interleave(nh // nkv, 2).float()
    scores = torch.einsum("bhd,bnhd->bhn", q.float(), K) * hd ** -0.5
    valid = torch.arange(K.shape[1], device=q.device)[None, :] <= positions[:, None]
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    o = torch.einsum("bhn,bnhd->bhd", torch.softmax(scores, -1), V).to(q.dtype)
    out.copy_(o.reshape(B, nh * hd) * torch.sigmoid(gate))


def lean_form(q, k, v, gate, cos, sin, k_pages, v_pages, block_table, positions, out):
    """The SDPA form in fewer PyTorch kernels, the same ops on every value (so the same bits):
    RoPE once on q | k together, the append by index_copy_ on flat page rows, block_table
    widened once, the gate product written straight into out. Measured at 7b16591
    (sdpa_variant_7b16591.json) and promoted as attention_decode after it."""
    B, nh, hd = q.shape
    page, rd = k_pages.shape[1], cos.shape[-1]
    c, s = cos[positions][:, None], sin[positions][:, None]
    qk = torch.cat([q, k], 1)  # [B, nh + nkv, hd]
    xr = qk[..., :rd].float()
    rot = torch.cat([-xr[..., rd // 2:], xr[..., :rd // 2]], -1)
    qk[..., :rd] = xr * c + rot * s  # rounded to BF16 by the copy, as .to(bf16)
    bt = block_table.long()
    flat = bt.gather(1, (positions // page)[:, None])[:, 0] * page + positions % page
    k_pages.view(-1, *k_pages.shape[2:]).index_copy_(0, flat, qk[:, nh:])
    v_pages.view(-1, *v_pages.shape[2:]).index_copy_(0, flat, v)
    K = k_pages[bt].flatten(1, 2).transpose(1, 2)
    V = v_pages[bt].flatten(1, 2).transpose(1, 2)
    valid = torch.arange(K.shape[2], device=q.device) <= positions[:, None]
    o = F.scaled_dot_product_attention(qk[:, :nh, None, :], K, V, attn_mask=valid[:, None, None, :], enable_gqa=True)
    torch.mul(o.view(B, nh * hd), torch.sigmoid(gate), out=out)


def step_context(cos, sin, block_table, positions, page):
    """What lean_form derives from the positions, once per step (the same for every attention
    layer of a step): RoPE rows, the widened block table, each new token's flat cache row, the
    length mask."""
    bt = block_table.long()
    return {"c": cos[positions][:, None], "s": sin[positions][:, None], "bt": bt,
            "flat": bt.gather(1, (positions // page)[:, None])[:, 0] * page + positions % page,
            "valid": torch.arange(bt.shape[1] * page, device=positions.device) <= positions[:, None]}


def ctx_form(q, k, v, gate, ctx, k_pages, v_pages, out, in_order: bool = False):
    """lean_form on a step_context computed once per step (measured at e029eb4 and promoted as
    attention_context + attention_decode_ctx); the same ops on every value, so the same bits.
    ``in_order`` (view_form)."""
    B, nh, hd = q.shape
    rd = ctx["c"].shape[-1]
    qk = torch.cat([q, k], 1)
    xr = qk[..., :rd].float()
    rot = torch.cat([-xr[..., rd // 2:], xr[..., :rd // 2]], -1)
    qk[..., :rd] = xr * ctx["c"] + rot * ctx["s"]
    k_pages.view(-1, *k_pages.shape[2:]).index_copy_(0, ctx["flat"], qk[:, nh:])
    v_pages.view(-1, *v_pages.shape[2:]).index_copy_(0, ctx["flat"], v)
    if in_order:
        K = k_pages.view(B, -1, *k_pages.shape[2:]).transpose(1, 2)  # [B, nkv, pages * page, hd]
        V = v_pages.view(B, -1, *v_pages.shape[2:]).transpose(1, 2)
    else:
        K = k_pages[ctx["bt"]].flatten(1, 2).transpose(1, 2)
        V = v_pages[ctx["bt"]].flatten(1, 2).transpose(1, 2)
    o = F.scaled_dot_product_attention(qk[:, :nh, None, :], K, V, attn_mask=ctx["valid"][:, None, None, :],
                                       enable_gqa=True)
    torch.mul(o.view(B, nh * hd), torch.sigmoid(gate), out=out)


def view_form(q, k, v, gate, ctx, k_pages, v_pages, out):
    """ctx_form where sequence b's pages are b * pages .. (b + 1) * pages - 1 in order, as the
    decode runner builds its block table (a candidate, not yet run): the cache is read as a view,
    no gather of every sequence's K and V (2 MB per layer at B = 1, 64 MB at B = 32). The view
    has the gathered tensor's shape, strides and values, so SDPA computes the same bits."""
    ctx_form(q, k, v, gate, ctx, k_pages, v_pages, out, in_order=True)


def _view_call(q, k, v, gate, cos, sin, k_pages, v_pages, block_table, positions, out):
    """view_form with its own context; block_table must be the in-order one (in_order_pages)."""
    view_form(q, k, v, gate, step_context(cos, sin, block_table, positions, k_pages.shape[1]), k_pages, v_pages, out)


def in_order_pages(a: dict) -> dict:
    """The inputs with sequence b's pages b * pages .. in order (the runner's block table)."""
    B, pages = a["block_table"].shape
    return {**a, "block_table": torch.arange(B * pages, device=a["block_table"].device, dtype=torch.int32).view(B, pages)}


def _ctx_call(q, k, v, gate, cos, sin, k_pages, v_pages, block_table, positions, out):
    """ctx_form with its own context (for the correctness checks)."""
    ctx_form(q, k, v, gate, step_context(cos, sin, block_table, positions, k_pages.shape[1]), k_pages, v_pages, out)


def reference(q, k, v, gate, cos, sin, k_pages, v_pages, block_table, positions):
    """float64 of the same math, on copies of the caches."""
    B = q.shape[0]
    c, s = cos[positions].double(), sin[positions].double()

    def rope(x):
        xr, xp = x[..., :ROT].double(), x[..., ROT:].double()
        rot = torch.cat([-xr[..., ROT // 2:], xr[..., :ROT // 2]], -1)
        return torch.cat([xr * c[:, None] + rot * s[:, None], xp], -1)

    qd, kd = rope(q), rope(k).to(torch.bfloat16)  # the cache holds BF16
    kp, vp = k_pages.clone(), v_pages.clone()
    pg = block_table[torch.arange(B), positions // PAGE].long()
    kp[pg, positions % PAGE] = kd
    vp[pg, positions % PAGE] = v
    K = kp[block_table.long()].flatten(1, 2).double()  # [B, N, nkv, hd]
    V = vp[block_table.long()].flatten(1, 2).double()
    qg = qd.view(B, NKV, NH // NKV, HD)  # q head h reads kv head h / 8
    sc = torch.einsum("bgrd,bngd->bgrn", qg, K) * HD ** -0.5
    valid = torch.arange(K.shape[1], device=q.device)[None, :] <= positions[:, None]
    sc = sc.masked_fill(~valid[:, None, None, :], float("-inf"))
    o = torch.einsum("bgrn,bngd->bgrd", torch.softmax(sc, -1), V)
    return o.reshape(B, NH * HD) * torch.sigmoid(gate.double())


def make(B, seed, device):
    from netra.decode.ops import rope_tables

    g = torch.Generator().manual_seed(seed)
    pages = CTX // PAGE
    cos, sin = rope_tables(CTX, ROT, 1e7, device)
    bf = lambda *s_, sc=1.0: (torch.randn(*s_, generator=g) * sc).to(torch.bfloat16).to(device)  # noqa: E731
    return dict(q=bf(B, NH, HD), k=bf(B, NKV, HD), v=bf(B, NKV, HD), gate=bf(B, NH * HD),
                cos=cos, sin=sin, k_pages=bf(B * pages, PAGE, NKV, HD), v_pages=bf(B * pages, PAGE, NKV, HD),
                block_table=torch.randperm(B * pages, generator=g).view(B, pages).to(torch.int32).to(device),
                positions=torch.randint(CTX // 2, CTX, (B,), generator=g).to(device))


def run(fn, a):
    out = torch.full((a["q"].shape[0], NH * HD), float("nan"), dtype=torch.bfloat16, device=a["q"].device)
    fn(**a, out=out)
    return out


def main():
    from netra.lifecycle.bench import graph_time
    from netra.lifecycle.metrics import rel_err

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    forms = {"framework": einsum_form, "sdpa": sdpa_form, "lean": lean_form, "ctx": _ctx_call}  # "framework": einsum
    timed = {**forms, "view": _view_call}  # ctx and view timed on the in-order block table (the runner's)
    res = {"method": "netra.lifecycle.bench.graph_time: a CUDA graph of 10 calls on 10 separate caches, replayed 20 "
                     "times, CUDA events, median per call",
           "correctness": {}, "timing_us": {}}
    for B in (1, 8, 32):
        a0 = make(B, B, dev)
        want = reference(**{k: v for k, v in a0.items()})
        caches, outs = {}, {}
        for name, fn in forms.items():
            a = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in a0.items()}
            got = run(fn, a)
            again = [run(fn, {**a, "k_pages": a0["k_pages"].clone(), "v_pages": a0["v_pages"].clone()}) for _ in range(10)]
            caches[name] = (a["k_pages"], a["v_pages"])
            outs[name] = got
            res["correctness"][f"{name} B={B}"] = {"rel_err": rel_err(got, want),
                                                   "repeat_bitwise": all(torch.equal(x, got) for x in again)}
        res["correctness"][f"caches equal B={B}"] = all(torch.equal(x, y) for x, y in zip(caches["framework"], caches["sdpa"]))
        res["correctness"][f"lean caches equal B={B}"] = all(torch.equal(x, y) for x, y in zip(caches["lean"], caches["sdpa"]))
        res["correctness"][f"lean out bitwise sdpa B={B}"] = torch.equal(outs["lean"], outs["sdpa"])
        res["correctness"][f"ctx out and caches bitwise lean B={B}"] = (
            torch.equal(outs["ctx"], outs["lean"]) and all(torch.equal(x, y) for x, y in zip(caches["ctx"], caches["lean"])))
        ao = in_order_pages(a0)
        got_v, got_c = {}, {}
        for name, fn, store in (("view", _view_call, got_v), ("ctx", _ctx_call, got_c)):
            a = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in ao.items()}
            store["out"] = run(fn, a)
            store["caches"] = (a["k_pages"], a["v_pages"])
        res["correctness"][f"view out and caches bitwise ctx (pages in order) B={B}"] = (
            torch.equal(got_v["out"], got_c["out"]) and all(torch.equal(x, y) for x, y in zip(got_v["caches"],
                                                                                              got_c["caches"])))
        res["correctness"][f"view rel_err B={B}"] = rel_err(got_v["out"], reference(**ao))
        print(B, {k: v for k, v in res["correctness"].items() if f"B={B}" in k}, flush=True)
        if dev != "cuda":
            continue
        layers = [make(B, 100 + i, dev) for i in range(10)]
        for a in layers[1:]:  # one step: every layer at the same positions and block table (as the runner)
            a["block_table"], a["positions"] = layers[0]["block_table"], layers[0]["positions"]
        shared = {n: layers[0][n] for n in ("cos", "sin", "block_table", "positions")}

        ordered = in_order_pages(layers[0])["block_table"]

        def step(fn, outs):
            if fn in (_ctx_call, _view_call):  # the context once, then every layer
                ctx = step_context(**{**shared, "block_table": ordered}, page=PAGE)
                form = ctx_form if fn is _ctx_call else view_form
                for a, o in zip(layers, outs):
                    form(a["q"], a["k"], a["v"], a["gate"], ctx, a["k_pages"], a["v_pages"], o)
            else:
                for a, o in zip(layers, outs):
                    fn(**a, out=o)

        for name, fn in timed.items():
            outs = [torch.empty(B, NH * HD, dtype=torch.bfloat16, device=dev) for _ in layers]
            us = graph_time(lambda _: step(fn, outs), 1, replays=20)[0] / len(layers)  # noqa: B023
            res["timing_us"][f"{name} B={B}"] = us
            print(name, B, round(us, 2), "us per call", flush=True)
    json.dump(res, open(os.path.join(out_dir, "sdpa_variant.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
