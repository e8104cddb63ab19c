"""Where ptxas and nvdisasm come from, and which version they are.

ptxas must be 13.0.88 everywhere: the pinned ``nvidia-cuda-nvcc==13.0.88`` wheel here, the
same binary in the H200 image. Flags change cubin bytes, so they are fixed here and recorded
beside every hash."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

PTXAS_VERSION = "13.0.88"
ARCH = "sm_90a"
PTXAS_FLAGS = ("-arch=sm_90a", "-O3")  # the cubin's bytes depend on these; never add -v here


class ToolchainError(RuntimeError):
    pass


def _wheel_bin(package: str, tool: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for cand in (Path(root) / "cu13" / "bin" / tool, Path(root) / "bin" / tool):
            if cand.is_file() and os.access(cand, os.X_OK):
                return cand
    return None


@functools.cache
def ptxas() -> Path:
    """The pinned ptxas: the wheel's, else one on PATH or under /usr/local/cuda of the same version."""
    candidates = [_wheel_bin("nvidia", "ptxas")]
    which = shutil.which("ptxas")
    candidates += [Path(which) if which else None, Path("/usr/local/cuda/bin/ptxas")]
    seen = []
    for cand in candidates:
        if cand is None or not cand.is_file():
            continue
        version = ptxas_version(cand)
        seen.append(f"{cand} ({version})")
        if version == PTXAS_VERSION:
            return cand
    raise ToolchainError(
        f"ptxas {PTXAS_VERSION} is required (pip install nvidia-cuda-nvcc=={PTXAS_VERSION}); "
        f"found: {', '.join(seen) or 'none'}"
    )


@functools.cache
def ptxas_version(path: Path) -> str:
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else "unknown"


@functools.cache
def disassembler() -> list[str]:
    """nvdisasm (pinned wheel, else PATH), else cuobjdump --dump-sass."""
    wheel = _wheel_bin("nvidia", "nvdisasm")
    if wheel:
        return [str(wheel), "-c"]
    for tool, args in (("nvdisasm", ["-c"]), ("cuobjdump", ["--dump-sass"])):
        path = shutil.which(tool) or (f"/usr/local/cuda/bin/{tool}" if Path(f"/usr/local/cuda/bin/{tool}").exists() else None)
        if path:
            return [path, *args]
    raise ToolchainError("no disassembler: pip install nvidia-cuda-nvdisasm, or put nvdisasm or cuobjdump on PATH")
