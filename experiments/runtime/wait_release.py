"""What does a PDL boundary cost after the producer's last store? griddepcontrol.wait against spinning on the rows (a
diagnosis).

Why: Nsight Compute on the dense batch-1 launches (`../../docs/notes/decode.md`, "After e28ef15") puts their largest
stall site at the activation's first use after `griddepcontrol.wait`. The wait returns only when the whole producer grid
has ended and its writes are flushed. A consumer that spins on the rows it needs (as the one-launch MoE block's down
tasks spin on their gate | up rows, the `tags` protocol) could go on as soon as they are stored. This measures the
difference on nothing but the boundary: `wait_release.ptx`, a producer of 132 CTAs that triggers its dependents first,
works for a set time (its tail, optionally staggered over its CTAs) and stores one row a CTA; then a consumer of 132 CTAs
that either waits (`griddepcontrol.wait`, then loads the rows) or spins on the rows, and stamps when every row is seen.
Prediction: the wait returns 1-2 us after the last store, the spin sees the rows 0.5-1 us after it; so 0.3-1 us a
boundary, ~50-150 us a batch-1 step of ~160 launches, if every boundary could use it. (Measured at 8301988,
`wait_release_8301988.json`: where the consumer's CTAs start before the producer's last store, the wait form sees every
row 752-832 ns after it and the spin 352-608; the period moves by the same 0.22-0.39 us a pair. Where the producer ends
first (no tail) the two are equal: the consumer's own start is the boundary. The low end of the prediction.)

Method: 32 pairs (producer launched plainly, consumer with programmatic stream serialization, or plainly for the
"plain" form) captured in one CUDA graph after a memset of the rows, CUDA events, median of 20 replays
(netra.lifecycle.bench.graph_time): the period, us a pair. Then each pair's stamps from the last replay (each pair has
its own stamp rows): a consumer CTA's %globaltimer when every row is seen, and at its start, minus the pair's last
producer store (ns); the median over CTAs, then over the 32 pairs. Forms: wait (PDL, griddepcontrol.wait), spin (PDL,
no wait), plain (no PDL, griddepcontrol.wait). The wait form counts rows it found unwritten (must be 0). (The first
run, at 85d106e, took the stamps from eager pairs: there the consumer starts 4-8 us after the producer's last store,
the host's launch latency, so those stamps said nothing about the boundary; its periods stand.)

  PYTHONPATH=src python3 experiments/runtime/wait_release.py --out "$OUT" [--work]

--work: the protocol's formal cost. A consumer that spins instead of waiting must still execute griddepcontrol.wait
before it exits (else its dependents, which wait for its grid only, no longer imply the producer's end). Forms wait,
spin and spin_wait (spin, then the wait after the consumer's own work) with 0, 1 and 3 us of work after the rows, the
2 us + 2 us staggered producer. Prediction: spin_wait equals spin once the work outlasts the producer's end.
(Measured at 23c94a0, `wait_release_work_23c94a0.json`: spin_wait equals spin at every work, 0 included; wait is
0.33-0.47 us a pair slower.)
"""

from __future__ import annotations

import ctypes
import statistics
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
NCT = 132
FORMS = {"wait": (0, True), "spin": (1, True), "plain": (0, False), "spin_wait": (2, True)}  # -> (mode, PDL launch)
TAILS = ((0, 0), (2000, 0), (2000, 2000))  # producer work: (ns every CTA, ns more for the last CTA)
# --work: the consumer's work after its rows (ns), and the forms and tails timed; "spin_wait" spins, works, then waits
WORK_RUN = (("wait", "spin", "spin_wait"), ((2000, 2000),), (0, 1000, 3000))


class PArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_uint64), ("stamps", ctypes.c_uint64), ("gen", ctypes.c_uint32),
                ("tail", ctypes.c_uint32), ("spread", ctypes.c_uint32)]


class CArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_uint64), ("stamps", ctypes.c_uint64), ("err", ctypes.c_uint64),
                ("gen", ctypes.c_uint32), ("mode", ctypes.c_uint32), ("nrows", ctypes.c_uint32),
                ("work", ctypes.c_uint32)]


def main():
    from netra.lifecycle import bench, records
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    text = (HERE / "wait_release.ptx").read_text()
    keep = [loader.load_text(n, text) for n in ("wr_producer", "wr_consumer")]
    fp, fc = keep[0][1], keep[1][1]
    P = 32  # pairs a graph
    rows = torch.zeros(NCT * 32, dtype=torch.int32, device="cuda")  # one 128-byte line a row
    sp = torch.zeros(P, NCT, dtype=torch.int64, device="cuda")
    sc = torch.zeros(P, NCT, 2, dtype=torch.int64, device="cuda")
    err = torch.zeros(1, dtype=torch.int32, device="cuda")
    pa = PArgs(rows.data_ptr(), 0, 0, 0, 0)
    ca = CArgs(rows.data_ptr(), 0, err.data_ptr(), 0, 0, NCT, 0)
    pp, cp = loader.param_pointers(pa), loader.param_pointers(ca)
    launchers = {True: rt_launch.ex_launcher(pdl=True), False: rt_launch.ex_launcher(pdl=False)}

    def pair(i: int, form: str, tail: int, spread: int, work: int = 0):
        mode, pdl = FORMS[form]
        ca.work = work
        stream = torch.cuda.current_stream().cuda_stream
        pa.stamps, pa.gen, pa.tail, pa.spread = sp[i].data_ptr(), i + 1, tail, spread  # the launch copies them
        assert launchers[False](fp, NCT, 1, 1, 32, 1, 1, 0, stream, ctypes.addressof(pp), 0) == 0
        ca.stamps, ca.gen, ca.mode = sc[i].data_ptr(), i + 1, mode
        assert launchers[pdl](fc, NCT, 1, 1, 256, 1, 1, 0, stream, ctypes.addressof(cp), 0) == 0

    res = {"method": __doc__.split("\n\n")[2].replace("\n", " "), "ctas": NCT, "pairs": P, "stamps": {}}
    work_run = "--work" in sys.argv
    forms, tails, works = WORK_RUN if work_run else (("wait", "spin", "plain"), TAILS, (0,))
    configs = [(t, f, w) for t in tails for w in works for f in forms]
    for rep in range(2):  # every configuration twice, interleaved
        for (tail, spread), form, work in configs:
            def launch_i(i, form=form, tail=tail, spread=spread, work=work):
                if i == 0:
                    rows.zero_()
                pair(i, form, tail, spread, work)

            us = bench.graph_time(launch_i, P, 20)[0]
            torch.cuda.synchronize()
            last = sp.max(dim=1).values.view(P, 1)
            s = sc.cpu() - last.cpu().view(P, 1, 1)
            seen = s[:, :, 1].median(dim=1).values.tolist()
            start = s[:, :, 0].median(dim=1).values.tolist()
            seen_max = s[:, :, 1].max(dim=1).values.tolist()
            span = (sp.max(dim=1).values - sp.min(dim=1).values).tolist()
            key = f"tail{tail}_spread{spread}" + (f"_work{work}" if work_run else "")
            row = {"period_us": us, "seen_after_last_store_ns_median": statistics.median(seen),
                   "seen_after_last_store_ns_max": statistics.median(seen_max),
                   "consumer_start_after_last_store_ns": statistics.median(start),
                   "producer_store_span_ns": statistics.median(span)}
            res["stamps"].setdefault(key, {}).setdefault(form, []).append(row)
            print(f"run {rep} {key} {form}: period {us:.3f} us a pair; rows seen "
                  f"{row['seen_after_last_store_ns_median']:.0f} ns after the last store (max "
                  f"{row['seen_after_last_store_ns_max']:.0f}); consumer started "
                  f"{row['consumer_start_after_last_store_ns']:.0f}; stores span "
                  f"{row['producer_store_span_ns']:.0f}", flush=True)
    torch.cuda.synchronize()
    res["wait_rows_unwritten"] = int(err.item())
    print("rows the wait form found unwritten (must be 0):", res["wait_rows_unwritten"])
    records.write_experiment(out_dir, "wait_release_work" if work_run else "wait_release", res)
    del keep


if __name__ == "__main__":
    main()
