"""Resource functions, thresholds and metrics (Gedik §3–§4.1, Eq. 1–17) against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.partitioning.metrics import (
    channel_loads,
    imbalance,
    lower_bound,
    max_over_mean,
    migration_cost,
    relative_migration,
)
from repart.partitioning.resources import Resources, frequency_threshold, theta

# Fig. 1: eight keys with frequencies 5 3 2 1 4 3 3 1 (22 tuples); communication and a quadratic
# computation cost (β_c(x) = x, so L_c = Σ f²) are balanced; state follows the frequency (β_s(x) = x).
KEYS = ["X", "Z", "V", "R", "U", "Y", "W", "L"]
COUNTS = np.array([5, 3, 2, 1, 4, 3, 3, 1], dtype=float)
FREQ = COUNTS / COUNTS.sum()
LLL = Resources.parse("LLL")


def channels_of(groups: list[str]) -> np.ndarray:
    where = {key: channel for channel, group in enumerate(groups) for key in group}
    return np.array([where[k] for k in KEYS])


def ratios(groups: list[str]) -> tuple[float, float]:
    loads = channel_loads(LLL, FREQ, channels_of(groups), len(groups))
    result = imbalance(LLL, loads, alpha=1.0)
    return result.r[2], result.r[1]  # r_n, r_c


def test_fig1_top_optimised_for_communication() -> None:
    loads = channel_loads(LLL, FREQ, channels_of(["XZVR", "UYWL"]), 2)
    assert np.allclose(loads[2] * 22, [11, 11])  # communication [11, 11]
    assert np.allclose(loads[1] * 22**2, [39, 35])  # computation [39, 35]
    assert ratios(["XZVR", "UYWL"]) == pytest.approx((1.0, 39 / 35))  # 1 and 1.1
    r_n, r_c = ratios(["XZ", "UY", "VRWL"])
    assert round(r_n, 2) == 1.14 and round(r_c, 2) == 2.27  # text: 1.14 and 2.26
    moved = migration_cost(LLL, COUNTS, channels_of(["XZVR", "UYWL"]), channels_of(["XZ", "UY", "VRWL"]))
    assert moved == 7  # migration cost 7


def test_fig1_middle_optimised_for_computation() -> None:
    r_n, r_c = ratios(["UZYV", "XWRL"])
    assert round(r_n, 2) == 1.2 and round(r_c, 2) == 1.06  # text: 1.2 and 1.05
    r_n, r_c = ratios(["UY", "X", "ZWVRL"])
    assert r_n == pytest.approx(2.0) and round(r_c, 2) == 1.04  # text: 2 and 1.04
    moved = migration_cost(LLL, COUNTS, channels_of(["UZYV", "XWRL"]), channels_of(["UY", "X", "ZWVRL"]))
    assert moved == 10  # migration cost 10, higher than the top setup's 7


def test_fig1_bottom_optimised_for_both() -> None:
    r_n, r_c = ratios(["ZYV", "XRL", "UW"])
    assert round(r_n, 2) == 1.14 and round(r_c, 2) == 1.23  # text: 1.14 and 1.23


def test_theta_matches_eq15_and_its_derivation() -> None:
    for alpha in (1.0, 1.2, 2.0, 4.0):
        for n in (2, 3, 10, 100):
            assert theta(alpha, n) == pytest.approx(alpha * n / (alpha + n - 1) - 1)
    assert theta(1.2, 1) == 0.0


def test_delta_eq17() -> None:
    th = theta(1.2, 10)
    assert frequency_threshold(Resources.parse("LCL"), 1.2, 0.1, 10) == pytest.approx(0.1 * th / 10)
    assert frequency_threshold(Resources.parse("LQL"), 1.2, 0.1, 10, distinct=10**6) == pytest.approx(
        math.sqrt(0.1 * th / (10**6 * 10))
    )
    assert frequency_threshold(Resources.parse("LCL"), 1.2, 0.1, 1) == 1.0


def test_quadratic_post_processing_raises_delta() -> None:
    """§4.1.3: re-predict L̄_k from the selected items; δ stays capped by the linear resources."""
    f = np.full(1000, 0.0005)  # 1000 tracked keys, half the mass; 99,000 untracked keys share the rest
    lql = Resources.parse("LQL")
    first = frequency_threshold(lql, 1.2, 0.1, 10, distinct=100_000)
    refined = frequency_threshold(lql, 1.2, 0.1, 10, distinct=100_000, tracked_frequencies=f)
    th = theta(1.2, 10)
    assert first == pytest.approx(math.sqrt(0.1 * th / (100_000 * 10)))
    predicted = (1000 * 0.0005**2 + 99_000 * (0.5 / 99_000) ** 2) / 10
    assert refined == pytest.approx(math.sqrt(0.1 * th * predicted))
    assert first < refined < 0.1 * th / 10
    # with few, heavy tracked items the quadratic δ' exceeds the linear δ, which then decides
    heavy = np.array([0.3, 0.2, 0.1])
    assert frequency_threshold(lql, 1.2, 0.1, 10, distinct=1003, tracked_frequencies=heavy) == pytest.approx(
        0.1 * th / 10
    )


def test_relative_migration_and_constant_state() -> None:
    before = np.array([0, 0, 1, 1])
    after = np.array([0, 2, 1, 2])
    f = np.array([0.4, 0.3, 0.2, 0.1])
    # M = 0.3 + 0.1, L̄_s = 1/3
    assert relative_migration(Resources.parse("LCL"), f, before, after, 3) == pytest.approx(0.4 * 3)
    # β_s = 1: M counts keys (2), L̄_s = 4/3
    assert relative_migration(Resources.parse("CCL"), f, before, after, 3) == pytest.approx(2 / (4 / 3))


def test_b_leaves_out_constant_resources() -> None:
    loads = np.array([[1.0, 2.0], [1.0, 4.0], [1.0, 2.0]])
    result = imbalance(Resources.parse("LCL"), loads, alpha=1.0)
    assert result.b == pytest.approx(2.0)  # sqrt(b_s · b_n); b_c = 4 is left out
    assert result.b_k == (2.0, 4.0, 2.0)
    assert imbalance(Resources.parse("LLL"), loads, alpha=2.0).b == pytest.approx((2 * 4 * 2) ** (1 / 3) / 2)


@pytest.mark.parametrize("code", ["CCL", "LCL", "LQL", "QLL"])
def test_max_mean_load_is_the_communication_row_s(code: str) -> None:
    # s and c rows are far less even than n's: only n = [3, 1] counts, max 3 over the mean 2.
    loads = np.array([[0.0, 9.0], [1.0, 40.0], [3.0, 1.0]])
    assert imbalance(Resources.parse(code), loads, alpha=1.2).max_mean_load == 1.5


@given(
    st.lists(st.floats(min_value=1e-9, max_value=1.0), min_size=1, max_size=40),
    st.integers(min_value=1, max_value=8),
    st.sampled_from(["CCL", "LCL", "LLL", "LQL"]),
    st.data(),
)
def test_max_mean_load_is_the_rows_each_channel_gets(
    weights: list[float], n: int, code: str, data: st.DataObject
) -> None:
    f = np.array(weights) / sum(weights)
    channels = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=f.size, max_size=f.size)))
    resources = Resources.parse(code)
    result = imbalance(resources, channel_loads(resources, f, channels, n), alpha=1.2)
    rows = np.bincount(channels, weights=f, minlength=n)  # each channel's share of the tuples
    assert result.max_mean_load == pytest.approx(rows.max() / rows.mean(), rel=1e-9)
    assert math.isfinite(result.max_mean_load)
    if math.isfinite(result.b):
        assert result.max_mean_load <= result.r[2] * (1 + 1e-12)  # max/mean <= max/min


@given(st.lists(st.floats(min_value=0.0, max_value=1e12), min_size=1, max_size=64))
def test_max_over_mean_lies_between_one_and_the_channel_count(loads: list[float]) -> None:
    value = max_over_mean(np.array(loads))
    assert 1.0 <= value <= len(loads)
    if sum(loads) > 0:
        assert value == pytest.approx(max(loads) / np.mean(loads), rel=1e-9)
    else:
        assert value == 1.0


@given(st.floats(min_value=0.0, max_value=1e12), st.integers(min_value=1, max_value=64))
def test_max_over_mean_of_equal_loads_is_one(load: float, n: int) -> None:
    assert max_over_mean(np.full(n, load)) == 1.0


@given(
    st.lists(st.floats(min_value=1e-6, max_value=1e6), min_size=1, max_size=16),
    st.integers(min_value=1, max_value=16),
)
def test_max_over_mean_is_finite_with_empty_channels(busy: list[float], empty: int) -> None:
    loads = np.array(busy + [0.0] * empty)
    value = max_over_mean(loads)
    assert math.isfinite(value)
    assert value == pytest.approx(max(busy) * loads.size / sum(busy), rel=1e-9)


def test_max_over_mean_of_integer_counts() -> None:
    assert max_over_mean(np.bincount([0, 0, 0, 1], minlength=4)) == 3.0  # 3 rows over the mean 1


@given(
    st.lists(st.floats(min_value=1e-6, max_value=1.0), min_size=2, max_size=40),
    st.integers(min_value=1, max_value=8),
    st.data(),
)
def test_lower_bound_is_never_beaten(weights: list[float], n: int, data: st.DataObject) -> None:
    f = np.array(weights) / sum(weights)
    channels = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=f.size, max_size=f.size)))
    resources = Resources.parse("LLL")
    b = imbalance(resources, channel_loads(resources, f, channels, n), alpha=1.2).b
    assert b >= lower_bound(resources, f, n, alpha=1.2) * (1 - 1e-12)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: Resources.parse("LCX"), "resources"),
        (lambda: Resources.parse("LCQ"), "resources"),
        (lambda: frequency_threshold(Resources.parse("LCL"), 0.9, 0.1, 4), "alpha"),
        (lambda: frequency_threshold(Resources.parse("LCL"), 1.2, 0.0, 4), "sigma"),
        (lambda: frequency_threshold(Resources.parse("LCL"), 1.2, 1.5, 4), "sigma"),
        (lambda: frequency_threshold(Resources.parse("LCL"), 1.2, 0.1, 0), "n_channels"),
        (lambda: frequency_threshold(Resources.parse("LQL"), 1.2, 0.1, 4), "distinct"),
        (lambda: channel_loads(LLL, np.array([0.5, np.nan]), np.array([0, 1]), 2), "frequencies"),
        (lambda: channel_loads(LLL, np.array([0.5, -0.1]), np.array([0, 1]), 2), "frequencies"),
        (lambda: channel_loads(LLL, np.array([], dtype=float), np.array([], dtype=int), 2), "frequencies"),
        (lambda: max_over_mean(np.array([], dtype=float)), "loads"),
        (lambda: max_over_mean(np.array([[1.0, 2.0]])), "loads"),
        (lambda: max_over_mean(np.array([1.0, np.nan])), "loads"),
        (lambda: max_over_mean(np.array([1.0, np.inf])), "loads"),
        (lambda: max_over_mean(np.array([1.0, -1.0])), "loads"),
    ],
)
def test_bad_input_names_the_field(call, field: str) -> None:
    with pytest.raises(InvalidInput, match=field) as excinfo:
        call()
    assert excinfo.value.field == field
