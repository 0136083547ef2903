"""The hash family every grouping draws its candidate workers from.

The papers assume "d independent hash functions H_1 … H_d : K → [n]" (PKG §5, D-Choices §III-B) and
leave the family open; Storm uses Murmur3 with seeds 13 and 17, the D-Choices simulator seeds that are
consecutive primes. repart routes on the key's XXH64 hash, so the j-th function is
``H_j(k) = ⌊(mix64(h(k) XOR seed_j) >> 32) · n / 2^32⌋`` with ``mix64`` the SplitMix64 finaliser (a
bijection of 64-bit integers with full avalanche) and ``seed_j = mix64(seed + j·φ)`` (φ = 2^64/golden
ratio): one grouping seed gives every H_j, and H_1 … H_d are prefix-nested (a larger d only adds
functions). The multiply-shift reduction (Lemire's "fastrange") replaces ``mod n``: it maps the top
32 bits onto [0, n) as evenly (bias below n/2^32) without a 64-bit division, the costliest step of
a PKG decision. Groupings take n < 2^31.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

UIntArray = npt.NDArray[np.uint64]

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S32 = np.uint64(32)


@numba.njit(cache=True, inline="always")
def mix64(x: np.uint64) -> np.uint64:
    """SplitMix64's finaliser: ``z = x + φ; z = (z ^ z>>30)·M1; z = (z ^ z>>27)·M2; z ^ z>>31``."""
    z = x + GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@numba.njit(cache=True, inline="always")
def choice(key_hash: np.uint64, seed: np.uint64, n: int) -> int:
    """``H_j(k) = ⌊(mix64(h(k) XOR seed_j) >> 32) · n / 2^32⌋`` for the seed of function j."""
    return int(np.int64(((mix64(key_hash ^ seed) >> _S32) * np.uint64(n)) >> _S32))  # int64, not uint64


@numba.njit(cache=True, inline="always")
def function_seed(base: np.uint64, j: int) -> np.uint64:
    """``seed_j = mix64(seed + j·φ)``, for kernels that need more functions than they hold seeds for."""
    return mix64(base + np.uint64(j) * GOLDEN)


def seed_base(seed: int) -> np.uint64:
    """The grouping seed as the 64-bit base of the ``seed_j``."""
    return np.uint64(seed % 2**64)


def function_seeds(seed: int, count: int) -> UIntArray:
    """``seed_j`` for j = 0 … count − 1, kept by kernels for their first functions."""
    return _seed_array(seed_base(seed), count)


@numba.njit(cache=True)
def _seed_array(base: np.uint64, count: int) -> UIntArray:
    out = np.empty(count, dtype=np.uint64)
    for j in range(count):
        out[j] = function_seed(base, j)
    return out


@numba.njit(cache=True)
def mix_array(values: UIntArray) -> UIntArray:
    """``mix64`` of every value."""
    out = np.empty_like(values)
    for i in range(values.size):
        out[i] = mix64(values[i])
    return out
