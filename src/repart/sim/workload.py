"""Synthetic key distributions for the experiments of Gedik §5.1."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from repart.validation import NON_NEGATIVE, POSITIVE_INT, check

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


ZIPF_SKEW = NON_NEGATIVE  # z: a finite number >= 0 (0 is uniform)
DOMAIN = POSITIVE_INT  # |D|: the number of distinct keys


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
        check("z", self.z, ZIPF_SKEW)
        check("domain", self.domain, DOMAIN)

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
