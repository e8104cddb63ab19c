"""Why the expert gate | up (fp8_gemv_n1024_k2048_moe) measures ~72 us at M = 16 in its record and
~61-63 us with fresh ids per copy (experts_bench_ids_8afda9c.json) and in a 40-layer graph of the
model (experiments/decode/experts_graph_c7bfb0f.json: 62.5).

Redrawing only the copies after the first (the bench at 2dc080b, reverted) kept the record at 73.4:
so it is not the repetition of one id pattern. The test bed's weights are zero for every expert its
ids do not choose (a wrong expert then fails the check), so fresh ids mostly read zero weights. This
times the promoted kernel at M = 8 and 16 over 2 copies (as the record):
- record: the test bed's ids and weights;
- fresh_ids: fresh ids in both copies (mostly zero weights, as experts_bench_ids' ids_per_copy_2);
- dense_record: the test bed's ids, every expert's weight non-zero (copied from the chosen ones);
- dense_fresh_ids: fresh ids, every expert's weight non-zero.
Prediction, if reading zeros is what is faster: record ~72, fresh_ids ~62, dense_record ~72,
dense_fresh_ids ~72. If dense_fresh_ids is ~62, the test bed's own ids are what is slow (their
pattern, e.g. repeated experts across tokens), not the values.

  PYTHONPATH=src python3 experiments/proj/experts_bench_values.py --out "$OUT"   (about a minute)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    import torch

    from netra import contracts
    from netra.contracts.proj import EXPERTS, NUM_EXPERTS, TOP_K
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    sh = EXPERTS[0]
    c, tb = contracts.get(sh.name), testbeds.get(sh.name)
    go = rt_launch.make_guard_and_launch(c, function_handle=loader.load(sh.name, 0).handle, device=0)
    gen = torch.Generator().manual_seed(11)
    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; 2 copies; ids and weights per form as the docstring says",
           "cases": {}}
    for M in (8, 16):
        dims = {"M": M, "E": NUM_EXPERTS}
        base = check.Bench(tb, dims, 5)
        base.reset()
        ids0 = base.inputs["ids"]
        chosen = ids0.reshape(-1).unique()
        src = torch.arange(NUM_EXPERTS, device=chosen.device) % chosen.numel()

        def copies(fresh: bool, dense: bool):
            bufs = []
            for _ in range(2):
                ins = bench.replicate(base.inputs)
                if dense:  # every expert's packed weight and scales from a chosen (non-zero) one
                    ins["w"].copy_(base.inputs["w"][chosen][src])
                    ins["scale"].copy_(base.inputs["scale"][chosen][src])
                if fresh:
                    ids = torch.stack([torch.randperm(NUM_EXPERTS, generator=gen)[:TOP_K] for _ in range(M)])
                    ins["ids"].copy_(ids.to(ins["ids"].device))
                bufs.append({**ins, **tb.alloc_outputs(dims, "cuda")})
            return [tb.args(b) for b in bufs]

        row = {"distinct_experts_testbed": int(chosen.numel())}
        for form, (fresh, dense) in {"record": (False, False), "fresh_ids": (True, False),
                                     "dense_record": (False, True), "dense_fresh_ids": (True, True)}.items():
            args = copies(fresh, dense)
            row[form], _ = bench.graph_time(lambda i, args=args: go(*args[i]), len(args))
            del args
            torch.cuda.empty_cache()
        res["cases"][str(M)] = row
        print(M, {k: round(v, 2) for k, v in row.items()}, flush=True)
    json.dump(res, open(os.path.join(out_dir, "experts_bench_values.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
