"""The CUDA driver, through cuda-bindings: error checking and context binding. Launches go
through cuda-bindings' cuLaunchKernel (runtime.launch). ``raw_launch`` (the driver's entry
point through ctypes) is kept for experiments/runtime/host_dispatch.py, which measured it
slower: 5.0 us of host time per launch against 3.8 us for the cuda-bindings wrapper."""

from __future__ import annotations

import ctypes
import functools

from cuda.bindings import driver as cu


class CudaError(RuntimeError):
    pass


def error_name(code) -> str:
    try:
        err, name = cu.cuGetErrorName(cu.CUresult(int(code)))
        return name.decode() if err == cu.CUresult.CUDA_SUCCESS else f"CUresult {int(code)}"
    except Exception:  # an unknown code
        return f"CUresult {int(code)}"


def check(result, what: str):
    """Unwrap a cuda-bindings (err, *values) tuple, raising with ``what`` and the error's name."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise CudaError(f"{what}: {error_name(err)}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


LAUNCH_ARGTYPES = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
LaunchFn = ctypes.CFUNCTYPE(ctypes.c_int, *LAUNCH_ARGTYPES)


@functools.cache
def raw_launch():
    """cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra) -> CUresult,
    through ctypes, from cuGetProcAddress for the CUDA 12.0 ABI (the entry point
    cuda-bindings calls too). Not on the dispatch path: see the module docstring."""
    err, ptr, _status = cu.cuGetProcAddress(b"cuLaunchKernel", 12000, cu.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT)
    if err != cu.CUresult.CUDA_SUCCESS or not int(ptr):
        raise CudaError(f"cuGetProcAddress(cuLaunchKernel): {error_name(err)}")
    return LaunchFn(int(ptr))


def current_context_or_primary(device: int):
    """Make PyTorch's primary context current on this thread (PyTorch uses the primary
    context; Netra never creates its own)."""
    ctx = check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is not None and int(ctx) != 0:
        return ctx
    dev = check(cu.cuDeviceGet(device), "cuDeviceGet")
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx
