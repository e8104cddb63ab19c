"""Decode speed of the runner: one CUDA-graph replay per step, timed with CUDA events.

This is the first piece of `netra decode` (issue 3); the transformers-eager run, the layer
shadow and token gates and the decode.json record are still to come."""

from __future__ import annotations

import statistics
import time

import torch

from ..model import checkpoint as ck
from ..model.config import QWEN36_35B_A3B, TextConfig
from .runner import DecodeRunner

LIMIT_MS = 0.84  # batch-1 physical limit per token, 40 layers (design/qwen36.md)


def run(checkpoint: str | None = None, layers: int | None = None, batch: int = 1, steps: int = 32,
        context: int = 1024, seed: int = 0, log=print) -> dict:
    t0 = time.time()
    if checkpoint:
        cfg = TextConfig.from_json(checkpoint)
        cfg = cfg.with_layers(layers) if layers else cfg
        ckpt = ck.load(checkpoint, cfg, device="cuda")
    else:
        cfg = QWEN36_35B_A3B.with_layers(layers) if layers else QWEN36_35B_A3B
        ckpt = ck.synthetic_checkpoint(cfg, seed=seed, device="cuda")
    log(f"  model: {cfg.num_hidden_layers} layers, {ckpt.source}, ready in {time.time() - t0:.1f} s")
    runner = DecodeRunner(ckpt, batch, context, device="cuda")
    del ckpt
    torch.cuda.empty_cache()
    runner.capture()
    g = torch.Generator(device="cuda").manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (batch,), device="cuda", generator=g)
    for _ in range(3):
        runner.step(tokens)
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        runner.graph.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    ms = statistics.median(times)
    from .. import ops

    kernels = sorted({v["kernel"] for v in ops.stats().values() if v["bound"] and v["enabled"]})
    res = {"engine": "netra-graph", "batch": batch, "layers": cfg.num_hidden_layers, "context": context,
           "method": f"CUDA-graph replay of one decode step, CUDA events, median of {steps} steps",
           "ms_per_token": ms, "tokens_per_s": batch * 1000.0 / ms,
           "fraction_of_limit": LIMIT_MS * cfg.num_hidden_layers / 40 / ms, "kernels_bound": kernels,
           "peak_memory_gb": torch.cuda.max_memory_allocated() / 1e9}
    log(f"  batch {batch}: {ms:.2f} ms per step, {res['tokens_per_s']:.1f} tokens/s "
        f"({100 * res['fraction_of_limit']:.1f}% of the physical limit); kernels bound: {', '.join(kernels) or 'none'}")
    return res
