"""How far transformers' own BF16 model drifts from its float32 model on the same synthetic
weights: the yardstick for the decode token gate's logit tolerance (the runner is BF16).
Teacher-forced prefill logits of a few random prompts; error per position as
max |bf16 - fp32| / max |fp32|, and top-1 agreement where the fp32 top-2 margin > 5e-2."""

import json
import os
import statistics
import sys

import torch

from netra.model import checkpoint as ck
from netra.model.config import QWEN36_35B_A3B


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    layers = int(sys.argv[sys.argv.index("--layers") + 1]) if "--layers" in sys.argv else 8
    cfg = QWEN36_35B_A3B.with_layers(layers)
    c = ck.synthetic_checkpoint(cfg, seed=0, device="cuda")
    prompts = torch.randint(0, cfg.vocab_size, (2, 64), generator=torch.Generator().manual_seed(1))
    logits = {}
    for dt in (torch.float32, torch.bfloat16):
        m = ck.transformers_model(c, dt, "cuda")
        with torch.no_grad():
            logits[dt] = torch.cat([m(prompts[i:i + 1].cuda(), use_cache=False).logits.float() for i in range(2)])
        del m
        torch.cuda.empty_cache()
    a, b = logits[torch.float32], logits[torch.bfloat16]
    err = ((b - a).abs().amax(-1) / a.abs().amax(-1)).flatten().tolist()
    top2 = a.topk(2, -1).values
    margin = (top2[..., 0] - top2[..., 1]) / a.abs().amax(-1)
    sure = margin > 5e-2
    agree = (a.argmax(-1) == b.argmax(-1))[sure].float().mean().item()
    res = {"layers": layers, "positions": len(err), "median_rel_err": statistics.median(err), "max_rel_err": max(err),
           "near_ties_at_5e-2": int((~sure).sum()), "top1_agreement_non_tie": agree,
           "method": "transformers 5.17.0 prefill logits, BF16 model against float32 model, same dequantized weights"}
    json.dump(res, open(os.path.join(out_dir, "bf16_drift.json"), "w"), indent=1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
