"""Every grouping's compiled kernel against its line-by-line reference, chunking, state and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.partitioning.groupings import SCHEMES, Fish, make_grouping, optimal_choices
from repart.partitioning.groupings.fish import waiting_choice
from tests.partitioning.groupings import reference as ref
from tests.partitioning.groupings.reference import check, zipf_keys

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def streams(draw: st.DrawFn) -> tuple[int, int, int, np.ndarray, np.ndarray, list[int]]:
    n = draw(st.sampled_from([1, 2, 3, 5, 8, 13, 65, 100]))  # 65 and 100: bitsets of two words
    sources = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32))
    size = draw(st.integers(1, 1500))
    z = draw(st.sampled_from([0.0, 0.8, 1.2, 2.0]))
    distinct = draw(st.integers(1, 60))
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    keys = zipf_keys(rng, size, distinct, z)
    origins = rng.integers(0, sources, size)
    cuts = sorted(draw(st.lists(st.integers(0, size), max_size=4)))
    return n, sources, seed, keys, origins, cuts


@SETTINGS
@given(streams())
def test_hashed_groupings_equal_their_references(stream) -> None:  # type: ignore[no-untyped-def]
    n, sources, seed, keys, origins, cuts = stream
    check(make_grouping("kg", n, sources, seed=seed), ref.KG(n, sources, seed), keys, origins, cuts)
    check(make_grouping("sg", n, sources, seed=seed), ref.SG(n, sources, seed), keys, origins, cuts)
    check(make_grouping("pkg", n, sources, seed=seed), ref.PKG(n, sources, seed), keys, origins, cuts)
    d = 2 + seed % 5
    check(
        make_grouping("pkg", n, sources, seed=seed, choices=d),
        ref.PKG(n, sources, seed, d),
        keys,
        origins,
        cuts,
    )


@SETTINGS
@given(streams())
def test_key_preserving_baselines_equal_their_references(stream) -> None:  # type: ignore[no-untyped-def]
    n, sources, seed, keys, origins, cuts = stream
    for rule in ("potc", "on-greedy"):
        sticky, reference = make_grouping(rule, n, sources, seed=seed), ref.Sticky(n, sources, seed, rule)
        check(sticky, reference, keys, origins, cuts)
        assert sticky.assignment() == reference.table
    distinct, counts = np.unique(keys, return_counts=True)
    check(
        make_grouping("off-greedy", n, sources, seed=seed, key_hashes=distinct, counts=counts),
        ref.OffGreedy(n, sources, seed, dict(zip(distinct.tolist(), counts.tolist(), strict=True))),
        keys,
        origins,
        cuts,
    )


@SETTINGS
@given(streams(), st.sampled_from([None, 0.05, 0.3]), st.integers(2, 40), st.sampled_from([1, 7, 100]))
def test_head_groupings_equal_their_references(stream, theta, capacity, every) -> None:  # type: ignore[no-untyped-def]
    n, sources, seed, keys, origins, cuts = stream
    th = 1 / (5 * n) if theta is None else theta
    for mode in ("dchoices", "wchoices", "rr"):
        grouping = make_grouping(
            mode, n, sources, seed=seed, theta=theta, capacity=capacity, recompute_every=every
        )
        reference = ref.Head(n, sources, seed, mode, th, capacity, recompute_every=every)
        check(grouping, reference, keys, origins, cuts)
        for s in range(sources):
            assert [(k, c, e) for k, c, e in grouping.summary(s)] == sorted(
                ((int(k), c, e) for k, c, e in reference.ss[s].slots),
                key=lambda entry: (-entry[1], reference.ss[s].where[entry[0]]),
            )
        if mode == "dchoices":
            assert grouping.d.tolist() == reference.d


@SETTINGS
@given(
    streams(),
    st.integers(1, 60),
    st.sampled_from([0.3, 0.5, 1.0]),
    st.sampled_from([1.0, 2.0]),
    st.integers(1, 3),
    st.sampled_from([(1.0,), (1.0, 2.0), (0.5, 1.0, 3.0)]),
)
def test_fish_equals_its_reference(stream, epoch, decay, spread, tail, pattern) -> None:  # type: ignore[no-untyped-def]
    n, sources, seed, keys, origins, cuts = stream
    rates = [pattern[i % len(pattern)] for i in range(n)]
    params = dict(theta=0.1, epoch=epoch, decay=decay, spread=spread, tail_choices=tail, capacity=8)
    grouping = make_grouping(
        "fish", n, sources, seed=seed, rates=rates, arrival_rate=0.9 * sum(rates), virtual_nodes=5, **params
    )
    reference = ref.FISH(
        n, sources, seed, rates=rates, arrival_rate=0.9 * sum(rates), virtual_nodes=5, **params
    )
    check(grouping, reference, keys, origins, cuts)
    for s in range(sources):
        assert grouping.widths(s) == reference.width[s]


@SETTINGS
@given(
    streams(),
    st.integers(1, 20),
    st.integers(1, 50),
    st.integers(1, 4),
    st.integers(0, 100),
    st.sampled_from([None, 0, 3, 40]),
)
def test_dkg_equals_its_reference(stream, expected, cycle, old_every, warmup, interval) -> None:  # type: ignore[no-untyped-def]
    n, sources, seed, keys, origins, cuts = stream
    params = dict(
        expected_keys=expected, cycle=cycle, old_every=old_every, warmup=warmup, check_interval=interval
    )
    grouping = make_grouping("dkg", n, sources, seed=seed, **params)
    reference = ref.DKG(n, sources, seed, **params)
    check(grouping, reference, keys, origins, cuts)
    for s in range(sources):
        start = min(2, n)  # every key's first width; the reference stores only changed ones
        assert {k: w for k, w in grouping.widths(s).items() if w != start} == {
            k: w for k, w in reference.width[s].items() if w != start
        }
        spaces = grouping.spaces(s)
        for name, code in (("baby", 0), ("teenage", 1), ("old", 2)):
            assert spaces[name] == {k for k, item in reference.items[s].items() if item[1] == code}


def test_table_growth_keeps_every_key() -> None:
    """More distinct keys than the first table holds: the greedy tables and DKG grow and still agree."""
    rng = np.random.default_rng(3)
    keys = rng.integers(1, 2**63, 5000, dtype=np.int64).astype(np.uint64)
    origins = rng.integers(0, 3, keys.size)
    check(make_grouping("on-greedy", 7, 3, seed=1), ref.Sticky(7, 3, 1, "on-greedy"), keys, origins, [])
    params = dict(expected_keys=30, cycle=200, old_every=2, warmup=100)
    check(make_grouping("dkg", 7, 3, seed=1, **params), ref.DKG(7, 3, 1, **params), keys, origins, [1234])


def test_fish_with_its_defaults_and_a_growing_key_table_equals_its_reference() -> None:
    """Default θ and capacity, and more hot keys than the first key table holds (it grows mid-stream)."""
    rng = np.random.default_rng(5)
    keys = zipf_keys(rng, 30_000, 3000, 0.3)
    origins = rng.integers(0, 2, keys.size)
    params = dict(
        rates=[1.0, 2.0, 1.5, 1.0], arrival_rate=4.0, theta=0.0005, epoch=50, capacity=4000, virtual_nodes=7
    )
    grouping = make_grouping("fish", 4, 2, seed=2, **params)
    reference = ref.FISH(4, 2, 2, decay=0.8, spread=4.0, tail_choices=1, **params)
    check(grouping, reference, keys, origins, [7_000])
    assert sum(len(grouping.widths(s)) for s in range(2)) > 1024  # the table grew past its first size
    defaults = make_grouping("fish", 6, 2, seed=3)
    default_reference = ref.FISH(
        6,
        2,
        3,
        rates=[1.0] * 6,
        arrival_rate=0.9 * 6,
        theta=1 / 30,
        epoch=100,
        decay=0.8,
        spread=4.0,
        tail_choices=1,
        capacity=300,
        virtual_nodes=100,
    )
    check(defaults, default_reference, keys[:5000], origins[:5000], [])


def test_optimal_choices_matches_the_reference_and_the_paper_start() -> None:
    head = [0.3, 0.1, 0.05]
    d = optimal_choices(np.array(head), 0.55, 50, 1e-4)
    assert d == ref.find_optimal_choices(head, 0.55, 50, 1e-4)
    assert d >= math.ceil(0.3 * 50)  # starts at ⌈p1·n⌉
    assert optimal_choices(np.array([0.001]), 0.999, 10, 1e-4) == 2  # clamped to d ≥ 2
    assert optimal_choices(np.array([0.9]), 0.1, 10, 1e-4) == 10  # d reaches n: W-Choices
    assert optimal_choices(np.array([], dtype=np.float64), 1.0, 10, 1e-4) == 2


def test_fish_worked_example_of_fig_7() -> None:
    """FISH Fig. 7: sent 400, 440, 280, 180; estimated waits 50, 40, 100, 60: the second worker wins.

    The figure's per-worker costs and busy periods are not in the text; with costs (1, 1, 2, 2) and the
    queues last empty at 150, 100, 40 and 200 the Lindley estimate reproduces its waits at time 500.
    """
    costs = np.array([1.0, 1.0, 2.0, 2.0])
    sent = np.array([400, 440, 280, 180])
    idle_until = np.array([150.0, 100.0, 40.0, 200.0])
    finish = idle_until + sent * costs
    assert (np.maximum(0, finish - 500)).tolist() == [50.0, 40.0, 100.0, 60.0]
    candidates = np.arange(4, dtype=np.int32).reshape(1, 4)
    assert waiting_choice(candidates, 0, 4, finish.reshape(1, 4), 0, 500.0) == 1
    assert int(np.argmin(sent)) == 3  # choosing by tuples sent (PKG, W-Choices) would pick the fourth


def test_fish_sends_to_the_faster_worker_under_load() -> None:
    """A hot key on a fast and a slow worker: the fast one gets about twice the tuples."""
    keys = np.full(20_000, 12345, dtype=np.uint64)
    fish = Fish(2, 1, rates=[2.0, 1.0], arrival_rate=2.7, theta=0.5, epoch=100, virtual_nodes=10)
    workers = fish.route(keys, np.zeros(keys.size, dtype=np.int64))
    share = np.bincount(workers, minlength=2) / keys.size
    assert share[0] == pytest.approx(2 / 3, abs=0.02)
    assert fish.widths(0)[12345] == 2


@pytest.mark.parametrize("scheme", [s for s in SCHEMES if s != "off-greedy"])
def test_state_is_inspectable_and_loads_add_up(scheme: str) -> None:
    rng = np.random.default_rng(0)
    keys = zipf_keys(rng, 30_000, 500, 1.5)
    origins = np.arange(keys.size) % 3
    grouping = make_grouping(scheme, 10, 3, seed=4)
    workers = grouping.route(keys, origins)
    assert grouping.loads.sum() == keys.size
    assert np.bincount(workers, minlength=10).tolist() == grouping.loads.sum(axis=0).tolist()
    assert 1 <= grouping.max_choices() <= 10
    assert grouping.head_size() >= 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(scheme="pkg", workers=0, sources=1), "workers"),
        (dict(scheme="pkg", workers=2, sources=0), "sources"),
        (dict(scheme="nope", workers=2, sources=1), "scheme"),
        (dict(scheme="dchoices", workers=2, sources=1, theta=0.0), "theta"),
        (dict(scheme="wchoices", workers=2, sources=1, theta=1.5), "theta"),
        (dict(scheme="fish", workers=2, sources=1, rates=[1.0, 0.0]), "rates"),
        (dict(scheme="fish", workers=2, sources=1, rates=[1.0]), "rates"),
        (dict(scheme="fish", workers=2, sources=1, arrival_rate=-1.0), "arrival_rate"),
        (dict(scheme="fish", workers=2, sources=1, decay=1.5), "decay"),
        (dict(scheme="dkg", workers=2, sources=1, cycle=0), "cycle"),
        (dict(scheme="pkg", workers=2, sources=1, seed="x"), "seed"),
    ],
)
def test_bad_parameters_name_the_field(kwargs: dict, field: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidInput, match=field) as excinfo:
        make_grouping(**kwargs)
    assert excinfo.value.field.startswith(field)


def test_bad_streams_name_the_field() -> None:
    grouping = make_grouping("pkg", 4, 2)
    with pytest.raises(InvalidInput, match="key_hashes") as excinfo:
        grouping.route(np.arange(3, dtype=np.int64), np.zeros(3, dtype=np.int64))  # type: ignore[arg-type]
    assert excinfo.value.field == "key_hashes"
    with pytest.raises(InvalidInput, match=r"sources must be source ids in \[0, 1\], got 0 to 2") as excinfo:
        grouping.route(np.arange(3, dtype=np.uint64), np.array([0, 1, 2]))
    assert excinfo.value.field == "sources"
    with pytest.raises(InvalidInput, match="sources must be one-dimensional") as excinfo:
        grouping.route(np.arange(3, dtype=np.uint64), np.array([0, 1]))
    assert excinfo.value.field == "sources"
    with pytest.raises(InvalidInput, match="off-greedy") as excinfo:
        make_grouping("off-greedy", 4, 1, key_hashes=np.array([1], dtype=np.uint64), counts=[3]).route(
            np.array([2], dtype=np.uint64), np.array([0])
        )
    assert excinfo.value.field == "key_hashes"
    assert grouping.loads.sum() == 0  # nothing was routed
