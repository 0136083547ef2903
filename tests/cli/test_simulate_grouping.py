"""``repart simulate-grouping`` end to end: table, JSON, plot, and bad input as a message with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repart.cli.app import app
from repart.cli.simulate_grouping import ALL_SCHEMES, ALL_WORKLOADS
from repart.partitioning.groupings import SCHEMES
from repart.sim.grouping import RECORD_FIELDS
from repart.sim.streams import WORKLOADS

runner = CliRunner()
SMALL = ["simulate-grouping", "--messages", "20000", "--keys", "50", "--workers", "4,8", "--sources", "3"]


def test_writes_json_records_a_png_and_a_table(tmp_path: Path) -> None:
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    result = runner.invoke(app, [*SMALL, "--zipf", "0.5,1", "--json", str(out), "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    records = json.loads(out.read_text())
    assert len(records) == 2 * 2 * len(SCHEMES)
    assert all(tuple(r) == RECORD_FIELDS for r in records)
    assert {r["z"] for r in records} == {0.5, 1.0}
    for record in records:
        if record["scheme"] == "kg":
            assert record["memory"] == 1.0
        if record["scheme"] == "sg":
            assert record["memory"] == record["n"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for word in ("off-greedy", "dchoices", "imbalance", "saturation", "wrote 44 records"):
        assert word in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.png"]  # no temporary left


def test_json_to_stdout_is_only_json() -> None:
    result = runner.invoke(
        app,
        [*SMALL, "--schemes", "kg,pkg", "--workload", "dkg", "--keys", "204", "--runs", "2", "--json", "-"],
    )
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [(r["scheme"], r["n"], r["z"]) for r in records] == [
        ("kg", 4, None),
        ("pkg", 4, None),
        ("kg", 8, None),
        ("pkg", 8, None),
    ]
    assert all(isinstance(r["head_size"], float) for r in records)  # averaged over the 2 runs


def test_rates_utilization_and_options_reach_the_records() -> None:
    args = [*SMALL, "--schemes", "sg", "--workers", "2", "--rates", "1,3", "--utilization", "0.5"]
    result = runner.invoke(app, [*args, "--exact", "--source-mode", "skewed", "--json", "-"])
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)
    assert record["saturation"] == pytest.approx(2.0, rel=1e-3)  # half the tuples each; μ = 1 caps
    assert record["latency_mean"] >= 1 / 3


def test_the_cli_lists_match_the_library() -> None:
    assert ",".join(SCHEMES) == ALL_SCHEMES
    assert ", ".join(WORKLOADS) == ALL_WORKLOADS


def test_importing_the_cli_loads_neither_numba_nor_matplotlib() -> None:
    code = (
        "import sys, repart.cli.simulate_grouping; print(sorted({'numba', 'matplotlib'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--workers", "0"),
        ("--workers", "4,x"),
        ("--sources", "0"),
        ("--zipf", "-1"),
        ("--keys", "0"),
        ("--messages", "0"),
        ("--skew", "1.5"),
        ("--schemes", "kg,magic"),
        ("--workload", "tweets"),
        ("--rates", "1,0"),
        ("--rates", "-1"),
        ("--utilization", "0"),
        ("--runs", "0"),
        ("--source-mode", "random"),
    ],
)
def test_bad_input_exits_2_with_the_option_and_writes_nothing(
    tmp_path: Path, option: str, value: str
) -> None:
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    result = runner.invoke(app, [*SMALL, option, value, "--json", str(out), "--plot", str(plot)])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {option} "), result.output
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("option", "value"), [("--plot", "."), ("--plot", "-"), ("--json", "."), ("--json", "no/such/dir/x.json")]
)
def test_bad_output_paths_exit_2(option: str, value: str) -> None:
    result = runner.invoke(app, [*SMALL, option, value])
    assert result.exit_code == 2
    assert option in result.output and "Traceback" not in result.output
