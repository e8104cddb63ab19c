"""Repository paths. Netra runs from its checkout (an editable install): the kernels, the
build folder and the evidence live beside the package."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(os.environ.get("NETRA_ROOT", Path(__file__).resolve().parents[2]))
KERNELS = ROOT / "kernels"
BUILD = ROOT / "build"
RESULTS = ROOT / "results"


def ptx_path(arch: str, family: str, name: str) -> Path:
    return KERNELS / arch / family / f"{name}.ptx"


def results_dir(arch: str = "sm_90a") -> Path:
    return RESULTS / arch
