"""A minimal process for ncu: one registered kernel launched 4 times on its test bed at one contract case, by its own
guard and launcher (the bench's), nothing else of note. The bed's inputs as the bench draws them (experts: uniform ids).

  ncu --clock-control none --set full -k regex:NAME --launch-skip 2 --launch-count 1 -o $OUT/x \\
      python3 experiments/proj/profile_kernel.py NAME M       (on the H200, PYTHONPATH=src)

`profile_moe.sh` runs it on the batch-8 and batch-32 MoE kernels. `--clock-control none`: ncu leaves the card's clocks
as they are (its default locks them to base, which the rules of this project do not allow)."""

import sys

import torch

from netra import contracts
from netra.lifecycle import check, testbeds
from netra.runtime import launch as rt_launch
from netra.runtime import loader


def main():
    name, M = sys.argv[1], int(sys.argv[2])
    c = contracts.get(name)
    dims = next(d for d in c.cases() if d.get("M") == M)
    tb = testbeds.get(name)
    k = loader.load(name, 0)
    go = rt_launch.make_guard_and_launch(c, function_handle=k.handle, device=0)
    b = check.Bench(tb, dims, 0)
    for _ in range(4):
        b.reset()
        reason = go(*tb.args(b.bufs))
        assert reason is None, reason
    torch.cuda.synchronize()
    print(f"launched {name} 4 times at {dims}")


if __name__ == "__main__":
    main()
