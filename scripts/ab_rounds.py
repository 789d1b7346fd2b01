"""Each row's B/A change in every round of a stored job's A/B: the single readings that the
A/B's verdict pools, to see whether a close call came from one round or from all of them.

    python scripts/ab_rounds.py RUN_DIR [--path fp16_cache] [--extended] [--row KEY ...]
    python scripts/ab_rounds.py RUN_DIR --summary
    python scripts/ab_rounds.py RUN_DIR [RUN_DIR ...] --sequential

RUN_DIR is a job's stored run (``<results>/<commit>/<arch>``). Its A/B benches lie under
``ab/<matrices>/runs/roundR/<side>/`` (side ``B``, and ``A`` or one ``A@<commit>`` per
baseline commit); where the A/B was seeded (a job on a GPU model without a baseline of its
own), round 0 is the machine factor's bench at the baseline's commit
(``ab/projection/base-<commit>/``) against the job's own bench (RUN_DIR's rows). One line
per row: its key, the A/B's verdict and change as the job stored them, the number of
rounds, the rounds' mean and standard deviation, then each round's change in percent.

``--summary``: for a seeded A/B, the mean change of round 0 against the mean of the later
rounds over the rows the A/B read (round 0's side B is the bench
reading the screen chose those rows by), and how many of them the extra-rounds rule
(``ab_undecided_se`` standard errors of ``min_effect``, on the means of the rounds' log
medians) would call close on the first three rounds, with side B's round 0 and without it
(docs/measurement.md §16.10).

``--sequential``: what stopping the extra rounds early would have saved. For each row
judged on extra rounds, the first round count (after the first three) at which its change
lies ``ab_undecided_se`` standard errors or more from ``min_effect`` (decided: SLOWER above
the line, SAME below); a job could stop when every such row is decided. Counts the rows
that would have stopped SAME where the job read SLOWER (a lost slowdown) or SLOWER where
it did not (a false alarm), and the extra rounds saved (docs/measurement.md §16.24).
Reads files only, so it runs wherever the results were copied.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.reports.stats import mean_difference_se  # noqa: E402  (the checkout's package)
from harness.results.store import load_run  # noqa: E402

Key = tuple[str, str, str]
#: row -> {round: (A's median, B's median)}
Rounds = dict[Key, dict[int, tuple[float, float]]]


def _times(folders: list[Path], mode: str) -> dict[Key, float]:
    """Each ok row's median time in ``mode`` over the result folders given (joined)."""
    out: dict[Key, float] = {}
    for folder in folders:
        for row in load_run(folder).rows:
            if row.mode == mode and row.status == "ok" and row.time_us_median > 0:
                out[row.key] = row.time_us_median
    return out


def _sides(round_dir: Path) -> tuple[list[Path], list[Path]]:
    """A's result folders (one per baseline commit) and B's, of one round. A folder without
    a CSV is left out: an extra round's bench held for a commit none of whose rows was
    undecided is released without measuring (its folder empty, b1 of 2026-12-07)."""
    dirs = sorted(p for p in round_dir.iterdir() if p.is_dir() and any(p.rglob("*.csv")))
    return ([p for p in dirs if p.name == "A" or p.name.startswith("A@")],
            [p for p in dirs if p.name == "B"])


def rounds_of(run_dir: Path, mode: str = "graph") -> Rounds:
    """Row -> {round: (A's median, B's median)} over every A/B of the stored run."""
    out: Rounds = {}

    def add(number: int, a: dict[Key, float], b: dict[Key, float]) -> None:
        for key, t_a in a.items():
            if key in b:
                out.setdefault(key, {})[number] = (t_a, b[key])

    for ab in sorted(p for p in (run_dir / "ab").glob("*") if (p / "runs").is_dir()):
        numbers = {int(p.name.removeprefix("round")): p for p in (ab / "runs").glob("round*")
                   if p.name.removeprefix("round").isdigit()}
        for number, folder in sorted(numbers.items()):
            a, b = _sides(folder)
            if a and b:
                add(number, _times(a, mode), _times(b, mode))
        bases = sorted(p for p in (run_dir / "ab" / "projection").glob("base-*")
                       if p.is_dir() and "." not in p.name)
        if 0 not in numbers and bases:          # seeded: round 0 is the factor's and the bench's
            wanted = set(out)
            add(0, {k: v for k, v in _times(bases, mode).items() if k in wanted},
                _times([run_dir], mode))
    return out


def stored_readings(run_dir: Path) -> dict[str, dict]:
    """'case|path|mode' -> the job's stored A/B reading (verdict, change, rounds)."""
    out: dict[str, dict] = {}
    for meta in sorted(run_dir.glob("*.json")):
        doc = json.loads(meta.read_text())
        record = (doc.get("extra") or doc).get("ab_confirm") if isinstance(doc, dict) else None
        if isinstance(record, dict):
            out.update(record.get("rows") or {})
    return out


def _change(pair: tuple[float, float]) -> float:
    return 100 * (pair[1] / pair[0] - 1)


def lines(run_dir: Path, mode: str = "graph", path: str | None = None,
          extended: bool = False, rows: tuple[str, ...] = ()) -> list[str]:
    readings = stored_readings(run_dir)
    out = []
    for key, per_round in sorted(rounds_of(run_dir, mode).items()):
        name = "|".join(key)
        stored = readings.get(name, {})
        if path and key[1] != path or rows and name not in rows and "|".join(key[:2]) not in rows:
            continue
        if extended and not stored.get("rounds"):
            continue
        values = [_change(per_round[r]) for r in sorted(per_round)]
        sd = statistics.stdev(values) if len(values) > 1 else float("nan")
        change = stored.get("change")
        said = f"{stored.get('verdict', '-')} {change:+.2%}" if change is not None else "-"
        out.append(f"{name} {said}; {len(values)} rounds, mean {statistics.mean(values):+.2f}%, "
                   f"sd {sd:.2f}: " + " ".join(f"r{r}:{_change(per_round[r]):+.2f}"
                                               for r in sorted(per_round)))
    return out


def _from_line(a: list[float], b: list[float], min_effect: float) -> tuple[float, float]:
    """(the difference of the sides' mean log medians minus log1p(min_effect), its standard
    error ``stats.mean_difference_se``, as the A/B's ``undecided`` uses)."""
    key = ("row", "path", "mode")
    se, _ = mean_difference_se([{key: t} for t in a], [{key: t} for t in b])[key]
    diff = statistics.fmean(map(math.log, b)) - statistics.fmean(map(math.log, a))
    return diff - math.log1p(min_effect), se


def close_call(a: list[float], b: list[float], min_effect: float, z: float) -> bool:
    """The extra-rounds rule on round medians: the difference of the sides' mean log
    medians within ``z`` standard errors of log1p(min_effect), or beyond it."""
    distance, se = _from_line(a, b, min_effect)
    return distance > 0 or abs(distance) < z * se


def summary(run_dir: Path, mode: str = "graph", min_effect: float = 0.02,
            z: float = 2.5) -> str:
    """Round 0 against the later rounds, and the close calls with and without B's round 0."""
    stored = stored_readings(run_dir)     # the rows the A/B read (not projected, screened)
    data = {k: v for k, v in rounds_of(run_dir, mode).items() if {0, 1, 2} <= set(v)
            and "|".join(k) in stored and not stored["|".join(k)].get("source")}
    if not data:
        return f"{run_dir}: no row with rounds 0, 1 and 2"
    first = [_change(v[0]) for v in data.values()]
    later = [statistics.fmean(_change(x) for r, x in v.items() if r) for v in data.values()]
    with_b0 = without = 0
    for v in data.values():
        a = [v[r][0] for r in (0, 1, 2)]
        with_b0 += close_call(a, [v[r][1] for r in (0, 1, 2)], min_effect, z)
        without += close_call(a, [v[r][1] for r in (1, 2)], min_effect, z)
    four = [v for k, v in data.items() if 3 in v and stored["|".join(k)].get("rounds")]
    on_0_2 = sum(close_call([v[r][0] for r in (0, 1, 2)], [v[r][1] for r in (0, 1, 2)],
                            min_effect, z) for v in four)
    on_1_3 = sum(close_call([v[r][0] for r in (1, 2, 3)], [v[r][1] for r in (1, 2, 3)],
                            min_effect, z) for v in four)
    return (f"{run_dir}: {len(data)} rows; round 0 mean {statistics.fmean(first):+.2f}%, "
            f"later rounds mean {statistics.fmean(later):+.2f}%; close calls on rounds 0-2: "
            f"{with_b0} with B's round 0, {without} without; of the {len(four)} rows judged on "
            f"extra rounds, {on_0_2} on rounds 0-2, {on_1_3} on rounds 1-3")


def sequential(run_dir: Path, mode: str = "graph", min_effect: float = 0.02,
               z: float = 2.5) -> tuple[int, int, list[int], list[str]]:
    """(rounds the job measured, rounds it needed, each extended row's stop round, the rows
    whose early verdict differs from the stored one: "LOST key" or "FALSE key"). A job
    with no row on extra rounds gives (0, 0, [], [])."""
    stored = stored_readings(run_dir)
    stops, wrong, measured = [], [], 0
    for row, per_round in sorted(rounds_of(run_dir, mode).items()):
        reading = stored.get("|".join(row), {})
        if not reading.get("rounds") or len(per_round) <= 3:
            continue
        order = sorted(per_round)
        measured = max(measured, len(order))
        stop = len(order)
        for n in range(4, len(order)):
            distance, se = _from_line([per_round[r][0] for r in order[:n]],
                                      [per_round[r][1] for r in order[:n]], min_effect)
            if abs(distance) >= z * se:
                stop = n
                early = "SLOWER" if distance > 0 else "SAME"
                if early == "SAME" and reading.get("verdict") == "SLOWER":
                    wrong.append(f"LOST {'|'.join(row)}")
                elif early == "SLOWER" and reading.get("verdict") != "SLOWER":
                    wrong.append(f"FALSE {'|'.join(row)}")
                break
        stops.append(stop)
    return measured, max(stops, default=0), stops, wrong


def sequential_report(runs: list[Path], mode: str = "graph") -> list[str]:
    """One line per job with extra rounds, then the total (``--sequential``)."""
    out, needed, saved, extra, rows, wrong = [], Counter(), 0, 0, 0, []
    for run in runs:
        measured, need, stops, bad = sequential(run, mode)
        if not stops:
            continue
        out.append(f"{run}: {len(stops)} rows on extra rounds, stop rounds "
                   f"{sorted(stops)}; the job needed {need} of {measured}"
                   + "".join(f"; {b}" for b in bad))
        needed[need] += 1
        saved += measured - need
        extra += measured - 3
        rows += len(stops)
        wrong += bad
    out.append(f"{sum(needed.values())} jobs, {rows} rows on extra rounds; jobs by rounds "
               f"needed: {dict(sorted(needed.items()))}; extra rounds saved {saved} of "
               f"{extra}; lost slowdowns {sum(w.startswith('LOST') for w in wrong)}, false "
               f"alarms {sum(w.startswith('FALSE') for w in wrong)}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, nargs="+",
                   help="a job's stored run directory (.../<commit>/<arch>); several with "
                   "--sequential")
    p.add_argument("--mode", default="graph", help="the timing mode (default graph)")
    p.add_argument("--path", default=None, help="only this path's rows")
    p.add_argument("--extended", action="store_true",
                   help="only the rows the A/B judged on extra rounds")
    p.add_argument("--row", action="append", default=[],
                   help="only this row ('case|path' or 'case|path|mode'; repeatable)")
    p.add_argument("--summary", action="store_true",
                   help="round 0 against the later rounds, and the close calls without it")
    p.add_argument("--sequential", action="store_true",
                   help="what stopping the extra rounds once every row is decided would "
                   "have saved, over the jobs given")
    args = p.parse_args(argv)
    missing = [r for r in args.run if not (r / "ab").is_dir()]
    if missing:
        print(f"ab_rounds: {missing[0]} has no ab/ folder (no A/B ran for this run)",
              file=sys.stderr)
        return 2
    if args.sequential:
        print("\n".join(sequential_report(args.run, args.mode)))
        return 0
    if len(args.run) > 1:
        print("ab_rounds: one run directory, except with --sequential", file=sys.stderr)
        return 2
    run = args.run[0]
    if args.summary:
        print(summary(run, args.mode))
        return 0
    for line in lines(run, args.mode, args.path, args.extended, tuple(args.row)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
