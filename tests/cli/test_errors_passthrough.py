"""``reports_bad_input`` turns only a ``RepartError`` into one line and its exit code (DESIGN §12.4): any
other exception is a bug, and it reaches the caller with its traceback instead of being reduced to a line.
"""

from __future__ import annotations

import traceback
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from repart.cli.errors import reports_bad_input
from repart.errors import Conflict, Corrupt, InvalidInput, NotFound, RepartError

runner = CliRunner()
app = typer.Typer()
RAISED: dict[str, Exception] = {
    "invalid": InvalidInput("n_channels", "must be an integer in [1, 4096], got 0"),
    "missing": NotFound("region 'fx' does not exist"),
    "conflict": Conflict("plan 3 is being applied"),
    "corrupt": Corrupt("checksum mismatch", path="state/gen-7/c0.parquet"),
    "bug": RuntimeError("an invariant broke"),
    "key-bug": KeyError("settings"),
}


@app.command()
@reports_bad_input
def fail(
    kind: Annotated[str, typer.Argument()],
    channels: Annotated[int, typer.Option("--channels")] = 4,
) -> None:
    """Raise the exception ``RAISED[kind]``."""
    raise RAISED[kind]


@app.command()
def other() -> None:
    """A second command, so that ``fail`` is invoked by name as the real CLI's commands are."""


@pytest.mark.parametrize("kind", ["bug", "key-bug"])
def test_an_exception_that_is_not_a_repart_error_keeps_its_traceback(kind: str) -> None:
    result = runner.invoke(app, ["fail", kind])
    assert result.exit_code == 1
    assert result.exception is RAISED[kind]
    assert result.exc_info is not None
    frames = traceback.extract_tb(result.exc_info[2])
    assert frames[-1].name == "fail"  # the traceback reaches the line that raised
    assert "error:" not in result.output


def test_a_bug_propagates_out_of_the_command() -> None:
    with pytest.raises(RuntimeError, match=r"^an invariant broke$"):
        runner.invoke(app, ["fail", "bug"], catch_exceptions=False)


@pytest.mark.parametrize(
    ("kind", "code", "line"),
    [
        ("invalid", 2, "error: --channels must be an integer in [1, 4096], got 0"),
        ("missing", 2, "error: region 'fx' does not exist"),
        ("conflict", 3, "error: plan 3 is being applied"),
        ("corrupt", 4, "error: state/gen-7/c0.parquet: checksum mismatch"),
    ],
)
def test_a_repart_error_is_one_line_with_its_exit_code(kind: str, code: int, line: str) -> None:
    assert isinstance(RAISED[kind], RepartError)
    result = runner.invoke(app, ["fail", kind])
    assert result.exit_code == code
    assert isinstance(result.exception, SystemExit)  # typer.Exit, not the error itself
    assert result.stderr == line + "\n"
    assert result.stdout == ""
    assert "Traceback" not in result.output
