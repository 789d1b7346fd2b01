"""Perplexity per path: score one held-out sequence through every mode, drift, result rows.

A *subject* is something to score: the fixture (``FixtureSubject``) or a local Hugging Face
model (``harness.model.hf.HfSubject``). For each mode (``reference``, every registered path
forced, ``dispatch``, ``dispatch_pair``; see ``quant_linear``) a fresh model instance is
built, the sequence is scored teacher-forced (PPL = exp(mean NLL)), the dispatch report
is taken from that one forward, and (optionally) the end-to-end forward is timed with
``harness.measure.timing`` (CUDA events on a GPU, perf_counter on a CPU).

Drift is relative: ``ppl_drift_vs_native = ppl / ppl[native_int4] - 1`` and
``ppl_drift_vs_reference = ppl / ppl[reference] - 1`` (the seed's 8.9157 vs 8.9755 is a
drift of -0.67 % vs native). Rows are ``ResultRow(kind="ppl", mode="model")`` with
``case_id`` ``ppl-fixture-g128`` / ``ppl-fixture-row`` (``ppl-hf-<dir>`` for a HF model),
``path`` = the mode, ``M`` = scored positions (BT), ``N`` = vocab, ``K`` = d_model,
``group_size`` = 128, or K (= d_model) for per-row.

``write_cpu_baseline`` scores the committed fixture on the CPU and writes
``cpu_baseline.json``, which ``tests/unit/test_model_cpu.py`` compares against.
"""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.config import load_settings
from harness.kernels.base import KernelReturnCode
from harness.measure.timing import StopRule, make_timer, time_batches
from harness.results.schema import ResultRow

from .fixture import FIXTURE_DIR, VARIANTS, Fixture, load_fixture
from .quant_linear import (
    DISPATCH_MODES,
    FLOAT,
    REFERENCE,
    DispatchReport,
    PathUnavailable,
    QuantRuntime,
    known_modes,
)

BASELINE_FILE = "cpu_baseline.json"
CPU_BASELINE_MODES = (REFERENCE, "native_int4", "marlin_asym", "dispatch", "dispatch_pair")
CPU_BASELINE_TOLERANCE = 2e-4   # relative PPL; covers BLAS/thread-count rounding between CPUs


def default_modes() -> list[str]:
    """reference, every registered path, then dispatch and dispatch_pair (not dispatch_off:
    with Marlin off every call is native INT4, the same numbers as the native_int4 row)."""
    return [m for m in known_modes() if m not in ("dispatch_off", FLOAT)]


@dataclass(frozen=True)
class PplResult:
    """One (subject, mode) score."""

    case_id: str
    mode: str
    status: str                      # ok | error | unavailable
    error: str = ""
    ppl: float = math.nan
    nll: float = math.nan
    n_tokens: int = 0
    role: str = "path"
    implementation: str = ""
    report: DispatchReport | None = None
    timing: object = None            # harness.measure.timing.TimingResult or None


class FixtureSubject:
    """The committed (or a given) fixture variant, scored on its stored held-out sequence."""

    def __init__(self, fixture: Fixture, tokens: torch.Tensor | None = None) -> None:
        self.fixture = fixture
        self.tokens = fixture.heldout if tokens is None else torch.as_tensor(tokens).long()
        self.case_id = fixture.case_id
        cfg = fixture.config
        gs = VARIANTS[fixture.variant]
        self.shape = dict(M=self.tokens.numel() - 1, N=cfg.vocab, K=cfg.d_model,
                          group_size=cfg.d_model if gs is None else gs,
                          seed=int(fixture.meta.get("corpus", {}).get("seed", 0)))
        self.tags = f"fixture;{fixture.variant};trained-on-{fixture.trained_on}"

    def build(self, runtime: QuantRuntime):
        if runtime.mode == FLOAT:
            raise PathUnavailable("float: the fixture stores quantized weights only (its "
                                  "reference is the exactly dequantized weights)")
        return self.fixture.model(runtime)

    def nll(self, model) -> tuple[float, int]:
        return model.nll(self.tokens)

    def forward(self, model) -> Callable[[], object]:
        inp = self.tokens[:-1].to(model.head.device)[None]

        def step() -> object:
            with torch.no_grad():
                return model(inp)

        return step


def _timing(step: Callable[[], object], device: torch.device, settings=None):
    rule = StopRule.from_settings(settings or load_settings())
    mode = "cold" if device.type == "cuda" else "cpu"
    timer = make_timer(mode, lambda i: step(), 1, device)
    return time_batches(timer, rule, mode=mode)


def score_subject(subject, modes: Sequence[str], device: torch.device | str, *,
                  timing: bool = False, capability: tuple[int, int] | None = None,
                  allow_sm90: bool | None = None, settings=None,
                  log: Callable[[str], None] | None = None) -> list[PplResult]:
    """Score ``subject`` once per mode (a fresh model each); never raises for a path's failure."""
    device = torch.device(device)
    out: list[PplResult] = []
    for mode in modes:
        base = dict(case_id=subject.case_id, mode=mode)
        try:
            runtime = QuantRuntime(mode, device, capability=capability, allow_sm90=allow_sm90)
            model = subject.build(runtime)
        except PathUnavailable as exc:
            out.append(PplResult(status="unavailable", error=str(exc), **base))
            if log:
                log(format_result(out[-1]))
            continue
        role = runtime.path.role if runtime.path is not None else "path"
        try:
            runtime.reset_calls()
            nll, n = subject.nll(model)
            report = runtime.report()
            tres = _timing(subject.forward(model), device, settings) if timing else None
            res = PplResult(status="ok", ppl=math.exp(nll), nll=nll, n_tokens=n, role=role,
                            implementation=runtime.implementation(), report=report, timing=tres,
                            **base)
        except (KernelReturnCode, RuntimeError, ValueError) as exc:
            msg = " ".join(str(exc).split())[:300]
            res = PplResult(status="error", error=f"{type(exc).__name__}: {msg}", role=role,
                            implementation=runtime.implementation(), **base)
        out.append(res)
        if log:
            log(format_result(res))
        del model, runtime
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def drifts(results: Sequence[PplResult]) -> dict[str, tuple[float, float]]:
    """mode -> (drift vs native_int4, drift vs the reference), NaN where a side is missing.
    The reference is the float model where the subject has one (``float``: a real model's
    own weights), else ``reference`` (the exactly dequantized INT4 weights); the float row
    itself has no drift vs native INT4 (it is not a quantized path)."""
    ok = {r.mode: r.ppl for r in results if r.status == "ok"}
    nat = ok.get("native_int4", math.nan)
    ref = ok.get(FLOAT, ok.get(REFERENCE, math.nan))
    return {m: (math.nan if m == FLOAT else p / nat - 1.0, p / ref - 1.0)
            for m, p in ok.items()}


def format_result(r: PplResult) -> str:
    if r.status != "ok":
        return f"{r.case_id:18s} {r.mode:18s} {r.status.upper()}: {r.error}"
    rep = r.report
    t = f"  forward {r.timing.median_us / 1e3:.2f} ms" if r.timing is not None else ""
    extra = ""
    if rep is not None:
        extra = f"  calls {rep.calls_text()}"
        if r.mode in DISPATCH_MODES:
            extra += f"  packed {rep.packed}/{rep.weights} ({rep.pack_bytes / 1e6:.2f} MB)"
    return f"{r.case_id:18s} {r.mode:18s} PPL {r.ppl:10.5f}{t}{extra}"


def to_rows(subject, results: Sequence[PplResult], *, device: torch.device, commit: str = "",
            arch: str = "", device_name: str = "", matrix: str = "ppl") -> list:
    """ResultRows (kind "ppl", mode "model") for ``results``."""
    d = drifts(results)
    rows = []
    for r in results:
        f = dict(matrix=matrix, case_id=r.case_id, path=r.mode, mode="model", kind="ppl",
                 tags=subject.tags, role=r.role, implementation=r.implementation, arch=arch,
                 device_name=device_name, commit=commit, status=r.status, error=r.error,
                 **subject.shape)
        if r.status == "ok":
            dn, dr = d[r.mode]
            f.update(ppl=r.ppl, ppl_drift_vs_native=dn, ppl_drift_vs_reference=dr)
            if r.report is not None:
                f.update(dispatch_path=r.report.calls_text(),
                         fallback_reason=r.report.fallbacks_text(),
                         extra_bytes=r.report.extra_bytes,
                         prepare_seconds=r.report.prepare_seconds)
            if r.timing is not None:
                s = r.timing.stats
                f.update(time_us_median=s.median, time_us_iqr=s.iqr, time_us_ci_lo=s.ci_lo,
                         time_us_ci_hi=s.ci_hi, n_samples=s.n,
                         samples_us=";".join(f"{x:.3f}" for x in r.timing.samples_kept),
                         clock_start_mhz=r.timing.clock_start_mhz,
                         clock_end_mhz=r.timing.clock_end_mhz,
                         clock_dropped=r.timing.clock_dropped)
        rows.append(ResultRow(**f))
    return rows


def swiglu_summary(results: Sequence[PplResult]) -> str | None:
    """One line comparing the fused native SwiGLU (dispatch) with the Marlin pair
    (dispatch_pair)."""
    by = {r.mode: r for r in results if r.status == "ok"}
    a, b = by.get("dispatch"), by.get("dispatch_pair")
    if a is None or b is None:
        return None
    line = (f"{a.case_id}: SwiGLU Marlin pair vs fused native: PPL {b.ppl:.5f} vs {a.ppl:.5f} "
            f"({b.ppl / a.ppl - 1:+.3%})")
    if a.timing is not None and b.timing is not None:
        ta, tb = a.timing.median_us, b.timing.median_us
        line += f"; forward {tb / 1e3:.3f} ms vs {ta / 1e3:.3f} ms ({tb / ta - 1:+.1%})"
    return line


# ---------------------------------------------------------------------------- CPU baseline
def cpu_scores(directory: Path | str | None = None, variants: Sequence[str] = tuple(VARIANTS),
               modes: Sequence[str] = CPU_BASELINE_MODES) -> dict:
    """{variant: {mode: {"ppl", "calls", "fallbacks", "packed"}}} scored on the CPU."""
    out: dict = {}
    for variant in variants:
        fx = load_fixture(variant, directory)
        res = score_subject(FixtureSubject(fx), modes, torch.device("cpu"))
        entry = {}
        for r in res:
            if r.status != "ok":
                raise RuntimeError(f"{fx.case_id} {r.mode}: {r.status}: {r.error}")
            entry[r.mode] = {"ppl": r.ppl, "calls": dict(r.report.calls),
                             "fallbacks": dict(r.report.fallbacks), "packed": r.report.packed}
        out[variant] = entry
    return out


def write_cpu_baseline(directory: Path | str | None = None) -> Path:
    """Score the fixture in ``directory`` on the CPU and write ``cpu_baseline.json`` beside it."""
    directory = Path(directory) if directory is not None else FIXTURE_DIR
    shas = {v: load_fixture(v, directory).meta["variants"][v].get("sha256", "") for v in VARIANTS}
    doc = {
        "note": ("expected CPU perplexities of this fixture (reference, native_int4 stand-in, "
                 "marlin_asym emulation, dispatch modes modelling SM 8.9); written by "
                 "harness.model.ppl.write_cpu_baseline, read by tests/unit/test_model_cpu.py"),
        "command": ("python -c 'from harness.model.ppl import write_cpu_baseline; "
                    "write_cpu_baseline()'"),
        "fixture_sha256": shas,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "tolerance_rel": CPU_BASELINE_TOLERANCE,
        "scores": cpu_scores(directory),
    }
    path = directory / BASELINE_FILE
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return path
