"""Every test under tests/spark is a Spark test (the ``spark`` fixture is in tests/conftest.py)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/spark is a Spark test: ``pytest -m 'not spark'`` leaves them all out."""
    for item in items:
        if "tests/spark/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.spark)
