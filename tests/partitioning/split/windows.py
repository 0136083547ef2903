"""A small window the split-build tests share, and the merged channel loads of a split function on it."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.split.function import SplitFunction

# 1,000 tuples at N = 4 with θ = 0.05: four keys at or above it (t exactly at it) and 25 keys of 1 %.
COUNTS: dict[str, float] = {"a": 400, "b": 200, "c": 100, "t": 50, **{f"k{i:02d}": 10 for i in range(25)}}
WINDOW = FrequencyEstimate.from_counts(COUNTS)
HEAD = {"a", "b", "c", "t"}
ALPHA = 1.2


def merged_loads(function: SplitFunction, counts: dict[str, float]) -> npt.NDArray[np.float64]:
    """Tuples per channel: unsplit keys at home, split keys spread by their weights."""
    loads = np.zeros(function.n_channels)
    for key, count in counts.items():
        if key in function.split:
            entry = function.split[key]
            loads[list(entry.candidates)] += count * np.array(entry.weights)
        else:
            loads[function.home.lookup(key)] += count
    return loads
