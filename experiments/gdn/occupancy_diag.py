"""Why did 64 registers not speed up gdn_decode_b32 at B >= 8 (occupancy_variant.json)?

1. What the driver says fits: cuOccupancyMaxActiveBlocksPerMultiprocessor and
   cuOccupancyMaxActiveClusters (clusters of 8, the B = 32 grid, either cluster scheduling
   policy) for the promoted build and the .maxnreg 64, 56 and 48 builds.
2. The device's copy ceiling at the B = 32 state traffic: a CUDA graph of copies of 2 MiB x 32
   (the states read and written once, as the kernel does), rotated past 4x the L2, timed like
   the bench; its bytes read + written over the time, against 4.33 TB/s. Since d7441cc also the
   same bytes updated in place (neg_: read and written at the same addresses, as the kernel does).
Writes occupancy_diag.json.

  python3 experiments/gdn/occupancy_diag.py --out "$OUT"      (on the H200, PYTHONPATH=src)
"""

import json
import os
import sys

import torch
from cuda.bindings import driver as cu

from netra import contracts, paths
from netra.lifecycle import bench
from netra.runtime import loader

C = contracts.get("gdn_decode_b32")
gen = paths.generator("gdn", "gen_gdn_decode")
ROOF = 4.33e12


def occupancy(fn) -> dict:
    err, blocks = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, C.threads, 0)
    out = {"blocks_per_sm": int(blocks), "err": str(err)}
    for policy in ("SPREAD", "LOAD_BALANCING"):
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = 128 * 32, 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = C.threads, 1, 1
        cfg.sharedMemBytes = 0
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
        attr.value.clusterSchedulingPolicyPreference = getattr(cu.CUclusterSchedulingPolicy, f"CU_CLUSTER_SCHEDULING_POLICY_{policy}")
        cfg.attrs, cfg.numAttrs = [attr], 1
        err2, clusters = cu.cuOccupancyMaxActiveClusters(fn, cfg)
        out[f"max_active_clusters_of_8_{policy.lower()}"] = int(clusters)
        out[f"err_{policy.lower()}"] = str(err2)
    return out


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    res = {}
    k = loader.load(C.name, 0)
    res["promoted"] = occupancy(k.handle)
    keep = []
    for tag, nreg in (("r64a", 64), ("r56a", 56), ("r48a", 48)):
        mod, fn = loader.load_text(C.name, gen.generate(maxnreg=nreg, zn_async=True))
        keep.append(mod)
        res[tag] = occupancy(fn)
    print(res, flush=True)
    n = 32 * 2 * 1024 * 1024 // 4  # fp32 elements of 32 sequences' states of one layer
    for tag, nbytes in (("copy_b32_states", n * 4), ("copy_b16_states", n * 2)):
        copies = bench.copies_for(2 * nbytes)  # the bench's rotation (at least MIN_COPIES since 6c720c0; 2 before)
        src = [torch.randn(nbytes // 4, device="cuda") for _ in range(copies)]
        dst = [torch.empty_like(s) for s in src]
        t, _ = bench.graph_time(lambda i: dst[i].copy_(src[i]), copies)
        res[tag] = {"bytes_read_plus_written": 2 * nbytes, "us": t, "pct_roofline": 100 * 2 * nbytes / (t * 1e-6) / ROOF}
        print(tag, res[tag], flush=True)
        # the same bytes updated in place (read and written at the same addresses, as the decode step does
        # with its state pool): PyTorch's neg_ over the same copies
        tag_i = tag.replace("copy", "inplace")
        t, _ = bench.graph_time(lambda i: src[i].neg_(), copies)
        res[tag_i] = {"bytes_read_plus_written": 2 * nbytes, "us": t, "pct_roofline": 100 * 2 * nbytes / (t * 1e-6) / ROOF}
        print(tag_i, res[tag_i], flush=True)
    json.dump({"method": "driver occupancy queries; copies: " + bench.METHOD.format(R=bench.REPLAYS), **res},
              open(os.path.join(out_dir, "occupancy_diag.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
