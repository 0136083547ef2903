"""Slot tables: the consistent hash H_c of a partition function (Gedik §4.1.1).

A slot table ``T[0..2^S)`` maps every slot to a channel in ``[0, N)``; a key that the explicit map does
not hold goes to ``T[slot(key)]``. The table is derived deterministically from ``(N, ConsistentSpec, S)``
and never stored. Four methods:

- ``ring``: Gedik's consistent hash (§4.1.1, after Karger et al.). Channel ``c`` owns ``replicas``
  virtual nodes at the unsigned 64-bit positions ``mmh3.hash64(f"{c}:{v}", seed)[0]`` (the first half
  of MurmurHash3_x64_128) for ``v`` in ``[0, replicas)``; slot ``s`` belongs to the first virtual node
  at or after its start position ``s << (64 - S)``, wrapping around to the smallest position. Equal
  positions are ordered by channel id, so the lower channel wins a tie.
- ``jump``: ``T[s] = JumpConsistentHash(mix(s), N)`` (Lamping & Veach 2014, "A Fast, Minimal Memory,
  Consistent Hash Algorithm"), where ``mix(s)`` is the SplitMix64 output function applied to the
  state ``s XOR seed``: ``z = (s ^ seed) + 0x9E3779B97F4A7C15``, ``z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9``,
  ``z = (z ^ z >> 27) * 0x94D049BB133111EB``, ``mix = z ^ z >> 31`` (all modulo 2^64). Jump needs
  well-spread 64-bit keys; consecutive slot numbers are not.
- ``prefix``: built channel by channel. One channel owns every slot; channel ``c`` joins by taking
  from each channel before it the **lowest-numbered** slots it gives up, so that every channel keeps
  ``⌊2^S / (c + 1)⌋`` slots, one more for the first ``2^S mod (c + 1)`` channels that have one to
  keep (lowest channel id first), and channel ``c`` gets ``⌊2^S / (c + 1)⌋``. Slot counts differ by
  at most one at every N. A state file holds its rows sorted by slot (``repart.state.files``), and
  the slots a channel gives to a new one are the lowest it owns, so a scale-out takes one contiguous
  run of rows from every file: the new channel reads about what it owns, not every row group that
  holds one of its scattered slots (``benchmarks/state_scaling.py``). No seed: the table depends on
  N and S alone.
- ``mod``: ``T[s] = s mod N``, the *uniform hashing* baseline written as a slot table. It is not
  consistent: going from N to N+1 channels moves almost every slot.

``ring``, ``jump`` and ``prefix`` are consistent: growing N to N+1 moves slots only to channel N, and
shrinking N+1 to N moves only the slots of channel N.

Default method, by measurement (``benchmarks/consistent_balance.py``: S = 16, ring with 1000 virtual
nodes; the max/min ratio (under each method's name) and coefficient of variation (CV) of the slot
count per channel; build time from cold caches, 2 shared cores). With the default seed ``RING_SEED``,
then averaged over seeds 0..19::

      N |    ring     CV    build |    jump     CV    build |  prefix     CV    build
      2 |   1.044  2.14%   3.3 ms |   1.003  0.17%   7.9 ms |   1.000  0.00%   1.9 ms
      4 |   1.087  3.30%   3.5 ms |   1.012  0.42%   8.0 ms |   1.000  0.00%   2.1 ms
      8 |   1.068  1.92%   5.9 ms |   1.027  0.95%  10.9 ms |   1.000  0.00%   3.8 ms
     10 |   1.075  1.87%   8.7 ms |   1.038  1.15%  15.3 ms |   1.000  0.01%   2.3 ms
     16 |   1.141  3.33%  12.3 ms |   1.048  1.30%   8.8 ms |   1.000  0.00%   3.4 ms
     32 |   1.144  3.56%  31.8 ms |   1.065  1.63%  10.0 ms |   1.000  0.00%   5.5 ms
     64 |   1.180  3.03%  53.4 ms |   1.188  3.21%  17.7 ms |   1.000  0.00%  13.2 ms

      2 |   1.038  1.83%   2.9 ms |   1.001  0.06%   6.2 ms |   1.000  0.00%   1.7 ms
      4 |   1.062  2.35%   4.2 ms |   1.013  0.50%   7.5 ms |   1.000  0.00%   1.5 ms
      8 |   1.084  2.61%   7.3 ms |   1.021  0.59%   9.4 ms |   1.000  0.00%   2.4 ms
     10 |   1.102  2.95%   8.4 ms |   1.040  1.01%   8.8 ms |   1.000  0.01%   2.3 ms
     16 |   1.117  3.06%  12.9 ms |   1.048  1.28%  10.3 ms |   1.000  0.00%   3.8 ms
     32 |   1.144  3.03%  26.5 ms |   1.076  1.82%  15.1 ms |   1.000  0.00%   4.4 ms
     64 |   1.167  3.32%  59.4 ms |   1.131  2.96%  15.4 ms |   1.000  0.00%   6.1 ms

``prefix`` is the default. Its slot counts differ by at most one at every N, where the ring's arcs keep
a spread approaching 1/sqrt(replicas) (about 3 %) and jump's a binomial's (CV up to about sqrt((N − 1)
/ 2^S)); it builds in under 15 ms at these N (slower than jump at large N: each join walks every
earlier channel while ⌊2^S / N⌋ drops), and has no parameter. What chose it is the state store: with
jump, the slots a new channel takes are scattered over every file's row groups, and after a scale-out
32 → 33 of a 10^7-key store the new channel read 7.35 times what a fresh store's channel reads, its
migration wrote 0.54 % of the state and took 3.4 s; with prefix they are one run of every file: 1.23
times, 0.02 % and 0.36 s (``benchmarks/state_scaling.py``). ``jump`` and ``ring`` stay available
(``ring`` for fidelity to the paper), and a stored function keeps the method it was built with.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import cast

import mmh3
import numpy as np
import numpy.typing as npt

from repart.partitioning.domain import (
    DEFAULT_METHOD,
    MAX_CHANNELS,
    METHODS,
    ConsistentMethod,
    check_slot_bits,
)
from repart.validation import Interval, Options, check

DEFAULT_REPLICAS = 1000
MAX_REPLICAS = 100_000
# 0x72657061 is ASCII "repa": the MurmurHash3 seed of ring positions and the jump mixing seed.
RING_SEED = 0x72657061
MAX_SEED = 2**32 - 1  # mmh3 seeds are unsigned 32-bit

N_CHANNELS = Interval(int, 1, MAX_CHANNELS)
METHOD = Options(METHODS)
REPLICAS = Interval(int, 1, MAX_REPLICAS)
SEED = Interval(int, 0, MAX_SEED)

_GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_JUMP_LCG = np.uint64(2862933555777941757)


def check_n_channels(n_channels: object) -> int:
    """The channel count as an int in [1, MAX_CHANNELS]; ``InvalidInput("n_channels")`` otherwise."""
    return cast(int, check("n_channels", n_channels, N_CHANNELS))


@dataclass(frozen=True)
class ConsistentSpec:
    """How the slot table is derived: the method and its parameters.

    ``replicas`` is the number of virtual nodes per channel (``ring`` only); ``seed`` is the MurmurHash3
    seed of ``ring`` and the mixing seed of ``jump``. Both are part of the serialized function whatever
    the method.
    """

    method: ConsistentMethod = DEFAULT_METHOD
    replicas: int = DEFAULT_REPLICAS
    seed: int = RING_SEED

    def __post_init__(self) -> None:
        check("method", self.method, METHOD)
        object.__setattr__(self, "replicas", check("replicas", self.replicas, REPLICAS))
        object.__setattr__(self, "seed", check("seed", self.seed, SEED))


@functools.lru_cache(maxsize=32, typed=True)
def slot_table(n_channels: int, spec: ConsistentSpec, slot_bits: int) -> npt.NDArray[np.int32]:
    """The read-only slot table ``T`` (length ``2**slot_bits``, channels in ``[0, n_channels)``).

    The methods are described in the module docstring. Cached per argument triple: every call with
    equal arguments returns the same array.
    """
    n = check_n_channels(n_channels)
    bits = check_slot_bits(slot_bits)
    if spec.method == "ring":
        table = _ring_table(n, spec.replicas, spec.seed, bits)
    elif spec.method == "jump":
        table = _jump_table(n, spec.seed, bits)
    elif spec.method == "prefix":
        table = _prefix_table(n, bits)
    else:
        table = (np.arange(2**bits) % n).astype(np.int32)
    table.flags.writeable = False
    return table


def clear_caches() -> None:
    """Drop every cached slot table and ring position array (to free memory or time a cold build)."""
    slot_table.cache_clear()
    _channel_positions.cache_clear()


@functools.lru_cache(maxsize=4096)
def _channel_positions(channel: int, replicas: int, seed: int) -> npt.NDArray[np.uint64]:
    """Ring positions of one channel's virtual nodes; independent of N, so N+1 reuses N's work."""
    return np.fromiter(
        (mmh3.hash64(f"{channel}:{v}", seed, signed=False)[0] for v in range(replicas)),
        dtype=np.uint64,
        count=replicas,
    )


def _ring_table(n: int, replicas: int, seed: int, slot_bits: int) -> npt.NDArray[np.int32]:
    """Each slot goes to the owner of the first virtual node at or after the slot's start, wrapping."""
    positions = np.concatenate([_channel_positions(c, replicas, seed) for c in range(n)])
    owners = np.repeat(np.arange(n, dtype=np.int32), replicas)
    order = np.lexsort((owners, positions))  # by position, then channel id on ties
    starts = np.arange(2**slot_bits, dtype=np.uint64) << np.uint64(64 - slot_bits)
    node = np.searchsorted(positions[order], starts, side="left")
    node[node == positions.size] = 0
    return owners[order][node]


def _prefix_table(n: int, slot_bits: int) -> npt.NDArray[np.int32]:
    """Channels 1 … n − 1 join in turn, each taking the lowest slots every earlier channel gives up
    (module docstring).

    With ``c`` channels, channel ``i`` holds ⌊2^S / c⌋ slots, one more when ``i < 2^S mod c``, so a
    join's gifts follow from the two sizes: every channel gives the drop in ⌊2^S / c⌋, and those
    between the two remainders one slot more or less; when the floor does not drop, only channels
    ``[2^S mod (c + 1), 2^S mod c)`` give, one slot each. Each channel's slots are a sorted list made
    when it joins, of which it only ever gives up a prefix: the lists sit in one array (``pool``,
    channel ``i``'s from ``offsets[i]``, ``starts[i]`` of them given up), and a join gathers the
    givers' prefixes at once. The lists add up to 2^S + Σ_{c=2..n} ⌊2^S / c⌋ ≤ 2^S · (1 + ln n) slots.
    A join walks every earlier channel while the floor drops (up to about c = 2^(S/2)), and the
    givers alone after that; each is a few numpy calls (under 15 ms in all at N ≤ 64, module
    docstring; seconds at the largest N)."""
    total = 2**slot_bits
    starts, offsets = np.zeros(n, np.int64), np.zeros(n, np.int64)
    pool = np.empty(total + int((total // np.arange(2, n + 1, dtype=np.int64)).sum()), np.int32)
    pool[:total] = np.arange(total, dtype=np.int32)
    end = total
    for joining in range(1, n):
        held_base, held_extra = divmod(total, joining)
        base, extra = divmod(total, joining + 1)
        low, high = (0, joining) if held_base > base else (extra, held_extra)
        channels = np.arange(low, high)
        given = held_base - base + (channels < held_extra) - (channels < extra)
        taken = _runs(offsets[low:high] + starts[low:high], given)
        pool[end : end + taken.size] = np.sort(pool[taken])
        offsets[joining] = end
        end += taken.size
        starts[low:high] += given
    base, extra = divmod(total, n)
    sizes = base + (np.arange(n) < extra)
    table = np.empty(total, np.int32)
    table[pool[_runs(offsets + starts, sizes)]] = np.repeat(np.arange(n, dtype=np.int32), sizes)
    return table


def _runs(firsts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The positions ``firsts[i], firsts[i] + 1, …, firsts[i] + lengths[i] - 1`` of every run ``i``, in
    order."""
    return np.repeat(firsts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))


def _mix(values: npt.NDArray[np.uint64], seed: int) -> npt.NDArray[np.uint64]:
    """SplitMix64 output function of ``values XOR seed`` (see the module docstring)."""
    z = (values ^ np.uint64(seed)) + _GOLDEN_GAMMA
    z = (z ^ (z >> np.uint64(30))) * _MIX_1
    z = (z ^ (z >> np.uint64(27))) * _MIX_2
    return z ^ (z >> np.uint64(31))


def _jump_table(n: int, seed: int, slot_bits: int) -> npt.NDArray[np.int32]:
    """``JumpConsistentHash(mix(s), n)`` for every slot ``s``, all lanes at once."""
    return jump_hash_array(_mix(np.arange(2**slot_bits, dtype=np.uint64), seed), n)


def jump_hash_array(keys: npt.NDArray[np.uint64], n_buckets: int) -> npt.NDArray[np.int32]:
    """Lamping & Veach's JumpConsistentHash of every key into ``n_buckets`` >= 1 buckets, vectorized.

    A transcription of the paper's C++ code: lanes that have jumped past ``n_buckets`` drop out each
    round. The jump target is computed in doubles in the same order as the reference,
    ``(b + 1) * (double(1 << 31) / double((key >> 33) + 1))`` truncated to an integer, so every lane
    gives the bucket the C++ code gives.
    """
    result = np.empty(keys.size, dtype=np.int32)
    lanes = np.arange(keys.size)
    key = np.array(keys, dtype=np.uint64)
    jump = np.zeros(keys.size, dtype=np.int64)
    while lanes.size:
        bucket = jump
        key = key * _JUMP_LCG + np.uint64(1)
        ratio = float(1 << 31) / ((key >> np.uint64(33)) + np.uint64(1)).astype(np.float64)
        jump = ((bucket + 1).astype(np.float64) * ratio).astype(np.int64)
        done = jump >= n_buckets
        result[lanes[done]] = bucket[done]
        running = ~done
        lanes, key, jump = lanes[running], key[running], jump[running]
    return result
