"""``repart.storage`` loads its names lazily (PEP 562): each resolves, and the three lists agree."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import repart.storage as storage


def test_every_exported_name_resolves_to_its_module() -> None:
    for name, module in storage._EXPORTS.items():
        assert getattr(storage, name) is getattr(importlib.import_module(module), name)
    assert storage.__all__ == list(storage._EXPORTS)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        storage.nothing  # noqa: B018


def test_the_type_checking_imports_are_the_exports() -> None:
    tree = ast.parse(Path(storage.__file__).read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If))
    imported = {
        alias.name: node.module
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported == storage._EXPORTS


def test_the_models_load_without_numpy_or_alembic() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, repart.storage.models; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (
        "'numpy'" not in loaded and "'alembic'" not in loaded and "'repart.storage.activation'" not in loaded
    )
