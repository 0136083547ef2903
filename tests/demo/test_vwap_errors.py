"""``examples/vwap.py`` reports an expected error as one line and the error's exit code: 4 on a damaged
state store."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from repart.errors import Corrupt

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "vwap.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vwap_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class NoSpark:
    """Stands for the Spark session: the store is opened (and found damaged) before any Spark job runs."""

    stopped = False

    def stop(self) -> None:
        NoSpark.stopped = True


def test_a_damaged_store_exits_4_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "MANIFEST").write_text('{"torn', encoding="utf-8")  # a store whose manifest is torn
    example = load_example()
    monkeypatch.setattr(example, "spark_session", lambda master, name: NoSpark())
    database = f"sqlite:///{tmp_path / 'repart.db'}"
    code = example.main(["--db", database, "--state", str(state), "--batches", "1"])
    captured = capsys.readouterr()
    assert code == Corrupt.exit_code == 4
    assert captured.out == ""
    assert captured.err.startswith("error: MANIFEST: the manifest is corrupt")
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert NoSpark.stopped
