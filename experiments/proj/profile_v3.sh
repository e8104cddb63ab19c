# ncu of the promoted fp8_gemv_n12288_k2048 (v3) at M = 1, 8 and 16: what grows with M.
#   bash experiments/proj/profile_v3.sh      (on the H200; writes under $OUT)
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
cat > /tmp/launch_v3.py <<'PY'
import sys, torch
from netra import contracts
from netra.lifecycle import check, testbeds
from netra.runtime import launch as rt, loader
c = contracts.get("fp8_gemv_n12288_k2048"); tb = testbeds.get(c.name)
go = rt.make_guard_and_launch(c, function_handle=loader.load(c.name, 0).handle, device=0)
b = check.Bench(tb, {"M": int(sys.argv[1])}, 0)
for _ in range(4):
    b.reset(); assert go(*tb.args(b.bufs)) is None
torch.cuda.synchronize()
PY
python3 -m netra.cli build > /dev/null
for M in 1 8 16; do
  ncu --set full --import-source yes -k regex:fp8_gemv --launch-skip 2 --launch-count 1 -o $OUT/v3_m$M python3 /tmp/launch_v3.py $M > $OUT/ncu_v3_m$M.log 2>&1
  ncu --import $OUT/v3_m$M.ncu-rep --page details > $OUT/v3_m$M.txt 2>&1
  ncu --import $OUT/v3_m$M.ncu-rep --page raw --csv > $OUT/v3_m$M.csv 2>&1
  ncu --import $OUT/v3_m$M.ncu-rep --page source --csv --print-source sass > $OUT/v3_m${M}_sass.csv 2>&1
  rm -f $OUT/v3_m$M.ncu-rep
done
grep -E "Duration|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued" $OUT/v3_m*.txt
ls -la $OUT
