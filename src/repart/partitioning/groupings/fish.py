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

The kernel finds a hot key's first idle candidate without scanning them (``idle.py``), counts tuples
and classifies as ``spacesaving`` and ``_classify`` say, and takes ordinary tuples in a tight inner
loop (``_fish_kernel``); the pure-Python reference in the tests is the definition it must equal.
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
    check_rates,
    default_theta,
)
from repart.partitioning.groupings.idle import (
    BUSY,
    REBASE_AFTER,
    I16Array,
    RankArray,
    earliest_release,
    least_idle_rank,
    least_wait,
    padded,
    rank_dtype,
    rebase,
    relative,
    waiting_choice,
)
from repart.partitioning.groupings.keytable import KeyTable, append, find_or_slot
from repart.partitioning.groupings.minload import lowest_bit, words
from repart.partitioning.groupings.ring import build_ring, walk
from repart.partitioning.groupings.spacesaving import (
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


@numba.njit(cache=True)
def _decay_counts(counts: FloatArray, size: int, s: int, factor: float) -> None:
    """``spacesaving.decay`` of a summary that is not full: its errors are all 0 (only a replacement,
    in a full summary, sets one) and 0 decays to 0, and it has no heap to repair, so only the counts
    are scaled. (One array argument: numba counts references to each on every call.)"""
    for e in range(size):
        counts[s, e] *= factor


@numba.njit(cache=True, inline="always")  # inlined into the kernel: 1–2.5 ns a tuple less than a call
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
    hot_shares: FloatArray,
    entry_of: IntArray,
    marked: UIntArray,
) -> bool:
    """CHK at an epoch end; returns False when the key table must grow first (then the entries still
    marked are the hot ones, and classifying again gives the same result).

    Only the entries ``marked`` — hot at the previous epoch end, or counted since — are read, in entry
    order as a pass over the whole summary would (so the hot mass sums alike; a cold entry adds 0.0,
    which changes no sum). Any other entry is not hot: its count has only decayed with the total since
    it was below θ·total, while the total grew by the epoch's tuples, a margin far above the rounding
    of those products (exact while the decayed total stays below 10^14 tuples; it tends to
    epoch/(1 − decay)). Afterwards only the hot entries stay marked. The pass is branch-free but for
    the walk over the marked bits: which entries are hot varies from epoch to epoch.
    """
    bar = theta * total
    hot_mass = 0.0
    hot = 0
    for word in range((ss_sizes[s] + 63) >> 6):
        bits = marked[s, word]
        kept = np.uint64(0)
        while bits != 0:
            bit = bits & (~bits + _ONE)
            bits ^= bit
            e = 64 * word + lowest_bit(bit)
            share = ss_counts[s, e] / total
            is_hot = ss_counts[s, e] >= bar
            hot_mass += share if is_hot else 0.0
            hot_entries[hot] = e
            hot_shares[hot] = share
            hot += is_hot
            kept |= bit if is_hot else np.uint64(0)
        marked[s, word] = kept
    if hot == 0:
        return True
    if size[0] + hot > keys.size:
        return False
    floor = max(2, (math.ceil(n * hot_mass / hot)))
    for q in range(hot):
        e = hot_entries[q]
        d = min(n, max(floor, (math.ceil(spread * n * hot_shares[q]))))
        m = entry_of[s, e]
        if m < 0:  # not linked to its key-table entry yet
            k = ss_keys[s, e]
            m = find_or_slot(index, keys, owners, k, s)
            if m < 0:
                m = append(index, keys, owners, size, -m - 1, k, s)
            entry_of[s, e] = m
        width[m] = max(width[m], d)
        hot_in[m] = epoch_number
    return True


@numba.njit(cache=True, error_model="numpy")  # no division by zero: λ > 0, totals ≥ 1
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
    ranks: RankArray,
    release: I16Array,
    base: IntArray,
    ring_positions: UIntArray,
    ring_owners: IntArray,
    ring_buckets: IntArray,
    scratch: I32Array,
    stamps: IntArray,
    hot_entries: IntArray,
    hot_shares: FloatArray,
    entry_of: IntArray,
    marked: UIntArray,
) -> int:
    """Route from ``start``; returns where it stopped (the key table must grow) or the length.

    Two paths compute the same thing. The inner loop takes a run of ordinary tuples: the source's
    epoch goes on, the key is counted already (no admission, no heap repair), linked to its key-table
    entry, and walked on the ring as far as its candidate count; the source needs no rebase. It reads
    what decides that before changing anything and leaves at the first "no"; that tuple then takes
    the general path, which handles any tuple, and the inner loop resumes after it. The inner loop
    calls no compiled function and indexes with unsigned integers (no negative-index fix-up), so
    numba's LLVM keeps it in registers; the run's ``loads`` are counted after the run, so that no
    store in the loop waits for its worker to be chosen to know its address (docs/DECISIONS.md).
    """
    none = ranks.dtype.type(n)  # least_idle_rank's "no idle worker", typed as the ranks
    i = start
    while i < key_hashes.size:
        run = i
        while i < key_hashes.size:
            iu = np.uint64(i)
            s: int = np.uint64(sources[iu])  # type: ignore[assignment]
            if in_epoch[s] == epoch:
                break
            k = key_hashes[iu]
            e = locate(ss_keys, ss_index, s, k)
            if e < 0:
                break
            eu = np.uint64(e)
            if 2 * ss_positions[s, eu] + 1 < ss_sizes[s]:  # bump would need sink
                break
            m = entry_of[s, eu]
            if m < 0:
                break
            mu = np.uint64(m)
            hot = hot_in[mu] == epochs[s]
            if ordered[mu] < (width[mu] if hot else tail_choices):
                break
            t = arrived[0]
            if t - base[s] >= REBASE_AFTER:
                break
            now = t / arrival_rate
            if hot:  # idle.least_wait written out: called here, FISH measured 12 % slower
                q = least_idle_rank(release, s, np.int16(t - base[s]), ranks, mu, none)
                if q < width[mu]:
                    wu = np.uint64(order[mu, np.uint64(q)])
                    if finish[s, wu] > now:  # released within the next two tuples only
                        wu = np.uint64(waiting_choice(order, m, width[mu], finish, s, now))
                else:  # every candidate is busy
                    wu = np.uint64(waiting_choice(order, m, width[mu], finish, s, now))
            else:  # hot once, not now: its tail candidates are a prefix of its ring order
                wu = np.uint64(waiting_choice(order, m, tail_choices, finish, s, now))
            ss_counts[s, eu] += 1.0
            marked[s, eu >> np.uint64(6)] |= _ONE << (eu & np.uint64(63))
            totals[s] += 1.0
            in_epoch[s] += 1
            busy = max(finish[s, wu], now) + S * costs[wu]
            finish[s, wu] = busy
            release[s, wu] = relative(earliest_release(busy, arrival_rate), base[s])
            arrived[0] = t + 1
            out[iu] = wu
            i += 1
        for j in range(run, i):
            loads[np.uint64(sources[j]), np.uint64(out[j])] += 1
        if i == key_hashes.size:
            break
        # The general path, one tuple. Unsigned, so that numba skips the negative-index fix-up of every
        # [s, ...] (D-Choices: −15 %); the helpers take it as the int it holds.
        s = np.uint64(sources[i])  # type: ignore[assignment]
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
                hot_shares,
                entry_of,
                marked,
            ):
                return i
            if ss_sizes[s] < ss_keys.shape[1]:
                _decay_counts(ss_counts, ss_sizes[s], s, decay_factor)
            else:
                decay(ss_counts, ss_errors, ss_sizes, ss_heap, ss_positions, s, decay_factor)
            totals[s] *= decay_factor
            epochs[s] += 1
            in_epoch[s] = 0
            continue  # the tuple itself may take the inner loop now
        k = key_hashes[i]
        t = arrived[0]
        now = t / arrival_rate
        if t - base[s] >= REBASE_AFTER:  # whatever the tuple: a source with no hot key rebases too
            rebase(release, finish, base, s, t, arrival_rate)
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
            if ordered[m] < width[m]:  # its ring order, as far as M[k]: its candidates are a prefix
                done = ordered[m]
                ordered[m] = walk(ring_positions, ring_owners, ring_buckets, k, width[m], order, m, stamps)
                for q in range(done, ordered[m]):
                    ranks[m, order[m, q]] = q
            w = least_wait(release, s, np.int16(t - base[s]), ranks, none, order, m, width[m], finish, now)
        elif m >= 0:  # a table key not hot now: its tail candidates, a prefix of its ring order
            if ordered[m] < tail_choices:
                done = ordered[m]
                ordered[m] = walk(
                    ring_positions, ring_owners, ring_buckets, k, tail_choices, order, m, stamps
                )
                for q in range(done, ordered[m]):
                    ranks[m, order[m, q]] = q
            w = waiting_choice(order, m, tail_choices, finish, s, now)
        else:
            length = walk(ring_positions, ring_owners, ring_buckets, k, tail_choices, scratch, 0, stamps)
            w = waiting_choice(scratch, 0, length, finish, s, now)
        busy = max(finish[s, w], now) + S * costs[w]
        finish[s, w] = busy
        release[s, w] = relative(earliest_release(busy, arrival_rate), base[s])
        loads[s, w] += 1
        arrived[0] += 1
        out[i] = w
        i += 1
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
        # Each source's workers' release indices relative to its base (idle.py); padding is never idle.
        self._release = np.full((self.sources, padded(n)), BUSY, dtype=np.int16)
        self._release[:, :n] = 0
        self._base = np.zeros(self.sources, dtype=np.int64)
        self._in_epoch = np.zeros(self.sources, dtype=np.int64)
        self._epochs = np.zeros(self.sources, dtype=np.int64)
        self._totals = np.zeros(self.sources, dtype=np.float64)
        self._table = KeyTable(
            {
                "width": ((), np.int64, 0),
                "hot_in": ((), np.int64, -1),
                # The key's ring order as far as it was walked (its first `ordered` workers), and each
                # worker's rank in it: n for a worker not walked yet and for padding (idle.py).
                "order": ((n,), np.int32, 0),
                "ordered": ((), np.int64, 0),
                "ranks": ((padded(n),), rank_dtype(n), n),
            }
        )
        self._ring = build_ring(n, self.virtual_nodes, self.seed)
        self._scratch = np.zeros((1, n), dtype=np.int32)
        # Per-worker stamps of ring walks, the last cell counting walks; and the classification's scratch.
        self._stamps = np.zeros(n + 1, dtype=np.int64)
        self._hot_entries = np.zeros(self.capacity, dtype=np.int64)
        self._hot_shares = np.zeros(self.capacity, dtype=np.float64)
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
                t.columns["ranks"],
                self._release,
                self._base,
                self._ring[0],
                self._ring[1],
                self._ring[2],
                self._scratch,
                self._stamps,
                self._hot_entries,
                self._hot_shares,
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
