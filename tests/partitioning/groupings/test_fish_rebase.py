"""FISH's relative release bounds (``idle.py``) end to end: the kernel's worker sequence against the
pure-Python reference where the int16 bounds saturate, where chunks end next to a rebase and where a
source stays quiet for more than ``REBASE_AFTER`` tuples.

A source keeps each worker's release bound as int16 relative to its base, saturated, and moves the
base up every ``REBASE_AFTER`` tuples. The reference has no bounds, only each worker's F_i: the audit
below reads the kernel's stored bounds (``_release``, ``_base``) between chunks and checks each against
the release index of the reference's F_i, which also tells a clamped bound from an exact one.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.partitioning.groupings import Fish
from repart.partitioning.groupings.idle import REBASE_AFTER
from tests.partitioning.groupings import reference as ref
from tests.partitioning.groupings.reference import Keys, Origins, first_tuple, route_in_chunks, zipf_keys

LOW, HIGH = int(np.iinfo(np.int16).min), int(np.iinfo(np.int16).max)
#: The parameters these tests do not vary (small summaries and rings keep the reference fast).
BASE_PARAMS: dict[str, Any] = dict(
    theta=0.1, epoch=100, decay=0.8, spread=4.0, tail_choices=1, capacity=16, virtual_nodes=5
)


def fish_pair(n: int, sources: int, seed: int, **params: Any) -> tuple[Fish, ref.FISH]:
    """The compiled grouping and its reference, built with the same parameters."""
    merged = BASE_PARAMS | params
    return Fish(n, sources, seed=seed, **merged), ref.FISH(n, sources, seed, **merged)


def led_by(reference: ref.FISH, worker: int, count: int, salt: int) -> list[int]:
    """``count`` key hashes whose ring walk (the reference's ring) starts at ``worker``: a key that is
    not hot has that worker as its only candidate (``tail_choices`` = 1)."""
    found: list[int] = []
    k = salt
    while len(found) < count:
        k = ref.mix64(k)
        if ref.ring_walk(reference.nodes, k, 1, reference.n) == [worker]:
            found.append(k)
    return found


def audit(grouping: Fish, reference: ref.FISH) -> dict[tuple[int, int], str]:
    """Each (source, worker)'s stored bound against r, the release index of the reference's F_i.

    An exact bound b + v lies in [r − 2, r]. A bound clamped up (v = HIGH) needs r − b ≥ HIGH, one
    clamped down (v = LOW) r − b ≤ LOW + 2. Returns "above" where the clamp provably happened (r − b >
    HIGH + 2: no exact bound fits in int16), "below" likewise (r − b < LOW), "exact" otherwise.
    """
    found = {}
    for s in range(grouping.sources):
        base = int(grouping._base[s])
        for w in range(grouping.workers):
            stored = int(grouping._release[s, w])
            lead = first_tuple(reference.finish[s][w], reference.lam) - base
            if stored == HIGH:
                assert lead >= HIGH, (s, w, lead)
                found[s, w] = "above" if lead > HIGH + 2 else "exact"
            elif stored == LOW:
                assert lead <= LOW + 2, (s, w, lead)
                found[s, w] = "below" if lead < LOW else "exact"
            else:
                assert lead - 2 <= stored <= lead, (s, w, stored, lead)
                found[s, w] = "exact"
    return found


class Snapshot(NamedTuple):
    """The audit's findings and each source's base at the end of a chunk."""

    found: dict[tuple[int, int], str]
    bases: list[int]


def route_audited(
    grouping: Fish, reference: ref.FISH, keys: Keys, origins: Origins, cuts: list[int]
) -> list[Snapshot]:
    """Feed both the stream in chunks ending at ``cuts``; the sequences and loads must be equal, and
    every chunk's end passes the audit. Returns a snapshot per chunk, in order."""
    snapshots = []
    for lo, hi in zip([0, *cuts], [*cuts, keys.size], strict=True):
        expected = reference.route([int(k) for k in keys[lo:hi]], origins[lo:hi].tolist())
        assert grouping.route(keys[lo:hi], origins[lo:hi]).tolist() == expected, (lo, hi)
        snapshots.append(Snapshot(audit(grouping, reference), grouping._base.tolist()))
    assert grouping.loads.tolist() == reference.loads
    return snapshots


def test_bounds_saturate_above_and_below_and_rebase_recomputes_them() -> None:
    """n = 4, S = 2, λ = 0.5, workers 0–2 at rate 1 and worker 3 at 1/45,000: a tuple keeps it busy
    for 2·0.5·45,000 = 45,000 tuples, beyond int16. Every key but one is led by worker 0 or 1 on the
    ring, and with λ < 1 a source always finds its first candidate idle, so worker 2 never gets a
    tuple and worker 3 only the slow key's: source 0 sends it once (its bound clamps up, a rebase
    recomputes it in range), source 1 three times (135,000 tuples ahead: still clamped at the end);
    worker 2's bound falls below its source's base by more than int16 (clamped down)."""
    rate = 0.5
    grouping, reference = fish_pair(4, 2, 11, rates=[1.0, 1.0, 1.0, 2 * rate / 45_000], arrival_rate=rate)
    rng = np.random.default_rng(1)
    hot = np.array(led_by(reference, 0, 2, 1) + led_by(reference, 1, 1, 2), dtype=np.uint64)
    cold = np.array(led_by(reference, 0, 20, 3) + led_by(reference, 1, 20, 4), dtype=np.uint64)
    size = 60_000
    keys = np.where(rng.random(size) < 0.7, hot[rng.integers(0, 3, size)], cold[rng.integers(0, 40, size)])
    origins = rng.integers(0, 2, size)
    slow = np.uint64(led_by(reference, 3, 1, 5)[0])
    sends = {200: 0, 300: 1, 310: 1, 320: 1}
    for i, s in sends.items():
        keys[i], origins[i] = slow, s
    cuts = sorted({*range(2048, size, 2048), *(i + 1 for i in sends)})
    found = [snapshot.found for snapshot in route_audited(grouping, reference, keys, origins, cuts)]

    sent = cuts.index(201)
    assert found[sent][0, 3] == "above"  # 45,000 ahead of its base
    back = next(j for j in range(sent, len(found)) if found[j][0, 3] == "exact")  # the next rebase
    assert back > sent and all(f[0, 3] == "exact" for f in found[back:])  # recomputed, then shifted
    assert all(f[1, 3] == "above" for f in found[cuts.index(321) :])  # 135,000 ahead: after every rebase
    assert grouping._base.min() >= 3 * REBASE_AFTER  # three rebases at least
    assert found[-1][0, 2] == found[-1][1, 2] == "below"  # never sent to: released at tuple 0
    assert grouping.loads[:, 2].tolist() == [0, 0] and grouping.loads[:, 3].tolist() == [1, 3]


@settings(max_examples=6, deadline=None)
@given(
    st.sampled_from([3, 5, 8]),
    st.integers(2, 3),
    st.sampled_from([(1.0,), (1.0, 4.0), (0.5, 1.0, 2.0)]),
    st.sampled_from([0.3, 0.9, 1.3]),
    st.integers(33_000, 300_000),
    st.integers(0, 2**32),
)
def test_saturating_rates_equal_the_reference(
    n: int, sources: int, pattern: tuple[float, ...], load: float, busy: int, seed: int
) -> None:
    """Heterogeneous rates with a last worker so slow that one tuple keeps it busy for ``busy`` >
    int16 tuples, arrival rates below and above the others' capacity, a Zipf stream, and the slow
    worker's key sent one to three times by each source: kernel and reference agree on every tuple,
    and the slow worker's bound provably clamped up right after each first send."""
    fast = [pattern[i % len(pattern)] for i in range(n - 1)]
    rate = load * sum(fast)
    grouping, reference = fish_pair(n, sources, seed, rates=[*fast, sources * rate / busy], arrival_rate=rate)
    rng = np.random.default_rng(seed)
    size = 30_000
    keys = zipf_keys(rng, size, int(rng.integers(20, 300)), float(rng.choice([0.8, 1.1, 1.5])))
    origins = rng.integers(0, sources, size)
    slow = np.uint64(led_by(reference, n - 1, 1, seed)[0])
    sends = rng.choice(size - 1, 3 * sources, replace=False).reshape(sources, 3)
    first_sends = {}
    for s in range(sources):
        at = sorted(sends[s, : rng.integers(1, 4)].tolist())
        keys[at], origins[at] = slow, s
        first_sends[s] = at[0]
    cuts = sorted({*(i + 1 for i in first_sends.values()), *rng.integers(1, size, 5).tolist()})
    snapshots = route_audited(grouping, reference, keys, origins, cuts)
    for s, i in first_sends.items():  # at least ``busy`` tuples ahead of tuple i, so of the base
        assert snapshots[cuts.index(i + 1)].found[s, n - 1] == "above"


@functools.cache
def chunk_stream() -> tuple[Keys, Origins, tuple[int, ...], dict[int, list[int]]]:
    """A 60,000-tuple stream for chunk cuts (n = 5, S = 3, one worker too slow for its tail keys, so
    its bounds saturate), with the reference's sequence and every source's rebase tuples, found by
    feeding the kernel one tuple per call and reading each source's base after each."""
    grouping, reference = chunk_pair()
    rng = np.random.default_rng(21)
    keys = zipf_keys(rng, 60_000, 400, 1.1)
    origins = rng.integers(0, 3, keys.size)
    expected = tuple(reference.route([int(k) for k in keys], origins.tolist()))
    rebases: dict[int, list[int]] = {s: [] for s in range(3)}
    stepwise = []
    for i in range(keys.size):
        s = int(origins[i])
        base = int(grouping._base[s])
        stepwise.append(int(grouping.route(keys[i : i + 1], origins[i : i + 1])[0]))
        if grouping._base[s] != base:
            assert grouping._base[s] == i  # a rebase moves the base to the current tuple
            rebases[s].append(i)
    assert stepwise == list(expected)
    return keys, origins, expected, rebases


def chunk_pair() -> tuple[Fish, ref.FISH]:
    """A fresh grouping and reference for ``chunk_stream``."""
    rates = [2.0, 1.0, 1.0, 0.5, 1e-4]
    return fish_pair(5, 3, 8, rates=rates, arrival_rate=0.9 * sum(rates), theta=0.05, capacity=32)


def test_one_tuple_per_call_equals_the_reference_and_rebases_every_source() -> None:
    """The stream fed one tuple per call (every cut there is) routes as the reference, and each
    source's base moved at least three times, each move at least ``REBASE_AFTER`` after the last."""
    _, _, _, rebases = chunk_stream()
    for moves in rebases.values():
        assert len(moves) >= 3
        assert all(b - a >= REBASE_AFTER for a, b in itertools.pairwise([0, *moves]))


@pytest.mark.parametrize(
    "cuts",
    [
        [REBASE_AFTER - 1],
        [REBASE_AFTER],
        [REBASE_AFTER + 1],
        [2 * REBASE_AFTER - 1],
        [2 * REBASE_AFTER],
        [2 * REBASE_AFTER + 1],
        [REBASE_AFTER - 1, REBASE_AFTER, REBASE_AFTER + 1, 2 * REBASE_AFTER - 1, 2 * REBASE_AFTER + 1],
    ],
)
def test_chunks_cut_next_to_multiples_of_the_rebase_period_equal_one_pass(cuts: list[int]) -> None:
    """Chunks ending one tuple before, at and after 2^14 and 2·2^14 (alone and all together) route as
    one pass over the stream, which routes as the reference."""
    keys, origins, expected, _ = chunk_stream()
    whole = chunk_pair()[0].route(keys, origins).tolist()
    assert whole == list(expected)
    assert route_in_chunks(chunk_pair()[0], keys, origins, cuts) == whole


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_chunks_cut_near_rebases_equal_one_pass(data: st.DataObject) -> None:
    """Cuts a few tuples either side of multiples of ``REBASE_AFTER`` and of the tuples where a
    source's base actually moved."""
    keys, origins, expected, rebases = chunk_stream()
    anchors = [j * REBASE_AFTER for j in range(1, 4)] + [t for moves in rebases.values() for t in moves]
    near = st.tuples(st.sampled_from(anchors), st.integers(-3, 3)).map(sum)
    cuts = sorted(set(data.draw(st.lists(near, min_size=1, max_size=6))))
    assert route_in_chunks(chunk_pair()[0], keys, origins, cuts) == list(expected)


@pytest.mark.parametrize("quiet", ["silent", "rare", "cooled"])
def test_a_source_quiet_for_more_than_the_rebase_period_resumes_as_the_reference(quiet: str) -> None:
    """S = 3; 80 % of the tuples carry 20 keys of Zipf(1) shares (the top ones hot at θ = 0.1), 20 %
    rare keys. Source 1 stops for 2^14 + 1 tuples, resumes with the hottest key and goes on for 4,000
    tuples, stops for 2·2^14 + 2^10 tuples and resumes again. While stopped it sends nothing
    ("silent"), or every third tuple: a rare key, never hot ("rare"), or one of the 20 keys evenly
    (5 % each: none hot, the hot ones cooling down, "cooled"). Kernel and reference agree throughout.
    A silent source's first tuple back moves its base past the whole gap, and after the long gap every
    bound of that source but the one just set lies below the new base by more than int16. A source
    sending only keys that are not hot still rebases: its base never lags more than ``REBASE_AFTER``
    and a few tuples (a performance property: otherwise all its tuples leave the inner loop)."""
    rates = [1.0, 2.0, 0.5, 1.0]  # λ at half the capacity: no backlog outlasts a gap
    grouping, reference = fish_pair(4, 3, 5, rates=rates, arrival_rate=0.5 * sum(rates))
    rng = np.random.default_rng(2)
    warm = rng.integers(1, 2**63, 20, dtype=np.int64).astype(np.uint64)
    shares = 1.0 / np.arange(1, 21)
    rare = rng.integers(1, 2**63, 5_000, dtype=np.int64).astype(np.uint64)  # drawn uniformly: far below θ

    def phase(size: int, active: list[int]) -> tuple[Keys, Origins]:
        common = warm[rng.choice(20, size, p=shares / shares.sum())]
        keys = np.where(rng.random(size) < 0.8, common, rare[rng.integers(0, 5_000, size)])
        origins = rng.choice(active, size)
        if quiet != "silent" and 1 not in active:  # every third tuple from source 1
            third = np.arange(size) % 3 == 1
            pool = rare if quiet == "rare" else warm
            keys[third], origins[third] = pool[rng.integers(0, pool.size, int(third.sum()))], 1
        return keys, origins

    gaps = [REBASE_AFTER + 1, 2 * REBASE_AFTER + 1024]
    parts = [
        phase(20_000, [0, 1, 2]),
        phase(gaps[0], [0, 2]),
        phase(4_000, [0, 1, 2]),
        phase(gaps[1], [0, 2]),
        phase(4_000, [0, 1, 2]),
    ]
    keys = np.concatenate([k for k, _ in parts])
    origins = np.concatenate([o for _, o in parts])
    starts = np.cumsum([0] + [k.size for k, _ in parts]).tolist()
    resumes = [starts[2], starts[4]]
    keys[resumes] = warm[0]  # source 1 comes back with the hottest key
    origins[resumes] = 1
    cuts = sorted({*range(4_096, keys.size, 4_096), *resumes, *(at + 1 for at in resumes)})
    snapshots = route_audited(grouping, reference, keys, origins, cuts)
    if quiet == "silent":
        for at, gap in zip(resumes, gaps, strict=True):
            before, after = snapshots[cuts.index(at)], snapshots[cuts.index(at + 1)]
            assert after.bases[1] == at and at - before.bases[1] >= gap  # rebased by more than the gap
        kinds = sorted(after.found[1, w] for w in range(4))
        assert kinds == ["below", "below", "below", "exact"]  # all but the worker it just sent to
    else:
        lags = [end - snapshot.bases[1] for end, snapshot in zip([*cuts, keys.size], snapshots, strict=True)]
        assert max(lags) < REBASE_AFTER + 64
