"""Why does the first bench case of a process read faster (docs/notes/norm.md: floors 0.2-0.4 us lower at ~1.5 us)?

Not the driver's scrub (scrub_state.py): the small cases free under 1 GB, and the re-record with bench.settle did not
move their floors. This times rmsnorm_h2048 at M = 1 by bench_case (peers off) several times in one process:
first in the process; right after; after 2 s idle (synchronized, nothing running); right after; after a case of the LM
head (33 GB freed, which bench.settle waits out); and reads the SM clock, memory clock and power by nvidia-smi before
each case. If idle time makes the next case fast, the first case's speed is the GPU's idle state (clocks, power
headroom), which the decode step, running back to back, is not in; netra bench's discarded first case is then right.

``--keep``: bench_case's release() a no-op, so no case gives memory back to the driver.

  python3 experiments/runtime/first_case.py [--keep] --out "$OUT"   (on the H200, PYTHONPATH=src)
"""

import json
import os
import subprocess
import sys
import time

import torch

from netra import contracts
from netra.lifecycle import bench, testbeds
from netra.runtime import launch as rt_launch
from netra.runtime import loader


def smi() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception as e:  # recorded, not fatal
        return f"nvidia-smi failed: {type(e).__name__}"


def main() -> None:
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(os.path.abspath(__file__))
    empty = rt_launch.raw_launcher(loader.load("empty_kernel", 0))
    reader = rt_launch.raw_launcher(loader.load("read_floor", 0))

    def case(name, dims):
        c = contracts.get(name)
        go = rt_launch.make_guard_and_launch(c, function_handle=loader.load(name, 0).handle, device=0)
        before = smi()
        r = bench.bench_case(testbeds.get(name), dims, go, (empty, reader), peers=False, log=print)
        return {"kernel_us": r["median_us"], "read_floor_us": r["peers"]["read_floor"],
                "empty_us": r["peers"]["empty_kernel"], "scrub_wait_s": r["scrub_wait_s"], "smi_before": before}

    seq, res = [], {"method": bench.METHOD.format(R=bench.REPLAYS) + "; nvidia-smi before each case", "cases": []}
    norm = ("rmsnorm_h2048", {"M": 1})
    if "--keep" in sys.argv:  # every case's memory kept in PyTorch's cache: nothing is given back to the driver
        bench.release = lambda: 0
        res["keep"] = True
    for label, pre_sleep, what in (("first in the process", 0, norm), ("right after", 0, norm),
                                   ("after 2 s idle", 2, norm), ("right after", 0, norm), ("right after", 0, norm),
                                   ("the LM head, M = 1", 0, ("bf16_gemv_n248320_k2048_argmax", {"M": 1})),
                                   ("right after the LM head (bench.settle)", 0, norm), ("after 2 s idle", 2, norm)):
        if pre_sleep:
            torch.cuda.synchronize()
            time.sleep(pre_sleep)
        row = {"label": label, "kernel": what[0], **case(*what)}
        seq.append(row)
        print(json.dumps(row), flush=True)
    res["cases"] = seq
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "first_case_keep.json" if "--keep" in sys.argv else "first_case.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
