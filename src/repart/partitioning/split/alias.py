"""A split key's candidate in O(1): Walker's alias method on integer masses.

A split key with d candidates and weights w gets D = 2^⌈log₂ d⌉ buckets of ``BUCKET_SPAN`` = C = 2^32 units
each. Its candidates' integer masses are

    m_j = t_j − t_{j−1},   t_j = min(D·C, round(D·C·s_j)) for j < d − 1,   t_{d−1} = D·C

(t_{−1} = 0; s_j = w_0 + … + w_j summed left to right in floating point, so t is non-decreasing):
they sum to exactly D·C. Each m_j is w_j·D·C up to one unit of rounding, the float sums' error (about
d·2^−53·D·C units: below one for d ≤ 64, about 2^11 at d = 2^16) and 1 − Σw, which validation allows
within 10^−9: when the weights sum to 1 − ε the last candidate absorbs ε·D·C, when they sum to 1 + ε the
candidates whose prefix sums pass 1 give it up (t stops at D·C). The D − d buckets past the last
candidate hold mass 0. Vose's construction of Walker's table ("A linear algorithm for generating
random numbers with a given distribution", IEEE TSE 17(9), 1991), run in integer arithmetic, fills
bucket b with its own candidate b up to a *cut* c_b and with its *alias* a_b above it. A 64-bit row
hash h (unsigned) picks

    b = h >> (64 − log₂ D)   (its top bits),   u = h mod 2^32   (its low 32 bits),
    candidate = b if u < c_b else a_b.

b and u are disjoint bits of h (log₂ D ≤ 16 since N ≤ 2^16), so over all 2^64 row hashes candidate j
gets exactly (Σ_{b = j} c_b + Σ_{a_b = j} (C − c_b)) / (D·C) = m_j / (D·C) of them. A candidate of
mass 0 is never picked: its own cut is 0 and only a candidate with mass left becomes an alias; a
bucket whose cut is C is its own alias. Every table is computed here, once per key, so the JVM's
expression (``repart.spark.split_route``) and ``SplitFunction.lookup`` read the same integers.

The JVM reads all of a function's tables from one array constant and names a key's table by a
25-bit offset (``repart.spark.split_route``): a split function holds at most ``MAX_ALIAS_BUCKETS``
buckets in all (``alias_buckets``), which ``SplitFunction`` checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

#: A bucket's units: the low 32 bits of a row hash choose between its candidate and its alias.
BUCKET_SPAN = 2**32
#: Buckets of all of a split function's tables: the JVM's codes carry a table's offset in 25 bits.
MAX_ALIAS_BUCKETS = 2**25


class AliasTable(NamedTuple):
    """Walker's table of one split key: D = 2^``bucket_bits`` buckets; bucket b holds candidate b
    (an index into the key's candidates) below ``cuts[b]`` (in [0, C]) and candidate ``aliases[b]``
    from it on."""

    bucket_bits: int
    cuts: tuple[int, ...]
    aliases: tuple[int, ...]

    def pick(self, row_hash: int) -> int:
        """The candidate index of an unsigned 64-bit ``row_hash`` (module docstring)."""
        bucket = row_hash >> (64 - self.bucket_bits)
        return bucket if row_hash % BUCKET_SPAN < self.cuts[bucket] else self.aliases[bucket]

    @classmethod
    def from_weights(cls, weights: Sequence[float]) -> AliasTable:
        """Walker's table of weights ``w`` (≥ 0, summing to 1, at least two): Vose's construction on the
        integer masses (module docstring). Deterministic: the buckets below C and those at or above it
        are taken from two stacks filled in index order."""
        bits = bucket_bits(len(weights))
        buckets = alias_buckets(len(weights))
        masses = integer_masses(weights, buckets * BUCKET_SPAN) + [0] * (buckets - len(weights))
        small = [b for b in range(buckets) if masses[b] < BUCKET_SPAN]
        large = [b for b in range(buckets) if masses[b] >= BUCKET_SPAN]
        cuts, aliases = [BUCKET_SPAN] * buckets, list(range(buckets))
        while small and large:  # the unfilled buckets' masses sum to C times their count
            under, over = small.pop(), large.pop()
            cuts[under], aliases[under] = masses[under], over
            masses[over] -= BUCKET_SPAN - masses[under]
            (small if masses[over] < BUCKET_SPAN else large).append(over)
        # What is left is large with mass exactly C (the sum is C times the count, each at least C):
        # those buckets keep cut C and alias themselves.
        return cls(bits, tuple(cuts), tuple(aliases))


def bucket_bits(candidates: int) -> int:
    """⌈log₂ d⌉ for d ≥ 2 candidates: the buckets are the smallest power of two that holds them."""
    return (candidates - 1).bit_length()


def alias_buckets(candidates: int) -> int:
    """D = 2^⌈log₂ d⌉: the buckets of a table of d ≥ 2 candidates."""
    return 1 << bucket_bits(candidates)


def integer_masses(weights: Sequence[float], total: int) -> list[int]:
    """``m_j = t_j − t_{j−1}`` with ``t_j = min(total, round(total · s_j))``, s_j the left-to-right float
    sum of ``w_0 … w_j``, for every weight but the last, whose ``t`` is ``total``: non-negative
    integers summing to ``total``."""
    masses: list[int] = []
    prefix, previous = 0.0, 0
    for weight in weights[:-1]:
        prefix += weight
        reached = min(total, round(prefix * total))
        masses.append(reached - previous)
        previous = reached
    masses.append(total - previous)
    return masses
