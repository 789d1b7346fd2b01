"""Settings from [tool.harness]: presets, overrides, errors, packaged fallback."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import tomllib

import harness.config as config
from harness.config import (
    SETTING_TYPES,
    ConfigError,
    Settings,
    available_presets,
    load_settings,
    parse_overrides,
)

REPO_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _repo_table() -> dict:
    with open(REPO_PYPROJECT, "rb") as fh:
        return tomllib.load(fh)["tool"]["harness"]


def test_reads_the_repository_presets():
    table = _repo_table()
    for name in ("default", "strict", "permissive"):
        s = load_settings(name)
        assert s.source == str(REPO_PYPROJECT) and s.preset == name
        assert {k: getattr(s, k) for k in SETTING_TYPES} == table["presets"][name]
    assert load_settings().preset == table["preset"]
    assert load_settings("strict").min_effect < load_settings("permissive").min_effect
    assert available_presets() == ["default", "permissive", "strict"]


def test_packaged_defaults_mirror_the_pyproject():
    """An installed wheel (no pyproject) must behave like the repository."""
    assert config._DEFAULT_PRESETS == _repo_table()["presets"]


def test_falls_back_to_packaged_defaults_without_pyproject(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "find_pyproject", lambda start=None: None)
    s = load_settings("strict")
    assert s.source == config.PACKAGED_SOURCE and s.min_effect == 0.02 and s.min_samples == 50


def test_settings_are_frozen_and_typed():
    s = load_settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.alpha = 0.5  # type: ignore[misc]
    assert isinstance(s.min_samples, int) and isinstance(s.rel_err_gate, float)
    assert Settings.from_dict(s.to_dict()) == s


def test_a_run_stored_before_a_setting_existed_reads_with_its_old_meaning():
    d = load_settings("default").to_dict()
    assert d["accuracy_runs"] == 5
    del d["accuracy_runs"]                        # e.g. baselines/sm90/*.json of 2026-12-02
    assert Settings.from_dict(d).accuracy_runs == 1
    del d["alpha"]
    with pytest.raises(config.ConfigError, match="lack key 'alpha'"):
        Settings.from_dict(d)


def test_retired_ulp_settings_of_old_runs_still_load():
    """The per-element ULP gate's keys (ulp_tolerance, ulp_rel_tolerance) are gone; a stored
    run's settings that carry them, and lack the LESS_ACCURATE keys, still read."""
    d = load_settings("default").to_dict()
    for key in ("rel_err_growth", "rms_ulp_slack", "rms_ulp_growth"):
        del d[key]
    d.update(ulp_tolerance=2.0, ulp_rel_tolerance=0.005)          # as in baselines/sm90/*.json
    s = Settings.from_dict(d)
    assert not hasattr(s, "ulp_tolerance") and not hasattr(s, "ulp_rel_tolerance")
    assert (s.rel_err_growth, s.rms_ulp_slack, s.rms_ulp_growth) == (0.10, 0.25, 0.10)
    assert s == load_settings("default")


def test_retired_keys_in_an_old_pyproject_are_ignored_but_refused_on_the_command_line(tmp_path):
    p = tmp_path / "pyproject.toml"
    p.write_text("[tool.harness.presets.default]\nulp_tolerance = 2.0\nalpha = 0.02\n"
                 "[tool.harness.presets.ci]\nulp_rel_tolerance = 0.01\nmin_effect = 0.07\n")
    s = load_settings("ci", pyproject=p)
    assert s.alpha == 0.02 and s.min_effect == 0.07 and s.rel_err_growth == 0.10
    for call in (lambda: parse_overrides(["ulp_tolerance=3"]),
                 lambda: load_settings(overrides={"ulp_rel_tolerance": 0.01})):
        with pytest.raises(ConfigError, match="'ulp_.*tolerance' is retired.*rel_err_growth"):
            call()


def test_overrides_are_coerced():
    s = load_settings("default", parse_overrides(["min_effect=0.05", "max_samples = 3000"]))
    assert s.min_effect == 0.05 and s.max_samples == 3000
    assert s.overrides == ("max_samples", "min_effect")
    assert load_settings(overrides={"alpha": 0.05}).alpha == 0.05


@pytest.mark.parametrize("call, words", [
    (lambda: load_settings("fast"), ["unknown preset 'fast'", "default, permissive, strict"]),
    (lambda: load_settings(overrides={"speed": 1}), ["unknown setting 'speed'", "rel_err_gate", "max_samples"]),
    (lambda: parse_overrides(["min_effect"]), ["KEY=VALUE"]),
    (lambda: parse_overrides(["bogus=1"]), ["unknown setting 'bogus'"]),
    (lambda: load_settings(overrides={"min_samples": "2.5"}), ["'min_samples'", "integer"]),
    (lambda: load_settings(overrides={"alpha": "often"}), ["'alpha'", "number"]),
    (lambda: load_settings(overrides={"alpha": 1.5}), ["'alpha'", "(0, 1)"]),
    (lambda: load_settings(overrides={"max_samples": 5}), ["'max_samples'", "min_samples"]),
    (lambda: load_settings(overrides={"min_effect": -0.1}), ["'min_effect'", ">= 0"]),
])
def test_bad_input_is_one_line_naming_it(call, words):
    with pytest.raises(ConfigError) as exc:
        call()
    msg = str(exc.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg


def test_custom_pyproject_partial_preset_and_bad_key(tmp_path):
    p = tmp_path / "pyproject.toml"
    p.write_text('[tool.harness]\npreset = "ci"\n[tool.harness.presets.default]\nalpha = 0.02\n'
                 '[tool.harness.presets.ci]\nmin_effect = 0.07\n')
    s = load_settings(pyproject=p)
    assert s.preset == "ci" and s.min_effect == 0.07
    assert s.alpha == 0.02  # from the file's default preset
    assert s.max_samples == config._DEFAULT_PRESETS["default"]["max_samples"]  # packaged
    p.write_text("[tool.harness.presets.ci]\nmin_efect = 0.07\n")
    with pytest.raises(ConfigError, match="unknown setting 'min_efect'") as exc:
        load_settings("ci", pyproject=p)
    assert str(p) in str(exc.value)
    p.write_text("[tool.harness\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(pyproject=p)
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(pyproject=tmp_path / "none.toml")


def test_find_pyproject_prefers_the_package_checkout(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[tool.harness.presets.default]\nalpha = 0.2\n")
    monkeypatch.chdir(tmp_path)
    assert config.find_pyproject() == REPO_PYPROJECT
