"""The adaptation experiment of Gedik §5 (Fig. 6 and Fig. 11 protocol).

For each run, the channel count grows N = 1, 2, …, ``channels``; each step builds p^(t+1) from the
same algorithm's p^(t) (§5.1: "we start from N^(0) = 1 and successively apply the partitioning function
construction algorithm"). Every step draws a fresh stream of ``stream_factor · |D|`` tuples from the
Zipf workload and feeds it to a sliding window of x = 3 lossy counters (Fig. 2), i.e. two tumbling
windows of half the stream each, with ε = ``epsilon_ratio`` · δ(N^(t+1)) (Manku–Motwani's ε = s/10).
Construction sees only the window's estimate (and its per-slot tuple counts); evaluation uses the true
frequencies of all |D| keys: b, b_k (Eq. 11), max/mean load (``load``: the busiest channel's tuples over
the mean channel's), m (Eq. 12) against the same algorithm's previous function, and the lower bound
b_lb.

Split variants (``split``, ``repart simulate --split SCHEME``) run beside them on the same windows,
as ``split-<scheme>`` records with two more fields, ``memory`` and ``split_keys`` (``repart.sim.split``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from repart.partitioning.algorithms.builder import ALGORITHMS, build, initial_function
from repart.partitioning.algorithms.problem import BuildParams
from repart.partitioning.consistent import ConsistentSpec
from repart.partitioning.domain import DEFAULT_SLOT_BITS, SPLIT_SCHEMES
from repart.partitioning.frequency import FrequencyEstimate, SlidingWindow
from repart.partitioning.function import PartitionFunction
from repart.partitioning.hashing import hash_int64_array, slots_of_hashes
from repart.partitioning.metrics import channel_loads, imbalance, lower_bound, relative_migration
from repart.partitioning.resources import check_channels, frequency_threshold
from repart.partitioning.routing import RoutingFunction
from repart.partitioning.split.function import SplitFunction
from repart.sim.split import SPLIT_FIELDS, SplitScorer, build_step, scheme_of, variant_name
from repart.sim.workload import DOMAIN, ZIPF_SKEW, ZipfWorkload
from repart.validation import POSITIVE, POSITIVE_INT, Interval, Options, check, check_each

IntArray = npt.NDArray[np.int64]

DEFAULT_ALGORITHMS = ("scan", "redist", "readj", "uniform", "consistent")
SIMULATED_CONSISTENT = ConsistentSpec("jump")
"""The consistent hash of the simulated functions: jump, a pseudo-random consistent hash as the paper's
ring is, on which the recorded reproductions of the paper were measured (the regions' default,
prefix, balances slot counts exactly, which would flatter the ``consistent`` baseline)."""
TAIL_AWARE_ALGORITHMS = ("scan", "redist", "readj")
RECORD_FIELDS = (
    "algorithm",
    "N",
    "b",
    "load",
    "b_s",
    "b_c",
    "b_n",
    "b_lb",
    "m",
    "explicit_size",
    "counter_size",
    "build_seconds",
    "tail_aware",
    "slot_overrides",
)


@dataclass(frozen=True)
class ExperimentConfig:
    """Parameters of ``repart simulate``; defaults are Gedik's Table 1 with N growing to 32 (Fig. 6)."""

    channels: int = 32
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    resources: str = "LCL"
    alpha: float = 1.2
    sigma: float = 0.1
    utility: str = "APM"
    zipf: float = 1.0
    domain: int = 1_000_000
    seed: int = 1
    runs: int = 1
    tail_aware: bool = False
    stream_factor: float = 1.0
    epsilon_ratio: float = 0.1
    slot_bits: int = DEFAULT_SLOT_BITS
    split: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_channels(self.channels, "channels")
        check_each("algorithms", self.algorithms, Options(ALGORITHMS))
        if self.split:
            check_each("split", self.split, Options(SPLIT_SCHEMES))
        check("runs", self.runs, POSITIVE_INT)
        check("stream_factor", self.stream_factor, POSITIVE)
        check("epsilon_ratio", self.epsilon_ratio, Interval(float, 0, 1, closed="neither"))
        check("zipf", self.zipf, ZIPF_SKEW)
        check("domain", self.domain, DOMAIN)
        self.params(tail_aware=False)

    def params(self, tail_aware: bool) -> BuildParams:
        return BuildParams(
            resources=self.resources,  # type: ignore[arg-type]
            alpha=self.alpha,
            sigma=self.sigma,
            utility=self.utility,  # type: ignore[arg-type]
            tail_aware=tail_aware,
        )

    def variants(self) -> list[tuple[str, bool]]:
        """(algorithm, tail_aware) pairs to run: every algorithm and split scheme (``split-<scheme>``),
        plus tail-aware scan/redist/readj and split schemes."""
        names = [*self.algorithms, *dict.fromkeys(variant_name(s) for s in self.split)]
        plain = [(a, False) for a in names]
        if not self.tail_aware:
            return plain
        return plain + [(a, True) for a in names if a in TAIL_AWARE_ALGORITHMS or scheme_of(a)]


Record = dict[str, float | int | str | bool]
# A split variant at N = 1: nothing split, one channel per key.
_SPLIT_START = {"memory": 1.0, "split_keys": 0.0}
Progress = Callable[[int], None]


class Evaluator:
    """Routes all |D| keys with precomputed slots and scores functions on the true frequencies."""

    def __init__(self, workload: ZipfWorkload, config: ExperimentConfig):
        self.config = config
        self.resources = config.params(False).resources
        self.frequencies = workload.frequencies
        self.keys = workload.keys
        self.slots = slots_of_hashes(hash_int64_array(self.keys), config.slot_bits)
        self._bounds: dict[int, float] = {}

    def lower_bound(self, n: int) -> float:
        """b_lb for N channels (it depends only on N and the true frequencies)."""
        if n not in self._bounds:
            self._bounds[n] = lower_bound(self.resources, self.frequencies, n, self.config.alpha)
        return self._bounds[n]

    def route(self, function: PartitionFunction) -> IntArray:
        return function.lookup_many(self.keys, slots=self.slots)

    def score(self, routed: IntArray, previous: IntArray, n: int) -> dict[str, float]:
        loads = channel_loads(self.resources, self.frequencies, routed, n)
        result = imbalance(self.resources, loads, self.config.alpha)
        return {
            "b": result.b,
            "load": result.max_mean_load,
            "b_s": result.b_k[0],
            "b_c": result.b_k[1],
            "b_n": result.b_k[2],
            "b_lb": self.lower_bound(n),
            "m": relative_migration(self.resources, self.frequencies, previous, routed, n),
        }


def window_estimate(
    workload: ZipfWorkload, config: ExperimentConfig, n: int, rng: np.random.Generator
) -> tuple[FrequencyEstimate, int]:
    """The merged sliding-window estimate of one fresh stream, and the lossy counter's entry count."""
    delta = frequency_threshold(config.params(False).resources, config.alpha, config.sigma, n, config.domain)
    epsilon = delta * config.epsilon_ratio
    length = 2 * max(1, round(config.stream_factor * config.domain / 2))  # two whole tumbling windows
    window = SlidingWindow(epsilon=epsilon, window=length, counters=3, key_type="int")
    stream = workload.sample(length, rng)
    window.update(stream)
    estimate = window.estimate()
    slot_counts = np.bincount(
        slots_of_hashes(hash_int64_array(stream), config.slot_bits), minlength=1 << config.slot_bits
    ).astype(np.float64)
    estimate = dataclasses.replace(
        estimate, distinct_estimate=config.domain, slot_counts=slot_counts, slot_bits=config.slot_bits
    )
    return estimate, len(estimate.keys)


def run_experiment(config: ExperimentConfig, progress: Progress | None = None) -> list[Record]:
    """Run ``config.runs`` adaptation sequences and return one averaged record per (variant, N)."""
    variants = config.variants()
    sums: dict[tuple[str, bool, int], Record] = {}
    for run in range(config.runs):
        rng = np.random.default_rng([config.seed, run])
        workload = ZipfWorkload(config.zipf, config.domain, key_seed=int(rng.integers(2**32)))
        evaluator = Evaluator(workload, config)
        scorer = SplitScorer(
            evaluator.keys, evaluator.frequencies, evaluator.slots, config.slot_bits, config.params(False)
        )
        first = initial_function(1, "int", config.slot_bits, SIMULATED_CONSISTENT)
        current: dict[tuple[str, bool], RoutingFunction] = dict.fromkeys(variants, first)
        routed = dict.fromkeys(variants, evaluator.route(first))
        for v in variants:
            scores = {**evaluator.score(routed[v], routed[v], 1), "m": 0.0}
            _accumulate(sums, v, 1, scores, 0, 0, 0.0, 0, _SPLIT_START if scheme_of(v[0]) else None)
        for n in range(2, config.channels + 1):
            estimate, counter_size = window_estimate(workload, config, n, rng)
            for v in variants:
                previous = current[v]
                if scheme_of(v[0]) is not None:
                    current[v] = _split_step(sums, v, n, previous, estimate, counter_size, scorer, evaluator)
                else:
                    # The key-preserving algorithms build from and route by a PartitionFunction's own
                    # tables: a key-preserving variant only ever holds one.
                    assert isinstance(previous, PartitionFunction)
                    current[v], routed[v] = _preserving_step(
                        sums, v, n, previous, routed[v], estimate, counter_size, evaluator
                    )
            if progress is not None:
                progress(1)
    return [_average(record, config.runs) for record in sums.values()]


def _preserving_step(
    sums: dict[tuple[str, bool, int], Record],
    variant: tuple[str, bool],
    n: int,
    previous: PartitionFunction,
    routed: IntArray,
    estimate: FrequencyEstimate,
    counter_size: int,
    evaluator: Evaluator,
) -> tuple[PartitionFunction, IntArray]:
    """One step of a key-preserving algorithm: build, route all keys, score, record."""
    algorithm, tail_aware = variant
    started = time.perf_counter()
    result = build(previous, estimate, n, evaluator.config.params(tail_aware), algorithm)
    seconds = time.perf_counter() - started
    now = evaluator.route(result.function)
    report = result.report
    scores = evaluator.score(now, routed, n)
    _accumulate(sums, variant, n, scores, report.explicit_size, counter_size, seconds, report.slot_overrides)
    return result.function, now


def _split_step(
    sums: dict[tuple[str, bool, int], Record],
    variant: tuple[str, bool],
    n: int,
    previous: RoutingFunction,
    estimate: FrequencyEstimate,
    counter_size: int,
    scorer: SplitScorer,
    evaluator: Evaluator,
) -> SplitFunction:
    """One step of a split variant: build, score on merged keys (m from the migration plan), record."""
    algorithm, tail_aware = variant
    scheme = scheme_of(algorithm)
    assert scheme is not None
    step = build_step(previous, estimate, n, scheme, evaluator.config.params(tail_aware))
    scores = scorer.score(step.function, previous, evaluator.lower_bound(n))
    split = {"memory": step.memory, "split_keys": float(step.split_keys)}
    _accumulate(
        sums, variant, n, scores, step.explicit_size, counter_size, step.seconds, step.slot_overrides, split
    )
    return step.function


def _accumulate(
    sums: dict[tuple[str, bool, int], Record],
    variant: tuple[str, bool],
    n: int,
    scores: dict[str, float],
    explicit_size: int,
    counter_size: int,
    seconds: float,
    overrides: int,
    split: dict[str, float] | None = None,
) -> None:
    algorithm, tail_aware = variant
    values: dict[str, float] = {
        **scores,
        "explicit_size": explicit_size,
        "counter_size": counter_size,
        "build_seconds": seconds,
        "slot_overrides": overrides,
        **(split or {}),
    }
    record = sums.setdefault(
        (algorithm, tail_aware, n), {"algorithm": algorithm, "N": n, "tail_aware": tail_aware}
    )
    for name, value in values.items():
        record[name] = float(record.get(name, 0.0)) + float(value)


def _average(record: Record, runs: int) -> Record:
    averaged: Record = {}
    fields = RECORD_FIELDS + SPLIT_FIELDS if scheme_of(str(record["algorithm"])) else RECORD_FIELDS
    for name in fields:
        value = record[name]
        if name in ("algorithm", "N", "tail_aware"):
            averaged[name] = value
        elif name in ("explicit_size", "counter_size", "slot_overrides", "split_keys"):
            averaged[name] = round(float(value) / runs, 1)
        else:
            averaged[name] = float(value) / runs
    return averaged


def steps(config: ExperimentConfig) -> int:
    """Progress units of ``run_experiment``: one per (run, N ≥ 2)."""
    return config.runs * (config.channels - 1)


def select(records: Sequence[Record], **where: object) -> list[Record]:
    """Records whose fields equal the given values, in N order."""
    chosen = [r for r in records if all(r[k] == v for k, v in where.items())]
    return sorted(chosen, key=lambda r: int(r["N"]))
