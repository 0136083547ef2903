"""Routing constants as single folded array constants.

``route`` and its split part hold their lookup tables (the routing table, the exception groups, the
split keys' alias tables) as constants of the query plan. Each is written as one JSON
string literal parsed by ``from_json``, which the optimizer folds into a single array constant: an
``F.lit`` of a Python list would build one expression per entry instead (analysing the 65,536 entries
of a routing table that way took 19.5 s). ``repart.spark.route``'s docstring has the measurements.
"""

from __future__ import annotations

import json

from pyspark.sql import Column
from pyspark.sql import functions as F


def constant(value: object, spark_type: str) -> Column:
    """``value`` as one constant of ``spark_type``: a JSON string literal that the optimizer folds."""
    return F.from_json(F.lit(json.dumps(value, ensure_ascii=False, separators=(",", ":"))), spark_type)
