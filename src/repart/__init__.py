"""repart: elastic repartitioning controller for stateful Spark pipelines."""

# The one place the version is written: pyproject.toml reads it from here (``tool.setuptools.dynamic``).
__version__ = "0.1.0"
