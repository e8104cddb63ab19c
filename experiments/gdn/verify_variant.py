"""The `fast` build of gdn_verify_t16 (gen_gdn_verify.generate(fast=True)) beside the promoted
one: the per-token reductions alternate shared buffers (one barrier each, not two) and warp
0's sums of o^2 leave the token loop. Same arithmetic, so its outputs and pools must be
bitwise the promoted kernel's; then both are timed the bench's way at the contract's cases.
Writes verify_variant.json to --out.

Prediction: about 0.15 us less per token (24 -> ~21.5 us at B = 1, T = 16); the bar (3x T = 1,
~15.8 us) needs more than this: the per-token state stores (2 MiB) are the next suspect;
`ncu --set full` on this kernel at T = 16 would say (`profile_verify.py`).

  python3 experiments/gdn/verify_variant.py --out "$OUT"      (on the H200, PYTHONPATH=src)
"""

import json
import os
import sys

import torch

from netra import contracts, paths
from netra.lifecycle import bench, check, testbeds
from netra.lifecycle.metrics import rel_err
from netra.runtime import launch as rt_launch
from netra.runtime import loader

C = contracts.get("gdn_verify_t16")


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    tb = testbeds.get(C.name)
    gen = paths.generator("gdn", "gen_gdn_verify")
    module, fn = loader.load_text(C.name, gen.generate(fast=True))
    go_fast = rt_launch.make_guard_and_launch(C, function_handle=int(fn), device=0)
    go_prom = rt_launch.make_guard_and_launch(C, function_handle=loader.load(C.name, 0).handle, device=0)
    res = {"correctness": {}, "timing": {}}
    for case in C.cases():
        outs = []
        for go in (go_fast, go_prom):
            b = check.Bench(tb, case, 0)
            b.reset()
            assert go(*tb.args(b.bufs)) is None
            torch.cuda.synchronize()
            outs.append(b.results())
        ref = tb.reference(b.original_inputs())
        key = f"B{case['B']}_T{case['T']}"
        res["correctness"][key] = {"bitwise_equal_to_promoted": all(torch.equal(outs[0][n], outs[1][n]) for n in outs[0]),
                                   **{n: rel_err(outs[0][n], ref[n]) for n in outs[0]}}
        print(key, res["correctness"][key], flush=True)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    for case in C.cases():
        key = f"B{case['B']}_T{case['T']}"
        res["timing"][key] = {tag: bench.bench_case(tb, case, go, floors, peers=False, log=print)["median_us"]
                              for tag, go in (("promoted", go_prom), ("fast", go_fast))}
        print(key, res["timing"][key], flush=True)
    json.dump({"method": bench.METHOD.format(R=bench.REPLAYS), **res}, open(os.path.join(out_dir, "verify_variant.json"), "w"),
              indent=1)
    del module


if __name__ == "__main__":
    main()
