"""``repart demo``: the VWAP pipeline on Spark under a live controller (the main job, ``make demo``)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from repart.cli.errors import reports_bad_input
from repart.cli.simulate import STDOUT, check_output_path

if TYPE_CHECKING:
    from repart.demo.report import DemoRow

_HEADER = (
    f"{'mode':<8} {'batch':>5} {'N':>3} {'version':>7} {'b':>7} {'b_hash':>7} {'load':>6} {'l_hash':>6} "
    f"{'b_lb':>7} {'memory':>7} {'migrated':>9} {'ideal':>7} {'seconds':>8}"
)
# What a newcomer needs to read the table and the plot; the metrics are explained in the documentation
# (docs/concepts/metrics.md).
_INTRODUCTION = """\
The same stream of synthetic trades, growing 15 % per batch with drifting hot tickers, feeds two
regions: 'preserve' keeps each ticker on one channel (Gedik's partitioning functions), 'split' may
spread the hottest tickers over several channels and sums their partial state. A controller runs
beside them and rescales or rebalances each region between batches.

Each row is one batch of one mode:
  N, version  channels the batch ran on, and the version of the partitioning function it used
  b, b_hash   relative imbalance (max/min channel load over the tolerance 1.2; at most 1 is within
              tolerance) of repart's function and of plain hashing on the same batch
  load, l_hash  max/mean load: the busiest channel's rows over the average channel's (1.00 = even)
  b_lb        the best b any function keeping each ticker on one channel could reach
  memory      state rows per ticker (above 1 when split tickers keep partial rows)
  migrated    share of the state the batch's plan moved; ideal: the least a change of N must move
  seconds     the batch's time (apply, partition, update, observe, report)
The metrics are explained in docs/concepts/metrics.md.
"""


def _number(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _line(row: DemoRow) -> str:
    return (
        f"{row.mode:<8} {row.batch:>5} {row.N:>3} {row.version:>7} {_number(row.b):>7} "
        f"{_number(row.b_hash):>7} {row.load:>6.2f} {row.load_hash:>6.2f} {_number(row.b_lb):>7} "
        f"{row.memory:>7.4f} "
        f"{row.migrated_fraction:>9.4f} {row.ideal_fraction:>7.4f} {row.seconds:>8.2f}"
    )


@reports_bad_input
def demo(
    batches: Annotated[
        int, typer.Option(help="Number of micro-batches to run (1-30; each has 15 % more trades).")
    ] = 8,
    json_path: Annotated[
        Path | None,
        typer.Option(
            "--json", help="Write the batches and the totals check as JSON to this file ('-': stdout)."
        ),
    ] = None,
    plot: Annotated[Path, typer.Option(help="Write a PNG of N, b vs b_hash and migrated fractions.")] = Path(
        "demo-vwap.png"
    ),
    workdir: Annotated[
        Path, typer.Option(help="Directory for the demo's SQLite database and state store (emptied first).")
    ] = Path(".repart/demo"),
    master: Annotated[str, typer.Option(help="Spark master URL.")] = "local[2]",
    seed: Annotated[int, typer.Option(help="Seed of the synthetic trades.")] = 7,
    split: Annotated[
        str,
        typer.Option(
            "--split", help="Scheme of the split-mode run: pkg, dchoices, wchoices, rr, fish or dkg."
        ),
    ] = "dchoices",
    spark_state: Annotated[
        bool,
        typer.Option(
            "--spark-state",
            help="Run the Spark-managed state demo instead: a Structured Streaming aggregation whose "
            "state partition count the controller changes (no plot).",
        ),
    ] = False,
) -> None:
    """Run the VWAP example for a few batches in two modes, key-preserving and split: Spark local[2],
    SQLite, the controller in-process.

    Prints a row per batch and mode (N, version, b of repart vs plain hashing vs the key-preserving
    bound b_lb, memory, migrated vs ideal fraction, seconds), writes a PNG plot of both modes and
    checks, after every batch, that each mode's merged state equals a plain groupBy over all input so
    far. Exit code 1 if it does not.
    """
    if spark_state:
        _spark_state_demo(batches, workdir, master, seed, json_path)
        return
    from repart.demo.run import DemoConfig, run_demo
    from repart.protocol.files import durable_output
    from repart.sim.plot import plot_demo
    from repart.sim.trades import TradeStream

    # The in-process controller ticks every half second; a tick that overlaps the next is skipped by
    # APScheduler with a warning that would interleave with the table.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    config = DemoConfig(
        batches=batches, workdir=workdir, master=master, split=split, stream=TradeStream(seed=seed)
    )
    check_output_path(json_path, "--json", allow_stdout=True)
    check_output_path(plot, "--plot", allow_stdout=False)
    console = Console(stderr=json_path == STDOUT, highlight=False, soft_wrap=True)
    console.print(
        f"[bold]repart demo[/]: VWAP over {batches} batches of synthetic trades, Spark {master}, "
        f"modes preserve and split ({split})"
    )
    console.print(_INTRODUCTION, markup=False)
    console.print("Starting Spark and the controller…")
    printed: list[DemoRow] = []

    def print_row(row: DemoRow) -> None:
        if not printed:  # the header after Spark's start-up, whatever the JVM printed during it
            console.print(_HEADER)
        printed.append(row)
        console.print(_line(row))

    result = run_demo(config, on_batch=print_row)
    with durable_output(plot) as temporary:
        plot_demo(
            [row.to_json() for row in result.rows],
            temporary,
            f"repart demo: VWAP pipeline, LCL, α = 1.2; split mode: {split}",
        )
    console.print(
        f"wrote plot to {escape(str(plot))}: per batch, both modes side by side, N (top), b of repart and "
        "of hashing against b_lb (middle), migrated against ideal share of the state (bottom)"
    )
    _write_json(result.to_json(), json_path, console)
    console.print(
        "The check: each mode's state must hold exactly the input's totals (trades, volume, notional), "
        "and after every batch each ticker's merged state must equal a plain Spark groupBy of all input "
        "so far."
    )
    for mode, totals in result.totals.items():
        verdict = "[green]equal[/]" if totals.input == totals.state else "[bold red]DIFFERENT[/]"
        console.print(f"{mode}: totals: input {totals.input}, state {totals.state}: {verdict}")
        if totals.mismatches:
            for mismatch in totals.mismatches:
                console.print(f"{mode}: merged state ≠ groupBy of the input after {escape(mismatch)}")
        else:
            console.print(f"{mode}: merged state = groupBy of the input after every batch")
    if not result.equal:
        raise typer.Exit(1)


def _write_json(document: dict[str, object], json_path: Path | None, console: Console) -> None:
    """Write a demo's JSON document to ``json_path`` (``-``: stdout; None: nowhere)."""
    from repart.protocol.files import durable_output

    text = json.dumps(document, indent=1)
    if json_path == STDOUT:
        sys.stdout.write(text + "\n")
    elif json_path is not None:
        with durable_output(json_path) as temporary:
            temporary.write_text(text)
        console.print(f"wrote {escape(str(json_path))}")


def _spark_state_demo(batches: int, workdir: Path, master: str, seed: int, json_path: Path | None) -> None:
    """``repart demo --spark-state`` (``repart.demo.spark_state``): a row per batch, the plans applied
    and the check; exit code 1 when the state differs from the input's groupBy."""
    from repart.demo.spark_state import StateDemoRow, run_spark_state_demo

    check_output_path(json_path, "--json", allow_stdout=True)
    console = Console(stderr=json_path == STDOUT, highlight=False, soft_wrap=True)
    console.print(
        f"[bold]repart demo --spark-state[/]: a Structured Streaming count of clicks per user over "
        f"{batches} batches, each 40 % larger, Spark {master}; the controller chooses the query's state "
        "partition count and repartitions its checkpoint between batches"
    )
    console.print("Starting Spark and the query…")
    header = f"{'batch':>5} {'rows':>8} {'n after':>10} {'seconds':>8}  state = groupBy of the input"

    printed: list[StateDemoRow] = []

    def print_row(row: StateDemoRow) -> None:
        if not printed:  # the header after Spark's start-up, whatever the JVM printed during it
            console.print(header)
        printed.append(row)
        verdict = "[green]yes[/]" if row.exact else "[bold red]NO[/]"
        console.print(f"{row.batch:>5} {row.rows:>8} {row.partitions:>10} {row.seconds:>8.2f}  {verdict}")

    result = run_spark_state_demo(batches, workdir, master, seed, print_row)
    for plan in result.applied:
        console.print(
            f"plan {plan['plan']}: repartitioned {plan['from']} -> {plan['to']} state partitions, "
            f"{plan['state_rows']} rows, {plan['state_bytes']} bytes, in {plan['seconds']:.2f} s"
        )
    _write_json(result.to_json(), json_path, console)
    if not result.exact:
        console.print("[bold red]the state differed from a groupBy of the input[/]")
        raise typer.Exit(1)
    console.print("the state equalled a plain groupBy of the input after every batch")
