"""The 17-32-row dense builds with k split over clusters of 2 (Fp8Gemv(..., ksplit=2, tokens=32): named _ks2_t32), against
the builds the runner takes there: GDN in_proj and attention q | k | v (`fp8_gemv_n12288_k2048_t32`, `_n9216_k2048_t32`)
and out_proj / o_proj's two-pass residual build (`fp8_gemv_n2048_k4096_res_p2`).

Why (docs/notes/decode.md, "After ffd615d"): at batch 32 these three take ~960 us of the 8.2 ms step, 1.74-2.60x their
read floors. The traces (experiments/proj/README.md, the last sections) put a third of a _t32 launch in its x prologue:
every CTA loads all 32 rows of x (K = 2048) from L2 and converts 4 n-tiles (~2 us of delivery and ~2 us of conversion at
M = 32), and the two-pass residual build does it twice at K = 4096. With k split over a cluster of 2, each CTA takes
half of k of the cluster's strips, so it loads and converts half of x (32 tokens x K / 2: the 4-n-tile body's registers
hold it even at K = 4096, where the unsplit 32-token body could not, hence the two passes), streams the same bytes of
weights, and sends the sums of the rows it does not own to its peer by st.async once per strip (the promoted k split of
1024 x 2048, `_ks2`, at 32 tokens: gen_fp8_gemv.split_keep / split_finish with the slot sized by the tokens).
Prediction (us, M = 32, plainly): 12288 x 2048 14.4 -> 12-13, 9216 x 2048 11.4 -> 9.5-10.5, the residual 10.9 -> 7-8.5;
M = 17 about 1 us less each; M = 1 slower for the dense ones (their strips' exchange; the runner does not take them
there). Not bitwise the promoted builds (the halves of k are added as one more fp32 add): each build is checked against
the float64 reference on NaN-poisoned outputs (2 seeds, plain and PDL, 5 bitwise repeats), then timed beside the
promoted build by the bench's method (CUDA-graph replay, >= 16 rotated copies of inputs and weights), plainly and as a PDL
chain, with the read floor of the same run.

  PYTHONPATH=src python3 experiments/proj/ks2_t32_variant.py [--only=SUBSTRING] --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CHECK_M = (1, 8, 16, 17, 24, 32)
TIME_M = (1, 16, 17, 24, 32)
LABEL = "ks2_t32"


def main():
    import variant_ab

    from netra import contracts, paths
    from netra.contracts import proj as pc
    from netra.lifecycle import bench, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    g = paths.generator("proj", "gen_fp8_gemv")
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "candidate": LABEL, "kernels": {}}
    out = variant_ab.out_path("ks2_t32_variant.json", HERE)
    keep = []
    only = [a[len("--only="):] for a in sys.argv if a.startswith("--only=")]
    for sh in [s for s in pc.DENSE32 + (pc.RES_P2,) if not only or only[0] in s.name]:
        sh2 = dataclasses.replace(sh, ksplit=2, tokens=32, passes=1)
        c, tb, c2 = contracts.get(sh.name), testbeds.get(sh.name), pc._contract(sh2)
        module, fn = loader.load_text(sh2.name, g.generate(sh2), dynamic_smem=c2.dynamic_smem)
        keep.append(module)
        gos = {"promoted": variant_ab.plain_and_pdl(c, loader.load(c.name, 0).handle),
               LABEL: variant_ab.plain_and_pdl(c2, int(fn))}
        rows, firsts = {"candidate": sh2.name, "grid": c2.grid, "dynamic_smem": c2.dynamic_smem}, {}
        variant_ab.f64_checks(gos, tb, c, CHECK_M, rows, firsts)
        print(sh.name, rows, flush=True)
        variant_ab.time_rows(gos, tb, c, TIME_M, floors, rows, sh.name)
        res["kernels"][sh.name] = rows
        json.dump(res, open(out, "w"), indent=1)  # after every kernel
    del keep


if __name__ == "__main__":
    main()
