"""Later kernels' weights asked of L2 from a side stream of the captured decode step (a candidate).

Why: at batch 1 every kernel of the step streams its own weights after its launch, at 40-70% of the
read roofline (`docs/notes/bars.md`), and DRAM idles through the launch gaps, the prologues, the
router phase of the MoE launch, GDN's recurrence and attention's framework path. The attempts to
request weights earlier from inside the chain were slower: each projection prefetching its own later
strips (`l2_prefetch`, experiments/proj/README.md) and a prefetch launch between the router and the
expert kernels (`moe_prefetch`): in both the chain waited for the prefetch. Here a small kernel
(`l2_ahead.ptx`, hand-written) runs on a side stream forked from the capture stream, so nothing on the
main chain waits for it but the step's end (one join before the final norm).

Fork points (the side kernel starts when the main kernel before the point has completed):
- A: after the mixer's input projection (GDN in_proj_qkv | z | b | a, attention q | k | v): this
  layer's out_proj / o_proj weights and scales (8.4 MB), read two kernels later;
- C: after out_proj / o_proj: the next layer's input projection (19-25 MB), read after the MoE block;
- D: after the MoE router-fused launch, before moe_down (batch <= 4; the op's moe_down is wrapped):
  the next layer's input projection.
Forms: current, lines_A, lines_D, lines_AD, lines_AC, bulk_AD, current_again (`lines`: one
prefetch.global.L2 per 128-byte line; `bulk`: cp.async.bulk.prefetch.L2 per 4 KB).

Prediction (batch 1): out_proj / o_proj from L2 ~4.6 -> 2.5-3 us, the input projection 8.7 -> 5-6
us, if the side CTAs find room (most main kernels hold the whole register file: 512 threads x 128
registers) and the prefetch traffic does not slow the kernels beside it by as much: 40-150 us less per
step for lines_AD; the wrong sign if either fails. Logits bitwise (a prefetch changes no bits).

Measured (batch 1, ms plain / PDL, logits bitwise every time; rejected):
- 3b1d429 (`l2_ahead_b1_3b1d429.json`): current 2.088 / 1.983 and 2.091 / 1.988; lines_A 2.140 / 1.984; lines_D
  2.284 / 2.193; lines_AD 2.334 / 2.454; lines_AC 2.440 / 2.449; bulk_AD 2.308 / 2.635.
- 8c08c68 (`l2_ahead_b1_8c08c68.json`), the same forks and launches asking L2 for nothing: current 2.070 / 1.972
  and 2.088 / 1.983; empty_D 2.090 / 1.974; empty_AD 2.100 / 1.981; again at eb42c19 (`l2_ahead_b1_eb42c19.json`,
  after the script's review): current 2.081 / 1.980, empty_D 2.108 / 2.001.
So the side branch itself costs 0-30 us per step; what costs 50-650 us is the prefetching: the bytes asked for
during the MoE block (D, C) slow it far more than the next input projection gains from L2, and the out_proj bytes
asked for during gdn_decode / attention (A) gain nothing with PDL and lose 52 us plainly.

Usage: PYTHONPATH=src python experiments/decode/l2_ahead.py [--batch=B] [--out DIR] [forms...]
Method as step_ab.py: synthetic 40-layer checkpoint, context 1024, CUDA-graph replay of one step,
CUDA events, median of 64, plain and PDL capture; logits of 4 teacher-forced steps against current."""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
FORMS = ("current", "lines_A", "lines_D", "lines_AD", "lines_AC", "bulk_AD", "empty_AD", "empty_D", "current_again")
GRID_X = 66  # CTAs per range (128 threads each)


class Ahead:
    """Forks the side stream off the current (capture) stream and launches one l2_ahead kernel on it."""

    def __init__(self, entry: str):
        from netra.runtime import loader

        self.empty = entry == "l2_ahead_empty"
        entry = "l2_ahead_lines" if self.empty else entry
        self.module, self.fn = loader.load_text(entry, (HERE / "l2_ahead.ptx").read_text())  # keep the module alive
        self.side = None
        self.args = (ctypes.c_uint64 * 8)()
        self.ptrs = (ctypes.c_void_p * 8)(*[ctypes.addressof(self.args) + 8 * i for i in range(8)])
        self.launches = 0

    def fork(self, tensors):
        from cuda.bindings import driver as cu

        ranges = []
        for t in tensors:
            if not t.is_contiguous():
                raise ValueError(f"l2_ahead: contiguous tensors expected, got strides {t.stride()}")
            n = t.numel() * t.element_size() // 16 * 16  # bulk sizes are multiples of 16 (a prefetch is only a hint)
            if n and t.data_ptr() % 16 == 0:
                ranges.append((t.data_ptr(), n))
        if self.empty:  # a diagnosis: the same fork and launch, nothing asked of L2
            ranges = [(0, 0)]
        if not ranges:
            return
        if len(ranges) > 4:
            raise ValueError(f"l2_ahead: at most 4 ranges, got {len(ranges)}")
        for i in range(4):
            p, n = ranges[i] if i < len(ranges) else (0, 0)
            self.args[2 * i], self.args[2 * i + 1] = p, n
        main = torch.cuda.current_stream()
        if self.side is None:
            self.side = torch.cuda.Stream()
        self.side.wait_stream(main)
        err = int(cu.cuLaunchKernel(self.fn, GRID_X, len(ranges), 1, 128, 1, 1, 0, self.side.cuda_stream,
                                    ctypes.addressof(self.ptrs), 0)[0])
        assert err == 0, f"l2_ahead launch: CUresult {err}"
        self.launches += 1

    def join(self):
        if self.side is not None:
            torch.cuda.current_stream().wait_stream(self.side)


def install(form: str, rmod, dops, nops):
    """Wraps the runner's ops for ``form``; returns (ahead, restore)."""
    if form.startswith("current"):
        return None, lambda: None
    mode, points = form.split("_")
    ahead = Ahead("l2_ahead_" + mode)
    real = {n: getattr(dops, n) for n in ("fp8_linear_norm_ba", "fp8_linear_norm", "fp8_linear_add", "moe_down")}
    real_rmsnorm = nops.rmsnorm
    real_mixer = rmod.DecodeRunner._mixer
    state = {"runner": None, "L": 0}

    def in_weights(L):
        r = state["runner"]
        if L >= len(r.layers):
            return []
        lw = r.layers[L]
        if "qkvz" in lw:
            return [lw["qkvz"][0], lw["qkvz"][1], lw["b"], lw["a"]]
        return [lw["qkv_attn"][0], lw["qkv_attn"][1], lw["in_norm"]]

    def out_weights(L):
        lw = state["runner"].layers[L]
        return list(lw["out"] if "out" in lw else lw["o"])

    def mixer(self, L, lw):
        state["runner"], state["L"] = self, L
        return real_mixer(self, L, lw)

    def after(name, point, what):
        fn = real[name]

        def wrapped(*a, **k):
            r = fn(*a, **k)
            if point in points:
                ahead.fork(what(state["L"]))
            return r
        return wrapped

    def down_first(*a, **k):
        if "D" in points:
            ahead.fork(in_weights(state["L"] + 1))
        return real["moe_down"](*a, **k)

    def rmsnorm(*a, **k):
        ahead.join()
        return real_rmsnorm(*a, **k)

    rmod.DecodeRunner._mixer = mixer
    dops.fp8_linear_norm_ba = after("fp8_linear_norm_ba", "A", out_weights)
    dops.fp8_linear_norm = after("fp8_linear_norm", "A", out_weights)
    dops.fp8_linear_add = after("fp8_linear_add", "C", lambda L: in_weights(L + 1))
    dops.moe_down = down_first
    nops.rmsnorm = rmsnorm

    def restore():
        rmod.DecodeRunner._mixer = real_mixer
        for n, f in real.items():
            setattr(dops, n, f)
        nops.rmsnorm = real_rmsnorm
    return ahead, restore


def main():
    import netra.ops as nops
    from netra import paths
    from netra.decode import ops as dops
    from netra.decode import runner as rmod
    from netra.model import checkpoint as ck
    from netra.model.config import QWEN36_35B_A3B
    from netra.model.packed import pack

    step_ab = paths.load_module(HERE / "step_ab.py", "step_ab")
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    B = int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--batch=")), 1))
    context, steps = 1024, 64
    cfg = QWEN36_35B_A3B
    packed = pack(ck.synthetic_checkpoint(cfg, seed=0, device="cuda"))
    tokens = torch.randint(0, cfg.vocab_size, (4, B), generator=torch.Generator().manual_seed(3)).to("cuda")
    forms = [a for a in sys.argv[1:] if a in FORMS] or list(FORMS)
    res = {"method": f"batch {B}, synthetic 40-layer checkpoint, context {context}; CUDA-graph replay of one step, "
                     f"CUDA events, median of {steps} (netra.decode.main._time_replays), plain and PDL capture; "
                     "logits of 4 teacher-forced steps compared bitwise with the current plain form's",
           "grid_x": GRID_X, "forms": {}}
    ref = None
    for form in forms:
        row = {}
        ahead, restore = install(form, rmod, dops, nops)
        try:
            ref = step_ab.time_step(packed, B, context, tokens, ref, row, steps)
            if ahead is not None:
                row["side_launches_per_capture"] = ahead.launches // 4  # warm-up and capture, plain and PDL
        finally:
            restore()
        res["forms"][form] = row
        print(form, row, flush=True)
        json.dump(res, open(os.path.join(out_dir, f"l2_ahead_b{B}.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
