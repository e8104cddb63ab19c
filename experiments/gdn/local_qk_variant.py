"""gdn_decode without the q/k exchange (gen_gdn_decode.generate(local_qk=True); CPU-built at this
commit, not yet run): every rank of a cluster convolves all 256 q and k channels of its key head
itself (two per thread; warp 0 also its 32 v channels) instead of each rank computing 16 + 16 and
pushing them to the 8 ranks by st.async, so the critical path loses the fan-out and the wait
for the last rank's q and k. The same instructions per channel and the same q[th], k[th] per
thread afterwards: the outputs and pools should be bitwise the promoted kernels'.

Checks and times, at every gdn_decode_b32 contract case, 2 seeds: the plain build against
gdn_decode_b32 and the PDL build against gdn_decode_b32_pdl (outputs and both pools bitwise;
NaN-poisoned outputs), then each pair by the bench's method, launched plainly and as a PDL chain.

Prediction: 80 registers instead of 72 (6 CTAs per SM instead of 7). B = 1: 4.5 -> ~4.0 us plain,
the PDL chain 2.72 -> ~2.3 (issue 5's 2.5 us bar); B = 16, 32: within +-5% (a shorter chain per
CTA, fewer CTAs resident).

  PYTHONPATH=src python3 experiments/gdn/local_qk_variant.py --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def main():
    from netra import contracts, paths
    from netra.lifecycle import bench, check, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    g = paths.generator("gdn", "gen_gdn_decode")
    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "cases": {}}
    keep = []
    pairs = {}
    for name, kw in (("gdn_decode_b32", {}), ("gdn_decode_b32_pdl", {"pdl": True, "name": "gdn_decode_b32_pdl"})):
        c = contracts.get(name)
        module, fn = loader.load_text(name, g.generate(local_qk=True, **kw))
        keep.append(module)
        h = loader.load(name, 0).handle
        mk = lambda handle, c=c, **k: rt_launch.make_guard_and_launch(c, function_handle=handle, device=0, **k)  # noqa: E731
        pairs[name] = (testbeds.get(name), mk(h), mk(int(fn)), mk(h, launch=rt_launch.pdl_launcher()),
                       mk(int(fn), launch=rt_launch.pdl_launcher()))
    ok = True
    for name, (tb, go_p, go_c, _, _) in pairs.items():
        for case in tb.contract.cases():
            for seed in (0, 1):
                outs = []
                for go in (go_p, go_c):
                    b = check.Bench(tb, case, seed)
                    b.reset()
                    assert go(*tb.args(b.bufs)) is None
                    torch.cuda.synchronize()
                    outs.append(b.results())
                same = all(torch.equal(outs[0][n], outs[1][n]) for n in outs[0])
                ok &= same
                res["cases"].setdefault(f"{name} {case}", {})[f"seed {seed} bitwise"] = same
                print(name, case, seed, "bitwise", same, flush=True)
    if ok:
        for name, (tb, go_p, go_c, go_pp, go_cp) in pairs.items():
            for case in tb.contract.cases():
                row = res["cases"][f"{name} {case}"]
                for label, go, go_pdl in (("promoted", go_p, go_pp), ("local_qk", go_c, go_cp)):
                    r = bench.bench_case(tb, case, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
                    row[label] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
                print(name, case, {k: v for k, v in row.items() if not k.startswith("seed")}, flush=True)
                json.dump(res, open(os.path.join(out_dir, "local_qk_variant.json"), "w"), indent=1)
    res["all_bitwise"] = bool(ok)
    json.dump(res, open(os.path.join(out_dir, "local_qk_variant.json"), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
