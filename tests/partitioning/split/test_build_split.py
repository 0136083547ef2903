"""``build_split`` on crafted windows: the head, the homes, the report's numbers against oracles, and
the builder's fixed loads it relies on."""

from __future__ import annotations

import json

import numpy as np
import pytest

from repart.errors import InvalidInput
from repart.partitioning import initial_function
from repart.partitioning.algorithms.builder import build
from repart.partitioning.algorithms.problem import BuildParams
from repart.partitioning.domain import SPLIT_SCHEMES
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.function import PartitionFunction
from repart.partitioning.hashing import hash_keys
from repart.partitioning.metrics import lower_bound
from repart.partitioning.resources import Resources
from repart.partitioning.split import build as split_build
from repart.partitioning.split.build import build_split
from repart.partitioning.split.candidates import rendezvous_order
from repart.partitioning.split.function import SplitFunction
from repart.partitioning.split.params import SplitParams
from tests.partitioning.split.windows import ALPHA, COUNTS, HEAD, WINDOW, merged_loads


@pytest.mark.parametrize("scheme", SPLIT_SCHEMES)
def test_the_head_is_exactly_the_keys_at_or_above_theta_and_the_report_matches_oracles(scheme: str) -> None:
    result = build_split(initial_function(1, "str"), WINDOW, 4, split=SplitParams(scheme, theta=0.05))
    function, report = result.function, result.report
    assert isinstance(function, SplitFunction) and function.n_channels == 4
    assert set(function.split) == HEAD and report.split_keys == 4
    assert dict(report.head) == dict(function.split)
    for key, entry in function.split.items():
        assert entry.candidates[0] == function.home.lookup(key) == 0  # where its state was (N = 1)
        assert sum(entry.weights) == pytest.approx(1.0)
    loads = merged_loads(function, COUNTS)
    assert loads.sum() == pytest.approx(1000)
    assert report.predicted_b == pytest.approx(loads.max() / loads.min() / ALPHA)
    positive = sum(sum(w > 0 for w in entry.weights) - 1 for entry in function.split.values())
    assert report.memory == pytest.approx((29 + positive) / 29)
    resources = Resources.parse("LCL")
    assert report.b_lb == pytest.approx(lower_bound(resources, WINDOW.frequencies, 4, ALPHA))
    assert report.theta == 0.05 and report.scheme == scheme
    assert (report.d is not None) == (scheme == "dchoices")
    assert json.loads(json.dumps(report.to_json_dict()))["head"] == [
        [key, list(function.split[key].candidates), list(function.split[key].weights)] for key in sorted(HEAD)
    ]


@pytest.mark.parametrize(("bound", "kept"), [(16, "abct"), (15, "abc"), (8, "ab"), (7, "a"), (3, "")])
def test_the_head_ends_where_its_alias_tables_would_pass_the_bound(
    monkeypatch: pytest.MonkeyPatch, bound: int, kept: str
) -> None:
    # W-Choices at N = 4: each of the four head keys (hottest first: a, b, c, t) has 4 candidates, a
    # table of 4 buckets; the keys past the bound stay on their homes, unsplit.
    monkeypatch.setattr(split_build, "MAX_ALIAS_BUCKETS", bound)
    result = build_split(initial_function(1, "str"), WINDOW, 4, split=SplitParams("wchoices", theta=0.05))
    assert list(result.function.split) == list(kept) and result.report.split_keys == len(kept)
    assert all(len(entry.candidates) == 4 for entry in result.function.split.values())
    for key in HEAD - set(kept):
        assert result.function.candidates(key) == (result.function.home.lookup(key),)


def test_weights_balance_the_channels_when_the_candidates_cover_them() -> None:
    # W-Choices: 750 split tuples over all 4 channels fill every channel to 250 whatever the home
    # function does with the 25 keys of 10.
    report = build_split(initial_function(1, "str"), WINDOW, 4, split=SplitParams("wchoices")).report
    assert report.predicted_b == pytest.approx(1 / ALPHA)


def test_rr_weights_are_uniform_over_all_channels() -> None:
    function = build_split(initial_function(1, "str"), WINDOW, 4, split=SplitParams("rr")).function
    for entry in function.split.values():
        assert sorted(entry.candidates) == [0, 1, 2, 3] and entry.weights == (0.25,) * 4


def test_a_split_key_keeps_its_home_and_one_whose_channel_is_gone_takes_its_first_hash_choice() -> None:
    previous = PartitionFunction(n_channels=8, key_type="str", explicit={"a": 7, "b": 2})
    result = build_split(previous, WINDOW, 4, split=SplitParams("dchoices", seed=9))
    homes = {key: entry.candidates[0] for key, entry in result.function.split.items()}
    assert homes["b"] == 2
    assert homes["a"] == rendezvous_order(hash_keys(["a"]), 4, 9)[0, 0]
    again = build_split(result.function, WINDOW, 5, split=SplitParams("dchoices", seed=9)).function
    assert all(again.split[key].candidates[0] == home for key, home in homes.items())


def test_one_channel_splits_nothing() -> None:
    result = build_split(initial_function(1, "str"), WINDOW, 1, split=SplitParams("dchoices"))
    assert result.function.split == {} and result.report.split_keys == 0 and result.report.d is None
    assert result.report.memory == 1.0


def test_the_lower_bound_counts_the_untracked_keys() -> None:
    # 1,000 more tuples the window did not keep, spread over 1,000 further keys
    window = FrequencyEstimate.from_counts(COUNTS, total=2000, distinct_estimate=1029)
    report = build_split(initial_function(1, "str"), window, 4, split=SplitParams("pkg")).report
    frequencies = np.concatenate([window.frequencies, np.full(1000, 0.5 / 1000)])
    assert report.b_lb == pytest.approx(lower_bound(Resources.parse("LCL"), frequencies, 4, ALPHA))
    assert report.memory > 1.0 and report.memory < 1.01


def test_bad_arguments_are_named() -> None:
    with pytest.raises(InvalidInput) as excinfo:
        build_split(initial_function(1, "str"), WINDOW, 4, split="dchoices")  # type: ignore[arg-type]
    assert excinfo.value.field == "split"
    with pytest.raises(InvalidInput) as excinfo:
        build_split("p0", WINDOW, 4, split=SplitParams("pkg"))  # type: ignore[arg-type]
    assert excinfo.value.field == "previous"
    with pytest.raises(InvalidInput) as excinfo:
        build_split(initial_function(1, "str"), WINDOW, 0, split=SplitParams("pkg"))
    assert excinfo.value.field == "n_channels"
    with pytest.raises(InvalidInput) as excinfo:
        build_split(initial_function(1, "int"), WINDOW, 4, split=SplitParams("pkg"))
    assert excinfo.value.field == "estimate"


def test_the_builder_places_keys_around_fixed_loads() -> None:
    window = FrequencyEstimate.from_counts({"x": 50, "y": 50})
    params = BuildParams(utility="A")
    fixed = np.zeros((3, 2))
    fixed[:, 0] = 100.0
    result = build(initial_function(1, "str"), window, 2, params, "redist", fixed_loads=fixed)
    assert result.function.lookup("x") == result.function.lookup("y") == 1
    assert result.report.predicted_b == pytest.approx(1 / ALPHA)  # 100 on each channel
    plain = build(initial_function(1, "str"), window, 2, params, "redist")
    assert plain.function.lookup("x") != plain.function.lookup("y")
    with pytest.raises(InvalidInput) as excinfo:
        build(initial_function(1, "str"), window, 2, params, "redist", fixed_loads=np.zeros((3, 3)))
    assert excinfo.value.field == "fixed_loads"
