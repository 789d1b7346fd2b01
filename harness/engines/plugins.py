"""``--plugin``: extra or wrapped paths from a Python file or module, loaded by ``harness
bench`` and by each worker of a sharded bench (``harness.engines.bench_shard``), after the
built-in paths (and the installed plugin packages' entry points,
``kernels.registry_load.load_entry_points``). Torch-free to import: the registry is imported
when a plugin is loaded. A plugin that fails to load or register is one ``PluginError``
line naming it (exit 2).
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
    from harness.kernels.base import PATHS  # heavy: torch (the path contract)
    from harness.kernels.registry_load import plugin_error  # heavy: torch

    load_all()
    done = []
    for spec in specs:
        if spec.endswith(".py") and not Path(spec).is_file():
            raise ValueError(f"--plugin: no such file {spec}")
        try:
            with PATHS.registering_from(f"--plugin {spec}"):
                if spec.endswith(".py"):
                    # keep the plugin's namespace alive for the whole process: a plugin may
                    # hold what it planted in a module global (a context manager whose exit
                    # undoes it)
                    _PLUGIN_NAMESPACES.append(
                        runpy.run_path(spec, run_name=f"harness_plugin_{Path(spec).stem}"))
                else:
                    importlib.import_module(spec)
        except Exception as exc:   # noqa: BLE001 - whatever a plugin raises: one line, exit 2
            raise plugin_error(f"--plugin {spec}", exc) from None
        done.append(spec)
    return done


def peer_plugin_lines(command: str) -> list[str]:
    """One line per path a plugin registered as a peer: its rows never fail the gate, which
    is rarely what the author of a kernel meant (``role = "path"`` gates it)."""
    from harness.kernels.base import PATHS  # heavy: torch (the path contract)

    return [f"{command}: note: plugin path {name!r} ({PATHS.origin(name)}) has role 'peer': "
            "its rows are reported and never fail the gate; role = 'path' gates them"
            for name in PATHS.names()
            if PATHS.get(name).role == "peer" and PATHS.origin(name) != "built-in"]
