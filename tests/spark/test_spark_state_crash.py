"""A driver killed with SIGKILL while it repartitions a streaming query's checkpoint: before Spark
starts, in the middle (an unfinished repartition left in the checkpoint), and after Spark finished but
before the plan was reported. Every time, the next ``ManagedQuery`` finishes the plan and the query
resumes exactly (``state_crash``; ``benchmarks/spark_state.py --sections crash`` runs ten trials)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.spark.children import class_data_archive
from tests.spark.state_crash import CrashBench, Trial


@pytest.mark.slow
def test_a_driver_killed_while_it_repartitions_leaves_a_plan_the_next_one_finishes(
    spark_settings_restored: Any, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    spark = spark_settings_restored
    archive, options = class_data_archive(tmp_path_factory.getbasetemp().parent, tmp_path)
    bench = CrashBench(spark, tmp_path, options)

    def trial(delay: float, target: int) -> Trial:
        outcome = bench.trial(delay, target)  # asserts the plan applied and the state exact
        made = tmp_path / archive.name
        if made.exists():  # the first child made the class-data archive: later children share it
            os.replace(made, archive)
            bench.java_options = f"-XX:SharedArchiveFile={archive} -XX:TieredStopAtLevel=1"
        return outcome

    assert trial(0.0, 3).after_kill == "before"
    # In the middle: Spark's repartition takes about 0.7-2 s here; the delay moves until the kill leaves
    # an unfinished repartition (later after a kill before it, earlier after one once it finished).
    delay, targets, seen = 1.25, iter((5, 2, 6, 4)), []
    for target in targets:
        outcome = trial(delay, target)
        seen.append((delay, outcome.after_kill))
        if outcome.after_kill == "unfinished":
            break
        delay = delay + 0.5 if outcome.after_kill == "before" else delay / 2
    assert seen[-1][1] == "unfinished", seen
    assert trial(8.0, 7).after_kill == "done"
