"""The gate's records: ``Verdict``, one row's ``RowVerdict``, a comparison's ``GateResult``.

Torch-free data with no judging in it (that is ``harness.reports.gate``): what the
reports render, a run's json stores (``verdict_map``) and the commands print. A row
*fails* when its verdict is in ``FAILING`` and it is a path's row (not a peer's);
``PRIORITY`` orders verdicts, the first applicable one winning and regressions first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from ..config import Settings
from ..results.schema import Key, ResultRow


class Verdict(str, Enum):
    SAME = "SAME"
    FASTER = "FASTER"
    SLOWER = "SLOWER"
    AMBIGUOUS = "AMBIGUOUS"
    TIMING_NOT_COMPARABLE = "TIMING_NOT_COMPARABLE"
    WORSE_ACCURACY = "WORSE_ACCURACY"
    LESS_ACCURATE = "LESS_ACCURATE"
    NONDETERMINISTIC = "NONDETERMINISTIC"
    LOST_DISPATCH = "LOST_DISPATCH"
    WINNER_CHANGED = "WINNER_CHANGED"
    NEW = "NEW"
    MISSING = "MISSING"
    ERROR = "ERROR"

    def __str__(self) -> str:
        return self.value


#: WINNER_CHANGED fails only with ``fail_on_winner_change`` (``reports.gate.row_fails``).
FAILING = frozenset({Verdict.SLOWER, Verdict.WORSE_ACCURACY, Verdict.LESS_ACCURATE,
                     Verdict.NONDETERMINISTIC, Verdict.LOST_DISPATCH, Verdict.MISSING,
                     Verdict.ERROR, Verdict.WINNER_CHANGED})
#: The verdicts of a row's speed call (an A/B's reading is one of these).
SPEED_CALLS = frozenset({Verdict.SLOWER, Verdict.SAME, Verdict.FASTER, Verdict.AMBIGUOUS})
PRIORITY = (Verdict.ERROR, Verdict.MISSING, Verdict.WORSE_ACCURACY, Verdict.LESS_ACCURATE,
             Verdict.NONDETERMINISTIC, Verdict.LOST_DISPATCH,
             Verdict.SLOWER, Verdict.WINNER_CHANGED, Verdict.AMBIGUOUS, Verdict.FASTER,
             Verdict.TIMING_NOT_COMPARABLE, Verdict.NEW, Verdict.SAME)
RANK = {v: i for i, v in enumerate(PRIORITY)}

#: Timing modes whose speed is information unless ``gate_eager_speed`` = 1: eager GPU
#: batches (``cold``), CPU stand-ins (``cpu``) and the perplexity model's end-to-end
#: forward (``model``: hundreds of eagerly launched kernels per forward, paced by the
#: host; on two fresh H200s the same code's forwards differed by 1-6%, the fp32 reference
#: included, which no commit touches). Graph-mode rows gate speed.
HOST_PACED_MODES = ("cold", "cpu", "model")


def _speed_is_information(verdict: Verdict, mode: str, settings: Settings) -> bool:
    """A SLOWER in a host-paced mode (``HOST_PACED_MODES``) without ``gate_eager_speed``."""
    return (verdict == Verdict.SLOWER and mode in HOST_PACED_MODES
            and not settings.gate_eager_speed)


def row_fails(verdict: Verdict, role: str, mode: str, settings: Settings) -> bool:
    """Whether a row with ``verdict`` fails the gate: a ``FAILING`` verdict on a path's row
    (never a peer's), except a SLOWER whose speed is information (``HOST_PACED_MODES``)
    and a WINNER_CHANGED without ``fail_on_winner_change``."""
    if verdict == Verdict.WINNER_CHANGED and not settings.fail_on_winner_change:
        return False
    return (verdict in FAILING and role != "peer"
            and not _speed_is_information(verdict, mode, settings))


#: One line per verdict, for the reports' glossary (docs/measurement.md section 8 in full).
MEANINGS: dict[Verdict, str] = {
    Verdict.ERROR: "the row errored: a kernel's failure code, an exception, non-finite output "
                   "on fresh inputs, or a time under the datasheet floor",
    Verdict.MISSING: "ok in the baseline, absent or unavailable now",
    Verdict.WORSE_ACCURACY: "rel_err over the fp16 gate or the path's documented bound, or any "
                            "NaN/Inf output",
    Verdict.LESS_ACCURATE: "inside the bound, but rel_err or rms_ulp_p99 grew past its tolerance "
                           "over the baseline row",
    Verdict.NONDETERMINISTIC: "outputs differed between identical-input runs on a path that "
                              "promises identical bits",
    Verdict.LOST_DISPATCH: "the dispatcher chose a Marlin path in the baseline and does not now",
    Verdict.SLOWER: "the median moved up beyond max(min_effect, the row's noise margin), "
                    "significantly, confirmed by a second measurement (fails in graph mode)",
    Verdict.WINNER_CHANGED: "this path is now the fastest correct path of its shape class, "
                            "where another led outside the noise in the baseline: the "
                            "dispatch policy's winner changed (fails with "
                            "fail_on_winner_change = 1)",
    Verdict.AMBIGUOUS: "a large move the samples cannot confirm (does not fail)",
    Verdict.FASTER: "the mirror of SLOWER (does not fail)",
    Verdict.TIMING_NOT_COMPARABLE: "the two sides ran on different GPU models of one arch: the "
                                    "times are shown, not judged (does not fail); accuracy, "
                                    "NaN, dispatch and determinism verdicts still apply",
    Verdict.NEW: "no baseline row (does not fail)",
    Verdict.SAME: "nothing of the above",
}

#: The mark and the words the reports put on rows measured by CPU stand-ins of the paths.
STAND_IN_MARK = "†"
STAND_IN_NOTE = ("† CPU stand-in: on a CPU the paths run torch or emulated code in place of "
                 "their GPU kernels (each row's implementation says which); these rows check "
                 "accuracy, dispatch and completeness, and their timings are information.")


def is_stand_in(row) -> bool:
    """True for a row measured on the CPU, where every path is a stand-in for its kernel."""
    return row is not None and (row.arch == "cpu" or row.mode == "cpu")

Remeasure = Callable[
    [list[Key]], "Sequence[ResultRow] | tuple[Sequence[ResultRow], Sequence[ResultRow]]"
]


@dataclass(frozen=True)
class RowVerdict:
    """One row's verdict, the evidence, and both rows (either may be None)."""

    matrix: str
    case_id: str
    path: str
    mode: str
    role: str
    verdict: Verdict
    reasons: tuple[str, ...]
    fails: bool
    current: ResultRow | None
    baseline: ResultRow | None
    base_median_us: float = math.nan
    cur_median_us: float = math.nan
    time_change: float = math.nan      # cur / base - 1 of the medians
    p_value: float = math.nan
    threshold: float = math.nan        # max(min_effect, margin)
    margin: float = math.nan           # the calibrated per-case noise margin, if any
    delta_rel_err: float = math.nan
    delta_rms_ulp_p99: float = math.nan  # the gated ULP figure (rms_ulp_p99: cur - base)
    delta_max_ulp: float = math.nan      # per-element ULPs: detail, not gated
    delta_p99_ulp: float = math.nan
    ppl_drift: float = math.nan        # cur.ppl / base.ppl - 1 for kind == "ppl"
    remeasured: bool = False
    first_verdict: str = ""            # before the re-measurement (when ``remeasured``)
    first_change: float = math.nan     # its time_change
    nondeterministic: bool = False     # the current row's outputs differed between runs

    @property
    def key(self) -> Key:
        return (self.case_id, self.path, self.mode)

    @property
    def row(self) -> ResultRow:
        """The current row, else the baseline's (for identity columns)."""
        if self.current is not None:
            return self.current
        return self.baseline  # type: ignore[return-value]

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


@dataclass(frozen=True)
class GateResult:
    """All verdicts of one comparison, regressions first."""

    verdicts: tuple[RowVerdict, ...]
    settings: Settings
    current_label: str = "current"
    baseline_label: str = "baseline"
    has_baseline: bool = True
    notes: tuple[str, ...] = ()
    #: the fresh current-side rows the re-measurement returned (stored with the run, so a
    #: later ``harness report`` replays them and reaches the same verdicts)
    remeasured: tuple[ResultRow, ...] = ()

    @property
    def failures(self) -> list[RowVerdict]:
        return [v for v in self.verdicts if v.fails]

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def counts(self) -> dict[Verdict, int]:
        out = {v: 0 for v in PRIORITY}
        for rv in self.verdicts:
            out[rv.verdict] += 1
        return out

    def of(self, verdict: Verdict) -> list[RowVerdict]:
        return [v for v in self.verdicts if v.verdict == verdict]


def verdict_map(result: GateResult) -> dict[str, str]:
    """``"case|path|mode" -> verdict`` (with ``matrix|`` in front when the result holds
    several matrices): what a bench stores so later readings can be checked against it."""
    many = len({v.matrix for v in result.verdicts}) > 1
    return {("|".join((v.matrix, *v.key)) if many else "|".join(v.key)): v.verdict.value
            for v in result.verdicts}
