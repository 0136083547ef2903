"""Key frequencies: the estimate the construction algorithms read.

``FrequencyEstimate`` is what a window of the stream tells the controller: the keys a lossy counter
retained with their counts, the window's tuple count ``n``, the counter's error bound ``epsilon``, an
estimate of the number of distinct keys |D| and, optionally, the tuple count of every slot.
Frequencies are ``f(d) = count / n`` (Gedik §4.1.2).

``LossyCounter`` produces such estimates with Manku & Motwani's lossy counting (Manku and Motwani,
"Approximate frequency counts over data streams", VLDB 2002), batched with numpy and mergeable;
``SlidingWindow`` emulates a sliding window with tumbling lossy counters (Gedik §4.1.2, Fig. 2).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.domain import INT64_MAX, INT64_MIN, Key, KeyType, check_slot_bits, common_key_type
from repart.validation import (
    NON_NEGATIVE_INT,
    NONE,
    POSITIVE_INT,
    PROBABILITY,
    Interval,
    Kind,
    Options,
    check,
)


@dataclass(frozen=True)
class FrequencyEstimate:
    """Estimated key counts over one (merged) window.

    ``keys`` holds one key type; ``counts[i]`` is the estimated count of ``keys[i]`` (a lossy
    counter's count, an underestimate by at most ``epsilon * total``). ``slot_counts``, when given, has
    ``2**slot_bits`` entries: the tuple count of every slot, tracked and untracked keys alike.
    """

    keys: tuple[Key, ...]
    counts: npt.NDArray[np.float64]
    total: int
    epsilon: float = 0.0
    distinct_estimate: int | None = None
    slot_counts: npt.NDArray[np.float64] | None = None
    slot_bits: int | None = None
    key_type: KeyType | None = field(default=None)

    def __post_init__(self) -> None:
        counts = np.asarray(self.counts, dtype=np.float64)
        if counts.ndim != 1 or counts.shape[0] != len(self.keys):
            raise InvalidInput(
                "counts",
                f"must be a 1-d array with one entry per key ({len(self.keys)}), got shape {counts.shape}",
            )
        if not np.all(np.isfinite(counts)) or np.any(counts < 0):
            raise InvalidInput("counts", "must be finite numbers >= 0, got a NaN, infinite or negative one")
        total = check("total", self.total, NON_NEGATIVE_INT)
        if counts.size and counts.max() > total:
            raise InvalidInput("counts", f"must not exceed total ({total}), got {counts.max()}")
        check("epsilon", self.epsilon, Interval(float, 0, 1, closed="left"))
        if self.distinct_estimate is not None:
            check("distinct_estimate", self.distinct_estimate, Interval(int, len(self.keys), None))
        if len(set(self.keys)) != len(self.keys):
            raise InvalidInput("keys", "must be unique, got a key twice")
        kind = common_key_type(self.keys)
        if self.key_type is not None and kind is not None and kind != self.key_type:
            raise InvalidInput("key_type", f"must be {kind!r}, the type of the keys, got {self.key_type!r}")
        object.__setattr__(self, "key_type", self.key_type or kind)
        object.__setattr__(self, "counts", counts)
        if self.slot_counts is not None:
            bits = check_slot_bits(self.slot_bits) if self.slot_bits is not None else None
            if bits is None:
                raise InvalidInput("slot_bits", "must be given with slot_counts, got None")
            slots = np.asarray(self.slot_counts, dtype=np.float64)
            if slots.shape != (1 << bits,):
                raise InvalidInput(
                    "slot_counts", f"must have 2**slot_bits = {1 << bits} entries, got shape {slots.shape}"
                )
            if np.any(slots < 0) or not np.all(np.isfinite(slots)):
                raise InvalidInput(
                    "slot_counts", "must be finite numbers >= 0, got a NaN, infinite or negative one"
                )
            object.__setattr__(self, "slot_counts", slots)

    @classmethod
    def from_counts(
        cls, counts: dict[Any, float], total: int | None = None, **kwargs: Any
    ) -> FrequencyEstimate:
        """Build from a ``{key: count}`` mapping; ``total`` defaults to the sum of the counts."""
        keys = tuple(counts)
        values = np.fromiter((float(counts[k]) for k in keys), dtype=np.float64, count=len(keys))
        n = round(float(values.sum())) if total is None else total
        return cls(keys=keys, counts=values, total=n, **kwargs)

    @property
    def frequencies(self) -> npt.NDArray[np.float64]:
        """``f(d) = count / n`` for every retained key."""
        if self.total == 0:
            return np.zeros_like(self.counts)
        return self.counts / self.total

    def count_of(self) -> dict[Key, float]:
        """``{key: count}`` for every retained key."""
        return dict(zip(self.keys, self.counts.tolist(), strict=True))


# Keys of one type in key order: int64 for int keys, an object array of Python str for str keys (exact;
# not numpy's fixed-width unicode, which drops trailing NUL characters, nor StringDType, whose
# searchsorted misreads strings longer than 15 bytes in numpy 2.4, numpy#31533).
KeyArray = npt.NDArray[Any]
# One validated batch: int keys as an int64 array, str keys as a list (sliced without copying the strings).
KeyBatch = npt.NDArray[np.int64] | list[str]

# Batches are absorbed in chunks of at most this many tuples: their sorts stay in cache (2^16 measured
# fastest on 10^6-tuple Zipf and uniform streams), and the segmented minimum's offsets (segments ×
# value range) stay far inside int64.
_MAX_CHUNK = 1 << 16


# A lossy counter's error bound ε (Manku & Motwani; 0: exact counts), and the key type it counts
# (None: set by the first keys).
EPSILON = Interval(float, 0, 1, closed="left")
# The bucket width of an exact counter (ε = 0): a bucket no stream fills, so none ever closes, every
# delta is 0 and nothing is deleted.
EXACT_WIDTH = 1 << 62


def bucket_width(epsilon: float) -> int:
    """Lossy counting's bucket width ``w = ceil(1/epsilon)`` (Manku & Motwani), ``EXACT_WIDTH`` for an
    exact counter (``epsilon = 0``) or an epsilon so small that no stream would close a bucket."""
    return math.ceil(1.0 / epsilon) if epsilon > 1.0 / EXACT_WIDTH else EXACT_WIDTH


KEY_TYPE = (Options(("str", "int")), NONE)


def _empty_keys(key_type: KeyType | None) -> KeyArray:
    return np.empty(0, dtype=object if key_type == "str" else np.int64)


def _kind_of_type(kind: type) -> KeyType:
    if issubclass(kind, str):
        return "str"
    if issubclass(kind, int | np.integer) and not issubclass(kind, bool):
        return "int"
    raise InvalidInput("keys", f"must be str or int (signed 64-bit) keys, got a {kind.__name__}")


def _as_key_batch(
    keys: Sequence[Key] | npt.NDArray[Any], expected: KeyType | None
) -> tuple[KeyBatch, KeyType | None]:
    """Validate a batch of keys and bring it to the form the counters absorb.

    Returns the batch and its key type (None when it is empty). ``InvalidInput("keys")`` for mixed key types,
    unsupported types (bool, float, None, bytes, ...), ints outside the signed 64-bit range, and a
    key type other than ``expected``.
    """
    if isinstance(keys, str | bytes):
        raise InvalidInput(
            "keys", f"must be a sequence or 1-d array of keys, got a single {type(keys).__name__}"
        )
    if isinstance(keys, np.ndarray):
        if keys.ndim != 1:
            raise InvalidInput("keys", f"must be a 1-d array, got shape {keys.shape}")
        if keys.dtype.kind in "iu":
            if keys.dtype.kind == "u" and keys.size and int(keys.max()) > INT64_MAX:
                raise InvalidInput(
                    "keys",
                    f"must be in the signed 64-bit range [{INT64_MIN}, {INT64_MAX}], got one outside it",
                )
            kind: KeyType | None = "int" if keys.size else None
            batch: KeyBatch = keys.astype(np.int64, copy=False)
            return batch, _check_expected(kind, expected)
        if keys.dtype.kind not in "UTO":
            raise InvalidInput(
                "keys",
                "must be an integer or string array or a sequence of str or int keys, "
                f"got dtype {keys.dtype}",
            )
        keys = keys.tolist()
    items = list(keys)
    if not items:
        return np.empty(0, dtype=np.int64), None
    kinds = {_kind_of_type(t) for t in set(map(type, items))}
    if len(kinds) > 1:
        raise InvalidInput(
            "keys", "must all be 'int' keys or all 'str' keys (one counter counts one key type), got both"
        )
    kind = kinds.pop()
    if kind == "str":
        return items, _check_expected(kind, expected)
    try:
        batch = np.asarray(items, dtype=np.int64)
    except OverflowError:
        raise InvalidInput(
            "keys", f"must be in the signed 64-bit range [{INT64_MIN}, {INT64_MAX}], got one outside it"
        ) from None
    return batch, _check_expected(kind, expected)


def _check_expected(kind: KeyType | None, expected: KeyType | None) -> KeyType | None:
    if kind is not None and expected is not None and kind != expected:
        raise InvalidInput("keys", f"must be {expected!r} keys (the counter's key_type), got {kind!r} keys")
    return kind


def _lookup(table: KeyArray, keys: KeyArray) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """For sorted distinct ``keys``: their insertion points in the sorted ``table`` and which are in it."""
    pos = np.searchsorted(table, keys).astype(np.int64)
    found = np.zeros(len(keys), dtype=bool)
    inside = pos < len(table)
    found[inside] = table[pos[inside]] == keys[inside]
    return pos, found


def _union_sorted(
    table: KeyArray, keys: KeyArray, pos: npt.NDArray[np.int64], found: npt.NDArray[np.bool_]
) -> tuple[KeyArray, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Union of two sorted arrays of distinct keys (``pos, found = _lookup(table, keys)``), with the
    position of every element of ``table`` and of ``keys`` in it."""
    missing = ~found
    inserted_at = pos[missing]
    union = np.insert(table, inserted_at, keys[missing])
    # An element of the table moves right by the number of keys inserted at or before it; an element
    # of keys lands after every missing key that precedes it.
    index_table = np.arange(len(table), dtype=np.int64) + np.searchsorted(
        inserted_at, np.arange(len(table)), side="right"
    )
    index_keys = pos + np.cumsum(missing) - missing
    return union, index_table, index_keys.astype(np.int64)


class LossyCounter:
    """Manku & Motwani's lossy counting, updated in numpy batches and mergeable.

    Lossy counting (G. S. Manku and R. Motwani, "Approximate frequency counts over data streams",
    VLDB 2002; Gedik §4.1.2, "Lossy counting") splits the stream into buckets of ``w = ceil(1/epsilon)``
    tuples and keeps a table of entries ``(key, count, delta)``. With ``n`` the number of tuples seen
    (counting the arriving one) the current bucket is ``b = ceil(n / w)``. A key not in the table is
    inserted with ``count = 1, delta = b - 1``; a key in it gets ``count += 1``. When a bucket closes
    (``n % w == 0``) every entry with ``count + delta <= b`` is deleted. Then for every key
    ``count <= true count <= count + delta``, ``delta <= epsilon * n``, every key missing from the
    table occurred at most ``floor(n / w) <= epsilon * n`` times, and after ``B`` bucket closes the
    table holds at most ``w * H_B <= w * (1 + ln B)`` entries (the paper's ``(1/epsilon) * log(epsilon
    * n)``, which takes the harmonic number ``H_B`` as ``log B``) plus the keys new in the open bucket.

    ``update`` absorbs a whole batch with numpy and leaves exactly the table that processing its keys
    one at a time leaves. It relies on each key's entry evolving independently of all other keys: its
    *slack* ``count + delta - b`` at the close of bucket ``b`` obeys the Lindley recursion
    ``slack_b = max(slack_{b-1}, 0) + c_b - 1`` (``c_b`` its occurrences in bucket ``b``, a slack
    ``<= 0`` meaning deleted), which has the closed form ``prefix sum - running minimum``. The batch
    is grouped into (key, bucket) events and the recursion is solved for all keys at once with
    segmented cumulative sums and minima; a key's ``delta`` is ``b - 1`` of the last bucket in which
    it was (re)inserted, its count the occurrences since.

    With ``epsilon = 0`` the counter is exact: no bucket closes (its width is ``EXACT_WIDTH``), every
    count is the key's true count and every delta 0.

    Str keys are coded to integers through a dict that holds exactly the table's keys (a key that is
    new, or was deleted and comes back, takes a fresh code), so the arithmetic runs on int64 and the
    strings stay exact. ``entries`` and the estimates list keys in sorted order.
    """

    def __init__(self, epsilon: float, key_type: KeyType | None = None) -> None:
        self._epsilon = float(check("epsilon", epsilon, EPSILON))
        self._width = bucket_width(self._epsilon)
        self._key_type = cast(KeyType | None, check("key_type", key_type, *KEY_TYPE))
        self._n = 0
        # The table, sorted by _keys: the int keys themselves, or the codes of str keys, with _names[i]
        # the str coded _keys[i] and _code_of the inverse map.
        self._keys: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._counts: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._deltas: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)
        self._names: npt.NDArray[np.object_] = np.empty(0, dtype=object)
        self._code_of: dict[str, int] = {}
        self._next_code = 0

    @property
    def epsilon(self) -> float:
        """The error parameter ε."""
        return self._epsilon

    @property
    def bucket_width(self) -> int:
        """The bucket width ``w = ceil(1/epsilon)``."""
        return self._width

    @property
    def n(self) -> int:
        """The number of tuples counted (for a merged counter, of all its parts)."""
        return self._n

    @property
    def key_type(self) -> KeyType | None:
        """The key type counted; None until the first non-empty batch when not given."""
        return self._key_type

    @property
    def error_bound(self) -> float:
        """The largest undercount of any key, ``epsilon * n``.

        For a merged counter this is the sum of its parts' bounds, ``epsilon * (n1 + n2)``.
        """
        return self._epsilon * self._n

    def __len__(self) -> int:
        return len(self._counts)

    def update(self, keys: Sequence[Key] | npt.NDArray[Any]) -> None:
        """Count a batch of keys, in order: an integer numpy array, or a sequence of str or int keys.

        The batch is validated before anything is counted: InvalidInput for mixed key types, types other
        than str and signed 64-bit int, and a key type other than this counter's.
        """
        batch, kind = _as_key_batch(keys, self._key_type)
        self._feed(batch, kind)

    def _feed(self, batch: KeyBatch, kind: KeyType | None) -> None:
        """Count a batch already validated by ``_as_key_batch`` against this counter's key type."""
        if kind is None:
            return
        self._key_type = kind
        for start in range(0, len(batch), _MAX_CHUNK):
            self._absorb(batch[start : start + _MAX_CHUNK])

    def _absorb(self, batch: KeyBatch) -> None:
        """Count a non-empty batch; the state equals item-by-item lossy counting (see the class doc)."""
        w = self._width
        n0 = self._n
        m = len(batch)
        first = n0 // w + 1  # bucket of the batch's first tuple
        spanned = (n0 + m - 1) // w + 2 - first  # buckets the batch touches
        closed = (n0 + m) // w  # buckets closed once the batch is counted

        if isinstance(batch, list):
            # Codes of str keys: a key in the table keeps its code; a new key takes next_code + the
            # index of its first occurrence in the batch.
            first_code = self._next_code
            coded = map(self._code_of.setdefault, batch, itertools.count(first_code))
            self._next_code += m
            distinct, item_code = np.unique(np.fromiter(coded, dtype=np.int64, count=m), return_inverse=True)
        else:
            distinct, item_code = np.unique(batch, return_inverse=True)
        pos, found = _lookup(self._keys, distinct)
        # Events: one per (key, bucket) in which the key occurs, sorted by key then bucket.
        event_id = item_code * spanned + ((n0 + np.arange(m, dtype=np.int64)) // w - (first - 1))
        if len(distinct) * spanned <= 4 * m:
            histogram = np.bincount(event_id, minlength=len(distinct) * spanned)
            grouped = np.flatnonzero(histogram)
            occurrences = histogram[grouped].astype(np.int64)
        else:
            grouped, occurrences = np.unique(event_id, return_counts=True)
        key_of = grouped // spanned
        bucket = grouped % spanned + first
        n_events = len(grouped)
        starts = np.flatnonzero(np.diff(key_of, prepend=-1))  # each key's first event; key k's is starts[k]
        ends = np.append(starts[1:], n_events) - 1

        # Slack before an event's occurrences are added (a). A key in the table carries in
        # count + delta - first + 1 >= 1 (every entry has count + delta > floor(n0 / w)), worn down by 1
        # for every bucket closed before its first event; 0 means deleted. The carry is capped at
        # spanned + 1, which the batch cannot wear down, to keep the offsets below small.
        carried = np.zeros(len(distinct), dtype=np.int64)
        table_counts = self._counts[pos[found]]
        table_deltas = self._deltas[pos[found]]
        carried[found] = np.minimum(table_counts + table_deltas - first + 1, spanned + 1)
        initial = np.maximum(carried - (bucket[starts] - first), 0)
        # Within a key a_k = max(a_{k-1} + c_{k-1} - (bucket_k - bucket_{k-1}), 0): a Lindley recursion,
        # solved as a = P - running min(Q), P the prefix sums of the steps, Q = P but -a_1 at the start.
        step = np.zeros(n_events, dtype=np.int64)
        step[1:] = occurrences[:-1] - (bucket[1:] - bucket[:-1])
        prefix = np.cumsum(step)
        prefix -= prefix[starts][key_of]
        floor = prefix.copy()
        floor[starts] = -initial
        # Segmented running minimum: shift each key's values below all earlier keys' values.
        offset = key_of * (int(floor.max()) - int(floor.min()) + 1)
        before = prefix - (np.minimum.accumulate(floor - offset) + offset)
        after = before + occurrences - 1  # slack at the close of the event's bucket

        last_bucket = bucket[ends]
        present = (last_bucket > closed) | (after[ends] > closed - last_bucket)
        # A slack of 0 before an event means the key was absent: (re)inserted in that event's bucket.
        inserted = np.maximum.accumulate(np.where(before == 0, np.arange(n_events), -1))[ends]
        fresh = inserted >= starts
        since = np.where(fresh, inserted, starts)
        running = np.cumsum(occurrences)
        counts = running[ends] - running[since] + occurrences[since]
        deltas = np.where(fresh, bucket[since] - 1, 0)
        carried_on = found & ~fresh
        counts[carried_on] += self._counts[pos[carried_on]]
        deltas[carried_on] = self._deltas[pos[carried_on]]

        # Entries the batch does not touch only face the deletions at the buckets it closes.
        keys, index_table, index_batch = _union_sorted(self._keys, distinct, pos, found)
        all_counts = np.empty(len(keys), dtype=np.int64)
        all_deltas = np.empty(len(keys), dtype=np.int64)
        keep = np.empty(len(keys), dtype=bool)
        all_counts[index_table] = self._counts
        all_deltas[index_table] = self._deltas
        keep[index_table] = self._counts + self._deltas > closed
        all_counts[index_batch] = counts
        all_deltas[index_batch] = deltas
        keep[index_batch] = present
        if isinstance(batch, list):
            all_names = np.empty(len(keys), dtype=object)
            all_names[index_table] = self._names
            all_names[index_batch[~found]] = [batch[i] for i in (distinct[~found] - first_code).tolist()]
            for name in all_names[~keep].tolist():
                del self._code_of[name]
            self._names = all_names[keep]
        self._keys = keys[keep]
        self._counts = all_counts[keep]
        self._deltas = all_deltas[keep]
        self._n = n0 + m

    def _sorted_table(self) -> tuple[KeyArray, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The table in key order: keys (int64, or object for str), counts, deltas."""
        if self._key_type != "str":
            return self._keys, self._counts, self._deltas
        order = np.argsort(self._names)
        return self._names[order], self._counts[order], self._deltas[order]

    def _set_table(
        self, keys: KeyArray, counts: npt.NDArray[np.int64], deltas: npt.NDArray[np.int64]
    ) -> None:
        """Install a table given in key order, as ``_sorted_table`` returns it."""
        if self._key_type == "str":
            self._names = keys
            self._keys = np.arange(len(keys), dtype=np.int64)
            self._code_of = dict(zip(keys.tolist(), range(len(keys)), strict=True))
            self._next_code = len(keys)
        else:
            self._keys = keys
        self._counts = counts
        self._deltas = deltas

    @classmethod
    def from_entries(
        cls,
        epsilon: float,
        n: int,
        keys: Sequence[Key] | npt.NDArray[Any],
        counts: Sequence[int] | npt.NDArray[np.integer[Any]],
        deltas: Sequence[int] | npt.NDArray[np.integer[Any]],
        key_type: KeyType | None = None,
    ) -> LossyCounter:
        """Rebuild a counter from the table ``entries()`` returned and the tuple count ``n``.

        This is how counters cross process boundaries (a Spark executor ships its table, the driver
        merges). The table must be one a lossy counter of ``n`` tuples can hold: distinct keys,
        counts >= 1, ``0 <= delta <= floor(n / w)`` and counts adding up to at most ``n``; InvalidInput
        naming the field otherwise.
        """
        counter = cls(epsilon, key_type)
        counter._n = int(check("n", n, NON_NEGATIVE_INT))
        batch, kind = _as_key_batch(keys, counter._key_type)
        counter._key_type = counter._key_type or kind
        count_array = np.asarray(counts, dtype=np.int64)
        delta_array = np.asarray(deltas, dtype=np.int64)
        size = len(batch)
        if count_array.shape != (size,) or delta_array.shape != (size,):
            name = "counts" if count_array.shape != (size,) else "deltas"
            shape = count_array.shape if name == "counts" else delta_array.shape
            raise InvalidInput(name, f"must have one entry per key ({size}), got shape {shape}")
        if size and int(count_array.min()) < 1:
            raise InvalidInput("counts", f"must be integers >= 1, got {int(count_array.min())}")
        if int(count_array.sum()) > counter._n:
            raise InvalidInput(
                "counts", f"must add up to at most n = {counter._n}, got {int(count_array.sum())}"
            )
        closed = counter._n // counter._width
        if size and (int(delta_array.min()) < 0 or int(delta_array.max()) > closed):
            raise InvalidInput(
                "deltas",
                f"must be in [0, floor(n / w)] = [0, {closed}], "
                f"got {int(delta_array.min())} to {int(delta_array.max())}",
            )
        key_array: KeyArray = (
            np.asarray(batch, dtype=np.int64) if counter._key_type != "str" else np.array(batch, dtype=object)
        )
        order = np.argsort(key_array, kind="stable")
        sorted_keys = key_array[order]
        if size > 1 and bool(np.any(sorted_keys[1:] == sorted_keys[:-1])):
            raise InvalidInput("keys", "must be distinct, got a key twice")
        counter._set_table(sorted_keys, count_array[order], delta_array[order])
        return counter

    def entries(self) -> tuple[KeyArray, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Copies of the table in key order: keys (int64, or object for str), counts, deltas (int64)."""
        keys, counts, deltas = self._sorted_table()
        return keys.copy(), counts.copy(), deltas.copy()

    def frequent(self, threshold: float) -> FrequencyEstimate:
        """Manku & Motwani's query: the entries with ``count >= (threshold - epsilon) * n``.

        Every key whose true frequency is at least ``threshold`` is returned (for ``threshold >
        epsilon``), and no key whose true frequency is below ``threshold - epsilon``.
        """
        share = check("threshold", threshold, PROBABILITY)
        return self._estimate((share - self._epsilon) * self._n, None)

    def estimate(self, distinct_estimate: int | None = None) -> FrequencyEstimate:
        """Every entry of the table (threshold 0), with an optional estimate of |D|."""
        return self._estimate(0.0, distinct_estimate)

    def _estimate(self, least: float, distinct_estimate: int | None) -> FrequencyEstimate:
        keys, counts, _ = self._sorted_table()
        selected = counts >= least
        return FrequencyEstimate(
            keys=tuple(keys[selected].tolist()),
            counts=counts[selected].astype(np.float64),
            total=self._n,
            epsilon=self._epsilon,
            distinct_estimate=distinct_estimate,
            key_type=self._key_type,
        )

    def merge(self, other: LossyCounter) -> LossyCounter:
        """A new counter summarizing both streams (as if concatenated), neither input changed.

        Rule: counts add and deltas add, where a counter that has no entry for a key contributes
        count 0 and delta ``floor(n_i / w)``. That is the most an absent key can have occurred in
        that counter's stream: keys are only deleted at a bucket close ``b`` with ``count + delta <=
        b``, and ``floor(n_i / w)`` is the number of closed buckets. (``b_current - 1`` is one too
        small right at a bucket boundary, where a just-deleted key may have occurred ``b`` times.)
        So ``count <= true <= count + delta`` holds for every merged entry, every delta is at most
        ``floor(n1/w) + floor(n2/w) <= floor(n/w) <= epsilon * n`` with ``n = n1 + n2``, and a key in
        neither table occurred at most ``floor(n/w)`` times: the error bound becomes
        ``epsilon * (n1 + n2)``. Entries with ``count + delta <= floor(n/w)`` carry no more than that
        bound and are dropped, as at a bucket close; this keeps the table small when many counters
        of short streams are merged, and keeps the invariant that lets the merged counter count on
        as a lossy counter of the concatenated stream with the same guarantees.

        Both counters must have the same epsilon and key type (InvalidInput naming ``other`` otherwise).
        """
        check("other", other, Kind(LossyCounter, "a LossyCounter"))
        if other._epsilon != self._epsilon:
            raise InvalidInput(
                "other", f"must have this counter's epsilon {self._epsilon}, got {other._epsilon}"
            )
        if None not in (self._key_type, other._key_type) and self._key_type != other._key_type:
            raise InvalidInput(
                "other", f"must count this counter's key_type {self._key_type!r}, got {other._key_type!r}"
            )
        kind = self._key_type or other._key_type
        w = self._width
        mine, my_counts, my_deltas = self._sorted_table()
        theirs, their_counts, their_deltas = other._sorted_table()
        mine = mine if len(mine) else _empty_keys(kind)
        theirs = theirs if len(theirs) else _empty_keys(kind)
        keys, index_self, index_other = _union_sorted(mine, theirs, *_lookup(mine, theirs))
        counts = np.zeros(len(keys), dtype=np.int64)
        counts[index_self] += my_counts
        counts[index_other] += their_counts
        deltas_self = np.full(len(keys), self._n // w, dtype=np.int64)
        deltas_self[index_self] = my_deltas
        deltas_other = np.full(len(keys), other._n // w, dtype=np.int64)
        deltas_other[index_other] = their_deltas
        deltas = deltas_self + deltas_other

        merged = LossyCounter(self._epsilon, kind)
        merged._n = self._n + other._n
        keep = counts + deltas > merged._n // w
        merged._set_table(keys[keep], counts[keep], deltas[keep])
        return merged


class SlidingWindow:
    """A sliding window of about ``window`` tuples emulated with tumbling lossy counters.

    Gedik §4.1.2 ("Handling changes", Fig. 2) follows the recent stream with ``x`` lossy counters
    over tumbling windows instead of a true sliding-window algorithm; repart realizes it with
    mergeable counters. Each tumbling window holds ``ceil(window / (x - 1))`` tuples (exactly
    ``window / (x - 1)`` when ``x - 1`` divides ``window``); its counter is filled while the window is
    open and kept once it closes. The estimate is the merge of the last ``x - 1`` closed counters, so
    it counts ``(x - 1) * ceil(window / (x - 1))`` tuples (``window`` when ``x - 1`` divides it) and,
    measured back from the newest tuple, reaches between ``window`` and ``(1 + 1/(x - 1)) * window``
    tuples into the past (the open window's tuples are not in it yet): Gedik's range, ``W`` to
    ``1.5 W`` for the default ``x = 3``. Its error bound is ``epsilon`` times the tuples it counts.

    Warm-up: before ``x - 1`` windows have closed the estimate merges those that have; before the
    first one closes it is the open counter's (Gedik's footnote 2: the lower bound does not hold
    during initialization).
    """

    def __init__(
        self, epsilon: float, window: int, counters: int = 3, key_type: KeyType | None = None
    ) -> None:
        self._epsilon = float(check("epsilon", epsilon, EPSILON))
        window = int(check("window", window, POSITIVE_INT))
        self._counters = int(check("counters", counters, Interval(int, 2, None)))
        self._key_type = cast(KeyType | None, check("key_type", key_type, *KEY_TYPE))
        self._width = -(-window // (self._counters - 1))
        self._open = LossyCounter(self._epsilon, self._key_type)
        self._closed: deque[LossyCounter] = deque(maxlen=self._counters - 1)
        self._merged: LossyCounter | None = None

    @property
    def tumbling_width(self) -> int:
        """Tuples per tumbling window, ``ceil(window / (counters - 1))``."""
        return self._width

    @property
    def counters_in_use(self) -> int:
        """Closed tumbling counters merged into the estimate (0 while the first window is open)."""
        return len(self._closed)

    @property
    def tuples_covered(self) -> int:
        """Tuples the estimate counts (its ``total``)."""
        return self._in_use().n

    def update(self, keys: Sequence[Key] | npt.NDArray[Any]) -> None:
        """Count a batch of keys, closing the open tumbling window each time it fills.

        A batch may span several tumbling windows; it is split at their boundaries. The whole batch
        is validated first (see ``LossyCounter.update``).
        """
        batch, kind = _as_key_batch(keys, self._key_type)
        if kind is None:
            return
        self._key_type = kind
        start = 0
        while start < len(batch):
            stop = min(len(batch), start + self._width - self._open.n)
            self._open._feed(batch[start:stop], kind)
            start = stop
            if self._open.n == self._width:
                self._closed.append(self._open)
                self._open = LossyCounter(self._epsilon, kind)
                self._merged = None

    def estimate(self, threshold: float = 0.0) -> FrequencyEstimate:
        """Entries of the merged window with ``count >= (threshold - epsilon) * n`` (see the class doc)."""
        return self._in_use().frequent(threshold)

    def _in_use(self) -> LossyCounter:
        if not self._closed:
            return self._open
        if self._merged is None:
            self._merged = reduce(LossyCounter.merge, self._closed)
        return self._merged
