"""A split region's scheme and its parameters, checked field by field.

``SplitParams`` names the grouping scheme whose rule picks a split key's candidate channels (one of
``SPLIT_SCHEMES``) and that rule's parameters. Every field is checked on construction and a bad
value raises ``InvalidInput`` naming it as ``split.<field>`` with the accepted range. The controller
stores the parameters with the region as a plain JSON-able mapping: ``to_settings`` writes every
field and ``from_settings`` reads such a mapping back (missing fields take their defaults, unknown
ones are refused), so ``SplitParams.from_settings(p.to_settings()) == p``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from repart.errors import InvalidInput
from repart.partitioning.domain import SPLIT_SCHEMES
from repart.validation import FRACTION, NONE, POSITIVE, Interval, Kind, Options, check, check_all

#: The default head threshold is θ = DEFAULT_HEAD_SHARE / N: a key is split when it carries at least a
#: twentieth of a channel's fair share (D-Choices' 1/(5N) splits too few keys when the rest stays on
#: one channel each: docs/DECISIONS.md, "Split mode: schemes, head and weights").
DEFAULT_HEAD_SHARE = 1 / 20
#: D-Choices' ε of Proposition IV.1 (the paper's default, as the grouping's).
DEFAULT_EPSILON = 1e-4
#: FISH's candidate count per unit of n·f (the grouping's measured default, groupings/fish.py).
DEFAULT_SPREAD = 4.0
#: Virtual nodes per channel on FISH's consistent-hash ring (the grouping's default).
DEFAULT_VIRTUAL_NODES = 100
MAX_VIRTUAL_NODES = 10_000
SEED = Interval(int, 0, 2**63 - 1)

_FIELDS: dict[str, tuple[Any, ...]] = {
    "scheme": (Options(SPLIT_SCHEMES),),
    "theta": (FRACTION, NONE),
    "epsilon": (POSITIVE,),
    "spread": (POSITIVE,),
    "virtual_nodes": (Interval(int, 1, MAX_VIRTUAL_NODES),),
    "seed": (SEED,),
}
_PREFIX = "split"


@dataclass(frozen=True)
class SplitParams:
    """The scheme and its parameters.

    - ``theta``: head threshold; a key whose estimated frequency is ≥ θ is split (None: 1/(20N) for
      the N of each build, ``DEFAULT_HEAD_SHARE``).
    - ``epsilon``: D-Choices' ε in Proposition IV.1.
    - ``spread``: FISH's candidate count per unit of N·f (d_k = ⌈spread·N·f_k⌉, floored, see
      ``candidates.fish_counts``).
    - ``virtual_nodes``: FISH's virtual nodes per channel on the ring.
    - ``seed``: seed of the hash family every scheme draws its hash choices (and FISH its ring) from.
    """

    scheme: str
    theta: float | None = None
    epsilon: float = DEFAULT_EPSILON
    spread: float = DEFAULT_SPREAD
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES
    seed: int = 0

    def __post_init__(self) -> None:
        for name, value in check_all(asdict(self), _FIELDS, within=_PREFIX).items():
            object.__setattr__(self, name, value)

    def head_threshold(self, n_channels: int) -> float:
        """θ for N channels: the given θ, else 1/(20N)."""
        return self.theta if self.theta is not None else DEFAULT_HEAD_SHARE / n_channels

    def to_settings(self) -> dict[str, Any]:
        """Every field as plain JSON values (``theta`` null when it follows N)."""
        return asdict(self)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> SplitParams:
        """The parameters from a mapping of field → value; ``InvalidInput("split.<field>")`` for a bad
        or unknown field, ``InvalidInput("split.scheme")`` when the scheme is missing."""
        check(_PREFIX, settings, Kind(Mapping, "a mapping of split parameters"))
        if "scheme" not in settings:
            raise InvalidInput(f"{_PREFIX}.scheme", f"is required: one of {', '.join(SPLIT_SCHEMES)}")
        return cls(**check_all(settings, _FIELDS, within=_PREFIX))
