"""How fast can a chain of PDL launches go when each launch, like a GEMV, must read the previous
kernel's output after griddepcontrol.wait? pdl_ceiling.py's read_floor_pdl reads its weight bytes before
the wait and nothing after it (91-96% of 4.33 TB/s as a chain at the projections' sizes). Here
read_floor_x_pdl (read_floor with launch_dependents at the start and, after the weight loop, the wait
and then one 16-byte load of x per thread, XORed into the word it may store) is the floor of every
projection kernel launched as a chain: a GEMV holding its weights (at most 64 KB per SM at 8.4 MB, 190 KB
at 25 MB: shared memory and registers hold them) could at best do this. Two x placements:
- x_rotated: C copies of x (K BF16 values, as M = 1), one per launch, rotated with the weights, as the
  bench does (the bench's inputs are cold in DRAM);
- x_same: one x for every launch (hot in L2), as in the decode step, where x was just written.
Timed the bench's way (CUDA-graph replay of C launches over C weight copies, > 4x the L2 and at least
16, CUDA events, median of 7), the chain by cuLaunchKernelEx with programmatic stream serialization;
read_floor_pdl (no x) and read_floor (plain) in the same run. The best over a few grids and blocks.

  python3 experiments/proj/gemv_chain_ceiling.py --out "$OUT"     (on the H200, PYTHONPATH=src)
"""

import dataclasses
import json
import math
import os
import sys

import torch

from netra import paths
from netra.contracts.proj import SHAPES
from netra.contracts.spec import Scalar
from netra.lifecycle import bench
from netra.runtime import launch as rt_launch
from netra.runtime import loader

GRIDS = (132, 264, 528, 1056)
BLOCKS = (256, 512)


def x_text() -> str:
    """read_floor -> read_floor_x_pdl: trigger at the start; after the weight loop the wait, then x."""
    src = (paths.ptx_path("sm_90a", "runtime", "read_floor")).read_text()
    out = src.replace(".visible .entry read_floor(", ".visible .entry read_floor_x_pdl(")
    out = out.replace("  .param .u32 bytes_per_cta\n)", "  .param .u32 bytes_per_cta,\n  .param .u64 x,\n  .param .u32 x_words\n)")
    out = out.replace("  .reg .b64 %base,", "  .reg .b32 %xw, %xv<4>;\n  .reg .b64 %xp, %base,", 1)
    out = out.replace("  mov.b32 %acc, 0;\n", "  mov.b32 %acc, 0;\n  griddepcontrol.launch_dependents;\n", 1)
    out = out.replace("DONE:\n", "\n".join([
        "DONE:",
        "  griddepcontrol.wait;  // x is the previous kernel's output",
        "  ld.param.u64 %xp, [x];",
        "  ld.param.u32 %xw, [x_words];",
        "  cvta.to.global.u64 %xp, %xp;",
        "  mov.u32 %o0, %tid.x;",
        "  rem.u32 %o0, %o0, %xw;",
        "  mul.wide.u32 %d0, %o0, 16;",
        "  add.s64 %xp, %xp, %d0;",
        "  ld.global.v4.b32 {%xv0, %xv1, %xv2, %xv3}, [%xp];",
        "  xor.b32 %xv0, %xv0, %xv1;",
        "  xor.b32 %xv2, %xv2, %xv3;",
        "  xor.b32 %acc, %acc, %xv0;",
        "  xor.b32 %acc, %acc, %xv2;",
        ""]), 1)
    assert out.count("griddepcontrol") == 2 and "read_floor_x_pdl(" in out and "x_words" in out, "read_floor.ptx changed shape"
    return out


def pdl_text() -> str:
    mod = paths.load_module(paths.ROOT / "experiments" / "proj" / "pdl_ceiling.py", "pdl_ceiling")
    return mod.pdl_text()


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    plain_k = loader.load("read_floor", 0)
    c = plain_k.contract
    xc = dataclasses.replace(c, name="read_floor_x_pdl", params=c.params + (
        dataclasses.replace(c.params[0], name="x"), Scalar("x_words", "u32", value=None)))
    xmod, xfn = loader.load_text("read_floor_x_pdl", x_text())
    pmod, pfn = loader.load_text("read_floor_pdl", pdl_text())
    x_k = dataclasses.replace(plain_k, contract=xc, module=xmod, function=xfn, handle=int(xfn))
    p_k = dataclasses.replace(plain_k, module=pmod, function=pfn, handle=int(pfn))
    plain, pdl_chain, x_chain = (rt_launch.raw_launcher(plain_k), rt_launch.raw_launcher(p_k, pdl=True),
                                 rt_launch.raw_launcher(x_k, pdl=True))
    sizes = {sh.name: (sh.N * sh.K + (sh.N // 128) * (sh.K // 128) * 4, sh.K) for sh in SHAPES if sh.N * sh.K >= 8 << 20}
    res = {}
    sink = torch.zeros(4, dtype=torch.uint8, device="cuda")
    for name, (nbytes, K) in sizes.items():
        copies = max(bench.MIN_COPIES, math.ceil(bench.ROTATE_BYTES / nbytes))
        xbytes = 2 * K
        xs = torch.randn(copies, K, device="cuda").to(torch.bfloat16)
        rows = []
        for grid in GRIDS:
            per_cta = -(-nbytes // grid // 16) * 16
            src = torch.randint(0, 256, (copies * per_cta * grid,), dtype=torch.uint8, device="cuda")
            p0, stride = src.data_ptr(), per_cta * grid
            for block in BLOCKS:
                g, b = (grid, 1, 1), (block, 1, 1)
                row = {"grid": grid, "block": block}
                row["plain"], _ = bench.graph_time(lambda i: plain(g, b, p0 + i * stride, sink.data_ptr(), per_cta), copies)
                row["pdl_chain_no_x"], _ = bench.graph_time(
                    lambda i: pdl_chain(g, b, p0 + i * stride, sink.data_ptr(), per_cta), copies)
                row["pdl_chain_x_rotated"], _ = bench.graph_time(
                    lambda i: x_chain(g, b, p0 + i * stride, sink.data_ptr(), per_cta, xs[i].data_ptr(), xbytes // 16), copies)
                row["pdl_chain_x_same"], _ = bench.graph_time(
                    lambda i: x_chain(g, b, p0 + i * stride, sink.data_ptr(), per_cta, xs[0].data_ptr(), xbytes // 16), copies)
                rows.append(row)
            del src
            torch.cuda.empty_cache()
        tags = [k for k in rows[0] if k not in ("grid", "block")]
        best = {tag: min(rows, key=lambda r: r[tag]) for tag in tags}
        res[name] = {"bytes": nbytes, "copies": copies, "x_bytes": xbytes, "sweep": rows,
                     "us_at_85pct": nbytes / bench.READ_ROOFLINE / 0.85 * 1e6,
                     "best": {tag: {"us": r[tag], "grid": r["grid"], "block": r["block"],
                                    "roofline_fraction": nbytes / bench.READ_ROOFLINE / (r[tag] * 1e-6)} for tag, r in best.items()}}
        print(name, nbytes, {tag: f"{v['us']:.2f} us {100 * v['roofline_fraction']:.1f}% ({v['grid']} x {v['block']})"
                             for tag, v in res[name]["best"].items()}, flush=True)
    json.dump({"method": bench.METHOD.format(R=bench.REPLAYS) + "; pdl_chain_*: every launch cuLaunchKernelEx with "
               "programmatic stream serialization, captured into the same graph",
               "kernels": "read_floor (plain), read_floor_pdl (pdl_ceiling.py: weights before the wait, no x), "
                          "read_floor_x_pdl (weights before the wait, then one 16-byte load of x per thread after it)",
               "sizes": res}, open(os.path.join(out_dir, "gemv_chain_ceiling.json"), "w"), indent=1)
    del xmod, pmod


if __name__ == "__main__":
    main()
