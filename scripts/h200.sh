#!/usr/bin/env bash
# One call on the H200: environment, build, GPU tests, then the lifecycle steps named in
# $@ (default: the whole main job). Full logs and the records come back under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/netra-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1  # keeps carried wheels (/tmp/site)
steps=${*:-"tests check sanitize bench report"}  # check:NAME[,NAME], sanitize:..., bench:...: kernels or families
{
  date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, cuda.bindings, transformers; print('torch', torch.__version__, 'cuda-bindings', cuda.bindings.__version__, 'transformers', transformers.__version__)"
  which ptxas compute-sanitizer nvdisasm cuobjdump; ptxas --version | tail -1
} 2>&1 | tee -a "$OUT/run.log"
python3 -m netra.cli build 2>&1 | tee -a "$OUT/run.log"
for step in $steps; do
  echo "== $step $(date -u +%T)" | tee -a "$OUT/run.log"
  case $step in
    tests) python3 -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tee -a "$OUT/run.log" ;;
    tests:*) spec=${step#tests:}; python3 -m pytest -q -m gpu tests/test_gpu.py -k "${spec//,/ or }" 2>&1 | tee -a "$OUT/run.log" ;;  # GPU tests by -k name
    check) python3 -m netra.cli check 2>&1 | tee -a "$OUT/run.log" ;;
    check:*) spec=${step#check:}; python3 -m netra.cli check ${spec//,/ } 2>&1 | tee -a "$OUT/run.log" ;;
    sanitize:*) spec=${step#sanitize:}; python3 -m netra.cli sanitize ${spec//,/ } --log "$OUT/sanitizer.log" 2>&1 | tee -a "$OUT/run.log" ;;
    sanitize) python3 -m netra.cli sanitize --log "$OUT/sanitizer.log" 2>&1 | tee -a "$OUT/run.log" ;;
    bench) python3 -m netra.cli bench 2>&1 | tee -a "$OUT/run.log" ;;
    quickbench) python3 -m netra.cli bench --quick 2>&1 | tee -a "$OUT/run.log" ;;
    experiments) for e in experiments/runtime/host_dispatch.py experiments/norm/add_rmsnorm_variants.py; do
                   python3 "$e" --out "$OUT" 2>&1 | tee -a "$OUT/run.log"; done ;;
    host) python3 -m netra.cli bench --host-only 2>&1 | tee -a "$OUT/run.log" ;;
    exp:*) spec=${step#exp:}; python3 ${spec//,/ } --out "$OUT" 2>&1 | tee -a "$OUT/run.log" ;;  # one experiment script (exp:SCRIPT,ARG,ARG)
    bench:*) spec=${step#bench:}; python3 -m netra.cli bench ${spec//,/ } 2>&1 | tee -a "$OUT/run.log" ;;
    decode-tests) python3 -m pytest -q -m gpu tests/test_decode_runner.py 2>&1 | tee -a "$OUT/run.log" ;;
    decode) python3 -m netra.cli decode 2>&1 | tee -a "$OUT/run.log" ;;
    decode:*) spec=${step#decode:}; python3 -m netra.cli decode ${spec//,/ } 2>&1 | tee -a "$OUT/run.log" ;;
    report) python3 -m netra.cli report 2>&1 | tee -a "$OUT/run.log" ;;
  esac
done
tar cf "$OUT/results.tar" results build/sm_90a/manifest.json 2>/dev/null
echo "done $(date -u +%T)"
