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
