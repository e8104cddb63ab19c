"""A minimal process for ncu: launches gdn_verify_t16 (or its fast build) a few times at one
case, nothing else of note, so the profile is of the kernel alone.

  ncu --set full -k regex:gdn_verify --launch-skip 2 --launch-count 1 -o $OUT/verify_t16 \\
      python3 experiments/gdn/profile_verify.py [--fast] [B T]          (on the H200, PYTHONPATH=src)
"""

import sys

import torch

from netra import contracts, paths
from netra.lifecycle import check, testbeds
from netra.runtime import launch as rt_launch
from netra.runtime import loader

C = contracts.get("gdn_verify_t16")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    B, T = (int(args[0]), int(args[1])) if len(args) == 2 else (1, 16)
    if "--fast" in sys.argv:
        module, fn = loader.load_text(C.name, paths.generator("gdn", "gen_gdn_verify").generate(fast=True, loop=False))
        handle = int(fn)
    else:
        handle = loader.load(C.name, 0).handle
    go = rt_launch.make_guard_and_launch(C, function_handle=handle, device=0)
    tb = testbeds.get(C.name)
    b = check.Bench(tb, {"B": B, "T": T, "P": B * (T + 1)}, 0)
    for _ in range(4):
        b.reset()
        assert go(*tb.args(b.bufs)) is None
    torch.cuda.synchronize()
    print(f"launched {C.name} 4 times at B = {B}, T = {T}")


if __name__ == "__main__":
    main()
