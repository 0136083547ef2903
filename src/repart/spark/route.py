"""Routing rows to channels inside the JVM: ``route`` and ``partition``.

``route`` adds the channel ``p(key) = E[key] if key in E else T'[slot(key)]`` of every row
as a column built from Spark SQL expressions only, so no row ever crosses into Python. The hash and the
slot ``xxhash64(key) >> (64 - S)`` come from ``repart.spark.keys``; the lookup is three constants:

- ``T''``: the routing table ``T'`` (2^S channels, slot overrides folded in) in which every slot that
  holds a *routing exception* is replaced by ``-(g + 1)``, g the index of the slot's exception group;
- per group g, the exceptions' keys and ``[T'[slot], channel of key 1, channel of key 2, ...]``.

A routing exception is an explicit key whose channel is not ``T'[slot(key)]``; the other explicit keys
route the same without E, so they are dropped. A row reads ``e = T''[slot]``; ``e >= 0`` is its
channel, else ``array_position`` of the key among its group's keys (0 when absent) indexes the group's
channels, the fallback ``T'[slot]`` first. Every step is O(1) whatever the size of E (a group holds
about |E| / 2^S keys), and a null key goes to channel 0 (``xxhash64`` of null is the seed, not a slot).

Each constant is written as one JSON string literal parsed by ``from_json``, which the optimizer folds
into a single array constant. The constants travel in the serialized plan, which Spark ships to each
executor once per stage as a broadcast of the task binary; building and planning them costs the
driver about 0.06 s per query at S = 16 (measured on a 1,000-row batch). Measured on the 10M-row benchmark
(benchmarks/spark_route.py, docs/results/spark-route.txt: Zipf str keys, N = 32, S = 16, local[2] on a
shared machine, round-robin medians of noop writes), against a bare slot column at 0.93 s:

- these constants: 0.85 s with 86 explicit keys, 1.62 s with 5,000;
- ``E`` as a broadcast hash join on the key: 2.52 s and 3.44 s; ``E`` and ``T'`` as broadcast hash
  joins (on key, on slot): 2.04 s and 4.23 s.

Two other options were rejected in exploratory runs. ``F.lit`` of a Python list builds one
expression per entry: analysing the 65,536 of ``T'`` took 19.5 s. ``E`` as a map literal read with
``try_element_at`` is fast only from ``spark.sql.optimizer.mapLookupHashThreshold`` entries on (1,000
by default), below which Spark 4.3 scans a constant map linearly for every row: on 5M rows it took
0.69 s with 1,100 explicit keys but 9.4 s with 900 and 2.1 s with 100, where the slot groups took
0.56-0.73 s for 0 to 5,000 explicit keys.

One caveat: Spark evaluates a projection over a ``LocalRelation`` (small local data, e.g. a DataFrame
made from a pandas or Arrow table) on the driver at planning time, row by row and before constant
folding (the optimizer rule ConvertToLocalRelation), which parses the constants once per row.
``repart.spark.session.spark_session`` sets ``spark.sql.execution.arrow.localRelationThreshold=0`` so
such DataFrames are RDD-backed; data read from files or streams is never a LocalRelation.

A ``SplitFunction`` routes through the same lookup with its home function: each split
key is a routing exception of its slot whose "channel" is a negative code naming the key's alias table,
and a row with a negative code picks among the key's candidates by a hash of the row
(``repart.spark.split_route``). A function without split keys routes exactly as its home.

``partition`` then hands the channel to ``DataFrame.repartitionById``: one shuffle, after which Spark
partition i holds exactly the rows of channel i.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from repart.errors import InvalidInput
from repart.partitioning.domain import Key, KeyType
from repart.partitioning.function import PartitionFunction
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.partitioning.routing import RoutingFunction
from repart.partitioning.split.function import SplitFunction
from repart.spark.constants import constant
from repart.spark.keys import KeyColumn, key_column
from repart.spark.split_route import alias_layout, route_split, row_columns, row_hash

DEFAULT_CHANNEL_COL = "channel"
_KEY_TYPES = {"str": "string", "int": "bigint"}


def route(
    df: DataFrame,
    key_col: str,
    version: RoutingFunction,
    *,
    channel_col: str = DEFAULT_CHANNEL_COL,
    row_cols: Sequence[str] | None = None,
) -> DataFrame:
    """``df`` with an int column ``channel_col`` holding ``version``'s channel of each row.

    The channel is computed by JVM-native expressions (no Python UDF; see the module docstring), so a
    row's channel equals ``version.lookup(key)`` for a ``PartitionFunction``, and
    ``version.lookup(key, xxhash64(*row_cols))`` for a ``SplitFunction``: the row hash
    is Spark's ``xxhash64`` of ``row_cols`` (default: every column of ``df`` but ``key_col``, which is
    the same in all of a split key's rows; the key column alone if it is the only one), so the same
    rows route the same in every run and retry; rows that are equal in every hashed column go to one
    candidate.
    ``row_cols`` only matters for split keys; when given it is checked for every version (so that a
    job written for a preserve region keeps working after a split); the default is checked only where
    it is used (a DataFrame with a map column routes by a preserving function as before). A null key
    gets channel 0. InvalidInput if ``key_col`` is missing, of a type repart does not hash or of another
    key type than ``version``'s, if ``df`` already has a column ``channel_col``, or if ``row_cols``
    is not a non-empty list of distinct hashable columns of ``df``.
    """
    if not isinstance(version, PartitionFunction | SplitFunction):  # an argument check, not dispatch
        raise InvalidInput(
            "version", f"must be a PartitionFunction or a SplitFunction, got {type(version).__name__}"
        )
    key = key_column(df, key_col, expected=version.key_type)
    _check_new_column(df, channel_col)
    chosen = None if row_cols is None else row_columns(df, row_cols, key.name)
    if not version.split:  # every row by its key's home channel (a PartitionFunction is its own home)
        return df.withColumn(channel_col, _channel(key, version.home))
    # Split keys' rows go by their alias tables, which only a SplitFunction has.
    assert isinstance(version, SplitFunction)
    layout = alias_layout(version)
    code = _channel(key, version.home, layout.codes, version.key_type)
    hashed = row_hash(chosen or row_columns(df, None, key.name))
    return route_split(df, code, hashed, layout, channel_col=channel_col)


def partition(
    df: DataFrame,
    key_col: str,
    version: RoutingFunction,
    *,
    channel_col: str = DEFAULT_CHANNEL_COL,
    row_cols: Sequence[str] | None = None,
) -> DataFrame:
    """``route(df, ...)`` shuffled so that Spark partition i holds exactly the rows of channel i.

    The result has ``version.n_channels`` partitions, empty ones included, and keeps the
    ``channel_col`` column: the code that consumes a partition (the keyed state store, a sink writing
    per channel) reads its channel from the rows instead of trusting the partition index. Errors as
    in ``route``.
    """
    routed = route(df, key_col, version, channel_col=channel_col, row_cols=row_cols)
    return routed.repartitionById(version.n_channels, channel_col)


def _channel(
    key: KeyColumn,
    function: PartitionFunction,
    marked: Mapping[Key, int] | None = None,
    key_type: KeyType | None = None,
) -> Column:
    """The channel of ``key`` under ``function`` as an int column expression (0 for a null key), or
    the code ``marked[key]`` (negative) for a marked key of type ``key_type``.

    A null key has a null slot, hence a null entry, which the final ``coalesce`` turns into 0. The
    entry is the first condition of the ``CASE``, evaluated for every row, so whole-stage codegen
    computes it (and the hash) once per row although the expression names it three times.
    """
    table, keys, channels = _routing_literals(function, marked or {}, key_type or function.key_type)
    slot = F.when(~key.is_null, key.slot(function.slot_bits).cast("int"))
    entry = F.get(constant(table, "array<int>"), slot)
    if keys:  # a negative entry -(g + 1) sends the key to slot group g of the explicit map
        group = -entry - 1
        key_groups = constant(keys, f"array<array<{_KEY_TYPES[key.key_type]}>>")
        position = F.array_position(F.get(key_groups, group), key.value).cast("int")
        explicit = F.get(F.get(constant(channels, "array<array<int>>"), group), position)
        entry = F.when(entry >= 0, entry).otherwise(explicit)
    return F.coalesce(entry, F.lit(0))


def _routing_literals(
    function: PartitionFunction, marked: Mapping[Key, int], key_type: KeyType | None
) -> tuple[list[int], list[list[Key]], list[list[int]]]:
    """``T'`` with each slot that holds a routing exception replaced by ``-(g + 1)``, and per group g the
    exceptions' keys and ``[T'[slot], channel of key 1, channel of key 2, ...]``.

    The exceptions are the explicit keys whose channel is not ``T'[slot(key)]`` (the others route the
    same without E) and every key of ``marked``, whose "channel" is its code.
    """
    table = function.table.tolist()
    routed = {key: channel for key, channel in function.explicit.items() if key not in marked}
    if not (routed or marked) or key_type is None:
        return table, [], []
    listed = [*routed, *marked]
    slots = slots_of_hashes(hash_keys(listed, key_type), function.slot_bits).tolist()
    by_slot: dict[int, dict[Key, int]] = {}
    for key, slot in zip(listed, slots, strict=True):
        channel = marked[key] if key in marked else routed[key]
        if key in marked or channel != table[slot]:
            by_slot.setdefault(slot, {})[key] = channel
    keys, channels = [], []
    for group, (slot, exceptions) in enumerate(sorted(by_slot.items())):
        keys.append(list(exceptions))
        channels.append([table[slot], *exceptions.values()])
        table[slot] = -(group + 1)
    return table, keys, channels


def _check_new_column(df: DataFrame, channel_col: str) -> None:
    """InvalidInput unless ``channel_col`` is a column name ``df`` does not have yet."""
    if not isinstance(channel_col, str) or not channel_col:
        raise InvalidInput("channel_col", f"must be a column name, got {channel_col!r}")
    case_sensitive = df.sparkSession.conf.get("spark.sql.caseSensitive") == "true"
    fold = (lambda name: name) if case_sensitive else str.lower
    if any(fold(name) == fold(channel_col) for name in df.columns):
        raise InvalidInput(
            "channel_col",
            f"must be a new column: the DataFrame already has a column {channel_col!r}; "
            "pass another channel_col or drop the column first",
        )
