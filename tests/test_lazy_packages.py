"""``repart.storage`` and ``repart.partitioning`` load their names lazily (PEP 562, ``repart.lazy``): each
name resolves to its module, and the names the type checkers see are the names exported."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import repart.partitioning as partitioning
import repart.storage as storage

LAZY = pytest.mark.parametrize("package", [storage, partitioning], ids=lambda package: package.__name__)


@LAZY
def test_every_exported_name_resolves_to_its_module(package: ModuleType) -> None:
    for name, module in package._EXPORTS.items():
        assert getattr(package, name) is getattr(importlib.import_module(module), name)
    assert package.__all__ == list(package._EXPORTS)
    with pytest.raises(AttributeError, match=f"module '{package.__name__}' has no attribute 'nothing'"):
        package.nothing  # noqa: B018


@LAZY
def test_the_type_checking_imports_are_the_exports(package: ModuleType) -> None:
    tree = ast.parse(Path(str(package.__file__)).read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If))
    imported = {
        alias.name: node.module
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported == package._EXPORTS


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
