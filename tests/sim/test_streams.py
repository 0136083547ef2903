"""Workload generators for the key-splitting simulator (PKG, D-Choices, FISH, DKG streams)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.partitioning.hashing import hash_key
from repart.sim.streams import (
    DKG_KEYS,
    WORKLOADS,
    KeyStream,
    dkg_shares,
    dkg_stream,
    drift_phase_starts,
    drift_stream,
    english_vocabulary,
    english_vocabulary_size,
    largest_remainder_counts,
    lognormal_stream,
    lognormal_values,
    make_stream,
    skewed_sources,
    word_stream,
    zipf_stream,
)

MASK64 = (1 << 64) - 1


# --- independent oracles (plain Python) ---------------------------------------------------------------


def hamilton(weights: list[float], total: int) -> list[int]:
    """Largest-remainder apportionment: floors, then one unit each to the largest remainders."""
    whole = sum(weights)
    quotas = [w / whole * total for w in weights]
    counts = [math.floor(q) for q in quotas]
    order = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def zipf_weights(z: float, keys: int) -> list[float]:
    return [1.0 / r**z for r in range(1, keys + 1)]


def splitmix_source(key_hash: int, sources: int) -> int:
    x = key_hash ^ 0x5EED5EED
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return (x ^ (x >> 31)) % sources


def normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def rounded_lognormal_p1(mu: float, sigma: float) -> float:
    """max over v of P(rint(exp(μ + σN)) = v), from the normal CDF (rint rounds .5 to even; measure 0)."""

    def cdf_below(v: float) -> float:
        return 0.0 if v <= 0 else normal_cdf((math.log(v) - mu) / sigma)

    return max(cdf_below(v + 0.5) - cdf_below(v - 0.5) for v in range(200))


def sorted_chi_square(counts: np.ndarray, probabilities: list[float]) -> float:
    """χ² of the counts sorted descending against the expected counts by rank.

    By the rearrangement inequality this is at most the χ² under the true (unknown) rank → key map, so
    a bound valid for the true χ² is a valid, conservative bound here.
    """
    n = int(counts.sum())
    expected = np.sort(np.asarray(probabilities) * n)[::-1]
    observed = np.sort(np.pad(counts, (0, len(expected) - len(counts))))[::-1]
    return float(((observed - expected) ** 2 / expected).sum())


def chi_square_bound(cells: int) -> float:
    dof = cells - 1
    return dof + 6 * math.sqrt(2 * dof) + 10


def small_stream(
    workload: str, seed: int = 3, source_mode: str = "round_robin", sources: int = 7
) -> KeyStream:
    return make_stream(
        workload,
        z=1.1,
        keys=300,
        messages=5_003,
        sources=sources,
        seed=seed,
        skew=0.2,
        exact=False,
        phases=4,
        source_mode=source_mode,
    )


# --- the KeyStream contract ---------------------------------------------------------------------------


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_workload_yields_a_well_formed_stream(workload: str) -> None:
    stream = small_stream(workload)
    assert stream.workload == workload
    assert stream.messages == len(stream.key_ids) == len(stream.key_hashes) == len(stream.sources) == 5_003
    assert stream.key_ids.dtype == np.int64
    assert stream.key_hashes.dtype == np.uint64
    assert stream.sources.dtype == np.int64
    assert stream.sources_count == 7
    assert stream.key_ids.min() >= 0 and stream.key_ids.max() < stream.distinct
    counts = np.bincount(stream.key_ids, minlength=stream.distinct)
    assert np.array_equal(stream.counts, counts)
    assert stream.p1 == counts.max() / 5_003
    # one hash per key id, and distinct ids have distinct hashes (no collisions at this size)
    pairs = np.unique(np.stack([stream.key_ids, stream.key_hashes.view(np.int64)]), axis=1)
    assert pairs.shape[1] == len(np.unique(stream.key_ids)) == len(np.unique(stream.key_hashes))


@pytest.mark.parametrize("workload", WORKLOADS)
def test_same_seed_same_stream_other_seed_other_stream(workload: str) -> None:
    a, b, c = small_stream(workload, seed=5), small_stream(workload, seed=5), small_stream(workload, seed=6)
    for field in ("key_ids", "key_hashes", "sources"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert a.distinct == b.distinct
    assert not np.array_equal(a.key_hashes, c.key_hashes)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_round_robin_sources_are_t_mod_s(workload: str) -> None:
    stream = small_stream(workload, sources=7)
    assert np.array_equal(stream.sources, np.arange(5_003) % 7)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_skewed_sources_follow_the_key(workload: str) -> None:
    stream = small_stream(workload, source_mode="skewed", sources=5)
    assert stream.sources.min() >= 0 and stream.sources.max() < 5
    pairs = np.unique(np.stack([stream.key_ids, stream.sources]), axis=1)
    assert pairs.shape[1] == len(np.unique(stream.key_ids))  # one source per key
    for t in np.random.default_rng(0).choice(stream.messages, 40, replace=False):
        assert stream.sources[t] == splitmix_source(int(stream.key_hashes[t]), 5)
    # skewed and round-robin runs of one seed carry the same keys
    assert np.array_equal(stream.key_ids, small_stream(workload, sources=5).key_ids)


def test_skewed_sources_concentrate_a_hot_key() -> None:
    stream = zipf_stream(1.5, 1_000, 20_000, 8, seed=2, source_mode="skewed")
    hot = int(np.argmax(stream.counts))
    share = np.bincount(stream.sources, minlength=8) / stream.messages
    assert share[stream.sources[stream.key_ids == hot][0]] >= stream.p1 > 1 / 8


def test_skewed_sources_mix_with_a_salt() -> None:
    hashes = np.array([0, 1, 2**63, MASK64, 0x5EED5EED], dtype=np.uint64)
    expected = [splitmix_source(int(h), 6) for h in hashes]
    assert skewed_sources(hashes, 6).tolist() == expected


# --- hashes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("workload", ["zipf", "drift", "dkg"])
def test_integer_key_hashes_are_the_hash_of_the_id(workload: str) -> None:
    stream = small_stream(workload)
    for t in np.random.default_rng(1).choice(stream.messages, 60, replace=False):
        assert int(stream.key_hashes[t]) == hash_key(int(stream.key_ids[t]))


@pytest.mark.parametrize(("which", "mu", "sigma"), [("ln1", 1.789, 2.366), ("ln2", 2.245, 1.133)])
def test_lognormal_keys_are_rounded_samples_and_ids_their_dense_ranks(
    which: str, mu: float, sigma: float
) -> None:
    m, seed = 20_000, 9
    normal = np.random.default_rng(seed).standard_normal(m)
    values = [round(math.exp(mu + sigma * x)) for x in normal.tolist()]  # Python round: half to even
    assert lognormal_values(which, m, seed).tolist() == values
    stream = lognormal_stream(which, m, 4, seed)
    distinct = sorted(set(values))
    rank = {v: i for i, v in enumerate(distinct)}
    assert stream.distinct == len(distinct)
    assert stream.key_ids.tolist() == [rank[v] for v in values]
    for t in np.random.default_rng(2).choice(m, 60, replace=False):
        assert int(stream.key_hashes[t]) == hash_key(values[t])


def test_word_key_hashes_are_the_hash_of_the_word() -> None:
    words, _ = english_vocabulary(2_000)
    stream = word_stream(2_000, 10_000, 3, seed=4)
    for t in np.random.default_rng(3).choice(stream.messages, 60, replace=False):
        assert int(stream.key_hashes[t]) == hash_key(words[stream.key_ids[t]])


# --- zipf ---------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    z=st.floats(0.0, 3.0),
    keys=st.integers(1, 300),
    messages=st.integers(1, 5_000),
    seed=st.integers(0, 2**32),
)
def test_exact_zipf_counts_are_the_largest_remainder_counts(
    z: float, keys: int, messages: int, seed: int
) -> None:
    stream = zipf_stream(z, keys, messages, 2, seed, exact=True)
    weights = zipf_weights(z, keys)
    expected = hamilton(weights, messages)
    assert sum(expected) == messages == stream.messages
    assert sorted(stream.counts.tolist(), reverse=True) == sorted(expected, reverse=True)
    quotas = np.sort(np.array(weights) / sum(weights) * messages)[::-1]
    assert np.all(np.abs(np.sort(stream.counts)[::-1] - quotas) < 1 + 1e-9)


def test_exact_zipf_is_shuffled() -> None:
    stream = zipf_stream(0.5, 10, 10_000, 1, seed=0, exact=True)
    same_as_previous = np.count_nonzero(stream.key_ids[1:] == stream.key_ids[:-1])
    expected = 9_999 * float((stream.counts / 10_000) ** 2 @ np.ones(10))
    assert abs(same_as_previous - expected) < 6 * math.sqrt(expected)


def test_sampled_zipf_follows_zipf() -> None:
    z, keys, m = 0.9, 200, 200_000
    stream = zipf_stream(z, keys, m, 4, seed=11)
    weights = zipf_weights(z, keys)
    probabilities = [w / sum(weights) for w in weights]
    assert sorted_chi_square(stream.counts, probabilities) < chi_square_bound(keys)
    assert abs(stream.p1 - probabilities[0]) < 5 * math.sqrt(probabilities[0] / m)


@pytest.mark.parametrize("exact", [False, True])
def test_the_hottest_zipf_key_is_a_permuted_id(exact: bool) -> None:
    hottest = {
        int(np.argmax(zipf_stream(1.5, 1_000, 2_000, 1, seed, exact=exact).counts)) for seed in range(8)
    }
    assert len(hottest) > 1


def test_largest_remainder_counts_example_and_property() -> None:
    assert largest_remainder_counts(np.array([1.0, 1.0, 1.0]), 10).tolist() == [4, 3, 3]
    assert largest_remainder_counts(np.array([0.5, 0.0, 0.5]), 3).tolist() == [2, 0, 1]
    rng = np.random.default_rng(0)
    for _ in range(50):
        shares = rng.random(int(rng.integers(1, 50))) ** 3
        total = int(rng.integers(0, 10_000))
        assert largest_remainder_counts(shares, total).tolist() == hamilton(shares.tolist(), total)


# --- log-normal (PKG paper, Table 1) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("which", "mu", "sigma", "paper_p1"), [("ln1", 1.789, 2.366, 0.1471), ("ln2", 2.245, 1.133, 0.0701)]
)
def test_lognormal_p1_reproduces_table_1(which: str, mu: float, sigma: float, paper_p1: float) -> None:
    assert rounded_lognormal_p1(mu, sigma) == pytest.approx(paper_p1, abs=0.0005)
    stream = lognormal_stream(which, 1_000_000, 8, seed=0)
    assert abs(stream.p1 - paper_p1) < 0.005


@pytest.mark.parametrize(("which", "low", "high"), [("ln1", 15_500, 17_500), ("ln2", 1_050, 1_200)])
def test_lognormal_distinct_keys_at_ten_million(which: str, low: int, high: int) -> None:
    assert low <= lognormal_stream(which, 10_000_000, 8, seed=1).distinct <= high


def test_ln1_hottest_key_is_zero() -> None:
    stream = lognormal_stream("ln1", 50_000, 1, seed=2)
    assert int(np.argmax(stream.counts)) == 0  # dense rank 0 is the value 0: every sample below 1/2
    assert int(stream.key_hashes[stream.key_ids == 0][0]) == hash_key(0)


# --- drift (FISH) -------------------------------------------------------------------------------------


def test_drift_phase_starts() -> None:
    assert drift_phase_starts(10, 3).tolist() == [0, 3, 6]
    assert drift_phase_starts(10, 1).tolist() == [0]
    assert drift_phase_starts(5, 5).tolist() == [0, 1, 2, 3, 4]


def test_drift_phases_are_zipf_with_moving_hot_keys() -> None:
    z, keys, m, phases = 1.2, 100, 50_003, 5
    stream = drift_stream(z, keys, m, 3, seed=7, phases=phases)
    weights = zipf_weights(z, keys)
    probabilities = [w / sum(weights) for w in weights]
    bounds = [0, 10_000, 20_000, 30_000, 40_000, m]
    hottest = []
    for start, stop in itertools.pairwise(bounds):
        counts = np.bincount(stream.key_ids[start:stop], minlength=keys)
        assert sorted_chi_square(counts, probabilities) < chi_square_bound(keys)
        n = stop - start
        assert abs(counts.max() / n - probabilities[0]) < 5 * math.sqrt(probabilities[0] / n)
        hottest.append(int(np.argmax(counts)))
        # each half of a phase has the same hot key: the boundaries are where they are claimed
        middle = (start + stop) // 2
        assert np.argmax(np.bincount(stream.key_ids[start:middle], minlength=keys)) == hottest[-1]
        assert np.argmax(np.bincount(stream.key_ids[middle:stop], minlength=keys)) == hottest[-1]
    assert len(set(hottest)) == phases


# --- DKG ----------------------------------------------------------------------------------------------


def test_dkg_counts_are_exact() -> None:
    skew, m = 0.3, 10_007
    stream = dkg_stream(skew, DKG_KEYS, m, 4, seed=1)
    expected = hamilton([skew] + [(1 - skew) / (DKG_KEYS - 1)] * (DKG_KEYS - 1), m)
    assert expected[0] == 3_002  # 0.3 · 10007 = 3002.1: the leftover units go to the larger remainders
    assert stream.distinct == DKG_KEYS
    assert stream.counts.max() == 3_002 and stream.p1 == 3_002 / m
    assert sorted(stream.counts.tolist()) == sorted(expected)


@settings(max_examples=40, deadline=None)
@given(skew=st.floats(0.001, 0.999), keys=st.integers(2, 300), messages=st.integers(1, 5_000))
def test_dkg_counts_property(skew: float, keys: int, messages: int) -> None:
    stream = dkg_stream(skew, keys, messages, 1, seed=0)
    assert stream.counts.sum() == messages
    expected = hamilton([skew] + [(1 - skew) / (keys - 1)] * (keys - 1), messages)
    assert sorted(stream.counts.tolist()) == sorted(expected)


def test_dkg_shares() -> None:
    shares = dkg_shares(0.4, 5)
    assert shares.tolist() == pytest.approx([0.4, 0.15, 0.15, 0.15, 0.15])


def test_dkg_top_key_is_a_permuted_id() -> None:
    assert len({int(np.argmax(dkg_stream(0.5, 204, 1_000, 1, seed).counts)) for seed in range(6)}) > 1


# --- words --------------------------------------------------------------------------------------------


def test_english_vocabulary_is_ranked_and_normalised() -> None:
    words, probabilities = english_vocabulary(1_000)
    assert len(words) == len(set(words)) == len(probabilities) == 1_000
    assert words[0] == "the"
    assert probabilities.sum() == pytest.approx(1.0)
    assert np.all(np.diff(probabilities) <= 0)
    probabilities[0] = 0.0  # a copy: the cache is not affected
    assert english_vocabulary(1_000)[1][0] > 0


def test_words_follow_the_vocabulary() -> None:
    keys, m = 500, 100_000
    _, probabilities = english_vocabulary(keys)
    stream = word_stream(keys, m, 4, seed=8)
    expected = probabilities * m
    chi_square = float(((stream.counts - expected) ** 2 / expected).sum())
    assert chi_square < chi_square_bound(keys)
    assert int(np.argmax(stream.counts)) == 0  # "the"
    assert abs(stream.p1 - probabilities[0]) < 5 * math.sqrt(probabilities[0] / m)


# --- make_stream --------------------------------------------------------------------------------------


def test_make_stream_defaults() -> None:
    assert make_stream("dkg", messages=1_000, sources=2, seed=0).distinct == DKG_KEYS
    assert make_stream("zipf", messages=1_000, sources=2, seed=0).distinct == 10_000
    exact = make_stream("zipf", z=1.0, keys=10, messages=1_000, sources=2, seed=0, exact=True)
    assert sorted(exact.counts.tolist()) == sorted(hamilton(zipf_weights(1.0, 10), 1_000))


# --- bad input ----------------------------------------------------------------------------------------

BadCall = Callable[[], object]
NAN = float("nan")

BAD_INPUTS: list[tuple[str, BadCall]] = [
    ("^z ", lambda: zipf_stream(-0.1, 10, 10, 1, 0)),
    ("^z ", lambda: zipf_stream(NAN, 10, 10, 1, 0)),
    ("^z ", lambda: zipf_stream(float("inf"), 10, 10, 1, 0)),
    ("^z ", lambda: zipf_stream(True, 10, 10, 1, 0)),
    ("^z ", lambda: drift_stream(-1.0, 10, 10, 1, 0)),
    ("^z ", lambda: make_stream("zipf", z=NAN, messages=10, sources=1, seed=0)),
    ("^keys", lambda: zipf_stream(1.0, 0, 10, 1, 0)),
    ("^keys", lambda: zipf_stream(1.0, 2.5, 10, 1, 0)),  # type: ignore[arg-type]
    ("^keys", lambda: drift_stream(1.0, 0, 10, 1, 0)),
    ("^keys", lambda: dkg_stream(0.5, 1, 10, 1, 0)),
    ("^keys", lambda: word_stream(0, 10, 1, 0)),
    ("^keys", lambda: word_stream(english_vocabulary_size() + 1, 10, 1, 0)),
    ("^keys", lambda: english_vocabulary(0)),
    ("^messages", lambda: zipf_stream(1.0, 10, 0, 1, 0)),
    ("^messages", lambda: zipf_stream(1.0, 10, 0, 1, 0, exact=True)),
    ("^messages", lambda: lognormal_stream("ln1", 0, 1, 0)),
    ("^messages", lambda: drift_stream(1.0, 10, -5, 1, 0)),
    ("^messages", lambda: dkg_stream(0.5, 10, 0, 1, 0)),
    ("^messages", lambda: word_stream(10, 0, 1, 0)),
    ("^sources", lambda: zipf_stream(1.0, 10, 10, 0, 0)),
    ("^sources", lambda: lognormal_stream("ln2", 10, 0, 0)),
    ("^sources", lambda: drift_stream(1.0, 10, 10, 0, 0)),
    ("^sources", lambda: dkg_stream(0.5, 10, 10, 0, 0)),
    ("^sources", lambda: word_stream(10, 10, 0, 0)),
    ("^seed", lambda: zipf_stream(1.0, 10, 10, 1, -1)),
    ("^skew", lambda: dkg_stream(0.0, 10, 10, 1, 0)),
    ("^skew", lambda: dkg_stream(1.0, 10, 10, 1, 0)),
    ("^skew", lambda: dkg_stream(-0.2, 10, 10, 1, 0)),
    ("^skew", lambda: dkg_stream(NAN, 10, 10, 1, 0)),
    ("^skew", lambda: make_stream("dkg", skew=1.5, messages=10, sources=1, seed=0)),
    ("^phases", lambda: drift_stream(1.0, 10, 10, 1, 0, phases=0)),
    ("^phases", lambda: drift_stream(1.0, 10, 10, 1, 0, phases=11)),
    ("^which", lambda: lognormal_stream("ln3", 10, 1, 0)),
    ("^exact", lambda: zipf_stream(1.0, 10, 10, 1, 0, exact="yes")),  # type: ignore[arg-type]
    (
        "^workload must be one of 'zipf', 'ln1', 'ln2', 'drift', 'dkg', 'words', got 'x'",
        lambda: make_stream("x", messages=10, sources=1, seed=0),
    ),
    ("^source_mode", lambda: zipf_stream(1.0, 10, 10, 1, 0, source_mode="random")),
    ("^source_mode", lambda: lognormal_stream("ln1", 10, 1, 0, "hash")),
    ("^source_mode", lambda: drift_stream(1.0, 10, 10, 1, 0, source_mode="")),
    ("^source_mode", lambda: dkg_stream(0.5, 10, 10, 1, 0, "skew")),
    ("^source_mode", lambda: word_stream(10, 10, 1, 0, "Round_Robin")),
]


@pytest.mark.parametrize(("field", "call"), BAD_INPUTS)
def test_bad_input_names_the_parameter(field: str, call: BadCall) -> None:
    with pytest.raises(InvalidInput, match=field) as excinfo:
        call()
    assert excinfo.value.field == field.removeprefix("^").split()[0]


def test_error_messages_state_the_range() -> None:
    with pytest.raises(InvalidInput, match=r"^keys must be an integer in \[1, inf\), got 0$"):
        zipf_stream(1.0, 0, 10, 1, 0)
    with pytest.raises(InvalidInput, match=r"^keys must be an integer in \[2, inf\), got 1$"):
        dkg_stream(0.5, 1, 10, 1, 0)
    with pytest.raises(InvalidInput, match=r"^skew must be a number in \(0, 1\), got 1\.0$"):
        dkg_stream(1.0, 10, 10, 1, 0)
