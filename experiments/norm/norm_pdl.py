"""PDL builds of the two norm kernels the decode runner launches: measured after d596a9d, promoted.

Why: the decode runner's PDL engine launches every kernel whose contract has a PDL form on programmatic edges; the norm
kernels had none, so each of their launches was a plain graph edge: no overlap with the kernel before or after, and the
~0.2-0.35 us the process's launch state adds to every plain edge (docs/notes/norm.md, launch_state_series8/9).
rmsnorm_h2048 runs 1 time per batch-1 step (the final norm) and, above 8 rows, once per layer (51 at batch 32);
qk_rmsnorm_d256 10 times per step.

The build: the hand-written PTX with the weight load moved before the activation load, a ``griddepcontrol.wait``
between them (the activations are the previous kernel's output), ``griddepcontrol.launch_dependents`` right after the
wait (one dependent grid at a time, as the projections), and the activation load coherent (``ld.global``, not ``.nc``:
under PDL the kernel starts while the previous grid runs). Launched plainly the two instructions are no-ops, so the
same bits either way.

Prediction: batch 1 5-10 us less per PDL step, batch 32 25-50 us; plain steps unchanged; logits bitwise.
Measured at d596a9d (experiments/decode/step_ab_current_norm_pdl_current_again{,_b32}.json, ms plain / PDL, bitwise):
batch 1 2.065 / 1.953 against 2.052-2.065 / 1.963-1.969; batch 32 9.562 / 9.279 against 9.560-9.574 / 9.329-9.341.
So 10-16 us less per batch-1 PDL step and 50-62 us at batch 32, plain unchanged: promoted (the committed PTX is now
``pdl_build``'s output). ``plain_build`` gives the build before, for step_ab's form norm_prev.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# per kernel: (the activation load, the weight load) exactly as in the PTX before promotion
LOADS = {
    "rmsnorm_h2048": ("  ld.global.nc.v4.b32 {%a0, %a1, %a2, %a3}, [%px];",
                      "  ld.global.nc.v4.b32 {%b0, %b1, %b2, %b3}, [%pw];"),
    "qk_rmsnorm_d256": ("  ld.global.nc.v4.b32 {%a0, %a1, %a2, %a3}, [%ps];",
                        "  ld.global.nc.v4.b32 {%b0, %b1, %b2, %b3}, [%pw];"),
}
WAIT = ("  griddepcontrol.wait;  // the activations are the previous kernel's output (PDL; a no-op launched plainly)\n"
        "  griddepcontrol.launch_dependents;  // after the wait: one dependent grid at a time\n")


def _pdl_lines(name: str) -> str:
    act, wt = LOADS[name]
    return f"{wt}\n{WAIT}{act.replace('ld.global.nc.', 'ld.global.')}\n"


def plain_build(name: str) -> str:
    """The PTX of ``name`` before promotion: the activation load first and non-coherent, no griddepcontrol."""
    ptx = (ROOT / "kernels" / "sm_90a" / "norm" / f"{name}.ptx").read_text()
    act, wt = LOADS[name]
    assert ptx.count(_pdl_lines(name)) == 1, f"{name}: its loads moved; update LOADS"
    return ptx.replace(_pdl_lines(name), f"{act}\n{wt}\n")


def pdl_build(name: str) -> str:
    """The PDL build of ``name`` derived from ``plain_build`` (the committed PTX, since promotion)."""
    act, wt = LOADS[name]
    return plain_build(name).replace(f"{act}\n{wt}\n", _pdl_lines(name))


def trigger_first_build(name: str) -> str:
    """A candidate (after 095693b; experiments/decode/step_ab.py norm_trigger_first): the committed PDL build with
    ``griddepcontrol.launch_dependents`` before the weight load and ``griddepcontrol.wait``, so under PDL the next kernel
    (above 8 rows GDN's b | a or attention's q | k | v, after the final norm the LM head) launches as soon as every norm
    CTA is resident and requests its weights during the kernel ahead of the norm. Valid because those kernels read the
    norm's output, and write anything, only after their own wait, and trigger after it (no deeper cascade). The same
    instructions otherwise, so the same bits."""
    ptx = (ROOT / "kernels" / "sm_90a" / "norm" / f"{name}.ptx").read_text()
    pdl, trig = _pdl_lines(name), WAIT.splitlines(keepends=True)[1]
    assert ptx.count(pdl) == 1 and ptx.count(trig) == 1, f"{name}: its PDL lines moved"
    first = "  griddepcontrol.launch_dependents;  // first: the next kernel requests its weights during the one ahead\n"
    return ptx.replace(pdl, first + pdl.replace(trig, ""))

