"""A driver killed with SIGKILL while it repartitions a streaming query's checkpoint: before Spark
starts, in the middle, and after Spark finished but before the plan was reported. Every time, the
next ``ManagedQuery`` finishes the plan and the query resumes exactly (``state_crash``; the benchmark
runs ten such trials)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.spark.children import class_data_archive
from tests.spark.state_crash import CrashBench

TRIALS = ((0.0, 3), (0.5, 5), (1.5, 2), (8.0, 4))
"""(seconds from the start of Spark's repartition to the kill, target count) of each trial."""


@pytest.mark.slow
def test_a_driver_killed_while_it_repartitions_leaves_a_plan_the_next_one_finishes(
    spark: Any, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    archive, options = class_data_archive(tmp_path_factory.getbasetemp().parent, tmp_path)
    bench = CrashBench(spark, tmp_path, options)
    outcomes = []
    for delay, target in TRIALS:
        outcomes.append(bench.trial(delay, target))
        made = tmp_path / archive.name
        if made.exists():  # the first child made the class-data archive: later children share it
            os.replace(made, archive)
            bench.java_options = f"-XX:SharedArchiveFile={archive} -XX:TieredStopAtLevel=1"
    # The kills landed before, during and after Spark's repartition.
    assert {trial.after_kill for trial in outcomes} >= {"before", "done"}
