#!/usr/bin/env bash
# ncu on the MoE kernels the decode runner launches at 8 and 32 sequences (a diagnosis; experiments/proj/profile_kernel.py).
# Clocks left as they are (--clock-control none). Writes $OUT/ncu_<name>_m<M>.txt (details page) and a grep summary.
set -uo pipefail
export PYTHONPATH=$PWD/src
for spec in fp8_gemv_n1024_k2048_moe_shared_grp:8 fp8_gemv_n2048_k4608_moedown_s6:8 \
            fp8_gemv_n1024_k2048_moe_shared_grp_t32:32 fp8_gemv_n2048_k4608_moedown_grp:32 \
            fp8_gemv_n12288_k2048_norm_ba:1 fp8_gemv_n2048_k4096_res:1; do
  name=${spec%:*}; M=${spec#*:}
  ncu --clock-control none --set full --import-source no -k "regex:^${name}\$" --launch-skip 2 --launch-count 1 \
      -o "$OUT/ncu_${name}_m$M" python3 experiments/proj/profile_kernel.py "$name" "$M" > "$OUT/ncu_${name}_m$M.log" 2>&1
  ncu --import "$OUT/ncu_${name}_m$M.ncu-rep" --page details > "$OUT/ncu_${name}_m$M.txt" 2>&1
  rm -f "$OUT/ncu_${name}_m$M.ncu-rep"
  grep -q "Duration" "$OUT/ncu_${name}_m$M.txt" && rm -f "$OUT/ncu_${name}_m$M.log"  # the device returns at most 8 files
  echo "== $name M = $M"
  grep -E "SM Frequency|Duration|DRAM Throughput|L2 Cache Throughput|L2 Hit Rate|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Dynamic Shared|No Eligible|One or More Eligible" "$OUT/ncu_${name}_m$M.txt" | head -24
done
