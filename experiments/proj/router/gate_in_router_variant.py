"""The MoE block's shared_expert_gate computed by the router (moe_router_norm_gate_e256_k2048:
gen_moe_router.generate(norm=True, pdl=True, gate=True)) and the routed + shared gate | up launch without its gate
CTA (fp8_gemv_n1024_k2048_moe_shared_nogate: contracts.proj.EXPERTS_SHARED_NOGATE), against the promoted
moe_router_norm_e256_k2048 and fp8_gemv_n1024_k2048_moe_shared. Both candidates are CPU-built (after 891fbf5),
not registered: this script and experiments/decode/step_ab.py gate_in_router build and launch them.

Why: the promoted merged launch gives its last CTA to the gate logit, so 131 SMs stream the weights; from 9 tokens
it is slower than the two launches it replaced, and the runner takes it only up to 4 tokens. With the logit from the
router (rank 1's warp 0 sums x . gate_w while rank 0 selects: off the router's critical path) all 132 CTAs walk the
strips, and the merge could be taken at every batch.
Prediction: the router within +-0.1 us; the gate-less merged launch ~1 us faster than the promoted one at M = 8 and
1-3 us at M = 9..16, the same at M = 1..4.

Checks (2 seeds, NaN-poisoned outputs, plain and PDL launches):
- router: idx, top and x_out bitwise the promoted router's at M = 1, 2, 5, 8, 9, 16, 17, 32; glogit against float64
  (the kernel's x_out . gate_w) within BF16_OUT;
- gate | up: out and sout bitwise the promoted merged kernel's at M = 1, 2, 5, 8, 9, 16.
Times: the bench's method, plainly and as PDL chains, at M = 1, 8, 16 (router also 32), both builds in the same run.

  PYTHONPATH=src python3 experiments/proj/router/gate_in_router_variant.py --out "$OUT"
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


def beds():
    """(name, promoted testbed, candidate testbed, candidate contract, candidate PTX, dynamic smem, check Ms, time Ms)."""
    from netra.contracts import proj as pc
    from netra.lifecycle import testbeds

    gr, gf = paths.generator("proj", "gen_moe_router"), paths.generator("proj", "gen_fp8_gemv")
    r_tb = testbeds.get(gr.NORM_NAME)

    def make_r(dims, gen, device):
        i = r_tb.make(dims, gen, device)
        return {**i, "gate_w": (torch.randn(1, pc.ROUTER_K, generator=gen) * 0.02).to(torch.bfloat16).to(device)}

    def ref_r(i):
        out = r_tb.reference(i)
        return {**out, "glogit": i["kernel_x_out"].double() @ i["gate_w"].double().T}

    cr = pc.MOE_ROUTER_NORM_GATE
    r_cand = dataclasses.replace(r_tb, contract=cr, make=make_r, reference=ref_r, peers={})
    e_tb = testbeds.get(pc.EXPERTS_SHARED.name)
    ce = pc._contract(pc.EXPERTS_SHARED_NOGATE)
    e_cand = dataclasses.replace(e_tb, contract=ce, peers={})
    return [(gr.NORM_NAME, r_tb, r_cand, gr.generate(norm=True, pdl=True, gate=True), 0,
             (1, 2, 5, 8, 9, 16, 17, 32), (1, 8, 16, 32)),
            (pc.EXPERTS_SHARED.name, e_tb, e_cand, gf.generate(pc.EXPERTS_SHARED_NOGATE), ce.dynamic_smem,
             (1, 2, 5, 8, 9, 16), (1, 8, 16))]


def same_inputs(check, tbx, dims: dict, seed: int, name: str):
    """A check.Bench of test bed ``tbx`` whose inputs come from the generator kernel ``name``'s Bench uses (the
    candidate's make draws the promoted one's inputs first, then its own), so both launches see the same values."""
    b = object.__new__(check.Bench)
    b.tb, b.dims = tbx, dims
    b.inputs = tbx.make(dims, check._gen(name, seed, dims), "cuda")
    b.pristine = {t.name: b.inputs[t.name].clone() for t in tbx.contract.tensors if t.role == "inout"}
    b.outputs = tbx.alloc_outputs(dims, "cuda")
    b.bufs = {**b.inputs, **b.outputs}
    return b


def main():
    from netra.lifecycle import bench, check, metrics
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    out = os.path.join(out_dir, "gate_in_router_variant.json")
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "correctness": {}, "timing_us": {}}
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    keep = []
    for name, tb, cand, ptx, smem, check_ms, time_ms in beds():
        c, cc = contracts.get(name), cand.contract
        module, fn = loader.load_text(cc.name, ptx, dynamic_smem=smem)
        keep.append(module)
        launchers = ({}, {"launch": rt_launch.pdl_launcher()})
        gos = {"promoted": tuple(rt_launch.make_guard_and_launch(c, function_handle=loader.load(name, 0).handle,
                                                                 device=0, **k) for k in launchers),
               "candidate": tuple(rt_launch.make_guard_and_launch(cc, function_handle=int(fn), device=0, **k)
                                  for k in launchers)}
        same, worst = True, 0.0
        for M in check_ms:
            dims = {"M": M, **({"E": 256} if "E" in c.dims else {})}
            for seed in range(2):
                b0 = check.Bench(tb, dims, seed)
                b0.reset()
                assert gos["promoted"][0](*tb.args(b0.bufs)) is None
                torch.cuda.synchronize()
                for go in gos["candidate"]:
                    b = same_inputs(check, cand, dims, seed, name)
                    b.reset()
                    assert go(*cand.args(b.bufs)) is None
                    torch.cuda.synchronize()
                    same &= all(torch.equal(bits(b0.bufs[n]), bits(b.bufs[n])) for n in tb.output_names()
                                if n in cand.output_names())
                    ref = cand.reference_for(b.original_inputs(), b.bufs)
                    extra = [n for n in cand.output_names() if n not in tb.output_names()]
                    worst = max([worst] + [metrics.output_error(b.bufs[n], ref[n]) for n in extra])
        res["correctness"][cc.name] = {"shared_outputs_bitwise_the_promoted": same, "new_outputs_max_rel_err": worst,
                                       "tolerance": cc.tolerance, "pass": same and worst <= cc.tolerance}
        print(cc.name, res["correctness"][cc.name], flush=True)
        for M in time_ms:
            dims = {"M": M, **({"E": 256} if "E" in c.dims else {})}
            row = {}
            for tag, (go, go_pdl) in gos.items():
                t = tb if tag == "promoted" else cand
                r = bench.bench_case(t, dims, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
                row[tag] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
            res["timing_us"][f"{cc.name} M={M}"] = row
            print(cc.name, M, row, flush=True)
            json.dump(res, open(out, "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
