"""The configuration file: defaults for the command line's options, so that commands need fewer of them.

The file is ``$REPART_CONFIG`` when that is set (it must then exist), else ``repart.toml`` in the
current directory when there is one. It is TOML, with these keys, all optional:

- ``db``: the controller's database URL, the default of every command's ``--db``;
- ``state``: the state store (a directory or an object store URL), the default of the
  ``repart state`` commands' ``--state``.

An option given on the command line wins, then the environment (``$REPART_DB`` for the database),
then the file, then repart's built-in default (``sqlite:///./.repart/repart.db`` for the database).

A file that is not valid TOML, holds a key repart does not know, or a value of the wrong type is an
``InvalidInput`` naming the file, the line and the key, which the command line prints as one line
with exit code 2. The file is read only when a command needs a value from it.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from repart.errors import InvalidInput

CONFIG_ENV_VAR = "REPART_CONFIG"
DB_ENV_VAR = "REPART_DB"
DEFAULT_FILE = "repart.toml"
KEYS = {
    "db": "the controller's database URL (the default of --db)",
    "state": "the state store, a directory or an object store URL (the default of --state)",
}


@dataclass(frozen=True)
class Config:
    """The settings a configuration file gives; None for a key it leaves out. ``path`` is the file
    they came from (None when there is none)."""

    path: Path | None = None
    db: str | None = None
    state: str | None = None


def config_path() -> Path | None:
    """The configuration file in effect: ``$REPART_CONFIG``, else ``./repart.toml`` if it exists."""
    named = os.environ.get(CONFIG_ENV_VAR)
    if named:
        return Path(named)
    default = Path(DEFAULT_FILE)
    return default if default.is_file() else None


def load_config(path: Path | None = None) -> Config:
    """The configuration in ``path`` (default: ``config_path()``); an empty ``Config`` without a file.

    InvalidInput naming the file, the line and the key for a missing ``$REPART_CONFIG`` file, text that
    is not TOML, an unknown key, or a value that is not a non-empty string.
    """
    path = config_path() if path is None else path
    if path is None:
        return Config()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(
            f"{path}:", f"does not exist (named by ${CONFIG_ENV_VAR}); create it or unset ${CONFIG_ENV_VAR}"
        ) from None
    except (OSError, UnicodeDecodeError) as problem:
        raise InvalidInput(
            f"{path}:", f"cannot be read as UTF-8 text ({problem.__class__.__name__})"
        ) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as problem:
        line = _error_line(str(problem))
        key = _key_on(text, line)
        raise InvalidInput(
            f"{path}:{line}:" if key is None else f"{path}:{line}: key {key!r}",
            f"is not valid TOML: {_error_text(str(problem))}",
        ) from None
    values: dict[str, str] = {}
    for key, value in document.items():
        line = _line_of(text, key)
        if key not in KEYS:
            raise InvalidInput(
                f"{path}:{line}: key {key!r}", f"is not a setting; the accepted keys are {', '.join(KEYS)}"
            )
        if not isinstance(value, str) or not value.strip():
            raise InvalidInput(
                f"{path}:{line}: key {key!r}", f"must be a non-empty string ({KEYS[key]}), got {value!r}"
            )
        values[key] = value
    return Config(path=path, **values)


def database_option(given: str | None) -> tuple[str | None, str]:
    """The database URL a command uses and the name to show in its errors: ``--db`` if given, else
    ``$REPART_DB`` (returned as None: the storage layer reads it; shown as the variable), else the
    file's ``db`` (shown as the file, its line and key), else None (the built-in default)."""
    if given:
        return given, "--db"
    if os.environ.get(DB_ENV_VAR):
        return None, f"${DB_ENV_VAR}"
    configured = load_config()
    if configured.db is None or configured.path is None:
        return None, "--db"
    text = configured.path.read_text(encoding="utf-8")
    return configured.db, f"{configured.path}:{_line_of(text, 'db')}: key 'db'"


def state_option(given: str | None) -> str:
    """The state store a ``repart state`` command uses: ``--state`` if given, else the file's ``state``;
    InvalidInput naming ``--state`` when neither gives one."""
    if given:
        return given
    configured = load_config()
    if configured.state is None:
        raise InvalidInput(
            "--state",
            f'is required: give --state DIR|URL, or state = "…" in {configured.path or DEFAULT_FILE}',
        )
    return configured.state


def _line_of(text: str, key: str) -> int:
    """The line of ``text`` (1-based) where the top-level ``key`` is assigned (``key = …``, or a dotted
    ``key.sub = …``); 1 when it cannot be told."""
    pattern = re.compile(rf"^\s*(?:{re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')\s*[=.]")
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    table = re.compile(rf"^\s*\[\s*(?:{re.escape(key)}|\"{re.escape(key)}\")\s*[\].]")
    for number, line in enumerate(text.splitlines(), start=1):
        if table.match(line):
            return number
    return 1


def _key_on(text: str, line: int) -> str | None:
    """The setting whose assignment line ``line`` (1-based) of ``text`` begins (``db = …``, a bare name
    perhaps without its ``=``), or None when the line begins with no setting's name (a value inside a
    multi-line array, a table header, a key repart does not know)."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return None
    found = re.match(
        r"\s*(?:(?:\"([^\"]*)\"|'([^']*)')(?=\s*[=.])|([A-Za-z0-9_-]+)(?=[\s=.]|$))", lines[line - 1]
    )
    name = None if found is None else next(part for part in found.groups() if part is not None)
    return name if name in KEYS else None


def _error_line(message: str) -> int:
    """The line tomllib's message names ("… (at line 3, column 5)"); 1 when it names none."""
    found = re.search(r"at line (\d+)", message)
    return int(found.group(1)) if found else 1


def _error_text(message: str) -> str:
    """tomllib's message without its position, which the error gives as the line already."""
    return re.sub(r"\s*\(at (?:line \d+, column \d+|end of document)\)", "", message)
