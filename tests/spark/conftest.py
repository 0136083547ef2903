"""One SparkSession for every Spark test (local[2], no UI, few shuffle partitions)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from repart.spark.session import spark_session


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/spark is a Spark test: ``pytest -m 'not spark'`` leaves them all out."""
    for item in items:
        if "tests/spark/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]", "repart-tests", shuffle_partitions=4)
    yield session
    session.stop()
