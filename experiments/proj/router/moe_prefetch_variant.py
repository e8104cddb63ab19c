"""The MoE block with the router prefetching the chosen experts' weights into L2
(gen_moe_router.generate(norm=True, prefetch_experts=True); CPU-built, not yet run).

Why: at batch 1 the MoE block is ~22 us per layer (router + norm 6.7, expert gate | up 7.4,
shared gate | up 3.1, down 5.8; docs/notes/decode.md), and the two expert kernels cannot request
their weights before griddepcontrol.wait, because the ids are the router's output: their first
bytes leave DRAM only once the router grid has ended and they have launched. The candidate's
rank 0 asks L2 for the 8 chosen experts' gate | up and down weights (24 MB) as soon as it has
selected them (cp.async.bulk.prefetch.L2).

The block for 10 layers of the synthetic full-size model (each its own 768 MB of experts: past the
L2), netra::moe_decode as the runner calls it, with the router swapped for the candidate; batch 1.
Checks h, x and out after the 10 layers bitwise equal to the promoted router's (a prefetch changes
no value). Times a CUDA graph of the 10 blocks (netra.lifecycle.bench.graph_time, median), plain
launches and under set_pdl (the expert, gate and down kernels with PDL), per layer.
Prediction: ~1.5-3 us less per layer (0.06-0.12 ms per batch-1 step).

  PYTHONPATH=src python3 experiments/proj/router/moe_prefetch_variant.py --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
LAYERS, EPS = 10, 1e-6


def main():
    import netra.ops as nops
    from netra import contracts, paths
    from netra.contracts.spec import Tensor
    from netra.decode import ops as dops
    from netra.lifecycle.bench import graph_time
    from netra.model import checkpoint as ck
    from netra.model.config import QWEN36_35B_A3B
    from netra.model.packed import pack
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    gen = paths.generator("proj", "gen_moe_router")
    base = contracts.get(gen.NORM_NAME)
    E = base.params[1].shape[0]
    c = dataclasses.replace(base, params=base.params + (
        Tensor("w13", "fp8e4m3", ("E", gen.W13_BYTES // (16 * 2048), 16, 2048), "in"),
        Tensor("w2", "fp8e4m3", ("E", gen.W2_BYTES // (4 * 2048), 4, 2048), "in")), dims={**base.dims, "E": (E,)})
    module, fn = loader.load_text(c.name, gen.generate(norm=True, prefetch_experts=True))
    go = rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0)
    cfg = QWEN36_35B_A3B.with_layers(LAYERS)
    packed = pack(ck.synthetic_checkpoint(cfg, seed=0, device="cuda"))
    layers = [packed.layer(L, "cuda") for L in range(LAYERS)]
    cur = {}
    real = dops.moe_router_norm

    def prefetching(h, norm_w, eps, w, x_out, top, idx):
        reason = go(h, w, top, idx, norm_w, x_out, eps, cur["w13"], cur["w2"])
        assert reason is None, reason

    h0 = (torch.randn(1, cfg.hidden_size, generator=torch.Generator().manual_seed(5)) * 2).to(torch.bfloat16).cuda()
    h, x, out = h0.clone(), torch.empty_like(h0), torch.empty_like(h0)

    def block(i):
        lw = layers[i]
        cur.update(w13=lw["w13"], w2=lw["w2"])
        dops.moe_decode(x, lw["router"], lw["w13"], lw["s13"], lw["w2"], lw["s2"], *lw["sw13"], *lw["sw2"], lw["sgate"],
                        cfg.num_experts_per_tok, out, h, lw["post_norm"], EPS)

    res = {"method": "netra.lifecycle.bench.graph_time: a CUDA graph of the MoE block of 10 layers (each its own "
                     "weights), batch 1, median per layer", "timing_us_per_layer": {}}
    finals = {}
    try:
        for form in ("promoted", "prefetch"):
            dops.moe_router_norm = prefetching if form == "prefetch" else real
            h.copy_(h0)
            for i in range(LAYERS):
                block(i)
            torch.cuda.synchronize()
            finals[form] = [t.clone() for t in (h, x, out)]
            for pdl in (False, True):
                nops.set_pdl(pdl)
                nops.prepare()
                try:
                    us = graph_time(block, LAYERS, replays=30)[0]
                finally:
                    nops.set_pdl(False)
                res["timing_us_per_layer"][f"{form}{' pdl' if pdl else ''}"] = us
                print(form, "pdl" if pdl else "plain", round(us, 2), "us per layer", flush=True)
    finally:
        dops.moe_router_norm = real
    res["bitwise_equal"] = all(torch.equal(a, b) for a, b in zip(finals["promoted"], finals["prefetch"]))
    res["finite"] = bool(torch.isfinite(finals["promoted"][0].float()).all())
    print(res, flush=True)
    json.dump(res, open(os.path.join(out_dir, "moe_prefetch_variant.json"), "w"), indent=1)
    del module


if __name__ == "__main__":
    main()
