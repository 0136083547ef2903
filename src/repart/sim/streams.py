"""Tuple streams for the stream-grouping simulations (PKG, D-Choices/W-Choices, FISH, DKG).

Every generator returns a :class:`KeyStream`: one dense key id, the key's 64-bit hash and the source
(upstream instance) for each tuple, in arrival order. The workloads are those of the papers the
simulator reproduces:

* ``zipf`` — Zipf(z) over K keys, p_r ∝ 1/r^z. Sampled i.i.d. as in Nasir et al., "The Power of Both
  Choices: Practical Load Balancing for Distributed Stream Processing Engines" (ICDE 2015), or
  with exact counts, as the generator of Nasir et al., "When Two Choices Are not Enough: Balancing at
  Scale in Distributed Stream Processing" (ICDE 2016, D-Choices/W-Choices) does.
* ``ln1``/``ln2`` — the two log-normal workloads of the PKG paper (Table 1: LN1 with μ = 1.789,
  σ = 2.366, p1 = 14.71 %; LN2 with μ = 2.245, σ = 1.133, p1 = 7.01 %).
* ``drift`` — Zipf phases whose hot keys change: the time-evolving streams of Huang et al., "Efficient
  Time-Evolving Stream Processing at Scale" (FISH, arXiv:1806.00760; its recent-hot-key tracking is only
  exercised by a stream whose heavy hitters move).
* ``dkg`` — the synthetic data of Dalabasmaz & Can, "Dynamic Key Grouping" (§5.1, Table 2: the
  country-skew data sets): one top key with share ``skew``, the other K − 1 keys (204 country names in
  the paper) sharing the rest equally.
* ``words`` — English word frequencies from the ``wordfreq`` package, a stand-in for the PKG paper's
  word-count workloads (Wikipedia, Twitter).

Key hashes are ``XXH64(seed 42)`` of the key (:mod:`repart.partitioning.hashing`), computed once per
distinct key and gathered per tuple. An integer key is its id (for the log-normal workloads, the
rounded sample value); a word is hashed as its UTF-8 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import pairwise

import numpy as np
import numpy.typing as npt
import wordfreq

from repart.errors import InvalidInput
from repart.partitioning.hashing import hash_int64_array, hash_str_keys
from repart.sim.workload import ZIPF_SKEW, ZipfWorkload
from repart.validation import BOOLEAN, NON_NEGATIVE_INT, POSITIVE_INT, Interval, Kind, Options, check

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
HashArray = npt.NDArray[np.uint64]

WORKLOADS = ("zipf", "ln1", "ln2", "drift", "dkg", "words")
SOURCE_MODES = ("round_robin", "skewed")
LOGNORMAL_PARAMETERS: dict[str, tuple[float, float]] = {
    "ln1": (1.789, 2.366),  # PKG paper, Table 1: (μ, σ) of LN1
    "ln2": (2.245, 1.133),  # PKG paper, Table 1: (μ, σ) of LN2
}
DKG_KEYS = 204  # the DKG paper's synthetic key set: 204 country names
DEFAULT_KEYS = 10_000  # K for zipf, drift and words when make_stream is not told
DEFAULT_PHASES = 5
SOURCE_SALT = 0x5EED5EED  # mixed into the key hash for skewed sources; differs from the hash seed 42
WORD_LANGUAGE = "en"

_SPLITMIX_M1 = np.uint64(0xBF58476D1CE4E5B9)
_SPLITMIX_M2 = np.uint64(0x94D049BB133111EB)
# rint(exp(x)) stays far below this for any normal sample numpy can draw; the clip only keeps the
# float → int64 cast defined.
_LOGNORMAL_CLIP = float(2**62)


@dataclass(frozen=True, eq=False)
class KeyStream:
    """A tuple stream: per tuple, a dense key id, the key's hash and the source it enters at.

    ``key_ids`` are in [0, ``distinct``); ``key_hashes[t]`` is the XXH64 (seed 42) of tuple t's key;
    ``sources`` are in [0, ``sources_count``). The arrays are parallel and in arrival order.
    """

    workload: str
    key_ids: IntArray
    key_hashes: HashArray
    sources: IntArray
    distinct: int
    sources_count: int

    def __post_init__(self) -> None:
        check("workload", self.workload, WORKLOAD)
        m = len(self.key_ids)
        if m < 1:
            raise InvalidInput("key_ids", "must be non-empty, got no tuple")
        for name in ("key_hashes", "sources"):
            if len(getattr(self, name)) != m:
                raise InvalidInput(
                    name, f"must have one entry per key id ({m}), got {len(getattr(self, name))}"
                )
        check("distinct", self.distinct, POSITIVE_INT)
        check("sources_count", self.sources_count, POSITIVE_INT)

    @property
    def messages(self) -> int:
        """m: the number of tuples."""
        return len(self.key_ids)

    @cached_property
    def counts(self) -> IntArray:
        """How many tuples carry each key id (length ``distinct``)."""
        return np.bincount(self.key_ids, minlength=self.distinct).astype(np.int64)

    @property
    def p1(self) -> float:
        """The empirical share of the most frequent key in this stream (the papers' p1)."""
        return float(self.counts.max()) / self.messages


# --- parameter checks -----------------------------------------------------------------

WORKLOAD = Options(WORKLOADS)
SOURCE_MODE = Options(SOURCE_MODES)
SKEW = Interval(float, 0, 1, closed="neither")  # the DKG workload's share of the top key
EXACT = (BOOLEAN, Kind(np.bool_, "a numpy bool"))


def _check_common(messages: object, sources: object, seed: object, source_mode: object) -> tuple[int, int]:
    m = int(check("messages", messages, POSITIVE_INT))
    s = check("sources", sources, POSITIVE_INT)
    check("seed", seed, NON_NEGATIVE_INT)
    check("source_mode", source_mode, SOURCE_MODE)
    return m, s


# --- building blocks ---------------------------------------------------------------------------------


def largest_remainder_counts(shares: FloatArray, total: int) -> IntArray:
    """Integer counts proportional to ``shares`` that sum to exactly ``total`` (Hamilton's method).

    Each entry gets ⌊share · total⌋ (shares are normalised first); the units left over go, one each, to
    the entries with the largest fractional remainders, ties to the lower index.
    """
    total = check("total", total, NON_NEGATIVE_INT)
    weights = np.asarray(shares, dtype=np.float64)
    if weights.ndim != 1 or weights.size == 0 or not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise InvalidInput("shares", "must be a non-empty 1-d array of finite numbers >= 0")
    if weights.sum() <= 0:
        raise InvalidInput("shares", "must have a positive sum, got 0")
    quotas = weights / weights.sum() * total
    counts: IntArray = np.floor(quotas).astype(np.int64)
    left = total - int(counts.sum())
    if left > 0:
        order = np.argsort(-(quotas - counts), kind="stable")
        counts[order[:left]] += 1
    elif left < 0:  # float rounding pushed the floors past the total: take from the smallest remainders
        order = np.argsort(quotas - counts, kind="stable")
        counts[order[:-left]] -= 1
    return counts


def skewed_sources(key_hashes: HashArray, sources: int) -> IntArray:
    """Source of each key under upstream key grouping: splitmix64(key_hash ^ SOURCE_SALT) mod S.

    The salt and the splitmix64 finalizer (Steele, Lea & Flood, "Fast Splittable Pseudorandom Number
    Generators", OOPSLA 2014) decorrelate the source from the downstream groupings, which use the key
    hash itself.
    """
    s = check("sources", sources, POSITIVE_INT)
    x = np.asarray(key_hashes, dtype=np.uint64) ^ np.uint64(SOURCE_SALT)
    x = (x ^ (x >> np.uint64(30))) * _SPLITMIX_M1
    x = (x ^ (x >> np.uint64(27))) * _SPLITMIX_M2
    x ^= x >> np.uint64(31)
    return (x % np.uint64(s)).astype(np.int64)


def _stream(
    workload: str,
    key_ids: IntArray,
    vocab_hashes: HashArray,
    sources: int,
    source_mode: str,
) -> KeyStream:
    """Gather the per-tuple hashes and sources from the per-key ones."""
    if source_mode == "round_robin":
        tuple_sources = np.arange(len(key_ids), dtype=np.int64) % sources
    else:
        tuple_sources = skewed_sources(vocab_hashes, sources)[key_ids]
    return KeyStream(
        workload=workload,
        key_ids=key_ids,
        key_hashes=vocab_hashes[key_ids],
        sources=tuple_sources,
        distinct=len(vocab_hashes),
        sources_count=sources,
    )


def _exact_shuffled(
    key_of_rank: IntArray, shares: FloatArray, messages: int, rng: np.random.Generator
) -> IntArray:
    """Each key exactly its largest-remainder share of ``messages`` times, in a random order."""
    counts = largest_remainder_counts(shares, messages)
    key_ids = np.repeat(key_of_rank, counts)
    rng.shuffle(key_ids)
    return key_ids


# --- generators --------------------------------------------------------------------------------------


def zipf_stream(
    z: float,
    keys: int,
    messages: int,
    sources: int,
    seed: int,
    *,
    exact: bool = False,
    source_mode: str = "round_robin",
) -> KeyStream:
    """Zipf(z) over K keys (p_r ∝ 1/r^z), the synthetic workload of the PKG and D-Choices papers.

    The key of each popularity rank is a random permutation of 0 … K − 1 (so the hottest key is not
    always id 0). ``exact=False`` draws the m tuples i.i.d.; ``exact=True`` is the D-Choices authors'
    generator: every key appears exactly its share of m times (largest remainder, total exactly m), and
    the sequence is shuffled.
    """
    z = check("z", z, ZIPF_SKEW)
    k = check("keys", keys, POSITIVE_INT)
    m, s = _check_common(messages, sources, seed, source_mode)
    check("exact", exact, *EXACT)
    rng = np.random.default_rng(seed)
    zipf = ZipfWorkload(z, k)
    key_of_rank = rng.permutation(k).astype(np.int64)
    if exact:
        key_ids = _exact_shuffled(key_of_rank, zipf.frequencies, m, rng)
    else:
        key_ids = key_of_rank[zipf.sample_ranks(m, rng)]
    return _stream("zipf", key_ids, hash_int64_array(np.arange(k, dtype=np.int64)), s, source_mode)


def lognormal_values(which: str, messages: int, seed: int) -> IntArray:
    """The integer keys of a log-normal workload: ``rint(exp(μ + σ·N(0,1)))`` per tuple.

    The N(0,1) samples are ``np.random.default_rng(seed).standard_normal(messages)``. Rounding to the
    nearest integer reproduces the PKG paper's Table 1 (p1 = 14.71 % for LN1, 7.01 % for LN2; about 16k
    and 1.1k distinct keys at 10^7 tuples); for LN1 the hottest key is 0, i.e. every sample below 1/2.
    """
    check("which", which, Options(tuple(LOGNORMAL_PARAMETERS)))
    m = int(check("messages", messages, POSITIVE_INT))
    check("seed", seed, NON_NEGATIVE_INT)
    mu, sigma = LOGNORMAL_PARAMETERS[which]
    normal = np.random.default_rng(seed).standard_normal(m)
    values = np.rint(np.exp(mu + sigma * normal))
    return np.minimum(values, _LOGNORMAL_CLIP).astype(np.int64)


def _dense_ranks(values: IntArray) -> tuple[IntArray, IntArray]:
    """The distinct values (ascending) and each value's index among them, like ``np.unique``.

    Non-negative values with a small maximum (the log-normal case) are ranked by a counting pass,
    several times faster than the sort ``np.unique`` does.
    """
    top = int(values.max())
    if int(values.min()) >= 0 and top <= max(4 * len(values), 1 << 20):
        present = np.bincount(values, minlength=top + 1) > 0
        rank_of_value = np.cumsum(present, dtype=np.int64) - 1
        return np.flatnonzero(present).astype(np.int64), rank_of_value[values]
    distinct, inverse = np.unique(values, return_inverse=True)
    return distinct.astype(np.int64), inverse.reshape(-1).astype(np.int64)


def lognormal_stream(
    which: str, messages: int, sources: int, seed: int, source_mode: str = "round_robin"
) -> KeyStream:
    """The PKG paper's LN1 or LN2 workload (``which`` ∈ {"ln1", "ln2"}); see :func:`lognormal_values`.

    Key ids are the dense ranks of the distinct values that occur (ascending value); each key's hash
    is that of its value.
    """
    m, s = _check_common(messages, sources, seed, source_mode)
    distinct_values, key_ids = _dense_ranks(lognormal_values(which, m, seed))
    return _stream(which, key_ids, hash_int64_array(distinct_values), s, source_mode)


def drift_phase_starts(messages: int, phases: int) -> IntArray:
    """The first tuple of each phase: ``phases`` equal segments of m, the last one taking the rest."""
    m = int(check("messages", messages, POSITIVE_INT))
    p = int(check("phases", phases, Interval(int, 1, m)))  # at most one phase per message
    return np.arange(p, dtype=np.int64) * (m // p)


def drift_stream(
    z: float,
    keys: int,
    messages: int,
    sources: int,
    seed: int,
    *,
    phases: int = DEFAULT_PHASES,
    source_mode: str = "round_robin",
) -> KeyStream:
    """A time-evolving Zipf stream for FISH: the hot keys change from phase to phase.

    The m tuples form ``phases`` consecutive segments (:func:`drift_phase_starts`); each is i.i.d.
    Zipf(z) over the same K keys with its own random rank → key permutation.
    """
    z = check("z", z, ZIPF_SKEW)
    k = check("keys", keys, POSITIVE_INT)
    m, s = _check_common(messages, sources, seed, source_mode)
    starts = drift_phase_starts(m, phases)
    rng = np.random.default_rng(seed)
    zipf = ZipfWorkload(z, k)
    key_ids = np.empty(m, dtype=np.int64)
    for start, stop in pairwise([*starts.tolist(), m]):
        key_of_rank = rng.permutation(k).astype(np.int64)
        key_ids[start:stop] = key_of_rank[zipf.sample_ranks(stop - start, rng)]
    return _stream("drift", key_ids, hash_int64_array(np.arange(k, dtype=np.int64)), s, source_mode)


def dkg_shares(skew: float, keys: int) -> FloatArray:
    """The DKG synthetic distribution by rank: ``skew`` for the top key, (1 − skew)/(K − 1) for each other."""
    share = check("skew", skew, SKEW)
    k = check("keys", keys, Interval(int, 2, None))
    shares = np.full(k, (1.0 - share) / (k - 1), dtype=np.float64)
    shares[0] = share
    return shares


def dkg_stream(
    skew: float, keys: int, messages: int, sources: int, seed: int, source_mode: str = "round_robin"
) -> KeyStream:
    """The DKG paper's synthetic data: exact counts of :func:`dkg_shares`, shuffled.

    Counts are the largest-remainder counts (total exactly m); which id is the top key is a random
    permutation, as for :func:`zipf_stream`. The paper uses K = 204 (:data:`DKG_KEYS`).
    """
    shares = dkg_shares(skew, keys)
    m, s = _check_common(messages, sources, seed, source_mode)
    k = len(shares)
    rng = np.random.default_rng(seed)
    key_of_rank = rng.permutation(k).astype(np.int64)
    key_ids = _exact_shuffled(key_of_rank, shares, m, rng)
    return _stream("dkg", key_ids, hash_int64_array(np.arange(k, dtype=np.int64)), s, source_mode)


@lru_cache(maxsize=1)
def english_vocabulary_size() -> int:
    """How many English words ``wordfreq`` ranks (the largest K :func:`word_stream` accepts)."""
    return len(wordfreq.top_n_list(WORD_LANGUAGE, 10**9))


@lru_cache(maxsize=8)
def _english_vocabulary(keys: int) -> tuple[tuple[str, ...], FloatArray, HashArray]:
    words = wordfreq.top_n_list(WORD_LANGUAGE, keys)
    frequencies = np.array([wordfreq.word_frequency(w, WORD_LANGUAGE) for w in words], dtype=np.float64)
    probabilities = frequencies / frequencies.sum()
    probabilities.flags.writeable = False
    hashes = hash_str_keys(words)
    hashes.flags.writeable = False
    return tuple(words), probabilities, hashes


def _check_word_keys(keys: object) -> int:
    return int(check("keys", keys, Interval(int, 1, english_vocabulary_size())))


def english_vocabulary(keys: int) -> tuple[list[str], FloatArray]:
    """The K most frequent English words (``wordfreq``), most frequent first, and their probabilities.

    Probabilities are ``wordfreq.word_frequency(w, "en")`` normalised over the K words. Word i has key
    id i in :func:`word_stream`, so id 0 is "the".
    """
    words, probabilities, _ = _english_vocabulary(_check_word_keys(keys))
    return list(words), probabilities.copy()


def _sample_categorical(probabilities: FloatArray, size: int, rng: np.random.Generator) -> IntArray:
    cumulative = np.cumsum(probabilities)
    cumulative[-1] = 1.0
    return np.searchsorted(cumulative, rng.random(size), side="right").astype(np.int64)


def word_stream(
    keys: int, messages: int, sources: int, seed: int, source_mode: str = "round_robin"
) -> KeyStream:
    """English word frequencies: m words drawn i.i.d. from :func:`english_vocabulary` (K words).

    Key id i is the i-th most frequent word; key hashes are of the words' UTF-8 bytes.
    """
    k = _check_word_keys(keys)
    m, s = _check_common(messages, sources, seed, source_mode)
    _, probabilities, hashes = _english_vocabulary(k)
    key_ids = _sample_categorical(probabilities, m, np.random.default_rng(seed))
    return _stream("words", key_ids, hashes, s, source_mode)


def make_stream(
    workload: str,
    *,
    messages: int,
    sources: int,
    seed: int,
    z: float = 1.0,
    keys: int | None = None,
    skew: float = 0.5,
    exact: bool = False,
    phases: int = DEFAULT_PHASES,
    source_mode: str = "round_robin",
) -> KeyStream:
    """The stream of a workload by name (one of :data:`WORKLOADS`).

    Parameters a workload does not use are ignored: ``z`` (zipf, drift), ``keys`` (zipf, drift, dkg,
    words; None means :data:`DKG_KEYS` for dkg and :data:`DEFAULT_KEYS` otherwise), ``skew`` (dkg),
    ``exact`` (zipf), ``phases`` (drift).
    """
    check("workload", workload, WORKLOAD)
    k = (DKG_KEYS if workload == "dkg" else DEFAULT_KEYS) if keys is None else keys
    if workload == "zipf":
        return zipf_stream(z, k, messages, sources, seed, exact=exact, source_mode=source_mode)
    if workload in LOGNORMAL_PARAMETERS:
        return lognormal_stream(workload, messages, sources, seed, source_mode)
    if workload == "drift":
        return drift_stream(z, k, messages, sources, seed, phases=phases, source_mode=source_mode)
    if workload == "dkg":
        return dkg_stream(skew, k, messages, sources, seed, source_mode)
    return word_stream(k, messages, sources, seed, source_mode)


__all__ = [
    "DEFAULT_KEYS",
    "DEFAULT_PHASES",
    "DKG_KEYS",
    "LOGNORMAL_PARAMETERS",
    "SOURCE_MODES",
    "SOURCE_SALT",
    "WORKLOADS",
    "KeyStream",
    "dkg_shares",
    "dkg_stream",
    "drift_phase_starts",
    "drift_stream",
    "english_vocabulary",
    "english_vocabulary_size",
    "largest_remainder_counts",
    "lognormal_stream",
    "lognormal_values",
    "make_stream",
    "skewed_sources",
    "word_stream",
    "zipf_stream",
]
