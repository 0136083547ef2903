"""The caption under every table that shows b: what b and max/mean load mean, and where they are
explained (docs/concepts/metrics.md)."""

from __future__ import annotations

WHERE_EXPLAINED = "b and max/mean load: docs/concepts/metrics.md"
"""The hint that names the page explaining the metrics."""

B_AND_LOAD = (
    "b: relative imbalance, max/min channel load over α (at most 1: within tolerance); max/mean: the "
    "busiest channel's load over the mean channel's (1 = even, finite when a channel is empty)"
)
B_PER_RESOURCE = "b_s, b_c, b_n: b of state, computation and communication"
B_LB = "b_lb: the best b a key-preserving function can reach"
M = "m: state moved over one channel's ideal share"


def metrics_caption(*also: str) -> str:
    """The caption: b and max/mean load, then ``also`` (the table's other metrics, such as ``B_LB`` and
    ``M``), then where they are explained."""
    return "; ".join((B_AND_LOAD, *also)) + f". {WHERE_EXPLAINED}"
