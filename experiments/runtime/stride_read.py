"""Does the order of a bandwidth-bound walk's concurrent bulk copies matter on the H200? (a diagnosis)

Why: the grouped gate | up with its routed strips walked expert-fastest (`gen_fp8_gemv.generate(grp_transpose=True)`,
experiments/decode/step_ab.py grp_transpose) was 450 us slower a batch-32 step (~11 us of a ~90 us launch), bitwise the
same work. Its concurrent strips sit at the same offset of experts 2 MB apart, where the promoted walk's are
consecutive 32 KB pieces. My reading: the same address bits, so the requests crowd a few HBM channels. Here nothing but
the copies: `stride_read.ptx`, 132 CTAs each bulk-copying 27 chunks of 32 KB into a 3-stage ring (the grouped walk's
shape at 57 distinct experts, ~113 MB), the chunks in three orders (see the PTX): consecutive (map 0), expert-fastest
with experts 2 MB apart (map 1), and expert-fastest with the experts skewed by a chunk (map 2).
Prediction: map 1 at least 10% slower than map 0; map 2 as map 0 if the reading is right. (Measured at f0ce9c1 with
batch 8's U = 57: all within 3%; the kernel itself lost only 0.2-0.7 us at M = 8 and 10-14 us at M = 24 / 32, where
U ~ 160 puts every concurrent chunk at the same offset: so --U=162 --chunks=78, batch 32's walk, asks again. Measured
at 268ffc7: every order 4.42-4.48 TB/s. The reading is refuted; the kernel's loss is its mapping's cost on each strip's
refill path: ../../docs/notes/decode.md, "After 499410f".)

Method: CUDA-graph replay of 8 launches over 2 buffers (each 114 MB > the 60 MiB L2), CUDA events, median of 7
(netra.lifecycle.bench.graph_time); TB/s = bytes / time.

  PYTHONPATH=src python3 experiments/runtime/stride_read.py --out "$OUT"
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
NCT, CHUNK = 132, 32768
SMEM = 3 * CHUNK + 64


def main():
    from cuda.bindings import driver as cu

    from netra.lifecycle import bench, records
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    arg = lambda k, d: int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith(f"--{k}=")), d))  # noqa: E731
    U, CHUNKS = arg("U", 57), arg("chunks", 27)  # batch 8's walk; --U=162 --chunks=78: batch 32's
    assert NCT * CHUNKS <= 64 * U, "maps 1 and 2 hold 64 chunks an expert"
    module, fn = loader.load_text("stride_read", (HERE / "stride_read.ptx").read_text(), dynamic_smem=SMEM)
    span = U * (2 << 20) + U * CHUNK  # map 2's reach (the largest)
    bufs = [torch.empty(span, dtype=torch.uint8, device="cuda") for _ in range(2)]
    for b in bufs:
        b.random_(0, 255)
    nbytes = NCT * CHUNKS * CHUNK

    class Args(ctypes.Structure):
        _fields_ = [("base", ctypes.c_uint64), ("map", ctypes.c_uint32), ("U", ctypes.c_uint32),
                    ("chunks", ctypes.c_uint32), ("nct", ctypes.c_uint32)]

    res = {"method": __doc__.split("\n\n")[2].replace("\n", " "), "bytes": nbytes, "U": U, "chunks": CHUNKS, "maps": {}}
    for rep in range(2):  # the three maps twice, interleaved
        for mp in (0, 1, 2, 3, 4, 5):
            argv = [Args(b.data_ptr(), mp, U, CHUNKS, NCT) for b in bufs]
            ptrs = [loader.param_pointers(a) for a in argv]

            def run(i):
                stream = torch.cuda.current_stream().cuda_stream
                err = cu.cuLaunchKernel(fn, NCT, 1, 1, 32, 1, 1, SMEM, stream, ctypes.addressof(ptrs[i % 2]), 0)[0]
                assert int(err) == 0, f"stride_read launch: {err}"

            us = bench.graph_time(run, 8)[0]
            row = res["maps"].setdefault(str(mp), {"us": []})
            row["us"].append(us)
            print(f"map {mp} run {rep}: {us:.2f} us, {nbytes / us / 1e6:.3f} TB/s", flush=True)
    for mp, row in res["maps"].items():
        row["tb_s"] = [nbytes / u / 1e6 for u in row["us"]]
    records.write_experiment(out_dir, f"stride_read_u{U}", res)
    del module


if __name__ == "__main__":
    main()
