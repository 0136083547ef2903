"""A command whose install lacks a package of an extra names the extras to install and exits 2
(``repart.cli.errors.reports_bad_input``): the command's own extras when one of them brings the
package, else the extras that do. A missing package of the base install is a broken install and keeps
its traceback. Each case runs ``repart`` in a subprocess with the packages made missing
(``sys.modules[name] = None``), as in an install without them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Run ``repart argv[2:]`` with the packages of argv[1] (comma-separated) missing.
WITHOUT = """
import sys

for name in sys.argv[1].split(","):
    sys.modules[name] = None
sys.argv = ["repart", *sys.argv[2:]]
from repart.cli.app import main

main()
"""


def repart_without(missing: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, missing, *args], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    ("missing", "args", "install"),
    [
        ("numba", ("tick",), "controller"),
        ("numba", ("simulate",), "sim"),
        ("pyspark", ("demo",), "spark,controller,sim"),
        ("psycopg", ("status", "--db", "postgresql+psycopg://repart@127.0.0.1:1/repart"), "postgres"),
    ],
)
def test_a_command_names_the_extras_to_install(
    tmp_path: Path, missing: str, args: tuple[str, ...], install: str
) -> None:
    if args == ("tick",):
        args = ("tick", "--db", f"sqlite:///{tmp_path / 'repart.db'}")
    result = repart_without(missing, *args)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"error: this command needs {missing}, which is not installed: pip install 'repart[{install}]'\n"
    )


def test_a_missing_package_of_the_base_install_keeps_its_traceback(tmp_path: Path) -> None:
    result = repart_without("pyarrow", "state", "verify", "--state", str(tmp_path))
    assert result.returncode == 1
    assert "ModuleNotFoundError" in result.stderr and "error: this command needs" not in result.stderr
