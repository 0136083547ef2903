"""A migration plan between two partition functions: moves, apply semantics, canonical JSON.

When the active function of a region changes from ``a`` to ``b`` (same key type and slot bits, channel
counts ``N_a`` and ``N_b``), every key ``d`` with ``a(d) ≠ b(d)`` must take its state to ``b(d)``. The
plan lists them in two forms (with split functions, ``a(d)`` is the home of ``d``):

- **explicit moves** ``(key, source, target, weight)``: the keys of ``E_a ∪ E_b`` (the explicit maps)
  whose channel differs, with ``weight`` the key's predicted state β_s(f(key)) (Gedik Eq. 1);
- **slot moves** ``(first_slot, last_slot, source, target)``: maximal runs of consecutive slots with
  ``T'_a[s] = source ≠ target = T'_b[s]``; they move the *untracked* keys of those slots, the keys in
  neither explicit map, which no list could name. A table of 2^20 slots may change in 10^5 runs, so
  they are kept as one read-only int64 array with a row per run (columns ``SLOT_MOVE_COLUMNS``).

The keys of ``E_a ∪ E_b`` that keep their channel are the plan's **pinned keys**: they stay even when
their slot moves. The keys that ``a`` or ``b`` splits are the plan's **split keys**
(``repart.migration.consolidation``): after the plan their state is on their candidates in ``b``;
a partial anywhere else is merged into their home in ``b`` (a *consolidation*). With them the plan
alone decides where every key goes (``MigrationPlan.destination``), which is ``b`` for every key that
``a`` placed.

``cost`` is the predicted migration cost M(a, b) of Gedik Eq. 9 in frequency space (the state β_s(f)
of the keys that move and of the consolidated partials), ``move_cost`` its part without the
consolidations, ``total_state`` the predicted Σ_d β_s(f(d)) of the whole window, and ``m`` the
relative cost M / L̄_s with L̄_s = total_state / N_b (Eq. 10, 12). They are None when the plan was made
without a frequency estimate: unknown, not zero.

The canonical JSON (sorted keys, no whitespace, UTF-8 text, moves sorted by key and by slot) is the
stored form; ``digest`` is the SHA-256 of its bytes, so storage can store and compare plans. The
fields ``split_keys`` and ``move_cost`` are written only for a plan with split keys, so a plan between
two partition functions without split tables has the document (and digest) it had before split mode.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from itertools import chain
from operator import attrgetter
from types import MappingProxyType
from typing import Any, NamedTuple, cast

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.migration.consolidation import (
    Consolidation,
    SplitKey,
    checked_split_keys,
    consolidations_of,
    predicted_cost,
)
from repart.partitioning.consistent import N_CHANNELS
from repart.partitioning.documents import (
    canonical_json,
    parse_json,
    require_format,
    require_key,
    require_key_type,
    require_object,
    require_one_key_type,
    require_row,
    sha256_hex,
)
from repart.partitioning.domain import Key, KeyType, check_slot_bits, key_type_of
from repart.validation import NON_NEGATIVE, Interval, check, shown

IntArray = npt.NDArray[np.int64]

FORMAT_VERSION = 1
SLOT_MOVE_COLUMNS = ("first_slot", "last_slot", "source", "target")
#: Fields written only when the plan has split keys (a plan between two PartitionFunctions omits them).
SPLIT_FIELDS = ("split_keys", "move_cost")
_DIGEST = re.compile(r"[0-9a-f]{64}")


class ExplicitMove(NamedTuple):
    """An explicitly mapped key that changes channel: ``a(key) = source``, ``b(key) = target``.

    ``weight`` is its predicted state β_s(f(key)) in frequency space (0.0 without an estimate).
    """

    key: Key
    source: int
    target: int
    weight: float


@dataclass(frozen=True, eq=False)
class MigrationPlan:
    """The plan that takes the state of a region from function ``a`` (source) to ``b`` (target).

    Built by ``repart.migration.plan_migration``; constructing one directly validates every field, and
    a bad value raises ``InvalidInput`` naming the field and its accepted values. ``slot_moves`` is given as
    rows of four integers (an array or a sequence) and stored as a read-only ``(runs, 4)`` int64
    array. Explicit moves are kept sorted by key, pinned keys sorted, slot moves sorted by first slot;
    slot ranges must not overlap and must be maximal (two adjacent runs differ in source or target),
    so equal plans have one form, one canonical JSON and one digest.

    ``split_keys`` (sorted by key) name the keys that ``a`` or ``b`` splits; a key is in at most one of
    ``explicit_moves``, ``pinned_keys`` and ``split_keys``. ``move_cost`` is the cost of the explicit
    and slot moves; with an estimate ``cost`` must be ``move_cost`` plus the weights of the
    consolidations (``repart.migration.consolidation.predicted_cost``). Without split keys
    ``move_cost`` may be left None and is then ``cost``.
    """

    key_type: KeyType | None
    slot_bits: int
    source_n_channels: int
    target_n_channels: int
    source_digest: str
    target_digest: str
    explicit_moves: tuple[ExplicitMove, ...] = ()
    pinned_keys: tuple[Key, ...] = ()
    slot_moves: IntArray = field(default_factory=lambda: np.empty((0, 4), dtype=np.int64))
    cost: float | None = None
    total_state: float | None = None
    split_keys: tuple[SplitKey, ...] = ()
    move_cost: float | None = None

    def __post_init__(self) -> None:
        bits = check_slot_bits(self.slot_bits)
        n_source = check("source_n_channels", self.source_n_channels, N_CHANNELS)
        n_target = check("target_n_channels", self.target_n_channels, N_CHANNELS)
        moves = _checked_explicit_moves(self.explicit_moves, n_source, n_target)
        pinned = _checked_keys(self.pinned_keys, "pinned_keys")
        moved_and_pinned = {move.key for move in moves}.intersection(pinned)
        if moved_and_pinned:
            raise InvalidInput(
                "pinned_keys", f"must not hold moved keys, got {shown(sorted(moved_and_pinned))} in both"
            )
        split = checked_split_keys(self.split_keys, n_source, n_target)
        split_keys = [row.key for row in split]
        named_twice = {move.key for move in moves}.union(pinned).intersection(split_keys)
        if named_twice:
            raise InvalidInput(
                "split_keys",
                f"must not hold keys of explicit_moves or pinned_keys, got {shown(sorted(named_twice))}",
            )
        require_one_key_type(chain(map(attrgetter("key"), moves), pinned), "pinned_keys")
        key_type = require_key_type(
            self.key_type,
            found=require_one_key_type(
                chain(map(attrgetter("key"), moves), pinned, split_keys), "split_keys"
            ),
            found_in="the plan's keys",
            allow_none=True,
        )
        cost, total = _checked_prediction(self.cost, self.total_state)
        move_cost = _checked_move_cost(self.move_cost, cost, split)
        object.__setattr__(self, "key_type", key_type)
        object.__setattr__(self, "slot_bits", bits)
        object.__setattr__(self, "source_n_channels", n_source)
        object.__setattr__(self, "target_n_channels", n_target)
        object.__setattr__(self, "source_digest", _checked_digest(self.source_digest, "source_digest"))
        object.__setattr__(self, "target_digest", _checked_digest(self.target_digest, "target_digest"))
        object.__setattr__(self, "explicit_moves", moves)
        object.__setattr__(self, "pinned_keys", pinned)
        object.__setattr__(self, "slot_moves", _checked_slot_moves(self.slot_moves, bits, n_source, n_target))
        object.__setattr__(self, "cost", cost)
        object.__setattr__(self, "total_state", total)
        object.__setattr__(self, "split_keys", split)
        object.__setattr__(self, "move_cost", move_cost)

    def __eq__(self, other: object) -> bool:
        """Field by field, the slot move arrays element by element."""
        if not isinstance(other, MigrationPlan):
            return NotImplemented
        return self._scalar_fields == other._scalar_fields and np.array_equal(
            self.slot_moves, other.slot_moves
        )

    def __hash__(self) -> int:
        """Hash of the digest, so that equal plans hash equally."""
        return hash(self.digest)

    def __reduce__(self) -> tuple[Callable[[str], MigrationPlan], tuple[str]]:
        """Pickle through the canonical JSON, so that an unpickled plan is validated and read-only."""
        return (MigrationPlan.from_json, (self.to_json(),))

    @property
    def is_empty(self) -> bool:
        """True when no key changes channel and no partial is consolidated."""
        return not self.explicit_moves and not len(self.slot_moves) and not self.consolidations

    @cached_property
    def consolidations(self) -> tuple[Consolidation, ...]:
        """The partials of split keys merged into their home in ``b``, by key then source channel
        (``repart.migration.consolidation``)."""
        return consolidations_of(self.split_keys)

    @cached_property
    def source_candidates(self) -> Mapping[Key, tuple[int, ...]]:
        """Split key → the channels its state may be on before the plan (its candidates in ``a``)."""
        return MappingProxyType({row.key: row.source for row in self.split_keys})

    @cached_property
    def target_candidates(self) -> Mapping[Key, tuple[int, ...]]:
        """Split key → the channels its state is on after the plan (its candidates in ``b``, home
        first)."""
        return MappingProxyType({row.key: row.target for row in self.split_keys})

    @property
    def m(self) -> float | None:
        """Relative migration cost m = M / L̄_s with L̄_s = total_state / N_b (Gedik Eq. 10, 12).

        None without an estimate; 0.0 when the window predicts no state at all.
        """
        if self.cost is None or self.total_state is None:
            return None
        if self.total_state == 0:
            return 0.0
        return self.cost * self.target_n_channels / self.total_state

    @cached_property
    def channels_losing_keys(self) -> tuple[int, ...]:
        """The source channels of all moves and consolidations, sorted: the only channels whose state
        must be read."""
        sources = [move.source for move in self.explicit_moves]
        return _channels(sources + [row.source for row in self.consolidations], self.slot_moves[:, 2])

    @cached_property
    def channels_gaining_keys(self) -> tuple[int, ...]:
        """The target channels of all moves and consolidations, sorted."""
        targets = [move.target for move in self.explicit_moves]
        return _channels(targets + [row.target for row in self.consolidations], self.slot_moves[:, 3])

    def destination(self, key: Key, slot: int, current_channel: int) -> int:
        """The channel that applying the plan gives ``key`` (of slot ``slot``) held on ``current_channel``.

        1. a key of the explicit moves goes to its target;
        2. a split key stays if ``current_channel`` is among its candidates in ``b``, else goes to
           its home in ``b`` (a consolidation);
        3. a pinned key (explicit in ``a`` or ``b`` but not moved) stays;
        4. any other key goes to the target of the slot move that holds its slot, if that move's
           source is ``current_channel``;
        5. else it stays.

        For a key placed by ``a`` (``current_channel`` among its candidates in ``a``) this is a
        channel among its candidates in ``b``: a key of ``E_a ∪ E_b`` is moved to ``b(key)`` (1) or has
        ``a(key) = b(key)`` (3); a split key ends on its candidates in ``b`` (2); any other key has
        ``a(key) = T'_a[slot]`` and ``b(key) = T'_b[slot]``, and a slot move from ``T'_a[slot]`` to
        ``T'_b[slot]`` holds its slot exactly when the two differ (4, 5).
        """
        kind = key_type_of(key)
        if self.key_type is not None and kind != self.key_type:
            raise InvalidInput("key", f"must be of the plan's key_type {self.key_type!r}, got {shown(key)}")
        check("slot", slot, Interval(int, 0, 2**self.slot_bits - 1))
        check("current_channel", current_channel, Interval(int, 0, self.source_n_channels - 1))
        target = self._explicit_targets.get(key)
        if target is not None:
            return target
        candidates = self.target_candidates.get(key)
        if candidates is not None:
            return current_channel if current_channel in candidates else candidates[0]
        if key in self._pinned:
            return current_channel
        index = bisect_right(self._slot_move_rows[0], slot) - 1
        if index >= 0:
            _, last_slots, sources, targets = self._slot_move_rows
            if slot <= last_slots[index] and sources[index] == current_channel:
                return targets[index]
        return current_channel

    def reverse(self) -> MigrationPlan:
        """The plan from ``b`` back to ``a``: every move swapped, the same weights and predicted state.

        A split key's sides are swapped, so its consolidations are those of its partials in ``b``
        outside its candidates in ``a``, and ``cost`` is ``move_cost`` plus theirs. ``m`` of the
        reverse plan divides by L̄_s of ``a`` (N_a channels). ``p.reverse().reverse() == p``.
        """
        split_keys = tuple(
            SplitKey(key, target, target_shares, source, source_shares, weight)
            for key, source, source_shares, target, target_shares, weight in self.split_keys
        )
        cost = (
            None if self.move_cost is None else predicted_cost(self.move_cost, consolidations_of(split_keys))
        )
        return MigrationPlan(
            key_type=self.key_type,
            slot_bits=self.slot_bits,
            source_n_channels=self.target_n_channels,
            target_n_channels=self.source_n_channels,
            source_digest=self.target_digest,
            target_digest=self.source_digest,
            explicit_moves=tuple(ExplicitMove(key, t, s, w) for key, s, t, w in self.explicit_moves),
            pinned_keys=self.pinned_keys,
            slot_moves=self.slot_moves[:, [0, 1, 3, 2]],
            cost=cost,
            total_state=self.total_state,
            split_keys=split_keys,
            move_cost=self.move_cost,
        )

    def to_json(self) -> str:
        """Canonical JSON: one field per dataclass field plus ``format``; moves as lists of rows; the
        ``SPLIT_FIELDS`` only when the plan has split keys."""
        return self._canonical_json

    @cached_property
    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON's UTF-8 bytes."""
        return sha256_hex(self.to_json())

    @classmethod
    def from_json(cls, text: str) -> MigrationPlan:
        """Parse and validate a serialized plan; ``InvalidInput`` naming the offending field."""
        required = ("format", *(f.name for f in fields(cls) if f.name not in SPLIT_FIELDS))
        document = require_object(parse_json(text, "plan"), "plan", required, SPLIT_FIELDS)
        require_format(document.pop("format"), FORMAT_VERSION)
        return cls(**document)

    @cached_property
    def _canonical_json(self) -> str:
        document: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        document["slot_moves"] = self.slot_moves.tolist()
        document["format"] = FORMAT_VERSION
        if not self.split_keys:
            for name in SPLIT_FIELDS:
                del document[name]
        return canonical_json(document)

    @property
    def _scalar_fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in fields(self) if f.name != "slot_moves")

    @cached_property
    def _explicit_targets(self) -> dict[Key, int]:
        return {move.key: move.target for move in self.explicit_moves}

    @cached_property
    def _pinned(self) -> frozenset[Key]:
        return frozenset(self.pinned_keys)

    @cached_property
    def _slot_move_rows(self) -> list[list[int]]:
        """The slot move columns as Python lists (fast scalar access for ``destination``)."""
        return cast(list[list[int]], self.slot_moves.T.tolist())


def _channels(explicit: list[int], slots: IntArray) -> tuple[int, ...]:
    return tuple(sorted(set(explicit).union(np.unique(slots).tolist())))


def _checked_keys(keys: Iterable[object], name: str) -> tuple[Key, ...]:
    """Distinct keys of one type, sorted."""
    checked = [require_key(key, f"{name}[{index}]") for index, key in enumerate(keys)]
    _check_distinct(checked, name)
    return tuple(sorted(checked))


def _check_distinct(keys: Iterable[Key], name: str) -> None:
    """``InvalidInput(name)`` for a repeated key or keys of both types (which could not be sorted)."""
    seen: set[Key] = set()
    for key in keys:
        if key in seen:
            raise InvalidInput(name, f"must hold distinct keys, got {shown(key)} twice")
        seen.add(key)
    require_one_key_type(seen, name)


def _checked_digest(digest: object, name: str) -> str:
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise InvalidInput(name, f"must be a SHA-256 digest (64 lowercase hex digits), got {shown(digest)}")
    return digest


def _checked_prediction(cost: object, total_state: object) -> tuple[float | None, float | None]:
    """``cost`` and ``total_state``: both None (no estimate) or both finite numbers >= 0."""
    if cost is None and total_state is None:
        return None, None
    if cost is None or total_state is None:
        raise InvalidInput(
            "cost" if cost is None else "total_state",
            f"must be a number when the other of cost and total_state is one, got None "
            f"(cost={shown(cost)}, total_state={shown(total_state)})",
        )
    return check("cost", cost, NON_NEGATIVE), check("total_state", total_state, NON_NEGATIVE)


def _checked_move_cost(
    move_cost: object, cost: float | None, split_keys: tuple[SplitKey, ...]
) -> float | None:
    """``move_cost``: None without an estimate; else a number ≥ 0 with ``cost = predicted_cost(move_cost,
    consolidations)``, which may be left None (then ``cost``) when there are no split keys."""
    if cost is None:
        if move_cost is not None:
            raise InvalidInput(
                "move_cost", f"must be None when cost is None (no estimate), got {shown(move_cost)}"
            )
        return None
    if move_cost is None:
        if split_keys:
            raise InvalidInput(
                "move_cost", "must be a number when the plan has split_keys and a cost, got None"
            )
        return cost
    checked = check("move_cost", move_cost, NON_NEGATIVE)
    expected = predicted_cost(checked, consolidations_of(split_keys))
    if cost != expected:
        raise InvalidInput(
            "cost",
            f"must be move_cost plus the weights of the consolidations, {expected!r}, got {cost!r}",
        )
    return cast(float, checked)


def _checked_explicit_moves(
    moves: Iterable[object], n_source: int, n_target: int
) -> tuple[ExplicitMove, ...]:
    checked = []
    for index, row in enumerate(moves):
        name = f"explicit_moves[{index}]"
        key, source, target, weight = require_row(row, name, ExplicitMove._fields)
        move = ExplicitMove(
            require_key(key, f"{name}.key"),
            check(f"{name}.source", source, Interval(int, 0, n_source - 1)),
            check(f"{name}.target", target, Interval(int, 0, n_target - 1)),
            check(f"{name}.weight", weight, NON_NEGATIVE),
        )
        if move.source == move.target:
            raise InvalidInput(
                f"{name}.target", f"must differ from the source {move.source}, got {move.target}"
            )
        checked.append(move)
    _check_distinct((move.key for move in checked), "explicit_moves")
    return tuple(sorted(checked, key=attrgetter("key")))


def _slot_move_table(moves: object) -> IntArray:
    """Rows of four integers as an int64 array of shape (runs, 4).

    A sequence of rows must hold Python ints only: numpy would silently convert bools and floats.
    """
    rows_of = f"rows of [{', '.join(SLOT_MOVE_COLUMNS)}]"
    if isinstance(moves, np.ndarray):
        if moves.dtype.kind not in "iu":
            raise InvalidInput(
                "slot_moves", f"must be an integer array of {rows_of}, got dtype {moves.dtype}"
            )
        table = moves
    else:
        try:
            rows = list(cast(Iterable[Iterable[object]], moves))
            kinds = set(map(type, chain.from_iterable(rows)))
        except TypeError:
            raise InvalidInput("slot_moves", f"must be a sequence of {rows_of}, got {shown(moves)}") from None
        if kinds - {int}:
            raise InvalidInput(
                "slot_moves", f"must hold integers only, got {sorted(k.__name__ for k in kinds)}"
            )
        try:
            table = np.array(rows, dtype=np.int64) if rows else np.empty((0, 4), dtype=np.int64)
        except (ValueError, OverflowError) as error:
            raise InvalidInput(
                "slot_moves", f"must be {rows_of}, four signed 64-bit integers each: {error}"
            ) from None
    if table.ndim != 2 or table.shape[1] != 4:
        raise InvalidInput("slot_moves", f"must have shape (runs, 4) ({rows_of}), got {table.shape}")
    return table.astype(np.int64)


def _checked_slot_moves(moves: object, slot_bits: int, n_source: int, n_target: int) -> IntArray:
    """Slot moves as a read-only ``(runs, 4)`` int64 array sorted by first slot, checked column-wise."""
    table = _slot_move_table(moves)
    first, last, source, target = table.T
    slot_max = 2**slot_bits - 1
    row_rules = (
        ((first < 0) | (first > slot_max), f"must have first_slot in [0, {slot_max}]"),
        ((last < first) | (last > slot_max), f"must have last_slot in [first_slot, {slot_max}]"),
        ((source < 0) | (source >= n_source), f"must have source in [0, {n_source - 1}]"),
        ((target < 0) | (target >= n_target), f"must have target in [0, {n_target - 1}]"),
        (source == target, "must have a source and a target that differ"),
    )
    for broken, rule in row_rules:
        if broken.any():
            index = int(np.argmax(broken))
            raise InvalidInput(f"slot_moves[{index}]", f"{rule}, got {table[index].tolist()}")
    table = table[np.argsort(first, kind="stable")]
    first, last, source, target = table.T
    same_pair = (source[1:] == source[:-1]) & (target[1:] == target[:-1])
    pair_rules = (
        (first[1:] <= last[:-1], "must have slot ranges that do not overlap"),
        (
            (first[1:] == last[:-1] + 1) & same_pair,
            "must have maximal runs (adjacent runs need another source and target pair)",
        ),
    )
    for broken, rule in pair_rules:
        if broken.any():
            index = int(np.argmax(broken))
            raise InvalidInput(
                "slot_moves", f"{rule}, got {table[index].tolist()} and {table[index + 1].tolist()}"
            )
    table.flags.writeable = False
    return table
