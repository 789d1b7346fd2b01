"""Commands: one module per ``harness`` subcommand, each with ``register(subparsers)`` and
``run(args)``: ``cases``, ``bench``, ``job``, ``ppl``, ``report``, ``compare`` (including
the git-worktree runner), ``baseline`` and ``study`` (dispatches ``harness study NAME``);
``common`` holds what several share (settings arguments, the gate step of a fresh run).

They orchestrate the layers below (measure, model, studies, reports, results); nothing
below imports this package or ``harness.cli``. A command module imports without torch
(``harness report`` renders on machines without it): the measuring commands import the
engine inside ``run``.
"""
