"""The kernels' resumed searches against plain ones: DKG's ``resume_run`` against a scan of the whole run,
and the head kernel's ``group_by_source`` against a stable sort by source."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.partitioning.splitting.dkg import RESCAN, least_loaded_run, resume_run, settle_run
from repart.partitioning.splitting.head import group_by_source


def oracle_run(loads: list[int], home: int, count: int) -> int:
    """The least loaded of home, home + 1, … (mod n), ``count`` of them, ties to the earliest."""
    n = len(loads)
    run = [(home + j) % n for j in range(count)]
    return min(run, key=lambda w: (loads[w], run.index(w)))


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 70),
    st.integers(0, 2**32),
    st.sampled_from([0.0, 0.5, 0.9]),
)
def test_resume_run_picks_the_least_loaded_of_the_run(n: int, seed: int, others: float) -> None:
    """One key's tuples interleaved with other keys' tuples on any worker (loads only grow); now and
    then the width changes, which the kernel marks with ``RESCAN``."""
    rng = np.random.default_rng(seed)
    loads = np.zeros((1, n), dtype=np.int64)
    level = np.zeros(1, dtype=np.int64)
    at = np.full(1, RESCAN, dtype=np.int64)
    home = int(rng.integers(0, n))
    count = int(rng.integers(1, n + 1))
    for _ in range(400):
        if rng.random() < others:
            loads[0, int(rng.integers(0, n))] += int(rng.integers(1, 4))
            continue
        if rng.random() < 0.02:
            count = int(rng.integers(1, n + 1))
            at[0] = RESCAN
        expected = oracle_run(loads[0].tolist(), home, count)
        w = resume_run(loads, 0, home, count, n, level, at, 0)
        if w < 0:  # as the kernel does: scan the whole run, and resume from there next time
            w = least_loaded_run(loads, 0, home, count, n)
            settle_run(loads, 0, home, n, level, at, 0, w)
        assert w == expected
        loads[0, w] += 1


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.lists(st.integers(0, 8), min_size=1, max_size=300), st.data())
def test_group_by_source_is_a_stable_sort_by_source(
    sources_count: int, raw: list[int], data: st.DataObject
) -> None:
    sources = np.array([r % sources_count for r in raw], dtype=np.int64)
    begin = data.draw(st.integers(0, sources.size - 1))
    stop = data.draw(st.integers(begin + 1, sources.size))
    bounds = np.full(sources_count + 1, -7, dtype=np.int64)
    order = np.full(stop - begin, -7, dtype=np.int64)
    group_by_source(sources, begin, stop, bounds, order)
    expected = begin + np.argsort(sources[begin:stop], kind="stable")
    assert order.tolist() == expected.tolist()
    for s in range(sources_count):
        assert (sources[order[bounds[s] : bounds[s + 1]]] == s).all()
    assert bounds[0] == 0
    assert bounds[-1] == stop - begin
