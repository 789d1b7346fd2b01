"""``harness job``'s summary records: one step's outcome and where the job's time went.

Read by the job's table and time line (``commands.job``) and kept in ``job.json``; pure
(the bench's stages come from its matrices' json, ``wall_s_by_stage``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..results.store import read_meta
from .verdicts import FAILING

#: verdicts that fail a gated row (a row of another role or mode shows them as information)
FAILING_NAMES = frozenset(v.value for v in FAILING)


@dataclass
class StepResult:
    """One step's outcome for the summary table."""

    step: str
    matrix: str
    exit_code: int = 0
    rows: int = 0
    verdicts: dict = field(default_factory=dict)
    failing: dict = field(default_factory=dict)     # of ``verdicts``, the rows that fail
    reason: str = ""
    seconds: float = 0.0


def is_ppl(r: StepResult) -> bool:
    """A perplexity step (``harness ppl``: the fixture's ``ppl``, a real model's
    ``ppl-<name>``), not a bench's matrix."""
    return r.matrix == "ppl" or r.matrix.startswith("ppl-")


def bench_stages(results: list[StepResult], run_dir: Path | None) -> dict[str, float]:
    """The bench process's wall time by stage, summed over its matrices' json
    (``wall_s_by_stage``: the extension's build and the case data of the overlapped start,
    ``measure.warm_start``; case data, per-path set-up, each timing mode, the fresh-input
    re-check), and "gate + other", the rest of the
    process (start-up, ceilings, the gate and its re-measurements)."""
    bench = [r for r in results if not is_ppl(r)]
    if not bench or run_dir is None:
        return {}
    stages: dict[str, float] = {}
    for r in bench:
        path = run_dir / f"{r.matrix}.json"
        wall = (read_meta(path).extra.get("wall_s_by_stage") or {}) if path.is_file() else {}
        for k, v in wall.items():
            stages[k] = stages.get(k, 0.0) + float(v or 0.0)
    order = ("build", "data", "set-up", "graph", "cold", "cpu", "re-check")
    stages = dict(sorted(stages.items(), key=lambda kv: (
        order.index(kv[0]) if kv[0] in order else len(order), kv[0])))
    stages["gate + other"] = max(0.0, bench[0].seconds - sum(stages.values()))
    return stages


def job_timing(results: list[StepResult], ab: dict[str, float], wall_s: float,
               nox_s: float | None, start_s: float | None = None) -> dict[str, float]:
    """Where the job's wall time went: nox's start (under nox; before the job, so not in
    its total), the job process's own start (``start_s``: torch's import and the GPU's
    query, in the total), the bench process (its matrices), ppl, the machine factor of
    another GPU model (when there was one), the wait for the baseline commits' builds
    started with the job (``kernels.prebuild``; shown from 0.5 s), the A/B confirmation
    (0 when nothing was flagged or it is off) and the whole job. The machine factor's and
    the A/B's own parts (``"<part>: measuring"``, ``"<part>: start-up wait"``, from
    ``engines.bench_runner.bench_timeline``) follow their part."""
    out: dict[str, float] = {"nox start": nox_s} if nox_s is not None else {}
    if start_s is not None:
        out["torch + GPU start"] = start_s
    bench = [r for r in results if not is_ppl(r)]
    if bench:
        out[f"bench ({'+'.join(r.matrix for r in bench)})"] = bench[0].seconds
    for r in results:
        if is_ppl(r):
            out["ppl" if r.matrix == "ppl" else f"ppl ({r.matrix[4:]})"] = r.seconds
    out.update({k: v for k, v in ab.items() if k.split(": ")[0] == "machine factor"})
    if ab.get("A/B builds", 0.0) >= 0.5:     # the wait for the baseline commits' builds
        out["A/B builds"] = ab["A/B builds"]
    out["A/B"] = ab.get("A/B", 0.0)
    out.update({k: v for k, v in ab.items() if k.startswith("A/B: ")})
    out["total"] = wall_s
    return out


def time_line(timing: dict[str, float], stages: dict[str, float]) -> str:
    """The job's last timing line: each part, in brackets after it the bench's stages and
    the sub-parts ``"<part>: <name>"`` of a part (and what they leave: "other")."""
    parts = []
    for k, v in timing.items():
        if ": " in k:
            continue
        part = f"{k} {v:.0f} s"
        subs = {s.split(": ", 1)[1]: t for s, t in timing.items() if s.startswith(f"{k}: ")}
        if subs:
            subs["other"] = max(0.0, v - sum(subs.values()))
        elif k.startswith("bench (") and stages:
            subs = stages
        if subs:
            part += " [" + ", ".join(f"{s} {t:.0f}" for s, t in subs.items()) + "]"
        parts.append(part)
    return "harness job: time: " + ", ".join(parts)


def verdict_counts(verdicts: dict, failing: dict) -> str:
    """The summary's verdicts cell: each verdict's rows, and where some of a verdict's rows
    do not fail (a SLOWER cold row or a peer's: information), how many of them."""
    parts = []
    for k, n in sorted(verdicts.items()):
        info = n - int(failing.get(k, 0))
        parts.append(f"{n} {k}" + (f" ({info} not gating)" if k in FAILING_NAMES and info > 0
                                   else ""))
    return ", ".join(parts) or "-"
