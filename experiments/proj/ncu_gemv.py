"""Launch one projection kernel on its testbed's inputs for Nsight Compute (a diagnosis, no timing of its own).

  ncu --clock-control none --set full --kernel-name NAME --launch-skip 2 --launch-count 1 \
      python3 experiments/proj/ncu_gemv.py NAME M

The testbed's case with that M (seed 0), launched plainly 3 times (the first two bind and warm; ncu's replay restores
memory and flushes the caches before each pass, so the profiled launch reads its weights from DRAM)."""

from __future__ import annotations

import sys

import torch


def main():
    from netra import contracts
    from netra.lifecycle import check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    name, m = sys.argv[1], int(sys.argv[2])
    c = contracts.get(name)
    tb = testbeds.get(name)
    case = next(d for d in c.cases() if d["M"] == m)
    go = rt_launch.make_guard_and_launch(c, function_handle=loader.load(name, 0).handle, device=0)
    b = check.Bench(tb, case, 0)
    for _ in range(3):
        b.reset()
        assert go(*tb.args(b.bufs)) is None, "the guard refused the testbed's inputs"
    torch.cuda.synchronize()
    print(name, case, "launched 3 times", flush=True)


if __name__ == "__main__":
    main()
