"""``repart simulate`` end to end: output files, and bad input as a message with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from repart.cli.app import app
from repart.partitioning.domain import DEFAULT_SLOT_BITS
from repart.partitioning.hashing import hash_int64_array, slots_of_hashes
from repart.sim.experiment import RECORD_FIELDS
from repart.sim.workload import ZipfWorkload
from tests.cli.helpers import flat, table_rows

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


def test_max_mean_load_is_beside_b_in_the_records_and_the_table() -> None:
    """``uniform`` routes slot s to s mod N: its max/mean load on the true Zipf frequencies is known."""
    result = runner.invoke(app, [*SMALL, "--json", "-"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert list(RECORD_FIELDS).index("load") == list(RECORD_FIELDS).index("b") + 1
    # the run's workload: its key permutation's seed is the first draw of the run's generator
    workload = ZipfWorkload(1.0, 20_000, key_seed=int(np.random.default_rng([1, 0]).integers(2**32)))
    slots = slots_of_hashes(hash_int64_array(workload.keys), DEFAULT_SLOT_BITS)
    for record in (r for r in records if r["algorithm"] == "uniform"):
        n = record["N"]
        rows = np.bincount(slots % n, weights=workload.frequencies, minlength=n)
        assert record["load"] == pytest.approx(rows.max() / rows.mean(), rel=1e-9)
    assert all(1.0 <= r["load"] <= r["N"] for r in records)

    people = runner.invoke(app, SMALL)
    assert people.exit_code == 0, people.output
    header, *rows = [row for row in table_rows(people.output) if len(row) > 2]
    assert header[header.index("b") + 1] == "max/mean"
    shown = {(row[0], int(row[1])): row[header.index("max/mean")] for row in rows}
    assert shown == {(r["algorithm"], r["N"]): f"{r['load']:.3f}" for r in records}
    assert "b and max/mean load: docs/concepts/metrics.md" in flat(people.output)


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
    # max/mean load stays finite where b is not: 5 keys on N channels load at most N times the mean
    assert all(r["load"] is not None and 1.0 <= r["load"] <= r["N"] for r in records)


@pytest.mark.parametrize(
    ("option", "value"), [("--plot", "."), ("--plot", "-"), ("--json", "."), ("--json", "no/such/dir/x.json")]
)
def test_bad_output_paths_exit_2(option: str, value: str) -> None:
    result = runner.invoke(app, [*SMALL, option, value])
    assert result.exit_code == 2
    assert option in result.output and "Traceback" not in result.output
