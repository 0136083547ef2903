"""The demo's per-batch figures, on the batch's exact ticker counts (docs: concepts/metrics.md).

- ``b``: Gedik's relative imbalance (Eq. 11, LCL, α = 1.2) of the version the batch was routed with.
  A split function's split keys count on their candidates by their weights and every other key on
  its home (b on merged keys, ``split_imbalance``, as the controller and ``repart simulate --split``
  compute it); a key-preserving function is a split function without split keys.
- ``b_hash``: b of plain hashing at the same N (``slot mod N``, the key hash's top 16 bits modulo N).
- ``load``: max/mean load, the busiest channel's rows over the mean channel's (every one of the N
  channels counted, an empty one as 0), on the rows each channel's task received; ``load_hash``: the
  same for plain hashing at the same N, on the batch's exact ticker counts. Unlike b, both are finite
  when a channel is empty (``metrics.max_over_mean``).
- ``b_lb``: the lower bound no key-preserving function can beat at this N (``metrics.lower_bound``):
  the channel that holds the hottest ticker carries at least its load.
- ``memory``: the state's rows per ticker, the average number of channels a ticker's state is on
  (1 for a key-preserving region; a split ticker keeps a partial row on each channel it reached).
- ``migrated_fraction``: the state rows the batch's plan moved (consolidated partials included) over
  the rows the state held; ``ideal_fraction``: ``|ΔN| / max(N, N')``, what a scale step must move at
  least.

An infinite ratio (a channel with no load) is None, JSON's null.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from repart.demo.report import DemoRow
from repart.partitioning import ConsistentSpec, initial_function
from repart.partitioning.algorithms.problem import BuildParams
from repart.partitioning.documents import json_number
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.metrics import lower_bound, max_over_mean
from repart.partitioning.resources import Resources
from repart.partitioning.split.build import split_imbalance
from repart.sim.trades import Trades
from repart.spark.job import BatchResult

PARAMS = BuildParams(resources=Resources.parse("LCL"), alpha=1.2)


@dataclass(frozen=True)
class BatchCounts:
    """A batch's exact count of every ticker it holds."""

    keys: tuple[str, ...]
    counts: npt.NDArray[np.float64]

    @classmethod
    def of(cls, trades: Trades) -> BatchCounts:
        counted = pc.value_counts(pa.array(trades.ticker, pa.string()))
        keys = tuple(counted.field("values").to_pylist())
        return cls(keys, counted.field("counts").to_numpy().astype(np.float64))

    @property
    def estimate(self) -> FrequencyEstimate:
        """The counts as an exact frequency estimate: every key, nothing untracked."""
        return FrequencyEstimate(
            keys=self.keys,
            counts=self.counts,
            total=int(self.counts.sum()),
            distinct_estimate=len(self.keys),
            key_type="str",
        )


def batch_row(
    mode: str, outcome: BatchResult, counts: BatchCounts, *, state_rows: int, state_keys: int
) -> DemoRow:
    """The demo's row for one batch of ``mode`` (module docstring); ``state_rows`` and ``state_keys``
    are the state's rows and its tickers after the batch (at least one: a batch has a trade)."""
    n, before = outcome.n_channels, outcome.n_channels_before
    estimate = counts.estimate
    hashing = initial_function(n, "str", outcome.function.slot_bits, ConsistentSpec(method="mod"))
    moved = outcome.moved_rows or 0
    return DemoRow(
        mode=mode,
        batch=outcome.sequence,
        N=n,
        version=outcome.version,
        b=json_number(split_imbalance(outcome.function, estimate, PARAMS).b),
        b_hash=json_number(split_imbalance(hashing, estimate, PARAMS).b),
        b_lb=json_number(lower_bound(PARAMS.resources, counts.counts / estimate.total, n, PARAMS.alpha)),
        load=max_over_mean(
            np.bincount(
                [update.channel for update in outcome.updates],
                weights=[update.input_rows for update in outcome.updates],
                minlength=n,
            )
        ),
        load_hash=max_over_mean(
            np.bincount(hashing.lookup_many(counts.keys), weights=counts.counts, minlength=n)
        ),
        memory=state_rows / state_keys,
        migrated_fraction=moved / outcome.state_rows_before if outcome.state_rows_before else 0.0,
        ideal_fraction=abs(n - before) / max(n, before),
        seconds=outcome.seconds,
    )
