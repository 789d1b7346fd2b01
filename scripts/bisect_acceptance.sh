#!/usr/bin/env bash
# Acceptance of `harness bisect` and `harness history` on a chain of 8 commits of this
# project, the planted 5% slowdown (tests/planted/slowdown_plugin.py on $HARNESS_PLANT_PATH,
# default fp16_cache) introduced at commit K:
#   1. the chain: a fresh git repository under WORK/chain whose first commit is this
#      checkout's working tree (tracked and untracked files git does not ignore); each of
#      the 7 commits after it changes CHAIN.md, and commit K also turns bisect_plant.py (a
#      --plugin file read from each commit's own checkout) from a no-op into the planted
#      slowdown;
#   2. `harness bisect HEAD~7 HEAD` on the chain must name commit K, measuring at most
#      MAX_MEASURED commits (GOOD included);
#   3. the chain's commits that bisect did not measure are benched into the same results
#      root, then `harness history` on it must show a SLOWER time step at commit K on the
#      planted path, in the steps CSV and the HTML page.
# Prints PASS or FAIL (exit 0 / 1) with the bisect and history output and the wall times;
# everything is left under WORK (default: a new temporary directory).
#
# On one H200 (about 6-8 minutes with a cached build; the first build adds ~1 minute):
#   bash scripts/bisect_acceptance.sh /tmp/bisect-acceptance
# On a CPU, with the test suite's deterministic timer (what tests/unit/test_bisect_acceptance.py runs):
#   MATRIX=smoke FILTER="M == 16 or M == 32" PATHS=fp16_cache,native_int4 MODE=cpu \
#     PLUGINS=tests/planted/fake_timer_plugin.py bash scripts/bisect_acceptance.sh
# Knobs (environment): K (1-7, default 5), MATRIX (production), FILTER ("M == 1024"),
# PATHS (fp16_cache), MODE (graph; cpu: the CPU paths even on a GPU machine; empty: the
# bench's default), PLUGINS (more --plugin
# files, space-separated), MAX_MEASURED (4), PYTHON (python3), HARNESS_PLANT_PATH.
set -euo pipefail
PY=${PYTHON:-python3}
K=${K:-5}
MATRIX=${MATRIX:-production}
FILTER=${FILTER-M == 1024}
PATHS=${PATHS-fp16_cache}
MODE=${MODE-graph}
MAX_MEASURED=${MAX_MEASURED:-4}
export HARNESS_PLANT_PATH=${HARNESS_PLANT_PATH:-${PATHS%%,*}}
export PYTHONUNBUFFERED=1
unset HARNESS_COMMIT
if ! "$PY" -c "import ruptures" 2>/dev/null; then    # history needs it: fail before measuring
  echo "FAIL: ruptures is not importable by $PY (harness history needs it): pip install" \
       "ruptures, or without a registry pip install --no-index --find-links .whl ruptures" >&2
  exit 1
fi
root=$(git rev-parse --show-toplevel)
if [ -n "${1:-}" ]; then
  mkdir -p "$1" && work=$(cd "$1" && pwd)
else
  work=$(mktemp -d -t bisect-acceptance.XXXXXX)
fi
chain=$work/chain
rm -rf "$chain" "$work/bisect" "$work/history" "$work/wt"
mkdir -p "$chain"
t0=$(date +%s)

# 1. the chain ---------------------------------------------------------------------------
git -C "$root" ls-files -z -co --exclude-standard \
  | tar -C "$root" --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$chain" -xf -
git -C "$chain" init -q
git -C "$chain" config user.email "acceptance@harness"
git -C "$chain" config user.name "bisect acceptance"
git -C "$chain" config commit.gpgsign false
cat > "$chain/bisect_plant.py" <<'PY'
"""The bisect acceptance chain's switch (a --plugin file): nothing planted at this commit."""
PY
echo "# bisect acceptance chain" > "$chain/CHAIN.md"
git -C "$chain" add -A
git -C "$chain" commit -qm "c0: $(git -C "$root" rev-parse --short=12 HEAD) and its working tree"
for i in 1 2 3 4 5 6 7; do
  echo "commit $i" >> "$chain/CHAIN.md"
  if [ "$i" = "$K" ]; then
    cat > "$chain/bisect_plant.py" <<'PY'
"""The bisect acceptance chain's switch (a --plugin file): from this commit on, every call
of $HARNESS_PLANT_PATH takes 5% longer (tests/planted/slowdown_plugin.py)."""
import runpy
from pathlib import Path

_PLANTED = runpy.run_path(str(Path(__file__).resolve().parent / "tests/planted/slowdown_plugin.py"))
PY
    git -C "$chain" commit -qam "c$i: the planted 5% slowdown on $HARNESS_PLANT_PATH"
  else
    git -C "$chain" commit -qam "c$i: an unrelated change"
  fi
done
planted=$(git -C "$chain" rev-parse "HEAD~$((7 - K))")
echo "chain: $chain, commit $K = $planted plants the slowdown on $HARNESS_PLANT_PATH"

args=(--matrix "$MATRIX")
[ -n "$FILTER" ] && args+=(--filter "$FILTER")
[ -n "$PATHS" ] && args+=(--paths "$PATHS")
[ -n "$MODE" ] && args+=(--mode "$MODE")
plugins=(--plugin bisect_plant.py)
for p in ${PLUGINS:-}; do plugins+=(--plugin "$p"); done
harness() { (cd "$1" && shift && PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m harness "$@"); }

# 2. bisect ------------------------------------------------------------------------------
t1=$(date +%s)
set +e
harness "$chain" bisect HEAD~7 HEAD "${args[@]}" "${plugins[@]}" --out "$work/bisect" \
  2>&1 | tee "$work/bisect.log"
bisect_rc=${PIPESTATUS[0]}
set -e
t2=$(date +%s)

# 3. the other commits, then history -----------------------------------------------------
results=$work/bisect/results
mkdir -p "$results"
for sha in $(git -C "$chain" rev-list --reverse HEAD); do
  if ! ls -d "$results/${sha:0:12}"* >/dev/null 2>&1; then
    git -C "$chain" worktree add -q --detach "$work/wt" "$sha"
    harness "$work/wt" bench "${args[@]}" "${plugins[@]}" --no-compare --no-progress \
      --out "$results" > "$work/bench-${sha:0:12}.log" 2>&1 || true
    git -C "$chain" worktree remove --force "$work/wt"
    echo "benched ${sha:0:12} for history ($(tail -1 "$work/bench-${sha:0:12}.log"))"
  fi
done
t3=$(date +%s)
harness "$chain" history --results "$results" --out "$work/history" 2>&1 | tee "$work/history.log"
t4=$(date +%s)

# checks ---------------------------------------------------------------------------------
set +e
"$PY" - "$work" "$planted" "$bisect_rc" "$MAX_MEASURED" "$HARNESS_PLANT_PATH" <<'PY'
import csv, json, sys
from pathlib import Path
work, planted, rc, most, path = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
problems = []
summary = json.loads((work / "bisect" / "bisect.json").read_text()) if (work / "bisect" / "bisect.json").is_file() else {}
if rc != 0 or summary.get("first_bad") != planted:
    problems.append(f"bisect exited {rc} and named {summary.get('first_bad')}, not {planted}")
if summary and summary["commits_measured"] > most:
    problems.append(f"bisect measured {summary['commits_measured']} commits (at most {most})")
steps = list(csv.DictReader(open(work / "history" / "history-steps.csv")))
ours = [s for s in steps if s["kind"] == "time" and s["commit"] == planted and s["path"] == path
        and s["verdict"] == "SLOWER"]
if not ours:
    problems.append(f"history has no SLOWER time step of {path} at {planted[:12]}")
others = [s for s in steps if s not in ours]
page = (work / "history" / "history.html").read_text()
if planted[:10] not in page or "SLOWER" not in page:
    problems.append("the history page does not show the step")
for s in ours:
    print(f"history: {s['verdict']} {float(s['size_median']):+.2%} at {s['commit'][:12]} "
          f"{s['matrix']} {s['path']} {s['mode']} ({s['rows']} of {s['of']} rows)")
for s in others:
    print(f"history: other step {s['kind']} {s['verdict']} {float(s['size_median']):+.2%} at "
          f"{s['commit'][:12]} {s['path']} {s['mode']}")
if summary:
    print(f"bisect: named {summary['first_bad']}, {summary['commits_measured']} commits measured, "
          f"{summary['benches']} benches, {summary['seconds']} s")
print("FAIL: " + "; ".join(problems) if problems else "PASS")
sys.exit(1 if problems else 0)
PY
rc=$?
echo "wall: chain $((t1 - t0)) s, bisect $((t2 - t1)) s, other benches $((t3 - t2)) s," \
     "history $((t4 - t3)) s, total $((t4 - t0)) s; everything under $work"
exit $rc
