"""Issue 4's near-miss bars timed several times in one process: how far apart the runs of one loan are.

`docs/notes/bars.md` ("What would make the open bars decidable") asks the planners for a tolerance or several runs for
the bars that sit within the loan-to-loan spread. This gives the second: every bar kernel's M = 1 and M = 16 cases
timed R times by `netra bench`'s own `bench_case` (CUDA-graph replay, CUDA events, >= 16 rotated copies past 4x L2,
median of 7 replays, peers and floors in the same case), and per run the ratios the bars name:
- M = 1 against BF16 cuBLAS on dequantized weights (bar >= 1.8x, shapes >= 8 MB);
- M = 16 / M = 1 (bar <= 1.15);
- M = 1 and M = 16 against the read floor of the kernel's grid (bar <= 1.3x, shapes < 8 MB);
- the M = 1 roofline fraction, plainly and as a PDL chain (bar >= 85%, shapes >= 8 MB).
Nothing is written to results/.

  PYTHONPATH=src python3 experiments/proj/bar_spread.py [--runs=3] [--names=a,b] --out "$OUT"
"""

from __future__ import annotations

import json
import os
import statistics
import sys

BAR_KERNELS = ("fp8_gemv_n12288_k2048", "fp8_gemv_n9216_k2048", "fp8_gemv_n8192_k2048", "fp8_gemv_n4096_k2048",
               "fp8_gemv_n2048_k4096", "fp8_gemv_n1024_k2048_ks2", "fp8_gemv_n1024_k2048_gate_ks2",
               "fp8_gemv_n2048_k512")


def ratios(c1: dict, c16: dict) -> dict:
    out = {"m1_us": c1["median_us"], "m16_us": c16["median_us"], "m16_over_m1": c16["median_us"] / c1["median_us"],
           "m1_chain_us": c1.get("pdl_chain_us"), "m16_chain_us": c16.get("pdl_chain_us"),
           "m1_read_floor_ratio": c1["read_floor_ratio"], "m16_read_floor_ratio": c16["read_floor_ratio"],
           "m1_roofline": c1["roofline_fraction"], "m1_chain_roofline": c1.get("pdl_chain_roofline_fraction")}
    cub = c1["peers"].get("cublas_bf16")
    out["m1_vs_cublas"] = cub / c1["median_us"] if cub else None
    out["m1_cublas_us"] = cub
    return out


def main() -> int:
    import torch

    from netra import contracts
    from netra.lifecycle import bench, records, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    arg = lambda k, d: next((a.split("=", 1)[1] for a in sys.argv if a.startswith(f"--{k}=")), d)  # noqa: E731
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "."
    runs = int(arg("runs", "3"))
    names = arg("names", ",".join(BAR_KERNELS)).split(",")
    empty = rt_launch.raw_launcher(loader.load("empty_kernel", 0))
    reader = rt_launch.raw_launcher(loader.load("read_floor", 0))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; each kernel's M = 1 and M = 16 cases, runs in turn over "
           "every kernel (run r of every kernel before run r + 1 of any)", "env": records.environment(), "runs": runs,
           "kernels": {}}
    gos = {}
    for n in names:
        c = contracts.get(n)
        k = loader.load(n, 0)
        gos[n] = (c, k, rt_launch.make_guard_and_launch(c, function_handle=k.handle, device=0),
                  rt_launch.make_guard_and_launch(c, function_handle=k.handle, device=0, launch=rt_launch.pdl_launcher())
                  if c.pdl else None)
        res["kernels"][n] = {"runs": []}
    go0 = gos[names[0]][2]  # a discarded first case, as netra bench does
    bench.bench_case(testbeds.get(names[0]), {"M": 1}, go0, (empty, reader), peers=False, log=lambda *_: None)
    for r in range(runs):
        for n in names:
            c, _, go, go_pdl = gos[n]
            tb = testbeds.get(n)
            cases = [bench.bench_case(tb, {"M": M}, go, (empty, reader), peers=True, log=print, go_pdl=go_pdl)
                     for M in (1, 16)]
            rr = ratios(*cases)
            rr["bytes_read"] = cases[0]["bytes_read"]
            res["kernels"][n]["runs"].append({"ratios": rr, "cases": cases})
            print(f"run {r} {n}: " + ", ".join(f"{k} {v:.3f}" for k, v in rr.items() if isinstance(v, float)), flush=True)
            json.dump(res, open(os.path.join(out_dir, "bar_spread.json"), "w"), indent=1)
    for n in names:
        rs = [x["ratios"] for x in res["kernels"][n]["runs"]]
        summ = {}
        for key in ("m1_vs_cublas", "m16_over_m1", "m1_read_floor_ratio", "m16_read_floor_ratio", "m1_roofline",
                    "m1_chain_roofline", "m1_us", "m16_us"):
            v = [x[key] for x in rs if x.get(key) is not None]
            if v:
                summ[key] = {"min": min(v), "median": statistics.median(v), "max": max(v)}
        res["kernels"][n]["summary"] = summ
        print(n, {k: (round(v["min"], 3), round(v["max"], 3)) for k, v in summ.items()}, flush=True)
    json.dump(res, open(os.path.join(out_dir, "bar_spread.json"), "w"), indent=1)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
