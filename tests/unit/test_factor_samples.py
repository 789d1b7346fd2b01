"""scripts/factor_samples.py: the machine factor's benches replayed at fewer samples a row
from the stored foreign jobs of docs/data (docs/measurement.md §16.20), and the setting's
floor that replay showed (``projection_min_samples`` 0 or >= 5)."""

from __future__ import annotations

import sys
import tarfile
from dataclasses import replace

import device_archives as da
import pytest

from harness.config import MIN_TEST_SAMPLES, ConfigError, Settings, load_settings
from harness.measure.timing import StopRule
from harness.results.schema import ResultRow

sys.path.insert(0, str(da.ROOT / "scripts"))
import factor_samples  # noqa: E402

ARCHIVES = {"t": "h100-2026-12-06-t", "u": "h100-2026-12-06-u", "v": "h100-2026-12-06-v",
            "w": "h100-2026-12-06-w", "x": "h100-2026-12-06-x", "a": "h100-2026-12-07-a",
            "y": "h100-2026-12-07-y"}
#: the foreign jobs whose stored screen the current code reproduces (t2 on: the two-sided
#: screen of 962674c; t1 and the sessions before screened one-sided)
RUNS = {"t": ["t2/foreign/962674c11f31"],
        "u": [f"u{i}/{j}" for i, j in ((1, "foreign/4854efc26822"),
                                       (1, "regressforeign/2591a4e3b13b"),
                                       (2, "foreign/4854efc26822"),
                                       (2, "regressforeign/9ab85caf6ca0"),
                                       (3, "foreign/4854efc26822"))],
        "v": ["v2/foreign/1a6ecf6a5b9a", "v2/foreign2/1a6ecf6a5b9a"],
        "w": ["w1/foreign/1768dae60946", "w1/foreign2/1768dae60946"],
        "x": ["x1/foreign/890e885d3286", "x1/foreign2/890e885d3286",
              "x1/regressforeign/0afcb3933adf"],
        "a": ["a1/foreign/f380eb5c78ca", "a1/foreign2/f380eb5c78ca"],
        "y": ["y1/foreign/890e885d3286", "y1/regressforeign/f9c4e1c79d8e"]}


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """The seven archives unpacked (runs only: no baselines needed), by letter."""
    out = {}
    for letter, top in ARCHIVES.items():
        where = tmp_path_factory.mktemp(top)
        with tarfile.open(da.DATA / f"{top}.tar.gz") as tar:
            tar.extractall(where, filter="data")
        out[letter] = where / top
    return out


def _folders(stored) -> list[str]:
    return [str(stored[k] / run / "sm90") for k, runs in RUNS.items() for run in runs]


def test_at_five_samples_the_screen_sends_what_it_sent_and_loses_no_slowdown(stored, capsys):
    """17 foreign jobs (H100s, 2026-12-06/07), each replayed first at its own minimum (10),
    which must give the stored screen, then at 5: about as many rows sent (538 -> 558),
    no real slowdown left unsent, one real gain (x1's gsplit M256-N2048-K8192-g128, a
    -2% row another run already left to the projection), 45% fewer samples."""
    assert factor_samples.main(_folders(stored)) == 0
    out = capsys.readouterr().out
    assert out.count("(the same set;") == 17 and "DIFFERS" not in out
    assert ("17 of 17 runs replayed to their stored screen; over those: rows sent 538 -> 558 "
            "at 5 samples, real changes no longer sent: 0 SLOWER, 1 FASTER; factor samples "
            "40133 -> 22039") in out
    assert ("  no longer sent: production M256-N2048-K8192-g128-s0|marlin_asym|graph "
            "(A/B: FASTER)") in out


def test_below_five_the_screen_goes_blind(stored, capsys):
    """At 4 samples the Mann-Whitney test has too few a side: no factor row can read
    SLOWER or FASTER, only whole-path moves are sent, and real changes go unsent. Hence
    the setting's floor (next test)."""
    assert factor_samples.main([*_folders(stored), "--min-samples", "4"]) == 0
    out = capsys.readouterr().out
    assert ("rows sent 538 -> 304 at 4 samples, real changes no longer sent: 1 SLOWER, "
            "87 FASTER") in out


def test_a_run_screened_by_older_rules_is_reported_and_not_counted(stored, capsys):
    """t1 (6de0b5d2b69a) was screened one-sided, before 962674c: the replay at its own
    minimum does not give its stored screen, which the script says, exiting 1."""
    assert factor_samples.main([str(stored["t"] / "t1/foreign/6de0b5d2b69a/sm90")]) == 1
    out = capsys.readouterr().out
    assert "stored screen 13 rows, replay at 10: 21 (DIFFERS" in out
    assert "0 of 1 runs replayed to their stored screen" in out


def _row(samples: list[float]) -> ResultRow:
    row = ResultRow(matrix="m", case_id="c", path="p", mode="graph", M=1, N=1, K=1,
                    group_size=1, seed=0, kind="gemm", status="ok")
    return replace(row, samples_us=";".join(f"{x:.4f}" for x in samples),
                   n_samples=len(samples), time_us_median=sorted(samples)[len(samples) // 2])


def test_the_replay_stops_where_the_bench_would_have():
    """The first count from the minimum at which the stop rule holds; None where the
    stored samples end first (the row keeps them all)."""
    rule = StopRule.from_settings(replace(Settings(preset="default"), min_samples=5))
    tight = [100.0, 100.1, 99.9, 100.0, 100.2, 100.1, 100.0, 99.8, 100.0, 100.1]
    assert factor_samples.replayed(_row(tight), rule).n_samples == 5
    loose = [100.0, 140.0, 70.0, 130.0, 60.0, 150.0, 100.0]
    assert factor_samples.replayed(_row(loose), rule) is None


@pytest.mark.parametrize("value", [1, 2, 3, 4])
def test_projection_min_samples_below_the_tests_minimum_is_refused(value):
    with pytest.raises(ConfigError, match=r"'projection_min_samples' must be 0 or >= 5 .*got "
                       + str(value)):
        load_settings(overrides={"projection_min_samples": str(value)})


@pytest.mark.parametrize("value", [0, MIN_TEST_SAMPLES, 10])
def test_projection_min_samples_zero_or_from_five_is_taken(value):
    assert load_settings(overrides={"projection_min_samples": value}).projection_min_samples \
        == value
