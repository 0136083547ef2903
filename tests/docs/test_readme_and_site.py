"""README as the front page, and the documentation site's generated pages.

The README stays short, cites no issue or design section, shows the streaming example as the example
file holds it (the batch example is checked by ``tests/spark/test_job.py``), links only to files that
exist, and names every dependency of ``pyproject.toml`` in its table. The site's hook generates the CLI
reference from the typer app and the benchmarks page from ``docs/results/``: every command and every
saved output appears, each output under its command.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
import typer.main

from repart.cli.app import COMMANDS, app

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import generate  # noqa: E402  (the mkdocs hook, a script beside the docs)


def test_the_readme_is_a_front_page() -> None:
    assert len(README.splitlines()) <= 250
    assert not re.search(r"issue #|DESIGN §|#\d+\b", README)


INTERNAL_REFERENCE = re.compile(
    r"\bissues?\s*#\d|\bissue\s+\d|DESIGN(\.md)?\s*§|\bthe brief\b|second reader", re.IGNORECASE
)


def test_no_user_facing_text_cites_the_team_s_issues_or_design_document() -> None:
    """The docs pages, the changelog, the package's code (its docstrings, help and messages), the
    benchmarks and the examples are read by users, who have neither the issue tracker nor the design
    document."""
    pages = [p for p in (ROOT / "docs").rglob("*.md") if "results" not in p.parts]
    sources = [p for folder in ("src", "benchmarks", "examples") for p in (ROOT / folder).rglob("*.py")]
    cited = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in [ROOT / "README.md", ROOT / "CHANGELOG.md", *pages, *sources]
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if INTERNAL_REFERENCE.search(line)
    ]
    assert cited == []


def test_the_readme_shows_the_streaming_example_as_the_file_holds_it() -> None:
    blocks = [block.split("```", 1)[0] for block in README.split("```python\n")[1:]]
    shown = next(block for block in blocks if "foreachBatch" in block)
    assert len(shown.strip().splitlines()) <= 10
    assert shown.strip() in (ROOT / "examples" / "streaming_job.py").read_text(encoding="utf-8")


def test_the_readme_shows_the_batch_example_as_the_file_holds_it() -> None:
    """(tests/spark/test_job.py runs the example.)"""
    blocks = [block.split("```", 1)[0] for block in README.split("```python\n")[1:]]
    shown = next(block for block in blocks if "job.process(" in block)
    assert len(shown.strip().splitlines()) <= 10
    assert shown.strip() in (ROOT / "examples" / "batch_job.py").read_text(encoding="utf-8")


def test_every_link_of_the_readme_names_a_file_that_exists() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [target for target in targets if "://" not in target]
    assert local, "the README links into the docs"
    assert [target for target in local if not (ROOT / target).exists()] == []


def test_the_readme_names_every_dependency_with_its_reason() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        requirements += extra
    names = {re.split(r"[<>=\[ ;]", requirement, maxsplit=1)[0].lower() for requirement in requirements}
    table = README.split("## Dependencies", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    named = " ".join(row.split("|")[1] for row in rows).lower()
    assert [name for name in sorted(names) if name not in named] == []
    assert all(row.split("|")[3].strip() for row in rows)


def test_the_cli_reference_lists_every_command_and_subcommand() -> None:
    reference = generate.cli_reference()
    root = typer.main.get_command(app)
    context = root.context_class(root, info_name="repart")
    for name in COMMANDS:
        assert f"## `repart {name}`" in reference
        command = root.get_command(context, name)
        if hasattr(command, "list_commands"):
            for sub in command.list_commands(context):
                assert f"#### `repart {name} {sub}`" in reference
    assert "| `--db` |" in reference and "| `--json` | flag |" in reference


def test_the_benchmarks_page_shows_every_saved_output_under_its_command() -> None:
    page = generate.benchmarks_page()
    outputs = sorted(path for path in (ROOT / "docs" / "results").iterdir() if path.is_file())
    assert outputs
    for path in outputs:
        assert f"(results/{path.name})" in page
        title, command = generate.RESULTS[path.name.split(".", 1)[0]]
        section = page.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
        assert f"```\n{command}\n```" in section and f"results/{path.name}" in section


def test_a_saved_output_without_a_command_fails_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mkdocs.exceptions import PluginError

    (tmp_path / "new-benchmark.txt").write_text("1.0\n")
    monkeypatch.setattr(generate, "RESULTS_DIR", tmp_path)
    with pytest.raises(PluginError, match="new-benchmark"):
        generate.benchmarks_page()


def test_every_package_has_an_init_and_the_typing_marker_ships() -> None:
    source = ROOT / "src" / "repart"
    packages = {path.parent for path in source.rglob("*.py") if "__pycache__" not in path.parts}
    assert [str(package) for package in sorted(packages) if not (package / "__init__.py").exists()] == []
    assert (source / "py.typed").exists()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert data["package-data"]["repart"] == ["py.typed"]  # the top-level marker covers every subpackage
    for package, files in data["package-data"].items():
        for name in files:
            assert (source.parent / package.replace(".", "/") / name).exists()


def test_the_snapshot_schema_page_shows_the_schema_the_package_ships() -> None:
    page = (ROOT / "docs" / "reference" / "snapshot-schema.md").read_text(encoding="utf-8")
    shown = page.split("```json\n")[-1].split("```", 1)[0]
    shipped = (ROOT / "src" / "repart" / "protocol" / "snapshot.schema.json").read_text(encoding="utf-8")
    assert shown.strip() == shipped.strip()
