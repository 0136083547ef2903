"""Scale steps that stay close to the ideal migration: a change of N moves at most 1.5 times the share
of keys that consistent hashing would, ``|ΔN| / max(N, N')``.

On small key sets the region's build can move far more than that to balance the new channels (a few
hot keys decide b). ``build_step`` keeps the region's build when it is within the bound; otherwise it
builds every candidate for the new N (scan, redist, readj, and the slot table alone) and keeps the one
within the bound with the lowest cost U(b, m) under the region's utility
(``repart.partitioning.utility.function_cost``). The moved share is measured on
the window's keys, routed by the applied function and by the candidate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from repart.controller.build import Built, build_next
from repart.controller.settings import ControllerSettings
from repart.partitioning.domain import Key
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.split.function import StoredFunction, home_function
from repart.partitioning.utility import function_cost

STEP_SLACK = 1.5
"""The most a scale step may move, as a multiple of the ideal share ``|ΔN| / max(N, N')``."""

STEP_CANDIDATES = ("scan", "redist", "readj", "consistent")


def ideal_share(n_before: int, n_after: int) -> float:
    """``|ΔN| / max(N, N')``: the share of keys consistent hashing moves from N to N' channels."""
    return abs(n_after - n_before) / max(n_before, n_after)


def moved_key_share(before: StoredFunction, after: StoredFunction, keys: Sequence[Key]) -> float:
    """The share of ``keys`` whose channel differs between ``before`` and ``after``."""
    if not keys:
        return 0.0
    moved = home_function(before).lookup_many(keys) != home_function(after).lookup_many(keys)
    return float(np.mean(moved))


def build_step(
    current: StoredFunction, estimate: FrequencyEstimate, n_channels: int, settings: ControllerSettings
) -> Built:
    """The next version for ``n_channels`` (module docstring): ``build_next``'s, unless a change of N
    moves more than ``STEP_SLACK`` times the ideal share of the window's keys. In split mode, or at
    unchanged N, ``build_next``'s as it is. The chosen build's ``event_data`` records the bound and the
    share moved (``step``)."""
    built = build_next(current, estimate, n_channels, settings)
    if settings.split is not None or n_channels == current.n_channels:
        return built
    limit = STEP_SLACK * ideal_share(current.n_channels, n_channels)
    moved = moved_key_share(current, built.function, estimate.keys)
    chosen, share = built, moved
    if moved > limit:
        within = []
        for algorithm in STEP_CANDIDATES:
            candidate = build_next(
                current, estimate, n_channels, dataclasses.replace(settings, algorithm=algorithm)
            )
            candidate_share = moved_key_share(current, candidate.function, estimate.keys)
            if candidate_share <= limit:
                within.append((_cost(candidate, settings), candidate_share, candidate))
        if within:
            _, share, chosen = min(within, key=lambda entry: (entry[0], entry[1]))
    step = {"limit": limit, "moved_key_share": share, "region_build_moved_key_share": moved}
    return dataclasses.replace(chosen, event_data=chosen.event_data | {"step": step})


def _cost(built: Built, settings: ControllerSettings) -> float:
    """The candidate's U(b, m) under the region's utility; infinite without a predicted b and m."""
    b, m = built.event_data.get("predicted_b"), built.event_data.get("predicted_m")
    if not isinstance(b, int | float) or not isinstance(m, int | float):
        return float("inf")
    return function_cost(settings.params.utility, float(b), float(m))
