"""Where the host time of one eager Netra op goes: the launch alone (cuda-bindings wrapper,
then the raw ctypes entry point), the generated guard-and-launch, the public op, against a
small PyTorch op. Host wall time (time.perf_counter) per call, median of 5 batches of 4000."""

import json
import os
import statistics
import sys
import time

import torch
from cuda.bindings import driver as cu

import netra.ops as ops
from netra.runtime import driver, launch as rt_launch, loader


def per_call(fn, calls=4000, batches=5):
    for _ in range(300):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    ops.prepare()
    empty = loader.load("empty_kernel", 0)
    stream = torch.cuda.current_stream().cuda_stream
    raw = driver.raw_launch()
    import ctypes
    from cuda.bindings import driver as cu2
    err, ptr, _ = cu2.cuGetProcAddress(b"cuLaunchKernel", 12000, cu2.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT)
    raw_gil = ctypes.PYFUNCTYPE(ctypes.c_int, *driver.LAUNCH_ARGTYPES)(int(ptr))  # keeps the GIL: no release/reacquire
    k = loader.load("rmsnorm_h2048", 0)
    go = rt_launch.make_guard_and_launch(k.contract, function_handle=k.handle, device=0)
    x = torch.randn(1, 2048, device="cuda").bfloat16()
    w = torch.randn(2048, device="cuda").bfloat16()
    y = torch.empty_like(x)
    t = torch.ones(1, device="cuda")
    res = {
        "cuda_bindings_cuLaunchKernel_empty": per_call(lambda: cu.cuLaunchKernel(empty.function, 1, 1, 1, 32, 1, 1, 0, stream, 0, 0)),
        "ctypes_cuLaunchKernel_empty": per_call(lambda: raw(empty.handle, 1, 1, 1, 32, 1, 1, 0, stream, None, None)),
        "ctypes_pyfunctype_cuLaunchKernel_empty": per_call(lambda: raw_gil(empty.handle, 1, 1, 1, 32, 1, 1, 0, stream, None, None)),
        "raw_stream_lookup": per_call(lambda: torch._C._cuda_getCurrentRawStream(0)),
        "guard_and_launch_rmsnorm": per_call(lambda: go(x, w, y, 1e-6)),
        "public_op_rmsnorm": per_call(lambda: ops.rmsnorm(x, w, 1e-6, out=y)),
        "torch_add_": per_call(lambda: t.add_(1.0)),
        "torch_rmsnorm_eager_8_ops": per_call(lambda: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + w.float())).bfloat16()),
    }
    json.dump({"method": "host wall time per call, median of 5 batches of 4000 after 300 warm-up", "us": res},
              open(os.path.join(out_dir, "host_dispatch.json"), "w"), indent=1)
    for kk, v in res.items():
        print(f"{kk:40s} {v:7.2f} us")


if __name__ == "__main__":
    main()
