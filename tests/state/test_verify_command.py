"""``repart state verify``: exit 0 on an intact store, 4 naming every damaged file, 2 without a store."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from repart.cli.app import app
from repart.partitioning import initial_function
from repart.state.store import StateStore, write_channel_files
from tests.factories import new_store

SCHEMA = pa.schema([("key", pa.string()), ("n", pa.int64())])


def intact_store(root: Path, rows: int = 2000) -> StateStore:
    """A store on 3 channels holding ``rows`` rows routed by its function."""
    keys = [f"k{i}" for i in range(rows)]
    table = pa.table({"key": keys, "n": list(range(rows))}, schema=SCHEMA)
    return new_store(root, initial_function(3, "str", 12), table, slot_groups=4)


def verify(root: Path, *options: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, ["state", "verify", "--state", str(root), *options])
    return outcome.exit_code, outcome.stdout, outcome.stderr


def test_an_intact_store_verifies_with_exit_0(tmp_path: Path) -> None:
    store = intact_store(tmp_path / "s")
    code, out, _ = verify(store.root, "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["damaged"] == []
    assert (report["rows"], report["files"], report["generation"]) == (2000, 12, 1)
    assert report["checksum"] == f"{store.checksum():016x}"
    code, out, _ = verify(store.root)
    assert code == 0 and "2000 rows" in out and out.rstrip().endswith(": OK")


@pytest.mark.parametrize("damage", ["deleted", "truncated", "rewritten"])
def test_every_damaged_file_is_named_with_exit_4(tmp_path: Path, damage: str) -> None:
    store = intact_store(tmp_path / "s")
    victims = [store.files(0)[1], store.files(2)[0]]
    for victim in victims:
        path = store.root / victim.path
        if damage == "deleted":
            path.unlink()
        elif damage == "truncated":
            path.write_bytes(path.read_bytes()[:-50])
        else:  # a valid Parquet file with other rows: only the row count and checksum tell
            other = write_channel_files(
                tmp_path / "other",
                0,
                pa.table({"key": ["x"], "n": [1]}, schema=SCHEMA),
                key_col="key",
                key_type="str",
                slot_bits=12,
                slot_groups=4,
            )[0]
            (tmp_path / "other" / other.path).replace(path)
    code, out, _ = verify(store.root, "--json")
    report = json.loads(out)
    assert code == 4 and not report["ok"]
    assert [d["path"] for d in report["damaged"]] == [str(store.root / v.path) for v in victims]
    problem = {"deleted": "missing", "truncated": "Parquet magic bytes", "rewritten": "does not match"}[
        damage
    ]
    assert all(problem in d["problem"] for d in report["damaged"])
    code, out, _ = verify(store.root)
    assert code == 4 and out.count("damaged:") == 2 and "2 of 12 files damaged" in out


def test_a_deleted_manifest_exits_4_and_no_store_exits_2(tmp_path: Path) -> None:
    store = intact_store(tmp_path / "s")
    (store.root / "MANIFEST").unlink()
    code, out, _ = verify(store.root, "--json")
    report = json.loads(out)
    assert code == 4 and report["damaged"][0]["path"] == str(store.root / "MANIFEST")
    assert "the manifest is missing" in report["damaged"][0]["problem"]
    code, _, err = verify(tmp_path / "nothing")
    assert code == 2 and "no state store at" in err
