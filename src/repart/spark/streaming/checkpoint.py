"""A stopped streaming query's checkpoint: its state partition count, whether its last batch finished,
and Spark's offline repartition of its state.

Spark (4.2 and later) repartitions the state of a stopped query's checkpoint to n partitions with
``spark._streamingCheckpointManager.repartition(checkpoint, n)``: it writes a new batch holding the
repartitioned state, which the restarted query picks up. Spark refuses when the last batch did not
finish (an interrupted batch, ``LAST_BATCH_FAILED``) and when the count already matches
(``SHUFFLE_PARTITIONS_ALREADY_MATCH``); after a crash in the middle it allows only the same n again,
which finishes it. Spark's refusals become repart's errors here, each naming what was refused.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from repart.errors import Conflict, InvalidInput

REPARTITION_SINCE = "4.2"
"""The first Spark version with the offline repartition of a checkpoint."""

_ERROR_CLASS = re.compile(r"\[([A-Z_]+(?:\.[A-Z_]+)*)\]")


@dataclass(frozen=True)
class Repartitioned:
    """What a repartition did: the checkpoint, the counts before and after, and its seconds."""

    checkpoint: str
    from_partitions: int
    to_partitions: int
    seconds: float


def fs_path(spark: SparkSession, location: str) -> tuple[Any, Any]:
    """The Hadoop file system and path of ``location`` (any file system the driver can reach)."""
    context: Any = spark.sparkContext
    path = context._jvm.org.apache.hadoop.fs.Path(location)
    return path.getFileSystem(context._jsc.hadoopConfiguration()), path


def batch_ids(spark: SparkSession, location: str) -> list[int]:
    """The batch ids logged in a checkpoint's ``offsets`` or ``commits`` directory (none if absent)."""
    fs, path = fs_path(spark, location)
    if not fs.exists(path):
        return []
    names = [status.getPath().getName() for status in fs.listStatus(path)]
    return sorted(int(name) for name in names if name.isdigit())


def reachable_checkpoint(spark: SparkSession, checkpoint: str) -> None:
    """InvalidInput naming ``checkpoint`` when the driver cannot reach its file system (a scheme
    without a Hadoop connector on the class path, such as ``s3a://`` without the hadoop-aws jars)."""
    try:
        fs, path = fs_path(spark, checkpoint)
        fs.exists(path)
    except Exception as error:  # py4j wraps the JVM's exception; its message names the cause
        cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InvalidInput(
            "checkpoint",
            f"must be on a file system the driver can reach, got {checkpoint!r}: {cause[:300]}",
        ) from None


def last_batch_interrupted(spark: SparkSession, checkpoint: str) -> bool:
    """Whether the checkpoint's newest planned batch (``offsets``) has no commit (``commits``): the
    query stopped in the middle of it, and Spark refuses to repartition until a run finishes it."""
    offsets, commits = batch_ids(spark, f"{checkpoint}/offsets"), batch_ids(spark, f"{checkpoint}/commits")
    return bool(offsets) and (not commits or offsets[-1] > commits[-1])


def state_partition_count(spark: SparkSession, checkpoint: str) -> int:
    """The state partition count of a stateful query's checkpoint: the ``spark.sql.shuffle.partitions``
    its newest batch runs with (the configuration Spark logs with each batch's offsets, which a
    repartition's batch changes; the ``state-metadata`` source keeps the count of the query's first
    run). InvalidInput naming ``checkpoint`` when it holds no stateful operator (not a stateful query's
    checkpoint, or no batch committed yet)."""
    reachable_checkpoint(spark, checkpoint)
    try:
        operators = spark.read.format("state-metadata").load(checkpoint).count()
    except Exception as error:
        raise InvalidInput(
            "checkpoint",
            f"must be a stateful streaming query's checkpoint, got {checkpoint!r}: {_cause(error)}",
        ) from None
    batches = batch_ids(spark, f"{checkpoint}/offsets")
    if not operators or not batches:
        raise InvalidInput(
            "checkpoint",
            f"must be a stateful streaming query's checkpoint with a committed batch, got {checkpoint!r} "
            "(it holds no state operator)",
        )
    lines = spark.read.text(f"{checkpoint}/offsets/{batches[-1]}").collect()
    conf = json.loads(lines[1]["value"]).get("conf", {}) if len(lines) > 1 else {}
    if "spark.sql.shuffle.partitions" not in conf:
        raise InvalidInput(
            "checkpoint",
            f"must log its state partition count with its batches (Spark's offsets log), got {checkpoint!r} "
            f"whose batch {batches[-1]} logs none",
        )
    return int(conf["spark.sql.shuffle.partitions"])


def repartition_checkpoint(spark: SparkSession, checkpoint: str, n_partitions: int) -> Repartitioned:
    """Repartition the stopped query's state in ``checkpoint`` to ``n_partitions`` partitions.

    A count that already matches is done (nothing is written; 0 seconds). Refused with InvalidInput
    naming the field: a Spark version without the API (``spark_version``, naming it), a checkpoint the
    driver cannot reach or that is not a stateful query's (``checkpoint``), a provider or operator Spark
    cannot repartition (``checkpoint``, with Spark's error class). Conflict when the last batch did not
    finish: the query must finish it first (``ManagedQuery`` runs it once with ``availableNow``).
    """
    manager = getattr(spark, "_streamingCheckpointManager", None)
    if manager is None:
        raise InvalidInput(
            "spark_version",
            f"must be {REPARTITION_SINCE} or later (the offline repartition of a checkpoint), "
            f"got {spark.version}",
        )
    before = state_partition_count(spark, checkpoint)
    if before == n_partitions:
        return Repartitioned(checkpoint, before, n_partitions, 0.0)
    if last_batch_interrupted(spark, checkpoint):
        raise Conflict(
            f"the last batch of checkpoint {checkpoint!r} did not finish; Spark repartitions only after a "
            "finished batch: run the query once (trigger availableNow) first"
        )
    started = time.perf_counter()
    try:
        manager.repartition(checkpoint, n_partitions)
    except Exception as error:
        spark_class = error_class(error)
        if spark_class is not None and spark_class.endswith("SHUFFLE_PARTITIONS_ALREADY_MATCH"):
            return Repartitioned(checkpoint, before, n_partitions, time.perf_counter() - started)
        raise InvalidInput(
            "checkpoint",
            f"must be a checkpoint Spark can repartition, got {checkpoint!r}: Spark refused with "
            f"{spark_class or 'an error'}: {_cause(error)}",
        ) from None
    return Repartitioned(checkpoint, before, n_partitions, time.perf_counter() - started)


def error_class(error: BaseException) -> str | None:
    """Spark's error class named in an exception's message (``STATE_REPARTITION_INVALID_CHECKPOINT.
    LAST_BATCH_FAILED``), or None."""
    found = _ERROR_CLASS.search(str(error))
    return None if found is None else found.group(1)


def _cause(error: BaseException) -> str:
    """The first line of a (JVM) exception's message that says something, shortened."""
    for line in str(error).splitlines():
        text = line.strip()
        if text and not text.startswith("An error occurred while calling"):
            return text.removeprefix(": ")[:300]
    return type(error).__name__
