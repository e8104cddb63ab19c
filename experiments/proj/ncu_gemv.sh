#!/bin/bash
# Nsight Compute reports of the projection walks (a diagnosis): every (kernel, M) below, the third launch, --set full.
#   OUT=dir bash experiments/proj/ncu_gemv.sh [NAME:M ...]
set -u
cases=${*:-"fp8_gemv_n1024_k2048_moe_shared_grp_t32:32 fp8_gemv_n1024_k2048_moe_shared_grp:8 fp8_gemv_n12288_k2048_norm_ba:1 fp8_gemv_n1024_k2048_moe_shared_router_down:1 fp8_gemv_n2048_k4608_moedown:1"}
for nm in $cases; do
  n=${nm%:*}; m=${nm#*:}
  PYTHONPATH=src timeout 240 ncu --clock-control none --set full --import-source no --kernel-name "$n" --launch-skip 2 \
    --launch-count 1 python3 experiments/proj/ncu_gemv.py "$n" "$m" > "$OUT/ncu_${n}_m${m}.txt" 2>&1
  echo "$n M=$m rc=$? $(grep -c Section "$OUT/ncu_${n}_m${m}.txt") sections"
done
# the first case's stall samples per SASS instruction (the source page)
n=$(echo $cases | cut -d' ' -f1); m=${n#*:}; n=${n%:*}
PYTHONPATH=src timeout 240 ncu --clock-control none --section WarpStateStats --section SourceCounters --import-source no \
  --page source --print-source sass --csv --kernel-name "$n" --launch-skip 2 --launch-count 1 \
  python3 experiments/proj/ncu_gemv.py "$n" "$m" > "$OUT/ncu_${n}_m${m}_sass.csv" 2>&1
echo "$n M=$m sass rc=$? $(wc -l < "$OUT/ncu_${n}_m${m}_sass.csv") lines"
