"""Where the long-context and cluster attention builds' CTAs land, and whether one CTA a SM walks faster.

Why: at B = 1 and 512 pages `attn_decode_d256_qknorm_c8_long` (S = 8: 16 clusters of 8, 128 CTAs) reads 67 MB in
26.6 us (2.5 TB/s), while its marginal rate from 128 to 512 pages is ~3.9 TB/s (long_sweep_0e2dc50.json), and 16 CTAs
alone (S = 1) walk at ~56 GB/s each against ~20 at S = 8. The builds take 64 KB of dynamic shared memory, so 3 CTAs fit
a SM: clusters of 8 placed inside a GPC may share SMs while other SMs stay empty, each doubled SM then giving its CTAs
half its bandwidth. Prediction: if that is so, the trace shows SMs with 2-3 CTAs at B = 1, and asking for shared memory
that allows only one CTA a SM (the kernel uses the first 64 KB of it) takes the 512-page case from 26.6 to ~20 us; if
the trace shows one CTA a SM, the extra shared memory changes nothing and the per-CTA walk (one page in flight) is the
bound.

For each case: the kernel with its contract's dynamic shared memory (64 KB, 3 CTAs a SM), with 72 KB (at most 2) and
112 KB (1), plainly, CUDA-graph replay over >= 16 rotated copies, median of 7 (`netra bench`'s method); out checked
bitwise against the 64 KB launch's. Then a trace build (the committed PTX with %smid and %globaltimer recorded per CTA
at entry and every exit: the stores added, nothing else) launched eagerly 5 times per shared-memory size: SMs used,
CTAs per SM, the spread of the CTAs' starts and their durations.

  PYTHONPATH=src python3 experiments/attention/long_place.py --out "$OUT"
  PYTHONPATH=src python3 experiments/attention/long_place.py --phases --out "$OUT"   (the traces with phase marks only)
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import statistics
import sys

import torch

KB = 1024
SMEMS = (64 * KB, 72 * KB, 112 * KB)
# (build, B, NP, S): S None for the cluster builds (no ws)
CASES = (("c8_long", 1, 512, 8), ("c8_long", 1, 2048, 8), ("c8_long", 1, 128, 8), ("c8_long", 1, 512, 16),
         ("c4_long", 8, 512, 2), ("c4_long", 32, 128, 1),
         ("c8", 1, 64, None), ("c4", 8, 64, None), ("c4", 32, 16, None), ("c4", 32, 64, None))
PHASE_CASES = (("c8_long", 1, 512, 8), ("c8_long", 1, 2048, 8), ("c8_long", 1, 128, 8), ("c8", 1, 64, None),
               ("c8", 1, 16, None), ("c4_long", 8, 512, 2), ("c4", 32, 64, None))


# (--phases) ns since the CTA's start, kept at the first pass over each marker (0: not reached), each (text, before):
# the prologue done (the page loop next), the walk done, step 8 (the warps' m, l, O to shared memory and the barrier),
# steps 9-10 (the CTA's partial for the cluster written), the cluster's first barrier passed, the slice combined over the
# cluster (the cluster builds: before their second barrier; the long builds: entering SPLIT_PART), the long builds'
# arrival on the counter, and the out slice combined (before COMBINED)
MARKS = (("\nPAGE_LOOP:", True), ("  @%pmore bra PAGE_LOOP;\n", False), ("ML_DONE:\n  bar.sync 0;\n", False),
         ("\nEMPTY_JOIN:", True), ("  barrier.cluster.wait.acquire.aligned;  // every partial of the cluster written\n", False),
         ("  barrier.cluster.arrive.relaxed.aligned;\n", True), ("SPLIT_PART:\n", False),
         ("  @%p atom.acq_rel.gpu.global.add.u32 %cnt, [%pcnt], 1;\n", False), ("\nCOMBINED:", True))
PHASE_NAMES = ("prologue", "walk", "step8", "step9_10", "cluster_barrier", "slice_combined", "split_part", "counter",
               "out_combined")


def trace_ptx(ptx: str, addr: int, phases: bool = False) -> str:
    """The kernel with thread 0 storing (smid, start ns) at entry and every thread atom.max-ing its (end - start) at every
    exit, to 16 bytes per CTA at ``addr`` (linear CTA index); with ``phases`` 64 bytes, thread 0 also storing the
    MARKS times (0: not reached)."""
    head, body = ptx.split("\n  {\n", 1)
    assert body.rstrip().endswith("}"), "one entry, closed by the file's last brace"
    body = body.rstrip()[:-1]
    body = re.sub(r"(@%\w+ )?(exit|ret);", lambda m: f"{m.group(1) or ''}bra TR_END;", body)
    stride = 64 if phases else 16
    if phases:
        for i, (mk, before) in enumerate(MARKS):
            if mk not in body:
                continue
            assert body.count(mk) == 1, mk
            now = (f"  mov.u64 %trd3, %globaltimer;\n  sub.u64 %trd3, %trd3, %trd2;\n  cvt.u32.u64 %tm{i}, %trd3;\n")
            body = body.replace(mk, (mk.replace("\n", "\n" + now, 1) if mk.startswith("\n") else now + mk) if before
                                else mk + now)
    pro = """  .reg .b32 %tr<4>;
  .reg .b64 %trd<4>;
  .reg .pred %trp;
  .reg .b32 %tm<12>;
  mov.u64 %trd2, %globaltimer;
""" + "".join(f"  mov.u32 %tm{i}, 0;\n" for i in range(12)) + f"""
  mov.u32 %tr0, %ctaid.x;
  mov.u32 %tr1, %ctaid.y;
  mov.u32 %tr2, %ctaid.z;
  mov.u32 %tr3, %nctaid.y;
  mad.lo.u32 %tr2, %tr2, %tr3, %tr1;
  mov.u32 %tr3, %nctaid.x;
  mad.lo.u32 %tr0, %tr2, %tr3, %tr0;
  mul.wide.u32 %trd0, %tr0, {stride};
  mov.u64 %trd1, {addr};
  add.u64 %trd1, %trd1, %trd0;
  mov.u32 %tr1, %tid.x;
  setp.eq.u32 %trp, %tr1, 0;
  mov.u32 %tr2, %smid;
  @%trp st.global.u32 [%trd1], %tr2;
  @%trp st.global.u64 [%trd1+8], %trd2;
"""
    epi = ("TR_END:\n  mov.u64 %trd3, %globaltimer;\n  sub.u64 %trd3, %trd3, %trd2;\n  cvt.u32.u64 %tr3, %trd3;\n"
           "  atom.global.max.u32 %tr3, [%trd1+4], %tr3;\n"
           + ("".join(f"  @%trp st.global.v4.u32 [%trd1+{16 + 16 * j}], {{%tm{4 * j}, %tm{4 * j + 1}, %tm{4 * j + 2}, "
                     f"%tm{4 * j + 3}}};\n" for j in range(3)) if phases else "") + "  ret;\n}\n")
    return head + "\n  {\n" + pro + body + epi


def summarize(buf: torch.Tensor, n: int, phases: bool = False) -> dict:
    t = buf.view(-1, 16 if phases else 4)[:n].cpu()
    sm = t[:, 0].view(torch.int32).tolist()
    dur = t[:, 1].view(torch.int32).tolist()
    start = t[:, 2:4].contiguous().view(torch.int64).flatten().tolist()
    per_sm = collections.Counter(sm)
    t0 = min(start)
    return {"ctas": n, "sms_used": len(per_sm), "max_ctas_per_sm": max(per_sm.values()),
            "sms_with_ctas": dict(sorted(collections.Counter(per_sm.values()).items())),
            "start_spread_us": (max(start) - t0) / 1e3, "dur_us_min_med_max": [min(dur) / 1e3, statistics.median(dur) / 1e3,
                                                                             max(dur) / 1e3],
            "end_us": max(s - t0 + d for s, d in zip(start, dur)) / 1e3} | (_phases(t, dur) if phases else {})


def _phases(t: torch.Tensor, dur: list) -> dict:
    """Per marker: the median and max over the CTAs that reached it (us since each CTA's start), and the slowest CTA's."""
    names = PHASE_NAMES
    out = {}
    slow = max(range(len(dur)), key=dur.__getitem__)
    for i, nm in enumerate(names):
        v = [x for x in t[:, 4 + i].tolist() if x]
        if v:
            out[nm] = [round(statistics.median(v) / 1e3, 3), round(max(v) / 1e3, 3), round(t[slow, 4 + i].item() / 1e3, 3)]
    out["slowest_dur"] = dur[slow] / 1e3
    return out


def main():
    from netra import paths
    from netra.contracts import attn as A
    from netra.lifecycle import bench, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    sweep = paths.load_module(paths.ROOT / "experiments" / "attention" / "long_sweep.py")
    phases = "--phases" in sys.argv
    smems = SMEMS[:1] if phases else SMEMS
    cases = PHASE_CASES if phases else CASES
    contracts = {"c8_long": A.ATTN_LONG[8], "c4_long": A.ATTN_LONG[4], "c8": A.ATTN_CLUSTER[8], "c4": A.ATTN_CLUSTER[4]}
    res = {"method": "plain launches, CUDA-graph replay of one launch per rotated copy (>= 16, past 4x L2), CUDA events, "
                     "median of 7 replays (netra.lifecycle.bench.graph_time); the trace: eager launches of the traced "
                     "build, %globaltimer ns", "cases": {}}
    trace_buf = torch.zeros(16384, 4, dtype=torch.int32, device="cuda")
    keep = []
    gos, tgos = {}, {}
    for key, k in contracts.items():
        ptx = paths.ptx_path("sm_90a", "attention", k.name).read_text()
        for sm in smems:
            kc = dataclasses.replace(k, dynamic_smem=sm)
            mod, fn = loader.load_text(k.name, ptx, dynamic_smem=sm)
            tmod, tfn = loader.load_text(k.name, trace_ptx(ptx, trace_buf.data_ptr(), phases), dynamic_smem=sm)
            keep += [mod, tmod]
            gos[key, sm] = rt_launch.make_guard_and_launch(kc, function_handle=int(fn), device=0)
            tgos[key, sm] = rt_launch.make_guard_and_launch(kc, function_handle=int(tfn), device=0)
    for key, B, NP, S in cases:
        k = contracts[key]
        tb = testbeds.get(k.name)
        C = int(k.grid[0].split()[0])
        dims = {"B": B, "NP": NP, "P": B * NP + 3, "T": NP * A.PAGE}
        if S:
            dims["S"] = S
        base, ins, outs = sweep.rotated_case(tb, k, dims)
        extra = {}
        if S:
            extra = {"ws": torch.zeros(B, A.KV_HEADS, S, A.PART, device="cuda"),
                     "counters": torch.zeros(B, A.KV_HEADS, C, dtype=torch.int32, device="cuda")}
        row = {"copies": len(ins), "kv_bytes": B * NP * A.PAGE * A.KV_HEADS * A.HEAD_DIM * 4}
        ref = None
        ctas = C * (S or 1) * A.KV_HEADS * B
        for sm in smems:
            go = gos[key, sm]
            if not phases:
                us = sweep.graph_us(go, tb, ins, outs, extra)
                row[f"smem{sm // KB}_us"] = us
                row[f"smem{sm // KB}_TBps"] = row["kv_bytes"] / us / 1e6
            base.reset()
            bufs = {**base.bufs, **extra}
            assert go(*tb.args(bufs)) is None
            torch.cuda.synchronize()
            if ref is None:
                ref = bufs["out"].clone()
            else:
                row[f"smem{sm // KB}_bitwise"] = torch.equal(bufs["out"], ref)
            tr = []
            for _ in range(5):
                trace_buf.zero_()
                assert tgos[key, sm](*tb.args(bufs)) is None
                torch.cuda.synchronize()
                tr.append(summarize(trace_buf, ctas, phases))
            row[f"smem{sm // KB}_trace"] = tr
            if S:
                assert not extra["counters"].any()
        res["cases"][f"{key} B={B} NP={NP} S={S}"] = row
        print(key, B, NP, S, {kk: (round(v, 2) if isinstance(v, float) else v) for kk, v in row.items()
                              if not kk.endswith("trace")}, flush=True)
        for sm in smems:
            t = row[f"smem{sm // KB}_trace"][-1]
            print("   ", sm // KB, "KB trace:", t, flush=True)
        del ins, outs, base
        bench.release()
        json.dump(res, open(os.path.join(out_dir, "long_place_phases.json" if phases else "long_place.json"), "w"),
                  indent=1)
    del keep


if __name__ == "__main__":
    main()
