"""``examples/vwap.py`` reports an expected error as one line and the error's exit code: 4 on a damaged
state store. The example runs as a user runs it, in its own process with its own Spark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from repart.errors import Corrupt

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "vwap.py"

pytestmark = pytest.mark.spark


def test_a_damaged_store_exits_4_with_one_line(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "MANIFEST").write_text('{"torn', encoding="utf-8")  # a store whose manifest is torn
    database = f"sqlite:///{tmp_path / 'repart.db'}"
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--db", database, "--state", str(state), "--batches", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == Corrupt.exit_code == 4
    assert run.stdout == ""
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [line for line in errors if line.startswith("error: MANIFEST: the manifest is corrupt")]
    assert len(errors) == 1 and "Traceback" not in run.stderr
