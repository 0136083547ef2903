"""Synthetic key distributions for the experiments of Gedik §5.1."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def check_zipf(z: float) -> float:
    if not isinstance(z, int | float) or isinstance(z, bool) or not math.isfinite(z) or z < 0:
        raise ValueError(f"zipf (skew z) must be a finite number >= 0, got {z!r}")
    return float(z)


def check_domain(domain: int) -> int:
    if isinstance(domain, bool) or not isinstance(domain, int) or domain < 1:
        raise ValueError(f"domain (|D|) must be an integer >= 1, got {domain!r}")
    return domain


@dataclass(frozen=True)
class ZipfWorkload:
    """Zipf(z) over |D| integer keys: the k-th most frequent key has frequency ∝ 1/k^z (§5.1).

    ``keys[k]`` is the key of rank k + 1: a permutation of 0 … |D| − 1 drawn from ``key_seed``, so that
    different runs put the hot keys in different slots (the paper averages 5 runs).
    """

    z: float
    domain: int
    key_seed: int = 0

    def __post_init__(self) -> None:
        check_zipf(self.z)
        check_domain(self.domain)

    @cached_property
    def keys(self) -> IntArray:
        """The key of every rank, most frequent first."""
        return np.random.default_rng(self.key_seed).permutation(self.domain).astype(np.int64)

    @cached_property
    def frequencies(self) -> FloatArray:
        """The true frequencies f(d), summing to 1."""
        weights: FloatArray = np.arange(1, self.domain + 1, dtype=np.float64) ** -self.z
        return np.asarray(weights / weights.sum(), dtype=np.float64)

    @cached_property
    def _cumulative(self) -> FloatArray:
        cumulative = np.cumsum(self.frequencies)
        cumulative[-1] = 1.0
        return cumulative

    def sample(self, size: int, rng: np.random.Generator) -> IntArray:
        """``size`` keys drawn independently with the true frequencies."""
        return self.keys[self.sample_ranks(size, rng)]

    def sample_ranks(self, size: int, rng: np.random.Generator) -> IntArray:
        """``size`` popularity ranks (0 = most frequent) drawn independently with the true frequencies."""
        return np.searchsorted(self._cumulative, rng.random(size), side="right").astype(np.int64)
