"""The job side: what a Spark job does with repart. The only package that imports pyspark.

- ``StatefulJob`` is the one object a stateful job needs: ``process(df, batch_id)`` for batch jobs,
  ``foreach_batch`` for Structured Streaming's ``foreachBatch``, ``state()`` as a DataFrame;
- ``observe`` emits a snapshot of a batch's key frequencies for the controller;
- ``partition`` places rows on channels with JVM-native expressions.

The names load their module on first use, so that importing one module of the package does not load
the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from repart.lazy import lazy_attributes

if TYPE_CHECKING:  # the names, for type checkers and readers; at run time __getattr__ loads them
    from repart.spark.job import BatchResult as BatchResult
    from repart.spark.job import StatefulJob as StatefulJob
    from repart.spark.observe import Window as Window
    from repart.spark.observe import observe as observe
    from repart.spark.route import partition as partition

# Each public name and the module that defines it.
_EXPORTS = {
    "BatchResult": "repart.spark.job",
    "StatefulJob": "repart.spark.job",
    "Window": "repart.spark.observe",
    "observe": "repart.spark.observe",
    "partition": "repart.spark.route",
}
__all__ = list(_EXPORTS)
__getattr__ = lazy_attributes(__name__, _EXPORTS, globals())
