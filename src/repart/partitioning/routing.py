"""What every routing function a region's version stores offers, whichever its kind.

A version stores one of two kinds of function: a key-preserving ``PartitionFunction`` (Gedik's
⟨H_p, H_c⟩, every key on one channel) or a ``SplitFunction`` (such a function as every key's *home*
plus a split table spreading a few hot keys over several channels). Code that reads a stored function
asks the same questions of both, through ``RoutingFunction``:

- ``home``: the key-preserving part, the function itself for a ``PartitionFunction``;
- ``split``: the split table, key → ``SplitEntry`` (candidate channels, weights), empty for a
  ``PartitionFunction``;
- ``kind``: ``"preserve"`` or ``"split"``, what the region's mode must be (a split function may have
  an empty split table and is still of kind ``"split"``);
- ``n_channels``, ``slot_bits``, ``key_type``, ``digest`` and ``to_json()``, the same on both.

Routing a row itself differs (a split key's row needs its row hash), so ``lookup`` is not a member:
code that routes rows uses the concrete class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from repart.partitioning.domain import Key, KeyType
    from repart.partitioning.function import PartitionFunction
    from repart.partitioning.split.function import SplitEntry


@runtime_checkable
class RoutingFunction(Protocol):
    """A stored routing function of either kind (see the module docstring)."""

    @property
    def home(self) -> PartitionFunction:
        """The key-preserving function that routes every key not in ``split``."""
        ...

    @property
    def split(self) -> Mapping[Key, SplitEntry]:
        """The split keys' candidate channels and weights, in key order; empty when no key is split."""
        ...

    @property
    def kind(self) -> Literal["preserve", "split"]:
        """``"preserve"`` for a ``PartitionFunction``, ``"split"`` for a ``SplitFunction``."""
        ...

    @property
    def n_channels(self) -> int:
        """N, the number of channels."""
        ...

    @property
    def slot_bits(self) -> int:
        """The number of bits of a key's slot in the consistent hash's table."""
        ...

    @property
    def key_type(self) -> KeyType | None:
        """The type of the keys the function names (None while it names none)."""
        ...

    @property
    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON's UTF-8 bytes."""
        ...

    def to_json(self) -> str:
        """The canonical JSON, the stored form."""
        ...
