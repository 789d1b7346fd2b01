"""Several stored runs, of several machines and arches, as one fleet: the records and the
tables a fleet report shows (``fleet_render`` writes them as CSV, HTML and Markdown).

A ``FleetRun`` is one run as ``harness merge`` judged it: its rows, its ``GateResult``
(gated against a baseline as ``harness report`` gates, or read from the run's stored gate
record), its exit code and the reason for it. Runs are never merged with each other: two
runs of one arch from two machines are two ``FleetRun`` records with two labels
(``label_runs``). The tables:

* ``summary_frame``: verdict counts per run and path (arch x GPU model x machine x path x
  verdict), with the failing rows and the run's exit code; ``speed_judged``: how a run's
  speed was judged (its own model's baseline, on the runner against another model's, or
  not at all);
* ``machines_frame``: each run's environment (GPU, uuid, host, driver, torch, CUDA,
  optimum-quanto, commit, date);
* ``winners_frame`` / ``rules_frame``: the crossover (``crossover.crossover``: the fastest
  correct path per shape, M and mode) of every timed run side by side, and the dispatch
  rule (``crossover.dispatch_rule``) per run, so a path that wins on one arch and loses on
  another shows in one row;
* ``merged_frame``: every row of every run in the report layout (``csv_report``) with
  ``run``, ``arch`` and ``machine`` columns in front.

Torch-free, like every module of ``harness.reports``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ..errors import worst_exit
from ..results.environment import Environment
from ..results.schema import ResultRow
from .crossover import crossover, dispatch_rule
from .csv_report import report_frame
from .verdicts import PRIORITY, GateResult, Verdict, is_stand_in


@dataclass(frozen=True)
class FleetRun:
    """One run of the fleet, judged: what a fleet report shows of it."""

    label: str                   # unique in the fleet: "sm90 @ host" (+ GPU, commit if needed)
    arch: str
    machine: str                 # the host, else the GPU's uuid
    environment: Environment
    source: str                  # the directory it was read from
    rows: tuple[ResultRow, ...]
    result: GateResult
    exit_code: int
    reason: str                  # one line for the exit code
    verdicts_from: str           # "baselines/sm90 (baseline abc)", "stored gate record", ...
    notes: tuple[str, ...] = ()

    @property
    def timed(self) -> bool:
        """Whether its times say which path wins: GPU rows, not CPU stand-ins."""
        return any(not is_stand_in(r) and math.isfinite(r.time_us_median) for r in self.rows)


def machine_of(env: Environment) -> str:
    """The machine a run was measured on: its host, else its GPU's uuid, else its boot id."""
    return (env.host or env.gpu_uuid or (f"boot {env.boot_id[:8]}" if env.boot_id else "")
            or "unknown machine")


def label_runs(envs: Sequence[Environment]) -> list[str]:
    """A label per run, unique in the list: ``arch @ machine``; where two runs would share
    one, the GPU's uuid, then the commit, where they tell them apart, then a number."""
    def tag(env: Environment, i: int) -> str:
        if i == 0:
            return f"GPU {env.gpu_uuid.removeprefix('GPU-')[:8]}" if env.gpu_uuid else ""
        return env.commit[:12]

    labels = [f"{env.arch or 'unknown arch'} @ {machine_of(env)}" for env in envs]
    for i in range(2):
        groups: dict[str, set[str]] = {}
        for lab, env in zip(labels, envs, strict=True):
            groups.setdefault(lab, set()).add(tag(env, i))
        labels = [f"{lab} [{tag(env, i)}]" if len(groups[lab]) > 1 and tag(env, i) else lab
                  for lab, env in zip(labels, envs, strict=True)]
    seen: Counter = Counter()
    counts = Counter(labels)
    out = []
    for lab in labels:
        seen[lab] += 1
        out.append(f"{lab} #{seen[lab]}" if counts[lab] > 1 else lab)
    return out


def speed_judged(run: FleetRun) -> str:
    """How the run's speed was judged, in a few words: against a baseline of its own GPU
    model; on the runner against another model's baseline (the job's machine factor and
    A/B); not at all (another model, a plain bench: TIMING_NOT_COMPARABLE); or nothing to
    judge (no baseline, CPU stand-ins)."""
    if any(n.startswith("speed judged on this runner") for n in run.result.notes):
        return "on the runner: machine factor + A/B against another model's baseline"
    if any(v.verdict == Verdict.TIMING_NOT_COMPARABLE for v in run.result.verdicts):
        return "not judged: another GPU model's baseline (TIMING_NOT_COMPARABLE)"
    if not run.result.has_baseline or not run.timed:
        return "not judged: no timed baseline"
    return "against its own GPU model's baseline"


def fleet_exit(runs: Sequence[FleetRun]) -> int:
    """The fleet's exit code: the worst run's (``errors.worst_exit`` order)."""
    return worst_exit([r.exit_code for r in runs])


def by_arch(runs: Sequence[FleetRun]) -> dict[str, list[FleetRun]]:
    """The runs grouped by arch (arches sorted, runs in label order)."""
    out: dict[str, list[FleetRun]] = {}
    for run in sorted(runs, key=lambda r: (r.arch, r.label)):
        out.setdefault(run.arch, []).append(run)
    return out


def summary_frame(runs: Sequence[FleetRun]) -> pd.DataFrame:
    """Per run and path: the count of each verdict present in the fleet (columns in the
    gate's priority order), the failing rows and the run's exit code."""
    present = [v for v in PRIORITY
               if any(rv.verdict == v for run in runs for rv in run.result.verdicts)]
    records = []
    for run in sorted(runs, key=lambda r: (r.arch, r.label)):
        paths = sorted({rv.path for rv in run.result.verdicts})
        for path in paths:
            mine = [rv for rv in run.result.verdicts if rv.path == path]
            rec = {"arch": run.arch, "GPU model": run.environment.gpu_name,
                   "machine": run.machine, "run": run.label, "path": path}
            rec.update({str(v): sum(rv.verdict == v for rv in mine) for v in present})
            rec.update({"failing": sum(rv.fails for rv in mine), "exit": run.exit_code})
            records.append(rec)
    cols = ["arch", "GPU model", "machine", "run", "path", *map(str, present), "failing",
            "exit"]
    return pd.DataFrame(records, columns=cols)


#: (column, Environment field) of the machines table, in order.
MACHINE_FACTS = (("GPU", "gpu_name"), ("GPU uuid", "gpu_uuid"), ("host", "host"),
                 ("driver", "driver"), ("torch", "torch"), ("CUDA", "cuda"),
                 ("optimum-quanto", "quanto"), ("commit", "commit"), ("date", "date"))


def machines_frame(runs: Sequence[FleetRun]) -> pd.DataFrame:
    """One row per run: its label, arch and environment facts ("" where unknown)."""
    return pd.DataFrame([
        {"run": run.label, "arch": run.arch,
         **{col: getattr(run.environment, name) for col, name in MACHINE_FACTS},
         "source": run.source}
        for run in sorted(runs, key=lambda r: (r.arch, r.label))],
        columns=["run", "arch", *(c for c, _ in MACHINE_FACTS), "source"])


def _timed(runs: Sequence[FleetRun]) -> list[FleetRun]:
    return [r for r in sorted(runs, key=lambda r: (r.arch, r.label)) if r.timed]


def winners_frame(runs: Sequence[FleetRun]) -> pd.DataFrame:
    """The crossover of every timed run side by side: per (kind, N, K, group_size, mode,
    M), each run's fastest correct path and its time, and whether the runs that measured
    that point disagree on the winner (``differs``)."""
    timed = _timed(runs)
    points: dict[tuple, dict[str, str]] = {}
    winners: dict[tuple, set[str]] = {}
    for run in timed:
        for row in crossover(run.rows, run.result.settings.rel_err_gate):
            key = (row.kind, row.N, row.K, row.group_size, row.mode, row.M)
            cell = (f"{row.fastest} ({row.fastest_us:.2f} µs)" if row.fastest
                    else "(none correct)")
            points.setdefault(key, {})[run.label] = cell
            winners.setdefault(key, set()).add(row.fastest or "(none correct)")
    ident = ["kind", "N", "K", "group_size", "mode", "M"]
    records = [{**dict(zip(ident, key, strict=True)),
                **{run.label: points[key].get(run.label, "") for run in timed},
                "differs": "yes" if len(winners[key]) > 1 else ""}
               for key in sorted(points)]
    return pd.DataFrame(records, columns=[*ident, *(r.label for r in timed), "differs"])


def rules_frame(runs: Sequence[FleetRun]) -> pd.DataFrame:
    """The dispatch rule the data supports (``crossover.dispatch_rule``), per shape label,
    with one column per timed run ("" where that run did not measure the shape)."""
    timed = _timed(runs)
    rules = {run.label: dict(dispatch_rule(crossover(run.rows, run.result.settings.rel_err_gate)))
             for run in timed}
    shapes = sorted({shape for rule in rules.values() for shape in rule})
    records = [{"shape": shape, **{run.label: rules[run.label].get(shape, "") for run in timed}}
               for shape in shapes]
    return pd.DataFrame(records, columns=["shape", *(r.label for r in timed)])


def untimed_note(runs: Sequence[FleetRun]) -> str:
    """Which runs the winners tables leave out and why ("" when none)."""
    left = [r.label for r in sorted(runs, key=lambda r: (r.arch, r.label)) if not r.timed]
    if not left:
        return ""
    return (f"Left out of the winners: {', '.join(left)} (CPU stand-ins or no timed rows: "
            "their times say nothing about which kernel wins).")


def merged_frame(runs: Sequence[FleetRun]) -> pd.DataFrame:
    """Every row of every run in the report CSV layout (``csv_report.report_frame``), with
    ``run``, ``arch``, ``machine`` and ``run_exit`` (the run's exit code) in front."""
    frames = []
    for run in sorted(runs, key=lambda r: (r.arch, r.label)):
        frame = report_frame(run.result)
        frame.pop("arch")                        # the rows' own column, moved to the front
        for col, value in reversed((("run", run.label), ("arch", run.arch),
                                    ("machine", run.machine), ("run_exit", run.exit_code))):
            frame.insert(0, col, value)
        frames.append(frame)
    if not frames:
        raise ValueError("a fleet report needs at least one run")
    return pd.concat(frames, ignore_index=True)
