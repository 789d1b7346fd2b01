"""One measuring session: environment, ceilings, per-matrix runs written row by row, tables.

What ``harness bench`` (``harness.commands.bench``) and the gate study drive: the
environment and the ceilings are measured once per session, before any case, and stored
in every matrix's json; ``measure`` writes one matrix's rows through
``results.writer.RowWriter``; ``remeasure_hook`` is how a gate above asks for rows again
(the current build, same session). Measuring only: gating the rows against a baseline is
the command's (``harness.commands.common.gate_against_baseline``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from harness.kernels.swiglu_pair import paths_for_case
from harness.results.environment import Environment, measured_settings
from harness.results.schema import ResultRow
from harness.results.store import RunMeta, read_meta, run_dir, write_meta
from harness.results.writer import RowWriter, resume_difference

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
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    partial: bool | str = False
    table: bool = True            # print the short table after each matrix
    extra: dict = field(default_factory=dict)
    echo: object = print
    #: the device's host CUDA index when it differs from ``device.index`` (a worker pinned by
    #: CUDA_VISIBLE_DEVICES sees its GPU as 0); None: ``device.index`` (-1 on a CPU)
    host_index: int | None = None
    #: a CPU stand-in device of a sharded run: its rows say ``gpu_uuid`` "cpu:<index>"
    stand_in: bool = False
    #: seconds by stage spent before the first matrix (``warm_start.OverlappedStart``:
    #: build, data), added to the first matrix measured's ``wall_s_by_stage``
    start_stages: dict = field(default_factory=dict)

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
        index = self.device.index if self.device.type == "cuda" else -1
        self.gpu_index = index if self.host_index is None else self.host_index
        self.gpu_uuid = (f"cpu:{self.gpu_index}" if self.stand_in
                         else str(self.env.get("gpu_uuid") or ""))
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
                       environment=self.env_record(), ceilings=self.ceilings.numbers(),
                       settings=self.settings.to_dict(), extra=extra)

    def context(self, matrix: str) -> RunContext:
        return RunContext(matrix=matrix, device=self.device, settings=self.settings,
                          modes=self.modes, commit=self.commit, arch=self.arch,
                          device_name=self.env.get("gpu_name") or "cpu", ceilings=self.ceilings,
                          gpu_index=self.gpu_index, gpu_uuid=self.gpu_uuid)

    def runner(self, ctx: RunContext, skip: frozenset = frozenset()) -> Runner:
        """A ``Runner`` of this session's context ``ctx`` that writes nothing and leaves out
        the keys in ``skip`` (a sharded run's worker: the parent writes its rows)."""
        return Runner(ctx, skip=skip)

    def measure(self, matrix: str, cases: list, suffix: str = "") -> Path:
        """Measure ``cases`` into ``<run dir><suffix>/<matrix>.csv``; returns the CSV path."""
        self.cases[matrix] = list(cases)
        t0 = time.perf_counter()
        csv_path = self.run_dir(suffix) / f"{matrix}.csv"
        json_path = csv_path.with_suffix(".json")
        mode = "resume" if self.resume else ("overwrite" if self.overwrite else "new")
        ctx = self.context(matrix)
        if self.resume and json_path.is_file():
            stored = read_meta(json_path)
            why = resume_difference(stored, self._meta(matrix, {}))
            if why:
                raise ValueError(f"--resume: {csv_path} was measured with {why}; resume it with "
                                 "the same options, or start over with --overwrite")
            old = stored.extra.get("row_notes", {})
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
            wall = dict(runner.wall)
            for k, v in self.start_stages.items():    # the first matrix carries them
                wall[k] = wall.get(k, 0.0) + v
            self.start_stages = {}
            ctx.wall = {k: round(v, 2) for k, v in wall.items()}
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
            print_table(rows, self.modes, self.paths,
                        title=f"{matrix} on {self.arch} ({self.commit})")
        return csv_path

    # ------------------------------------------------------------------ A/A
    def print_aa(self, matrices: list[str], repeat: int) -> None:
        """|delta median| between repetition 1 and each later one, split at 20 us."""
        for matrix in matrices:
            first = {r.key: r for r in self.rows.get((matrix, ""), []) if r.status == "ok"}
            for k in range(2, repeat + 1):
                other = {r.key: r for r in self.rows.get((matrix, f".rep{k}"), [])
                         if r.status == "ok"}
                big, small = [], []
                for key in first.keys() & other.keys():
                    a, b = first[key].time_us_median, other[key].time_us_median
                    (big if a >= SMALL_CASE_US else small).append(abs(b - a) / a)
                for label, vals in ((f">= {SMALL_CASE_US:.0f} us", big),
                                    (f"< {SMALL_CASE_US:.0f} us", small)):
                    self.echo(f"A/A {matrix} run 1 vs {k}, rows {label}: " + aa_summary(vals))

    def measured(self) -> dict:
        """This session's settings as a baseline check compares them (settings, timing
        modes, CPU threads: ``results.environment.measured_settings``)."""
        return measured_settings(self.settings.to_dict(), {**self.extra, "modes": list(self.modes)})

    def env_record(self) -> Environment:
        """The session's environment as stored with its runs."""
        return Environment.from_dict(self.env)

    def remeasure_hook(self, matrix: str):
        """The gate's ``remeasure(keys)`` for ``matrix``: each key measured again, current build.

        A row of a path derived for a SwiGLU pair (``native_int4_fused``) is measured
        through the registered path it comes from (``swiglu_pair.paths_for_case``)."""
        by_id = {c.id: c for c in self.cases.get(matrix, [])}

        def remeasure(keys):
            rows = []
            ctx = self.context(matrix)
            for case_id, path, mode in keys:
                if case_id not in by_id:
                    continue
                ctx.modes = (mode,)
                source = _source_path(ctx.registry, by_id[case_id], path)
                rows += [r for r in Runner(ctx).run([by_id[case_id]], [source])
                         if r.key == (case_id, path, mode)]
            return rows

        return remeasure


def _source_path(registry, case, name: str) -> str:
    """The registered path whose run on ``case`` gives rows named ``name``: ``name`` itself,
    or the path a derived one comes from (unknown names are left to the runner's error)."""
    if name in registry.names():
        return name
    for path in registry.select(None):
        if any(p.name == name for p in paths_for_case(case, [path])):
            return path.name
    return name


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
            parts.append(STATUS_CODES.get(r.status, r.status))
    return " / ".join(parts)


#: Short codes for a row that has no time, in the terminal table (legend printed below it).
STATUS_CODES = {"unavailable": "n/a", "error": "ERR", "rejected": "REJ"}


def print_table(rows: list[ResultRow], modes, paths, title: str, max_cases: int = 60) -> None:
    """Case x path table of medians (us, one per mode), then status counts per path."""
    index = {r.key: r for r in rows}
    case_ids = list(dict.fromkeys(r.case_id for r in rows))
    stand_in = " — CPU stand-ins of the paths' kernels, timings are information" \
        if any(r.arch == "cpu" for r in rows) else ""
    table = Table(title=f"{title}: median us ({' / '.join(modes)}){stand_in}",
                  title_justify="left")
    table.add_column("case")
    for p in paths:
        table.add_column(p, justify="right")
    for cid in case_ids[:max_cases]:
        table.add_row(cid, *(_cell(index, cid, p, modes) for p in paths))
    console = Console(width=160, stderr=False)
    console.print(table)
    console.print("n/a = unavailable here (reason in the CSV), ERR = error, REJ = rejected "
                  "(a time under the datasheet floor), - = not measured", highlight=False)
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
