"""``repart replay``: a region's recorded windows, or a synthetic trace, through the controller with
candidate settings, to tune the region offline (``repart.controller.replay``).

The windows come from a file that ``repart snapshot export REGION`` wrote (a JSON list of snapshot
documents) or from a synthetic trace (``--trace``, ``repart.sim.traces``). The region is the one named
by ``--region`` in ``--db`` (its configuration, with ``--set`` over its settings), or else a new one
with the defaults and the options given. Nothing is written to any database but a throwaway one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from repart.cli.captions import metrics_caption
from repart.cli.database import DbOption, JsonOption, console, number, print_json, read_query
from repart.cli.errors import reports_bad_input
from repart.errors import InvalidInput

if TYPE_CHECKING:
    from repart.controller.replay import Replay
    from repart.protocol.snapshot import Snapshot
    from repart.storage import RegionConfig


@reports_bad_input
def replay(
    windows: Annotated[
        Path | None,
        typer.Argument(
            help="A JSON list of snapshot documents (`repart snapshot export REGION --out FILE` writes one).",
            show_default=False,
        ),
    ] = None,
    trace: Annotated[
        str | None,
        typer.Option(
            help="Replay a named synthetic trace instead (repart.sim.traces.named_traces): "
            "weekly-drift-zipf, weekly-drift-words (60 daily batches), bursty-words (a week of hourly "
            "batches) or weekly-drift-zipf-weekend-0.6.",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="The synthetic trace's seed.")] = 0,
    region: Annotated[
        str | None, typer.Option(help="Start from this region's configuration in --db.", show_default=False)
    ] = None,
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Candidate setting KEY=VALUE, repeatable "
            "(as `repart region update REGION --set KEY=VALUE`).",
            show_default=False,
        ),
    ] = None,
    channels: Annotated[int | None, typer.Option(help="Channels to start with.", show_default=False)] = None,
    max_channels: Annotated[int | None, typer.Option(help="Most channels.", show_default=False)] = None,
    plot: Annotated[
        Path | None,
        typer.Option(help="Draw N and the utilization over time to this PNG.", show_default=False),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay recorded windows or a synthetic trace through the controller with candidate settings:
    N over time, changes, b, moved share and time over budget."""
    from repart.controller.replay import replay as run_replay

    snapshots = _windows(windows, trace, seed)
    config = _config(snapshots, region, db, settings, channels, max_channels)
    with Progress(
        TextColumn("[bold]replay"), BarColumn(), MofNCompleteColumn(), console=console(), transient=True
    ) as bar:
        task = bar.add_task("batches", total=len(snapshots))
        result = run_replay(snapshots, config, progress=lambda done, _: bar.update(task, completed=done))
    if plot is not None:
        from repart.sim.plot import plot_replay

        plot_replay(result.batches, plot, title=f"replay of {snapshots[0].region}")
    if as_json:
        print_json(result.to_json())
        return
    _print(result)


def _windows(path: Path | None, trace: str | None, seed: int) -> list[Snapshot]:
    """The windows to replay: the file's, or the synthetic trace's."""
    from repart.protocol.snapshot import Snapshot

    if (path is None) == (trace is None):
        raise InvalidInput("WINDOWS", "or --trace must be given, exactly one of them")
    if path is None:
        return _trace(str(trace), seed)
    try:
        documents = json.loads(path.read_text(encoding="utf-8"))
    except OSError as problem:
        raise InvalidInput(
            "WINDOWS", f"must be a readable file, got {str(path)!r} ({problem.strerror})"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as problem:
        raise InvalidInput(
            "WINDOWS", f"must be a JSON list of snapshot documents, got invalid JSON ({problem})"
        ) from None
    if not isinstance(documents, list) or not documents:
        raise InvalidInput(
            "WINDOWS", f"must be a non-empty JSON list of snapshot documents, got {type(documents).__name__}"
        )
    snapshots = []
    for index, document in enumerate(documents):
        try:
            snapshots.append(Snapshot.from_document(document))
        except InvalidInput as problem:
            inside = "" if problem.field == "the snapshot" else f".{problem.field}"  # the whole document
            raise InvalidInput(f"WINDOWS[{index}]{inside}", problem.requirement) from None
    _check_one_sequence(snapshots)
    return snapshots


def _check_one_sequence(snapshots: list[Snapshot]) -> None:
    """Every window of ``WINDOWS`` is the first one's region's, each window seq once; InvalidInput naming
    ``WINDOWS[i].region`` or ``WINDOWS[i].window.seq`` otherwise."""
    region = snapshots[0].region
    first_at: dict[int, int] = {}
    for index, snapshot in enumerate(snapshots):
        if snapshot.region != region:
            raise InvalidInput(
                f"WINDOWS[{index}].region",
                f"must be {region!r}, the region of WINDOWS[0], got {snapshot.region!r}",
            )
        earlier = first_at.setdefault(snapshot.seq, index)
        if earlier != index:
            raise InvalidInput(
                f"WINDOWS[{index}].window.seq",
                f"must differ from every other window's, got {snapshot.seq}, the seq of WINDOWS[{earlier}]",
            )


def _trace(name: str, seed: int) -> list[Snapshot]:
    from repart.sim.traces import named_traces, trace_snapshots

    traces = named_traces(seed)
    if name not in traces:
        raise InvalidInput("--trace", f"must be one of {', '.join(traces)}, got {name!r}")
    return trace_snapshots(traces[name])


def _config(
    snapshots: list[Snapshot],
    region: str | None,
    db: str | None,
    pairs: list[str] | None,
    channels: int | None,
    max_channels: int | None,
) -> RegionConfig:
    """The region to replay for: ``region``'s stored configuration, or a target-utilization region of
    the snapshots' key type and slot bits; with the options and ``--set`` settings over it."""
    import dataclasses

    from repart.cli.regions import _parsed_settings
    from repart.storage import RegionConfig, region_by_name

    if region is not None:
        config = read_query(db, lambda session: RegionConfig.from_row(region_by_name(session, region)))
    else:
        first = snapshots[0]
        config = RegionConfig(
            key_type=first.key_type,
            n_channels_initial=4,
            policy="target-utilization",
            slot_bits=first.slot_bits,
        )
    changes: dict[str, Any] = {"settings": {**config.settings, **_parsed_settings(pairs)}}
    if channels is not None:
        changes["n_channels_initial"] = channels
    if max_channels is not None:
        changes["max_channels"] = max_channels
    return dataclasses.replace(config, **changes)


def _print(result: Replay) -> None:
    out = console()
    table = Table(title="replay: N over time", caption=metrics_caption())
    for column in ("seq", "N", "utilization", "action", "held by", "N next", "b", "max/mean", "moved"):
        table.add_column(column, justify="left" if column in ("action", "held by") else "right")
    for batch in result.batches:
        moved = "-" if batch.moved_key_share is None else f"{batch.moved_key_share:.3f}"
        table.add_row(
            str(batch.seq),
            str(batch.n_channels),
            f"{batch.utilization:.3f}",
            batch.action,
            batch.held_by or "-",
            str(batch.n_next),
            number(batch.b),
            number(batch.load),
            moved,
        )
    out.print(table)
    summary = Table(title="summary", show_header=False)
    summary.add_column("figure", style="bold")
    summary.add_column("value")
    for name, value in result.to_json()["summary"].items():
        summary.add_row(
            name, "-" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
        )
    out.print(summary)
    out.print(Text(f"model: {result.model}"))
