#!/usr/bin/env bash
# One device call's worth of A/A calibration material on a GPU machine, written under $OUT
# (or ./device-out), the results packed after every step so a call cut short still returns
# them. Steps (STEPS, in this order when named):
#   nox     `nox -s bench-sm90` (the main job: production + swiglu + ppl, gated against the
#           committed baselines), results under aa/
#   parity  the parity and edges matrices (not gated), results under aa/
#   planted a graph-mode production run with the planted 5% slowdown on $PLANT (default
#           fp16_cache; PLANT_ARGS default --no-compare), results under planted/
#   job     `harness job` (the main job as nox runs it, without nox's ~24 s start), under aa/
#   samemodel  the nox run of this call accepted as the GPU model's own baseline, then the
#           nox job again (the same-model job on this model), results under same/
#   regress a real regression committed on top (fp16_cache through a temporary), then the
#           nox job again, results under regress/ (issue 36; needs FROM_BUNDLE);
#           regressforeign: the same commit judged against the reference model's baseline
#           alone (as "foreign"), under regressforeign/ (either or both may be named)
#   foreign `nox -s bench-sm90` against baselines/ without models/ (a GPU model with a
#           baseline of its own judged as one without: issue 36), results under foreign/;
#           REFMODEL=<slug>: against that model's folder made the arch's own instead (an
#           H200 judged against the H100's rows)
#   foreign2  the foreign step again on the same machine (its builds cached), under foreign2/
#   foreign5  as foreign2 with the factor's benches at 5 samples a row, under foreign5/
#   foreignplanted  the plantedjob step judged as foreign (after the foreign steps), under
#           foreignplanted/
#   job2    a second process of the job on the same machine, results under aa2/
#   noxlast `nox -s bench-sm90` after the foreign step (warm; before regress), results under aa3/
#   nox2    `nox -s bench-sm90` again on the same machine (a runner that has run it before:
#           builds and case data cached), results under aa2/
#   plantedjob3  as plantedjob with a 3% plant (issue 37), results under plantedjob3/
#   plantedjob3l as plantedjob3 with `--set ab_line_rounds=4` (rows still at the 2% line
#           after the extra rounds get four more), results under plantedjob3l/
#   parity2 a second process of parity and edges, results under aa2/
#   report  `harness report` on each stored run against the committed baselines
#   summary scripts/acceptance_summary.py on each stored run (planted share with PLANT)
#   testsgpu `nox -s tests-gpu`; fleet: the fleet build's SASS test (issue 19);
#           bisect: scripts/bisect_acceptance.sh (issue 20; needs FROM_BUNDLE);
#           kernels: `harness study kernels` warm and --cold-l2 (issue 21; KERNELS_ARGS), CSVs under $OUT;
#           gputests: pytest $GPU_TESTS; correction: `harness study correction` (issue 21);
#           smollm2: the job's real-model step, its rows copied to $OUT (issue 39)
#   [STEPS="nox parity planted"] HARNESS_COMMIT=<sha> bash scripts/device_calibration.sh TAG
#   STEPS_H200="...": the steps instead of STEPS where the card is an H200
#   shard   issue 22, all four of: shardtest (tests/gpu/test_bench_shard_gpu.py: two workers
#           sharing GPU 0 against one worker; one worker per GPU where there are several),
#           and on a host of several GPUs: shardaa (production + parity + edges over
#           `--gpus all`, gated: the A/A against the single-GPU baselines), shardone (the same
#           on GPU 0 alone: the wall-time reference) and shardplanted (the planted 5% job
#           over `--gpus all`, graph mode, its A/B on one GPU: needs FROM_BUNDLE), under shard*/
#   plantedjob  `harness job --steps gemm --mode graph` (the gating mode) with the planted
#           slowdown (PLANT; PLANT_FRACTION, default 0.05) and $JOB_ARGS,
#           results under plantedjob/ (the job's A/B confirmation, on by default, measures
#           the flagged rows against the baseline's commit: needs FROM_BUNDLE)
# NOX_ARGS / JOB_ARGS / BENCH_ARGS: extra arguments for the nox, job and parity steps. Calibration runs (A/A
# material for `harness baseline record`) want JOB_ARGS=--no-ab-confirm: against an old
# baseline the A/B would only cost time.
# FROM_BUNDLE=1 with .bundle/repo.bundle (`python scripts/device_bundle.py REF`: REF's
# history alone, which fits the carry where `--all` no longer does; carried): run from a
# clone of it, a git repository (the device's copy has no .git; the A/B confirmation and
# worktrees need one); HARNESS_COMMIT is then not needed. REF=<sha>
# checks that commit out of the clone: the acceptance's "three calls of one commit" can
# then span sessions while main moves on (the commit is written to $tag-times.txt).
set -uo pipefail
tag=${1:-run}
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
if [ -n "${FROM_BUNDLE:-}" ] && [ -f .bundle/repo.bundle ]; then
  whl=$PWD/.whl
  git clone -q .bundle/repo.bundle /tmp/repo-$tag && cd /tmp/repo-$tag || exit 2
  if [ -n "${REF:-}" ]; then   # measure a fixed commit, whatever the bundle's HEAD is now
    git checkout -q --detach "$REF" || { echo "REF=$REF is not in the bundle" >&2; exit 2; }
  fi
  echo "commit $(git rev-parse HEAD)" | tee -a "$out/$tag-times.txt"
  if [ -d "$whl" ]; then ln -sfn "$whl" .whl; fi
  unset HARNESS_COMMIT
fi
export PYTHONUNBUFFERED=1 HARNESS_BUILD_DIR=${HARNESS_BUILD_DIR:-/tmp/harness-build}
export HARNESS_DATA_CACHE=${HARNESS_DATA_CACHE:-/tmp/harness-data}   # beside the build cache
# the dispatcher switches of `nox -s bench-sm90`, so every step measures what nox measures
export TINYLOOP_USE_MARLIN=${TINYLOOP_USE_MARLIN:-1} HARNESS_MARLIN_SM90=${HARNESS_MARLIN_SM90:-1}
if [ -d .whl ] && ! python3 -c "import optimum.quanto" 2>/dev/null; then
  # the wheelhouse's own harness wheel stays out: the checkout measured is the code measured;
  # a second call on a warm machine finds them installed (no reinstall, no pip warnings)
  [ -d /tmp/site/optimum/quanto ] || python3 -m pip install -q --no-index --no-deps \
    --no-compile --target /tmp/site $(ls .whl/*.whl | grep -v '/int4_gemm_harness-')
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
res=/tmp/res-$tag
logs=$res/logs   # packed with the results: a call returns at most 8 files
mkdir -p "$res" "$logs"
pack() { tar -C "$res" -czf "$out/$tag-results.tgz" . ; }
step() {  # name, then the command
  local name=$1; shift
  local t1; t1=$(date +%s)
  "$@" > "$logs/$tag-$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t1 )) s" | tee -a "$out/$tag-times.txt"
  pack
}
plantedjob() {  # name, fraction, then extra job arguments: `harness job --steps gemm` with
  # the slowdown plugin planted on $PLANT (fp16_cache), results and plant log under name/
  local name=$1 fraction=$2; shift 2
  step "$name" env HARNESS_PLANT_PATH="${PLANT:-fp16_cache}" HARNESS_PLANT_FRACTION="$fraction" \
    HARNESS_PLANT_LOG_DIR="$res/$name/plant-log" \
    python3 -m harness job --arch sm90 --steps gemm --mode graph --out "$res/$name" --no-progress \
    --plugin tests/planted/slowdown_plugin.py "$@" ${JOB_ARGS:-} && tail -14 "$logs/$tag-$name.log"
}
# the card, in the times file; STEPS_H200 (optional): the steps on an H200, STEPS on any
# other card (a call that may get either does the useful thing for the card it gets)
card=$(nvidia-smi --query-gpu=name,uuid --format=csv,noheader 2>/dev/null | head -1)
echo "gpu ${card:-none}" | tee -a "$out/$tag-times.txt"
[ -n "${STEPS_H200:-}" ] && [[ $card == *H200* ]] && STEPS=$STEPS_H200
echo "steps ${STEPS:-nox parity planted}" | tee -a "$out/$tag-times.txt"
steps=" ${STEPS:-nox parity planted} "
# build: HEAD's extension before any step (NO_BUILD=1: not; a fresh machine's first job
# then compiles it, overlapped with its case data, as a fresh runner's job does)
[ -z "${NO_BUILD:-}" ] && step build python3 -c "from harness.kernels.build import extension, build_info; extension(); print(build_info())"
# basebuild (with FROM_BUNDLE, on by default): the committed baselines' commit's extension
# too, as a runner that has run the job before has it cached; else the job's first A/B
# bench compiles it (~30 s of the job's time on a fresh H200, a4 of 2026-12-04)
# (every commit the gated baselines' rows name: after `baseline accept --only-faster` the
# A/B confirms each row against its own row's commit)
if [ -n "${FROM_BUNDLE:-}" ] && [ -z "${NO_BASEBUILD:-}" ]; then
  for basec in $(python3 -c "import csv; print(' '.join(sorted({r['commit'] for m in ('production', 'swiglu') for r in csv.DictReader(open(f'baselines/sm90/{m}.csv'))})))"); do
    if git worktree add -q --detach /tmp/base-$tag-$basec "$basec" 2>/dev/null; then
      step basebuild-$basec env -C "/tmp/base-$tag-$basec" PYTHONPATH="/tmp/base-$tag-$basec:$PYTHONPATH" \
        python3 -c "import harness; print(harness.__file__); from harness.kernels.build import extension, build_info; extension(); print(build_info())"
      git worktree remove --force /tmp/base-$tag-$basec
    fi
  done
fi
[[ $steps == *" nox "* ]] && step nox python3 -m nox -s bench-sm90 -- --out "$res/aa" --no-progress ${NOX_ARGS:-} \
  && tail -12 "$logs/$tag-nox.log"
[[ $steps == *" job "* ]] && step job python3 -m harness job --arch sm90 --out "$res/aa" --no-progress \
  ${JOB_ARGS:-} && tail -12 "$logs/$tag-job.log"
[[ $steps == *" nox2 "* ]] && step nox2 python3 -m nox -s bench-sm90 -- --out "$res/aa2" --no-progress ${NOX_ARGS:-} \
  && tail -12 "$logs/$tag-nox2.log"
[[ $steps == *" job2 "* ]] && step job2 python3 -m harness job --arch sm90 --out "$res/aa2" --no-progress ${JOB_ARGS:-} \
  && tail -12 "$logs/$tag-job2.log"
# samemodel (issue 36): the nox run of this call (aa/) accepted as this GPU model's own
# baseline (baselines/<arch>/models/<model>/ of the clone), then `nox -s bench-sm90` again:
# the same-model job on this model, its time beside the foreign job's, results under same/
if [[ $steps == *" samemodel "* ]]; then
  for d in "$res"/aa/*/sm90; do
    step sameaccept python3 -m harness baseline accept "$d" --root baselines --yes
  done
  step samemodel python3 -m nox -s bench-sm90 -- --out "$res/same" --no-progress ${NOX_ARGS:-} \
    && tail -14 "$logs/$tag-samemodel.log"
fi
[[ $steps == *" parity "* ]] && step parity python3 -m harness bench --arch sm90 --matrix parity,edges --out "$res/aa" --no-progress --no-compare ${BENCH_ARGS:-}
[[ $steps == *" parity2 "* ]] && step parity2 python3 -m harness bench --arch sm90 --matrix parity,edges --out "$res/aa2" --no-progress --no-compare ${BENCH_ARGS:-}
[[ $steps == *" planted "* ]] && step planted env HARNESS_PLANT_PATH="${PLANT:-fp16_cache}" python3 -m harness bench --arch sm90 \
  --matrix production --mode graph --out "$res/planted" --no-progress ${PLANT_ARGS:---no-compare} \
  --plugin tests/planted/slowdown_plugin.py
# plantcheck: the planted spin's sizing on fp16_cache's shortest calls (seconds; before a
# planted job): tests/gpu/test_plant_sizing_gpu.py
[[ $steps == *" plantcheck "* ]] && step plantcheck python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_plant_sizing_gpu.py && tail -5 "$logs/$tag-plantcheck.log"
[[ $steps == *" plantedjob3 "* ]] && plantedjob plantedjob3 0.03
[[ $steps == *" plantedjob3l "* ]] && plantedjob plantedjob3l 0.03 --set ab_line_rounds=4
[[ $steps == *" plantedjob "* ]] && plantedjob plantedjob "${PLANT_FRACTION:-0.05}"
# foreign (issue 36): `nox -s bench-sm90` against the arch's reference model's baseline
# alone (a copy of baselines/ without models/): on a GPU model that has its own baseline
# (baselines/<arch>/models/<model>/), the job as a runner of a model without one runs it
# (machine factor + A/B against the baseline's commit), results under foreign/; with
# "regress" named too, the regression commit is judged that way as well (regressforeign/)
# REFMODEL=<slug> (e.g. nvidia-h100-80gb-hbm3): the "reference" is that model's baseline
# folder made the arch's own, so a GPU of the reference model (an H200) runs the foreign
# job against another model's rows (an H100's): issue 36 where no H100 is lent
refroot=/tmp/baselines-reference-$tag
rm -rf "$refroot" && cp -r baselines "$refroot"
if [ -n "${REFMODEL:-}" ]; then
  here=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 \
    | tr '[:upper:]' '[:lower:]' | sed 's/[^a-z0-9]\+/-/g; s/^-//; s/-$//')
  [ "$here" = "$REFMODEL" ] && echo "REFMODEL=$REFMODEL is this GPU's own model: the" \
    "foreign steps are same-model jobs here (m1 of 2026-12-06)" | tee -a "$out/$tag-times.txt"
  for a in "$refroot"/*/; do
    [ -d "$a/models/$REFMODEL" ] || continue
    rm -f "$a"/*.csv "$a"/*.json && cp "$a/models/$REFMODEL"/* "$a"/
  done
fi
rm -rf "$refroot"/*/models
[[ $steps == *" foreign "* ]] && step foreign python3 -m nox -s bench-sm90 -- --out "$res/foreign" \
  --baselines "$refroot" --no-progress ${NOX_ARGS:-} && tail -14 "$logs/$tag-foreign.log"
# foreign2 (issue 36's 1.5x line): the foreign job again on the same machine, the baseline
# commits' builds and case data now cached as on a runner that has run one before, under
# foreign2/ (its time beside nox2's, the same-model job warm)
[[ $steps == *" foreign2 "* ]] && step foreign2 python3 -m nox -s bench-sm90 -- --out "$res/foreign2" \
  --baselines "$refroot" --no-progress ${NOX_ARGS:-} && tail -14 "$logs/$tag-foreign2.log"
# foreign5 (issue 36's 1.5x line): the warm foreign job with the machine factor's benches
# at 5 samples a row (`projection_min_samples=5`), its time and the rows its screen sends
# beside foreign2's, under foreign5/. 5 is the default since 6b75ec5: at that commit and
# after, foreign5 is foreign2 again; it differs at an older REF (c1 timed it at f380eb5)
[[ $steps == *" foreign5 "* ]] && step foreign5 python3 -m nox -s bench-sm90 -- --out "$res/foreign5" \
  --baselines "$refroot" --no-progress --set projection_min_samples=5 ${NOX_ARGS:-} \
  && tail -14 "$logs/$tag-foreign5.log"
# foreignplanted (issue 36's checklist at the factor's default): the plantedjob step judged
# as a runner without a baseline of its model (against the reference root, as foreign),
# results under foreignplanted/: the planted slowdown must still fail on the planted path
# alone
[[ $steps == *" foreignplanted "* ]] && plantedjob foreignplanted "${PLANT_FRACTION:-0.05}" \
  --baselines "$refroot"
# noxlast (issue 36's time line): `nox -s bench-sm90` after the foreign step and before the
# regression is committed, on the same machine (build, case data and the baseline's
# commit's extension all warm), results under aa3/: the same-model job's time beside the
# foreign job of this call
[[ $steps == *" noxlast "* ]] && step noxlast python3 -m nox -s bench-sm90 -- --out "$res/aa3" --no-progress \
  ${NOX_ARGS:-} && tail -12 "$logs/$tag-noxlast.log"
# regress (issue 36): a real regression committed on top of the clone (needs FROM_BUNDLE):
# fp16_cache computes into a temporary and copies it into `out`; then `nox -s bench-sm90`,
# results under regress/. On a GPU model without a baseline of its own, the job judges it on
# the runner (machine factor + A/B against the baseline's commit, docs/measurement.md §16).
if [[ $steps == *" regress "* || $steps == *" regressforeign "* ]]; then
  sed -i 's/torch.matmul(A, prepared.state\["W"\], out=out)/out.copy_(torch.matmul(A, prepared.state["W"]))/' \
    harness/kernels/fp16_cache.py
  git -c user.email=device@harness -c user.name=device commit -qam \
    "planted regression: fp16_cache computes into a temporary, then copies it into out"
  echo "regress commit $(git rev-parse HEAD) $(git diff --stat HEAD~1 | tail -1)" | tee -a "$out/$tag-times.txt"
  [[ $steps == *" regress "* ]] && step regress python3 -m nox -s bench-sm90 -- \
    --out "$res/regress" --no-progress ${NOX_ARGS:-} && tail -14 "$logs/$tag-regress.log"
  [[ $steps == *" regressforeign "* ]] && step regressforeign python3 -m nox -s bench-sm90 -- \
    --out "$res/regressforeign" --baselines "$refroot" --no-progress ${NOX_ARGS:-} \
    && tail -14 "$logs/$tag-regressforeign.log"
fi
# report: `harness report` on every stored run of this call, gated against the committed
# baselines (the verdict agreement line is the check: report == bench, row for row)
if [[ $steps == *" report "* ]]; then
  for d in "$res"/*/*/sm90; do
    [ -d "$d" ] || continue
    extra=(); [[ $d == */planted/* || $d == */plantedjob*/* ]] && extra=(--partial)
    root=baselines; [[ $d == */foreign*/* || $d == */regressforeign/* ]] && root=$refroot
    python3 -m harness report "$d" --baseline "$root" "${extra[@]}" \
      >> "$logs/$tag-report.log" 2>&1
    echo "report $d rc=$?" | tee -a "$out/$tag-times.txt"
  done
  pack
fi
# summary: the acceptance table's lines (exit code, failing verdicts, A/B, planted share)
if [[ $steps == *" summary "* ]]; then
  for d in "$res"/*/*/sm90; do
    [ -d "$d" ] || continue
    plant=(); [[ $d == */planted* || $d == */foreignplanted/* ]] && plant=(--plant "${PLANT:-fp16_cache}")
    python3 scripts/acceptance_summary.py "$d" --by-path "${plant[@]}" | tee -a "$out/$tag-summary.txt"
  done
fi
# the pending GPU checks of other issues, each its own step
[[ $steps == *" testsgpu "* ]] && step testsgpu python3 -m nox -s tests-gpu
[[ $steps == *" fleet "* ]] && step fleet python3 -m pytest -v -m slow tests/gpu/test_fleet_build_gpu.py
[[ $steps == *" bisect "* ]] && step bisect bash scripts/bisect_acceptance.sh "$res/bisect"
[[ $steps == *" kernels "* ]] && step kernels python3 -m harness study kernels --out "$out/$tag-kernels.csv" \
  ${KERNELS_ARGS:-} && step kernels-cold python3 -m harness study kernels --cold-l2 \
  --out "$out/$tag-kernels-cold.csv" ${KERNELS_ARGS:-}
# shard (issue 22): shardtest, shardaa, shardone and shardplanted, each also by its own name
# (the four together may not fit one 600-s call); the last three need several GPUs
want() { [[ $steps == *" $1 "* || $steps == *" shard "* ]]; }
gpus=0
[[ $steps == *" shard"* ]] && gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
want shardtest && step shardtest python3 -m pytest -v -p no:cacheprovider tests/gpu/test_bench_shard_gpu.py
if [ "$gpus" -gt 1 ]; then
  want shardaa && step shardaa python3 -m harness bench --arch sm90 --matrix production,parity,edges \
    --gpus all --out "$res/shard" --no-progress
  want shardone && step shardone python3 -m harness bench --arch sm90 --matrix production,parity,edges \
    --out "$res/shard1" --no-progress --no-compare
  want shardplanted && step shardplanted env HARNESS_PLANT_PATH="${PLANT:-fp16_cache}" \
    python3 -m harness job --arch sm90 --steps gemm --mode graph --gpus all --out "$res/shardplanted" \
    --no-progress --plugin tests/planted/slowdown_plugin.py ${JOB_ARGS:-}
fi
# smollm2 (issue 39): the job's real-model step (`harness job --steps smollm2`: SmolLM2 at
# groups 32, 128, K on 32,768 tokens), the GGUF from $HARNESS_MODEL_DIR (joined from the
# carried parts: docs/perplexity.md §7); its rows copied to the top of $OUT, where they come
# back (a deep results folder does not), for `harness baseline accept`
[[ $steps == *" smollm2 "* ]] && step smollm2 python3 -m harness job --arch sm90 --steps smollm2 \
  --out "$res/smollm2" --no-progress; [[ $steps == *" smollm2 "* ]] && \
  cp "$res"/smollm2/*/sm90/ppl-smollm2.csv "$res"/smollm2/*/sm90/ppl-smollm2.json "$out/" 2>/dev/null
# gputests: chosen GPU tests (GPU_TESTS, pytest arguments; default the correction variants')
[[ $steps == *" gputests "* ]] && step gputests python3 -m pytest -q -p no:cacheprovider \
  ${GPU_TESTS:-tests/gpu/test_correction_variants.py}
# correction: `harness study correction` (issue 21's overhead table), its CSV under $OUT
[[ $steps == *" correction "* ]] && step correction python3 -m harness study correction \
  --out "$out/$tag-correction" ${CORRECTION_ARGS:-}
pack
true
