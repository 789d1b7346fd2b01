"""What a newcomer runs into gets one line on stderr and exit code 2, and nothing already
written is lost: an unwritable results directory, a filter that is malformed or too large,
--resume with other options, compare of revisions without git."""

from __future__ import annotations

import pytest

from harness.cli import main

SMOKE = ["bench", "--cpu", "--matrix", "smoke", "--filter", "M == 1", "--no-progress",
         "--no-compare", "--set", "max_case_seconds=0.2"]


def _one_line_error(capsys, *words):
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("harness "), err
    for w in words:
        assert w in err, err
    return err


def _snapshot(root):
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_results_directory_that_cannot_be_written(tmp_path, capsys):
    blocker = tmp_path / "results"
    blocker.write_text("a file where the results directory should be\n")
    assert main(SMOKE + ["--out", str(blocker)]) == 2
    _one_line_error(capsys, "error:")
    assert blocker.read_text() == "a file where the results directory should be\n"


@pytest.mark.parametrize("text, words", [
    ("M <= ", ["not a valid expression"]),
    ("'a' * 100000000000 in tags", ["string longer than"]),
    ("M + " * 600 + "M > 0", ["too long"]),
])
def test_a_bad_filter(tmp_path, capsys, text, words):
    args = [a if a != "M == 1" else text for a in SMOKE]
    assert main(args + ["--out", str(tmp_path / "r")]) == 2
    _one_line_error(capsys, *words)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("change, says", [
    (["--preset", "permissive"], "setting preset = default, now permissive"),
    (["--paths", "native_int4"], "paths"),
    (["--set", "max_case_seconds=0.3"], "setting max_case_seconds"),
])
def test_resume_with_other_options_is_refused_and_keeps_the_rows(tmp_path, capsys, change, says):
    out = ["--out", str(tmp_path / "r")]
    assert main(SMOKE + out) == 0
    before = _snapshot(tmp_path / "r")
    assert main(SMOKE + out + ["--resume", *change]) == 2
    _one_line_error(capsys, "--resume", says, "--overwrite")
    assert _snapshot(tmp_path / "r") == before          # nothing rewritten, nothing lost
    assert main(SMOKE + out + ["--resume"]) == 0         # the same options continue it


def test_compare_of_revisions_without_git(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))            # no git on PATH
    assert main(["compare", "HEAD~1", "HEAD", "--out", str(tmp_path / "c")]) == 2
    _one_line_error(capsys, "git is not installed")


def test_a_build_directory_that_cannot_be_created(tmp_path, monkeypatch):
    """HARNESS_BUILD_DIR under a file: the extension build stops with one line naming the
    directory and the variable (the toolchain and GPU checks, CUDA-only, are stubbed on
    this CPU, and so is the compiler check: this machine may have no nvcc)."""
    from harness.archs import KNOWN_ARCHS
    from harness.errors import HarnessError
    from harness.kernels import build
    from harness.kernels.build_plan import Toolchain

    blocker = tmp_path / "cache"
    blocker.write_text("not a directory\n")
    monkeypatch.setenv("HARNESS_BUILD_DIR", str(blocker / "int4"))
    monkeypatch.setattr(build, "toolchain", lambda: Toolchain("2.11.0+cu130", "13.0", ".so"))
    monkeypatch.setattr(build, "visible_arch", lambda: KNOWN_ARCHS["sm90"])
    monkeypatch.setattr(build, "compiler_missing", lambda: None)
    monkeypatch.setattr(build, "_nvcc_lacks", lambda arch: None)
    with pytest.raises(build.BuildError) as exc:
        build._build()
    msg = str(exc.value)
    assert isinstance(exc.value, HarnessError) and "\n" not in msg
    assert "cannot be created" in msg and "HARNESS_BUILD_DIR" in msg and str(blocker) in msg
    assert blocker.read_text() == "not a directory\n"


# ---------------------------------------------------------- issue 38: the first hour's traps
def test_a_filter_that_selects_nothing_is_an_error(tmp_path, capsys):
    """A typo in a CI job's filter used to end `PASS: no rows`, exit 0."""
    args = [a if a != "M == 1" else "M == 12345" for a in SMOKE]
    assert main(args + ["--out", str(tmp_path / "r")]) == 2
    _one_line_error(capsys, "--filter 'M == 12345' selects no case of matrix 'smoke'")
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("*.csv"))


def test_settings_the_baseline_refuses_are_refused_before_measuring(tmp_path, capsys):
    """--preset strict against the committed CPU baselines measured everything, then
    refused; now it refuses first and writes no row."""
    args = [a for a in SMOKE if a != "--no-compare"]
    assert main(args + ["--preset", "strict", "--out", str(tmp_path / "r")]) == 2
    _one_line_error(capsys, "refusing to compare against this baseline", "differs")
    assert not list((tmp_path / "r").rglob("*.csv"))


@pytest.mark.parametrize("body, words", [
    ("def broken(:\n", ["SyntaxError", "line 1"]),
    ("from harness.kernels.base import PATHS\nPATHS.register(object())\n",
     ["TypeError", "GemmPath instance"]),
    ("raise RuntimeError('needs a GPU library')\n", ["RuntimeError", "needs a GPU library"]),
])
def test_a_plugin_that_fails_is_one_line_naming_it(tmp_path, capsys, body, words):
    plugin = tmp_path / "my_path.py"
    plugin.write_text(body)
    assert main(SMOKE + ["--out", str(tmp_path / "r"), "--plugin", str(plugin)]) == 2
    _one_line_error(capsys, f"plugin --plugin {plugin} failed to load", *words)


def test_compare_never_replaces_an_earlier_comparison(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(SMOKE + ["--out", "r"]) == 0
    [run] = list((tmp_path / "r").glob("*/cpu"))
    for _ in range(2):
        assert main(["compare", str(run), str(run)]) == 0
    first = tmp_path / "results" / "compare"
    names = sorted(p.name for p in first.iterdir())
    assert len(names) == 2 and names[1] == names[0] + "-2"
    capsys.readouterr()
    assert main(["compare", str(run), str(run), "--out", str(first / names[0])]) == 2
    _one_line_error(capsys, "holds an earlier comparison")


def test_the_report_hint_works_where_it_is_printed(monkeypatch, tmp_path):
    from harness.commands.job import report_hint

    monkeypatch.delenv("NOX_CURRENT_SESSION", raising=False)
    hint = report_hint(tmp_path / "run", "baselines")
    assert " -m harness report " in hint and hint.endswith("--baseline baselines")
    monkeypatch.setenv("NOX_CURRENT_SESSION", "bench-cpu")
    monkeypatch.setattr("sys.prefix", str(tmp_path / ".nox" / "bench-cpu"))
    assert report_hint(tmp_path / "run", "baselines").startswith("nox -s report -- ")
