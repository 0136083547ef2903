"""Which channels a split key may use: each scheme's candidate rule, for a batch.

A split key's candidates start with its home (the home function's channel) and are distinct channels
in [0, N). How many a head key gets (``choice_counts``) and which (``candidate_lists``):

- **pkg**: 2, the home and the first hash choice that differs from it (PKG's two choices).
- **dchoices**: d from Proposition IV.1 on the head's frequencies (decreasing) and the rest's mass,
  with the rest *key-preserving* (``split_choices``), clamped to [2, N]; the home, then the first
  d − 1 hash choices that differ from it.
- **wchoices**, **rr**: all N, the home first, then the others in increasing order.
- **fish**: d_k = min(N, max(floor, ⌈spread·N·f_k⌉)) with floor = max(2, ⌈N·F_H/|H|⌉), F_H the head's
  mass: FISH's rule (``groupings.fish``) applied to the window; the home, then the first distinct
  channels met clockwise on FISH's consistent-hash ring (``groupings.ring``) from the key, skipping
  the home.
- **dkg**: w contiguous channels home, home + 1, … (mod N). DKG scales a key out while its least
  loaded candidate is at or above L_s = L_i + √L_i percent of the load (L_i = 100/N). In a batch,
  with the key spread evenly over its w candidates on top of the rest spread evenly over all N, every
  candidate carries f/w + (1 − F_H)/N: w is the smallest width ≥ 2 at which that is below L_s/100
  (N when none is).

Hash choices are the channels in *rendezvous order*: channel c scores ``mix64(h(k) XOR seed_c)``
(``groupings.hashes``: SplitMix64's finaliser, seed_c the family's c-th seed, h(k) the key's XXH64
hash) and the order is by decreasing score. It is the same hash family the groupings use, read as
highest-random-weight hashing rather than ``H_j(k) mod N``: a larger d only adds channels, and when
N grows by one a key's order only gains the new channel, at a random rank (``H_j``'s multiply-shift
reduction changes about half of a key's choices).

A key that stays split keeps its state where it is: for the hash-choice and ring schemes its
candidates are the window's fresh choices (the counts above) *plus* the previous version's
candidates that still hold a partial (weight > 0). Dropping a candidate costs a consolidation (its
partial merged into the home), keeping or adding one costs nothing; a kept candidate that water-filling
leaves at weight 0 holds nothing and goes at the next build. So a key has more than the rule's count
only after N changed, while the old choices still carry its load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from repart.partitioning.groupings.dkg import scale_threshold
from repart.partitioning.groupings.hashes import function_seeds, mix_array
from repart.partitioning.groupings.ring import build_ring, walk
from repart.partitioning.split.function import SplitEntry
from repart.partitioning.split.params import SplitParams

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]


def choice_counts(params: SplitParams, frequencies: FloatArray, n: int) -> tuple[IntArray, int | None]:
    """Candidates per head key (in [2, N]) and D-Choices' d (None for the other schemes).

    ``frequencies`` are the head keys' estimated frequencies in decreasing order; N ≥ 2.
    """
    f = np.asarray(frequencies, dtype=np.float64)
    head_mass = float(f.sum())
    scheme = params.scheme
    d: int | None = None
    if scheme == "pkg":
        counts = np.full(f.size, 2)
    elif scheme == "dchoices":
        d = _clamp(split_choices(f, max(0.0, 1.0 - head_mass), n, params.epsilon), n)
        counts = np.full(f.size, d)
    elif scheme in ("wchoices", "rr"):
        counts = np.full(f.size, n)
    elif scheme == "fish":
        counts = fish_counts(f, n, params.spread)
    else:
        counts = dkg_widths(f, n)
    return counts.astype(np.int64), d


def split_choices(head: FloatArray, tail: float, n: int, epsilon: float) -> int:
    """Proposition IV.1 for a key-preserving tail: the smallest d ≥ max(2, ⌈p_1·N⌉) such that for
    every prefix h of the head

        Σ_{i≤h} p_i + (b_h/N)^d Σ_{h<i≤|H|} p_i + (b_h/N) Σ_{i>|H|} p_i ≤ b_h (1/N + ε),

    b_h = N − N(1 − d/N)^h (as ``groupings.head.optimal_choices``), or N when none below N does.

    The proposition bounds the expected load of the b_h channels that serve the first h head keys:
    those keys, the later head keys whose d choices all fall among them, and the tail keys that
    cannot avoid them. In the papers a tail key has PKG's two choices, so it lands there with
    probability (b_h/N)²; in split mode a tail key stays on its one home, so with probability b_h/N.
    With the paper's exponent, d stays 2–3 up to N = 32 at z = 1, too few for the hashed tail
    (docs/DECISIONS.md, "Split mode: schemes, head and weights").
    """
    if head.size == 0:
        return 2
    prefix = np.cumsum(head)
    reach = np.arange(1, head.size + 1)
    for d in range(max(2, math.ceil(float(head[0]) * n)), n):
        share = 1.0 - (1.0 - d / n) ** reach
        load = prefix + share**d * (prefix[-1] - prefix) + share * tail
        if np.all(load <= n * share * (1.0 / n + epsilon)):
            return d
    return n


def fish_counts(frequencies: FloatArray, n: int, spread: float) -> IntArray:
    """FISH's d_k = min(N, max(floor, ⌈spread·N·f_k⌉)), floor = max(2, ⌈N·F_H/|H|⌉)."""
    if frequencies.size == 0:
        return np.empty(0, dtype=np.int64)
    floor = max(2, math.ceil(n * float(frequencies.sum()) / frequencies.size))
    return np.array([min(n, max(floor, math.ceil(spread * n * f))) for f in frequencies.tolist()])


def dkg_widths(frequencies: FloatArray, n: int) -> IntArray:
    """The smallest w in [2, N] with f/w + (1 − F_H)/N < L_s/100 (see the module docstring), else N."""
    limit = scale_threshold(n) / 100.0
    rest = max(0.0, 1.0 - float(frequencies.sum())) / n
    widths = []
    for f in frequencies.tolist():
        w = 2
        while w < n and f / w + rest >= limit:
            w += 1
        widths.append(w)
    return np.array(widths, dtype=np.int64)


def candidate_lists(
    params: SplitParams,
    homes: IntArray,
    key_hashes: UIntArray,
    counts: IntArray,
    n: int,
    previous: Sequence[SplitEntry | None] | None = None,
) -> list[tuple[int, ...]]:
    """Each head key's candidates, its home first, ``counts[i]`` distinct channels in [0, N).

    ``previous[i]`` is the key's entry in the previous split function (None when it was not split):
    a hash-choice or ring scheme keeps the candidates that hold a partial (see the module docstring).
    """
    scheme = params.scheme
    if scheme in ("wchoices", "rr"):
        return [(home, *(c for c in range(n) if c != home)) for home in homes.tolist()]
    if scheme == "dkg":
        return [
            tuple((home + j) % n for j in range(count))
            for home, count in zip(homes.tolist(), counts.tolist(), strict=True)
        ]
    if scheme == "fish":
        orders = [ring_order(key, n, params) for key in np.asarray(key_hashes, dtype=np.uint64).tolist()]
    else:
        orders = list(rendezvous_order(key_hashes, n, params.seed))
    before = list(previous) if previous is not None else [None] * len(orders)
    rows = zip(homes.tolist(), orders, counts.tolist(), before, strict=True)
    return [_chosen(home, order.tolist(), count, entry) for home, order, count, entry in rows]


def _chosen(home: int, order: list[int], count: int, entry: SplitEntry | None) -> tuple[int, ...]:
    """The home, the first ``count − 1`` other channels of ``order`` (every channel, in the scheme's
    order) and the previous candidates that hold a partial (weight > 0), listed in ``order``."""
    chosen = {c for c in order if c != home}
    fresh = [c for c in order if c != home][: count - 1]
    held: set[int] = set()
    if entry is not None:
        held = {c for c, w in zip(entry.candidates, entry.weights, strict=True) if w > 0 and c in chosen}
    keep = set(fresh) | held
    return (home, *(c for c in order if c in keep))


def rendezvous_order(key_hashes: UIntArray, n: int, seed: int) -> IntArray:
    """(keys, N): every channel of each key by decreasing ``mix64(h(k) XOR seed_c)``."""
    hashes = np.asarray(key_hashes, dtype=np.uint64)
    seeds = function_seeds(seed, n)
    scores = mix_array((hashes[:, None] ^ seeds[None, :]).ravel()).reshape(hashes.size, n)
    return np.argsort(~scores, axis=1, kind="stable").astype(np.int64)


def ring_order(key_hash: int, n: int, params: SplitParams) -> IntArray:
    """Every channel, in the order met clockwise from the key on FISH's ring (``groupings.ring``)."""
    positions, owners, buckets = _ring(n, params.virtual_nodes, params.seed)
    out = np.zeros((1, n), dtype=np.int32)
    found = walk(positions, owners, buckets, np.uint64(key_hash), n, out, 0, np.zeros(n + 1, dtype=np.int64))
    return out[0, :found].astype(np.int64)


@lru_cache(maxsize=8)
def _ring(n: int, virtual_nodes: int, seed: int) -> tuple[UIntArray, IntArray, IntArray]:
    return build_ring(n, virtual_nodes, seed)


def _clamp(d: int, n: int) -> int:
    return max(2, min(int(d), n))
