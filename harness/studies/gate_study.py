"""The gate on real GPU noise: repeated A/A runs and a planted slowdown, in one process.

    harness study gate --out DIR --planter tests/planted/slowdown_planter.py
        [--matrix production] [--filter "M <= 16"]
        [--paths native_int4,fp16_cache,marlin_asym] [--plant fp16_cache]
        [--calibration-runs 5] [--reps 20] [--modes graph] [--preset default]
        [--set KEY=VALUE] [--budget-s 480] [--resume] [--calibrate-in-process]

What it does, on one GPU and one build (``harness bench`` underneath, one ``BenchSession``):
  1. ``--calibration-runs`` A/A runs of the matrix, each ``harness bench`` in its OWN
     process (``DIR/calibration/p<k>/``); the first is the baseline, all of them give the
     per-case noise margins (``harness.reports.stats.noise_margins``, as ``harness
     baseline calibrate`` does); the baseline and its margins are written to
     ``DIR/baselines/<arch>/`` so any later gate can be reproduced from the files. Why
     separate processes: on the H200 the medians of ~6-14 µs fp16_cache rows moved by
     up to 3.4% between processes while staying within ~1% inside one (the study of
     2026-12-02, docs/measurement.md §9.1), so margins calibrated in one process were too
     tight for any later run. ``--calibrate-in-process`` keeps the old, faster way;
  2. ``--reps`` repetitions, each: an A/A run of every path, gated against that baseline
     (AMBIGUOUS rows re-measured, as ``harness bench`` does), then, for each ``--plant``
     path, a run of that path alone with the 5% slowdown planted by ``--planter`` (a
     file or module defining ``plant(path)``: a context manager that puts the slowed
     path in ``PATHS`` and yields it; the planted slowdown is a test double, so the test
     suite's ``tests/planted/slowdown_planter.py`` provides it, never the product),
     gated against the same baseline rows of that path.
A/A runs and planted runs alternate, so drift of the GPU falls on both. Every gate
verdict goes to ``DIR/verdicts.csv`` after each repetition, with the planted slowdown the
defect expected (from its own graph calibration) and the slowdown measured against the
same repetition's A/A run; ``harness.studies.gate_study_report`` turns that into
``DIR/gate_study.md``. Stops starting repetitions when ``--budget-s`` would be exceeded.
``--resume`` continues a study in ``--out`` (a device call has a time limit): the
baseline and margins written by its calibration are read back instead of calibrating
again, and repetitions go on after the last one in ``DIR/verdicts.csv`` up to ``--reps``
in total. Each segment (first run, resumes) is listed in ``DIR/segments.json`` with its
commit, GPU and repetitions, so a study spread over two machines says so.
Exit 0 when at least one repetition was gated, 2 when nothing could be measured.
"""

from __future__ import annotations

import argparse
import importlib
import json
import runpy
import subprocess
import sys
import time
from pathlib import Path

import torch

from harness.cases import MATRICES
from harness.config import load_settings, parse_overrides
from harness.kernels.base import PATHS
from harness.kernels.registry_load import load_all
from harness.measure.envinfo import arch_label
from harness.measure.session import BenchSession
from harness.reports.gate import evaluate
from harness.reports.stats import noise_margins
from harness.results.baseline import BaselineMeta, read_baseline_matrix, write_baseline_matrix
from harness.results.environment import Environment
from harness.results.store import atomic_write_text, find_result_csvs, read_rows

from .gate_study_report import read_verdicts, render, summarize, write_verdicts

T0 = time.monotonic()


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="harness study gate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (created; must not hold a study)")
    p.add_argument("--matrix", default="production")
    p.add_argument("--filter", default="M <= 16", help="case filter (default: decode shapes)")
    p.add_argument("--paths", default="native_int4,fp16_cache,marlin_asym")
    p.add_argument("--plant", default="fp16_cache",
                   help="paths that get the planted 5%% slowdown, "
                        "one planted run each per repetition")
    p.add_argument("--planter", default=None, metavar="FILE_OR_MODULE",
                   help="defines plant(path), which plants the slowdown (needed with --plant; the "
                        "test suite's: tests/planted/slowdown_planter.py)")
    p.add_argument("--calibration-runs", type=int, default=5)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--modes", default="graph", help="comma list of cold,graph")
    p.add_argument("--preset", default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--cpu", action="store_true",
                   help="a dry run of the pipeline on the CPU paths "
                        "(mode cpu; CPU timing is noisy)")
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="stop starting repetitions after this")
    p.add_argument("--calibrate-in-process", action="store_true",
                   help="calibration runs in this process (faster; misses between-process noise)")
    p.add_argument("--resume", action="store_true",
                   help="continue the study in --out: reuse its baseline and margins, "
                        "--reps in total")
    a = p.parse_args(argv)
    a.paths = [x.strip() for x in a.paths.split(",") if x.strip()]
    a.plant = [x.strip() for x in a.plant.split(",") if x.strip()]
    a.modes = tuple(x.strip() for x in a.modes.split(",") if x.strip())
    for name, n in (("--calibration-runs", a.calibration_runs), ("--reps", a.reps)):
        if n < (2 if name == "--calibration-runs" else 1):
            p.error(f"{name}: {n} is too small")
    for m in a.modes:
        if m not in ("cold", "graph"):
            p.error(f"--modes: {m!r} is not cold or graph")
    for x in a.plant:
        if x not in a.paths:
            p.error(f"--plant: {x!r} is not one of --paths {a.paths}")
    if a.plant and not a.planter:
        p.error("--plant needs --planter FILE_OR_MODULE (the planted slowdown is a test double: "
                "tests/planted/slowdown_planter.py)")
    return a


def load_planter(spec: str):
    """The ``plant(path)`` of a planter: a Python file (``path/to/file.py``) or a module."""
    if spec.endswith(".py"):
        if not Path(spec).is_file():
            raise ValueError(f"--planter: no such file {spec}")
        namespace = runpy.run_path(spec, run_name=f"harness_planter_{Path(spec).stem}")
    else:
        namespace = vars(importlib.import_module(spec))
    plant = namespace.get("plant")
    if not callable(plant):
        raise ValueError(f"--planter: {spec} defines no plant(path)")
    return plant


class Study:
    """One session, its baseline and the verdict log."""

    def __init__(self, args, log) -> None:
        load_all()
        for name in args.paths:
            PATHS.get(name)                          # unknown names fail here, clearly
        self.planter = load_planter(args.planter) if args.plant else None
        self.args, self.log, self.out = args, log, Path(args.out)
        self.device = (torch.device("cpu") if args.cpu
                       else torch.device("cuda", torch.cuda.current_device()))
        if args.cpu:
            args.modes = ("cpu",)
        self.settings = load_settings(args.preset, parse_overrides(args.set))
        self.cases = MATRICES.cases(args.matrix, args.filter)
        self.session = BenchSession(
            device=self.device, arch=arch_label(self.device), settings=self.settings,
            modes=args.modes,
            paths=list(args.paths), out=self.out / "runs",
            progress=False, partial=True, table=False, echo=log,
            extra={"filter": args.filter, "study": "gate_study"})
        self.base_rows: list = []
        self.margins: dict = {}
        self.verdicts: list[dict] = []

    def measure(self, suffix: str, paths: list[str]) -> list:
        s = self.session
        s.paths = list(paths)
        try:
            s.measure(self.args.matrix, self.cases, suffix)
        finally:
            s.paths = list(self.args.paths)
        return s.rows[(self.args.matrix, suffix)]

    def calibrate(self) -> None:
        n = self.args.calibration_runs
        if self.args.calibrate_in_process:
            runs = [self.measure(f".cal{k}", self.args.paths) for k in range(1, n + 1)]
            how = "in-process"
        else:
            runs, how = [self.calibration_process(k) for k in range(1, n + 1)], "separate processes"
        self.base_rows = runs[0]
        medians = [{r.key: r.time_us_median for r in run if r.status == "ok"} for run in runs]
        self.margins = noise_margins(medians, self.settings.noise_margin_floor)
        meta = BaselineMeta(matrix=self.args.matrix, arch=self.session.arch,
                            environment=Environment.from_dict(self.session.env), rows_sha256="",
                            noise_margins=self.margins, settings=self.settings.to_dict(),
                            source=f"gate_study calibration run 1 of {len(runs)} ({how})",
                            calibration={"runs": len(runs), "quantile": 95.0, "processes": how,
                                         "floor": self.settings.noise_margin_floor})
        write_baseline_matrix(self.out / "baselines" / self.session.arch, self.base_rows, meta)
        vals = sorted(self.margins.values())
        self.log(f"calibrated {len(vals)} margins from {len(runs)} runs: median "
                 f"{vals[len(vals) // 2]:.2%}, largest {vals[-1]:.2%}" if vals else "no margins")

    def calibration_process(self, k: int) -> list:
        """One calibration run as ``harness bench`` in a child process; its rows."""
        a, out = self.args, self.out / "calibration" / f"p{k}"
        cmd = [sys.executable, "-m", "harness", "bench", "--matrix", a.matrix, "--filter", a.filter,
               "--paths", ",".join(a.paths), "--mode", ",".join(self.session.modes), "--no-compare",
               "--no-progress", "--out", str(out)]
        cmd += (["--cpu"] if a.cpu else []) + (["--preset", a.preset] if a.preset else [])
        cmd += [x for kv in a.set for x in ("--set", kv)]
        t = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            raise RuntimeError(f"calibration process {k} exited {proc.returncode}: {tail}")
        csvs = [c for c in find_result_csvs(out) if c.stem == a.matrix]
        if len(csvs) != 1:
            raise RuntimeError(f"calibration process {k}: expected one {a.matrix}.csv under "
                               f"{out}, found {len(csvs)}")
        rows = read_rows(csvs[0])
        self.log(f"calibration process {k}: {len(rows)} rows in "
                 f"{time.monotonic() - t:.1f} s ({csvs[0]})")
        return rows

    def resume(self) -> int:
        """Read back the calibration and verdicts of ``--out``; returns the last repetition."""
        self.check_same_study()
        directory = self.out / "baselines" / self.session.arch
        self.base_rows, meta = read_baseline_matrix(directory, self.args.matrix)
        self.margins = dict(meta.noise_margins)
        self.verdicts = read_verdicts(self.out / "verdicts.csv")
        last = max((int(v["rep"]) for v in self.verdicts), default=0)
        self.log(f"resumed: baseline {directory} "
                 f"({meta.environment.gpu_name} on {meta.environment.host}, "
                 f"{len(self.base_rows)} rows, {len(self.margins)} margins), "
                 f"{last} repetitions done")
        return last

    def design(self) -> dict:
        """What must not change between the segments of one study."""
        a = self.args
        return {"matrix": a.matrix, "filter": a.filter, "paths": list(a.paths),
                "planted": list(a.plant), "modes": list(a.modes),
                "settings": self.settings.to_dict(), "cases": len(self.cases)}

    def check_same_study(self) -> None:
        """--resume with other options would mix two studies: refuse, naming the option."""
        path = self.out / "gate_study.json"
        if not path.is_file():
            return
        before = json.loads(path.read_text())
        for key, now in json.loads(json.dumps(self.design(), default=str)).items():
            if key in before and before[key] != now:
                raise SystemExit(f"gate_study: --resume: {key} was {before[key]!r} in {path}, "
                                 f"now {now!r}; "
                                 "resume with the study's own options or choose a new --out")

    def gate(self, rows, paths, rep: int, kind: str, planted: str = "", plans=None,
             aa=None) -> dict:
        base = [r for r in self.base_rows if r.path in paths]
        result = evaluate(rows, base, self.settings, margins=self.margins,
                          remeasure=self.session.remeasure_hook(self.args.matrix), partial=True,
                          current_label=f"{kind}{rep}", baseline_label="cal1")
        aa_med = {r.key: r.time_us_median for r in (aa or []) if r.status == "ok"}
        for v in result.verdicts:
            r = v.row
            plan = (plans or {}).get((r.M, r.N, r.K), {})
            self.verdicts.append({
                "rep": rep, "kind": kind, "planted_path": planted, "case_id": v.case_id, "M": r.M,
                "path": v.path, "mode": v.mode, "verdict": str(v.verdict.value), "fails": v.fails,
                "remeasured": v.remeasured, "base_us": v.base_median_us, "cur_us": v.cur_median_us,
                "change": v.time_change, "p_value": v.p_value, "threshold": v.threshold,
                "margin": v.margin,
                "aa_us": aa_med.get(v.key), "expected_slowdown": plan.get("expected_fraction"),
                "first": next((x[len("re-measured (first: "):-1] for x in v.reasons
                               if x.startswith("re-measured (first: ")), ""),
                "reason": v.reason[:300]})
        counts = {str(k.value): n for k, n in result.counts().items() if n}
        self.log(f"rep {rep} {kind}{' ' + planted if planted else ''}: {counts}")
        return counts

    def repetition(self, rep: int) -> None:
        aa = self.measure(f".aa{rep}", self.args.paths)
        self.gate(aa, self.args.paths, rep, "aa")
        plant = self.planter
        for path in self.args.plant:
            with plant(path) as wrapper:
                rows = self.measure(f".slow-{path}{rep}", [path])
                plans = _mean_plans(getattr(wrapper, "plans_by_shape", {}))
                self.gate(rows, [path], rep, "planted", path, plans=plans, aa=aa)


def _mean_plans(by_shape: dict) -> dict:
    out = {}
    for key, plans in by_shape.items():
        vals = [p["expected_fraction"] for p in plans]
        out[key] = {"expected_fraction": sum(vals) / len(vals)} if vals else {}
    return out


def _segments(out: Path, study: Study, first: int) -> list[dict]:
    """Earlier segments of the study in ``out`` plus this one (commit, GPU, repetitions)."""
    path = out / "segments.json"
    earlier = json.loads(path.read_text()) if path.is_file() else []
    env = study.session.env
    return earlier + [{"commit": env.get("commit"), "gpu": env.get("gpu_name"),
                       "host": env.get("host"), "gpu_uuid": env.get("gpu_uuid"),
                       "started_rep": first, "reps": [first, first - 1],
                       "resumed": bool(earlier) or first > 1}]


def main(argv=None) -> int:
    global T0
    T0 = time.monotonic()
    args = parse_args(argv)
    out = Path(args.out)
    if (out / "verdicts.csv").exists() and not args.resume:
        raise SystemExit(
            f"gate_study: {out / 'verdicts.csv'} exists; choose a new --out or --resume")
    if args.resume and not (out / "verdicts.csv").is_file():
        raise SystemExit(f"gate_study: --resume: {out / 'verdicts.csv'} does not exist")
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "log.txt", "a", buffering=1)

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - T0:6.1f}s] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")

    if not args.cpu and not torch.cuda.is_available():
        log(f"no CUDA GPU visible to torch {torch.__version__}: the study measures a GPU")
        return 2
    study = Study(args, log)
    log(f"{len(study.cases)} cases x {len(args.paths)} paths x {args.modes}; "
        f"planted on {args.plant}")
    first = study.resume() + 1 if args.resume else (study.calibrate() or 1)
    segments = _segments(out, study, first)
    header = {"command": "harness study gate " + " ".join(argv or sys.argv[1:]),
              "environment": study.session.env, "ceilings": study.session.ceilings.numbers(),
              **study.design(), "margins": len(study.margins),
              "calibration_runs": args.calibration_runs, "segments": segments}
    durations: list[float] = []
    done = first - 1
    for rep in range(first, args.reps + 1):
        est = max(durations) if durations else 0.0
        if time.monotonic() - T0 + est > args.budget_s:
            log(f"budget of {args.budget_s:.0f} s reached after {done} repetitions")
            break
        t = time.monotonic()
        study.repetition(rep)
        durations.append(time.monotonic() - t)
        done = rep
        segments[-1]["reps"] = [first, rep]
        atomic_write_text(out / "segments.json", json.dumps(segments, indent=1))
        write_verdicts(out / "verdicts.csv", study.verdicts)
        summary = summarize(study.verdicts)
        (out / "gate_study.md").write_text(render(summary, {**header, "reps_done": done}))
        (out / "gate_study.json").write_text(
            json.dumps({**header, "reps_done": done, "summary": summary}, indent=1, default=str))
        log(f"rep {rep} took {durations[-1]:.1f} s")
    if done:
        log((out / "gate_study.md").read_text())
    return 0 if done else 2

