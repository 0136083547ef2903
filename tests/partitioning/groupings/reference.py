"""Line-by-line pure-Python references of every grouping: the oracles the compiled kernels must equal.

Each follows its paper's description directly (dicts and lists, no shared code with the kernels beyond
the hash family's definition, which is re-implemented here with Python ints). At the end: the stream
builder and the kernel-against-reference drivers the test modules share.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

MASK = 2**64 - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(x: int) -> int:
    z = (x + GOLDEN) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def seeds(seed: int, count: int) -> list[int]:
    return [mix64((seed + j * GOLDEN) & MASK) for j in range(count)]


def h(key: int, seed_j: int, n: int) -> int:
    return ((mix64(key ^ seed_j) >> 32) * n) >> 32


def distinct_choices(key: int, seed: int, n: int, count: int) -> list[int]:
    """The first ``count`` distinct workers among H_1(key), H_2(key), …"""
    found: list[int] = []
    j = 0
    while len(found) < min(count, n):
        w = h(key, mix64((seed + j * GOLDEN) & MASK), n)
        if w not in found:
            found.append(w)
        j += 1
    return found


def pkg_pair(key: int, seed: int, n: int) -> list[int]:
    if n == 1:
        return [0, 0]
    return distinct_choices(key, seed, n, 2)


def least(loads: list[int], candidates: list[int]) -> int:
    """First candidate with the smallest load."""
    best = candidates[0]
    for c in candidates[1:]:
        if loads[c] < loads[best]:
            best = c
    return best


class Reference:
    def __init__(self, n: int, sources: int, seed: int) -> None:
        self.n, self.S, self.seed = n, sources, seed
        self.sd = seeds(seed, 2)
        self.loads = [[0] * n for _ in range(sources)]

    def route(self, keys: list[int], sources: list[int]) -> list[int]:
        out = []
        for k, s in zip(keys, sources, strict=True):
            w = self.one(k, s)
            self.loads[s][w] += 1
            out.append(w)
        return out

    def one(self, k: int, s: int) -> int:
        raise NotImplementedError


class KG(Reference):
    def one(self, k: int, s: int) -> int:
        return h(k, self.sd[0], self.n)


class SG(Reference):
    def __init__(self, n: int, sources: int, seed: int) -> None:
        super().__init__(n, sources, seed)
        self.sent = [0] * sources

    def one(self, k: int, s: int) -> int:
        w = (s + self.sent[s]) % self.n
        self.sent[s] += 1
        return w


class PKG(Reference):
    def __init__(self, n: int, sources: int, seed: int, choices: int = 2) -> None:
        super().__init__(n, sources, seed)
        self.choices = choices

    def one(self, k: int, s: int) -> int:
        return least(self.loads[s], distinct_choices(k, self.seed, self.n, self.choices))


class Sticky(Reference):
    def __init__(self, n: int, sources: int, seed: int, rule: str) -> None:
        super().__init__(n, sources, seed)
        self.rule, self.total = rule, [0] * n
        self.table: dict[int, int] = {}

    def one(self, k: int, s: int) -> int:
        if k not in self.table:
            if self.rule == "potc":
                self.table[k] = least(self.total, list(pkg_pair(k, self.seed, self.n)))
            else:
                self.table[k] = least(self.total, list(range(self.n)))
        w = self.table[k]
        self.total[w] += 1
        return w


class OffGreedy(Reference):
    def __init__(self, n: int, sources: int, seed: int, counts: dict[int, int]) -> None:
        super().__init__(n, sources, seed)
        total = [0] * n
        self.table = {}
        for key in sorted(counts, key=lambda key: (-counts[key], key)):
            w = least(total, list(range(n)))
            total[w] += counts[key]
            self.table[key] = w

    def one(self, k: int, s: int) -> int:
        return self.table[k]


@dataclass
class SpaceSaving:
    """Entries are [key, count, error] in fixed slots; eviction = smallest (count, slot)."""

    capacity: int
    slots: list[list[float]] = field(default_factory=list)
    where: dict[int, int] = field(default_factory=dict)

    def offer(self, key: int) -> tuple[int, bool]:
        if key in self.where:
            e = self.where[key]
            self.slots[e][1] += 1.0
            return e, False
        if len(self.slots) < self.capacity:
            self.slots.append([key, 1.0, 0.0])
            self.where[key] = len(self.slots) - 1
            return len(self.slots) - 1, False
        e = min(range(self.capacity), key=lambda i: (self.slots[i][1], i))
        del self.where[int(self.slots[e][0])]
        count = self.slots[e][1]
        self.slots[e] = [key, count + 1.0, count]
        self.where[key] = e
        return e, True

    def scale(self, factor: float) -> None:
        for entry in self.slots:
            entry[1] *= factor
            entry[2] *= factor


def find_optimal_choices(head: list[float], tail: float, n: int, epsilon: float) -> int:
    """D-Choices §IV-A: from max(2, ⌈p1·n⌉), the first d meeting Eq. 3 for every prefix; n if none < n."""
    if not head:
        return 2
    d = max(2, math.ceil(head[0] * n))
    while d < n:
        ok = True
        for hh in range(1, len(head) + 1):
            b = n - n * (1.0 - d / n) ** float(hh)  # d distinct workers per head key
            prefix = 0.0
            for p in head[:hh]:
                prefix += p
            total = 0.0
            for p in head:
                total += p
            left = prefix + (b / n) ** float(d) * (total - prefix) + (b / n) ** 2.0 * tail
            if left > b * (1.0 / n + epsilon):
                ok = False
                break
        if ok:
            return d
        d += 1
    return n


class Head(Reference):
    """Algorithm 1 of "When Two Choices Are not Enough" for mode dchoices / wchoices / rr."""

    def __init__(
        self,
        n: int,
        sources: int,
        seed: int,
        mode: str,
        theta: float,
        capacity: int,
        epsilon: float = 1e-4,
        recompute_every: int = 1000,
    ) -> None:
        super().__init__(n, sources, seed)
        self.mode, self.theta, self.epsilon, self.every = mode, theta, epsilon, recompute_every
        self.ss = [SpaceSaving(capacity) for _ in range(sources)]
        self.seen = [0] * sources
        self.d = [0] * sources
        self.at = [0] * sources
        self.turn = [0] * sources

    def one(self, k: int, s: int) -> int:
        e, _ = self.ss[s].offer(k)
        self.seen[s] += 1
        count = self.ss[s].slots[e][1]
        loads = self.loads[s]
        if self.seen[s] < math.ceil(1 / self.theta) or count < self.theta * self.seen[s]:
            return least(loads, list(pkg_pair(k, self.seed, self.n)))
        if self.mode == "rr":
            w = (s + self.turn[s]) % self.n
            self.turn[s] += 1
            return w
        d = self.n
        if self.mode == "dchoices":
            if self.d[s] == 0 or self.seen[s] - self.at[s] >= self.every:
                bar = self.theta * self.seen[s]
                head = sorted((c / self.seen[s] for _, c, _ in self.ss[s].slots if c >= bar), reverse=True)
                tail = 0.0
                acc = 0.0
                for p in head:
                    acc += p
                tail = max(0.0, 1.0 - acc)
                self.d[s] = find_optimal_choices(head, tail, self.n, self.epsilon)
                self.at[s] = self.seen[s]
            d = self.d[s]
        if d >= self.n:
            return least(loads, list(range(self.n)))
        return min(distinct_choices(k, self.seed, self.n, d), key=lambda c: (loads[c], c))


def ring(n: int, virtual_nodes: int, seed: int) -> list[tuple[int, int]]:
    salt = (seed & MASK) ^ 0x0F15F15F15F15F15
    nodes = [(mix64(label ^ salt), label // virtual_nodes) for label in range(n * virtual_nodes)]
    return sorted(nodes, key=lambda node: node[0])  # stable: equal positions keep label order


def ring_walk(nodes: list[tuple[int, int]], key: int, count: int, n: int) -> list[int]:
    point = mix64(key ^ 0x7E57AB1E5EED0001)
    start = next((i for i, (position, _) in enumerate(nodes) if position >= point), len(nodes))
    found: list[int] = []
    i = start
    while len(found) < min(count, n):
        w = nodes[i % len(nodes)][1]
        if w not in found:
            found.append(w)
        i += 1
    return found


class FISH(Reference):
    def __init__(
        self,
        n: int,
        sources: int,
        seed: int,
        *,
        rates: list[float],
        arrival_rate: float,
        theta: float,
        epoch: int,
        decay: float,
        spread: float,
        tail_choices: int,
        capacity: int,
        virtual_nodes: int,
    ) -> None:
        super().__init__(n, sources, seed)
        self.costs = [1.0 / r for r in rates]
        self.lam, self.theta, self.epoch, self.decay = arrival_rate, theta, epoch, decay
        self.spread, self.tail = spread, min(n, tail_choices)
        self.ss = [SpaceSaving(capacity) for _ in range(sources)]
        self.nodes = ring(n, virtual_nodes, seed)
        self.finish = [[0.0] * n for _ in range(sources)]
        self.arrived = 0
        self.in_epoch = [0] * sources
        self.epochs = [0] * sources
        self.total = [0.0] * sources
        self.width: list[dict[int, int]] = [{} for _ in range(sources)]
        self.hot_in: list[dict[int, int]] = [{} for _ in range(sources)]

    def classify(self, s: int) -> None:
        total = self.total[s]  # the epoch's frequencies; decaying both sides leaves them unchanged
        hot = [(key, c) for key, c, _ in self.ss[s].slots if c >= self.theta * total]
        if hot:
            mass = 0.0
            for _, c in hot:
                mass += c / total
            floor = max(2, math.ceil(self.n * mass / len(hot)))
            for key, c in hot:
                d = min(self.n, max(floor, math.ceil(self.spread * self.n * (c / total))))
                self.width[s][int(key)] = max(self.width[s].get(int(key), 0), d)
                self.hot_in[s][int(key)] = self.epochs[s] + 1
        self.ss[s].scale(self.decay)
        self.total[s] *= self.decay
        self.epochs[s] += 1
        self.in_epoch[s] = 0

    def one(self, k: int, s: int) -> int:
        if self.in_epoch[s] == self.epoch:
            self.classify(s)
        now = self.arrived / self.lam
        self.ss[s].offer(k)
        self.total[s] += 1.0
        self.in_epoch[s] += 1
        count = self.tail
        if self.hot_in[s].get(k) == self.epochs[s]:
            count = self.width[s][k]
        candidates = ring_walk(self.nodes, k, count, self.n)
        finish = self.finish[s]
        best = candidates[0]
        for c in candidates[1:]:
            if max(0.0, finish[c] - now) < max(0.0, finish[best] - now):
                best = c
        finish[best] = max(finish[best], now) + self.S * self.costs[best]
        self.arrived += 1
        return best


class DKG(Reference):
    """Dynamic Key Grouping as §4 and Algorithms 1–6 describe it, one dict of key items per source."""

    def __init__(
        self,
        n: int,
        sources: int,
        seed: int,
        *,
        expected_keys: int,
        cycle: int,
        old_every: int,
        warmup: int,
        check_interval: int | None = None,
    ) -> None:
        super().__init__(n, sources, seed)
        self.cycle, self.old_every, self.warmup = cycle, old_every, warmup
        self.check_interval = old_every * cycle if check_interval is None else check_interval
        self.old_cap, self.teen_cap = max(1, expected_keys // 10), max(1, 4 * expected_keys // 10)
        self.baby_cap = max(1, expected_keys // 2)
        self.T = 100 / n + math.sqrt(100 / n)
        # key -> [count, space (0 baby, 1 teenage, 2 old), last check]; widths live apart from items
        self.items: list[dict[int, list[int]]] = [{} for _ in range(sources)]
        self.width: list[dict[int, int]] = [{} for _ in range(sources)]
        self.seen = [0] * sources

    def pct(self, s: int, m: int, sent: int) -> float:
        return 100.0 * self.loads[s][m] / sent if sent > 0 else 0.0

    def under(self, s: int, m: int, sent: int) -> bool:
        """Load percentage below L_s, as 100·L < L_s·sent (the kernels' division-free form)."""
        return sent == 0 or 100.0 * self.loads[s][m] < self.T * sent

    def choose(self, s: int, k: int, item: list[int], sent: int, may_scale: bool) -> int:
        home = h(k, self.sd[0], self.n)
        width = self.width[s].get(k, min(2, self.n))
        lowest, best, below = math.inf, -1, 0
        for j in range(width):
            m = (home + j) % self.n
            load = self.pct(s, m, sent)
            if self.under(s, m, sent):
                below += 1
            if load < lowest:
                lowest, best = load, m
        if not may_scale:
            return best
        if self.seen[s] > self.warmup and not self.under(s, best, sent) and item[1] == 2:
            extra = (home + width) % self.n
            if self.pct(s, extra, sent) < lowest:
                best = extra
                self.width[s][k] = width + 1
            return best
        if width > 2 and below >= 2:
            self.width[s][k] = width - 1
            return self.choose(s, k, item, sent, False)
        return best

    def ordered(self, s: int, space: int) -> list[int]:
        items = self.items[s]
        return sorted((k for k, it in items.items() if it[1] == space), key=lambda k: (-items[k][0], k))

    def promote(self, s: int, lower: int, upper: int, cap: int) -> None:
        items = self.items[s]
        source, dest = self.ordered(s, lower), self.ordered(s, upper)[:cap]
        dest += [None] * (cap - len(dest))  # type: ignore[list-item]
        j = cap - 1
        for fi in source:
            if j < 0:
                break
            li = dest[j]
            if li is not None and items[li][0] > items[fi][0]:
                break
            items[fi][1] = upper
            if li is not None:
                items[li][1] = lower
            dest[j] = fi
            j -= 1

    def one(self, k: int, s: int) -> int:
        item = self.items[s].setdefault(k, [0, 0, -1])
        item[0] += 1
        sent = self.seen[s]
        self.seen[s] += 1
        due = item[2] == -1 or self.seen[s] - item[2] > self.check_interval
        if due:
            item[2] = self.seen[s]
        return self.choose(s, k, item, sent, due)

    def route(self, keys: list[int], sources: list[int]) -> list[int]:
        out = []
        for k, s in zip(keys, sources, strict=True):
            w = self.one(k, s)
            self.loads[s][w] += 1
            out.append(w)
            if self.seen[s] % self.cycle == 0:
                for key in self.ordered(s, 0)[self.baby_cap :]:  # Algorithm 1: truncate Baby
                    del self.items[s][key]
                self.promote(s, 0, 1, self.teen_cap)
                if (self.seen[s] // self.cycle) % self.old_every == 0:
                    self.promote(s, 1, 2, self.old_cap)
        return out


def first_tuple(finish: float, rate: float) -> int:
    """The first tuple t whose arrival t/λ (as the kernel divides) is at or after ``finish``: the
    release index of a worker busy until ``finish`` (FISH)."""
    t = max(0, int(finish * rate) - 5)
    while t > 0 and finish <= (t - 1) / rate:
        t -= 1
    while finish > t / rate:
        t += 1
    return t


# Streams and drivers shared by the test modules.

Keys = npt.NDArray[np.uint64]
Origins = npt.NDArray[np.int64]


def zipf_keys(rng: np.random.Generator, size: int, distinct: int, z: float) -> Keys:
    """Key hashes (random odd 64-bit values) of a Zipf(z) stream over ``distinct`` keys."""
    weights = np.arange(1, distinct + 1, dtype=np.float64) ** -z
    vocabulary = rng.integers(0, 2**63, distinct, dtype=np.int64).astype(np.uint64) * np.uint64(
        2
    ) + np.uint64(1)
    return vocabulary[rng.choice(distinct, size, p=weights / weights.sum())]


def route_in_chunks(grouping: Any, keys: Keys, origins: Origins, cuts: list[int]) -> list[int]:
    """A compiled grouping's workers for the stream fed in chunks ending at ``cuts`` (sorted)."""
    bounds = [0, *cuts, keys.size]
    out: list[int] = []
    for lo, hi in itertools.pairwise(bounds):
        out.extend(grouping.route(keys[lo:hi], origins[lo:hi]).tolist())
    return out


def check(grouping: Any, reference: Reference, keys: Keys, origins: Origins, cuts: list[int]) -> None:
    """The grouping fed in chunks routes the stream as its reference does, with the same loads."""
    expected = reference.route([int(k) for k in keys], origins.tolist())
    assert route_in_chunks(grouping, keys, origins, cuts) == expected
    assert grouping.loads.tolist() == reference.loads
