"""PDL builds of the two norm kernels the decode runner launches (a candidate after edb2c17; not measured yet).

Why: the decode runner's PDL engine launches every kernel whose contract has a PDL form on programmatic edges; the norm
kernels have none, so each of their launches is a plain graph edge: no overlap with the kernel before or after, and the
~0.2-0.35 us the process's launch state adds to every plain edge (docs/notes/norm.md, launch_state_series8/9).
rmsnorm_h2048 runs 1 time per batch-1 step (the final norm) and, above 8 rows, once per layer (51 at batch 32);
qk_rmsnorm_d256 10 times per step.

The build (``pdl_build``): the committed hand-written PTX with the weight load moved before the activation load, a
``griddepcontrol.wait`` between them (the activations are the previous kernel's output), ``griddepcontrol.launch_dependents``
right after the wait (one dependent grid at a time, as the projections), and the activation load coherent
(``ld.global``, not ``.nc``: under PDL the kernel starts while the previous grid runs; the FP8 kernels' coherent_x).
Launched plainly the two instructions are no-ops, so the candidate gives the same bits either way.

Prediction: batch 1 5-10 us less per PDL step, batch 32 25-50 us; plain steps unchanged; logits bitwise.
Measure with ``experiments/decode/step_ab.py current norm_pdl current_again`` at batch 1 and 32 (its form swaps these
builds in and gives the two ops' contracts a ``pdl`` string, so the PDL engine launches them with the attribute).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# per kernel: (the activation load, the weight load) exactly as in the committed PTX
LOADS = {
    "rmsnorm_h2048": ("  ld.global.nc.v4.b32 {%a0, %a1, %a2, %a3}, [%px];",
                      "  ld.global.nc.v4.b32 {%b0, %b1, %b2, %b3}, [%pw];"),
    "qk_rmsnorm_d256": ("  ld.global.nc.v4.b32 {%a0, %a1, %a2, %a3}, [%ps];",
                        "  ld.global.nc.v4.b32 {%b0, %b1, %b2, %b3}, [%pw];"),
}
PDL = {"rmsnorm_h2048": "w (the norm weight) before the wait; x after it",
       "qk_rmsnorm_d256": "q_weight and k_weight before the wait; q and k after it"}


def pdl_build(name: str) -> str:
    """The candidate PTX of ``name`` (same entry name, parameters and arithmetic)."""
    ptx = (ROOT / "kernels" / "sm_90a" / "norm" / f"{name}.ptx").read_text()
    act, wt = LOADS[name]
    pair = f"{act}\n{wt}\n"
    assert ptx.count(pair) == 1, f"{name}: its loads moved; update LOADS"
    new = (f"{wt}\n"
           "  griddepcontrol.wait;  // the activations are the previous kernel's output (PDL; a no-op launched plainly)\n"
           "  griddepcontrol.launch_dependents;  // after the wait: one dependent grid at a time\n"
           f"{act.replace('ld.global.nc.', 'ld.global.')}\n")
    return ptx.replace(pair, new)
