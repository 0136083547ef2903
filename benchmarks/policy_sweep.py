"""A fast sweep of the channel-count policy's defaults over the named traces, to choose them.

``benchmarks/policy_traces.py`` replays a trace through the controller (about a minute per trace and
seed); a sweep over many settings cannot. This one runs the policy's own ``decide`` on each batch, as
the tick does (the newest ``history_batches`` batches and the batch before the last change), with a
simpler busy-time model: batch ``t`` at ``n`` channels runs at its best key-preserving balance
``max(rows / n, hottest key's rows) · cost per row / budget`` (``repart.controller.bound``) times a
fixed imbalance (``--imbalance``: the functions' max/mean load, 1.03 and 1.1 by default). The model is
optimistic about a step's balance: the replay's step functions have run at max/mean 1.35 (b 2.34).
The oracle is the replay's (``repart.controller.replay.oracle_channels``), the figures too
(``repart.controller.replay.summarize``), and the targets ``policy_traces.py``'s. A setting is judged
on every named trace, so all of them are in-sample. The settings it points to are then confirmed by
a full run of ``policy_traces.py``.

    .venv/bin/python benchmarks/policy_sweep.py [--seeds 3] [--imbalance 1.03 1.1]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.policy_traces import (
    IN_BAND_TARGET,
    MAX_CHANNELS,
    START_CHANNELS,
    region,
    trace_targets,
    traces,
)

from repart.controller.bound import best_balance_utilization
from repart.controller.policy import TargetUtilizationPolicy
from repart.controller.replay import (
    ReplayedBatch,
    batch_budget,
    costs_per_row,
    oracle_channels,
    summarize,
)
from repart.controller.settings import ControllerSettings
from repart.controller.signal import BatchLoad
from repart.protocol.snapshot import BatchProgress, ChannelMeasurement
from repart.sim.traces import trace_snapshots

GRID = {
    "utilization_band": ([0.4, 0.9], [0.45, 0.9]),
    "scale_down_delay": (1, 2, 3),
    "scale_up_lookback": (0, 3, 6),
    "max_scale_down_factor": (0.5, 0.75),
}
BUDGET = 100.0


def simulate(utilization: np.ndarray, policy: TargetUtilizationPolicy, imbalance: float) -> dict[str, Any]:
    """The figures of the policy's decisions on a trace's utilization matrix (module docstring)."""
    n, loads, rows = START_CHANNELS, [], []
    oracle = [oracle_channels(row, policy.target_utilization, policy.min_channels) for row in utilization]
    for t, row in enumerate(utilization):
        used = float(row[n - 1]) * imbalance
        tuples = max(1, round(float(row[n - 1]) * n * 1e5))  # rows proportional to the balanced load
        measured = (ChannelMeasurement(0, tuples, used * BUDGET, 0),)
        loads.append(BatchLoad(t, n, measured, BatchProgress(interval_seconds=BUDGET)))
        history = loads[-policy.history_batches :]
        before = None
        if all(load.n_channels == n for load in history):
            earlier = loads[: len(loads) - len(history)]
            before = next((load for load in reversed(earlier) if load.n_channels != n), None)
        decision = policy.decide(history, n, before)
        rows.append(
            ReplayedBatch(
                t, n, used, BUDGET, oracle[t], "", decision.held_by, decision.n_channels, None, None
            )
        )
        n = decision.n_channels
    summary = summarize(rows, policy.band)
    return {
        "changes": summary.changes,
        "reversals_within_3": summary.reversals_within_3,
        "max_consecutive_over_budget": summary.max_consecutive_over_budget,
        "in_band_share": summary.in_band_share,
        "cost_over_oracle": summary.cost_over_oracle,
    }


def utilizations(seeds: int) -> dict[tuple[str, int], np.ndarray]:
    """Every named trace's best-balance utilization matrix, per seed."""
    matrices = {}
    for seed in range(seeds):
        for name, spec in traces(seed).items():
            settings = ControllerSettings.from_config(region(spec))
            snapshots = trace_snapshots(spec)
            budgets = [batch_budget(snapshot, settings) for snapshot in snapshots]
            costs = costs_per_row(snapshots)
            matrices[name, seed] = best_balance_utilization(snapshots, costs, budgets, MAX_CHANNELS)
    return matrices


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--imbalance", type=float, nargs="+", default=[1.03, 1.1])
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    matrices = utilizations(args.seeds)
    names = list(traces(0))
    print(
        "per trace, worst of the seeds: changes, reversals within 3, most batches over budget in a row, "
        "in-band share, channel-batches / oracle"
    )
    for imbalance in args.imbalance:
        print(f"\nimbalance {imbalance:g}")
        for values in itertools.product(*GRID.values()):
            settings = dict(zip(GRID, values, strict=True))
            policy = TargetUtilizationPolicy(
                target_utilization=0.7,
                min_channels=1,
                max_channels=MAX_CHANNELS,
                **(settings | {"utilization_band": tuple(settings["utilization_band"])}),
            )
            cells, met = [], True
            for name in names:
                runs = [simulate(matrices[name, seed], policy, imbalance) for seed in range(args.seeds)]
                worst = {field: max(run[field] for run in runs) for field in runs[0]}
                worst["in_band_share"] = min(run["in_band_share"] for run in runs)
                met &= all(trace_targets(name, worst).values())
                cells.append(
                    f"{name[:16]:16} {worst['changes']:>2} {worst['reversals_within_3']} "
                    f"{worst['max_consecutive_over_budget']} {worst['in_band_share']:.3f} "
                    f"{worst['cost_over_oracle']:.2f}"
                )
            shown = " ".join(f"{key}={value}" for key, value in settings.items())
            print(f"  {'all met' if met else 'missed '} {shown}")
            print("    " + " | ".join(cells))
    print(f"\n(in-band target {IN_BAND_TARGET:g}; load average after: {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
