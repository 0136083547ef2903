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

The kernel runs the promotion cycles itself (a source's entries are a list linked through the key
table, so a cycle costs O(that source's entries)), and between scaling checks it finds a key's least
loaded candidate with :func:`resume_run`, which sweeps a hot key's run about once per load level
instead of once per tuple.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from repart.partitioning.groupings.base import Grouping, IntArray, UIntArray, check_count
from repart.partitioning.groupings.hashes import choice
from repart.partitioning.groupings.keytable import KeyTable, append, find_or_slot

FORGOTTEN, BABY, TEENAGE, OLD = -1, 0, 1, 2
NEVER = -1  # a key item not yet checked for scaling
RESCAN = 2**62  # resume_run's position past any run: scan the whole run
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


@numba.njit(cache=True, inline="always")
def resume_run(
    loads: IntArray, s: int, home: int, count: int, n: int, level: IntArray, at: IntArray, e: int
) -> int:
    """:func:`least_loaded_run` for key item ``e``, resumed where its previous choice left off; −1 when
    it cannot tell (the caller scans the run and calls :func:`settle_run`).

    ``level[e]`` is a load no candidate is below and ``at[e]`` a position in the run (0 … count − 1)
    before which every candidate is above it. Loads only grow, so both stay true whatever the other
    keys send, and the first candidate from ``at[e]`` on at exactly ``level[e]`` is the least loaded
    and the earliest. It is chosen, so it goes up by one and the next search starts after it. Only
    when none is left at the level is the whole run scanned (and ``at[e]`` past the run forces that,
    for a new item or a changed width): a hot key's run is swept about once per level, not per tuple.
    """
    q = at[e]
    c = home + q - n if home + q >= n else home + q
    while q < count:
        if loads[s, c] == level[e]:
            at[e] = q + 1
            return int(c)
        q += 1
        c = c + 1 if c + 1 < n else 0
    return -1


@numba.njit(cache=True, inline="always")
def settle_run(
    loads: IntArray, s: int, home: int, n: int, level: IntArray, at: IntArray, e: int, w: int
) -> None:
    """Key item ``e``'s memory for :func:`resume_run` after a full scan chose ``w``: its load is the level,
    and the search resumes after it."""
    level[e] = loads[s, w]
    at[e] = (w - home if w >= home else w - home + n) + 1


@numba.njit(cache=True)
def _ordered(
    first: int, after: IntArray, counts: IntArray, keys: UIntArray, space: IntArray, which: int
) -> IntArray:
    """The entries of one source's list (from ``first``, linked by ``after``) in key space ``which``, by
    decreasing occurrence then increasing key hash."""
    found = 0
    e = first
    while e >= 0:
        found += space[e] == which
        e = after[e]
    chosen = np.empty(found, dtype=np.int64)
    found = 0
    e = first
    while e >= 0:
        if space[e] == which:
            chosen[found] = e
            found += 1
        e = after[e]
    chosen = chosen[np.argsort(keys[chosen], kind="mergesort")]
    return chosen[np.argsort(-counts[chosen], kind="mergesort")]  # stable: equal counts keep key order


@numba.njit(cache=True)
def _promote_space(
    first: int,
    after: IntArray,
    counts: IntArray,
    keys: UIntArray,
    space: IntArray,
    lower: int,
    upper: int,
    capacity: int,
) -> None:
    """Algorithm 3, promoteToNextSpace: the lower space's items, most frequent first, swap with the upper
    space's, least frequent first (an empty slot counts as least), while the lower's are at least as
    frequent."""
    below = _ordered(first, after, counts, keys, space, lower)
    above = _ordered(first, after, counts, keys, space, upper)
    slots = np.full(capacity, -1, dtype=np.int64)
    kept = min(capacity, above.size)
    slots[:kept] = above[:kept]
    last = capacity - 1
    for q in range(min(capacity, below.size)):
        if last < 0:
            break
        candidate = below[q]
        resident = slots[last]
        if resident >= 0 and counts[resident] > counts[candidate]:
            break
        space[candidate] = upper
        if resident >= 0:
            space[resident] = lower
        slots[last] = candidate
        last -= 1


@numba.njit(cache=True)
def _promotion_cycle(
    first: int,
    after: IntArray,
    counts: IntArray,
    keys: UIntArray,
    space: IntArray,
    checked: IntArray,
    baby_capacity: int,
    teenage_capacity: int,
    old_capacity: int,
    to_old: bool,
) -> None:
    """One promotion cycle of a source (Algorithm 1, then 2 when ``to_old``): Baby keeps its
    ``baby_capacity`` most frequent items and forgets the rest (their counts; widths stay), then its
    best move up into Teenage, and Teenage's into Old."""
    baby = _ordered(first, after, counts, keys, space, BABY)
    for q in range(baby_capacity, baby.size):
        e = baby[q]
        space[e] = FORGOTTEN
        counts[e] = 0
        checked[e] = NEVER
    _promote_space(first, after, counts, keys, space, BABY, TEENAGE, teenage_capacity)
    if to_old:
        _promote_space(first, after, counts, keys, space, TEENAGE, OLD, old_capacity)


@numba.njit(cache=True)
def _dkg_kernel(
    key_hashes: UIntArray,
    sources: IntArray,
    out: IntArray,
    start: int,
    n: int,
    threshold: float,
    warmup: int,
    cycle: int,
    old_every: int,
    capacities: IntArray,
    check_interval: int,
    loads: IntArray,
    seen: IntArray,
    cycle_end: IntArray,
    seeds: UIntArray,
    first_of: IntArray,
    last_of: IntArray,
    index: IntArray,
    keys: UIntArray,
    owners: IntArray,
    size: IntArray,
    counts: IntArray,
    space: IntArray,
    width: IntArray,
    checked: IntArray,
    home_of: IntArray,
    level: IntArray,
    at: IntArray,
    after: IntArray,
    recent_key: UIntArray,
    recent_entry: IntArray,
) -> int:
    """Route from ``start``; returns where it stopped for the caller to grow the table, or the length."""
    for i in range(start, key_hashes.size):
        # Unsigned, so that numba skips the negative-index fix-up of every [s, ...] (D-Choices: −15 %); the
        # helpers take it as the int it holds.
        s: int = np.uint64(sources[i])  # type: ignore[assignment]
        k = key_hashes[i]
        # Each source's direct-mapped cache of recent keys (by the hash's low bits) spares hot keys the
        # key-table lookup; entries never move or leave the table, so a cached one stays valid.
        slot = k & _RECENT_MASK
        e = recent_entry[s, slot]
        if e < 0 or recent_key[s, slot] != k:
            e = find_or_slot(index, keys, owners, k, s)
            if e < 0:
                if size[0] == keys.size:
                    return i
                e = append(index, keys, owners, size, -e - 1, k, s)
                counts[e] = 0
                space[e] = FORGOTTEN
                width[e] = min(2, n)
                home_of[e] = choice(k, seeds[0], n)
                at[e] = RESCAN
                after[e] = -1  # the source's list of entries, in insertion order
                if last_of[s] >= 0:
                    after[last_of[s]] = e
                else:
                    first_of[s] = e
                last_of[s] = e
            recent_key[s, slot] = k
            recent_entry[s, slot] = e
        if space[e] == FORGOTTEN:  # a new key item (its width, if any, survives)
            space[e] = BABY
            checked[e] = NEVER
        counts[e] += 1
        sent = seen[s]
        seen[s] = sent + 1
        if checked[e] == NEVER or seen[s] - checked[e] > check_interval:  # a scaling check is due
            checked[e] = seen[s]
            w = choose_best_task(
                loads, s, sent, home_of[e], width, e, True, space[e] == OLD, seen[s] > warmup, threshold, n
            )
            at[e] = RESCAN  # the width may have changed
        else:
            w = resume_run(loads, s, home_of[e], width[e], n, level, at, e)
            if w < 0:
                w = least_loaded_run(loads, s, home_of[e], width[e], n)
                settle_run(loads, s, home_of[e], n, level, at, e, w)
        loads[s, w] += 1
        out[i] = w
        if seen[s] == cycle_end[s]:  # seen[s] % cycle == 0, without a division per tuple
            cycle_end[s] += cycle
            _promotion_cycle(
                first_of[s],
                after,
                counts,
                keys,
                space,
                checked,
                capacities[BABY],
                capacities[TEENAGE],
                capacities[OLD],
                (seen[s] // cycle) % old_every == 0,
            )
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
        self._capacities = np.array(  # indexed by key space
            [self.baby_capacity, self.teenage_capacity, self.old_capacity], dtype=np.int64
        )
        self._seen = np.zeros(self.sources, dtype=np.int64)
        self._cycle_end = np.full(self.sources, self.cycle, dtype=np.int64)  # each source's next cycle end
        self._table = KeyTable(
            {
                "count": ((), np.int64, 0),
                "space": ((), np.int64, FORGOTTEN),
                "width": ((), np.int64, 2),
                "checked": ((), np.int64, NEVER),
                "home": ((), np.int64, 0),  # H_1(k) mod n, the run's first worker
                "level": ((), np.int64, 0),  # resume_run's memory of the run
                "at": ((), np.int64, RESCAN),
                "after": ((), np.int64, -1),  # the next entry of the same source
            }
        )
        # Each source's entries as a list linked through "after", in insertion order (entries never leave
        # the table): a promotion cycle costs O(its source's entries), not a pass over every source's.
        self._first_of = np.full(self.sources, -1, dtype=np.int64)
        self._last_of = np.full(self.sources, -1, dtype=np.int64)
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
                self.workers,
                self.threshold,
                self.warmup,
                self.cycle,
                self.old_every,
                self._capacities,
                self.check_interval,
                self._loads,
                self._seen,
                self._cycle_end,
                self._seeds,
                self._first_of,
                self._last_of,
                t.index,
                t.keys,
                t.owners,
                t.size,
                t.columns["count"],
                t.columns["space"],
                t.columns["width"],
                t.columns["checked"],
                t.columns["home"],
                t.columns["level"],
                t.columns["at"],
                t.columns["after"],
                self._recent_key,
                self._recent_entry,
            )
            if done == key_hashes.size:
                return
            t.grow()

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
