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
PROVIDER_SETTING = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
"""The state store provider Spark repartitions (and whose change feed repart reads)."""
DEFAULT_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
REFUSED_BEFORE_WRITING = frozenset({"STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER"})
"""Spark's refusals that come after it logged the repartition's batch but before it wrote any state:
repart removes that batch, and the checkpoint is as it was."""

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


@dataclass(frozen=True)
class CheckpointBatches:
    """Where a stateful checkpoint's batches stand: the newest committed batch and its state partition
    count, and the newest planned batch (``offsets``) with its count. A planned batch newer than the
    committed one did not finish: an interrupted batch (its count is the committed one), or an
    unfinished repartition (its count differs: Spark logs the new count with the repartition's batch
    before it commits it)."""

    committed: int
    committed_partitions: int
    planned: int
    planned_partitions: int

    @property
    def interrupted(self) -> bool:
        """The newest planned batch did not commit."""
        return self.planned > self.committed

    @property
    def unfinished_repartition(self) -> int | None:
        """The count of a repartition that did not finish (Spark allows only that count until it
        does), or None."""
        if self.interrupted and self.planned_partitions != self.committed_partitions:
            return self.planned_partitions
        return None


def checkpoint_batches(spark: SparkSession, checkpoint: str) -> CheckpointBatches:
    """Where the checkpoint's batches stand (``CheckpointBatches``), from its ``offsets`` and
    ``commits`` logs; the count of a batch is the ``spark.sql.shuffle.partitions`` Spark logs with its
    offsets (the ``state-metadata`` source keeps the count of the query's first run). InvalidInput
    naming ``checkpoint`` when it holds no stateful operator or no committed batch."""
    reachable_checkpoint(spark, checkpoint)
    try:
        operators = spark.read.format("state-metadata").load(checkpoint).count()
    except Exception as error:
        raise InvalidInput(
            "checkpoint",
            f"must be a stateful streaming query's checkpoint, got {checkpoint!r}: {_cause(error)}",
        ) from None
    offsets, commits = batch_ids(spark, f"{checkpoint}/offsets"), batch_ids(spark, f"{checkpoint}/commits")
    if not operators or not offsets or not commits:
        raise InvalidInput(
            "checkpoint",
            f"must be a stateful streaming query's checkpoint with a committed batch, got {checkpoint!r} "
            "(it holds no state operator or no committed batch)",
        )
    return CheckpointBatches(
        commits[-1],
        _logged_partitions(spark, checkpoint, commits[-1]),
        offsets[-1],
        _logged_partitions(spark, checkpoint, offsets[-1]),
    )


def logged_conf(spark: SparkSession, checkpoint: str, batch: int) -> dict[str, str]:
    """The SQL configuration Spark logged with batch ``batch``'s offsets (what the query ran with)."""
    lines = spark.read.text(f"{checkpoint}/offsets/{batch}").collect()
    conf = json.loads(lines[1]["value"]).get("conf", {}) if len(lines) > 1 else {}
    return {str(key): str(value) for key, value in conf.items()}


def _logged_partitions(spark: SparkSession, checkpoint: str, batch: int) -> int:
    """The ``spark.sql.shuffle.partitions`` logged with batch ``batch``'s offsets."""
    conf = logged_conf(spark, checkpoint, batch)
    if "spark.sql.shuffle.partitions" not in conf:
        raise InvalidInput(
            "checkpoint",
            f"must log its state partition count with its batches (Spark's offsets log), got {checkpoint!r} "
            f"whose batch {batch} logs none",
        )
    return int(conf["spark.sql.shuffle.partitions"])


def state_partition_count(spark: SparkSession, checkpoint: str) -> int:
    """The state partition count of the checkpoint's newest committed batch (``checkpoint_batches``)."""
    return checkpoint_batches(spark, checkpoint).committed_partitions


def repartition_checkpoint(spark: SparkSession, checkpoint: str, n_partitions: int) -> Repartitioned:
    """Repartition the stopped query's state in ``checkpoint`` to ``n_partitions`` partitions.

    An unfinished repartition to ``n_partitions`` (a driver killed while Spark repartitioned) is
    finished by repartitioning again; a committed count that already matches is done (nothing is
    written; 0 seconds). Refused with InvalidInput naming the field, and nothing written: a Spark
    version without the API (``spark_version``, naming it), a checkpoint the driver cannot reach or
    that is not a stateful query's (``checkpoint``), a query whose state provider is not RocksDB
    (``checkpoint``; checked before Spark is called, since Spark logs the repartition's batch before it
    refuses a provider; when Spark refuses one anyway, ``REFUSED_BEFORE_WRITING``, the batch it logged
    is removed, and the query starts on the checkpoint as it was). Conflict when the last batch did not
    finish (the query must finish it first: ``ManagedQuery`` runs it until it commits), when an
    unfinished repartition to another count must finish first, and when Spark's repartition fails
    otherwise: the checkpoint may then hold the unfinished repartition, which only a repartition to
    the same count finishes.
    """
    manager = getattr(spark, "_streamingCheckpointManager", None)
    if manager is None:
        raise InvalidInput(
            "spark_version",
            f"must be {REPARTITION_SINCE} or later (the offline repartition of a checkpoint), "
            f"got {spark.version}",
        )
    batches = checkpoint_batches(spark, checkpoint)
    before, unfinished = batches.committed_partitions, batches.unfinished_repartition
    if unfinished is not None and unfinished != n_partitions:
        raise Conflict(
            f"checkpoint {checkpoint!r} holds an unfinished repartition to {unfinished} partitions, "
            f"which Spark lets only the same count finish; repartition to {unfinished} first, not "
            f"{n_partitions}"
        )
    if unfinished is None and before == n_partitions:
        return Repartitioned(checkpoint, before, n_partitions, 0.0)
    if unfinished is None and batches.interrupted:
        raise Conflict(
            f"the last batch of checkpoint {checkpoint!r} did not finish; Spark repartitions only after a "
            "finished batch: run the query until it commits first"
        )
    check_provider(checkpoint, logged_conf(spark, checkpoint, batches.committed))
    started = time.perf_counter()
    try:
        manager.repartition(checkpoint, n_partitions)
    except Exception as error:
        spark_class = error_class(error)
        if unfinished is None and spark_class in REFUSED_BEFORE_WRITING:
            _drop_uncommitted(spark, checkpoint, batches)
            raise InvalidInput(
                "checkpoint",
                f"must be a checkpoint Spark can repartition, got {checkpoint!r}: Spark refused with "
                f"{spark_class}: {_cause(error)}",
            ) from None
        raise Conflict(
            f"Spark's repartition of checkpoint {checkpoint!r} to {n_partitions} partitions failed "
            f"({spark_class or type(error).__name__}: {_cause(error)}); the checkpoint may hold the "
            f"unfinished repartition, which only a repartition to {n_partitions} finishes: run it again"
        ) from None
    return Repartitioned(checkpoint, before, n_partitions, time.perf_counter() - started)


def check_provider(checkpoint: str, conf: dict[str, str]) -> None:
    """InvalidInput naming ``checkpoint`` unless its query keeps its state with the RocksDB provider,
    the one Spark repartitions (Spark refuses another with ``UNSUPPORTED_PROVIDER`` only after it
    logged the repartition's batch)."""
    provider = conf.get(PROVIDER_SETTING, DEFAULT_PROVIDER)
    if provider != ROCKSDB_PROVIDER:
        raise InvalidInput(
            "checkpoint",
            f"must keep its state with {ROCKSDB_PROVIDER} (Spark's UNSUPPORTED_PROVIDER: the only provider "
            f"it repartitions), got {checkpoint!r} whose query runs {provider}",
        )


def _drop_uncommitted(spark: SparkSession, checkpoint: str, before: CheckpointBatches) -> None:
    """Remove the offsets entries a refused repartition logged after ``before``'s newest planned batch,
    uncommitted: Spark logs the repartition's batch before it checks everything, and would then refuse
    to start the query on it. The checkpoint is as it was before the attempt."""
    fs, _ = fs_path(spark, checkpoint)
    jvm: Any = spark.sparkContext._jvm
    for batch in batch_ids(spark, f"{checkpoint}/offsets"):
        if batch > before.planned:
            for name in (str(batch), f".{batch}.crc"):
                fs.delete(jvm.org.apache.hadoop.fs.Path(f"{checkpoint}/offsets/{name}"), False)


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
