"""``repart simulate --split SCHEME``: split records in the JSON and the table, and bad schemes."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from repart.cli.app import app
from repart.sim.experiment import RECORD_FIELDS
from repart.sim.split import SPLIT_FIELDS

runner = CliRunner()
SMALL = ["simulate", "--channels", "4", "--domain", "5000", "--algorithms", "redist"]


def test_split_records_keep_today_s_fields_and_add_memory_and_split_keys() -> None:
    result = runner.invoke(app, [*SMALL, "--split", "dchoices", "--split", "pkg,wchoices", "--json", "-"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    names = {r["algorithm"] for r in records}
    assert names == {"redist", "split-dchoices", "split-pkg", "split-wchoices"}
    assert len(records) == 4 * 4
    for record in records:
        if record["algorithm"] == "redist":
            assert list(record) == list(RECORD_FIELDS)
        else:
            assert list(record) == list(RECORD_FIELDS + SPLIT_FIELDS)
            assert record["memory"] >= 1.0 and record["split_keys"] >= 0


def test_the_table_shows_memory_and_split_keys(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, [*SMALL, "--split", "rr", "--tail-aware", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "split-rr" in result.output and "memory" in result.output
    records = json.loads(out.read_text())
    assert {(r["algorithm"], r["tail_aware"]) for r in records} == {
        ("redist", False),
        ("redist", True),
        ("split-rr", False),
        ("split-rr", True),
    }


def test_an_unknown_scheme_exits_2_naming_the_option_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, [*SMALL, "--split", "dchoices,magic", "--json", str(out)])
    assert result.exit_code == 2
    assert result.output.startswith("error: --split "), result.output
    assert "magic" in result.output and "dchoices" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()
