"""Evidence records: results/sm_90a/<kernel>.json, one per kernel, tied to the PTX and cubin
SHA-256. `check` writes the correctness section, `bench` the cases; a record whose
ptx_sha256 no longer matches the committed .ptx is stale and loses both."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
from pathlib import Path

from .. import contracts, paths
from ..runtime import build, toolchain

REQUIRED = ("kernel", "ptx_sha256", "cubin_sha256", "ptxas_version", "device", "driver", "torch", "measured_at")
CORRECTNESS_REQUIRED = ("reference", "max_rel_err", "tolerance", "seeds", "determinism_runs", "graph_replay_bitwise", "sanitizer")
CASE_REQUIRED = ("shape", "method", "median_us", "bytes", "roofline_fraction", "peers")


def record_path(name: str) -> Path:
    return paths.results_dir() / f"{name}.json"


def load(name: str) -> dict | None:
    p = record_path(name)
    return json.loads(p.read_text()) if p.is_file() else None


def _git_commit() -> str:
    if os.environ.get("NETRA_COMMIT"):  # set by scripts/h200.sh callers: the device copy has no git history
        return os.environ["NETRA_COMMIT"]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=paths.ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "kernels", "src"], cwd=paths.ROOT,
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "") if len(rev) == 40 else "unknown"
    except OSError:
        return "unknown"


def write_experiment(out_dir: str, stem: str, res: dict) -> str:
    """An experiment script's results as out_dir/STEM_<commit>.json: the commit is NETRA_COMMIT's first 7
    characters (set by the device callers), "local" without it. Returns the path."""
    path = os.path.join(out_dir, f"{stem}_{os.environ.get('NETRA_COMMIT', 'local')[:7]}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    return path


def environment() -> dict:
    import torch

    env = {"torch": torch.__version__, "host": platform.node(), "commit": _git_commit()}
    try:
        import cuda.bindings

        env["cuda_bindings"] = cuda.bindings.__version__
    except Exception:
        pass
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
        props = torch.cuda.get_device_properties(0)
        env["sm_count"] = props.multi_processor_count
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout.strip()
            env["driver"] = out.splitlines()[0] if out else "unknown"
        except (OSError, subprocess.SubprocessError):
            env["driver"] = "unknown"
    return env


def update(name: str, section: str, value, env: dict | None = None) -> dict:
    """Merge one section into the kernel's record, refreshing the identity fields; drop the
    sections measured on another PTX."""
    contract = contracts.get(name)
    manifest = build.ensure_built([name])
    entry = manifest["kernels"][name]
    rec = load(name) or {}
    if rec.get("ptx_sha256") != entry["ptx_sha256"] or rec.get("cubin_sha256") != entry["cubin_sha256"]:
        rec = {}
    env = env or environment()
    rec.update({
        "kernel": name,
        "family": contract.family,
        "ptx": entry["ptx"],
        "ptx_sha256": entry["ptx_sha256"],
        "cubin_sha256": entry["cubin_sha256"],
        "ptxas_version": manifest["ptxas_version"],
        "ptxas_flags": manifest["flags"],
        "registers": entry["registers"],
        "static_smem": entry["static_smem"],
        "spill_bytes": entry["spill_stores"] + entry["spill_loads"],
        "threads_per_block": entry["threads_per_block"],
        "device": env.get("device", "unknown"),
        "driver": env.get("driver", "unknown"),
        "torch": env.get("torch"),
        "cuda_bindings": env.get("cuda_bindings"),
        "commit": env.get("commit"),
        "measured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    })
    rec[section] = value
    path = record_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(rec, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return rec


def validate(rec: dict, name: str) -> list[str]:
    """Schema problems of a record (empty when it is complete)."""
    problems = [f"missing {k}" for k in REQUIRED if k not in rec]
    corr = rec.get("correctness")
    if corr is None:
        problems.append("missing correctness")
    else:
        problems += [f"correctness: missing {k}" for k in CORRECTNESS_REQUIRED if k not in corr]
        san = corr.get("sanitizer", {})
        problems += [f"correctness.sanitizer: missing {k}" for k in ("memcheck", "racecheck") if k not in san]
    contract = contracts.get(name)
    if contract.bench:
        cases = rec.get("cases")
        if not cases:
            problems.append("missing cases")
        else:
            for i, c in enumerate(cases):
                problems += [f"cases[{i}]: missing {k}" for k in CASE_REQUIRED if k not in c]
    return problems


assert toolchain.ARCH == "sm_90a"
