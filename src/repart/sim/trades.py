"""Synthetic trades for the VWAP example: Zipf-popular tickers whose popularity drifts, at a growing rate.

Batch ``b`` holds ``round(base_trades · growth^b)`` trades. Ticker popularity is Zipf(z) over
``tickers`` symbols (``repart.sim.workload.ZipfWorkload``), and the ranking drifts: in batch ``b``
popularity rank ``r`` belongs to the ticker the workload ranks ``(r + b · drift) mod |D|``, so each
batch the hot set shifts by ``drift`` ranks (yesterday's 4th-hottest ticker is today's hottest with
drift 3). Every ticker has a fixed price level; a trade's price is that level times a small random
factor, in integer cents, and its volume is 1–1000 shares, so notional values add up exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from repart.sim.workload import ZipfWorkload, check_domain, check_zipf

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Trades:
    """One batch of trades as columns: ``ticker`` (str), ``price_cents``, ``volume`` (int64)."""

    ticker: list[str]
    price_cents: IntArray
    volume: IntArray

    def __len__(self) -> int:
        return len(self.ticker)

    @property
    def notional_cents(self) -> IntArray:
        return self.price_cents * self.volume


@dataclass(frozen=True)
class TradeStream:
    """A reproducible stream of trade batches (see the module docstring); ValueError for bad fields."""

    tickers: int = 5_000
    zipf: float = 1.0
    base_trades: int = 60_000
    growth: float = 1.25
    drift: int = 3
    seed: int = 7

    def __post_init__(self) -> None:
        check_domain(self.tickers)
        check_zipf(self.zipf)
        if (
            isinstance(self.base_trades, bool)
            or not isinstance(self.base_trades, int)
            or self.base_trades < 1
        ):
            raise ValueError(f"base_trades must be an integer >= 1, got {self.base_trades!r}")
        if not isinstance(self.growth, int | float) or not 0.1 <= self.growth <= 10:
            raise ValueError(f"growth must be a number in [0.1, 10], got {self.growth!r}")
        if isinstance(self.drift, bool) or not isinstance(self.drift, int) or self.drift < 0:
            raise ValueError(f"drift must be an integer >= 0, got {self.drift!r}")

    @cached_property
    def _workload(self) -> ZipfWorkload:
        return ZipfWorkload(self.zipf, self.tickers, key_seed=self.seed)

    @cached_property
    def symbols(self) -> list[str]:
        """Ticker symbols ``T00000`` …, one per key of the workload."""
        width = len(str(self.tickers - 1))
        return [f"T{key:0{width}d}" for key in range(self.tickers)]

    @cached_property
    def _price_levels(self) -> IntArray:
        rng = np.random.default_rng(self.seed + 1)
        return rng.integers(100, 50_000, size=self.tickers, dtype=np.int64)

    def size(self, batch: int) -> int:
        """The number of trades in batch ``batch``."""
        return max(1, round(self.base_trades * self.growth**batch))

    def batch(self, batch: int) -> Trades:
        """Batch number ``batch`` (>= 0), the same every time it is asked for."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
            raise ValueError(f"batch must be an integer >= 0, got {batch!r}")
        rng = np.random.default_rng([self.seed, batch])
        ranks = self._workload.sample_ranks(self.size(batch), rng)
        keys = self._workload.keys[(ranks + batch * self.drift) % self.tickers]
        levels = self._price_levels[keys]
        noise = rng.integers(-200, 201, size=len(keys), dtype=np.int64)  # ±2 % in basis points
        price = np.maximum(1, levels + levels * noise // 10_000)
        volume = rng.integers(1, 1_001, size=len(keys), dtype=np.int64)
        symbols = self.symbols
        return Trades(ticker=[symbols[k] for k in keys.tolist()], price_cents=price, volume=volume)
