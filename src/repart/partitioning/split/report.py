"""What a split build decided and predicts (``SplitReport``), and its JSON form for version reports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from repart.partitioning.algorithms.builder import BuildReport
from repart.partitioning.documents import json_number
from repart.partitioning.domain import Key
from repart.partitioning.split.function import SplitEntry, SplitFunction


@dataclass(frozen=True)
class SplitReport:
    """A split build's decisions and predictions.

    - ``home``: the home function's ``BuildReport`` (Gedik's build on the home estimate).
    - ``scheme``, ``theta``: the scheme and the head threshold θ used at this N.
    - ``predicted_b``: b on merged keys, each split key's load spread over its candidates by its weights;
      ``predicted_load``: max/mean load on the same loads.
    - ``b_lb``: the lower bound no key-preserving function can beat at this N (``metrics.lower_bound``).
    - ``memory``: average channels per key, (distinct keys + Σ over split keys of (candidates with a
      positive weight − 1)) / distinct keys, distinct keys the estimate's distinct estimate.
    - ``split_keys``: how many keys are split; ``head``: key → (candidates, weights).
    - ``d``: D-Choices' d (Proposition IV.1, clamped to [2, N]), None for the other schemes.
    - ``seconds``: the whole build's time.
    """

    home: BuildReport
    scheme: str
    theta: float
    predicted_b: float
    predicted_load: float
    b_lb: float
    memory: float
    split_keys: int
    head: Mapping[Key, SplitEntry]
    d: int | None
    seconds: float

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON values: the head as ``[key, candidates, weights]`` rows in key order, an infinite
        ratio as None."""
        return {
            "home": self.home.to_json_dict(),
            "scheme": self.scheme,
            "theta": self.theta,
            "predicted_b": json_number(self.predicted_b),
            "predicted_load": self.predicted_load,
            "b_lb": json_number(self.b_lb),
            "memory": self.memory,
            "split_keys": self.split_keys,
            "head": [[key, list(entry.candidates), list(entry.weights)] for key, entry in self.head.items()],
            "d": self.d,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class SplitBuildResult:
    function: SplitFunction
    report: SplitReport
