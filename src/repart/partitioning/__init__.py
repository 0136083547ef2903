"""Partition functions and how they are built (Gedik). No I/O, no Spark, no database.

The names most programs need are re-exported here.

The names load their module on first use (PEP 562), so that importing one module of the package
does not load the rest (a responsive CLI).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from repart.lazy import lazy_attributes

if TYPE_CHECKING:  # the names, for type checkers and readers; at run time __getattr__ loads them
    from repart.partitioning.algorithms.builder import ALGORITHMS as ALGORITHMS
    from repart.partitioning.algorithms.builder import BuildReport as BuildReport
    from repart.partitioning.algorithms.builder import BuildResult as BuildResult
    from repart.partitioning.algorithms.builder import build as build
    from repart.partitioning.algorithms.builder import initial_function as initial_function
    from repart.partitioning.algorithms.problem import BuildParams as BuildParams
    from repart.partitioning.consistent import ConsistentSpec as ConsistentSpec
    from repart.partitioning.frequency import FrequencyEstimate as FrequencyEstimate
    from repart.partitioning.frequency import LossyCounter as LossyCounter
    from repart.partitioning.frequency import SlidingWindow as SlidingWindow
    from repart.partitioning.function import PartitionFunction as PartitionFunction
    from repart.partitioning.resources import Resources as Resources

# Each public name and the module that defines it.
_EXPORTS = {
    "ALGORITHMS": "repart.partitioning.algorithms.builder",
    "BuildReport": "repart.partitioning.algorithms.builder",
    "BuildResult": "repart.partitioning.algorithms.builder",
    "build": "repart.partitioning.algorithms.builder",
    "initial_function": "repart.partitioning.algorithms.builder",
    "BuildParams": "repart.partitioning.algorithms.problem",
    "ConsistentSpec": "repart.partitioning.consistent",
    "FrequencyEstimate": "repart.partitioning.frequency",
    "LossyCounter": "repart.partitioning.frequency",
    "SlidingWindow": "repart.partitioning.frequency",
    "PartitionFunction": "repart.partitioning.function",
    "Resources": "repart.partitioning.resources",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_attributes(__name__, _EXPORTS, globals())
