"""A growable open-addressing table from (source, key hash) to an entry number, usable in kernels.

Groupings that remember something per key — PoTC's and the greedy baselines' routing tables, DKG's
key items, FISH's per-key worker counts — keep it in parallel column arrays indexed by entry number.
Kernels look keys up with :func:`find_or_slot` and append with :func:`append`; when the table is full
a kernel returns early and :meth:`KeyTable.grow` doubles every column before it resumes, so kernels
never allocate.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from repart.partitioning.groupings.hashes import GOLDEN, mix64

IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]


@numba.njit(cache=True, inline="always")
def _home(key: np.uint64, owner: int, mask: int) -> int:
    return int(np.int64(mix64(key ^ (np.uint64(owner) * GOLDEN)) & np.uint64(mask)))


@numba.njit(cache=True)
def find_or_slot(index: IntArray, keys: UIntArray, owners: IntArray, key: np.uint64, owner: int) -> int:
    """The entry of (owner, key) as a value ≥ 0, or −(p + 1) for the empty index position p it would take."""
    mask = index.size - 1
    p = _home(key, owner, mask)
    while True:
        e = index[p]
        if e < 0:
            return int(-(p + 1))
        if keys[e] == key and owners[e] == owner:
            return int(e)
        p = (p + 1) & mask


@numba.njit(cache=True)
def append(
    index: IntArray,
    keys: UIntArray,
    owners: IntArray,
    size: IntArray,
    position: int,
    key: np.uint64,
    owner: int,
) -> int:
    """Store (owner, key) as the next entry at the empty index ``position``; returns the entry."""
    e = size[0]
    keys[e] = key
    owners[e] = owner
    index[position] = e
    size[0] = e + 1
    return int(e)


@numba.njit(cache=True)
def _reindex(index: IntArray, keys: UIntArray, owners: IntArray, size: int) -> None:
    mask = index.size - 1
    for e in range(size):
        p = _home(keys[e], owners[e], mask)
        while index[p] >= 0:
            p = (p + 1) & mask
        index[p] = e


def _index_size(capacity: int) -> int:
    """A power of two (probing wraps with a mask) of at least twice the entries."""
    return 1 << (2 * capacity - 1).bit_length()


class KeyTable:
    """Entries (owner, key) plus named columns of per-entry data, all grown together.

    The index has a power of two positions, at least twice the room for entries, so a probe sequence
    always ends at an empty position.
    """

    def __init__(self, columns: dict[str, tuple[tuple[int, ...], npt.DTypeLike, int]], capacity: int = 1024):
        self._spec = columns
        self.capacity = capacity
        self.size = np.zeros(1, dtype=np.int64)
        self.keys = np.zeros(capacity, dtype=np.uint64)
        self.owners = np.zeros(capacity, dtype=np.int64)
        self.index = np.full(_index_size(capacity), -1, dtype=np.int64)
        self.columns = {
            name: np.full((capacity, *shape), fill, dtype=dtype)
            for name, (shape, dtype, fill) in columns.items()
        }

    @property
    def count(self) -> int:
        return int(self.size[0])

    @property
    def full(self) -> bool:
        return self.count == self.capacity

    def grow(self) -> None:
        """Double the room for entries, keeping every entry's number and data."""
        old, used = self.capacity, self.count
        self.capacity = 2 * old
        self.keys = np.concatenate([self.keys, np.zeros(old, dtype=np.uint64)])
        self.owners = np.concatenate([self.owners, np.zeros(old, dtype=np.int64)])
        for name, (shape, dtype, fill) in self._spec.items():
            extra = np.full((old, *shape), fill, dtype=dtype)
            self.columns[name] = np.concatenate([self.columns[name], extra])
        self.index = np.full(_index_size(self.capacity), -1, dtype=np.int64)
        _reindex(self.index, self.keys, self.owners, used)

    def entries(self, owner: int | None = None) -> IntArray:
        """Entry numbers in insertion order, optionally of one owner only."""
        numbers = np.arange(self.count, dtype=np.int64)
        if owner is None:
            return numbers
        chosen: IntArray = numbers[self.owners[: self.count] == owner]
        return chosen
