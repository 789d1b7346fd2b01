"""Settings from [tool.harness]: presets, overrides, errors, packaged fallback."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import replace
from pathlib import Path

import pytest
import tomllib

import harness.config as config
from harness.config import (
    DEFAULT_PRESET,
    PRESET_OVERRIDES,
    SETTING_TYPES,
    SPECS,
    ConfigError,
    Settings,
    available_presets,
    load_settings,
    packaged_presets,
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
        assert {k: getattr(s, k) for k in SETTING_TYPES} == packaged_presets()[name]
    assert load_settings().preset == table["preset"]
    assert load_settings("strict").min_effect < load_settings("permissive").min_effect
    assert available_presets() == ["default", "permissive", "strict"]


def test_packaged_defaults_mirror_the_pyproject():
    """An installed wheel (no pyproject) must behave like the repository: the pyproject's
    default table lists every setting with its declared default, every other table exactly
    the preset's overrides."""
    presets = _repo_table()["presets"]
    assert presets["default"] == DEFAULT_PRESET
    assert list(presets["default"]) == list(SPECS)            # declaration order
    assert {k: v for k, v in presets.items() if k != "default"} == PRESET_OVERRIDES


def test_every_key_of_the_pyproject_default_preset_is_commented():
    """A comment on the key's line, or a comment block right above it, or one above the keys
    before it that names it."""
    lines = REPO_PYPROJECT.read_text(encoding="utf-8").splitlines()
    start = lines.index("[tool.harness.presets.default]")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("["))
    is_key = re.compile(r"(\w+)\s*=").match
    for i in range(start + 1, end):
        key = is_key(lines[i])
        if not key or "#" in lines[i]:
            continue
        j = i - 1
        while is_key(lines[j]):
            j -= 1
        block = []
        while lines[j].startswith("#"):
            block.append(lines[j])
            j -= 1
        assert block and (is_key(lines[i - 1]) is None or key[1] in " ".join(block)), (
            f"pyproject: {key[1]} has no comment")


def test_every_setting_is_declared_once_with_type_doc_and_default():
    assert list(SETTING_TYPES) == list(SPECS) == list(DEFAULT_PRESET)
    assert [f.name for f in dataclasses.fields(Settings)] == ["preset", *SPECS, "source",
                                                               "overrides"]
    for name, spec in SPECS.items():
        assert spec.type in (int, float), name
        assert spec.doc.strip() and "\n" not in spec.doc, f"{name}: no one-line doc"
        assert isinstance(spec.default, spec.type), f"{name}: default-preset value"
        assert spec.check(spec.default) == spec.default
        if spec.stored_default is not None:
            assert spec.check(spec.stored_default) == spec.stored_default
    for name, over in PRESET_OVERRIDES.items():
        assert over and all(DEFAULT_PRESET[k] != v for k, v in over.items()), name
        assert set(over) <= set(SPECS), name
    assert dataclasses.asdict(Settings(preset="default")) == {
        "preset": "default", **DEFAULT_PRESET, "source": config.PACKAGED_SOURCE, "overrides": ()}


def test_no_getattr_defaults_for_settings_in_the_package():
    """Settings are read as typed attributes: a misspelt key fails, never a silent default."""
    root = Path(config.__file__).resolve().parent
    pattern = re.compile(r"getattr\([^)]*settings", re.IGNORECASE)
    hits = [f"{p.relative_to(root)}:{n}" for p in root.rglob("*.py")
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if pattern.search(line)]
    assert hits == []


def test_falls_back_to_packaged_defaults_without_pyproject(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "find_pyproject", lambda start=None: None)
    s = load_settings("strict")
    assert s.source == config.PACKAGED_SOURCE and s.min_effect == 0.015 and s.min_samples == 50


def test_settings_are_frozen_and_typed():
    s = load_settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.alpha = 0.5  # type: ignore[misc]
    assert isinstance(s.min_samples, int) and isinstance(s.rel_err_gate, float)
    assert Settings.from_dict(s.to_dict()) == replace(s, source="pyproject.toml")
    assert "/" not in s.to_dict()["source"]       # no machine path travels with a run


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
    assert s == replace(load_settings("default"), source="pyproject.toml")


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
    (lambda: load_settings(overrides={"speed": 1}),
     ["unknown setting 'speed'", "rel_err_gate", "max_samples"]),
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
    assert s.max_samples == DEFAULT_PRESET["max_samples"]  # packaged
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


@pytest.mark.parametrize("body, words", [
    ("[tool.harness.presets.default]\nrel_err_gat = 1e-3\n",                # misspelt key
     ["preset 'default'", "unknown setting 'rel_err_gat'", "valid settings: rel_err_gate"]),
    ("[tool.harness.presets.ci]\nalpha = \"0.01\"\n",                       # a string
     ["preset 'ci'", "setting 'alpha' must be a number, got '0.01'"]),
    ("[tool.harness.presets.ci]\ngate_eager_speed = true\n",                # a bool
     ["setting 'gate_eager_speed' must be an integer, got True"]),
    ("[tool.harness.presets.ci]\nmin_samples = 30.5\n",                     # not an integer
     ["setting 'min_samples' must be an integer, got 30.5"]),
    ("[tool.harness.presets.ci]\nfail_on_nondeterminism = 2\n",             # out of range
     ["setting 'fail_on_nondeterminism' must be 0 or 1, got 2"]),
    ("[tool.harness.presets.ci]\nmax_case_seconds = 0.0\n",
     ["setting 'max_case_seconds' must be > 0"]),
    ("[tool.harness.presets.ci]\nwarmup_ms = inf\n", ["setting 'warmup_ms' must be finite"]),
    ("[tool.harness.presets.default]\nalpha = 1.0\n",                       # every preset
     ["preset 'default'", "setting 'alpha' must be in (0, 1), got 1.0"]),
    ("[tool.harness]\npresetz = \"strict\"\n", ["unknown key 'presetz' in [tool.harness]"]),
    ("[tool.harness]\npreset = 3\n", ["tool.harness.preset = 3 is not a preset"]),
])
def test_a_bad_pyproject_is_refused_in_one_line_naming_the_key(tmp_path, body, words):
    p = tmp_path / "pyproject.toml"
    p.write_text(body)
    with pytest.raises(ConfigError) as exc:
        load_settings("default", pyproject=p)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(str(p))
    for w in words:
        assert w in msg


def test_a_misspelt_override_is_one_line_naming_it():
    for call in (lambda: parse_overrides(["min_efect=0.05"]),
                 lambda: load_settings(overrides={"min_efect": 0.05})):
        with pytest.raises(ConfigError) as exc:
            call()
        assert "\n" not in str(exc.value) and "unknown setting 'min_efect'" in str(exc.value)
    with pytest.raises(AttributeError):
        load_settings().min_efect  # noqa: B018 - typed access: no silent default


def test_every_setting_added_later_reads_from_an_old_run_with_its_stored_default():
    later = {k: s.stored_default for k, s in SPECS.items() if s.stored_default is not None}
    assert later == {"accuracy_runs": 1, "fail_on_nondeterminism": 0, "rel_err_growth": 0.10,
                     "rms_ulp_slack": 0.25, "rms_ulp_growth": 0.10, "graph_idle_ratio": 0.0,
                     "ab_screen": 0.02, "cold_min_samples": 0, "ab_extra_rounds": 0,
                     "ab_undecided_se": 0.0, "ab_line_rounds": 0, "ab_screen_round": 1,
                     "projection_sample": 4, "projection_min_samples": 0,
                     "projection_warmup_ms": 0.0, "projection_accuracy_runs": 0,
                     "policy_min_lead": 0.02,
                     "ab_path_screen": 0.02,
                     "fail_on_winner_change": 0}
    d = {k: v for k, v in load_settings("strict").to_dict().items() if k not in later}
    s = Settings.from_dict(d)
    assert {k: getattr(s, k) for k in later} == later
    assert s.min_effect == load_settings("strict").min_effect


def test_a_stored_run_with_a_bad_value_names_its_source():
    d = {**load_settings().to_dict(), "alpha": 2.0}
    with pytest.raises(ConfigError, match=r"^run\.json: setting 'alpha' must be in \(0, 1\)"):
        Settings.from_dict(d, "run.json")
