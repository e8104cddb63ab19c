"""Where does bf16_gemv_n248320_k2048_argmax's plain launch lose ~34 us against the same kernel as a PDL chain
(v1 and v2 records: 270 against 230-237 us at M = 1)? A timeline from inside, and one candidate.

gen_lm_head.generate(trace=True): thread 0 of every CTA stamps %globaltimer at entry, at its first strip's data, after
its last strip and before ret, with its %smid and strip count (the outputs checked bitwise the promoted kernel's).
Launched the bench's way (one CUDA graph of C launches over C copies of every input and output past 4x the L2,
median of 7 replays; netra.lifecycle.bench), plainly and as a chain of PDL launches; from the last replay's stamps,
per launch: its span (first CTA entry to last CTA exit), the gap to the next launch's first entry, the spread of
CTA entries, the first data's latency, and the spread of the CTAs' loop ends and exits. Also timed: the promoted
kernel and the candidate ``no_hint`` (the weight copies without the L2 evict-first policy), plain and as a chain.

``--bench-cases``: also each build timed by netra bench's own bench_case (its allocation order: each copy's inputs,
then its outputs), plainly and as a chain. ``rotate``: the candidate whose row copies start at row strip % 16.

``--pre=FORM``: what the process does first (netra bench, which records the kernel, was 34 us slower plainly than this
script at 2197659 on the same kernel): ``bench`` one discarded bench_case at M = 1 (peers off), as netra bench does;
``alloc`` only its allocations (16 copies and the read floor's 16 GB), freed; ``reader`` only the read floor's graph
(its 16 GB); ``chain`` only a PDL-chain graph of this kernel; ``none`` (the default) nothing.

  python3 experiments/proj/lm_head/trace.py [--m=1+32] [--pre=none|bench|alloc|reader|chain] --out "$OUT"
  (on the H200, PYTHONPATH=src)
"""

import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path

import torch

from netra import contracts, paths
from netra.contracts.proj import LM_HEAD
from netra.contracts.spec import Tensor
from netra.lifecycle import bench, check, testbeds
from netra.runtime import launch as rt_launch
from netra.runtime import loader

HERE = Path(__file__).resolve().parent


def builds() -> dict:
    g = paths.generator("proj", "gen_lm_head")
    assert g.generate() == paths.ptx_path("sm_90a", "proj", LM_HEAD.name).read_text(), "generator and committed PTX differ"
    return {"traced": g.generate(trace=True), "no_hint": g.generate(l2_hint=False), "rotate": g.generate(rotate=True),
            "static": g.generate(static=True), "no_logits": g.generate(store_logits=False),
            "one_copy": g.generate(dataclasses.replace(LM_HEAD, pad=0)), "gather": g.generate(gather=True)}


def analyse(tr: torch.Tensor, lo: int) -> dict:
    """tr: int64 [C, grid, 8] of one replay; launches lo.. analysed (the first ones warm up)."""
    t = tr.double()
    C = t.shape[0]
    ent, first, loop_end, exit_ = t[..., 0], t[..., 1], t[..., 2], t[..., 3]
    rows = range(max(lo, 1), C)
    med = statistics.median
    q = lambda v: {p: round(float(torch.quantile(v.flatten(), p / 100)), 1) for p in (0, 10, 50, 90, 100)}  # noqa: E731
    return {
        "launches_analysed": len(rows),
        "period_ns": med([float(ent[i].min() - ent[i - 1].min()) for i in rows]),
        "span_ns": med([float(exit_[i].max() - ent[i].min()) for i in rows]),
        "gap_to_previous_exit_ns": med([float(ent[i].min() - exit_[i - 1].max()) for i in rows]),
        "entry_spread_ns": med([float(ent[i].max() - ent[i].min()) for i in rows]),
        "first_data_after_entry_ns": q((first - ent)[lo:]),
        "loop_end_after_first_entry_ns": q((loop_end - ent.min(1, keepdim=True).values)[lo:]),
        "exit_after_loop_end_ns": q((exit_ - loop_end)[lo:]),
        "strips_per_cta": q(tr[lo:, :, 5].double()),
    }


def prepare(pre: str, tb, c, fn) -> None:
    """--pre: the process's history before the measured cases (see the docstring)."""
    dims = {"M": 1}
    empty = rt_launch.raw_launcher(loader.load("empty_kernel", 0))
    reader = rt_launch.raw_launcher(loader.load("read_floor", 0))
    plain = rt_launch.make_guard_and_launch(c, function_handle=fn, device=0)
    if pre == "bench":
        bench.bench_case(tb, dims, plain, (empty, reader), peers=False, log=lambda *_: None)
    elif pre in ("alloc", "reader", "chain"):
        copies = bench.copies_for(sum(c.nbytes(dims)))
        base = check.Bench(tb, dims, 5)
        base.reset()
        ins = [bench.replicate(base.inputs) for _ in range(copies)]
        outs = [tb.alloc_outputs(dims, "cuda") for _ in range(copies)]
        nread = c.nbytes(dims)[0]
        per_cta = -(-nread // LM_HEAD.grid // 16) * 16
        src = torch.randint(0, 256, (copies * per_cta * LM_HEAD.grid,), dtype=torch.uint8, device="cuda")
        sink = torch.zeros(4, dtype=torch.uint8, device="cuda")
        if pre == "reader":
            p0, stride = src.data_ptr(), per_cta * LM_HEAD.grid
            bench.graph_time(lambda i: reader((LM_HEAD.grid, 1, 1), (c.threads, 1, 1), p0 + i * stride, sink.data_ptr(),
                                              per_cta), copies)
        if pre == "chain":
            go = rt_launch.make_guard_and_launch(c, function_handle=fn, device=0, launch=rt_launch.pdl_launcher())
            args = [tb.args({**a, **b}) for a, b in zip(ins, outs)]
            bench.graph_time(lambda i: go(*args[i]), copies)
        ins = outs = src = None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def bench_traced(tb, c, traced_c, promoted, traced_fn, ms) -> dict:
    """bench_case's own timing of the traced build (a test bed whose outputs include ``trace``), after one discarded
    bench_case of the promoted kernel (as netra bench): the stamps of each graph's last replay, analysed."""
    empty = rt_launch.raw_launcher(loader.load("empty_kernel", 0))
    reader = rt_launch.raw_launcher(loader.load("read_floor", 0))
    tb2 = dataclasses.replace(tb, contract=traced_c)
    seen, analysed = [], []
    real_graph_time = bench.graph_time

    def recording(go):
        def launch(*a):
            if not any(t is a[-1] for t in seen):
                seen.append(a[-1])
            return go(*a)
        return launch

    def graph_time(launch_i, copies, replays=bench.REPLAYS):
        seen.clear()
        r = real_graph_time(launch_i, copies, replays)
        if seen:
            analysed.append(analyse(torch.stack(seen).cpu(), max(1, copies // 4)))
        return r

    out = {}
    bench.graph_time = graph_time
    try:
        plain = rt_launch.make_guard_and_launch(c, function_handle=promoted, device=0)
        bench.bench_case(tb, {"M": 1}, plain, (empty, reader), peers=False, log=lambda *_: None)
        for M in ms:
            for rep in range(2):
                go = recording(rt_launch.make_guard_and_launch(traced_c, function_handle=traced_fn, device=0))
                go_pdl = recording(rt_launch.make_guard_and_launch(traced_c, function_handle=traced_fn, device=0,
                                                                   launch=rt_launch.pdl_launcher()))
                analysed.clear()
                case = bench.bench_case(tb2, {"M": M}, go, (empty, reader), peers=False, log=print, go_pdl=go_pdl)
                out[f"M={M} run {rep}"] = {"median_us": case["median_us"], "pdl_chain_us": case["pdl_chain_us"],
                                           "trace_plain": analysed[0], "trace_pdl_chain": analysed[1]}
                print("bench_traced", M, rep, round(case["median_us"], 2), round(case["pdl_chain_us"], 2),
                      json.dumps(analysed[0]), flush=True)
    finally:
        bench.graph_time = real_graph_time
    return out


def main() -> None:
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    ms = [int(v) for v in next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--m=")), "1+32").split("+")]
    name, c = LM_HEAD.name, contracts.get(LM_HEAD.name)
    tb = testbeds.get(name)
    traced_c = dataclasses.replace(c, params=c.params + (Tensor("trace", "i64", (LM_HEAD.grid, 8), "out", align=8),))
    fns, keep = {}, []
    for label, ptx in builds().items():
        module, fn = loader.load_text(f"{name}", ptx, dynamic_smem=c.dynamic_smem)
        keep.append(module)
        fns[label] = int(fn)
    promoted = loader.load(name, 0).handle
    pre = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--pre=")), "none")
    prepare(pre, tb, c, promoted)
    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; stamps: %globaltimer by thread 0 of every CTA, the last "
                     "replay", "cases": {}}
    if "--bench-traced" in sys.argv:  # the traced build inside bench_case (its allocations), after a discarded case
        res["bench_traced"] = bench_traced(tb, c, traced_c, promoted, fns["traced"], ms)
    if "--bench-cases" in sys.argv:
        empty = rt_launch.raw_launcher(loader.load("empty_kernel", 0))
        reader = rt_launch.raw_launcher(loader.load("read_floor", 0))
        for M in ms:
            for label, fn in (("promoted", promoted), ("rotate", fns["rotate"]), ("static", fns["static"]),
                              ("no_hint", fns["no_hint"]), ("no_logits", fns["no_logits"]), ("gather", fns["gather"]),
                              ("promoted_again", promoted)):
                go = rt_launch.make_guard_and_launch(c, function_handle=fn, device=0)
                go_pdl = rt_launch.make_guard_and_launch(c, function_handle=fn, device=0, launch=rt_launch.pdl_launcher())
                case = bench.bench_case(tb, {"M": M}, go, (empty, reader), peers=False, log=print, go_pdl=go_pdl)
                row = {k: case[k] for k in ("median_us", "pdl_chain_us", "replay_samples_us")}
                row["read_floor_us"] = case["peers"]["read_floor"]
                res.setdefault("bench_cases", {})[f"M={M} {label}"] = row
                print("bench_case", M, label, round(row["median_us"], 2), round(row["pdl_chain_us"], 2),
                      round(row["read_floor_us"], 2), flush=True)
    for M in ms:
        dims = {"M": M}
        copies = bench.copies_for(sum(c.nbytes(dims)))
        base = check.Bench(tb, dims, 5)
        base.reset()
        ins = [bench.replicate(base.inputs) for _ in range(copies)]
        outs = [tb.alloc_outputs(dims, "cuda") for _ in range(copies)]
        trace = torch.zeros(copies, LM_HEAD.grid, 8, dtype=torch.int64, device="cuda")
        row = {"copies": copies}
        gos = {}
        for label, (cc, fn) in {"promoted": (c, promoted), "traced": (traced_c, fns["traced"]),
                                "no_hint": (c, fns["no_hint"]), "rotate": (c, fns["rotate"]),
                                "gather": (c, fns["gather"])}.items():
            for mode in ("plain", "pdl_chain"):
                gos[(label, mode)] = rt_launch.make_guard_and_launch(
                    cc, function_handle=fn, device=0, launch=rt_launch.pdl_launcher() if mode == "pdl_chain" else None)
        args = {lab: [tb.args({**a, **b}) + ([trace[k]] if lab == "traced" else []) for k, (a, b) in enumerate(zip(ins, outs))]
                for lab in ("promoted", "traced", "no_hint", "rotate", "gather")}
        ref = None
        for label in ("promoted", "traced", "no_hint", "rotate", "gather"):  # every build's outputs bitwise the promoted's
            for o in outs[0].values():
                o.fill_(-1 if not o.dtype.is_floating_point else float("nan"))
            assert gos[(label, "plain")](*args[label][0]) is None
            torch.cuda.synchronize()
            got = {k: v.clone() for k, v in outs[0].items()}
            ref = got if ref is None else ref
            row[f"{label}_bitwise_equal_to_promoted"] = all(torch.equal(got[k], ref[k]) for k in ref)
        for label in ("promoted", "traced", "no_hint", "rotate", "gather"):
            for mode in ("plain", "pdl_chain"):
                go = gos[(label, mode)]
                trace.zero_()
                t, samples = bench.graph_time(lambda i: go(*args[label][i]), copies)
                row[f"{label}_{mode}_us"] = t
                if label == "traced":
                    row[f"trace_{mode}"] = analyse(trace.cpu(), max(1, copies // 4))
                print(M, label, mode, round(t, 2), flush=True)
        xs = [i["x"] for i in ins]
        ws = [i["w"] for i in ins]
        t, _ = bench.graph_time(lambda i: torch.argmax((xs[i] @ ws[i].T).float(), -1), copies, bench.PEER_REPLAYS)
        row["cublas_bf16_argmax_us"] = t
        res["cases"][f"M={M}"] = row
        print(M, json.dumps(row, indent=1), flush=True)
        ins = outs = args = xs = ws = None
        torch.cuda.empty_cache()
    os.makedirs(out_dir, exist_ok=True)
    res["pre"] = pre
    with open(os.path.join(out_dir, f"lm_head_trace_{pre}.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
