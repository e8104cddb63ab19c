"""Small non-persistent CTAs, every weight byte requested before griddepcontrol.wait, so consecutive grids
of a PDL chain share the SMs (experiments/proj/README.md, the last section). gemv_chain_ceiling.py found a
GEMV-shaped reader (weights before the wait, x after it) at 85-102% of 4.33 TB/s as a PDL chain, and the
promoted kernels at 48-80%: their persistent CTAs (512 threads, ~100 KB of shared memory, one per SM) keep
the next grid off an SM until this grid's CTA there exits. Here one CTA per 16-row strip (grid S), W = 8
warps (`Small`; K = 2048: 2 chunks of 8 KB, 64 registers, ~49 KB of shared memory, four CTAs per SM; K = 4096:
4 chunks, 96 registers, ~82 KB, two per SM), the whole strip requested before the wait, and
`launch_dependents` at the start (``early``) or after the wait (``late``). The same generator and arithmetic
as the promoted kernels with 8 warps instead of 16 (another association of the warps' sums: not bitwise
them); only the M <= 8 body is built (``m8_only``), so only M <= 8 is run. Checked against the float64
reference on NaN-poisoned outputs (M = 1, 4, 8; 2 seeds) and for 5 bitwise repeats, then timed beside the
promoted kernel by the bench's method (CUDA-graph replay, >= 16 rotated copies), plainly and as a PDL chain,
with the largest shared-memory carveout.

  PYTHONPATH=src python3 experiments/proj/small_cta_variant.py --out "$OUT"
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from netra.contracts.proj import SHAPES, Fp8Gemv  # noqa: E402

MAXNREG = {2048: 64, 4096: 96}  # no spills with the M <= 8 body (ptxas 13.0.88)


@dataclasses.dataclass(frozen=True)
class Small(Fp8Gemv):
    """One CTA per strip and ``warps`` warps (warp w owns k block h warps + w of chunk h)."""

    warps: int = 8

    @property
    def W(self) -> int:
        return self.warps

    @property
    def grid(self) -> int:
        return self.S

    @property
    def name(self) -> str:
        return super().name + f"_w{self.warps}"


def build(sh: Small, early: bool) -> str:
    from netra import paths

    g = paths.generator("proj", "gen_fp8_gemv")
    t = g.generate(sh, pre_strips=None, early_trigger=early, x_first_m16=False, m8_only=True)
    head = f"  .reqntid {sh.threads}\n"
    assert head in t
    return t.replace(head, head + f"  .maxnreg {MAXNREG[sh.K]}\n", 1)


def main():
    import variant_ab

    from netra import contracts
    from netra.contracts import proj as pc
    from netra.lifecycle import bench, check, metrics, testbeds
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    floors = (rt_launch.raw_launcher(loader.load("empty_kernel", 0)), rt_launch.raw_launcher(loader.load("read_floor", 0)))
    res = {"method": bench.METHOD.format(R=bench.REPLAYS), "kernels": {}}
    keep = []
    which = [a for a in sys.argv[1:] if a in ("early", "late")] or ["early", "late"]
    for sh in [s for s in SHAPES if s.N * s.K >= 8 << 20]:
        c, tb = contracts.get(sh.name), testbeds.get(sh.name)
        s2 = Small(sh.N, sh.K, sh.use)
        c2 = pc._contract(s2)
        gos = {"promoted": tuple(rt_launch.make_guard_and_launch(c, function_handle=loader.load(c.name, 0).handle, device=0, **k)
                                 for k in ({}, {"launch": rt_launch.pdl_launcher()}))}
        for label in which:
            module, fn = loader.load_text(s2.name, build(s2, label == "early"), dynamic_smem=s2.smem)
            keep.append(module)
            variant_ab.set_carveout(fn, 100)
            gos[label] = tuple(rt_launch.make_guard_and_launch(c2, function_handle=int(fn), device=0, **k)
                               for k in ({}, {"launch": rt_launch.pdl_launcher()}))
        rows = {"registers_cap": MAXNREG[sh.K], "grid": s2.grid, "threads": s2.threads, "dynamic_smem": s2.smem}
        for label in which:  # correctness first: float64 reference, NaN-poisoned outputs, plain and PDL launches
            worst = 0.0
            for m in (1, 4, 8):
                for seed in (0, 1):
                    for go in gos[label]:
                        b = check.Bench(tb, {"M": m}, seed)
                        b.reset()
                        assert go(*tb.args(b.bufs)) is None
                        torch.cuda.synchronize()
                        ref = tb.reference_for(b.original_inputs(), b.bufs)
                        worst = max(worst, max(metrics.output_error(b.bufs[n], ref[n]) for n in tb.output_names()))
            det = variant_ab.repeats_bitwise(gos[label][0], tb, {"M": 8})
            rows[label + "_check"] = {"max_rel_err": worst, "tolerance": c.tolerance, "pass": worst <= c.tolerance,
                                      "deterministic": det}
            print(s2.name, label, rows[label + "_check"], flush=True)
        for m in (1, 8):
            row = {}
            for name, (go, go_pdl) in gos.items():
                if name != "promoted" and not rows[name + "_check"]["pass"]:
                    continue
                r = bench.bench_case(tb, {"M": m}, go, floors, peers=False, log=lambda *_: None, go_pdl=go_pdl)
                row[name] = {"us": r["median_us"], "pdl_chain_us": r.get("pdl_chain_us")}
            rows[f"M={m}"] = row
            print(sh.name, m, row, flush=True)
        res["kernels"][sh.name] = rows
        json.dump(res, open(variant_ab.out_path("small_cta_variant.json", HERE), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
