"""Is the bench's "slow state" the driver scrubbing memory that the previous case freed?

The NVIDIA driver clears device memory that a process frees (its scrubber runs on a copy engine, after the
free returns: open-gpu-kernel-modules, src/nvidia/src/kernel/gpu/mem_mgr/mem_scrub.c). `bench_case` frees every
copy and the read floor's buffer with `torch.cuda.empty_cache()` at its end, so the next case's timings may run
while HBM is being cleared behind them. Three effects recorded so far would follow from that:
- the LM head plainly at ~270 us from the second `bench_case` of a process, 235 in the first
  (experiments/proj/lm_head/README.md), while its PDL chain, timed later in the same case, is 234;
- the floors of the first case of a process 0.2-0.4 us lower than later (docs/notes/norm.md);
- the expert gate | up at M = 16 at 70.5 us in the bench against 62.5 in the model (docs/notes/bars.md).

Three parts, one process:
1. ``lmhead``: bench_case of bf16_gemv_n248320_k2048_argmax at M = 1, as netra bench would (first, then right after a
   case), after a sleep, and with the previous case's memory kept in PyTorch's cache (no free, so nothing to scrub).
2. ``course``: a fixed read graph (16 copies x 64 MB, allocated before) replayed back to back for 3 s after freeing
   F GB with empty_cache (F = 0, 1, 4, 16, 32): us per launch in 10 ms bins against the time since the free.
3. ``bars``: issue 4's bar shapes and the expert gate | up at M = 16 by bench_case (peers on), each right after the
   previous case (netra bench's state) and again after a sleep.

  python3 experiments/runtime/scrub_state.py [--parts=lmhead+course+bars] [--sleep=5] --out "$OUT"
  (on the H200, PYTHONPATH=src)
"""

import contextlib
import json
import os
import statistics
import sys
import time

import torch

from netra import contracts
from netra.lifecycle import bench, testbeds
from netra.runtime import launch as rt_launch
from netra.runtime import loader

GB = 1 << 30


@contextlib.contextmanager
def no_empty_cache():
    """bench_case's final empty_cache() as a no-op: its memory stays in PyTorch's cache for the next case."""
    real = torch.cuda.empty_cache
    torch.cuda.empty_cache = lambda: None
    try:
        yield
    finally:
        torch.cuda.empty_cache = real


class Cases:
    def __init__(self):
        self.empty = rt_launch.raw_launcher(loader.load("empty_kernel", 0))
        self.reader = rt_launch.raw_launcher(loader.load("read_floor", 0))
        self.last_free = time.perf_counter()

    def run(self, name: str, dims: dict, peers: bool) -> dict:
        c = contracts.get(name)
        k = loader.load(name, 0)
        go = rt_launch.make_guard_and_launch(c, function_handle=k.handle, device=0)
        go_pdl = (rt_launch.make_guard_and_launch(c, function_handle=k.handle, device=0, launch=rt_launch.pdl_launcher())
                  if c.pdl else None)
        since = time.perf_counter() - self.last_free
        case = bench.bench_case(testbeds.get(name), dims, go, (self.empty, self.reader), peers=peers, log=print,
                                go_pdl=go_pdl)
        self.last_free = time.perf_counter()
        row = {k2: case.get(k2) for k2 in ("median_us", "pdl_chain_us", "replay_samples_us", "copies", "bytes")}
        row["peers"] = case["peers"]
        row["s_since_previous_free"] = round(since, 3)
        return row


def settle(s: float) -> None:
    torch.cuda.synchronize()
    time.sleep(s)


def part_lmhead(cs: Cases, sleep_s: float) -> dict:
    name, dims, out = "bf16_gemv_n248320_k2048_argmax", {"M": 1}, {}
    out["1_first_in_process"] = cs.run(name, dims, False)
    out["2_right_after_a_case"] = cs.run(name, dims, False)
    settle(sleep_s)
    out[f"3_after_{sleep_s:g}s_sleep"] = cs.run(name, dims, False)
    out["4_right_after_a_case"] = cs.run(name, dims, False)
    with no_empty_cache():  # 5 keeps its memory cached; 6 reuses those segments: no free before 6
        out["5_right_after_a_case_then_kept"] = cs.run(name, dims, False)
        out["6_reusing_the_kept_segments"] = cs.run(name, dims, False)
    torch.cuda.empty_cache()
    cs.last_free = time.perf_counter()
    out["7_right_after_freeing_those"] = cs.run(name, dims, False)
    return out


def part_course(sizes_gb=(0, 1, 4, 16, 32), seconds: float = 3.0) -> dict:
    """Reader graph timings against the time since a free of F GB (F = 0: the same with nothing freed)."""
    reader = rt_launch.raw_launcher(loader.load("read_floor", 0))
    copies, per_copy, grid, block = 16, 64 << 20, 132, 512
    per_cta = per_copy // grid // 16 * 16
    src = torch.randint(0, 256, (copies * per_cta * grid,), dtype=torch.uint8, device="cuda")
    sink = torch.zeros(4, dtype=torch.uint8, device="cuda")
    p0, stride = src.data_ptr(), per_cta * grid
    g = bench.capture(lambda i: reader((grid, 1, 1), (block, 1, 1), p0 + i * stride, sink.data_ptr(), per_cta), copies)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    res = {"graph": f"read_floor, {copies} launches x {per_cta * grid / 1e6:.1f} MB, grid {grid} x {block}",
           "bin_ms": 10}
    for f in sizes_gb:
        settle(4.0)
        t_alloc = time.perf_counter()
        blob = torch.empty(max(f * GB, 1), dtype=torch.uint8, device="cuda") if f else None
        torch.cuda.synchronize()
        alloc_s = time.perf_counter() - t_alloc
        del blob
        t0 = time.perf_counter()
        torch.cuda.empty_cache()
        free_s = time.perf_counter() - t0
        samples = []
        while (now := time.perf_counter()) - t0 < seconds:
            e0.record()
            g.replay()
            e1.record()
            e1.synchronize()
            samples.append((now - t0, e0.elapsed_time(e1) * 1e3 / copies))
        bins: dict[int, list[float]] = {}
        for t, us in samples:
            bins.setdefault(int(t * 100), []).append(us)
        series = [[b * 10, round(statistics.median(v), 3)] for b, v in sorted(bins.items())]
        quiet = statistics.median([us for t, us in samples if t > seconds - 0.5])
        slow_until = max((t for t, us in samples if us > 1.03 * quiet), default=0.0)
        res[f"{f}GB"] = {"alloc_s": round(alloc_s, 4), "empty_cache_s": round(free_s, 4), "replays": len(samples),
                         "quiet_us": round(quiet, 3), "first_100ms_median_us": round(statistics.median(
                             [us for t, us in samples if t < 0.1]), 3),
                         "last_replay_over_1.03x_quiet_s": round(slow_until, 3), "series_ms_us": series}
        print("course", f, "GB:", json.dumps({k: v for k, v in res[f"{f}GB"].items() if k != "series_ms_us"}), flush=True)
    return res


def part_bars(cs: Cases, sleep_s: float) -> dict:
    out = {}
    names = ["fp8_gemv_n12288_k2048", "fp8_gemv_n9216_k2048", "fp8_gemv_n8192_k2048", "fp8_gemv_n4096_k2048",
             "fp8_gemv_n2048_k4096"]
    plan = [(n, {"M": m}) for n in names for m in (1, 16)] + [("fp8_gemv_n1024_k2048_moe_grp", {"M": 16, "E": 256})]
    cs.run(*plan[0], peers=False)  # a case before the first, as netra bench discards one
    for name, dims in plan:
        key = f"{name} M={dims['M']}"
        out[key] = {"right_after_a_case": cs.run(name, dims, True)}
        settle(sleep_s)
        out[key][f"after_{sleep_s:g}s_sleep"] = cs.run(name, dims, True)
        a, b = out[key]["right_after_a_case"], out[key][f"after_{sleep_s:g}s_sleep"]
        print("bars", key, round(a["median_us"], 2), "->", round(b["median_us"], 2), "floor",
              round(a["peers"]["read_floor"], 2), "->", round(b["peers"]["read_floor"], 2), flush=True)
    return out


def main() -> None:
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(os.path.abspath(__file__))
    parts = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--parts=")), "lmhead+course+bars").split("+")
    sleep_s = float(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--sleep=")), "5"))
    cs = Cases()
    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; course: one read graph replayed back to back, CUDA events "
           "per replay, medians over 10 ms bins of the time since the free", "sleep_s": sleep_s}
    for p in parts:
        t0 = time.perf_counter()
        res[p] = {"lmhead": lambda: part_lmhead(cs, sleep_s), "course": part_course,
                  "bars": lambda: part_bars(cs, sleep_s)}[p]()
        print(f"part {p} took {time.perf_counter() - t0:.1f} s", flush=True)
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "scrub_state.json"), "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
