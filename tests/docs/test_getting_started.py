"""The getting-started pages' Python code runs as a reader would run it, and leaves the state it should.

Each page's ``python`` blocks are run in order, as one script, in a fresh working directory; the shell
blocks are the reader's own setup, which the fixtures stand in for: the S3 page's local endpoint is the
suite's moto server, the PostgreSQL page's database a fresh one on the suite's server. Each test then
reads the state store back and compares it with its own count of the input. These are Spark tests.
"""

from __future__ import annotations

import json
import re
import runpy
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from repart.state.store import StateStore

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "docs" / "getting-started"
EXAMPLES = ROOT / "examples"
pytestmark = pytest.mark.spark


def page_code(name: str) -> str:
    """The page's ``python`` blocks, in order, as one script."""
    text = (PAGES / name).read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)
    assert blocks, f"{name} has no Python code"
    return "\n".join(blocks)


def run_page(name: str, directory: Path, monkeypatch: pytest.MonkeyPatch, *argv: str) -> None:
    """Run ``name``'s code in ``directory`` with ``argv`` as its arguments, as ``python page.py ARGV``."""
    script = directory / name.replace(".md", ".py")
    script.write_text(page_code(name), encoding="utf-8")
    monkeypatch.chdir(directory)
    monkeypatch.setattr(sys, "argv", [str(script), *argv])
    runpy.run_path(str(script), run_name="__main__")


def state_by_ticker(store: StateStore) -> dict[str, tuple[int, int]]:
    """Every ticker's (trades, volume) in the store, partial rows of a key summed."""
    table: pa.Table = store.read_merged()
    rows = table.select(["ticker", "trades", "volume"]).to_pylist()
    assert len({row["ticker"] for row in rows}) == len(rows)
    return {row["ticker"]: (row["trades"], row["volume"]) for row in rows}


def trades_in(incoming: Path) -> dict[str, tuple[int, int]]:
    """The test's own count of the JSON trades the page wrote: (trades, Σ qty) per ticker."""
    counts: Counter[str] = Counter()
    volumes: defaultdict[str, int] = defaultdict(int)
    for file in sorted(incoming.glob("*.json")):
        for line in file.read_text().splitlines():
            trade: dict[str, Any] = json.loads(line)
            counts[trade["ticker"]] += 1
            volumes[trade["ticker"]] += trade["qty"]
    return {ticker: (counts[ticker], volumes[ticker]) for ticker in counts}


def test_the_batch_page_is_the_batch_example_and_keeps_every_trade(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = (EXAMPLES / "batch_job.py").read_text(encoding="utf-8").split('"""', 2)[2]
    assert page_code("batch.md").strip() == example.strip()
    run_page("batch.md", tmp_path, monkeypatch, str(tmp_path / "work"))
    state = state_by_ticker(StateStore.open(tmp_path / "work" / "state"))
    assert sum(trades for trades, _ in state.values()) == 150_000
    assert all(trades <= volume <= 9 * trades for trades, volume in state.values())


def test_the_streaming_page_keeps_what_its_files_hold(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = (EXAMPLES / "streaming_job.py").read_text(encoding="utf-8").split('"""', 2)[2]
    assert page_code("streaming.md").strip() == example.strip()
    run_page("streaming.md", tmp_path, monkeypatch, str(tmp_path / "work"))
    expected = trades_in(tmp_path / "work" / "incoming")
    assert sum(trades for trades, _ in expected.values()) == 3000
    assert state_by_ticker(StateStore.open(tmp_path / "work" / "state")) == expected


def test_the_s3_page_keeps_its_state_at_the_local_endpoint(
    spark: Any, s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    run_page("s3.md", tmp_path, monkeypatch)
    expected = trades_in(tmp_path / ".repart" / "s3-example" / "incoming")
    store = StateStore.open("s3://trades-state/trades")  # the endpoint and keys from the environment
    store.verify()
    assert state_by_ticker(store) == expected


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_the_postgresql_page_runs_its_job_on_postgresql(
    spark: Any, empty_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import create_engine, text

    monkeypatch.setenv("REPART_DB", empty_url)
    run_page("postgresql.md", tmp_path, monkeypatch)
    state = state_by_ticker(StateStore.open(tmp_path / ".repart" / "postgres-example" / "state"))
    # 3 batches of 5,000 rows: ticker Tk gets 50 rows a batch, each of quantity k % 10 + 1.
    assert state == {f"T{k}": (150, 150 * (k % 10 + 1)) for k in range(100)}
    engine = create_engine(empty_url)
    try:
        with engine.connect() as connection:
            regions = connection.execute(text("SELECT name FROM regions")).scalars().all()
            batches = connection.execute(text("SELECT count(*) FROM batch_reports")).scalar_one()
    finally:
        engine.dispose()
    assert regions == ["trades"] and batches == 3
