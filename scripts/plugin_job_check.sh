#!/usr/bin/env bash
# Issue 38 on a GPU: the example plugin package installed beside the built-in paths (found
# by its entry points, no --plugin), the production matrix in graph mode for the example
# paths and the production paths, then `harness report` (tables, crossover, plots) with the
# committed baselines (the example paths' rows read NEW). Everything lands under $OUT.
# Pass HARNESS_COMMIT=<sha>: the device's copy of the tree may carry no .git, or a stale one
# (on 2026-12-05 the rows of the tree of 290e49d were labelled e4d086a2f12e-dirty).
set -uo pipefail
out=${OUT:-$PWD/device-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 HARNESS_DATA_CACHE=${HARNESS_DATA_CACHE:-/tmp/harness-data}
export TINYLOOP_USE_MARLIN=1 HARNESS_MARLIN_SM90=1
site=/tmp/site; mkdir -p $site
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target $site \
    $(ls .whl/*.whl | grep -v '/int4_gemm_harness-') > "$out/pip.txt" 2>&1
fi
python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/ex examples/plugins \
  >> "$out/pip.txt" 2>&1
export PYTHONPATH=/tmp/ex:$site:$PWD
nvidia-smi --query-gpu=uuid,name,driver_version --format=csv | tee "$out/gpu.txt"
python3 -m harness paths > "$out/paths.txt" 2>&1; tail -12 "$out/paths.txt"
t0=$(date +%s)
timeout ${BENCH_S:-300} python3 -m harness bench --arch sm90 --matrix production --mode graph \
  --paths triton_int4,torch_dequant,fp16_cache,marlin_asym,native_int4 --no-progress \
  --out /tmp/pj > "$out/bench.txt" 2>&1
echo "bench rc=$? $(( $(date +%s) - t0 )) s"; tail -5 "$out/bench.txt"
d=$(ls -d /tmp/pj/*/sm90 | head -1)
python3 -m harness report "$d" --baseline baselines --partial --out /tmp/pj/report > "$out/report.txt" 2>&1
echo "report rc=$?"; tail -5 "$out/report.txt"
tar czf "$out/pj.tgz" -C /tmp pj 2>/dev/null
