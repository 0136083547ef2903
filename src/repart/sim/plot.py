"""Plots: simulation records (b and m against N per algorithm, cf. Gedik Fig. 6) and the demo's batches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from repart.sim.experiment import Record, select


def plot_records(records: Sequence[Record], path: Path, title: str) -> None:
    """Two panels, relative imbalance b (with the lower bound b_lb) and relative migration m, vs N."""
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
    """Three panels per batch: channels N, b of repart vs plain hashing, migrated vs ideal fraction."""
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.2))
    batches = [int(row["batch"]) for row in rows]
    left.step(batches, [int(row["N"]) for row in rows], where="mid", marker="o")
    for row in rows:
        left.annotate(
            f"v{row['version']}",
            (int(row["batch"]), int(row["N"])),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=8,
        )
    left.set(xlabel="batch", ylabel="channels N (label: version routed with)")
    nan = float("nan")
    for key, label in (("b", "repart"), ("b_hash", "plain hashing (slot mod N)")):
        values = [nan if row[key] is None else float(row[key]) for row in rows]
        middle.plot(batches, values, marker="o", label=label)
    middle.set(xlabel="batch", ylabel="relative imbalance b (Eq. 11)")
    width = 0.4
    right.bar(
        [b - width / 2 for b in batches],
        [float(r["migrated_fraction"]) for r in rows],
        width,
        label="migrated",
    )
    right.bar(
        [b + width / 2 for b in batches],
        [float(r["ideal_fraction"]) for r in rows],
        width,
        label="ideal |ΔN|/N",
    )
    right.set(xlabel="batch", ylabel="fraction of state rows")
    for axis in (left, middle, right):
        axis.grid(True, alpha=0.3)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.yaxis.set_major_locator(MaxNLocator(integer=True))
    for axis in (middle, right):
        axis.legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110, format="png")
    plt.close(figure)
