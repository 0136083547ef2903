"""A ``repart tick`` killed with SIGKILL at a random moment leaves the database consistent (DESIGN §8, §10).

One SQLite region with a fixed policy and a low rebalance threshold, so that every tick after a new
snapshot activates a version. Each trial ingests a new snapshot, starts ``repart tick`` as a
subprocess, kills it after a random delay between the command's start-up (imports) and the measured
length of an uninterrupted tick, so that the kills land in the tick's database work, and
checks the database: every version but the first has exactly one plan and one ``activated`` event,
every plan's versions exist, no plan is left ``applying``, the storage invariants hold, and the next
tick works.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session

from repart.controller.tick import tick
from repart.storage import models, run_in_transaction, version_function
from repart.storage.jsontext import load_object
from tests.factories import REGION, add_zipf_region, ingest_skewed_window

TRIALS = 20
SEED = 20260103
N_CHANNELS = 4


@pytest.fixture
def backend() -> str:
    """The ``engine`` of this test is a migrated SQLite file (``PRAGMA integrity_check`` below)."""
    return "sqlite"


@pytest.fixture
def initialized_region(engine: Engine) -> None:
    """The region, its first version applied by a tick."""
    add_zipf_region(engine, n_channels_initial=N_CHANNELS, settings={"rebalance_threshold": 0.5})
    assert tick(engine, REGION).action == "initialized"


def tick_command(url: str) -> list[str]:
    return [str(Path(sys.executable).with_name("repart")), "tick", "--db", url]


def check_consistent(session: Session) -> None:
    """The crash-safety and storage invariants of one region's versions, plans and events."""
    assert session.execute(text("PRAGMA integrity_check")).scalar() == "ok"
    assert session.execute(text("PRAGMA foreign_key_check")).all() == []
    region_id = session.scalar(select(models.Region.id).where(models.Region.name == REGION))
    versions = session.scalars(
        select(models.Version).where(models.Version.region_id == region_id).order_by(models.Version.number)
    ).all()
    plans = session.scalars(select(models.Plan).where(models.Plan.region_id == region_id)).all()
    activated = [
        load_object(event.data_json).get("activated_version")
        for event in session.scalars(
            select(models.Event).where(models.Event.region_id == region_id, models.Event.kind == "activated")
        )
    ]
    numbers = [version.number for version in versions]
    assert numbers == list(range(1, len(versions) + 1))
    assert [v.number for v in versions if v.status == "applied"] == [1]
    for version in versions:
        assert version_function(version).digest == version.digest
    plans_to = Counter(plan.to_version for plan in plans)
    events_for = Counter(activated)
    for number in numbers[1:]:
        assert plans_to[number] == 1, f"version {number} has {plans_to[number]} plans"
        assert events_for[number] == 1, f"version {number} has {events_for[number]} activated events"
    assert set(plans_to) <= set(numbers[1:]) and set(events_for) <= set(numbers[1:])
    for plan in plans:
        assert plan.from_version in numbers and plan.to_version in numbers
        assert plan.status != "applying"
        moves = session.scalar(
            select(func.count()).select_from(models.PlanMove).where(models.PlanMove.plan_id == plan.id)
        )
        assert moves == plan.explicit_moves + plan.slot_moves
    pending = [plan.to_version for plan in plans if plan.status == "pending"]
    assert len(pending) <= 1
    assert pending == [v.number for v in versions if v.status == "planned"]


@pytest.mark.slow
@pytest.mark.usefixtures("initialized_region")
def test_a_killed_tick_leaves_the_database_consistent(engine: Engine, db_url: str) -> None:
    rng = random.Random(SEED)
    ingest_skewed_window(engine, 1, N_CHANNELS)
    started = time.perf_counter()
    subprocess.run(tick_command(db_url), check=True, capture_output=True)
    duration = time.perf_counter() - started
    # `repart tick --help` imports everything and exits: kills are aimed after that start-up, at the tick.
    started = time.perf_counter()
    subprocess.run([*tick_command(db_url), "--help"], check=True, capture_output=True)
    start_up = min(time.perf_counter() - started, 0.8 * duration)
    run_in_transaction(engine, check_consistent)
    assert run_in_transaction(engine, lambda session: session.scalar(select(func.count(models.Plan.id)))) == 1

    outcomes = Counter[str]()
    for trial in range(TRIALS):
        ingest_skewed_window(engine, 2 * trial + 2, N_CHANNELS)
        process = subprocess.Popen(tick_command(db_url), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(start_up, duration))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        outcomes["killed" if process.returncode == -signal.SIGKILL else "finished"] += 1
        run_in_transaction(engine, check_consistent)

        ingest_skewed_window(engine, 2 * trial + 3, N_CHANNELS)
        result = tick(engine, REGION)
        assert result.action in ("activated", "unchanged", "idle"), result.reason
        run_in_transaction(engine, check_consistent)
    assert outcomes["killed"] > 0, outcomes
