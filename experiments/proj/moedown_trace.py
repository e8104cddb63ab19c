"""Where moe_down's 5.3 us at M = 1 go: a timeline from inside `fp8_gemv_n2048_k4608_moedown` (the batch-1 build).

Why: hot_weights_307cc69.json has this kernel 5.36 us as a PDL chain with its weights cold and 5.25 with every input in
L2, so its time is its own dependent chain after griddepcontrol.wait, not DRAM; h_early_variant_fdd15d3.json took its
last L2 round trip (the h load) off the tail and it did not get faster. Which links of the chain are long is not known:
the ids from L2 and the barrier before the chunks are requested, the chunks' latency and landing, the x prologue
(silu(gate) * up of 9 experts' rows), the mma, the warps' sums, the stores.

The committed PTX with thread 0 of every CTA storing %globaltimer (ns; with --clock: %clock64 cycles from the wait on,
moedown_trace_clock.json) at: entry (absolute), after the wait, after the
ids barrier, after the chunk requests (REST_ISSUED), after silu(gate) * up (silu_done, since 811146e), after n-tile
0's rows are back as fragments (staged, since 811146e), after the x prologue's barrier, when chunks 0 / 1 / 2 have landed,
after the sums' barrier, and at the end (absolute), into 16 u64 a CTA at a buffer address written into the PTX (no new
parameter: the launch is the contract's). Nothing else changes, so out and h must stay bitwise the committed kernel's
(checked). Launched the bench's way: one CUDA graph of C launches over C rotated copies (cold) or C launches of copy 0
(hot), plainly and as a PDL chain; the stamps of the last replay, launches C/4 .. C-1: per launch the gap from the
previous launch's last CTA end to this launch's first CTA start and to its median wait release, and per mark the median
(10th, 90th percentile) over CTAs of the ns since the wait.

Measured at 304eaa6 (moedown_trace_304eaa6.json, log docs/notes/h200-moedown-trace-304eaa6.log; bitwise the committed
kernel; %globaltimer ticks every 256 ns here, so each mark is +-256 ns), median over CTAs, ns after the wait, cold plain
(hot plain): ids barrier 512 (512), chunks requested 768 (768), x prologue done 3328 (3072), chunk 0 / 1 / 2 landed
3328 / 3584 / 3840 (3072 / 3328 / 3584), sums' barrier 4096 (3840), end 4608 (4352); the wait released ~1 us after the
previous launch's end. As PDL chains every mark after the chunk requests is 0.8-1.5 us later (x prologue done 4864
cold, 4096 hot). So the x prologue, ~2.3-2.5 us after the chunks are requested, is the critical path: the chunks have
landed when it ends, and hot weights change it by one tick. In it, the SASS has the expert weights' loads (top,
glogit) after the last chunk's conversion: experiments/proj/top_early_variant.py moves them. That JSON's
slowest_cta_end_minus_median_ns is void (0 everywhere): it read the unused last slot, not the end stamp (fixed after).

--x_tpose (added after 3e39685): the same stamps in the x_tpose build (gen_fp8_gemv.generate(x_tpose=True): x staged
by fragment lane, a quarter of the staging's shared-memory wavefronts at M = 1), into moedown_trace[_clock]_x_tpose.json.
Why: that build was measured 0.1 us slower plainly and 0.06 faster as a chain (x_tpose_variant_e40df94.json) where the
clock trace of the committed build predicted 0.3-0.4 us faster; run with --clock beside the committed build's trace in
one loan, it says whether the staging got shorter and what took its place (the conversions after it, being bound by
instruction issue, would end at the same cycle).

Two diagnostics of why the products end ~2 us later as a PDL chain (added after 1f70164; with --clock; not the
kernel's arithmetic, so their outputs are not compared):
- --half_x: every up row is read from its gate row's address (the same line the gate load just asked for), so the L2
  serves half of x's 18 KB a CTA. If the chain's delay is x's bytes served to 128 SMs at once, it about halves.
- --stagger: after the wait, CTA c spins 16 c cycles (128 CTAs over ~2000 cycles, about a plain launch's ramp) before
  the wait stamp, so the marks still count from its own start. If the delay is every CTA asking at the same instant,
  the chain's marks fall to the plain launch's.

  PYTHONPATH=src python3 experiments/proj/moedown_trace.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import torch

NAME = "fp8_gemv_n2048_k4608_moedown"
SLOTS = 16
# (mark, the PTX line it follows, stripped of comments; occurrences expected)
CLOCK = "--clock" in sys.argv  # %clock64 (SM cycles) for the marks from the wait on; entry and end stay %globaltimer
XT = "--x_tpose" in sys.argv  # the x_tpose build, not the committed PTX
HALF_X = "--half_x" in sys.argv  # diagnostic: up rows read from the gate rows' addresses (not the kernel's outputs)
STAGGER = "--stagger" in sys.argv  # diagnostic: CTA c starts 16 c cycles after its wait
MARKS = (("wait", "griddepcontrol.wait;", 1), ("ids_bar", "bar.sync 0;", None), ("issued", "REST_ISSUED_M8:", 1),
         ("silu_done", "mad.lo.u32 %xst, %warp, 2048, %sbase;", 1), ("staged", "bar.warp.sync 0xffffffff;", None),
         ("x_done", "bar.sync 0;", None), ("chunk0", "@!%p bra WAIT0_M8;", 1), ("chunk1", "@!%p bra WAIT1_M8;", 1),
         ("chunk2", "@!%p bra WAIT2_M8;", 1), ("sums_bar", "bar.sync 0;", None))
NAMES = ("entry",) + tuple(m for m, _, _ in MARKS) + ("end",)


def spin(per_cta: int, label: str) -> list[str]:
    """PTX lines: CTA c spins per_cta * c cycles (%clock64) where they are put (also step_ab.py's stagger forms)."""
    return ["    {", "    .reg .b64 %stg0, %stg1, %stg2;", "    .reg .b32 %stgc;", "    .reg .pred %stgp;",
            "    mov.u64 %stg0, %clock64;", "    mov.u32 %stgc, %ctaid.x;", f"    mul.wide.u32 %stg2, %stgc, {per_cta};",
            f"{label}:", "    mov.u64 %stg1, %clock64;", "    sub.u64 %stg1, %stg1, %stg0;",
            "    setp.lt.u64 %stgp, %stg1, %stg2;", f"    @%stgp bra {label};", "    }"]


def trace_ptx(ptx: str, addr: int) -> str:
    """The kernel with thread 0 stamping %globaltimer at NAMES into 16 u64 per CTA at ``addr`` + 128 ctaid."""
    lines = ptx.splitlines()
    key = [ln.split("//")[0].strip() for ln in lines]
    comment = [ln.split("//", 1)[1].strip() if "//" in ln else "" for ln in lines]
    # the three bar.sync marks by their comments (the ids table; every warp done with its x region; the strip's sums)
    where = {}
    for name, text, count in MARKS:
        if name == "ids_bar":
            hits = [i for i, (k, c) in enumerate(zip(key, comment)) if k == text and c.startswith("the ids table")]
        elif name == "x_done":
            hits = [i for i, (k, c) in enumerate(zip(key, comment)) if k == text and c.startswith("every warp is done with its x")]
        elif name == "staged":  # the last n-tile 0 chunk's rows back as fragments (before the conversions)
            hits = [i for i, (k, c) in enumerate(zip(key, comment)) if k == text
                    and c.startswith("the next rows may overwrite")][-1:]
        elif name == "sums_bar":
            hits = [i for i, k in enumerate(key) if k == text and i + 1 < len(lines)
                    and comment[i + 1].startswith("every warp is done with this strip's stages")]
        else:
            hits = [i for i, k in enumerate(key) if k == text]
        assert len(hits) == (count or 1), (name, len(hits))
        where[hits[0]] = NAMES.index(name)
    decl = next(i for i, k in enumerate(key) if k.startswith(".reg .pred %p,"))
    entry = next(i for i, k in enumerate(key) if k.startswith("mov.u32 %th, %tid.x;"))
    ret = [i for i, k in enumerate(key) if k == "ret;"]
    assert len(ret) == 1, len(ret)

    def stamp(slot: int) -> list[str]:
        timer = "%clock64" if CLOCK and NAMES[slot] not in ("entry", "end") else "%globaltimer"
        return [f"    mov.u64 %trc, {timer};", f"    @%ptrq st.global.u64 [%trp+{8 * slot}], %trc;"]

    out = []
    for i, ln in enumerate(lines):
        if i == ret[0]:
            out += stamp(NAMES.index("end"))
        out.append(ln)
        if i == decl:
            out += ["    .reg .b64 %trp, %trc;", "    .reg .b32 %trt;", "    .reg .pred %ptrq;"]
        if i == entry:
            out += ["    mov.u32 %trt, %ctaid.x;", f"    mul.wide.u32 %trp, %trt, {8 * SLOTS};",
                    f"    add.u64 %trp, %trp, {addr};", "    setp.eq.u32 %ptrq, %th, 0;"] + stamp(0)
        if STAGGER and key[i] == "griddepcontrol.wait;":
            out += spin(16, "STAGGER_SPIN")
        if i in where:
            out += stamp(where[i])
    return "\n".join(out) + "\n"


def analyse(tr: torch.Tensor, lo: int) -> dict:
    """tr: int64 [C, CTAs, SLOTS] of one replay."""
    t = tr[lo:].double()
    C = t.shape[0]
    end = NAMES.index("end")
    rel = {n: t[..., i] - t[..., 1] for i, n in enumerate(NAMES) if n not in ("entry", "wait") and not (CLOCK and n == "end")}
    q = lambda v: [round(float(torch.quantile(v.flatten(), p)), 1) for p in (0.1, 0.5, 0.9)]  # noqa: E731
    full = tr.double()
    gaps = [float(full[lo + i, :, 0].min() - full[lo + i - 1, :, end].max()) for i in range(C)]
    wait_rel = [float(full[lo + i, :, 1].median() - full[lo + i - 1, :, end].max()) for i in range(C)]
    spans = [float(full[lo + i, :, end].max() - full[lo + i, :, 0].min()) for i in range(C)]
    if CLOCK:  # marks in SM cycles from the wait; the absolute stamps (entry, end) give only the launch gaps and spans
        return {"launches": C, "cycles_since_wait_p10_p50_p90": {n: q(v) for n, v in rel.items()},
                "prev_end_to_first_entry_ns_median": statistics.median(gaps), "span_ns_median": statistics.median(spans)}
    return {"launches": C, "ns_since_wait_p10_p50_p90": {n: q(v) for n, v in rel.items()},
            "entry_to_wait_p10_p50_p90": q(t[..., 1] - t[..., 0]),
            "prev_end_to_first_entry_ns_median": statistics.median(gaps),
            "prev_end_to_median_wait_ns_median": statistics.median(wait_rel),
            "span_ns_median": statistics.median(spans),
            "slowest_cta_end_minus_median_ns": statistics.median(
                [float(full[lo + i, :, end].max() - full[lo + i, :, end].median()) for i in range(C)])}


def main():
    from netra import contracts, paths
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    c, tb = contracts.get(NAME), testbeds.get(NAME)
    dims = next(d for d in c.cases() if d["M"] == 1)
    ctas = c.grid_for(dims)[0]
    nread, nwrite = c.nbytes(dims)
    copies = bench.copies_for(nread + nwrite)
    trace = torch.zeros(copies, ctas, SLOTS, dtype=torch.int64, device="cuda")
    src = paths.ptx_path("sm_90a", "proj", NAME).read_text()
    if XT:
        from netra.contracts import proj as pc

        src = paths.generator("proj", "gen_fp8_gemv").generate(next(s for s in pc.MOE_DOWNS if s.name == NAME), x_tpose=True)
        assert "(x_tpose)" in src
    if HALF_X:
        ups = [ln for ln in src.splitlines() if "ld.global.v4.u32 {%u" in ln and ln.endswith("[%pa+1024];")]
        assert len(ups) == 12, len(ups)
        src = "\n".join(ln.replace("[%pa+1024];", "[%pa];") if ln in ups else ln for ln in src.splitlines()) + "\n"
    ptxs = [trace_ptx(src, trace[k].data_ptr()) for k in range(copies)]
    mods = [loader.load_text(NAME, p, dynamic_smem=c.dynamic_smem) for p in ptxs]  # one build per copy's rows
    h = loader.load(NAME, 0).handle
    go = rt_launch.make_guard_and_launch(c, function_handle=h, device=0)
    gos = [[rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0, **k) for _, fn in mods]
           for k in ({}, {"launch": rt_launch.pdl_launcher()})]
    base = check.Bench(tb, dims, 5)
    base.reset()
    bufs = [{**bench.replicate(base.inputs), **tb.alloc_outputs(dims, "cuda")} for _ in range(copies)]
    res = {"method": "the committed PTX with %globaltimer stamps by thread 0 of every CTA (no other change); one CUDA "
                     "graph of C launches (launch k on trace rows k), replayed as bench.graph_time does (median of 7); "
                     "the last replay's stamps, launches C/4 .. C-1",
           "kernel": NAME, "x_tpose": XT, "half_x": HALF_X, "stagger": STAGGER, "dims": dims, "copies": copies, "marks": NAMES, "forms": {}}
    # the traced build computes exactly what the committed one does
    outs = []
    for g in (go, gos[0][0]):
        base.reset()
        assert g(*tb.args(base.bufs)) is None
        torch.cuda.synchronize()
        outs.append(base.results())
    res["bitwise_equal_to_committed"] = all(torch.equal(outs[0][n].view(torch.uint8), outs[1][n].view(torch.uint8))
                                            for n in outs[0])
    for form, bb in (("cold", bufs), ("hot", [bufs[0]] * copies)):
        args = [tb.args(b) for b in bb]
        res["forms"][form + "_committed_us"] = {
            "plain": bench.graph_time(lambda i: go(*args[i]), copies)[0]}
        for mode, gg in (("plain", gos[0]), ("pdl_chain", gos[1])):
            trace.zero_()
            t_us = bench.graph_time(lambda i: gg[i](*args[i]), copies)[0]
            torch.cuda.synchronize()
            row = {"us": t_us, **analyse(trace.cpu(), max(1, copies // 4))}
            res["forms"][f"{form}_{mode}"] = row
            print(form, mode, json.dumps(row), flush=True)
    name = (("moedown_trace_clock" if CLOCK else "moedown_trace") + ("_x_tpose" if XT else "") + ("_half_x" if HALF_X else "")
            + ("_stagger" if STAGGER else ""))
    json.dump(res, open(os.path.join(out_dir, name + ".json"), "w"), indent=1)
    del mods


if __name__ == "__main__":
    main()
