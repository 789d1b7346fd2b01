"""Test doubles of the harness: planted defects (``defects``) and the misbehaving path
objects that plant them (``paths``), plus plugin files that plant one from outside a
process (``slowdown_plugin.py`` for ``harness bench --plugin``, ``slowdown_planter.py``
for the gate study's ``--planter``); the deterministic fake timer (``fake_timer``, on the
virtual clock of ``clock``) and its plugin file ``fake_timer_plugin.py``.

Importable as ``planted`` once ``tests/`` is on ``sys.path`` (``tests/conftest.py`` puts it
there; the plugin files do it themselves). The product (``harness``) never imports it.
"""
