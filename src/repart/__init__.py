"""repart: elastic repartitioning controller for stateful Spark pipelines."""

__version__ = "0.1.0"
