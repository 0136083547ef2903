"""The package layout keeps DESIGN §1's dependency direction: a module that imports against it fails here.

``cli → api → controller``; ``cli → {controller, demo} → {migration, storage, protocol} →
partitioning``; ``spark → {partitioning, migration, protocol, state}``; ``state → {partitioning,
migration}``; ``sim → {partitioning, migration, protocol}``; ``partitioning`` imports nothing of repart's.
Refinements recorded in docs/DECISIONS.md: ``sim`` prices split migrations with ``repart.migration``
and emits its traces as the protocol's snapshot documents;
``repart.errors``, ``repart.validation`` and ``repart.lazy`` are leaf modules every package may import,
and the state store writes its manifest with ``repart.protocol.files``' durable writer (a module that
imports nothing of repart's). Only ``spark`` and ``demo`` import pyspark: the controller never needs a JVM.

A relative import (``from ..storage import models``) is checked as the absolute name it resolves to.

The scripts in ``examples/`` are user programs, above every package: a runnable pipeline is a job's
driver that may also set up its region and run a controller tick between batches (DESIGN §1: "runnable
pipelines using the library"), so it may import any package, ``repart.storage`` for the setup included,
and pyspark. Two things stay out of reach of a user program: ``repart.storage.models`` and
``repart.storage.tables`` (the schema is storage's own; a program goes through the repository functions
and the ``ControllerClient``, as a job goes through ``repart.protocol``) and ``repart.cli`` (the
command-line front end, which a program runs as ``repart …``, not a library). A script has no
package, so it has no relative imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "repart"
EXAMPLES = ROOT / "examples"
LEAVES = {"errors", "validation", "lazy"}
ALLOWED: dict[str, set[str]] = {
    "partitioning": set(),
    "migration": {"partitioning"},
    "protocol": {"partitioning"},
    "storage": {"partitioning", "migration", "protocol"},
    "controller": {"partitioning", "migration", "protocol", "storage"},
    "state": {"partitioning", "migration", "protocol"},
    "spark": {"partitioning", "migration", "protocol", "state"},
    "sim": {"partitioning", "migration", "protocol"},
    "demo": {"partitioning", "migration", "protocol", "storage", "controller", "state", "spark", "sim"},
    "api": {"partitioning", "migration", "protocol", "storage", "controller"},
    "cli": {"partitioning", "migration", "protocol", "storage", "controller", "state", "sim", "demo", "api"},
    "errors": set(),
    "validation": set(),
    "lazy": set(),
}
PYSPARK_PACKAGES = {"spark", "demo"}
# The demo's pipeline is a job like those ``repart.spark`` serves: it reaches the controller only
# through the ControllerClient port, never through ``storage`` or ``controller`` (the demo's driver,
# demo/run.py, sets up the database and ticks, as an example script may).
PIPELINES = {Path("demo/vwap.py"): {"partitioning", "migration", "protocol", "state", "spark", "sim"}}
# The job object and ManagedQuery are drivers too: given a database URL they build the SQL ControllerClient,
# and may set up the region and run a controller tick between batches, as an example script may. The
# batches still reach the controller only through the ControllerClient port.
DRIVERS = {
    Path(driver): {"partitioning", "migration", "protocol", "state", "storage", "controller"}
    for driver in ("spark/job.py", "spark/streaming/managed.py")
}
# What an example may not import (the name and every module or name below it), and why.
EXAMPLE_FORBIDDEN = {
    "repart.storage.models": "programs use the repository functions",
    "repart.storage.tables": "programs use the repository functions",
    "repart.cli": "programs run the CLI as a command",
}


def _package(relative: Path) -> str:
    return relative.parts[0].removesuffix(".py")


def _imports(source: str, package: str | None) -> list[tuple[int, str | None]]:
    """Every imported name of ``source`` (function-level and TYPE_CHECKING imports too), absolute: a
    relative import is resolved against ``package`` (the dotted package the module is in); one that
    cannot be resolved (a script's, or one reaching above the top-level package) is ``None``."""
    tree = ast.parse(source)
    found: list[tuple[int, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module if node.level == 0 else _resolve(node.level, node.module, package)
            found.extend(
                (node.lineno, None if base is None else f"{base}.{alias.name}") for alias in node.names
            )
    return found


def _resolve(level: int, module: str | None, package: str | None) -> str | None:
    """The absolute name of ``from <level dots><module> import …`` in ``package``, as Python resolves it."""
    if package is None or level > package.count(".") + 1:
        return None
    base = package.rsplit(".", level - 1)[0]
    return f"{base}.{module}" if module else base


def _package_name(relative: Path) -> str:
    """The dotted package of the module at ``relative`` (to src/repart): ``controller/tick.py`` and
    ``controller/__init__.py`` are in ``repart.controller``, ``errors.py`` in ``repart``."""
    return ".".join(("repart", *relative.parent.parts))


def _violations(relative: Path, source: str) -> list[str]:
    """What the module at ``relative`` (to src/repart) with text ``source`` imports against the rules."""
    package = _package(relative)
    if package == "__init__":
        return []
    layer = PIPELINES.get(relative, DRIVERS.get(relative, ALLOWED[package]))
    allowed = layer | {package} | (LEAVES - {package} if package not in LEAVES else set())
    if package == "validation":
        allowed = {"validation", "errors"}
    if package == "state":
        allowed = allowed - {"protocol"}
    problems = []
    for line, name in _imports(source, _package_name(relative)):
        if name is None:
            problems.append(f"{relative}:{line} imports relatively above the repart package")
            continue
        parts = name.split(".")
        if parts[0] == "pyspark" and package not in PYSPARK_PACKAGES:
            problems.append(f"{relative}:{line} imports pyspark")
        if parts[0] != "repart" or len(parts) < 2:
            continue
        target = parts[1]
        if package == "state" and name.startswith("repart.protocol.files"):
            continue
        if package == "spark" and name.startswith("repart.storage") and relative not in DRIVERS:
            problems.append(f"{relative}:{line} imports {name} (jobs use repart.protocol)")
        elif target not in allowed:
            problems.append(f"{relative}:{line} imports {name} ({package} → {target})")
    return problems


def _example_violations(relative: Path, source: str) -> list[str]:
    """What the script at ``relative`` (to the repository) imports that a user program may not."""
    problems = []
    for line, name in _imports(source, None):
        if name is None:
            problems.append(f"{relative}:{line} imports relatively (a script has no package)")
            continue
        for forbidden, reason in EXAMPLE_FORBIDDEN.items():
            if name == forbidden or name.startswith(f"{forbidden}."):
                problems.append(f"{relative}:{line} imports {name} ({reason})")
    return problems


MODULES = sorted(SOURCE.rglob("*.py"))
SCRIPTS = sorted(EXAMPLES.rglob("*.py"))


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
        (
            "partitioning/algorithms/x.py",
            "from ...storage import models\n",
            "imports repart.storage.models (partitioning → storage)",
        ),
        (
            "state/x.py",
            "from ..protocol.spool import locked\n",
            "imports repart.protocol.spool.locked (state → protocol)",
        ),
        ("errors.py", "from .. import anything\n", "imports relatively above the repart package"),
        (
            "demo/vwap.py",
            "from repart.storage import models\n",
            "imports repart.storage.models (demo → storage)",
        ),
        (
            "demo/vwap.py",
            "from ..controller import tick\n",
            "imports repart.controller.tick (demo → controller)",
        ),
    ],
)
def test_the_check_catches_imports_against_the_direction(module: str, source: str, problem: str) -> None:
    assert [message.split(" ", 1)[1] for message in _violations(Path(module), source)] == [problem]


@pytest.mark.parametrize(
    ("module", "source", "name"),
    [
        ("controller/tick.py", "from .policy import FixedPolicy\n", "repart.controller.policy.FixedPolicy"),
        ("controller/__init__.py", "from . import tick\n", "repart.controller.tick"),
        (
            "partitioning/algorithms/scan.py",
            "from ..hashing import slot\n",
            "repart.partitioning.hashing.slot",
        ),
        ("errors.py", "from .validation import check\n", "repart.validation.check"),
        ("state/store.py", "from ..protocol.files import fsync_path\n", "repart.protocol.files.fsync_path"),
        ("controller/tick.py", "from .... import x\n", None),
    ],
)
def test_relative_imports_resolve_to_absolute_names(module: str, source: str, name: str | None) -> None:
    relative = Path(module)
    assert _imports(source, _package_name(relative)) == [(1, name)]


def test_relative_imports_within_the_rules_pass() -> None:
    assert _violations(Path("controller/x.py"), "from ..storage import models\nfrom . import tick\n") == []
    assert _violations(Path("state/x.py"), "from ..protocol.files import write_durably\n") == []


def test_the_examples_are_checked() -> None:
    assert [path.relative_to(ROOT).as_posix() for path in SCRIPTS] == [
        "examples/batch_job.py",
        "examples/streaming_job.py",
        "examples/vwap.py",
    ]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_examples_import_what_a_user_program_may(path: Path) -> None:
    assert _example_violations(path.relative_to(ROOT), path.read_text(encoding="utf-8")) == []


def test_an_example_may_set_up_its_region_tick_and_run_spark() -> None:
    source = (
        "import pyspark\n"
        "from repart.storage import create_region, make_engine, upgrade\n"
        "from repart.storage.client import SqlControllerClient\n"
        "from repart.controller.tick import tick\n"
        "from repart.spark.route import partition\n"
    )
    assert _example_violations(Path("examples/x.py"), source) == []


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        (
            "from repart.storage import models\n",
            "imports repart.storage.models (programs use the repository functions)",
        ),
        (
            "from repart.storage.models import Region\n",
            "imports repart.storage.models.Region (programs use the repository functions)",
        ),
        ("import repart.cli.app\n", "imports repart.cli.app (programs run the CLI as a command)"),
        (
            "def main():\n    from repart.cli import app\n",
            "imports repart.cli.app (programs run the CLI as a command)",
        ),
        ("from .helpers import setup\n", "imports relatively (a script has no package)"),
    ],
)
def test_the_check_catches_what_an_example_may_not_import(source: str, problem: str) -> None:
    assert [message.split(" ", 1)[1] for message in _example_violations(Path("examples/x.py"), source)] == [
        problem
    ]


TESTS = ROOT / "tests"


def _test_module_imports(relative: Path, source: str) -> list[str]:
    """Where the module at ``relative`` (to the repository) imports a test module (``test_*``): shared
    builders live in tests/factories.py or a helper module beside the tests, never in a test module."""
    package = ".".join(relative.with_suffix("").parts[:-1])
    problems = []
    for line, name in _imports(source, package):
        if name is not None and any(part.startswith("test_") for part in name.split(".")):
            problems.append(f"{relative}:{line} imports {name} (a test module)")
    return problems


@pytest.mark.parametrize("path", sorted(TESTS.rglob("*.py")), ids=lambda path: str(path.relative_to(TESTS)))
def test_no_test_module_imports_another(path: Path) -> None:
    assert _test_module_imports(path.relative_to(ROOT), path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from tests.spark.test_observe import frame\n", True),
        ("from .test_plan import SPECS\n", True),
        ("from tests.cli import test_modes\n", True),
        ("from tests.cli.helpers import repart\n", False),
        ("from tests.factories import add_region\n", False),
    ],
)
def test_the_check_catches_a_test_module_import(source: str, found: bool) -> None:
    assert bool(_test_module_imports(Path("tests/migration/test_x.py"), source)) is found
