"""Loads of the untracked keys (the hashed tail), per slot and per channel.

Gedik's ρ (Eq. 19) only sees the explicitly mapped keys. repart's ``tail_aware`` builds and the
predicted metrics of every build also account for the keys below δ, which the slot table routes.
A snapshot's per-slot tuple counts give each slot's untracked mass u_s (its count minus the counts of
the tracked keys that hash into it); without them the untracked mass is taken as spread evenly over
the slots. The number of untracked keys per slot k_s is (|D| − R)/2^S (hashing spreads keys evenly).
Assuming a slot's untracked keys share its mass equally, the slot's load for an item load f**e is
k_s for e = 0, u_s for e = 1 and k_s·(u_s/k_s)**e for e ≥ 2 (in count space, like the builders).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.hashing import hash_keys, slots_of_hashes

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def untracked_slot_mass(estimate: FrequencyEstimate, tracked: IntArray, slot_bits: int) -> FloatArray:
    """u_s: tuples per slot that do not belong to the tracked keys (indices into ``estimate``)."""
    slots = 1 << slot_bits
    tracked_counts = estimate.counts[tracked]
    if estimate.slot_counts is not None and estimate.slot_bits == slot_bits:
        keys = tuple(estimate.keys[i] for i in tracked.tolist())
        tracked_slots = slots_of_hashes(hash_keys(keys), slot_bits) if keys else np.empty(0, np.int64)
        mass = estimate.slot_counts - np.bincount(tracked_slots, weights=tracked_counts, minlength=slots)
        return np.maximum(mass, 0.0)
    rest = max(float(estimate.total) - float(tracked_counts.sum()), 0.0)
    return np.full(slots, rest / slots)


def untracked_slot_loads(
    estimate: FrequencyEstimate, tracked: IntArray, slot_bits: int, exponents: tuple[int, ...]
) -> FloatArray:
    """(len(exponents), 2^S): per-slot load of the untracked keys for each item-load exponent."""
    mass = untracked_slot_mass(estimate, tracked, slot_bits)
    distinct = estimate.distinct_estimate if estimate.distinct_estimate is not None else len(estimate.keys)
    keys_per_slot = max(distinct - tracked.size, 0) / mass.size
    rows = []
    for e in exponents:
        if e == 0:
            rows.append(np.full(mass.size, keys_per_slot))
        elif e == 1 or keys_per_slot == 0:
            rows.append(mass.copy() if e == 1 else np.zeros(mass.size))
        else:
            rows.append(keys_per_slot * (mass / keys_per_slot) ** e)
    return np.stack(rows) if rows else np.empty((0, mass.size))


def loads_by_channel(slot_loads: FloatArray, table: npt.NDArray[np.int32], n_channels: int) -> FloatArray:
    """Sum per-slot loads (K, 2^S) into per-channel loads (K, N) under a slot table."""
    loads = np.zeros((slot_loads.shape[0], n_channels), dtype=np.float64)
    for k, row in enumerate(slot_loads):
        loads[k] = np.bincount(table, weights=row, minlength=n_channels)
    return loads
