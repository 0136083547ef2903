"""``repart state verify``: exit 0 on an intact store, 4 naming every damaged file or commit document,
2 without a store; on a local directory and on an S3 URL (credentials from the environment)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from repart.cli.app import app
from repart.partitioning import ConsistentSpec, initial_function
from repart.state.batches import absorbed_batch
from repart.state.store import StateStore
from tests.factories import legacy_store, new_store

SCHEMA = pa.schema([("key", pa.string()), ("n", pa.int64())])
FUNCTION = initial_function(3, "str", 12, ConsistentSpec("jump"))  # every channel in every slot group


def table(rows: int) -> pa.Table:
    return pa.table({"key": [f"k{i}" for i in range(rows)], "n": list(range(rows))}, schema=SCHEMA)


@pytest.fixture
def cli_store_url(
    store_url: str, store_options: dict[str, str] | None, monkeypatch: pytest.MonkeyPatch
) -> str:
    """``store_url``, with the S3 endpoint's credentials in the environment, where the command reads
    them."""
    if store_options is not None:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", store_options["aws_access_key_id"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", store_options["aws_secret_access_key"])
        monkeypatch.setenv("AWS_ENDPOINT_URL", store_options["endpoint"])
    return store_url


def intact_store(location: Path | str, rows: int = 2000) -> StateStore:
    """A store on 3 channels holding ``rows`` rows routed by its function, 4 slot groups (12 files)."""
    return new_store(location, FUNCTION, table(rows), slot_groups=4)


def verify(location: Path | str, *options: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, ["state", "verify", "--state", str(location), *options])
    return outcome.exit_code, outcome.stdout, outcome.stderr


def test_an_intact_store_verifies_with_exit_0(cli_store_url: str) -> None:
    store = intact_store(cli_store_url)
    store.commit({}, version=1, function_digest=FUNCTION.digest, n_channels=3, batch=absorbed_batch(6, []))
    code, out, _ = verify(cli_store_url, "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["damaged"] == []
    assert (report["rows"], report["files"], report["generation"], report["format"]) == (2000, 12, 2, 3)
    assert (report["region"], report["version"], report["n_channels"], report["last_batch"]) == (
        "trades",
        1,
        3,
        6,
    )
    assert report["checksum"] == f"{store.checksum():016x}" and report["state"] == cli_store_url
    code, out, _ = verify(cli_store_url)
    assert code == 0 and "2000 rows" in " ".join(out.split()) and out.rstrip().endswith(": OK")


@pytest.mark.parametrize("damage", ["deleted", "truncated", "rewritten"])
def test_every_damaged_file_is_named_with_exit_4(cli_store_url: str, damage: str) -> None:
    store = intact_store(cli_store_url)
    victims = [store.files(0)[1], store.files(2)[0]]
    (other,) = store.write(0, table(1).slice(0, 1), kind="delta")  # a valid file of other rows
    for victim in victims:
        if damage == "deleted":
            store.objects.delete([victim.path])
        elif damage == "truncated":
            store.objects.write(victim.path, store.objects.read(victim.path)[:-50])
        else:  # a valid Parquet file with other rows: only the row count and checksum tell
            store.objects.write(victim.path, store.objects.read(other.path))
    code, out, _ = verify(cli_store_url, "--json")
    report = json.loads(out)
    assert code == 4 and not report["ok"]
    assert [d["path"] for d in report["damaged"]] == [v.path for v in victims]
    problem = {"deleted": "missing", "truncated": "Parquet magic bytes", "rewritten": "does not match"}[
        damage
    ]
    assert all(d["problem"].startswith("state file") and problem in d["problem"] for d in report["damaged"])
    code, out, _ = verify(cli_store_url)
    assert code == 4 and out.count("damaged:") == 2 and "2 of 12 files damaged" in " ".join(out.split())


def test_a_damaged_commit_document_exits_4_naming_it(tmp_path: Path) -> None:
    store = intact_store(tmp_path / "s")
    store.commit({}, version=1, function_digest=FUNCTION.digest, n_channels=3, batch=absorbed_batch(1, []))
    path = "_log/00000000000000000001.json"
    store.objects.write(path, store.objects.read(path)[:-20])  # torn, and generation 2 builds on it
    code, out, _ = verify(store.url, "--json")
    report = json.loads(out)
    assert code == 4 and not report["ok"] and [d["path"] for d in report["damaged"]] == [path]
    assert "later commits build on is damaged" in report["damaged"][0]["problem"]
    code, out, _ = verify(store.url)
    shown = " ".join(out.split())  # the console wraps long lines
    assert code == 4 and f"damaged: {path}" in shown and "its commit log or manifest is damaged" in shown


def test_a_deleted_legacy_manifest_exits_4_and_no_store_exits_2(tmp_path: Path) -> None:
    root = legacy_store(tmp_path / "s", FUNCTION, table(500))
    code, out, _ = verify(root, "--json")
    assert code == 0 and json.loads(out)["format"] == 2 and json.loads(out)["rows"] == 500
    (root / "MANIFEST").unlink()
    code, out, _ = verify(root, "--json")
    report = json.loads(out)
    assert code == 4 and report["damaged"][0]["path"] == "MANIFEST"
    assert "the manifest is missing" in report["damaged"][0]["problem"]
    code, _, err = verify(tmp_path / "nothing")
    assert code == 2 and "no state store at" in err
