# ncu of gdn_verify_t16 at B = 1, T = 16 and T = 1: where the time per token goes.
#   bash experiments/gdn/profile_verify.sh      (on the H200; writes under $OUT)
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
python3 -m netra.cli build > /dev/null
for T in 16 1; do
  ncu --set full --import-source yes -k regex:gdn_verify --launch-skip 2 --launch-count 1 -o $OUT/verify_t$T \
      python3 experiments/gdn/profile_verify.py 1 $T > $OUT/ncu_verify_t$T.log 2>&1
  ncu --import $OUT/verify_t$T.ncu-rep --page details > $OUT/verify_t$T.txt 2>&1
  ncu --import $OUT/verify_t$T.ncu-rep --page source --csv --print-source sass > $OUT/verify_t${T}_sass.csv 2>&1
  rm -f $OUT/verify_t$T.ncu-rep
done
grep -E "Duration|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy" $OUT/verify_t*.txt
