"""The durable writer (``repart.protocol.files``): a file appears whole or not at all, with the mode a
newly created file gets, and the directory is ``fsync``ed after the rename so that its new name is durable.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from repart.protocol import files
from repart.protocol.files import durable_output, fsync_path, write_durably


class Interrupted(Exception):
    """What the writer in a failing block raises."""


def test_the_target_holds_the_whole_text_and_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "snapshot.json"
    target.write_text("an older and much longer content " * 1000, encoding="utf-8")
    text = "".join(f"line {i}: ä ✓ 𝄞\n" for i in range(50_000))
    write_durably(target, text)
    assert target.read_bytes() == text.encode("utf-8")
    assert os.listdir(tmp_path) == ["snapshot.json"]


def test_a_writer_gets_a_hidden_temporary_file_beside_the_target(tmp_path: Path) -> None:
    target = tmp_path / "plot.png"
    with durable_output(target) as temporary:
        assert temporary.parent == tmp_path and temporary.name.startswith(".plot.png.")
        assert not target.exists()
        temporary.write_bytes(b"\x89PNG\x00\xff")
    assert target.read_bytes() == b"\x89PNG\x00\xff"
    assert os.listdir(tmp_path) == ["plot.png"]


def test_a_failing_block_keeps_the_old_content_and_removes_the_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "manifest.json"
    target.write_text("old\n", encoding="utf-8")
    with pytest.raises(Interrupted), durable_output(target) as temporary:
        temporary.write_text("half of the new", encoding="utf-8")
        raise Interrupted
    assert target.read_text(encoding="utf-8") == "old\n"
    assert os.listdir(tmp_path) == ["manifest.json"]


def test_a_failing_block_creates_no_file(tmp_path: Path) -> None:
    with pytest.raises(Interrupted), durable_output(tmp_path / "result.json") as temporary:
        temporary.write_text("{", encoding="utf-8")
        raise Interrupted
    assert os.listdir(tmp_path) == []


def test_text_that_cannot_be_encoded_leaves_the_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "reason.txt"
    target.write_text("old\n", encoding="utf-8")
    with pytest.raises(UnicodeEncodeError):
        write_durably(target, "fine so far \ud800")  # a lone surrogate has no UTF-8 form
    assert target.read_text(encoding="utf-8") == "old\n"
    assert os.listdir(tmp_path) == ["reason.txt"]


def test_a_failed_rename_leaves_the_target_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "snapshot.json"
    target.write_text("old\n", encoding="utf-8")

    def full_disk(source: str, destination: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        write_durably(target, "new\n")
    assert target.read_text(encoding="utf-8") == "old\n"
    assert os.listdir(tmp_path) == ["snapshot.json"]


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664), (0, 0o666)])
def test_the_file_mode_is_the_umask_applied_to_0o666(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: int, mode: int
) -> None:
    # The temporary file is created 0o600; the mode of the target must not stay that.
    monkeypatch.setattr(files, "_UMASK", umask)
    target = tmp_path / "result.json"
    write_durably(target, "{}\n")
    assert stat.S_IMODE(target.stat().st_mode) == mode


def test_the_umask_is_the_process_umask_read_at_import(tmp_path: Path) -> None:
    # A fresh interpreter with umask 027 imports the module, then sets another umask, then writes.
    target = tmp_path / "result.json"
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "os.umask(0o027)\n"
        "from repart.protocol.files import write_durably\n"
        "os.umask(0o077)\n"
        "write_durably(Path(sys.argv[1]), 'x')\n"
    )
    subprocess.run([sys.executable, "-c", script, str(target)], check=True)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def record_syncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """Record, in order, every ``os.fsync`` (as the ``os.fstat`` of its descriptor) and ``os.replace``."""
    calls: list[tuple[str, object]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor: int) -> None:
        calls.append(("fsync", os.fstat(descriptor)))
        real_fsync(descriptor)

    def replace(source: str, destination: str) -> None:
        calls.append(("replace", Path(destination)))
        real_replace(source, destination)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return calls


def is_directory(status: object, path: Path) -> bool:
    """Whether ``status`` (an ``os.fstat`` result) is that of the directory ``path``."""
    expected = path.stat()
    assert isinstance(status, os.stat_result)
    return stat.S_ISDIR(status.st_mode) and (status.st_dev, status.st_ino) == (
        expected.st_dev,
        expected.st_ino,
    )


def test_the_file_is_synced_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "manifest.json"
    calls = record_syncs(monkeypatch)
    write_durably(target, "{}\n")
    assert [kind for kind, _ in calls] == ["fsync", "replace", "fsync"]
    file_sync, (_, renamed), (_, directory_sync) = calls[0][1], calls[1], calls[2]
    assert isinstance(file_sync, os.stat_result) and stat.S_ISREG(file_sync.st_mode)
    assert file_sync.st_ino == target.stat().st_ino  # the temporary file that became the target
    assert renamed == target
    assert is_directory(directory_sync, tmp_path)


def test_a_failing_block_syncs_and_renames_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = record_syncs(monkeypatch)
    with pytest.raises(Interrupted), durable_output(tmp_path / "result.json"):
        raise Interrupted
    assert calls == []


def test_fsync_path_syncs_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = record_syncs(monkeypatch)
    fsync_path(tmp_path)
    assert len(calls) == 1 and calls[0][0] == "fsync" and is_directory(calls[0][1], tmp_path)
