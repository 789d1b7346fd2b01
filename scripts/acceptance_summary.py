"""One line per gated matrix of a stored run, for the #16 acceptance table: its exit code,
its failing verdicts, what the A/B confirmation did, and with ``--plant PATH`` how many of
that path's rows in ``--mode`` (default graph) ended SLOWER and how many other rows fail
(per GPU too, for a run spread over several by ``harness bench --gpus``; and by the
slowdown the plant really added, from the plugin's log ``../../plant-log`` when there is
one: a spin cannot add less than its own node costs); then, when the
run has a ``job.json``, the job's exit code and where its time went; then, when its A/B
ran benches, how many rows they timed and how many of those their row files did not ask
for (none since 4a92d54; before it, each foreign A/B bench timed 14 fused pair rows more).

    python scripts/acceptance_summary.py results/<commit>/sm90 [--plant fp16_cache]

Reads the matrices' json files (the gate record ``harness bench`` / ``harness job`` stored,
rewritten by the A/B step) and the A/B benches' row files and CSVs, with the checkout's
torch-free ``harness.engines.bench_runner``, so it runs anywhere the results were copied.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.engines.bench_runner import DERIVED_FROM  # noqa: E402  (the checkout's; torch-free)


def summarize(run_dir: Path, plant: str | None, mode: str, by_path: bool = False) -> list[str]:
    lines = []
    for meta_path in sorted(run_dir.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        gate = (meta.get("extra") or meta).get("gate")
        if not isinstance(gate, dict) or "verdicts" not in gate:
            continue
        verdicts = gate["verdicts"]
        failing = Counter(gate.get("failing") or {})
        line = (f"{run_dir} {meta_path.stem}: exit {gate.get('exit_code')}, "
                f"{len(verdicts)} rows, failing {dict(failing) or 'none'}")
        ab = (meta.get("extra") or meta).get("ab_confirm")
        if ab:
            got = Counter(v["verdict"] for v in ab["rows"].values())
            seeded = ", round 0 from the factor and the bench" if ab.get("seeded") else ""
            line += (f"; A/B ({ab['rounds']} rounds{seeded} vs {ab['baseline_commit'][:12]}): "
                     f"{dict(got)}")
            more = {k: v for k, v in ab["rows"].items() if v.get("rounds")}
            if more:    # undecided after the first rounds, judged on more (record version 3)
                line += "; extra rounds: " + ", ".join(
                    f"{k} {v['verdict']} {_pct(v.get('change'), '+')} (threshold "
                    f"{_pct(v.get('threshold'))}, {v['rounds']} rounds)"
                    for k, v in sorted(more.items()))
            unread = {k: v for k, v in ab["rows"].items() if v.get("source") == "screened"}
            if unread:  # screened on another GPU model, its A/B gave no reading
                line += "; no A/B reading, the screen's verdict stands: " + ", ".join(
                    f"{k} {v['verdict']} {_pct(v.get('change'), '+')}"
                    for k, v in sorted(unread.items()))
        if plant:
            mine = {k: v for k, v in verdicts.items()
                    if k.split("|")[1] == plant and k.split("|")[2] == mode}
            caught = sum(v == "SLOWER" for v in mine.values())
            others = sum(failing.values()) - caught
            share = f"{caught / len(mine):.1%}" if mine else "n/a"
            line += (f"; planted {plant} ({mode}): {caught}/{len(mine)} SLOWER ({share}), "
                     f"{others} other failing row(s)")
            line += _per_gpu(meta_path.with_suffix(".csv"), mine)
            line += _by_planted_size(run_dir.parents[1] / "plant-log", mine)
        lines.append(line)
        if by_path:
            counts: dict[str, Counter] = {}
            for k, v in verdicts.items():
                if k.split("|")[2] == mode:
                    counts.setdefault(k.split("|")[1], Counter())[v] += 1
            lines.append(f"{run_dir} {meta_path.stem} {mode} rows by path: " + "; ".join(
                f"{p} {dict(c)}" for p, c in sorted(counts.items())))
        if ab and ab.get("projection"):          # another GPU model, judged on the runner
            proj = ab["projection"]
            f = proj.get("factors") or {}
            lines.append(f"{run_dir} {meta_path.stem}: projected from {proj['reference_model']!r}"
                         f" to {proj['runner_model']!r}: {len(f)} class factors "
                         + ", ".join(f"{k} x{v:.3f}" for k, v in sorted(f.items()))
                         + f"; {len(proj.get('measured') or ())} rows measured at the baseline's"
                         " commit")
    job_path = run_dir / "job.json"
    if lines and job_path.is_file():           # the job's exit code and where its time went
        job = json.loads(job_path.read_text())
        took = job.get("seconds") or {"total": job.get("wall_s")}
        # a part's own parts ("A/B: measuring") in brackets after it, as the job prints them
        parts = []
        for k, v in took.items():
            if ": " in k or not isinstance(v, (int, float)):
                continue
            subs = [f"{s.split(': ', 1)[1]} {t:.0f}" for s, t in took.items()
                    if s.startswith(f"{k}: ") and isinstance(t, (int, float))]
            parts.append(f"{k} {v:.0f} s" + (f" [{', '.join(subs)}]" if subs else ""))
        lines.append(f"{run_dir} job: exit {job.get('exit_code')}; " + ", ".join(parts))
    if lines:
        lines += _ab_benches(run_dir)
    return lines


def _ab_benches(run_dir: Path) -> list[str]:
    """One line on the A/B's benches (``ab/<matrices>/runs/round*/<side>``, each beside its
    row file ``<side>.rows.json``): how many measured, the rows they timed (``ok``) and
    those of them that no row file asked for (a derived row counted as its registered
    path's, ``bench_runner.DERIVED_FROM``); none where the A/B ran no bench."""
    benches = timed = unasked = 0
    for rows_file in sorted(run_dir.glob("ab/*/runs/round*/*.rows.json")):
        asked = {tuple(pair) for pair in json.loads(rows_file.read_text())}
        folder = rows_file.with_name(rows_file.name.removesuffix(".rows.json"))
        tables = sorted(folder.glob("*/*/*.csv"))
        benches += bool(tables)
        for table in tables:
            with table.open(newline="") as fh:
                for row in csv.DictReader(fh):
                    if row.get("status") == "ok":
                        timed += 1
                        unasked += (row["case_id"],
                                    DERIVED_FROM.get(row["path"], row["path"])) not in asked
    if not benches:
        return []
    return [f"{run_dir} A/B benches: {benches}, {timed} rows timed, {unasked} of them not in "
            "their row files"]


def _pct(x, sign: str = "") -> str:
    """A stored fraction as a percentage ('n/a' for a missing one: NaN is stored as null)."""
    return "n/a" if x is None else f"{x:{sign}.2%}"


def _per_gpu(csv_path: Path, verdicts: dict[str, str]) -> str:
    """'; per GPU: <uuid>: caught/affected, ...' of the planted rows, where the run's rows
    name several GPUs (a sharded run); '' otherwise."""
    if not csv_path.is_file():
        return ""
    with open(csv_path, newline="", encoding="utf-8") as fh:
        device = {f"{r['case_id']}|{r['path']}|{r['mode']}": r.get("gpu_uuid", "")
                  for r in csv.DictReader(fh)}
    per: dict[str, list[int]] = {}
    for key, verdict in verdicts.items():
        counts = per.setdefault(device.get(key, ""), [0, 0])
        counts[0] += verdict == "SLOWER"
        counts[1] += 1
    if len(per) < 2:
        return ""
    return "; per GPU: " + ", ".join(f"{uuid or '?'}: {c}/{n}"
                                     for uuid, (c, n) in sorted(per.items()))


def _by_planted_size(log_dir: Path, verdicts: dict[str, str]) -> str:
    """'; by the slowdown really planted (the plugin's log beside the run): ...': the spin
    cannot add less than its own node's time, so on a fast row a 3% plant is larger; the
    rows planted within half a point of the asked fraction are the ones that test it."""
    plans: dict[tuple[int, int, int], list[float]] = {}
    asked = None
    for f in sorted(log_dir.glob("plant-*.json")) if log_dir.is_dir() else ():
        doc = json.loads(f.read_text())
        asked = float(doc.get("fraction", 0.0))
        for plan in doc.get("plans", ()):
            # the share the plan measured it delivers where it says (closed loop), else
            # the one its model expected
            plans.setdefault((plan["M"], plan["N"], plan["K"]), []).append(
                float(plan.get("measured_fraction", plan["expected_fraction"])))
    if not plans or asked is None:
        return ""
    bins: dict[str, list[int]] = {}
    for key, verdict in verdicts.items():
        m, n, k = (int(x[1:]) for x in key.split("|")[0].split("-")[:3])
        got = sorted(plans.get((m, n, k), [float("nan")]))
        size = got[len(got) // 2]
        label = ("unknown" if size != size else
                 f"<= {asked + 0.005:.1%}" if size <= asked + 0.005 else
                 f"{asked + 0.005:.1%}-{2 * asked:.0%}" if size <= 2 * asked else
                 f"> {2 * asked:.0%}")
        counts = bins.setdefault(label, [0, 0])
        counts[0] += verdict == "SLOWER"
        counts[1] += 1
    return (f"; by the slowdown really planted (asked {asked:.0%}): "
            + ", ".join(f"{b}: {c}/{n} SLOWER" for b, (c, n) in sorted(bins.items())))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="stored run directories (.../<arch>)")
    p.add_argument("--plant", default=None, help="the path a planted slowdown was put on")
    p.add_argument("--mode", default="graph", help="the mode that gates (default graph)")
    p.add_argument("--by-path", action="store_true",
                   help="also the verdict counts of each path's rows in --mode")
    args = p.parse_args(argv)
    lines = [line for run in args.runs
             for line in summarize(run, args.plant, args.mode, args.by_path)]
    print("\n".join(lines) if lines else "no gate record in these directories")
    return 0 if lines else 1


if __name__ == "__main__":
    sys.exit(main())
