"""Balance penalty ρ (Eq. 19–20), migration penalty γ (Eq. 18) and the utility functions of §4.3.

These formulas are shared by the production algorithms and the reference oracle, so both compute
bit-identical utilities from identical loads. They work elementwise on numpy arrays of any shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from repart.partitioning.domain import check_utility

FloatArray = npt.NDArray[np.float64]


def balance_penalty_k(
    max_load: FloatArray, min_load: FloatArray, total_load: FloatArray, theta_k: float, n_channels: int
) -> FloatArray:
    """ρ_k = (max_i L_k(i) − min_i L_k(i)) / (θ_k · L̄_k), with L̄_k = Σ_i L_k(i) / N (Eq. 19).

    ρ_k is 0 where the mapping carries no load yet (L̄_k = 0) or where N = 1 (θ_k = 0).
    """
    spread = np.asarray(max_load, dtype=np.float64) - np.asarray(min_load, dtype=np.float64)
    denominator = theta_k * (np.asarray(total_load, dtype=np.float64) / n_channels)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(denominator > 0, spread / np.where(denominator > 0, denominator, 1.0), 0.0)
    return np.asarray(rho, dtype=np.float64)


def geometric_mean(factors: Sequence[FloatArray]) -> FloatArray:
    """(Π_k x_k)^(1/K) elementwise (Eq. 11 and Eq. 20); sqrt and cbrt for K = 2, 3."""
    product = np.asarray(factors[0], dtype=np.float64)
    for factor in factors[1:]:
        product = product * factor
    if len(factors) == 1:
        return product
    if len(factors) == 2:
        return np.sqrt(product)
    if len(factors) == 3:
        return np.cbrt(product)
    return np.asarray(np.power(product, 1.0 / len(factors)), dtype=np.float64)


def balance_penalty(
    max_loads: FloatArray, min_loads: FloatArray, totals: FloatArray, thetas: FloatArray, n_channels: int
) -> FloatArray:
    """ρ = (Π_k ρ_k)^(1/K) over the active resources (Eq. 20); arrays carry k on their first axis."""
    return geometric_mean(
        [
            balance_penalty_k(max_loads[k], min_loads[k], totals[k], float(thetas[k]), n_channels)
            for k in range(len(thetas))
        ]
    )


def utility_a(rho: FloatArray, gamma: FloatArray) -> FloatArray:
    """U^A(ρ, γ) = ρ."""
    return np.array(np.broadcast_arrays(rho, gamma)[0], dtype=np.float64)


def utility_apm(rho: FloatArray, gamma: FloatArray) -> FloatArray:
    """U^APM(ρ, γ) = ρ + γ."""
    return np.asarray(rho + gamma, dtype=np.float64)


def utility_aplm(rho: FloatArray, gamma: FloatArray) -> FloatArray:
    """U^APLM(ρ, γ) = ρ + log(1 + γ)."""
    return np.asarray(rho + np.log1p(gamma), dtype=np.float64)


def utility_atm(rho: FloatArray, gamma: FloatArray) -> FloatArray:
    """U^ATM(ρ, γ) = ρ·(1 + γ)."""
    return np.asarray(rho * (1.0 + gamma), dtype=np.float64)


def utility_atlm(rho: FloatArray, gamma: FloatArray) -> FloatArray:
    """U^ATLM(ρ, γ) = ρ·(1 + log(1 + γ))."""
    return np.asarray(rho * (1.0 + np.log1p(gamma)), dtype=np.float64)


Utility = Callable[[FloatArray, FloatArray], FloatArray]
_UTILITIES: dict[str, Utility] = {
    "A": utility_a,
    "APM": utility_apm,
    "APLM": utility_aplm,
    "ATM": utility_atm,
    "ATLM": utility_atlm,
}


def utility_function(name: str) -> Utility:
    """The utility function U(ρ, γ) of §4.3 with this name."""
    return _UTILITIES[check_utility(name)]


def function_cost(name: str, b: float, m: float) -> float:
    """The cost of moving to a function of imbalance ``b`` (Eq. 11) at migration cost ``m`` (Eq. 10)
    under the utility ``name``: U(b, m), with b in place of ρ and m in place of γ (so ATM is Eq. 13's
    b·(1 + m)). Keeping the applied function costs U(b, 0) = b under every utility."""
    return float(utility_function(name)(np.array(b, dtype=np.float64), np.array(m, dtype=np.float64)))
