"""What every grouping shares: construction checks, the ``route`` contract and per-source loads.

A grouping routes a stream of keys, tuple by tuple, from S sources to n workers. Each
source keeps its own state — the loads it has sent (PKG's local load estimation), heavy-hitter
summaries, key tables — so feeding a stream in chunks gives exactly the result of feeding it at once:
``route`` only ever appends to that state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, cast

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.groupings.hashes import function_seeds
from repart.validation import FRACTION, POSITIVE, Interval, check

IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]
FloatArray = npt.NDArray[np.float64]


MAX_WORKERS = 2**31 - 1  # the hash family maps 32 bits onto the workers


# The groupings' parameter checks, by the vocabulary of ``repart.validation``.


def check_count(name: str, value: object, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer in [minimum, maximum] (bools are not integers here); ``InvalidInput(name)`` otherwise."""
    return cast(int, check(name, value, Interval(int, minimum, maximum)))


def check_fraction(name: str, value: object) -> float:
    """A number in (0, 1]; ``InvalidInput(name)`` otherwise."""
    return cast(float, check(name, value, FRACTION))


def default_theta(workers: int) -> float:
    """The head threshold θ = 1/(5n) of D-Choices (§III-A), also FISH's."""
    return 1 / (5 * workers)


def check_positive(name: str, value: object) -> float:
    """A finite number > 0; ``InvalidInput(name)`` otherwise."""
    return cast(float, check(name, value, POSITIVE))


def check_rates(rates: object, workers: int | None = None) -> FloatArray:
    """Worker service rates μ_i: a non-empty 1-d array of finite numbers > 0 (``workers`` of them);
    ``InvalidInput("rates")`` otherwise."""
    array = np.asarray(rates)
    if array.dtype.kind not in "iuf":
        raise InvalidInput("rates", f"must be a real array (float64), got dtype {array.dtype}")
    if array.ndim != 1 or array.size == 0:
        raise InvalidInput("rates", f"must be a non-empty 1-d array, got shape {array.shape}")
    if workers is not None and array.size != workers:
        raise InvalidInput("rates", f"must have length n = {workers}, got {array.size}")
    values = np.ascontiguousarray(array, dtype=np.float64)
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise InvalidInput("rates", "must be finite numbers > 0 (every μ_i in (0, inf)), got one outside")
    return values


class Grouping(ABC):
    """A stream grouping: ``route(key_hashes, sources)`` returns the worker of every tuple, in order.

    ``key_hashes`` are the keys' XXH64 hashes (uint64, ``repart.partitioning.hashing``); ``sources``
    the source each tuple enters at, in [0, S). State persists across calls.
    """

    scheme: ClassVar[str]

    def __init__(self, workers: int, sources: int, *, seed: int = 0) -> None:
        self.workers = check_count("workers", workers, maximum=MAX_WORKERS)
        self.sources = check_count("sources", sources)
        self.seed = cast(int, check("seed", seed, Interval(int, None, None)))
        # Local load estimation (PKG §3.2): what each source has sent to each worker.
        self._loads = np.zeros((self.sources, self.workers), dtype=np.int64)
        self._seeds = function_seeds(self.seed, 2)  # H_1 and H_2; kernels compute further seeds

    @property
    def loads(self) -> IntArray:
        """Tuples each source has sent to each worker, shape (S, n) (a copy)."""
        return self._loads.copy()

    def route(self, key_hashes: UIntArray, sources: npt.ArrayLike) -> IntArray:
        """Route the tuples in order and return each one's worker (int64 in [0, n))."""
        hashes, origins = self._check_stream(key_hashes, sources)
        out = np.empty(hashes.size, dtype=np.int64)
        if hashes.size:
            self._route(hashes, origins, out)
        return out

    @abstractmethod
    def _route(self, key_hashes: UIntArray, sources: IntArray, out: IntArray) -> None:
        """Write the worker of every tuple into ``out``, updating the grouping's state."""

    def head_size(self) -> int:
        """Distinct keys some source treats specially now (its head, hot keys or widened keys; 0 if none)."""
        return 0

    def max_choices(self) -> int:
        """The most workers a key may be sent to: 1 for KG, 2 for PKG, n for SG; for D-Choices the
        sources' d, for FISH and DKG the widest worker count any key has reached (FISH's never shrink)."""
        return 2

    def _check_stream(self, key_hashes: object, sources: npt.ArrayLike) -> tuple[UIntArray, IntArray]:
        if not isinstance(key_hashes, np.ndarray) or key_hashes.dtype != np.uint64 or key_hashes.ndim != 1:
            raise InvalidInput(
                "key_hashes",
                f"must be a one-dimensional numpy array of dtype uint64, got {_described(key_hashes)}",
            )
        origins = np.asarray(sources)
        if origins.ndim != 1 or origins.shape != key_hashes.shape:
            raise InvalidInput(
                "sources",
                f"must be one-dimensional with one entry per key hash ({key_hashes.size}), "
                f"got shape {origins.shape}",
            )
        if origins.size and origins.dtype.kind not in "iu":
            raise InvalidInput("sources", f"must be integers, got dtype {origins.dtype}")
        origins = origins.astype(np.int64, copy=False)
        if origins.size and (origins.min() < 0 or origins.max() >= self.sources):
            raise InvalidInput(
                "sources",
                f"must be source ids in [0, {self.sources - 1}], got {origins.min()} to {origins.max()}",
            )
        return np.ascontiguousarray(key_hashes), np.ascontiguousarray(origins)


def _described(value: object) -> str:
    """The dtype and shape of an array, the type of anything else: what an array check was given."""
    if isinstance(value, np.ndarray):
        return f"dtype {value.dtype} and shape {value.shape}"
    return f"a {type(value).__name__}"
