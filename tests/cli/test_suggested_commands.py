"""Every command a message suggests (`repart …` in single backticks) is one the CLI parses as written.

The commands are parsed, not run: each word of a group picks its subcommand, and the last command
parses the rest with its own parameters, as ``repart …`` would before doing anything. A suggestion
that names an unknown command or option, a positional argument where the command has none, or leaves
out a required argument fails here.

Two collections: the messages reached by provoking them on a real database (the text users see, with
the region's name in it), and every string in the package's source, where an f-string's placeholders
stand for ``1`` (a valid name and a valid number).
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path

import pytest
import typer

import repart
from repart.cli.app import app
from repart.errors import RepartError
from repart.storage import make_engine
from repart.storage.client import SqlControllerClient
from tests.cli.helpers import repart as run
from tests.factories import counter_document, skewed_keys

# A command in single backticks (double ones are reStructuredText literals in docstrings).
SUGGESTION = re.compile(r"(?<!`)`repart ([^`]+)`(?!`)")
SOURCE = Path(repart.__file__).parent


def suggestions(text: str) -> list[str]:
    """The words after ``repart`` of each command ``text`` suggests."""
    return [match.group(1) for match in SUGGESTION.finditer(text)]


def parse(words: list[str]) -> None:
    """Parse ``repart WORDS`` as the CLI would, without running it; the CLI's usage error if it does
    not parse."""
    command = typer.main.get_command(app)
    context = typer.Context(command, info_name="repart")
    name = "repart"
    while isinstance(command, typer.core.TyperGroup):
        assert words, f"`repart … {name}` names a group, not a command"
        name, *words = words
        found = command.get_command(context, name)
        assert found is not None, f"no command {name!r} in `{context.command_path}`"
        command = found
        context = typer.Context(command, info_name=name, parent=context)
    command.make_context(name, words, parent=context.parent)


def source_strings(path: Path) -> list[tuple[int, str]]:
    """Every string literal of the module at ``path`` with its line, f-strings with ``1`` for each
    placeholder."""
    nodes = list(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
    pieces = {id(part) for node in nodes if isinstance(node, ast.JoinedStr) for part in node.values}
    found = []
    for node in nodes:
        if isinstance(node, ast.JoinedStr):
            parts = (part.value if isinstance(part, ast.Constant) else "1" for part in node.values)
            found.append((node.lineno, "".join(str(part) for part in parts)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in pieces:
            found.append((node.lineno, node.value))
    return found


SOURCE_SUGGESTIONS = sorted(
    (f"{path.relative_to(SOURCE)}:{line}", words)
    for path in SOURCE.rglob("*.py")
    for line, text in source_strings(path)
    for words in suggestions(text)
)


def test_the_source_suggests_commands() -> None:
    assert len(SOURCE_SUGGESTIONS) >= 10, SOURCE_SUGGESTIONS


@pytest.mark.parametrize(("where", "words"), SOURCE_SUGGESTIONS, ids=[w for w, _ in SOURCE_SUGGESTIONS])
def test_every_command_the_source_suggests_parses(where: str, words: str) -> None:
    parse(shlex.split(words))


def test_the_parser_refuses_what_the_cli_refuses() -> None:
    """The check itself: a positional argument too many, an unknown option or command, a missing one."""
    parse(["tick", "--region", "trades"])
    refusals = {
        "tick trades": "unexpected extra argument",
        "tick --force": "No such option",
        "ticks": "no command 'ticks'",
        "resume": "Missing",
        "region": "names a group",
    }
    for words, refusal in refusals.items():
        with pytest.raises(Exception, match=refusal):
            parse(words.split())


def provoked_messages(db_url: str, tmp_path: Path) -> list[str]:
    """The messages of errors a user meets on the way: before the region's first tick, and when
    deleting what decisions depend on."""
    created = run(db_url, "region", "create", "ops", "--key-type", "str", "--channels", "2")
    assert created.exit_code == 0, created.output
    messages = [
        run(db_url, *args).stderr for args in (["explain", "ops"], ["scale", "ops", "--channels", "3"])
    ]
    engine = make_engine(db_url)
    try:
        with pytest.raises(RepartError) as raised:
            SqlControllerClient(engine).applied_function("ops")
    finally:
        engine.dispose()
    messages.append(str(raised.value))
    document = tmp_path / "window.json"
    document.write_text(json.dumps(counter_document("ops", 1, skewed_keys())))
    assert run(db_url, "snapshot", "ingest", str(document)).exit_code == 0
    assert run(db_url, "tick").exit_code == 0
    assert run(db_url, "tick").exit_code == 0
    for args in (["snapshot", "delete", "ops", "--seq", "1"], ["region", "delete", "ops"]):
        messages.append(run(db_url, *args).stderr)
    return [" ".join(message.split()) for message in messages]  # the console wraps long lines


def test_the_commands_that_messages_suggest_parse(db_url: str, tmp_path: Path) -> None:
    messages = provoked_messages(db_url, tmp_path)
    found = [words for message in messages for words in suggestions(message)]
    assert len(found) == len(messages), messages  # each message suggests one command
    for words in found:
        parse(shlex.split(words))
    assert "tick --region ops" in found
    assert {"snapshot delete ops --seq 1 --force", "region delete ops --force"} <= set(found)
