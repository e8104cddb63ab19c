"""Does programmatic dependent launch lift the read ceiling of the method? (read_ceiling.py
found that one launch replayed from a graph reads 25 MB no faster than 7.8 us, 75% of
4.33 TB/s, so the 85% bar of issue 4 cannot be met by a plain launch.)

read_floor_pdl is the runtime's read_floor with `griddepcontrol.launch_dependents` at the start
(every CTA started: the next grid may launch) and `griddepcontrol.wait` before its only store:
the shape of a projection that reads its weights before the wait and x after it. For each
projection's weight bytes, over a few grids and blocks: the plain read floor and a chain of
read_floor_pdl launches by cuLaunchKernelEx with programmatic stream serialization, timed
the bench's way (CUDA-graph replay, copies rotated past 4x the L2, CUDA events).

  python3 experiments/proj/pdl_ceiling.py --out "$OUT"     (on the H200, PYTHONPATH=src)
"""

import dataclasses
import json
import math
import os
import sys

import torch

from netra import paths
from netra.contracts.proj import SHAPES
from netra.lifecycle import bench
from netra.runtime import launch as rt_launch
from netra.runtime import loader

GRIDS = (264, 528, 1056, 2112)
BLOCKS = (256, 512)


def pdl_text() -> str:
    src = (paths.ptx_path("sm_90a", "runtime", "read_floor")).read_text()
    out = src.replace(".visible .entry read_floor(", ".visible .entry read_floor_pdl(")
    out = out.replace("  mov.b32 %acc, 0;\n", "  mov.b32 %acc, 0;\n  griddepcontrol.launch_dependents;\n", 1)
    out = out.replace("DONE:\n", "DONE:\n  griddepcontrol.wait;\n", 1)
    assert out.count("griddepcontrol") == 2 and "read_floor_pdl(" in out, "read_floor.ptx changed shape"
    return out


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    plain_k = loader.load("read_floor", 0)
    module, fn = loader.load_text("read_floor_pdl", pdl_text())
    pdl_k = dataclasses.replace(plain_k, module=module, function=fn, handle=int(fn))
    readers = {"plain": rt_launch.raw_launcher(plain_k), "pdl_build_plain_launch": rt_launch.raw_launcher(pdl_k),
               "pdl_chain": rt_launch.raw_launcher(pdl_k, pdl=True)}
    sizes = {sh.name: sh.N * sh.K + (sh.N // 128) * (sh.K // 128) * 4 for sh in SHAPES}
    sizes.update({"gdn_state_b1": 2 << 20})
    res = {}
    sink = torch.zeros(4, dtype=torch.uint8, device="cuda")
    for name, nbytes in sizes.items():
        copies = max(2, math.ceil(bench.ROTATE_BYTES / nbytes))
        rows = []
        for grid in GRIDS:
            per_cta = -(-nbytes // grid // 16) * 16
            src = torch.randint(0, 256, (copies * per_cta * grid,), dtype=torch.uint8, device="cuda")
            p0, stride = src.data_ptr(), per_cta * grid
            for block in BLOCKS:
                row = {"grid": grid, "block": block}
                for tag, reader in readers.items():
                    t, _ = bench.graph_time(lambda i: reader((grid, 1, 1), (block, 1, 1), p0 + i * stride, sink.data_ptr(),
                                                             per_cta), copies)
                    row[tag] = t
                rows.append(row)
            del src
            torch.cuda.empty_cache()
        best = {tag: min(rows, key=lambda r: r[tag]) for tag in readers}
        res[name] = {"bytes": nbytes, "copies": copies, "sweep": rows,
                     "best": {tag: {"us": r[tag], "grid": r["grid"], "block": r["block"],
                                    "roofline_fraction": nbytes / bench.READ_ROOFLINE / (r[tag] * 1e-6)} for tag, r in best.items()}}
        print(name, nbytes, {tag: f"{b['us']:.2f} us {100 * b['roofline_fraction']:.1f}% ({b['grid']} x {b['block']})"
                             for tag, b in res[name]["best"].items()}, flush=True)
    json.dump({"method": bench.METHOD.format(R=bench.REPLAYS) + "; pdl_chain: every launch cuLaunchKernelEx with "
               "programmatic stream serialization, captured into the same graph",
               "kernel": "read_floor and read_floor_pdl (launch_dependents at the start, wait before the store)",
               "sizes": res}, open(os.path.join(out_dir, "pdl_ceiling.json"), "w"), indent=1)
    del module


if __name__ == "__main__":
    main()
