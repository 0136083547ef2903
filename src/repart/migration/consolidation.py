"""Split keys in a migration plan: where their partial state is before and after, and consolidations.

A key that the source function ``a`` or the target function ``b`` splits has its state
on several channels: one partial per candidate. A plan does not name it among its explicit moves or
pinned keys but as a ``SplitKey``: its candidates and routing shares in ``a`` and in ``b`` (a function
that does not split the key gives its one channel, share 1.0) and its predicted state β_s(f(key)).

The rule: after the plan, every key's state is on its candidates in ``b``. A partial on a channel that
is among them stays; any other partial is merged into the key's home in ``b`` (``target[0]``): a
**consolidation** ``(key, source, target, weight)``. A key that becomes split therefore moves nothing
when its old channel is among its new candidates, and one that stops being split, or whose home moves,
has its partials merged into its home. ``weight`` is the partial's predicted state, the key's state
times its share on ``source`` in ``a``; the consolidations' weights add to the plan's cost (Gedik
Eq. 9, in frequency space).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from operator import attrgetter
from typing import NamedTuple

from repart.errors import InvalidInput
from repart.partitioning.documents import require_key, require_one_key_type, require_row
from repart.partitioning.domain import Key
from repart.partitioning.split.function import WEIGHT_SUM_TOLERANCE
from repart.validation import NON_NEGATIVE, PROBABILITY, Interval, check, shown


class SplitKey(NamedTuple):
    """A key that ``a`` or ``b`` splits: its channels and routing shares in each, and its state.

    ``source`` and ``source_shares`` are its candidates and weights in ``a`` (``(a(key),)`` and
    ``(1.0,)`` when ``a`` does not split it); ``target`` and ``target_shares`` the same in ``b``, whose
    home is ``target[0]``. ``weight`` is the key's predicted state β_s(f(key)) (0.0 without an
    estimate); its partial on ``source[i]`` is predicted to hold ``weight * source_shares[i]``.
    """

    key: Key
    source: tuple[int, ...]
    source_shares: tuple[float, ...]
    target: tuple[int, ...]
    target_shares: tuple[float, ...]
    weight: float


class Consolidation(NamedTuple):
    """The partial of ``key`` on ``source`` (not among its candidates in ``b``) merged into ``target``,
    the key's home in ``b``; ``weight`` is the partial's predicted state."""

    key: Key
    source: int
    target: int
    weight: float


def consolidations_of(split_keys: Iterable[SplitKey]) -> tuple[Consolidation, ...]:
    """The consolidations of ``split_keys`` (module docstring), by key then source channel."""
    rows = [
        Consolidation(row.key, channel, row.target[0], row.weight * share)
        for row in split_keys
        for channel, share in zip(row.source, row.source_shares, strict=True)
        if channel not in row.target
    ]
    return tuple(sorted(rows, key=attrgetter("key", "source")))


def predicted_cost(move_cost: float, consolidations: Iterable[Consolidation]) -> float:
    """M(a, b): the state of the explicit and slot moves plus that of the consolidated partials.

    One formula for the planner and ``MigrationPlan.reverse``, so that both give the same float.
    """
    weights = [row.weight for row in consolidations]
    return move_cost + math.fsum(weights) if weights else move_cost


def checked_split_keys(rows: object, n_source: int, n_target: int) -> tuple[SplitKey, ...]:
    """Split key rows, checked field by field (``InvalidInput`` naming ``split_keys[i].…``), by key.

    Each side is a non-empty list of distinct channels of its function with one share per channel,
    each in [0, 1], summing to 1; at least one side splits the key (2 channels or more); the keys are
    distinct and of one type.
    """
    if not isinstance(rows, list | tuple):
        raise InvalidInput("split_keys", f"must be a list of rows, got {shown(rows)}")
    checked = []
    for index, row in enumerate(rows):
        name = f"split_keys[{index}]"
        key, source, source_shares, target, target_shares, weight = require_row(row, name, SplitKey._fields)
        sides = (
            _checked_side(source, source_shares, f"{name}.source", n_source),
            _checked_side(target, target_shares, f"{name}.target", n_target),
        )
        if all(len(channels) < 2 for channels, _ in sides):
            raise InvalidInput(
                name,
                f"must be split (2 channels or more) in the source or the target, got source "
                f"{list(sides[0][0])} and target {list(sides[1][0])}",
            )
        checked.append(
            SplitKey(
                require_key(key, f"{name}.key"),
                *sides[0],
                *sides[1],
                check(f"{name}.weight", weight, NON_NEGATIVE),
            )
        )
    keys = [row.key for row in checked]
    if len(set(keys)) != len(keys):
        repeated = next(key for index, key in enumerate(keys) if key in keys[:index])
        raise InvalidInput("split_keys", f"must hold distinct keys, got {shown(repeated)} twice")
    require_one_key_type(keys, "split_keys")
    return tuple(sorted(checked, key=attrgetter("key")))


def _checked_side(
    channels: object, shares: object, name: str, n_channels: int
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Distinct channels in [0, n_channels) and their shares (``<name>_shares``), summing to 1."""
    if not isinstance(channels, list | tuple) or not channels:
        raise InvalidInput(name, f"must be a non-empty list of channels, got {shown(channels)}")
    channel = Interval(int, 0, n_channels - 1)
    checked = tuple(check(f"{name}[{i}]", c, channel) for i, c in enumerate(channels))
    if len(set(checked)) != len(checked):
        raise InvalidInput(name, f"must be distinct channels, got {list(checked)}")
    if not isinstance(shares, list | tuple) or len(shares) != len(checked):
        raise InvalidInput(
            f"{name}_shares",
            f"must be a list of {len(checked)} shares (one per channel), got {shown(shares)}",
        )
    checked_shares = tuple(check(f"{name}_shares[{i}]", s, PROBABILITY) for i, s in enumerate(shares))
    total = math.fsum(checked_shares)
    if abs(total - 1.0) > WEIGHT_SUM_TOLERANCE:
        raise InvalidInput(
            f"{name}_shares", f"must sum to 1 (within {WEIGHT_SUM_TOLERANCE:g}), got {total!r}"
        )
    return checked, checked_shares
