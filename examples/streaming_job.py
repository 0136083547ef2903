"""A Structured Streaming query under repart: trades arriving as JSON files, per-ticker totals kept in
repart's state store through ``foreachBatch``.

    .venv/bin/python examples/streaming_job.py [WORKDIR]

The query runs every file that has arrived (``availableNow``) and stops; run it again when more have
arrived. Its checkpoint names each micro-batch, so a query killed anywhere and restarted counts every
trade once.
"""

import json
import pathlib
import sys

from repart.spark import StatefulJob
from repart.spark.session import spark_session

workdir = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".repart/streaming-example")
incoming = workdir / "incoming"
incoming.mkdir(parents=True, exist_ok=True)
for n in range(3):  # stand-ins for files another system drops into the directory
    trades = [{"ticker": f"T{i * i % 41}", "qty": i % 9 + 1} for i in range(1000 * n, 1000 * n + 1000)]
    (incoming / f"trades-{n}.json").write_text("\n".join(json.dumps(trade) for trade in trades))
spark = spark_session()
job = StatefulJob(
    f"sqlite:///{workdir}/repart.db", region="trades", key="ticker", state=str(workdir / "state"),
    schema="ticker string, trades long, volume long", merge="trades=count,volume=sum(qty)", tick=True,
)  # fmt: skip
job.ensure_region(channels=4)
stream = spark.readStream.schema("ticker string, qty long").json(str(incoming))
query = stream.writeStream.foreachBatch(job.foreach_batch)
query = query.option("checkpointLocation", str(workdir / "checkpoint")).trigger(availableNow=True)
query.start().awaitTermination()
job.state().orderBy("ticker").show(5)
