"""What turns on the ~0.19 us per graph launch that every bench case after the first pays (docs/notes/norm.md,
first_case.py: the empty kernel 0.48 -> 0.67 us for the rest of the process)?

Each variant runs in a fresh process: E (an empty-kernel graph timed), one candidate trigger, E again, 1 s idle,
E again. E = graph of 64 empty_kernel launches (grid 1 and grid 132, 256 threads), replayed 15 times after one
warm replay, CUDA events, median / 64. The triggers are the pieces of a bench case in the order it runs them, and
the things a process does between cases. If one variant's E rises and the others' do not, that piece is the cause,
and whether the decode runner's process pays it can be asked of that piece alone.

  python3 experiments/runtime/launch_state.py --out "$OUT"          (on the H200, PYTHONPATH=src)
  python3 experiments/runtime/launch_state.py --series --out "$OUT" (the series variants, SERIES below; --series2 .. --series10: SERIES2 ..)
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
# After the first run (launch_state_47fc106.json): each E is itself a graph, and the state turned after ~7 of them with
# no trigger at all, earlier after eager kernels, and not within 9 after a PDL graph. These ask how it depends on the
# graphs made before (a series of 48 E, each graph destroyed or kept), whether a graph made in the fast state stays
# fast (replay_first), what a PDL graph first does to a series, and whether the decode step pays it (decode_b1).
SERIES = ("series_destroy", "series_keep", "replay_first", "pdl_first_series", "decode_b1")
# After the series (launch_state_series_3f8ea74.json: the 8th graph of the process and every graph after it, graph 1
# too, slow; the decode step's process slow throughout): does the count move with the driver's hardware work queues
# (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default), does it count replays (each graph replayed 3 times, not 16) or eager
# launches (400 first)?
SERIES2 = ("series_conn1", "series_conn4", "series_conn32", "series_r3", "eager_series")
# After series2 (launch_state_series2_9d04b2f.json: the 8th graph whatever the work queues or replays; after 400 eager
# launches the 4th): is it torch's capture (its graph pools) or the driver? The same series captured, instantiated,
# launched and timed through the driver API alone on a stream of its own (series_raw), and torch's with every graph
# sharing one memory pool (series_pool).
SERIES3 = ("series_raw", "series_pool")
# After series3 (launch_state_series3_aa6cc4e.json: through the driver alone 24 graphs stayed fast, 0.58 us, and torch's
# E after them too; torch's own captures turned at the 8th even with one pool): which of torch's steps is it? The
# driver-API series with one of them added: graphs launched on the legacy default stream (torch's current stream, where
# E and the decode runner replay), instantiated with AUTO_FREE_ON_LAUNCH (as torch's capture_end), captured in GLOBAL
# mode (torch's default), or synchronize + gc + empty_cache before each capture (torch.cuda.graph's __enter__); and
# torch's captures replayed on a stream of their own.
SERIES4 = ("raw_default_stream", "raw_autofree", "raw_global", "raw_empty_cache", "torch_side_stream")
# After series4 (launch_state_series4_1e1afac.json: none of those four turned the driver series; torch's captures turned
# at the 8th on a side stream too): eager launches between the driver-API graphs, 100 per graph, by cuLaunchKernel
# (the empty kernel) or by PyTorch (an in-place add: the runtime API).
SERIES5 = ("raw_eager_driver", "raw_eager_torch")
# After series5 (launch_state_series5_34bc06a.json: 2400 eager launches of either kind between them, the driver series
# stayed fast): torch 2.11 instantiates with AUTO_FREE_ON_LAUNCH | USE_NODE_PRIORITY (CUDAGraph::instantiate). The
# driver series with USE_NODE_PRIORITY (8) and with both (9); torch's series with CUDA_GRAPHS_USE_NODE_PRIORITY=0,
# which the CUDA docs say overrides that flag.
SERIES6 = ("raw_prio", "raw_autofree_prio", "torch_env_prio0")
# After series6 (launch_state_series6_728947f.json: neither flag nor the variable changed anything): the capture side or
# the replay side of torch? torch's captures launched by cuGraphLaunch on their raw exec (no replay prologue: the RNG
# states' two fill_ per replay), and the driver series with two int64 fill_ before every launch, as that prologue.
SERIES7 = ("torch_capture_raw_launch", "raw_fill_prologue")
# After series7 (launch_state_series7_b1e341b.json: torch's capture side): what the slow state costs the launches the
# decode step makes: a series of torch captures of 64 empty kernels launched with programmatic serialization (a PDL
# chain, as the runner's PDL engine launches), and of 64 read_floor launches that each read 1 MB (grid 132), timed
# through the 8th capture; and the read_floor launches with programmatic serialization (no griddepcontrol in the kernel:
# each grid's implicit trigger is its end, so only the edge's kind differs from read_series).
SERIES8 = ("pdl_series", "read_series", "read_pdl_series")
# After series8 (launch_state_series8_a7efbca.json: programmatic edges never pay it, plain ones 0.2-0.33 us): a kernel
# whose PDL build waits (griddepcontrol.wait) before it reads x: fp8_gemv_n4096_k2048 at M = 1 by bench_case, three
# cases in a row (each ~4 captures: plain, PDL chain, empty, read floor), so the first is fast and the third slow.
SERIES9 = ("case_pdl",)
# After series9: torch's capture_begin runs the default generator's capture_prologue (seed and offset fill_, eager, on
# the capture stream, before cudaStreamBeginCapture), then captures on that stream, and the graph replays on the current
# (legacy default) stream. The driver series with that: two int64 fill_ on its capture stream before each capture, the
# launches on the default stream (raw_mimic); and the same fills with the launches on the capture stream.
SERIES10 = ("raw_mimic", "raw_capture_fill")
# the command-line flag of each group of variants (each variant a fresh process) and the JSON it writes
GROUPS = {"--series": SERIES, "--series2": SERIES2, "--series3": SERIES3, "--series4": SERIES4, "--series5": SERIES5,
          "--series6": SERIES6, "--series7": SERIES7, "--series8": SERIES8, "--series9": SERIES9, "--series10": SERIES10}
ENV = {"series_conn1": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "series_conn4": {"CUDA_DEVICE_MAX_CONNECTIONS": "4"},
       "series_conn32": {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, "torch_env_prio0": {"CUDA_GRAPHS_USE_NODE_PRIORITY": "0"}}


def run_variant(name: str) -> dict:
    import torch

    from netra import contracts
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    empty = rt_launch.raw_launcher(loader.load("empty_kernel", 0))
    reader = rt_launch.raw_launcher(loader.load("read_floor", 0))

    def E(grid: int, copies: int = 64, replays: int = 15, g=None, keep_to=None) -> float:
        if g is None:
            g = bench.capture(lambda i: empty((grid, 1, 1), (256, 1, 1)), copies)
        if keep_to is not None:
            keep_to.append(g)
        return round(statistics.median(bench.replay_us(g.replay, copies, replays)), 4)

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
            bench.capture(lambda i: pe((1, 1, 1), (256, 1, 1)), 64)  # captured, replayed once, dropped
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

    if any(name in group for group in GROUPS.values()):
        return run_series(name, E, empty, keep)

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


def run_series(name: str, E, empty, keep: list) -> dict:
    import torch

    from netra.lifecycle import bench
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    def empties(pool=None) -> torch.cuda.CUDAGraph:
        """64 empty launches (grid 132) captured by torch, after one warm launch; not replayed."""
        g = torch.cuda.CUDAGraph()
        empty((132, 1, 1), (256, 1, 1))
        torch.cuda.synchronize()
        with torch.cuda.graph(g, pool=pool):
            for _ in range(64):
                empty((132, 1, 1), (256, 1, 1))
        return g

    def median_us(launch, stream=None, before=None) -> float:
        return round(statistics.median(bench.replay_us(launch, 64, 15, stream, before)), 4)

    r = {"variant": name}
    if name in ("series_destroy", "series_keep", "torch_env_prio0") or name.startswith("series_conn"):
        r["E132"] = [E(132, keep_to=keep if name == "series_keep" else None)
                     for _ in range(48 if name in ("series_destroy", "series_keep") else 24)]
    elif name == "series_raw" or name.startswith("raw_"):
        import gc

        from cuda.bindings import driver as cu

        _, st = cu.cuStreamCreate(1)  # non-blocking
        ext = torch.cuda.ExternalStream(int(st))
        run_ext = torch.cuda.current_stream() if name in ("raw_default_stream", "raw_mimic") else ext
        run_st = run_ext.cuda_stream
        mode = (cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL if name == "raw_global"
                else cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        # CU_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH = 1, _USE_NODE_PRIORITY = 8
        flags = {"raw_autofree": 1, "raw_prio": 8, "raw_autofree_prio": 9}.get(name, 0)
        empty((132, 1, 1), (256, 1, 1))
        torch.cuda.synchronize()
        ts_all = []
        one = torch.zeros(1, device="cuda")
        seed, offset = torch.zeros(1, dtype=torch.int64, device="cuda"), torch.zeros(1, dtype=torch.int64, device="cuda")

        def prologue():  # torch's replay prologue: the generator's two fill_ before the launch, on its stream
            with torch.cuda.stream(run_ext):
                seed.fill_(1)
                offset.fill_(2)
        for _ in range(24):
            for _ in range(100 if name in SERIES5 else 0):
                if name == "raw_eager_driver":
                    empty((1, 1, 1), (256, 1, 1))
                else:
                    one.add_(1)
            if name in SERIES10:  # the generator's capture_prologue: eager fills on the capture stream
                with torch.cuda.stream(ext):
                    seed.fill_(1)
                    offset.fill_(0)
            if name == "raw_empty_cache":
                torch.cuda.synchronize()
                gc.collect()
                torch.cuda.empty_cache()
            with torch.cuda.stream(ext):
                cu.cuStreamBeginCapture(st, mode)
                for _ in range(64):
                    empty((132, 1, 1), (256, 1, 1))
                _, graph = cu.cuStreamEndCapture(st)
            _, gexec = cu.cuGraphInstantiate(graph, flags)
            cu.cuGraphLaunch(gexec, run_st)
            torch.cuda.synchronize()
            ts_all.append(median_us(lambda: cu.cuGraphLaunch(gexec, run_st), run_ext,
                                    prologue if name == "raw_fill_prologue" else None))
            cu.cuGraphExecDestroy(gexec)
            cu.cuGraphDestroy(graph)
        r["E132_raw"] = ts_all
        r["E132_torch_after"] = [E(132) for _ in range(2)]
    elif name == "case_pdl":
        from netra import contracts
        from netra.lifecycle import testbeds

        kname = "fp8_gemv_n4096_k2048"
        c = contracts.get(kname)
        h = loader.load(kname, 0).handle
        go = rt_launch.make_guard_and_launch(c, function_handle=h, device=0)
        go_pdl = rt_launch.make_guard_and_launch(c, function_handle=h, device=0, launch=rt_launch.pdl_launcher())
        floors = (empty, rt_launch.raw_launcher(loader.load("read_floor", 0)))
        rows = []
        for _ in range(3):
            cr = bench.bench_case(testbeds.get(kname), {"M": 1}, go, floors, peers=False, log=lambda *a: None,
                                  go_pdl=go_pdl)
            rows.append({"kernel_us": round(cr["median_us"], 4), "pdl_chain_us": round(cr["pdl_chain_us"], 4),
                         "empty_us": round(cr["peers"]["empty_kernel"], 4), "read_floor_us": round(cr["peers"]["read_floor"], 4)})
        r["cases"] = rows
    elif name in ("pdl_series", "read_series", "read_pdl_series"):
        if name == "pdl_series":
            pe = rt_launch.raw_launcher(loader.load("empty_kernel", 0), pdl=True)
            launch = lambda i: pe((132, 1, 1), (256, 1, 1))  # noqa: E731
        else:
            reader = rt_launch.raw_launcher(loader.load("read_floor", 0), pdl=name == "read_pdl_series")
            per = (1 << 20) // 132 // 16 * 16
            src = torch.randint(0, 256, (64 * 132 * per,), dtype=torch.uint8, device="cuda")
            sink = torch.zeros(4, dtype=torch.uint8, device="cuda")
            launch = lambda i: reader((132, 1, 1), (256, 1, 1), src.data_ptr() + i * 132 * per, sink.data_ptr(), per)  # noqa: E731
        r["us"] = [round(bench.graph_time(launch, 64, 15)[0], 4) for _ in range(12)]
    elif name == "torch_capture_raw_launch":
        from cuda.bindings import driver as cu

        res = []
        for _ in range(24):
            g = empties()
            gexec = cu.CUgraphExec(g.raw_cuda_graph_exec())
            cur = torch.cuda.current_stream()
            cu.cuGraphLaunch(gexec, cur.cuda_stream)
            torch.cuda.synchronize()
            res.append(median_us(lambda: cu.cuGraphLaunch(gexec, cur.cuda_stream)))
            del g
        r["E132_torch_capture_raw_launch"] = res
        r["E132_torch_after"] = [E(132) for _ in range(2)]
    elif name == "torch_side_stream":
        side = torch.cuda.Stream()
        res = []
        for _ in range(24):
            g = empties()
            with torch.cuda.stream(side):
                g.replay()
                torch.cuda.synchronize()
                res.append(E(132, g=g))
        r["E132_side"] = res
        r["E132_default_after"] = [E(132) for _ in range(2)]
    elif name == "series_pool":
        pool = torch.cuda.graph_pool_handle()
        res = []
        for _ in range(24):
            g = empties(pool)
            g.replay()
            torch.cuda.synchronize()
            res.append(E(132, g=g))
        r["E132"] = res
    elif name == "series_r3":
        r["E132"] = [E(132, replays=3) for _ in range(48)]
    elif name == "eager_series":
        for _ in range(400):
            empty((1, 1, 1), (256, 1, 1))
        torch.cuda.synchronize()
        r["E132"] = [E(132) for _ in range(12)]
    elif name == "replay_first":
        first: list = []
        r["first_new"] = E(132, keep_to=first)
        r["series"] = [E(132) for _ in range(16)]
        r["first_again"] = E(132, g=first[0])
        r["new_after"] = E(132)
    elif name == "pdl_first_series":
        pe = rt_launch.raw_launcher(loader.load("empty_kernel", 0), pdl=True)
        g = bench.capture(lambda i: pe((1, 1, 1), (256, 1, 1)), 64)
        r["pdl_graph_us"] = E(1, g=g)
        del g
        r["E132"] = [E(132) for _ in range(32)]
    elif name == "decode_b1":  # the decode runner, batch 1, synthetic checkpoint (as step_ab): E and the step, per capture
        from netra.decode import main as dm
        from netra.decode import runner as rmod
        from netra.model import checkpoint as ck
        from netra.model.config import QWEN36_35B_A3B
        from netra.model.packed import pack

        r["E132_fresh"] = E(132)
        packed = pack(ck.synthetic_checkpoint(QWEN36_35B_A3B, seed=0, device="cuda"))
        r["E132_after_pack"] = E(132)
        runner = rmod.DecodeRunner(packed, 1, 1024, device="cuda")
        rows = []
        for pdl in (True, False, True, False):
            runner.capture(pdl=pdl)
            rows.append({"pdl": pdl, "E132_before": E(132), "step_ms": round(dm._time_replays(runner, 64), 4),
                         "E132_after": E(132), "E1_after": E(1)})
        r["captures"] = rows
    return r


def main() -> None:
    if "--variant" in sys.argv:
        print(json.dumps(run_variant(sys.argv[sys.argv.index("--variant") + 1])), flush=True)
        return
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(os.path.abspath(__file__))
    rows = []
    flag = next((a for a in sys.argv if a in GROUPS), None)  # none: VARIANTS, twice
    for rep in range(1 if flag else 2):
        for v in GROUPS[flag] if flag else VARIANTS:
            p = subprocess.run([sys.executable, __file__, "--variant", v], capture_output=True, text=True, timeout=300,
                               env={**os.environ, **ENV.get(v, {})})
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            row = json.loads(line[-1]) if line else {"variant": v, "error": (p.stderr or p.stdout)[-1500:]}
            row["rep"] = rep
            rows.append(row)
            print(json.dumps(row), flush=True)
    res = {"method": __doc__.split("\n\n")[1].replace("\n", " "), "rows": rows}
    os.makedirs(out_dir, exist_ok=True)
    out = f"launch_state_{flag[2:]}.json" if flag else "launch_state.json"
    with open(os.path.join(out_dir, out), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
