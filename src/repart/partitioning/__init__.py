"""Partition functions and how they are built (Gedik; DESIGN §1–§5). No I/O, no Spark, no database.

The names most programs need are re-exported here.
"""

from repart.partitioning.algorithms.builder import (
    ALGORITHMS,
    BuildReport,
    BuildResult,
    build,
    initial_function,
)
from repart.partitioning.algorithms.problem import BuildParams
from repart.partitioning.consistent import ConsistentSpec
from repart.partitioning.frequency import FrequencyEstimate, LossyCounter, SlidingWindow
from repart.partitioning.function import PartitionFunction
from repart.partitioning.resources import Resources

__all__ = [
    "ALGORITHMS",
    "BuildParams",
    "BuildReport",
    "BuildResult",
    "ConsistentSpec",
    "FrequencyEstimate",
    "LossyCounter",
    "PartitionFunction",
    "Resources",
    "SlidingWindow",
    "build",
    "initial_function",
]
