"""A typer group whose commands are imported and built only when they are used.

Typer builds the click command of every registered command before it parses a word: it imports each
command module (and what that module imports) and reads every command function's signature. A group
made by ``lazy_group`` instead knows each command by name and by where it lives
(``"repart.cli.status:status"``: a command function, or a ``typer.Typer`` of subcommands), and builds
a command the first time click asks for it, exactly as ``app.command(name)`` or
``app.add_typer(sub, name=name)`` would have built it. ``repart status`` then imports and builds
``status`` alone; ``repart --help``, which lists every command with its help, still builds them all.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup
from typer.main import get_group

if TYPE_CHECKING:
    from typer._click import Command


def lazy_group(locations: Mapping[str, str]) -> type[TyperGroup]:
    """A group class for ``typer.Typer(cls=...)`` whose commands are ``locations`` (command name →
    ``"module:attribute"``), listed in that order, then any command registered on the app itself."""

    class LazyGroup(TyperGroup):
        def __init__(self, **attrs: Any) -> None:
            super().__init__(**attrs)
            self.commands = LazyCommands(locations, self.commands, self._build)

        def _build(self, name: str, location: str) -> Command:
            """The command ``name`` from the function or Typer at ``location``, built with this group's
            settings as typer builds a registered command or an added Typer."""
            module, _, attribute = location.partition(":")
            target = getattr(importlib.import_module(module), attribute)
            holder = typer.Typer(
                add_completion=False,
                rich_markup_mode=self.rich_markup_mode,
                suggest_commands=self.suggest_commands,
            )
            if isinstance(target, typer.Typer):
                holder.add_typer(target, name=name)
            else:
                holder.command(name)(target)
            return get_group(holder).commands[name]

    return LazyGroup


class LazyCommands(MutableMapping[str, "Command"]):
    """A group's commands by name: the names are known up front, a command is built on first access.

    Typer's group reads its commands through this mapping (``get`` to run one, ``keys`` to suggest a
    name for a typo, ``items`` to list them with their help), so only listing them builds them all.
    """

    def __init__(
        self,
        locations: Mapping[str, str],
        built: Mapping[str, Command],
        build: Callable[[str, str], Command],
    ) -> None:
        self._locations = dict(locations)
        self._built = dict(built)
        self._build = build

    def __getitem__(self, name: str) -> Command:
        if name not in self._built:
            self._built[name] = self._build(name, self._locations[name])
        return self._built[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._locations.pop(name, None)
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter({**self._locations, **self._built})

    def __len__(self) -> int:
        return len({**self._locations, **self._built})

    def __contains__(self, name: object) -> bool:
        return name in self._locations or name in self._built
