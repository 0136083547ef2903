"""The controller: measure, analyze, plan, activate for every region (DESIGN §8, Gedik §4.5).

``window`` merges the last ``x - 1`` tumbling snapshots into the sliding frequency estimate
(DESIGN §3); ``policy`` decides the next channel count and whether to rebalance.
"""

from repart.controller.policy import (
    ChannelPolicy,
    Decision,
    FixedPolicy,
    RebalanceDecision,
    TargetUtilizationPolicy,
    WindowLoad,
    needs_rebalance,
)
from repart.controller.window import merge_snapshots, window_size

__all__ = [
    "ChannelPolicy",
    "Decision",
    "FixedPolicy",
    "RebalanceDecision",
    "TargetUtilizationPolicy",
    "WindowLoad",
    "merge_snapshots",
    "needs_rebalance",
    "window_size",
]
