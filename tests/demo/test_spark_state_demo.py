"""``repart demo --spark-state`` end to end: a Structured Streaming aggregation whose state partition
count the controller changes, its state equal to a groupBy of its input after every batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from repart.cli.app import app
from repart.storage import list_plans, make_engine, read_transaction


def test_the_spark_state_demo_rescales_its_query_and_checks_it(
    spark_settings_restored: Any, tmp_path: Path
) -> None:
    workdir = tmp_path / "demo"
    result = CliRunner().invoke(
        app, ["demo", "--spark-state", "--batches", "3", "--workdir", str(workdir), "--json", "-"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["exact"] is True and document["rows"]
    assert all(row["exact"] for row in document["rows"])
    stored = read_transaction(
        make_engine(f"sqlite:///{workdir / 'repart.db'}"),
        lambda session: [(plan.id, plan.status) for plan in list_plans(session, "clicks")],
    )
    assert [plan["plan"] for plan in document["applied"]] == [plan_id for plan_id, _ in stored]
    assert {status for _, status in stored} <= {"applied"}
    assert document["applied"], "the growing load changed the count"
