"""``split_imbalance``: b and max/mean load of an applied split function on a window, as the tick
measures them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.partitioning import initial_function
from repart.partitioning.algorithms.builder import predict
from repart.partitioning.algorithms.problem import BuildParams
from repart.partitioning.domain import SPLIT_SCHEMES
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.split.build import build_split, split_imbalance
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.partitioning.split.params import SplitParams
from tests.partitioning.split.windows import ALPHA, COUNTS, WINDOW, merged_loads


@pytest.mark.parametrize("scheme", SPLIT_SCHEMES)
def test_b_of_the_built_function_on_its_window_is_the_build_s_prediction(scheme: str) -> None:
    result = build_split(initial_function(1, "str"), WINDOW, 4, split=SplitParams(scheme, theta=0.05))
    measured = split_imbalance(result.function, WINDOW, BuildParams())
    assert measured.b == pytest.approx(result.report.predicted_b)
    assert measured.max_mean_load == pytest.approx(result.report.predicted_load, rel=1e-9)
    tuples = merged_loads(result.function, COUNTS)  # the window holds every key: no untracked mass
    assert result.report.predicted_load == pytest.approx(tuples.max() / tuples.mean(), rel=1e-9)


def test_b_on_another_window_spreads_only_the_split_keys_it_holds() -> None:
    home = initial_function(4, "str")
    hot = home.lookup("a")
    function = SplitFunction(
        home,
        {
            "a": SplitEntry((hot, (hot + 1) % 4), (0.5, 0.5)),
            "gone": SplitEntry((home.lookup("gone"), (home.lookup("gone") + 2) % 4), (0.25, 0.75)),
        },
    )
    window = {key: count for key, count in COUNTS.items() if key != "b"}
    loads = merged_loads(function, window)
    measured = split_imbalance(function, FrequencyEstimate.from_counts(window), BuildParams())
    assert measured.b == pytest.approx(loads.max() / loads.min() / ALPHA)
    assert measured.max_mean_load == pytest.approx(loads.max() / loads.mean(), rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 6),
    counts=st.dictionaries(st.text("abcdefgh", min_size=1, max_size=3), st.integers(1, 500), max_size=12),
    untracked=st.integers(0, 2_000),
    explicit=st.dictionaries(st.text("abcdefgh", min_size=1, max_size=3), st.integers(0, 5), max_size=6),
)
def test_a_key_preserving_function_s_b_is_the_builder_s_prediction(
    n: int, counts: dict[str, int], untracked: int, explicit: dict[str, int]
) -> None:
    """A key-preserving function splits no key: its b and max/mean load,
    untracked mass by slot included, are ``builder.predict``'s (the tick and the demo measure both
    kinds through one function)."""
    function = replace(initial_function(n, "str"), explicit={k: c % n for k, c in explicit.items()})
    estimate = FrequencyEstimate(
        keys=tuple(counts),
        counts=np.asarray(list(counts.values()), dtype=np.float64),
        total=sum(counts.values()) + untracked,
        distinct_estimate=len(counts) + 3,
        key_type="str",
    )
    expected, _ = predict(function, function, estimate, BuildParams())
    assert split_imbalance(function, estimate, BuildParams()) == expected
