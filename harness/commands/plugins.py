"""``--plugin``: extra or wrapped paths from a Python file or module, loaded by ``harness
bench`` and by each worker of a sharded bench (``harness.commands.bench_shard``), after the
built-in paths. Torch-free itself: what a plugin imports is its own business.
"""

from __future__ import annotations

import importlib
import runpy
from pathlib import Path

#: The namespaces of the plugin files this process ran (see ``load_plugins``).
_PLUGIN_NAMESPACES: list[dict] = []


def load_plugins(specs: list[str], load_all) -> list[str]:
    """Run each ``--plugin``: a Python file (``path/to/file.py``) or an importable module
    name, after the built-in paths are registered (``load_all()``). A plugin registers
    paths of its own (``PATHS.register``) or wraps existing ones (the test suite's planted
    defects do); the run's json lists the plugins, so a changed path never passes
    unnoticed."""
    load_all()
    done = []
    for spec in specs:
        if spec.endswith(".py"):
            if not Path(spec).is_file():
                raise ValueError(f"--plugin: no such file {spec}")
            # keep the plugin's namespace alive for the whole process: a plugin may hold
            # what it planted in a module global (a context manager whose exit undoes it)
            _PLUGIN_NAMESPACES.append(
                runpy.run_path(spec, run_name=f"harness_plugin_{Path(spec).stem}"))
        else:
            try:
                importlib.import_module(spec)
            except ModuleNotFoundError as exc:
                raise ValueError(f"--plugin: cannot import {spec!r} ({exc})") from None
        done.append(spec)
    return done
