"""`netra decode`: the end-to-end gate every kernel issue uses for promotion.

One run builds the model (the synthetic full-size Qwen3.6-35B-A3B FP8 from a seed, on the
GPU, or --checkpoint), then:
  1. the truth: Netra's functional reference (netra.reference.qwen36) in float32 (float64
     on the CPU), dequantizing the FP8 weights exactly as each step uses them, so it fits
     at full size: teacher-forced logits for the gate prompts and a greedy continuation;
  2. the framework: transformers 5.17.0 in BF16 on the exactly dequantized weights: the
     same logits and continuation (its own BF16 drift from the truth, which sets the
     near-tie tolerance) and its eager decode speed; then it is freed;
  3. the gates on the runner with the kernels switched on: teacher-forced tokens,
     free-running greedy decode (prompt by prefill), layer shadow (transformers float32
     layers fed the runner's inputs);
  4. the speed A/B: the runner with every op on the framework path and with the kernels,
     each captured in CUDA graphs, at each batch size;
and writes results/sm_90a/decode.json."""

from __future__ import annotations

import datetime as _dt
import json
import os
import statistics
import time

import torch

from .. import contracts
from .. import ops as nops
from .. import paths
from ..lifecycle import bench, records
from ..model import checkpoint as ck
from ..model.config import QWEN36_35B_A3B, TextConfig
from ..model.packed import pack
from ..reference.qwen36 import Reference
from . import gates
from . import ops as dops
from .runner import DecodeRunner

LIMIT_MS = 0.84  # batch-1 physical limit per token for 40 layers (design/qwen36.md)


def op_breakdown(runner: DecodeRunner, steps: int = 4, top: int = 25) -> list[dict]:
    """Device time per decode step by op (the netra:: custom ops, with their kernels) and by
    kernel (the PTX kernels appear under their own names), from torch.profiler over eager
    steps: the launch gaps of eager mode are not in these numbers, only device time."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if runner.device.type == "cuda" else [])
    # distinct tokens per sequence: with one token everywhere every sequence routes to the same 8 experts, and the
    # MoE rows of a batch > 1 profile read a fraction of the real bytes (experiments/decode/breakdown_8c08c68.json)
    tokens = torch.randint(0, runner.cfg.vocab_size, (runner.B,), device=runner.device,
                           generator=torch.Generator(device=runner.device).manual_seed(0))
    runner.step(tokens)
    with dops.named_ops(), profile(activities=acts) as prof:
        for _ in range(steps):
            runner.step(tokens)
        if runner.device.type == "cuda":
            torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        dev_us = getattr(e, "device_time_total", 0.0) if runner.device.type == "cuda" else e.cpu_time_total
        self_us = getattr(e, "self_device_time_total", 0.0) if runner.device.type == "cuda" else e.self_cpu_time_total
        if e.key.startswith("netra::"):
            rows.append({"name": e.key, "kind": "op", "us_per_step": dev_us / steps, "calls_per_step": e.count / steps})
        elif runner.device.type == "cuda" and self_us > 0 and not e.key.startswith(("aten::", "cuda", "Memcpy", "Memset")):
            rows.append({"name": e.key, "kind": "kernel", "us_per_step": self_us / steps, "calls_per_step": e.count / steps})
    rows.sort(key=lambda r: -r["us_per_step"])
    return rows[:top]


def kernels_used(runner: DecodeRunner, pdl: bool = False) -> list[str]:
    """The kernels one eager decode step of this runner launches (then its state is reset); ``pdl``: under set_pdl,
    as its PDL capture launches them."""
    if pdl:
        nops.set_pdl(True)
    try:
        with nops.count_launches() as counts:
            runner.step(torch.zeros(runner.B, dtype=torch.long, device=runner.device))
    finally:
        if pdl:
            nops.set_pdl(False)
    runner.reset()
    return sorted(counts)


def _time_replays(runner: DecodeRunner, steps: int, start: int | None = None) -> float:
    """Median ms of ``steps`` replays of the captured step, after 3 warm steps. Each step advances the positions, so
    from a fresh runner the timed steps sit at positions 3 .. steps + 2; ``start``: every sequence's position set to
    it first (the cache rows before it are whatever the runner holds: zeros where nothing was written; attention's
    time depends on the position, not on the values)."""
    if start is not None:
        runner.positions.fill_(start)
    tokens = torch.randint(0, runner.cfg.vocab_size, (runner.B,), device=runner.device,
                           generator=torch.Generator(device=runner.device).manual_seed(0))
    for _ in range(3):
        runner.step(tokens)
    bench.settle()  # after the driver has cleared what earlier engines freed (bench.SCRUB_BYTES_PER_S)
    times = []
    for _ in range(steps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        runner.graph.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return statistics.median(times)


@torch.no_grad()
def _transformers_speed(model, vocab: int, steps: int, device) -> float:
    """ms per token of transformers' own eager greedy decode (generate, KV cache), batch 1."""
    prompt = torch.randint(0, vocab, (1, 32), device=device, generator=torch.Generator(device=device).manual_seed(1))
    kw = dict(do_sample=False, pad_token_id=0)
    model.generate(prompt, max_new_tokens=4, min_new_tokens=4, **kw)  # warm
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model.generate(prompt, max_new_tokens=steps, min_new_tokens=steps, **kw)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    model.generate(prompt, max_new_tokens=1, min_new_tokens=1, **kw)  # the prefill alone, to subtract
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return ((t1 - t0) - (t2 - t1)) / (steps - 1) * 1e3


def _free(device):
    if torch.device(device).type == "cuda":
        bench.release()


def token_gates(ckpt: ck.Checkpoint, prompts, free_prompt, free_steps: int, device, log, speed=None):
    """The truth (Netra's reference in float32, float64 on the CPU, lazily dequantized), the
    framework (transformers BF16; ``speed(model)`` times it while it exists), then the
    runner with the kernels on: teacher-forced and free-running gates. Returns (teacher
    forced, free running, the runner, its packed weights)."""
    t0, L = time.time(), ckpt.cfg.num_hidden_layers
    is_cuda = torch.device(device).type == "cuda"
    truth_dtype = torch.float32 if is_cuda else torch.float64
    ref = Reference(ckpt, truth_dtype, device, lazy=True)
    truth, truth_routes = ref.teacher_forced(prompts, routes=True)
    truth_tok, truth_margin = ref.greedy(free_prompt, free_steps)
    del ref
    model = ck.transformers_model(ckpt, torch.bfloat16, device)
    fw_logits = gates.reference_logits(model, prompts)
    fw_tok, _ = gates.reference_greedy(model, free_prompt, free_steps)
    if speed is not None:
        speed(model)
    del model
    _free(device)
    log(f"[{L} layers] truth ({truth_dtype}) and transformers BF16 done ({time.time() - t0:.0f} s)")
    packed = pack(ckpt)
    nops.set_framework("all", False)
    runner = DecodeRunner(packed, prompts.shape[0], max(prompts.shape[1], free_prompt.shape[0] + free_steps) + 8,
                          device=device)
    tf = gates.teacher_forced(runner, truth, prompts, framework=fw_logits, truth_routes=truth_routes)
    tf["truth"] = f"netra.reference.qwen36, {str(truth_dtype).replace('torch.', '')}"
    del truth, fw_logits
    log(f"[{L} layers] teacher-forced: top-1 agreement {tf['top1_agreement_non_tie']:.4f} over {tf['top1_checked']} "
        f"positions (tolerance {tf['tolerance']:.3g}; transformers BF16 {tf['framework_top1_agreement_non_tie']:.4f}), "
        f"{tf['near_ties']} near ties; all positions: {tf['top1_agreement_all']:.3f} "
        f"(transformers BF16 {tf['framework_top1_agreement_all']:.3f}); median rel err {tf['median_rel_err']:.3g} "
        f"(transformers BF16 {tf['framework_median_rel_err']:.3g}); pass {tf['pass']}")
    rt = tf["router_ties"]
    log(f"[{L} layers] router near-tie flips: {rt['tie_flips']} in {rt['tainted_sequences']} sequences (first "
        f"{rt['tie_flip_sites'][:3]}: sequence, position, layer, truth margin); of the {rt['sure_positions_after']} clear "
        f"positions after them {rt['excused']} disagree (excused up to {rt['excused_budget']}); {rt['clear_flips']} "
        f"other choices unlike the truth's at a clear margin (after a flip, the states differ)")
    run_tok = gates.runner_greedy(runner, free_prompt, free_steps)
    fd = gates.first_divergence(truth_tok, truth_margin, run_tok, tf["tolerance"])
    fd["framework"] = gates.first_divergence(truth_tok, truth_margin, fw_tok, tf["tolerance"])
    log(f"[{L} layers] free-running: first divergence {fd['first_divergence']} (near tie: {fd['at_near_tie']}); "
        f"transformers BF16: {fd['framework']['first_divergence']} ({time.time() - t0:.0f} s)")
    return tf, fd, runner, packed


ABLATE = ("fp8_linear", "fp8_linear_norm", "fp8_linear_add", "fp8_linear_experts", "moe_router", "moe_router_norm",
          "fp8_linear_experts_router", "fp8_linear_experts_router_down", "moe_down", "bf16_linear2", "gdn_decode", "lm_head_argmax", "attention_decode_paged",
          "attention_decode_paged_qknorm")  # switched off alone at batch 1
# an ablation's ops: FP8 projections off means the fused ones too; the router off means its
# fused-norm kernel too (the PyTorch router); a fused op alone off is its unfused path
# (fp8_linear_norm: rmsnorm_h2048, then the plain FP8 kernel; fp8_linear_add: the plain kernel,
# then the add; moe_router_norm: rmsnorm_h2048, then the router kernel), so that row measures
# the fusion
# fp8_linear_norm_ba switched off runs fp8_linear_norm and bf16_linear2, each then on its own switch (so the
# input norm prologue's row undoes it in every layer; the record at 5fa7d79 switched fp8_linear_norm alone: the
# 10 attention layers)
ABLATE_OPS = {"fp8_linear": ("fp8_linear", "fp8_linear_norm", "fp8_linear_add", "fp8_linear_gate", "fp8_linear_experts",
                              "moe_down", "fp8_linear_norm_ba", "fp8_linear_experts_shared", "fp8_linear_experts_router",
                             "fp8_linear_experts_router_down", "fp8_linear_ba"),
              "fp8_linear_experts": ("fp8_linear_experts", "fp8_linear_experts_shared", "fp8_linear_experts_router",
                                     "fp8_linear_experts_router_down"),
              "fp8_linear_norm": ("fp8_linear_norm", "fp8_linear_norm_ba"),
              "moe_router": ("moe_router", "moe_router_norm", "fp8_linear_experts_router", "fp8_linear_experts_router_down"),
              # the router's norm prologue undone: at batch 1 the router-fused gate | up holds it, so that goes too
              # (its own row, fp8_linear_experts_router alone, measures the router inside the gate | up launch)
              "moe_router_norm": ("moe_router_norm", "fp8_linear_experts_router", "fp8_linear_experts_router_down"),
              # moe_down off: at batch 1 the launch that holds it goes too (the router-fused launch, then PyTorch's down)
              "moe_down": ("moe_down", "fp8_linear_experts_router_down"),
              # the router-fused launch alone off: the one-launch block goes too (its fallback is that launch)
              "fp8_linear_experts_router": ("fp8_linear_experts_router", "fp8_linear_experts_router_down"),
              "bf16_linear2": ("bf16_linear2", "fp8_linear_norm_ba", "fp8_linear_ba"),
              # attention off: both its kernels (the qknorm op's fallback is qk_rmsnorm_d256, then the attention op's
              # framework path: RoPE, the append, the gather and SDPA per layer); the qknorm op alone off measures the
              # fusion (qk_rmsnorm_d256, then attn_decode_d256)
              "attention_decode_paged": ("attention_decode_paged", "attention_decode_paged_qknorm")}
LATE_TOO = ("netra-kernels-graph",)  # engines also timed at the context's end


PROFILED = ("netra-framework-graph", "netra-kernels-graph")  # engines whose op breakdown is recorded


def engines(batches, ablate=ABLATE) -> list[tuple[str, tuple[str, ...], tuple[int, ...]]]:
    """The runner's speed engines: (name, ops forced to the framework path, batches). The
    framework path and all kernels at every batch; then, at the first batch, all kernels but
    one op each, so a kernel family's effect is measured in the same run."""
    out = [("netra-framework-graph", ("all",), tuple(batches)), ("netra-kernels-graph", (), tuple(batches))]
    out += [(f"netra-kernels-minus-{op}-graph", ABLATE_OPS.get(op, (op,)), tuple(batches[:1])) for op in ablate]
    return out


def run(checkpoint: str | None = None, layers: int | None = None, batches=(1, 8, 32), steps: int = 64,
        context: int = 1024, seed: int = 0, n_prompts: int = 4, prompt_len: int = 256, free_steps: int = 256,
        shadow_len: int = 64, gate_layers: int | None = 8, device="cuda", write: bool = True, log=print,
        config: TextConfig | None = None, ablate: tuple[str, ...] = ABLATE, pdl: bool = True) -> dict:
    t_start = time.time()
    if checkpoint:
        cfg = TextConfig.from_json(checkpoint)
        cfg = cfg.with_layers(layers) if layers else cfg
        ckpt = ck.load(checkpoint, cfg, device=device)
    else:
        cfg = config or QWEN36_35B_A3B
        cfg = cfg.with_layers(layers) if layers else cfg
        ckpt = ck.synthetic_checkpoint(cfg, seed=seed, device=device)
    log(f"model: {cfg.num_hidden_layers} layers from {ckpt.source} ({time.time() - t_start:.0f} s)")
    g = torch.Generator().manual_seed(seed + 1)
    prompts = torch.randint(0, cfg.vocab_size, (n_prompts, prompt_len), generator=g)
    free_prompt = prompts[0, :32]
    is_cuda = torch.device(device).type == "cuda"

    # 1-3. token gates: at a depth where BF16 stays decidable on these weights, then at full depth
    gate_depth = None
    if gate_layers and gate_layers < cfg.num_hidden_layers:
        if not any(cfg.is_full(L) for L in range(gate_layers)):
            raise ValueError(f"gate_layers={gate_layers} holds no full-attention layer (transformers' generate needs one)")
        sub = ck.truncate(ckpt, gate_layers)
        tf_d, fd_d, runner, _ = token_gates(sub, prompts, free_prompt, free_steps, device, log)
        gate_depth = {"layers": gate_layers, "teacher_forced": tf_d, "free_running": fd_d,
                      "kernels": kernels_used(runner)}
        del runner, sub
        _free(device)
    runs = []

    def speed(model):
        if not (is_cuda and batches):
            return
        for impl in ("grouped_mm", "batched_mm"):  # transformers' two fast expert paths; design/h200.md
            model.config._experts_implementation = impl
            ms = _transformers_speed(model, cfg.vocab_size, min(steps, 64), device)
            runs.append(_run_record("transformers-eager", 1, cfg, context, ms, [],
                                    f"host end-to-end: generate() of {min(steps, 64)} tokens minus its prefill, "
                                    f"greedy, KV cache, bfloat16 weights, {impl} experts"))
            log(f"transformers eager (bfloat16, {impl} experts): {ms:.1f} ms per token")

    tf, fd, runner, packed = token_gates(ckpt, prompts, free_prompt, free_steps, device, log, speed=speed)
    shadow = gates.layer_shadow(runner, ckpt, prompts[0, :shadow_len], dtype=torch.float32 if is_cuda else torch.float64)
    log(f"layer shadow: {'pass' if shadow['pass'] else 'FAIL'}; worst mixer "
        f"{max(r['mixer_max_rel_err'] for r in shadow['layers']):.3g}, worst MoE "
        f"{max((r['moe_max_rel_err'] or 0) for r in shadow['layers']):.3g} ({time.time() - t_start:.0f} s)")
    used = kernels_used(runner)
    del runner

    # 4. speed A/B, every engine in this run
    for engine, off, engine_batches in engines(batches, ablate):
        if not (is_cuda and batches):
            break
        nops.set_framework("all", False)
        for op in off:
            nops.set_framework(op, True)
        for b in engine_batches:
            runner = DecodeRunner(packed, b, context, device=device)
            kernels = kernels_used(runner)
            runner.capture()
            ms = _time_replays(runner, steps)
            runs.append(_run_record(engine, b, cfg, context, ms, kernels,
                                    f"CUDA-graph replay of one decode step, CUDA events, median of {steps} steps "
                                    f"at positions 3..{steps + 2} (from an empty cache)"))
            log(f"{engine} batch {b}: {ms:.2f} ms per step, {b * 1000 / ms:.1f} tokens/s")
            if engine in LATE_TOO:  # and at the end of the context
                runs.append(_late_run(runner, engine, b, cfg, context, steps, kernels, log))
            del runner
            bench.release()
    nops.set_framework("all", False)
    pdl_check = None
    if pdl and is_cuda and batches:
        pdl_check = {}
        for b in batches:
            pdl_runs, pdl_check[str(b)] = _pdl_engine(packed, b, context, cfg, steps, device, log)
            runs.extend(pdl_runs or [])

    manifest_kernels = {}
    if any(r["kernels"] for r in runs) or used:
        from ..runtime import build

        m = build.load_manifest() or {"kernels": {}}
        manifest_kernels = {k: m["kernels"].get(k, {}).get("ptx_sha256")
                            for k in {*used, *(gate_depth or {}).get("kernels", ()), *(k for r in runs for k in r["kernels"])}}
    named = lambda ks: [{"name": k, "ptx_sha256": manifest_kernels.get(k)} for k in ks]  # noqa: E731
    for r in runs:
        r["kernels"] = named(r["kernels"])
    if gate_depth:
        gate_depth["kernels"] = named(gate_depth["kernels"])
    truth_dtype = torch.float32 if is_cuda else torch.float64
    env = records.environment() if is_cuda else {}
    rec = {
        "commit": env.get("commit"), "device": env.get("device", str(device)), "driver": env.get("driver"),
        "torch": torch.__version__, "measured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": {"config": {k: v for k, v in cfg.__dict__.items() if k != "source"}, "checkpoint": ckpt.source,
                  "seed": seed,
                  "reference": f"truth: netra.reference.qwen36 in {str(truth_dtype).replace('torch.', '')} on exactly "
                               f"dequantized weights; framework: transformers 5.17.0 Qwen3_5MoeForCausalLM in bfloat16 "
                               f"on the same weights; layer shadow: transformers layers in "
                               f"{shadow['reference_dtype']}"},
        "runs": runs,
        "pdl": pdl_check,
        "gates": {
            "layer_shadow_pass": shadow["pass"],
            "teacher_forced_top1": tf["top1_agreement_non_tie"],
            "near_ties": tf["near_ties"],
            "free_running_first_divergence": fd["first_divergence"],
            "first_divergence_at_near_tie": fd["at_near_tie"],
            "top1_checked": tf["top1_checked"],
            "kernels": named(used),
            "depth_limited": gate_depth,
            "teacher_forced": tf, "free_running": fd, "layer_shadow": shadow,
        },
    }
    positions = {"full": tf.pop("positions")}
    if gate_depth:
        positions["depth_limited"] = gate_depth["teacher_forced"].pop("positions")
    path = paths.results_dir() / "decode.json"
    if write:  # before the op breakdowns, so a run cut short while profiling keeps its timings and gates
        path.parent.mkdir(parents=True, exist_ok=True)
        side = path.with_name("decode_positions.json")
        side.write_text(json.dumps({"commit": rec["commit"], "measured_at": rec["measured_at"], **positions}) + "\n")
        _write_json(path, rec)
        log(f"wrote {path}")

    # 5. op breakdowns, only after every engine is timed: a torch.profiler run leaves CUPTI
    # active in the process, and a step timed after it was 0.11-0.14 ms slower at batch 1
    # (experiments/decode/step_ab_after_profile_0a74e03.json)
    profiled = False
    for r in runs:
        if r["engine"] in PROFILED and r["batch"] == batches[0]:
            nops.set_framework("all", r["engine"] == "netra-framework-graph")
            runner = DecodeRunner(packed, r["batch"], context, device=device)
            r["op_breakdown"] = {"method": "torch.profiler device time over 4 eager steps, after all timing",
                                 "rows": op_breakdown(runner)}
            profiled = True
            del runner
            bench.release()
    nops.set_framework("all", False)
    if write and profiled:  # the same record with the breakdowns
        _write_json(path, rec)
        log(f"wrote {path} (with the op breakdowns)")

    rec["gates"]["teacher_forced"]["positions"] = positions["full"]
    return rec


def _write_json(path, rec: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(rec, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def _pdl_engine(packed, b: int, context: int, cfg, steps: int, device, log) -> tuple[list[dict] | None, dict]:
    """All kernels, those whose contract allows it (``Contract.pdl``: they read only weights
    before ``griddepcontrol.wait``) launched with programmatic stream serialization, so each
    may start while the kernel before it finishes. Checked first: 8 teacher-forced graph steps
    give bitwise the logits of the same runner launched plainly (same kernels, same order).
    Returns (its run records, early then late, or None; the check); a failure is recorded, not raised."""
    tokens = torch.randint(0, cfg.vocab_size, (8, b), generator=torch.Generator().manual_seed(3)).to(device)

    def logits_of(runner, pdl=False):
        runner.capture(pdl=pdl)
        return [runner.step(t).clone() for t in tokens]

    check = {"method": "8 teacher-forced CUDA-graph steps from an empty cache, logits compared bitwise with the "
                       "plainly launched runner"}
    try:
        plain = DecodeRunner(packed, b, context, device=device)
        ref = logits_of(plain)
        del plain
        runner = DecodeRunner(packed, b, context, device=device)
        kernels = kernels_used(runner, pdl=True)  # eager, before capture (a replay calls no Python)
        got = logits_of(runner, pdl=True)
        check["bitwise_equal_to_plain"] = all(torch.equal(x, y) for x, y in zip(ref, got))
        check["pdl_kernels"] = [k for k in kernels if contracts.get(k).pdl]  # what this runner launched with PDL
        if not check["bitwise_equal_to_plain"]:
            log("netra-kernels-pdl-graph: logits differ from the plain launches; not timed")
            return None, check
        ms = _time_replays(runner, steps)
        log(f"netra-kernels-pdl-graph batch {b}: {ms:.2f} ms per step, {b * 1000 / ms:.1f} tokens/s")
        pdl_note = "; the kernels with Contract.pdl launched with programmatic stream serialization"
        early = _run_record("netra-kernels-pdl-graph", b, cfg, context, ms, kernels,
                            f"CUDA-graph replay of one decode step, CUDA events, median of {steps} steps at positions "
                            f"3..{steps + 2} (from an empty cache){pdl_note}")
        rows = [early, _late_run(runner, "netra-kernels-pdl-graph", b, cfg, context, steps, kernels, log, pdl_note)]
        if runner.spin and b <= dops.GDN_SPIN_MAX_B:  # the same engine without the spin pair, in the same run
            del runner
            bench.release()
            real, dops.GDN_SPIN_MAX_B = dops.GDN_SPIN_MAX_B, 0
            try:
                off = DecodeRunner(packed, b, context, device=device)
                off_kernels = kernels_used(off, pdl=True)
                off.capture(pdl=True)
                ms_off = _time_replays(off, steps)
            finally:
                dops.GDN_SPIN_MAX_B = real
            engine = "netra-kernels-pdl-minus-gdn_decode_spin-graph"
            log(f"{engine} batch {b}: {ms_off:.2f} ms per step, {b * 1000 / ms_off:.1f} tokens/s")
            rows.append(_run_record(engine, b, cfg, context, ms_off, off_kernels,
                                    f"CUDA-graph replay of one decode step, CUDA events, median of {steps} steps at "
                                    f"positions 3..{steps + 2} (from an empty cache){pdl_note}; GDN's in_proj, then "
                                    "gdn_decode waiting for its grid (dops.GDN_SPIN_MAX_B = 0), timed after the row "
                                    "with the spin pair"))
            del off
        return rows, check
    except Exception as e:  # recorded, not fatal: the main job's other results stand
        check["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        log(f"netra-kernels-pdl-graph failed: {check['error']}")
        return None, check
    finally:
        try:
            bench.release()
        except Exception:  # a CUDA error above must not cost the record of everything else
            pass


def _late_run(runner, engine: str, b: int, cfg, context: int, steps: int, kernels, log, note: str = "") -> dict:
    """The same captured runner timed at the end of its context: positions context - steps - 3 .. context - 1, so
    attention reads every page (the early timing's steps read one or two)."""
    start = context - steps - 3
    ms = _time_replays(runner, steps, start=start)
    log(f"{engine}-late batch {b}: {ms:.2f} ms per step, {b * 1000 / ms:.1f} tokens/s (positions {start + 3}.."
        f"{context - 1})")
    return _run_record(f"{engine}-late", b, cfg, context, ms, kernels,
                       f"CUDA-graph replay of one decode step, CUDA events, median of {steps} steps at positions "
                       f"{start + 3}..{context - 1} (the same runner after the early timing, every position set to "
                       f"{start} first){note}")


def _run_record(engine, batch, cfg, context, ms, kernels, method) -> dict:
    return {"engine": engine, "batch": batch, "layers": cfg.num_hidden_layers, "context": context, "method": method,
            "ms_per_token": ms,  # per sequence: one step makes one token of each of the batch's sequences
            "tokens_per_s": batch * 1000.0 / ms,
            "fraction_of_limit": LIMIT_MS * cfg.num_hidden_layers / 40 / ms,  # of the batch-1 limit
            "kernels": list(kernels)}


RUN_KEYS = ("engine", "batch", "layers", "context", "method", "tokens_per_s", "ms_per_token", "fraction_of_limit", "kernels")
GATE_KEYS = ("layer_shadow_pass", "teacher_forced_top1", "near_ties", "free_running_first_divergence", "first_divergence_at_near_tie")
