"""A version of a ``spark-state`` region: the count n of a streaming query's state partitions.

A Structured Streaming query keeps its aggregation, deduplication or join state in n partitions and
places key k in partition ``pmod(murmur3(k), n)`` (the hash partitioning of the shuffle before its
stateful operator; ``repart.partitioning.spark_hash``). repart cannot change that function, only n,
so a version of such a region is n alone. Its canonical JSON is
``{"format": 1, "kind": "state-partitions", "key_type": "str" | "int", "n_partitions": n}`` and its
digest the SHA-256 of that text, as for the partition functions of repart's own regions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Final, Literal

import numpy as np
import numpy.typing as npt

from repart.partitioning.consistent import N_CHANNELS
from repart.partitioning.documents import (
    canonical_json,
    parse_json,
    require_format,
    require_key_type,
    require_object,
    sha256_hex,
)
from repart.partitioning.domain import KeyType
from repart.partitioning.routing import RoutingFunction
from repart.partitioning.spark_hash import spark_hash, spark_partitions
from repart.partitioning.split.function import load_function
from repart.validation import Options, check

FORMAT_VERSION = 1
KIND: Final = "state-partitions"
_FIELDS = ("format", "kind", "key_type", "n_partitions")


@dataclass(frozen=True)
class StatePartitions:
    """n state partitions of a streaming query whose state is keyed by ``key_type`` keys (module
    docstring). InvalidInput naming the field for n outside [1, 65536] or an unknown key type."""

    n_partitions: int
    key_type: KeyType

    kind: ClassVar[Literal["state-partitions"]] = KIND

    def __post_init__(self) -> None:
        check("n_partitions", self.n_partitions, N_CHANNELS)
        require_key_type(self.key_type)

    @property
    def n_channels(self) -> int:
        """n, under the name every stored version's count of channels has."""
        return self.n_partitions

    def hashes(self, keys: list[Any]) -> npt.NDArray[np.int32]:
        """Spark's ``hash`` of each key, as the shuffle before a stateful operator computes it."""
        return spark_hash(keys, self.key_type)

    def partitions(self, keys: list[Any]) -> npt.NDArray[np.int64]:
        """The state partition Spark gives each key: ``pmod(murmur3(key), n)``."""
        return spark_partitions(self.hashes(keys), self.n_partitions)

    def to_document(self) -> dict[str, Any]:
        """The JSON document (module docstring)."""
        return {
            "format": FORMAT_VERSION,
            "kind": KIND,
            "key_type": self.key_type,
            "n_partitions": self.n_partitions,
        }

    def to_json(self) -> str:
        """The canonical JSON, the stored form."""
        return self._canonical_json

    @cached_property
    def _canonical_json(self) -> str:
        return canonical_json(self.to_document())

    @cached_property
    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON's UTF-8 bytes."""
        return sha256_hex(self.to_json())

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> StatePartitions:
        """Parse and validate a document; InvalidInput naming the field."""
        fields = require_object(document, "function", _FIELDS)
        require_format(fields["format"], FORMAT_VERSION)
        check("kind", fields["kind"], Options((KIND,)))
        return cls(fields["n_partitions"], require_key_type(fields["key_type"]))  # type: ignore[arg-type]


def load_version_function(text: str) -> RoutingFunction | StatePartitions:
    """The function a version stores, of any kind: a ``StatePartitions`` when its document says
    ``"kind": "state-partitions"``, else a routing function (``load_function``)."""
    document = parse_json(text, "function")
    if isinstance(document, Mapping) and document.get("kind") == KIND:
        return StatePartitions.from_document(document)
    return load_function(text)
