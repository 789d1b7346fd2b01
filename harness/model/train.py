"""Train the perplexity fixture: ``python -m harness.model.train [--out DIR] [--steps N | --tiny]``.

One command does everything: generate the synthetic corpus (``corpus.py``), train a
looped transformer (AdamW, warm-up + cosine, bf16 autocast on CUDA, fp32 on a CPU) for
a fixed number of steps, log the training loss, evaluate the float model on held-out
text, quantize every block projection with the project's asymmetric min-max INT4
converter (``harness.cases.data.quantize_asymmetric``) per-row and at group 128, write
``fixture-{g128,row}.safetensors`` and ``fixture.json``, reload them through the
validating loader, score the held-out sequence with the fp32 dequantized reference, and
(unless ``--no-baseline``) write the CPU baseline the unit tests compare against
(``cpu_baseline.json``, scored on the CPU whatever device trained).

Defaults are sized for about two minutes on one H200; ``--max-minutes`` stops training
early (recorded in the JSON) so a slower machine cannot run away. ``--tiny`` is a smoke
run of the whole pipeline in well under a minute on a 2-core CPU (written to
``artifacts/fixture-tiny`` unless ``--out`` says otherwise; never the committed fixture).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import torch

from harness.cases.data import quantize_asymmetric

from . import corpus
from .fixture import (
    FIXTURE_DIR,
    FORMAT,
    FORMAT_VERSION,
    META_FILE,
    VARIANTS,
    group_size_for,
    load_fixture,
    write_variant,
)
from .ppl import write_cpu_baseline
from .quant_linear import QuantRuntime
from .transformer import LINEAR_NAMES, FloatFactory, LoopedConfig, LoopedTransformer

_HERE = Path(__file__).resolve()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.model.train",
                                description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help=f"output folder (default {FIXTURE_DIR})")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=1024, help="training window (tokens)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--train-tokens", type=int, default=32 << 20, help="size of the training corpus")
    p.add_argument("--eval-windows", type=int, default=32,
                   help="held-out windows for the eval loss")
    p.add_argument("--seed", type=int, default=0, help="seeds the corpus, the init and the batches")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--pre", type=int, default=1)
    p.add_argument("--loops", type=int, default=4)
    p.add_argument("--ctx", type=int, default=1024, help="model context = scored tokens")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--max-minutes", type=float, default=4.0, help="stop training after this long")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="corpus processes")
    p.add_argument("--no-baseline", action="store_true", help="skip cpu_baseline.json")
    p.add_argument("--tiny", action="store_true",
                   help="smoke run: 30 steps of 4 x 128 tokens on a 256K-token corpus")
    return p


def _apply_tiny(args: argparse.Namespace) -> None:
    args.steps, args.batch, args.seq, args.warmup = 30, 4, 128, 5
    args.train_tokens, args.eval_windows, args.log_every = 1 << 18, 2, 10
    if args.out is None:
        args.out = _HERE.parents[2] / "artifacts" / "fixture-tiny"


def _lr_at(step: int, args: argparse.Namespace) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    frac = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac))))


def _windows(data: torch.Tensor, starts: torch.Tensor, length: int) -> torch.Tensor:
    return data[starts[:, None] + torch.arange(length, device=data.device)[None, :]]


@torch.no_grad()
def _eval_loss(model: LoopedTransformer, windows: torch.Tensor) -> float:
    model.eval()
    total = 0.0
    for w in windows:
        total += model.nll(w)[0]
    model.train()
    return total / len(windows)


def train(args: argparse.Namespace, log=print) -> dict:
    """Train, quantize, write the fixture; returns the fixture JSON (also written)."""
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out = Path(args.out) if args.out is not None else FIXTURE_DIR
    cfg = LoopedConfig(d_model=args.d_model, n_heads=args.heads, ffn=args.ffn, pre=args.pre,
                       loops=args.loops, ctx=args.ctx, vocab=corpus.VOCAB_SIZE)
    if args.seq > cfg.ctx:
        raise ValueError(f"--seq {args.seq} exceeds --ctx {cfg.ctx}")
    t0 = time.perf_counter()
    train_tok = corpus.sharded_tokens(args.train_tokens, "train", args.seed, workers=args.workers)
    held = corpus.generate(cfg.ctx + 1 + args.eval_windows * (cfg.ctx + 1), "heldout", args.seed)
    log(f"corpus: {train_tok.size} train tokens, {held.tokens.size} held-out tokens "
        f"in {time.perf_counter() - t0:.1f} s (vocab {cfg.vocab})")
    data = torch.from_numpy(train_tok).long().to(device)
    score_seq = torch.from_numpy(held.tokens[: cfg.ctx + 1]).long()
    eval_windows = torch.from_numpy(held.tokens[cfg.ctx + 1:]).long()
    eval_windows = eval_windows.view(args.eval_windows, cfg.ctx + 1)

    torch.manual_seed(args.seed)
    model = LoopedTransformer(cfg, FloatFactory(cfg)).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), fused=device.type == "cuda")
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    use_bf16 = device.type == "cuda"
    curve, recent, steps_done, stopped_early = [], [], 0, False
    t_train = time.perf_counter()
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, args)
        starts = torch.randint(0, data.numel() - args.seq - 1, (args.batch,), generator=gen)
        starts = starts.to(device)
        batch = _windows(data, starts, args.seq + 1)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, cfg.vocab),
                                                 batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent.append(loss.detach())
        steps_done = step + 1
        if steps_done % args.log_every == 0 or steps_done == args.steps:
            mean = float(torch.stack(recent).mean())
            recent = []
            el = time.perf_counter() - t_train
            curve.append([steps_done, round(mean, 5)])
            tok_s = steps_done * args.batch * args.seq / el
            log(f"step {steps_done:6d}/{args.steps}  loss {mean:.4f}  lr {_lr_at(step, args):.2e}  "
                f"{tok_s / 1e3:.1f} Ktok/s  {el:.0f} s "
                f"(projected {el * args.steps / steps_done:.0f} s)")
            if el > 60 * args.max_minutes and steps_done < args.steps:
                stopped_early = True
                log(f"stopping early: {el:.0f} s > --max-minutes {args.max_minutes}")
                break
    train_seconds = time.perf_counter() - t_train
    final_loss = curve[-1][1] if curve else math.nan

    model = model.float().eval()
    eval_loss = _eval_loss(model, eval_windows.to(device))
    float_nll, n_scored = model.nll(score_seq.to(device))
    log(f"float model: eval loss {eval_loss:.4f} (PPL {math.exp(eval_loss):.3f}) on "
        f"{args.eval_windows} windows; held-out sequence PPL {math.exp(float_nll):.3f}; "
        f"generator PPL {held.generator_ppl(1, cfg.ctx + 1):.3f}; uniform PPL {cfg.vocab}")

    floats = {"embed": model.embed.weight, "head": model.head,
              "final_norm": model.final_norm.weight}
    for bname, block in model.blocks():
        floats[f"{bname}.attn_norm"] = block.attn_norm.weight
        floats[f"{bname}.mlp_norm"] = block.mlp_norm.weight
    variants = {}
    for variant in VARIANTS:
        weights = {}
        for bname, block in model.blocks():
            for proj in LINEAR_NAMES:
                W = getattr(block, proj).weight.detach().float().cpu()
                weights[f"{bname}.{proj}"] = quantize_asymmetric(
                    W, group_size_for(variant, W.shape[0]))
        fname = f"fixture-{variant}.safetensors"
        sha = write_variant(out / fname, variant, cfg, floats, weights, score_seq)
        variants[variant] = {"file": fname, "sha256": sha,
                             "group_size": VARIANTS[variant] or "per-row (K)",
                             "bytes": (out / fname).stat().st_size}
    meta = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "note": ("trained on a CPU to test the pipeline; replace with the GPU-trained fixture"
                 if device.type != "cuda" else "trained by python -m harness.model.train"),
        "trained_on": device.type,
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                        else platform.processor() or platform.machine()),
        "torch": torch.__version__,
        "command": "python -m harness.model.train " + " ".join(sys.argv[1:]),
        "config": cfg.to_dict(),
        "corpus": {"version": corpus.CORPUS_VERSION, "seed": args.seed,
                   "train_tokens": args.train_tokens,
                   "heldout_sequence_tokens": cfg.ctx + 1},
        "training": {"steps": args.steps, "steps_done": steps_done, "stopped_early": stopped_early,
                     "batch": args.batch, "seq": args.seq, "lr": args.lr, "warmup": args.warmup,
                     "weight_decay": args.weight_decay,
                     "optimizer": "AdamW(0.9, 0.95), cosine to 10%",
                     "precision": "bf16 autocast" if use_bf16 else "fp32",
                     "seconds": round(train_seconds, 1),
                     "tokens_seen": steps_done * args.batch * args.seq,
                     "final_train_loss": final_loss, "loss_curve": curve},
        "float_eval_loss": round(eval_loss, 6),
        "float_ppl": round(math.exp(float_nll), 6),
        "generator_ppl": round(held.generator_ppl(1, cfg.ctx + 1), 6),
        "uniform_ppl": float(cfg.vocab),
        "scored_tokens": n_scored,
        "variants": variants,
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=1) + "\n")
    for variant in VARIANTS:  # reload through the validating loader and score the reference
        fx = load_fixture(variant, out)
        ppl = fx.model(QuantRuntime("reference", device)).score(fx.heldout)
        meta["variants"][variant]["reference_ppl"] = round(ppl, 6)
        log(f"{variant}: fp32 dequantized reference PPL {ppl:.4f} "
            f"({variants[variant]['bytes'] / 1e6:.2f} MB)")
    (out / META_FILE).write_text(json.dumps(meta, indent=1) + "\n")
    log(f"wrote {out / META_FILE} and {len(VARIANTS)} variants in {time.perf_counter() - t0:.0f} s")
    if not args.no_baseline:
        path = write_cpu_baseline(out)
        log(f"wrote {path} (CPU scores the unit tests compare against)")
    return meta


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.tiny:
        _apply_tiny(args)
    for name in ("steps", "batch", "seq", "train_tokens", "eval_windows", "log_every"):
        if getattr(args, name) <= 0:
            print(f"train: --{name.replace('_', '-')} must be positive", file=sys.stderr)
            return 2
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
