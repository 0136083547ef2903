"""Expected errors on the command line: one line on stderr and the error's exit code.

A command raises ``RepartError``s; ``reports_bad_input`` prints ``error: <message>`` without a
traceback and exits with the class's code: 2 for invalid input or something not found, 3 for a
conflict (retry later), 4 for corrupt state (the documentation's exit codes page lists them).
Anything else is a bug and keeps its traceback.

An ``InvalidInput`` names the field it is about; when the running command has an option or argument
for that field, the message names the option instead (``--channels must be …`` for
``n_channels_initial``). The option is read from the command function's own parameter declarations
(``typer.Option`` / ``typer.Argument`` in its annotations): the parameter whose Python name is the
field, or the one ``FIELD_PARAMETERS`` gives for a field whose parameter is named differently; a
controller setting ``settings.<key>`` is shown as ``--set <key>``. No message text is matched.

A command that needs a package its install lacks (``repart tick`` where only ``repart[spark]`` is
installed) names the extras to install and exits 2, as for something not found: the extras its module
needs (``COMMAND_EXTRAS``) when one of them brings the package, else the extras that do (``postgres``
for psycopg), read from the installed package's metadata. A missing package that no extra brings is a
broken install and keeps its traceback.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import wraps
from typing import Any, ParamSpec, TypeVar, get_type_hints

import typer
from typer.models import ArgumentInfo, OptionInfo

from repart.errors import InvalidInput, NotFound, RepartError

P = ParamSpec("P")
R = TypeVar("R")

# Fields whose command-line parameter has another name: field -> the parameter's Python name.
FIELD_PARAMETERS = {
    "n_channels_initial": "channels",
    "n_channels": "channels",
    "to_version": "to",
    "region": "name",
    "split_scheme": "split",
}
# The extras (pyproject.toml's optional dependencies) that the commands of a module need beyond the
# base install; the commands of any other module are the controller's.
COMMAND_EXTRAS = {
    "repart.cli.demo": ("spark", "controller", "sim"),
    "repart.cli.simulate": ("sim",),
    "repart.cli.simulate_grouping": ("sim",),
    "repart.cli.state": (),
}
CONTROLLER_EXTRAS = ("controller",)
# A requirement of the package metadata that an extra brings: its distribution name and the extra.
_EXTRA_REQUIREMENT = re.compile(r"""([A-Za-z0-9][A-Za-z0-9._-]*)[^;]*;.*\bextra\s*==\s*["']([^"']+)["']""")


def reports_bad_input(command: Callable[P, R]) -> Callable[P, R]:
    """Turn a RepartError raised by ``command`` into ``error: <message>`` on stderr and its exit code."""

    @wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except RepartError as error:
            print_error(message_of(error, command))
            raise typer.Exit(error.exit_code) from None
        except ModuleNotFoundError as missing:
            package = (missing.name or "").partition(".")[0]
            extras = extras_to_install(package, COMMAND_EXTRAS.get(command.__module__, CONTROLLER_EXTRAS))
            if not extras:
                raise
            print_error(
                f"this command needs {package}, which is not installed: "
                f"pip install 'repart[{','.join(extras)}]'"
            )
            raise typer.Exit(NotFound.exit_code) from None

    return wrapper


def extras_to_install(package: str, needed: tuple[str, ...]) -> tuple[str, ...]:
    """What to install for the missing top-level ``package``: ``needed`` (a command's extras) when one of
    them brings it, else the extras that bring it; none when no extra does, or repart is not installed
    (the extras are read from its metadata, only here: a command that succeeds does not load it)."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        requirements = requires("repart") or []
    except PackageNotFoundError:
        return ()
    bringing = []
    for requirement in requirements:
        match = _EXTRA_REQUIREMENT.match(requirement)
        if match and re.sub(r"[-.]+", "_", match[1]).lower() == package and match[2] not in bringing:
            bringing.append(match[2])
    return needed if set(needed) & set(bringing) else tuple(bringing)


def print_error(message: str) -> None:
    """``error: <message>`` on stderr in one line, however long (rich is imported only here: a command
    that succeeds does not load it for its errors)."""
    from rich.console import Console
    from rich.markup import escape

    # The message quotes user input, which must not be read as rich markup ("[/x]").
    Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False)


def message_of(error: RepartError, command: Callable[..., Any]) -> str:
    """``error``'s message, with an invalid field shown as ``command``'s option for it."""
    if isinstance(error, InvalidInput):
        option = option_of(error.field, command)
        if option is not None:
            return error.rename(option)
    return str(error)


def option_of(field: str, command: Callable[..., Any]) -> str | None:
    """``command``'s option (``--channels``) or argument (``NAME``) for ``field``, if it has one."""
    if field.startswith("settings."):
        return f"--set {field.removeprefix('settings.')}"
    options = options_of(command)
    return options.get(field) or options.get(FIELD_PARAMETERS.get(field, field))


def options_of(command: Callable[..., Any]) -> dict[str, str]:
    """``{parameter name: its option or argument as the user types it}`` for a typer command."""
    shown: dict[str, str] = {}
    for name, hint in get_type_hints(command, include_extras=True).items():
        for declaration in getattr(hint, "__metadata__", ()):
            if isinstance(declaration, OptionInfo):
                # Inside Annotated, typer reads a first positional string as the option's name.
                first = declaration.default if isinstance(declaration.default, str) else ""
                names = (first, *(declaration.param_decls or ()))
                spelled = [name.split("/")[0] for name in names if name.startswith("--")]
                shown[name] = max(spelled, key=len, default="--" + name.replace("_", "-"))
            elif isinstance(declaration, ArgumentInfo):
                shown[name] = name.upper()
    return shown
