"""A region's stored configuration as the objects one controller tick works with (DESIGN §7, §8).

A region row holds the construction parameters (resource code, α, σ, utility, algorithm, tail-aware)
as columns and the controller's own parameters as the JSON object ``settings``. The accepted settings,
all optional:

- ``counters``: x, the number of lossy counters of the sliding window (Gedik §4.1.2, Fig. 2); the
  estimate merges the last ``x - 1`` snapshots. An integer >= 2, default 3.
- ``target_utilization``: u of the ``target-utilization`` policy, in (0, 1], default 0.8.
- ``cooldown_seconds``: the least time between two channel-count changes, >= 0, default 0.
- ``hysteresis``: the relative demand change ignored by ``target-utilization``, >= 0, default 0.
- ``rebalance_threshold``: rebalance when b of the applied function exceeds it, > 0, default 1.0
  (b <= 1 means every resource is within its tolerance α).
- ``move_limit``: readj's move limit c (Gedik Algorithm 4), an integer >= 1, default 5.

The ``fixed`` policy runs the region's ``n_channels_initial`` channels, within its channel bounds.
Every bad value raises a ValueError naming ``settings.<field>`` and the accepted range (DESIGN §10).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from repart.controller.policy import ChannelPolicy, FixedPolicy, TargetUtilizationPolicy
from repart.partitioning.algorithms.problem import DEFAULT_MOVE_LIMIT, BuildParams
from repart.partitioning.documents import require_int, require_number
from repart.partitioning.resources import Resources
from repart.partitioning.utility import check_utility
from repart.storage.regions import RegionConfig

DEFAULT_COUNTERS = 3
DEFAULT_TARGET_UTILIZATION = 0.8
DEFAULT_REBALANCE_THRESHOLD = 1.0
SETTINGS_FIELDS = (
    "counters",
    "target_utilization",
    "cooldown_seconds",
    "hysteresis",
    "rebalance_threshold",
    "move_limit",
)


@dataclass(frozen=True)
class ControllerSettings:
    """What one tick of a region needs: the channel-count policy, the construction parameters and
    algorithm, the window's counter count x and the rebalance threshold (see the module docstring)."""

    policy: ChannelPolicy
    params: BuildParams
    algorithm: str
    counters: int
    rebalance_threshold: float

    @classmethod
    def from_config(cls, config: RegionConfig) -> ControllerSettings:
        """The settings of a region's configuration; ValueError naming the field for a bad value."""
        settings = config.settings
        unknown = sorted(set(settings) - set(SETTINGS_FIELDS))
        if unknown:
            raise ValueError(
                f"settings: unknown field(s) {', '.join(unknown)}; accepted: {', '.join(SETTINGS_FIELDS)}"
            )
        return cls(
            policy=_policy(config, settings),
            params=BuildParams(
                resources=Resources.parse(config.resources),
                alpha=config.alpha,
                sigma=config.sigma,
                utility=check_utility(config.utility),
                move_limit=require_int(
                    settings.get("move_limit", DEFAULT_MOVE_LIMIT), "settings.move_limit", 1
                ),
                tail_aware=config.tail_aware,
            ),
            algorithm=config.algorithm,
            counters=require_int(settings.get("counters", DEFAULT_COUNTERS), "settings.counters", 2),
            rebalance_threshold=_positive(
                settings.get("rebalance_threshold", DEFAULT_REBALANCE_THRESHOLD),
                "settings.rebalance_threshold",
            ),
        )


def _policy(config: RegionConfig, settings: Mapping[str, Any]) -> ChannelPolicy:
    """The region's policy; the target-utilization settings are checked even under ``fixed``, where
    they wait for a switch of policy."""
    target_utilization = _target_utilization(config, settings)
    if config.policy == "fixed":
        return FixedPolicy(config.n_channels_initial, config.min_channels, config.max_channels)
    return target_utilization


def _target_utilization(config: RegionConfig, settings: Mapping[str, Any]) -> TargetUtilizationPolicy:
    utilization = require_number(
        settings.get("target_utilization", DEFAULT_TARGET_UTILIZATION),
        "settings.target_utilization",
        0.0,
        1.0,
    )
    if utilization == 0.0:
        raise ValueError("settings.target_utilization must be in (0, 1], got 0")
    return TargetUtilizationPolicy(
        target_utilization=utilization,
        min_channels=config.min_channels,
        max_channels=config.max_channels,
        cooldown_seconds=require_number(settings.get("cooldown_seconds", 0.0), "settings.cooldown_seconds"),
        hysteresis=require_number(settings.get("hysteresis", 0.0), "settings.hysteresis"),
    )


def _positive(value: object, name: str) -> float:
    number = require_number(value, name)
    if number == 0.0:
        raise ValueError(f"{name} must be > 0, got 0")
    return number
