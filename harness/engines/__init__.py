"""Engines: what the commands drive and no command is. The A/B confirmation of
``harness job`` (``ab_step``, with another GPU model's machine factor in
``projection_step``), the A/B of two revisions (``compare``), the bisect search
(``bisect_search``), the sharding of a bench over the GPUs of a host (``bench_shard``,
``shard_worker``), what they share to run a revision's bench in a git worktree
(``revisions``, ``bench_runner`` and its two plugin files ``bench_gate``, ``bench_rows``),
``--plugin`` loading (``plugins``), and a baseline's making from A/A runs
(``aa_baselines``) with the rows a filtered re-baseline takes (``baseline_rows``). A
command parses its arguments and calls one of these; an engine never imports a command
(the import contracts in pyproject.toml).
"""
