"""Why the 4-stage expert gate | up (fp8_gemv_n1024_k2048_moe_s4) was neutral in the batch-32 decode
step (step_ab_moe_s4_off_b32_59299e0.json) while its kernel record is 10% faster at M = 16 than the
3-stage build: the device time of each MoE kernel inside the real step, per build.

For batch 32 and 16, with the op's choice as promoted (MOE_WIDE_M = 8) and with the 3-stage build at
every M: torch.profiler device time per kernel over 4 eager steps (netra.decode.main.op_breakdown),
the MoE kernels' rows kept. Profiling runs last in each process by design (it leaves CUPTI active),
and nothing here is a speed record: only the two builds' in-step kernel times side by side.

  PYTHONPATH=src python3 experiments/decode/moe_breakdown.py --out "$OUT"

Ran at 27bbe03; the 4-stage build and MOE_WIDE_M were withdrawn at 8fe3aaa (see experts_graph.py).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    import torch

    from netra.decode import main as dm
    from netra.decode.runner import DecodeRunner
    from netra.model import checkpoint as ck
    from netra.model.config import QWEN36_35B_A3B
    from netra.model.packed import pack
    from netra.ops import proj as oproj

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    packed = pack(ck.synthetic_checkpoint(QWEN36_35B_A3B, seed=0, device="cuda"))
    real = oproj.MOE_WIDE_M
    res = {"method": "torch.profiler device time per kernel over 4 eager steps (op_breakdown), synthetic 40-layer "
                     "checkpoint, context 1024; us per step", "runs": {}}
    try:
        for B in (32, 16):
            for label, wide in (("promoted", real), ("three_stage_only", 1 << 30)):
                oproj.MOE_WIDE_M = wide
                runner = DecodeRunner(packed, B, 1024, device="cuda")
                rows = [r for r in dm.op_breakdown(runner, top=60) if r["kind"] == "kernel" and "moe" in r["name"]]
                res["runs"][f"B{B} {label}"] = rows
                print(B, label, [(r["name"], round(r["us_per_step"], 1), r["calls_per_step"]) for r in rows], flush=True)
                del runner
                torch.cuda.empty_cache()
    finally:
        oproj.MOE_WIDE_M = real
    json.dump(res, open(os.path.join(out_dir, "moe_breakdown.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
