#!/bin/bash
# Nsight Compute reports of the projection walks (a diagnosis): every (kernel, M) below, the third launch, --set full;
# the first case's (SASS=all: every case's) stall samples per SASS instruction (the source page, csv).
#   OUT=dir [SASS=all] [FULL=0] bash experiments/proj/ncu_gemv.sh [NAME:M ...]
set -u
cases=${*:-"fp8_gemv_n1024_k2048_moe_shared_grp_t32:32 fp8_gemv_n1024_k2048_moe_shared_grp:8 fp8_gemv_n12288_k2048_norm_ba:1 fp8_gemv_n1024_k2048_moe_shared_router_down:1 fp8_gemv_n2048_k4608_moedown:1"}
first=1
for nm in $cases; do
  n=${nm%:*}; m=${nm#*:}
  if [ "${FULL:-1}" = 1 ]; then
    PYTHONPATH=src timeout 240 ncu --clock-control none --set full --import-source no --kernel-name "$n" --launch-skip 2 \
      --launch-count 1 python3 experiments/proj/ncu_gemv.py "$n" "$m" > "$OUT/ncu_${n}_m${m}.txt" 2>&1
    echo "$n M=$m rc=$? $(grep -c Section "$OUT/ncu_${n}_m${m}.txt") sections"
  fi
  if [ $first = 1 ] || [ "${SASS:-}" = all ]; then
    PYTHONPATH=src timeout 240 ncu --clock-control none --section WarpStateStats --section SourceCounters --import-source no \
      --page source --print-source sass --csv --kernel-name "$n" --launch-skip 2 --launch-count 1 \
      python3 experiments/proj/ncu_gemv.py "$n" "$m" > "$OUT/ncu_${n}_m${m}_sass.csv" 2>&1
    echo "$n M=$m sass rc=$? $(wc -l < "$OUT/ncu_${n}_m${m}_sass.csv") lines"
  fi
  first=0
done
