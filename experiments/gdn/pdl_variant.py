"""Programmatic dependent launch for gdn_decode_b32: how much of the B = 1 step is launch and
first-byte latency that the previous kernel could hide?

The PDL build (gen_gdn_decode.generate(pdl=True)) lets the next grid launch at once and
loads the slot id, the weights, the conv windows and the state before griddepcontrol.wait;
only the projection outputs after it. Launched with cuLaunchKernelEx and the programmatic
stream serialization attribute, consecutive launches (different state copies, as the bench
rotates them) overlap one's prologue with the other's tail. Checked against float64 with
NaN poison first; then timed the bench's way beside the promoted kernel, and the PDL build
launched plainly (griddepcontrol is then a no-op). Writes pdl_variant.json to --out.

Safe in the runner only because a layer's state is written once per step and steps are
separate graph launches; two launches on the same slot inside one PDL chain would race.

  python3 experiments/gdn/pdl_variant.py --out "$OUT"      (on the H200, PYTHONPATH=src)
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

C = contracts.get("gdn_decode_b32")
gen = paths.generator("gdn", "gen_gdn_decode")


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    tb = testbeds.get(C.name)
    module, fn = loader.load_text(C.name, gen.generate(pdl=True, coherent=False))
    go_pdl = rt_launch.make_guard_and_launch(C, function_handle=int(fn), device=0, launch=rt_launch.pdl_launcher())
    go_pdl_plain = rt_launch.make_guard_and_launch(C, function_handle=int(fn), device=0)
    k = loader.load(C.name, 0)
    go_prom = rt_launch.make_guard_and_launch(C, function_handle=k.handle, device=0)
    res = {"correctness": {}, "timing": {}}
    for case in C.cases():
        b = check.Bench(tb, case, 0)
        b.reset()
        assert go_pdl(*tb.args(b.bufs)) is None
        torch.cuda.synchronize()
        ref = tb.reference(b.original_inputs())
        res["correctness"][case["B"]] = {n: rel_err(b.bufs[n], ref[n]) for n in tb.output_names()}
        print(case, res["correctness"][case["B"]], flush=True)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    for case in C.cases():
        row = {}
        for tag, go in (("promoted", go_prom), ("pdl_build_plain_launch", go_pdl_plain), ("pdl", go_pdl)):
            r = bench.bench_case(tb, case, go, floors, peers=False, log=print)
            row[tag] = r["median_us"]
        res["timing"][case["B"]] = row
        print(case, {k: round(v, 2) for k, v in row.items()}, flush=True)
    json.dump({"method": bench.METHOD.format(R=bench.REPLAYS) + "; pdl: each launch cuLaunchKernelEx with "
               "programmatic stream serialization, captured into the same graph", **res},
              open(os.path.join(out_dir, "pdl_variant.json"), "w"), indent=1)
    del module


if __name__ == "__main__":
    main()
