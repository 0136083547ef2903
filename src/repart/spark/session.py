"""SparkSession for repart's jobs: local mode by default, any master by configuration."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"


def spark_session(
    master: str | None = None,
    app_name: str = "repart",
    *,
    shuffle_partitions: int = 4,
    config: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create the SparkSession a repart job runs in.

    ``master`` defaults to ``$REPART_SPARK_MASTER``, else the master ``spark-submit`` was given, else
    ``local[2]``. Executors run this interpreter (``PYSPARK_PYTHON`` = ``sys.executable``, unless
    set), the web UI and the console progress bar are off, and shuffles have ``shuffle_partitions``
    partitions (a few suit the batch sizes of local mode).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit the JVM is already up (it set PYSPARK_GATEWAY_PORT) with the submitted master.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    chosen = master or os.environ.get("REPART_SPARK_MASTER") or (None if submitted else DEFAULT_MASTER)
    if chosen:
        builder = builder.master(chosen)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # DataFrames made from Arrow/pandas data are RDD-backed, not LocalRelations: Spark evaluates a
        # projection over a LocalRelation row by row at planning time (ConvertToLocalRelation, before
        # constant folding), which would re-parse route()'s routing constants for every row.
        "spark.sql.execution.arrow.localRelationThreshold": "0",
        **(config or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
