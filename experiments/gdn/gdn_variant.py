"""Check and time the gdn_decode_b32 candidate (gen_gdn_decode.py) on the H200, in one call:

1. correctness at B in (1, 2, 8, 32), slots a shuffled subset of a 64-slot pool: the output,
   the updated recurrent and conv states against a float64 reference of the same step, the
   output NaN-poisoned first, the pool's other slots bitwise untouched;
2. determinism (two launches from the same state, bitwise) and 4096 consecutive steps at
   B = 1 against the float64 reference (the error must stay bounded);
3. timing by CUDA-graph replay over state copies past 4x the L2, beside the framework op.
Writes gdn_variant.json to --out.   python3 experiments/gdn/gdn_variant.py --out "$OUT"
"""

import json
import math
import os
import sys
from pathlib import Path

import torch

from netra import contracts, paths
from netra.contracts import Contract, Scalar, Tensor
from netra.decode import ops as dops
from netra.lifecycle import bench, testbeds
from netra.lifecycle.metrics import rel_err
from netra.reference import gdn as rg
from netra.runtime import launch as rt_launch
from netra.runtime import loader

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# the candidates: v1 (cluster barriers, this folder) and v2 (st.async + mbarriers, promoted)
GENERATORS = {"v1_cluster_barriers": HERE / "gen_gdn_decode.py", "v2_st_async": ROOT / "kernels/sm_90a/gdn/gen_gdn_decode.py"}


def _module(tag: str, path: Path):
    return paths.load_module(path, f"gen_gdn_{tag}")


POOL = 64
EPS = 1e-6

CONTRACT = Contract(  # v1's parameters (no pool_slots)
    name="gdn_decode_b32", family="gdn", summary="candidate v1: Gated DeltaNet decode step, B <= 32",
    params=(
        Tensor("qkv", "bf16", ("B", 8192), "in", strides=("qkv_row", 1)),
        Tensor("z", "bf16", ("B", 4096), "in", strides=("z_row", 1)),
        Tensor("b_in", "bf16", ("B", 32), "in", align=2),
        Tensor("a_in", "bf16", ("B", 32), "in", align=2),
        Tensor("conv_w", "bf16", (8192, 4), "in"),
        Tensor("a_log", "f32", (32,), "in", align=4),
        Tensor("dt_bias", "f32", (32,), "in", align=4),
        Tensor("norm_w", "bf16", (128,), "in", align=2),
        Tensor("conv_pool", "bf16", ("P", 8192, 3), "inout", align=2),
        Tensor("state_pool", "f32", ("P", 32, 128, 128), "inout"),
        Tensor("slots", "i64", ("B",), "in", align=8),
        Tensor("out", "bf16", ("B", 4096), "out"),
        Scalar("qkv_row", "u32", value="qkv_row"),
        Scalar("z_row", "u32", value="z_row"),
        Scalar("eps", "f32"),
    ),
    dims={"B": range(1, 33), "P": range(1, 4097)},
    grid=("128 * B", "1", "1"), threads=128, reduction_order="fixed (see the generator)", tolerance=5e-3,
    deterministic=True, bytes_read="B * 2 * 32 * 65536", bytes_written="B * 32 * 65536", max_registers=128,
)


def load(tag: str):
    g = _module(tag, GENERATORS[tag])
    module, fn = loader.load_text(g.NAME, g.generate())
    c = CONTRACT if tag == "v1_cluster_barriers" else contracts.get("gdn_decode_b32")  # v2 also takes pool_slots
    return module, rt_launch.make_guard_and_launch(c, function_handle=int(fn), device=0)


def inputs(B: int, g: torch.Generator, dev="cuda", pool: int = POOL) -> dict:
    r = lambda *s, sc=1.0: (torch.randn(*s, generator=g) * sc)  # noqa: E731
    qkvz = r(B, 12288).to(torch.bfloat16).to(dev)  # the runner's fused projection output
    return {
        "qkv": qkvz[:, :8192], "z": qkvz[:, 8192:], "b_in": r(B, 32).to(torch.bfloat16).to(dev),
        "a_in": r(B, 32).to(torch.bfloat16).to(dev), "conv_w": r(8192, 4, sc=0.3).to(torch.bfloat16).to(dev),
        "a_log": torch.log(torch.empty(32).uniform_(1, 16, generator=g)).to(dev), "dt_bias": r(32, sc=0.5).to(dev),
        "norm_w": (1 + r(128, sc=0.1)).to(torch.bfloat16).to(dev),
        "conv_pool": r(pool, 8192, 3).to(torch.bfloat16).to(dev), "state_pool": r(pool, 32, 128, 128, sc=0.05).to(dev),
        "slots": torch.randperm(pool, generator=g)[:B].to(dev), "_qkvz": qkvz,
    }


def reference(i: dict) -> dict:
    """The step in float64 on copies (netra.reference.gdn): out and the new pools."""
    return rg.decode_step(i["qkv"], i["z"], i["b_in"], i["a_in"], i["conv_w"], i["a_log"], i["dt_bias"], i["norm_w"],
                          i["conv_pool"], i["state_pool"], i["slots"], 16, EPS)


def args(i: dict) -> list:
    return [i[n] for n in ("qkv", "z", "b_in", "a_in", "conv_w", "a_log", "dt_bias", "norm_w", "conv_pool",
                           "state_pool", "slots")] + [i["out"], EPS]


def fla_peer():
    """flash-linear-attention 0.6.0's decode path (netra.lifecycle.testbeds), or None when not installed."""
    try:
        import fla  # noqa: F401
    except Exception as e:  # noqa: BLE001 - the peer is optional here
        print("fla peer unavailable:", type(e).__name__, e, flush=True)
        return None
    return lambda s: testbeds._gdn_fla_peer(s, {"eps": EPS})


def fla_inputs(i: dict) -> dict:
    """The same states in fla's layout: dense per sequence, a conv cache of K columns whose
    columns 1..K-1 hold the old window."""
    s = dict(i)
    s["_fla_conv"] = torch.cat([torch.zeros_like(i["conv_pool"][i["slots"], :, :1]), i["conv_pool"][i["slots"]]], -1)
    s["_fla_state"] = i["state_pool"][i["slots"]].contiguous()
    return s


def correctness(go, g) -> dict:
    res = {}
    for B in (1, 2, 8, 16, 32):
        i = inputs(B, g)
        want = reference(i)
        before = {n: i[n].clone() for n in ("conv_pool", "state_pool")}
        i["out"] = torch.full((B, 4096), float("nan"), dtype=torch.bfloat16, device="cuda")
        reason = go(*args(i))
        assert reason is None, reason
        torch.cuda.synchronize()
        other = torch.ones(POOL, dtype=torch.bool, device="cuda")
        other[i["slots"]] = False
        res[B] = {
            "out_rel_err": rel_err(i["out"], want["out"]),
            "state_rel_err": rel_err(i["state_pool"][i["slots"]], want["state_pool"][i["slots"]]),
            "conv_state_exact": bool(torch.equal(i["conv_pool"], want["conv_pool"])),
            "other_slots_untouched": bool(torch.equal(i["state_pool"][other], before["state_pool"][other])
                                          and torch.equal(i["conv_pool"][other], before["conv_pool"][other])),
        }
        # determinism: the same launch from the same state
        first = (i["out"].clone(), i["state_pool"].clone())
        i["conv_pool"].copy_(before["conv_pool"])
        i["state_pool"].copy_(before["state_pool"])
        go(*args(i))
        torch.cuda.synchronize()
        res[B]["deterministic_bitwise"] = bool(torch.equal(first[0], i["out"]) and torch.equal(first[1], i["state_pool"]))
        print(B, res[B], flush=True)
    return res


def long_run(go, g, steps: int = 4096) -> list:
    """steps consecutive decode steps at B = 1 against float64, the state carried by each side."""
    i = inputs(1, g)
    ref_i = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in i.items()}
    ref_i["state_pool"] = ref_i["state_pool"].double()
    ref_i["qkv"], ref_i["z"] = ref_i["_qkvz"][:, :8192], ref_i["_qkvz"][:, 8192:]
    i["out"] = torch.empty(1, 4096, dtype=torch.bfloat16, device="cuda")
    errs = []
    for step in range(steps):
        new = torch.randn(1, 12288, generator=g).to(torch.bfloat16).cuda()
        i["_qkvz"].copy_(new)
        ref_i["_qkvz"].copy_(new)
        for n in ("b_in", "a_in"):
            i[n].copy_(torch.randn(1, 32, generator=g).to(torch.bfloat16))
            ref_i[n].copy_(i[n])
        go(*args(i))
        w = reference(ref_i)
        ref_i["conv_pool"], ref_i["state_pool"] = w["conv_pool"], w["state_pool"]
        if step % 256 == 255:
            torch.cuda.synchronize()
            errs.append({"step": step + 1, "out_rel_err": rel_err(i["out"], w["out"]),
                         "state_rel_err": rel_err(i["state_pool"][i["slots"]], w["state_pool"][i["slots"]])})
    print("long run", errs[-1], flush=True)
    return errs


def main():
    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    g = torch.Generator().manual_seed(0)
    kernels = {tag: load(tag) for tag in GENERATORS}
    if "--sanitize" in sys.argv:  # under compute-sanitizer: the promoted kernel's correctness pass only
        correctness(kernels["v2_st_async"][1], g)
        return
    res = {"correctness": {}, "timing": {}}
    for tag, (_, go) in kernels.items():
        res["correctness"][tag] = correctness(go, g)
    res["long_run"] = long_run(kernels["v2_st_async"][1], g)
    peer = fla_peer()
    if peer is not None:  # the peer is called right: its step against the same float64 reference
        i = inputs(4, g)
        want = reference(i)
        s = fla_inputs(i)
        got = peer(s)
        torch.cuda.synchronize()
        res["fla_peer_check"] = {"out_rel_err": rel_err(got["out"], want["out"]),
                                 "state_rel_err": rel_err(got["state"], want["state_pool"][i["slots"]])}
        print("fla peer check", res["fla_peer_check"], flush=True)
    # timing: graph replay over state copies past 4x L2, beside the framework op and fla
    for B in (1, 2, 4, 8, 16, 32):
        per = B * 32 * 65536 * 2
        copies = max(2, math.ceil(bench.ROTATE_BYTES / per))
        sets = []
        for _ in range(copies):
            s = inputs(B, g, pool=B)
            s["slots"] = torch.arange(B, device="cuda")
            s["out"] = torch.empty(B, 4096, dtype=torch.bfloat16, device="cuda")
            sets.append(s)
        row = {"state_bytes": per, "copies": copies}
        for tag, (_, go) in kernels.items():
            row[f"{tag}_us"], _ = bench.graph_time(lambda c: go(*args(sets[c])), copies)
        row["framework_op_us"], _ = bench.graph_time(
            lambda c: dops.gdn_decode_framework(*testbeds._gdn_args(sets[c]), 16, EPS, sets[c]["out"]), copies,
            bench.PEER_REPLAYS)
        row["fla_0_6_0_us"] = None
        if peer is not None:
            fsets = [fla_inputs(s) for s in sets]
            row["fla_0_6_0_us"], _ = bench.graph_time(lambda c: peer(fsets[c]), copies, bench.PEER_REPLAYS)
            del fsets
        row["v2_state_roofline_fraction"] = per / bench.READ_ROOFLINE / (row["v2_st_async_us"] * 1e-6)
        res["timing"][B] = row
        print(B, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
        del sets
        torch.cuda.empty_cache()
    json.dump({"method": bench.METHOD.format(R=bench.REPLAYS), **res}, open(os.path.join(out_dir, "gdn_variant.json"), "w"),
              indent=1, default=str)


if __name__ == "__main__":
    main()
