"""An mkdocs hook that generates three pages at build time, so that none of them can fall out of date:

- ``reference/cli.md``: every command of the ``repart`` typer app, with its help and options, read from
  the app itself;
- ``benchmarks.md``: every saved output under ``docs/results/``, each with the command that reproduces
  it (``RESULTS`` below; a file without an entry fails the build);
- ``changelog.md``: the repository's ``CHANGELOG.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer.main
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "docs" / "results"
PY = ".venv/bin/python"

# Each saved output's stem: its title and the command that produced it. Outputs of scripts that no
# longer exist are kept as history and say so.
RESULTS: dict[str, tuple[str, str]] = {
    "demo-vwap": ("The demo", ".venv/bin/repart demo --plot docs/results/demo-vwap.png"),
    "paper-default": (
        "Gedik's experiment, paper defaults",
        ".venv/bin/repart simulate --runs 5 --json docs/results/paper-default.json "
        "--plot docs/results/paper-default.png",
    ),
    "paper-default-targets": (
        "Gedik's experiment: the targets checked",
        f"{PY} benchmarks/simulate_targets.py docs/results/paper-default.json",
    ),
    "tail-aware": (
        "Tail-aware builds",
        ".venv/bin/repart simulate --runs 3 --stream-factor 10 --tail-aware "
        "--algorithms scan,redist,readj,consistent --json docs/results/tail-aware.json "
        "--plot docs/results/tail-aware.png",
    ),
    "tail-aware-targets": (
        "Tail-aware builds: the targets checked",
        f"{PY} benchmarks/simulate_targets.py docs/results/tail-aware.json",
    ),
    "split-simulate": (
        "Split mode in simulation",
        ".venv/bin/repart simulate --split dchoices,pkg,wchoices,dkg,fish,rr --runs 5 --json split.json",
    ),
    "build-time": ("Construction time", f"{PY} benchmarks/build_time.py"),
    "lookup": ("Lookup throughput", f"{PY} benchmarks/lookup.py"),
    "groupings-zipf": (
        "Key-splitting groupings on Zipf streams",
        ".venv/bin/repart simulate-grouping --messages 10000000 --zipf 0.8,1.0,1.4,2.0 "
        "--schemes kg,sg,pkg,dchoices,wchoices,rr,fish,dkg --json docs/results/groupings-zipf.json "
        "--plot docs/results/groupings-zipf.png",
    ),
    "grouping-targets": (
        "Key-splitting groupings: the papers' figures",
        f"{PY} benchmarks/grouping_targets.py --json docs/results/grouping-targets.json",
    ),
    "grouping-speed": ("Key-splitting groupings: routing speed", f"{PY} benchmarks/grouping_speed.py"),
    "fish-tuning": (
        "FISH's parameters",
        f"{PY} benchmarks/grouping_targets.py --sections fish-tuning",
    ),
    "grouping-sweeps": (
        "D-Choices and DKG parameter sweeps",
        f"{PY} benchmarks/grouping_targets.py --sections dchoices-sweep,dkg-check",
    ),
    "job-overhead": ("A job's batch against plain Spark", f"{PY} benchmarks/job_overhead.py --json FILE"),
    "job-overhead-run2": (
        "A job's batch against plain Spark (the run before, commit 3a16b9c)",
        f"{PY} benchmarks/job_overhead.py --json FILE",
    ),
    "job-overhead-run1": (
        "A job's batch against plain Spark (the run before, medians only)",
        f"{PY} benchmarks/job_overhead.py --json FILE",
    ),
    "consistent-balance": (
        "Slot-count balance of the consistent methods",
        f"{PY} benchmarks/consistent_balance.py",
    ),
    "state-scaling": (
        "State store: per-batch cost against the state's size",
        f"{PY} benchmarks/state_scaling.py --json FILE",
    ),
    "spark-route": ("Routing on Spark", f"{PY} benchmarks/spark_route.py"),
    "spark-observe": ("Observing a batch on Spark", f"{PY} benchmarks/spark_observe.py --json FILE"),
    "spark-split": ("Split functions on Spark", f"{PY} benchmarks/spark_split.py"),
    "spark-state-skew": (
        "Spark-managed state: the skew-aware partition count against a plain rule's",
        f"{PY} benchmarks/spark_state.py --sections skew --json FILE",
    ),
    "spark-state": (
        "Spark-managed state: killed repartitions, repartition cost per GB, a steady load",
        f"{PY} benchmarks/spark_state.py --sections crash,repartition,steady --json FILE",
    ),
    "spark-migrate": (
        "Migrations of the format-2 store (history)",
        "benchmarks/spark_migrate.py, removed with the format-2 store",
    ),
    "state-churn": (
        "Churn of the format-2 store (history)",
        "benchmarks/state_churn.py, removed with the format-2 store",
    ),
    "tick": ("One controller tick", f"{PY} benchmarks/tick.py"),
    "api-load": (
        "The HTTP API under 200 job clients (commit 66a839e), run just before api-load-494047a",
        f"{PY} benchmarks/api_load.py --json FILE",
    ),
    "api-load-494047a": (
        "The HTTP API under 200 job clients, the code before uvloop, httptools and the tick's cuts "
        "(commit 494047a), run just after api-load",
        f"{PY} benchmarks/api_load.py --json FILE",
    ),
    "api-load-run3": (
        "The HTTP API under 200 job clients (commit eb865ff, on a machine busy with Spark runs)",
        f"{PY} benchmarks/api_load.py --json FILE",
    ),
    "api-load-run1": (
        "The HTTP API under 200 job clients (first run: the API inside the daemon's process)",
        f"{PY} benchmarks/api_load.py --json FILE",
    ),
    "api-load-100": (
        "The HTTP API under 50 job clients (100 calls/s)",
        f"{PY} benchmarks/api_load.py --regions 50 --duration 15 --compare-seconds 5 --json FILE",
    ),
    "api-load-run2": (
        "The HTTP API under 200 job clients (the run before uvloop, httptools and the tick's cuts)",
        f"{PY} benchmarks/api_load.py --json FILE",
    ),
    "api-load-100-before": (
        "The HTTP API under 50 job clients, before uvloop, httptools and the tick's cuts (commit 494047a, "
        "asyncio's loop and h11), run just before api-load-100-after",
        f"{PY} benchmarks/api_load.py --regions 50 --duration 15 --json FILE",
    ),
    "api-load-100-after": (
        "The HTTP API under 50 job clients, after them (commit eb865ff), run just after api-load-100-before",
        f"{PY} benchmarks/api_load.py --regions 50 --duration 15 --json FILE",
    ),
    "policy-traces": (
        "The channel-count policy on daily, weekly and bursty traces",
        f"{PY} benchmarks/policy_traces.py --json FILE",
    ),
    "policy-sweep": (
        "The channel-count policy's defaults swept on a fast model of the traces",
        f"{PY} benchmarks/policy_sweep.py",
    ),
    "plan-retention": (
        "The database's size per plan, before and after retention",
        f"{PY} benchmarks/plan_retention.py",
    ),
    "daemon": (
        "The controller daemon under load",
        f"{PY} benchmarks/daemon.py --backend sqlite --regions 200; "
        f"{PY} benchmarks/daemon.py --backend postgresql --regions 1000 --feed-every 10",
    ),
    "metrics-endpoint": (
        "The metrics endpoint under load",
        f"{PY} benchmarks/metrics_endpoint.py --regions 200 --duration 120",
    ),
    "ingest": ("Ingesting large snapshot documents", f"{PY} benchmarks/ingest.py [--backend postgresql]"),
    "cli-speed": ("Command-line responsiveness", f"{PY} benchmarks/cli_speed.py"),
}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated pages to the site."""
    for path, content in (
        ("reference/cli.md", cli_reference()),
        ("benchmarks.md", benchmarks_page()),
        ("changelog.md", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")),
    ):
        files.append(File.generated(config, path, content=content))
    return files


def cli_reference() -> str:
    """The ``repart`` command line, command by command, from the typer app."""
    from repart.cli.app import app

    root = typer.main.get_command(app)
    lines = [
        "# Command line",
        "",
        "Generated from the `repart` application itself when the documentation is built. Every command",
        "that reads or writes the controller's database takes `--db URL` (or `$REPART_DB`, or the",
        "[configuration file](configuration.md)); every command takes `--json`. Exit codes are on the",
        "[exit codes](exit-codes.md) page.",
        "",
    ]
    lines += _command(root, "repart", root.context_class(root, info_name="repart"), depth=2)
    return "\n".join(lines) + "\n"


# typer carries its own copy of click: its commands, parameters and contexts are read by their attributes.
def _command(command: Any, path: str, context: Any, depth: int) -> list[str]:
    lines = [f"{'#' * depth} `{path}`", ""]
    if command.help:
        lines += [_plain(command.help), ""]
    usage = " ".join(command.collect_usage_pieces(context))
    lines += ["```", f"{path} {usage}".rstrip(), "```", ""]
    options = [parameter for parameter in command.params if parameter.name != "help"]
    if options:
        lines += ["| argument or option | type | default | meaning |", "|---|---|---|---|"]
        lines += [_row(parameter) for parameter in options]
        lines.append("")
    if hasattr(command, "list_commands"):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is None or sub.hidden:
                continue
            sub_context = sub.context_class(sub, info_name=name, parent=context)
            lines += _command(sub, f"{path} {name}", sub_context, depth + 1 if depth < 4 else depth)
    return lines


def _row(parameter: Any) -> str:
    option = parameter.param_type_name == "option"
    if option:
        names = ", ".join(f"`{name}`" for name in [*parameter.opts, *parameter.secondary_opts])
    else:
        names = f"`{(parameter.human_readable_name or '').upper()}`"
    meaning = getattr(parameter, "help", None) or ""
    kind = "flag" if option and parameter.is_flag else _type(parameter)
    default = parameter.default
    show = (
        ""
        if default is None
        or callable(default)
        or (option and parameter.show_default is False)
        or (option and parameter.is_flag and default is False)
        or default == ()
        else f"`{default}`"
    )
    if parameter.required:
        show = "required"
    return f"| {names} | {kind} | {show} | {_cell(meaning)} |"


def _type(parameter: Any) -> str:
    choices = getattr(parameter.type, "choices", None)
    if choices:
        return " \\| ".join(f"`{choice}`" for choice in choices)
    return str(parameter.type.name).lower()


def _plain(text: str) -> str:
    return text.replace("\b\n", "").strip()


def _cell(text: str) -> str:
    return " ".join(_plain(text).split()).replace("|", "\\|")


def benchmarks_page() -> str:
    """Every saved output under ``docs/results/`` with its command; a plot is shown, text is quoted."""
    stems = sorted({path.name.split(".", 1)[0] for path in RESULTS_DIR.iterdir() if path.is_file()})
    unknown = [stem for stem in stems if stem not in RESULTS]
    if unknown:
        raise PluginError(
            f"docs/results/ holds outputs without a command in docs/hooks/generate.py: {unknown}"
        )
    lines = [
        "# Benchmarks",
        "",
        "Every saved measurement of the project, generated from `docs/results/` when the documentation is",
        "built: each with the command that reproduces it (run from a checkout after `make test` or",
        "`make demo` created `.venv`), then the output itself. The tables that summarize them, with what",
        "each figure means, are on the [measured results](measurements.md) page. All were measured on a",
        "shared machine with 2 cores; each output states its load average where the script records it.",
        "",
    ]
    for stem in sorted(stems, key=list(RESULTS).index):
        title, command = RESULTS[stem]
        lines += [f"## {title}", "", "```", command, "```", ""]
        for path in sorted(RESULTS_DIR.glob(f"{stem}.*")):
            lines += _result(path)
    return "\n".join(lines) + "\n"


def _result(path: Path) -> list[str]:
    link = f"results/{path.name}"
    if path.suffix == ".png":
        return [f"![{path.stem}]({link})", ""]
    if path.suffix == ".json":
        return [f"Records as JSON: [{path.name}]({link}).", ""]
    text = path.read_text(encoding="utf-8").strip("\n")
    if path.suffix == ".md":
        return [f"From [{path.name}]({link}):", "", text, ""]
    return [f"From [{path.name}]({link}):", "", "```text", text, "```", ""]


def on_config(config: MkDocsConfig, **_: Any) -> MkDocsConfig:
    """The generated pages import repart from this checkout's sources."""
    import sys

    source = str(ROOT / "src")
    if source not in sys.path:
        sys.path.insert(0, source)
    return config
