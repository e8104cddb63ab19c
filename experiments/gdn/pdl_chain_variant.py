"""The GDN mixer's four launches as a PDL chain (a candidate, CPU-built at 9f43d3b; not yet run
on the H200): how much of a batch-1 GDN layer the runner could still hide.

In the runner's PDL engine (`DecodeRunner.capture(pdl=True)`) only the FP8 projection kernels are
PDL-capable. A GDN layer's mixer is fp8_linear_norm (qkvz) -> bf16_linear2 (b | a) -> gdn_decode
-> fp8_linear_add (out_proj); the two middle kernels launch plainly, so gdn_decode cannot start
loading its 2 MiB of state before b | a are done, and out_proj's weight prefetch waits for
gdn_decode's launch. This script times the four launches, 10 layers in one CUDA graph (10 copies
of every weight and pool: past 4x L2), in three forms:
- plain: every kernel launched plainly (today's plain engine);
- pdl: the FP8 kernels with programmatic serialization (today's PDL engine);
- pdl_chain: also the candidate builds of the two middle kernels, launched with PDL:
  gen_bf16_gemv.generate(pdl=True) (weight rows' bulk copies before griddepcontrol.wait, x's
  after; then launch_dependents) and gen_gdn_decode.generate(pdl=True) (launch_dependents at
  once; slot ids, weights, conv windows and state before the wait: experiments/gdn/pdl_variant.py
  measured it alone at 2.98 us in a PDL chain of itself against 4.28). Safe here and in the
  runner: a layer's pools are written only by its own gdn_decode, once per step, and the kernel
  before it (bf16_linear2) does not write them.
Checks: h after the 10 layers, every pool and every output bitwise equal across the three forms
(the same kernels' arithmetic), after NaN-poisoning the outputs.
Prediction: pdl_chain ~1.5-2 us per layer below pdl (gdn's state load overlapping b | a, and
out_proj's weights streaming during gdn): ~0.05 ms per batch-1 step over 30 layers.

  PYTHONPATH=src python3 experiments/gdn/pdl_chain_variant.py --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

from netra import contracts, paths

HERE = Path(__file__).resolve().parent
LAYERS, EPS = 10, 1e-6
NORM_K, RES_K, BA_K, GDN_K = "fp8_gemv_n12288_k2048_norm", "fp8_gemv_n2048_k4096_res", "bf16_gemv_n64_k2048", "gdn_decode_b32"


def make_layers(device):
    from netra.lifecycle import testbeds

    layers = []
    for i in range(LAYERS):
        g = torch.Generator().manual_seed(1000 + i)
        n = testbeds.get(NORM_K).make({"M": 1}, g, device)
        r = testbeds.get(RES_K).make({"M": 1}, g, device)
        ba = testbeds.get(BA_K).make({"M": 1}, g, device)
        gd = testbeds.get(GDN_K).make({"B": 1, "P": 3}, g, device)
        layers.append({"norm_w": n["norm_w"], "w_qkvz": n["w"], "s_qkvz": n["scale"], "w_b": ba["w_b"], "w_a": ba["w_a"],
                       "conv_w": gd["conv_w"], "a_log": gd["a_log"], "dt_bias": gd["dt_bias"], "gnorm": gd["norm_w"],
                       "conv_pool": gd["conv_pool"], "state_pool": gd["state_pool"], "slots": gd["slots"],
                       "w_out": r["w"], "s_out": r["scale"]})
    return layers


class Buffers:
    def __init__(self, device):
        bf = torch.bfloat16
        self.h0 = (torch.randn(1, 2048, generator=torch.Generator().manual_seed(7)) * 4).to(bf).to(device)
        self.h = self.h0.clone()
        self.x = torch.empty(1, 2048, dtype=bf, device=device)
        self.qkvz = torch.empty(1, 12288, dtype=bf, device=device)
        self.b = torch.empty(1, 32, dtype=bf, device=device)
        self.a = torch.empty(1, 32, dtype=bf, device=device)
        self.o = torch.empty(1, 4096, dtype=bf, device=device)
        self.mix = torch.empty(1, 2048, dtype=bf, device=device)


def candidates():
    """(bf16 guard-and-launch, gdn guard-and-launch), the candidate builds launched with PDL."""
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out = []
    for fam, gen_name, name in (("proj", "gen_bf16_gemv", BA_K), ("gdn", "gen_gdn_decode", GDN_K)):
        c = dataclasses.replace(contracts.get(name), pdl="candidate: see experiments/gdn/pdl_chain_variant.py")
        _, fn = loader.load_text(name, paths.generator(fam, gen_name).generate(**({"pdl": True} if fam == "proj" else {"pdl": True, "coherent": False})), dynamic_smem=c.dynamic_smem)
        out.append(rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0, launch=rt_launch.pdl_launcher()))
    return out


def layer_step(L, bufs, chain):
    """One GDN mixer: qkvz (+ input norm), b | a, the GDN step, out_proj (+ residual add)."""
    from netra.decode import ops as dops

    dops.fp8_linear_norm(bufs.h, L["norm_w"], EPS, L["w_qkvz"], L["s_qkvz"], bufs.qkvz, bufs.x)
    qkv, z = bufs.qkvz[:, :8192], bufs.qkvz[:, 8192:]
    if chain is None:
        dops.bf16_linear2(bufs.x, L["w_b"], L["w_a"], bufs.b, bufs.a)
        dops.gdn_decode(qkv, z, bufs.b, bufs.a, L["conv_w"], L["a_log"], L["dt_bias"], L["gnorm"], L["conv_pool"],
                        L["state_pool"], L["slots"], 16, EPS, bufs.o)
    else:
        go_ba, go_gdn = chain
        assert go_ba(bufs.x, L["w_b"], L["w_a"], bufs.b, bufs.a) is None
        assert go_gdn(qkv, z, bufs.b, bufs.a, L["conv_w"], L["a_log"], L["dt_bias"], L["gnorm"], L["conv_pool"],
                      L["state_pool"], L["slots"], bufs.o, EPS) is None
    dops.fp8_linear_add(bufs.o, L["w_out"], L["s_out"], bufs.h, bufs.mix)


def main():
    import netra.ops as nops
    from netra.lifecycle.bench import graph_time

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    dev = "cuda"
    chain = candidates()
    res = {"method": "netra.lifecycle.bench.graph_time: a CUDA graph of 10 GDN mixers (4 launches "
                     "each, 10 copies of every weight and pool), replayed 30 times, CUDA events, median per layer", "correctness": {}, "timing_us_per_layer": {}}
    finals = {}
    for form in ("plain", "pdl", "pdl_chain"):
        layers = make_layers(dev)
        bufs = Buffers(dev)
        for t in (bufs.x, bufs.qkvz, bufs.b, bufs.a, bufs.o, bufs.mix):
            t.fill_(float("nan"))
        nops.set_pdl(form != "plain")
        try:
            nops.prepare()
            use = chain if form == "pdl_chain" else None
            for L in layers:  # eager once: the pools advance one step; then compare
                layer_step(L, bufs, use)
            torch.cuda.synchronize()
            finals[form] = [bufs.h.clone(), bufs.mix.clone(), bufs.o.clone()] + [t.clone() for L in layers
                                                                                 for t in (L["state_pool"], L["conv_pool"])]
            # captured while PDL is on (the launches keep their attribute in the graph)
            us = graph_time(lambda i: layer_step(layers[i], bufs, use), LAYERS, replays=30)[0]  # noqa: B023
        finally:
            nops.set_pdl(False)
        res["timing_us_per_layer"][form] = us
        print(form, round(us, 2), "us per layer", flush=True)
        layers = bufs = None  # freed before the next form's copies
        torch.cuda.empty_cache()
    for form in ("pdl", "pdl_chain"):
        res["correctness"][f"{form} bitwise plain"] = all(torch.equal(x, y) for x, y in zip(finals[form], finals["plain"]))
    res["correctness"]["finite"] = bool(torch.isfinite(finals["plain"][0]).all())
    print(res["correctness"], flush=True)
    json.dump(res, open(os.path.join(out_dir, "pdl_chain_variant.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
