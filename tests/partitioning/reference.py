"""Reference implementations of scan, redist and readj: the oracle for the production code.

Each follows its listing in Gedik §4.2 (Algorithms 2–4) line by line in plain Python, with the
decisions documented in ``repart.partitioning.algorithms`` (D_o for the initial m, D_a for m̄, the
canonical item order, readj's skip / gain baseline / move limit / shrink / plateau rules). Nothing is
kept incrementally across steps: every step recomputes the per-channel loads of the explicit hash from
the mapping itself, and each candidate's ρ is computed from a copy of those loads with the candidate
applied (all channels, max and min taken afresh). Only the formulas for ρ_k (Eq. 19), the geometric
mean (Eq. 20), the utilities (§4.3) and δ (Eq. 17) are shared with the production code, so that both
compute bit-identical floats.
"""

from __future__ import annotations

import math

import numpy as np

from repart.partitioning.algorithms.problem import BuildParams
from repart.partitioning.consistent import slot_table
from repart.partitioning.domain import Key
from repart.partitioning.frequency import FrequencyEstimate
from repart.partitioning.function import PartitionFunction
from repart.partitioning.hashing import hash_key
from repart.partitioning.resources import frequency_threshold, theta
from repart.partitioning.utility import balance_penalty


class Setup:
    """The lines common to Algorithms 2–4, computed item by item."""

    def __init__(self, previous: PartitionFunction, estimate: FrequencyEstimate, n: int, params: BuildParams):
        self.n = n
        self.params = params
        self.previous = previous
        counts = dict(zip(estimate.keys, estimate.counts.tolist(), strict=True))
        self.count = counts
        self.total = estimate.total
        delta = frequency_threshold(
            params.resources, params.alpha, params.sigma, n, estimate.distinct_estimate, estimate.frequencies
        )
        tracked = []
        if delta < 1.0 and estimate.total > 0:
            tracked = [d for d, c in counts.items() if c >= (delta - estimate.epsilon) * estimate.total]
        self.items: list[Key] = sorted(tracked, key=lambda d: (-counts[d], d))
        self.rank = {d: r for r, d in enumerate(self.items)}
        self.table = slot_table(n, previous.consistent, previous.slot_bits)
        exponents = params.resources.load_exponents
        self.active = params.resources.active
        self.exponent = {k: exponents[k] for k in self.active}
        self.state_exponent = exponents[0]
        self.theta = np.full(len(self.active), theta(params.alpha, n))
        dropped = [d for d in previous.explicit if d not in self.rank]
        # m ← Σ_{d ∈ D_o} β_s(f(d))·1(p^(t)(d) ≠ H_c^(t+1)(d))
        self.m = 0.0
        for d in dropped:
            if self.old(d) != self.hashed(d):
                self.m += self.beta_s(d)
        # m̄ ← Σ_{d ∈ D_a} β_s(f(d)) / N^(t+1)
        self.m_bar = (sum(self.beta_s(d) for d in dropped) + sum(self.beta_s(d) for d in self.items)) / n

    def f(self, d: Key) -> float:
        return self.count.get(d, 0.0) / self.total if self.total else 0.0

    def beta_s(self, d: Key) -> float:
        return float(self.count.get(d, 0.0) ** self.state_exponent)

    def weight(self, d: Key) -> list[float]:
        c = self.count[d]
        return [float(c**e) for e in self.exponent.values()]

    def old(self, d: Key) -> int:
        return self.previous.lookup(d)

    def hashed(self, d: Key) -> int:
        return int(self.table[hash_key(d) >> (64 - self.previous.slot_bits)])

    def loads(self, mapping: dict[Key, int]) -> list[list[float]]:
        result = [[0.0] * self.n for _ in self.active]
        for d, channel in mapping.items():
            for k, w in enumerate(self.weight(d)):
                result[k][channel] += w
        return result

    def rho_of_loads(self, loads: list[list[float]]) -> float:
        highest = np.array([[max(row)] for row in loads])
        lowest = np.array([[min(row)] for row in loads])
        totals = np.array([[sum(row)] for row in loads])
        return float(balance_penalty(highest, lowest, totals, self.theta, self.n)[0])

    def rho(self, mapping: dict[Key, int]) -> float:
        return self.rho_of_loads(self.loads(mapping))

    def with_item(self, loads: list[list[float]], d: Key, channel: int) -> list[list[float]]:
        """The loads of the mapping with ``d ⇒ channel`` added."""
        result = [row[:] for row in loads]
        for k, w in enumerate(self.weight(d)):
            result[k][channel] += w
        return result

    def utility(self, a: float, gamma: float) -> float:
        return float(self.params.utility_function(np.array([a]), np.array([gamma]))[0])


def reference_scan(previous, estimate, n, params) -> dict[Key, int]:
    s = Setup(previous, estimate, n, params)
    m = s.m
    mapping: dict[Key, int] = {}
    for d in s.items:  # D_c ← SORT(D_p^(t+1), f)
        j, u = -1, math.inf
        h = s.old(d)
        loads = s.loads(mapping)
        for place in range(n):
            a = s.rho_of_loads(s.with_item(loads, d, place))  # ρ(H_p ∪ {d ⇒ l})
            gamma = (m + s.beta_s(d) * (place != h)) / s.m_bar
            if s.utility(a, gamma) < u:
                j, u = place, s.utility(a, gamma)
        m = m + s.beta_s(d) * (j != h)
        mapping[d] = j
    return mapping


def reference_redist(previous, estimate, n, params) -> dict[Key, int]:
    s = Setup(previous, estimate, n, params)
    m = s.m
    mapping: dict[Key, int] = {}
    candidates = list(s.items)
    while len(candidates) > 0:
        j, best, u = -1, None, math.inf
        loads = s.loads(mapping)
        for c in candidates:
            h = s.old(c)
            for place in range(n):
                a = s.rho_of_loads(s.with_item(loads, c, place))  # ρ(H_p ∪ {c ⇒ l})
                gamma = (m + (place != h) * s.beta_s(c)) / s.m_bar
                u_prime = s.utility(a, gamma) / s.f(c)
                if u_prime < u:
                    j, best, u = place, c, u_prime
        assert best is not None
        m = m + (j != s.old(best)) * s.beta_s(best)
        mapping[best] = j
        candidates.remove(best)
    return mapping


def reference_readj(previous, estimate, n, params) -> dict[Key, int]:
    s = Setup(previous, estimate, n, params)
    m = s.m
    mapping: dict[Key, int] = {}
    for d in s.items:  # tracked items stay put; removed channels: re-place with H_c^(t+1)
        mapping[d] = s.old(d)
        if mapping[d] >= n:
            mapping[d] = s.hashed(d)
            m += s.beta_s(d)
    if not mapping:
        return mapping
    moved = dict.fromkeys(s.items, 0)
    u = s.utility(s.rho(mapping), m / s.m_bar)

    def migration(d1: Key, i: int, d2: Key | None, j: int) -> float:  # Eq. 22
        first = s.beta_s(d1) * (s.old(d1) == i) - s.beta_s(d1) * (s.old(d1) == j)
        if d2 is None:
            return first + 0.0
        return first + (s.beta_s(d2) * (s.old(d2) == j) - s.beta_s(d2) * (s.old(d2) == i))

    def search(loads, rho_now, pair_allowed, accept):
        """The best-gain readjustment among allowed pairs whose balance penalty ``accept`` admits."""
        best, g, u_best = None, -math.inf, u
        for i in range(n):
            for j in range(n):
                if i == j or not pair_allowed(i, j):
                    continue
                on_i = [d for d in s.items if mapping[d] == i and moved[d] < params.move_limit]
                on_j = [None] + [d for d in s.items if mapping[d] == j and moved[d] < params.move_limit]
                for d1 in on_i:
                    for d2 in on_j:
                        # a ← ρ(A(H_p, ⟨i, d1, j, d2⟩)): the loads of the readjusted mapping
                        candidate = [row[:] for row in loads]
                        shift = list(s.weight(d1))
                        if d2 is not None:
                            shift = [w1 - w2 for w1, w2 in zip(shift, s.weight(d2), strict=True)]
                        for k, x in enumerate(shift):
                            candidate[k][i] -= x
                            candidate[k][j] += x
                        a = s.rho_of_loads(candidate)
                        if not accept(a, rho_now, loads, i, j, shift):
                            continue  # worse balance: skip this candidate
                        denominator = abs(s.f(d1) - (s.f(d2) if d2 is not None else 0.0))
                        if denominator == 0:
                            continue
                        gamma = (m + migration(d1, i, d2, j)) / s.m_bar
                        u_prime = s.utility(a, gamma)
                        gain = (u - u_prime) / denominator
                        if gain > g:
                            best, g, u_best = (i, d1, j, d2), gain, u_prime
        return best, u_best

    def lowers_rho(a, rho_now, loads, i, j, shift):
        return a < rho_now

    def keeps_rho_narrows_gap(a, rho_now, loads, i, j, shift):
        change = sum(x * (x + loads[k][j] - loads[k][i]) for k, x in enumerate(shift))
        return a == rho_now and change < 0

    while True:
        loads = s.loads(mapping)
        rho_now = s.rho_of_loads(loads)
        best, u_best = search(loads, rho_now, lambda i, j: True, lowers_rho)
        if best is None:  # plateau: from a channel at the maximum to one at the minimum of a resource

            def tied(i, j, loads=loads):
                return any(row[i] == max(row) and row[j] == min(row) for row in loads)

            best, u_best = search(loads, rho_now, tied, keeps_rho_narrows_gap)
        if best is None:
            break
        i, d1, j, d2 = best
        m = m + migration(d1, i, d2, j)
        mapping[d1] = j
        moved[d1] += 1
        if d2 is not None:
            mapping[d2] = i
            moved[d2] += 1
        u = u_best
    return mapping


REFERENCE = {"scan": reference_scan, "redist": reference_redist, "readj": reference_readj}
