"""Where a decode step's device time goes at batch 1, 8 and 32 (a diagnosis; `netra decode` records only
batch 1's). netra.decode.main.op_breakdown (torch.profiler over 4 eager steps, device time per op and per
kernel, launch gaps excluded) on the synthetic 40-layer checkpoint, context 1024, as step_ab.py.
Usage: PYTHONPATH=src python experiments/decode/breakdown.py [--out DIR] [--batches=1+8+32]

The first run (8c08c68, `breakdown_8c08c68.json`) profiled one token in every sequence (op_breakdown's zeros then),
so at batch 8 and 32 every sequence routed to the same 8 experts and the MoE rows read a ninth of the bytes; its
non-MoE rows stand. op_breakdown takes distinct tokens since."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def main():
    from netra.decode import main as dm
    from netra.decode import runner as rmod
    from netra.model import checkpoint as ck
    from netra.model.config import QWEN36_35B_A3B
    from netra.model.packed import pack

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    batches = [int(b) for b in next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--batches=")), "1,8,32").replace("+", ",").split(",")]
    packed = pack(ck.synthetic_checkpoint(QWEN36_35B_A3B, seed=0, device="cuda"))
    res = {"method": "netra.decode.main.op_breakdown: torch.profiler device time over 4 eager steps (launch gaps "
                     "excluded), synthetic 40-layer checkpoint, context 1024", "batches": {}}
    for B in batches:
        runner = rmod.DecodeRunner(packed, B, 1024, device="cuda")
        rows = dm.op_breakdown(runner, top=40)
        res["batches"][str(B)] = rows
        print(f"batch {B}")
        for r in rows:
            print(f"  {r['us_per_step']:9.1f} us  {r['calls_per_step']:5.1f}x  {r['kind']:6s} {r['name'][:110]}")
        del runner
        torch.cuda.empty_cache()
        json.dump(res, open(os.path.join(out_dir, "breakdown.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
