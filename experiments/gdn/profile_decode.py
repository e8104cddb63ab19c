"""A minimal process for ncu: launches gdn_decode_b32 a few times at one batch size, nothing
else of note, so the profile is of the kernel alone (no clock control: the card's clocks stay).

  ncu --clock-control none --set full -k regex:gdn_decode --launch-skip 2 --launch-count 1 \\
      python3 experiments/gdn/profile_decode.py [B]          (on the H200, PYTHONPATH=src)
"""

import sys

import torch

from netra import contracts
from netra.lifecycle import check, testbeds
from netra.runtime import launch as rt_launch
from netra.runtime import loader

C = contracts.get("gdn_decode_b32")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    B = int(args[0]) if args else 32
    go = rt_launch.make_guard_and_launch(C, function_handle=loader.load(C.name, 0).handle, device=0)
    tb = testbeds.get(C.name)
    b = check.Bench(tb, {"B": B, "P": B + 8}, 0)
    for _ in range(4):
        b.reset()
        assert go(*tb.args(b.bufs)) is None
    torch.cuda.synchronize()
    print(f"launched {C.name} 4 times at B = {B}")


if __name__ == "__main__":
    main()
