"""Per-SM gate | up walk times of the router-fused launch at M = 1 (a diagnostic: gen_fp8_gemv._DOWN trace "all" on the
router_down build, which also records %smid): are the slow CTAs of router_down_variant_trace_64082ff.json slow SMs (the
same SMs across seeds and launches) or slow bytes? 4 seeds x 2 launches; split-half correlation of the per-SM means.
  OUT=dir PYTHONPATH=src python3 experiments/proj/router/sm_trace.py"""
import sys, os, json
sys.path.insert(0, "experiments/proj/router")
import torch
import router_down_variant as r
from netra.contracts.proj import EXPERTS_ROUTER, MOE_DOWN
from netra.lifecycle import check as lcheck
from netra.lifecycle import testbeds
tb, tbd = testbeds.get(EXPERTS_ROUTER.name), testbeds.get(MOE_DOWN.name)
moe_out = torch.empty(1, 2048, dtype=torch.bfloat16, device="cuda")
_, _, forms, module = r.fused_kernel("mid", "", trace="all")
out = []
for seed in range(4):
    b = lcheck.Bench(tb, {"M": 1, "E": 256}, seed)
    d = lcheck.Bench(tbd, {"M": 1, "E": 256}, seed)
    for it in range(3):
        b.reset()
        assert forms["plain"](*tb.args(b.bufs), d.bufs["w"], d.bufs["scale"], d.bufs["ws"], d.bufs["ss"], moe_out) is None
        torch.cuda.synchronize()
        t = b.bufs["x_out"].view(torch.int32).view(-1)
        if it:
            out.append({"seed": seed, "walk": t[:132].tolist(), "barrier2": t[256:388].tolist(), "smid": t[512:644].tolist()})
json.dump(out, open(os.environ["OUT"] + "/a/smtrace.json", "w"))
import statistics
by_sm = {}
for o in out:
    for c in range(131):
        by_sm.setdefault(o["smid"][c], []).append(o["walk"][c])
rows = sorted((statistics.mean(v), sm, min(v), max(v), len(v)) for sm, v in by_sm.items())
print("fastest", rows[:5]); print("slowest", rows[-12:])
# stability: correlation between run halves
a = [statistics.mean(v[: len(v) // 2]) for sm, v in sorted(by_sm.items()) if len(v) >= 4]
bb = [statistics.mean(v[len(v) // 2:]) for sm, v in sorted(by_sm.items()) if len(v) >= 4]
ma, mb = statistics.mean(a), statistics.mean(bb)
cov = sum((x - ma) * (y - mb) for x, y in zip(a, bb)); va = sum((x - ma) ** 2 for x in a); vb = sum((y - mb) ** 2 for y in bb)
print("SMs", len(a), "split-half correlation of per-SM walk time", cov / (va * vb) ** 0.5)
print("ctaid->smid (seed 0)", out[0]["smid"][:40])
