"""The `netra` command line."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

console = Console(highlight=False, soft_wrap=True)


def log(msg: str) -> None:
    console.print(msg, markup=False)


def _gpu() -> str | None:
    """None when an sm_90 GPU is usable, else why not."""
    from .runtime.gpu import unavailable_reason

    return unavailable_reason()


def cmd_build(a) -> int:
    from .runtime import build

    log(f"assembling for sm_90a with ptxas {build.toolchain.PTXAS_VERSION} ({' '.join(build.toolchain.PTXAS_FLAGS)})")
    m = build.build(a.names or None, force=a.force, log=log)
    log(f"manifest: {build.manifest_path()} ({len(m['kernels'])} kernels)")
    return 0


def cmd_disasm(a) -> int:
    from .runtime import build

    sys.stdout.write(build.disasm(a.name))
    return 0


def cmd_contracts(a) -> int:
    from . import contracts

    for c in contracts.select(a.names or None):
        log(f"{c.name} [{c.family}] {c.summary}")
        log(f"  threads {c.threads}, grid {c.grid}, {c.describe_dims() or 'no shape dims'}, tolerance {c.tolerance}, "
            f"deterministic {c.deterministic}")
        for p in c.params:
            log(f"  .param .{p.ptx} {p.name}" + (f"  {c.describe(p)}" if hasattr(p, "role") else f"  = {p.value or 'caller'}"))
    return 0


def _need_gpu(what: str) -> int | None:
    why = _gpu()
    if why:
        log(f"{what} needs an NVIDIA H200 (sm_90a): {why}.")
        return 2
    return None


def cmd_check(a) -> int:
    if (rc := _need_gpu("netra check")) is not None:
        return rc
    from .lifecycle import check

    return 0 if check.run(a.names or None, log=log) else 1


def cmd_sanitize(a) -> int:
    if (rc := _need_gpu("netra sanitize")) is not None:
        return rc
    from .lifecycle import sanitize

    res = sanitize.run(a.names or None, log=log, log_path=a.log)
    bad = [n for n, r in res.items() if r.get("memcheck") != "clean" or r.get("racecheck") != "clean" or not r.get("planted_oob_detected")]
    return 1 if bad or not res else 0


def cmd_bench(a) -> int:
    if (rc := _need_gpu("netra bench")) is not None:
        return rc
    from .lifecycle import bench

    if a.host_only:
        bench.host_only(a.names or None, log=log)
        return 0
    return 0 if bench.run(a.names or None, peers=not a.no_peers, log=log, quick=a.quick) else 1


def cmd_report(a) -> int:
    from .lifecycle import report

    report.run(log=log)
    return 0


def cmd_run(a) -> int:
    """The main job: assemble everything; on an H200 also check, sanitize, bench and report."""
    rc = cmd_build(argparse.Namespace(names=None, force=False))
    why = _gpu()
    if why:
        log("")
        log(f"Every kernel assembled for sm_90a. The rest of the main job needs an NVIDIA H200: {why}.")
        log("On an H200 `netra run` goes on to: netra check (float64 and transformers references, determinism,")
        log("graph replay), netra sanitize (compute-sanitizer memcheck and racecheck), netra bench (CUDA-graph")
        log("replay against PyTorch eager, torch.compile, transformers and the two floors) and netra report.")
        return rc
    from .lifecycle import bench, check, report, sanitize

    log("== check"); ok = check.run(None, log=log)
    log("== sanitize"); sanitize.run(None, log=log)
    log("== bench"); ok &= bench.run(None, log=log)
    log("== report"); report.run(log=log)
    return 0 if ok else 1


def decode_ablate() -> tuple[str, ...]:
    from .decode.main import ABLATE

    return ABLATE


def cmd_decode(a) -> int:
    """The main job on an H200: the decode runner's gates and speed A/B on the full-size model.
    Without a GPU: assemble every kernel, then run the same gates on a tiny synthetic model on
    the CPU (no speed A/B, nothing written)."""
    from .decode import main as decode

    why = _gpu()
    if why:
        from .model.config import tiny

        rc = cmd_build(argparse.Namespace(names=None, force=False))
        log(f"The full-size decode gate needs an NVIDIA H200 ({why}). Running its gates on a tiny synthetic "
            f"model (8 layers, hidden 256) on the CPU instead; nothing is written to results/.")
        rec = decode.run(config=tiny(layers=8), batches=(), n_prompts=2, prompt_len=24, free_steps=16,
                         shadow_len=12, gate_layers=4, device="cpu", write=False, log=log)
    else:
        rc = 0
        rec = decode.run(a.checkpoint, a.layers, tuple(a.batch), a.steps, a.context, a.seed, a.prompts, a.prompt_len,
                         a.free_steps, a.shadow_len, a.gate_layers or None, log=log, ablate=tuple(a.ablate),
                         pdl=not a.no_pdl)
    g = rec["gates"]
    log(json.dumps({k: g[k] for k in (*decode.GATE_KEYS, "top1_checked")}))
    if g.get("depth_limited"):
        d = g["depth_limited"]
        log(f"depth-limited token gate ({d['layers']} layers): top-1 {d['teacher_forced']['top1_agreement_non_tie']:.4f} "
            f"over {d['teacher_forced']['top1_checked']} positions, pass {d['teacher_forced']['pass']}; "
            f"free-running first divergence {d['free_running']['first_divergence']}")
    for r in rec["runs"]:
        log(f"  {r['engine']:24s} batch {r['batch']:3d}: {r['ms_per_token']:8.2f} ms/token  {r['tokens_per_s']:8.1f} tokens/s  "
            f"{100 * r['fraction_of_limit']:5.1f}% of limit")
    ok = g["layer_shadow_pass"] and g["teacher_forced"]["pass"] and (not g.get("depth_limited") or g["depth_limited"]["teacher_forced"]["pass"])
    return rc if ok else 1


def cmd_repack(a) -> int:
    """Load and validate a real-layout checkpoint; write it Netra-packed for fast reloads."""
    from .model import checkpoint as ck
    from .model import packed
    from .model.config import TextConfig

    cfg = TextConfig.from_json(a.src)
    cfg = cfg.with_layers(a.layers) if a.layers else cfg
    out = packed.save(packed.pack(ck.load(a.src, cfg)), a.dst)
    log(f"wrote {out} ({packed.FORMAT}, {cfg.num_hidden_layers} layers)")
    return 0


def cmd_stats(a) -> int:
    from . import ops

    print(json.dumps(ops.stats(), indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="netra", description="Hand-written PTX kernels for Qwen3.6 on the H200 (sm_90a)")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("build", help="assemble kernels with ptxas 13.0.88 and write the manifest (no GPU needed)")
    s.add_argument("names", nargs="*")
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_build)
    s = sub.add_parser("disasm", help="print a kernel's SASS")
    s.add_argument("name")
    s.set_defaults(fn=cmd_disasm)
    s = sub.add_parser("contracts", help="print kernel contracts")
    s.add_argument("names", nargs="*")
    s.set_defaults(fn=cmd_contracts)
    for name, fn, helptext in (("check", cmd_check, "correctness, determinism and graph gates (H200)"),
                               ("sanitize", cmd_sanitize, "compute-sanitizer memcheck and racecheck (H200)")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("names", nargs="*", help="kernel or family names (default: all)")
        s.set_defaults(fn=fn)
        if name == "sanitize":
            s.add_argument("--log", default=None, help="append the sanitizer output to this file")
    s = sub.add_parser("bench", help="CUDA-graph replay timing against peers and floors (H200)")
    s.add_argument("names", nargs="*")
    s.add_argument("--no-peers", action="store_true")
    s.add_argument("--quick", action="store_true", help="smallest and largest shape only")
    s.add_argument("--host-only", action="store_true", help="re-measure host dispatch only; keep the recorded cases")
    s.set_defaults(fn=cmd_bench)
    s = sub.add_parser("report", help="render results/sm_90a/README.md and roofline.png")
    s.set_defaults(fn=cmd_report)
    s = sub.add_parser("run", help="the main job: build, then check, sanitize, bench and report on an H200")
    s.set_defaults(fn=cmd_run)
    s = sub.add_parser("decode", help="the decode gates and speed A/B on the synthetic full-size model or --checkpoint (H200)")
    s.add_argument("--checkpoint", default=None, help="a Qwen3.6 FP8 checkpoint folder (default: synthetic, built on the GPU)")
    s.add_argument("--layers", type=int, default=None)
    s.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    s.add_argument("--steps", type=int, default=64, help="timed graph replays per engine and batch")
    s.add_argument("--context", type=int, default=1024)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--prompts", type=int, default=4, help="teacher-forced gate sequences")
    s.add_argument("--prompt-len", type=int, default=256)
    s.add_argument("--free-steps", type=int, default=256, help="free-running greedy tokens")
    s.add_argument("--shadow-len", type=int, default=64, help="positions of the layer shadow")
    s.add_argument("--gate-layers", type=int, default=8,
                   help="also run the token gates on the first N layers, where BF16 stays decidable on synthetic weights (0: off)")
    s.add_argument("--ablate", nargs="*", default=list(decode_ablate()),
                   help="ops switched off one at a time (all other kernels on) at the first batch, in the same run")
    s.add_argument("--no-pdl", action="store_true",
                   help="skip the engine that launches the PDL-capable kernels with programmatic serialization")
    s.set_defaults(fn=cmd_decode)
    s = sub.add_parser("repack", help="write a real-layout FP8 checkpoint Netra-packed, for fast reloads")
    s.add_argument("src")
    s.add_argument("dst")
    s.add_argument("--layers", type=int, default=None)
    s.set_defaults(fn=cmd_repack)
    a = p.parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
