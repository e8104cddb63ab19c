#!/usr/bin/env bash
# One call on the H200: environment, build, GPU tests, then the lifecycle steps named in
# $@ (default: the whole main job). Full logs and the records come back under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/netra-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
steps=${*:-"tests check sanitize bench report"}
{
  date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, cuda.bindings, transformers; print('torch', torch.__version__, 'cuda-bindings', cuda.bindings.__version__, 'transformers', transformers.__version__)"
  which ptxas compute-sanitizer nvdisasm cuobjdump; ptxas --version | tail -1
} 2>&1 | tee "$OUT/env.log"
python3 -m netra.cli build 2>&1 | tee "$OUT/build.log"
for step in $steps; do
  echo "== $step $(date -u +%T)" | tee -a "$OUT/steps.log"
  case $step in
    tests) python3 -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tee "$OUT/pytest-gpu.log" ;;
    check) python3 -m netra.cli check 2>&1 | tee "$OUT/check.log" ;;
    sanitize) python3 -m netra.cli sanitize --log "$OUT/sanitizer.log" 2>&1 | tee "$OUT/sanitize.log" ;;
    bench) python3 -m netra.cli bench 2>&1 | tee "$OUT/bench.log" ;;
    quickbench) python3 -m netra.cli bench --quick 2>&1 | tee "$OUT/bench.log" ;;
    report) python3 -m netra.cli report 2>&1 | tee "$OUT/report.log" ;;
  esac
done
tar cf "$OUT/results.tar" results build/sm_90a/manifest.json 2>/dev/null
echo "done $(date -u +%T)"
