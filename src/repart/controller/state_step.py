"""The next count of state partitions of a ``spark-state`` region, and the plan that repartitions to it.

The channel-count policy (``repart.controller.policy``) picks a count n from the query's utilization,
as it picks N for a region of repart's own. Spark then places state by ``pmod(murmur3(key), n)``: two
hot keys that share a partition at n share it whatever the policy meant. So among the counts within
``DEFAULT_TOLERANCE`` (±10 %) of the policy's n (and the region's bounds), ``state_step`` takes the one whose
predicted maximum partition load is lowest (``repart.controller.state_count``): the window's hot keys
placed exactly as Spark places them, the rest of the load spread evenly in expectation.

A count's plan is Spark's offline repartition of the stopped query's checkpoint: every state row is
read and written again, so the plan moves the whole state. Its predicted cost is the state's bytes as
the query last reported them (``channels[].state_bytes``), and its m (Gedik Eq. 10) is n' (0 for an
empty state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from repart.controller.state_count import DEFAULT_TOLERANCE, StateCountChoice, choose_state_count
from repart.migration import MigrationPlan
from repart.partitioning.domain import Key
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.state_partitions import StatePartitions
from repart.protocol.snapshot import Snapshot


@dataclass(frozen=True)
class StateStep:
    """The chosen count, the choice's report, the plan to it (None when the count is unchanged) and the
    key no count balances (``StateCountChoice.dominant_key``'s key; None when there is none)."""

    function: StatePartitions
    choice: StateCountChoice
    plan: MigrationPlan | None
    dominant_key: Key | None = None


def state_step(
    current: StatePartitions,
    estimate: FrequencyEstimate,
    n_policy: int,
    bounds: tuple[int, int],
    slot_bits: int,
    newest: Snapshot,
) -> StateStep:
    """The skew-aware count near ``n_policy`` within ``bounds`` (module docstring) and its plan from
    ``current``, priced by the state bytes ``newest`` reports."""
    counts = np.asarray(estimate.counts, dtype=np.float64)
    hashes = current.hashes(list(estimate.keys))
    tail = max(float(estimate.total) - float(counts.sum()), 0.0)
    choice = choose_state_count(hashes, counts, tail, n_policy, bounds[0], bounds[1], DEFAULT_TOLERANCE)
    function = StatePartitions(choice.chosen, current.key_type)
    dominant = None if choice.dominant_key is None else estimate.keys[choice.dominant_key.index]
    plan = None
    if function.n_partitions != current.n_partitions:
        plan = repartition_plan(current, function, slot_bits, state_bytes(newest))
    return StateStep(function, choice, plan, dominant)


def repartition_plan(
    current: StatePartitions, target: StatePartitions, slot_bits: int, total_bytes: int | None
) -> MigrationPlan:
    """The plan of Spark's offline repartition from ``current`` to ``target``: no moves of repart's own
    (Spark moves every row), cost and total state the state's bytes (None when unknown), so its m is
    n′ (0 for an empty state)."""
    size = None if total_bytes is None else float(total_bytes)
    return MigrationPlan(
        key_type=current.key_type,
        slot_bits=slot_bits,
        source_n_channels=current.n_partitions,
        target_n_channels=target.n_partitions,
        source_digest=current.digest,
        target_digest=target.digest,
        cost=size,
        total_state=size,
    )


def state_bytes(snapshot: Snapshot) -> int | None:
    """The state bytes a snapshot's partitions report in all (None when it reports none)."""
    channels = snapshot.channels or ()
    return sum(measured.state_bytes for measured in channels) if channels else None


def state_choice_note(step: StateStep) -> str:
    """The reason's account of a choice: the count taken against the policy's, their predicted
    max/mean partition loads, and a key no count can balance (``dominant_key_note``)."""
    choice = step.choice
    note = (
        f"skew-aware count {choice.chosen} (predicted max/mean partition load {choice.chosen_b:.3g}) "
        f"for the policy's {choice.rule} ({choice.rule_b:.3g})"
    )
    dominant = dominant_key_note(step)
    return note if dominant is None else f"{note}; {dominant}"


def dominant_key_note(step: StateStep) -> str | None:
    """That one key carries more than 1/n of the load, so no count balances it, or None."""
    key = step.choice.dominant_key
    if key is None:
        return None
    return (
        f"key {step.dominant_key!r} carries {key.share:.3g} of the load, more than 1/{step.choice.chosen}: "
        "no count balances it, splitting it (repart's own state in split mode) does"
    )


def _dominant(step: StateStep) -> dict[str, Any] | None:
    """The dominant key's document with the key itself (None when there is none)."""
    key = step.choice.dominant_key
    return None if key is None else {"key": step.dominant_key, **key.to_document()}


def step_data(step: StateStep) -> dict[str, Any]:
    """What the tick's event records of a step: the choice (``StateCountChoice.to_document``) and the
    plan's predicted bytes."""
    plan = step.plan
    return {
        "state_count": step.choice.to_document() | {"dominant_key": _dominant(step)},
        "predicted_bytes": None if plan is None or plan.cost is None else int(plan.cost),
    }
