"""The environment policy (``harness.results.environment.check_environment``) and every place
a run meets a baseline or another run: what refuses, what warns, ``--strict-env``, the
warnings in the report header, and the facts ``envinfo.environment`` records."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest
import torch

from harness.cli import main
from harness.config import load_settings
from harness.engines.aa_baselines import calibrate
from harness.engines.baseline_accept import accept
from harness.engines.compare import compare
from harness.reports.synthetic import make_rows, resample
from harness.results.baseline import BaselineMeta, baseline_settings, write_baseline_matrix
from harness.results.environment import (
    ENV_NOTE_PREFIX,
    Environment,
    IncompatibleBaselineError,
    check_environment,
    measured_settings,
)
from harness.results.store import RunMeta, load_run, write_run

S = load_settings("default")
SETTINGS = S.to_dict()
ENV = Environment(arch="sm90", gpu_name="NVIDIA H200", compute_capability="9.0",
                  torch="2.11.0+cu130", cuda="13.0", driver="580.1", quanto="0.2.6",
                  python="3.11.7", host="gpu-a", commit="a" * 40, gpu_uuid="GPU-aaaa",
                  boot_id="boot-a", sm_clock_max_mhz="1980", sm_clock_app_mhz="1755",
                  power_limit_w="700")
DRIVER = "driver differs: baseline 580.1, this run 590.0"


def _refused(*needles, **kw) -> str:
    with pytest.raises(IncompatibleBaselineError) as exc:
        check_environment(**kw)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("refusing to compare against this "), msg
    for needle in needles:
        assert needle in msg, (needle, msg)
    return msg


# --------------------------------------------------------------------------- the policy
@pytest.mark.parametrize("change, needles", [
    (dict(arch="sm89"), ("arch differs", "sm90", "sm89")),
    (dict(gpu_name="NVIDIA H100 80GB HBM3"), ("GPU model differs", "NVIDIA H200", "H100")),
])
def test_another_arch_or_gpu_model_is_refused(change, needles):
    _refused(*needles, base_env=ENV, cur_env=replace(ENV, **change))


def test_another_dispatcher_switch_is_refused_and_an_older_record_is_not_compared():
    """`nox -s bench-smXX` sets TINYLOOP_USE_MARLIN=1 and HARNESS_MARLIN_SM90=1; a baseline
    recorded without them (a plain `harness job`) saw a dispatcher that never picks Marlin,
    so LOST_DISPATCH could not fire against it: refused, naming the switch."""
    on = replace(ENV, extra={"tinyloop_use_marlin": "1", "harness_marlin_sm90": "1"})
    off = replace(ENV, extra={"tinyloop_use_marlin": "", "harness_marlin_sm90": ""})
    _refused("dispatcher switch TINYLOOP_USE_MARLIN differs", "baseline unset", "this run 1",
             base_env=off, cur_env=on)
    assert check_environment(on, replace(on)) == []
    assert check_environment(ENV, on) == []           # a record without the keys (older run)


@pytest.mark.parametrize("key, value", [
    ("warmup_ms", 50.0), ("max_case_seconds", 0.35), ("target_rel_spread", 0.005),
    ("min_samples", 50), ("max_samples", 5000), ("accuracy_runs", 3),
])
def test_a_setting_that_changes_what_is_measured_is_refused(key, value):
    cur = {**SETTINGS, key: value}
    _refused(f"setting {key} differs", f"baseline {SETTINGS[key]}", f"this run {value}",
             base_env=ENV, cur_env=ENV, base_settings=SETTINGS, cur_settings=cur)


def test_cpu_threads_are_refused_and_a_run_of_fewer_modes_is_not():
    cold_graph = measured_settings(SETTINGS, {"modes": ["cold", "graph"], "cpu_threads": 16})
    assert "cpu_threads" not in cold_graph          # GPU timings: the host's threads do not matter
    graph = measured_settings(SETTINGS, {"modes": ["graph"], "cpu_threads": 32})
    # a graph-only run (e.g. the planted-slowdown check) is gated on its graph rows
    assert check_environment(ENV, ENV, cold_graph, graph) == []
    assert check_environment(ENV, ENV, cold_graph,
                             measured_settings(SETTINGS, {"modes": ["graph", "cold"],
                                                          "cpu_threads": 32})) == []
    cpu = replace(ENV, arch="cpu", gpu_name="")
    one, two = (measured_settings(SETTINGS, {"modes": ["cpu"], "cpu_threads": n}) for n in (1, 2))
    _refused("setting cpu_threads differs", "baseline 1", "this run 2", base_env=cpu, cur_env=cpu,
             base_settings=one, cur_settings=two)
    # harness ppl records its scoring modes under the same key: not timing modes, not compared
    assert "modes" not in measured_settings(SETTINGS, {"modes": ["reference", "dispatch"]})


def test_a_baseline_or_run_without_environment_is_refused():
    _refused("no environment metadata", "re-record", base_env=Environment(), cur_env=ENV)
    _refused("this run records no environment metadata", base_env=ENV,
             cur_env=Environment(commit="x"))


@pytest.mark.parametrize("change, warning", [
    (dict(driver="590.0"), DRIVER),
    (dict(quanto="0.2.7"), "optimum-quanto differs: baseline 0.2.6, this run 0.2.7"),
    (dict(torch="2.13.0+cu130"), "torch differs: baseline 2.11.0+cu130, this run 2.13.0+cu130"),
    (dict(cuda="12.4"), "CUDA differs: baseline 13.0, this run 12.4"),
    (dict(sm_clock_max_mhz="1755"), "max SM clock differs: baseline 1980 MHz, this run 1755 MHz"),
    (dict(power_limit_w="600"), "power limit differs: baseline 700 W, this run 600 W"),
])
def test_software_clock_and_power_differences_warn_and_strict_refuses(change, warning):
    cur = replace(ENV, **change)
    assert check_environment(ENV, cur, SETTINGS, SETTINGS) == [warning]
    _refused("(--strict-env)", warning, base_env=ENV, cur_env=cur, base_settings=SETTINGS,
             cur_settings=SETTINGS, strict=True)


def test_another_machine_of_the_same_model_and_unknown_facts_pass_silently():
    other = replace(ENV, host="gpu-b", gpu_uuid="GPU-bbbb", boot_id="boot-b",
                    sm_clock_app_mhz="1980", python="3.12.1", date="2027-01-01", commit="b" * 40)
    assert check_environment(ENV, other, SETTINGS, SETTINGS, strict=True) == []
    unknown = replace(ENV, driver="", quanto="", torch="", power_limit_w="")
    assert check_environment(ENV, unknown, strict=True) == []
    assert check_environment(ENV, replace(ENV, sm_clock_max_mhz="1980.0"), strict=True) == []


def test_threshold_only_and_missing_settings_pass_silently():
    thresholds = {**SETTINGS, "alpha": 0.05, "min_effect": 0.5, "ulp_tolerance": 9.0,
                  "rel_err_gate": 1e-2, "noise_margin_floor": 0.2, "ppl_drift_tolerance": 0.5,
                  "gate_eager_speed": 1,
                  "fail_on_nondeterminism": 1, "ulp_rel_tolerance": 0.5, "rel_err_growth": 3.0,
                  "rms_ulp_slack": 4.0, "preset": "strict", "source": "elsewhere",
                  "overrides": ["alpha"]}
    assert check_environment(ENV, ENV, SETTINGS, thresholds, strict=True) == []
    old = {k: v for k, v in SETTINGS.items() if k not in ("accuracy_runs", "warmup_ms")}
    assert check_environment(ENV, ENV, old,
                             {**SETTINGS, "accuracy_runs": 9, "warmup_ms": 1.0}) == []
    assert check_environment(ENV, ENV, {}, {**SETTINGS, "warmup_ms": 1.0}) == []


def test_summary_names_the_new_facts():
    text = ENV.summary()
    for part in ("driver 580.1", "quanto 0.2.6", "GPU GPU-aaaa", "max 1980 MHz",
                 "application 1755 MHz", "power limit 700 W"):
        assert part in text, (part, text)
    round_trip = Environment.from_dict(ENV.to_dict())
    assert round_trip == ENV and not round_trip.extra


# --------------------------------------------------------------------------- envinfo
def test_environment_records_every_fact_as_a_string(monkeypatch):
    from harness.measure import envinfo

    monkeypatch.setenv("HARNESS_COMMIT", "policy")
    env = envinfo.environment(torch.device("cpu"))
    for key in ("gpu_name", "gpu_uuid", "driver", "cuda", "torch", "quanto", "python", "host",
                "boot_id", "sm_clock_max_mhz", "sm_clock_app_mhz", "sm_clock_default_mhz",
                "power_limit_w"):
        assert isinstance(env[key], str), (key, env[key])
    assert env["sm_clock_max_mhz"] == env["power_limit_w"] == ""
    assert env["torch"] == torch.__version__
    parsed = Environment.from_dict(env)
    assert parsed.boot_id == env["boot_id"] and parsed.arch == "cpu"
    assert envinfo._boot_id("/nonexistent/boot_id") == ""


def test_nvml_facts_read_each_fact_on_its_own(monkeypatch):
    from harness.measure import envinfo

    class FakeNvml:
        NVML_CLOCK_SM = 1

        def nvmlDeviceGetMaxClockInfo(self, handle, clock):
            return 1980

        def nvmlDeviceGetApplicationsClock(self, handle, clock):
            raise RuntimeError("Not Supported")

        def nvmlDeviceGetDefaultApplicationsClock(self, handle, clock):
            return 1755

        def nvmlDeviceGetEnforcedPowerLimit(self, handle):
            return 700000

    monkeypatch.setattr(envinfo, "_nvml", lambda: FakeNvml())
    monkeypatch.setattr(envinfo, "_nvml_handle", lambda device: object())
    facts, note = envinfo.nvml_facts(torch.device("cuda", 0))
    assert facts == {"sm_clock_max_mhz": "1980", "sm_clock_app_mhz": "",
                     "sm_clock_default_mhz": "1755", "power_limit_w": "700"}
    assert "sm_clock_app_mhz" in note and "Not Supported" in note

    def no_nvml():
        raise RuntimeError("pynvml (nvidia-ml-py) is not installed")

    monkeypatch.setattr(envinfo, "_nvml", no_nvml)
    facts, note = envinfo.nvml_facts(torch.device("cuda", 0))
    assert set(facts.values()) == {""} and "not installed" in note


# --------------------------------------------------------------------------- stored runs
def _run(tmp_path, name, env=ENV, settings=SETTINGS, modes=("graph",), factor=None, seed=1):
    rows = resample(make_rows(ms=(1, 16)), seed, factor=factor or {})
    meta = RunMeta(matrix="synthetic", commit=env.commit, arch=env.arch, environment=env,
                   settings=settings, extra={"modes": list(modes)})
    write_run(tmp_path / name, rows, meta)
    return tmp_path / name


@pytest.fixture()
def stored(tmp_path):
    """A baseline accepted from r0 (driver 580.1) and a run r1 measured with driver 590.0."""
    accept(load_run(_run(tmp_path, "r0")), tmp_path / "baselines", S, echo=lambda s: None)
    _run(tmp_path, "r1", env=replace(ENV, driver="590.0", commit="b" * 40), seed=2)
    return tmp_path


def _report(tmp_path, run, *extra):
    return main(["report", str(tmp_path / run), "--baseline", str(tmp_path / "baselines"),
                 "--out", str(tmp_path / f"rep-{run}"), *extra])


def test_report_warns_on_the_terminal_and_in_the_report_header(stored, capsys):
    assert _report(stored, "r1") == 0
    err = capsys.readouterr().err
    assert f"harness report: {ENV_NOTE_PREFIX}{DRIVER}" in err.splitlines()
    html = (stored / "rep-r1" / "report.html").read_text()
    md = (stored / "rep-r1" / "report.md").read_text()
    assert ENV_NOTE_PREFIX + DRIVER in html and ENV_NOTE_PREFIX + DRIVER in md
    assert html.index(DRIVER) < html.index('id="regressions"')           # in the header
    assert md.index(DRIVER) < md.index("Preset `")                        # before the settings line
    assert "driver 590.0" in md and "power limit 700 W" in html   # the environment summaries


def test_report_strict_env_refuses_a_driver_mismatch_with_one_line(stored, capsys):
    assert _report(stored, "r1", "--strict-env") == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.count("\n") == 0, err
    assert err.startswith("harness report: error: refusing to compare against this baseline "
                          "(--strict-env)")
    assert DRIVER in err and not (stored / "rep-r1").exists()


def test_report_refuses_a_changed_stop_rule_but_not_a_changed_threshold(stored, capsys):
    _run(stored, "slow", settings={**SETTINGS, "max_case_seconds": 0.35}, seed=3)
    assert _report(stored, "slow") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "setting max_case_seconds differs: baseline 2.0, this run 0.35" in err
    _run(stored, "modes", modes=("cold", "graph"), seed=3)
    assert _report(stored, "modes") == 0          # other modes: judged on the common ones
    capsys.readouterr()
    _run(stored, "judged",
         settings={**SETTINGS, "min_effect": 0.5, "alpha": 0.05, "rel_err_growth": 2.0}, seed=3)
    assert _report(stored, "judged", "--strict-env") == 0
    assert "refusing" not in capsys.readouterr().err


def test_report_refuses_a_baseline_without_environment(tmp_path, capsys):
    rows = make_rows(ms=(1, 16))
    write_baseline_matrix(tmp_path / "baselines" / "sm90", rows,
                          BaselineMeta("synthetic", "sm90", Environment(), rows_sha256="",
                                       settings=SETTINGS))
    _run(tmp_path, "r1")
    assert _report(tmp_path, "r1") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no environment metadata" in err and "re-record" in err


def test_accept_warns_keeps_the_diff_and_records_modes(stored):
    out: list[str] = []
    accept(load_run(stored / "r1"), stored / "baselines", S, echo=out.append)
    assert (f"harness baseline accept: synthetic: {ENV_NOTE_PREFIX}driver differs: "
            "previous baseline 580.1, this run 590.0") in out
    assert any("changes against the previous baseline" in line for line in out)
    meta = json.loads((stored / "baselines" / "sm90" / "synthetic.json").read_text())
    assert meta["settings"]["modes"] == ["graph"] and meta["environment"]["driver"] == "590.0"
    out.clear()
    accept(load_run(_run(stored, "slow", settings={**SETTINGS, "warmup_ms": 10.0})),
           stored / "baselines", S, echo=out.append)
    text = "\n".join(out)
    assert "setting warmup_ms differs" in text and "replacing it without a diff" in text
    assert "changes against the previous baseline" not in text


def test_calibrate_refuses_aa_runs_measured_with_other_settings(stored):
    runs = [_run(stored, "aa0", seed=5),
            _run(stored, "aa1", seed=6, settings={**SETTINGS, "min_samples": 50})]
    with pytest.raises(IncompatibleBaselineError, match="setting min_samples differs"):
        calibrate(runs, stored / "baselines", S, echo=lambda s: None)


def test_compare_two_machines_of_one_model_warns_and_strict_refuses(tmp_path, capsys):
    a = _run(tmp_path, "a")
    b = _run(tmp_path, "b", env=replace(ENV, driver="590.0", host="gpu-b", gpu_uuid="GPU-bbbb",
                                        boot_id="boot-b", commit="b" * 40), seed=2)
    out: list[str] = []
    outcome = compare(str(a), str(b), S, work_dir=tmp_path / "o", repo=tmp_path, echo=out.append)
    warning = "driver differs: A side (aaaaaaaaaaaa) 580.1, B side (bbbbbbbbbbbb) 590.0"
    assert out == [f"harness compare: {ENV_NOTE_PREFIX}{warning}"]
    assert outcome.result.notes[0] == ENV_NOTE_PREFIX + warning
    with pytest.raises(IncompatibleBaselineError, match="--strict-env"):
        compare(str(a), str(b), S, work_dir=tmp_path / "o", repo=tmp_path, strict_env=True)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp"), "--strict-env"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) in (0, 1)
    assert warning in (tmp_path / "cmp" / "compare.md").read_text()
    c = _run(tmp_path, "c", settings={**SETTINGS, "target_rel_spread": 0.02})
    with pytest.raises(IncompatibleBaselineError, match="setting target_rel_spread differs"):
        compare(str(a), str(c), S, work_dir=tmp_path / "o", repo=tmp_path, echo=lambda s: None)


def test_ppl_gate_applies_the_policy(tmp_path):
    from harness.commands.ppl import _gate

    rows = make_rows(ms=(1, 16))
    write_baseline_matrix(tmp_path / "baselines" / "sm90", rows,
                          BaselineMeta("synthetic", "sm90", ENV, rows_sha256="", settings=SETTINGS))
    write_run(tmp_path / "run", rows,
              RunMeta(matrix="synthetic", environment=ENV, settings=SETTINGS))

    def gate(env, settings=S, strict=False):
        out: list[str] = []
        args = argparse.Namespace(baselines=str(tmp_path / "baselines"), paths=None,
                                  strict_env=strict)
        _gate(rows, "synthetic", tmp_path / "run", args, settings, env, "sm90", echo=out.append)
        return out

    assert f"harness ppl: {ENV_NOTE_PREFIX}{DRIVER}" in gate(replace(ENV, driver="590.0"))
    with pytest.raises(IncompatibleBaselineError, match="strict-env"):
        gate(replace(ENV, driver="590.0"), strict=True)
    with pytest.raises(IncompatibleBaselineError, match="setting warmup_ms differs"):
        gate(ENV, settings=replace(S, warmup_ms=10.0))
    lines = gate(ENV, settings=replace(S, min_effect=0.5))
    assert not any(ENV_NOTE_PREFIX in line for line in lines)


# --------------------------------------------------------------------------- harness bench
FAST = {"warmup_ms": 1, "max_case_seconds": 0.03, "min_samples": 3, "max_samples": 20,
        "target_rel_spread": 0.05}
SET = [a for k, v in FAST.items() for a in ("--set", f"{k}={v}")]


def test_bench_gate_warns_refuses_with_strict_env_and_on_a_changed_stop_rule(tmp_path, monkeypatch,
                                                                             capsys):
    monkeypatch.setenv("HARNESS_COMMIT", "policy")
    bench = ["bench", "--cpu", "--matrix", "smoke", "--filter", "M == 1", "--paths", "native_int4",
             "--out", str(tmp_path / "results"), "--baselines", str(tmp_path / "baselines"),
             "--no-progress", "--overwrite", *SET, "--set", "min_effect=100"]
    assert main(bench) == 3                 # no baseline yet: nothing to compare (exit 3)
    capsys.readouterr()
    # promote the run, then pretend the baseline was measured with another torch
    accept(load_run(tmp_path / "results" / "policy" / "cpu"), tmp_path / "baselines", S,
           echo=lambda s: None)
    meta_path = tmp_path / "baselines" / "cpu" / "smoke.json"
    meta = json.loads(meta_path.read_text())
    assert meta["settings"]["modes"] == ["cpu"] and meta["settings"]["cpu_threads"] == 1
    meta["environment"]["torch"] = "0.0.1"
    meta_path.write_text(json.dumps(meta))
    assert main(bench) == 0
    warning = f"torch differs: baseline 0.0.1, this run {torch.__version__}"
    assert f"harness bench: {ENV_NOTE_PREFIX}{warning}" in capsys.readouterr().out.splitlines()
    assert main(bench + ["--strict-env"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "(--strict-env)" in err and warning in err
    assert main(bench + ["--set", "max_samples=30"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "setting max_samples differs: baseline 20, this run 30" in err


def test_cpu_runs_on_another_processor_are_compared():
    """A committed CPU baseline must gate CI machines with other processors: their speed is
    informational there, accuracy and completeness are what CPU runs gate."""
    base = Environment(arch="cpu", gpu_name="Intel Xeon Platinum 8480", torch="2.13.0+cpu")
    cur = Environment(arch="cpu", gpu_name="AMD EPYC 9654", torch="2.13.0+cpu")
    assert check_environment(base, cur) == []
    gpu_a = Environment(arch="sm90", gpu_name="NVIDIA H200")
    with pytest.raises(IncompatibleBaselineError, match="GPU model differs"):
        check_environment(gpu_a, Environment(arch="sm90", gpu_name="NVIDIA H100 80GB HBM3"))


def test_compare_checks_each_matrix_against_its_own_recorded_environment(tmp_path, capsys):
    """A directory's matrices may come from different processes (nox's production beside
    a plain parity run): compare refuses on the matrix whose switches differ, not only on
    whichever json stands for the directory."""
    rows = make_rows(ms=(1,), peers=())
    plain = replace(ENV, extra={"tinyloop_use_marlin": ""})
    nox = replace(ENV, extra={"tinyloop_use_marlin": "1"})
    for side, prod_env in (("a", plain), ("b", nox)):
        for matrix, env in (("aaa", plain), ("production", prod_env)):
            write_run(tmp_path / side, [replace(r, matrix=matrix) for r in rows],
                      RunMeta(matrix=matrix, environment=env, settings=SETTINGS))
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "production" in err and "dispatcher switch TINYLOOP_USE_MARLIN differs" in err


def test_report_gates_each_matrix_against_its_own_environment_only(tmp_path, capsys):
    """A directory of a plain run of one matrix beside nox's run of another, each with a
    baseline recorded the same way: both are gated (neither is judged by the other's
    environment), exit 0."""
    rows = make_rows(ms=(1,), peers=())
    plain = replace(ENV, extra={"tinyloop_use_marlin": ""})
    nox = replace(ENV, extra={"tinyloop_use_marlin": "1"})
    for matrix, env in (("aaa", plain), ("production", nox)):
        mrows = [replace(r, matrix=matrix) for r in rows]
        write_run(tmp_path / "acc" / matrix / "sm90", mrows,
                  RunMeta(matrix=matrix, environment=env, settings=SETTINGS))
        assert main(["baseline", "accept", str(tmp_path / "acc" / matrix / "sm90"),
                     "--root", str(tmp_path / "b"), "--yes"]) == 0
        write_run(tmp_path / "both", mrows,
                  RunMeta(matrix=matrix, environment=env, settings=SETTINGS))
    capsys.readouterr()
    assert main(["report", str(tmp_path / "both"), "--baseline", str(tmp_path / "b"),
                 "--out", str(tmp_path / "rep")]) == 0, capsys.readouterr().err


def test_cold_sampling_budget_is_refused_where_cold_rows_are_compared_only():
    """``cold_min_samples`` changes what the cold rows hold: a run that sets it is refused by
    a baseline measured without it (an older file, without the key, counts as 0), but not
    when one side has no cold rows (a graph-only planted run, a CPU run)."""
    old = {k: v for k, v in SETTINGS.items() if k != "cold_min_samples"}
    ten = {**SETTINGS, "cold_min_samples": 10}
    both = {"modes": ["cold", "graph"]}
    _refused("setting cold_min_samples differs", "baseline 0", "this run 10", base_env=ENV,
             cur_env=ENV, base_settings=measured_settings(old, both),
             cur_settings=measured_settings(ten, both))
    assert check_environment(ENV, ENV, measured_settings(old, both),
                             measured_settings(ten, {"modes": ["graph"]})) == []
    cpu = replace(ENV, arch="cpu", gpu_name="")
    assert check_environment(cpu, cpu, measured_settings(old, {"modes": ["cpu"]}),
                             measured_settings(ten, {"modes": ["cpu"]})) == []
    # the graph timer's duty cycle, likewise, is compared only where graph rows are
    idle = {**SETTINGS, "graph_idle_ratio": 0.0}
    assert check_environment(ENV, ENV, measured_settings(SETTINGS, {"modes": ["cold"]}),
                             measured_settings(idle, {"modes": ["cold"]})) == []
    _refused("setting graph_idle_ratio differs", base_env=ENV, cur_env=ENV,
             base_settings=measured_settings(SETTINGS, both),
             cur_settings=measured_settings(idle, both))


def _cold_graph_run(path, settings, modes=("cold", "graph")):
    """A run of cold and graph rows (the same graph rows alone for a graph-only ``modes``:
    ``make_rows`` draws per mode), recorded with the ``modes`` extra ``harness bench`` writes."""
    rows = [r for r in make_rows(ms=(1, 16), peers=(), modes=("cold", "graph"))
            if r.mode in modes]
    write_run(path, rows, RunMeta(matrix="synthetic", commit=ENV.commit, arch=ENV.arch,
                                  environment=ENV, settings=settings,
                                  extra={"modes": list(modes)}))
    return path


def _accept_cold_graph(tmp_path, root, settings):
    run = _cold_graph_run(tmp_path / f"acc-{root}", settings)
    assert main(["baseline", "accept", str(run), "--root", str(tmp_path / root),
                 "--yes"]) == 0
    return tmp_path / root / "sm90" / "synthetic.json"


def test_report_refuses_a_cold_sampling_budget_against_a_baseline_recorded_before_it(
        tmp_path, capsys):
    """The real gate path (``harness report`` -> ``check_baseline_gate``) reads a stored
    baseline without ``cold_min_samples`` (recorded before the setting existed) as 0: a
    cold+graph run measured with 10 is refused with one line naming the setting, not
    silently gated against cold rows sampled another way."""
    old = {k: v for k, v in SETTINGS.items() if k != "cold_min_samples"}
    meta_path = _accept_cold_graph(tmp_path, "b", old)
    meta = json.loads(meta_path.read_text())
    # accept records the run's measured settings, defaults filled in; a baseline written
    # before the setting existed has no key: make the stored file one
    assert meta["settings"]["modes"] == ["cold", "graph"]
    assert meta["settings"].pop("cold_min_samples") == 0
    meta_path.write_text(json.dumps(meta))
    assert "cold_min_samples" not in json.loads(meta_path.read_text())["settings"]
    capsys.readouterr()
    ten = _cold_graph_run(tmp_path / "ten", {**SETTINGS, "cold_min_samples": 10})
    assert main(["report", str(ten), "--baseline", str(tmp_path / "b"),
                 "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert "setting cold_min_samples differs" in err, err
    assert "baseline 0" in err and "this run 10" in err, err
    assert not (tmp_path / "rep").exists()


def test_report_gates_a_cold_sampling_budget_where_it_matches_or_no_cold_rows_are_compared(
        tmp_path, capsys):
    """A run of ``cold_min_samples`` 10 passes against a baseline recorded with 10, and a
    graph-only run of 10 is not refused by a baseline recorded before the setting (no key,
    read as 0): the setting is compared only where both sides have cold rows."""
    ten = {**SETTINGS, "cold_min_samples": 10}
    _accept_cold_graph(tmp_path, "b10", ten)
    capsys.readouterr()
    assert main(["report", str(_cold_graph_run(tmp_path / "ten", ten)), "--baseline",
                 str(tmp_path / "b10"), "--out", str(tmp_path / "rep10")]) == 0, \
        capsys.readouterr().err
    assert "refusing" not in capsys.readouterr().err
    old = {k: v for k, v in SETTINGS.items() if k != "cold_min_samples"}
    meta_path = _accept_cold_graph(tmp_path, "b0", old)
    meta = json.loads(meta_path.read_text())
    del meta["settings"]["cold_min_samples"]          # as a file recorded before the setting
    meta_path.write_text(json.dumps(meta))
    capsys.readouterr()
    graph = _cold_graph_run(tmp_path / "graph", ten, modes=("graph",))
    assert main(["report", str(graph), "--baseline", str(tmp_path / "b0"), "--partial",
                 "--out", str(tmp_path / "rep-graph")]) == 0, capsys.readouterr().err
    assert "refusing" not in capsys.readouterr().err


def test_baseline_settings_fill_stored_defaults_and_drop_settings_of_absent_modes():
    """``baseline_settings`` reads a baseline's stored settings as ``measured_settings``
    reads a run's: a key added after it was recorded counts with its old value
    (``cold_min_samples`` 0), and a setting of a mode the baseline lacks is dropped."""
    old = {k: v for k, v in SETTINGS.items() if k != "cold_min_samples"}
    meta = BaselineMeta("synthetic", "sm90", ENV, rows_sha256="",
                        settings={**old, "modes": ["cold", "graph"]})
    assert baseline_settings(meta)["cold_min_samples"] == 0
    graph = replace(meta, settings={**old, "modes": ["graph"]})
    assert "cold_min_samples" not in baseline_settings(graph)
    assert baseline_settings(graph)["graph_idle_ratio"] == SETTINGS["graph_idle_ratio"]


def test_scoring_modes_drop_the_timers_settings():
    """``harness ppl`` records scoring modes (not timing modes): its forwards read neither
    the cold sampling budget nor the graph duty cycle, so a ppl run of ``cold_min_samples``
    10 is compared with a ppl baseline of 0 on its other settings only."""
    ten = measured_settings({**SETTINGS, "cold_min_samples": 10}, {"modes": ["model"]})
    assert "cold_min_samples" not in ten and "graph_idle_ratio" not in ten
    assert "modes" not in ten and ten["min_samples"] == SETTINGS["min_samples"]
    old = {k: v for k, v in SETTINGS.items() if k != "cold_min_samples"}
    assert check_environment(ENV, ENV, measured_settings(old), ten) == []
    _refused("setting min_samples differs", base_env=ENV, cur_env=ENV,
             base_settings=measured_settings({**old, "min_samples": 20}), cur_settings=ten)
