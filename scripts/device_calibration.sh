#!/usr/bin/env bash
# One device call's worth of A/A calibration material on a GPU machine (one process of
# each step), written under $OUT (or ./device-out): the main job (production + swiglu +
# ppl, gated against the committed baselines when there are any), a graph-mode production
# run with the planted 5% slowdown on $PLANT (default fp16_cache), then parity and edges.
# The results are packed after every step, so a call cut short still returns them.
#   [STEPS="job planted parity"] bash scripts/device_calibration.sh TAG
set -uo pipefail
tag=${1:-run}
out=${OUT:-device-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HARNESS_BUILD_DIR=${HARNESS_BUILD_DIR:-/tmp/harness-build}
if [ -d .whl ] && ! python3 -c "import optimum.quanto" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
res=/tmp/res-$tag
mkdir -p "$res"
pack() { tar -C "$res" -czf "$out/$tag-results.tgz" . ; }
step() {  # name, then the command
  local name=$1; shift
  local t1; t1=$(date +%s)
  "$@" > "$out/$tag-$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t1 )) s" | tee -a "$out/$tag-times.txt"
  pack
}
steps=" ${STEPS:-job planted parity} "
step build python3 -c "from harness.kernels.build import extension, build_info; extension(); print(build_info())"
[[ $steps == *" job "* ]] && step job python3 -m harness job --arch sm90 --out "$res/aa" --no-progress \
  && tail -12 "$out/$tag-job.log"
[[ $steps == *" planted "* ]] && step planted env HARNESS_PLANT_PATH="${PLANT:-fp16_cache}" python3 -m harness bench --arch sm90 \
  --matrix production --mode graph --out "$res/planted" --no-progress ${PLANT_ARGS:---no-compare} \
  --plugin tests/planted/slowdown_plugin.py
[[ $steps == *" parity "* ]] && step parity python3 -m harness bench --arch sm90 --matrix parity,edges --out "$res/aa" --no-progress --no-compare
