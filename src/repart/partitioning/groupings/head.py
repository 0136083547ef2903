"""D-Choices, W-Choices and Round-Robin head ("When Two Choices Are not Enough", Algorithm 1).

Every source runs SpaceSaving over the keys it forwards (the key is offered *before* it is routed, as
the authors' simulator does) and treats a key as part of the head H when its estimated count reaches
θ·m_s, m_s being the tuples this source has forwarded (§III-A; default θ = 1/(5n)), once m_s ≥ 1/θ:
before that θ·m_s < 1 and every key would pass. Tail keys follow PKG on the source's local loads.
Head keys get:

* **D-Choices**: d distinct candidates — the first d distinct workers among H_1(k), H_2(k), … — where
  d comes from FindOptimalChoices (Proposition IV.1) on the source's summary; the least loaded
  candidate wins, ties to the lowest worker id. d ≥ n means all n workers.
* **W-Choices**: the least loaded of all n workers (ties to the lowest id).
* **RR**: all n workers in turn, load-oblivious (per-source round robin).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import numpy.typing as npt

from repart.partitioning.groupings.base import (
    FloatArray,
    Grouping,
    IntArray,
    UIntArray,
    check_count,
    check_fraction,
    check_positive,
    default_theta,
)
from repart.partitioning.groupings.hashed import pkg_choice, seed_of
from repart.partitioning.groupings.hashes import choice, seed_base
from repart.partitioning.groupings.minload import (
    add_tuple,
    least_loaded,
    least_loaded_of,
    level_sets,
    raise_minimum,
    words,
)
from repart.partitioning.groupings.spacesaving import (
    Summaries,
    admit,
    bump,
    default_capacity,
    locate,
    sink,
)

I32Array = npt.NDArray[np.int32]

D_CHOICES, W_CHOICES, ROUND_ROBIN = 0, 1, 2

#: D-Choices recomputes d after this many tuples of a source (docs/DECISIONS.md: 1 … 10,000 route alike).
RECOMPUTE_EVERY = 1000


@numba.njit(cache=True)
def optimal_choices(head: FloatArray, tail: float, n: int, epsilon: float) -> int:
    """FindOptimalChoices: the smallest d ≥ max(2, ⌈p_1·n⌉) meeting Proposition IV.1, or n.

    ``head`` holds the head keys' frequencies in decreasing order, ``tail`` the mass of the rest. For
    every prefix h of the head (Eq. 3):
    Σ_{i≤h} p_i + (b_h/n)^d Σ_{h<i≤|H|} p_i + (b_h/n)^2 Σ_{i>|H|} p_i ≤ b_h (1/n + ε),
    with b_h the expected number of workers of the first h head keys. Appendix A draws each key's d
    choices with repeats (b_h = n − n((n − 1)/n)^(h·d)); repart gives a head key d *distinct*
    workers, so b_h = n − n(1 − d/n)^h, the expected union of h random d-subsets (b_1 = d). d grows
    from the start until every prefix holds; reaching n means "use W-Choices" (§IV-A), returned as n.
    """
    if head.size == 0:
        return 2
    start = max(2, math.ceil(head[0] * n))
    total = 0.0
    for i in range(head.size):
        total += head[i]
    for d in range(start, n):
        holds = True
        prefix = 0.0
        missed = 1.0 - d / n
        for h in range(1, head.size + 1):
            prefix += head[h - 1]
            b = n - n * missed ** float(h)
            share = b / n
            left = prefix + share ** float(d) * (total - prefix) + share**2.0 * tail
            if left > b * (1.0 / n + epsilon):
                holds = False
                break
        if holds:
            return d
    return n


@numba.njit(cache=True)
def _head_frequencies(counts: FloatArray, size: int, threshold: float, seen: float) -> FloatArray:
    chosen = np.empty(size, dtype=np.float64)
    found = 0
    for e in range(size):
        if counts[e] >= threshold:
            chosen[found] = counts[e] / seen
            found += 1
    head = -np.sort(-chosen[:found])
    return head


@numba.njit(cache=True)
def _cache_candidates(
    key: np.uint64,
    d: int,
    seeds: UIntArray,
    base: np.uint64,
    n: int,
    lines: I32Array,
    masks: UIntArray,
    s: int,
    line: int,
) -> int:
    """The first d distinct workers among H_1(k), H_2(k), …: a bitset, and ``lines[s, line]`` by id."""
    for j in range(masks.shape[2]):
        masks[s, line, j] = 0
    length = 0
    j = 0
    while length < d:
        w = choice(key, seed_of(seeds, base, j), n)
        bit = np.uint64(1) << np.uint64(w & 63)
        if masks[s, line, w >> 6] & bit == 0:
            masks[s, line, w >> 6] |= bit
            length += 1
        j += 1
    length = 0  # listed in worker order, so that the first least loaded is the lowest id
    for w in range(n):
        if masks[s, line, w >> 6] & (np.uint64(1) << np.uint64(w & 63)) != 0:
            lines[s, line, length] = w
            length += 1
    return length


@numba.njit(cache=True)
def _head_kernel(
    key_hashes: UIntArray,
    sources: IntArray,
    out: IntArray,
    mode: int,
    theta: float,
    epsilon: float,
    recompute_every: int,
    warm: int,
    loads: IntArray,
    minimum: IntArray,
    levels: UIntArray,
    seeds: UIntArray,
    base: np.uint64,
    n: int,
    seen: IntArray,
    d_of: IntArray,
    computed_at: IntArray,
    turn: IntArray,
    ss_keys: UIntArray,
    ss_counts: FloatArray,
    ss_errors: FloatArray,
    ss_sizes: IntArray,
    ss_heap: IntArray,
    ss_positions: IntArray,
    ss_index: IntArray,
    line_of: IntArray,
    line_owner: IntArray,
    line_d: IntArray,
    line_floor: IntArray,
    line_length: IntArray,
    lines: I32Array,
    line_masks: UIntArray,
    clock: IntArray,
) -> None:
    for i in range(key_hashes.size):
        # Unsigned, so that numba skips the negative-index fix-up of every [s, ...] (D-Choices: −15 %); the
        # helpers take it as the int it holds.
        s: int = np.uint64(sources[i])  # type: ignore[assignment]
        k = key_hashes[i]
        e = locate(ss_keys, ss_index, s, k)
        if e >= 0:
            if bump(ss_counts, ss_positions, ss_sizes, s, e):
                sink(ss_heap, ss_positions, ss_counts, ss_sizes, s, e)
        else:
            e = admit(ss_keys, ss_counts, ss_errors, ss_sizes, ss_heap, ss_positions, ss_index, s, k, -e - 1)
            if e < 0:  # it replaced another key: that key's cached candidates are void
                e = -e - 1
                if line_of[s, e] >= 0:
                    line_owner[s, line_of[s, e]] = -1
                    line_of[s, e] = -1
        seen[s] += 1
        if seen[s] < warm or ss_counts[s, e] < theta * seen[s]:
            w = pkg_choice(loads, s, k, seeds, base, n)
        elif mode == ROUND_ROBIN:  # worker (s + j) mod n for the source's j-th head tuple
            w = turn[s]
            turn[s] = w + 1 if w + 1 < n else 0
        else:
            d = n
            if mode == D_CHOICES:
                if d_of[s] == 0 or seen[s] - computed_at[s] >= recompute_every:
                    head = _head_frequencies(ss_counts[s], ss_sizes[s], theta * seen[s], float(seen[s]))
                    tail = max(0.0, 1.0 - head.sum())
                    d_of[s] = optimal_choices(head, tail, n, epsilon)
                    computed_at[s] = seen[s]
                d = d_of[s]
            if d >= n:
                w = least_loaded(levels, minimum, s)
            else:
                line = line_of[s, e]
                if line < 0 or line_d[s, line] != d:
                    if line < 0:
                        line = clock[s]
                        clock[s] = (line + 1) % line_owner.shape[1]
                        if line_owner[s, line] >= 0:
                            line_of[s, line_owner[s, line]] = -1
                        line_owner[s, line] = e
                        line_of[s, e] = line
                    line_d[s, line] = d
                    line_floor[s, line] = minimum[s]
                    line_length[s, line] = _cache_candidates(k, d, seeds, base, n, lines, line_masks, s, line)
                w = least_loaded_of(levels, minimum, s, line_masks, line, line_floor[s, line])
                if w < 0:  # every candidate is far above the source's minimum: scan them
                    w = lines[s, line, 0]
                    for q in range(1, line_length[s, line]):
                        c = lines[s, line, q]
                        if loads[s, c] < loads[s, w]:
                            w = c
                line_floor[s, line] = loads[s, w]
        if mode == ROUND_ROBIN:  # needs no least loaded worker
            loads[s, w] += 1
        elif add_tuple(loads, minimum, levels, s, w):
            raise_minimum(loads, minimum, levels, s)
        out[i] = w


class _HeadGrouping(Grouping):
    """The three head groupings share the summary, the head test and PKG for the tail."""

    _mode: int

    def __init__(
        self,
        workers: int,
        sources: int,
        *,
        theta: float | None = None,
        capacity: int | None = None,
        epsilon: float = 1e-4,
        recompute_every: int = RECOMPUTE_EVERY,
        seed: int = 0,
    ) -> None:
        super().__init__(workers, sources, seed=seed)
        self.theta = default_theta(self.workers) if theta is None else check_fraction("theta", theta)
        self.capacity = (
            default_capacity(self.theta) if capacity is None else check_count("capacity", capacity)
        )
        self.epsilon = check_positive("epsilon", epsilon)
        self.recompute_every = check_count("recompute_every", recompute_every)
        self._summaries = Summaries.empty(self.sources, self.capacity)
        self._seen = np.zeros(self.sources, dtype=np.int64)
        self._d = np.zeros(self.sources, dtype=np.int64)
        self._computed_at = np.zeros(self.sources, dtype=np.int64)
        self._turn = np.arange(self.sources, dtype=np.int64) % self.workers
        # D-Choices caches its head keys' candidate lists per summary entry: at most ⌊1/θ⌋ keys are in the
        # head at once (the counts sum to m_s), so that many lines per source suffice, reused in turn.
        # The other modes never touch them.
        d_choices = self._mode == D_CHOICES
        lines = math.floor(1 / self.theta) + 1 if d_choices else 1
        width = self.workers if d_choices else 1
        self._line_of = np.full((self.sources, self.capacity), -1, dtype=np.int64)
        self._line_owner = np.full((self.sources, lines), -1, dtype=np.int64)
        self._line_d = np.zeros((self.sources, lines), dtype=np.int64)
        self._line_floor = np.zeros((self.sources, lines), dtype=np.int64)  # no candidate's load is below
        self._line_length = np.zeros((self.sources, lines), dtype=np.int64)
        self._lines = np.zeros((self.sources, lines, width), dtype=np.int32)
        self._line_masks = np.zeros((self.sources, lines, words(width)), dtype=np.uint64)
        self._clock = np.zeros(self.sources, dtype=np.int64)
        self._minimum = np.zeros(self.sources, dtype=np.int64)
        self._levels = level_sets(self.sources, self.workers)

    def _route(self, key_hashes: UIntArray, sources: IntArray, out: IntArray) -> None:
        ss = self._summaries
        _head_kernel(
            key_hashes,
            sources,
            out,
            self._mode,
            self.theta,
            self.epsilon,
            self.recompute_every,
            math.ceil(1 / self.theta),
            self._loads,
            self._minimum,
            self._levels,
            self._seeds,
            seed_base(self.seed),
            self.workers,
            self._seen,
            self._d,
            self._computed_at,
            self._turn,
            ss.keys,
            ss.counts,
            ss.errors,
            ss.sizes,
            ss.heap,
            ss.positions,
            ss.index,
            self._line_of,
            self._line_owner,
            self._line_d,
            self._line_floor,
            self._line_length,
            self._lines,
            self._line_masks,
            self._clock,
        )

    def summary(self, source: int) -> list[tuple[int, float, float]]:
        """Source ``source``'s SpaceSaving entries: (key hash, count, error), largest count first."""
        return self._summaries.entries(source)

    def head(self, source: int) -> set[int]:
        """Key hashes source ``source`` currently treats as head keys (count ≥ θ·m_s, m_s ≥ 1/θ)."""
        if self._seen[source] < math.ceil(1 / self.theta):
            return set()
        bar = self.theta * self._seen[source]
        return {key for key, count, _ in self.summary(source) if count >= bar}

    def head_size(self) -> int:
        return len(set().union(*(self.head(s) for s in range(self.sources))))

    def max_choices(self) -> int:
        return self.workers if self.head_size() else min(2, self.workers)


class DChoices(_HeadGrouping):
    """D-Choices: head keys get d hash candidates from FindOptimalChoices (Proposition IV.1)."""

    scheme = "dchoices"
    _mode = D_CHOICES

    @property
    def d(self) -> IntArray:
        """Each source's current d (0 before its first head tuple; n means all workers)."""
        return self._d.copy()

    def max_choices(self) -> int:
        if not self.head_size():
            return min(2, self.workers)
        return int(max(2, self._d.max()))


class WChoices(_HeadGrouping):
    """W-Choices: head keys go to the least loaded of all n workers."""

    scheme = "wchoices"
    _mode = W_CHOICES


class RoundRobinHead(_HeadGrouping):
    """RR: head keys go to all n workers in turn (the paper's load-oblivious baseline)."""

    scheme = "rr"
    _mode = ROUND_ROBIN
