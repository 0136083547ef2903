"""Dynamic Key Grouping (Dalabasmaz & Can): key spaces, contiguous candidates, L_s thresholds.

Each source keeps a *key item* per key (§4.1.1: occurrences, the last time scaling was checked for
it, its width w) in one of three key spaces (§4.1.2): Old (10 % of the expected key count E), Teenage
(40 %) and Baby; new keys enter Baby. Every promotion cycle (the paper's 15 s) Baby is sorted and
truncated to its 50 %·E most frequent items — the others are forgotten, to re-enter Baby with a fresh
count, "discarding quite new items" (Algorithm 1) — and its best are promoted into Teenage; every
fourth cycle (60 s) Teenage's into Old (Algorithms 1–3: the lower space's items in decreasing
occurrence are swapped with the upper's in increasing occurrence while the lower's are at least as
frequent; ties in occurrence go to the smaller key hash). Counts never decay. A key's width outlives
its key item, as the authors' code keeps widths in a map of their own.

A key's candidates are contiguous (§4.4): home = H_1(k) mod n, then home + 1, … (mod n), w of them,
w = 2 at first. ``chooseBestTask`` (Algorithm 4) picks the candidate with the least local load, as a
percentage of what the source has sent (ties to the earliest), and counts the candidates below the
threshold L_s = L_i + √L_i, L_i = 100/n (Eq. 3–4). Scaling is considered for a key item when more
than ``check_interval`` of the source's tuples have passed since its last check (the item's "last time
Scale Out is checked", §4.1.1; 60 s in the authors' code), and a check allows one step. It scales
out (Algorithm 5) when the source is past its warm-up, the key is in Old and the least loaded
candidate is at or above L_s: the next worker home + w becomes a candidate if it is lighter (and is
chosen). Otherwise it scales down (Algorithm 6) when
w > 2 and at least two candidates are below L_s, and chooses again among the narrower range.

Time-based periods become tuple counts per source, since the simulator has no clock: at r tuples per
second per source the paper's 15 s are 15·r tuples. The default r ≈ 1,333/s (a 20,000-tuple cycle)
lies within the throughputs the paper measured on its 5-spout topology (2,739–9,511 records/s in all,
Table 3, so 550–1,900 per source).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from repart.partitioning.splitting.base import Grouping, IntArray, UIntArray, check_count
from repart.partitioning.splitting.hashes import choice
from repart.partitioning.splitting.keytable import KeyTable, append, find_or_slot

FORGOTTEN, BABY, TEENAGE, OLD = -1, 0, 1, 2
_RUNNING, _GROW, _PROMOTE = 0, 1, 2
NEVER = -1  # a key item not yet checked for scaling
RECENT_SLOTS = 64  # a power of two: each source's cache of key-table entries, by the key hash's low bits
_RECENT_MASK = np.uint64(RECENT_SLOTS - 1)

# Defaults (docs/DECISIONS.md): the paper's E = 100 expected keys; a 15 s cycle of 20,000 tuples per
# source; Teenage → Old and each key's scaling check every 4 cycles (60 s).
EXPECTED_KEYS = 100
CYCLE = 20_000
OLD_EVERY = 4


def scale_threshold(n: int) -> float:
    """L_s = L_i + √L_i with L_i = 100/n, in percent of the load (Eq. 3–4)."""
    ideal = 100.0 / n
    return ideal + math.sqrt(ideal)


@numba.njit(cache=True, inline="always")
def least_loaded_run(loads: IntArray, s: int, home: int, count: int, n: int) -> int:
    """The least loaded of the ``count`` workers home, home + 1, … (mod n) at source ``s``, ties to
    the earliest: chooseBestTask's choice when no scaling check is due. The run is scanned as its
    two contiguous pieces, home … n − 1 and then 0, 1, …, with no modulo per candidate."""
    first_end = min(n, home + count)
    best = home
    low = loads[s, home]
    for m in range(home + 1, first_end):
        if loads[s, m] < low:
            best = m
            low = loads[s, m]
    for m in range(home + count - first_end):
        if loads[s, m] < low:
            best = m
            low = loads[s, m]
    return best


@numba.njit(cache=True)
def choose_best_task(
    loads: IntArray,
    s: int,
    sent: int,
    home: int,
    width: IntArray,
    e: int,
    may_scale: bool,
    in_old: bool,
    warm: bool,
    threshold: float,
    n: int,
) -> int:
    """Algorithm 4 (with 5 and 6) for one tuple of source ``s``; may change ``width[e]`` by one.

    Loads are the source's percentages 100·L_i/sent; comparing them needs no division: a candidate
    is lighter when its count is, and below L_s when 100·L_i < L_s·sent (every load is 0 % before
    the source has sent anything). ``may_scale`` says whether the key item's check is due.
    """
    count = width[e]
    best = least_loaded_run(loads, s, home, count, n)
    if not may_scale:
        return best
    below = 0
    for j in range(count):
        if sent == 0 or 100.0 * loads[s, (home + j) % n] < threshold * sent:
            below += 1
    if warm and in_old and not (sent == 0 or 100.0 * loads[s, best] < threshold * sent):
        extra = (home + count) % n
        if loads[s, extra] < loads[s, best]:
            best = extra
            width[e] = count + 1
        return best
    if count > 2 and below >= 2:
        width[e] = count - 1  # and choose again, with the check spent: among the narrower range
        best = least_loaded_run(loads, s, home, count - 1, n)
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
    check_interval: int,
    loads: IntArray,
    seen: IntArray,
    cycle_end: IntArray,
    seeds: UIntArray,
    index: IntArray,
    keys: UIntArray,
    owners: IntArray,
    size: IntArray,
    counts: IntArray,
    space: IntArray,
    width: IntArray,
    checked: IntArray,
    recent_key: UIntArray,
    recent_entry: IntArray,
) -> int:
    """Route from ``start``; stops to let the caller grow the table or run a promotion cycle."""
    for i in range(start, key_hashes.size):
        s = sources[i]
        k = key_hashes[i]
        # Each source's direct-mapped cache of recent keys (by the hash's low bits) spares hot keys the
        # key-table lookup; entries never move or leave the table, so a cached one stays valid.
        slot = k & _RECENT_MASK
        e = recent_entry[s, slot]
        if e < 0 or recent_key[s, slot] != k:
            e = find_or_slot(index, keys, owners, k, s)
            if e < 0:
                if size[0] == keys.size:
                    status[0] = _GROW
                    return i
                e = append(index, keys, owners, size, -e - 1, k, s)
                counts[e] = 0
                space[e] = FORGOTTEN
                width[e] = min(2, n)
            recent_key[s, slot] = k
            recent_entry[s, slot] = e
        if space[e] == FORGOTTEN:  # a new key item (its width, if any, survives)
            space[e] = BABY
            checked[e] = NEVER
        counts[e] += 1
        sent = seen[s]
        seen[s] = sent + 1
        due = checked[e] == NEVER or seen[s] - checked[e] > check_interval
        if due:
            checked[e] = seen[s]
        home = choice(k, seeds[0], n)
        if due:
            w = choose_best_task(
                loads, s, sent, home, width, e, True, space[e] == OLD, seen[s] > warmup, threshold, n
            )
        else:
            w = least_loaded_run(loads, s, home, width[e], n)
        loads[s, w] += 1
        out[i] = w
        if seen[s] == cycle_end[s]:  # seen[s] % cycle == 0, without a division per tuple
            cycle_end[s] += cycle
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
        check_interval: int | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(workers, sources, seed=seed)
        self.expected_keys = check_count("expected_keys", expected_keys)
        self.cycle = check_count("cycle", cycle)
        self.old_every = check_count("old_every", old_every)
        self.warmup = self.cycle if warmup is None else check_count("warmup", warmup, minimum=0)
        self.check_interval = (
            self.old_every * self.cycle
            if check_interval is None
            else check_count("check_interval", check_interval, minimum=0)
        )
        self.old_capacity = max(1, self.expected_keys // 10)
        self.teenage_capacity = max(1, (4 * self.expected_keys) // 10)
        self.baby_capacity = max(1, self.expected_keys // 2)
        self.threshold = scale_threshold(self.workers)
        self._seen = np.zeros(self.sources, dtype=np.int64)
        self._cycle_end = np.full(self.sources, self.cycle, dtype=np.int64)  # each source's next cycle end
        self._status = np.zeros(2, dtype=np.int64)
        self._table = KeyTable(
            {
                "count": ((), np.int64, 0),
                "space": ((), np.int64, FORGOTTEN),
                "width": ((), np.int64, 2),
                "checked": ((), np.int64, NEVER),
            }
        )
        # Each source's key-table entries, kept up to date as the table grows (entries never leave it):
        # a promotion cycle then costs O(its source's items), not a pass over every source's.
        self._entries = [np.zeros(0, dtype=np.int64) for _ in range(self.sources)]
        self._listed = 0
        self._recent_key = np.zeros((self.sources, RECENT_SLOTS), dtype=np.uint64)
        self._recent_entry = np.full((self.sources, RECENT_SLOTS), -1, dtype=np.int64)

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
                self.check_interval,
                self._loads,
                self._seen,
                self._cycle_end,
                self._seeds,
                t.index,
                t.keys,
                t.owners,
                t.size,
                t.columns["count"],
                t.columns["space"],
                t.columns["width"],
                t.columns["checked"],
                self._recent_key,
                self._recent_entry,
            )
            if self._status[0] == _GROW:
                t.grow()
            elif self._status[0] == _PROMOTE:
                self._promote(int(self._status[1]))
            if done == key_hashes.size and self._status[0] != _GROW:
                return

    def _promote(self, source: int) -> None:
        """One promotion cycle of ``source`` (Algorithm 1, then 2 every ``old_every``-th cycle)."""
        entries = self._entries_of(source)
        self._truncate_baby(entries)
        self._promote_space(entries, BABY, TEENAGE, self.teenage_capacity)
        if (self._seen[source] // self.cycle) % self.old_every == 0:
            self._promote_space(entries, TEENAGE, OLD, self.old_capacity)

    def _entries_of(self, source: int) -> IntArray:
        """Source ``source``'s key-table entries in insertion order (``KeyTable.entries``, kept)."""
        t = self._table
        if self._listed < t.count:
            new = np.arange(self._listed, t.count, dtype=np.int64)
            owners = t.owners[self._listed : t.count]
            for owner in np.unique(owners).tolist():
                self._entries[owner] = np.concatenate([self._entries[owner], new[owners == owner]])
            self._listed = t.count
        return self._entries[source]

    def _truncate_baby(self, entries: IntArray) -> None:
        """Forget all but Baby's 50 %·E most frequent items (their counts; widths stay) among one
        source's ``entries``."""
        t = self._table
        space, counts, checked = t.columns["space"], t.columns["count"], t.columns["checked"]
        baby = entries[space[entries] == BABY]
        if baby.size <= self.baby_capacity:
            return
        kept = _by_occurrence(baby, counts, t.keys, limit=self.baby_capacity)
        kept_counts, kept_checked = counts[kept], checked[kept]
        space[baby], counts[baby], checked[baby] = FORGOTTEN, 0, NEVER
        space[kept], counts[kept], checked[kept] = BABY, kept_counts, kept_checked

    def _promote_space(self, entries: IntArray, lower: int, upper: int, capacity: int) -> None:
        """Algorithm 3, promoteToNextSpace, among one source's ``entries``: swap while the lower
        space's best is ≥ the upper's worst."""
        t = self._table
        counts, space, keys = t.columns["count"], t.columns["space"], t.keys
        below = _by_occurrence(entries[space[entries] == lower], counts, keys, limit=capacity)
        above = _by_occurrence(entries[space[entries] == upper], counts, keys, limit=capacity)
        slots: list[int | None] = [*above.tolist(), *([None] * (capacity - above.size))]
        count_of = dict(zip(above.tolist(), counts[above].tolist(), strict=True))
        last = capacity - 1
        for candidate, occurrences in zip(below.tolist(), counts[below].tolist(), strict=True):
            if last < 0:
                break
            resident = slots[last]
            if resident is not None and count_of[resident] > occurrences:
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
