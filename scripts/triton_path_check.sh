#!/usr/bin/env bash
# The example Triton path on a GPU (issue 38): its own tests, then the production matrix in
# graph mode for it beside fp16_cache (no extension build needed), gated on accuracy only
# (--no-compare; the rows' rel_err against the fp16 gate), a per-path summary last.
# Everything lands under $OUT (or ./device-out).
set -uo pipefail
out=${OUT:-$PWD/device-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 HARNESS_DATA_CACHE=${HARNESS_DATA_CACHE:-/tmp/harness-data}
python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/ex examples/plugins \
  > "$out/pip.txt" 2>&1 && export PYTHONPATH=/tmp/ex:$PWD || export PYTHONPATH=$PWD
nvidia-smi --query-gpu=uuid,name,driver_version --format=csv | tee "$out/gpu.txt"
python3 -m harness paths > "$out/paths.txt" 2>&1
timeout 60 python3 -m pytest -q -p no:cacheprovider examples/plugins/tests > "$out/pytest.txt" 2>&1
tail -3 "$out/pytest.txt"
timeout ${BENCH_S:-150} python3 -m harness bench --matrix production --paths triton_int4,fp16_cache \
  --mode graph --no-progress --no-compare --out /tmp/tp > "$out/bench.txt" 2>&1
echo "bench rc=$?"
tar czf "$out/tp.tgz" -C /tmp tp 2>/dev/null
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import glob, sys
import pandas as pd
for f in glob.glob("/tmp/tp/*/*/production.csv"):
    d = pd.read_csv(f)
    for p, g in d.groupby("path"):
        ok = g[g.status == "ok"]
        print(f"{p}: {len(g)} rows, {len(ok)} ok, statuses {dict(g.status.value_counts())}, "
              f"max rel_err {ok.rel_err.max():.2e}, TFLOPS median {ok.tflops.median():.1f} "
              f"max {ok.tflops.max():.1f}")
    w = d.pivot_table(index="case_id", columns="path", values="tflops")
    print(w.round(1).to_string())
PY
