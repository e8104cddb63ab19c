"""The routed experts' gate | up alone in a CUDA graph, as the batch-32 step launches it: 40 layers'
real (synthetic) expert stacks, fp8_linear_experts on 32 tokens (two M = 16 launches per layer),
each token's 8 experts drawn uniformly (the step's routing: 162 distinct experts of 256 pairs).
Graph replay, CUDA events, median of 20; the 4-stage build (as promoted) and the 3-stage build at
every M (netra.ops.proj.MOE_WIDE_M raised), in the order A B A.

Why: the 4-stage build is 10% faster in its kernel record and 7.5% faster inside the step by eager
device time (moe_breakdown_27bbe03.json), but the step's graph replay does not move
(step_ab_moe_s4_off_b32_*.json). If this graph shows the gain, the step's interplay hides it; if
not, the kernel's gain does not survive back-to-back graph launches of this kind.

  PYTHONPATH=src python3 experiments/decode/experts_graph.py --out "$OUT"

Ran at c7bfb0f, while the op took the 4-stage build above netra.ops.proj.MOE_WIDE_M rows; this result
withdrew that build and the switch at 8fe3aaa, so re-running needs c7bfb0f.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    import torch

    from netra.decode import ops as dops
    from netra.model import checkpoint as ck
    from netra.model.config import QWEN36_35B_A3B
    from netra.model.packed import pack
    from netra.ops import proj as oproj
    import netra.ops as nops

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    cfg = QWEN36_35B_A3B
    packed = pack(ck.synthetic_checkpoint(cfg, seed=0, device="cuda"))
    g = torch.Generator().manual_seed(5)
    res = {"method": "CUDA-graph replay of 40 layers' fp8_linear_experts (gate | up), CUDA events, median of 20 "
                     "replays; us per layer", "runs": {}}
    real = oproj.MOE_WIDE_M
    for B in (32, 16):
        layers = []
        for L in range(cfg.num_hidden_layers):
            lw = packed.layer(L, "cuda")
            ids = torch.stack([torch.randperm(cfg.num_experts, generator=g)[:8] for _ in range(B)]).cuda()
            x = (torch.randn(B, 2048, generator=g) * 0.5).to(torch.bfloat16).cuda()
            out = torch.empty(B, 8, lw["s13"].shape[1] * 128, dtype=torch.bfloat16, device="cuda")
            layers.append((x, lw["w13"], lw["s13"], ids, out))
        for label, wide in (("promoted", real), ("three_stage_only", 1 << 30), ("promoted_again", real)):
            oproj.MOE_WIDE_M = wide
            nops.prepare()
            for a in layers:  # warm: bind, load
                dops.fp8_linear_experts(*a)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for a in layers:
                    dops.fp8_linear_experts(*a)
            times = []
            for _ in range(21):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                graph.replay()
                e1.record()
                torch.cuda.synchronize()
                times.append(e0.elapsed_time(e1) * 1000 / len(layers))
            times = sorted(times[1:])
            res["runs"][f"B{B} {label}"] = {"us_per_layer": times[len(times) // 2], "samples": times}
            print(B, label, round(times[len(times) // 2], 2), flush=True)
            del graph
        oproj.MOE_WIDE_M = real
        del layers
        torch.cuda.empty_cache()
    json.dump(res, open(os.path.join(out_dir, "experts_graph.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
