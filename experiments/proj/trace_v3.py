"""Where do the promoted fp8_gemv (v3) kernel's microseconds go? A timeline from inside.

The promoted PTX (generated, checked equal to the committed file) gets one extra parameter,
`trace`, and thread 0 of every CTA stamps (st.global.u64, 32 slots of 8 B per CTA):
  0 %globaltimer at entry, 1 %globaltimer before ret, 2 %clock64 at entry, 3 after the
  mbarrier init, the first chunks' bulk copies and the first bar.sync (griddepcontrol.wait),
  4 after the x prologue (thread 0's own fragments converted), 5 before ret, 6 %smid,
  8 + 2 j: strip j's first chunk has landed (warp 0 leaves its mbarrier wait),
  9 + 2 j: every warp has stored strip j's partials (after the per-strip bar.sync).
Nothing else changes, so the output must stay bitwise the promoted kernel's (checked).

Launched the bench's way (one CUDA graph of C launches over C copies past 4x the L2, each
launch its own trace rows, replayed; median of 7 replays for the time) plainly and as a
chain of PDL launches. From the stamps of the last replay: the gap between one launch's
last CTA end and the next launch's first CTA start, the spread of CTA starts, the latency
of the first chunk, the spacing of the chunks, and the tail after the last chunk; clock64
is turned into ns with each SM's own rate over the whole replay.

``--m89``: only 4096 x 2048 and 2048 x 4096, at M = 1, 8, 9, 16 (where does the M = 9 jump go).
``--t32``: the 32-token dense builds (netra.contracts.proj.DENSE32: one body of 4 n-tiles, labels _M32) at M = 1, 16
and 32, beside the 16-token 12288 x 2048 at M = 1 and 16 (where do the 32-token builds' microseconds go).

  python3 experiments/proj/trace_v3.py [--build v3|v3c|v3d|v3e|v3f|v3g] [--m89 | --t32] --out "$OUT"     (on the H200, PYTHONPATH=src)
"""

import ctypes
import inspect
import json
import math
import os
import statistics
import sys
from pathlib import Path

import torch
from cuda.bindings import driver as cu

from netra import paths
from netra.contracts.proj import DENSE32, SHAPES
from netra.lifecycle import bench, check, testbeds
from netra.runtime import launch as rt_launch
from netra.runtime import loader
from netra.runtime.driver import check as check_cu

SLOTS = 32
# --build NAME: a candidate of the generator instead (proj_variant.py's list)
BUILDS = {"promoted": {}, **paths.load_module(Path(__file__).resolve().parent / "proj_variant.py", "proj_variant").V3_BUILDS}
NAMES = ("fp8_gemv_n12288_k2048", "fp8_gemv_n4096_k2048", "fp8_gemv_n2048_k4096", "fp8_gemv_n2048_k512")


def stamp(kind: str, slot: str) -> str:
    """Thread 0 stores %globaltimer or %clock64 at byte offset ``slot`` (an immediate, or a
    register holding the offset) of this CTA's trace row."""
    src = "%globaltimer" if kind == "gt" else "%clock64"
    if slot.startswith("%"):
        return (f"  mov.u64 %trc, {src};\n  cvt.u64.u32 %tra, {slot};\n  add.u64 %tra, %tra, %trp;\n"
                f"  @%ptr st.global.u64 [%tra], %trc;\n")
    return f"  mov.u64 %trc, {src};\n  @%ptr st.global.u64 [%trp+{slot}], %trc;\n"


def trace_text(sh, build: str = "promoted") -> str:
    gen = paths.generator("proj", "gen_fp8_gemv")
    src = gen.generate(sh, **BUILDS[build])
    if build == "promoted":
        assert src == paths.ptx_path("sm_90a", "proj", sh.name).read_text(), f"{sh.name}: generator and committed PTX differ"
    split = BUILDS[build].get("split_m8", inspect.signature(gen.generate).parameters["split_m8"].default)
    once, body = 1, 2 if split and sh.tokens != 32 else 1  # split_m8 (the promoted default since v3g): the strip loop
    # twice (labels _M8); the 32-token builds have one body (labels _M32)
    # (anchor lines, lines inserted before, lines inserted after, expected matches); the anchors stay
    edits = [
        ("  .reg .b64 %px, %pw, %ps, %po, %pa, %pb, %pt64, %pol;", "",
         "  .reg .b64 %trp, %trc, %tra;\n  .reg .b32 %trn, %tro;\n  .reg .pred %ptr;", once),
        ("  and.b32 %tig, %lane, 3;", "",
         "  ld.param.u64 %trp, [trace];\n  cvta.to.global.u64 %trp, %trp;\n"
         f"  mov.u32 %tro, %ctaid.x;\n  mul.wide.u32 %trc, %tro, {8 * SLOTS};\n  add.u64 %trp, %trp, %trc;\n"
         "  setp.eq.u32 %ptr, %th, 0;\n" + stamp("gt", "0") + stamp("clk", "16")
         + "  mov.u32 %tro, %smid;\n  cvt.u64.u32 %trc, %tro;\n  @%ptr st.global.u64 [%trp+48], %trc;", once),
        ("  griddepcontrol.wait;", "", stamp("clk", "24"), once),
        ("  mov.u32 %buf, 0;\nSTRIP:", stamp("clk", "32") + "  mov.u32 %trn, 0;", "", body),
        ("  @!%p bra WAIT0;", "", "  min.u32 %tro, %trn, 11;\n  mad.lo.u32 %tro, %tro, 16, 64;\n" + stamp("clk", "%tro"), body),
        ("  bar.sync 0;\n  // every warp is done with this strip's stages", "",
         "  min.u32 %tro, %trn, 11;\n  mad.lo.u32 %tro, %tro, 16, 72;\n" + stamp("clk", "%tro"), body),
        ("  xor.b32 %buf, %buf, 1;", "  add.u32 %trn, %trn, 1;", "", body),
        ("  ret;", stamp("gt", "8") + stamp("clk", "40"), "", body),
    ]
    src = src.replace("  .param .u32 M\n  )", "  .param .u32 M,\n    .param .u64 trace\n  )")
    assert "[trace]" not in src and ".param .u64 trace" in src, f"{sh.name}: the entry's parameter list changed"
    lines = src.splitlines()

    def key(x: str) -> str:  # matched line by line: indentation, comments and the _M8 label suffix ignored
        return x.split("//")[0].strip().replace("_M8", "").replace("_M32", "")

    for anchor, before, after, count in edits:
        a = [key(x) for x in anchor.splitlines()]
        hits = [i for i in range(len(lines)) if [key(x) for x in lines[i:i + len(a)]] == a]
        assert len(hits) == count, f"{sh.name}: expected {count} of {anchor!r} in the PTX, found {len(hits)}"
        for i in reversed(hits):  # the anchor's first line gets `before` above it, its first line `after` below it
            ins_b = ["    " + x.strip() for x in before.strip("\n").splitlines()] if before else []
            ins_a = ["    " + x.strip() for x in after.strip("\n").splitlines()] if after else []
            lines[i:i + 1] = ins_b + [lines[i]] + ins_a
    return "\n".join(lines) + "\n"


class Launcher:
    """cuLaunchKernel / cuLaunchKernelEx (PDL) of the traced kernel on the current stream."""

    def __init__(self, fn, sh, pdl: bool):
        self.fn, self.sh = fn, sh
        self.vals = [ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint32(),
                     ctypes.c_uint64()]
        self.ptrs = (ctypes.c_void_p * 6)(*[ctypes.addressof(v) for v in self.vals])
        self.pdl = rt_launch.pdl_launcher() if pdl else None

    def __call__(self, x, w, scale, out, M, trace):
        for v, a in zip(self.vals, (x, w, scale, out, M, trace)):
            v.value = a
        sh, stream = self.sh, torch.cuda.current_stream().cuda_stream
        geo = (sh.grid, 1, 1, sh.threads, 1, 1, sh.smem, stream, ctypes.addressof(self.ptrs), 0)
        if self.pdl is not None:
            err = self.pdl(self.fn, *geo)
            assert err == 0, f"cuLaunchKernelEx: {err}"
        else:
            check_cu(cu.cuLaunchKernel(self.fn, *geo), "cuLaunchKernel")


def analyse(tr, sh) -> dict:
    """tr: int64 [C, grid, SLOTS] of one replay."""
    C = tr.shape[0]
    t = tr.double()
    gs, ge, c0, smid = t[..., 0], t[..., 1], t[..., 2], tr[..., 6]
    # each SM's clock rate (cycles per ns) over the whole replay: first and last launch it ran a CTA of
    rate = {}
    for s in torch.unique(smid[1:]).tolist():
        m = smid == s
        idx = m.nonzero()
        a, b = idx[0], idx[-1]
        dc = t[b[0], b[1], 2] - t[a[0], a[1], 2]
        dg = gs[b[0], b[1]] - gs[a[0], a[1]]
        if dg > 0:
            rate[s] = float(dc / dg)
    r = torch.tensor([rate.get(int(s), float("nan")) for s in smid.flatten().tolist()], dtype=torch.float64).view(smid.shape)
    ns = lambda slot: (t[..., slot] - c0) / r  # noqa: E731  ns after the CTA's entry
    strips = [len(range(c, sh.S, sh.grid)) for c in range(sh.grid)]
    lo = max(1, C // 4)
    rows = range(lo, C)
    gap = [float(gs[i].min() - ge[i - 1].max()) for i in rows]
    period = [float(gs[i].min() - gs[i - 1].min()) for i in rows]
    span = [float(ge[i].max() - gs[i].min()) for i in rows]
    start_spread = [float(gs[i].max() - gs[i].min()) for i in rows]
    first = ns(8)[lo:]
    init, xdone, end = ns(3)[lo:], ns(4)[lo:], ns(5)[lo:]
    last_arrival = torch.stack([ns(8 + 2 * (n - 1))[lo:, c] for c, n in enumerate(strips)], 1)
    last_bar = torch.stack([ns(9 + 2 * (n - 1))[lo:, c] for c, n in enumerate(strips)], 1)
    spacing = []
    for c, n in enumerate(strips):
        for j in range(1, min(n, 12)):
            spacing.append(ns(8 + 2 * j)[lo:, c] - ns(8 + 2 * (j - 1))[lo:, c])
    q = lambda v: {p: float(torch.quantile(v.flatten().float(), p / 100)) for p in (10, 50, 90)}  # noqa: E731
    med = lambda v: statistics.median(v)  # noqa: E731
    return {
        "launches_analysed": len(rows),
        "sm_clock_ghz_median": statistics.median(rate.values()) if rate else None,
        "period_ns_median": med(period), "gap_ns_median": med(gap), "span_ns_median": med(span),
        "cta_start_spread_ns_median": med(start_spread),
        "cta_ns_after_entry": {
            "init_and_first_issue": q(init), "x_prologue_done": q(xdone), "first_chunk_landed": q(first),
            "chunk_spacing": q(torch.cat(spacing)) if spacing else None, "last_chunk_landed": q(last_arrival),
            "last_strip_partials_stored": q(last_bar), "end": q(end), "tail_after_last_chunk": q(end - last_arrival)},
        "strips_per_cta": {"max": max(strips), "min": min(strips)},
    }


def run_case(name: str, fn, M: int) -> dict:
    sh = next(s for s in SHAPES + DENSE32 if s.name == name)
    tb = testbeds.get(name)
    go = rt_launch.make_guard_and_launch(tb.contract, function_handle=loader.load(name, 0).handle, device=0)
    dims = {"M": M}
    nread, nwrite = tb.contract.nbytes(dims)
    copies = max(2, math.ceil(bench.ROTATE_BYTES / (nread + nwrite)))
    base = check.Bench(tb, dims, 5)
    base.reset()
    ins = [bench.replicate(base.inputs) for _ in range(copies)]
    outs = [tb.alloc_outputs(dims, "cuda") for _ in range(copies)]
    trace = torch.zeros(copies, sh.grid, SLOTS, dtype=torch.int64, device="cuda")
    row = {"copies": copies}
    # the traced build computes exactly what the promoted kernel computes
    outs[0]["out"].fill_(float("nan"))
    assert go(*tb.args({**ins[0], **outs[0]})) is None
    ref = outs[0]["out"].clone()
    outs[0]["out"].fill_(float("nan"))
    ptrs = [(i["x"].data_ptr(), i["w"].data_ptr(), i["scale"].data_ptr(), o["out"].data_ptr(), M, trace[k].data_ptr())
            for k, (i, o) in enumerate(zip(ins, outs))]
    Launcher(fn, sh, pdl=False)(*ptrs[0])
    torch.cuda.synchronize()
    row["bitwise_equal_to_promoted"] = bool(torch.equal(ref, outs[0]["out"]))
    args = [tb.args({**a, **b}) for a, b in zip(ins, outs)]
    row["promoted_us"], _ = bench.graph_time(lambda i: go(*args[i]), copies)
    for mode in ("plain", "pdl_chain"):
        lau = Launcher(fn, sh, pdl=mode == "pdl_chain")
        trace.zero_()
        t, _ = bench.graph_time(lambda i: lau(*ptrs[i]), copies)  # the stamps left are the last replay's
        tr = trace.cpu()
        a = analyse(tr, sh)
        a["traced_us"] = t
        a["raw_two_launches"] = tr[[copies // 2, copies // 2 + 1]].tolist()
        row[mode] = a
        print(name, dims, mode, f"{t:.2f} us (promoted {row['promoted_us']:.2f})",
              {k: (round(v, 3) if isinstance(v, float) else v) for k, v in a.items()
               if k.endswith("median") or k == "strips_per_cta"}, flush=True)
        print("   ", {k: {p: round(x) for p, x in v.items()} if v else None for k, v in a["cta_ns_after_entry"].items()},
              flush=True)
    return row


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    build = sys.argv[sys.argv.index("--build") + 1] if "--build" in sys.argv else "promoted"
    fns, keep = {}, []
    m89, t32 = "--m89" in sys.argv, "--t32" in sys.argv
    names = (("fp8_gemv_n4096_k2048", "fp8_gemv_n2048_k4096") if m89 else
             tuple(s.name for s in DENSE32) + ("fp8_gemv_n12288_k2048",) if t32 else NAMES)
    for name in names:
        sh = next(s for s in SHAPES + DENSE32 if s.name == name)
        module, fn = loader.load_text(name, trace_text(sh, build), dynamic_smem=sh.smem)
        keep.append(module)
        fns[name] = fn
    res = {"method": bench.METHOD.format(R=bench.REPLAYS) + "; stamps by thread 0 of each CTA, last replay", "build": build,
           "slots": __doc__.split("Launched")[0].split("CTA):")[1].strip(), "shapes": {}}
    for name in names:
        res["shapes"][name] = {}
        for M in (1, 8, 9, 16) if m89 else (1, 16, 32) if t32 and name.endswith("_t32") else (1, 16):
            res["shapes"][name][f"M{M}"] = run_case(name, fns[name], M)
            torch.cuda.empty_cache()
        out = ("trace_v3" if build == "promoted" else f"trace_{build}") + ("_m89" if m89 else "_t32" if t32 else "") + ".json"
        json.dump(res, open(os.path.join(out_dir, out), "w"),
                  indent=1)
    del keep


if __name__ == "__main__":
    main()
