"""One ``harness bench`` invocation: environment, ceilings, per-matrix runs, tables, the gate.

Kept apart from ``cli.py`` (argument parsing) so tests and the pytest-benchmark plugin
can drive a sweep without argparse. The environment and the ceilings are measured once
per session, before any case, and stored in every matrix's json.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.reports.environment import (
    Environment,
    measured_settings,
    warning_lines,
    with_env_warnings,
)
from harness.reports.gate_record import write_gate_record
from harness.reports.schema import ResultRow
from harness.reports.store import RunMeta, read_meta, run_dir, write_meta
from harness.reports.writer import RowWriter

from .ceilings import measure_ceilings
from .envinfo import environment, git_commit
from .runner import RunContext, Runner

SMALL_CASE_US = 20.0


@dataclass
class BenchSession:
    device: torch.device
    arch: str
    settings: object
    modes: tuple[str, ...]
    paths: list[str]
    out: Path
    baselines: Path
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    partial: bool = False
    table: bool = True            # print the short table after each matrix
    extra: dict = field(default_factory=dict)
    echo: object = print

    def __post_init__(self) -> None:
        self.commit = git_commit()
        self.env = environment(self.device)
        self.env["commit"] = self.commit
        self.ceilings = measure_ceilings(self.device)
        c = self.ceilings
        self.echo(f"harness bench: {self.env.get('gpu_name') or 'CPU'} ({self.arch}), commit "
                  f"{self.commit}; ceilings: copy {c.copy_gbps:.0f} GB/s, {c.gemm_dtype} GEMM "
                  f"{c.gemm_n}^3 {c.gemm_tflops:.1f} TFLOP/s ({c.timer}, median of "
                  f"{len(c.gemm_samples_us)})")
        self.rows: dict[tuple[str, str], list[ResultRow]] = {}
        self.cases: dict[str, list] = {}

    # ------------------------------------------------------------------ measuring
    def run_dir(self, suffix: str = "") -> Path:
        return run_dir(self.out, self.commit, self.arch + suffix)

    def _meta(self, matrix: str, notes: dict, wall: dict | None = None) -> RunMeta:
        extra = dict(self.extra)
        extra.update(modes=list(self.modes), paths=list(self.paths),
                     ceilings_detail=self.ceilings.to_dict(), row_notes=dict(sorted(notes.items())),
                     wall_s_by_stage=dict(wall or {}))
        return RunMeta(matrix=matrix, commit=self.commit, arch=self.arch,
                       environment=Environment.from_dict(self.env), ceilings=self.ceilings.numbers(),
                       settings=self.settings.to_dict(), extra=extra)

    def context(self, matrix: str) -> RunContext:
        return RunContext(matrix=matrix, device=self.device, settings=self.settings,
                          modes=self.modes, commit=self.commit, arch=self.arch,
                          device_name=self.env.get("gpu_name") or "cpu", ceilings=self.ceilings)

    def measure(self, matrix: str, cases: list, suffix: str = "") -> Path:
        """Measure ``cases`` into ``<run dir><suffix>/<matrix>.csv``; returns the CSV path."""
        self.cases[matrix] = list(cases)
        t0 = time.perf_counter()
        csv_path = self.run_dir(suffix) / f"{matrix}.csv"
        json_path = csv_path.with_suffix(".json")
        mode = "resume" if self.resume else ("overwrite" if self.overwrite else "new")
        ctx = self.context(matrix)
        if self.resume and json_path.is_file():
            old = read_meta(json_path).extra.get("row_notes", {})
            ctx.notes.update({str(k): str(v) for k, v in dict(old).items()})
        try:
            writer = RowWriter(csv_path, meta=self._meta(matrix, ctx.notes), mode=mode).open()
        except FileExistsError as exc:
            raise ValueError(f"{exc} (--resume continues it, --overwrite replaces it)") from None
        except RuntimeError as exc:                 # StoreLockedError: another writer
            raise ValueError(str(exc)) from None
        try:
            if writer.existing:
                self.echo(f"harness bench: resuming {csv_path}: {len(writer.existing)} rows done")
            runner = Runner(ctx, writer, progress=self.progress)
            runner.run(cases, self.paths)
            rows = list(writer.existing) + runner.rows
            ctx.wall = {k: round(v, 2) for k, v in runner.wall.items()}
        finally:
            try:   # also when interrupted: the notes of the rows on disk survive --resume
                write_meta(json_path, self._meta(matrix, ctx.notes, ctx.wall))
            finally:
                writer.close()
        self.rows[(matrix, suffix)] = rows
        self.echo(f"harness bench: {len(rows)} rows in {csv_path} "
                  f"({time.perf_counter() - t0:.1f} s wall for this matrix; by stage: "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in ctx.wall.items()) + ")")
        if self.table:
            print_table(rows, self.modes, self.paths, title=f"{matrix} on {self.arch} ({self.commit})")
        return csv_path

    # ------------------------------------------------------------------ A/A
    def print_aa(self, matrices: list[str], repeat: int) -> None:
        """|delta median| between repetition 1 and each later one, split at 20 us."""
        for matrix in matrices:
            first = {r.key: r for r in self.rows.get((matrix, ""), []) if r.status == "ok"}
            for k in range(2, repeat + 1):
                other = {r.key: r for r in self.rows.get((matrix, f".rep{k}"), []) if r.status == "ok"}
                big, small = [], []
                for key in first.keys() & other.keys():
                    a, b = first[key].time_us_median, other[key].time_us_median
                    (big if a >= SMALL_CASE_US else small).append(abs(b - a) / a)
                for label, vals in ((f">= {SMALL_CASE_US:.0f} us", big), (f"< {SMALL_CASE_US:.0f} us", small)):
                    self.echo(f"A/A {matrix} run 1 vs {k}, rows {label}: " + aa_summary(vals))

    # ------------------------------------------------------------------ gate
    def compare(self, matrix: str, strict_env: bool = False) -> int:
        """Gate repetition 1 of ``matrix`` against the baseline; candidate when there is none."""
        from harness.reports.baseline import (
            BaselineMeta,
            baseline_dir,
            check_baseline,
            load_baseline,
            write_baseline_matrix,
        )
        from harness.reports.gate import evaluate

        rows = self.rows[(matrix, "")]
        env = Environment.from_dict(self.env)
        bdir = baseline_dir(self.baselines, self.arch)
        if not (bdir / f"{matrix}.csv").is_file():
            cand = self.run_dir() / "candidate-baseline"
            meta = BaselineMeta(matrix=matrix, arch=self.arch, environment=env, rows_sha256="",
                                settings=self.settings.to_dict(),
                                source=str(self.run_dir() / f"{matrix}.csv"))
            path = write_baseline_matrix(cand, rows, meta)
            self.echo(f"harness bench: no baseline {bdir / (matrix + '.csv')}; wrote a CANDIDATE "
                      f"baseline {path} (not promoted: review it, then `harness baseline accept "
                      f"{self.run_dir()}`)")
            # No baseline to compare with, but ERROR and WORSE_ACCURACY rows still fail.
            alone = evaluate(rows, [], self.settings, current_label=self.commit)
            self.store_gate(matrix, alone)
            for v in alone.failures:
                self.echo(f"harness bench: {v.verdict} {v.case_id} {v.path} {v.mode}: {v.reason}")
            return alone.exit_code
        base = load_baseline(bdir, [matrix])
        env_warnings = check_baseline(base, env, measured_settings(
            self.settings.to_dict(), {**self.extra, "modes": list(self.modes)}), strict=strict_env)
        for line in warning_lines("harness bench", env_warnings):
            self.echo(line)
        result = evaluate(rows, base.rows, self.settings, margins=base.margins,
                          remeasure=self.remeasure_hook(matrix), partial=self.partial,
                          current_label=self.commit, baseline_label=base.label)
        result = with_env_warnings(result, env_warnings)
        self.store_gate(matrix, result)
        try:
            from harness.reports.markdown import text_table
            self.echo(text_table(result))
        except ImportError:
            for v in result.verdicts:
                self.echo(f"{v.verdict!s:15s} {v.case_id} {v.path} {v.mode} {v.reason}")
        counts = {str(k): n for k, n in result.counts().items() if n}
        self.echo(f"harness bench: gate {matrix} vs {bdir}: {counts}; exit {result.exit_code}")
        return result.exit_code

    def store_gate(self, matrix: str, result) -> None:
        """Keep the gate's reading with the run (``harness.reports.gate_record``)."""
        write_gate_record(self.run_dir() / f"{matrix}.csv", result)

    def remeasure_hook(self, matrix: str):
        """The gate's ``remeasure(keys)`` for ``matrix``: each key measured again, current build."""
        by_id = {c.id: c for c in self.cases.get(matrix, [])}

        def remeasure(keys):
            rows = []
            ctx = self.context(matrix)
            for case_id, path, mode in keys:
                if case_id not in by_id:
                    continue
                ctx.modes = (mode,)
                rows += Runner(ctx).run([by_id[case_id]], [path])
            return rows

        return remeasure


def aa_summary(rel_deltas: list[float]) -> str:
    """'n=.., median ..%, p95 ..%, max ..%' of relative |delta median|."""
    if not rel_deltas:
        return "no rows"
    v = sorted(rel_deltas)
    p95 = v[min(len(v) - 1, math.ceil(0.95 * len(v)) - 1)]
    med = v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])
    return f"n={len(v)}, median {med:.2%}, p95 {p95:.2%}, max {v[-1]:.2%}"


def _cell(rows: dict, case_id: str, path: str, modes) -> str:
    parts = []
    for m in modes:
        r = rows.get((case_id, path, m))
        if r is None:
            parts.append("-")
        elif r.status == "ok":
            parts.append(f"{r.time_us_median:.1f}")
        else:
            parts.append(r.status[:5].upper())
    return " / ".join(parts)


def print_table(rows: list[ResultRow], modes, paths, title: str, max_cases: int = 60) -> None:
    """Case x path table of medians (us, one per mode), then status counts per path."""
    from rich.console import Console
    from rich.table import Table

    index = {r.key: r for r in rows}
    case_ids = list(dict.fromkeys(r.case_id for r in rows))
    table = Table(title=f"{title}: median us ({' / '.join(modes)})", title_justify="left")
    table.add_column("case")
    for p in paths:
        table.add_column(p, justify="right")
    for cid in case_ids[:max_cases]:
        table.add_row(cid, *(_cell(index, cid, p, modes) for p in paths))
    console = Console(width=160, stderr=False)
    console.print(table)
    if len(case_ids) > max_cases:
        console.print(f"... {len(case_ids) - max_cases} more cases in the CSV")
    for p in paths:
        counts: dict[str, int] = {}
        for r in rows:
            if r.path == p:
                counts[r.status] = counts.get(r.status, 0) + 1
        errs = sorted({r.error for r in rows if r.path == p and r.status in ("error", "rejected")})
        line = f"{p}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        if errs:
            line += f"; first problem: {errs[0][:150]}"
        console.print(line, highlight=False)
