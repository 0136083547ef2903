"""``repart.storage`` and ``repart.partitioning`` load their names lazily (PEP 562, ``repart.lazy``): each
name resolves to its module, and the names the type checkers see are the names exported.

Each role's modules import, when they load, only what its install brings (pyproject.toml): the base
install (the command line, the state store) and the role's extra. A module of the job that imported
numba, Alembic or matplotlib at import time would fail in ``pip install 'repart[spark]'``; here it
fails in a subprocess where every package of the other extras is blocked."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
import tomllib
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


ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"
# Each role: the extras its install adds to the base, and the packages (or modules) it loads. The
# controller's database migrations are Alembic's scripts, run by Alembic only.
ROLES = {
    "base": ((), ("repart.cli", "repart.state", "repart.errors", "repart.validation", "repart.lazy")),
    "spark": (
        ("spark",),
        (
            "repart.spark",
            "repart.protocol",
            "repart.migration",
            "repart.storage.client",
            "repart.storage.engine",
        ),
    ),
    "controller": (("controller",), ("repart.controller", "repart.storage")),
    "sim": (("sim",), ("repart.sim",)),
}
SKIPPED = ("repart.storage.migrations",)
# Run in a subprocess: import every module of argv[2] (a JSON list) with the packages of argv[1] (a
# JSON list) blocked, and print the modules that failed and the package each one wanted.
IMPORT_BLOCKED = """
import importlib, json, sys

blocked = set(json.loads(sys.argv[1]))

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"{name} is blocked", name=name)
        return None

sys.meta_path.insert(0, Blocked())
failed = {}
for module in json.loads(sys.argv[2]):
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        failed[module] = error.name
print(json.dumps(failed))
"""


def _packages(requirements: list[str]) -> set[str]:
    """The import names of ``requirements`` (distribution names normalized: ``prometheus-client`` is
    ``prometheus_client``)."""
    names = (re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement) for requirement in requirements)
    return {re.sub(r"[-.]+", "_", name[0]).lower() for name in names if name}


def _install_sets() -> tuple[set[str], dict[str, set[str]]]:
    """pyproject.toml's base dependencies and each extra's, as import names (the tools of the tests and
    of the docs left out)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    return _packages(project["dependencies"]), {
        extra: _packages(requirements)
        for extra, requirements in extras.items()
        if extra not in ("dev", "docs")
    }


def _modules(names: tuple[str, ...]) -> list[str]:
    """Every module of the packages ``names`` (a module name stands for itself), from the source tree."""
    found = []
    for name in names:
        path = SOURCE.joinpath(*name.split("."))
        if not path.is_dir():
            found.append(name)
            continue
        for file in sorted(path.rglob("*.py")):
            parts = file.relative_to(SOURCE).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if not module.startswith(SKIPPED):
                found.append(module)
    return found


def _import_blocked(blocked: set[str], modules: list[str]) -> dict[str, str]:
    """The modules of ``modules`` that do not import with the packages ``blocked`` missing, and the
    package each one wanted."""
    run = subprocess.run(
        [sys.executable, "-c", IMPORT_BLOCKED, json.dumps(sorted(blocked)), json.dumps(modules)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(run.stdout))


def _blocked_for(role: str) -> set[str]:
    """The packages an install of ``role`` lacks: the other extras' beyond the base and its own."""
    base, extras = _install_sets()
    own = set().union(*(extras[extra] for extra in ROLES[role][0]))
    return set().union(*extras.values()) - base - own


@pytest.mark.parametrize("role", ROLES)
def test_each_role_imports_only_what_its_install_brings(role: str) -> None:
    blocked = _blocked_for(role)
    assert blocked  # psycopg at least: no module imports a database driver, SQLAlchemy loads it
    assert _import_blocked(blocked, _modules(ROLES[role][1])) == {}


def test_the_job_install_lacks_the_controller_and_simulator_packages() -> None:
    assert _blocked_for("spark") == {
        "numba",
        "alembic",
        "apscheduler",
        "prometheus_client",
        "starlette",
        "uvicorn",
        "uvloop",
        "httptools",
        "psycopg",
        "matplotlib",
        "wordfreq",
    }


def test_a_module_importing_a_package_of_another_role_is_caught() -> None:
    failed = _import_blocked(_blocked_for("spark"), ["repart.sim.streams", "repart.controller.daemon"])
    assert failed == {"repart.sim.streams": "wordfreq", "repart.controller.daemon": "apscheduler"}
