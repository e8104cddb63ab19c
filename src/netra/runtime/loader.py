"""Load each kernel's code object once per process into PyTorch's primary context, resolve
its symbol once, and check it: the cubin's SHA-256 against the manifest, the parameter
layout against cuFuncGetParamInfo, registers and local memory against the build, and the
dynamic shared-memory limit raised where the contract asks for more than 48 KB."""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

from cuda.bindings import driver as cu

from .. import contracts, paths
from ..contracts import PTX_SCALARS, Contract, Scalar
from . import build, toolchain
from .driver import CudaError, check, current_context_or_primary

_CTYPES = {"u64": ctypes.c_uint64, "u32": ctypes.c_uint32, "s32": ctypes.c_int32, "f32": ctypes.c_float}


class LoadError(RuntimeError):
    pass


def arg_struct(contract: Contract) -> type[ctypes.Structure]:
    """A ctypes struct mirroring the .entry parameter list (natural alignment, as CUDA lays
    out kernel parameters)."""
    fields = [(p.name, _CTYPES[p.ptx if isinstance(p, Scalar) else "u64"]) for p in contract.params]
    return type(f"{contract.name}_args", (ctypes.Structure,), {"_fields_": fields})


def param_pointers(args: ctypes.Structure):
    """The kernel parameter array cuLaunchKernel takes: one void * per field of ``args``, in field order, pointing
    into it (at least one entry, NULL for a struct without fields). The caller keeps both alive."""
    base, fields = ctypes.addressof(args), type(args)._fields_
    return (ctypes.c_void_p * max(len(fields), 1))(*[base + getattr(type(args), n).offset for n, _ in fields])


def set_carveout(function, percent: int, what: str = "kernel") -> None:
    """The function's preferred shared-memory carveout (percent of the SM's 228 KB; -1: the driver's choice)."""
    check(cu.cuFuncSetAttribute(function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                percent), f"{what}: preferred shared-memory carveout")


@dataclass
class LoadedKernel:
    contract: Contract
    device: int
    module: object
    function: object
    handle: int  # CUfunction as an integer, for the raw launch
    cubin_sha256: str
    ptx_sha256: str
    registers: int


_lock = threading.Lock()
_loaded: dict[tuple[str, int], LoadedKernel] = {}


def param_layout(function, n: int) -> list[tuple[int, int]]:
    """(offset, size) of each parameter as the driver sees it; checks there are exactly n."""
    layout = []
    for i in range(n):
        off, size = check(cu.cuFuncGetParamInfo(function, i), f"cuFuncGetParamInfo({i})")
        layout.append((int(off), int(size)))
    err, *_ = cu.cuFuncGetParamInfo(function, n)
    if err == cu.CUresult.CUDA_SUCCESS:
        raise LoadError(f"the cubin has more than the contract's {n} parameters")
    return layout


def allow_cluster_size(function, name: str) -> int:
    """The cluster size compiled into ``function`` (``.reqnctapercluster``; 0: none). A cluster
    of more than 8 CTAs is non-portable: the driver launches it only once the function allows
    it, which this does. (No promoted kernel needs it yet: the MoE router's 16-rank candidate.)"""
    A = cu.CUfunction_attribute
    dims = []
    for a in (A.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, A.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT,
              A.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH):
        err, v = cu.cuFuncGetAttribute(a, function)
        if err != cu.CUresult.CUDA_SUCCESS:
            return 0  # an older driver: no compile-time cluster to allow
        dims.append(int(v))
    if dims[0] == 0:
        return 0
    size = dims[0] * max(dims[1], 1) * max(dims[2], 1)
    if size > 8:
        check(cu.cuFuncSetAttribute(function, A.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
              f"{name}: allow a cluster of {size} CTAs")
    return size


def load(name: str, device: int) -> LoadedKernel:
    """The loaded kernel for this device, loading it on first use. Not for the dispatch path:
    it may build, read files and call the driver; ops call it once and keep the result."""
    key = (name, device)
    with _lock:
        if key in _loaded:
            return _loaded[key]
        contract = contracts.get(name)
        manifest = build.ensure_built([name])
        entry = manifest["kernels"][name]
        cubin = (paths.BUILD / toolchain.ARCH / entry["cubin"]).read_bytes()
        digest = build.sha256(cubin)
        if digest != entry["cubin_sha256"]:
            raise LoadError(f"kernel {name}: cubin SHA-256 {digest} differs from the manifest's {entry['cubin_sha256']}")
        import torch

        torch.cuda.init()
        with torch.cuda.device(device):
            torch.cuda.current_stream(device)  # PyTorch binds its primary context here
            current_context_or_primary(device)
            try:
                module = check(cu.cuModuleLoadData(cubin), f"kernel {name}: cuModuleLoadData")
                function = check(cu.cuModuleGetFunction(module, name.encode()), f"kernel {name}: cuModuleGetFunction")
            except CudaError as e:
                raise LoadError(str(e)) from e
            # Parameter layout: the driver's view against the struct the launcher fills.
            struct = arg_struct(contract)
            want = [(getattr(struct, p.name).offset, ctypes.sizeof(_CTYPES[p.ptx if isinstance(p, Scalar) else "u64"]))
                    for p in contract.params]
            got = param_layout(function, len(contract.params))
            if got != want:
                raise LoadError(f"kernel {name}: parameter layout {got} (offset, size) from cuFuncGetParamInfo "
                                f"differs from the contract's {want}")
            regs = check(cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, function), "NUM_REGS")
            local = check(cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, function), "LOCAL_SIZE_BYTES")
            if regs != entry["registers"] or local != 0:
                raise LoadError(f"kernel {name}: the driver reports {regs} registers and {local} B local memory; "
                                f"the build recorded {entry['registers']} and 0")
            if contract.dynamic_smem > 48 * 1024:
                check(cu.cuFuncSetAttribute(function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            contract.dynamic_smem), f"kernel {name}: raise dynamic shared memory")
            if contract.carveout >= 0:  # an SM changes carveout only when empty: neighbours under PDL share one
                set_carveout(function, contract.carveout, f"kernel {name}")
            allow_cluster_size(function, f"kernel {name}")
        kernel = LoadedKernel(contract, device, module, function, int(function), digest, entry["ptx_sha256"], regs)
        _loaded[key] = kernel
        return kernel


def load_text(name: str, ptx: str, device: int = 0, dynamic_smem: int = 0):
    """Assemble PTX text that is not a registered kernel (an experiment's variant) with the
    pinned ptxas and flags and load it into PyTorch's primary context. Returns (module,
    function); the caller keeps the module alive. No manifest and none of load()'s checks;
    ``dynamic_smem`` over 48 KiB is raised on the function, as load() does from the contract."""
    import subprocess
    import tempfile

    import torch

    with tempfile.TemporaryDirectory() as d:
        src = f"{d}/{name}.ptx"
        with open(src, "w") as f:
            f.write(ptx)
        proc = subprocess.run([str(toolchain.ptxas()), *toolchain.PTXAS_FLAGS, src, "-o", src + ".cubin"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise LoadError(f"ptxas failed on {name}:\n{proc.stderr}")
        with open(src + ".cubin", "rb") as f:
            cubin = f.read()
    torch.cuda.init()
    with torch.cuda.device(device):
        torch.cuda.current_stream(device)
        current_context_or_primary(device)
        module = check(cu.cuModuleLoadData(cubin), f"{name}: cuModuleLoadData")
        function = check(cu.cuModuleGetFunction(module, name.encode()), f"{name}: cuModuleGetFunction")
        if dynamic_smem > 48 * 1024:
            check(cu.cuFuncSetAttribute(function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        dynamic_smem), f"{name}: raise dynamic shared memory")
        allow_cluster_size(function, name)
        return module, function


def loaded() -> list[LoadedKernel]:
    return list(_loaded.values())


assert set(_CTYPES) >= set(PTX_SCALARS)
