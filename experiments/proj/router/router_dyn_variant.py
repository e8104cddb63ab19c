"""The router-fused gate | up with its later strips taken from a counter (gen_fp8_gemv._DYN, a candidate), against
the promoted `fp8_gemv_n1024_k2048_moe_shared_router`.

Why: traced at 64082ff (router_down_variant.py --trace, `router_down_variant_trace_64082ff.json`), the CTAs' walks of
their gate | up strips at M = 1 take 7.1-11.2k cycles from the router phase's end (most 7.5-9k; pairs of
neighbouring CTAs at 10-11k), so the launch ends ~1.2 us after the typical CTA. The promoted walk is static (CTA c:
strips c, c + 131, ...). Here each CTA's first NS strips stay static and every later one comes from a counter
(bar[1], set by CTA 0 before the grid barrier, one atom per refill fetched a refill ahead): a CTA on a slow SM or
slow bytes takes fewer. Each strip's arithmetic and output rows are unchanged, so every output is the same bits.

Prediction: M = 1: 0.5-1.2 us less per launch, 20-50 us per batch-1 step (40 launches); M = 2-4 similar or less.

Checks (M = 1, 2, 4; 3 seeds; the router-fused bed): every output bitwise the promoted kernel's, plain and PDL
(both cooperative), eager and in a CUDA graph, bar[0] + 132 whatever bar[1] held.
Step (batch 1, as experiments/decode/step_ab.py): current, dyn, current again; plain and PDL; logits bitwise.

  PYTHONPATH=src python3 experiments/proj/router/router_dyn_variant.py --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def dyn_kernel():
    from netra import contracts, paths
    from netra.contracts import Tensor
    from netra.contracts.proj import EXPERTS_ROUTER
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    gen = paths.generator("proj", "gen_fp8_gemv")
    gen._DYN["on"] = True
    try:
        ptx = gen.generate(EXPERTS_ROUTER)
    finally:
        gen._DYN["on"] = False
    smem = gen.dyn_sidx(EXPERTS_ROUTER) + 16
    name = EXPERTS_ROUTER.name + "_dyn"
    module, fn = loader.load_text(name, ptx.replace(EXPERTS_ROUTER.name, name), dynamic_smem=smem)
    c0 = contracts.get(EXPERTS_ROUTER.name)
    params = tuple(Tensor("bar", "i64", (2,), "inout", align=8) if p.name == "bar" else p for p in c0.params)
    c = dataclasses.replace(c0, name=name, params=params, dynamic_smem=smem)
    mk = lambda pdl: rt_launch.make_guard_and_launch(  # noqa: E731
        c, function_handle=int(fn), device=0, launch=rt_launch.ex_launcher(pdl=pdl, cooperative=True))
    return {"plain": mk(False), "pdl": mk(True)}, module


def check(forms, res) -> bool:
    from netra.contracts.proj import EXPERTS_ROUTER
    from netra.lifecycle import check as lcheck
    from netra.lifecycle import testbeds
    from netra.ops import proj as oproj

    tb = testbeds.get(EXPERTS_ROUTER.name)
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    ok = True
    for M in (1, 2, 4):
        for seed in range(3):
            b = lcheck.Bench(tb, {"M": M, "E": 256}, seed)
            b.reset()
            assert oproj.EXPERTS_ROUTER_KERNEL(*tb.args(b.bufs)), "the promoted kernel did not launch"
            torch.cuda.synchronize()
            want = {k: v for k, v in b.results().items() if k != "bar"}
            row = {}
            for name, go in forms.items():
                for graph in (False, True):
                    b.reset()
                    bar = torch.tensor([132 * 5, 12345], dtype=torch.int64, device="cuda")
                    args = [bar if a is b.bufs["bar"] else a for a in tb.args(b.bufs)]
                    if graph:
                        s = torch.cuda.Stream()
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g, stream=s):
                            r = go(*args)
                        b.reset()
                        bar.copy_(torch.tensor([132 * 5, 777], dtype=torch.int64))
                        g.replay()
                    else:
                        r = go(*args)
                    torch.cuda.synchronize()
                    diff = [k for k in want if not torch.equal(bits(b.bufs[k]), bits(want[k]))]
                    tag = f"{name}{' graph' if graph else ''}"
                    row[tag] = {"launched": r is None, "differ": diff, "bar0_added": int(bar[0]) - 660}
                    ok &= r is None and not diff and row[tag]["bar0_added"] == 132
            res["correctness"][f"M={M} seed={seed}"] = row
            print("check", M, seed, row, flush=True)
    return ok


def step_ab(forms, res):
    from netra import paths
    from netra.decode import ops as dops
    from netra.model import checkpoint as ck
    from netra.model.config import QWEN36_35B_A3B
    from netra.model.packed import pack
    from netra.ops import _dispatch

    real_router = dops.fp8_linear_experts_router
    bar = torch.zeros(2, dtype=torch.int64, device="cuda")

    def dyn(h, norm_w, eps, router, weight, scale, shared_w, shared_s, gate_w, _bar, x_out, top, idx, logits, out, sout,
            gate_out):
        go = forms["pdl" if _dispatch._PDL else "plain"]
        r = go(x_out, weight, scale, out, idx, shared_w, shared_s, sout, gate_w, gate_out, h, norm_w, eps, router, top,
               logits, bar)
        assert r is None, f"the dyn kernel refused: {r}"

    step_ab = paths.load_module(HERE.parents[1] / "decode" / "step_ab.py", "step_ab")
    packed = pack(ck.synthetic_checkpoint(QWEN36_35B_A3B, seed=0, device="cuda"))
    B = int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--batch=")), 1))
    tokens = torch.randint(0, QWEN36_35B_A3B.vocab_size, (4, B), generator=torch.Generator().manual_seed(3)).to("cuda")
    ref = None
    for form in ("current", "dyn", "current_again"):
        dops.fp8_linear_experts_router = dyn if form == "dyn" else real_router
        row = {}
        try:
            ref = step_ab.time_step(packed, B, 1024, tokens, ref, row)
        finally:
            dops.fp8_linear_experts_router = real_router
        res["step"][f"{form} b{B}"] = row
        print("step", form, B, row, flush=True)


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    out = os.path.join(out_dir, "router_dyn_variant.json")
    forms, module = dyn_kernel()
    res = {"method": "checks: bitwise against the promoted kernel on its test bed; step: synthetic 40-layer "
                     "checkpoint, context 1024, CUDA-graph replay of one step, CUDA events, median of 64, plain and "
                     "PDL capture", "correctness": {}, "step": {}}
    res["pass"] = check(forms, res)
    json.dump(res, open(out, "w"), indent=1)
    if res["pass"]:
        step_ab(forms, res)
    json.dump(res, open(out, "w"), indent=1)
    del module


if __name__ == "__main__":
    main()
