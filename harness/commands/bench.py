"""``harness bench``: measure matrices through the paths, store the rows, gate them.

Writes ``<out>/<commit>/<arch>/<matrix>.csv`` (one row per case x path x mode, appended
and fsynced row by row) and ``<matrix>.json`` (environment, measured ceilings, settings,
per-row notes). Then, unless ``--no-compare``, gates the rows against
``<baselines>/<arch>/<matrix>.csv`` and exits with the gate's code; with no baseline it
writes a candidate under ``<out>/<commit>/<arch>/candidate-baseline/`` and says so (it
never writes into the baselines directory). ``--repeat N`` measures the same commit N
times (A/A); repetition k >= 2 goes to ``<arch>.rep<k>`` and the spread between them is
printed.

Extra or wrapped paths come from ``--plugin`` (a Python file or module run after the
built-in paths are registered; the run's json lists them).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ..cases import MATRICES
from ..config import load_settings, parse_overrides
from ..engines import bench_shard
from ..engines.plugins import load_plugins, peer_plugin_lines
from ..errors import EXIT_WRONG_RUNNER, worst_exit
from ..reports.devices import device_spread_lines
from ..reports.gate import PARTIAL_MODES
from ..results.environment import STRICT_ENV_HELP
from .common import gate_against_baseline, plain, refuse_early

ARCH_HELP = "expected GPU arch, e.g. sm90; on a different GPU: skip (exit 0) unless --force"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure a shape matrix through the GEMM paths and gate it",
                       description=plain(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--matrix", "-m", default=None,
                   help="comma list of matrices (default: production on a GPU, smoke on a CPU)")
    p.add_argument("--filter", "-f", default=None,
                   help="case filter expression (see `harness cases`)")
    p.add_argument("--paths", default=None, help="comma list of paths (default: all registered)")
    p.add_argument("--mode", default=None,
                   help="comma list of cold,graph (GPU) or cpu "
                        "(default: cold,graph on a GPU, cpu on a CPU)")
    p.add_argument("--arch", default=None, help=ARCH_HELP)
    p.add_argument("--force", action="store_true",
                   help="run on a GPU whose arch differs from --arch (the REAL arch is recorded)")
    p.add_argument("--cpu", action="store_true", help="run the CPU paths even if a GPU is visible")
    p.add_argument("--preset", default=None, help="settings preset from [tool.harness.presets]")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one setting (repeatable), e.g. --set max_case_seconds=0.5")
    p.add_argument("--out", default="results", help="results root (default results/)")
    p.add_argument("--baselines", default="baselines", help="baselines root (default baselines/)")
    p.add_argument("--resume", action="store_true", help="keep finished rows of an interrupted run")
    p.add_argument("--overwrite", action="store_true", help="replace an existing result CSV")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="A/A: measure N times (run k >= 2 in <arch>.rep<k>)")
    p.add_argument("--no-compare", action="store_true", help="do not gate against the baseline")
    p.add_argument("--strict-env", action="store_true", help=STRICT_ENV_HELP)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--cpu-threads", type=int, default=1,
                   help="torch CPU threads in CPU mode "
                        "(default 1: stable on shared 2-core runners)")
    p.add_argument("--ci", action="store_true",
                   help=f"on a GPU of another arch exit {EXIT_WRONG_RUNNER} instead of 0 "
                        "(also $HARNESS_CI=1): a CI job on the wrong runner must not pass")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE_OR_MODULE",
                   help="load extra or wrapped paths from a Python file or module (repeatable)")
    p.add_argument("--gpus", default=None, metavar="all|0,1,3",
                   help="spread the cases over these GPUs of the host, one worker process each "
                        "(one result, rows name their GPU); on a CPU, N stand-in workers")
    p.set_defaults(func=run)


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def ci_mode(args: argparse.Namespace) -> bool:
    """``--ci`` or ``$HARNESS_CI`` set (to anything but 0 or empty)."""
    return bool(getattr(args, "ci", False)) or os.environ.get("HARNESS_CI", "0") not in ("", "0")


def arch_mismatch(expected: str | None, actual: str) -> str | None:
    """The one-line skip message when ``expected`` (e.g. sm90) differs from ``actual``."""
    if not expected or expected == actual:
        return None
    if actual == "cpu":
        return (f"harness bench: expected arch {expected}, but no CUDA GPU is visible; skipped "
                "(use --cpu for the CPU paths)")
    return (f"harness bench: expected arch {expected}, but the visible GPU is {actual}; skipped "
            f"(use --arch {actual}, or --force to run here and record {actual})")


def wants_cpu(args) -> bool:
    """True with ``--cpu``, or when ``--mode`` asks for the CPU mode only: ``--mode cpu``
    means "time the CPU paths" on a GPU machine too (what an A/B or bisect of a CPU run
    passes to the benches it starts)."""
    return bool(args.cpu) or _split(args.mode) == ["cpu"]


def partial_kind(args: argparse.Namespace) -> bool | str:
    """How the gate reads a chosen part of the matrix: True for ``--filter`` / ``--paths``
    (the baseline's rows it did not measure are not MISSING), ``PARTIAL_MODES`` for
    ``--mode`` alone (only the other modes' rows are set aside), False for the whole."""
    if args.filter or args.paths:
        return True
    return PARTIAL_MODES if args.mode else False


def _modes(args, device) -> tuple[str, ...]:
    modes = _split(args.mode) or (["cpu"] if device.type == "cpu" else ["cold", "graph"])
    allowed = ("cpu",) if device.type == "cpu" else ("cold", "graph")
    for m in modes:
        if m not in allowed:
            raise ValueError(f"--mode {m!r} is not available on {device.type} (choose from "
                             f"{', '.join(allowed)})")
    return tuple(dict.fromkeys(modes))


def _load_paths(registry, names: list[str]) -> list[str]:
    if not registry.names():
        raise ValueError("no GEMM path is registered (harness.kernels.registry_load missing?)")
    for n in names:
        registry.get(n)                              # unknown name -> one-line error
    return names or registry.names()


@contextlib.contextmanager
def _terminate_cleanly(where: Path):
    """SIGTERM ends the sweep like Ctrl-C: writers close, locks go, exit 143 with a hint.

    Every finished row is already on disk (fsynced per row) either way; this only makes
    the exit tidy and says how to complete the run.
    """
    hint = f"the finished rows are in {where}; run the same command with --resume to complete it"

    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_term) if main_thread else None
    try:
        yield
    except (KeyboardInterrupt, SystemExit) as exc:
        what = "terminated (SIGTERM)" if isinstance(exc, SystemExit) else "interrupted"
        print(f"harness bench: {what}; {hint}", file=sys.stderr)
        raise
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    import torch  # heavy: only the measuring commands load torch

    from harness.kernels import base, build, registry_load  # heavy: torch (the paths)
    from harness.measure import envinfo, session, warm_start  # heavy: torch (the engine)

    on_cpu = wants_cpu(args)
    cuda = torch.cuda.is_available() and not on_cpu
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    actual = envinfo.arch_label(device)
    msg = None if on_cpu else arch_mismatch(args.arch, actual)   # --cpu: the CPU is expected
    if msg and not (args.force and actual != "cpu"):
        print(msg)
        if ci_mode(args):      # in CI a job on the wrong runner must not go green
            print(f"harness bench: --ci: nothing was measured on this runner; "
                  f"exit {EXIT_WRONG_RUNNER}")
            return EXIT_WRONG_RUNNER
        return 0
    if msg:
        print(f"harness bench: --force: running on {actual} (expected {args.arch}); "
              f"rows record {actual}")
    if args.repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {args.repeat}")
    settings = load_settings(args.preset, parse_overrides(args.set))
    modes = _modes(args, device)
    matrices = _split(args.matrix) or (["smoke"] if device.type == "cpu" else ["production"])
    plugins = load_plugins(args.plugin, registry_load.load_all)   # may add paths and matrices
    for line in peer_plugin_lines("harness bench"):
        print(line)
    cases = {m: MATRICES.cases(m, args.filter) for m in matrices}
    for m, selected in cases.items():   # a typo in a CI job's filter must not pass green
        if not selected:
            raise ValueError(f"--filter {args.filter!r} selects no case of matrix {m!r} "
                             f"(`harness cases --matrix {m}` lists them)")
    paths = _load_paths(base.PATHS, _split(args.paths))
    if device.type == "cpu":
        torch.set_num_threads(max(1, args.cpu_threads))
    if args.gpus:
        visible = torch.cuda.device_count() if cuda else 0
        if cuda:     # built (or found) once here, so workers starting together never race
            build.extension_unavailable_reason()      # to compile it; they load the cache
        return _run_sharded(args, settings, modes, matrices, cases, paths, plugins,
                            device=device, arch=actual, commit=envinfo.git_commit(),
                            visible=visible, threads=torch.get_num_threads(),
                            table=session.print_table)
    bench = session.BenchSession(
        device=device, arch=actual, settings=settings, modes=modes, paths=paths, out=Path(args.out),
        resume=args.resume, overwrite=args.overwrite, progress=not args.no_progress,
        partial=partial_kind(args),
        extra={"filter": args.filter or "", "cpu_threads": torch.get_num_threads(),
               "plugins": plugins, "entry_points": registry_load.load_entry_points()})
    if not args.no_compare:    # a baseline that would refuse the run refuses it now
        refuse_early(matrices, baselines=args.baselines, arch=actual, env=bench.env_record(),
                     measured=bench.measured(), strict_env=args.strict_env)
    start = warm_start.OverlappedStart(base.PATHS.select(paths), device)   # build: a thread
    bench.start_stages = start.finish(c for m in matrices for c in cases[m])
    t0 = time.perf_counter()
    with _terminate_cleanly(bench.run_dir()):
        for rep in range(1, args.repeat + 1):
            suffix = "" if rep == 1 else f".rep{rep}"
            for matrix in matrices:
                bench.measure(matrix, cases[matrix], suffix)
    print(f"harness bench: {sum(len(c) for c in cases.values())} cases x {len(paths)} paths x "
          f"{len(modes)} modes x {args.repeat} run(s) in {time.perf_counter() - t0:.1f} s wall "
          f"(ceilings included)")
    if args.repeat > 1:
        bench.print_aa(matrices, args.repeat)
    if args.no_compare:
        return 0
    codes = [gate_matrix(bench, m, args.baselines, strict_env=args.strict_env) for m in matrices]
    return worst_exit(codes)


def _run_sharded(args, settings, modes, matrices, cases, paths, plugins, *, device, arch,
                 commit, visible: int, threads: int, table) -> int:
    """``--gpus``: the matrices over several workers (``bench_shard``), then the gate;
    the parent measures nothing (``visible``: the GPUs it sees; ``table``: the session's
    ``print_table``)."""
    if args.repeat > 1:
        raise ValueError("--gpus with --repeat: not supported; run the repetitions one after "
                         "another")
    on_cpu = device.type == "cpu"
    devices = bench_shard.parse_gpus(args.gpus, visible, on_cpu)
    extra = {"filter": args.filter or "", "cpu_threads": threads, "plugins": plugins}
    specs = [bench_shard.WorkerSpec(slot=i, device=d, cpu=on_cpu, settings=settings,
                                    modes=modes, paths=tuple(paths), plugins=tuple(args.plugin),
                                    cpu_threads=threads, extra=extra)
             for i, d in enumerate(devices)]
    shard = bench_shard.ShardedBench(
        specs, commit=commit, arch=arch, settings=settings, modes=modes, paths=paths,
        out=Path(args.out), resume=args.resume, overwrite=args.overwrite, extra=extra,
        partial=partial_kind(args))
    try:
        with _terminate_cleanly(shard.run_dir()):
            for matrix in matrices:
                rows = shard.measure(matrix, cases[matrix])
                table(rows, modes, paths, title=f"{matrix} on {arch} ({commit}), "
                                                      f"{len(devices)} workers")
        if args.no_compare:
            return 0
        codes = [gate_matrix(shard, m, args.baselines, strict_env=args.strict_env)
                 for m in matrices]
        for matrix in matrices:
            for line in device_spread_lines(shard.rows[(matrix, "")], args.baselines, arch,
                                            matrix, settings.min_effect):
                print(line)
        return worst_exit(codes)
    except BaseException:
        shard.close(abort=True)
        raise
    finally:
        shard.close()


def gate_matrix(bench, matrix: str, baselines: str | Path, strict_env: bool = False) -> int:
    """Gate repetition 1 of ``matrix`` measured by ``bench`` (a ``BenchSession`` or a
    ``bench_shard.ShardedBench``) against
    ``<baselines>/<arch>/``; AMBIGUOUS rows are measured again in the same session."""
    return gate_against_baseline(
        bench.rows[(matrix, "")], matrix, command="harness bench", run_dir=bench.run_dir(),
        baselines=baselines, arch=bench.arch, env=bench.env_record(), settings=bench.settings,
        measured=bench.measured(), strict_env=strict_env, partial=bench.partial,
        remeasure=bench.remeasure_hook(matrix), current_label=bench.commit, echo=bench.echo)
