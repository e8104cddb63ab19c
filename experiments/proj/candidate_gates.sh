#!/bin/bash
# A generator candidate through the lifecycle's gates on the device copy (a diagnosis; nothing is committed): its PTX
# written over the promoted kernel's file, the build, `netra check` (float64 reference, determinism, graph) and
# `netra sanitize` (memcheck, racecheck), then the promoted file restored and rebuilt. Records the run writes under
# results/ are the candidate's: do not bring them back as records.
#   OUT=dir bash experiments/proj/candidate_gates.sh OPTION NAME [NAME ...]     e.g. nt_branch fp8_gemv_n1024_k2048_moe_shared_grp_t32
set -u
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}  # outside scripts/h200.sh too
opt=$1; shift
for n in "$@"; do
  PYTHONPATH=src python3 - "$opt" "$n" <<'PY'
import sys
sys.path[:0] = ["src", "experiments/proj"]
import variant_ab
from netra import paths
opt, name = sys.argv[1], sys.argv[2]
g = paths.generator("proj", "gen_fp8_gemv")
paths.ptx_path("sm_90a", "proj", name).write_text(g.generate(variant_ab.shapes_named([name])[0], **{opt: True}))
print("wrote the", opt, "build of", name)
PY
done
python3 -m netra.cli build 2>&1 | tail -2
python3 -m netra.cli check "$@" 2>&1 | grep -v "framework path"
python3 -m netra.cli sanitize "$@" --log "$OUT/sanitizer_$opt.log" 2>&1 | grep -v "framework path"
git checkout -- kernels/sm_90a/proj && git checkout -- results 2>/dev/null
python3 -m netra.cli build 2>&1 | tail -1
