"""`netra build`: assemble every kernel with the pinned ptxas for sm_90a, content-addressed
under build/, and write the manifest. Runs without a GPU. Fails, naming the kernel, when a
kernel spills, uses local memory, exceeds its register or shared-memory budget, or when its
.entry name, parameter list or thread count disagrees with its contract."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import contracts, paths
from ..contracts import Contract, Scalar, Tensor
from . import toolchain

MANIFEST = "manifest.json"


class BuildError(RuntimeError):
    pass


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class PtxEntry:
    name: str
    params: tuple[tuple[str, str], ...]  # (ptx type, name)
    reqntid: int | None
    maxntid: int | None


_ENTRY = re.compile(r"\.visible\s+\.entry\s+(\w+)\s*\(([^)]*)\)((?:\s*\.\w+\s+[\d, ]+)*)\s*\{", re.S)
_PARAM = re.compile(r"\.param\s+\.(\w+)\s+(\w+)")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def parse_ptx(text: str) -> list[PtxEntry]:
    """The .entry points of a PTX file with their parameter lists and thread directives."""
    text = _COMMENT.sub("", text)
    entries = []
    for m in _ENTRY.finditer(text):
        params = tuple((t, n) for t, n in _PARAM.findall(m.group(2)))
        directives = m.group(3)
        req = re.search(r"\.reqntid\s+(\d+)", directives)
        mx = re.search(r"\.maxntid\s+(\d+)", directives)
        entries.append(PtxEntry(m.group(1), params, int(req.group(1)) if req else None, int(mx.group(1)) if mx else None))
    return entries


def check_source(contract: Contract, text: str) -> PtxEntry:
    """The PTX's entry against the contract: one entry, same name, same parameters in order."""
    entries = parse_ptx(text)
    where = f"kernel {contract.name}"
    if len(entries) != 1:
        raise BuildError(f"{where}: expected exactly one .visible .entry, found {[e.name for e in entries]}")
    entry = entries[0]
    if entry.name != contract.name:
        raise BuildError(f"{where}: .entry is named {entry.name!r}; the file stem, entry and contract must be one name")
    expected = tuple((p.ptx, p.name) for p in contract.params)
    if entry.params != expected:
        raise BuildError(
            f"{where}: .entry parameters {['.' + t + ' ' + n for t, n in entry.params]} differ from the contract's "
            f"{['.' + t + ' ' + n for t, n in expected]}"
        )
    if contract.threads is not None and entry.reqntid != contract.threads:
        raise BuildError(f"{where}: contract says {contract.threads} threads per block; PTX says .reqntid {entry.reqntid}")
    if contract.threads is None and entry.maxntid is None:
        raise BuildError(f"{where}: a kernel launched with variable block size must declare .maxntid")
    return entry


_RES = {
    "registers": re.compile(r"Used (\d+) registers"),
    "barriers": re.compile(r"used (\d+) barriers"),
    "static_smem": re.compile(r"(\d+) bytes smem"),
    "stack_frame": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "cmem0": re.compile(r"(\d+) bytes cmem\[0\]"),
}


def resource_usage(ptxas: Path, ptx: Path) -> dict[str, int]:
    """Registers, spills, stack and shared memory from a separate `ptxas -v` run (adding -v
    changes the cubin's bytes, so the cubin itself is assembled without it)."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [str(ptxas), *toolchain.PTXAS_FLAGS, "-v", str(ptx), "-o", os.path.join(tmp, "v.cubin")],
            capture_output=True, text=True,
        )
    if proc.returncode != 0:
        raise BuildError(f"ptxas -v failed on {ptx.name}:\n{proc.stderr}")
    text = proc.stderr + proc.stdout
    return {k: int(m.group(1)) if (m := r.search(text)) else 0 for k, r in _RES.items()}


def check_resources(contract: Contract, res: dict[str, int]) -> None:
    where = f"kernel {contract.name}"
    if res["spill_stores"] or res["spill_loads"]:
        raise BuildError(f"{where}: spills ({res['spill_stores']} bytes stored, {res['spill_loads']} loaded); no spills allowed")
    if res["stack_frame"]:
        raise BuildError(f"{where}: uses a {res['stack_frame']}-byte stack frame (local memory); none allowed")
    if res["registers"] > contract.max_registers:
        raise BuildError(f"{where}: uses {res['registers']} registers; its contract allows {contract.max_registers}")
    if res["static_smem"] > contract.max_static_smem:
        raise BuildError(f"{where}: uses {res['static_smem']} bytes of static shared memory; its contract allows {contract.max_static_smem}")


def manifest_path() -> Path:
    return paths.BUILD / toolchain.ARCH / MANIFEST


def load_manifest() -> dict | None:
    p = manifest_path()
    if not p.is_file():
        return None
    return json.loads(p.read_text())


def _assemble(ptxas: Path, ptx: Path, out_dir: Path) -> tuple[Path, str]:
    with tempfile.NamedTemporaryFile(dir=out_dir, suffix=".cubin.tmp", delete=False) as tmp:
        tmp_path = Path(tmp.name)
    proc = subprocess.run([str(ptxas), *toolchain.PTXAS_FLAGS, str(ptx), "-o", str(tmp_path)], capture_output=True, text=True)
    if proc.returncode != 0:
        tmp_path.unlink(missing_ok=True)
        raise BuildError(f"ptxas failed on {ptx}:\n{proc.stderr}")
    digest = sha256(tmp_path.read_bytes())
    final = out_dir / f"{ptx.stem}-{digest[:16]}.cubin"
    os.replace(tmp_path, final)  # write, then rename: a reader never sees half a cubin
    return final, digest


def build(names: list[str] | None = None, *, force: bool = False, log=print) -> dict:
    """Assemble the named kernels (default: all), reuse unchanged ones, write the manifest."""
    ptxas = toolchain.ptxas()
    version = toolchain.ptxas_version(ptxas)
    out_dir = paths.BUILD / toolchain.ARCH
    out_dir.mkdir(parents=True, exist_ok=True)
    old = load_manifest() or {}
    same_tool = old.get("ptxas_version") == version and old.get("flags") == list(toolchain.PTXAS_FLAGS)
    kernels = dict(old.get("kernels", {})) if same_tool else {}
    for contract in contracts.select(names):
        ptx = paths.ptx_path(contract.arch, contract.family, contract.name)
        if not ptx.is_file():
            raise BuildError(f"kernel {contract.name}: its contract names {ptx.relative_to(paths.ROOT)}, which does not exist")
        raw = ptx.read_bytes()
        entry = check_source(contract, raw.decode())
        ptx_sha = sha256(raw)
        prev = kernels.get(contract.name)
        if (not force and prev and prev["ptx_sha256"] == ptx_sha
                and (out_dir / prev["cubin"]).is_file()
                and sha256((out_dir / prev["cubin"]).read_bytes()) == prev["cubin_sha256"]):
            check_resources(contract, prev)  # the contract's budget may have changed since
            log(f"  {contract.name}: up to date")
            continue
        res = resource_usage(ptxas, ptx)
        check_resources(contract, res)
        cubin, cubin_sha = _assemble(ptxas, ptx, out_dir)
        kernels[contract.name] = {
            "family": contract.family,
            "ptx": str(ptx.relative_to(paths.ROOT)),
            "ptx_sha256": ptx_sha,
            "cubin": cubin.name,
            "cubin_sha256": cubin_sha,
            "threads_per_block": contract.threads if contract.threads is not None else f"<= {entry.maxntid}",
            "params": [f".{t} {n}" for t, n in entry.params],
            **res,
        }
        log(f"  {contract.name}: {res['registers']} registers, {res['static_smem']} B smem, "
            f"{res['spill_stores'] + res['spill_loads']} B spills -> {cubin.name}")
    manifest = {
        "arch": toolchain.ARCH,
        "ptxas_version": version,
        "ptxas": str(ptxas),
        "flags": list(toolchain.PTXAS_FLAGS),
        "kernels": dict(sorted(kernels.items())),
    }
    tmp = manifest_path().with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, manifest_path())
    return manifest


def ensure_built(names: list[str]) -> dict:
    """The manifest, rebuilt first if any named kernel is missing or its .ptx changed."""
    manifest = load_manifest()
    if manifest is not None and manifest.get("ptxas_version") == toolchain.PTXAS_VERSION and manifest.get("flags") == list(toolchain.PTXAS_FLAGS):
        entries = manifest["kernels"]
        stale = []
        for n in names:
            c = contracts.get(n)
            e = entries.get(n)
            ptx = paths.ptx_path(c.arch, c.family, c.name)
            if e is None or e["ptx_sha256"] != sha256(ptx.read_bytes()):
                stale.append(n)
        if not stale:
            return manifest
    return build(names, log=lambda *_: None)


def disasm(name: str) -> str:
    manifest = ensure_built([name])
    cubin = paths.BUILD / toolchain.ARCH / manifest["kernels"][name]["cubin"]
    proc = subprocess.run([*toolchain.disassembler(), str(cubin)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"disassembling {name} failed:\n{proc.stderr}")
    return proc.stdout
