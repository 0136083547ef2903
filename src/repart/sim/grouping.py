"""The stream-grouping experiment: every scheme of the PKG family on one synthetic or real workload.

For each run r (stream and grouping seed = ``seed`` + r) and each Zipf skew z (only the ``zipf`` and
``drift`` workloads have one; the others give a single record with z = None), one stream of m tuples is
generated; then for each worker count n and each scheme a fresh grouping routes the whole stream, in
chunks of :data:`CHUNK` tuples (``route`` keeps its per-source state across calls), and the routed
stream is scored with :func:`repart.partitioning.groupings.metrics.evaluate`: imbalance, memory cost,
load spread, a queueing model's latency and the saturation throughput.

Worker i serves at rate μ_i (``rates``, repeated cyclically to length n; all 1 by default) and tuples
arrive at λ = ``utilization`` · Σμ. FISH is told μ and λ; Off-Greedy is told the whole stream's key
counts (it is the offline reference). ``seconds`` is the time ``route`` took, nothing else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.groupings import SCHEMES, Grouping, make_grouping
from repart.partitioning.groupings.base import MAX_WORKERS
from repart.partitioning.groupings.metrics import evaluate
from repart.sim.streams import (
    DKG_KEYS,
    EXACT,
    SKEW,
    SOURCE_MODE,
    WORKLOAD,
    KeyStream,
    english_vocabulary_size,
    make_stream,
)
from repart.sim.workload import ZIPF_SKEW
from repart.validation import NON_NEGATIVE_INT, POSITIVE, POSITIVE_INT, Interval, Options, check, check_each

if TYPE_CHECKING:
    from rich.progress import Progress

IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]
FloatArray = npt.NDArray[np.float64]
GroupingRecord = dict[str, Any]

CHUNK = 1_000_000  # tuples handed to ``route`` at a time
WARM_UP = 1_000  # tuples routed, unmeasured, before a scheme's first measurement (see warm_up)
Z_WORKLOADS = ("zipf", "drift")  # the workloads that take a Zipf skew z
DEFAULT_WORKERS = (5, 10, 50, 100)
DEFAULT_GROUPING_KEYS = 100_000
RECORD_FIELDS = (
    "scheme",
    "workload",
    "z",
    "n",
    "sources",
    "messages",
    "imbalance",
    "imbalance_avg",
    "memory",
    "load_std",
    "head_size",
    "d",
    "latency_mean",
    "latency_p99",
    "saturation",
    "seconds",
)
# Fields that identify a record; every other field is a measurement, averaged over the runs.
KEY_FIELDS = ("scheme", "workload", "z", "n", "sources", "messages")


def _distinct(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """``values`` with repeats dropped, in order."""
    return tuple(dict.fromkeys(values))


@dataclass(frozen=True)
class GroupingConfig:
    """Parameters of ``repart simulate-grouping``; every field is checked on construction.

    ``zipf`` lists the z values (used by the zipf and drift workloads only); ``rates`` are the worker
    speeds μ (None: all 1), repeated cyclically to length n; λ = ``utilization`` · Σμ. ``skew`` is the
    DKG workload's top-key share; ``exact`` makes the zipf workload exact-count-then-shuffle.
    """

    schemes: tuple[str, ...] = SCHEMES
    workers: tuple[int, ...] = DEFAULT_WORKERS
    sources: int = 5
    workload: str = "zipf"
    zipf: tuple[float, ...] = (1.0,)
    keys: int | None = None  # None: 100,000, or the DKG paper's 204 for the dkg workload
    messages: int = 1_000_000
    skew: float = 0.5
    seed: int = 1
    runs: int = 1
    rates: tuple[float, ...] | None = None
    utilization: float = 0.9
    source_mode: str = "round_robin"
    exact: bool = False

    def __post_init__(self) -> None:
        # Repeated schemes, worker counts and z values are run once (order kept); rates repeat cyclically.
        schemes = _distinct(check_each("schemes", self.schemes, Options(SCHEMES)))
        workers = _distinct(check_each("workers", self.workers, Interval(int, 1, MAX_WORKERS)))
        check("sources", self.sources, POSITIVE_INT)
        check("workload", self.workload, WORKLOAD)
        zipf = _distinct(check_each("zipf", self.zipf, ZIPF_SKEW))
        keys = self.keys
        if keys is None:
            keys = DKG_KEYS if self.workload == "dkg" else DEFAULT_GROUPING_KEYS
            object.__setattr__(self, "keys", keys)
        most_keys = english_vocabulary_size() if self.workload == "words" else None
        check("keys", keys, Interval(int, 2 if self.workload == "dkg" else 1, most_keys))
        check("messages", self.messages, POSITIVE_INT)
        check("skew", self.skew, SKEW)
        check("seed", self.seed, NON_NEGATIVE_INT)
        check("runs", self.runs, POSITIVE_INT)
        rates = None
        if self.rates is not None:
            rates = check_each("rates", self.rates, POSITIVE)  # worker speeds μ
            if len(rates) > max(workers):
                raise InvalidInput("rates", f"must have at most n = {max(workers)} values, got {len(rates)}")
        check("utilization", self.utilization, POSITIVE)  # λ / Σμ
        check("source_mode", self.source_mode, SOURCE_MODE)
        check("exact", self.exact, *EXACT)
        object.__setattr__(self, "schemes", schemes)
        object.__setattr__(self, "workers", workers)
        object.__setattr__(self, "zipf", zipf)
        object.__setattr__(self, "rates", rates)

    def z_values(self) -> tuple[float | None, ...]:
        """The z of each stream: ``zipf`` for the zipf and drift workloads, a single None otherwise."""
        return self.zipf if self.workload in Z_WORKLOADS else (None,)

    def worker_rates(self, n: int) -> FloatArray:
        """μ of the n workers: ``rates`` repeated cyclically to length n (all 1.0 when not given)."""
        pattern = np.ones(1) if self.rates is None else np.asarray(self.rates, dtype=np.float64)
        return np.resize(pattern, n).astype(np.float64)

    def arrival_rate(self, n: int) -> float:
        """λ = utilization · Σμ over the n workers."""
        return float(self.utilization * self.worker_rates(n).sum())

    def stream(self, z: float | None, run: int) -> KeyStream:
        """The tuple stream of run ``run`` (seed + run) at skew z (None: the workload has no z)."""
        return make_stream(
            self.workload,
            messages=self.messages,
            sources=self.sources,
            seed=self.seed + run,
            z=1.0 if z is None else z,
            keys=self.keys,
            skew=self.skew,
            exact=self.exact,
            source_mode=self.source_mode,
        )


def steps(config: GroupingConfig) -> int:
    """Progress units of :func:`run_grouping_experiment`: one per (run, z, n, scheme)."""
    return config.runs * len(config.z_values()) * len(config.workers) * len(config.schemes)


def stream_frequencies(stream: KeyStream) -> tuple[UIntArray, IntArray]:
    """The distinct hashes of the keys that occur in ``stream`` and their tuple counts (for Off-Greedy)."""
    hashes = np.zeros(stream.distinct, dtype=np.uint64)
    hashes[stream.key_ids] = stream.key_hashes
    counts = stream.counts
    present = counts > 0
    return hashes[present], counts[present]


def build_grouping(scheme: str, n: int, stream: KeyStream, config: GroupingConfig, seed: int) -> Grouping:
    """A fresh grouping of ``scheme`` for n workers: Off-Greedy sees the stream, FISH the rates and λ."""
    params: dict[str, Any] = {}
    if scheme == "off-greedy":
        key_hashes, counts = stream_frequencies(stream)
        params = {"key_hashes": key_hashes, "counts": counts}
    elif scheme == "fish":
        params = {"rates": config.worker_rates(n), "arrival_rate": config.arrival_rate(n)}
    return make_grouping(scheme, n, stream.sources_count, seed=seed, **params)


def route_stream(grouping: Grouping, stream: KeyStream, chunk: int = CHUNK) -> tuple[IntArray, float]:
    """The worker of every tuple, routed ``chunk`` tuples at a time, and the seconds ``route`` took."""
    check("chunk", chunk, POSITIVE_INT)
    workers = np.empty(stream.messages, dtype=np.int64)
    seconds = 0.0
    for start in range(0, stream.messages, chunk):
        stop = min(start + chunk, stream.messages)
        hashes, sources = stream.key_hashes[start:stop], stream.sources[start:stop]
        began = time.perf_counter()
        routed = grouping.route(hashes, sources)
        seconds += time.perf_counter() - began
        workers[start:stop] = routed
    return workers, seconds


def warm_up(scheme: str, n: int, stream: KeyStream, config: GroupingConfig) -> None:
    """Route the first :data:`WARM_UP` tuples with a throwaway grouping of ``scheme``.

    This loads (or compiles) the scheme's numba kernels, so that the first measured ``seconds`` of a
    scheme is routing time like every other, not the kernel's loading time.
    """
    size = min(WARM_UP, stream.messages)
    prefix = KeyStream(
        workload=stream.workload,
        key_ids=stream.key_ids[:size],
        key_hashes=stream.key_hashes[:size],
        sources=stream.sources[:size],
        distinct=stream.distinct,
        sources_count=stream.sources_count,
    )
    route_stream(build_grouping(scheme, n, prefix, config, config.seed), prefix)


def measure(
    scheme: str, n: int, z: float | None, stream: KeyStream, config: GroupingConfig, seed: int
) -> GroupingRecord:
    """One record: build the grouping, route the stream, evaluate (fields in :data:`RECORD_FIELDS` order)."""
    grouping = build_grouping(scheme, n, stream, config, seed)
    workers, seconds = route_stream(grouping, stream)
    metrics = evaluate(
        stream.key_ids, workers, n, stream.distinct, config.worker_rates(n), config.arrival_rate(n)
    )
    values = {f.name: getattr(metrics, f.name) for f in fields(metrics)}
    record: GroupingRecord = {
        "scheme": scheme,
        "workload": config.workload,
        "z": z,
        "n": n,
        "sources": config.sources,
        "messages": stream.messages,
        **{k: float(v) for k, v in values.items()},
        "head_size": int(grouping.head_size()),
        "d": int(grouping.max_choices()),
        "seconds": seconds,
    }
    return {name: record[name] for name in RECORD_FIELDS}


def run_grouping_experiment(config: GroupingConfig, progress: Progress | None = None) -> list[GroupingRecord]:
    """One record per (z, n, scheme), averaged over ``config.runs`` runs; see the module docstring.

    With a ``rich.progress.Progress``, one task of :func:`steps` units advances per (run, z, n, scheme).
    """
    task = None if progress is None else progress.add_task("simulate-grouping", total=steps(config))
    warm: set[str] = set()
    per_run: list[list[GroupingRecord]] = []
    for run in range(config.runs):
        seed = config.seed + run
        records: list[GroupingRecord] = []
        for z in config.z_values():
            stream = config.stream(z, run)
            for n in config.workers:
                for scheme in config.schemes:
                    if scheme not in warm:
                        warm_up(scheme, n, stream, config)
                        warm.add(scheme)
                    records.append(measure(scheme, n, z, stream, config, seed))
                    if progress is not None and task is not None:
                        progress.advance(task)
            del stream
        per_run.append(records)
    if config.runs == 1:
        return per_run[0]
    return [_average(group) for group in zip(*per_run, strict=True)]


def _average(group: tuple[GroupingRecord, ...]) -> GroupingRecord:
    """The mean of every measurement over the runs (records of one (z, n, scheme), in run order)."""
    first = group[0]
    averaged: GroupingRecord = {}
    for name in RECORD_FIELDS:
        if name in KEY_FIELDS:
            averaged[name] = first[name]
        else:
            averaged[name] = float(np.mean([float(record[name]) for record in group]))
    return averaged


def select(records: list[GroupingRecord], **where: object) -> list[GroupingRecord]:
    """Records whose fields equal the given values, in n order."""
    chosen = [r for r in records if all(r[k] == v for k, v in where.items())]
    return sorted(chosen, key=lambda r: int(r["n"]))


__all__ = [
    "CHUNK",
    "DEFAULT_WORKERS",
    "RECORD_FIELDS",
    "WARM_UP",
    "Z_WORKLOADS",
    "GroupingConfig",
    "GroupingRecord",
    "build_grouping",
    "measure",
    "route_stream",
    "run_grouping_experiment",
    "select",
    "steps",
    "stream_frequencies",
    "warm_up",
]
