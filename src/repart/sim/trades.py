"""Synthetic trades for the VWAP example: Zipf-popular tickers whose popularity drifts, at a growing rate.

Batch ``b`` holds ``round(base_trades · growth^b)`` trades. Ticker popularity starts as Zipf(z) over
``tickers`` symbols (``repart.sim.workload.ZipfWorkload``) and drifts: every ticker's weight is
multiplied, batch after batch, by ``exp(drift · g)`` with ``g`` a fresh standard normal draw (a
geometric random walk), so hot tickers cool down and others heat up gradually, the way interest in
stocks moves. Every ticker has a fixed price level; a trade's price is that level times a small random
factor, in integer cents, and its volume is 1–1000 shares, so notional values add up exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from repart.sim.workload import DOMAIN, ZIPF_SKEW, ZipfWorkload
from repart.validation import NON_NEGATIVE_INT, POSITIVE_INT, Interval, check

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
    """A reproducible stream of trade batches (see the module docstring); ``InvalidInput`` naming a bad
    field."""

    tickers: int = 20_000
    zipf: float = 0.9
    base_trades: int = 60_000
    growth: float = 1.15
    drift: float = 0.15
    seed: int = 7

    def __post_init__(self) -> None:
        check("tickers", self.tickers, DOMAIN)
        check("zipf", self.zipf, ZIPF_SKEW)
        check("base_trades", self.base_trades, POSITIVE_INT)
        check("growth", self.growth, Interval(float, 0.1, 10))
        check("seed", self.seed, Interval(int, 0, 2**63, closed="left"))
        check("drift", self.drift, Interval(float, 0, 2))

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

    def popularity(self, batch: int) -> npt.NDArray[np.float64]:
        """The probability of every ticker (indexed like ``symbols``) in batch ``batch``."""
        steps = np.random.default_rng([self.seed, 2]).standard_normal((batch, self.tickers))
        weights = np.empty(self.tickers)
        weights[self._workload.keys] = self._workload.frequencies
        weights *= np.exp(self.drift * steps.sum(axis=0))
        return np.asarray(weights / weights.sum(), dtype=np.float64)

    def batch(self, batch: int) -> Trades:
        """Batch number ``batch`` (>= 0), the same every time it is asked for."""
        check("batch", batch, NON_NEGATIVE_INT)
        rng = np.random.default_rng([self.seed, 1, batch])
        cumulative = np.cumsum(self.popularity(batch))
        cumulative[-1] = 1.0
        keys = np.searchsorted(cumulative, rng.random(self.size(batch)), side="right")
        levels = self._price_levels[keys]
        noise = rng.integers(-200, 201, size=len(keys), dtype=np.int64)  # ±2 % in basis points
        price = np.maximum(1, levels + levels * noise // 10_000)
        volume = rng.integers(1, 1_001, size=len(keys), dtype=np.int64)
        symbols = self.symbols
        return Trades(ticker=[symbols[k] for k in keys.tolist()], price_cents=price, volume=volume)
