"""Check and time the persistent, prefetching gdn_decode_b32 candidate
(gen_gdn_decode_persist.py) beside the promoted kernel. Not yet run (written at the end of a
session with no device time left).

For each build (``persist``, and ``persist_r80`` at .maxnreg 80, 6 CTAs per SM):
- G = min(16 B, cuOccupancyMaxActiveClusters) clusters of 8; the contract gains the scalar
  ``items`` = 16 B (the kernel's last parameter) and the grid 8 G;
- correctness at every contract case and 2 seeds: against float64 (NaN-poisoned outputs) and
  bitwise against the promoted kernel (outputs and both pools), plus one case with a slot id
  outside the pool (bitwise the promoted kernel's NaN output and untouched pools);
- time at every B, the bench's way, the promoted kernel beside it, twice in alternation.
Prediction (docs/notes/gdn.md): B = 32 from 43 to ~37-39 us, B = 16 from 23.5 to ~20, B <= 4
unchanged. Writes persist_variant.json.

  python3 experiments/gdn/persist_variant.py --out "$OUT"      (on the H200, PYTHONPATH=src)
"""

import dataclasses
import json
import os
import sys
from pathlib import Path

import torch
from cuda.bindings import driver as cu

from netra import contracts, paths
from netra.contracts.spec import Scalar
from netra.lifecycle import bench, check, testbeds
from netra.lifecycle.metrics import rel_err
from netra.runtime import launch as rt_launch
from netra.runtime import loader

C = contracts.get("gdn_decode_b32")
gen = paths.load_module(Path(__file__).resolve().parent / "gen_gdn_decode_persist.py", "gen_gdn_decode_persist")
BUILDS = {"persist": {}, "persist_r80": dict(maxnreg=80)}
ROOF = 4.33e12


def max_clusters(fn) -> int:
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = 8 * 512, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = C.threads, 1, 1
    cfg.sharedMemBytes = 0
    err, n = cu.cuOccupancyMaxActiveClusters(fn, cfg)
    assert int(err) == 0, err
    return int(n)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.dirname(__file__)
    tb = testbeds.get(C.name)
    k = loader.load(C.name, 0)
    go_prom = rt_launch.make_guard_and_launch(C, function_handle=k.handle, device=0)
    gos, keep, res = {}, [], {"builds": {}, "correctness": {}, "timing": {}}
    for tag, kw in BUILDS.items():
        module, fn = loader.load_text(C.name, gen.generate(**kw))
        keep.append(module)
        G = max_clusters(fn)
        c2 = dataclasses.replace(C, params=C.params + (Scalar("items", "u32", value="16 * B"),),
                                 grid=(f"8 * (16 * B if 16 * B < {G} else {G})", "1", "1"))
        gos[tag] = (dataclasses.replace(tb, contract=c2), rt_launch.make_guard_and_launch(c2, function_handle=int(fn), device=0))
        res["builds"][tag] = {"options": repr(kw), "max_active_clusters": G}
        print(tag, res["builds"][tag], flush=True)
    for case in C.cases():
        for seed in (0, 1):
            b = check.Bench(tb, case, seed)
            b.reset()
            assert go_prom(*tb.args(b.bufs)) is None
            torch.cuda.synchronize()
            prom = b.results()
            ref = tb.reference(b.original_inputs())
            for tag, (tb2, go) in gos.items():
                b.reset()
                assert go(*tb2.args(b.bufs)) is None, tag
                torch.cuda.synchronize()
                got = b.results()
                errs = {n: rel_err(got[n], ref[n]) for n in tb.output_names()}
                bit = all(same(got[n], prom[n]) for n in tb.output_names())
                res["correctness"].setdefault(tag, {})[f"B{case['B']}_s{seed}"] = {"rel_err": errs, "bitwise_promoted": bit}
                print(tag, case, seed, {n: round(v, 6) for n, v in errs.items()}, "bitwise", bit, flush=True)
    # a slot id outside the pool: the promoted kernel's behaviour (NaN out for that sequence, pools untouched)
    case = {"B": 8, "P": 11}
    b = check.Bench(tb, case, 3)
    b.inputs["slots"][3] = case["P"]
    outs = {}
    for tag, (tb2, go) in [("promoted", (tb, go_prom))] + list(gos.items()):
        b.reset()
        assert go(*tb2.args(b.bufs)) is None, tag
        torch.cuda.synchronize()
        outs[tag] = b.results()
    for tag in gos:
        bit = all(same(outs[tag][n], outs["promoted"][n]) for n in tb.output_names())
        res["correctness"][tag]["bad_slot_bitwise_promoted"] = bit
        print(tag, "bad slot: bitwise the promoted kernel", bit, flush=True)
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    for case in C.cases():
        nread, nwrite = C.nbytes(case)
        row = {}
        for rep in (0, 1):
            r = bench.bench_case(tb, case, go_prom, floors, peers=False, log=lambda *a, **k: None)
            row.setdefault("promoted", []).append(r["median_us"])
            for tag, (tb2, go) in gos.items():
                r = bench.bench_case(tb2, case, go, floors, peers=False, log=lambda *a, **k: None)
                row.setdefault(tag, []).append(r["median_us"])
        res["timing"][case["B"]] = {t: {"us": v, "pct_roofline": 100 * (nread + nwrite) / (min(v) * 1e-6) / ROOF}
                                    for t, v in row.items()}
        print(case, {t: [round(x, 2) for x in v] for t, v in row.items()}, flush=True)
    json.dump({"method": bench.METHOD.format(R=bench.REPLAYS) + "; promoted and the builds timed twice in alternation",
               **res}, open(os.path.join(out_dir, "persist_variant.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
