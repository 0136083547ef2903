"""The spool directory: files move to done/ or rejected/ with a reason, and none is lost (DESIGN §8, §10)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from repart.cli.app import app
from repart.controller import spool as spool_module
from repart.controller.daemon import Daemon, DaemonConfig
from repart.controller.spool import ingest_file, ingest_spool, read_document
from repart.errors import InvalidInput
from repart.protocol.limits import MAX_SNAPSHOT_BYTES
from repart.storage import models, run_in_transaction
from tests.cli.helpers import runner
from tests.factories import REGION, add_zipf_region, row_counts, zipf_snapshot


@pytest.fixture
def backend() -> str:
    """The ``engine`` of these tests is a migrated SQLite file (tests/storage covers PostgreSQL)."""
    return "sqlite"


@pytest.fixture(autouse=True)
def region(engine: Engine) -> None:
    """The region the spool's snapshots are for."""
    add_zipf_region(engine)


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    directory = tmp_path / "spool"
    directory.mkdir()
    return directory


def document(seq: int) -> dict[str, Any]:
    return zipf_snapshot(seq, n_channels=2, demand=1.0, length=2000).to_document()


def write(directory: Path, name: str, content: dict[str, Any] | str | bytes) -> None:
    path = directory / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")


def stored_seqs(engine: Engine) -> list[int]:
    return run_in_transaction(
        engine,
        lambda session: list(session.scalars(select(models.Snapshot.seq).order_by(models.Snapshot.seq))),
    )


def names(directory: Path) -> set[str]:
    return {path.name for path in directory.iterdir()}


def test_good_and_bad_files_end_where_they_should(engine: Engine, spool: Path) -> None:
    negative = document(3)
    negative["items"][0][1] = -3
    unknown = document(4) | {"region": "nowhere"}
    write(spool, "01-good.json", document(1))
    write(spool, "02-good.json", document(2))
    write(spool, "03-negative.json", negative)
    write(spool, "04-unknown.json", unknown)
    write(spool, "05-duplicate.json", document(1))
    write(spool, "06-broken.json", "{not json")
    write(spool, "07-binary.json", b"\xff\xfe\x00")
    write(spool, ".08-writing.json.tmp", document(8))
    write(spool, ".09-hidden.json", document(9))
    write(spool, "notes.txt", "not a snapshot")

    outcomes = ingest_spool(engine, spool)

    assert [(Path(o.file).name, o.status) for o in outcomes] == [
        ("01-good.json", "ingested"),
        ("02-good.json", "ingested"),
        ("03-negative.json", "rejected"),
        ("04-unknown.json", "rejected"),
        ("05-duplicate.json", "rejected"),
        ("06-broken.json", "rejected"),
        ("07-binary.json", "rejected"),
    ]
    # The region and seq of a parsed snapshot, refused or not; none of a document that did not parse.
    assert [(o.region, o.seq) for o in outcomes] == [
        (REGION, 1),
        (REGION, 2),
        (None, None),
        ("nowhere", 4),
        (REGION, 1),
        (None, None),
        (None, None),
    ]
    assert stored_seqs(engine) == [1, 2]
    assert names(spool / "done") == {"01-good.json", "02-good.json"}
    reasons = {
        name: (spool / "rejected" / f"{name}.reason").read_text(encoding="utf-8")
        for name in (
            "03-negative.json",
            "04-unknown.json",
            "05-duplicate.json",
            "06-broken.json",
            "07-binary.json",
        )
    }
    assert "items[0].count" in reasons["03-negative.json"]
    assert "nowhere" in reasons["04-unknown.json"]
    assert "window.seq 1 was already ingested" in reasons["05-duplicate.json"]
    assert reasons["06-broken.json"].startswith("file must be JSON text")
    assert reasons["07-binary.json"].startswith("cannot read the file")
    assert names(spool / "rejected") == set(reasons) | {f"{name}.reason" for name in reasons}
    assert names(spool) == {
        "done",
        "rejected",
        ".lock",
        ".08-writing.json.tmp",
        ".09-hidden.json",
        "notes.txt",
    }

    assert ingest_spool(engine, spool) == []
    assert stored_seqs(engine) == [1, 2]
    assert len(names(spool / "done")) == 2


def test_a_taken_name_gets_a_numeric_suffix(engine: Engine, spool: Path) -> None:
    write(spool, "window.json", document(1))
    ingest_spool(engine, spool)
    write(spool, "window.json", document(2))
    write(spool, "x-dup.json", document(2))
    ingest_spool(engine, spool)
    write(spool, "x-dup.json", document(2))
    [outcome] = ingest_spool(engine, spool)
    assert Path(outcome.moved_to) == spool / "rejected" / "x-dup.1.json"
    assert names(spool / "done") == {"window.json", "window.1.json"}
    assert names(spool / "rejected") == {
        "x-dup.json",
        "x-dup.json.reason",
        "x-dup.1.json",
        "x-dup.1.json.reason",
    }
    assert stored_seqs(engine) == [1, 2]


def test_a_spool_that_is_not_a_directory_is_refused(engine: Engine, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as ingesting:
        ingest_spool(engine, tmp_path / "missing")
    with pytest.raises(InvalidInput) as configuring:
        DaemonConfig(interval_seconds=1, lease_ttl_seconds=5, spool=tmp_path / "missing")
    assert ingesting.value.field == configuring.value.field == "spool"


def test_the_daemon_ingests_the_spool_before_ticking(engine: Engine, spool: Path) -> None:
    daemon = Daemon(engine, DaemonConfig(interval_seconds=1, lease_ttl_seconds=5, holder="a", spool=spool))
    assert [r.action for r in daemon.run_once() if r is not None] == ["initialized"]
    write(spool, "window-1.json", document(1))
    write(spool, "window-2.json", document(2))
    [result] = daemon.run_once()
    assert result is not None and result.region == REGION
    assert result.action in ("unchanged", "activated"), result.reason  # it saw the spooled windows
    assert stored_seqs(engine) == [1, 2]
    assert names(spool / "done") == {"window-1.json", "window-2.json"}
    daemon.stop()


def test_run_once_with_a_spool_command(engine: Engine, db_url: str, spool: Path) -> None:
    write(spool, "window-1.json", document(1))
    args = ["run", "--once", "--spool", str(spool), "--interval", "1", "--lease-ttl", "5", "--db", db_url]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert stored_seqs(engine) == [1]
    assert names(spool / "done") == {"window-1.json"}


def test_snapshot_ingest_spool_command(engine: Engine, db_url: str, spool: Path) -> None:
    write(spool, "good.json", document(1))
    write(spool, "bad.json", document(1) | {"tuples": -1})
    result = runner.invoke(app, ["snapshot", "ingest", "--spool", str(spool), "--db", db_url, "--json"])
    assert result.exit_code == 2, result.output
    by_name = {Path(o["file"]).name: o for o in json.loads(result.stdout)}
    assert by_name["good.json"]["status"] == "ingested"
    assert by_name["good.json"]["moved_to"] == str(spool / "done" / "good.json")
    assert by_name["bad.json"]["status"] == "rejected" and "tuples" in by_name["bad.json"]["error"]
    assert stored_seqs(engine) == [1]
    again = runner.invoke(app, ["snapshot", "ingest", "--spool", str(spool), "--db", db_url, "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout) == []


def test_snapshot_ingest_needs_files_or_a_spool(db_url: str) -> None:
    result = runner.invoke(app, ["snapshot", "ingest", "--db", db_url])
    assert result.exit_code == 2
    assert "--spool" in result.output


@pytest.mark.parametrize(
    ("window", "field"),
    [
        (
            {"seq": 3, "start": "0001-01-01T00:00:00+14:00", "end": "2026-01-01T00:00:00+00:00"},
            "window.start",
        ),
        ({"seq": 3, "start": "9999-12-31T00:00:00+00:00", "end": "9999-12-31T23:59:00-14:00"}, "window.end"),
    ],
)
def test_a_window_at_the_edge_of_the_dates_is_rejected_and_blocks_nothing(
    engine: Engine, spool: Path, window: dict[str, Any], field: str
) -> None:
    write(spool, "01-edge.json", document(3) | {"window": window})
    write(spool, "02-good.json", document(1))

    outcomes = ingest_spool(engine, spool)

    assert [(Path(o.file).name, o.status) for o in outcomes] == [
        ("01-edge.json", "rejected"),
        ("02-good.json", "ingested"),
    ]
    assert (spool / "rejected" / "01-edge.json.reason").read_text(encoding="utf-8").startswith(field)
    assert stored_seqs(engine) == [1]


def test_a_job_that_restarts_its_seq_is_rejected_with_the_accepted_range(engine: Engine, spool: Path) -> None:
    write(spool, "01.json", document(5))
    later_but_seq_zero = document(6) | {"window": document(6)["window"] | {"seq": 0}}
    write(spool, "02.json", later_but_seq_zero)

    outcomes = ingest_spool(engine, spool)

    assert [o.status for o in outcomes] == ["ingested", "rejected"]
    reason = (spool / "rejected" / "02.json.reason").read_text(encoding="utf-8")
    assert reason.startswith("window.seq must be in (5, inf)")


@pytest.mark.parametrize(
    "content",
    ['{"format": ' + "9" * 5000 + "}", "[" * 100_000 + "]" * 100_000, '{"format": 1, "format": 1}'],
    ids=["5000-digit integer", "deep nesting", "repeated field"],
)
def test_text_the_json_reader_refuses_is_rejected_and_blocks_nothing(
    engine: Engine, spool: Path, content: str
) -> None:
    write(spool, "a-1.json", content)
    write(spool, "b-1.json", document(1))
    outcomes = ingest_spool(engine, spool)
    assert [(Path(o.file).name, o.status) for o in outcomes] == [
        ("a-1.json", "rejected"),
        ("b-1.json", "ingested"),
    ]
    assert outcomes[0].error is not None and outcomes[0].error.startswith("file must ")


# The snapshot size limit: a file above ``max_bytes`` is rejected unread, names the limit, stores nothing.


def write_window(path: Path, seq: int, indent: int | None = None) -> int:
    """Write window ``seq``'s document to ``path``; its size in bytes."""
    path.write_text(json.dumps(document(seq), indent=indent), encoding="utf-8")
    return path.stat().st_size


def test_a_file_above_the_limit_is_rejected_and_one_at_the_limit_is_ingested(
    engine: Engine, spool: Path
) -> None:
    limit = write_window(spool / "b-at-limit.json", 2)
    large = write_window(spool / "a-large.json", 1, indent=2)
    assert large > limit

    outcomes = ingest_spool(engine, spool, max_bytes=limit)

    assert [(Path(o.file).name, o.status) for o in outcomes] == [
        ("a-large.json", "rejected"),
        ("b-at-limit.json", "ingested"),
    ]
    assert stored_seqs(engine) == [2]
    assert names(spool / "rejected") == {"a-large.json", "a-large.json.reason"}
    reason = (spool / "rejected" / "a-large.json.reason").read_text(encoding="utf-8")
    assert reason.startswith(f"file must be at most max_bytes = {limit} bytes")
    assert f"got {large} bytes" in reason
    assert outcomes[0].error == reason.rstrip("\n")


def test_the_size_is_checked_before_the_file_is_opened(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "large.json"
    size = write_window(path, 1)

    def refuse_open(*args: object, **kwargs: object) -> None:
        raise AssertionError("a file above the limit was opened")

    monkeypatch.setattr(Path, "open", refuse_open)
    with pytest.raises(InvalidInput) as raised:
        read_document(path, size - 1)
    assert raised.value.field == "file"
    assert f"at most max_bytes = {size - 1} bytes" in str(raised.value)
    assert f"got {size} bytes" in str(raised.value)
    outcome = ingest_file(engine, path, max_bytes=size - 1)
    assert outcome.status == "rejected" and outcome.seq is None
    assert row_counts(engine)["snapshots"] == row_counts(engine)["snapshot_items"] == 0


def test_a_file_without_a_size_is_read_no_further_than_the_limit(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)
    writer = threading.Thread(target=pipe.write_bytes, args=(b" " * 1000,))
    writer.start()
    try:
        with pytest.raises(InvalidInput) as raised:
            read_document(pipe, 100)
    finally:
        writer.join(timeout=5)  # its 1000 bytes fit the pipe's buffer: it ends whatever was read
    assert raised.value.field == "file"
    assert "got more than 100 bytes" in str(raised.value)


def test_the_limit_must_be_positive(engine: Engine, spool: Path, tmp_path: Path) -> None:
    for call in (
        lambda: ingest_file(engine, tmp_path / "any.json", max_bytes=0),
        lambda: ingest_spool(engine, spool, max_bytes=-1),
    ):
        with pytest.raises(InvalidInput) as raised:
            call()
        assert raised.value.field == "max_bytes"
    with pytest.raises(InvalidInput) as configuring:
        DaemonConfig(interval_seconds=1, lease_ttl_seconds=5, max_snapshot_bytes=0)
    assert configuring.value.field == "max_snapshot_bytes"
    assert DaemonConfig(interval_seconds=1, lease_ttl_seconds=5).max_snapshot_bytes == MAX_SNAPSHOT_BYTES


def test_snapshot_ingest_max_bytes_option(engine: Engine, db_url: str, tmp_path: Path) -> None:
    path = tmp_path / "window.json"
    size = write_window(path, 1)
    ingest = ["snapshot", "ingest", str(path), "--db", db_url]

    refused = runner.invoke(app, [*ingest, "--max-bytes", str(size - 1), "--json"])

    assert refused.exit_code == 2, refused.output
    [outcome] = json.loads(refused.stdout)
    assert outcome["status"] == "rejected"
    assert outcome["error"].startswith(f"file must be at most max_bytes = {size - 1} bytes")
    assert row_counts(engine)["snapshots"] == 0

    bad_limit = runner.invoke(app, [*ingest, "--max-bytes", "0"])
    assert bad_limit.exit_code == 2
    assert bad_limit.stderr.startswith("error: --max-bytes must be") and bad_limit.stderr.count("\n") == 1
    assert row_counts(engine)["snapshots"] == 0

    accepted = runner.invoke(app, [*ingest, "--max-bytes", str(size), "--json"])
    assert accepted.exit_code == 0, accepted.output
    assert stored_seqs(engine) == [1]


def test_the_daemon_rejects_a_spool_file_above_its_limit(engine: Engine, db_url: str, spool: Path) -> None:
    write_window(spool / "window-1.json", 1)
    config = DaemonConfig(interval_seconds=1, lease_ttl_seconds=5, spool=spool, max_snapshot_bytes=100)
    [outcome] = Daemon(engine, config).ingest_spool()
    assert outcome.status == "rejected" and "max_bytes" in (outcome.error or "")
    assert names(spool / "rejected") == {"window-1.json", "window-1.json.reason"}

    write_window(spool / "window-2.json", 2)
    run = ["run", "--once", "--spool", str(spool), "--interval", "1", "--lease-ttl", "5", "--db", db_url]
    result = runner.invoke(app, [*run, "--max-snapshot-bytes", "100"])
    assert result.exit_code == 0, result.output
    assert names(spool / "rejected") >= {"window-2.json", "window-2.json.reason"}
    assert stored_seqs(engine) == []


# Links and special files: the spool reads only its own regular files and writes only inside itself.


def test_a_linked_or_special_json_file_is_rejected_unread(
    engine: Engine, spool: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(document(1)), encoding="utf-8")
    (spool / "01-link.json").symlink_to(outside)
    (spool / "02-dangling.json").symlink_to(tmp_path / "missing.json")
    (spool / "03-folder.json").symlink_to(tmp_path)
    os.mkfifo(spool / "04-pipe.json")  # opening it for reading must not wait for a writer
    write(spool, "05-good.json", document(2))

    outcomes = ingest_spool(engine, spool)

    assert [(Path(o.file).name, o.status) for o in outcomes] == [
        ("01-link.json", "rejected"),
        ("02-dangling.json", "rejected"),
        ("03-folder.json", "rejected"),
        ("04-pipe.json", "rejected"),
        ("05-good.json", "ingested"),
    ]
    for outcome in outcomes[:3]:
        assert outcome.error is not None and outcome.error.startswith("file must be a regular file")
        assert outcome.error.endswith(f"{outcome.file} is a symbolic link")
    assert outcomes[3].error is not None and outcomes[3].error.endswith("04-pipe.json is a pipe")
    assert stored_seqs(engine) == [2]
    rejected = spool / "rejected"
    assert (rejected / "01-link.json").is_symlink() and os.readlink(rejected / "01-link.json") == str(outside)
    assert (rejected / "03-folder.json").is_symlink() and (rejected / "04-pipe.json").is_fifo()
    assert "is a symbolic link" in (rejected / "02-dangling.json.reason").read_text(encoding="utf-8")
    assert json.loads(outside.read_text(encoding="utf-8")) == document(1)  # the target is left alone


@pytest.mark.parametrize("name", ["done", "rejected"])
def test_a_linked_subdirectory_is_refused_and_nothing_is_written_outside(
    engine: Engine, spool: Path, tmp_path: Path, name: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (spool / name).symlink_to(elsewhere)
    write(spool, "01-good.json", document(1))
    write(spool, "02-bad.json", "{not json")

    with pytest.raises(InvalidInput) as raised:
        ingest_spool(engine, spool)

    assert raised.value.field == "spool"
    assert str(raised.value).endswith(f"{spool / name} is a symbolic link")
    assert list(elsewhere.iterdir()) == []
    assert {"01-good.json", "02-bad.json"} <= names(spool)
    assert stored_seqs(engine) == []


def test_a_subdirectory_swapped_for_a_link_during_a_pass_is_refused(
    engine: Engine, spool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """done/ is a directory when the pass starts and a link when the first file is settled."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write(spool, "01-good.json", document(1))
    ingest = spool_module.ingest_file

    def ingest_then_swap(*args: Any, **kwargs: Any) -> Any:
        outcome = ingest(*args, **kwargs)
        (spool / "done").rmdir()
        (spool / "done").symlink_to(elsewhere)
        return outcome

    monkeypatch.setattr(spool_module, "ingest_file", ingest_then_swap)
    with pytest.raises(InvalidInput) as raised:
        ingest_spool(engine, spool)
    assert raised.value.field == "spool" and str(spool / "done") in str(raised.value)
    assert list(elsewhere.iterdir()) == []
    assert "01-good.json" in names(spool)


def test_a_subdirectory_that_is_a_file_is_refused(engine: Engine, spool: Path) -> None:
    write(spool, "done", "not a directory")
    write(spool, "01-good.json", document(1))
    with pytest.raises(InvalidInput) as raised:
        ingest_spool(engine, spool)
    assert raised.value.field == "spool" and str(spool / "done") in str(raised.value)


def test_a_linked_lock_file_is_refused(engine: Engine, spool: Path, tmp_path: Path) -> None:
    (spool / ".lock").symlink_to(tmp_path / "created-outside")
    write(spool, "01-good.json", document(1))
    with pytest.raises(InvalidInput) as raised:
        ingest_spool(engine, spool)
    assert raised.value.field == "spool" and str(spool / ".lock") in str(raised.value)
    assert not (tmp_path / "created-outside").exists()


def test_the_commands_refuse_a_linked_subdirectory_in_one_line(
    engine: Engine, db_url: str, spool: Path, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (spool / "rejected").symlink_to(tmp_path / "elsewhere")
    write(spool, "01-good.json", document(1))
    for args in (
        ["snapshot", "ingest", "--spool", str(spool)],
        ["run", "--once", "--spool", str(spool), "--interval", "1", "--lease-ttl", "5"],
    ):
        result = runner.invoke(app, [*args, "--db", db_url])
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
        assert str(spool / "rejected") in result.stderr and "Traceback" not in result.output
