"""add_rmsnorm_h2048 variants, timed by the bench's own method (CUDA-graph replay, cold L2)
beside the promoted kernel and torch.compile. Variants are text edits of the promoted PTX,
assembled with the same ptxas and flags.

  baseline     the promoted kernel
  late_store   the residual store moved next to the output store, after the reduction
  no_h_store   diagnostic only (wrong result): the residual store removed, to price it
  cs_stores    both stores with the .cs (evict-first, streaming) cache hint
"""

import json
import os
import sys


from netra import paths
from netra.lifecycle import bench, testbeds
from netra.runtime import launch as rt_launch
from netra.runtime import loader

NAME = "add_rmsnorm_h2048"
SRC = paths.ptx_path("sm_90a", "norm", NAME).read_text()
H_STORE = "  st.global.v4.b32 [%ph], {%c0, %c1, %c2, %c3};\n"
Y_STORE = "  st.global.v4.b32 [%py], {%o0, %o1, %o2, %o3};\n"


def variants():
    yield "baseline", SRC
    assert H_STORE in SRC and Y_STORE in SRC
    yield "late_store", SRC.replace(H_STORE, "").replace(Y_STORE, H_STORE + Y_STORE)
    yield "no_h_store", SRC.replace(H_STORE, "")
    yield "cs_stores", SRC.replace("st.global.v4.b32", "st.global.cs.v4.b32")


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    tb = testbeds.get(NAME)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {}
    keep = []
    for name, text in variants():
        module, fn = loader.load_text(NAME, text)
        keep.append(module)
        go = rt_launch.make_guard_and_launch(tb.contract, function_handle=int(fn), device=0)
        res[name] = [bench.bench_case(tb, {"M": m}, go, floors, peers=(name == "baseline"), log=print) for m in (1, 2, 16)]
    json.dump({"method": bench.METHOD.format(R=bench.REPLAYS), "variants": res}, open(os.path.join(out_dir, "add_rmsnorm_variants.json"), "w"), indent=1)
    for name, cases in res.items():
        print(name, [round(c["median_us"], 3) for c in cases], "read floor", [round(c["peers"]["read_floor"], 3) for c in cases])


if __name__ == "__main__":
    main()
