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


def load_module(path: Path, name: str | None = None):
    """Import a Python file that is not in a package (a kernel's generator, an experiment's
    variant), once per name; it is registered in sys.modules (dataclasses look it up there)."""
    import importlib.util
    import sys

    name = name or f"netra_file_{Path(path).stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def generator(family: str, stem: str, arch: str = "sm_90a"):
    """The generator kernels/<arch>/<family>/<stem>.py, imported."""
    return load_module(KERNELS / arch / family / f"{stem}.py", f"netra_gen_{stem}")
