"""Expected errors on the command line: one line on stderr and the error's exit code (DESIGN §12.4).

A command raises ``ReparError``s; this wrapper prints ``error: <message>`` without a traceback and
exits with the class's code (2 invalid input or not found, 3 conflict, 4 corrupt state; README lists
them). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console

from repart.errors import ReparError

P = ParamSpec("P")
R = TypeVar("R")

USAGE_ERROR = 2
_stderr = Console(stderr=True)


def reports_bad_input(command: Callable[P, R]) -> Callable[P, R]:
    """Turn a ReparError raised by a command into ``error: <message>`` on stderr and its exit code;
    a ValueError not yet converted to InvalidInput is reported the same way with exit code 2."""

    @wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ReparError as error:
            _stderr.print(f"[bold red]error:[/] {error}", highlight=False)
            raise typer.Exit(error.exit_code) from None
        except ValueError as error:
            _stderr.print(f"[bold red]error:[/] {error}", highlight=False)
            raise typer.Exit(USAGE_ERROR) from None

    return wrapper
