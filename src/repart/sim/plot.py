"""Plots of simulation records: b and m against N per algorithm (cf. Gedik Fig. 6)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

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
