"""``harness policy RUN [RUN ...]``: the dispatch policy the measurements support.

Reads stored runs (results directories of one arch: several machines, or several GPU
models of the arch) and writes ``<out>/<arch>.json`` (``results.policy_file.Policy``: per
shape class the path to dispatch among the shippable paths, the runner-up, the lead with
its bootstrap interval, "tie" inside the noise, "disagree" where the runs name different
winners), and ``<arch>.md`` / ``<arch>.html``: the map of winners over M and shape, and
the regret of the dispatcher's rules, of always-fp16_cache and of always-Marlin against
the policy, per class and in total for a decode-heavy and a prefill-heavy mix of M
(``reports.regret``). A runtime (or the dispatcher model, ``HARNESS_DISPATCH_POLICY``)
loads the json. Torch-free. Exit 0, 2 on bad input.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path

from ..reports.fleet import label_runs
from ..reports.policy import build_policy
from ..reports.policy_render import write_policy_pages
from ..reports.regret import MIXES, regret
from ..results.policy_file import write_policy
from ..results.store import load_run, now_iso
from .common import add_settings_args, csv_list, plain, settings_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("policy", help="the dispatch policy of stored runs: path per shape "
                                      "class, its lead, the rules' regret, a map",
                       description=plain(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="stored results directories (results/<commit>/<arch>) of one arch")
    p.add_argument("--out", default="policy", help="output directory (default policy/)")
    p.add_argument("--matrix", default="production,swiglu",
                   help="comma list of the matrices whose rows make the policy "
                        "(default production,swiglu)")
    add_settings_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    matrices = set(csv_list(args.matrix))
    stored = [load_run(r) for r in args.runs]
    labels = label_runs([s.environment for s in stored])
    runs = []
    for label, s in zip(labels, stored, strict=True):
        rows = [r for r in s.rows if r.matrix in matrices]
        if not rows:
            raise ValueError(f"{s.source}: no rows of {', '.join(sorted(matrices))}")
        runs.append((label, s.environment, rows))
    policy = build_policy(runs, settings, created=now_iso())
    out = Path(args.out)
    path = write_policy(out / f"{policy.arch}.json", policy)
    table = regret(policy)
    command = "harness policy " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    pages = write_policy_pages(policy, table, out / policy.arch, command)
    counts: dict[str, int] = {}
    for c in policy.classes:
        counts[c.decision] = counts.get(c.decision, 0) + 1
    print(f"harness policy: {policy.arch} on {', '.join(policy.models) or '?'}, "
          f"{len(runs)} run(s), {len(policy.classes)} classes: "
          + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    for name in ("dispatcher rules", "always fp16_cache", "always Marlin"):
        said = ", ".join(f"{mix} {_pct(table.totals[(name, mix)])}" for mix in MIXES)
        print(f"harness policy: regret of {name}: {said}")
    print(f"wrote {path}, " + ", ".join(str(p) for p in pages))
    return 0


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+.1f}%"
