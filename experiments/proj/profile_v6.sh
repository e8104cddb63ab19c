export PYTHONPATH=$PWD/src
for M in 1 16; do
  ncu --set full --import-source no -k regex:fp8_gemv --launch-skip 2 --launch-count 1 -o $OUT/v6_m$M python3 experiments/proj/profile_variant.py v6 fp8_gemv_n12288_k2048 $M > $OUT/ncu_m$M.log 2>&1
  ncu --import $OUT/v6_m$M.ncu-rep --page details > $OUT/v6_m$M.txt 2>&1
  ncu --import $OUT/v6_m$M.ncu-rep --page raw --csv > $OUT/v6_m$M.csv 2>&1
done
ncu --set full -k regex:read_floor --launch-skip 0 --launch-count 1 -o $OUT/rf python3 -c "
import torch
from netra.runtime import launch as rt, loader
r = rt.raw_launcher(loader.load('read_floor', 0))
src = torch.randint(0, 256, (25171968,), dtype=torch.uint8, device='cuda'); sink = torch.zeros(4, dtype=torch.uint8, device='cuda')
r((264,1,1),(512,1,1), src.data_ptr(), sink.data_ptr(), 25171968//264//16*16); torch.cuda.synchronize()" > $OUT/ncu_rf.log 2>&1
ncu --import $OUT/rf.ncu-rep --page details > $OUT/rf.txt 2>&1
grep -E "Duration|DRAM Throughput|Memory Throughput|Issue Slots|Warp Cycles Per Issued|Stall|Tensor|Registers|Achieved Occupancy" $OUT/v6_m1.txt $OUT/v6_m16.txt $OUT/rf.txt | head -80
