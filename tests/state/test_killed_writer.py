"""A writer killed mid-write leaves only the durable writer's hidden temporaries
(``.<name>.<random>``, repart.protocol.files): ``create`` starts over and ``vacuum`` removes them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from repart.state.store import StateStore

SCHEMA = pa.schema([("ticker", pa.string()), ("trades", pa.int64())])


def create(root: Path) -> StateStore:
    return StateStore.create(
        root,
        region="trades",
        version=1,
        function_digest="0" * 64,
        n_channels=4,
        slot_bits=10,
        key_type="str",
        key_col="ticker",
        schema=SCHEMA,
    )


def test_a_create_killed_while_writing_generation_zero_can_be_run_again(tmp_path: Path) -> None:
    root = tmp_path / "state"
    (root / "generations").mkdir(parents=True)
    (root / "generations" / ".00000000.json.k2j4hx").write_text('{"gen', encoding="utf-8")
    (root / ".MANIFEST.x81kq0").write_text("", encoding="utf-8")
    store = create(root)
    assert store.generation == 0 and StateStore.open(root).generation == 0


def test_vacuum_removes_a_killed_writers_manifest_temporaries(tmp_path: Path) -> None:
    root = tmp_path / "state"
    store = create(root)
    leftover = root / ".MANIFEST.x81kq0"
    leftover.write_text("{", encoding="utf-8")
    assert ".MANIFEST.x81kq0" in store.vacuum()
    assert not leftover.exists() and StateStore.open(root).generation == 0
