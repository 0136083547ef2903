"""The key universe and estimates the migration-plan tests share: keys of both types (edge values
included), keys no estimate tracks, and an estimate whose slot counts hold exactly its keys' counts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xxhash

from repart.partitioning.domain import INT64_MAX, INT64_MIN, Key, KeyType
from repart.partitioning.frequency import FrequencyEstimate

UNIVERSE: dict[KeyType, list[Key]] = {
    "str": ["", "a", "b", "é", "日本語", "🙂", "\x00", "hot", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"],
    "int": [0, 1, -1, 2, 3, 5, 8, 13, 21, 34, 55, INT64_MIN, INT64_MAX, 10**12, -(10**12), 777],
}
UNTRACKED: dict[KeyType, list[Key]] = {
    "str": [f"untracked-{i}" for i in range(400)],
    "int": list(range(-200, 200)),
}
KEY_TYPES: tuple[KeyType, ...] = ("str", "int")


def slot_of(key: Key, slot_bits: int) -> int:
    """DESIGN §2 written out: XXH64 (seed 42) of the key's bytes, top ``slot_bits`` bits."""
    data = key.encode("utf-8") if isinstance(key, str) else key.to_bytes(8, "little", signed=True)
    return xxhash.xxh64_intdigest(data, 42) >> (64 - slot_bits)


def estimate_of(
    keys: Sequence[Key], counts: list[float], slot_bits: int, extra: list[float] | None = None, **kwargs: Any
) -> FrequencyEstimate:
    """An estimate of ``keys`` whose slot counts hold exactly their counts (plus ``extra`` per slot)."""
    slot_counts = np.zeros(2**slot_bits)
    for key, count in zip(keys, counts, strict=True):
        slot_counts[slot_of(key, slot_bits)] += count
    if extra is not None:
        slot_counts += extra
    total = round(slot_counts.sum())
    return FrequencyEstimate(
        keys=tuple(keys),
        counts=np.array(counts),
        total=total,
        slot_counts=slot_counts,
        slot_bits=slot_bits,
        **kwargs,
    )
