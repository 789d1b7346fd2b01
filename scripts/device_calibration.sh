#!/usr/bin/env bash
# One device call's worth of A/A calibration material on a GPU machine (one process of
# each step), written under $OUT (or ./device-out): the main job (production + swiglu +
# ppl, gated against the committed baselines), parity and edges, and a graph-mode
# production run with the planted 5% slowdown on $PLANT (default fp16_cache).
#   bash scripts/device_calibration.sh TAG
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
t0=$(date +%s)
python3 -c "from harness.kernels.build import extension, build_info; extension(); print(build_info())" \
  2>&1 | tail -2 | tee "$out/$tag-build.log"
echo "build $(( $(date +%s) - t0 )) s" | tee -a "$out/$tag-times.txt"
t1=$(date +%s)
python3 -m harness job --arch sm90 --out "$res/aa" --no-progress > "$out/$tag-job.log" 2>&1
echo "job rc=$? $(( $(date +%s) - t1 )) s" | tee -a "$out/$tag-times.txt"
tail -12 "$out/$tag-job.log"
t1=$(date +%s)
python3 -m harness bench --arch sm90 --matrix parity,edges --out "$res/aa" --no-progress --no-compare \
  > "$out/$tag-parity.log" 2>&1
echo "parity+edges rc=$? $(( $(date +%s) - t1 )) s" | tee -a "$out/$tag-times.txt"
t1=$(date +%s)
HARNESS_PLANT_PATH=${PLANT:-fp16_cache} python3 -m harness bench --arch sm90 --matrix production \
  --mode graph --out "$res/planted" --no-progress --plugin tests/planted/slowdown_plugin.py \
  > "$out/$tag-planted.log" 2>&1
echo "planted rc=$? $(( $(date +%s) - t1 )) s" | tee -a "$out/$tag-times.txt"
grep "gate production" "$out/$tag-planted.log"
tar -C "$res" -czf "$out/$tag-results.tgz" .
