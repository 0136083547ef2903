"""The partition function: explicit map plus slot table, lookup, canonical JSON.

Gedik's partitioning function is the hash pair ``p = ⟨H_p, H_c⟩`` (§4.1.1): an explicit hash ``H_p``
for the tracked (hot) keys and a consistent hash ``H_c`` for the rest, looked up as in Algorithm 1.
In repart, ``H_p`` is the explicit map ``E: key → channel`` and ``H_c`` is the slot table ``T`` of
``repart.partitioning.consistent`` with optional slot overrides ``O``, so that

    p(key) = E[key] if key in E else T'[slot(key)],  T'[s] = O[s] if s in O else T[s].

A function is an immutable value. Its canonical JSON (sorted keys, no whitespace, UTF-8 text) is the
stored form; its digest is the SHA-256 of those bytes, and two functions with the same digest route
every key identically. The base slot table is derived from ``(N, consistent, slot_bits)``, never stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.consistent import (
    METHOD,
    N_CHANNELS,
    REPLICAS,
    SEED,
    ConsistentSpec,
    check_n_channels,
    slot_table,
)
from repart.partitioning.documents import (
    canonical_json,
    parse_json,
    require_format,
    require_key,
    require_key_type,
    require_list,
    require_object,
    require_one_key_type,
    require_row,
    sha256_hex,
)
from repart.partitioning.domain import (
    DEFAULT_SLOT_BITS,
    INT64_KEY,
    INT64_MAX,
    SLOT_BITS,
    Key,
    KeyType,
    check_slot_bits,
    common_key_type,
    key_type_of,
)
from repart.partitioning.hashing import (
    HASH_SEED,
    hash_int64_array,
    hash_key,
    hash_keys,
    hash_str_keys,
    slot_of_hash,
    slots_of_hashes,
)
from repart.validation import STRING, Constraint, Interval, Kind, Options, check, shown

if TYPE_CHECKING:
    from repart.partitioning.split.function import SplitEntry

FORMAT_VERSION = 1
HASH_ALGORITHM = "xxh64"
_DOCUMENT_FIELDS = ("N", "consistent", "explicit", "format", "hash", "key_type", "slot_overrides")
_HASH_FIELDS = ("algorithm", "seed", "slot_bits")
_CONSISTENT_FIELDS = ("method", "replicas", "seed")
# A key in a JSON document: a str, or an int in the signed 64-bit range.
_KEY = (STRING, INT64_KEY)


def _empty_mapping() -> Mapping[Any, int]:
    return MappingProxyType({})


_NO_SPLIT: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True)
class PartitionFunction:
    """``p = ⟨E, T'⟩`` for ``n_channels`` channels (Gedik §4.1.1, Algorithm 1).

    ``explicit`` maps keys of one type to channels; ``slot_overrides`` maps slots to channels.
    ``key_type`` is inferred from the explicit keys when it is not given, and stays None only while
    the explicit map is empty. Both mappings are stored read-only. Every field is validated: a bad
    value raises ``InvalidInput`` naming the field and its accepted range. It is a ``RoutingFunction``
    of kind ``"preserve"``: its own home, with no split keys.
    """

    n_channels: int
    key_type: KeyType | None = None
    slot_bits: int = DEFAULT_SLOT_BITS
    consistent: ConsistentSpec = field(default_factory=ConsistentSpec)
    explicit: Mapping[Key, int] = field(default_factory=_empty_mapping)
    slot_overrides: Mapping[int, int] = field(default_factory=_empty_mapping)

    def __post_init__(self) -> None:
        n = check_n_channels(self.n_channels)
        bits = check_slot_bits(self.slot_bits)
        check("consistent", self.consistent, Kind(ConsistentSpec, "a ConsistentSpec"))
        explicit, inferred = _checked_explicit(self.explicit, n)
        key_type = require_key_type(
            self.key_type, found=inferred, found_in="the explicit keys", allow_none=True
        )
        overrides = _checked_overrides(self.slot_overrides, n, bits)
        object.__setattr__(self, "n_channels", n)
        object.__setattr__(self, "slot_bits", bits)
        object.__setattr__(self, "key_type", key_type)
        object.__setattr__(self, "explicit", MappingProxyType(explicit))
        object.__setattr__(self, "slot_overrides", MappingProxyType(overrides))

    def __hash__(self) -> int:
        """Hash of the digest, so that equal functions hash equally."""
        return hash(self.digest)

    def __reduce__(self) -> tuple[Callable[[str], PartitionFunction], tuple[str]]:
        """Pickle through the canonical JSON (the read-only mappings cannot be pickled themselves)."""
        return (PartitionFunction.from_json, (self.to_json(),))

    @property
    def home(self) -> PartitionFunction:
        """The function itself: a key-preserving function is its own home (``RoutingFunction``)."""
        return self

    @property
    def split(self) -> Mapping[Key, SplitEntry]:
        """Empty: a key-preserving function splits no key (``RoutingFunction``)."""
        return _NO_SPLIT

    @property
    def kind(self) -> Literal["preserve"]:
        """``"preserve"``: every key on one channel (``RoutingFunction``)."""
        return "preserve"

    @property
    def base_table(self) -> npt.NDArray[np.int32]:
        """The consistent slot table ``T`` (read-only, shared by every function with equal parameters)."""
        return slot_table(self.n_channels, self.consistent, self.slot_bits)

    @cached_property
    def table(self) -> npt.NDArray[np.int32]:
        """The routing table ``T'``: ``T`` with the slot overrides applied (read-only)."""
        if not self.slot_overrides:
            return self.base_table
        table = self.base_table.copy()
        table[list(self.slot_overrides)] = list(self.slot_overrides.values())
        table.flags.writeable = False
        return table

    def lookup(self, key: Key) -> int:
        """``p(key)``: the explicit channel of ``key`` if it has one, else ``T'[slot(key)]``."""
        self._check_key_type(key_type_of(key), "key")
        channel = self.explicit.get(key)
        if channel is not None:
            return channel
        return int(self.table[slot_of_hash(hash_key(key), self.slot_bits)])

    def lookup_many(
        self,
        keys: Sequence[Key] | npt.NDArray[np.generic],
        *,
        slots: npt.NDArray[np.integer[Any]] | None = None,
    ) -> npt.NDArray[np.int64]:
        """``p`` of every key, vectorized: an int64 array of channels, one per key.

        ``keys`` is an integer numpy array or a sequence of keys of one type. ``slots``, when the
        caller has them already (an integer array with one slot per key), skips hashing.
        """
        if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu":
            return self._lookup_ints(_int64_keys(keys), slots)
        if len(keys) == 0:
            return np.empty(0, dtype=np.int64)
        if isinstance(keys[0], str):
            return self._lookup_strs(keys, slots)
        common_key_type(keys)  # every key must be an in-range int: the first one is not a str
        return self._lookup_ints(np.array(keys, dtype=np.int64), slots)

    def to_json(self) -> str:
        """The canonical JSON: sorted keys, no whitespace, lists sorted by slot and key."""
        return self._canonical_json

    @cached_property
    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON's UTF-8 bytes."""
        return sha256_hex(self.to_json())

    @classmethod
    def from_json(cls, text: str) -> PartitionFunction:
        """Parse and validate a serialized function; ``InvalidInput`` naming the offending document field
        (``N``, ``hash.slot_bits``, ``consistent.method``, ``explicit[3]``, …)."""
        document = require_object(parse_json(text, "function"), "function", _DOCUMENT_FIELDS)
        require_format(document["format"], FORMAT_VERSION)
        hash_spec = require_object(document["hash"], "hash", _HASH_FIELDS)
        check("hash.algorithm", hash_spec["algorithm"], Options((HASH_ALGORITHM,)))
        check("hash.seed", hash_spec["seed"], Options((HASH_SEED,)))
        consistent = require_object(document["consistent"], "consistent", _CONSISTENT_FIELDS)
        n = check("N", document["N"], N_CHANNELS)
        bits = check("hash.slot_bits", hash_spec["slot_bits"], SLOT_BITS)
        channel = Interval(int, 0, n - 1)
        return cls(
            n_channels=n,
            key_type=require_key_type(document["key_type"], allow_none=True),
            slot_bits=bits,
            consistent=ConsistentSpec(
                method=check("consistent.method", consistent["method"], METHOD),
                replicas=check("consistent.replicas", consistent["replicas"], REPLICAS),
                seed=check("consistent.seed", consistent["seed"], SEED),
            ),
            explicit=_json_pairs(document["explicit"], "explicit", _KEY, channel),
            slot_overrides=_json_pairs(
                document["slot_overrides"], "slot_overrides", (Interval(int, 0, 2**bits - 1),), channel
            ),
        )

    @cached_property
    def _canonical_json(self) -> str:
        document = {
            "format": FORMAT_VERSION,
            "N": self.n_channels,
            "hash": {"algorithm": HASH_ALGORITHM, "seed": HASH_SEED, "slot_bits": self.slot_bits},
            "consistent": {
                "method": self.consistent.method,
                "replicas": self.consistent.replicas,
                "seed": self.consistent.seed,
            },
            "slot_overrides": sorted(map(list, self.slot_overrides.items())),
            "explicit": sorted(map(list, self.explicit.items())),
            "key_type": self.key_type,
        }
        return canonical_json(document)

    @cached_property
    def _explicit_slot_mask(self) -> npt.NDArray[np.bool_]:
        """True at the slots that hold at least one explicit key: the cheap filter before exact lookups."""
        mask = np.zeros(2**self.slot_bits, dtype=np.bool_)
        mask[slots_of_hashes(hash_keys(list(self.explicit), self.key_type), self.slot_bits)] = True
        return mask

    @cached_property
    def _explicit_int_index(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The explicit int keys sorted ascending, and their channels in the same order."""
        keys = np.fromiter(self.explicit.keys(), dtype=np.int64, count=len(self.explicit))
        channels = np.fromiter(self.explicit.values(), dtype=np.int64, count=len(self.explicit))
        order = np.argsort(keys)
        return keys[order], channels[order]

    def _check_key_type(self, kind: KeyType, field: str) -> None:
        if self.key_type is not None and kind != self.key_type:
            raise InvalidInput(field, f"must be of this function's key_type {self.key_type!r}, got {kind!r}")

    def _checked_slots(self, slots: npt.NDArray[np.integer[Any]], count: int) -> npt.NDArray[np.int64]:
        if not isinstance(slots, np.ndarray) or slots.dtype.kind not in "iu" or slots.shape != (count,):
            raise InvalidInput(
                "slots", f"must be a 1-d integer array with one slot per key ({count}), got {shown(slots)}"
            )
        limit = 2**self.slot_bits
        if count and (slots.min() < 0 or slots.max() >= limit):
            raise InvalidInput(
                "slots",
                f"must be in [0, {limit - 1}] for slot_bits {self.slot_bits}, "
                f"got {slots.min()} to {slots.max()}",
            )
        return slots.astype(np.int64, copy=False)

    def _table_channels(
        self, slots: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp]]:
        """``T'[slots]``, and the positions whose slot holds an explicit key (the only ones E may change)."""
        channels = self.table[slots].astype(np.int64)
        if not self.explicit:
            return channels, np.empty(0, dtype=np.intp)
        return channels, np.flatnonzero(self._explicit_slot_mask[slots])

    def _lookup_ints(
        self, values: npt.NDArray[np.int64], slots: npt.NDArray[np.integer[Any]] | None
    ) -> npt.NDArray[np.int64]:
        """Int keys: exact explicit matches by binary search in the sorted explicit keys."""
        self._check_key_type("int", "keys")
        if slots is None:
            key_slots = slots_of_hashes(hash_int64_array(values), self.slot_bits)
        else:
            key_slots = self._checked_slots(slots, values.size)
        channels, candidates = self._table_channels(key_slots)
        if candidates.size:
            explicit_keys, explicit_channels = self._explicit_int_index
            wanted = values[candidates]
            found = np.minimum(np.searchsorted(explicit_keys, wanted), explicit_keys.size - 1)
            hit = explicit_keys[found] == wanted
            channels[candidates[hit]] = explicit_channels[found[hit]]
        return channels

    def _lookup_strs(
        self, keys: Sequence[Key] | npt.NDArray[np.generic], slots: npt.NDArray[np.integer[Any]] | None
    ) -> npt.NDArray[np.int64]:
        """Str keys: the explicit map itself decides the keys whose slot holds an explicit key.

        The dict lookup compares whole keys, so a hash or slot collision with a key that is not
        explicit cannot misroute it.
        """
        self._check_key_type("str", "keys")
        strs = cast(Sequence[str], keys)  # checked below: by hash_str_keys, or by _check_all_str
        if slots is None:
            key_slots = slots_of_hashes(hash_str_keys(strs), self.slot_bits)
        else:
            _check_all_str(strs)
            key_slots = self._checked_slots(slots, len(strs))
        channels, candidates = self._table_channels(key_slots)
        if candidates.size:
            candidate_keys = map(strs.__getitem__, candidates.tolist())
            channel_or_missing: Callable[[str, int], int] = self.explicit.get
            found = np.fromiter(
                map(channel_or_missing, candidate_keys, repeat(-1)), dtype=np.int64, count=candidates.size
            )
            hit = found >= 0
            channels[candidates[hit]] = found[hit]
        return channels


def _check_all_str(keys: Sequence[object]) -> None:
    """``InvalidInput("keys")`` unless every key is a str (a fast pass over the exact types first)."""
    if set(map(type, keys)) == {str}:
        return
    kind = common_key_type(keys)  # raises for an unsupported key or mixed key types
    if kind != "str":
        raise InvalidInput("keys", f"must be 'str' keys, got {kind!r} keys")


def _int64_keys(keys: npt.NDArray[np.generic]) -> npt.NDArray[np.int64]:
    """An integer key array as int64; ``InvalidInput("keys")`` for unsigned values beyond the signed
    64-bit range."""
    if keys.dtype == np.uint64 and keys.size and keys.max() > INT64_MAX:
        raise InvalidInput("keys", f"must be in the signed 64-bit range, got {keys.max()}")
    return keys.astype(np.int64, copy=False)


def _checked_explicit(explicit: Mapping[Key, int], n: int) -> tuple[dict[Key, int], KeyType | None]:
    """The explicit map with plain str/int keys and int channels in [0, n), and its key type."""
    checked: dict[Key, int] = {}
    channel_range = Interval(int, 0, n - 1)
    for key, channel in explicit.items():
        plain = require_key(key, "explicit")
        checked[plain] = check(f"explicit[{plain!r}]", channel, channel_range)
    return checked, require_one_key_type(checked, "explicit")


def _checked_overrides(overrides: Mapping[int, int], n: int, slot_bits: int) -> dict[int, int]:
    """Slot overrides with slots in [0, 2^S) and channels in [0, n)."""
    slot_range, channel_range = Interval(int, 0, 2**slot_bits - 1), Interval(int, 0, n - 1)
    checked: dict[int, int] = {}
    for slot, channel in overrides.items():
        if not slot_range.accepts(slot):
            raise InvalidInput(
                "slot_overrides", f"must have slots that are {slot_range}, got slot {shown(slot)}"
            )
        checked[int(slot)] = check(f"slot_overrides[{int(slot)}]", channel, channel_range)
    return checked


def _json_pairs(value: object, name: str, first: tuple[Constraint, ...], channel: Interval) -> dict[Any, Any]:
    """A list of ``[first, channel]`` pairs as a dict; ``InvalidInput`` naming the pair (``name[i]``) for
    a malformed pair, a first element outside ``first``, a channel outside ``channel`` or a repeated
    first element."""
    what = "key" if first is _KEY else "slot"
    accepted = " or ".join(map(str, first))
    pairs: dict[Any, Any] = {}
    for index, pair in enumerate(require_list(value, name)):
        field = f"{name}[{index}]"
        head, number = require_row(pair, field, (what, "channel"))
        if not any(c.accepts(head) for c in first) or not channel.accepts(number):
            raise InvalidInput(
                field, f"must be a [{what}, channel] pair of {accepted} and {channel}, got {shown(pair)}"
            )
        if head in pairs:
            raise InvalidInput(field, f"must not repeat the {what} {head!r} of an earlier pair")
        pairs[head] = number
    return pairs
