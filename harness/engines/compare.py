"""The A/B engine behind ``harness compare`` and ``harness job``'s confirmation: two sides
(a stored run, or a revision measured here in a git worktree), interleaved rounds of their
benches pipelined by ``bench_runner``, margins from the rounds' own spread, extra rounds
for the rows they leave undecided (their first benches started during the last round, in
its shadows' places, and given their rows when it is judged: ``pipeline.HeldBenches``),
then one gate of B against A (the command's module docstring, ``harness.commands.compare``,
says it in full). Which bench each leg runs: ``ab_legs``.

Extension point: ``runner`` (a ``revisions.BenchRunner``) measures one revision's bench.
"""


from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tqdm import tqdm

from ..config import Settings
from ..errors import CompareError
from ..reports.ab_confirm import apply_ab, record_for
from ..reports.comparison import (
    compare_runs,
    extended_margins,
    pool_rows,
    round_margins,
    undecided,
)
from ..reports.gate import stored_remeasure
from ..reports.gate_record import stored_partial
from ..reports.verdicts import GateResult
from ..results.schema import Key, ResultRow, SchemaError
from ..results.store import Run, load_run
from .ab_legs import APart, Leg, Side, a_folders, leg_request, matrices_of, selection
from .bench_runner import bench_rows
from .pipeline import HeldBenches, can_hold, run_pipelined
from .revisions import (  # noqa: F401  (BenchRequest, bench_command, GitMissing: re-exported)
    BenchRequest,
    BenchRunner,
    GitMissing,
    bench_command,
    case_filter,
    resolve_revision,
    subprocess_runner,
    worktrees,
)


@dataclass(frozen=True)
class CompareOutcome:
    result: GateResult
    a_rows: tuple[ResultRow, ...]
    b_rows: tuple[ResultRow, ...]
    a: Side
    b: Side
    #: rows measured in more rounds than ``rounds`` (undecided after them): key -> rounds
    extended: Mapping[Key, int] = field(default_factory=dict)


def resolve_side(spec: str, repo: Path) -> Side:
    if Path(spec).exists():
        try:
            run = load_run(spec)
        except SchemaError as exc:
            raise CompareError(str(exc)) from None
        return Side(spec, run.label, run=run)
    sha = resolve_revision(repo, spec)
    return Side(spec, f"{spec}@{sha[:10]}" if spec != sha else sha[:12], revision=sha)


def compare(
    a_spec: str, b_spec: str, settings: Settings, *, work_dir: Path, repo: Path = Path("."),
    matrix: str = "production", filter: str | None = None, paths: Sequence[str] = (),
    modes: Sequence[str] = (), rounds: int = 3, runner: BenchRunner = subprocess_runner,
    echo: Callable[[str], None] = print, strict_env: bool = False, confirm: bool = True,
    rows: Sequence[tuple[str, str]] = (), a_parts: Sequence[APart] = (),
    seeds: Mapping[str, Sequence[ResultRow]] | None = None, decide: Collection[Key] = (),
    worktree_of: Mapping[str, Path] | None = None,
) -> CompareOutcome:
    """Gate B against A (A is the baseline side). Measured rounds land in ``work_dir/runs``.

    Revisions are measured in worktrees (``rounds`` interleaved rounds, margins from
    their A/A spread, AMBIGUOUS rows re-measured in one more interleaved round; the
    rounds' benches pipelined by ``pipeline.run_pipelined`` when ``runner`` can:
    the next one starts up while one measures); then
    ``reports.comparison.compare_runs`` applies the environment policy and the gate.
    ``rows`` ((case_id, path) pairs, ``BenchRequest.rows``) limits each bench to those
    rows, where ``filter`` and ``paths`` would select every path on every case given (the
    AMBIGUOUS round measures exactly its rows either way).
    ``decide``: the rows whose verdicts the caller reads (``harness job``'s A/B: the rows
    it confirms); the extra rounds go to the undecided rows among them only (empty: any
    row). A bench measures more of a case than it is asked (a SwiGLU pair's derived row
    comes with the row it derives from): q4 of 2026-12-06 gave four extra rounds to an
    unasked native_int4_fused row whose verdict nothing read.
    ``a_parts`` (``APart``; A must then be a revision, and ``confirm`` False): side A
    measured at several commits, each for its own rows, every round (A's environment and
    label are the first part's); B measures all rows. One pipeline instead of one compare
    per commit: the B benches and one start-up are shared.
    ``seeds`` ({"A": rows, "B": rows}, both sides measured revisions): readings of these
    rows taken before the compare, on this machine, at each side's revision (``harness
    job`` on another GPU model: side A's are the machine factor's bench at the baseline's
    commits, side B's the job's own bench), used as round 0 of both sides: each side
    then measures ``rounds - 1`` more rounds, and its margins and pooled medians count the
    seed as one of its rounds.
    ``worktree_of`` (sha -> path): worktrees of the revisions measured that the caller
    keeps (``prestart.Prestarted``'s), used where they cover all of them.
    A stored B replays the confirmations its bench stored. ``confirm=False`` skips the
    extra round: the pooled rounds' verdicts stand (``harness job``'s A/B, where one more
    round of a path-wide regression costs ~55 s on the H200 and decides nothing new).
    """
    if rounds < 1:
        raise CompareError(f"--rounds must be >= 1, got {rounds}")
    a, b = resolve_side(a_spec, repo), resolve_side(b_spec, repo)
    if a_parts and (not a.revision or confirm):
        raise CompareError("a compare with the A side in parts needs A a revision and "
                           "confirm=False")
    seeds = dict(seeds or {})
    if seeds and (set(seeds) != {"A", "B"} or not (a.revision and b.revision)
                  or rounds < 2):
        raise CompareError("seeded rounds need both sides measured here, a seed for each "
                           "(A and B) and --rounds >= 2")
    measured = [s for s in (a, b) if s.revision]
    rounds_of: dict[str, list[list[ResultRow]]] = {"A": [], "B": []}
    firsts: dict[str, Run] = {}       # a measured side's first round: its environment and settings

    def measure(legs: Sequence[Leg], rounds_: Sequence[int], sub, pick,
                tail: Sequence[int] = ()) -> list[tuple[str, Leg, Run]]:
        """Interleaved rounds (A B, then B A, ...) of ``legs``, pipelined by
        ``pipeline.run_pipelined`` (the next bench starts up while one measures);
        ``sub(r)`` names a round's folder, ``pick(leg)`` its selection (matrices, filter,
        paths, modes, plugins, rows; None: the leg has nothing to measure). ``tail``: the
        rounds whose first benches start, without rows, in the last ones' shadows and are
        held for the extra rounds (``held``). Returns (round folder, leg, run) of every
        bench, in measuring order."""
        def order(r):
            return legs if r % 2 == 0 else legs[::-1]
        jobs = [(sub(r), leg, leg_request(work_dir, sub(r), r, leg, sel))
                for r in rounds_ for leg in order(r) if (sel := pick(leg)) is not None]
        late = [leg_request(work_dir, sub(r), r, leg, (*leg.selection()[:5], ()), late=True)
                for r in tail for leg in order(r)]
        if held is not None:
            held.keep_only(req for *_, req in jobs)
        for req in [req for *_, req in jobs] + late:
            if req.out_dir.exists() and not (held is not None and held.holds(req)):
                shutil.rmtree(req.out_dir)
        run_pipelined(
            held or runner, [req for *_, req in jobs],
            on_start=lambda i: echo(f"compare: round {jobs[i][0]}, {jobs[i][1].folder} = "
                                    f"{jobs[i][1].side.label}"),
            on_done=lambda i: progress.update(1) if progress is not None else None,
            tail=late if held is not None else (), keep=held.hold if held is not None else None)
        got = []
        for name, leg, req in jobs:
            try:
                got.append((name, leg, load_run(req.out_dir)))
            except SchemaError as exc:
                raise CompareError(f"bench of {leg.folder} round {name} left no readable "
                                   f"results: {exc}") from None
        return got

    def by_round(got, keep=lambda r: True) -> dict[str, list[list[ResultRow]]]:
        """Each side's rows per measured round (in round order), the parts of A joined,
        each part's own rows only (a bench may measure more of a case than was asked)."""
        rounds_: dict[str, dict[str, list[ResultRow]]] = {}
        for name, leg, run in got:
            rounds_.setdefault(leg.label, {}).setdefault(name, []).extend(
                r for r in run.rows
                if keep(r) and (leg.part is None or r.key in leg.part.keys))
        return {label: list(per.values()) for label, per in rounds_.items()}

    progress = None
    with contextlib.ExitStack() as stack:
        legs: list[Leg] = []
        both = bool(a.revision and b.revision)
        # the extra rounds' first benches start in the last round's shadows (``tail``)
        held = HeldBenches(runner) if both and settings.ab_extra_rounds and can_hold(runner) \
            else None
        if measured:
            shas = [s.revision for s in measured]
            parts = [replace(p, revision=resolve_revision(repo, p.revision)) for p in a_parts]
            wanted = list(dict.fromkeys(shas + [p.revision for p in parts]))
            if worktree_of and all(sha in worktree_of for sha in wanted):
                trees = dict(worktree_of)
            else:
                tmp = Path(stack.enter_context(
                    tempfile.TemporaryDirectory(prefix="harness-compare-")))
                trees = stack.enter_context(worktrees(repo.resolve(), wanted, tmp))
            if held is not None:          # its benches go before their worktrees do
                stack.callback(held.close)
            whole = (matrix, filter, tuple(paths), tuple(modes), (), tuple(rows))
            if parts:
                folders = a_folders([p.revision for p in parts])
                legs = [Leg("A", replace(a, label=a.label if i == 0 else p.revision[:12],
                                         revision=p.revision),
                            trees[p.revision], folders[i], p, whole)
                        for i, p in enumerate(parts)]
            elif a.revision:
                legs = [Leg("A", a, trees[a.revision], a_folders([])[0], None, whole)]
            if b.revision:
                legs.append(Leg("B", b, trees[b.revision], "B", None, whole))
            # one bench per leg per round: a bar with the ETA of the rounds left
            first = 1 if seeds else 0       # round 0 of a seeded compare is its seeds
            progress = stack.enter_context(tqdm(total=(rounds - first) * len(legs),
                                                unit="bench", desc="compare",
                                                dynamic_ncols=True))
            for label, seed in seeds.items():
                rounds_of[label].append(list(seed))
            got = measure(legs, range(first, rounds), lambda r: f"round{r}",
                          lambda leg: leg.selection(), tail=(rounds, rounds + 1))
            for _, leg, run in got:
                firsts.setdefault(leg.label, run)
            for label, side_rounds in by_round(got).items():
                rounds_of[label].extend(side_rounds)
            progress.close()
            progress = None
        margins: dict[Key, float] = {}
        for side_rounds in rounds_of.values():
            for k, v in round_margins(side_rounds, settings.noise_margin_floor).items():
                margins[k] = max(v, margins.get(k, 0.0))
        a_rows = pool_rows(rounds_of["A"]) if a.revision else list(a.run.rows)
        b_rows = pool_rows(rounds_of["B"]) if b.revision else list(b.run.rows)
        run_a = a.run if a.run is not None else firsts["A"]
        run_b = b.run if b.run is not None else firsts["B"]
        extended: dict[Key, int] = {}

        def extend(keys: list[Key], n: int, why: str) -> None:
            """``n`` more interleaved rounds of ``keys`` (after every round so far), their
            margins then from the rounds' means (``extended_margins``)."""
            nonlocal a_rows, b_rows
            done = len(rounds_of["B"])
            wanted, more = set(keys), range(done, done + n)
            echo(f"compare: {len(keys)} {why}: {n} more round(s) of those rows")

            def pick(leg: Leg):           # the leg's own selection, of these rows only
                mine = wanted & leg.part.keys if leg.part else wanted
                rows_ = bench_rows(r.key for r in b_rows if r.key in mine)
                return (*leg.selection()[:5], rows_) if mine else None
            got = measure(legs, more, lambda r: f"round{r}", pick)
            for label, side_rounds in by_round(got, lambda r: r.key in wanted).items():
                rounds_of[label].extend(side_rounds)
            margins.update(extended_margins(rounds_of["A"], rounds_of["B"], keys, settings))
            a_rows, b_rows = pool_rows(rounds_of["A"]), pool_rows(rounds_of["B"])
            extended.update(dict.fromkeys(keys, done + n))

        def still_open(extra: Settings, among: Collection[Key]) -> list[Key]:
            """The rows of ``among`` that ``undecided`` (with ``extra``) leaves open now."""
            now = compare_runs(a_rows, b_rows, run_a, run_b, settings, a_label=a.label,
                               b_label=b.label, margins=margins, strict_env=strict_env,
                               echo=lambda line: None)
            keys = undecided(now, extra, rounds_of["A"], rounds_of["B"])
            return [k for k in keys if k in among] if among else keys

        if both and settings.ab_extra_rounds:
            keys = still_open(settings, set(decide))
            if keys:
                extend(keys, settings.ab_extra_rounds,
                       f"undecided row(s) (moved beyond {settings.ab_screen:.1%} unconfirmed, "
                       f"or within {settings.ab_undecided_se:g} standard errors of "
                       f"{settings.min_effect:.1%})")
            if keys and settings.ab_line_rounds:
                near = still_open(replace(settings, ab_undecided_se=AT_LINE_SE), set(keys))
                if near:
                    extend(near, settings.ab_line_rounds,
                           f"row(s) still undecided after {len(rounds_of['B'])} rounds "
                           f"(within {AT_LINE_SE:g} standard error of "
                           f"{settings.min_effect:.1%}, or beyond the screen unconfirmed)")

        remeasure = None
        if both and confirm:
            def remeasure(keys: list[Key]):
                wanted = set(keys)
                chosen = [r for r in b_rows if r.key in wanted]
                sel = (matrices_of(matrix, chosen), *selection(chosen, b_rows))
                got = by_round(measure(legs, [rounds], lambda r: "remeasure",
                                       lambda leg: sel), lambda r: r.key in wanted)
                return got["A"][0], got["B"][0]
        elif b.run is not None:
            # a stored B: replay the confirmations its bench stored (same verdicts as the bench's)
            remeasure = stored_remeasure(b.run.confirmations)
        result = compare_runs(
            a_rows, b_rows, run_a, run_b, settings,
            a_label=a.label, b_label=b.label, margins=margins, a_stored=a.run is not None,
            remeasure=remeasure, strict_env=strict_env, echo=echo,
            partial=b.run is not None and stored_partial(b.run.metas),   # as its bench gated it
            notes=(f"noise margins from {rounds} interleaved rounds per side (A/A spread)"
                   + (", round 0 of each the readings taken before the A/B" if seeds
                      else ""),)
            + ((f"{len(extended)} undecided row(s) measured in "
                f"{_rounds_text(extended)} rounds, their margins the standard "
                "error of the rounds' means",) if extended else ()))
        if a.run is not None and b.run is not None:
            # a stored run against its stored baseline: replay the job's A/B readings
            for meta in b.run.metas.values():
                result = apply_ab(result, record_for(meta, a.run.environment.commit))
    return CompareOutcome(result, tuple(a_rows), tuple(b_rows), a, b, extended)


#: ``ab_line_rounds``: a row whose change is still within this many standard errors of
#: ``min_effect`` after the extra rounds gets more (p4 and r3 of 2026-12-06, H100s: three
#: 3% plants each read +1.85..1.98% after seven rounds, against unchanged rows up to +2.05%)
AT_LINE_SE = 1.0


def _rounds_text(extended: Mapping[Key, int]) -> str:
    """The rounds the extended rows were measured in: "7", or "7-11"."""
    lo, hi = min(extended.values()), max(extended.values())
    return str(lo) if lo == hi else f"{lo}-{hi}"


