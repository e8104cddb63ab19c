"""`netra bench`: time each kernel at every contract shape by CUDA-graph replay, next to its
peers and two floors measured the same way in the same run.

Method: one CUDA graph holds C launches, launch i working on copy i of every input and
output; C is chosen so the copies exceed 4x the 60 MiB L2, so every launch reads cold
memory, as each weight and activation is in real decode. The graph is replayed R times,
each timed with CUDA events; the number is the median replay time / C.

Floors, launched with the kernel's grid and block: `empty_kernel` (the launch floor) and
`read_floor` (a PTX kernel that only reads the kernel's read bytes, cold)."""

from __future__ import annotations

import math
import statistics
import time

import torch

from .. import contracts, ops
from ..runtime import launch as rt_launch
from ..runtime import loader
from . import check, records, testbeds

L2_BYTES = 60 * 1024 * 1024
ROTATE_BYTES = 4 * L2_BYTES
# At least this many copies, however large a launch: over 2 copies (every launch above 120 MB before) the
# time moved up to 15% with where the copies landed in memory (expert gate | up at M = 16: 67-77 us over 2
# copies in one process, 63.2 over 40; GDN decode at B = 32: 41.5-44.7 over 2, 41.6-42.0 over 8-40;
# experiments/proj/experts_bench_alloc*.json)
MIN_COPIES = 16
READ_ROOFLINE = 4.33e12  # bytes/s, measured HBM read bandwidth of the H200 (design/h200.md)
REPLAYS = 7
PEER_REPLAYS = 4  # peers are 10x slower per launch; fewer replays keep the run inside a device call
# The driver clears the device memory a process frees (its scrubber, on a copy engine, after cudaFree has returned),
# at ~400 GB/s, and reads running meanwhile lose ~13% of their bandwidth: a 64 MB read graph took 20.3 us per launch
# for 80 ms after freeing 32 GB, 17.8 after (experiments/runtime/scrub_state_5d017df.json). bench_case frees its copies
# and the read floor's buffer at its end; timed at once, the next case's first graph ran inside that window (the LM
# head plainly at 270 us right after a case, 237 after a sleep or on reused segments). So each case waits, before its
# first timing, until what was freed before it is cleared: freed bytes / SCRUB_BYTES_PER_S after the free.
SCRUB_BYTES_PER_S = 300e9  # measured ~400 GB/s (16 GB in ~40 ms, 32 GB in ~80 ms); 300 leaves a margin
_scrub_done_at = 0.0  # time.perf_counter() by which the memory released so far is cleared
METHOD = ("CUDA-graph replay, CUDA events; each replay = C launches over C copies of inputs "
          f"and outputs (> 4x the 60 MiB L2 and at least {MIN_COPIES}, every launch cold); median of {{R}} replays / C "
          "(peers other than the floors: median of 4 replays); each case timed after the driver has cleared the memory "
          "freed before it (freed bytes / 300 GB/s)")


def release() -> int:
    """torch.cuda.empty_cache(), noting when the driver will have cleared what it gave back; returns those bytes."""
    global _scrub_done_at
    before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    freed = max(0, before - torch.cuda.memory_reserved())
    if freed:
        _scrub_done_at = max(_scrub_done_at, time.perf_counter()) + freed / SCRUB_BYTES_PER_S
    return freed


def settle() -> float:
    """Wait until the memory released so far is cleared (see SCRUB_BYTES_PER_S); returns the seconds waited."""
    torch.cuda.synchronize()
    wait = _scrub_done_at - time.perf_counter()
    if wait > 0:
        time.sleep(wait)
    return max(0.0, wait)


def copies_for(nbytes: int) -> int:
    """How many copies of a launch's inputs and outputs the graph rotates through: enough to pass 4x
    the L2, and at least MIN_COPIES."""
    return max(MIN_COPIES, math.ceil(ROTATE_BYTES / nbytes))


def replicate(tensors: dict) -> dict:
    """Fresh copies of a set of tensors, preserving views: tensors that share a storage
    (q and k viewing one fused projection output) share the copy."""
    out, storages = {}, {}
    for k, t in tensors.items():
        st = t.untyped_storage()
        key = st.data_ptr()
        if key not in storages:
            raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(st)
            storages[key] = raw.clone().untyped_storage()
        out[k] = torch.empty(0, dtype=t.dtype, device=t.device).set_(storages[key], t.storage_offset(), t.shape, t.stride())
    return out


def capture(launch_i, copies: int, before=None) -> torch.cuda.CUDAGraph:
    """launch_i(0..copies-1) captured in one graph (after one warm call outside capture: compiles, module loads),
    replayed once; ``before``: called ahead of the warm call and of that replay."""
    if before is not None:
        before()
    launch_i(0)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(copies):
            launch_i(i)
    if before is not None:
        before()
    g.replay()
    torch.cuda.synchronize()
    return g


def replay_us(replay, copies: int, replays: int, stream=None, before=None) -> list[float]:
    """Microseconds per launch of each of ``replays`` calls of replay() (a graph of ``copies`` launches), CUDA events
    on ``stream`` (None: the current one); ``before``: called ahead of each, outside the timed window."""
    times = []
    for _ in range(replays):
        if before is not None:
            before()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(stream)
        replay()
        e1.record(stream)
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / copies)
    return times


def graph_time(launch_i, copies: int, replays: int = REPLAYS, before=None) -> tuple[float, list[float]]:
    """Median microseconds per launch of launch_i(0..copies-1) captured in one graph; ``before``: called ahead of
    each replay, outside the timed window."""
    g = capture(launch_i, copies, before)
    times = replay_us(g.replay, copies, replays, before=before)
    del g
    return statistics.median(times), times


def bench_case(tb: testbeds.Testbed, dims: dict, go, floors, peers: bool = True, log=print, go_pdl=None) -> dict:
    c = tb.contract
    nread, nwrite = c.nbytes(dims)
    copies = copies_for(nread + nwrite)
    base = check.Bench(tb, dims, 5)
    base.reset()
    ins, outs = [], []
    for _ in range(copies):
        ins.append(replicate(base.inputs))
        outs.append(tb.alloc_outputs(dims, "cuda"))
    bufs = [{**a, **b} for a, b in zip(ins, outs)]
    args = [tb.args(b) for b in bufs]
    restore = None
    if c.consumes:  # every launch finds its consumed inputs written, as after its producer (Contract.consumes)

        def restore():
            for b in ins:
                for n in c.consumes:
                    b[n].copy_(base.pristine[n])

    def netra(i):
        reason = go(*args[i])
        if reason is not None:
            raise AssertionError(f"{c.name}: guard refused {dims}: {reason}")

    waited = settle()
    t_netra, samples = graph_time(netra, copies, before=restore)
    grid, block = c.grid_for(dims), (c.threads, 1, 1)
    empty, reader = floors
    t_empty, _ = graph_time(lambda i: empty(grid, block), copies)
    ctas = grid[0] * grid[1] * grid[2]
    per_cta = -(-nread // ctas // 16) * 16
    src = torch.randint(0, 256, (copies * per_cta * ctas,), dtype=torch.uint8, device="cuda")
    sink = torch.zeros(4, dtype=torch.uint8, device="cuda")
    p0, stride = src.data_ptr(), per_cta * ctas
    t_read, _ = graph_time(lambda i: reader(grid, block, p0 + i * stride, sink.data_ptr(), per_cta), copies)
    peer_times = {"empty_kernel": t_empty, "read_floor": t_read}
    if peers:
        for pname, fn in tb.peers.items():
            scal = tb.scalars
            try:
                peer_times[pname], _ = graph_time(lambda i: fn(ins[i], scal), copies, PEER_REPLAYS, before=restore)
            except Exception as e:  # a peer that cannot run is recorded, not fatal
                peer_times[pname] = None
                log(f"    peer {pname} failed at {dims}: {type(e).__name__}: {str(e)[:200]}")
    t_pdl = None
    if go_pdl is not None:  # the same kernel, every launch with programmatic serialization: a chain. Timed last: plain
        # graphs timed right after a PDL chain ran 0.2-0.3 us faster per launch than before it (empty kernel and read
        # floor of the norm kernels at 0fa84b9, grid M x 256), so the floors would not be timed as the kernel was
        t_pdl, _ = graph_time(lambda i: go_pdl(*args[i]), copies, before=restore)
    del ins, outs, bufs, args, src
    release()
    real_peers = {k: v for k, v in peer_times.items() if k not in ("empty_kernel", "read_floor") and v}
    case = {
        "shape": dict(dims),
        "method": METHOD.format(R=REPLAYS) + (f"; {', '.join(c.consumes)} (consumed: left TAG) restored in every copy "
                                              "before each replay, outside the timed window" if c.consumes else ""),
        "median_us": t_netra,
        "replay_samples_us": samples,
        "bytes": nread + nwrite,
        "bytes_read": nread,
        "bytes_written": nwrite,
        "roofline_fraction": (nread + nwrite) / READ_ROOFLINE / (t_netra * 1e-6),
        "copies": copies,
        "scrub_wait_s": round(waited, 4),
        "peers": peer_times,
        "read_floor_ratio": t_netra / t_read,
        "fastest_peer": min(real_peers, key=real_peers.get) if real_peers else None,
        "speedup_vs_fastest_peer": (min(real_peers.values()) / t_netra) if real_peers else None,
    }
    if t_pdl is not None:
        case["pdl_chain_us"] = t_pdl
        case["pdl_chain_roofline_fraction"] = (nread + nwrite) / READ_ROOFLINE / (t_pdl * 1e-6)
    log(f"  {c.name} {dims}: {t_netra:.2f} us ({case['read_floor_ratio']:.2f}x read floor {t_read:.2f}, "
        f"empty {t_empty:.2f}{'' if t_pdl is None else f'; as a PDL chain {t_pdl:.2f}'}); "
        + ", ".join(f"{k} {v:.2f}" for k, v in real_peers.items()))
    return case


def _public_call(name: str, b: dict):
    e = testbeds.EPS
    if name == "rmsnorm_h2048":
        return lambda: ops.rmsnorm(b["x"], b["w"], e, out=b["y"])
    if name == "add_rmsnorm_h2048":
        return lambda: ops.add_rmsnorm(b["x"], b["residual"], b["w"], e, out=b["y"])
    if name == "qk_rmsnorm_d256":
        return lambda: ops.qk_rmsnorm(b["q"], b["k"], b["q_weight"], b["k_weight"], e, out_q=b["out_q"], out_k=b["out_k"])
    if name == "gated_rmsnorm_d128":
        return lambda: ops.gated_rmsnorm(b["o"], b["z"], b["w"], e, out=b["y"])
    if contracts.get(name).op == "gdn_decode_spin":
        from ..decode import ops as dops

        return lambda: dops.gdn_decode_spin(*testbeds._gdn_args(b), 16, e, b["out"])
    if (op_name := contracts.get(name).op) in ("gdn_decode", "gdn_verify"):  # every build of the op (_pdl, _smem, ...)
        from ..decode import ops as dops

        op = dops.gdn_verify if op_name == "gdn_verify" else dops.gdn_decode
        return lambda: op(*testbeds._gdn_args(b), 16, e, b["out"])
    if name.startswith("gdn_verify_chunk"):
        from ..decode import ops as dops

        return lambda: dops.gdn_verify_chunk(*testbeds._chunk_args(b), 16, e, b["out"], b["ksave"], b["dsave"], b["gsave"])
    if name == "gdn_commit_t16":
        from ..decode import ops as dops

        return lambda: dops.gdn_commit(*testbeds._commit_args(b))
    if name == "moe_router_e256_k2048":
        from ..decode import ops as dops

        return lambda: dops.moe_router(b["x"], b["w"], b["top"], b["idx"])
    if name == "moe_router_norm_e256_k2048":
        from ..decode import ops as dops

        return lambda: dops.moe_router_norm(b["h"], b["norm_w"], e, b["w"], b["x_out"], b["top"], b["idx"])
    if name == "moe_router_norm_regs_e256_k2048":  # the build itself (the op takes it up to ROUTER_REGS_ROWS rows)
        from ..ops import proj as kproj

        return lambda: kproj.ROUTER_NORM_REGS(b["h"], b["w"], b["top"], b["idx"], b["norm_w"], b["x_out"], e)
    if name == "moe_router_norm_split_e256_k2048":  # the build itself (the op takes it from ROUTER_SPLIT_ROWS rows)
        from ..ops import proj as kproj

        return lambda: kproj.ROUTER_NORM_SPLIT(b["h"], b["w"], b["top"], b["idx"], b["norm_w"], b["x_out"], e,
                                               b["logits"], b["cnt"])
    if contracts.get(name).op == "lm_head_argmax":
        from ..decode import ops as dops

        return lambda: dops.lm_head_argmax(b["x"], b["w"], b["logits"], b["tokens"], b["ws"])
    if name == "bf16_gemv_n64_k2048":
        from ..decode import ops as dops

        return lambda: dops.bf16_linear2(b["x"], b["w_b"], b["w_a"], b["out_b"], b["out_a"])
    if name == "moe_act_i512":  # moe_down's first launch from 5 rows (the op's own call is the down kernel's)
        from ..ops import proj

        return lambda: proj.MOE_ACT_KERNEL(b["x"], b["top"], b["xs"], b["glogit"], b["xa"], b["xm"])
    if name == "attn_decode_d256":
        from ..decode import ops as dops

        return lambda: dops.attention_decode_paged(b["q"], b["k"], b["v"], b["gate"], b["cos"], b["sin"], b["positions"],
                                                   b["block_table"], b["k_pages"], b["v_pages"], b["out"], b["ws"],
                                                   b["counters"])
    if name.endswith("_long") and name.startswith("attn_decode_d256_qknorm"):  # the build itself: S is ws's
        from ..ops import _dispatch

        k = _dispatch.OPS[name]  # each long build is registered under its own name
        return lambda: k.go(b["q"], b["k"], b["v"], b["gate"], b["q_norm"], b["k_norm"], b["cos"], b["sin"],
                            b["positions"], b["block_table"], b["k_pages"], b["v_pages"], b["out"], b["ws"],
                            b["counters"], e)
    if name.startswith("attn_decode_d256_qknorm"):  # and its cluster builds: the op picks the build by the batch
        from ..decode import ops as dops

        return lambda: dops.attention_decode_paged_qknorm(b["q"], b["k"], b["v"], b["gate"], b["q_norm"], b["k_norm"],
                                                          b["cos"], b["sin"], b["positions"], b["block_table"],
                                                          b["k_pages"], b["v_pages"], b["out"], b["ws"], b["counters"], e)
    if name.startswith("fp8_gemv_"):  # by the contract's op, not the name's suffix (_gate_ks2, _moedown_s6)
        from ..decode import ops as dops

        op = contracts.get(name).op
        if op == "fp8_linear_norm":
            return lambda: dops.fp8_linear_norm(b["h"], b["norm_w"], e, b["w"], b["scale"], b["out"], b["x_out"])
        if op == "fp8_linear_norm_ba":
            return lambda: dops.fp8_linear_norm_ba(b["h"], b["norm_w"], e, b["w"], b["scale"], b["out"], b["x_out"],
                                                   b["w_b"], b["w_a"], b["out_b"], b["out_a"])
        if op == "fp8_linear_ba":  # the build itself at every M (the decode op picks the build by the rows)
            from ..ops import proj as kproj

            t = contracts.get(name).dims["M"][-1]  # the build's tokens
            return lambda: kproj.fp8_linear_ba(b["x"], b["w"], b["scale"], b["out"], b["w_b"], b["w_a"], b["out_b"],
                                               b["out_a"], t)
        if op == "fp8_linear_gate":
            return lambda: dops.fp8_linear_gate(b["x"], b["w"], b["scale"], b["gate_w"], b["out"], b["gate_out"])
        if op == "fp8_linear_add":
            return lambda: dops.fp8_linear_add(b["x"], b["w"], b["scale"], b["h"], b["out"])
        if op == "moe_down":  # the public op picks the build by M
            return lambda: dops.moe_down(b["x"], b["w"], b["scale"], b["ids"], b["top"], b["xs"], b["ws"], b["ss"],
                                         b["glogit"], b["h"], b["out"])
        if op == "fp8_linear_experts_router":
            return lambda: dops.fp8_linear_experts_router(b["h"], b["norm_w"], e, b["rw"], b["w"], b["scale"], b["ws"],
                                                          b["ss"], b["gate_w"], b["bar"], b["x_out"], b["top"], b["idx"],
                                                          b["logits"], b["out"], b["sout"], b["gate_out"])
        if op == "fp8_linear_experts_router_down":
            return lambda: dops.fp8_linear_experts_router_down(
                b["h"], b["norm_w"], e, b["rw"], b["w"], b["scale"], b["ws"], b["ss"], b["gate_w"], b["w2"], b["s2"],
                b["sw2"], b["ss2"], b["bar"], b["x_out"], b["top"], b["idx"], b["logits"], b["out"], b["sout"],
                b["gate_out"], b["moe_out"])
        if op == "fp8_linear_experts_shared":
            return lambda: dops.fp8_linear_experts_shared(b["x"], b["w"], b["scale"], b["ids"], b["ws"], b["ss"],
                                                          b["gate_w"], b["out"], b["sout"], b["gate_out"])
        if op == "fp8_linear_experts":
            return lambda: dops.fp8_linear_experts(b["x"], b["w"], b["scale"], b["ids"], b["out"])
        assert op == "fp8_linear", (name, op)
        return lambda: dops.linear(b["x"], b["w"], b["scale"], b["out"])
    raise KeyError(name)


LONG_KERNEL_US = 20.0  # above this GPU time per call, host_dispatch times QUEUE_CALLS calls per batch
QUEUE_CALLS = 256  # launches that fit in the launch queue whatever the kernel's time


def host_dispatch(name: str, calls: int = 4000, batches: int = 5) -> dict:
    """Host time of one eager public-op call (guard + launch) against one small PyTorch op."""
    tb = testbeds.get(name)
    b = check.Bench(tb, tb.contract.cases()[0], 9)
    b.reset()
    call = _public_call(name, b.bufs)
    t = torch.ones(1, device="cuda")
    small = lambda: t.add_(1.0)  # noqa: E731
    # a kernel that runs longer than its launch takes on the host fills the launch queue, and the host then waits
    # for the GPU (the LM head at 4000 calls measured its own GPU time): such ops are timed over QUEUE_CALLS calls
    call()  # binds the kernel (host work the events below must not see)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(20):
        call()
    e1.record()
    e1.synchronize()
    gpu_us = e0.elapsed_time(e1) * 1e3 / 20
    if gpu_us > LONG_KERNEL_US:
        calls = min(calls, QUEUE_CALLS)

    def batch(fn):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        dt = (time.perf_counter() - t0) / calls * 1e6
        torch.cuda.synchronize()
        return dt

    for fn in (call, small):
        for _ in range(300):
            fn()
    torch.cuda.synchronize()
    ops.reset_stats()
    netra, torch_small = [], []
    for _ in range(batches):  # interleaved, so drift in the host's speed hits both alike
        netra.append(batch(call))
        torch_small.append(batch(small))
    misses = sum(sum(v["misses"].values()) for v in ops.stats().values())
    return {"netra_op_us": statistics.median(netra), "torch_small_op_us": statistics.median(torch_small),
            "misses_during_timing": misses, "gpu_us_per_call": gpu_us,
            "method": f"host wall time (time.perf_counter) per eager call, median of {batches} batches of {calls}, "
                      "the two ops' batches interleaved, after 300 warm-up calls each; small op = Tensor.add_ on 1 element"}


def _bars(cases: list[dict], hd: dict | None) -> dict:
    worst_floor = max(x["read_floor_ratio"] for x in cases)
    slowest_vs_peer = min((x["speedup_vs_fastest_peer"] for x in cases if x["speedup_vs_fastest_peer"]), default=None)
    bars = {
        "max_read_floor_ratio": worst_floor,
        "read_floor_bar": 1.3,
        "read_floor_pass": worst_floor <= 1.3,
        "min_speedup_vs_fastest_peer": slowest_vs_peer,
        "faster_than_every_peer_at_every_shape": bool(slowest_vs_peer and slowest_vs_peer > 1.0),
    }
    if hd:
        bars["host_dispatch_pass"] = hd["netra_op_us"] <= hd["torch_small_op_us"]
    return bars


def host_only(names: list[str] | None, log=print) -> None:
    """Re-measure host dispatch (a runtime change) and re-derive the bars from the recorded cases."""
    env = records.environment()
    for c in contracts.select(names):
        rec = records.load(c.name) or {}
        if not c.bench or not c.op or c.consumes or "cases" not in rec:
            continue
        hd = host_dispatch(c.name)
        records.update(c.name, "host_dispatch", hd, env)
        records.update(c.name, "bars", _bars(rec["cases"], hd), env)
        log(f"  {c.name}: host dispatch {hd['netra_op_us']:.2f} us vs torch small op {hd['torch_small_op_us']:.2f} us")


def run(names: list[str] | None, peers: bool = True, log=print, quick: bool = False) -> bool:
    env = records.environment()
    ok = True
    empty = rt_launch.raw_launcher(loader.load("empty_kernel", 0))
    reader = rt_launch.raw_launcher(loader.load("read_floor", 0))
    # A discarded first case: the first case timed in a fresh process came out with floors
    # 0.2-0.4 us lower than the same case timed later (docs/notes/norm.md), so every
    # recorded case is timed in the same, warmed-up state.
    first = next((c for c in contracts.select(names) if c.bench and testbeds.get(c.name)), None)
    if first is not None:
        k0 = loader.load(first.name, 0)
        go0 = rt_launch.make_guard_and_launch(first, function_handle=k0.handle, device=0)
        bench_case(testbeds.get(first.name), first.cases()[0], go0, (empty, reader), peers=False, log=lambda *_: None)
    for c in contracts.select(names):
        tb = testbeds.get(c.name)
        if not c.bench or tb is None:
            continue
        kernel = loader.load(c.name, 0)
        go = rt_launch.make_guard_and_launch(c, function_handle=kernel.handle, device=0)
        go_pdl = (rt_launch.make_guard_and_launch(c, function_handle=kernel.handle, device=0, launch=rt_launch.pdl_launcher())
                  if c.pdl else None)
        shapes = c.cases()
        if quick:  # the smallest and largest shape only; not a complete record
            shapes = [shapes[0], shapes[-1]]
        cases = [bench_case(tb, dims, go, (empty, reader), peers=peers, log=log, go_pdl=go_pdl) for dims in shapes]
        records.update(c.name, "cases", cases, env)
        # (not for a kernel that consumes its inputs: from the second call on, each launch would poll for a producer)
        hd = host_dispatch(c.name) if c.op and not c.consumes else None
        bars = _bars(cases, hd)
        worst_floor, slowest_vs_peer = bars["max_read_floor_ratio"], bars["min_speedup_vs_fastest_peer"]
        if hd:
            records.update(c.name, "host_dispatch", hd, env)
            log(f"  {c.name}: host dispatch {hd['netra_op_us']:.2f} us vs torch small op {hd['torch_small_op_us']:.2f} us")
        records.update(c.name, "bars", bars, env)
        log(f"  {c.name}: worst read-floor ratio {worst_floor:.2f} (bar 1.3); slowest speedup vs fastest peer "
            f"{slowest_vs_peer if slowest_vs_peer is None else round(slowest_vs_peer, 2)}")
        ok &= bars["read_floor_pass"] and bars["faster_than_every_peer_at_every_shape"]
    return ok
