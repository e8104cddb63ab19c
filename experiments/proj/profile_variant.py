"""A minimal process for ncu: launches one fp8_gemv candidate (proj_variant.py's names) at one
shape and M a few times, nothing else of note.

  ncu --set full -k regex:fp8_gemv --launch-skip 2 --launch-count 1 -o $OUT/v6_m1 \\
      python3 experiments/proj/profile_variant.py v6 fp8_gemv_n12288_k2048 1     (on the H200, PYTHONPATH=src)
"""

import dataclasses
import sys
from pathlib import Path

import torch

from netra import contracts, paths
from netra.contracts.proj import SHAPES
from netra.lifecycle import check, testbeds
from netra.runtime import launch as rt_launch
from netra.runtime import loader

HERE = Path(__file__).resolve().parent


def main():
    name, shape, M = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pv = paths.load_module(HERE / "proj_variant.py", "proj_variant")
    generate, geometry = pv.candidate(name)
    sh = next(s for s in SHAPES if s.name == shape)
    grid, threads, smem = geometry(sh)
    c2 = dataclasses.replace(contracts.get(sh.name), grid=(str(grid), "1", "1"), threads=threads, dynamic_smem=smem)
    tb = dataclasses.replace(testbeds.get(sh.name), contract=c2)
    module, fn = loader.load_text(sh.name, generate(sh), dynamic_smem=smem)
    go = rt_launch.make_guard_and_launch(c2, function_handle=int(fn), device=0)
    b = check.Bench(tb, {"M": M}, 0)
    for _ in range(4):
        b.reset()
        assert go(*tb.args(b.bufs)) is None
    torch.cuda.synchronize()
    print(f"launched {name} {shape} 4 times at M = {M}")
    del module


if __name__ == "__main__":
    main()
