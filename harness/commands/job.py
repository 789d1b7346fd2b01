"""``harness job``: the main GPU job (what ``nox -s bench-smXX`` runs): every step, one summary.

Steps, in order, each run even when an earlier one failed:
  1. ``gemm``:   ``harness bench --matrix production`` (every path; on a GPU graph mode,
     the mode that gates: ``--cold`` adds the cold rows, information there), gated;
  2. ``swiglu``: the SwiGLU gate/up pairs (``--matrix swiglu``), gated;
  3. ``ppl``:    ``harness ppl`` on the fixture (perplexity drift and end-to-end forward
     time per path), gated;
  4. ``smollm2`` (not in the default steps; ``--steps gemm,swiglu,ppl,smollm2``): ``harness
     ppl --model smollm2`` on a real pretrained model, 32k tokens at group 32 (the parity),
     128 and per-column (``REAL_MODEL_ARGS``), gated against ``ppl-smollm2.csv``. It needs
     the ``realmodel`` extra and the model file (docs/perplexity.md §6-7); its cost is
     written in docs/perplexity.md.
The bench runs production and swiglu in one process (one set of ceilings, one build);
each matrix is gated on its own and stores its verdicts with its rows (``<matrix>.json``,
key ``gate``). At the end a table gives, per step: rows, verdict counts, exit code and
the reason; the job's exit status is the worst step's (0 pass, 1 a failing verdict,
2 an error that stopped a step). The summary is also written to ``job.json`` beside the
results. A/B confirmation (on by default, ``--no-ab-confirm`` skips it): a gated matrix's
SLOWER rows, and its rows that moved beyond the ``ab_screen`` setting inside their
margin, are measured again A/B on this machine against the baseline's commit, and that
reading is their verdict (``harness.engines.ab_step``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..engines.ab_step import Confirmation
from ..errors import (
    EXIT_ERROR,
    EXIT_FAIL,
    EXIT_NO_BASELINE,
    EXIT_PASS,
    EXIT_WRONG_RUNNER,
    EXPECTED_ERRORS,
    one_line,
    worst_exit,
)
from ..kernels import prebuild
from ..reports.gate_record import stored_exit_code
from ..reports.job_summary import (  # noqa: F401  (re-exported: the job's summary records)
    StepResult,
    bench_stages,
    is_ppl,
    job_timing,
    time_line,
    verdict_counts,
)
from ..results.models import load_for_model
from ..results.store import read_meta, read_rows
from . import bench, ppl
from .common import plain, settings_from_args

#: (step name, matrix) of the job, in order; ``--cpu``: the CPU paths on the smoke matrix
#: and the g128 fixture (CPU timings are information: the gate there is accuracy,
#: dispatch and completeness)
STEPS = (("gemm", "production"), ("swiglu", "swiglu"), ("ppl", "ppl"),
         ("smollm2", "ppl-smollm2"))
CPU_STEPS = (("gemm", "smoke"), ("ppl", "ppl"), ("smollm2", "ppl-smollm2"))
#: the steps run when ``--steps`` is not given
DEFAULT_STEPS = ("gemm", "swiglu", "ppl")
CPU_DEFAULT_STEPS = ("gemm", "ppl")
#: the perplexity steps (``harness ppl``), not benches
PPL_STEPS = {"ppl": [], "smollm2": ["--model", "smollm2"]}
#: what the ``smollm2`` step scores: the issue's figures (g32 parity, g128 and per-column
#: drift) on 32k tokens; on a CPU its 2-core default of 4096 tokens
REAL_MODEL_ARGS = ["--groups", "32,128,K", "--max-tokens", "32768"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("job",
                       help="the main GPU job: production + swiglu + ppl, gated, one summary",
                       description=plain(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default=None, help="expected GPU arch, e.g. sm90 (see harness bench)")
    p.add_argument("--force", action="store_true", help="run on a GPU of another arch")
    p.add_argument("--cpu", action="store_true",
                   help="the CPU job: smoke matrix and the g128 fixture on the CPU paths")
    p.add_argument("--steps", default=None,
                   help="comma list of steps to run (default: gemm,swiglu,ppl; with --cpu "
                        "gemm,ppl); smollm2 adds the real model's perplexity (docs/"
                        "perplexity.md §6-7: the realmodel extra and the model file)")
    p.add_argument("--out", default="results", help="results root (default results/)")
    p.add_argument("--baselines", default="baselines", help="baselines root (default baselines/)")
    p.add_argument("--overwrite", action="store_true", help="replace this commit's stored results")
    p.add_argument("--strict-env", action="store_true",
                   help="refuse a baseline recorded with other software versions (not only warn)")
    p.add_argument("--preset", default=None, help="settings preset")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--ci", action="store_true",
                   help="passed to harness bench: on a GPU of another arch exit 4, not 0")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE_OR_MODULE",
                   help="passed to harness bench (extra or wrapped paths); not to ppl")
    p.add_argument("--mode", default=None,
                   help="passed to harness bench: only these timing modes (e.g. graph, the "
                        "mode that gates on a GPU); the gate then judges those rows only")
    p.add_argument("--cold", action="store_true",
                   help="on a GPU, also the cold (eager) rows: information, not gated, and "
                        "50-70 s of an H200's job (docs/measurement.md §11); without it the "
                        "bench measures graph mode only, the rows that gate")
    p.add_argument("--gpus", default=None, metavar="all|0,1,3",
                   help="passed to harness bench: its matrices spread over these GPUs, one "
                        "worker each; ppl and the A/B confirmation run on one GPU")
    p.add_argument("--ab-confirm", action=argparse.BooleanOptionalAction, default=True,
                   help="re-judge SLOWER rows, and gated rows that moved beyond the "
                        "ab_screen setting, A/B on this machine against the baseline's "
                        "commit (git worktrees; on by default; docs/measurement.md §9)")
    p.add_argument("--ab-rounds", type=int, default=3,
                   help="interleaved rounds per side of the A/B confirmation (default 3)")
    p.set_defaults(func=run)


def gpu_modes(args, gpu: tuple[str, str] | None) -> list[str]:
    """The bench's ``--mode`` when the job chose none: graph alone on a GPU (the mode that
    gates there), unless ``--cold``; on the CPU (``--cpu``, or no GPU) the bench's own."""
    return [] if (args.cpu or args.cold or gpu is None) else ["--mode", "graph"]


def _common(args) -> list[str]:
    out = ["--out", args.out, "--baselines", args.baselines]
    out += ["--overwrite"] if args.overwrite else []
    out += ["--strict-env"] if args.strict_env else []
    out += ["--preset", args.preset] if args.preset else []
    for kv in args.set:
        out += ["--set", kv]
    return out


def _gate_record(run_dir: Path, matrix: str) -> tuple[int, dict, dict]:
    """(rows, verdict counts, the ``gate`` record) of a stored matrix from its json."""
    csv_path = run_dir / f"{matrix}.csv"
    if not csv_path.is_file():
        return 0, {}, {}
    rows = len(read_rows(csv_path))
    gate = read_meta(csv_path.with_suffix(".json")).extra.get("gate") or {}
    return rows, dict(Counter(gate.get("verdicts", {}).values())), gate


def visible_gpu() -> tuple[str, str] | None:
    """(arch, model name) of the GPU this process measures on, or None without one."""
    import torch  # heavy: only the measuring commands load torch

    from harness.measure.envinfo import arch_label  # heavy: torch (the engine)

    if not torch.cuda.is_available():
        return None
    device = torch.device("cuda", torch.cuda.current_device())
    return arch_label(device), torch.cuda.get_device_name(device)


def _wrong_runner(expected: str | None, gpu: tuple[str, str] | None) -> str | None:
    """The one-line skip message when the visible GPU is not arch ``expected``, else None."""
    msg = bench.arch_mismatch(expected, gpu[0] if gpu else "cpu")
    return msg.replace("harness bench", "harness job") if msg else None


def _code_from_record(gate: dict) -> int:
    """A gated matrix's exit code from its stored gate record (``gate_record.stored_exit_code``)."""
    return stored_exit_code(gate)


def _reason(code: int, failing: dict, stored: bool) -> str:
    """The summary's reason for a step's ``code``; ``failing``: failing rows by verdict."""
    if code == EXIT_NO_BASELINE:
        return "no baseline for this arch: rows NEW, candidate written (accept command above)"
    if code == EXIT_WRONG_RUNNER:
        return "--ci: the visible GPU is not this job's arch; nothing measured"
    if code == 0:
        return "passed" if stored else "passed (no gate record)"
    if code == 1:
        return "failing verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(failing.items())) \
            if failing else "a failing verdict (see the step's table)"
    return "stopped by an error (see the step's output)"


def _step_parser() -> argparse.ArgumentParser:
    """The parser of the commands a step runs (``harness bench``, ``harness ppl``)."""
    parser = argparse.ArgumentParser(prog="harness")
    sub = parser.add_subparsers(dest="command", required=True)
    bench.register(sub)
    ppl.register(sub)
    return parser


def _run_step(argv: list[str]) -> tuple[int, str]:
    """Run one step's command in this process; (exit code, error line or "").

    An expected error is printed as the console script prints it (one line, exit 2);
    any other exception stops only this step and is named in the summary."""
    try:
        args = _step_parser().parse_args(argv)
        try:
            return int(args.func(args) or 0), ""
        except EXPECTED_ERRORS as exc:
            print(f"harness {args.command}: error: {one_line(exc)}", file=sys.stderr)
            return 2, ""
    except SystemExit as exc:         # argparse and the bench's own exits
        return (exc.code if isinstance(exc.code, int) else 2), ""
    except Exception as exc:          # noqa: BLE001 - a crash of one step must not stop the next
        return 2, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def run(args: argparse.Namespace) -> int:
    t_start = time.perf_counter()
    from harness.measure.envinfo import git_commit  # heavy: torch (the engine)

    gpu = None if args.cpu else visible_gpu()
    start_s = time.perf_counter() - t_start      # torch's import, the GPU's query
    wrong = None if (args.cpu or args.force) else _wrong_runner(args.arch, gpu)
    if wrong:                  # no step would measure anything here (not even ppl)
        print(wrong)
        if bench.ci_mode(args):
            print("harness job: --ci: nothing was measured on this runner; "
                  f"exit {EXIT_WRONG_RUNNER}")
            return EXIT_WRONG_RUNNER
        return EXIT_PASS
    steps = CPU_STEPS if args.cpu else STEPS
    spec = args.steps or ",".join(CPU_DEFAULT_STEPS if args.cpu else DEFAULT_STEPS)
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    known = {s for s, _ in steps}
    for s in wanted:
        if s not in known:
            raise ValueError(f"--steps: unknown step {s!r} (choose from {', '.join(known)})")
    arch = ["--arch", args.arch] if args.arch else []
    force = ["--force"] if args.force else []
    cpu = ["--cpu"] if args.cpu else []
    results: list[StepResult] = []
    matrices = [m for s, m in steps if s in wanted and s not in PPL_STEPS]
    t0 = time.perf_counter()
    pre = _prebuild(args, matrices, gpu)   # the A/B's other commits compile during the bench
    if matrices:
        argv = ["bench", "--matrix", ",".join(matrices), *cpu, *arch, *force, *_common(args)]
        argv += ["--no-progress"] if args.no_progress else []
        argv += ["--ci"] if args.ci else []
        argv += ["--mode", args.mode] if args.mode else gpu_modes(args, gpu)
        argv += ["--gpus", args.gpus] if args.gpus else []
        for plugin in args.plugin:
            argv += ["--plugin", plugin]
        code, err = _run_step(argv)
        took = time.perf_counter() - t0
        for step, matrix in steps:
            if matrix in matrices:
                results.append(StepResult(step, matrix, code, seconds=took, reason=err))
    run_dir = _run_dir(args, git_commit())
    ab_parts: dict[str, float] = {}
    gated = [r.matrix for r in results if r.exit_code in (EXIT_PASS, EXIT_FAIL)]
    conf = None
    if args.ab_confirm and run_dir is not None and gated:
        if pre is not None:
            ab_parts["A/B builds"] = pre.wait()
            for line in pre.lines:
                print(f"harness job: A/B build of {line}")
        # on another GPU model the machine factor's benches start up during the ppl steps
        conf = Confirmation(run_dir, gated, baselines=args.baselines, arch=run_dir.name,
                            settings=settings_from_args(args), rounds=args.ab_rounds,
                            seconds=ab_parts)
    with conf or contextlib.nullcontext():
        if conf is not None and not _confirming(conf.start):
            conf = None                    # said why in one line; the verdicts stand
        for step, matrix in steps:
            if step not in PPL_STEPS or step not in wanted:
                continue
            t1 = time.perf_counter()
            where = ["--cpu"] if args.cpu else ["--marlin-sm90"]
            what = (["--fixture", "g128"] if args.cpu else []) if step == "ppl" else \
                PPL_STEPS[step] + ([] if args.cpu else REAL_MODEL_ARGS)
            code, err = _run_step(["ppl", *where, *what, *_common(args)])
            results.append(StepResult(step, matrix, code, seconds=time.perf_counter() - t1,
                                      reason=err))
        if conf is not None:
            _confirming(conf.finish)
    run_dir = _run_dir(args, git_commit())     # a ppl-only job's is made by its ppl step
    for r in results:
        r.rows, r.verdicts, gate = _gate_record(run_dir, r.matrix) if run_dir else (0, {}, {})
        if not is_ppl(r) and r.exit_code not in (EXIT_ERROR, EXIT_WRONG_RUNNER) and gate:
            # one bench process gates both matrices: its exit code is the worse of the two,
            # so each step's own code comes from its stored gate record
            r.exit_code = _code_from_record(gate)
        r.failing = dict(gate.get("failing") or {})
        r.reason = r.reason or _reason(r.exit_code, r.failing, bool(gate))
    worst = worst_exit([r.exit_code for r in results])
    wall = time.perf_counter() - t0 + start_s
    # one wall time: the title, the line, job.json
    timing = job_timing(results, ab_parts, wall, nox_started(), start_s)
    stages = bench_stages(results, run_dir)
    _print_summary(results, worst, wall)
    print(time_line(timing, stages))
    if run_dir is not None and run_dir.is_dir():
        (run_dir / "job.json").write_text(json.dumps(
            {"commit": git_commit(), "exit_code": worst, "wall_s": round(wall, 1),
             "seconds": {k: round(v, 1) for k, v in timing.items()},
             "bench_stages_s": {k: round(v, 1) for k, v in stages.items()},
             "steps": [r.__dict__ for r in results]}, indent=2) + "\n", encoding="utf-8")
        print(f"harness job: reports of this run: {report_hint(run_dir, args.baselines)}")
    return worst


#: The variable `nox -s bench-smXX` sets to the time (``time.time()``) its noxfile was
#: imported: the job's time line then starts with what nox spent before the job.
NOX_T0_ENV = "HARNESS_NOX_T0"


def nox_started() -> float | None:
    """Seconds between the noxfile's import and this module's (nox's start-up, its
    interpreter probe and any install), when the job runs under `nox -s bench-smXX`."""
    try:
        t0 = float(os.environ.get(NOX_T0_ENV, ""))
    except ValueError:
        return None
    return max(0.0, _IMPORTED_AT - t0)


_IMPORTED_AT = time.time()


def report_hint(run_dir: Path, baselines: str) -> str:
    """The report command for this run, in a form that works where it is printed: under
    nox in a session's own virtualenv (``nox -s bench-cpu``), the ``report`` session (the
    ``harness`` script lives in that venv, not on the shell's PATH); elsewhere this very
    interpreter's module form (``python3 -m harness``, from the checkout's root)."""
    args = f"{run_dir} --baseline {baselines}"
    in_nox_venv = (bool(os.environ.get("NOX_CURRENT_SESSION"))
                   and Path(sys.prefix).parent.name == ".nox")   # not a python=False session
    if in_nox_venv:
        return f"nox -s report -- {args}"
    python = shutil.which("python3")
    same = python and os.path.realpath(python) == os.path.realpath(sys.executable)
    return f"{'python3' if same else sys.executable} -m harness report {args}"


def _prebuild(args, matrices: list[str],
              gpu: tuple[str, str] | None) -> prebuild.Prebuild | None:
    """Start compiling the extension of every commit the gated matrices' baseline rows name
    (``kernels.prebuild``), on a GPU with the A/B on; None otherwise or when the baselines
    cannot say (the A/B then compiles them itself, or says why it cannot)."""
    if args.cpu or not args.ab_confirm or not matrices or gpu is None:
        return None
    arch, name = gpu
    try:
        base = load_for_model(args.baselines, arch, name, matrices)
    except EXPECTED_ERRORS:
        return None
    shas = [r.commit for r in base.rows] + [base.environment.commit]
    return prebuild.start(Path("."), shas, arch,
                          Path(tempfile.mkdtemp(prefix="harness-prebuild-")))


def _confirming(step) -> bool:
    """Run a step of the A/B confirmation; an expected error (an unreadable stored run or
    baseline) leaves the verdicts as they stand, in one line (False)."""
    try:
        step()
    except EXPECTED_ERRORS as exc:
        print(f"harness job: A/B not done, the verdicts stand: {one_line(exc)}")
        return False
    return True


def _run_dir(args, commit: str) -> Path | None:
    """Where this commit's results went (the newest arch directory under the commit)."""
    root = Path(args.out) / commit
    dirs = sorted((d for d in root.glob("*") if d.is_dir()), key=lambda d: d.stat().st_mtime)
    return dirs[-1] if dirs else None


def _print_summary(results: list[StepResult], worst: int, wall: float) -> None:
    table = Table(title=f"harness job: exit {worst} ({wall:.0f} s)", title_justify="left")
    for col in ("step", "matrix", "rows", "verdicts", "exit", "reason"):
        table.add_column(col, justify="right" if col in ("rows", "exit") else "left")
    for r in results:
        counts = verdict_counts(r.verdicts, r.failing)
        table.add_row(r.step, r.matrix, str(r.rows), counts, str(r.exit_code), r.reason)
    Console(width=160, file=sys.stdout).print(table)
