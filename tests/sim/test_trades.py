"""The synthetic trade stream of the VWAP example: reproducible, growing, drifting, exact notionals."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from repart.errors import InvalidInput
from repart.sim.trades import TradeStream


def test_batches_are_reproducible_and_grow() -> None:
    stream = TradeStream(tickers=500, base_trades=1_000, growth=1.5, seed=3)
    first, again = stream.batch(2), TradeStream(tickers=500, base_trades=1_000, growth=1.5, seed=3).batch(2)
    assert first.ticker == again.ticker
    assert np.array_equal(first.price_cents, again.price_cents) and np.array_equal(first.volume, again.volume)
    assert [len(stream.batch(b)) for b in range(3)] == [1_000, 1_500, 2_250]
    assert set(first.ticker) <= set(stream.symbols) and len(set(stream.symbols)) == 500


def test_popularity_starts_as_zipf_and_drifts_gradually() -> None:
    stream = TradeStream(tickers=200, zipf=1.2, base_trades=200_000, growth=1.0, drift=0.15, seed=5)
    start = stream.popularity(0)
    harmonic = float(np.sum(np.arange(1, 201, dtype=float) ** -1.2))
    assert np.sort(start)[::-1] == pytest.approx(np.arange(1, 201, dtype=float) ** -1.2 / harmonic)
    counts = Counter(stream.batch(0).ticker)
    top = max(counts, key=counts.__getitem__)
    assert counts[top] / 200_000 == pytest.approx(start.max(), rel=0.03)
    assert stream.symbols[int(start.argmax())] == top
    # One batch moves every weight by a factor exp(0.15 g), g ~ N(0, 1): close to, but not, the last one.
    ratio = stream.popularity(1) / start
    assert 0.6 < float(np.median(ratio)) < 1.5
    assert float(np.std(np.log(ratio))) == pytest.approx(0.15, rel=0.2)
    assert np.corrcoef(start, stream.popularity(1))[0, 1] > 0.9
    assert TradeStream(tickers=200, zipf=1.2, drift=0.0).popularity(5) == pytest.approx(
        TradeStream(tickers=200, zipf=1.2, drift=0.0).popularity(0)
    )


def test_prices_and_volumes_are_positive_integers_with_exact_notional() -> None:
    trades = TradeStream(tickers=50, base_trades=5_000).batch(0)
    assert trades.price_cents.min() >= 1 and trades.volume.min() >= 1 and trades.volume.max() <= 1_000
    assert trades.notional_cents.dtype == np.int64
    assert np.array_equal(trades.notional_cents, trades.price_cents * trades.volume)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("tickers", 0, "tickers"),
        ("base_trades", 0, "base_trades"),
        ("growth", 0.0, "growth"),
        ("drift", -0.1, "drift"),
        ("seed", -1, "seed"),
    ],
)
def test_bad_parameters_are_named(field: str, value: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as excinfo:
        TradeStream(**{field: value})  # type: ignore[arg-type]
    assert excinfo.value.field == field
    with pytest.raises(InvalidInput, match="batch") as excinfo:
        TradeStream().batch(-1)
    assert excinfo.value.field == "batch"
