"""Building for a fleet (``harness build --arch``), on any machine: arch names, the one
table shared with the noxfile, the per-arch build plans (flags, Marlin in or why not, the
cache key), and that the bench looks for exactly the build ``harness build`` makes.
Compiling is tested on a machine with nvcc and CUDA torch: tests/gpu/test_fleet_build_gpu.py."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from harness.archs import KNOWN_ARCHS, Arch, UnknownArchError, parse_arch, parse_arch_list
from harness.cli import main
from harness.commands.build import outcome_line
from harness.kernels import build
from harness.kernels.build_plan import (
    CSRC,
    MARLIN_ARCH_REASON,
    QUANTO_MARLIN_HEADER,
    QUANTO_MARLIN_SOURCE,
    Toolchain,
    gencode,
    plan_build,
)

ROOT = Path(__file__).resolve().parents[2]
TC = Toolchain("2.11.0+cu130", "13.0", ".cpython-312-x86_64-linux-gnu.so")


# --------------------------------------------------------------------------- arch names
@pytest.mark.parametrize("text, name", [
    ("sm75", "sm75"), ("sm_75", "sm75"), ("7.5", "sm75"), ("SM75", "sm75"), (" sm_90 ", "sm90"),
    ("9.0", "sm90"), ("sm100", "sm100"), ("sm_100", "sm100"), ("10.0", "sm100"),
    ("sm120", "sm120"), ("12.0", "sm120"), ("sm_86", "sm86"), ("8.9", "sm89"),
])
def test_arch_names_in_every_spelling(text, name):
    assert parse_arch(text).name == name


@pytest.mark.parametrize("text", ["sm70", "sm_91", "h100", "", "9", "sm1000", "75"])
def test_an_unknown_arch_is_one_line_listing_the_known_ones(text):
    with pytest.raises(UnknownArchError) as exc:
        parse_arch(text)
    msg = str(exc.value)
    assert "\n" not in msg and "unknown arch" in msg
    assert "sm75, sm80, sm86, sm89, sm90, sm100, sm120" in msg


def test_arch_lists():
    assert [a.name for a in parse_arch_list("all")] == list(KNOWN_ARCHS)
    assert [a.name for a in parse_arch_list("sm75, sm_75,7.5,sm90")] == ["sm75", "sm90"]
    with pytest.raises(UnknownArchError, match="no arch given"):
        parse_arch_list(" , ")
    with pytest.raises(UnknownArchError, match="'sm70'"):
        parse_arch_list("sm80,sm70")


def test_arch_properties_and_unlisted_gpus():
    a = KNOWN_ARCHS["sm120"]
    assert (a.tag, a.sm, a.dotted) == ("120", "sm_120", "12.0")
    assert Arch.of(9, 0) is KNOWN_ARCHS["sm90"]
    jetson = Arch.of(8, 7)                           # not in the table: still buildable
    assert (jetson.name, jetson.sm) == ("sm87", "sm_87")


def test_the_noxfile_has_a_bench_session_for_every_known_arch():
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    [value] = [node.value for node in tree.body if isinstance(node, ast.Assign)
               and any(getattr(t, "id", "") == "ARCHS" for t in node.targets)]
    archs = ast.literal_eval(value)
    assert archs == {a.name: a.capability for a in KNOWN_ARCHS.values()}
    assert {"sm75", "sm100", "sm120"} <= set(archs)


# --------------------------------------------------------------------------- build plans
@pytest.fixture()
def quanto(tmp_path) -> Path:
    """A folder laid out like quanto's Marlin sources (data for the planner, no compiling)."""
    folder = tmp_path / "quanto-marlin"
    folder.mkdir()
    (folder / QUANTO_MARLIN_SOURCE).write_text("// kernel v1\n")
    (folder / QUANTO_MARLIN_HEADER).write_text("// header\n")
    return folder


def test_every_arch_gets_its_own_plan(quanto):
    plans = {name: plan_build(a, TC, quanto, None) for name, a in KNOWN_ARCHS.items()}
    assert len({p.key for p in plans.values()}) == len(plans)          # one build per arch
    for name, p in plans.items():
        arch = KNOWN_ARCHS[name]
        assert [f for f in p.cuda_flags if "arch" in f] == [gencode(arch)]
        assert gencode(arch) == f"-gencode=arch=compute_{arch.tag},code=sm_{arch.tag}"
        assert p.name == f"harness_int4_{p.key}" and len(p.key) == 16
        assert p.directory(Path("/cache")) == Path("/cache") / p.name
        assert p.toolchain == TC
        assert {Path(s).name for s in p.sources} >= {"bindings.cpp", "native_int4.cu",
                                                    "correction.cu", "marlin_glue.cpp"}
        # a plan is stable: the bench and `harness build` compute the same one
        assert plan_build(arch, TC, quanto, None) == p


def test_below_sm80_marlin_is_left_out_and_says_why(quanto):
    sm75 = plan_build(KNOWN_ARCHS["sm75"], TC, quanto, None)
    assert not sm75.with_marlin and sm75.marlin_source is None
    assert sm75.marlin_reason == MARLIN_ARCH_REASON.format(sm="sm_75")
    assert "sm_80" in sm75.marlin_reason and "cp.async" in sm75.marlin_reason
    assert sm75.defines == ("-DHARNESS_WITH_MARLIN=0",)
    assert "-DHARNESS_WITH_MARLIN=0" in sm75.cxx_flags
    assert str(quanto / QUANTO_MARLIN_SOURCE) not in sm75.sources
    assert str(quanto) not in sm75.include_dirs
    for name in ("sm80", "sm86", "sm89", "sm90", "sm100", "sm120"):
        p = plan_build(KNOWN_ARCHS[name], TC, quanto, None)
        assert p.with_marlin and p.marlin_reason is None, name
        assert p.defines == ("-DHARNESS_WITH_MARLIN=1",)
        assert p.marlin_source == str(quanto / QUANTO_MARLIN_SOURCE) in p.sources
        assert str(quanto) in p.include_dirs


def test_without_quanto_every_arch_still_builds_and_says_why(quanto):
    why = "optimum-quanto is not installed (pip install 'int4-gemm-harness[quanto]')"
    sm90 = plan_build(KNOWN_ARCHS["sm90"], TC, None, why)
    assert not sm90.with_marlin and sm90.marlin_reason == why
    assert sm90.key != plan_build(KNOWN_ARCHS["sm90"], TC, quanto, None).key
    sm75 = plan_build(KNOWN_ARCHS["sm75"], TC, None, why)   # the arch is the first reason
    assert sm75.marlin_reason == MARLIN_ARCH_REASON.format(sm="sm_75")


def test_the_key_follows_everything_the_module_depends_on(quanto, tmp_path):
    csrc = tmp_path / "csrc"
    shutil.copytree(CSRC, csrc)
    sm75, sm90 = KNOWN_ARCHS["sm75"], KNOWN_ARCHS["sm90"]
    k75, k90 = (plan_build(a, TC, quanto, None, csrc=csrc).key for a in (sm75, sm90))
    # quanto's source is in sm90's key, not in sm75's (it is not compiled there)
    (quanto / QUANTO_MARLIN_SOURCE).write_text("// kernel v2\n")
    assert plan_build(sm90, TC, quanto, None, csrc=csrc).key != k90
    assert plan_build(sm75, TC, quanto, None, csrc=csrc).key == k75
    # every own source and header, the torch, CUDA and Python ABI
    (csrc / "correction_variants.cuh").write_text("// changed\n")
    assert plan_build(sm75, TC, quanto, None, csrc=csrc).key != k75
    base = plan_build(sm75, TC, quanto, None).key
    for other in (Toolchain("2.13.0+cu130", "13.0", TC.python_abi),
                  Toolchain(TC.torch_version, "12.8", TC.python_abi),
                  Toolchain(TC.torch_version, "13.0", ".cpython-311-x86_64-linux-gnu.so")):
        assert plan_build(sm75, other, quanto, None).key != base


# --------------------------------------------------------------------------- the bench's side
@pytest.fixture()
def cuda_here(monkeypatch, tmp_path):
    """This CPU pretending to hold a CUDA torch and an sm86 GPU (the stubs are GPU facts)."""
    monkeypatch.setenv("HARNESS_BUILD_DIR", str(tmp_path / "builds"))
    monkeypatch.setattr(build, "toolchain", lambda: TC)
    monkeypatch.setattr(build, "visible_arch", lambda: KNOWN_ARCHS["sm86"])
    return tmp_path / "builds"


def test_the_bench_without_a_compiler_names_the_arch_and_the_build_command(cuda_here,
                                                                           monkeypatch):
    monkeypatch.setattr(build, "compiler_missing", lambda: "nvcc not found: set CUDA_HOME")
    plan = build.plan_for(KNOWN_ARCHS["sm86"])
    with pytest.raises(build.BuildError) as exc:
        build._build()
    msg = str(exc.value)
    assert "\n" not in msg and "nvcc not found" in msg
    assert "sm_86" in msg and "`harness build --arch sm86`" in msg
    assert plan.name in msg and str(cuda_here) in msg and TC.torch_version in msg
    assert not cuda_here.exists()               # nothing created where nothing was built


def test_harness_build_and_the_bench_use_one_folder(cuda_here):
    plan = build.plan_for(KNOWN_ARCHS["sm86"])
    folder = plan.directory(cuda_here)
    folder.mkdir(parents=True)
    (folder / f"{plan.name}.so").write_text("not a real module")
    (folder / "build.json").write_text(json.dumps({"build_seconds": 31.5}))
    outcome = build.ensure_built(plan)           # found: nothing compiled
    assert outcome.ok and outcome.cached and outcome.seconds == 31.5
    assert outcome.so == str(folder / f"{plan.name}.so")
    with pytest.raises(build.BuildError) as exc:   # the bench opens that very file
        build._build()
    assert f"the cached build {folder / plan.name}.so cannot be loaded" in str(exc.value)


def test_outcome_lines():
    plan = plan_build(KNOWN_ARCHS["sm75"], TC, None, "optimum-quanto is not installed")
    ok = build.BuildOutcome(plan, "/b", cached=False, seconds=31.24)
    line = outcome_line(ok)
    assert line.startswith("sm75") and plan.name in line and "built" in line and "31.2 s" in line
    assert "without Marlin: Marlin needs sm_80+" in line
    cached = outcome_line(build.BuildOutcome(plan, "/b", cached=True, seconds=float("nan")))
    assert "cached" in cached and "? s" in cached
    failed = outcome_line(build.BuildOutcome(plan, "/b", cached=False, seconds=1.0,
                                             error="this nvcc cannot compile for sm_75"))
    assert "FAILED" in failed and "cannot compile for sm_75" in failed


def test_harness_build_dry_run_and_errors(cuda_here, capsys):
    assert main(["build", "--arch", "sm75,sm_90", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert str(cuda_here) in out[0] and TC.torch_version in out[0]
    sm75, sm90 = out[1:]
    assert sm75.startswith("sm75") and "sm_75" in sm75 and "without Marlin: Marlin needs" in sm75
    assert sm90.startswith("sm90") and build.plan_for(KNOWN_ARCHS["sm90"]).name in sm90
    assert not cuda_here.exists()
    assert main(["build", "--arch", "sm70"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown arch 'sm70'" in err and "sm120" in err


def test_harness_build_reports_a_failed_arch_and_exits_2(cuda_here, monkeypatch, capsys):
    monkeypatch.setattr(build, "compiler_missing", lambda: "nvcc not found: set CUDA_HOME")
    assert main(["build", "--arch", "sm75,sm120"]) == 2
    out = capsys.readouterr().out
    assert out.count("FAILED  nvcc not found") == 2
    assert "0 built, 0 cached, 2 failed (sm75, sm120)" in out
