"""Scale steps that stay close to the ideal migration: a change of N moves at most 1.5 times the share
of keys that consistent hashing would, ``|ΔN| / max(N, N')``.

The step should also leave b at or below the region's rebalance threshold. ``build_step`` keeps the
region's build when it meets both; otherwise it builds every candidate for the new N (scan, redist,
readj and the slot table alone, and, when the window reports per-slot counts, scan, redist and readj
with the tail-aware slot rebalancing) and keeps the one of lowest cost U(b, m) under the region's
utility (``repart.partitioning.utility.function_cost``) among those meeting both, else among those
within the bound. On small key sets no candidate may meet both (a few hot keys decide b): the bound
wins, and the step records that b missed. On about a thousand keys, the keys below the build's
frequency threshold, which follow the slot table, decide b: a tail-aware candidate, which also moves
whole slots of them, brings b under the threshold. The moved share is measured on the window's keys,
routed by the applied function and by the candidate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from repart.controller.build import Built, build_next
from repart.controller.settings import ControllerSettings
from repart.partitioning.domain import Key
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.routing import RoutingFunction
from repart.partitioning.utility import function_cost

STEP_SLACK = 1.5
"""The most a scale step may move, as a multiple of the ideal share ``|ΔN| / max(N, N')``."""

STEP_CANDIDATES = (
    ("scan", False),
    ("redist", False),
    ("readj", False),
    ("consistent", False),
    ("scan", True),
    ("redist", True),
    ("readj", True),
)
"""The builds a scale step may choose from, as (algorithm, tail-aware) pairs; the tail-aware ones only
when the window reports per-slot counts (``step_candidates``)."""


def ideal_share(n_before: int, n_after: int) -> float:
    """``|ΔN| / max(N, N')``: the share of keys consistent hashing moves from N to N' channels."""
    return abs(n_after - n_before) / max(n_before, n_after)


def moved_key_share(
    before: RoutingFunction, after: RoutingFunction, keys: Sequence[Key] | npt.NDArray[np.generic]
) -> float:
    """The share of ``keys`` whose channel differs between ``before`` and ``after`` (the share of the
    keys a change of function moves; ``repart.controller.tick.moved_state`` gives the share of the
    state)."""
    if not len(keys):
        return 0.0
    moved = before.home.lookup_many(keys) != after.home.lookup_many(keys)
    return float(np.mean(moved))


def build_step(
    current: RoutingFunction, estimate: FrequencyEstimate, n_channels: int, settings: ControllerSettings
) -> Built:
    """The next version for ``n_channels`` (module docstring). A step has two targets: move at most
    ``STEP_SLACK`` times the ideal share of the window's keys, and leave b at or below the region's
    ``rebalance_threshold``. ``build_next``'s build is kept when it meets both; otherwise every
    candidate is built, and the one of lowest U(b, m) is kept among those meeting both, else among
    those within the bound (b above the threshold: the bound wins), else ``build_next``'s. In split
    mode, or at unchanged N, ``build_next``'s as it is. The chosen build's ``event_data`` records the
    bound, the share moved, the threshold and whether b met it (``step``)."""
    built = build_next(current, estimate, n_channels, settings)
    if settings.split is not None or n_channels == current.n_channels:
        return built
    limit = STEP_SLACK * ideal_share(current.n_channels, n_channels)
    threshold = settings.rebalance_threshold
    moved = moved_key_share(current, built.function, estimate.keys)
    chosen, share = built, moved
    if moved > limit or not _balanced(built, threshold):
        within = []
        for algorithm, tail_aware in step_candidates(estimate, settings.params.tail_aware):
            candidate = build_next(
                current, estimate, n_channels, step_settings(settings, algorithm, tail_aware)
            )
            candidate_share = moved_key_share(current, candidate.function, estimate.keys)
            if candidate_share <= limit:
                within.append((_cost(candidate, settings), candidate_share, candidate))
        if moved <= limit:
            within.append((_cost(built, settings), moved, built))
        balanced = [entry for entry in within if _balanced(entry[2], threshold)]
        if balanced or within:
            _, share, chosen = min(balanced or within, key=lambda entry: (entry[0], entry[1]))
    step = {
        "limit": limit,
        "moved_key_share": share,
        "region_build_moved_key_share": moved,
        "threshold": threshold,
        "b_within_threshold": _balanced(chosen, threshold),
    }
    return dataclasses.replace(chosen, event_data=chosen.event_data | {"step": step})


def step_candidates(estimate: FrequencyEstimate, region_tail_aware: bool) -> tuple[tuple[str, bool], ...]:
    """``STEP_CANDIDATES`` that can be built on ``estimate`` (a tail-aware build needs its slot counts),
    each once: a tail-aware region's plain candidates are built tail-aware, so that they keep the
    region's slot overrides, and are then its tail-aware candidates."""
    has_slots = estimate.slot_counts is not None
    effective = (
        (algorithm, tail or region_tail_aware) for algorithm, tail in STEP_CANDIDATES if has_slots or not tail
    )
    return tuple(dict.fromkeys(effective))


def step_settings(settings: ControllerSettings, algorithm: str, tail_aware: bool) -> ControllerSettings:
    """The region's settings with a candidate's algorithm and tail-awareness (``step_candidates``)."""
    params = dataclasses.replace(settings.params, tail_aware=tail_aware)
    return dataclasses.replace(settings, algorithm=algorithm, params=params)


def _balanced(built: Built, threshold: float) -> bool:
    """Whether the build's predicted b is at or below ``threshold``."""
    b = built.event_data.get("predicted_b")
    return isinstance(b, int | float) and b <= threshold


def _cost(built: Built, settings: ControllerSettings) -> float:
    """The candidate's U(b, m) under the region's utility; infinite without a predicted b and m."""
    b, m = built.event_data.get("predicted_b"), built.event_data.get("predicted_m")
    if not isinstance(b, int | float) or not isinstance(m, int | float):
        return float("inf")
    return function_cost(settings.params.utility, float(b), float(m))
