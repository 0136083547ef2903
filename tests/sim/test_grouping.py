"""The stream-grouping experiment: records, metrics against an independent count, averaging, chunking."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
from rich.console import Console
from rich.progress import Progress

from repart.errors import InvalidInput
from repart.partitioning.groupings import SCHEMES, make_grouping
from repart.sim.grouping import (
    RECORD_FIELDS,
    GroupingConfig,
    build_grouping,
    route_stream,
    run_grouping_experiment,
    select,
    steps,
    stream_frequencies,
)

# 50 keys, Zipf(1): the rarest key still has ~90 of the 20,000 tuples, so SG spreads every key over
# every worker.
SMALL = GroupingConfig(workers=(4, 8), sources=3, keys=50, messages=20_000, seed=3)


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return run_grouping_experiment(SMALL)


def test_one_record_per_n_and_scheme_with_exactly_the_documented_fields(records: list[dict]) -> None:
    assert len(records) == 2 * len(SCHEMES) == steps(SMALL)
    assert [(r["n"], r["scheme"]) for r in records] == [(n, s) for n in (4, 8) for s in SCHEMES]
    for record in records:
        assert tuple(record) == RECORD_FIELDS
        assert record["workload"] == "zipf" and record["z"] == 1.0
        assert record["sources"] == 3 and record["messages"] == 20_000
        assert isinstance(record["head_size"], int) and isinstance(record["d"], int)
        assert 1.0 <= record["memory"] <= record["n"]
        assert record["seconds"] >= 0


def test_key_grouping_keeps_each_key_on_one_worker_and_shuffle_spreads_it_over_all(
    records: list[dict],
) -> None:
    for n in (4, 8):
        (kg,) = select(records, scheme="kg", n=n)
        (sg,) = select(records, scheme="sg", n=n)
        (pkg,) = select(records, scheme="pkg", n=n)
        assert kg["memory"] == 1.0 and kg["d"] == 1 and kg["head_size"] == 0
        assert sg["memory"] == float(n) and sg["d"] == n
        assert pkg["memory"] <= 2.0 and pkg["d"] == 2
        assert sg["imbalance"] <= 3 / 20_000  # round robin per source: one tuple ahead per source
        assert kg["imbalance"] > pkg["imbalance"]  # the hot key of Zipf(1) overloads KG
        assert kg["load_std"] > pkg["load_std"]
    for record in select(records, scheme="off-greedy"):
        assert record["memory"] == 1.0


@pytest.mark.parametrize("scheme", ["pkg", "off-greedy", "fish"])
def test_metrics_match_an_independent_computation_from_the_workers(records: list[dict], scheme: str) -> None:
    n, m = 8, SMALL.messages
    (record,) = select(records, scheme=scheme, n=n)
    stream = SMALL.stream(1.0, 0)
    params: dict = {}
    if scheme == "off-greedy":
        hashes = {int(h) for h in stream.key_hashes}
        counts = {h: int(np.sum(stream.key_hashes == np.uint64(h))) for h in hashes}
        params = {
            "key_hashes": np.array(sorted(counts), dtype=np.uint64),
            "counts": np.array([counts[h] for h in sorted(counts)], dtype=np.int64),
        }
    elif scheme == "fish":
        params = {"rates": np.ones(n), "arrival_rate": 0.9 * n}
    grouping = make_grouping(scheme, n, 3, seed=SMALL.seed, **params)
    workers = grouping.route(stream.key_hashes, stream.sources)
    loads = np.bincount(workers, minlength=n)
    assert record["imbalance"] == pytest.approx((loads.max() - m / n) / m, abs=1e-12)
    assert record["load_std"] == pytest.approx(np.std(100 * loads / m), abs=1e-9)
    pairs = {(int(k), int(w)) for k, w in zip(stream.key_ids, workers, strict=True)}
    assert record["memory"] == pytest.approx(len(pairs) / len({k for k, _ in pairs}))
    assert record["saturation"] == pytest.approx(m / loads.max())  # all μ = 1
    assert record["head_size"] == grouping.head_size() and record["d"] == grouping.max_choices()
    # latency: deterministic arrivals at λ = 0.9 n, unit service, FIFO per worker
    finish, latencies = np.zeros(n), []
    for t, w in enumerate(workers.tolist()):
        arrival = t / (0.9 * n)
        finish[w] = max(finish[w], arrival) + 1.0
        latencies.append(finish[w] - arrival)
    assert record["latency_mean"] == pytest.approx(np.mean(latencies))
    assert record["latency_p99"] == pytest.approx(np.percentile(latencies, 99))


def test_off_greedy_is_given_the_distinct_keys_of_the_stream_and_their_counts() -> None:
    stream = SMALL.stream(1.0, 0)
    hashes, counts = stream_frequencies(stream)
    assert hashes.size == np.unique(stream.key_hashes).size == counts.size
    assert int(counts.sum()) == stream.messages
    top = hashes[np.argmax(counts)]
    assert int(np.sum(stream.key_hashes == top)) == int(counts.max())


@pytest.mark.parametrize("scheme", ["pkg", "dchoices", "fish", "dkg", "on-greedy"])
def test_chunked_routing_equals_routing_the_whole_stream(scheme: str) -> None:
    stream = SMALL.stream(1.0, 0)
    chunked, seconds = route_stream(build_grouping(scheme, 8, stream, SMALL, 5), stream, chunk=997)
    whole = build_grouping(scheme, 8, stream, SMALL, 5).route(stream.key_hashes, stream.sources)
    assert seconds > 0
    np.testing.assert_array_equal(chunked, whole)


def test_runs_are_averaged_with_seed_plus_r() -> None:
    base = dataclasses.replace(SMALL, schemes=("kg", "pkg", "dchoices"), workers=(4,))
    averaged = run_grouping_experiment(dataclasses.replace(base, runs=2))
    first = run_grouping_experiment(base)
    second = run_grouping_experiment(dataclasses.replace(base, seed=base.seed + 1))
    assert len(averaged) == 3
    for mean, a, b in zip(averaged, first, second, strict=True):
        assert tuple(mean) == RECORD_FIELDS
        assert (mean["scheme"], mean["n"], mean["z"]) == (a["scheme"], a["n"], a["z"])
        for name in RECORD_FIELDS[6:-1]:  # every measurement but the (noisy) seconds
            assert mean[name] == pytest.approx((a[name] + b[name]) / 2), name
        assert isinstance(mean["head_size"], float) and isinstance(mean["d"], float)
    assert first != second  # the second run saw another stream


def test_workloads_without_z_give_one_null_z_and_fish_gets_the_rates() -> None:
    config = GroupingConfig(
        schemes=("kg", "fish"),
        workers=(3,),
        workload="dkg",
        zipf=(0.5, 2.0),
        keys=204,
        messages=5_000,
        rates=(1.0, 2.0),
        utilization=0.5,
    )
    assert config.z_values() == (None,) and steps(config) == 2
    records = run_grouping_experiment(config)
    assert [(r["scheme"], r["z"], r["workload"]) for r in records] == [
        ("kg", None, "dkg"),
        ("fish", None, "dkg"),
    ]
    np.testing.assert_array_equal(config.worker_rates(3), [1.0, 2.0, 1.0])
    assert config.arrival_rate(3) == pytest.approx(2.0)
    fish = build_grouping("fish", 3, config.stream(None, 0), config, 1)
    np.testing.assert_array_equal(fish.rates, [1.0, 2.0, 1.0])  # type: ignore[attr-defined]
    assert fish.arrival_rate == pytest.approx(2.0)  # type: ignore[attr-defined]


def test_several_z_values_one_stream_each_and_progress_counts_every_step() -> None:
    config = GroupingConfig(schemes=("kg", "sg"), workers=(2, 4), zipf=(0.0, 1.5), keys=100, messages=2_000)
    with Progress(console=Console(file=io.StringIO())) as progress:
        records = run_grouping_experiment(config, progress=progress)
        (task,) = progress.tasks
    assert task.total == task.completed == steps(config) == 8
    assert [r["z"] for r in records] == [0.0] * 4 + [1.5] * 4
    (kg0,) = select(records, scheme="kg", z=0.0, n=4)
    (kg15,) = select(records, scheme="kg", z=1.5, n=4)
    assert kg15["imbalance"] > kg0["imbalance"]


def test_repeated_entries_are_dropped_and_lists_become_tuples() -> None:
    config = GroupingConfig(schemes=["kg", "kg", "sg"], workers=[4, 4], zipf=[1, 1.0])  # type: ignore[arg-type]
    assert config.schemes == ("kg", "sg") and config.workers == (4,) and config.zipf == (1.0,)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"workers": (4, 0)}, "workers"),
        ({"workers": ()}, "workers"),
        ({"sources": 0}, "sources"),
        ({"zipf": (-0.5,)}, "zipf"),
        ({"zipf": (float("nan"),)}, "zipf"),
        ({"keys": 0}, "keys"),
        ({"workload": "dkg", "keys": 1}, "keys"),
        ({"workload": "words", "keys": 10**7}, "keys"),
        ({"messages": 0}, "messages"),
        ({"skew": 1.5}, "skew"),
        ({"skew": 0.0}, "skew"),
        ({"schemes": ("kg", "magic")}, "schemes"),
        ({"schemes": ()}, "schemes"),
        ({"workload": "tweets"}, "workload"),
        ({"rates": (1.0, 0.0)}, "rates"),
        ({"rates": (-1.0,)}, "rates"),
        ({"rates": ()}, "rates"),
        ({"utilization": 0.0}, "utilization"),
        ({"utilization": float("inf")}, "utilization"),
        ({"runs": 0}, "runs"),
        ({"seed": -1}, "seed"),
        ({"source_mode": "random"}, "source_mode"),
        ({"exact": "yes"}, "exact"),
    ],
)
def test_bad_config_names_the_field(changes: dict, field: str) -> None:
    with pytest.raises(InvalidInput, match=field) as excinfo:
        GroupingConfig(**changes)
    assert excinfo.value.field == field


def test_keys_default_to_the_dkg_papers_204_for_the_dkg_workload() -> None:
    assert GroupingConfig(workload="dkg").keys == 204
    assert GroupingConfig(workload="zipf").keys == 100_000


def test_more_rates_than_workers_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"^rates must have at most n = 4 values") as excinfo:
        GroupingConfig(workers=(2, 4), rates=(1.0, 2.0, 1.0, 2.0, 3.0))
    assert excinfo.value.field == "rates"
