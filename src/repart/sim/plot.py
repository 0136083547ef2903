"""Plots: simulation records (b and m against N per algorithm, cf. Gedik Fig. 6), the demo's batches and
the stream-grouping experiment (imbalance and memory against n per scheme), and a policy replay (N and
utilization over time).

matplotlib is imported on first use, not with this module: the CLI imports it and must start fast.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from repart.errors import InvalidInput
from repart.sim.experiment import Record, select


class PlottedBatch(Protocol):
    """What ``plot_replay`` draws of a replayed batch (``repart.controller.replay.ReplayedBatch``)."""

    @property
    def seq(self) -> int: ...
    @property
    def n_channels(self) -> int: ...
    @property
    def oracle_channels(self) -> int: ...
    @property
    def utilization(self) -> float: ...


def _pyplot() -> ModuleType:
    """matplotlib.pyplot on the non-interactive Agg backend (imported here, on first use)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_records(records: Sequence[Record], path: Path, title: str) -> None:
    """Two panels, relative imbalance b (with the lower bound b_lb) and relative migration m, vs N."""
    plt = _pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    variants = sorted({(str(r["algorithm"]), bool(r["tail_aware"])) for r in records})
    for algorithm, tail_aware in variants:
        series = select(records, algorithm=algorithm, tail_aware=tail_aware)
        label = f"{algorithm}{' + tail' if tail_aware else ''}"
        style = "--" if tail_aware else "-"
        n = [int(r["N"]) for r in series]
        left.plot(n, [float(r["b"]) for r in series], style, marker=".", label=label)
        right.plot(n[1:], [float(r["m"]) for r in series[1:]], style, marker=".", label=label)
    bound = select(records, algorithm=variants[0][0], tail_aware=variants[0][1])
    left.plot([int(r["N"]) for r in bound], [float(r["b_lb"]) for r in bound], ":k", label="lower bound b_lb")
    left.set(xlabel="channels N", ylabel="relative imbalance b (Eq. 11)")
    right.set(xlabel="channels N", ylabel="relative migration m (Eq. 12)", yscale="log")
    for axis in (left, right):
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110, format="png")
    plt.close(figure)


def plot_demo(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    """The demo's batches, one column per mode (in the rows' order) side by side, rows of panels sharing
    their y axis: channels N (labelled with the version routed with), b of repart vs plain hashing
    and the key-preserving bound b_lb, and the migrated vs the ideal fraction of state rows."""
    if not rows:
        raise InvalidInput("rows", "must not be empty (there is nothing to plot), got none")
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    modes = list(dict.fromkeys(str(row["mode"]) for row in rows))
    figure, axes = plt.subplots(
        3, len(modes), figsize=(1.0 + 6.0 * len(modes), 10.5), squeeze=False, sharex=True, sharey="row"
    )
    for column, mode in enumerate(modes):
        series = [row for row in rows if row["mode"] == mode]
        top, middle, bottom = (axes[r][column] for r in range(3))
        memory = max(float(row["memory"]) for row in series)
        top.set_title(f"{mode} (memory ≤ {memory:.4f} state rows per key)")
        _plot_channels(top, series)
        _plot_imbalance(middle, series)
        _plot_migration(bottom, series)
        top.yaxis.set_major_locator(MaxNLocator(integer=True))
        for axis in (top, middle, bottom):
            axis.grid(True, alpha=0.3)
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        for axis in (middle, bottom):
            axis.legend(fontsize=8)
        if column:  # the row's panels share the first column's y axis and its label
            for axis in (top, middle, bottom):
                axis.set_ylabel("")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110, format="png")
    plt.close(figure)


def _plot_channels(axis: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    """N per batch as steps, each point labelled with the version the batch was routed with."""
    batches = [int(row["batch"]) for row in rows]
    axis.step(batches, [int(row["N"]) for row in rows], where="mid", marker="o")
    for row in rows:
        axis.annotate(
            f"v{row['version']}",
            (int(row["batch"]), int(row["N"])),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=8,
        )
    axis.set(ylabel="channels N (label: version routed with)")


def _plot_imbalance(axis: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    """b of repart and of plain hashing per batch, and b_lb dotted (null, an infinite b, is a gap)."""
    batches = [int(row["batch"]) for row in rows]
    nan = float("nan")
    for key, label, style in (
        ("b", "repart", "-"),
        ("b_hash", "plain hashing (slot mod N)", "-"),
        ("b_lb", "key-preserving bound b_lb", ":k"),
    ):
        values = [nan if row[key] is None else float(row[key]) for row in rows]
        axis.plot(batches, values, style, marker="o", label=label)
    axis.set(ylabel="relative imbalance b (Eq. 11)")


def _plot_migration(axis: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    """The migrated and the ideal fraction of state rows per batch, as bars side by side."""
    batches = [int(row["batch"]) for row in rows]
    width = 0.4
    axis.bar(
        [b - width / 2 for b in batches],
        [float(r["migrated_fraction"]) for r in rows],
        width,
        label="migrated",
    )
    axis.bar(
        [b + width / 2 for b in batches],
        [float(r["ideal_fraction"]) for r in rows],
        width,
        label="ideal |ΔN|/N",
    )
    axis.set(xlabel="batch", ylabel="fraction of state rows")


def plot_groupings(records: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    """Stream groupings: imbalance I(m)/m (log y, top row) and memory (bottom row) against n per scheme.

    One column per z (a single one for workloads without z). An imbalance of exactly 0 cannot sit on a
    log axis: it is drawn on the dotted floor line, 1/(2·n·m) for the largest n·m (a positive imbalance
    is at least 1/(n·m)).
    """
    if not records:
        raise InvalidInput("records", "must not be empty (there is nothing to plot), got none")
    plt = _pyplot()
    from matplotlib.ticker import LogFormatter, NullLocator

    z_values = list(dict.fromkeys(record["z"] for record in records))
    schemes = list(dict.fromkeys(str(record["scheme"]) for record in records))
    largest = max((int(r["n"]) * int(r["messages"]) for r in records), default=1)
    floor = 0.5 / largest
    n_values = sorted({int(record["n"]) for record in records})
    figure, axes = plt.subplots(
        2, len(z_values), figsize=(1.5 + 5.0 * len(z_values), 8.0), squeeze=False, sharex=True
    )
    for column, z in enumerate(z_values):
        top, bottom = axes[0][column], axes[1][column]
        for index, scheme in enumerate(schemes):
            series = sorted(
                (r for r in records if r["z"] == z and r["scheme"] == scheme), key=lambda r: int(r["n"])
            )
            if not series:
                continue
            n = [int(r["n"]) for r in series]
            imbalance = [_finite(r["imbalance"]) for r in series]
            shown = [floor if value <= 0 else value for value in imbalance]
            style = {"marker": "os^vD<>ph*xP"[index % 12], "markersize": 4, "label": scheme}
            style["linestyle"] = "-" if index < 10 else "--"  # the default color cycle has 10 colours
            top.plot(n, shown, **style)
            bottom.plot(n, [_finite(r["memory"]) for r in series], **style)
        top.axhline(floor, color="k", linestyle=":", linewidth=0.8, label="0 (exact balance)")
        heading = "" if z is None else f"z = {float(z):g}"
        top.set(ylabel="imbalance I(m)/m", yscale="log", title=heading)
        bottom.set(xlabel="workers n", ylabel="memory (workers per key)", yscale="log")
        bottom.yaxis.set_major_formatter(LogFormatter())
        bottom.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.4)))
        for axis in (top, bottom):
            axis.set_xscale("log")
            axis.xaxis.set_minor_locator(NullLocator())
            axis.set_xticks(n_values, [str(n) for n in n_values])
            axis.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="center right", fontsize=8)
    figure.suptitle(title)
    figure.tight_layout(rect=(0.0, 0.0, 0.86, 1.0))
    figure.savefig(path, dpi=110, format="png")
    plt.close(figure)


def _finite(value: object) -> float:
    """A plotted value: None (a JSON null) and ±inf become NaN, which matplotlib leaves out."""
    if value is None:
        return math.nan
    number = float(value)  # type: ignore[arg-type]
    return number if math.isfinite(number) else math.nan


def plot_replay(batches: Sequence[PlottedBatch], path: Path, title: str) -> None:
    """A replay's batches: the channel count N run with (and the oracle's), and the busiest channel's
    utilization of the budget, one panel each."""
    plt = _pyplot()
    seqs = [batch.seq for batch in batches]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(9.0, 6.5), sharex=True)
    top.step(seqs, [batch.n_channels for batch in batches], where="post", label="N (replayed)")
    top.step(seqs, [batch.oracle_channels for batch in batches], where="post", alpha=0.5, label="oracle N")
    top.set_ylabel("channels")
    top.legend(fontsize=8)
    bottom.plot(seqs, [batch.utilization for batch in batches], marker=".", label="utilization")
    bottom.axhline(1.0, color="red", linewidth=0.8, label="budget")
    bottom.set_ylabel("busiest channel / budget")
    bottom.set_xlabel("window seq")
    bottom.legend(fontsize=8)
    for axis in (top, bottom):
        axis.grid(True, alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110, format="png")
    plt.close(figure)
