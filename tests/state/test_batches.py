"""Batch identity: a streaming query's (id, batch id) on the store's sequence, and the batch record's
document with its query."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.state.batches import AbsorbedBatch, ChannelUpdate, QueryBatch, absorbed_batch, sequence_of


def record(batch_id: int, query: QueryBatch | None = None) -> AbsorbedBatch:
    return absorbed_batch(batch_id, [ChannelUpdate(0, 5, 4, 100, 0.5)], query)


def test_a_first_query_keeps_its_batch_ids_in_an_empty_store() -> None:
    assert sequence_of(None, QueryBatch("q", 0)) == 0
    assert sequence_of(None, QueryBatch("q", 3)) == 3


@given(st.integers(0, 10**6), st.integers(0, 1000), st.integers(0, 1000))
def test_the_query_that_wrote_the_last_batch_continues_by_its_own_step(last: int, at: int, step: int) -> None:
    assert sequence_of(record(last, QueryBatch("q", at)), QueryBatch("q", at + step)) == last + step


@given(st.integers(0, 10**6), st.integers(0, 1000))
def test_another_query_or_a_plain_job_continues_after_the_last_batch(last: int, batch: int) -> None:
    assert sequence_of(record(last, QueryBatch("old", 50)), QueryBatch("new", batch)) == last + 1
    assert sequence_of(record(last), QueryBatch("new", batch)) == last + 1


def test_a_batch_id_going_back_within_a_query_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"^batch_id must not go back within query q: .* got batch 3"):
        sequence_of(record(9, QueryBatch("q", 4)), QueryBatch("q", 3))


def test_the_record_keeps_its_query_in_its_document() -> None:
    absorbed = record(7, QueryBatch("q-1", 2))
    document = absorbed.to_dict()
    assert document["query"] == {"id": "q-1", "batch": 2}
    assert AbsorbedBatch.from_dict(document) == absorbed
    assert "query" not in record(7).to_dict() and AbsorbedBatch.from_dict(record(7).to_dict()) == record(7)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"id": "", "batch": 1}, "batch.query.id"),
        ({"id": "q"}, "batch.query"),
        ({"id": 3, "batch": 1}, "batch.query.id"),
    ],
)
def test_a_bad_query_in_a_record_is_refused_naming_the_field(query: object, field: str) -> None:
    document = record(1).to_dict() | {"query": query}
    with pytest.raises(InvalidInput, match=f"^{field} "):
        AbsorbedBatch.from_dict(document)
