"""Split functions in the adaptation experiment (``repart simulate --split SCHEME``).

A split variant steps through N = 1 … ``channels`` like the key-preserving algorithms, on the same
windows: each step builds the next split function from the previous one (``build_split`` with the
variant's scheme, redist for the home, tail-aware or not). It is scored on the true frequencies of all
|D| keys: b and max/mean load with each split key's load spread over its candidates by its weights
(on merged keys), b_lb, and m from ``repart.migration.plan_migration`` between consecutive versions,
which counts the consolidated partials (a partial on a channel that is no longer a candidate is merged
into the key's home). The plan is priced on an exact estimate: every key the two functions name
(explicit or split) with its true frequency, and the true mass of every slot for the rest, so that m
is the true relative migration for a linear state (LCL, the paper default) as the key-preserving
records' m is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from repart.migration.planner import plan_migration
from repart.partitioning.algorithms.problem import BuildParams
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.metrics import channel_loads, imbalance
from repart.partitioning.routing import RoutingFunction
from repart.partitioning.split.build import build_split
from repart.partitioning.split.function import SplitFunction
from repart.partitioning.split.params import SplitParams

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: A split variant's algorithm name in the records: ``split-dchoices``, ``split-pkg``, …
PREFIX = "split-"
#: The fields split records add to ``experiment.RECORD_FIELDS``.
SPLIT_FIELDS = ("memory", "split_keys")
#: The home build's placement algorithm.
HOME_ALGORITHM = "redist"
#: Counts per unit of frequency in the exact estimate that prices m (a power of two: exact products).
_SCALE = float(2**40)


def variant_name(scheme: str) -> str:
    return PREFIX + scheme


def scheme_of(name: str) -> str | None:
    """The scheme of a split variant's name, None for a key-preserving algorithm."""
    return name[len(PREFIX) :] if name.startswith(PREFIX) else None


@dataclass(frozen=True)
class SplitStep:
    function: SplitFunction
    explicit_size: int
    slot_overrides: int
    memory: float
    split_keys: int
    seconds: float


def build_step(
    previous: RoutingFunction, estimate: FrequencyEstimate, n: int, scheme: str, params: BuildParams
) -> SplitStep:
    """One adaptation step of a split variant."""
    started = time.perf_counter()
    result = build_split(
        previous, estimate, n, split=SplitParams(scheme), params=params, algorithm=HOME_ALGORITHM
    )
    seconds = time.perf_counter() - started
    report = result.report
    return SplitStep(
        function=result.function,
        explicit_size=report.home.explicit_size,
        slot_overrides=report.home.slot_overrides,
        memory=report.memory,
        split_keys=report.split_keys,
        seconds=seconds,
    )


class SplitScorer:
    """Scores split functions on the true frequencies of a workload's keys (integers 0 … |D| − 1).

    ``keys`` lists the keys by rank and ``frequencies`` their true frequencies; ``slots`` their slots.
    """

    def __init__(
        self, keys: IntArray, frequencies: FloatArray, slots: IntArray, slot_bits: int, params: BuildParams
    ) -> None:
        self.keys = keys
        self.frequencies = frequencies
        self.slots = slots
        self.slot_bits = slot_bits
        self.params = params

    @cached_property
    def _rank_of(self) -> IntArray:
        """Position in ``keys`` of every key value."""
        rank = np.empty(self.keys.size, dtype=np.int64)
        rank[self.keys] = np.arange(self.keys.size, dtype=np.int64)
        return rank

    @cached_property
    def _slot_mass(self) -> FloatArray:
        mass = np.bincount(self.slots, weights=self.frequencies, minlength=1 << self.slot_bits)
        return np.asarray(mass * _SCALE, dtype=np.float64)

    def loads(self, function: RoutingFunction) -> FloatArray:
        """(3, N) channel loads on the true frequencies, split keys spread by their weights."""
        routed = function.home.lookup_many(self.keys, slots=self.slots)
        loads = channel_loads(self.params.resources, self.frequencies, routed, function.n_channels)
        if function.split:
            keys = np.fromiter(function.split, dtype=np.int64, count=len(function.split))
            ranks = self._rank_of[keys]
            item = np.stack([self.frequencies[ranks] ** e for e in self.params.resources.load_exponents])
            for row, key_loads in zip(loads, item, strict=True):
                np.subtract.at(row, routed[ranks], key_loads)
            for column, entry in enumerate(function.split.values()):
                shares = np.asarray(entry.weights)[None, :]
                loads[:, list(entry.candidates)] += item[:, column : column + 1] * shares
        return loads

    def score(self, function: RoutingFunction, previous: RoutingFunction, b_lb: float) -> dict[str, float]:
        """b, max/mean load, b_s, b_c, b_n on merged keys, b_lb (given) and m between ``previous`` and
        ``function``."""
        result = imbalance(self.params.resources, self.loads(function), self.params.alpha)
        return {
            "b": result.b,
            "load": result.max_mean_load,
            "b_s": result.b_k[0],
            "b_c": result.b_k[1],
            "b_n": result.b_k[2],
            "b_lb": b_lb,
            "m": self.migration(previous, function),
        }

    def migration(self, previous: RoutingFunction, function: RoutingFunction) -> float:
        """m of ``plan_migration(previous, function)`` on the exact estimate (module docstring)."""
        plan = plan_migration(
            previous, function, self.exact_estimate(previous, function), self.params.resources
        )
        return float(plan.m) if plan.m is not None else 0.0

    def exact_estimate(self, *functions: RoutingFunction) -> FrequencyEstimate:
        """The keys ``functions`` name with their true frequencies, and the true mass of every slot."""
        named: set[int] = set()
        for function in functions:
            named.update(int(key) for key in function.home.explicit)
            named.update(int(key) for key in function.split)
        keys = np.array(sorted(named), dtype=np.int64)
        return FrequencyEstimate(
            keys=tuple(keys.tolist()),
            counts=self.frequencies[self._rank_of[keys]] * _SCALE,
            total=int(_SCALE),
            distinct_estimate=self.keys.size,
            slot_counts=self._slot_mass,
            slot_bits=self.slot_bits,
            key_type="int",
        )
