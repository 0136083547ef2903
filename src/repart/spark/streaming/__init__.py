"""Spark-managed state: repart as the controller of a stateful Structured Streaming query's state
partition count (``ManagedQuery``), its measurements (``measure``) and Spark's offline repartition of a
stopped query's checkpoint (``checkpoint``)."""

from repart.spark.streaming.managed import ManagedQuery

__all__ = ["ManagedQuery"]
