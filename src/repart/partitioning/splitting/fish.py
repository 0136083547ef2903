"""FISH (Huang et al., "Efficient Time-Evolving Stream Processing at Scale"): a reconstruction.

The seed's text lost every formula, all three listings and most parameter values (NOTES.md). What
survives is the structure, implemented here with each lost formula a named parameter:

1. **Epochs** of ``epoch`` consecutive tuples per source. Within an epoch SpaceSaving counts keys
   (capacity ``capacity``; a new key evicts the smallest counter and takes its count + 1, §4.1.1).
2. **Decay**: at the end of an epoch every counter — and the source's total — is multiplied by
   ``decay`` (§4.1.1, "inter-epoch hotness decaying").
3. **Classification** (CHK, Algorithm 2), at every epoch end: f_k = count_k / total, both decayed; key k is
   hot when f_k ≥ ``theta``. A hot key's worker count is d_k = min(n, max(d_min, ⌈spread·n·f_k⌉))
   — more workers for hotter keys — with the floor d_min = max(2, ⌈n·F_H/|H|⌉) tied to the hot mass F_H
   of the |H| hot keys, and it never shrinks: M[k] = max(M[k], d_k).
4. **Candidates** from a consistent-hash ring (§5, ``virtual_nodes`` per worker): a hot key's first
   M[k] distinct workers clockwise; any other key's first ``tail_choices``.
5. **Worker choice** (§4.2): the candidate with the least *estimated waiting time*. A source cannot see
   the workers' queues; it infers them from what it sent and each worker's sampled cost per tuple
   c_i = 1/μ_i (Observation 2: the cost is stable, so the sample is exact here). Assuming the S sources
   send alike, the source's estimate of worker i's backlog follows the Lindley recursion
   F_i ← max(F_i, now) + S·c_i per tuple it sends, and W_i = max(0, F_i − now): the paper's
   "q_i·c_i − elapsed_i" with elapsed_i the time since the queue was last seen empty. Ties go to the
   earliest candidate. Tuple t of the stream arrives at t/λ (``arrival_rate`` λ).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import numpy.typing as npt

from repart.partitioning.splitting.base import (
    FloatArray,
    Grouping,
    IntArray,
    UIntArray,
    check_count,
    check_fraction,
    check_positive,
    check_rates,
    default_theta,
)
from repart.partitioning.splitting.keytable import KeyTable, append, find_or_slot
from repart.partitioning.splitting.minload import lowest_bit, words
from repart.partitioning.splitting.ring import build_ring, walk
from repart.partitioning.splitting.spacesaving import (
    Summaries,
    admit,
    bump,
    decay,
    default_capacity,
    locate,
    sink,
)

I32Array = npt.NDArray[np.int32]

# Defaults chosen by measurement: docs/DECISIONS.md, from
# `benchmarks/grouping_targets.py --sections fish-tuning` (docs/results/fish-tuning.txt).
EPOCH = 100
DECAY = 0.8
SPREAD = 4.0
TAIL_CHOICES = 1
VIRTUAL_NODES = 100
_ONE = np.uint64(1)
UNLINKED, ABSENT = -2, -1  # a summary entry's key-table entry not looked up yet, or not there


@numba.njit(cache=True, inline="always")
def waiting_choice(
    candidates: I32Array, row: int, length: int, finish: FloatArray, s: int, now: float
) -> int:
    """The candidate of ``candidates[row, :length]`` with the least estimated wait max(0, F_i − now)
    at source ``s``; ties to the earliest. A wait is never below 0, so the first idle candidate
    (F_i ≤ now) ends the scan."""
    best = candidates[row, 0]
    best_wait = finish[s, best] - now
    q = 1
    while best_wait > 0.0 and q < length:
        c = candidates[row, q]
        wait = finish[s, c] - now
        if wait < best_wait:
            best, best_wait = c, wait
        q += 1
    return int(best)


@numba.njit(cache=True, inline="always")
def first_idle(
    order: I32Array,
    m: int,
    length: int,
    finish: FloatArray,
    s: int,
    now: float,
    resume: IntArray,
    bound: FloatArray,
) -> int:
    """The first idle candidate (F_i ≤ now) of a hot key's ``order[m, :length]``, or −1 when all are
    busy: then :func:`waiting_choice` decides, and otherwise it would pick this one (its wait, 0, is
    the least possible and it is the earliest with it), usually without scanning them all.

    ``resume[m]`` is where the key's last idle candidate stood and ``bound[m]`` a lower bound of the
    F_i before it. F_i only grows and ``now`` too, so while ``now < bound[m]`` every candidate before
    ``resume[m]`` is still busy and the scan resumes there (the width only grows, keeping it a
    prefix). It calls no other function (see ``spacesaving``: numba would count references to its
    arrays on every call).
    """
    start = resume[m] if now < bound[m] else 0
    low = bound[m] if start > 0 else np.inf
    for q in range(start, length):
        c = order[m, q]
        if finish[s, c] <= now:
            resume[m] = q
            bound[m] = low
            return int(c)
        low = min(low, finish[s, c])
    resume[m] = 0
    return -1


@numba.njit(cache=True)
def _classify(
    s: int,
    theta: float,
    spread: float,
    n: int,
    epoch_number: int,
    total: float,
    ss_keys: UIntArray,
    ss_counts: FloatArray,
    ss_sizes: IntArray,
    index: IntArray,
    keys: UIntArray,
    owners: IntArray,
    size: IntArray,
    width: IntArray,
    hot_in: IntArray,
    hot_entries: IntArray,
    entry_of: IntArray,
    marked: UIntArray,
) -> bool:
    """CHK at an epoch end; returns False (changing nothing) when the key table needs to grow first.

    Only the entries ``marked`` — hot at the previous epoch end, or counted since — are read, in entry
    order as a pass over the whole summary would (so the hot mass sums alike). Any other entry is not
    hot: its count has only decayed with the total since it was below θ·total, while the total grew by
    the epoch's tuples, a margin far above the rounding of those products (exact while the decayed
    total stays below 10^14 tuples; it tends to epoch/(1 − decay)). Afterwards the hot entries stay
    marked and the rest are cleared.
    """
    bar = theta * total
    hot_mass = 0.0
    hot = 0
    for word in range((ss_sizes[s] + 63) >> 6):
        bits = marked[s, word]
        while bits != 0:
            bit = bits & (~bits + _ONE)
            bits ^= bit
            e = 64 * word + lowest_bit(bit)
            if ss_counts[s, e] >= bar:
                hot_mass += ss_counts[s, e] / total
                hot_entries[hot] = e
                hot += 1
    if hot > 0 and size[0] + hot > keys.size:
        return False
    for word in range((ss_sizes[s] + 63) >> 6):
        marked[s, word] = 0
    for q in range(hot):
        marked[s, hot_entries[q] >> 6] |= _ONE << np.uint64(hot_entries[q] & 63)
    if hot == 0:
        return True
    floor = max(2, (math.ceil(n * hot_mass / hot)))
    for q in range(hot):
        e = hot_entries[q]
        share = ss_counts[s, e] / total
        d = min(n, max(floor, (math.ceil(spread * n * share))))
        k = ss_keys[s, e]
        m = find_or_slot(index, keys, owners, k, s)
        if m < 0:
            m = append(index, keys, owners, size, -m - 1, k, s)
        entry_of[s, e] = m
        width[m] = max(width[m], d)
        hot_in[m] = epoch_number
    return True


@numba.njit(cache=True)
def _fish_kernel(
    key_hashes: UIntArray,
    sources: IntArray,
    out: IntArray,
    start: int,
    theta: float,
    epoch: int,
    decay_factor: float,
    spread: float,
    tail_choices: int,
    arrival_rate: float,
    costs: FloatArray,
    n: int,
    S: int,
    loads: IntArray,
    finish: FloatArray,
    arrived: IntArray,
    in_epoch: IntArray,
    epochs: IntArray,
    totals: FloatArray,
    ss_keys: UIntArray,
    ss_counts: FloatArray,
    ss_errors: FloatArray,
    ss_sizes: IntArray,
    ss_heap: IntArray,
    ss_positions: IntArray,
    ss_index: IntArray,
    index: IntArray,
    keys: UIntArray,
    owners: IntArray,
    size: IntArray,
    width: IntArray,
    hot_in: IntArray,
    order: I32Array,
    ordered: IntArray,
    resume: IntArray,
    bound: FloatArray,
    ring_positions: UIntArray,
    ring_owners: IntArray,
    ring_buckets: IntArray,
    scratch: I32Array,
    stamps: IntArray,
    hot_entries: IntArray,
    entry_of: IntArray,
    marked: UIntArray,
) -> int:
    """Route from ``start``; returns where it stopped (the key table must grow) or the length."""
    for i in range(start, key_hashes.size):
        # Unsigned, so that numba skips the negative-index fix-up of every [s, ...] (D-Choices: −15 %); the
        # helpers take it as the int it holds.
        s: int = np.uint64(sources[i])  # type: ignore[assignment]
        if in_epoch[s] == epoch:
            # The previous tuple closed this source's epoch: classify on its frequencies (decay scales
            # counts and total alike), then decay.
            if not _classify(
                s,
                theta,
                spread,
                n,
                epochs[s] + 1,
                totals[s],
                ss_keys,
                ss_counts,
                ss_sizes,
                index,
                keys,
                owners,
                size,
                width,
                hot_in,
                hot_entries,
                entry_of,
                marked,
            ):
                return i
            decay(ss_counts, ss_errors, ss_sizes, ss_heap, ss_positions, s, decay_factor)
            totals[s] *= decay_factor
            epochs[s] += 1
            in_epoch[s] = 0
        k = key_hashes[i]
        now = arrived[0] / arrival_rate
        e = locate(ss_keys, ss_index, s, k)
        if e >= 0:
            if bump(ss_counts, ss_positions, ss_sizes, s, e):
                sink(ss_heap, ss_positions, ss_counts, ss_sizes, s, e)
        else:
            e = admit(ss_keys, ss_counts, ss_errors, ss_sizes, ss_heap, ss_positions, ss_index, s, k, -e - 1)
            e = e if e >= 0 else -e - 1
            entry_of[s, e] = UNLINKED  # a new key in this summary entry
        marked[s, e >> 6] |= _ONE << np.uint64(e & 63)  # counted this epoch: the classification reads it
        totals[s] += 1.0
        in_epoch[s] += 1
        m = entry_of[s, e]
        if m == UNLINKED:
            m = find_or_slot(index, keys, owners, k, s)
            entry_of[s, e] = max(m, ABSENT)
        if m >= 0 and hot_in[m] == epochs[s]:
            if ordered[m] == 0:  # a hot key's whole ring order, once: its M[k] candidates are a prefix
                ordered[m] = walk(ring_positions, ring_owners, ring_buckets, k, n, order, m, stamps)
            w = first_idle(order, m, width[m], finish, s, now, resume, bound)
            if w < 0:
                w = waiting_choice(order, m, width[m], finish, s, now)
        else:
            length = walk(ring_positions, ring_owners, ring_buckets, k, tail_choices, scratch, 0, stamps)
            w = waiting_choice(scratch, 0, length, finish, s, now)
        finish[s, w] = max(finish[s, w], now) + S * costs[w]
        loads[s, w] += 1
        arrived[0] += 1
        out[i] = w
    return key_hashes.size


class Fish(Grouping):
    """FISH: epoch-decayed hot keys, a growing worker count per key, ring candidates, least wait."""

    scheme = "fish"

    def __init__(
        self,
        workers: int,
        sources: int,
        *,
        rates: npt.ArrayLike | None = None,
        arrival_rate: float | None = None,
        theta: float | None = None,
        epoch: int = EPOCH,
        decay: float = DECAY,
        spread: float = SPREAD,
        tail_choices: int = TAIL_CHOICES,
        capacity: int | None = None,
        virtual_nodes: int = VIRTUAL_NODES,
        seed: int = 0,
    ) -> None:
        super().__init__(workers, sources, seed=seed)
        n = self.workers
        self.rates = check_rates(np.ones(n) if rates is None else rates, n)
        self.arrival_rate = (
            0.9 * float(self.rates.sum())
            if arrival_rate is None
            else check_positive("arrival_rate", arrival_rate)
        )
        self.theta = default_theta(n) if theta is None else check_fraction("theta", theta)
        self.epoch = check_count("epoch", epoch)
        self.decay = check_fraction("decay", decay)
        self.spread = check_positive("spread", spread)
        self.tail_choices = min(n, check_count("tail_choices", tail_choices))
        self.capacity = (
            default_capacity(self.theta) if capacity is None else check_count("capacity", capacity)
        )
        self.virtual_nodes = check_count("virtual_nodes", virtual_nodes)
        self._costs = 1.0 / self.rates
        self._summaries = Summaries.empty(self.sources, self.capacity)
        self._finish = np.zeros((self.sources, n), dtype=np.float64)
        self._arrived = np.zeros(1, dtype=np.int64)
        self._in_epoch = np.zeros(self.sources, dtype=np.int64)
        self._epochs = np.zeros(self.sources, dtype=np.int64)
        self._totals = np.zeros(self.sources, dtype=np.float64)
        self._table = KeyTable(
            {
                "width": ((), np.int64, 0),
                "hot_in": ((), np.int64, -1),
                "order": ((n,), np.int32, 0),
                "ordered": ((), np.int64, 0),
                "resume": ((), np.int64, 0),  # first_idle's memory of the key's idle candidates
                "bound": ((), np.float64, 0),
            }
        )
        self._ring = build_ring(n, self.virtual_nodes, self.seed)
        self._scratch = np.zeros((1, n), dtype=np.int32)
        # Per-worker stamps of ring walks, the last cell counting walks; and the classification's scratch.
        self._stamps = np.zeros(n + 1, dtype=np.int64)
        self._hot_entries = np.zeros(self.capacity, dtype=np.int64)
        # Each summary entry's key-table entry: ABSENT while its key has none (only the classification
        # adds keys to the table, and it links them), UNLINKED until looked up once.
        self._entry_of = np.full((self.sources, self.capacity), UNLINKED, dtype=np.int64)
        # The summary entries each source's classification reads (a bit per entry): see _classify.
        self._marked = np.zeros((self.sources, words(self.capacity)), dtype=np.uint64)

    def _route(self, key_hashes: UIntArray, sources: IntArray, out: IntArray) -> None:
        ss, t = self._summaries, self._table
        done = 0
        while True:
            done = _fish_kernel(
                key_hashes,
                sources,
                out,
                done,
                self.theta,
                self.epoch,
                self.decay,
                self.spread,
                self.tail_choices,
                self.arrival_rate,
                self._costs,
                self.workers,
                self.sources,
                self._loads,
                self._finish,
                self._arrived,
                self._in_epoch,
                self._epochs,
                self._totals,
                ss.keys,
                ss.counts,
                ss.errors,
                ss.sizes,
                ss.heap,
                ss.positions,
                ss.index,
                t.index,
                t.keys,
                t.owners,
                t.size,
                t.columns["width"],
                t.columns["hot_in"],
                t.columns["order"],
                t.columns["ordered"],
                t.columns["resume"],
                t.columns["bound"],
                self._ring[0],
                self._ring[1],
                self._ring[2],
                self._scratch,
                self._stamps,
                self._hot_entries,
                self._entry_of,
                self._marked,
            )
            if done == key_hashes.size:
                return
            t.grow()

    def summary(self, source: int) -> list[tuple[int, float, float]]:
        """Source ``source``'s decayed SpaceSaving entries (key hash, count, error), largest first."""
        return self._summaries.entries(source)

    def widths(self, source: int) -> dict[int, int]:
        """M[k] of source ``source``: key hash → workers the key may use (never shrinks)."""
        t = self._table
        chosen = t.entries(source)
        return dict(zip(t.keys[chosen].tolist(), t.columns["width"][chosen].tolist(), strict=True))

    def hot(self, source: int) -> set[int]:
        """Key hashes classified hot at source ``source``'s last epoch end."""
        t = self._table
        chosen = t.entries(source)
        current = t.columns["hot_in"][chosen] == self._epochs[source]
        return set(t.keys[chosen][current].tolist())

    def head_size(self) -> int:
        return len(set().union(*(self.hot(s) for s in range(self.sources))))

    def max_choices(self) -> int:
        t = self._table
        widest = int(t.columns["width"][: t.count].max()) if t.count else 0
        return max(self.tail_choices, widest)
