"""How fast can one launch read N bytes at all? The read_floor kernel (a plain PTX reader, 4
16-byte loads in flight per thread per iteration) timed the bench's way (CUDA-graph replay,
copies rotated past 4x the L2, CUDA events) over a sweep of grids and block sizes, for each
projection's weight bytes and the GDN state sizes. The best configuration per size is the
read ceiling of this measurement method: a kernel that must also compute cannot beat it,
so a bar above it cannot be met by any kernel timed this way.

  python3 experiments/proj/read_ceiling.py --out "$OUT"     (on the H200, PYTHONPATH=src)
"""

import json
import math
import os
import sys

import torch

from netra.contracts.proj import SHAPES
from netra.lifecycle import bench
from netra.runtime import launch as rt_launch
from netra.runtime import loader

GRIDS = (132, 264, 528, 1056, 2112)
BLOCKS = (256, 512, 1024)


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    reader = rt_launch.raw_launcher(loader.load("read_floor", 0))
    sizes = {sh.name: sh.N * sh.K + (sh.N // 128) * (sh.K // 128) * 4 for sh in SHAPES}
    sizes.update({"gdn_state_b1": 2 << 20, "gdn_state_b32": 64 << 20})
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
                t, _ = bench.graph_time(lambda i: reader((grid, 1, 1), (block, 1, 1), p0 + i * stride, sink.data_ptr(),
                                                         per_cta), copies)
                rows.append({"grid": grid, "block": block, "us": t, "roofline_fraction": nbytes / bench.READ_ROOFLINE / (t * 1e-6)})
            del src
            torch.cuda.empty_cache()
        best = min(rows, key=lambda r: r["us"])
        res[name] = {"bytes": nbytes, "copies": copies, "best": best, "sweep": rows}
        print(f"{name}: {nbytes} B, best {best['us']:.2f} us at grid {best['grid']} x {best['block']} "
              f"({100 * best['roofline_fraction']:.1f}% of 4.33 TB/s); floor at the 85% bar: "
              f"{nbytes / bench.READ_ROOFLINE / 0.85 * 1e6:.2f} us", flush=True)
    json.dump({"method": bench.METHOD.format(R=bench.REPLAYS), "kernel": "read_floor (kernels/sm_90a/runtime)",
               "sizes": res}, open(os.path.join(out_dir, "read_ceiling.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
