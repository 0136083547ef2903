"""Migration plans between split functions (DESIGN §11.3): the consolidation rule checked against an
oracle written out here (every partial ends on the key's candidates in ``b``, staying where it can, else
merged into its home in ``b``), unchanged plans between key-preserving functions (digests computed
before split mode), reverse, canonical JSON, the cost of consolidations on hand-computed examples and
validation naming the field."""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.migration import Consolidation, MigrationPlan, SplitKey, plan_migration
from repart.partitioning.consistent import ConsistentSpec
from repart.partitioning.domain import Key, KeyType
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.function import PartitionFunction
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.partitioning.resources import Resources
from repart.partitioning.split.function import SplitEntry, SplitFunction
from tests.factories import CONSISTENT_SPECS
from tests.migration.universe import KEY_TYPES, UNIVERSE, UNTRACKED, estimate_of, slot_of

BITS = 10
MOD = ConsistentSpec("mod")
Function = PartitionFunction | SplitFunction


def candidates_of(function: Function, key: Key) -> tuple[int, ...]:
    """The channels a key's state may be on: written out, not ``SplitFunction.candidates``."""
    if isinstance(function, SplitFunction):
        entry = function.split.get(key)
        return entry.candidates if entry is not None else (function.home.lookup(key),)
    return (function.lookup(key),)


def home_of(function: Function) -> PartitionFunction:
    return function.home if isinstance(function, SplitFunction) else function


@st.composite
def homes(draw: st.DrawFn, key_type: KeyType) -> PartitionFunction:
    n = draw(st.integers(1, 8))
    return PartitionFunction(
        n,
        key_type=key_type,
        slot_bits=BITS,
        consistent=draw(st.sampled_from(CONSISTENT_SPECS)),
        explicit=draw(
            st.dictionaries(st.sampled_from(UNIVERSE[key_type]), st.integers(0, n - 1), max_size=8)
        ),
        slot_overrides=draw(st.dictionaries(st.integers(0, 2**BITS - 1), st.integers(0, n - 1), max_size=30)),
    )


@st.composite
def split_functions(draw: st.DrawFn, key_type: KeyType) -> Function:
    """A PartitionFunction, or a SplitFunction over one with random candidates and shares."""
    home = draw(homes(key_type))
    if home.n_channels < 2 or not draw(st.booleans()):
        return home
    pool = [*UNIVERSE[key_type], *UNTRACKED[key_type][:20]]
    split: dict[Key, SplitEntry] = {}
    for key in draw(st.lists(st.sampled_from(pool), unique=True, max_size=8)):
        first = home.lookup(key)
        others = draw(st.permutations([c for c in range(home.n_channels) if c != first]))
        candidates = (first, *others[: draw(st.integers(1, len(others)))])
        raw = draw(st.lists(st.integers(0, 5), min_size=len(candidates), max_size=len(candidates)))
        raw[0] += 1  # at least one positive share
        split[key] = SplitEntry(candidates, tuple(r / sum(raw) for r in raw))
    return SplitFunction(home, split)


@st.composite
def split_pairs(draw: st.DrawFn) -> tuple[Function, Function]:
    key_type: KeyType = draw(st.sampled_from(KEY_TYPES))
    return draw(split_functions(key_type)), draw(split_functions(key_type))


def all_keys(key_type: KeyType) -> list[Key]:
    return sorted(set(UNIVERSE[key_type]) | set(UNTRACKED[key_type]))


def window(key_type: KeyType) -> FrequencyEstimate:
    """Counts for every key of the test universe; the slot counts hold exactly those counts."""
    keys = all_keys(key_type)
    return estimate_of(keys, [float(1 + (i * 37) % 101) for i in range(len(keys))], BITS)


# --- the rule --------------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(split_pairs())
def test_every_partial_ends_on_its_candidates_in_b_staying_where_it_can(
    pair: tuple[Function, Function],
) -> None:
    a, b = pair
    key_type = a.key_type
    assert key_type is not None  # the homes are built with their key type
    plan = plan_migration(a, b)
    expected: set[Consolidation] = set()
    for key in all_keys(key_type):
        before, after = candidates_of(a, key), candidates_of(b, key)
        for channel in before:
            destination = plan.destination(key, slot_of(key, BITS), channel)
            assert destination in after
            assert destination == (channel if channel in after else after[0])
            if key in plan.target_candidates and destination != channel:
                expected.add(Consolidation(key, channel, destination, 0.0))
    assert set(plan.consolidations) == expected
    split = {k for f in (a, b) if isinstance(f, SplitFunction) for k in f.split}
    assert {row.key for row in plan.split_keys} == split
    for key in split:
        assert plan.source_candidates[key] == candidates_of(a, key)
        assert plan.target_candidates[key] == candidates_of(b, key)


@settings(max_examples=60, deadline=None)
@given(split_pairs())
def test_keys_no_function_splits_are_planned_as_between_the_homes(pair: tuple[Function, Function]) -> None:
    a, b = pair
    plan, homes_plan = plan_migration(a, b), plan_migration(home_of(a), home_of(b))
    split = set(plan.target_candidates)
    assert np.array_equal(plan.slot_moves, homes_plan.slot_moves)
    assert plan.explicit_moves == tuple(m for m in homes_plan.explicit_moves if m.key not in split)
    assert plan.pinned_keys == tuple(k for k in homes_plan.pinned_keys if k not in split)
    assert (plan.source_digest, plan.target_digest) == (a.digest, b.digest)


def test_a_key_that_becomes_split_moves_nothing_when_its_channel_stays_a_candidate() -> None:
    home = PartitionFunction(4, slot_bits=BITS, consistent=MOD, explicit={"hot": 1})
    split = SplitFunction(home, {"hot": SplitEntry((1, 3, 0), (0.5, 0.25, 0.25))})
    plan = plan_migration(home, split, estimate_of(["hot", "x"], [600.0, 400.0], BITS))
    assert plan.split_keys == (SplitKey("hot", (1,), (1.0,), (1, 3, 0), (0.5, 0.25, 0.25), 0.6),)
    assert plan.is_empty and plan.cost == 0.0 and plan.m == 0.0
    assert plan.destination("hot", slot_of("hot", BITS), 1) == 1


def test_a_key_that_becomes_split_off_its_channel_goes_to_its_new_home() -> None:
    a = PartitionFunction(4, slot_bits=BITS, consistent=MOD, explicit={"hot": 3})
    home = PartitionFunction(4, slot_bits=BITS, consistent=MOD, explicit={"hot": 0})
    b = SplitFunction(home, {"hot": SplitEntry((0, 1), (0.5, 0.5))})
    plan = plan_migration(a, b, estimate_of(["hot", "x"], [600.0, 400.0], BITS))
    assert plan.consolidations == (Consolidation("hot", 3, 0, 0.6),)
    assert not plan.explicit_moves and not plan.pinned_keys
    assert plan.cost == pytest.approx(0.6) and plan.m == pytest.approx(0.6 * 4)
    assert plan.channels_losing_keys == (3,) and plan.channels_gaining_keys == (0,)


# --- cost ------------------------------------------------------------------------------------------------


def leaving_the_head() -> tuple[SplitFunction, PartitionFunction, FrequencyEstimate]:
    """``hot`` (600 of 1000 tuples) split over 0, 1, 2 (½, ¼, ¼) in ``a``, unsplit at home 0 in ``b``;
    the homes are equal, so nothing else moves."""
    home = PartitionFunction(4, slot_bits=BITS, consistent=MOD, explicit={"hot": 0})
    a = SplitFunction(home, {"hot": SplitEntry((0, 1, 2), (0.5, 0.25, 0.25))})
    return a, home, estimate_of(["hot", "x"], [600.0, 400.0], BITS)


def test_m_counts_the_consolidations_of_a_key_leaving_the_head() -> None:
    a, b, estimate = leaving_the_head()
    plan = plan_migration(a, b, estimate)
    # Two quarter partials of f = 0.6 merge into channel 0: M = 0.15 + 0.15; L̄_s = (0.6 + 0.4) / 4.
    assert plan.consolidations == (Consolidation("hot", 1, 0, 0.15), Consolidation("hot", 2, 0, 0.15))
    assert plan.move_cost == 0.0 and plan.total_state == pytest.approx(1.0)
    assert plan.cost == pytest.approx(0.3) and plan.m == pytest.approx(1.2)
    assert plan.channels_losing_keys == (1, 2) and plan.channels_gaining_keys == (0,)
    assert not plan.is_empty
    for channel, destination in ((0, 0), (1, 0), (2, 0)):
        assert plan.destination("hot", slot_of("hot", BITS), channel) == destination
    back = plan.reverse()  # becoming split again moves nothing
    assert back.consolidations == () and back.cost == 0.0 and back.m == 0.0


def test_consolidation_weights_follow_the_state_exponent() -> None:
    a, b, estimate = leaving_the_head()
    plan = plan_migration(a, b, estimate, Resources.parse("QCL"))
    assert [row.weight for row in plan.consolidations] == pytest.approx([0.36 * 0.25, 0.36 * 0.25])
    assert plan.split_keys[0].weight == pytest.approx(0.36)


def test_a_moved_home_consolidates_only_the_partials_off_the_new_candidates() -> None:
    home_a = PartitionFunction(4, slot_bits=BITS, consistent=MOD, explicit={"hot": 0, "k": 1})
    home_b = PartitionFunction(4, slot_bits=BITS, consistent=MOD, explicit={"hot": 2, "k": 3})
    a = SplitFunction(home_a, {"hot": SplitEntry((0, 1), (0.5, 0.5))})
    b = SplitFunction(home_b, {"hot": SplitEntry((2, 1), (0.75, 0.25))})
    estimate = estimate_of(["hot", "k", "x"], [500.0, 100.0, 400.0], BITS)
    plan = plan_migration(a, b, estimate)
    slot = slot_of("hot", BITS)
    assert plan.consolidations == (Consolidation("hot", 0, 2, 0.25),)
    assert [(m.key, m.source, m.target, m.weight) for m in plan.explicit_moves] == [("k", 1, 3, 0.1)]
    assert plan.destination("hot", slot, 0) == 2 and plan.destination("hot", slot, 1) == 1
    assert plan.move_cost == pytest.approx(0.1) and plan.cost == pytest.approx(0.35)
    assert plan.m == pytest.approx(0.35 * 4)
    back = plan.reverse()  # b's partial on 2 goes home to 0; the partial on 1 stays
    assert back.consolidations == (Consolidation("hot", 2, 0, 0.375),)
    assert back.cost == pytest.approx(0.1 + 0.375)


def test_split_keys_leave_the_tail_of_their_slot() -> None:
    """The state of a split key is counted once, as the key's, not again in its slot's tail."""
    a, b, estimate = leaving_the_head()
    plain = plan_migration(a.home, b, estimate)
    assert plan_migration(a, b, estimate).total_state == pytest.approx(plain.total_state)


# --- unchanged plans between key-preserving functions ----------------------------------------------------

# Digests of these plans computed with the code before split mode (same inputs, same calls).
PLAIN_DIGESTS = {
    "int": "8384969a74268d974c8d3ddd734e623ba957eac5e83c1cd918e1e2ba78ddb3b0",
    "int-estimate": "3b0de8514e23dda5515d687d046517507fd77c0cba3aa9d50e3c4db0d4f7dc35",
    "int-estimate-QCL": "9f395f27a1f03977d568513dc17724206c9ecccad87c10a5d2cd8683acdd1ea7",
    "str-estimate": "9c38f150d62433d28d724982710a4d5992605554cbb6acdc728d890796bb9568",
    "same": "98039a1f5764937dec564cbc6d35da1fe13620f1355792cc854847be18805f05",
    "grow": "cbee6995bf43bb4e6b86f7bab8986a26636f358dc7ee46fe7f8f0a4cb5e164d2",
}


def zipf_like(keys: list[Key], key_type: KeyType, slot_bits: int) -> FrequencyEstimate:
    counts = np.array([1000.0 / (i + 1) for i in range(len(keys))]).round()
    slots = slots_of_hashes(hash_keys(keys, key_type), slot_bits)
    slot_counts = np.bincount(slots, weights=counts, minlength=2**slot_bits).astype(np.float64) + 3.0
    return FrequencyEstimate(
        keys=tuple(keys),
        counts=counts,
        total=round(slot_counts.sum()),
        slot_counts=slot_counts,
        slot_bits=slot_bits,
        distinct_estimate=5000,
    )


def plain_plans() -> dict[str, MigrationPlan]:
    ints: list[Key] = list(range(300))
    strs: list[Key] = [f"k{i}" for i in range(300)]
    jump = ConsistentSpec("jump")  # the default when the digests were pinned
    a = PartitionFunction(5, slot_bits=10, explicit={k: k % 5 for k in range(0, 30)}, consistent=jump)
    b = PartitionFunction(
        7,
        slot_bits=10,
        explicit={k: (k * 3) % 7 for k in range(10, 50)},
        slot_overrides={3: 6, 4: 6},
        consistent=jump,
    )
    ring = ConsistentSpec("ring", replicas=20, seed=3)
    s1 = PartitionFunction(3, explicit={"k1": 0, "k2": 2}, consistent=ring, slot_bits=12)
    s2 = PartitionFunction(4, explicit={"k1": 3, "k3": 1}, slot_bits=12, consistent=jump)
    return {
        "int": plan_migration(a, b),
        "int-estimate": plan_migration(a, b, zipf_like(ints, "int", 10)),
        "int-estimate-QCL": plan_migration(b, a, zipf_like(ints, "int", 10), Resources.parse("QCL")),
        "str-estimate": plan_migration(s1, s2, zipf_like(strs, "str", 12)),
        "same": plan_migration(s1, s1, zipf_like(strs, "str", 12)),
        "grow": plan_migration(PartitionFunction(9, consistent=jump), PartitionFunction(10, consistent=jump)),
    }


def test_plans_between_key_preserving_functions_keep_their_digests() -> None:
    plans = plain_plans()
    assert {name: plan.digest for name, plan in plans.items()} == PLAIN_DIGESTS
    for plan in plans.values():
        document = json.loads(plan.to_json())
        assert "split_keys" not in document and "move_cost" not in document
        assert plan.move_cost == plan.cost and plan.consolidations == ()


def test_split_functions_with_empty_tables_plan_like_their_homes() -> None:
    a, b = PartitionFunction(3, slot_bits=BITS, explicit={"x": 0}), PartitionFunction(4, slot_bits=BITS)
    estimate = window("str")
    plan = plan_migration(SplitFunction(a), SplitFunction(b), estimate)
    document, plain = json.loads(plan.to_json()), json.loads(plan_migration(a, b, estimate).to_json())
    assert set(document) == set(plain)
    assert {k: v for k, v in document.items() if not k.endswith("_digest")} == {
        k: v for k, v in plain.items() if not k.endswith("_digest")
    }


def test_a_plain_document_with_empty_split_fields_reads_as_the_plain_plan() -> None:
    plan = plain_plans()["int-estimate"]
    document = json.loads(plan.to_json()) | {"split_keys": [], "move_cost": plan.cost}
    assert MigrationPlan.from_json(json.dumps(document)).to_json() == plan.to_json()


# --- reverse and JSON ------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(split_pairs(), st.booleans())
def test_reverse_is_the_plan_back_and_json_round_trips(
    pair: tuple[Function, Function], with_estimate: bool
) -> None:
    a, b = pair
    assert a.key_type is not None
    estimate = window(a.key_type) if with_estimate else None
    plan = plan_migration(a, b, estimate)
    assert plan.reverse() == plan_migration(b, a, estimate)
    assert plan.reverse().reverse() == plan
    text = plan.to_json()
    parsed = MigrationPlan.from_json(text)
    assert parsed == plan and parsed.to_json() == text and parsed.digest == plan.digest
    assert pickle.loads(pickle.dumps(plan)) == plan
    assert ("split_keys" in json.loads(text)) == bool(plan.split_keys)
    if estimate is not None:
        assert plan.move_cost is not None
        assert plan.cost == pytest.approx(plan.move_cost + sum(row.weight for row in plan.consolidations))


def test_canonical_json_of_a_split_plan() -> None:
    a, b, _ = leaving_the_head()
    text = plan_migration(a, b).to_json()
    assert '"split_keys":[["hot",[0,1,2],[0.5,0.25,0.25],[0],[1.0],0.0]]' in text
    assert '"move_cost":null' in text and '"pinned_keys":[]' in text


# --- validation ------------------------------------------------------------------------------------------


def split_document() -> dict[str, Any]:
    a, b, estimate = leaving_the_head()
    document: dict[str, Any] = json.loads(plan_migration(a, b, estimate).to_json())
    return document


def with_row(**changes: Any) -> dict[str, Any]:
    """``split_keys`` with its one row changed (columns by name)."""
    row = dict(zip(SplitKey._fields, split_document()["split_keys"][0], strict=True)) | changes
    return {"split_keys": [list(row.values())]}


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"split_keys": 7}, "split_keys", r"^split_keys must be a list of rows, got 7"),
        ({"split_keys": [["hot", [0, 1], [0.5, 0.5]]]}, "split_keys[0]", r"must be a \[key, source, "),
        (with_row(key=1.5), "split_keys[0].key", r"must be a str or a signed 64-bit int"),
        (with_row(source=[]), "split_keys[0].source", r"must be a non-empty list of channels, got \[\]"),
        (with_row(source=[0, 1, 4]), "split_keys[0].source[2]", r"must be an integer in \[0, 3\]"),
        (with_row(source=[0, 1, 1]), "split_keys[0].source", r"must be distinct channels, got \[0, 1, 1\]"),
        (with_row(target=[True]), "split_keys[0].target[0]", r"must be an integer in \[0, 3\]"),
        (with_row(source_shares=[0.5, 0.5]), "split_keys[0].source_shares", r"must be a list of 3 shares"),
        (
            with_row(source_shares=[1.5, -0.25, -0.25]),
            "split_keys[0].source_shares[0]",
            r"must be a number in \[0, 1\]",
        ),
        (with_row(target_shares=[0.5]), "split_keys[0].target_shares", r"must sum to 1 \(within 1e-09\)"),
        (
            with_row(source=[1], source_shares=[1.0]),
            "split_keys[0]",
            r"must be split \(2 channels or more\) in the source or the target, got source \[1\]",
        ),
        (with_row(weight=-1.0), "split_keys[0].weight", r"must be a number in \[0, inf\)"),
        (
            {"split_keys": [with_row()["split_keys"][0]] * 2},
            "split_keys",
            r"must hold distinct keys, got 'hot' twice",
        ),
        (
            {"split_keys": [with_row()["split_keys"][0], with_row(key=7)["split_keys"][0]]},
            "split_keys",
            r"must all be '\w+' keys or all '\w+' keys",
        ),
        ({"pinned_keys": ["hot"]}, "split_keys", r"must not hold keys of explicit_moves or pinned_keys"),
        ({"pinned_keys": [3]}, "split_keys", r"must all be '\w+' keys or all '\w+' keys"),
        ({"key_type": "int"}, "key_type", r"^key_type must be 'str', the type of the plan's keys"),
        ({"move_cost": None}, "move_cost", r"must be a number when the plan has split_keys and a cost"),
        ({"move_cost": -0.5}, "move_cost", r"must be a number in \[0, inf\)"),
        ({"cost": 0.5}, "cost", r"^cost must be move_cost plus the weights of the consolidations, 0.3"),
        ({"cost": None, "total_state": None}, "move_cost", r"must be None when cost is None"),
        ({"moves": []}, "plan", r"^plan has unknown field\(s\) \['moves'\]"),
    ],
)
def test_from_json_names_the_invalid_split_field(change: dict[str, Any], field: str, message: str) -> None:
    document = split_document() | change
    with pytest.raises(InvalidInput, match=message) as excinfo:
        MigrationPlan.from_json(json.dumps(document))
    assert excinfo.value.field == field


def test_plan_migration_checks_split_functions_like_plain_ones() -> None:
    home = PartitionFunction(2, slot_bits=BITS, explicit={1: 0})
    split = SplitFunction(home, {1: SplitEntry((0, 1), (0.5, 0.5))})
    with pytest.raises(InvalidInput, match=r"^b must have a's key_type 'int' .*got 'str'") as excinfo:
        plan_migration(split, PartitionFunction(2, slot_bits=BITS, explicit={"x": 0}))
    assert excinfo.value.field == "b"
    with pytest.raises(InvalidInput, match=r"^b must have a's slot_bits 10 .*got 16") as excinfo:
        plan_migration(split, PartitionFunction(2))
    assert excinfo.value.field == "b"
    with pytest.raises(InvalidInput, match=r"^estimate must hold the functions' 'int' keys") as excinfo:
        plan_migration(split, PartitionFunction(2, slot_bits=BITS), window("str"))
    assert excinfo.value.field == "estimate"
