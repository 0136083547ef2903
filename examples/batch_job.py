"""A batch job under repart: per-ticker trade counts and volumes, kept in repart's state store.

    .venv/bin/python examples/batch_job.py [WORKDIR]

Each batch of trades goes through ``job.process``: repart routes it by the region's partition
function, folds it into the state, and tells the controller how the channels did; ``tick=True``
runs the controller in the job (a ``repart run`` daemon beside the job does it otherwise).
"""

import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from repart.spark import StatefulJob
from repart.spark.session import spark_session

workdir = sys.argv[1] if len(sys.argv) > 1 else ".repart/batch-example"
spark = spark_session()


def trades(batch_id: int) -> DataFrame:
    """50,000 trades of a few hot tickers and a long tail."""
    ranks = F.floor(F.pow(F.rand(batch_id), 3) * 500)
    ticker = F.concat(F.lit("T"), ranks.cast("string"))
    return spark.range(50_000).select(ticker.alias("ticker"), (F.col("id") % 9 + 1).alias("qty"))


job = StatefulJob(
    f"sqlite:///{workdir}/repart.db", region="trades", key="ticker", state=f"{workdir}/state",
    schema="ticker string, trades long, volume long", merge="trades=count,volume=sum(qty)", tick=True,
)  # fmt: skip
job.ensure_region(channels=4)
for batch_id in range(3):
    result = job.process(trades(batch_id), batch_id)
    print(f"batch {batch_id}: {result.input_rows} trades on {result.n_channels} channels")
job.state().orderBy(F.desc("volume")).show(5)
