"""Open the HTML report, the fleet page of ``harness merge`` and the history page in headless
Chromium: the regression summary, the tables and the SVG plots must be in the rendered DOM,
and screenshots are kept as test artifacts (``artifacts/html_report.png``,
``artifacts/fleet_report.png``, ``artifacts/history.png``, git-ignored). Skipped, with the
reason, without Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from fleet_runs import ENVS, REAL_GPUS, real_bisect_history, real_fleet, write_fleet

from harness.cli import main
from harness.config import load_settings
from harness.reports.gate import evaluate
from harness.reports.history import build_history
from harness.reports.history_html import write_history
from harness.reports.render import write_reports
from harness.reports.steps import detect_steps
from harness.reports.synthetic import make_rows, resample
from harness.results.catalog import stored_runs
from harness.results.environment import Environment
from harness.results.store import RunMeta, write_run

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]


def _chromium() -> str | None:
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    base = make_rows(shapes=((2048, 2048, 128), (6144, 2048, 2048)), ms=(1, 16, 64, 256),
                     modes=("graph", "cold"), seed=21)
    cur = resample(base, seed=22, factor={"marlin_asym": 1.06})
    key = ("M16-N2048-K2048-g128-s0", "fp16_cache", "graph")
    cur = [replace(r, rel_err=3e-3) if r.key == key else r for r in cur]
    result = evaluate(cur, base, load_settings(), current_label="synthetic current",
                      baseline_label="synthetic baseline")
    out = tmp_path_factory.mktemp("html")
    files = write_reports(result, out, "report", rows=cur,
                          current_env=Environment(arch="sm90", gpu_name="synthetic H200"))
    return files.html, result


def _run(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def browser() -> str:
    """The Chromium executable; the test skips, saying how to install it, when there is none."""
    found = _chromium()
    if found is None:
        pytest.skip("Chromium not installed (/usr/bin/chromium or chromium on PATH); "
                    "install it with `apt-get install -y chromium`")
    return found


def test_report_renders_in_headless_chromium(browser, report, tmp_path):
    html_path, result = report
    url = html_path.resolve().as_uri()

    dom = _run(browser, tmp_path / "profile-dom", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    summary = re.search(r'<div class="banner fail" id="gate-status">([^<]*)</div>', text)
    assert summary, "regression summary banner missing from the rendered DOM"
    assert f"FAIL ({len(result.failures)} regressions)" in summary.group(1)
    regressions = text[text.index('id="regressions"'):text.index('id="tables"')]
    assert "WORSE_ACCURACY" in regressions and "SLOWER" in regressions
    assert text.count("<table") >= 3  # regressions, one matrix, crossover
    assert "fastest correct path" in text
    assert text.count("<svg") == 5 and text.count("</svg>") == 5
    assert "TFLOPS" in text and "roofline" in text

    _screenshot(browser, tmp_path, url, "html_report.png", height=4000)
    shutil.copy(html_path, ARTIFACTS / "html_report.html")


def test_cpu_report_shows_stand_in_labels_and_the_glossary_link(browser, tmp_path):
    """A CPU run's report in Chromium: every path marked as a CPU stand-in, the note saying
    what that means, and a link from the top of the page to the verdicts explained."""
    rows = make_rows(ms=(1, 16), cpu=True, seed=5)
    result = evaluate(rows, [], load_settings(), current_label="cpu run")
    files = write_reports(result, tmp_path / "out", "report", rows=rows,
                          current_env=Environment(arch="cpu", gpu_name="cpu"))
    dom = _run(browser, tmp_path / "profile", "--dump-dom", files.html.resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    note = re.search(r'<span id="stand-in-note">([^<]*)</span>', text)
    assert note and "CPU stand-in" in note.group(1)
    assert text.count("native_int4 †") >= 2 and "fp16_cache †" in text
    assert '<a href="#glossary">Verdicts explained</a>' in text
    glossary = text[text.index('id="glossary"'):]
    for verdict in ("LESS_ACCURATE", "LOST_DISPATCH", "AMBIGUOUS", "NEW"):
        assert verdict in glossary
    md = files.markdown.read_text()
    assert "CPU stand-in" in md and "Verdicts explained" in md


def _merged_dom(browser: str, tmp_path: Path, exit_code: int) -> tuple[str, str]:
    """`harness merge` of ``tmp_path/fleet`` against ``tmp_path/baselines`` (asserting its
    exit code), then the page's DOM as Chromium renders it; returns (DOM, page URL)."""
    out = tmp_path / "merged"
    assert main(["merge", str(tmp_path / "fleet"), "--baseline", str(tmp_path / "baselines"),
                 "--out", str(out)]) == exit_code
    url = (out / "index.html").resolve().as_uri()
    dom = _run(browser, tmp_path / "profile-dom", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout, url


def _screenshot(browser: str, tmp_path: Path, url: str, name: str, height: int = 3000) -> bytes:
    """A 1400 x ``height`` screenshot of ``url`` kept as ``artifacts/<name>``, checked to be
    a PNG of that size that is not blank; its bytes."""
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / name
    if shot.exists():
        shot.unlink()
    run = _run(browser, tmp_path / "profile-shot", f"--screenshot={shot}",
               f"--window-size=1400,{height}", "--hide-scrollbars", url)
    assert run.returncode == 0, run.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")) == \
           (1400, height)
    assert len(data) > 50_000  # a blank page compresses to a few KB
    return data


def test_fleet_page_renders_in_headless_chromium(browser, tmp_path):
    """`harness merge`'s index.html in Chromium: the fleet's exit code, one section per arch,
    the machines, the summary table and the winners side by side in the rendered DOM, and
    a screenshot (``artifacts/fleet_report.png``) that is not blank."""
    write_fleet(tmp_path)
    text, url = _merged_dom(browser, tmp_path, 1)
    status = re.search(r'<div class="banner fail" id="fleet-status">([^<]*)</div>', text)
    assert status and status.group(1).startswith("exit 1 (a failing verdict)")
    sections = re.findall(r'<section class="arch" id="arch-([^"]+)">', text)
    assert sections == ["cpu", "sm89", "sm90"]
    machines = text[text.index('id="machines"'):text.index('id="summary"')]
    for env in ENVS.values():
        assert env.host in machines and env.driver in machines
    assert ENVS["sm89"].gpu_uuid in machines and ENVS["sm90"].gpu_name in machines
    summary = text[text.index('id="summary"'):text.index('id="winners"')]
    assert "marlin_asym" in summary and "SLOWER" in summary and "failing" in summary
    winners = text[text.index('id="winners"'):text.index('id="arch-cpu"')]
    assert "sm89 @ lab-a" in winners and "sm90 @ lab-b" in winners
    assert "fp16_cache" in winners and "native_int4" in winners
    sm89 = text[text.index('id="arch-sm89"'):text.index('id="arch-sm90"')]
    assert sm89.count(">SLOWER<") >= 6                  # the failing rows of that run
    _screenshot(browser, tmp_path, url, "fleet_report.png")


def test_real_fleet_page_renders_in_headless_chromium(browser, tmp_path):
    """Issue #19's acceptance: `harness merge` of three real result directories (two H200
    runs from separate device calls, tests/fixtures/h200-fleet.tar.gz, and a CPU run made
    here) opened in Chromium: exit 0, a section per arch, both machines, the summary table;
    a screenshot is kept (``artifacts/fleet_real.png``)."""
    real_fleet(tmp_path)
    text, url = _merged_dom(browser, tmp_path, 0)
    status = re.search(r'<div class="banner [a-z]+" id="fleet-status">([^<]*)</div>', text)
    assert status and status.group(1).startswith("exit 0"), status
    assert re.findall(r'<section class="arch" id="arch-([^"]+)">', text) == ["cpu", "sm90"]
    machines = text[text.index('id="machines"'):text.index('id="summary"')]
    assert all(uuid in machines for uuid in REAL_GPUS.values()) and "NVIDIA H200" in machines
    summary = text[text.index('id="summary"'):text.index('id="winners"')]
    for path in ("fp16_cache", "marlin_asym", "native_int4"):
        assert path in summary
    assert "SAME" in summary and "failing" in summary   # arch x machine x path x verdict
    _screenshot(browser, tmp_path, url, "fleet_real.png")


def _history_dom(browser: str, tmp_path: Path, html: Path) -> tuple[str, list[str]]:
    """The history page's DOM in Chromium and the cells of its one step row (asserted)."""
    dom = _run(browser, tmp_path / "profile", "--dump-dom", html.resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    table = text[text.index('id="steps-table"'):text.index('id="plots"')]
    step_rows = re.findall(r'<tr class="step">(.*?)</tr>', table, re.S)
    assert len(step_rows) == 1
    return text, re.findall(r"<td[^>]*>(.*?)</td>", step_rows[0], re.S)


def test_history_page_renders_in_headless_chromium(browser, tmp_path):
    """The history page in Chromium: the steps table with the planted step (commit, rows,
    size, verdict), one plot per (matrix, path, mode), gaps with their reasons; a
    screenshot is kept (``artifacts/history.png``)."""
    shas = [f"{i:x}" * 40 for i in range(1, 9)]
    base = make_rows(ms=(1, 16, 64), seed=3, paths=("fp16_cache", "marlin_asym"), peers=())
    root = tmp_path / "results"
    for i, sha in enumerate(shas):
        if i == 2:
            continue                                  # a commit without a stored run
        rows = resample(base, seed=40 + i, factor={"fp16_cache": 1.05 if i >= 5 else 1.0})
        env = Environment(arch="sm90", gpu_name="synthetic H200", commit=sha[:12])
        write_run(root / sha[:12] / "sm90", rows,
                  RunMeta(matrix="synthetic", commit=sha[:12], arch="sm90", environment=env))
    settings = load_settings()
    history = build_history([(s, f"commit {i}") for i, s in enumerate(shas)],
                            stored_runs(root, "sm90"), arch="sm90", floor=0.01)
    files = write_history(history, detect_steps(history, settings), settings, tmp_path / "h")
    text, cells = _history_dom(browser, tmp_path, files.html)
    assert cells[0] == "5" and shas[5][:10] in cells[1] and cells[3] == "time"
    assert cells[5] == "fp16_cache" and cells[7] == "6 of 6" and cells[9] == "SLOWER"
    assert cells[8].startswith("+5.")
    assert text.count("<svg") == 2 and text.count("</svg>") == 2
    gaps = text[text.index('id="gaps-table"'):]
    assert gaps.count("no stored run of this commit") == 2       # both groups, commit 2
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "history.png"
    run = _run(browser, tmp_path / "profile-shot", f"--screenshot={shot}",
               "--window-size=1300,2000", "--hide-scrollbars", files.html.resolve().as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_real_h200_history_page_renders_in_headless_chromium(browser, tmp_path):
    """Issue 20's acceptance page: the history of the bisect acceptance chain run on an H200
    (tests/fixtures/h200-bisect.tar.gz), drawn from its 8 stored runs, in Chromium: one
    step, at the planted commit (index 5), fp16_cache graph, SLOWER; one plot of the
    group; no gaps (every commit has its run)."""
    history, steps, line, _, _ = real_bisect_history(tmp_path / "data")
    [planted] = [sha for sha, subject in line if "planted" in subject]
    files = write_history(history, steps, load_settings(), tmp_path / "h")
    text, cells = _history_dom(browser, tmp_path, files.html)
    assert cells[0] == "5" and planted[:10] in cells[1] and cells[3] == "time"
    assert cells[5] == "fp16_cache" and cells[9] == "SLOWER" and cells[8].startswith("+")
    assert text.count("<svg") == 1 and "no stored run of this commit" not in text
    _screenshot(browser, tmp_path, files.html.resolve().as_uri(), "history_h200.png")
