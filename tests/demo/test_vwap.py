"""The VWAP pipeline's contract with a split region, checked before the batch runs a Spark job."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from repart.demo.vwap import MERGE, VwapPipeline
from repart.errors import InvalidInput
from repart.partitioning.function import PartitionFunction
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.protocol.client import AppliedFunction, PlanToApply
from repart.protocol.merge import MergeSpec
from repart.protocol.snapshot import Snapshot
from repart.sim.trades import TradeStream

HOME = PartitionFunction(n_channels=2, explicit={"T0": 0})
SPLIT = SplitFunction(HOME, {"T0": SplitEntry((0, 1), (0.5, 0.5))})


class SplitRegion:
    """A controller whose region routes with a split function but declares no merge (a region that left
    split mode and dropped its merge), with no plan pending; the job must stop before it submits or
    reports anything."""

    def applied_function(self, region: str) -> AppliedFunction:
        return AppliedFunction(2, SPLIT)

    def region_merge(self, region: str) -> MergeSpec | None:
        return None

    def claim_next_plan(self, region: str) -> PlanToApply | None:
        return None

    def report_plan(self, plan_id: int, outcome: str, **details: Any) -> None:
        raise AssertionError("no plan was claimed")

    def submit_snapshot(self, snapshot: Snapshot) -> str:
        raise AssertionError("the batch must not be observed")

    def report_batch(
        self, region: str, batch_id: int, payload: Mapping[str, Any], plan_id: int | None
    ) -> int:
        raise AssertionError("the batch must not be reported")


def test_a_split_function_needs_the_regions_merge(spark: SparkSession, tmp_path: Path) -> None:
    pipeline = VwapPipeline(spark, SplitRegion(), "vwap", tmp_path / "state")
    assert pipeline.store.function_digest == SPLIT.digest  # the store is laid out by the split function
    generation = pipeline.store.generation
    with pytest.raises(
        InvalidInput, match="merge is required: region 'vwap' routes with a split function"
    ) as raised:
        pipeline.run_batch(0, TradeStream(tickers=10, base_trades=20).batch(0))
    assert raised.value.field == "merge" and "repart region update vwap --merge" in str(raised.value)
    assert pipeline.store.generation == generation and pipeline.store.rows() == 0
    assert MERGE.to_text() == "notional_cents=sum,trades=sum,volume=sum"
