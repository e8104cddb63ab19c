"""Why the bench's M = 16 time of the expert gate | up (fp8_gemv_n1024_k2048_moe: 72.9 us in its
record) is ~15% above the same kernel's time in a 40-layer graph of real expert stacks (62.5 us,
experiments/decode/experts_graph_c7bfb0f.json), while the withdrawn 4-stage build took 64.0 in
the bench and 62.8 in the graph.

The bench (netra.lifecycle.bench.bench_case) launches C = max(2, ...) copies of one test bed's
inputs, so every launch reads the same expert ids (the same relative addresses) in the same order.
This times the promoted build and the 4-stage build at M = 1, 8, 16 four ways, the bench's own
graph_time in each:
- record: C copies of the same inputs, as the record (C = 2 at M = 16);
- same_ids_8: 8 copies of the same inputs;
- ids_per_copy: 8 copies, each with its own uniformly drawn ids (each token 8 distinct experts);
- ids_per_copy_2: 2 copies with their own ids.
Prediction, if the repeated ids are the cause: the 3-stage build at M = 16 ~72-73 us in record and
same_ids_8, ~62-64 in both ids_per_copy forms; the 4-stage build ~63-64 everywhere. If
ids_per_copy stays at ~72, the test bed's other differences (zero weights for the unchosen
experts, its x) are next.

  PYTHONPATH=src python3 experiments/proj/experts_bench_ids.py --out "$OUT"   (about a minute)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    import torch

    from netra import contracts, paths
    from netra.contracts.proj import EXPERTS, NUM_EXPERTS, TOP_K
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    sh = EXPERTS[0]
    c, tb = contracts.get(sh.name), testbeds.get(sh.name)
    g = paths.generator("proj", "gen_fp8_gemv")
    s4 = dataclasses.replace(sh, stages=4)
    module, fn = loader.load_text(s4.name, g.generate(s4), dynamic_smem=s4.smem)
    builds = {"promoted_3_stages": (c, loader.load(sh.name, 0).handle),
              "4_stages": (dataclasses.replace(c, dynamic_smem=s4.smem), int(fn))}
    gos = {k: rt_launch.make_guard_and_launch(cc, function_handle=h, device=0) for k, (cc, h) in builds.items()}
    gen = torch.Generator().manual_seed(11)
    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; copies and ids per form as the docstring says",
           "cases": {}}
    for M in (1, 8, 16):
        dims = {"M": M, "E": NUM_EXPERTS}
        nread, nwrite = c.nbytes(dims)
        base = check.Bench(tb, dims, 5)
        base.reset()

        def copies_of(n, fresh_ids):
            bufs = []
            for _ in range(n):
                ins = bench.replicate(base.inputs)
                if fresh_ids:
                    ids = torch.stack([torch.randperm(NUM_EXPERTS, generator=gen)[:TOP_K] for _ in range(M)])
                    ins["ids"].copy_(ids.to(ins["ids"].device))
                bufs.append({**ins, **tb.alloc_outputs(dims, "cuda")})
            return [tb.args(b) for b in bufs]

        forms = {"record": copies_of(max(2, math.ceil(bench.ROTATE_BYTES / (nread + nwrite))), False),
                 "same_ids_8": copies_of(8, False), "ids_per_copy": copies_of(8, True),
                 "ids_per_copy_2": copies_of(2, True)}
        row = {}
        for form, args in forms.items():
            for build, go in gos.items():
                t, _ = bench.graph_time(lambda i, go=go, args=args: go(*args[i]), len(args))
                row[f"{form} {build}"] = t
        res["cases"][str(M)] = row
        print(M, {k: round(v, 2) for k, v in row.items()}, flush=True)
        del forms
        torch.cuda.empty_cache()
    json.dump(res, open(os.path.join(out_dir, "experts_bench_ids.json"), "w"), indent=1)
    del module


if __name__ == "__main__":
    main()
