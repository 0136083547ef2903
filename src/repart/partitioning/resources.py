"""Resource functions β, the imbalance threshold θ_k and the frequency threshold δ (Gedik §3.1, §4.1.3).

A *resource code* is three letters for (state, computation, communication), each ``C`` (β(x) = 1),
``L`` (β(x) = x) or ``Q`` (β(x) = x²); communication is always ``L`` (§3.1, Eq. 5). The load an item
of frequency f puts on a channel is β_s(f) for state (Eq. 1), f·β_c(f) for computation (Eq. 3) and f
for communication (Eq. 5).

Following §4.4, a resource whose β is constant is left out of the balance penalty ρ and of the
relative imbalance b: hashing alone balances it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.domain import RESOURCE_CODES, check_alpha, check_sigma
from repart.validation import POSITIVE_INT, check, shown

Shape = Literal["C", "L", "Q"]
RESOURCE_NAMES = ("s", "c", "n")
_EXPONENT = {"C": 0, "L": 1, "Q": 2}

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Resources:
    """The β shapes of state, computation and communication, parsed from a code such as ``"LCL"``."""

    state: Shape
    computation: Shape
    communication: Shape = "L"

    @classmethod
    def parse(cls, code: str) -> Resources:
        """Parse a three-letter code (any case); ``InvalidInput("resources")`` naming the accepted codes
        otherwise."""
        text = code.upper() if isinstance(code, str) else code
        if text not in RESOURCE_CODES:
            raise InvalidInput(
                "resources",
                "must be three letters from C/L/Q for state, computation, communication, with "
                f"communication L (one of {', '.join(RESOURCE_CODES)}), got {shown(code)}",
            )
        return cls(state=text[0], computation=text[1], communication="L")  # type: ignore[arg-type]

    @property
    def code(self) -> str:
        return f"{self.state}{self.computation}{self.communication}"

    @property
    def shapes(self) -> tuple[Shape, Shape, Shape]:
        return (self.state, self.computation, self.communication)

    @property
    def load_exponents(self) -> tuple[int, int, int]:
        """Exponent e_k with per-item load f**e_k: β_s(f) (Eq. 1), f·β_c(f) (Eq. 3), f (Eq. 5)."""
        return (_EXPONENT[self.state], 1 + _EXPONENT[self.computation], 1)

    @property
    def active(self) -> tuple[int, ...]:
        """Indices (0 = s, 1 = c, 2 = n) of the resources whose β is not constant (§4.4)."""
        return tuple(k for k, shape in enumerate(self.shapes) if shape != "C")


def beta(shape: Shape, x: FloatArray | float) -> FloatArray:
    """β(x) for a shape: 1, x or x² (§3.1)."""
    values = np.asarray(x, dtype=np.float64)
    return np.power(values, _EXPONENT[shape])


def item_loads(resources: Resources, frequencies: FloatArray) -> FloatArray:
    """Per-item loads, shape (3, n): β_s(f) (Eq. 1), f·β_c(f) (Eq. 3) and f (Eq. 5)."""
    f = np.asarray(frequencies, dtype=np.float64)
    return np.stack([np.power(f, e) for e in resources.load_exponents])


def check_channels(n_channels: int, name: str = "n_channels") -> int:
    """A channel count: an integer >= 1; ``InvalidInput(name)`` otherwise."""
    return cast(int, check(name, n_channels, POSITIVE_INT))


def theta(alpha: float, n_channels: int) -> float:
    """θ_k = (α_k − 1)·(1 + α_k/(N − 1))⁻¹ (Eq. 15); 0 for N = 1, where no imbalance is possible."""
    check_alpha(alpha)
    check_channels(n_channels)
    if n_channels == 1:
        return 0.0
    return (alpha - 1.0) / (1.0 + alpha / (n_channels - 1))


def _delta_for_shape(shape: Shape, sigma: float, theta_k: float, mean_load: float) -> float:
    """Largest δ_k with β_k(δ_k) ≤ σ·θ_k·L̄_k (Eq. 16)."""
    bound = sigma * theta_k * mean_load
    if shape == "C":
        return 1.0
    if shape == "L":
        return bound
    return math.sqrt(bound)


def frequency_threshold(
    resources: Resources,
    alpha: float,
    sigma: float,
    n_channels: int,
    distinct: int | None = None,
    tracked_frequencies: FloatArray | None = None,
) -> float:
    """δ = min_k δ_k (Eq. 16–17), with the quadratic post-processing of §4.1.3.

    δ_k is 1 for a constant β, σθ/N for a linear β and sqrt(σθ/(|D|·N)) for a quadratic one (Eq. 17).
    For N = 1 nothing needs tracking and δ = 1 (θ would divide by N − 1 = 0).

    Post-processing (quadratic β only): given the frequencies of the items I selected with the first δ,
    L̄_k is re-predicted as [Σ_{d∈I} β_k(f(d)) + (|D| − |I|)·β_k((1 − Σ_{d∈I} f(d)) / (|D| − |I|))] / N
    and δ_k is recomputed from Eq. 16 with it; the result is never below the first δ.
    """
    check_sigma(sigma)
    n = check_channels(n_channels)
    if n == 1:
        return 1.0
    th = theta(alpha, n)
    quadratic = [shape for shape in resources.shapes if shape == "Q"]
    if quadratic:
        distinct = cast(int, check("distinct", distinct, POSITIVE_INT))  # |D|, needed by a quadratic β
    deltas: list[float] = []
    for shape in resources.shapes:
        if shape == "Q":
            assert distinct is not None
            deltas.append(_delta_for_shape(shape, sigma, th, 1.0 / (distinct * n)))
        else:
            deltas.append(_delta_for_shape(shape, sigma, th, 1.0 / n))
    delta = min(deltas)
    if not quadratic or tracked_frequencies is None:
        return delta
    assert distinct is not None
    tracked = np.asarray(tracked_frequencies, dtype=np.float64)
    tracked = tracked[tracked >= delta]
    untracked = max(distinct - tracked.size, 1)
    rest = max(1.0 - float(tracked.sum()), 0.0) / untracked
    predicted_total = float(np.sum(tracked**2)) + untracked * rest**2
    refined = [
        _delta_for_shape(shape, sigma, th, predicted_total / n) if shape == "Q" else d
        for shape, d in zip(resources.shapes, deltas, strict=True)
    ]
    return max(delta, min(refined))
