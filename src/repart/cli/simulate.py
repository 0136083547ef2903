"""``repart simulate``: Gedik §5's adaptation experiment, with a results table, JSON and a plot."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from repart.cli.captions import B_LB, B_PER_RESOURCE, M, metrics_caption
from repart.cli.errors import reports_bad_input
from repart.errors import InvalidInput

if TYPE_CHECKING:
    from repart.sim.experiment import ExperimentConfig, Record

STDOUT = Path("-")


def split_list(text: str) -> tuple[str, ...]:
    """The non-empty, stripped items of a comma-separated option."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


@reports_bad_input
def simulate(
    channels: Annotated[int, typer.Option(help="Grow N from 1 to this many channels.")] = 32,
    algorithms: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated: scan, redist, readj, uniform, consistent, auto (default: all but auto).",
            show_default=False,
        ),
    ] = None,
    resources: Annotated[
        str, typer.Option(help="Resource code (state, computation, communication): CCL, LCL, LLL, LQL, …")
    ] = "LCL",
    alpha: Annotated[float, typer.Option(help="Imbalance tolerance α > 1.")] = 1.2,
    sigma: Annotated[float, typer.Option(help="Frequency threshold scaler σ in (0, 1].")] = 0.1,
    utility: Annotated[str, typer.Option(help="Utility: A, APM, APLM, ATM, ATLM.")] = "APM",
    zipf: Annotated[float, typer.Option(help="Zipf skew z ≥ 0.")] = 1.0,
    domain: Annotated[int, typer.Option(help="Number of distinct keys |D|.")] = 1_000_000,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 1,
    runs: Annotated[int, typer.Option(help="Runs to average (the paper averages 5).")] = 1,
    tail_aware: Annotated[
        bool,
        typer.Option(
            "--tail-aware", help="Also run tail-aware scan/redist/readj (per-slot loads + slot overrides)."
        ),
    ] = False,
    stream_factor: Annotated[
        float, typer.Option(help="Tuples per adaptation step, as a multiple of |D|.")
    ] = 1.0,
    split: Annotated[
        list[str] | None,
        typer.Option(
            "--split",
            help="Also run split functions of this scheme (pkg, dchoices, wchoices, rr, fish, dkg); "
            "repeat the option or give a comma list. Records: split-<scheme>, with memory and split_keys.",
            show_default=False,
        ),
    ] = None,
    json_path: Annotated[
        Path | None,
        typer.Option("--json", help="Write the records as a JSON list to this file ('-': stdout)."),
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of b and m against N per algorithm.")] = None,
    every: Annotated[
        int, typer.Option(help="Show every k-th N in the table (0: automatic; the JSON has all).")
    ] = 0,
) -> None:
    """Reproduce Gedik §5: grow N one channel at a time and report b, b_k, b_lb, m, sizes and build time
    (and, with --split, memory and split keys of split functions beside them)."""
    from repart.sim.experiment import DEFAULT_ALGORITHMS, ExperimentConfig, run_experiment, steps
    from repart.sim.plot import plot_records

    config = ExperimentConfig(
        channels=channels,
        algorithms=DEFAULT_ALGORITHMS if algorithms is None else split_list(algorithms),
        resources=resources,
        alpha=alpha,
        sigma=sigma,
        utility=utility,
        zipf=zipf,
        domain=domain,
        seed=seed,
        runs=runs,
        tail_aware=tail_aware,
        stream_factor=stream_factor,
        split=tuple(item for option in split or () for item in split_list(option)),
    )
    check_output_path(json_path, "--json", allow_stdout=True)
    check_output_path(plot, "--plot", allow_stdout=False)
    # With --json -, stdout carries only the JSON; people-facing output goes to stderr.
    console = Console(stderr=json_path == STDOUT, width=None if sys.stdout.isatty() else 160)
    with Progress(
        TextColumn("[bold]simulate"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("steps", total=steps(config))
        records = run_experiment(config, progress=lambda k: bar.advance(task, k))
    write_results(
        records,
        console,
        json_path,
        plot,
        table=lambda: results_table(records, config, every),
        draw=lambda path: plot_records(records, path, title=_title(config)),
    )


def write_results(
    records: Sequence[Mapping[str, Any]],
    console: Console,
    json_path: Path | None,
    plot: Path | None,
    *,
    table: Callable[[], Table],
    draw: Callable[[Path], None],
) -> None:
    """The table (or, with ``--json -``, the JSON alone on stdout), then the JSON and plot files.

    Files are written atomically; the paths were checked by :func:`check_output_path` beforehand.
    """
    from repart.protocol.files import durable_output

    if json_path == STDOUT:
        sys.stdout.write(records_json(records) + "\n")
    else:
        console.print(table())
    if json_path is not None and json_path != STDOUT:
        with durable_output(json_path) as temporary:
            temporary.write_text(records_json(records))
        console.print(f"wrote {len(records)} records to {escape(str(json_path))}")
    if plot is not None:
        with durable_output(plot) as temporary:
            draw(temporary)
        console.print(f"wrote plot to {escape(str(plot))}")


def check_output_path(path: Path | None, option: str, allow_stdout: bool) -> None:
    """An output file must be a file path in an existing directory ('-' means stdout where allowed)."""
    if path is None or (allow_stdout and path == STDOUT):
        return
    if path == STDOUT:
        raise InvalidInput(option, "needs a file path; '-' (stdout) is not accepted for it")
    if path.is_dir():
        raise InvalidInput(option, f"must name a file, but {path} is a directory")
    if not path.parent.is_dir():
        raise InvalidInput(option, f"must be in an existing directory; {path.parent} does not exist")


def records_json(records: Sequence[Mapping[str, Any]]) -> str:
    """Strict JSON: an infinite ratio (a channel with no load, so r = max/min = ∞) becomes null."""
    clean = [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        for record in records
    ]
    return json.dumps(clean, indent=1, allow_nan=False)


def _title(config: ExperimentConfig) -> str:
    return (
        f"{config.resources}, z={config.zipf:g}, |D|={config.domain:,}, α={config.alpha:g}, "
        f"σ={config.sigma:g}, U^{config.utility}, runs={config.runs}"
    )


def _shown(n: int, last: int, every: int) -> bool:
    if every <= 0:
        every = 1 if last <= 12 else 4
    return n in (1, 2, last) or n % every == 0


def _split_cells(record: Record) -> tuple[str, str]:
    """Memory and split keys of a split record; a key-preserving one keeps every key on one channel."""
    if "memory" not in record:
        return ("1", "0")
    return (f"{float(record['memory']):.6f}", f"{float(record['split_keys']):g}")


def results_table(records: list[Record], config: ExperimentConfig, every: int) -> Table:
    table = Table(title=_title(config), caption=metrics_caption(B_PER_RESOURCE, B_LB, M))
    split = bool(config.split)
    columns = ["algorithm", "N", "b", "max/mean", "b_s", "b_c", "b_n", "b_lb", "m"]
    columns += ["memory", "split keys"] if split else []
    for column in (*columns, "explicit", "overrides", "counter", "build s"):
        table.add_column(column, justify="left" if column == "algorithm" else "right")
    for record in sorted(records, key=lambda r: (bool(r["tail_aware"]), str(r["algorithm"]), int(r["N"]))):
        if not _shown(int(record["N"]), config.channels, every):
            continue
        name = f"{record['algorithm']}{'+tail' if record['tail_aware'] else ''}"
        table.add_row(
            name,
            str(record["N"]),
            *(f"{float(record[k]):.3f}" for k in ("b", "load", "b_s", "b_c", "b_n", "b_lb", "m")),
            *(_split_cells(record) if split else ()),
            f"{float(record['explicit_size']):g}",
            f"{float(record['slot_overrides']):g}",
            f"{float(record['counter_size']):g}",
            f"{float(record['build_seconds']):.4f}",
        )
    return table
