"""`netra build` without a GPU: every contract's kernel assembles with the pinned ptxas,
the manifest records what it should, assembly is deterministic, and the source and
resource checks fail, naming the kernel, when PTX or resources disagree with the contract.

Every build here writes under a temporary folder (``netra.paths.BUILD`` is patched), so
these tests never touch the checkout's build/."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from netra import contracts, paths
from netra.runtime import build, toolchain
from netra.runtime.build import BuildError

ALL = contracts.all_contracts()
NAMES = [c.name for c in ALL]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _ptx_file(c) -> Path:
    return paths.ptx_path(c.arch, c.family, c.name)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One build of every kernel into a private build folder: (manifest, out_dir)."""
    root = tmp_path_factory.mktemp("build")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(paths, "BUILD", root)
        manifest = build.build(log=lambda *_: None)
        # manifest_path() reads paths.BUILD at call time: the manifest landed in the tmp root.
        assert build.manifest_path() == root / toolchain.ARCH / build.MANIFEST
        on_disk = json.loads(build.manifest_path().read_text())
    return manifest, on_disk, root / toolchain.ARCH


@pytest.fixture
def private_build(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "BUILD", tmp_path)
    return tmp_path / toolchain.ARCH


def test_pinned_ptxas():
    assert toolchain.ptxas_version(toolchain.ptxas()) == toolchain.PTXAS_VERSION == "13.0.88"


def test_manifest_written_and_returned(built):
    manifest, on_disk, _ = built
    assert manifest == on_disk
    assert manifest["arch"] == "sm_90a"
    assert manifest["ptxas_version"] == "13.0.88"
    assert manifest["flags"] == list(toolchain.PTXAS_FLAGS)
    assert sorted(manifest["kernels"]) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_manifest_entry(built, name):
    manifest, _, out_dir = built
    c = contracts.get(name)
    e = manifest["kernels"][name]
    ptx = _ptx_file(c)
    assert e["family"] == c.family
    assert e["ptx"] == f"kernels/sm_90a/{c.family}/{name}.ptx"
    assert e["ptx_sha256"] == _sha(ptx.read_bytes())
    cubin = out_dir / e["cubin"]
    assert cubin.is_file() and cubin.stat().st_size > 0
    assert e["cubin_sha256"] == _sha(cubin.read_bytes())
    assert e["cubin"] == f"{name}-{e['cubin_sha256'][:16]}.cubin"  # content-addressed
    assert cubin.read_bytes()[:4] == b"\x7fELF"
    assert e["spill_stores"] == 0 and e["spill_loads"] == 0 and e["stack_frame"] == 0
    assert isinstance(e["registers"], int) and 0 < e["registers"] <= c.max_registers
    assert isinstance(e["static_smem"], int) and 0 <= e["static_smem"] <= c.max_static_smem
    if c.threads is not None:
        assert e["threads_per_block"] == c.threads
    else:
        assert str(e["threads_per_block"]).startswith("<= ")
    assert e["params"] == [f".{p.ptx} {p.name}" for p in c.params]


def test_no_temporary_files_left(built):
    _, _, out_dir = built
    leftovers = [p.name for p in out_dir.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
    cubins = sorted(p.name for p in out_dir.glob("*.cubin"))
    assert len(cubins) == len(NAMES)


def test_ptxas_is_deterministic(built, private_build):
    """A forced second assembly, into a different folder, gives byte-identical cubins."""
    first, _, first_dir = built
    second = build.build(force=True, log=lambda *_: None)
    for name in NAMES:
        a, b = first["kernels"][name], second["kernels"][name]
        assert a["cubin_sha256"] == b["cubin_sha256"], name
        assert (first_dir / a["cubin"]).read_bytes() == (private_build / b["cubin"]).read_bytes(), name


def test_second_build_reuses_unchanged_kernels(built, private_build):
    first = build.build(log=lambda *_: None)
    lines: list[str] = []
    again = build.build(log=lines.append)
    assert again == first
    assert sorted(lines) == sorted(f"  {n}: up to date" for n in NAMES)


def test_build_subset_keeps_other_entries(private_build):
    build.build(["smoke_copy"], log=lambda *_: None)
    assert list(build.load_manifest()["kernels"]) == ["smoke_copy"]
    build.build(["norm"], log=lambda *_: None)  # a family name selects the family
    have = set(build.load_manifest()["kernels"])
    assert have == {"smoke_copy"} | {c.name for c in ALL if c.family == "norm"}


def test_missing_ptx_names_the_kernel(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    monkeypatch.setattr(paths, "KERNELS", tmp_path / "kernels")
    monkeypatch.setattr(paths, "BUILD", tmp_path / "build")
    with pytest.raises(BuildError, match="kernel smoke_copy: .*kernels/sm_90a/runtime/smoke_copy.ptx"):
        build.build(["smoke_copy"], log=lambda *_: None)


# --- check_source ------------------------------------------------------------------------
def _text(name: str) -> str:
    return _ptx_file(contracts.get(name)).read_text()


def _edit(text: str, old: str, new: str) -> str:
    assert old in text, f"test setup: {old!r} not in the PTX"
    out = text.replace(old, new)
    assert out != text
    return out


@pytest.mark.parametrize("name", NAMES)
def test_check_source_accepts_committed_ptx(name):
    c = contracts.get(name)
    entry = build.check_source(c, _text(name))
    assert entry.name == name
    assert entry.params == tuple((p.ptx, p.name) for p in c.params)
    if c.threads is not None:
        assert entry.reqntid == c.threads
    else:
        assert entry.maxntid is not None


SOURCE_EDITS = [
    # (kernel, old, new, what the message must say)
    ("rmsnorm_h2048", ".entry rmsnorm_h2048(", ".entry rmsnorm_h2048_v2(", ".entry is named 'rmsnorm_h2048_v2'"),
    ("smoke_copy", ".entry smoke_copy(", ".entry smoke(", ".entry is named 'smoke'"),
    ("rmsnorm_h2048", "  .param .u64 w,\n", "", "parameters"),  # missing
    ("rmsnorm_h2048", ".param .u64 w,", ".param .u64 weight,", "parameters"),  # renamed
    ("rmsnorm_h2048", ".param .f32 eps", ".param .u32 eps", "parameters"),  # retyped
    ("qk_rmsnorm_d256", ".param .u32 q_head_stride,", ".param .u64 q_head_stride,", "parameters"),
    ("add_rmsnorm_h2048", ".param .u64 x,\n  .param .u64 residual,", ".param .u64 residual,\n  .param .u64 x,",
     "parameters"),  # reordered
    ("gated_rmsnorm_d128", "  .param .f32 eps\n", "  .param .f32 eps,\n  .param .u32 extra\n", "parameters"),  # extra
    # {t} is the contract's thread count
    ("rmsnorm_h2048", ".reqntid {t}", ".reqntid 128", "contract says {t} threads per block; PTX says .reqntid 128"),
    ("qk_rmsnorm_d256", ".reqntid {t}", ".maxntid {t}", "PTX says .reqntid None"),
    ("gated_rmsnorm_d128", ".reqntid {t}", "", "PTX says .reqntid None"),
    ("add_rmsnorm_h2048", ".reqntid {t}", ".reqntid {t2}", "contract says {t} threads per block; PTX says .reqntid {t2}"),
    ("empty_kernel", ".maxntid 1024", "", "must declare .maxntid"),
]


@pytest.mark.parametrize("name, old, new, says", SOURCE_EDITS,
                         ids=[f"{n}:{i}" for i, (n, *_rest) in enumerate(SOURCE_EDITS)])
def test_check_source_rejects(name, old, new, says):
    c = contracts.get(name)
    t = {"t": c.threads, "t2": (c.threads or 0) * 2}
    old, new, says = old.format(**t), new.format(**t), says.format(**t)
    bad = _edit(_text(name), old, new)
    with pytest.raises(BuildError) as info:
        build.check_source(c, bad)
    msg = str(info.value)
    assert msg.startswith(f"kernel {name}:"), msg
    assert says in msg, msg


def test_check_source_rejects_two_entries():
    c = contracts.get("smoke_copy")
    text = _text("smoke_copy")
    with pytest.raises(BuildError, match=r"kernel smoke_copy: expected exactly one \.visible \.entry"):
        build.check_source(c, text + "\n" + _text("empty_kernel").split(".address_size 64", 1)[1])


def test_check_source_ignores_commented_out_parameters():
    c = contracts.get("rmsnorm_h2048")
    text = _edit(_text("rmsnorm_h2048"), "  .param .f32 eps\n", "  .param .f32 eps\n  // .param .u64 old\n")
    assert build.check_source(c, text).params == tuple((p.ptx, p.name) for p in c.params)


def test_build_fails_on_mismatched_source(tmp_path, monkeypatch):
    """build() itself runs check_source: a kernels tree whose smoke_copy has the wrong
    thread count fails naming the kernel, and writes no manifest."""
    kernels = tmp_path / "kernels"
    shutil.copytree(paths.KERNELS, kernels)
    f = kernels / "sm_90a" / "runtime" / "smoke_copy.ptx"
    threads = contracts.get("smoke_copy").threads
    f.write_text(_edit(f.read_text(), f".reqntid {threads}", f".reqntid {2 * threads}"))
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    monkeypatch.setattr(paths, "KERNELS", kernels)
    monkeypatch.setattr(paths, "BUILD", tmp_path / "build")
    with pytest.raises(BuildError, match=f"kernel smoke_copy: .*{2 * threads}"):
        build.build(["smoke_copy"], log=lambda *_: None)
    assert not build.manifest_path().exists()


# --- check_resources ---------------------------------------------------------------------
def _res(built, name: str) -> dict[str, int]:
    manifest, _, _ = built
    return {k: manifest["kernels"][name][k] for k in build._RES}


@pytest.mark.parametrize("name", NAMES)
def test_check_resources_accepts_built(built, name):
    build.check_resources(contracts.get(name), _res(built, name))  # does not raise


@pytest.mark.parametrize("name", ["rmsnorm_h2048", "qk_rmsnorm_d256", "smoke_copy"])
@pytest.mark.parametrize("change, says", [
    ({"spill_stores": 8}, "spills (8 bytes stored, 0 loaded)"),
    ({"spill_loads": 4}, "spills (0 bytes stored, 4 loaded)"),
    ({"stack_frame": 16}, "16-byte stack frame"),
])
def test_check_resources_rejects(built, name, change, says):
    res = _res(built, name) | change
    with pytest.raises(BuildError) as info:
        build.check_resources(contracts.get(name), res)
    assert str(info.value).startswith(f"kernel {name}:")
    assert says in str(info.value)


@pytest.mark.parametrize("name", NAMES)
def test_check_resources_rejects_too_many_registers(built, name):
    c = dataclasses.replace(contracts.get(name), max_registers=1)
    res = _res(built, name)
    with pytest.raises(BuildError) as info:
        build.check_resources(c, res)
    assert str(info.value) == f"kernel {name}: uses {res['registers']} registers; its contract allows 1"
    # one over the contract's own budget fails too; exactly at it passes
    build.check_resources(dataclasses.replace(c, max_registers=res["registers"]), res)


@pytest.mark.parametrize("name", NAMES)
def test_check_resources_rejects_too_much_static_smem(built, name):
    c = contracts.get(name)
    res = _res(built, name) | {"static_smem": c.max_static_smem + 16}
    with pytest.raises(BuildError) as info:
        build.check_resources(c, res)
    assert str(info.value).startswith(f"kernel {name}: uses {c.max_static_smem + 16} bytes of static shared memory")


def test_resource_usage_parses_ptxas(built):
    """resource_usage's numbers come from ptxas -v, not defaults: the norm kernels that use a
    shared-memory reduction report it and a barrier."""
    res = build.resource_usage(toolchain.ptxas(), _ptx_file(contracts.get("rmsnorm_h2048")))
    assert res["registers"] > 0
    assert res["static_smem"] == 32 and res["barriers"] >= 1
    assert res == _res(built, "rmsnorm_h2048")


# --- regressions: the hash is of the file's bytes; cached kernels meet today's contract ----
def test_ptx_sha256_is_of_file_bytes_even_with_crlf(tmp_path, monkeypatch):
    kernels = tmp_path / "kernels"
    shutil.copytree(paths.KERNELS, kernels)
    f = kernels / "sm_90a" / "runtime" / "smoke_copy.ptx"
    f.write_bytes(f.read_bytes().replace(b"\n", b"\r\n"))
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    monkeypatch.setattr(paths, "KERNELS", kernels)
    monkeypatch.setattr(paths, "BUILD", tmp_path / "build")
    manifest = build.build(["smoke_copy"], log=lambda *_: None)
    assert manifest["kernels"]["smoke_copy"]["ptx_sha256"] == _sha(f.read_bytes())
    # ensure_built agrees that it is up to date (it hashes the bytes too): no rebuild
    lines: list[str] = []
    monkeypatch.setattr(build, "build", lambda *a, **k: lines.append("rebuilt") or {})
    assert build.ensure_built(["smoke_copy"]) == manifest
    assert lines == []


def test_cached_kernel_is_rechecked_against_its_contract(private_build, monkeypatch):
    build.build(["smoke_copy"], log=lambda *_: None)
    tight = dataclasses.replace(contracts.get("smoke_copy"), max_registers=1)
    monkeypatch.setitem(contracts.REGISTRY, "smoke_copy", tight)
    with pytest.raises(BuildError, match="kernel smoke_copy: uses .* registers; its contract allows 1"):
        build.build(["smoke_copy"], log=lambda *_: None)


def test_ensure_built_rebuilds_a_changed_ptx(tmp_path, monkeypatch):
    kernels = tmp_path / "kernels"
    shutil.copytree(paths.KERNELS, kernels)
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    monkeypatch.setattr(paths, "KERNELS", kernels)
    monkeypatch.setattr(paths, "BUILD", tmp_path / "build")
    first = build.ensure_built(["smoke_copy"])
    f = kernels / "sm_90a" / "runtime" / "smoke_copy.ptx"
    f.write_bytes(f.read_bytes() + b"// a comment changes the hash, not the cubin\n")
    second = build.ensure_built(["smoke_copy"])
    a, b = first["kernels"]["smoke_copy"], second["kernels"]["smoke_copy"]
    assert b["ptx_sha256"] == _sha(f.read_bytes()) != a["ptx_sha256"]
    assert b["cubin_sha256"] == a["cubin_sha256"]  # comments do not reach the cubin


def test_load_text_names_the_kernel_when_ptxas_fails():
    """Experiments assemble variant PTX through loader.load_text: a ptxas error is a LoadError
    naming the kernel, raised before any GPU is touched."""
    from netra.runtime import loader

    with pytest.raises(loader.LoadError, match="ptxas failed on my_variant"):
        loader.load_text("my_variant", ".version 8.0\n.target sm_90a\n.address_size 64\nnot ptx")


@pytest.mark.parametrize("name", ["rmsnorm_h2048", "qk_rmsnorm_d256"])
def test_norm_pdl_build(name, tmp_path):
    """The norm kernels' PDL builds (experiments/norm/norm_pdl.py, promoted after d596a9d): the committed PTX is the
    build before with the weight load first, griddepcontrol.wait and launch_dependents, then the activation load
    coherent; nothing else differs, and the build before (step_ab's form norm_prev) assembles without spills too."""
    norm_pdl = paths.load_module(paths.ROOT / "experiments" / "norm" / "norm_pdl.py", "norm_pdl")
    committed = paths.ptx_path("sm_90a", "norm", name).read_text()
    assert norm_pdl.pdl_build(name) == committed
    plain = norm_pdl.plain_build(name)
    act, wt = norm_pdl.LOADS[name]
    coherent = act.strip().replace("ld.global.nc.", "ld.global.")
    added = [ln for ln in committed.splitlines() if ln not in plain.splitlines()]
    assert [ln.split("//")[0].strip() for ln in added] == ["griddepcontrol.wait;", "griddepcontrol.launch_dependents;",
                                                             coherent]
    assert committed.index(wt) < committed.index("griddepcontrol.wait;") < committed.index(coherent)
    assert act not in committed and len(committed.splitlines()) == len(plain.splitlines()) + 2
    assert contracts.get(name).pdl
    path = tmp_path / f"{name}.ptx"
    path.write_text(plain)
    res = build.resource_usage(toolchain.ptxas(), path)
    assert res["spill_stores"] == res["spill_loads"] == res["stack_frame"] == 0, res
