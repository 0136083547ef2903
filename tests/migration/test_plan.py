"""Migration plans (DESIGN §6) against oracles written out here: ``b.lookup`` for apply semantics, a
slot-by-slot loop for the runs, Gedik's Eq. 9 on exact frequencies and a loop over the tail model for
the predicted cost; reverse plans, canonical JSON and validation."""

from __future__ import annotations

import hashlib
import json
import pickle
import time
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.migration import ExplicitMove, MigrationPlan, plan_migration
from repart.partitioning.consistent import ConsistentSpec, slot_table
from repart.partitioning.domain import INT64_MAX, INT64_MIN, ConsistentMethod, Key, KeyType
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.function import PartitionFunction
from repart.partitioning.metrics import migration_cost
from repart.partitioning.resources import Resources
from repart.sim.workload import ZipfWorkload
from tests.factories import CONSISTENT_SPECS
from tests.migration.universe import KEY_TYPES, UNIVERSE, UNTRACKED, estimate_of, slot_of

CONSISTENT_METHODS: tuple[ConsistentMethod, ...] = ("prefix", "jump", "ring")
DIGEST = "0" * 64


def routing_table(function: PartitionFunction) -> list[int]:
    """T' = T with the overrides applied, from the base slot table (not ``function.table``)."""
    table = slot_table(function.n_channels, function.consistent, function.slot_bits).tolist()
    for slot, channel in function.slot_overrides.items():
        table[slot] = channel
    return [int(channel) for channel in table]


def runs_oracle(before: list[int], after: list[int]) -> list[list[int]]:
    """Maximal runs of changed slots with one (source, target) pair, one slot at a time."""
    runs: list[list[int]] = []
    for slot, (source, target) in enumerate(zip(before, after, strict=True)):
        if source == target:
            continue
        if runs and runs[-1][1] == slot - 1 and runs[-1][2:] == [source, target]:
            runs[-1][1] = slot
        else:
            runs.append([slot, slot, source, target])
    return runs


@st.composite
def functions(draw: st.DrawFn, key_type: KeyType, slot_bits: int) -> PartitionFunction:
    n = draw(st.integers(1, 12))
    overrides: dict[int, int] = {}
    for start, length, channel in draw(
        st.lists(st.tuples(st.integers(0, 2**slot_bits - 1), st.integers(1, 40), st.integers(0, n - 1)))
    ):
        overrides.update(dict.fromkeys(range(start, min(start + length, 2**slot_bits)), channel))
    return PartitionFunction(
        n,
        key_type=key_type,
        slot_bits=slot_bits,
        consistent=draw(st.sampled_from(CONSISTENT_SPECS)),
        explicit=draw(
            st.dictionaries(st.sampled_from(UNIVERSE[key_type]), st.integers(0, n - 1), max_size=10)
        ),
        slot_overrides=overrides,
    )


@st.composite
def function_pairs(draw: st.DrawFn) -> tuple[PartitionFunction, PartitionFunction]:
    key_type = draw(st.sampled_from(KEY_TYPES))
    slot_bits = draw(st.sampled_from([10, 12]))
    return draw(functions(key_type, slot_bits)), draw(functions(key_type, slot_bits))


def keys_of(a: PartitionFunction, extra: list[Key]) -> list[Key]:
    assert a.key_type is not None
    return sorted(set(UNIVERSE[a.key_type]) | set(UNTRACKED[a.key_type]) | set(extra))


# --- apply semantics -------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(function_pairs(), st.data())
def test_destination_of_every_key_placed_by_a_is_its_channel_under_b(
    pair: tuple[PartitionFunction, PartitionFunction], data: st.DataObject
) -> None:
    a, b = pair
    drawn = st.text(max_size=8) if a.key_type == "str" else st.integers(INT64_MIN, INT64_MAX)
    keys = keys_of(a, data.draw(st.lists(drawn, max_size=30)))
    plan = plan_migration(a, b)
    moving: set[Key] = set()
    for key in keys:
        current = a.lookup(key)
        target = plan.destination(key, slot_of(key, a.slot_bits), current)
        assert target == b.lookup(key)
        if target != current:
            moving.add(key)
    assert moving == {key for key in keys if a.lookup(key) != b.lookup(key)}
    explicit = a.explicit.keys() | b.explicit.keys()
    assert {move.key for move in plan.explicit_moves} == {k for k in explicit if a.lookup(k) != b.lookup(k)}
    assert set(plan.pinned_keys) == {k for k in explicit if a.lookup(k) == b.lookup(k)}
    for move in plan.explicit_moves:
        assert (move.source, move.target, move.weight) == (a.lookup(move.key), b.lookup(move.key), 0.0)


def test_a_pinned_key_stays_when_its_slot_moves_and_other_keys_follow_their_slot() -> None:
    slot = slot_of("hot", 10)
    a = PartitionFunction(2, slot_bits=10, explicit={"hot": 0}, slot_overrides={slot: 0})
    b = PartitionFunction(2, slot_bits=10, explicit={"hot": 0}, slot_overrides={slot: 1})
    plan = plan_migration(a, b)
    assert plan.pinned_keys == ("hot",) and not plan.explicit_moves
    assert [slot, slot, 0, 1] in plan.slot_moves.tolist()
    assert plan.destination("hot", slot, 0) == 0
    assert plan.destination("other", slot, 0) == 1
    assert plan.destination("other", slot, 1) == 1  # not on the move's source: stays


def test_destination_validates_its_arguments() -> None:
    plan = plan_migration(
        PartitionFunction(3, explicit={1: 2}, slot_bits=10), PartitionFunction(4, slot_bits=10)
    )
    with pytest.raises(InvalidInput, match=r"^key must be of the plan's key_type 'int', got 'x'") as excinfo:
        plan.destination("x", 0, 0)
    assert excinfo.value.field == "key"
    with pytest.raises(InvalidInput, match=r"^slot must be an integer in \[0, 1023\]") as excinfo:
        plan.destination(1, 1024, 0)
    assert excinfo.value.field == "slot"
    with pytest.raises(InvalidInput, match=r"^current_channel must be an integer in \[0, 2\]") as excinfo:
        plan.destination(1, 0, 3)
    assert excinfo.value.field == "current_channel"


# --- slot moves ------------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(function_pairs())
def test_slot_moves_are_the_maximal_runs_of_changed_slots(
    pair: tuple[PartitionFunction, PartitionFunction],
) -> None:
    a, b = pair
    before, after = routing_table(a), routing_table(b)
    plan = plan_migration(a, b)
    runs = plan.slot_moves.tolist()
    assert runs == runs_oracle(before, after)
    expanded = {
        slot: (source, target) for first, last, source, target in runs for slot in range(first, last + 1)
    }
    assert expanded == {s: (x, y) for s, (x, y) in enumerate(zip(before, after, strict=True)) if x != y}
    for (_, last, *pair_1), (first, _, *pair_2) in pairwise(runs):
        assert first > last + 1 or pair_1 != pair_2
    losing = {a.lookup(m.key) for m in plan.explicit_moves} | {before[s] for s in expanded}
    gaining = {b.lookup(m.key) for m in plan.explicit_moves} | {after[s] for s in expanded}
    assert plan.channels_losing_keys == tuple(sorted(losing))
    assert plan.channels_gaining_keys == tuple(sorted(gaining))
    assert plan.is_empty == (not losing)


@pytest.mark.parametrize("method", CONSISTENT_METHODS)
@pytest.mark.parametrize("n", [1, 2, 9, 12])
def test_consistent_growth_moves_slots_only_to_the_new_channel(method: ConsistentMethod, n: int) -> None:
    spec = ConsistentSpec(method)
    smaller, larger = PartitionFunction(n, consistent=spec), PartitionFunction(n + 1, consistent=spec)
    grow, shrink = plan_migration(smaller, larger), plan_migration(larger, smaller)
    assert len(grow.slot_moves) > 0
    assert grow.channels_gaining_keys == (n,)
    assert shrink.channels_losing_keys == (n,)
    assert not grow.explicit_moves and not grow.pinned_keys


def zipf_estimate(z: float, domain: int = 50_000, total: int = 1_000_000) -> FrequencyEstimate:
    workload = ZipfWorkload(z, domain)
    keys: list[Key] = workload.keys.tolist()
    return estimate_of(keys, (workload.frequencies * total).tolist(), 16, distinct_estimate=domain)


def test_predicted_m_of_consistent_growth_is_about_one_and_of_mod_growth_far_higher() -> None:
    estimate = zipf_estimate(0.0)
    for method in CONSISTENT_METHODS:
        spec = ConsistentSpec(method)
        m = plan_migration(
            PartitionFunction(9, consistent=spec), PartitionFunction(10, consistent=spec), estimate
        ).m
        assert m is not None and 0.8 < m < 1.2, method
    mod = ConsistentSpec("mod")
    m = plan_migration(
        PartitionFunction(9, consistent=mod), PartitionFunction(10, consistent=mod), estimate
    ).m
    assert m is not None and m > 5


# --- predicted cost --------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(function_pairs(), st.data())
def test_cost_of_a_linear_state_is_eq_9_on_the_exact_frequencies(
    pair: tuple[PartitionFunction, PartitionFunction], data: st.DataObject
) -> None:
    """For L state and slot counts holding exactly the estimated keys, the tail model is exact."""
    a, b = pair
    keys = keys_of(a, [])
    counts = data.draw(st.lists(st.integers(0, 1000), min_size=len(keys), max_size=len(keys)))
    estimate = estimate_of(keys, [float(c) for c in counts], a.slot_bits)
    plan = plan_migration(a, b, estimate, Resources.parse("LLL"))
    frequencies = np.array(counts) / max(estimate.total, 1)
    expected = migration_cost(Resources.parse("LLL"), frequencies, a.lookup_many(keys), b.lookup_many(keys))
    assert plan.cost == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert plan.total_state == pytest.approx(1.0 if estimate.total else 0.0)
    assert plan.m == pytest.approx(expected * b.n_channels if estimate.total else 0.0, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("code", ["CCL", "LCL", "QCL"])
def test_cost_matches_the_tail_model_computed_slot_by_slot(code: str) -> None:
    bits, exponent = 10, Resources.parse(code).load_exponents[0]
    rng = np.random.default_rng(7)
    a = PartitionFunction(5, slot_bits=bits, explicit={k: k % 5 for k in range(0, 40)})
    b = PartitionFunction(
        7, slot_bits=bits, explicit={k: k % 7 for k in range(20, 60)}, slot_overrides={3: 6, 4: 6}
    )
    # The explicit keys 0..9 and 50..59 have no estimate; 1000..1099 are estimated but not explicit.
    estimated: list[Key] = [*range(10, 50), *range(1000, 1100)]
    counts = rng.integers(1, 500, size=len(estimated)).astype(float).tolist()
    extra = rng.integers(0, 50, size=2**bits).astype(float).tolist()
    distinct = 5000
    estimate = estimate_of(estimated, counts, bits, extra, distinct_estimate=distinct)
    n = estimate.total

    count_of = dict(zip(estimated, counts, strict=True))
    explicit = set(a.explicit) | set(b.explicit)
    known = [k for k in explicit if k in count_of]
    per_slot_keys = (distinct - len(known)) / 2**bits
    assert estimate.slot_counts is not None
    untracked = estimate.slot_counts.tolist()
    for key in known:
        untracked[slot_of(key, bits)] -= count_of[key]

    def tail(slot: int) -> float:
        mass = max(untracked[slot], 0.0) / n
        return per_slot_keys if exponent == 0 else float(per_slot_keys * (mass / per_slot_keys) ** exponent)

    def weight(key: Key) -> float:
        return (count_of[key] / n) ** exponent if key in count_of else 0.0

    before, after = routing_table(a), routing_table(b)
    cost = sum(weight(k) for k in explicit if a.lookup(k) != b.lookup(k))
    cost += sum(tail(s) for s in range(2**bits) if before[s] != after[s])
    total = sum(weight(k) for k in known) + sum(tail(s) for s in range(2**bits))

    plan = plan_migration(a, b, estimate, Resources.parse(code))
    assert plan.cost == pytest.approx(cost, rel=1e-9)
    assert plan.total_state == pytest.approx(total, rel=1e-9)
    assert plan.m == pytest.approx(cost / (total / 7), rel=1e-9)
    assert {m.key: m.weight for m in plan.explicit_moves} == pytest.approx(
        {k: weight(k) for k in explicit if a.lookup(k) != b.lookup(k)}, rel=1e-12
    )


def test_without_an_estimate_cost_and_m_are_unknown() -> None:
    a, b = PartitionFunction(3, explicit={"x": 0}), PartitionFunction(4, explicit={"x": 3})
    plan = plan_migration(a, b)
    assert plan.cost is None and plan.total_state is None and plan.m is None
    assert plan.explicit_moves[0].weight == 0.0


def test_a_plan_between_equal_functions_is_empty_and_costs_nothing() -> None:
    a = PartitionFunction(4, explicit={"x": 3, "y": 0}, slot_bits=10)
    plan = plan_migration(a, a, estimate_of(["x", "y", "z"], [5.0, 3.0, 2.0], 10))
    assert plan.is_empty and plan.pinned_keys == ("x", "y")
    assert plan.cost == 0.0 and plan.m == 0.0
    assert plan.channels_losing_keys == plan.channels_gaining_keys == ()


# --- reverse and JSON ------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(function_pairs(), st.booleans())
def test_reverse_is_the_plan_back_and_reversing_twice_is_identity(
    pair: tuple[PartitionFunction, PartitionFunction], with_estimate: bool
) -> None:
    a, b = pair
    keys = keys_of(a, [])
    estimate = (
        estimate_of(keys, [float(i % 17) for i in range(len(keys))], a.slot_bits) if with_estimate else None
    )
    plan = plan_migration(a, b, estimate)
    assert plan.reverse() == plan_migration(b, a, estimate)
    assert plan.reverse().reverse() == plan
    assert plan.reverse().source_digest == b.digest
    if plan.m is not None and plan.total_state:
        assert plan.reverse().m == pytest.approx(plan.m * a.n_channels / b.n_channels)


@settings(max_examples=60, deadline=None)
@given(function_pairs(), st.booleans())
def test_json_round_trip_preserves_the_plan_and_its_digest(
    pair: tuple[PartitionFunction, PartitionFunction], with_estimate: bool
) -> None:
    a, b = pair
    keys = keys_of(a, [])
    estimate = (
        estimate_of(keys, [float(i % 13) for i in range(len(keys))], a.slot_bits) if with_estimate else None
    )
    plan = plan_migration(a, b, estimate)
    text = plan.to_json()
    parsed = MigrationPlan.from_json(text)
    assert parsed == plan and hash(parsed) == hash(plan)
    assert pickle.loads(pickle.dumps(plan)) == plan
    assert parsed.to_json() == text
    assert parsed.digest == plan.digest == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False) == text


def test_canonical_json_layout() -> None:
    mod = ConsistentSpec("mod")
    a = PartitionFunction(2, slot_bits=10, consistent=mod, explicit={"é": 0, "b": 1})
    b = PartitionFunction(2, slot_bits=10, consistent=mod, explicit={"é": 1, "b": 1}, slot_overrides={0: 1})
    text = plan_migration(a, b).to_json()
    assert text == (
        '{"cost":null,"explicit_moves":[["é",0,1,0.0]],"format":1,"key_type":"str","pinned_keys":["b"],'
        f'"slot_bits":10,"slot_moves":[[0,0,0,1]],"source_digest":"{a.digest}","source_n_channels":2,'
        f'"target_digest":"{b.digest}","target_n_channels":2,"total_state":null}}'
    )


def test_construction_normalizes_order() -> None:
    plan = MigrationPlan(
        "int",
        10,
        3,
        3,
        DIGEST,
        DIGEST,
        explicit_moves=(ExplicitMove(5, 0, 1, 0.5), ExplicitMove(-2, 1, 2, 0.0)),
        pinned_keys=(9, 4),
        slot_moves=np.array([[7, 9, 2, 0], [0, 3, 0, 1]]),
    )
    assert [move.key for move in plan.explicit_moves] == [-2, 5]
    assert plan.pinned_keys == (4, 9)
    assert plan.slot_moves.tolist() == [[0, 3, 0, 1], [7, 9, 2, 0]]
    assert not plan.slot_moves.flags.writeable
    assert plan.destination(100, 8, 2) == 0 and plan.destination(100, 5, 0) == 0


# --- validation ------------------------------------------------------------------------------------------


def test_plan_migration_rejects_mismatched_inputs() -> None:
    with pytest.raises(InvalidInput, match=r"^b must have a's key_type 'str' .*got 'int'") as excinfo:
        plan_migration(PartitionFunction(2, explicit={"x": 0}), PartitionFunction(2, explicit={1: 0}))
    assert excinfo.value.field == "b"
    with pytest.raises(InvalidInput, match=r"^b must have a's slot_bits 16 .*got 12") as excinfo:
        plan_migration(PartitionFunction(2), PartitionFunction(2, slot_bits=12))
    assert excinfo.value.field == "b"
    with pytest.raises(
        InvalidInput, match=r"^estimate must hold the functions' 'str' keys, got 'int'"
    ) as excinfo:
        plan_migration(
            PartitionFunction(2, explicit={"x": 0}),
            PartitionFunction(3),
            FrequencyEstimate.from_counts({1: 3}),
        )
    assert excinfo.value.field == "estimate"
    with pytest.raises(InvalidInput, match=r"^slot_bits must be the slot_bits 10 .*got 16") as excinfo:
        plan_migration(PartitionFunction(2), PartitionFunction(3), estimate_of([1, 2], [3.0, 4.0], 10))
    assert excinfo.value.field == "slot_bits"


def base_document() -> dict[str, Any]:
    a = PartitionFunction(
        3, key_type="str", slot_bits=10, explicit={"x": 0, "y": 1}, consistent=ConsistentSpec("mod")
    )
    b = PartitionFunction(
        4, key_type="str", slot_bits=10, explicit={"x": 2, "y": 1}, consistent=ConsistentSpec("mod")
    )
    document: dict[str, Any] = json.loads(plan_migration(a, b).to_json())
    return document


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"format": 2}, "format", r"^format must be 1, got 2"),
        ({"format": True}, "format", r"^format must be 1"),
        ({"colour": "red"}, "plan", r"^plan has unknown field\(s\) \['colour'\]"),
        ({"slot_bits": 9}, "slot_bits", r"^slot_bits must be an integer in \[10, 20\]"),
        (
            {"source_n_channels": 0},
            "source_n_channels",
            r"^source_n_channels must be an integer in \[1, 65536\]",
        ),
        ({"target_digest": "abc"}, "target_digest", r"^target_digest must be a SHA-256 digest"),
        ({"key_type": "bytes"}, "key_type", r"^key_type must be one of 'str', 'int' or None"),
        ({"key_type": "int"}, "key_type", r"^key_type must be 'str', the type of the plan's keys, got 'int'"),
        (
            {"explicit_moves": [["x", 1, 1, 0.0]]},
            "explicit_moves[0].target",
            r"^explicit_moves\[0\].target must differ from the source 1",
        ),
        (
            {"explicit_moves": [["x", 3, 1, 0.0]]},
            "explicit_moves[0].source",
            r"^explicit_moves\[0\].source must be an integer in \[0, 2\]",
        ),
        (
            {"explicit_moves": [["x", 0, 4, 0.0]]},
            "explicit_moves[0].target",
            r"^explicit_moves\[0\].target must be an integer in \[0, 3\]",
        ),
        (
            {"explicit_moves": [["x", 0, 1, -1.0]]},
            "explicit_moves[0].weight",
            r"^explicit_moves\[0\].weight must be a number in \[0, inf\)",
        ),
        (
            {"explicit_moves": [["x", 0, 1]]},
            "explicit_moves[0]",
            r"^explicit_moves\[0\] must be a \[key, source, target, weight\]",
        ),
        (
            {"explicit_moves": [[1.5, 0, 1, 0.0]]},
            "explicit_moves[0].key",
            r"^explicit_moves\[0\].key must be a str or a signed 64-bit int .* of type float",
        ),
        (
            {"explicit_moves": [["x", 0, 1, 0.0], ["x", 0, 2, 0.0]]},
            "explicit_moves",
            r"^explicit_moves must hold distinct keys, got 'x' twice",
        ),
        (
            {"explicit_moves": [["x", 0, 1, 0.0], [3, 0, 2, 0.0]]},
            "explicit_moves",
            r"^explicit_moves must all be '\w+' keys or all '\w+' keys",
        ),
        ({"pinned_keys": ["x"]}, "pinned_keys", r"^pinned_keys must not hold moved keys"),
        (
            {"pinned_keys": ["\ud800"]},
            "pinned_keys[0]",
            r"^pinned_keys\[0\] must be a key with a UTF-8 encoding",
        ),
        (
            {"slot_moves": [[0, 0, 1, 1]]},
            "slot_moves[0]",
            r"^slot_moves\[0\] must have a source and a target that differ, got \[0, 0, 1, 1\]",
        ),
        ({"slot_moves": [[0, 0, 3, 1]]}, "slot_moves[0]", r"^slot_moves\[0\] must have source in \[0, 2\]"),
        ({"slot_moves": [[0, 0, 0, 4]]}, "slot_moves[0]", r"^slot_moves\[0\] must have target in \[0, 3\]"),
        (
            {"slot_moves": [[5, 4, 0, 1]]},
            "slot_moves[0]",
            r"^slot_moves\[0\] must have last_slot in \[first_slot, 1023\]",
        ),
        (
            {"slot_moves": [[1024, 1024, 0, 1]]},
            "slot_moves[0]",
            r"^slot_moves\[0\] must have first_slot in \[0, 1023\]",
        ),
        (
            {"slot_moves": [[0, 5, 0, 1], [5, 6, 1, 2]]},
            "slot_moves",
            r"^slot_moves must have slot ranges that do not overlap",
        ),
        ({"slot_moves": [[0, 5, 0, 1], [6, 6, 0, 1]]}, "slot_moves", r"^slot_moves must have maximal runs"),
        ({"slot_moves": [[0, 5, 0, True]]}, "slot_moves", r"^slot_moves must hold integers only"),
        ({"slot_moves": [[0, 5, 0]]}, "slot_moves", r"^slot_moves must have shape \(runs, 4\)"),
        ({"slot_moves": 7}, "slot_moves", r"^slot_moves must be a sequence of rows"),
        (
            {"cost": 0.5},
            "total_state",
            r"^total_state must be a number when the other of cost and total_state is one",
        ),
        ({"cost": float("nan"), "total_state": 1.0}, "cost", r"^cost must be a number in \[0, inf\)"),
    ],
)
def test_from_json_names_the_invalid_field(change: dict[str, Any], field: str, message: str) -> None:
    document = base_document() | change
    with pytest.raises(InvalidInput, match=message) as excinfo:
        MigrationPlan.from_json(json.dumps(document))
    assert excinfo.value.field == field


def test_from_json_rejects_a_repeated_field() -> None:
    text = json.dumps(base_document())
    assert MigrationPlan.from_json(text).key_type == "str"
    with pytest.raises(InvalidInput, match=r"^plan must not repeat field 'slot_bits'") as excinfo:
        MigrationPlan.from_json(text[:-1] + ',"slot_bits":10}')
    assert excinfo.value.field == "plan"


# --- speed -----------------------------------------------------------------------------------------------


def test_a_plan_at_16_slot_bits_takes_milliseconds() -> None:
    estimate = zipf_estimate(1.0)
    scattered = ConsistentSpec("jump")  # its moved slots are scattered: a plan of many slot runs
    a = PartitionFunction(9, explicit={k: k % 9 for k in range(100)}, consistent=scattered)
    b = PartitionFunction(10, explicit={k: k % 10 for k in range(50, 150)}, consistent=scattered)
    plan_migration(a, b, estimate)  # builds and caches both slot tables
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        plan = plan_migration(a, b, estimate)
        timings.append(time.perf_counter() - start)
    assert len(plan.slot_moves) > 1000
    assert min(timings) < 0.05, timings
