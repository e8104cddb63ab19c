"""compute-sanitizer gates. `python -m netra.lifecycle.sanitize NAME...` is the program the
sanitizer watches: each kernel launched at its smallest and largest contract shape (or its
contract's ``sanitize_cases``).
`--plant` launches smoke_copy past the end of its output instead, to prove the gate can fail.

PyTorch's caching allocator must be off (PYTORCH_NO_CUDA_MEMORY_CACHING=1): with it on, an
out-of-bounds write lands inside the allocator's segment and goes unreported.
`--report-api-errors no` silences cuda-bindings' harmless cuGetProcAddress probes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from .. import contracts

TOOLS = ("memcheck", "racecheck")


def _child(names: list[str], plant: bool) -> None:
    import torch

    from ..runtime import launch as rt_launch
    from ..runtime import loader
    from . import check, testbeds

    if plant:
        k = loader.load("smoke_copy", 0)
        go = rt_launch.raw_launcher(k)
        src = torch.randn(4096, device="cuda")
        dst = torch.empty(1024, device="cuda")
        go((4, 1, 1), (256, 1, 1), src.data_ptr(), dst.data_ptr(), 1024)  # 1024 vectors into a 256-vector buffer
        torch.cuda.synchronize()
        return
    for name in names:
        if name in ("empty_kernel", "read_floor"):
            check.check_floors()
            continue
        tb = testbeds.get(name)
        k = loader.load(name, 0)
        go = rt_launch.make_guard_and_launch(tb.contract, function_handle=k.handle, device=0)
        cases = tb.contract.cases()
        for dims in tb.contract.sanitize_cases or (cases[0], cases[-1]):
            b = check.Bench(tb, dims, 3)
            b.reset()
            reason = go(*tb.args(b.bufs))
            assert reason is None, f"{name}: guard refused {dims}: {reason}"
            torch.cuda.synchronize()
        print(f"sanitize: launched {name}", flush=True)


def sanitizer_binary() -> str | None:
    for cand in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer",
                 "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if cand and os.path.exists(cand):
            return cand
    return None


def _summary(tool: str, text: str) -> int | None:
    pat = r"ERROR SUMMARY: (\d+) error" if tool == "memcheck" else r"RACECHECK SUMMARY: (\d+) hazard"
    m = re.search(pat, text)
    return int(m.group(1)) if m else None


def _run(tool: str, args: list[str], log_path: str | None) -> tuple[int | None, str]:
    cs = sanitizer_binary()
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    cmd = [cs, "--tool", tool, "--report-api-errors", "no", "--print-limit", "50",
           sys.executable, "-m", "netra.lifecycle.sanitize", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    text = proc.stdout + proc.stderr
    if log_path:
        with open(log_path, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n{text}\n")
    return _summary(tool, text), text


def run(names: list[str] | None, log=print, log_path: str | None = None) -> dict[str, dict]:
    """Run memcheck and racecheck over the named kernels and the planted error; return the
    sanitizer section for each kernel (and write it into the records)."""
    from . import records

    selected = [c.name for c in contracts.select(names)]
    if sanitizer_binary() is None:
        log("  compute-sanitizer not found: sanitizer gates not run")
        return {}
    planted, _ = _run("memcheck", ["--plant"], log_path)
    results: dict[str, dict] = {n: {} for n in selected}
    for tool in TOOLS:
        count, text = _run(tool, selected, log_path)
        for n in selected:
            if count is None:
                results[n][tool] = "no summary (sanitizer or program failed; see log)"
            elif count == 0 and (f"sanitize: launched {n}" in text or n in ("empty_kernel", "read_floor")):
                results[n][tool] = "clean"
            elif count == 0:
                results[n][tool] = "not launched (see log)"
            else:
                named = n in text
                results[n][tool] = f"{count} errors in the run" + (f" (output names {n})" if named else "")
        log(f"  {tool}: {count} errors/hazards over {len(selected)} kernels")
    log(f"  planted out-of-bounds write: memcheck reported {planted} errors ({'detected' if planted else 'NOT detected'})")
    env = records.environment()
    for n in selected:
        results[n]["planted_oob_detected"] = bool(planted)
        results[n]["command"] = "compute-sanitizer --tool {memcheck,racecheck} --report-api-errors no, PYTORCH_NO_CUDA_MEMORY_CACHING=1"
        rec = records.load(n) or {}
        corr = rec.get("correctness") or {}
        corr["sanitizer"] = results[n]
        records.update(n, "correctness", corr, env)
    return results


if __name__ == "__main__":
    argv = sys.argv[1:]
    _child([a for a in argv if not a.startswith("--")], "--plant" in argv)
