"""The split function: a Gedik function for every key's home plus a split table for the head.

A key-preserving function (``PartitionFunction``) cannot balance better than b_lb once the hottest
key carries more than 1/N of the load. A split function keeps such a function as the *home* of every
key and adds a *split table* for a few hot keys: key → candidate channels (its home first) and one
weight per candidate. A split key's tuples are spread over its candidates in proportion to the
weights; its state is then partial on each candidate and merged on read, which is why split mode is
for decomposable state (sums, counts, min/max, sketches).

Which candidate a row of a split key goes to is decided by a 64-bit hash of the row (the job side
uses Spark's ``xxhash64`` of the row's columns, so a retried task routes identically) through the
key's Walker alias table (``repart.partitioning.split.alias``): the row hash's top ⌈log₂ d⌉ bits name
a bucket, its low 32 bits choose between the bucket's candidate and its alias, and each candidate gets
its weight's share of all row hashes, in integer units of 2^−32 per bucket. The tables are computed
here once, so the JVM compares integers and Python is its exact oracle.

The canonical JSON is ``{"format": 1, "kind": "split", "home": <the home function's document>,
"split": [[key, [candidates], [weights]], …]}`` (rows sorted by key), its digest the SHA-256 of that
text. ``load_function`` reads either kind of stored function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Final, Literal, NamedTuple

from repart.errors import InvalidInput
from repart.partitioning.documents import (
    JSON_OBJECT,
    canonical_json,
    parse_json,
    require_format,
    require_key,
    require_list,
    require_object,
    require_row,
    sha256_hex,
)
from repart.partitioning.domain import Key, KeyType, key_type_of
from repart.partitioning.function import PartitionFunction
from repart.partitioning.routing import RoutingFunction
from repart.partitioning.split.alias import MAX_ALIAS_BUCKETS, AliasTable, alias_buckets
from repart.validation import Interval, Kind, Options, check, shown

FORMAT_VERSION = 1
KIND: Final = "split"
_DOCUMENT_FIELDS = ("format", "home", "kind", "split")
#: How far the weights of a split key may sum from 1 (they are floats written as JSON numbers).
WEIGHT_SUM_TOLERANCE = 1e-9
_ROW_HASH = Interval(int, -(2**63), 2**64 - 1)
_KIND_OPTION = Options((KIND,))


class SplitEntry(NamedTuple):
    """A split key's candidate channels (its home first, all distinct) and their weights (≥ 0, sum 1)."""

    candidates: tuple[int, ...]
    weights: tuple[float, ...]


def _empty_split() -> Mapping[Key, SplitEntry]:
    return MappingProxyType({})


@dataclass(frozen=True)
class SplitFunction:
    """``home`` routes every key; a key of ``split`` is spread over its candidates by row hash.

    Every field is validated on construction: a bad value raises ``InvalidInput`` naming the field
    (``split[3].candidates``, ``split[3].weights``, …, by the position given) and what is accepted.
    ``split`` is then kept in key order, the order of the canonical JSON's rows. The split keys' alias
    tables hold at most ``MAX_ALIAS_BUCKETS`` buckets in all (``InvalidInput`` ``split``), what one
    routing constant of the job can address (``repart.partitioning.split.alias``). It is a
    ``RoutingFunction`` of kind ``"split"``.
    """

    home: PartitionFunction
    split: Mapping[Key, SplitEntry] = field(default_factory=_empty_split)

    def __post_init__(self) -> None:
        check("home", self.home, Kind(PartitionFunction, "a PartitionFunction"))
        checked: dict[Key, SplitEntry] = {}
        key_type = self.home.key_type
        for index, (key, entry) in enumerate(self.split.items()):  # named by their given position
            name = f"split[{index}]"
            plain = require_key(key, f"{name}.key", key_type)
            key_type = key_type_of(plain)
            checked[plain] = SplitEntry(*_checked_entry(entry, name, self.home, plain))
        buckets = sum(alias_buckets(len(entry.candidates)) for entry in checked.values())
        if buckets > MAX_ALIAS_BUCKETS:
            raise InvalidInput(
                "split",
                f"must have at most {MAX_ALIAS_BUCKETS:,} alias buckets in all (2^⌈log₂ d⌉ per key of d "
                f"candidates), got {buckets:,}: split fewer keys or over fewer candidates",
            )
        in_key_order = dict(sorted(checked.items(), key=lambda item: item[0]))  # one key type: comparable
        object.__setattr__(self, "split", MappingProxyType(in_key_order))

    def __hash__(self) -> int:
        """Hash of the digest, so that equal functions hash equally."""
        return hash(self.digest)

    def __reduce__(self) -> tuple[Callable[[str], SplitFunction], tuple[str]]:
        """Pickle through the canonical JSON, as ``PartitionFunction`` does."""
        return (SplitFunction.from_json, (self.to_json(),))

    @property
    def kind(self) -> Literal["split"]:
        """``"split"``, with or without split keys (``RoutingFunction``)."""
        return KIND

    @property
    def n_channels(self) -> int:
        return self.home.n_channels

    @property
    def slot_bits(self) -> int:
        return self.home.slot_bits

    @cached_property
    def key_type(self) -> KeyType | None:
        """The key type of the home function's explicit keys, else of the split keys (None while both
        are empty)."""
        return self.home.key_type or next((key_type_of(key) for key in self.split), None)

    def candidates(self, key: Key) -> tuple[int, ...]:
        """The channels ``key``'s state may be on: its split candidates, or its home alone."""
        entry = self.split.get(key)
        return entry.candidates if entry is not None else (self.home.lookup(key),)

    def alias_table(self, key: Key) -> AliasTable:
        """A split key's Walker alias table (``repart.partitioning.split.alias``)."""
        return self._aliases[key]

    def lookup(self, key: Key, row_hash: int) -> int:
        """The channel of a row of ``key`` whose row hash is ``row_hash`` (a signed or unsigned 64-bit
        integer): the home of an unsplit key, else the candidate that the key's alias table picks for
        ``row_hash`` (its top bits the bucket, its low 32 bits against the bucket's cut)."""
        entry = self.split.get(key)
        if entry is None:
            return self.home.lookup(key)
        unsigned = check("row_hash", row_hash, _ROW_HASH) % 2**64
        return entry.candidates[self._aliases[key].pick(unsigned)]

    def to_json(self) -> str:
        return self._canonical_json

    @cached_property
    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON's UTF-8 bytes."""
        return sha256_hex(self.to_json())

    @classmethod
    def from_json(cls, text: str) -> SplitFunction:
        """Parse and validate a serialized split function; ``InvalidInput`` naming the field."""
        return cls.from_document(parse_json(text, "function"))

    @classmethod
    def from_document(cls, value: object) -> SplitFunction:
        """A split function from its parsed JSON document."""
        document = require_object(value, "function", _DOCUMENT_FIELDS)
        require_format(document["format"], FORMAT_VERSION)
        check("kind", document["kind"], _KIND_OPTION)
        check("home", document["home"], JSON_OBJECT)
        try:
            home = PartitionFunction.from_json(canonical_json(document["home"]))
        except InvalidInput as problem:
            raise InvalidInput(f"home.{problem.field}", problem.requirement) from None
        split: dict[Key, SplitEntry] = {}
        for index, row in enumerate(require_list(document["split"], "split")):
            name = f"split[{index}]"
            key, candidates, weights = require_row(row, name, ("key", "candidates", "weights"))
            plain = require_key(key, f"{name}.key", home.key_type)
            if plain in split:
                raise InvalidInput(f"{name}.key", f"must not repeat the key {plain!r} of an earlier row")
            split[plain] = SplitEntry(
                tuple(require_list(candidates, f"{name}.candidates")),
                tuple(require_list(weights, f"{name}.weights")),
            )
        return cls(home, split)

    @cached_property
    def _canonical_json(self) -> str:
        document = {
            "format": FORMAT_VERSION,
            "kind": KIND,
            "home": parse_json(self.home.to_json(), "home"),
            "split": [
                [key, list(entry.candidates), list(entry.weights)] for key, entry in self.split.items()
            ],
        }
        return canonical_json(document)

    @cached_property
    def _aliases(self) -> dict[Key, AliasTable]:
        return {key: AliasTable.from_weights(entry.weights) for key, entry in self.split.items()}


def _checked_entry(
    entry: object, name: str, home: PartitionFunction, key: Key
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """A split key's candidates and weights, checked: at least two distinct channels in [0, N), the
    first the key's home, and as many weights, each a finite number ≥ 0, summing to 1."""
    candidates, weights = require_row(entry, name, ("candidates", "weights"))
    channel = Interval(int, 0, home.n_channels - 1)
    if not isinstance(candidates, list | tuple) or len(candidates) < 2:
        raise InvalidInput(
            f"{name}.candidates", f"must be a list of at least 2 channels, got {shown(candidates)}"
        )
    checked = tuple(check(f"{name}.candidates[{i}]", c, channel) for i, c in enumerate(candidates))
    if len(set(checked)) != len(checked):
        raise InvalidInput(f"{name}.candidates", f"must be distinct channels, got {list(checked)}")
    home_channel = home.lookup(key)
    if checked[0] != home_channel:
        raise InvalidInput(
            f"{name}.candidates",
            f"must start with the key's home channel {home_channel}, got {list(checked)}",
        )
    if not isinstance(weights, list | tuple) or len(weights) != len(checked):
        raise InvalidInput(
            f"{name}.weights",
            f"must be a list of {len(checked)} weights (one per candidate), got {shown(weights)}",
        )
    share = Interval(float, 0, 1)
    checked_weights = tuple(check(f"{name}.weights[{i}]", w, share) for i, w in enumerate(weights))
    total = math.fsum(checked_weights)
    if abs(total - 1.0) > WEIGHT_SUM_TOLERANCE:
        raise InvalidInput(
            f"{name}.weights", f"must sum to 1 (within {WEIGHT_SUM_TOLERANCE:g}), got {total!r}"
        )
    return checked, checked_weights


def load_function(text: str) -> RoutingFunction:
    """A stored function of either kind: a split function when its document says ``"kind": "split"``,
    else a ``PartitionFunction``."""
    document = parse_json(text, "function")
    if isinstance(document, Mapping) and document.get("kind") == "state-partitions":
        raise InvalidInput(
            "function",
            "must be a routing function; this is a spark-state region's count of state partitions "
            "(Spark places that state by key: no repart job routes by it)",
        )
    if isinstance(document, Mapping) and "kind" in document:
        return SplitFunction.from_document(document)
    return PartitionFunction.from_json(text)
