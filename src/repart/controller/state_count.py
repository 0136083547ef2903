"""The skew-aware choice of a Spark state partition count.

A Structured Streaming query keeps each key's state in partition ``pmod(murmur3(key), n)`` of its n
state partitions (``repart.partitioning.spark_hash``), and each partition's work is the load of the keys
it holds. repart cannot change that function, only n, and at a given n two hot keys that hash to one
partition double its load. So once a plain rule (the target-utilization policy) has picked a count n,
``choose_state_count`` looks at every count m close to n and keeps the one whose busiest partition is
predicted to carry the least:

- the hot keys (those the frequency estimate counts exactly) are placed exactly as Spark places them,
  by their Spark hashes: partition p at m carries ``H_p(m) = Σ count(k)`` over the hot keys k with
  ``pmod(hash(k), m) = p``;
- the tail (the load not in the hot keys: many keys, each small) is spread evenly in expectation,
  ``tail / m`` on every partition;
- the predicted maximum partition load at m is ``max_p H_p(m) + tail / m``, and its imbalance
  ``b = max / mean``, the mean being ``total / m`` (1 is perfect balance).

Candidates are the integers m with ``(1 - tolerance)·n <= m <= (1 + tolerance)·n`` inside the region's
bounds ``[min_n, max_n]``, n itself always among them: the rule's count stays the capacity decision,
and the choice only moves within its tolerance. The lowest predicted maximum wins; ties go to the count
closest to n, then to the smaller.

When the single largest key carries more than the mean partition load at the chosen count
(``total / m``), no count helps: the partition holding it is over the mean at any m. The choice then
reports that key (``dominant_key``); the remedy is repart's split mode, which spreads one key's load
over several channels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.metrics import max_over_mean
from repart.partitioning.spark_hash import spark_partitions
from repart.validation import NON_NEGATIVE, POSITIVE_INT, Interval, check

DEFAULT_TOLERANCE = 0.1
"""The default tolerance: candidates within ±10 % of the rule's count."""
TOLERANCE = Interval(float, 0, 1, closed="left")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True)
class DominantKey:
    """The single largest hot key, when it carries more than the mean partition load at the chosen
    count: ``index`` into the hot keys given, its ``count`` and its ``share`` of the total load."""

    index: int
    count: float
    share: float

    def to_document(self) -> dict[str, Any]:
        """The key as a JSON-ready dict."""
        return {"index": self.index, "count": self.count, "share": self.share}


@dataclass(frozen=True)
class StateCountChoice:
    """The outcome of ``choose_state_count``.

    - ``chosen``: the count m kept; ``rule``: the count n the plain rule picked.
    - ``chosen_max_load``, ``rule_max_load``: the predicted maximum partition load at each
      (``max_p H_p(m) + tail / m``).
    - ``chosen_b``, ``rule_b``: their imbalance ``b = max / mean`` with mean ``total / m``
      (``repart.partitioning.metrics.max_over_mean`` of the predicted loads; 1.0 when the total is 0).
    - ``candidates``: every count considered, ascending, and ``candidate_max_loads`` their predicted
      maximum loads in the same order.
    - ``total``: the hot keys' counts plus the tail.
    - ``dominant_key``: the largest hot key when it exceeds ``total / chosen`` (no count helps; split
      mode is the remedy), else None.
    """

    chosen: int
    rule: int
    chosen_max_load: float
    rule_max_load: float
    chosen_b: float
    rule_b: float
    candidates: tuple[int, ...]
    candidate_max_loads: tuple[float, ...]
    total: float
    dominant_key: DominantKey | None

    def to_document(self) -> dict[str, Any]:
        """The choice as a JSON-ready dict (plain ints, floats, lists and None)."""
        return {
            "chosen": self.chosen,
            "rule": self.rule,
            "chosen_max_load": self.chosen_max_load,
            "rule_max_load": self.rule_max_load,
            "chosen_b": self.chosen_b,
            "rule_b": self.rule_b,
            "candidates": list(self.candidates),
            "candidate_max_loads": list(self.candidate_max_loads),
            "total": self.total,
            "dominant_key": None if self.dominant_key is None else self.dominant_key.to_document(),
        }


def _candidates(rule_n: int, min_n: int, max_n: int, tolerance: float) -> npt.NDArray[np.int64]:
    """Every integer m in ``[ceil((1 - tolerance)·rule_n), floor((1 + tolerance)·rule_n)]`` and in
    ``[min_n, max_n]``, ascending (``rule_n`` among them). The bounds are computed exactly, with
    ``tolerance`` as the decimal it is written as: ``0.7`` of 10 admits 3, which ``(1 - 0.7) * 10`` in
    floats (3.0000000000000004) would not."""
    exact = Fraction(repr(tolerance))
    low = max(math.ceil((1 - exact) * rule_n), min_n)
    high = min(math.floor((1 + exact) * rule_n), max_n)
    return np.arange(low, high + 1, dtype=np.int64)


def choose_state_count(
    hot_hashes: npt.ArrayLike,
    hot_counts: npt.ArrayLike,
    tail: float,
    rule_n: int,
    min_n: int,
    max_n: int,
    tolerance: float = DEFAULT_TOLERANCE,
) -> StateCountChoice:
    """The state partition count within ``tolerance`` of ``rule_n`` whose predicted busiest partition
    carries the least (see the module docstring for the prediction and the tie rule).

    ``hot_hashes`` are the hot keys' Spark hashes (``spark_hash_strings`` or ``spark_hash_longs`` of the
    grouping key, signed 32-bit values) and ``hot_counts`` their counts (>= 0, one per hash); ``tail``
    is the load not in the hot keys (>= 0); ``rule_n`` the count the plain rule picked, in the region's
    bounds ``[min_n, max_n]``; ``tolerance`` in [0, 1). Bad input raises ``InvalidInput`` naming the
    field.
    """
    hashes, counts = _hot_keys(hot_hashes, hot_counts)
    tail_load = check("tail", tail, NON_NEGATIVE)
    low = check("min_n", min_n, POSITIVE_INT)
    high = check("max_n", max_n, Interval(int, low, None))
    rule = check("rule_n", rule_n, Interval(int, low, high))
    share = check("tolerance", tolerance, TOLERANCE)

    candidates = _candidates(rule, low, high, share)
    max_loads = np.array([_predicted_loads(hashes, counts, tail_load, m).max() for m in candidates.tolist()])
    # Lowest predicted maximum, then closest to the rule's count, then the smaller count.
    best = int(np.lexsort((candidates, np.abs(candidates - rule), max_loads))[0])
    chosen = int(candidates[best])
    at_rule = int(np.flatnonzero(candidates == rule)[0])
    total = math.fsum(counts.tolist()) + tail_load

    return StateCountChoice(
        chosen=chosen,
        rule=rule,
        chosen_max_load=float(max_loads[best]),
        rule_max_load=float(max_loads[at_rule]),
        chosen_b=max_over_mean(_predicted_loads(hashes, counts, tail_load, chosen)),
        rule_b=max_over_mean(_predicted_loads(hashes, counts, tail_load, rule)),
        candidates=tuple(candidates.tolist()),
        candidate_max_loads=tuple(max_loads.tolist()),
        total=total,
        dominant_key=_dominant_key(counts, total, chosen),
    )


def _hot_keys(
    hot_hashes: npt.ArrayLike, hot_counts: npt.ArrayLike
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    hashes = np.asarray(hot_hashes)
    hash_requirement = f"must be a 1-d array of Spark hashes (integers in [{_INT32_MIN}, {_INT32_MAX}])"
    if hashes.ndim != 1 or (hashes.size and hashes.dtype.kind not in "iu"):
        raise InvalidInput(
            "hot_hashes", f"{hash_requirement}, got dtype {hashes.dtype} and shape {hashes.shape}"
        )
    if hashes.size and (int(hashes.min()) < _INT32_MIN or int(hashes.max()) > _INT32_MAX):
        raise InvalidInput(
            "hot_hashes", f"{hash_requirement}, got values in [{hashes.min()}, {hashes.max()}]"
        )
    counts = np.asarray(hot_counts)
    if counts.ndim != 1 or (counts.size and counts.dtype.kind not in "iuf"):
        raise InvalidInput(
            "hot_counts",
            f"must be a 1-d array of numbers >= 0, got dtype {counts.dtype} and shape {counts.shape}",
        )
    counts = counts.astype(np.float64)
    if not np.all(np.isfinite(counts)) or np.any(counts < 0):
        raise InvalidInput("hot_counts", "must be finite numbers >= 0, got a negative, NaN or infinite one")
    if counts.size != hashes.size:
        raise InvalidInput(
            "hot_counts", f"must have one count per hot hash ({hashes.size}), got {counts.size}"
        )
    return hashes.astype(np.int64), counts


def _predicted_loads(
    hashes: npt.NDArray[np.int64], counts: npt.NDArray[np.float64], tail: float, m: int
) -> npt.NDArray[np.float64]:
    """The predicted load of each of m state partitions: ``H_p(m) + tail / m``, the hot keys' counts
    summed by their partition ``pmod(hash, m)`` plus the tail's even share."""
    partitions = spark_partitions(hashes, m)
    hot = np.bincount(partitions, weights=counts, minlength=m).astype(np.float64, copy=False)
    return hot + tail / m


def _dominant_key(counts: npt.NDArray[np.float64], total: float, m: int) -> DominantKey | None:
    if counts.size == 0:
        return None
    index = int(np.argmax(counts))
    largest = float(counts[index])
    if largest <= total / m:
        return None
    return DominantKey(index=index, count=largest, share=largest / total)
