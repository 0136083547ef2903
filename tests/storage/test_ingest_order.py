"""Ingest keeps a region's window seqs consistent with their times (issue #9: a job that restarts its seq
from 0, or a seq of 2^63 - 1 dated before the existing windows, is refused)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select

from repart.errors import InvalidInput
from repart.protocol.snapshot import Snapshot
from repart.storage import make_engine, models, run_in_transaction, upgrade
from tests.factories import START, add_region, ingest, row_counts, small_snapshot

MINUTE = timedelta(minutes=1)


@pytest.fixture
def region(engine: Engine) -> None:
    """Region ``trades`` in the ``engine``'s fresh database (SQLite and PostgreSQL)."""
    add_region(engine)


def window(seq: int, minute: int, length: int = 1) -> Snapshot:
    """Window ``seq`` from minute ``minute`` for ``length`` minutes."""
    return small_snapshot(
        seq=seq, window_start=START + minute * MINUTE, window_end=START + (minute + length) * MINUTE
    )


def stored(engine: Engine) -> list[int]:
    return run_in_transaction(
        engine, lambda s: list(s.scalars(select(models.Snapshot.seq).order_by(models.Snapshot.seq)))
    )


@pytest.mark.usefixtures("region")
def test_a_job_that_restarts_its_seq_from_zero_is_refused(engine: Engine) -> None:
    ingest(engine, window(41, 41), window(42, 42))
    before = row_counts(engine)
    with pytest.raises(InvalidInput) as raised:
        ingest(engine, window(0, 43))
    assert raised.value.field == "window.seq"
    assert "(42, inf)" in str(raised.value)
    assert row_counts(engine) == before


@pytest.mark.usefixtures("region")
def test_a_huge_seq_dated_before_the_existing_windows_is_refused(engine: Engine) -> None:
    ingest(engine, window(5, 5), window(6, 6))
    with pytest.raises(InvalidInput) as raised:
        ingest(engine, window(2**63 - 1, 1))
    assert raised.value.field == "window.seq"
    assert "(-inf, 5)" in str(raised.value)
    assert stored(engine) == [5, 6]


@pytest.mark.usefixtures("region")
def test_a_late_window_between_two_others_is_accepted_with_a_seq_between_theirs(engine: Engine) -> None:
    ingest(engine, window(1, 1), window(9, 9))
    ingest(engine, window(4, 4))
    with pytest.raises(InvalidInput):
        ingest(engine, window(10, 5))
    assert stored(engine) == [1, 4, 9]


@pytest.mark.usefixtures("region")
def test_a_repeated_seq_and_an_overlapping_window_name_their_field(engine: Engine) -> None:
    ingest(engine, window(3, 3))
    with pytest.raises(InvalidInput) as repeated:
        ingest(engine, window(3, 7))
    with pytest.raises(InvalidInput) as overlapping:
        ingest(engine, window(4, 3))
    assert (repeated.value.field, overlapping.value.field) == ("window.seq", "window.start")


WINDOWS = st.lists(
    st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(1, 3)), min_size=1, max_size=8
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(WINDOWS)
def test_accepted_windows_are_exactly_those_an_order_oracle_accepts(
    tmp_path_factory: pytest.TempPathFactory, windows: list[tuple[int, int, int]]
) -> None:
    path = Path(tmp_path_factory.mktemp("order")) / "repart.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    add_region(engine)
    accepted: list[tuple[int, int, int]] = []
    try:
        for seq, minute, length in windows:
            start, end = minute, minute + length
            consistent = all(
                seq != other_seq
                and (end <= other_start or other_end <= start)
                and ((seq < other_seq) == (end <= other_start))
                for other_seq, other_start, other_end in accepted
            )
            try:
                ingest(engine, window(seq, minute, length))
            except InvalidInput:
                assert not consistent
            else:
                assert consistent
                accepted.append((seq, start, end))
        assert stored(engine) == sorted(seq for seq, _, _ in accepted)
    finally:
        engine.dispose()
