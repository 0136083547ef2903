"""DKG's resumed search for a key's least loaded candidate (``resume_run``) against a scan of the run."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.partitioning.groupings.dkg import RESCAN, least_loaded_run, resume_run, settle_run


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
