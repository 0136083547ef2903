"""The package layout keeps DESIGN §1's dependency direction: a module that imports against it fails here.

``cli → {controller, demo} → {migration, storage, protocol} → partitioning``; ``spark → {partitioning,
migration, protocol, state}``; ``state → {partitioning, migration}``; ``sim → partitioning``;
``partitioning`` imports nothing of repart's. Two refinements are recorded in docs/DECISIONS.md:
``repart.errors`` and ``repart.validation`` are leaf modules every package may import, and the state
store writes its manifest with ``repart.protocol.files``' durable writer (a module that imports nothing
of repart's). Only ``spark`` and ``demo`` import pyspark: the controller never needs a JVM.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src" / "repart"
LEAVES = {"errors", "validation"}
ALLOWED: dict[str, set[str]] = {
    "partitioning": set(),
    "migration": {"partitioning"},
    "protocol": {"partitioning"},
    "storage": {"partitioning", "migration", "protocol"},
    "controller": {"partitioning", "migration", "protocol", "storage"},
    "state": {"partitioning", "migration", "protocol"},
    "spark": {"partitioning", "migration", "protocol", "state"},
    "sim": {"partitioning"},
    "demo": {"partitioning", "migration", "protocol", "storage", "controller", "state", "spark", "sim"},
    "cli": {"partitioning", "migration", "protocol", "storage", "controller", "state", "sim", "demo"},
    "errors": set(),
    "validation": set(),
}
PYSPARK_PACKAGES = {"spark", "demo"}


def _package(relative: Path) -> str:
    return relative.parts[0].removesuffix(".py")


def _imports(source: str) -> list[tuple[int, str]]:
    """Every imported module name of ``source`` (function-level and TYPE_CHECKING imports too)."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def _violations(relative: Path, source: str) -> list[str]:
    """What the module at ``relative`` (to src/repart) with text ``source`` imports against the rules."""
    package = _package(relative)
    if package == "__init__":
        return []
    allowed = ALLOWED[package] | {package} | (LEAVES - {package} if package not in LEAVES else set())
    if package == "validation":
        allowed = {"validation", "errors"}
    if package == "state":
        allowed = allowed - {"protocol"}
    problems = []
    for line, name in _imports(source):
        parts = name.split(".")
        if parts[0] == "pyspark" and package not in PYSPARK_PACKAGES:
            problems.append(f"{relative}:{line} imports pyspark")
        if parts[0] != "repart" or len(parts) < 2:
            continue
        target = parts[1]
        if package == "state" and name.startswith("repart.protocol.files"):
            continue
        if package == "spark" and name.startswith("repart.storage"):
            problems.append(f"{relative}:{line} imports {name} (jobs use repart.protocol)")
        elif target not in allowed:
            problems.append(f"{relative}:{line} imports {name} ({package} → {target})")
    return problems


MODULES = sorted(SOURCE.rglob("*.py"))


def test_every_package_is_in_the_table() -> None:
    packages = {_package(path.relative_to(SOURCE)) for path in MODULES} - {"__init__"}
    assert packages == set(ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(SOURCE)))
def test_imports_follow_the_dependency_direction(path: Path) -> None:
    assert _violations(path.relative_to(SOURCE), path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("module", "source", "problem"),
    [
        (
            "partitioning/x.py",
            "from repart.storage import models\n",
            "imports repart.storage.models (partitioning → storage)",
        ),
        ("state/x.py", "import repart.spark.route\n", "imports repart.spark.route (state → spark)"),
        (
            "state/x.py",
            "from repart.protocol.spool import locked\n",
            "imports repart.protocol.spool.locked (state → protocol)",
        ),
        (
            "spark/x.py",
            "from repart.storage import models\n",
            "imports repart.storage.models (jobs use repart.protocol)",
        ),
        ("controller/x.py", "def f():\n    import pyspark\n", "imports pyspark"),
    ],
)
def test_the_check_catches_imports_against_the_direction(module: str, source: str, problem: str) -> None:
    assert [message.split(" ", 1)[1] for message in _violations(Path(module), source)] == [problem]
