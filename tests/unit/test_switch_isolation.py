"""The test session starts from the product's defaults: every environment switch that the
product reads to choose what it runs is in tests/conftest.py's ``PRODUCT_SWITCHES`` (which
it clears), and none of them is set while a test runs."""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.kernels import dispatch
from harness.kernels.marlin import providers, variants

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def _switches() -> set[str]:
    text = CONFTEST.read_text()
    body = text[text.index("PRODUCT_SWITCHES = ("):]
    return set(re.findall(r'"([A-Z0-9_]+)"', body[:body.index(")")]))


def test_every_selector_of_the_product_is_cleared_for_the_tests():
    named = {dispatch.MARLIN_ENV, dispatch.SM90_ENV, providers.PROVIDER_ENV,
             variants.VARIANT_ENV, "HARNESS_PLANT_PATH", "HARNESS_CI"}
    assert named <= _switches(), named - _switches()


def test_no_switch_is_set_while_a_test_runs():
    assert not {name for name in _switches() if name in os.environ}
