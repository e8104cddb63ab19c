"""The expert gate | up's M = 16 record (72.9 us) against the model's 62.5: does where the copies land in
memory, or how many distinct stacks a graph rotates through, decide it? (experiments/proj/README.md, the
expert bench's M = 16 time: ids and weight values were ruled out; experts_bench_ids.py's fast forms ran
after 20 copies of the expert stack had been allocated.)

One process, the promoted kernel (fp8_gemv_n1024_k2048_moe) at M = 16 over the test bed's inputs, timed
by the bench's graph_time (CUDA-graph replay of C launches over C copies, CUDA events, median of 7), in
this order:
- record_first: 2 copies, as the record;
- filler: 12 GiB allocated and written, then record_after_filler (the copies land elsewhere);
- record_after_free: the filler freed, again;
- copies_8 / copies_40: 8 / 40 copies (as the 40-layer graph rotates 40 stacks);
- record_last: 2 copies again.
Prediction, if placement decides: record_after_filler differs from record_first by more than 5%; if the
rotation depth decides: copies_40 near the model's 62.5 and copies_8 between.
Measured at 8c6f8cc (experts_bench_alloc_8c6f8cc.json), us: record_first 66.98, record_after_filler 67.31,
record_after_free 77.34, copies_8 71.97, copies_40 63.22, record_last 74.82. The same 2-copy form moves
67-77 us with where its copies land; 40 copies average to the model's 62.5.

``--gdn`` (after 8c6f8cc): the same question for every launch the bench times over 2 copies because one
launch moves more than 120 MB: the GDN decode at B = 32 (138 MB of state traffic; its record moves ~1.5 us
between loans) and, for comparison, B = 16 (4 copies), with the promoted smem build, in the order 2, 2, 8,
16, 40, 2 copies. Measured at 663ce69 (experts_bench_alloc_gdn_663ce69.json), us: B = 32 41.49, 41.84,
42.04, 41.85, 41.62, 44.67; B = 16 23.34, 23.07, 21.65, 22.36, 22.38, 23.10. Two copies move 41.5-44.7 at
B = 32; 8 to 40 copies agree within 0.4 (41.6-42.0, 76-77% of the state roofline).

  PYTHONPATH=src python3 experiments/proj/experts_bench_alloc.py --out "$OUT"   (about a minute)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(go, tb, base, dims, n: int) -> float:
    """The bench's graph time of ``go`` over n fresh copies of the test bed's inputs and outputs."""
    import torch

    from netra.lifecycle import bench

    bufs = [{**bench.replicate(base.inputs), **tb.alloc_outputs(dims, "cuda")} for _ in range(n)]
    args = [tb.args(b) for b in bufs]
    t, _ = bench.graph_time(lambda i: go(*args[i]), n)
    bufs.clear()
    args.clear()
    torch.cuda.empty_cache()
    return t


def main():
    import torch

    from netra import contracts
    from netra.contracts.proj import EXPERTS, NUM_EXPERTS
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    if "--gdn" in sys.argv:
        return gdn(out_dir)
    sh = EXPERTS[0]
    c, tb = contracts.get(sh.name), testbeds.get(sh.name)
    go = rt_launch.make_guard_and_launch(c, function_handle=loader.load(sh.name, 0).handle, device=0)
    dims = {"M": 16, "E": NUM_EXPERTS}
    base = check.Bench(tb, dims, 5)
    base.reset()

    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; copies and order as the docstring says",
           "kernel": sh.name, "M": 16, "cases": {}}

    def note(name, t):
        res["cases"][name] = t
        print(name, round(t, 2), flush=True)
        json.dump(res, open(os.path.join(out_dir, "experts_bench_alloc.json"), "w"), indent=1)

    note("record_first", timed(go, tb, base, dims, 2))
    filler = [torch.ones(1 << 30, dtype=torch.uint8, device="cuda") for _ in range(12)]
    note("record_after_filler", timed(go, tb, base, dims, 2))
    del filler
    torch.cuda.empty_cache()
    note("record_after_free", timed(go, tb, base, dims, 2))
    note("copies_8", timed(go, tb, base, dims, 8))
    note("copies_40", timed(go, tb, base, dims, 40))
    note("record_last", timed(go, tb, base, dims, 2))


def gdn(out_dir: str) -> None:
    from netra import contracts
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    name = "gdn_decode_b32_smem"
    c, tb = contracts.get(name), testbeds.get(name)
    go = rt_launch.make_guard_and_launch(c, function_handle=loader.load(name, 0).handle, device=0)
    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; copies and order as the docstring says",
           "kernel": name, "cases": {}}
    cases = {str(d): d for d in c.cases() if d["B"] in (16, 32)}
    for key, dims in cases.items():
        base = check.Bench(tb, dims, 5)
        base.reset()
        nread, nwrite = c.nbytes(dims)
        row = {"bench_copies": max(2, -(-bench.ROTATE_BYTES // (nread + nwrite)))}
        for n in (2, 2, 8, 16, 40, 2):
            t = timed(go, tb, base, dims, n)
            row.setdefault(f"copies_{n}", []).append(t)
            print(key, n, round(t, 2), flush=True)
        res["cases"][key] = row
        json.dump(res, open(os.path.join(out_dir, "experts_bench_alloc_gdn.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
