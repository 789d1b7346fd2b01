"""``harness ppl``: perplexity of the looped-transformer fixture (or a local HF model) per path.

Scores the fixture's held-out sequence (1024 predicted tokens) through ``reference`` (fp32
on the exactly dequantized weights), every registered GEMM path forced for the whole
model, ``dispatch`` (TinyLoop's quant_gemm with Marlin on, SwiGLU as the fused native
kernel TinyLoop runs today) and ``dispatch_pair`` (SwiGLU as a Marlin pair); prints PPL,
drift vs native INT4 and vs the reference, end-to-end forward time, calls per path,
fallback reasons and the Marlin pack's memory. Writes ``<out>/<commit>/<arch>/ppl.csv`` (and
``ppl.json``), then gates the rows against ``<baselines>/<arch>/ppl.csv`` like ``harness
bench`` (a candidate baseline is written when there is none).

On a CPU the dispatch modes model an SM 8.9 GPU with Marlin emulated (labelled in the
rows). On SM 9.0 TinyLoop's dispatcher refuses Marlin; ``--marlin-sm90`` (or
``HARNESS_MARLIN_SM90=1``) is the harness's opt-in that lets it dispatch there.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    from harness.reports.environment import STRICT_ENV_HELP

    p = sub.add_parser("ppl", help="perplexity drift per GEMM path on the fixture or a local HF model",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fixture", default="all", choices=("g128", "row", "all"),
                   help="fixture variant (default all)")
    p.add_argument("--fixture-dir", default=None, help="fixture folder (default harness/model/fixtures)")
    p.add_argument("--paths", default=None,
                   help="comma list of modes: reference, path names, dispatch, dispatch_off, "
                        "dispatch_pair (default: all but dispatch_off)")
    p.add_argument("--hf-model", default=None, metavar="DIR",
                   help="score a local Hugging Face causal LM instead (offline; needs --text)")
    p.add_argument("--text", default=None, metavar="FILE", help="UTF-8 text to score with --hf-model")
    p.add_argument("--max-tokens", type=int, default=1025, help="tokens of --text to score (default 1025)")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even if a GPU is visible")
    p.add_argument("--timing", choices=("auto", "on", "off"), default="auto",
                   help="time the end-to-end forward (auto: on a GPU only)")
    p.add_argument("--marlin-sm90", action="store_true",
                   help="let the dispatcher use Marlin on SM 9.0 (the harness's opt-in)")
    p.add_argument("--out", default="results", help="results root (default results/)")
    p.add_argument("--baselines", default="baselines", help="baselines root (default baselines/)")
    p.add_argument("--no-compare", action="store_true", help="do not gate against the baseline")
    p.add_argument("--strict-env", action="store_true", help=STRICT_ENV_HELP)
    p.add_argument("--overwrite", action="store_true", help="replace an existing ppl.csv")
    p.add_argument("--preset", default=None, help="settings preset (gate tolerances, timing rule)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a setting")
    p.set_defaults(func=run)


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _subjects(args) -> tuple[str, list]:
    if args.hf_model:
        if not args.text:
            raise ValueError("--hf-model needs --text FILE (the text to score)")
        from .hf import HfSubject

        return "ppl-hf", [HfSubject(args.hf_model, args.text, max_tokens=args.max_tokens)]
    if args.text:
        raise ValueError("--text is only used with --hf-model")
    from .fixture import VARIANTS, load_fixture
    from .ppl import FixtureSubject

    variants = list(VARIANTS) if args.fixture == "all" else [args.fixture]
    return "ppl", [FixtureSubject(load_fixture(v, args.fixture_dir)) for v in variants]


def _pct(x: float) -> str:
    return f"{x:+10.4%}" if math.isfinite(x) else f"{'-':>10s}"


def _print_table(subject, results, echo=print) -> None:
    from .ppl import drifts, swiglu_summary

    d = drifts(results)
    echo(f"\n{subject.case_id}  ({subject.tags}; {subject.shape['M']} scored tokens)")
    echo(f"  {'mode':16s} {'PPL':>11s} {'vs native':>10s} {'vs ref':>10s} {'forward':>10s}  calls")
    for r in results:
        if r.status != "ok":
            echo(f"  {r.mode:16s} {r.status.upper():>11s}  {r.error}")
            continue
        dn, dr = d[r.mode]
        t = f"{r.timing.median_us / 1e3:8.3f}ms" if r.timing is not None else f"{'-':>10s}"
        echo(f"  {r.mode:16s} {r.ppl:11.5f} {_pct(dn)} {_pct(dr)} {t}  {r.report.calls_text()}")
    for r in results:
        if r.status == "ok" and r.mode.startswith("dispatch"):
            rep = r.report
            echo(f"  {r.mode}: {rep.packed} of {rep.weights} weights packed for Marlin, pack + "
                 f"workspace {rep.pack_bytes / 1e6:.3f} MB; fallbacks: {rep.fallbacks_text() or 'none'}"
                 + (f"; not packed: {'; '.join(rep.pack_errors)}" if rep.pack_errors else ""))
    line = swiglu_summary(results)
    if line:
        echo("  " + line)


def _gate(rows, matrix: str, run_dir: Path, args, settings, env, arch: str, echo=print) -> int:
    from harness.reports.baseline import (
        BaselineMeta,
        baseline_dir,
        check_baseline,
        load_baseline,
        write_baseline_matrix,
    )
    from harness.reports.environment import warning_lines
    from harness.reports.gate import evaluate
    from harness.reports.gate_record import write_gate_record
    from harness.reports.markdown import text_table

    bdir = baseline_dir(Path(args.baselines), arch)
    if not (bdir / f"{matrix}.csv").is_file():
        meta = BaselineMeta(matrix=matrix, arch=arch, environment=env, rows_sha256="",
                            settings=settings.to_dict(), source=str(run_dir / f"{matrix}.csv"))
        path = write_baseline_matrix(run_dir / "candidate-baseline", rows, meta)
        echo(f"harness ppl: no baseline {bdir / (matrix + '.csv')}; wrote a CANDIDATE baseline {path} "
             f"(review it, then `harness baseline accept {run_dir}`)")
        # no baseline to compare with, but ERROR and WORSE_ACCURACY rows still fail
        alone = evaluate(rows, [], settings, current_label=env.commit or "current")
        write_gate_record(run_dir / f"{matrix}.csv", alone)
        return alone.exit_code
    base = load_baseline(bdir, [matrix])
    # ppl's json records scoring modes, not timing modes: its settings alone are compared.
    for line in warning_lines("harness ppl", check_baseline(base, env, settings.to_dict(),
                                                            strict=args.strict_env)):
        echo(line)
    result = evaluate(rows, base.rows, settings, margins=base.margins, partial=bool(args.paths),
                      current_label=env.commit or "current", baseline_label=str(bdir))
    write_gate_record(run_dir / f"{matrix}.csv", result)
    echo(text_table(result))
    counts = {str(k): n for k, n in result.counts().items() if n}
    echo(f"harness ppl: gate {matrix} vs {bdir}: {counts}; exit {result.exit_code}")
    return result.exit_code


def run(args: argparse.Namespace) -> int:
    import torch

    from harness.config import load_settings, parse_overrides
    from harness.measure.envinfo import arch_label, environment, git_commit
    from harness.reports.environment import Environment
    from harness.reports.store import RunMeta, run_dir
    from harness.reports.writer import RowWriter

    from .ppl import default_modes, score_subject, to_rows
    from .quant_linear import known_modes

    modes = _split(args.paths) or default_modes()
    for m in modes:
        if m not in known_modes():
            raise ValueError(f"--paths: unknown mode {m!r}; valid: {', '.join(known_modes())}")
    settings = load_settings(args.preset, parse_overrides(args.set))
    device = torch.device("cpu") if args.cpu or not torch.cuda.is_available() \
        else torch.device("cuda", torch.cuda.current_device())
    timing = args.timing == "on" or (args.timing == "auto" and device.type == "cuda")
    matrix, subjects = _subjects(args)
    arch, commit = arch_label(device), git_commit()
    env_d = environment(device)
    env_d["commit"] = commit
    env = Environment.from_dict(env_d)
    all_rows = []
    for subject in subjects:
        results = score_subject(subject, modes, device, timing=timing, settings=settings,
                                allow_sm90=True if args.marlin_sm90 else None)
        _print_table(subject, results)
        if hasattr(subject, "tokenizer"):
            print(f"  tokenizer: {subject.tokenizer}; {len(subject.swapped)} projections quantized "
                  f"(group {subject.group_size} where K % {subject.group_size} == 0, else per-row)")
        all_rows += to_rows(subject, results, device=device, commit=commit, arch=arch,
                            device_name=env_d.get("gpu_name") or env_d.get("cpu") or "cpu", matrix=matrix)
    out_dir = run_dir(Path(args.out), commit, arch)
    meta = RunMeta(matrix=matrix, commit=commit, arch=arch, environment=env, settings=settings.to_dict(),
                   extra={"modes": modes, "timing": timing, "marlin_sm90_opt_in": bool(args.marlin_sm90)})
    csv_path = out_dir / f"{matrix}.csv"
    with RowWriter(csv_path, meta=meta, mode="overwrite" if args.overwrite else "new") as w:
        for row in all_rows:
            w.write(row)
    print(f"\nharness ppl: {len(all_rows)} rows in {csv_path}")
    if args.no_compare:
        return 0
    return _gate(all_rows, matrix, out_dir, args, settings, env, arch)
