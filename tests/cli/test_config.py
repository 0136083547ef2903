"""The configuration file (``repart.toml`` or ``$REPART_CONFIG``) from the command line; shell completion.

Precedence is flag > environment > file > built-in default; each case is told apart by which of several
databases, each holding a region of its own name, a command reads. A malformed file, an unknown key or
a value of the wrong type is one line naming the file, the line and the key, with exit code 2, and the
command does nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.cli.app import app
from repart.cli.config import KEYS, Config, load_config
from repart.errors import InvalidInput
from tests.cli.helpers import one_error, runner


def database_with_region(tmp_path: Path, name: str) -> str:
    """A new database holding one region, ``name``, so that a command's output tells which it read."""
    url = f"sqlite:///{tmp_path / name / 'repart.db'}"
    assert runner.invoke(app, ["init", "--db", url]).exit_code == 0
    created = runner.invoke(
        app, ["region", "create", name, "--key-type", "str", "--channels", "2", "--db", url]
    )
    assert created.exit_code == 0, created.output
    return url


def regions_read(*args: str) -> list[str]:
    """The regions ``repart status ARGS --json`` lists, from whichever database it resolved."""
    result = runner.invoke(app, ["status", *args, "--json"])
    assert result.exit_code == 0, result.output
    return [row["region"] for row in json.loads(result.stdout)]


@pytest.fixture
def databases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Three databases (flag, env, file), a ``repart.toml`` naming the third in the working directory,
    and neither ``$REPART_DB`` nor ``$REPART_CONFIG`` set."""
    urls = {name: database_with_region(tmp_path, name) for name in ("flag", "env", "file")}
    work = tmp_path / "work"
    work.mkdir()
    (work / "repart.toml").write_text(f'# the team\'s defaults\ndb = "{urls["file"]}"\n')
    monkeypatch.chdir(work)
    monkeypatch.delenv("REPART_DB", raising=False)
    monkeypatch.delenv("REPART_CONFIG", raising=False)
    return urls


def test_the_flag_wins_over_the_environment_which_wins_over_the_file(
    databases: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert regions_read() == ["file"]
    monkeypatch.setenv("REPART_DB", databases["env"])
    assert regions_read() == ["env"]
    assert regions_read("--db", databases["flag"]) == ["flag"]
    monkeypatch.delenv("REPART_DB")
    assert regions_read("--db", databases["flag"]) == ["flag"]


def test_repart_config_names_the_file_instead_of_the_working_directory_s(
    databases: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text(f'db = "{databases["env"]}"\n')
    monkeypatch.setenv("REPART_CONFIG", str(elsewhere))
    assert regions_read() == ["env"]


def test_without_a_file_the_built_in_default_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REPART_DB", raising=False)
    monkeypatch.delenv("REPART_CONFIG", raising=False)
    assert load_config() == Config()
    result = runner.invoke(app, ["status"])
    assert one_error(result.output) == (
        "error: --db names no database: ./.repart/repart.db does not exist; create it with `repart init`"
    )
    assert result.exit_code == 2


def test_a_database_named_by_the_environment_is_named_so_in_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REPART_DB", "sqlite:///missing.db")
    monkeypatch.delenv("REPART_CONFIG", raising=False)
    result = runner.invoke(app, ["status"])
    assert one_error(result.output).startswith("error: $REPART_DB names no database: ")
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'db = "sqlite:///x.db"\n\ndbb = "sqlite:///y.db"\n',
            "error: {path}:3: key 'dbb' is not a setting; the accepted keys are db, state",
        ),
        (
            '# defaults\ndb = "sqlite:///x.db"\n\nsttae.x = "y"\n',
            "error: {path}:4: key 'sttae' is not a setting; the accepted keys are db, state",
        ),
        (
            "# defaults\n[db]\nurl = 'sqlite:///x.db'\n",
            "error: {path}:2: key 'db' must be a non-empty string (the controller's database URL (the "
            "default of --db)), got {{'url': 'sqlite:///x.db'}}",
        ),
        ("state = 7\n", "error: {path}:1: key 'state' must be a non-empty string (the state store, a "
         "directory or an object store URL (the default of --state)), got 7"),
        ('db = ""\n', "error: {path}:1: key 'db' must be a non-empty string (the controller's database URL "
         "(the default of --db)), got ''"),
        ('db = "sqlite:///x.db"\ndb "oops"\n',
         "error: {path}:2: key 'db' is not valid TOML: Expected '=' after a key in a key/value pair"),
        ('db = "sqlite:///x.db"\n[state\n',
         "error: {path}:2: is not valid TOML: Expected ']' at the end of a table declaration"),
        ('state = [\n"a",\n"b" "c",\n]\n',
         "error: {path}:3: is not valid TOML: Unclosed array"),
        ('state = [\n"a",\n"db" "c",\n]\n',
         "error: {path}:3: is not valid TOML: Unclosed array"),
    ],
)  # fmt: skip
def test_a_bad_file_is_one_line_naming_the_file_line_and_key_and_nothing_is_done(
    databases: dict[str, str], text: str, expected: str
) -> None:
    path = Path("repart.toml")
    path.write_text(text)
    before = runner.invoke(app, ["region", "list", "--db", databases["file"], "--json"]).stdout
    result = runner.invoke(app, ["region", "create", "other", "--key-type", "str", "--channels", "2"])
    assert one_error(result.output) == expected.format(path=path)
    assert result.exit_code == 2
    assert runner.invoke(app, ["region", "list", "--db", databases["file"], "--json"]).stdout == before


def test_a_file_is_read_only_when_a_command_needs_it(databases: dict[str, str]) -> None:
    Path("repart.toml").write_text("not toml at all\n")
    assert regions_read("--db", databases["flag"]) == ["flag"]


def test_a_missing_repart_config_file_and_a_bad_db_value_name_their_source(
    databases: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPART_CONFIG", str(tmp_path / "absent.toml"))
    result = runner.invoke(app, ["status"])
    assert one_error(result.output) == (
        f"error: {tmp_path / 'absent.toml'}: does not exist (named by $REPART_CONFIG); create it or unset "
        "$REPART_CONFIG"
    )
    assert result.exit_code == 2
    monkeypatch.delenv("REPART_CONFIG")
    Path("repart.toml").write_text('\n\ndb = "mysql://somewhere/db"\n')
    result = runner.invoke(app, ["status"])
    assert one_error(result.output).startswith(
        "error: repart.toml:3: key 'db' must name a supported database"
    )
    assert result.exit_code == 2


def test_the_state_commands_take_their_store_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REPART_CONFIG", raising=False)
    result = runner.invoke(app, ["state", "verify"])
    assert one_error(result.output) == (
        'error: --state is required: give --state DIR|URL, or state = "…" in repart.toml'
    )
    assert result.exit_code == 2
    Path("repart.toml").write_text(f'state = "{tmp_path / "no-store"}"\n')
    from_file = runner.invoke(app, ["state", "verify", "--json"])
    given = runner.invoke(app, ["state", "verify", "--state", str(tmp_path / "no-store"), "--json"])
    assert from_file.exit_code == given.exit_code == 2
    assert from_file.output == given.output
    assert str(tmp_path / "no-store") in one_error(from_file.output)


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=12))
def test_every_unknown_top_level_key_is_refused_by_name(key: str) -> None:
    if key in KEYS:
        return
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "repart.toml"
        path.write_text(f'db = "sqlite:///x.db"\n{key} = "x"\n')
        with pytest.raises(InvalidInput) as refused:
            load_config(path)
    assert refused.value.field == f"{path}:2: key {key!r}"


def complete(words: str) -> list[str]:
    """What the shell's completion offers for ``words`` (bash's protocol, as the installed script asks)."""
    environment = {
        **os.environ,
        "_REPART_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    script = Path(sys.executable).with_name("repart")
    done = subprocess.run([str(script)], env=environment, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_shell_completion_offers_commands_subcommands_and_options() -> None:
    assert complete("repart sta") == ["status", "state"]
    assert complete("repart state ver") == ["verify"]
    assert complete("repart scale --ch") == ["--channels"]
    assert "--max-channels" in complete("repart region create --")
    script = Path(sys.executable).with_name("repart")
    # The script --show-completion prints for bash, asked for by click's variable rather than by the
    # parent shell, which typer detects (under sh it refuses).
    environment = os.environ | {"_REPART_COMPLETE": "source_bash"}
    shown = subprocess.run([str(script)], capture_output=True, text=True, timeout=60, env=environment)
    assert shown.returncode == 0, shown.stderr
    assert "_REPART_COMPLETE=complete_bash" in shown.stdout
    assert shown.stdout.rstrip().endswith("complete -o default -F _repart_completion repart")
