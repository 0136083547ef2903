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

from typing import Any

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.domain import Key
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.hashing import hash_keys, slots_of_hashes

FloatArray = npt.NDArray[np.float64]


def untracked_slot_mass(
    estimate: FrequencyEstimate, keys: tuple[Key, ...], counts: FloatArray, slot_bits: int
) -> FloatArray:
    """u_s: the tuples of each slot that do not belong to ``keys`` (whose counts are ``counts``)."""
    slots = 1 << slot_bits
    if estimate.slot_counts is None:
        rest = max(float(estimate.total) - float(np.sum(counts)), 0.0)
        return np.full(slots, rest / slots)
    if estimate.slot_bits != slot_bits:
        raise InvalidInput(
            "slot_bits",
            f"must be the slot_bits {estimate.slot_bits} of the estimate's slot_counts, got {slot_bits}",
        )
    key_slots = slots_of_hashes(hash_keys(keys), slot_bits) if keys else np.empty(0, np.int64)
    mass = estimate.slot_counts - np.bincount(key_slots, weights=counts, minlength=slots)
    return np.maximum(mass, 0.0)


def untracked_slot_loads(
    estimate: FrequencyEstimate,
    keys: tuple[Key, ...],
    counts: FloatArray,
    slot_bits: int,
    exponents: tuple[int, ...],
) -> FloatArray:
    """(len(exponents), 2^S): per-slot load of the keys other than ``keys``, per item-load exponent."""
    mass = untracked_slot_mass(estimate, keys, counts, slot_bits)
    distinct = estimate.distinct_estimate if estimate.distinct_estimate is not None else len(estimate.keys)
    keys_per_slot = max(distinct - len(keys), 0) / mass.size
    rows = []
    for e in exponents:
        if e == 0:
            rows.append(np.full(mass.size, keys_per_slot))
        elif e == 1:
            rows.append(mass)
        elif keys_per_slot == 0:
            rows.append(np.zeros(mass.size))
        else:
            rows.append(keys_per_slot * (mass / keys_per_slot) ** e)
    return np.stack(rows)


def loads_by_channel(
    loads_per_unit: FloatArray, channel_of_unit: npt.NDArray[np.integer[Any]], n_channels: int
) -> FloatArray:
    """Sum loads (K, units) into per-channel loads (K, N): units are slots (under a slot table) or items."""
    loads = np.zeros((loads_per_unit.shape[0], n_channels), dtype=np.float64)
    for k, row in enumerate(loads_per_unit):
        loads[k] = np.bincount(channel_of_unit, weights=row, minlength=n_channels)
    return loads
