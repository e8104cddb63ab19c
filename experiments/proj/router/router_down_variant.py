"""moe_down as a third phase of the router-fused launch at M = 1 (`Fp8Gemv.down`, a candidate):
`fp8_gemv_n1024_k2048_moe_shared_router_down` against the promoted pair `fp8_gemv_n1024_k2048_moe_shared_router`
then `fp8_gemv_n2048_k4608_moedown`.

Why: at batch 1 the MoE block is the largest gap of the step to the roofline (the 46a8559 / 3413de0 profiles: 11.1
+ 6.0 us per layer for 28.3 MB, 6.5 us at 4.33 TB/s). moe_down cannot request its weights before its wait (the ids
are the previous kernel's output) and no CTA of it can start beside the router-fused grid (which holds every
register file), so its 9.4 MB leave DRAM only after that grid has ended. Here each CTA s < 128 requests its 16-row
strip of the 9 experts' down weights (72 KB) right after the selection, behind its first gate | up chunks; a second
grid barrier after gate | up (the gate | up rows are other CTAs' outputs); then moe_act's and the grouped down
kernel's arithmetic on token 0 from shared memory (gen_fp8_gemv.down_phase). The same arithmetic as the pair, so
every output should be bitwise theirs.

Prediction: the launch gains the down weights' 9.4 MB at the marginal rate of the router-fused launch (M = 1 -> 2
added 18.8 MB for 3.7 us: ~1.9 us), the barrier (~1 us) and ~1.3 us of act, mma and the finish, against moe_down's
5.3-5.8 us: ~1-2 us less per layer, 40-80 us per batch-1 step (plain and PDL alike).

Checks (M = 1, 3 seeds, the router-fused test bed plus the moe_down bed's down weights): every output of the fused
launch (x_out, idx, top, logits, the gate | up rows, sout, gate_out, h, moe_out) bitwise the pair's, plain and PDL
(both cooperative), eager and in a CUDA graph; the counter + 264 per launch.
Step (batch 1, as experiments/decode/step_ab.py): current, fused, current again; plain and PDL; logits bitwise.

  PYTHONPATH=src python3 experiments/proj/router/router_down_variant.py --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def fused_kernel(issue: str = "select", diag: str = "", trace: bool = False, sync: str = "barrier", sdn: str = ""):
    """(shape, contract, launchers {plain, pdl}, module) of the candidate (gen_fp8_gemv._DOWN's options)."""
    from netra import contracts, paths
    from netra.contracts import Tensor
    from netra.contracts.proj import EXPERTS_ROUTER, SMS
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    sh = dataclasses.replace(EXPERTS_ROUTER, down=True)
    gen = paths.generator("proj", "gen_fp8_gemv")
    saved = dict(gen._DOWN)
    gen._DOWN.update(issue=issue, diag=diag, trace=trace, sync=sync, sdn=sdn)
    try:
        ptx = gen.generate(sh)
        smem = gen.dn_smem(sh)
    finally:
        gen._DOWN.update(saved)
    module, fn = loader.load_text(sh.name, ptx, dynamic_smem=smem)
    c0 = contracts.get(EXPERTS_ROUTER.name)
    params = tuple(dataclasses.replace(p, role="inout") if p.name == "h" else p for p in c0.params) + (
        Tensor("w2", "fp8e4m3", ("E", 128, 4, 2048), "in"),
        Tensor("s2", "f32", ("E", 16, 4), "in", align=4),
        Tensor("sw2", "fp8e4m3", (128, 4, 2048), "in"),
        Tensor("ss2", "f32", (16, 4), "in", align=4),
        Tensor("moe_out", "bf16", ("M", 2048), "out"),
    ) + ((Tensor("cnt", "i32", (16,), "inout", align=64),) if sync == "pairs" else ())
    c = dataclasses.replace(c0, name=sh.name, params=params, dims={"M": (1,), "E": (256,)}, dynamic_smem=smem)
    assert c.grid == (str(SMS), "1", "1")
    mk = lambda pdl: rt_launch.make_guard_and_launch(  # noqa: E731
        c, function_handle=int(fn), device=0, launch=rt_launch.ex_launcher(pdl=pdl, cooperative=True))
    return sh, c, {"plain": mk(False), "pdl": mk(True)}, module


def check(forms, res, sync: str = "barrier") -> bool:
    from netra.contracts.proj import EXPERTS_ROUTER, MOE_DOWN
    from netra.decode import ops as dops
    from netra.lifecycle import check as lcheck
    from netra.lifecycle import testbeds
    from netra.ops import count_launches
    from netra.ops import proj as oproj

    tb, tbd = testbeds.get(EXPERTS_ROUTER.name), testbeds.get(MOE_DOWN.name)
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    cnt = torch.zeros(16, dtype=torch.int32, device="cuda")  # the pairs' counters: zero at allocation, never reset
    ok = True
    for seed in range(3):
        b = lcheck.Bench(tb, {"M": 1, "E": 256}, seed)
        d = lcheck.Bench(tbd, {"M": 1, "E": 256}, seed)
        w2, s2, sw2, ss2 = d.bufs["w"], d.bufs["scale"], d.bufs["ws"], d.bufs["ss"]
        h0 = b.bufs["h"].clone()
        # the pair, as moe_decode runs it at M = 1
        b.reset()
        b.bufs["h"].copy_(h0)
        pair_out = torch.full((1, 2048), float("nan"), dtype=torch.bfloat16, device="cuda")
        args = tb.args(b.bufs)
        with count_launches() as n:
            assert oproj.EXPERTS_ROUTER_KERNEL(*args), "the promoted router-fused kernel did not launch"
            dops.moe_down(b.bufs["out"].view(1, -1), w2, s2, b.bufs["idx"], b.bufs["top"], b.bufs["sout"], sw2, ss2,
                          b.bufs["gate_out"], b.bufs["h"], pair_out)
        torch.cuda.synchronize()
        assert n.get(MOE_DOWN.name) == 1, f"moe_down did not take its kernel: {dict(n)}"
        want = {k: b.bufs[k].clone() for k in ("x_out", "idx", "top", "logits", "out", "sout", "gate_out", "h")}
        want["moe_out"] = pair_out.clone()
        bar_before = int(b.bufs["bar"].item())
        row = {}
        for name, go in forms.items():
            for graph in (False, True):
                b.reset()
                b.bufs["h"].copy_(h0)
                b.bufs["bar"].fill_(bar_before)
                moe_out = torch.full((1, 2048), float("nan"), dtype=torch.bfloat16, device="cuda")
                args_f = tb.args(b.bufs) + [w2, s2, sw2, ss2, moe_out] + ([cnt] if sync == "pairs" else [])
                cnt_before = cnt.clone()
                if graph:
                    s = torch.cuda.Stream()
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, stream=s):
                        r = go(*args_f)
                    b.reset()
                    b.bufs["h"].copy_(h0)
                    b.bufs["bar"].fill_(bar_before)
                    moe_out.fill_(float("nan"))
                    g.replay()
                else:
                    r = go(*args_f)
                torch.cuda.synchronize()
                got = {k: b.bufs[k] for k in want if k != "moe_out"}
                got["moe_out"] = moe_out
                diff = [k for k in want if not torch.equal(bits(got[k]), bits(want[k]))]
                tag = f"{name}{' graph' if graph else ''}"
                row[tag] = {"launched": r is None, "bitwise": not diff, "differ": diff,
                            "bar_added": int(b.bufs["bar"].item()) - bar_before}
                if sync == "pairs":  # one grid barrier; each pair's counter + its 64 strips, the gate logit's + 1
                    row[tag]["cnt_added"] = (cnt - cnt_before).tolist()
                    ok &= row[tag]["cnt_added"] == [64] * 9 + [1] + [0] * 6
                ok &= r is None and not diff and row[tag]["bar_added"] == (264 if sync == "barrier" else 132)
        res["correctness"][f"seed={seed}"] = row
        print("check", seed, row, flush=True)
    return ok


def trace(opts, names, res):
    """The traced builds (gen_fp8_gemv.dn_stamp): %clock64 of thread 0 of CTAs 0, 64 and 127 at the kernel's wait (7),
    the router phase's end (6), the down phase's start (0), the second barrier passed (1), act done (2), the
    strips landed (3), the mma done (4), the rows stored (5); launched plainly 8 times on the router bed at M = 1
    (the last 4 kept), cycles from the wait."""
    from netra.contracts.proj import EXPERTS_ROUTER, MOE_DOWN
    from netra.lifecycle import check as lcheck
    from netra.lifecycle import testbeds

    tb, tbd = testbeds.get(EXPERTS_ROUTER.name), testbeds.get(MOE_DOWN.name)
    b = lcheck.Bench(tb, {"M": 1, "E": 256}, 0)
    d = lcheck.Bench(tbd, {"M": 1, "E": 256}, 0)
    moe_out = torch.empty(1, 2048, dtype=torch.bfloat16, device="cuda")
    cnt = torch.zeros(16, dtype=torch.int32, device="cuda")

    def launch(forms, pairs=False):
        b.reset()
        r = forms["plain"](*tb.args(b.bufs), d.bufs["w"], d.bufs["scale"], d.bufs["ws"], d.bufs["ss"], moe_out,
                           *((cnt,) if pairs else ()))
        assert r is None, r
        torch.cuda.synchronize()

    order = (7, 6, 0, 1, 2, 3, 4, 5)
    labels = ("wait", "router_done", "down_start", "barrier2", "act", "landed", "mma", "stored")
    for n in names:
        if opts[n].get("sync") in ("pairs", "tags"):  # its trace: "all" only (gate_up: the walk; tasks: to their end)
            _, _, forms, module = fused_kernel(**opts[n], trace="all")
            per = []
            for it in range(6):
                launch(forms, pairs=opts[n]["sync"] == "pairs")
                t = b.bufs["x_out"].view(torch.int32).view(-1)
                if it >= 3:
                    per.append({"gate_up": t[:128].tolist(), "tasks": t[256:384].tolist()}
                               | ({"rows_ready": t[660:788].tolist(), "strips_landed": t[800:928].tolist()}
                                  if opts[n]["sync"] == "tags" else {}))
            res["trace"][n + "_per_cta"] = per
            print("per-CTA", n, {k: (min(v), sorted(v)[len(v) // 2], max(v)) for k, v in per[-1].items()}, flush=True)
            del module
            continue
        _, _, forms, module = fused_kernel(**opts[n], trace=True)
        runs = []
        for it in range(8):
            launch(forms)
            t = b.bufs["logits"].view(torch.int64).view(-1)[:24].tolist()
            if it >= 4:
                runs.append({f"cta{c}": {lab: t[8 * k + i] - t[8 * k + 7] for lab, i in zip(labels, order)}
                             for k, c in enumerate((0, 64, 127))})
        res["trace"][n] = runs
        print("trace", n, runs[-1], flush=True)
        del module
        # every CTA: cycles from the router phase's end to the down phase (its gate | up strips), and waiting at the
        # second barrier (gen_fp8_gemv.dn_stamp_all, in x_out)
        _, _, forms, module = fused_kernel(**opts[n], trace="all")
        per = []
        for it in range(6):
            launch(forms)
            t = b.bufs["x_out"].view(torch.int32).view(-1)
            if it >= 3:
                per.append({"gate_up": t[:132].tolist(), "barrier2": t[256:388].tolist()})
        res["trace"][n + "_per_cta"] = per
        g = per[-1]["gate_up"]
        print("per-CTA gate|up cycles", n, "min", min(g), "max", max(g), "argmax", g.index(max(g)),
              "by CTA:", g, flush=True)
        print("per-CTA", n, {k: (min(v[:128]), sorted(v[:128])[64], max(v[:128])) for k, v in per[-1].items()}, flush=True)
        del module


def step_ab(variants, res, syncs=None):
    from netra import paths
    from netra.decode import ops as dops
    from netra.model import checkpoint as ck
    from netra.model.config import QWEN36_35B_A3B
    from netra.model.packed import pack
    from netra.ops import _dispatch

    real = dops.moe_decode
    state = {"v": None}
    cnt = torch.zeros(16, dtype=torch.int32, device="cuda")  # the pairs builds' counters, one buffer for every layer

    def fused(x, router, w13, s13, w2, s2, sw13, ss13, sw2, ss2, sgate, top_k, out, residual=None, norm_w=None,
              eps=1e-6, bar=None):
        B = x.shape[0]
        if B != 1 or bar is None or norm_w is None or residual is None or w13.dim() != 4 or w2.dim() != 4:
            return real(x, router, w13, s13, w2, s2, sw13, ss13, sw2, ss2, sgate, top_k, out, residual, norm_w, eps, bar)
        top = torch.empty(B, top_k, dtype=x.dtype, device=x.device)
        idx = torch.empty(B, top_k, dtype=torch.long, device=x.device)
        gu = torch.empty(B, top_k, s13.shape[1] * 128, dtype=x.dtype, device=x.device)
        sgu = torch.empty(B, ss13.shape[0] * 128, dtype=x.dtype, device=x.device)
        glogit = torch.empty(B, 1, dtype=x.dtype, device=x.device)
        logits = torch.empty(B, router.shape[0], dtype=torch.float32, device=x.device)
        go = variants[state["v"]]["pdl" if _dispatch._PDL else "plain"]
        extra = (cnt,) if (syncs or {}).get(state["v"]) == "pairs" else ()
        r = go(x, w13, s13, gu, idx, sw13, ss13, sgu, sgate, glogit, residual, norm_w, eps, router, top, logits, bar,
               w2, s2, sw2, ss2, out, *extra)
        assert r is None, f"the fused kernel refused: {r}"

    step_ab = paths.load_module(HERE.parents[1] / "decode" / "step_ab.py", "step_ab")
    packed = pack(ck.synthetic_checkpoint(QWEN36_35B_A3B, seed=0, device="cuda"))
    tokens = torch.randint(0, QWEN36_35B_A3B.vocab_size, (4, 1), generator=torch.Generator().manual_seed(3)).to("cuda")
    ref = None
    for form in ("current", *variants, "current_again"):
        state["v"] = form
        dops.moe_decode = fused if form in variants else real
        row = {}
        try:
            ref = step_ab.time_step(packed, 1, 1024, tokens, ref, row)
        finally:
            dops.moe_decode = real
        res["step"][form] = row
        print("step", form, row, flush=True)


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    out = os.path.join(out_dir, "router_down_variant.json")
    names = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--variants=")), "fused").replace("+", ",").split(",")
    opts = {"fused": dict(issue="select", sync="barrier"), "late": dict(issue="late", sync="barrier"),
            "mid": dict(issue="mid", sync="barrier"), "nocompute": dict(issue="select", diag="nocompute", sync="barrier"),
            "late_nocompute": dict(issue="late", diag="nocompute", sync="barrier"),
            # no second grid barrier: per-pair counters (gen_fp8_gemv.down_phase_pairs)
            "pairs": dict(issue="select", sync="pairs"), "pairs_mid": dict(issue="mid", sync="pairs"),
            "pairs_late": dict(issue="late", sync="pairs"),
            # diagnostics of the pairs build (not valid: gen_fp8_gemv.pair_signal): the walk's signals without their
            # fence; every signal at the walk's end
            "pairs_mid_nofence": dict(issue="mid", sync="pairs", diag="nofence"),
            "pairs_mid_endsig": dict(issue="mid", sync="pairs", diag="endsig"),
            # no counters: the rows are their own flags (poisoned before the barrier, spun on by the tasks)
            "tags": dict(issue="select", sync="tags"), "tags_mid": dict(issue="mid", sync="tags"),
            "tags_late": dict(issue="late", sync="tags"),
            # the shared expert's down strip requested before the wait (it never depends on the router)
            "tags_late_sdn": dict(issue="late", sync="tags", sdn="early"),
            # the two walk lengths at different sites (gen_fp8_gemv.dn_when: CTAs with one strip less at the first,
            # those with one more at the second)
            **{f"tags_split_{a}_{b}": dict(issue=f"{a}/{b}", sync="tags")
               for a in ("select", "mid", "late") for b in ("select", "mid", "late") if a != b},
            # the same builds timed a second time in one run (the step's spread between forms is ~5-10 us)
            "tags_late_again": dict(issue="late", sync="tags"), "tags_split_late_mid_again": dict(issue="late/mid", sync="tags")}
    built = {n: fused_kernel(**opts[n]) for n in names}
    sh, c, forms, module = built[names[0]]
    res = {"kernel": sh.name, "dynamic_smem": {n: int(built[n][1].dynamic_smem) for n in names}, "variants": {n: opts[n] for n in names},
           "method": "checks: bitwise against the promoted pair on the router-fused and moe_down test beds; step: "
                     "batch 1, synthetic 40-layer checkpoint, context 1024, CUDA-graph replay of one step, CUDA "
                     "events, median of 64, plain and PDL capture",
           "correctness": {}, "step": {}}
    if "--trace" in sys.argv:
        res["trace"] = {}
        trace(opts, names, res)
    res["pass"] = True
    for n in names:  # the diagnostics' outputs are wrong by design
        if opts[n].get("diag") in (None, "nofence", "endsig"):  # these two should still give the pair's bits
            res["correctness"][n] = {}
            sub = {"correctness": {}}
            res["pass"] &= check(built[n][2], sub, opts[n].get("sync", "barrier"))
            res["correctness"][n] = sub["correctness"]
    json.dump(res, open(out, "w"), indent=1)
    if (res["pass"] or "--step-anyway" in sys.argv) and "--no-step" not in sys.argv:
        step_ab({n: built[n][2] for n in names}, res, {n: opts[n].get("sync", "barrier") for n in names})
    json.dump(res, open(out, "w"), indent=1)
    del module, built


if __name__ == "__main__":
    main()
