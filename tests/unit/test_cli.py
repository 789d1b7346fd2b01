"""The console script's wiring: every command loads, ``harness study NAME`` dispatches to the
study's own ``main(argv)``, and expected errors become one line with exit status 2."""

from __future__ import annotations

import importlib

import pytest

from harness import cli
from harness.commands.study import STUDIES
from harness.errors import CompareError, HarnessError, StoreLockedError, one_line
from harness.reports.synthetic import make_rows, resample
from harness.results.baseline import BaselineMeta, write_baseline_matrix
from harness.results.environment import Environment
from harness.results.store import RunMeta, write_run

ENV = Environment(arch="sm90", gpu_name="NVIDIA H200", compute_capability="9.0")


def test_every_command_module_registers_and_runs():
    names = set(cli.build_parser()._subparsers._group_actions[0].choices)
    assert names == {"cases", "paths", "bench", "job", "ppl", "report", "merge", "compare",
                     "history", "bisect", "policy", "baseline", "study", "build"}
    for module in cli.COMMANDS:
        assert callable(module.register) and callable(module.run), module.__name__


@pytest.mark.parametrize("command", ["cases", "paths", "policy", "bench", "job", "ppl", "report",
                                     "merge",
                                     "compare", "history", "bisect", "baseline", "study",
                                     "build"])
def test_help_of_each_command(command, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--help"])
    assert info.value.code == 0
    assert f"usage: harness {command}" in capsys.readouterr().out


def test_study_help_lists_every_study(capsys):
    with pytest.raises(SystemExit):
        cli.main(["study", "--help"])
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in STUDIES)


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_each_study_module_has_main_and_its_own_help(name, capsys):
    assert callable(importlib.import_module(STUDIES[name].module).main)
    with pytest.raises(SystemExit) as info:
        cli.main(["study", name, "--help"])
    assert info.value.code == 0
    assert f"usage: harness study {name}" in capsys.readouterr().out


def test_unknown_study_is_refused(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["study", "nosuch"])
    assert info.value.code == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err


def test_study_planted_gates_stored_runs_offline(tmp_path, capsys):
    """``harness study planted``: stored runs slowed by exactly --factor, gated against a
    baseline; the arguments after NAME reach the study unchanged."""
    base = make_rows(ms=(1, 16, 64), n_samples=60)
    write_baseline_matrix(tmp_path / "baselines", base,
                          BaselineMeta("synthetic", "sm90", ENV, rows_sha256=""))
    run = write_run(tmp_path / "run", resample(base, seed=3),
                    RunMeta(matrix="synthetic", environment=ENV))
    assert cli.main(["study", "planted", "--baselines", str(tmp_path / "baselines"),
                     "--matrix", "synthetic", "--factor", "1.5", str(run)]) == 0
    out = capsys.readouterr().out
    assert "marlin_asym: x1.5 caught in 1/1 runs" in out
    assert "A/A (unscaled): 0 failing SLOWER rows over 1 runs" in out


@pytest.mark.parametrize("exc", [HarnessError("held"), StoreLockedError("held"),
                                 CompareError("held"), ValueError("held"), KeyError("held"),
                                 FileNotFoundError("held")])
def test_expected_errors_are_one_line_exit_2(exc, monkeypatch, capsys):
    def boom(args):
        raise exc

    parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda: _with_func(parser(), boom))
    assert cli.main(["cases"]) == 2
    assert capsys.readouterr().err == "harness cases: error: held\n"
    assert one_line(exc) == "held"


def _with_func(parser, func):
    parser._subparsers._group_actions[0].choices["cases"].set_defaults(func=func)
    return parser


def test_harness_paths_lists_every_path_with_its_origin(capsys, tmp_path, scratch_paths):
    plugin = tmp_path / "extra.py"
    plugin.write_text(
        "from harness.kernels.base import PATHS\n"
        "from harness.kernels.fp16_cache import Fp16CachePath\n"
        "class Extra(Fp16CachePath):\n"
        "    name = 'extra_peer'\n"
        "    role = 'peer'\n"
        "PATHS.register(Extra())\n")
    assert cli.main(["paths", "--cpu", "--plugin", str(plugin)]) == 0
    out = capsys.readouterr().out
    for name in ("native_int4", "fp16_cache", "marlin_asym", "tinygemm", "extra_peer"):
        assert name in out
    assert "--plugin" in out and "built-in" in out
    assert scratch_paths.origin("extra_peer") == f"--plugin {plugin}"
