"""What the 32-token dense builds (netra.contracts.proj.DENSE32) would take if x came already converted: the diagnostic
build gen_fp8_gemv.generate(sh, x_prepped=True) reads, through its x parameter, the f16 fragments and inverse scales its
x prologue would have made (x_prepped_layout), made here by torch exactly as the prologue makes them (the amax of each
(token, 128-k block), the power of two that puts it in [2^14, 2^15), f16 by round to nearest; fragments in the mma
B order). So its outputs must be bitwise the promoted kernel's (checked, NaN-poisoned outputs, M = 17 and 32, plain
and PDL launches), and its time is the launch without the prologue's conversion (x's transport from L2 stays: the
prepped bytes are as many as x's).

Why: trace_v3_t32_8217d9d.json has the x prologue ending 3.1-4.8 us into a 10-13 us CTA, and x_broadcast_t32_bc008a6.json
puts ~2 us of that prologue, at every M, on the conversion of 4 n-tiles (without weights: rows alone 1.84-2.87 us, the
whole prologue 3.82-4.70). If the kernel before wrote x in this form (as moe_act does for the grouped moe_down), each
launch would save that. Prediction: 1-2 us less at M = 17 and 32, plainly and as a PDL chain (the weights were not the
wait: t32_s{4,5}_variant_8217d9d.json).

Timed by the bench's method (CUDA-graph replay of C launches over C copies of x / prepped x, weights and outputs past
4x the L2, CUDA events, median of 7 replays), plainly and as a PDL chain, the promoted kernel in the same run.

``--grouped``: the same for the routed gate | up grouped by distinct expert for up to 32 tokens
(fp8_gemv_n1024_k2048_moe_grp_t32; the runner's batch-32 build is its shared variant, whose gate CTA reads x itself),
launched through its contract's guard with x a view of the prepped buffer (the guard sees a [M, 2048] BF16 tensor; the
kernel reads the whole buffer behind it). Its prologue is the dense builds' (4 n-tiles of every token's x), ahead of
~80 strips a CTA at M = 32. Prediction: 0.5-1 us less a launch at M = 32, 40 launches a batch-32 step.

  PYTHONPATH=src python3 experiments/proj/x_prepped_variant.py [--grouped] --out "$OUT"
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def prep(x: torch.Tensor, sh) -> torch.Tensor:
    """x [M, K] BF16 -> the x_prepped buffer (uint8): fragments [nt][kb][lane][16 words], then inverse scales
    [nt][kb][g] (f32); tokens past M are zero rows (fragments 0, inverse 0), as the prologue makes them."""
    NT, KB, K = sh.NT, sh.KB, sh.K
    xp = torch.zeros(NT * 8, K, dtype=torch.bfloat16, device=x.device)
    xp[: x.shape[0]] = x
    v = xp.view(NT * 8, KB, 128).float()
    amax = v.abs().amax(-1)
    e = (amax.view(torch.int32) >> 23).clamp(min=15)
    zero = amax == 0
    scale = ((268 - e) << 23).view(torch.float32).masked_fill(zero, 0.0)
    inv = ((e - 14) << 23).view(torch.float32).masked_fill(zero, 0.0)
    f = (v * scale[..., None]).half()  # [token, kb, k]; k = 16 i + 8 hh + 2 tig + e
    f = f.view(NT, 8, KB, 8, 2, 4, 2).permute(0, 2, 1, 5, 3, 4, 6).contiguous()  # nt, kb, g, tig, i, hh, e
    inv = inv.view(NT, 8, KB).permute(0, 2, 1).contiguous()  # nt, kb, g
    return torch.cat([f.view(torch.uint8).flatten(), inv.view(torch.uint8).flatten()])


class Launcher:
    """cuLaunchKernel / the PDL launcher of the candidate: (x -> the prepped buffer, w, scale, out, M)."""

    def __init__(self, fn, contract, pdl: bool):
        from netra.runtime import launch as rt_launch

        self.fn, self.c = fn, contract
        self.vals = [ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint32()]
        self.ptrs = (ctypes.c_void_p * 5)(*[ctypes.addressof(v) for v in self.vals])
        self.pdl = rt_launch.pdl_launcher() if pdl else None

    def __call__(self, xp, w, scale, out, M):
        from cuda.bindings import driver as cu

        from netra.runtime.driver import check as check_cu

        for v, a in zip(self.vals, (xp.data_ptr(), w.data_ptr(), scale.data_ptr(), out.data_ptr(), M)):
            v.value = a
        c = self.c
        geo = (*c.grid_for({"M": M}), c.threads, 1, 1, c.dynamic_smem, torch.cuda.current_stream().cuda_stream,
               ctypes.addressof(self.ptrs), 0)
        if self.pdl is not None:
            assert self.pdl(self.fn, *geo) == 0
        else:
            check_cu(cu.cuLaunchKernel(self.fn, *geo), "cuLaunchKernel")


def grouped(out_dir: str) -> None:
    from netra import contracts, paths
    from netra.contracts.proj import EXPERTS_GROUP32 as sh
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    g = paths.generator("proj", "gen_fp8_gemv")
    c, tb = contracts.get(sh.name), testbeds.get(sh.name)
    module, fn = loader.load_text(sh.name, g.generate(sh, x_prepped=True), dynamic_smem=c.dynamic_smem)
    h = loader.load(sh.name, 0).handle
    kinds = ({}, {"launch": rt_launch.pdl_launcher()})
    prom = [rt_launch.make_guard_and_launch(c, function_handle=h, device=0, **k) for k in kinds]
    cand = [rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0, **k) for k in kinds]
    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; plain and PDL-chain graphs of the promoted kernel and of "
                     "the x_prepped build, both through the contract's guard, on the same copies", "kernels": {sh.name: {}}}
    bits = lambda t: t.contiguous().view(torch.uint16)  # noqa: E731

    def as_x(buf, M):  # the guard's x: [M, 2048] BF16 over the prepped buffer's first bytes
        return buf[: M * sh.K * 2].view(torch.bfloat16).view(M, sh.K)

    for M in (17, 32):
        dims = {"M": M, "E": 256}
        row, same = {}, True
        for seed in (0, 1):
            b = check.Bench(tb, dims, seed)
            b.reset()
            assert prom[0](*tb.args(b.bufs)) is None
            torch.cuda.synchronize()
            want = {k: v.clone() for k, v in b.results().items()}
            xp = prep(b.bufs["x"], sh)
            for pdl in (0, 1):
                b.reset()
                assert cand[pdl](*tb.args({**b.bufs, "x": as_x(xp, M)})) is None
                torch.cuda.synchronize()
                got = b.results()
                same = same and all(torch.equal(bits(got[k]), bits(want[k])) for k in want)
        row["bitwise_equal_to_promoted"] = bool(same)
        base = check.Bench(tb, dims, 5)
        base.reset()
        nread, nwrite = c.nbytes(dims)
        copies = bench.copies_for(nread + nwrite)
        ins = [bench.replicate({k: v for k, v in base.inputs.items() if not k.startswith("_")}) for _ in range(copies)]
        xps = [prep(i["x"], sh) for i in ins]
        outs = [tb.alloc_outputs(dims, "cuda") for _ in range(copies)]
        args = [tb.args({**i, **o}) for i, o in zip(ins, outs)]
        cargs = [tb.args({**i, **o, "x": as_x(xp, M)}) for i, o, xp in zip(ins, outs, xps)]
        row["copies"] = copies
        for pdl, tag in ((0, "us"), (1, "pdl_chain_us")):
            row.setdefault("promoted", {})[tag], _ = bench.graph_time(lambda k: prom[pdl](*args[k]), copies)
            row.setdefault("x_prepped", {})[tag], _ = bench.graph_time(lambda k: cand[pdl](*cargs[k]), copies)
        res["kernels"][sh.name][f"M={M}"] = row
        print(sh.name, M, row, flush=True)
        ins = xps = outs = args = cargs = None  # noqa: F841
        torch.cuda.empty_cache()
        json.dump(res, open(os.path.join(out_dir, "x_prepped_grouped_variant.json"), "w"), indent=1)
    del module


def main():
    from netra import contracts, paths
    from netra.contracts.proj import DENSE32
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    if "--grouped" in sys.argv:
        grouped(out_dir)
        return
    g = paths.generator("proj", "gen_fp8_gemv")
    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; plain and PDL-chain graphs of the promoted kernel and of "
                     "the x_prepped build on the same copies", "kernels": {}}
    keep = []
    bits = lambda t: t.contiguous().view(torch.uint16)  # noqa: E731
    for sh in DENSE32:
        c = contracts.get(sh.name)
        tb = testbeds.get(sh.name)
        module, fn = loader.load_text(sh.name, g.generate(sh, x_prepped=True), dynamic_smem=c.dynamic_smem)
        keep.append(module)
        h = loader.load(sh.name, 0).handle
        gos = [rt_launch.make_guard_and_launch(c, function_handle=h, device=0, **k)
               for k in ({}, {"launch": rt_launch.pdl_launcher()})]
        cand = [Launcher(fn, c, pdl) for pdl in (False, True)]
        rows = {}
        for M in (17, 32):
            row = {}
            same = True
            for seed in (0, 1):
                b = check.Bench(tb, {"M": M}, seed)
                b.reset()
                assert gos[0](*tb.args(b.bufs)) is None
                torch.cuda.synchronize()
                want = b.results()["out"].clone()
                xp = prep(b.bufs["x"], sh)
                for pdl in (0, 1):
                    o = torch.full_like(want, float("nan"))
                    cand[pdl](xp, b.bufs["w"], b.bufs["scale"], o, M)
                    torch.cuda.synchronize()
                    same = same and torch.equal(bits(o), bits(want)) and not o.isnan().any()
            row["bitwise_equal_to_promoted"] = bool(same)
            base = check.Bench(tb, {"M": M}, 5)
            base.reset()
            copies = bench.copies_for(sh.N * sh.K)
            ins = [bench.replicate({k: base.bufs[k] for k in ("x", "w", "scale")}) for _ in range(copies)]
            xps = [prep(i["x"], sh) for i in ins]
            outs = [torch.empty(M, sh.N, dtype=torch.bfloat16, device="cuda") for _ in range(copies)]
            row["copies"] = copies
            for pdl, tag in ((0, "us"), (1, "pdl_chain_us")):
                row.setdefault("promoted", {})[tag], _ = bench.graph_time(
                    lambda k: gos[pdl](ins[k]["x"], ins[k]["w"], ins[k]["scale"], outs[k]), copies)
                row.setdefault("x_prepped", {})[tag], _ = bench.graph_time(
                    lambda k: cand[pdl](xps[k], ins[k]["w"], ins[k]["scale"], outs[k], M), copies)
            rows[f"M={M}"] = row
            print(sh.name, M, row, flush=True)
            ins = xps = outs = None  # noqa: F841
            torch.cuda.empty_cache()
        res["kernels"][sh.name] = rows
        json.dump(res, open(os.path.join(out_dir, "x_prepped_variant.json"), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
