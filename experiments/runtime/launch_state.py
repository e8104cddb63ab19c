"""What turns on the ~0.19 us per graph launch that every bench case after the first pays (docs/notes/norm.md,
first_case.py: the empty kernel 0.48 -> 0.67 us for the rest of the process)?

Each variant runs in a fresh process: E (an empty-kernel graph timed), one candidate trigger, E again, 1 s idle,
E again. E = graph of 64 empty_kernel launches (grid 1 and grid 132, 256 threads), replayed 15 times after one
warm replay, CUDA events, median / 64. The triggers are the pieces of a bench case in the order it runs them, and
the things a process does between cases. If one variant's E rises and the others' do not, that piece is the cause,
and whether the decode runner's process pays it can be asked of that piece alone.

  python3 experiments/runtime/launch_state.py --out "$OUT"          (on the H200, PYTHONPATH=src)
  python3 experiments/runtime/launch_state.py --variant NAME         (one variant; prints one JSON line)
"""

import json
import os
import statistics
import subprocess
import sys
import time

VARIANTS = ("none", "sleep", "smi", "alloc_free", "alloc_empty_cache", "cublas", "scaled_mm", "graphs_20",
            "graph_big_keep", "pdl_graph", "randint_1g", "read_graph", "bench_setup", "bench_case", "bench_case_x2")


def run_variant(name: str) -> dict:
    import torch

    from netra import contracts
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    empty = rt_launch.raw_launcher(loader.load("empty_kernel", 0))
    reader = rt_launch.raw_launcher(loader.load("read_floor", 0))

    def E(grid: int, copies: int = 64, replays: int = 15) -> float:
        g = torch.cuda.CUDAGraph()
        empty((grid, 1, 1), (256, 1, 1))
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            for _ in range(copies):
                empty((grid, 1, 1), (256, 1, 1))
        g.replay()
        torch.cuda.synchronize()
        ts = []
        for _ in range(replays):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            g.replay()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) * 1e3 / copies)
        del g
        return round(statistics.median(ts), 4)

    def both() -> dict:
        return {"grid1": E(1), "grid132": E(132)}

    norm = "rmsnorm_h2048"

    def case():
        c = contracts.get(norm)
        go = rt_launch.make_guard_and_launch(c, function_handle=loader.load(norm, 0).handle, device=0)
        return bench.bench_case(testbeds.get(norm), {"M": 1}, go, (empty, reader), peers=False, log=lambda *a: None)

    keep = []

    def trigger():
        if name == "none":
            return
        if name == "sleep":
            time.sleep(2)
        elif name == "smi":
            subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader"], capture_output=True, timeout=20)
        elif name == "alloc_free":
            torch.empty(1 << 30, dtype=torch.uint8, device="cuda").fill_(1)  # freed to the cache at once
        elif name == "alloc_empty_cache":
            torch.empty(1 << 30, dtype=torch.uint8, device="cuda").fill_(1)
            torch.cuda.empty_cache()
            time.sleep(0.1)  # the scrub of 1 GB: ~3 ms
        elif name == "cublas":
            a = torch.randn(1024, 1024, dtype=torch.bfloat16, device="cuda")
            (a @ a).sum().item()
        elif name == "scaled_mm":
            a = torch.randn(16, 2048, device="cuda").to(torch.float8_e4m3fn)
            b = torch.randn(2048, 2048, device="cuda").to(torch.float8_e4m3fn)
            one = torch.ones((), device="cuda")
            torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16).sum().item()
        elif name == "graphs_20":
            for _ in range(20):
                E(1, copies=16, replays=2)
        elif name == "graph_big_keep":
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(2000):
                    empty((1, 1, 1), (256, 1, 1))
            g.replay()
            keep.append(g)
        elif name == "pdl_graph":
            pe = rt_launch.raw_launcher(loader.load("empty_kernel", 0), pdl=True)
            pe((1, 1, 1), (256, 1, 1))
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(64):
                    pe((1, 1, 1), (256, 1, 1))
            g.replay()
            del g
        elif name == "randint_1g":
            src = torch.randint(0, 256, (1 << 30,), dtype=torch.uint8, device="cuda")
            del src
        elif name == "read_graph":
            src = torch.randint(0, 256, (64 << 20,), dtype=torch.uint8, device="cuda")
            sink = torch.zeros(4, dtype=torch.uint8, device="cuda")
            per = (4 << 20) // 132 // 16 * 16
            bench.graph_time(lambda i: reader((132, 1, 1), (256, 1, 1), src.data_ptr() + i * per * 132, sink.data_ptr(),
                                              per), 16)
        elif name == "bench_setup":  # a case's inputs, copies and outputs, no graph
            tb = testbeds.get(norm)
            base = check.Bench(tb, {"M": 1}, 5)
            base.reset()
            keep.append([bench.replicate(base.inputs) for _ in range(64)])
        elif name == "bench_case":
            case()
        elif name == "bench_case_x2":
            case()
            case()
        torch.cuda.synchronize()

    r = {"variant": name, "before": both()}
    t0 = time.perf_counter()
    trigger()
    r["trigger_s"] = round(time.perf_counter() - t0, 3)
    r["after"] = both()
    torch.cuda.synchronize()
    time.sleep(1)
    r["after_1s"] = both()
    r["after_again"] = both()
    return r


def main() -> None:
    if "--variant" in sys.argv:
        print(json.dumps(run_variant(sys.argv[sys.argv.index("--variant") + 1])), flush=True)
        return
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(os.path.abspath(__file__))
    rows = []
    for rep in range(2):
        for v in VARIANTS:
            p = subprocess.run([sys.executable, __file__, "--variant", v], capture_output=True, text=True, timeout=300)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            row = json.loads(line[-1]) if line else {"variant": v, "error": (p.stderr or p.stdout)[-1500:]}
            row["rep"] = rep
            rows.append(row)
            print(json.dumps(row), flush=True)
    res = {"method": __doc__.split("\n\n")[1].replace("\n", " "), "rows": rows}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "launch_state.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
