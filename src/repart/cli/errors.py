"""Bad input on the command line: the message, no traceback, exit code 2 (DESIGN §10)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console

P = ParamSpec("P")
R = TypeVar("R")

USAGE_ERROR = 2
_stderr = Console(stderr=True)


def reports_bad_input(command: Callable[P, R]) -> Callable[P, R]:
    """Turn a ValueError raised by a command into ``error: <message>`` on stderr and exit code 2."""

    @wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ValueError as error:
            _stderr.print(f"[bold red]error:[/] {error}", highlight=False)
            raise typer.Exit(USAGE_ERROR) from None

    return wrapper
