"""Applying plans with consolidations to a state store (DESIGN §11.3), without Spark.

Stores are built as ``update_state`` leaves them: every input row gets a random 64-bit row hash, goes
to ``a.lookup(key, row_hash)``, and each channel holds one partial row per key it received (a plain
pyarrow group_by of its rows). The oracles are written out here from the functions, not from the plan:
after ``apply(plan_migration(a, b))`` the merged state equals a group_by over every input row, every
partial sits on the key's candidates in ``b`` (a partial on one of them stays as it was, any other is
merged into the key's home in ``b``), and a channel holds at most one row per key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import repart.state.files as files_module
import repart.state.migrate as migrate_module
from repart.errors import Corrupt, InvalidInput
from repart.migration import MigrationPlan, plan_migration
from repart.partitioning import ConsistentSpec, PartitionFunction
from repart.partitioning.domain import Key, KeyType
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.protocol.merge import MergeSpec
from repart.state.consolidate import Pools
from repart.state.log import LOG_PREFIX
from repart.state.merge import merge_function
from repart.state.store import ApplyResult, StateStore
from tests.factories import CONSISTENT_SPECS, PARTIAL_STATE_MERGE, REGION, partial_state_schema, partial_store

BITS = 10
AGGREGATES = [
    ("volume", "sum"),
    ("trades", "sum"),
    ("notional", "sum"),
    ("low", "min"),
    ("high", "max"),
    ("venue", "max"),
]
KEYS: dict[KeyType, list[Key]] = {
    "str": [f"sym-{i}" for i in range(40)],
    "int": [i * 7919 - 50_000 for i in range(40)],
}
HEAD = 8  # the first keys are the hot ones: the ones split tables pick from
#: The consistent hash of the hand-made scenarios below: jump spreads every channel over every slot
#: group, so each channel holds a file in the split key's slot group (the default, prefix, does not).
SCATTERED = ConsistentSpec("jump")
Function = PartitionFunction | SplitFunction
COMMIT_NAME = re.compile(rf"{LOG_PREFIX}[0-9]{{20}}\.json")


def trades(key_type: KeyType, count: int, seed: int) -> pa.Table:
    """Input rows: a key (the head most often), volume, price (a multiple of 0.25, so every sum of
    notionals is exact in any order; sometimes null), venue (sometimes null) and a row hash."""
    rng = np.random.default_rng(seed)
    universe = KEYS[key_type]
    ranks = np.minimum(rng.zipf(1.3, count) - 1, len(universe) - 1)
    volume = rng.integers(1, 1_000, count)
    price = rng.integers(1, 400, count) * 0.25
    priced = rng.random(count) > 0.05
    return pa.table(
        {
            "key": pa.array(
                [universe[rank] for rank in ranks.tolist()], partial_state_schema(key_type).field("key").type
            ),
            "volume": pa.array(volume, pa.int64()),
            "trades": pa.array(np.ones(count, dtype=np.int32)),
            "notional": pa.array(np.where(priced, price * volume, 0.0)),
            "low": pa.array(price, mask=~priced),
            "high": pa.array(price, mask=~priced),
            "venue": pa.array(
                [f"v{v}" if v else None for v in rng.integers(0, 4, count).tolist()], pa.string()
            ),
            "row_hash": pa.array(rng.integers(-(2**63), 2**63 - 1, count, dtype=np.int64)),
        }
    )


def aggregate(rows: pa.Table, key_type: KeyType) -> pa.Table:
    """One row per key: a plain pyarrow group_by (the oracle over all input rows, and each partial)."""
    grouped = rows.group_by("key", use_threads=False).aggregate(AGGREGATES)
    return pa.table(
        {
            field.name: grouped.column(
                "key" if field.name == "key" else f"{field.name}_{dict(AGGREGATES)[field.name]}"
            )
            for field in partial_state_schema(key_type)
        }
    ).cast(partial_state_schema(key_type))


def candidates_of(function: Function, key: Key) -> tuple[int, ...]:
    """The channels ``function`` routes ``key`` to, its home first: written out here."""
    if isinstance(function, SplitFunction):
        entry = function.split.get(key)
        return entry.candidates if entry is not None else (function.home.lookup(key),)
    return (function.lookup(key),)


def partials(store: StateStore) -> dict[tuple[Key, int], dict[str, Any]]:
    """(key, channel) → the partial row; asserts at most one row per key on each channel."""
    rows = store.read().to_pylist()
    found = {(row["key"], row["channel"]): row for row in rows}
    assert len(found) == len(rows), "a channel holds two rows of one key"
    return found


def expected_channels(a: Function, b: Function, before: Sequence[tuple[Key, int]]) -> set[tuple[Key, int]]:
    """Where each key's state must be after the plan: a key neither function splits on ``b``'s channel;
    a split key's partials on its candidates in ``b`` stay, any others end on its home in ``b``."""
    split = {key for f in (a, b) if isinstance(f, SplitFunction) for key in f.split}
    held: dict[Key, set[int]] = {}
    for key, channel in before:
        held.setdefault(key, set()).add(channel)
    expected = set()
    for key, channels in held.items():
        after = candidates_of(b, key)
        if key not in split:
            expected.add((key, after[0]))
            continue
        expected.update((key, channel) for channel in channels if channel in after)
        if channels - set(after):
            expected.add((key, after[0]))
    return expected


def sorted_state(table: pa.Table) -> pa.Table:
    return table.sort_by("key")


def check_applied(
    store: StateStore, a: Function, b: Function, rows: pa.Table, key_type: KeyType, apply: Callable[[], Any]
) -> Any:
    """Apply, then check the merged state, where every partial is and which partials are untouched."""
    before = partials(store)
    oracle = sorted_state(aggregate(rows, key_type))
    assert sorted_state(store.read_merged(PARTIAL_STATE_MERGE)).equals(oracle)
    result = apply()
    after = partials(store)
    assert set(after) == expected_channels(a, b, list(before))
    assert sorted_state(store.read_merged(PARTIAL_STATE_MERGE)).equals(oracle)  # every key, every column
    split = {key for f in (a, b) if isinstance(f, SplitFunction) for key in f.split}
    merged_into = {
        (key, candidates_of(b, key)[0]) for key, channel in before if channel not in candidates_of(b, key)
    }
    content = {key: row for (key, _), row in before.items() if key not in split}
    for (key, channel), row in after.items():
        if key not in split:  # moved or not, its one row as it was
            assert {**row, "channel": 0} == {**content[key], "channel": 0}, key
        elif (key, channel) not in merged_into:  # a partial that stayed: as it was
            assert before[key, channel] == row, (key, channel)
    assert result.moved_rows == sum(channel not in candidates_of(b, key) for key, channel in before)
    assert store.rows() == len(after)
    store.verify()
    assert StateStore.open(store.url).generation == store.generation
    return result


# --- random split functions a → b ---------------------------------------------------------------------


@st.composite
def homes(draw: st.DrawFn, key_type: KeyType, like: PartitionFunction | None = None) -> PartitionFunction:
    """A random home function, or one like ``like`` (its channel count ± 1, a few entries changed)."""
    if like is None or draw(st.booleans()):
        n = draw(st.integers(1, 6))
        return PartitionFunction(
            n,
            key_type=key_type,
            slot_bits=BITS,
            consistent=draw(st.sampled_from(CONSISTENT_SPECS)),
            explicit=draw(
                st.dictionaries(st.sampled_from(KEYS[key_type]), st.integers(0, n - 1), max_size=8)
            ),
            slot_overrides=draw(
                st.dictionaries(st.integers(0, 2**BITS - 1), st.integers(0, n - 1), max_size=30)
            ),
        )
    n = max(1, like.n_channels + draw(st.integers(-1, 1)))
    explicit = {key: c for key, c in like.explicit.items() if c < n}
    explicit.update(
        draw(st.dictionaries(st.sampled_from(KEYS[key_type][:HEAD]), st.integers(0, n - 1), max_size=2))
    )
    overrides = {slot: c for slot, c in like.slot_overrides.items() if c < n}
    return PartitionFunction(
        n,
        key_type=key_type,
        slot_bits=BITS,
        consistent=like.consistent,
        explicit=explicit,
        slot_overrides=overrides,
    )


@st.composite
def split_functions(draw: st.DrawFn, key_type: KeyType, like: Function | None = None) -> Function:
    """A PartitionFunction, or a SplitFunction whose head keys are random or derived from ``like``'s
    (the same candidates behind a moved home, one gained, one lost)."""
    previous = like.split if isinstance(like, SplitFunction) else {}
    home = draw(homes(key_type, like.home if isinstance(like, SplitFunction) else like))
    if home.n_channels < 2 or not draw(st.integers(0, 3)):
        return home
    split: dict[Key, SplitEntry] = {}
    for key in draw(st.lists(st.sampled_from(KEYS[key_type][:HEAD]), unique=True, min_size=1, max_size=6)):
        first = home.lookup(key)
        others = [c for c in range(home.n_channels) if c != first]
        old = (
            [c for c in previous[key].candidates if c != first and c < home.n_channels]
            if key in previous
            else []
        )
        mode = draw(st.sampled_from(["fresh", "like", "gain", "lose"])) if old else "fresh"
        if mode == "fresh":
            chosen = draw(st.permutations(others))[: draw(st.integers(1, len(others)))]
        elif mode == "like":
            chosen = old
        elif mode == "gain":
            chosen = old + [c for c in others if c not in old][:1]
        else:
            chosen = old[:-1] or others[:1]
        candidates = (first, *chosen)
        raw = draw(st.lists(st.integers(0, 4), min_size=len(candidates), max_size=len(candidates)))
        raw[0] += 1
        split[key] = SplitEntry(candidates, tuple(r / sum(raw) for r in raw))
    return SplitFunction(home, split)


@st.composite
def migrations(draw: st.DrawFn) -> tuple[KeyType, Function, Function]:
    key_type: KeyType = draw(st.sampled_from(["str", "int"]))
    a = draw(split_functions(key_type))
    return key_type, a, draw(split_functions(key_type, like=a))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    migration=migrations(),
    count=st.sampled_from([400, 1500, 40, 0]),
    seed=st.integers(0, 2**32 - 1),
    groups=st.sampled_from([1, 4, 16]),
    as_function=st.booleans(),
)
def test_apply_consolidates_random_partial_states(
    tmp_path_factory: pytest.TempPathFactory,
    migration: tuple[KeyType, Function, Function],
    count: int,
    seed: int,
    groups: int,
    as_function: bool,
) -> None:
    key_type, a, b = migration
    rows = trades(key_type, count, seed)
    store = partial_store(tmp_path_factory.mktemp("s"), a, rows, PARTIAL_STATE_MERGE, groups)
    plan = plan_migration(a, b)
    merge = merge_function(PARTIAL_STATE_MERGE) if as_function else PARTIAL_STATE_MERGE
    result = check_applied(
        store,
        a,
        b,
        rows,
        key_type,
        lambda: store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2, merge=merge),
    )
    assert (store.version, store.function_digest, store.n_channels) == (2, b.digest, b.n_channels)
    assert not result.already_applied


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    migration=migrations(),
    count=st.sampled_from([400, 1500]),
    seed=st.integers(0, 2**32 - 1),
    groups=st.sampled_from([1, 4]),
    data=st.data(),
)
def test_consolidations_apply_to_filtered_files(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    migration: tuple[KeyType, Function, Function],
    count: int,
    seed: int,
    groups: int,
    data: st.DataObject,
) -> None:
    """a -> b -> c: the first plan leaves slot filters (files of 8-row row groups lose slots), the
    second consolidates partials out of filtered files; both checked like a single plan."""
    monkeypatch.setattr(files_module, "ROW_GROUP_ROWS", 8)
    key_type, a, b = migration
    c = data.draw(split_functions(key_type, like=b))
    rows = trades(key_type, count, seed)
    store = partial_store(tmp_path_factory.mktemp("s"), a, rows, PARTIAL_STATE_MERGE, groups)
    for plan_id, (source, target) in enumerate(((a, b), (b, c)), start=1):
        plan = plan_migration(source, target)

        def apply(plan: MigrationPlan = plan, plan_id: int = plan_id) -> ApplyResult:
            return store.apply(
                plan,
                plan_id=plan_id,
                region=REGION,
                from_version=plan_id,
                to_version=plan_id + 1,
                merge=PARTIAL_STATE_MERGE,
            )

        check_applied(store, source, target, rows, key_type, apply)


# --- hand-built cases -----------------------------------------------------------------------------------


def slot_of(key: Key, key_type: KeyType) -> int:
    return int(slots_of_hashes(hash_keys([key], key_type), BITS)[0])


def hot_split(
    n: int = 4,
    candidates: tuple[int, ...] = (0, 1, 2),
    key: Key = "sym-0",
    slot_overrides: dict[int, int] | None = None,
) -> SplitFunction:
    """``key`` split over ``candidates`` (its home pinned to the first) on ``n`` channels."""
    home = PartitionFunction(
        n,
        key_type="str",
        slot_bits=BITS,
        explicit={key: candidates[0]},
        slot_overrides=slot_overrides or {},
        consistent=SCATTERED,
    )
    return SplitFunction(home, {key: SplitEntry(candidates, tuple([1 / len(candidates)] * len(candidates)))})


def listing(store: StateStore) -> dict[str, tuple[int, datetime]]:
    """Every object of the store (data files and log documents) with its size and last change: equal
    before and after means nothing was written."""
    return {info.path: (info.size, info.modified) for info in store.objects.listing()}


def newest_commit(store: StateStore) -> tuple[str, bytes]:
    """The store's newest commit document (name and bytes): unchanged means nothing was committed."""
    names = [info.path for info in store.objects.listing(LOG_PREFIX) if COMMIT_NAME.fullmatch(info.path)]
    return max(names), store.objects.read(max(names))


def leaving_head(
    tmp_path: Path, count: int = 3_000
) -> tuple[StateStore, SplitFunction, PartitionFunction, pa.Table]:
    """``sym-0`` split over channels 0, 1, 2 leaves the head of ``b`` and goes home to channel 3: its
    partials on 0, 1 and 2 all meet there."""
    a = hot_split()
    b = PartitionFunction(4, key_type="str", slot_bits=BITS, explicit={"sym-0": 3}, consistent=SCATTERED)
    rows = trades("str", count, seed=7)
    return partial_store(tmp_path / "s", a, rows, PARTIAL_STATE_MERGE, 4), a, b, rows


def test_a_key_leaving_the_head_is_merged_into_its_home(tmp_path: Path) -> None:
    store, a, b, rows = leaving_head(tmp_path)
    assert sorted(channel for key, channel in partials(store) if key == "sym-0") == [0, 1, 2]
    plan = plan_migration(a, b)
    assert [(row.source, row.target) for row in plan.consolidations] == [(0, 3), (1, 3), (2, 3)]
    check_applied(
        store,
        a,
        b,
        rows,
        "str",
        lambda: store.apply(
            plan, plan_id=1, region=REGION, from_version=1, to_version=2, merge=PARTIAL_STATE_MERGE
        ),
    )
    assert [channel for key, channel in partials(store) if key == "sym-0"] == [3]


def test_a_split_key_on_its_candidates_stays_when_its_slot_moves(tmp_path: Path) -> None:
    """The key's home moves 0 → 1 with its slot while it stays split over {0, 1}: nothing of it moves
    (a slot move alone would take its partial on 0 to 1, beside the one there)."""
    key = "sym-5"  # tracked by neither explicit map: its home follows its slot
    slot = slot_of(key, "str")
    base = PartitionFunction(2, key_type="str", slot_bits=BITS, slot_overrides={slot: 0})
    moved = PartitionFunction(2, key_type="str", slot_bits=BITS, slot_overrides={slot: 1})
    a = SplitFunction(base, {key: SplitEntry((0, 1), (0.5, 0.5))})
    b = SplitFunction(moved, {key: SplitEntry((1, 0), (0.5, 0.5))})
    rows = trades("str", 2_000, seed=3)
    store = partial_store(tmp_path / "s", a, rows, PARTIAL_STATE_MERGE, 4)
    assert sorted(channel for k, channel in partials(store) if k == key) == [0, 1]
    plan = plan_migration(a, b)
    assert plan.consolidations == () and any(first <= slot <= last for first, last, _, _ in plan.slot_moves)
    result = check_applied(
        store,
        a,
        b,
        rows,
        "str",
        lambda: store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2),
    )
    assert sorted(channel for k, channel in partials(store) if k == key) == [0, 1]
    assert result.moved_rows == sum(
        a.home.lookup(k) != b.home.lookup(k) for k in set(rows["key"].to_pylist()) - {key}
    )


def test_a_single_partial_moves_without_a_merge(tmp_path: Path) -> None:
    """Only the partial on channel 2 exists; nothing meets on the home, so no merge is needed."""
    a = hot_split()
    b = PartitionFunction(4, key_type="str", slot_bits=BITS, explicit={"sym-0": 3})
    rows = trades("str", 500, seed=11)
    hashes = rows["row_hash"].to_numpy()
    hot = pc.equal(rows["key"], "sym-0").to_numpy(zero_copy_only=False)
    to_two = np.array([a.lookup("sym-0", int(h)) == 2 for h in hashes.tolist()])
    rows = rows.filter(pa.array(~hot | to_two))
    store = partial_store(tmp_path / "s", a, rows, PARTIAL_STATE_MERGE, 4)
    assert [channel for key, channel in partials(store) if key == "sym-0"] == [2]
    plan = plan_migration(a, b)
    check_applied(
        store,
        a,
        b,
        rows,
        "str",
        lambda: store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2),
    )


def test_a_plan_that_merges_partials_needs_the_merge(tmp_path: Path) -> None:
    store, a, b, _ = leaving_head(tmp_path)
    plan = plan_migration(a, b)
    files = listing(store)
    with pytest.raises(
        InvalidInput, match=r"^merge must be given .* such as key 'sym-0' \(3 partials into channel 3\)"
    ) as error:
        store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2)
    assert error.value.field == "merge"
    assert listing(store) == files and StateStore.open(store.url).generation == 1


@pytest.mark.parametrize(
    ("merge", "message"),
    [
        (
            lambda table: merge_function(PARTIAL_STATE_MERGE)(table).drop_columns(["venue"]),
            r"^merge must return the state's schema",
        ),
        (lambda table: table, r"^merge must return one row per key: it returned 3 rows for key 'sym-0'"),
        (MergeSpec.parse("volume=sum"), r"^merge must name every state column but the key"),
        (
            MergeSpec.parse("volume=sum,trades=sum,notional=sum,low=min,high=max,venue=sum"),
            r"^merge must apply to the state's column types",
        ),
    ],
    ids=["another schema", "several rows", "a spec missing columns", "a sum of strings"],
)
def test_a_merge_that_breaks_its_contract_is_refused_with_nothing_written(
    tmp_path: Path, merge: Any, message: str
) -> None:
    store, a, b, _ = leaving_head(tmp_path)
    files = listing(store)
    with pytest.raises(InvalidInput, match=message) as error:
        store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2, merge=merge)
    assert error.value.field == "merge"
    assert listing(store) == files and StateStore.open(store.url).generation == 1


def test_a_damaged_file_of_a_home_is_corrupt_naming_it_with_nothing_committed(tmp_path: Path) -> None:
    """The home (channel 3) loses no key, but its file beside the partials is read, and verified."""
    store, a, b, _ = leaving_head(tmp_path)
    plan = plan_migration(a, b)
    assert 3 not in plan.channels_losing_keys
    group = slot_of("sym-0", "str") >> (BITS - 2)
    victim = next(entry for entry in store.files(3) if entry.slot_group == group)
    assert store.objects.local_root is not None
    path = store.objects.local_root / victim.path
    path.write_bytes(path.read_bytes()[: victim.bytes - 50])
    commit = newest_commit(store)
    with pytest.raises(Corrupt, match="Parquet magic bytes") as error:
        store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2, merge=PARTIAL_STATE_MERGE)
    assert error.value.path == victim.path
    assert newest_commit(store) == commit and StateStore.open(store.url).generation == 1


def test_a_lost_result_fails_verification_with_nothing_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pooled rows leave their files but their merged row is never written: each channel's sums
    add up with what the migration did, but the total changes by more than the pools found before it
    merged."""
    store, a, b, _ = leaving_head(tmp_path)
    monkeypatch.setattr(Pools, "results", lambda self: iter(()))
    commit = newest_commit(store)
    with pytest.raises(Corrupt, match=r"changed the total .* by more than its consolidations merged"):
        store.apply(
            plan_migration(a, b),
            plan_id=1,
            region=REGION,
            from_version=1,
            to_version=2,
            merge=PARTIAL_STATE_MERGE,
        )
    assert newest_commit(store) == commit and StateStore.open(store.url).generation == 1


def test_a_partial_moved_instead_of_merged_fails_verification(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Routing that ignores the candidates (every partial to the home) leaves two rows on the home.

    A slot of the key's slot group moves off channel 1, so the file holding its partial on 1 is read."""
    a = hot_split(candidates=(0, 1, 2))
    group_size = 2**BITS // 4
    start = slot_of("sym-0", "str") // group_size * group_size
    slot = next(s for s in range(start, start + group_size) if a.home.table[s] == 1)
    b = hot_split(candidates=(0, 1), slot_overrides={slot: 3})  # loses 2: merged into 0; 1 stays
    rows = trades("str", 3_000, seed=5)
    store = partial_store(tmp_path / "s", a, rows, PARTIAL_STATE_MERGE, 4)
    plan = plan_migration(a, b)
    assert [(row.source, row.target) for row in plan.consolidations] == [(2, 0)]
    assert 1 in plan.channels_losing_keys
    sound = partial_store(tmp_path / "t", a, rows, PARTIAL_STATE_MERGE, 4)
    check_applied(  # without the fault: the partial on 1 stays although its file is rewritten
        sound,
        a,
        b,
        rows,
        "str",
        lambda: sound.apply(
            plan, plan_id=1, region=REGION, from_version=1, to_version=2, merge=PARTIAL_STATE_MERGE
        ),
    )
    monkeypatch.setattr(
        migrate_module._Routes, "split_stays", lambda self, channel: np.zeros(1, dtype=np.bool_)
    )
    commit = newest_commit(store)
    with pytest.raises(
        Corrupt, match=r"consolidation of split key 'sym-0': .* hold 2 rows of it \(on channels \[0, 0\]\)"
    ):
        store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2, merge=PARTIAL_STATE_MERGE)
    assert newest_commit(store) == commit and StateStore.open(store.url).generation == 1


def test_a_plan_with_consolidations_applied_twice_is_a_no_op(tmp_path: Path) -> None:
    store, a, b, _ = leaving_head(tmp_path)
    plan = plan_migration(a, b)
    first = store.apply(
        plan, plan_id=4, region=REGION, from_version=1, to_version=2, merge=PARTIAL_STATE_MERGE
    )
    files = listing(store)
    again = StateStore.open(store.url).apply(plan, plan_id=4, region=REGION, from_version=1, to_version=2)
    assert again.already_applied and again.generation == first.generation and listing(store) == files
