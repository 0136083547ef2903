"""A region's stored configuration as the objects one controller tick works with.

A region row holds the construction parameters (resource code, α, σ, utility, algorithm, tail-aware)
as columns and the controller's own parameters as the JSON object ``settings``. The accepted settings,
all optional:

- ``counters``: x, the number of lossy counters of the sliding window (Gedik §4.1.2, Fig. 2); the
  estimate merges the last ``x - 1`` snapshots. An integer >= 2, default 3.
- The ``target-utilization`` policy's (``repart.controller.policy.TargetUtilizationPolicy``; defaults
  measured on the traces of ``benchmarks/policy_traces.py``):

  - ``target_utilization``: u, the busiest channel's busy share of the batch budget to size for, in
    (0, 1], default 0.7.
  - ``utilization_band``: ``[low, high]`` with ``0 <= low <= target_utilization <= high``: no change
    while the utilization is inside it; default ``[min(0.4, u), max(0.9, u)]`` (``[0.4, 0.9]`` at
    the default target), so that any target has a band.
  - ``batch_interval_seconds``: the time budget of one batch (a trigger interval), > 0; absent, the
    budget a batch reports, else the time measured between batches.
  - ``catch_up_seconds``: the time to catch up on a reported backlog in, > 0; default five budgets.
  - ``stabilization_batches``: batches after a change of N that are not used, an integer >= 0,
    default 0.
  - ``scale_down_delay``: batches in a row below the band before a scale-down, an integer >= 1,
    default 1 (the first batch below the band).
  - ``max_scale_down_factor``: the largest share of the channels one scale-down removes, in (0, 1),
    default 0.5.
  - ``reversal_batches`` and ``reversal_margin``: a scale-up is never reversed within that many
    batches (an integer >= 0, default 3); a scale-down only when the utilization is above the band
    by the margin (>= 0, default 0.1).
  - ``scale_up_lookback``: the batches before the newest (at whatever N they ran) whose lowest load
    a scale-up keeps inside the band when it can (it then adds fewer channels than the target asks
    for), an integer >= 0, default 6; 0 sizes every scale-up to the target.
  - ``effectiveness_threshold``: the share of the promised capacity a scale-up must deliver before
    further scale-ups, in [0, 1], default 0.1.
- ``rebalance_threshold``: rebalance when b of the applied function exceeds it, > 0, default 1.0
  (b <= 1 means every resource is within its tolerance α).
- ``migration_budget``: the largest share of the state one rebalance at unchanged N may move, in
  (0, 1], default 0.5.
- ``rebalance_payback_batches``: H, the batches over which a rebalance at unchanged N must pay for its
  migration, an integer in [1, 10^6], default 10. Keeping the applied function costs b in each batch;
  the new one costs U(b', m) under the region's utility in the batch that moves the state and b' in
  each batch after it, so it happens only when (U(b', m) + (H - 1)·b') / H < b
  (``repart.partitioning.utility.function_cost``; under APM: b' + m / H < b). A rebalance over the
  migration budget, or one that does not pay back, is a recorded ``no-change`` with its reason.
- ``move_limit``: readj's move limit c (Gedik Algorithm 4), an integer >= 1, default 5.
- ``split``: the parameters of a split-mode region's scheme, an object checked by
  ``repart.partitioning.split.params.SplitParams`` (θ, ε, spread, virtual nodes, seed); the scheme
  itself is the region's ``split_scheme``.
- ``plan_keep_versions``, ``plan_keep_days``: plan retention (``repart.storage.retention``). The daemon
  prunes the moves of the plans older than this many versions (an integer in [1, 2^31 - 1]) or days
  (in (0, 36500]), keeping the applied version's plan and each pruned plan's summary in the audit log.
  Neither: nothing is pruned (the default).

``repart.controller.service.update_region`` merges new settings into a region's; a setting given as
null (``--set plan_keep_versions=null``) is removed, back to its default.

The ``fixed`` policy runs the region's ``n_channels_initial`` channels, within its channel bounds.
Every bad value raises ``InvalidInput`` naming ``settings.<field>`` and the accepted range;
``SETTINGS`` writes the accepted values down.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from repart.controller.policy import (
    DEFAULT_TARGET_UTILIZATION,
    ChannelPolicy,
    FixedPolicy,
    TargetUtilizationPolicy,
)
from repart.errors import InvalidInput
from repart.partitioning.algorithms.problem import DEFAULT_MOVE_LIMIT, BuildParams
from repart.partitioning.domain import SPLIT_SCHEMES, check_utility
from repart.partitioning.resources import Resources
from repart.partitioning.split.params import SplitParams
from repart.storage.regions import RegionConfig
from repart.storage.retention import KEEP_DAYS, KEEP_VERSIONS, PlanRetention
from repart.validation import (
    FRACTION,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    PROBABILITY,
    Constraint,
    Interval,
    Kind,
    check_all,
    check_each,
)

DEFAULT_COUNTERS = 3
DEFAULT_REBALANCE_THRESHOLD = 1.0
DEFAULT_MIGRATION_BUDGET = 0.5
DEFAULT_REBALANCE_PAYBACK_BATCHES = 10
SETTINGS: dict[str, tuple[Constraint, ...]] = {
    "counters": (Interval(int, 2, None),),
    "target_utilization": (FRACTION,),
    "utilization_band": (Kind(list, "a list [low, high] of two numbers"),),
    "batch_interval_seconds": (POSITIVE,),
    "catch_up_seconds": (POSITIVE,),
    "stabilization_batches": (NON_NEGATIVE_INT,),
    "scale_down_delay": (POSITIVE_INT,),
    "max_scale_down_factor": (Interval(float, 0, 1, closed="neither"),),
    "reversal_batches": (NON_NEGATIVE_INT,),
    "reversal_margin": (NON_NEGATIVE,),
    "effectiveness_threshold": (PROBABILITY,),
    "scale_up_lookback": (NON_NEGATIVE_INT,),
    "rebalance_threshold": (POSITIVE,),
    "migration_budget": (FRACTION,),
    "rebalance_payback_batches": (Interval(int, 1, 1_000_000),),
    "move_limit": (POSITIVE_INT,),
    "split": (Kind(Mapping, "an object of the split scheme's parameters"),),
    "plan_keep_versions": (KEEP_VERSIONS,),
    "plan_keep_days": (KEEP_DAYS,),
}
RETENTION_SETTINGS = ("plan_keep_versions", "plan_keep_days")
"""The settings of plan retention (``plan_retention``)."""


@dataclass(frozen=True)
class ControllerSettings:
    """What one tick of a region needs: the channel-count policy, the construction parameters and
    algorithm, the window's counter count x, the rebalance threshold, the migration budget and payback
    horizon, and the plan retention the daemon applies (None: keep every plan's moves); see the module
    docstring."""

    policy: ChannelPolicy
    params: BuildParams
    algorithm: str
    counters: int
    rebalance_threshold: float
    split: SplitParams | None = None
    retention: PlanRetention | None = None
    migration_budget: float = DEFAULT_MIGRATION_BUDGET
    rebalance_payback_batches: int = DEFAULT_REBALANCE_PAYBACK_BATCHES

    @classmethod
    def from_config(cls, config: RegionConfig) -> ControllerSettings:
        """The settings of a region's configuration; ``InvalidInput`` naming ``settings.<field>`` for a
        bad value or an unknown field."""
        settings = check_all(config.settings, SETTINGS, within="settings")
        return cls(
            policy=_policy(config, settings),
            params=BuildParams(
                resources=Resources.parse(config.resources),
                alpha=config.alpha,
                sigma=config.sigma,
                utility=check_utility(config.utility),
                move_limit=settings.get("move_limit", DEFAULT_MOVE_LIMIT),
                tail_aware=config.tail_aware,
            ),
            algorithm=config.algorithm,
            counters=settings.get("counters", DEFAULT_COUNTERS),
            rebalance_threshold=settings.get("rebalance_threshold", DEFAULT_REBALANCE_THRESHOLD),
            split=_split(config, settings.get("split", {})),
            retention=_retention(settings),
            migration_budget=settings.get("migration_budget", DEFAULT_MIGRATION_BUDGET),
            rebalance_payback_batches=settings.get(
                "rebalance_payback_batches", DEFAULT_REBALANCE_PAYBACK_BATCHES
            ),
        )


def _split(config: RegionConfig, parameters: Mapping[str, Any]) -> SplitParams | None:
    """A split region's scheme (its ``split_scheme``) with the parameters of ``settings.split``; None for
    a key-preserving region. A bad parameter is ``InvalidInput`` naming ``settings.split.<field>``."""
    if "scheme" in parameters:
        raise InvalidInput("settings.split.scheme", "is the region's split_scheme (--split), not a setting")
    scheme = config.split_scheme or SPLIT_SCHEMES[0]  # checked while unused too, as the policy's settings are
    try:
        params = SplitParams.from_settings({"scheme": scheme, **parameters})
    except InvalidInput as problem:
        raise InvalidInput(f"settings.{problem.field}", problem.requirement) from None
    return None if config.split_scheme is None else params


def plan_retention(settings: Mapping[str, Any]) -> PlanRetention | None:
    """The plan retention of a region's ``settings`` (its stored JSON object) alone, as
    ``ControllerSettings.from_config`` makes it, without checking or building the other settings (the
    daemon asks after every tick); InvalidInput naming ``settings.<field>`` for a bad value."""
    retention_fields = {name: SETTINGS[name] for name in RETENTION_SETTINGS}
    chosen = {name: settings[name] for name in RETENTION_SETTINGS if name in settings}
    return _retention(check_all(chosen, retention_fields, within="settings"))


def _retention(settings: Mapping[str, Any]) -> PlanRetention | None:
    """The plan retention of checked ``settings.plan_keep_versions`` and ``settings.plan_keep_days``;
    None without either."""
    keep_versions, keep_days = settings.get("plan_keep_versions"), settings.get("plan_keep_days")
    if keep_versions is None and keep_days is None:
        return None
    return PlanRetention(keep_versions=keep_versions, older_than=keep_days)


def _policy(config: RegionConfig, settings: Mapping[str, Any]) -> ChannelPolicy:
    """The region's policy from its checked ``settings``; the target-utilization policy is built (and
    its channel bounds checked) even under ``fixed``, where its settings wait for a switch of policy."""
    target_utilization = _target_utilization(config, settings)
    if config.policy == "fixed":
        return FixedPolicy(config.n_channels_initial, config.min_channels, config.max_channels)
    return target_utilization


def _target_utilization(config: RegionConfig, settings: Mapping[str, Any]) -> TargetUtilizationPolicy:
    chosen = {name: settings[name] for name in _POLICY_SETTINGS if name in settings}
    if "utilization_band" in chosen:
        chosen["utilization_band"] = _band(chosen["utilization_band"])
    try:
        return TargetUtilizationPolicy(
            target_utilization=settings.get("target_utilization", DEFAULT_TARGET_UTILIZATION),
            min_channels=config.min_channels,
            max_channels=config.max_channels,
            **chosen,
        )
    except InvalidInput as problem:
        if problem.field in SETTINGS:
            raise InvalidInput(f"settings.{problem.field}", problem.requirement) from None
        raise


_POLICY_SETTINGS = (
    "utilization_band",
    "batch_interval_seconds",
    "catch_up_seconds",
    "stabilization_batches",
    "scale_down_delay",
    "max_scale_down_factor",
    "reversal_batches",
    "reversal_margin",
    "effectiveness_threshold",
    "scale_up_lookback",
)


def _band(value: list[Any]) -> tuple[float, float]:
    """``settings.utilization_band`` as ``(low, high)``: two numbers >= 0 (whether they hold the target
    is the policy's check)."""
    band = check_each("settings.utilization_band", value, NON_NEGATIVE)
    if len(band) != 2:
        raise InvalidInput(
            "settings.utilization_band", f"must be a list [low, high] of two numbers, got {len(band)}"
        )
    return float(band[0]), float(band[1])
