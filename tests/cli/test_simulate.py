"""``repart simulate`` end to end: output files, and bad input as a message with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repart.cli.app import app
from repart.sim.experiment import RECORD_FIELDS

runner = CliRunner()
SMALL = ["simulate", "--channels", "4", "--domain", "20000", "--algorithms", "redist,uniform"]


def test_simulate_writes_json_records_and_a_png(tmp_path: Path) -> None:
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    result = runner.invoke(app, [*SMALL, "--json", str(out), "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    records = json.loads(out.read_text())
    assert len(records) == 2 * 4
    assert all(list(r) == list(RECORD_FIELDS) for r in records)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "redist" in result.output


def test_simulate_json_to_stdout() -> None:
    result = runner.invoke(app, [*SMALL, "--json", "-"])
    assert result.exit_code == 0
    assert [r["N"] for r in json.loads(result.stdout)].count(4) == 2


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [
        ("--alpha", "0.5", "alpha"),
        ("--sigma", "0", "sigma"),
        ("--sigma", "1.5", "sigma"),
        ("--zipf", "-1", "zipf"),
        ("--domain", "0", "domain"),
        ("--channels", "0", "channels"),
        ("--resources", "LCX", "resources"),
        ("--utility", "BEST", "utility"),
        ("--algorithms", "scan,magic", "algorithms"),
        ("--runs", "0", "runs"),
    ],
)
def test_bad_input_exits_2_with_the_field_and_writes_nothing(
    tmp_path: Path, option: str, value: str, field: str
) -> None:
    out = tmp_path / "r.json"
    result = runner.invoke(app, [*SMALL, option, value, "--json", str(out)])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {option} "), result.output
    assert field in result.output
    assert "Traceback" not in result.output
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_infinite_ratios_become_null_in_strict_json(tmp_path: Path) -> None:
    # 5 keys on 8 channels: some channel is empty, so r = max/min is infinite
    result = runner.invoke(app, ["simulate", "--channels", "8", "--domain", "5", "--json", "-"])
    assert result.exit_code == 0, result.output
    assert "Infinity" not in result.stdout
    records = json.loads(result.stdout)
    assert any(r["b"] is None for r in records)


@pytest.mark.parametrize(
    ("option", "value"), [("--plot", "."), ("--plot", "-"), ("--json", "."), ("--json", "no/such/dir/x.json")]
)
def test_bad_output_paths_exit_2(option: str, value: str) -> None:
    result = runner.invoke(app, [*SMALL, option, value])
    assert result.exit_code == 2
    assert option in result.output and "Traceback" not in result.output
