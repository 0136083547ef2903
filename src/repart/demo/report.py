"""What ``repart demo`` reports: a row per batch and mode, and per mode the totals and the exactness check.

``DemoResult.to_json`` is the document ``repart demo --json`` writes::

    {"batches": [{"mode", "batch", "N", "version", "b", "b_hash", "load", "load_hash", "b_lb", "memory",
                  "migrated_fraction", "ideal_fraction", "seconds"}, ...],
     "totals": {mode: {"input", "state", "equal"}}}

A mode's ``equal`` holds when the state's totals equal the input's and, after every batch, the merged
state equalled the plain groupBy over all input so far (``repart.demo.exactness``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class DemoRow:
    """One batch of one mode (``repart.demo.measure``), in the order of ``--json``'s fields."""

    mode: str
    batch: int
    N: int
    version: int
    b: float | None
    b_hash: float | None
    load: float
    load_hash: float
    b_lb: float | None
    memory: float
    migrated_fraction: float
    ideal_fraction: float
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ModeTotals:
    """One mode's Σ trades, volume and notional of the input and of the merged state at the end, and a
    description of every batch after which the merged state differed from the groupBy (none if exact)."""

    input: dict[str, int]
    state: dict[str, int]
    mismatches: tuple[str, ...] = ()

    @property
    def equal(self) -> bool:
        return self.input == self.state and not self.mismatches

    def to_json(self) -> dict[str, Any]:
        return {"input": self.input, "state": self.state, "equal": self.equal}


@dataclass(frozen=True)
class DemoResult:
    rows: list[DemoRow]
    totals: dict[str, ModeTotals]

    @property
    def equal(self) -> bool:
        """Every mode's state equals its input (module docstring)."""
        return all(mode.equal for mode in self.totals.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "batches": [row.to_json() for row in self.rows],
            "totals": {mode: totals.to_json() for mode, totals in self.totals.items()},
        }
