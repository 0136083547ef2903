"""Every example in the command line's help runs.

The examples are found in the help of every command and option (a quoted ``repart …`` command, an
``e.g. '…'`` value, a parenthesized time); the test knows how to run each, so an example added to the
help without a way to run it here fails, as does one that stops working.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer.main

from repart.cli.app import app
from tests.cli.helpers import repart

EXAMPLE = re.compile(r"`(repart [^`]+)`|e\.g\. '([^']+)'|\((\d{4}-\d\d-\d\dT[^)]+)\)")
REGION = "vwap"
FILE = "FILE"  # stands for a file in the test's temporary directory


def help_examples() -> Iterator[tuple[str, str]]:
    """(the command whose help holds it, the example) for every example in the help."""
    root = typer.main.get_command(app)
    yield from _examples(root, "repart", root.context_class(root, info_name="repart"))


def _examples(command: Any, path: str, context: Any) -> Iterator[tuple[str, str]]:
    for text in [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]:
        for match in EXAMPLE.finditer(text):
            yield path, next(group for group in match.groups() if group)
    if hasattr(command, "list_commands"):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            yield from _examples(
                sub, f"{path} {name}", sub.context_class(sub, info_name=name, parent=context)
            )


# How each example runs, after the region was created with the merge example and scaled: the
# arguments, REGION standing for the example's placeholder.
RUNS = {
    ("repart region create", "pv=sum,volume=sum"): None,  # the setup below runs it
    ("repart region update", "pv=sum,volume=sum"): [
        "region",
        "update",
        REGION,
        "--merge",
        "pv=sum,volume=sum",
    ],
    ("repart scale", "repart resume REGION"): ["resume", REGION],
    ("repart rollback", "repart resume REGION"): ["resume", REGION],
    ("repart run", "repart resume REGION"): ["resume", REGION],
    ("repart status", "repart resume REGION"): ["resume", REGION],
    ("repart snapshot delete", "repart snapshot list REGION"): ["snapshot", "list", REGION],
    ("repart plans show", "repart plans list REGION"): ["plans", "list", REGION],
    ("repart plans report", "repart plans list REGION"): ["plans", "list", REGION],
    ("repart events list", "2026-01-01T00:00Z"): ["events", "list", REGION, "--since", "2026-01-01T00:00Z"],
    ("repart replay", "repart region update REGION --set KEY=VALUE"): [
        "region",
        "update",
        REGION,
        "--set",
        "counters=4",
    ],
    ("repart replay", "repart snapshot export REGION --out FILE"): [
        "snapshot",
        "export",
        REGION,
        "--out",
        FILE,
    ],
    ("repart snapshot export", "repart replay"): ["replay", "--help"],  # named, not an example to run
}


def test_every_example_in_the_help_runs(db_url: str, tmp_path: Path) -> None:
    found = set(help_examples())
    assert found == set(RUNS)
    created = repart(
        db_url, "region", "create", REGION, "--key-type", "str", "--channels", "2",
        "--split", "dchoices", "--merge", "pv=sum,volume=sum",
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    for setup in (["tick", "--region", REGION], ["scale", REGION, "--channels", "3"]):
        assert repart(db_url, *setup).exit_code == 0
    for example, arguments in RUNS.items():
        if arguments is None:
            continue
        result = repart(db_url, *(str(tmp_path / "file") if part == FILE else part for part in arguments))
        assert result.exit_code == 0, (example, result.output)
        if arguments[0] == "resume":  # resume needs a held region: hold it again for the next
            assert repart(db_url, "scale", REGION, "--channels", "3").exit_code == 0


#: What rich reads as a markup tag, and so drops from the rendered help: ``[low,high]``, ``[default: …]``.
RICH_TAG = re.compile(r"(?<!\\)\[[a-z#/@][^\[\]]*\]")


def help_texts(command: Any, path: str, context: Any) -> Iterator[tuple[str, str]]:
    """(command, text) for the help of every command and of each of its parameters."""
    for text in [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]:
        yield path, text
    if hasattr(command, "list_commands"):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            yield from help_texts(
                sub, f"{path} {name}", sub.context_class(sub, info_name=name, parent=context)
            )


def test_no_help_text_holds_what_rich_would_hide_as_markup() -> None:
    root = typer.main.get_command(app)
    hidden = [
        (path, tag.group())
        for path, text in help_texts(root, "repart", root.context_class(root, info_name="repart"))
        for tag in RICH_TAG.finditer(text)
    ]
    assert hidden == []
