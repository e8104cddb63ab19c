"""Why the decode PDL engine lost bitwise equality at a25401b (batch 1 and 8; batch 32 stayed
bitwise), and which GDN PDL build keeps it.

At a25401b the PDL engine launches bf16_linear2's PDL build and gdn_decode_b32_pdl (state
prefetched before griddepcontrol.wait, launch_dependents at once) besides the FP8 kernels; the
decode record's check (8 teacher-forced graph steps, logits bitwise against plain launches)
failed at batch 1 and 8. Suspects:
- ``ld.global.nc`` after griddepcontrol.wait: the non-coherent path is only defined for data
  read-only during the kernel's lifetime, and under PDL the kernel's lifetime overlaps its
  predecessor's writes (qkv, z, b, a here; x in the FP8 kernels);
- launch_dependents at once: out_proj's kernel starts while gdn_decode is running.
Variants, each in the runner at batch 1 (synthetic 40-layer checkpoint, as `netra decode`),
its logits over 8 teacher-forced graph steps compared bitwise with plain launches, then timed
(CUDA-graph replay of a step, median of 32) when equal:
- current: as promoted at a25401b;
- gdn_plain: gdn_decode_b32 (no PDL) after bf16_linear2's PDL build;
- coherent: the PDL build with the post-wait loads as ld.global (not .nc);
- late_trigger: launch_dependents after griddepcontrol.wait;
- coherent_late: both;
- fp8_only: the engine before a25401b (bf16_linear2 and gdn_decode launched plainly).

  PYTHONPATH=src python3 experiments/decode/pdl_gdn_variant.py --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

HERE = Path(__file__).resolve().parent
NAME = "gdn_decode_b32_pdl"


def variant_ptx(name: str) -> str | None:
    from netra import paths

    g = paths.generator("gdn", "gen_gdn_decode")
    ptx = g.generate(pdl=True, name=NAME, coherent=False)  # the build promoted at a25401b
    if name in ("current", "gdn_plain", "fp8_only"):
        return None
    head, tail = ptx.split("griddepcontrol.wait;  // the projection outputs are complete from here", 1)
    if name in ("coherent", "coherent_late"):
        n = tail.count("ld.global.nc.b16")
        assert n == 4, n  # b, a, z, qkv
        tail = tail.replace("ld.global.nc.b16", "ld.global.b16")
    if name in ("late_trigger", "coherent_late"):
        assert head.count("griddepcontrol.launch_dependents;") == 1
        head = head.replace("griddepcontrol.launch_dependents;", "")
        tail = "\n  griddepcontrol.launch_dependents;" + tail
    return head + "griddepcontrol.wait;  // the projection outputs are complete from here" + tail


def main():
    import netra.ops as nops
    from netra.decode import main as dm
    from netra.decode.runner import DecodeRunner
    from netra.model import checkpoint as ck
    from netra.model.config import QWEN36_35B_A3B
    from netra.model.packed import pack
    from netra.ops import gdn
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    B, context, steps = 1, 1024, 32
    packed = pack(ck.synthetic_checkpoint(QWEN36_35B_A3B, seed=0, device="cuda"))
    cfg = QWEN36_35B_A3B
    tokens = torch.randint(0, cfg.vocab_size, (8, B), generator=torch.Generator().manual_seed(3)).to("cuda")

    def logits_of(runner, pdl):
        runner.capture(pdl=pdl)
        return [runner.step(t).clone() for t in tokens]

    plain = DecodeRunner(packed, B, context, device="cuda")
    ref = logits_of(plain, False)
    res = {"method": "batch 1, synthetic 40-layer checkpoint; 8 teacher-forced CUDA-graph steps, logits compared "
                     "bitwise with plain launches; then CUDA-graph replay of one step, CUDA events, median of "
                     f"{steps} (netra.decode.main._time_replays)",
           "plain_ms": dm._time_replays(plain, steps), "variants": {}}
    del plain
    print("plain", res["plain_ms"], flush=True)
    real_load, real_decode_pdl, real_ba = loader.load, gdn.DECODE_PDL, nops.OPS["bf16_linear2"].contract
    keep = []
    for name in ("current", "gdn_plain", "coherent", "late_trigger", "coherent_late", "fp8_only"):
        ptx = variant_ptx(name)
        fn = None
        if ptx is not None:
            module, fn = loader.load_text(NAME, ptx)
            keep.append(module)
        try:
            loader.load = (lambda n, d, fn=fn: SimpleNamespace(handle=int(fn)) if n == NAME and fn is not None
                           else real_load(n, d))
            if name in ("gdn_plain", "fp8_only"):
                gdn.DECODE_PDL = gdn.DECODE
            if name == "fp8_only":
                nops.OPS["bf16_linear2"].contract = dataclasses.replace(real_ba, pdl="")
            runner = DecodeRunner(packed, B, context, device="cuda")
            got = logits_of(runner, True)
            r = {"bitwise_equal_to_plain": all(torch.equal(x, y) for x, y in zip(ref, got)),
                 "max_abs_diff": max(float((x.float() - y.float()).abs().max()) for x, y in zip(ref, got))}
            if r["bitwise_equal_to_plain"]:
                r["ms"] = dm._time_replays(runner, steps)
            del runner
        finally:
            loader.load, gdn.DECODE_PDL = real_load, real_decode_pdl
            nops.OPS["bf16_linear2"].contract = real_ba
            nops.set_pdl(False)
            torch.cuda.empty_cache()
        res["variants"][name] = r
        print(name, r, flush=True)
    json.dump(res, open(os.path.join(out_dir, "pdl_gdn_variant.json"), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
