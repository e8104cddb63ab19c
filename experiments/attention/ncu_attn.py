"""Launch the attention kernels on the testbed's inputs for Nsight Compute (a diagnosis, no timing of its own).

  ncu --clock-control none --kernel-name regex:attn_decode --set full python3 experiments/attention/ncu_attn.py \
      [--kernel attn_decode_d256] B,NP [B,NP ...]

For each (B, NP): the testbed's inputs (P = B NP + 3 pages, T = 64 NP, seed 0), one launch to bind and warm, then
two more (ncu profiles each launch it matches; its --launch-skip picks)."""

from __future__ import annotations

import sys

import torch


def main():
    from netra import ops
    from netra.lifecycle import testbeds

    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    name = sys.argv[sys.argv.index("--kernel") + 1] if "--kernel" in sys.argv else "attn_decode_d256"
    args = [a for a in args if a != name]
    tb = testbeds.get(name)
    go = next(k for k in ops.OPS.values() if k.contract.name == name)
    for spec in args:
        B, NP = map(int, spec.split(","))
        i = tb.make({"B": B, "NP": NP, "P": B * NP + 3, "T": 64 * NP}, torch.Generator().manual_seed(0), "cuda")
        bufs = {**i, **tb.alloc_outputs({"B": B, "NP": NP, "P": B * NP + 3, "T": 64 * NP}, "cuda")}
        for _ in range(3):
            assert go.go(*tb.args(bufs)) is None, "the guard refused the testbed's inputs"
        torch.cuda.synchronize()
        print(name, spec, "launched 3 times", flush=True)


if __name__ == "__main__":
    main()
