"""Building the next version of a region: Gedik's build for a key-preserving
region and a split function by the region's scheme in split mode.
The tick (``repart.controller.tick``) and the operator's actions (``repart.controller.actions``) build
through here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from repart.controller.settings import ControllerSettings
from repart.partitioning import build
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.routing import RoutingFunction
from repart.partitioning.split.build import build_split


@dataclass(frozen=True)
class Built:
    """A version built by the tick or an operator's action: the function, the algorithm name stored
    with the version (``split-<scheme>`` in split mode), its report as JSON, and the figures the
    activation event records."""

    function: RoutingFunction
    algorithm: str
    report: dict[str, Any]
    event_data: dict[str, Any]


def build_next(
    current: RoutingFunction, estimate: FrequencyEstimate, n_channels: int, settings: ControllerSettings
) -> Built:
    """The next version from ``current`` on the merged window: Gedik's build for a key-preserving
    region (from ``current``'s home, so that leaving split mode consolidates every split key), or a
    split function by the region's scheme."""
    if settings.split is None:
        result = build(current.home, estimate, n_channels, settings.params, settings.algorithm)
        stored = result.report.to_json_dict()
        return Built(
            result.function,
            result.report.algorithm.split(":")[0],
            stored,
            {
                "algorithm": result.report.algorithm,
                "predicted_b": stored["predicted_b"],
                "predicted_load": stored["predicted_load"],
                "predicted_m": stored["predicted_m"],
                "candidates": stored["candidates"],
            },
        )
    split = build_split(
        current,
        estimate,
        n_channels,
        split=settings.split,
        params=settings.params,
        algorithm=settings.algorithm,
    )
    stored = split.report.to_json_dict()
    return Built(
        split.function,
        f"split-{settings.split.scheme}",
        stored,
        {
            "algorithm": f"split-{settings.split.scheme}",
            "predicted_b": stored["predicted_b"],
            "predicted_load": stored["predicted_load"],
            "b_lb": stored["b_lb"],
            "memory": stored["memory"],
            "split_keys": stored["split_keys"],
            "d": stored["d"],
            "head": stored["head"],
        },
    )
