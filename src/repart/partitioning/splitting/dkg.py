"""Dynamic Key Grouping (Dalabasmaz & Can): key spaces, contiguous candidates, L_s thresholds.

Each source keeps a *key item* per key (occurrences, its width w) in one of three key spaces (§4.1.2):
Old (10 % of the expected key count E), Teenage (40 %) and Baby (unbounded); new keys enter Baby.
Every promotion cycle (the paper's 15 s) Baby's most frequent items are promoted into Teenage, and every
fourth cycle (60 s) Teenage's into Old (Algorithms 1–3: the source's items in decreasing occurrence are
swapped with the destination's in increasing occurrence while the source's are at least as frequent;
ties in occurrence go to the smaller key hash). Counts never decay.

A key's candidates are contiguous (§4.4): home = H_1(k) mod n, then home + 1, … (mod n), w of them,
w = 2 at first. ``chooseBestTask`` (Algorithm 4) picks the candidate with the least local load, as a
percentage of what the source has sent (ties to the earliest), and counts the candidates below the
threshold L_s = L_i + √L_i, L_i = 100/n (Eq. 3–4). It scales out (Algorithm 5) when the source is past
its warm-up, the key is in Old and the least loaded candidate is at or above L_s: the next worker
home + w becomes a candidate if it is lighter (and is chosen). Otherwise it scales down (Algorithm 6)
when w > 2 and at least two candidates are below L_s, and chooses again.

Time-based periods become tuple counts per source (``cycle`` tuples per promotion cycle, ``warmup``
tuples of cold start), since the simulator has no clock: at r tuples per second per source, the
paper's 15 s are 15·r tuples.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from repart.partitioning.splitting.base import Grouping, IntArray, UIntArray, check_count
from repart.partitioning.splitting.hashes import choice
from repart.partitioning.splitting.keytable import KeyTable, append, find_or_slot

BABY, TEENAGE, OLD = 0, 1, 2
_RUNNING, _GROW, _PROMOTE = 0, 1, 2

# Defaults (docs/DECISIONS.md): the paper's E = 100 expected keys, cycles of 10,000 tuples per source.
EXPECTED_KEYS = 100
CYCLE = 10_000
OLD_EVERY = 4


def scale_threshold(n: int) -> float:
    """L_s = L_i + √L_i with L_i = 100/n, in percent of the load (Eq. 3–4)."""
    ideal = 100.0 / n
    return ideal + math.sqrt(ideal)


@numba.njit(cache=True)
def choose_best_task(
    row: IntArray,
    sent: int,
    home: int,
    width: IntArray,
    e: int,
    in_old: bool,
    warm: bool,
    threshold: float,
    n: int,
) -> int:
    """Algorithm 4 (with 5 and 6) for one tuple; may change ``width[e]``; returns the worker."""
    while True:
        count = width[e]
        lowest = np.inf
        best = -1
        below = 0
        for j in range(count):
            m = (home + j) % n
            load = 100.0 * row[m] / sent if sent > 0 else 0.0
            if load < threshold:
                below += 1
            if load < lowest:
                lowest = load
                best = m
        if warm and lowest >= threshold and in_old:
            extra = (home + count) % n
            load = 100.0 * row[extra] / sent if sent > 0 else 0.0
            if load < lowest:
                best = extra
                width[e] = count + 1
            return best
        if count > 2 and below >= 2:
            width[e] = count - 1
            continue
        return best


@numba.njit(cache=True)
def _dkg_kernel(
    key_hashes: UIntArray,
    sources: IntArray,
    out: IntArray,
    start: int,
    status: IntArray,
    n: int,
    threshold: float,
    warmup: int,
    cycle: int,
    loads: IntArray,
    seen: IntArray,
    seeds: UIntArray,
    index: IntArray,
    keys: UIntArray,
    owners: IntArray,
    size: IntArray,
    counts: IntArray,
    space: IntArray,
    width: IntArray,
) -> int:
    """Route from ``start``; stops to let the caller grow the table or run a promotion cycle."""
    for i in range(start, key_hashes.size):
        s = sources[i]
        k = key_hashes[i]
        e = find_or_slot(index, keys, owners, k, s)
        if e < 0:
            if size[0] == keys.size:
                status[0] = _GROW
                return i
            e = append(index, keys, owners, size, -e - 1, k, s)
            counts[e] = 0
            space[e] = BABY
            width[e] = min(2, n)
        counts[e] += 1
        sent = seen[s]
        seen[s] = sent + 1
        home = choice(k, seeds[0], n)
        w = choose_best_task(loads[s], sent, home, width, e, space[e] == OLD, seen[s] > warmup, threshold, n)
        loads[s, w] += 1
        out[i] = w
        if seen[s] % cycle == 0:
            status[0] = _PROMOTE
            status[1] = s
            return i + 1
    status[0] = _RUNNING
    return key_hashes.size


class DynamicKeyGrouping(Grouping):
    """DKG: per-key widths over contiguous workers, grown for Old-space keys above L_s."""

    scheme = "dkg"

    def __init__(
        self,
        workers: int,
        sources: int,
        *,
        expected_keys: int = EXPECTED_KEYS,
        cycle: int = CYCLE,
        old_every: int = OLD_EVERY,
        warmup: int | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(workers, sources, seed=seed)
        self.expected_keys = check_count("expected_keys", expected_keys)
        self.cycle = check_count("cycle", cycle)
        self.old_every = check_count("old_every", old_every)
        self.warmup = self.cycle if warmup is None else check_count("warmup", warmup, minimum=0)
        self.old_capacity = max(1, self.expected_keys // 10)
        self.teenage_capacity = max(1, (4 * self.expected_keys) // 10)
        self.threshold = scale_threshold(self.workers)
        self._seen = np.zeros(self.sources, dtype=np.int64)
        self._status = np.zeros(2, dtype=np.int64)
        self._table = KeyTable(
            {"count": ((), np.int64, 0), "space": ((), np.int64, BABY), "width": ((), np.int64, 2)}
        )

    def _route(self, key_hashes: UIntArray, sources: IntArray, out: IntArray) -> None:
        t = self._table
        done = 0
        while True:
            done = _dkg_kernel(
                key_hashes,
                sources,
                out,
                done,
                self._status,
                self.workers,
                self.threshold,
                self.warmup,
                self.cycle,
                self._loads,
                self._seen,
                self._seeds,
                t.index,
                t.keys,
                t.owners,
                t.size,
                t.columns["count"],
                t.columns["space"],
                t.columns["width"],
            )
            if self._status[0] == _GROW:
                t.grow()
            elif self._status[0] == _PROMOTE:
                self._promote(int(self._status[1]))
            if done == key_hashes.size and self._status[0] != _GROW:
                return

    def _promote(self, source: int) -> None:
        """One promotion cycle of ``source``: Baby → Teenage, and every ``old_every``-th Teenage → Old."""
        self._promote_space(source, BABY, TEENAGE, self.teenage_capacity)
        if (self._seen[source] // self.cycle) % self.old_every == 0:
            self._promote_space(source, TEENAGE, OLD, self.old_capacity)

    def _promote_space(self, source: int, lower: int, upper: int, capacity: int) -> None:
        """Algorithm 3, promoteToNextSpace: swap while the lower space's best is ≥ the upper's worst."""
        t = self._table
        entries = t.entries(source)
        counts, space, keys = t.columns["count"], t.columns["space"], t.keys
        below = _by_occurrence(entries[space[entries] == lower], counts, keys, limit=capacity)
        above = _by_occurrence(entries[space[entries] == upper], counts, keys, limit=capacity)
        slots: list[int | None] = [*above.tolist(), *([None] * (capacity - above.size))]
        last = capacity - 1
        for candidate in below.tolist():
            if last < 0:
                break
            resident = slots[last]
            if resident is not None and counts[resident] > counts[candidate]:
                break
            space[candidate] = upper
            if resident is not None:
                space[resident] = lower
            slots[last] = candidate
            last -= 1

    def spaces(self, source: int) -> dict[str, set[int]]:
        """Key hashes of source ``source`` in each key space."""
        t = self._table
        entries = t.entries(source)
        names = {BABY: "baby", TEENAGE: "teenage", OLD: "old"}
        return {
            name: set(t.keys[entries[t.columns["space"][entries] == code]].tolist())
            for code, name in names.items()
        }

    def widths(self, source: int) -> dict[int, int]:
        """Key hash → the number of contiguous workers the key may use at source ``source``."""
        t = self._table
        entries = t.entries(source)
        return dict(zip(t.keys[entries].tolist(), t.columns["width"][entries].tolist(), strict=True))

    def head_size(self) -> int:
        t = self._table
        wide = t.columns["width"][: t.count] > 2
        return int(np.unique(t.keys[: t.count][wide]).size)

    def max_choices(self) -> int:
        t = self._table
        return int(t.columns["width"][: t.count].max()) if t.count else min(2, self.workers)


def _by_occurrence(entries: IntArray, counts: IntArray, keys: UIntArray, limit: int) -> IntArray:
    """The ``limit`` most frequent of ``entries``, by decreasing occurrence then increasing key hash."""
    if entries.size > limit:
        bar = np.partition(counts[entries], entries.size - limit)[entries.size - limit]
        entries = entries[counts[entries] >= bar]
    order = np.lexsort((keys[entries], -counts[entries]))
    return entries[order][:limit]
