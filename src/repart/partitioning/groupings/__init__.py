"""Key-splitting stream groupings of the PKG family, as compiled stream routers.

``make_grouping(scheme, workers, sources, seed=…, **params)`` builds any of them; every grouping's
``route(key_hashes, sources)`` returns the worker of each tuple and keeps per-source state across calls.
"""

from __future__ import annotations

from typing import Any

from repart.partitioning.groupings.base import Grouping
from repart.partitioning.groupings.dkg import DynamicKeyGrouping
from repart.partitioning.groupings.fish import Fish
from repart.partitioning.groupings.greedy import OfflineGreedy, OnlineGreedy, PowerOfTwoChoices
from repart.partitioning.groupings.hashed import KeyGrouping, PartialKeyGrouping, ShuffleGrouping
from repart.partitioning.groupings.head import DChoices, RoundRobinHead, WChoices, optimal_choices
from repart.validation import Options, check

GROUPINGS: dict[str, type[Grouping]] = {
    cls.scheme: cls
    for cls in (
        KeyGrouping,
        ShuffleGrouping,
        PartialKeyGrouping,
        PowerOfTwoChoices,
        OnlineGreedy,
        OfflineGreedy,
        DChoices,
        WChoices,
        RoundRobinHead,
        Fish,
        DynamicKeyGrouping,
    )
}
SCHEMES = tuple(GROUPINGS)


def make_grouping(scheme: str, workers: int, sources: int, *, seed: int = 0, **params: Any) -> Grouping:
    """The grouping named ``scheme`` (one of ``SCHEMES``) for n workers and S sources."""
    check("scheme", scheme, Options(SCHEMES))
    return GROUPINGS[scheme](workers, sources, seed=seed, **params)


__all__ = [
    "GROUPINGS",
    "SCHEMES",
    "DChoices",
    "DynamicKeyGrouping",
    "Fish",
    "Grouping",
    "KeyGrouping",
    "OfflineGreedy",
    "OnlineGreedy",
    "PartialKeyGrouping",
    "PowerOfTwoChoices",
    "RoundRobinHead",
    "ShuffleGrouping",
    "WChoices",
    "make_grouping",
    "optimal_choices",
]
