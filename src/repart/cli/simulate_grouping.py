"""``repart simulate-grouping``: the PKG-family stream groupings on one workload, as a table, JSON and a plot.

The runner (numba kernels, the word lists) and matplotlib are imported when the command runs, so that
``repart`` itself starts fast.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from repart.cli.errors import reports_bad_input
from repart.cli.simulate import STDOUT, check_output_path, split_list, write_results
from repart.errors import InvalidInput

if TYPE_CHECKING:
    from repart.sim.grouping import GroupingConfig

# Kept literal so that importing the CLI does not load numba; tests check them against the library.
ALL_SCHEMES = "kg,sg,pkg,potc,on-greedy,off-greedy,dchoices,wchoices,rr,fish,dkg"
ALL_WORKLOADS = "zipf, ln1, ln2, drift, dkg, words"


def _numbers(text: str, name: str, kind: type[int] | type[float]) -> tuple[Any, ...]:
    """The comma-separated numbers of option ``name`` (InvalidInput naming it otherwise)."""
    parts = split_list(text)
    if not parts:
        raise InvalidInput(name, f"must be a non-empty comma-separated list, got {text!r}")
    try:
        return tuple(kind(part) for part in parts)
    except ValueError:
        noun = "integers" if kind is int else "numbers"
        raise InvalidInput(name, f"must be comma-separated {noun}, got {text!r}") from None


@reports_bad_input
def simulate_grouping(
    schemes: Annotated[
        str,
        typer.Option(
            help=f"Comma-separated groupings from {ALL_SCHEMES.replace(',', ', ')} (default: all).",
            show_default=False,
        ),
    ] = ALL_SCHEMES,
    workers: Annotated[str, typer.Option(help="Comma-separated worker counts n.")] = "5,10,50,100",
    sources: Annotated[int, typer.Option(help="Sources (upstream instances) S.")] = 5,
    workload: Annotated[str, typer.Option(help=f"Workload: {ALL_WORKLOADS}.")] = "zipf",
    zipf: Annotated[
        str, typer.Option(help="Comma-separated Zipf skews z >= 0 (zipf and drift workloads).")
    ] = "1.0",
    keys: Annotated[
        int | None,
        typer.Option(help="Distinct keys K (zipf, drift, dkg, words); default 100000, 204 for dkg."),
    ] = None,
    messages: Annotated[int, typer.Option(help="Tuples m per stream.")] = 1_000_000,
    skew: Annotated[float, typer.Option(help="DKG workload: the top key's share, in (0, 1).")] = 0.5,
    seed: Annotated[int, typer.Option(help="Random seed (run r uses seed + r).")] = 1,
    runs: Annotated[int, typer.Option(help="Runs to average.")] = 1,
    rates: Annotated[
        str | None,
        typer.Option(help="Comma-separated worker speeds μ > 0, repeated to n workers (default: all 1)."),
    ] = None,
    utilization: Annotated[float, typer.Option(help="Arrival rate λ as a fraction of Σμ (> 0).")] = 0.9,
    source_mode: Annotated[
        str, typer.Option(help="How tuples enter the sources: round_robin or skewed (by key).")
    ] = "round_robin",
    exact: Annotated[
        bool, typer.Option("--exact", help="Zipf with exact counts, shuffled (the D-Choices generator).")
    ] = False,
    json_path: Annotated[
        Path | None,
        typer.Option("--json", help="Write the records as a JSON list to this file ('-': stdout)."),
    ] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Write a PNG of imbalance and memory against n per scheme.")
    ] = None,
) -> None:
    """Route one stream with every grouping and report imbalance, memory, load spread, latency and time."""
    from repart.sim.grouping import GroupingConfig, run_grouping_experiment

    config = GroupingConfig(
        schemes=split_list(schemes),
        workers=_numbers(workers, "workers", int),
        sources=sources,
        workload=workload,
        zipf=_numbers(zipf, "zipf", float),
        keys=keys,
        messages=messages,
        skew=skew,
        seed=seed,
        runs=runs,
        rates=None if rates is None else _numbers(rates, "rates", float),
        utilization=utilization,
        source_mode=source_mode,
        exact=exact,
    )
    check_output_path(json_path, "--json", allow_stdout=True)
    check_output_path(plot, "--plot", allow_stdout=False)
    # With --json -, stdout carries only the JSON; people-facing output goes to stderr.
    console = Console(stderr=json_path == STDOUT, width=None if sys.stdout.isatty() else 180)
    with Progress(
        TextColumn("[bold]simulate-grouping"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        records = run_grouping_experiment(config, progress=bar)

    def draw(path: Path) -> None:
        from repart.sim.plot import plot_groupings

        plot_groupings(records, path, title=title(config))

    write_results(records, console, json_path, plot, table=lambda: results_table(records, config), draw=draw)


def title(config: GroupingConfig) -> str:
    """The table's and the plot's title: the workload and the stream parameters."""
    parts = [f"{config.workload}"]
    if config.workload in ("zipf", "drift"):
        parts.append(f"z={','.join(f'{z:g}' for z in config.zipf)}")
    if config.workload != "ln1" and config.workload != "ln2":
        parts.append(f"K={config.keys:,}")
    if config.workload == "dkg":
        parts.append(f"skew={config.skew:g}")
    parts += [f"m={config.messages:,}", f"S={config.sources}", f"ρ={config.utilization:g}"]
    if config.rates is not None:
        parts.append(f"μ={','.join(f'{r:g}' for r in config.rates)}")
    if config.runs > 1:
        parts.append(f"runs={config.runs}")
    return ", ".join(parts)


def _number(value: object, spec: str) -> str:
    if value is None:
        return "-"
    number = float(value)  # type: ignore[arg-type]
    return format(number, spec) if math.isfinite(number) else str(number)


def _count(value: object) -> str:
    return str(value) if isinstance(value, int) else _number(value, ".1f")


def results_table(records: list[dict[str, Any]], config: GroupingConfig) -> Table:
    """One row per record, in run order (z, n, scheme)."""
    table = Table(title=title(config))
    columns = (
        "scheme",
        "workload",
        "z",
        "n",
        "imbalance",
        "imbalance_avg",
        "memory",
        "load_std",
        "head",
        "d",
        "latency mean",
        "latency p99",
        "saturation",
        "seconds",
    )
    for column in columns:
        table.add_column(column, justify="left" if column in ("scheme", "workload") else "right")
    for record in records:
        table.add_row(
            str(record["scheme"]),
            str(record["workload"]),
            _number(record["z"], "g"),
            str(record["n"]),
            _number(record["imbalance"], ".3e"),
            _number(record["imbalance_avg"], ".3e"),
            _number(record["memory"], ".3f"),
            _number(record["load_std"], ".3g"),
            _count(record["head_size"]),
            _count(record["d"]),
            _number(record["latency_mean"], ".4g"),
            _number(record["latency_p99"], ".4g"),
            _number(record["saturation"], ".4g"),
            _number(record["seconds"], ".3f"),
        )
    return table
