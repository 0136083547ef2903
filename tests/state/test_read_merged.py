"""read_merged and the merge functions (DESIGN §11.3): one row per key, checked against a plain
aggregation of every input row in pure Python.

The stores are built without Spark: each input row gets a random 64-bit row hash, goes to
``SplitFunction.lookup(key, row_hash)``, and each channel keeps one partial row per key it received,
as ``update_state`` leaves them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from repart.errors import InvalidInput
from repart.partitioning import PartitionFunction
from repart.partitioning.domain import Key, KeyType
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.protocol.merge import MergeSpec
from repart.state.merge import merge_function, merged
from repart.state.store import StateStore
from tests.factories import PARTIAL_STATE_MERGE, REGION, partial_state_schema

N = 6
MERGE = {"volume": "sum", "trades": "sum", "notional": "sum", "low": "min", "high": "max", "venue": "max"}


def trades(key_type: KeyType, count: int = 20_000, seed: int = 0) -> list[dict[str, Any]]:
    """Input rows: a key (Zipf, so a few keys carry most rows), a volume, a price (sometimes null), a
    venue (sometimes null) and the row's 64-bit hash."""
    rng = np.random.default_rng(seed)
    ranks = (rng.zipf(1.4, count) % 3_000).tolist()
    prices = np.round(rng.random(count) * 100, 2).tolist()
    made = []
    for index, rank in enumerate(ranks):
        made.append(
            {
                "key": f"sym-{rank}" if key_type == "str" else rank * 7919 - 10**6,
                "volume": int(rng.integers(1, 1_000)),
                "price": None if index % 97 == 0 else prices[index],
                "venue": None if index % 13 == 0 else f"v{index % 5}",
                "row_hash": int(rng.integers(-(2**63), 2**63 - 1)),
            }
        )
    return made


def split_version(key_type: KeyType, rows: Sequence[dict[str, Any]]) -> SplitFunction:
    """The 8 most frequent keys split over 2 to N channels, the rest at home."""
    counts: dict[Key, int] = {}
    for row in rows:
        counts[row["key"]] = counts.get(row["key"], 0) + 1
    hot = sorted(counts, key=counts.__getitem__, reverse=True)[:8]
    home = PartitionFunction(n_channels=N, key_type=key_type, slot_bits=10, explicit={hot[0]: 2})
    split = {}
    for index, key in enumerate(hot):
        d = 2 + index % (N - 1)
        others = [channel for channel in range(N) if channel != home.lookup(key)][: d - 1]
        split[key] = SplitEntry((home.lookup(key), *others), tuple([1 / d] * d))
    return SplitFunction(home, split)


def aggregate(rows: Sequence[dict[str, Any]], key_type: KeyType) -> pa.Table:
    """One state row per key of ``rows``, aggregated in pure Python (the oracle, and the partials)."""
    state: dict[Key, dict[str, Any]] = {}
    for row in rows:
        entry = state.setdefault(
            row["key"], {"volume": 0, "trades": 0, "notional": 0.0, "low": None, "high": None, "venue": None}
        )
        entry["volume"] += row["volume"]
        entry["trades"] += 1
        if row["price"] is not None:
            entry["notional"] += row["price"] * row["volume"]
            entry["low"] = row["price"] if entry["low"] is None else min(entry["low"], row["price"])
            entry["high"] = row["price"] if entry["high"] is None else max(entry["high"], row["price"])
        if row["venue"] is not None:
            entry["venue"] = row["venue"] if entry["venue"] is None else max(entry["venue"], row["venue"])
    columns: dict[str, list[Any]] = {name: [] for name in partial_state_schema(key_type).names}
    for key, entry in state.items():
        columns["key"].append(key)
        for name, value in entry.items():
            columns[name].append(value)
    return pa.table(columns, schema=partial_state_schema(key_type))


def split_store(
    root: Path, key_type: KeyType, rows: Sequence[dict[str, Any]], merge: MergeSpec | None = None
) -> tuple[StateStore, SplitFunction]:
    """A store laid out by a split function; each channel holds the partial rows routed to it (as base
    files). With ``merge`` the store is mergeable, with that merge of its own."""
    version = split_version(key_type, rows)
    store = StateStore.create(
        root,
        region=REGION,
        version=1,
        function_digest=version.digest,
        n_channels=N,
        slot_bits=version.slot_bits,
        key_type=key_type,
        key_col="key",
        schema=partial_state_schema(key_type),
        slot_groups=4,
        merge=merge,
    )
    by_channel: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_channel.setdefault(version.lookup(row["key"], row["row_hash"]), []).append(row)
    replaced = {
        channel: store.write(channel, aggregate(routed, key_type), kind="base")
        for channel, routed in by_channel.items()
    }
    return store.commit(replaced, version=1, function_digest=version.digest, n_channels=N), version


def by_key(table: pa.Table) -> dict[Key, dict[str, Any]]:
    rows = table.to_pylist()
    assert len({row["key"] for row in rows}) == len(rows)
    return {row.pop("key"): row for row in rows}


def assert_equal_state(got: pa.Table, expected: pa.Table) -> None:
    """Same keys, same values in every column (sums of floats to a relative 1e-9)."""
    assert got.schema == expected.schema
    got_rows, expected_rows = by_key(got), by_key(expected)
    assert got_rows.keys() == expected_rows.keys()
    for key, row in expected_rows.items():
        assert got_rows[key]["notional"] == pytest.approx(row.pop("notional"), rel=1e-9), key
        assert {name: value for name, value in got_rows[key].items() if name != "notional"} == row, key


@pytest.mark.parametrize("key_type", ["str", "int"])
def test_read_merged_equals_a_plain_aggregation_of_every_input_row(tmp_path: Path, key_type: KeyType) -> None:
    rows = trades(key_type, seed=1)
    store, version = split_store(tmp_path / "state", key_type, rows)
    partials = store.read()
    channels: dict[Key, set[int]] = {}
    for key, channel in zip(partials["key"].to_pylist(), partials["channel"].to_pylist(), strict=True):
        assert channel in version.candidates(key)
        channels.setdefault(key, set()).add(channel)
    assert all(len(channels[key]) >= 2 for key in version.split)  # split keys are partial on several
    assert partials.num_rows > len(channels)
    oracle = aggregate(rows, key_type)

    assert_equal_state(store.read_merged(PARTIAL_STATE_MERGE), oracle)
    assert_equal_state(
        store.read_merged(merge_function(PARTIAL_STATE_MERGE)), oracle
    )  # a function: checked, same result
    assert_equal_state(StateStore.open(store.url).read_merged(PARTIAL_STATE_MERGE), oracle)
    counted = MergeSpec.parse(PARTIAL_STATE_MERGE.to_text().replace("trades=sum", "trades=count"))
    assert counted.columns["trades"] == "count"
    assert_equal_state(store.read_merged(counted), oracle)  # a count's partials merge by their sum


def negated_volume(table: pa.Table) -> pa.Table:
    """``table`` with its volumes negated: a merge of its own, told apart from the store's."""
    return table.set_column(table.schema.get_field_index("volume"), "volume", pc.negate(table["volume"]))


@pytest.mark.parametrize("key_type", ["str", "int"])
def test_a_mergeable_store_merges_by_its_own_merge(tmp_path: Path, key_type: KeyType) -> None:
    rows = trades(key_type, count=5_000, seed=2)
    store, _ = split_store(tmp_path / "state", key_type, rows, PARTIAL_STATE_MERGE)
    assert store.merge == dict(PARTIAL_STATE_MERGE.columns)
    oracle = aggregate(rows, key_type)
    assert_equal_state(store.read_merged(), oracle)
    assert_equal_state(StateStore.open(store.url).read_merged(), oracle)

    def negated(table: pa.Table) -> pa.Table:
        return negated_volume(merge_function(PARTIAL_STATE_MERGE)(table))

    assert_equal_state(store.read_merged(negated), negated_volume(oracle))  # a merge given is the one used


def test_a_general_store_needs_a_merge_to_read_merged(tmp_path: Path) -> None:
    store, _ = split_store(tmp_path / "state", "str", trades("str", count=500, seed=4))
    assert store.merge is None
    with pytest.raises(InvalidInput, match=r"^merge must be given: the store is not mergeable") as error:
        store.read_merged()
    assert error.value.field == "merge"


def test_a_key_with_one_row_is_kept_as_it_is() -> None:
    rows = [
        {"key": "solo", "volume": 5, "price": None, "venue": None, "row_hash": 1},
        {"key": "pair", "volume": 2, "price": 3.5, "venue": "v1", "row_hash": 2},
    ]
    table = aggregate(rows, "str")
    assert merge_function(PARTIAL_STATE_MERGE)(table).sort_by("key").equals(table.sort_by("key"))
    empty = partial_state_schema("str").empty_table()
    assert merge_function(PARTIAL_STATE_MERGE)(empty).equals(empty)


def test_merge_function_finds_the_key_as_the_one_column_the_spec_does_not_name() -> None:
    partials = pa.table({"sym": ["a", "b", "a", "a"], "n": pa.array([1, 2, 3, None], pa.int16())})
    result = merge_function(MergeSpec.parse("n=sum"))(partials)
    assert result.schema == partials.schema
    assert dict(zip(result["sym"].to_pylist(), result["n"].to_pylist(), strict=True)) == {"a": 4, "b": 2}
    with pytest.raises(
        InvalidInput, match=r"merge must name every state column but the key .*\['sym', 'x'\]"
    ):
        merge_function(MergeSpec.parse("n=sum"))(partials.append_column("x", pa.array([1, 2, 3, 4])))
    with pytest.raises(InvalidInput, match=r"merge must name state columns .* it names \['volume'\]"):
        merge_function(MergeSpec.parse("n=sum,volume=sum"))(partials)


@pytest.mark.parametrize(
    ("spec", "table", "message"),
    [
        (
            "n=sum,s=sum",
            pa.table({"k": ["a", "a"], "n": [1, 2], "s": ["x", "y"]}),
            r"merge must apply to the state's column types",
        ),
        (
            "n=sum",
            pa.table({"k": ["a", "a"], "n": pa.array([2**31 - 1, 1], pa.int32())}),
            r"merge must fit the column's type: the sum of column 'n' does not fit int32",
        ),
        (
            "k=max,n=sum",
            pa.table({"k": ["a", "a"], "n": [1, 2]}),
            r"merge must not merge the key column 'k'",
        ),
    ],
)
def test_a_spec_that_does_not_fit_the_state_is_invalid_input(
    spec: str, table: pa.Table, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message) as error:
        merged(table, MergeSpec.parse(spec), "k")
    assert error.value.field == "merge"


def good(table: pa.Table) -> pa.Table:
    return merge_function(PARTIAL_STATE_MERGE)(table)


BAD_MERGES: list[tuple[str, Callable[[pa.Table], Any], str]] = [
    ("another schema", lambda table: good(table).drop_columns(["venue"]), r"must return the state's schema"),
    (
        "another type",
        lambda table: good(table).set_column(2, "trades", pc.cast(good(table)["trades"], pa.int64())),
        r"must return the state's schema .*trades: int32.*trades: int64",
    ),
    (
        "several rows for a key",
        lambda table: pa.concat_tables([good(table), good(table).slice(0, 1)]),
        r"must return one row per key: it returned 2 rows for key",
    ),
    ("the partials themselves", lambda table: table, r"must return one row per key"),
    ("a dropped key", lambda table: good(table).slice(1), r"must return a row for every key it was given"),
    (
        "an invented key",
        lambda table: pa.concat_tables(
            [good(table).slice(1), good(table).slice(0, 1).set_column(0, "key", pa.array(["zz"]))]
        ),
        r"must return the keys it was given: it returned key 'zz'",
    ),
    ("not a table", lambda table: good(table).to_pylist(), r"must return a pyarrow Table, got list"),
]


@pytest.mark.parametrize(("name", "merge", "message"), BAD_MERGES, ids=[case[0] for case in BAD_MERGES])
def test_a_merge_function_that_breaks_the_contract_is_invalid_input(
    tmp_path: Path, name: str, merge: Callable[[pa.Table], pa.Table], message: str
) -> None:
    store, _ = split_store(tmp_path / "state", "str", trades("str", count=2_000, seed=3))
    with pytest.raises(InvalidInput, match=message) as error:
        store.read_merged(merge)
    assert error.value.field == "merge"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (None, "merge must be a MergeSpec"),
        ("volume=sum", "merge must be a MergeSpec"),  # the text: parse it with MergeSpec.parse
        ({"volume": "sum"}, "merge must be a MergeSpec"),
        (
            SimpleNamespace(columns={"volume": "avg"}),
            r"merge must merge each column by one of \['sum', 'count', 'min', 'max'\]",
        ),
    ],
)
def test_merge_must_be_a_spec_or_a_function(bad: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as error:
        merged(aggregate(trades("str", count=50), "str"), bad, "key")  # type: ignore[arg-type]
    assert error.value.field == "merge"
