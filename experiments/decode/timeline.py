"""Where a captured decode step's time goes, kernel by kernel, with PDL's overlaps visible (a diagnosis).

`breakdown.py` sums device time per kernel over eager steps: with PDL the kernels of a step overlap, so those sums
neither add up to the step nor show which boundary costs what. Here torch.profiler (CUPTI) records every kernel of 3
replays of the captured step, each with its start and end on the device clock. Each kernel is charged
its increment: its end minus the latest end of the kernels before it in the step, so the increments of one step add up
to its span. Also kept per kernel: its start relative to that previous end (negative: it started early, under PDL or
beside its predecessor). Synthetic 40-layer checkpoint, context 1024, positions 3.., as `netra decode`.

Forms: `current`; any experiments/decode/step_ab.py form that only swaps kernels' builds (its previous_builds), e.g.
`nreg_prev` (GDN's in_proj and the residual out_proj without the 104-register cap of 15fc351), to show the cap's overlap
directly, or `parked` / `parked_inproj` (the dense launches as if their weights were in shared memory; a diagnosis);
and step_ab's `state_pf_*` forms (a launch asking L2 for a GDN layer's state; their wrappers, not builds) and `res_spin*`
forms (out_proj polling the recurrence's output: step_ab.res_spin_runner), and `attn_trigger_opre` (o_proj by
step_ab.opre_linear_add).
The profiler adds its own overhead: the step's span under it is reported next to the same runner's CUDA-event median.

  PYTHONPATH=src python3 experiments/decode/timeline.py [--batches=1+8] [--forms=current+nreg_prev] --out "$OUT"
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch

HERE = Path(__file__).resolve().parent
REPLAYS = 3


def kernels_of_replays(runner, replays: int = REPLAYS) -> list[list[dict]]:
    """[replay][kernel] = {name, start, end} in us on the device clock, from a chrome trace of ``replays`` replays."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            runner.graph.replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        prof.export_chrome_trace(f"{d}/t.json")
        trace = json.load(open(f"{d}/t.json"))
    ks = sorted(({"name": e["name"], "start": float(e["ts"]), "end": float(e["ts"]) + float(e["dur"])}
                 for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"),
                key=lambda k: k["start"])
    n = len(ks) // replays
    assert n * replays == len(ks) and n > 0, f"{len(ks)} kernels over {replays} replays"
    return [ks[i * n:(i + 1) * n] for i in range(replays)]


def increments(step: list[dict]) -> list[dict]:
    """Each kernel's increment (its end past the latest earlier end) and its lead (previous latest end - its start:
    > 0 when it started before the kernels ahead of it had all ended)."""
    out, latest = [], step[0]["start"]
    for k in step:
        out.append({"name": k["name"], "dur": k["end"] - k["start"], "lead": latest - k["start"],
                    "inc": max(0.0, k["end"] - latest)})
        latest = max(latest, k["end"])
    return out


def summarize(steps: list[list[dict]]) -> dict:
    """Per kernel name, over the replays: calls per step and the medians (over replays) of the summed increment,
    duration and lead; and each step's span."""
    rows = {}
    for st in steps:
        for name in {k["name"] for k in st}:
            mine = [k for k in st if k["name"] == name]
            r = rows.setdefault(name, {"calls": len(mine), "inc_us": [], "dur_us": [], "lead_us": []})
            r["inc_us"].append(sum(k["inc"] for k in mine))
            r["dur_us"].append(sum(k["dur"] for k in mine))
            r["lead_us"].append(sum(k["lead"] for k in mine) / len(mine))
    table = {n: {"calls_per_step": r["calls"], "increment_us_per_step": statistics.median(r["inc_us"]),
                 "duration_us_per_step": statistics.median(r["dur_us"]), "mean_lead_us": statistics.median(r["lead_us"])}
             for n, r in rows.items()}
    return dict(sorted(table.items(), key=lambda kv: -kv[1]["increment_us_per_step"]))


def swap_builds(form: str):
    """A step_ab form's swapped builds (step_ab.previous_builds) in the loader; undo() restores."""
    from netra import contracts, paths
    from netra.runtime import loader

    step_ab = paths.load_module(HERE / "step_ab.py", "step_ab")
    real_load, keep, swaps = loader.load, [], {}
    for name, (ptx, smem) in step_ab.previous_builds(form).items():
        module, fn = loader.load_text(name, ptx, dynamic_smem=smem)
        keep.append(module)
        swaps[name] = int(fn)
        if name in contracts.REGISTRY and contracts.get(name).carveout >= 0:  # the replaced kernel's (as step_ab's)
            loader.set_carveout(fn, contracts.get(name).carveout, name)
    loader.load = lambda n, d: SimpleNamespace(handle=swaps[n]) if n in swaps else real_load(n, d)

    step_ab.rebind_all()

    def undo():
        loader.load = real_load
        step_ab.rebind_all()
        keep.clear()

    return undo


def state_prefetch(form: str):
    """A step_ab state_pf_* form: its wrappers set (the prefetch launch before the MoE block or the in_proj);
    undo() restores them."""
    from netra import paths
    from netra.decode import ops as dops
    from netra.decode import runner as rmod
    from netra.ops import _dispatch

    step_ab = paths.load_module(HERE / "step_ab.py", "step_ab")
    swaps, module = step_ab.state_prefetchers(dops, rmod, lambda: _dispatch._PDL, form)
    for (owner, attr), (_, fn) in swaps.items():
        setattr(owner, attr, fn)

    def undo(keep=module):  # (keep: the prefetch kernel's module lives as long as the captured graphs may launch it)
        for (owner, attr), (real, _) in swaps.items():
            setattr(owner, attr, real)

    return undo


def res_spin(form: str):
    """A step_ab res_spin* form: its builds swapped (gdn_decode_b32_spin storing o strong) and the runner's _alloc and
    _mixer set to step_ab.res_spin_runner's (out_proj polling o); undo() restores them."""
    from netra import paths
    from netra.decode import ops as dops
    from netra.decode import runner as rmod
    from netra.ops import _dispatch

    step_ab = paths.load_module(HERE / "step_ab.py", "step_ab")
    swap_undo, keep = swap_builds(form), []
    real = rmod.DecodeRunner._alloc, rmod.DecodeRunner._mixer
    rmod.DecodeRunner._alloc, rmod.DecodeRunner._mixer = step_ab.res_spin_runner(rmod, dops, _dispatch,
                                                                                 step_ab.RES_SPIN_FORMS[form], keep)

    def undo(keep=keep):  # (keep: the candidate's module lives as long as the captured graphs may launch it)
        rmod.DecodeRunner._alloc, rmod.DecodeRunner._mixer = real
        swap_undo()

    return undo


def attn_opre(form: str):
    """step_ab's attn_trigger_opre: its builds swapped (the attention builds triggering at their start) and
    fp8_linear_add wrapped (o_proj by the residual build requesting its strip first); undo() restores them."""
    from netra import paths
    from netra.decode import ops as dops
    from netra.decode import runner as rmod
    from netra.ops import _dispatch

    step_ab = paths.load_module(HERE / "step_ab.py", "step_ab")
    swap_undo, keep = swap_builds(form), []
    real = dops.fp8_linear_add, rmod.DecodeRunner._alloc
    dops.fp8_linear_add = step_ab.opre_linear_add(dops, _dispatch, real[0], keep)

    def undo(keep=keep):
        dops.fp8_linear_add, rmod.DecodeRunner._alloc = real
        swap_undo()

    return undo


def main():
    from netra import paths
    from netra.decode import main as dm
    from netra.decode import runner as rmod
    from netra.lifecycle import bench
    from netra.model import checkpoint as ck
    from netra.model.config import QWEN36_35B_A3B
    from netra.model.packed import pack
    import netra.ops as nops

    arg = lambda k, d: next((a.split("=", 1)[1] for a in sys.argv if a.startswith(f"--{k}=")), d)  # noqa: E731
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    batches = [int(b) for b in arg("batches", "1").replace("+", ",").split(",")]
    forms = arg("forms", "current+nreg_prev").replace(",", "+").split("+")
    packed = pack(ck.synthetic_checkpoint(QWEN36_35B_A3B, seed=0, device="cuda"))
    step_ab = paths.load_module(HERE / "step_ab.py", "step_ab")
    res = {"method": __doc__.split("\n\n")[1].replace("\n", " "), "replays": REPLAYS, "runs": {}}
    for B in batches:
        for form in forms:
            undo = (state_prefetch(form) if form.startswith("state_pf") else res_spin(form) if form.startswith("res_spin")
                    else attn_opre(form) if form == "attn_trigger_opre"
                    else swap_builds(form) if form != "current" else (lambda: None))
            try:
                for pdl in (False, True):
                    runner = rmod.DecodeRunner(packed, B, 1024, device="cuda")
                    if form.startswith("gdn_spin"):  # the spin build's contract: its inputs TAG before the in_proj
                        step_ab.tag_gdn_inputs(runner)
                    runner.capture(pdl=pdl)
                    event_ms = dm._time_replays(runner, 32)
                    steps = kernels_of_replays(runner)
                    key = f"{form} batch {B} {'pdl' if pdl else 'plain'}"
                    spans = [st[-1]["end"] - st[0]["start"] for st in steps]
                    res["runs"][key] = {"cuda_event_ms_median_32": event_ms, "profiled_span_us": spans,
                                        "kernels_per_step": len(steps[0]), "by_kernel": summarize([increments(s) for s in steps]),
                                        "one_step": increments(steps[1])}
                    print(key, f"event {event_ms:.3f} ms, profiled spans {[round(s, 1) for s in spans]} us, "
                          f"{len(steps[0])} kernels", flush=True)
                    for n, r in list(res["runs"][key]["by_kernel"].items())[:14]:
                        print(f"  {r['increment_us_per_step']:8.1f} us inc  {r['duration_us_per_step']:8.1f} us dur  "
                              f"lead {r['mean_lead_us']:6.2f}  x{r['calls_per_step']:3d}  {n[:70]}", flush=True)
                    del runner
                    nops.set_pdl(False)
                    bench.release()
                    json.dump(res, open(os.path.join(out_dir, "timeline.json"), "w"), indent=1)
            finally:
                undo()


if __name__ == "__main__":
    main()
