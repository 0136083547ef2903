"""Builders shared by the tests: snapshots, regions, versions and plans, row counts, state stores
(DESIGN §12 tests). No test module imports another; what two tests share is built here.

Every snapshot a test needs is built here as a ``Snapshot`` (``repart.protocol.snapshot``) and turned
into its document with ``to_document``: no test writes a snapshot document by hand, except to break
one on purpose (``snapshot_document(**changes)`` replaces top-level fields of a valid one).

Two kinds of region: ``add_region`` (string keys, 65,536 slots, the storage tests' ``small_snapshot``
windows) and ``add_zipf_region`` (integer keys, ``SMALL_SLOT_BITS`` slots, the controller tests'
``zipf_snapshot`` windows, whose channel measurements set the demand of the target-utilization
policy).
"""

from __future__ import annotations

import base64
import json
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import Engine, func, inspect, select
from sqlalchemy.orm import Session

import repart.state.files as files_module
from repart.controller import service
from repart.controller.window import merge_snapshots
from repart.migration import MigrationPlan, plan_migration
from repart.partitioning import ConsistentSpec, LossyCounter, PartitionFunction, build, initial_function
from repart.partitioning.documents import canonical_json, sha256_hex
from repart.partitioning.domain import MAX_CHANNELS, Key, KeyType
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.hashing import hash_int64_array, hash_keys, slots_of_hashes
from repart.partitioning.split.function import SplitFunction
from repart.protocol.merge import MergeSpec
from repart.protocol.snapshot import ChannelMeasurement, CounterEntry, Snapshot
from repart.state.store import FileEntry, StateStore
from repart.storage import (
    NewEvent,
    NewVersion,
    RegionConfig,
    activate,
    ingest_snapshot,
    list_events,
    list_plans,
    list_versions,
    make_engine,
    models,
    run_in_transaction,
    set_plan_status,
    version_function,
)
from repart.storage.models import Base

REGION = "trades"
START = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW = timedelta(minutes=1)
# Slot bits of the Zipf regions and of the state stores built here: few slots keep the tests fast.
SMALL_SLOT_BITS = 10
# Keys of a Zipf window are 0 .. ZIPF_DOMAIN - 1.
ZIPF_DOMAIN = 2000


def window_times(seq: int, start: datetime = START, length: timedelta = WINDOW) -> tuple[datetime, datetime]:
    """The start and end of window ``seq``: back to back windows of ``length`` from ``start``."""
    return start + seq * length, start + (seq + 1) * length


def counted_snapshot(
    region: str,
    seq: int,
    keys: Sequence[Key] | np.ndarray[Any, Any],
    *,
    key_type: KeyType = "str",
    epsilon: float = 0.001,
    slot_bits: int = 16,
    slots: bool = False,
    channels: Sequence[ChannelMeasurement] | None = None,
    version: int | None = None,
    batch: int | None = None,
) -> Snapshot:
    """The snapshot of window ``seq`` of a real lossy counter run over ``keys`` (with the exact slot
    counts when ``slots``)."""
    counter = LossyCounter(epsilon, key_type)
    counter.update(keys)
    entries, counts, deltas = counter.entries()
    items = tuple(
        CounterEntry(key, int(count), int(delta))
        for key, count, delta in zip(entries.tolist(), counts.tolist(), deltas.tolist(), strict=True)
    )
    slot_counts = None
    if slots:
        hashes = hash_keys(keys if isinstance(keys, np.ndarray) else list(keys))
        filled, filled_counts = np.unique(slots_of_hashes(hashes, slot_bits), return_counts=True)
        slot_counts = tuple((int(s), int(c)) for s, c in zip(filled, filled_counts, strict=True))
    start, end = window_times(seq)
    return Snapshot(
        region=region,
        seq=seq,
        window_start=start,
        window_end=end,
        tuples=counter.n,
        distinct_estimate=max(
            len(set(keys if not isinstance(keys, np.ndarray) else keys.tolist())), len(items)
        ),
        epsilon=counter.epsilon,
        key_type=key_type,
        items=items,
        slot_bits=slot_bits,
        slots=slot_counts,
        version=version,
        channels=None if channels is None else tuple(channels),
        batch=batch,
    )


def small_snapshot(**changes: Any) -> Snapshot:
    """A small valid snapshot of region ``trades`` (two items, two slots, one channel) with fields
    replaced by ``changes``."""
    start, end = window_times(1)
    fields: dict[str, Any] = {
        "region": "trades",
        "seq": 1,
        "window_start": start,
        "window_end": end,
        "tuples": 100,
        "distinct_estimate": 10,
        "epsilon": 0.01,
        "key_type": "str",
        "items": (CounterEntry("AAPL", 40, 0), CounterEntry("MSFT", 30, 1)),
        "slot_bits": 16,
        "slots": ((5, 60), (4464, 40)),
        "channels": (ChannelMeasurement(0, 60, 1.5, 1024),),
    }
    fields.update(changes)
    return Snapshot(**fields)


def snapshot_document(**changes: Any) -> dict[str, Any]:
    """``small_snapshot()``'s document with top-level fields replaced by ``changes`` (to break it)."""
    document = small_snapshot().to_document()
    document.update(changes)
    return document


def zipf_keys(seed: int, length: int, exponent: float) -> np.ndarray[Any, np.dtype[np.int64]]:
    """``length`` keys 0 .. ZIPF_DOMAIN - 1 drawn with weights 1/(rank + 1)^exponent."""
    weights = 1.0 / np.arange(1, ZIPF_DOMAIN + 1) ** exponent
    rng = np.random.default_rng(seed)
    return rng.choice(ZIPF_DOMAIN, size=length, p=weights / weights.sum()).astype(np.int64)


def zipf_snapshot(
    seq: int, *, n_channels: int, demand: float, u: float = 0.5, exponent: float = 1.0, length: int = 20_000
) -> Snapshot:
    """Window ``seq`` (one minute) of region ``REGION`` (as ``add_zipf_region`` creates it): a Zipf
    stream seeded by ``seq``, counted by ``LossyCounter`` (ε = 0.001), with its exact slot counts and
    the measurements of ``n_channels`` channels.

    The channels' busy time is chosen so that the target-utilization policy at ``u``, with the window's
    minute as the batch budget (``batch_interval_seconds=60``), computes a demand of ``demand``
    channels: each channel is busy ``demand · u · 60 / N`` seconds, so demand = N · utilization / u.
    """
    busy = demand * u * WINDOW.total_seconds() / n_channels
    per_channel = np.full(n_channels, length // n_channels)
    per_channel[0] += length - per_channel.sum()
    channels = [ChannelMeasurement(i, int(t), busy, 1000) for i, t in enumerate(per_channel)]
    keys = zipf_keys(seq, length, exponent)
    return counted_snapshot(
        REGION, seq, keys, key_type="int", slot_bits=SMALL_SLOT_BITS, slots=True, channels=channels
    )


def add_region(database: Engine, name: str = REGION, key_type: str = "str", **config: Any) -> None:
    """Create region ``name`` with a default configuration (4 channels, at most 16) and ``config`` (whose
    ``engine`` is the region's engine, ``repart`` or ``spark-state``)."""
    settings = {"n_channels_initial": 4, "max_channels": 16, **config}
    region = RegionConfig(key_type=key_type, **settings)
    run_in_transaction(database, lambda s: service.create_region(s, name, region))


def add_zipf_region(engine: Engine, **config: Any) -> None:
    """Create region ``REGION`` for ``zipf_snapshot`` windows: integer keys, ``SMALL_SLOT_BITS`` slots,
    2 channels, the default channel bounds, and ``config``."""
    defaults = {"n_channels_initial": 2, "max_channels": MAX_CHANNELS, "slot_bits": SMALL_SLOT_BITS}
    add_region(engine, REGION, "int", **(defaults | config))


def ingest(engine: Engine, *snapshots: Snapshot) -> None:
    """Ingest ``snapshots`` in order, each in its own transaction."""
    for snapshot in snapshots:
        run_in_transaction(engine, lambda session, s=snapshot: ingest_snapshot(session, s))


def ingest_skewed_window(engine: Engine, seq: int, n_channels: int = 4) -> None:
    """Ingest window ``seq`` of the Zipf region (``zipf_snapshot``, demand 1 on ``n_channels`` channels),
    its skew alternating (exponent 1.0 on odd ``seq``, 1.4 on even) so that each new window leaves the
    applied function out of balance again."""
    exponent = 1.0 if seq % 2 else 1.4
    ingest(engine, zipf_snapshot(seq, n_channels=n_channels, demand=1.0, exponent=exponent))


def row_counts(database: Engine | str) -> dict[str, int]:
    """The number of rows of every table of ``database`` (an engine or a URL) that it has: a database
    at an older schema revision lacks the newer tables."""
    engine = make_engine(database) if isinstance(database, str) else database
    try:
        present = set(inspect(engine).get_table_names())
        with Session(engine) as session:
            return {
                table.name: session.scalar(select(func.count()).select_from(table)) or 0
                for table in Base.metadata.sorted_tables
                if table.name in present
            }
    finally:
        if isinstance(database, str):
            engine.dispose()


def new_version(
    function: PartitionFunction, algorithm: str = "readj", parent: int | None = None
) -> NewVersion:
    """A ``NewVersion`` of ``function`` built by ``algorithm`` from version ``parent``."""
    return NewVersion(
        function_json=function.to_json(),
        digest=function.digest,
        n_channels=function.n_channels,
        algorithm=algorithm,
        report={"b": 1.05, "m": 0.1},
        parent_number=parent,
    )


def new_plan(source: PartitionFunction, target: PartitionFunction) -> MigrationPlan:
    """The migration plan from ``source`` to ``target`` under the estimate of ``small_snapshot()``."""
    return plan_migration(source, target, small_snapshot().to_estimate())


REBALANCE_EVENT = NewEvent(
    kind="activate", rule="rebalance", message="b above threshold", data={"b": 1.4, "threshold": 1.2}
)


def events(engine: Engine, region: str = REGION) -> list[models.Event]:
    """The region's events, newest first."""
    return run_in_transaction(engine, lambda session: list_events(session, region))


def versions(engine: Engine, region: str = REGION) -> list[models.Version]:
    """The region's versions, oldest first."""
    return run_in_transaction(engine, lambda session: list_versions(session, region))


def plans(engine: Engine, status: str | None = None, region: str = REGION) -> list[models.Plan]:
    """The region's plans (of ``status`` if given)."""
    return run_in_transaction(engine, lambda session: list_plans(session, region, status))


def window_max_mean_load(function: PartitionFunction, *snapshots: Snapshot) -> float:
    """max/mean load of ``function`` on the merged window of ``snapshots`` as the controller predicts
    it, computed another way. With slot counts: every slot's exact tuple count on its channel under the
    slot table, then each tracked key's estimated count moved from there to the channel ``function``
    maps it to (a lossy count never exceeds the true one, so no slot goes below zero). Without: the
    tracked keys' counts where ``function`` maps them, and the other tuples spread evenly over the
    slots."""
    estimate = merge_snapshots(snapshots)
    n = function.n_channels
    keys = list(estimate.keys)
    rows = np.bincount(function.lookup_many(keys), weights=estimate.counts, minlength=n)
    if estimate.slot_counts is None:
        untracked = estimate.total - float(estimate.counts.sum())
        rows += np.bincount(function.table, minlength=n) * untracked / function.table.size
    else:
        rows += np.bincount(function.table, weights=estimate.slot_counts, minlength=n)
        slot_channels = function.table[slots_of_hashes(hash_keys(keys), function.slot_bits)]
        rows -= np.bincount(slot_channels, weights=estimate.counts, minlength=n)
    return float(rows.max() / rows.mean())


def strip_max_mean_load(database: Engine | str, region: str = REGION) -> None:
    """Rewrite the region's events as a repart without max/mean load wrote them: no ``load_before``,
    ``predicted_load``, nor a candidate's ``predicted_load``."""
    engine = make_engine(database) if isinstance(database, str) else database
    try:
        with Session(engine) as session, session.begin():
            region_id = session.scalar(select(models.Region.id).where(models.Region.name == region))
            for event in session.scalars(select(models.Event).where(models.Event.region_id == region_id)):
                data = json.loads(event.data_json)
                data.pop("load_before", None)
                data.pop("predicted_load", None)
                for candidate in data.get("candidates") or []:
                    candidate.pop("predicted_load", None)
                event.data_json = json.dumps(data)
    finally:
        if isinstance(database, str):
            engine.dispose()


def assert_plans_route_like_functions(engine: Engine) -> None:
    """Every stored plan of the Zipf region sends each key from its source version's channel to its
    target version's (the plan's oracle is the two functions themselves)."""
    by_number = {version.number: version_function(version) for version in versions(engine)}
    keys = list(range(ZIPF_DOMAIN))
    slots = slots_of_hashes(hash_keys(np.array(keys, dtype=np.int64)), SMALL_SLOT_BITS).tolist()
    stored = plans(engine)
    assert stored
    for row in stored:
        plan = MigrationPlan.from_json(row.plan_json)
        a, b = by_number[row.from_version], by_number[row.to_version]
        assert (plan.source_digest, plan.target_digest) == (a.digest, b.digest)
        before, after = a.lookup_many(keys), b.lookup_many(keys)
        routed = [plan.destination(k, s, int(c)) for k, s, c in zip(keys, slots, before, strict=True)]
        assert routed == after.tolist()


def skewed_keys(seed: int = 1, count: int = 20_000) -> list[str]:
    """Zipf-like ticker keys: a few hot, many cold."""
    rng = np.random.default_rng(seed)
    return [f"K{int(k)}" for k in rng.zipf(1.3, count) % 500]


def counter_document(region: str, seq: int, keys: Sequence[Key], **changes: Any) -> dict[str, Any]:
    """The document of ``counted_snapshot(region, seq, keys)`` with top-level fields replaced by
    ``changes`` (to break it)."""
    document = counted_snapshot(region, seq, keys).to_document()
    document.update(changes)
    return document


def add_versions(db: str, region: str, channels: tuple[int, ...]) -> list[PartitionFunction]:
    """Activate one version per entry of ``channels`` (built with redist from the previous one), each
    later one with a plan from the first, the applied one; returns the functions. The last plan is
    pending, the earlier ones superseded."""
    estimate = counted_snapshot(region, 0, skewed_keys()).to_estimate()
    event = NewEvent(kind="activate", rule="test", message="built by the test")
    functions: list[PartitionFunction] = []
    previous = initial_function(channels[0], "str", 16)
    engine = make_engine(db)
    try:
        for n in channels:
            result = build(previous, estimate, n, algorithm="redist")
            plan = plan_migration(functions[0], result.function, estimate) if functions else None
            version = NewVersion(
                function_json=result.function.to_json(),
                digest=result.function.digest,
                n_channels=result.function.n_channels,
                algorithm="redist",
                report={
                    "predicted_b": result.report.predicted_b,
                    "explicit_size": len(result.function.explicit),
                },
            )
            with Session(engine) as session, session.begin():
                activate(session, region, version, plan, event)
            functions.append(result.function)
            previous = result.function
    finally:
        engine.dispose()
    return functions


def state_table(n: int, key_type: KeyType, seed: int = 0) -> pa.Table:
    """A state of ``n`` distinct keys (``ticker-<i>`` or scattered ints) with int, float and string
    columns holding nulls."""
    rng = np.random.default_rng(seed)
    keys: Any = [f"ticker-{i}" for i in range(n)] if key_type == "str" else rng.permutation(n) * 7919 - 10**6
    volume = rng.integers(0, 10**6, n)
    notional = pa.array(rng.random(n) * 1e6).to_pylist()
    notional[::17] = [None] * len(notional[::17])
    return pa.table(
        {
            "key": pa.array(keys, pa.string() if key_type == "str" else pa.int64()),
            "volume": pa.array(volume, pa.int64()),
            "notional": pa.array(notional, pa.float64()),
            "venue": pa.array([f"v{i % 5}" if i % 11 else None for i in range(n)], pa.string()),
        }
    )


def empty_store(
    root: Path | str,
    function: PartitionFunction,
    schema: pa.Schema,
    *,
    key_col: str = "key",
    slot_groups: int = 16,
    version: int = 1,
    merge: Mapping[str, str] | None = None,
    options: Mapping[str, str] | None = None,
) -> StateStore:
    """An empty store (generation 0) of region ``REGION`` at ``version``, laid out by ``function``, for
    rows of ``schema`` keyed by ``key_col``, at ``root`` (a directory or a URL, with the object store's
    ``options``); mergeable by ``merge`` when given."""
    key_type: KeyType = "str" if pa.types.is_string(schema.field(key_col).type) else "int"
    return StateStore.create(
        root,
        region=REGION,
        version=version,
        function_digest=function.digest,
        n_channels=function.n_channels,
        slot_bits=function.slot_bits,
        key_type=key_type,
        key_col=key_col,
        schema=schema,
        slot_groups=slot_groups,
        merge=merge,
        options=options,
    )


def new_store(
    root: Path | str,
    function: PartitionFunction,
    table: pa.Table,
    slot_groups: int = 16,
    routed_by: PartitionFunction | None = None,
    version: int = 1,
    options: Mapping[str, str] | None = None,
) -> StateStore:
    """A store of region ``REGION`` at ``version``, laid out by ``function``, holding ``table`` routed
    by ``function`` (or ``routed_by``) as base files, at ``root`` (a directory or a URL, with the
    object store's ``options``)."""
    store = empty_store(
        root, function, table.schema, slot_groups=slot_groups, version=version, options=options
    )
    channels = (routed_by or function).lookup_many(table.column("key").to_pylist())
    added = {
        channel: store.write(channel, table.filter(pa.array(channels == channel)), kind="base")
        for channel in range(function.n_channels)
    }
    return store.commit(
        added, version=version, function_digest=function.digest, n_channels=function.n_channels
    )


def all_files(store: StateStore) -> list[FileEntry]:
    """Every file entry of the store's current generation, channel by channel."""
    return [entry for channel in range(store.n_channels) for entry in store.files(channel)]


def sorted_rows(table: pa.Table) -> pa.Table:
    """The state columns of ``table`` sorted by key (to compare contents whatever the layout)."""
    return table.select(["key", "volume", "notional", "venue"]).sort_by("key")


def check_oracle(
    store: StateStore,
    old: pa.Table,
    target: PartitionFunction,
    options: Mapping[str, str] | None = None,
) -> None:
    """Every row on ``target.lookup(key)``, the same rows as before, entries true to the files, and a
    fresh open of the store's location (with ``options``) at the same generation."""
    new = store.read()
    keys = new.column("key").to_pylist()
    expected = np.array([target.lookup(key) for key in keys])
    assert np.array_equal(new.column("channel").to_numpy(), expected)
    assert sorted_rows(new).equals(sorted_rows(old))
    assert store.rows() == old.num_rows
    store.verify()
    assert StateStore.open(store.url, options).generation == store.generation


#: The partial state of the split-mode state tests: VWAP-like sums, a min, a max and a nullable string.
PARTIAL_STATE_MERGE = MergeSpec.parse("volume=sum,trades=sum,notional=sum,low=min,high=max,venue=max")


def partial_state_schema(key_type: KeyType) -> pa.Schema:
    """The schema of that state with a ``key`` column of ``key_type``."""
    return pa.schema(
        [
            ("key", pa.string() if key_type == "str" else pa.int64()),
            ("volume", pa.int64()),
            ("trades", pa.int32()),
            ("notional", pa.float64()),
            ("low", pa.float64()),
            ("high", pa.float64()),
            ("venue", pa.string()),
        ]
    )


def partial_store(
    root: Path,
    function: PartitionFunction | SplitFunction,
    rows: pa.Table,
    merge: MergeSpec,
    slot_groups: int = 16,
) -> StateStore:
    """A store of region ``REGION`` at version 1, laid out by ``function``, as a split-mode job leaves
    it (DESIGN §11.3): each input row (a ``key`` column, the columns ``merge`` names, a ``row_hash``)
    goes to ``function.lookup(key, row_hash)`` (a PartitionFunction: ``lookup(key)``), and each channel
    holds one partial row per key it received: a pyarrow group_by of its rows by ``merge``'s
    operations, in the input columns' types."""
    schema = rows.schema.remove(rows.schema.get_field_index("row_hash"))
    key_type: KeyType = "str" if pa.types.is_string(schema.field("key").type) else "int"
    store = StateStore.create(
        root,
        region=REGION,
        version=1,
        function_digest=function.digest,
        n_channels=function.n_channels,
        slot_bits=function.slot_bits,
        key_type=key_type,
        key_col="key",
        schema=schema,
        slot_groups=slot_groups,
    )
    routed = zip(rows.column("key").to_pylist(), rows.column("row_hash").to_pylist(), strict=True)
    channels = np.array(
        [
            function.lookup(key, row_hash) if isinstance(function, SplitFunction) else function.lookup(key)
            for key, row_hash in routed
        ]
    )
    replaced = {}
    for channel in np.unique(channels).tolist():
        grouped = rows.filter(pa.array(channels == channel)).group_by("key", use_threads=False)
        partial = grouped.aggregate(list(merge.columns.items()))
        columns = {
            field.name: partial.column(
                "key" if field.name == "key" else f"{field.name}_{merge.columns[field.name]}"
            )
            for field in schema
        }
        replaced[channel] = store.write(channel, pa.table(columns).cast(schema), kind="base")
    return store.commit(replaced, version=1, function_digest=function.digest, n_channels=function.n_channels)


#: One consistent spec of every method, for property tests drawn over all of them.
CONSISTENT_SPECS = (
    ConsistentSpec("prefix"),
    ConsistentSpec("jump"),
    ConsistentSpec("mod"),
    ConsistentSpec("ring", replicas=20, seed=3),
)
#: The function a churned store (``churned_store``) ends on: 4 jump channels.
CHURNED_FUNCTION = initial_function(4, "str", SMALL_SLOT_BITS, ConsistentSpec("jump"))


def churned_store(
    root: Path | str,
    rows: int,
    monkeypatch: pytest.MonkeyPatch,
    options: Mapping[str, str] | None = None,
) -> StateStore:
    """A store of ``rows`` state rows (``state_table(rows, "str")``, 4 slot groups, row groups of 64
    rows) taken 4 -> 5 -> 4 channels: from 4 ring channels to 5 jump channels, then to 4 jump channels
    (``CHURNED_FUNCTION``), at version 3, generation 3. Jump scatters the slots a step moves over every
    file, as the default ``prefix`` does not. Each file is listed under several channels
    with filters and a channel's slot groups hold several files, so every channel is due for
    compaction. (Plans that lead back to the first function would list every file as it was.)"""
    monkeypatch.setattr(files_module, "ROW_GROUP_ROWS", 64)
    ring = PartitionFunction(
        n_channels=4, key_type="str", slot_bits=SMALL_SLOT_BITS, consistent=ConsistentSpec("ring")
    )
    five = initial_function(5, "str", SMALL_SLOT_BITS, ConsistentSpec("jump"))
    store = new_store(root, ring, state_table(rows, "str"), slot_groups=4, options=options)
    store.apply(plan_migration(ring, five), plan_id=1, region=REGION, from_version=1, to_version=2)
    back = plan_migration(five, CHURNED_FUNCTION)
    store.apply(back, plan_id=2, region=REGION, from_version=2, to_version=3)
    return store


def zipf_estimate_with_slots(domain: int, total: int, seed: int = 3) -> FrequencyEstimate:
    """A window of ``total`` Zipf(1) int keys over ``domain``: the keys at or above 0.05 % of the tuples
    with their exact counts, and the exact tuple count of every slot (16 bits), for tail-aware builds."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, domain + 1)
    stream = rng.choice(domain, size=total, p=weights / weights.sum())
    counts = np.bincount(stream, minlength=domain).astype(float)
    keep = np.flatnonzero(counts >= total * 0.0005)
    slot_counts = np.bincount(
        slots_of_hashes(hash_int64_array(stream.astype(np.int64)), 16), minlength=1 << 16
    ).astype(float)
    return FrequencyEstimate(
        keys=tuple(int(k) for k in keep),
        counts=counts[keep],
        total=total,
        distinct_estimate=domain,
        slot_counts=slot_counts,
        slot_bits=16,
    )


def s3_bucket(endpoint: str) -> str:
    """A new, empty bucket on the S3 endpoint at ``endpoint`` (the ``s3_endpoint`` fixture); its name."""
    name = f"repart-{uuid.uuid4().hex[:16]}"
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{name}", method="PUT"), timeout=10).close()
    return name


def object_listing(store: StateStore) -> dict[str, tuple[int, datetime]]:
    """Every object of the store (data files, log documents, the hint), by path: its size and last
    change. Two equal listings mean nothing was written, replaced or deleted in between."""
    return {info.path: (info.size, info.modified) for info in store.objects.listing()}


def log_documents(store: StateStore) -> dict[str, bytes]:
    """The commit documents and checkpoints of the store's log (not the hint, which any commit
    rewrites), by path, with their bytes."""
    return {
        info.path: store.objects.read(info.path)
        for info in store.objects.listing("_log/")
        if info.path != "_log/_hint.json"
    }


def rewritten_commit(store: StateStore, generation: int, change: Callable[[dict[str, Any]], None]) -> str:
    """Apply ``change`` to the commit document of ``generation`` and store it again with a checksum
    that holds (the SHA-256 of the canonical JSON of its other fields, as docs/state-format.md defines
    it), so that only its content is wrong, as a buggy writer would leave it. Returns its path."""
    path = f"_log/{generation:020d}.json"
    document = json.loads(store.objects.read(path))
    change(document)
    body = {key: value for key, value in document.items() if key != "checksum"}
    document["checksum"] = sha256_hex(canonical_json(body))
    store.objects.write(path, canonical_json(document).encode("utf-8"))
    return path


def legacy_store(
    root: Path,
    function: PartitionFunction,
    table: pa.Table,
    *,
    format_version: int = 2,
    slot_groups: int = 4,
    batch_id: int | None = None,
    applied_plan: tuple[int, str] | None = None,
) -> Path:
    """A store of format 1 or 2 (``repart.state.legacy``), written the way repart wrote them before
    format 3: ``table`` (routed by ``function``, string or int ``key`` column) as one Parquet file per
    channel and slot group under ``channel=<c>/`` (the user's columns and ``_slot``, no ``_deleted``),
    generation 1 in ``generations/00000001.json`` and a ``MANIFEST`` naming it with its SHA-256. The
    generation records ``batch_id`` (with no channel updates) and ``applied_plan`` when given."""
    key_type: KeyType = "str" if pa.types.is_string(table.schema.field("key").type) else "int"
    layout = files_module.checked_layout("key", key_type, function.slot_bits, slot_groups, table.schema)
    keys = table.column("key").to_pylist()
    slots = slots_of_hashes(hash_keys(keys, key_type), function.slot_bits)
    channels = function.lookup_many(keys)
    entries = []
    for channel in range(function.n_channels):
        for group in range(slot_groups):
            chosen = np.flatnonzero((channels == channel) & ((slots >> layout.group_shift) == group))
            if not chosen.size:
                continue
            order = chosen[np.argsort(slots[chosen], kind="stable")]
            rows = table.take(pa.array(order)).append_column("_slot", pa.array(slots[order].astype(np.int32)))
            path = f"channel={channel}/{uuid.uuid4().hex}.parquet"
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(rows, root / path)
            _, hashes = layout.hashes(rows)
            entries.append(
                {
                    "path": path,
                    "channel": channel,
                    "slot_group": group,
                    "rows": rows.num_rows,
                    "bytes": (root / path).stat().st_size,
                    "checksum": f"{int(hashes.sum(dtype=np.uint64)):016x}",
                }
            )
    document: dict[str, Any] = {
        "format": format_version,
        "generation": 1,
        "region": REGION,
        "version": 1,
        "function_digest": function.digest,
        "n_channels": function.n_channels,
        "slot_bits": function.slot_bits,
        "slot_groups": slot_groups,
        "key_type": key_type,
        "key_col": "key",
        "schema": base64.b64encode(table.schema.serialize().to_pybytes()).decode("ascii"),
        "applied_plans": [] if applied_plan is None else [list(applied_plan)],
        "files": entries,
    }
    if batch_id is not None:
        document["batch"] = {"id": batch_id, "channels": []}
    text = canonical_json(document)
    (root / "generations").mkdir(parents=True, exist_ok=True)
    (root / "generations" / "00000001.json").write_text(text, encoding="utf-8")
    manifest = {"format": format_version, "generation": 1, "sha256": sha256_hex(text)}
    (root / "MANIFEST").write_text(canonical_json(manifest), encoding="utf-8")
    return root


def database_dump(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of ``engine``'s database, in primary-key order: equal dumps before and
    after an operation mean it wrote nothing."""
    with engine.connect() as connection:
        return {
            table.name: [
                tuple(row)
                for row in connection.execute(select(table).order_by(*table.primary_key.columns)).all()
            ]
            for table in Base.metadata.sorted_tables
        }


def add_applied_chain(
    engine: Engine, region: str, channels: Sequence[int], pending: int | None = None
) -> None:
    """Region ``region`` (str keys, 16 slot bits) with one version per entry of ``channels``: the first
    is p^(0), each later one built with redist from the previous and its plan applied by a "job", so the
    last is the applied version; with ``pending``, one more version on that many channels whose plan
    stays pending."""
    estimate = counted_snapshot(region, 0, skewed_keys()).to_estimate()
    event = NewEvent(kind="activated", rule="test", message="built by the test")
    add_region(engine, region, "str", n_channels_initial=channels[0], slot_bits=16)
    previous = initial_function(channels[0], "str", 16)
    run_in_transaction(engine, lambda s: activate(s, region, new_version(previous, "redist"), None, event))
    for index, n in enumerate([*channels[1:], *([] if pending is None else [pending])]):
        function = build(previous, estimate, n, algorithm="redist").function
        plan = plan_migration(previous, function, estimate)
        plan_id = run_in_transaction(
            engine, lambda s, f=function, p=plan: activate(s, region, new_version(f, "redist"), p, event)
        ).plan_id
        assert plan_id is not None
        if index < len(channels) - 1:
            for status in ("applying", "applied"):
                run_in_transaction(engine, lambda s, st=status, i=plan_id: set_plan_status(s, i, st))
        previous = function
