"""One declarative vocabulary for parameter checks, in the style of scikit-learn's
``_param_validation``: a parameter's accepted values are written down as constraints, and ``check``
compares a value with them and raises ``InvalidInput`` naming the field. Every message has the same
shape, ``"<field> must be <constraint> [or <constraint>], got <value>"``.

>>> check("alpha", 1.5, Interval(float, 1, None))
1.5
>>> check("n", 0, Interval(int, 1, None))
Traceback (most recent call last):
...
repart.errors.InvalidInput: n must be an integer in [1, inf), got 0
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from repart.errors import InvalidInput

Closed = Literal["both", "left", "right", "neither"]


@dataclass(frozen=True)
class Interval:
    """Numbers of ``kind`` (``int``: integers, never bools; ``float``: any real, finite unless a bound
    is infinite) between ``low`` and ``high`` (None: unbounded), ``closed`` on the named sides."""

    kind: type[int] | type[float]
    low: float | None
    high: float | None
    closed: Closed = "both"

    def accepts(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.kind is int and not isinstance(value, numbers.Integral):
            return False
        try:
            number = int(cast(numbers.Integral, value)) if self.kind is int else float(value)
        except OverflowError:  # an integer beyond the largest float is no finite number
            return False
        if number != number:  # NaN
            return False
        above = (
            self.low is None or number > self.low or (number == self.low and self.closed in ("both", "left"))
        )
        below = (
            self.high is None
            or number < self.high
            or (number == self.high and self.closed in ("both", "right"))
        )
        # An infinity is accepted only where a bound is that infinity, closed.
        finite = isinstance(number, int) or math.isfinite(number)  # a Python int is never infinite
        return above and below and (finite or number in (self.low, self.high))

    def convert(self, value: Any) -> Any:
        return int(value) if self.kind is int else float(value)

    def __str__(self) -> str:
        noun = "an integer" if self.kind is int else "a number"
        left = "[" if self.closed in ("both", "left") and self.low is not None else "("
        right = "]" if self.closed in ("both", "right") and self.high is not None else ")"
        low = "-inf" if self.low is None else _number(self.low)
        high = "inf" if self.high is None else _number(self.high)
        return f"{noun} in {left}{low}, {high}{right}"


@dataclass(frozen=True)
class Options:
    """Exactly one of ``values`` (compared by equality and type: ``1`` is not ``True`` or ``1.0``); with a
    single value, exactly that value."""

    values: tuple[object, ...]

    def accepts(self, value: object) -> bool:
        return any(type(value) is type(option) and value == option for option in self.values)

    def convert(self, value: Any) -> Any:
        return value

    def __str__(self) -> str:
        if len(self.values) == 1:
            return repr(self.values[0])
        return "one of " + ", ".join(repr(option) for option in self.values)


@dataclass(frozen=True)
class Kind:
    """An instance of ``kind`` (``str``, ``bool``, ``dict``, …); ``None`` accepts only None."""

    kind: type | None
    name: str

    def accepts(self, value: object) -> bool:
        if self.kind is None:
            return value is None
        return isinstance(value, self.kind)

    def convert(self, value: Any) -> Any:
        return value

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Matches:
    """A string that ``pattern`` (a regular expression) matches in full; ``name`` says what it is."""

    pattern: str
    name: str

    def accepts(self, value: object) -> bool:
        return isinstance(value, str) and re.fullmatch(self.pattern, value) is not None

    def convert(self, value: Any) -> Any:
        return value

    def __str__(self) -> str:
        return self.name


Constraint = Interval | Options | Kind | Matches

NONE = Kind(None, "None")
STRING = Kind(str, "a string")
BOOLEAN = Kind(bool, "true or false")
POSITIVE_INT = Interval(int, 1, None)
NON_NEGATIVE_INT = Interval(int, 0, None)
# A non-negative integer a database column holds (a signed 64-bit one): an id, a batch, a count.
STORED_INT = Interval(int, 0, 2**63 - 1)
POSITIVE = Interval(float, 0, None, closed="neither")
NON_NEGATIVE = Interval(float, 0, None)
FRACTION = Interval(float, 0, 1, closed="right")
# A region's name (it also names spool files, so it cannot hold a path separator).
REGION_NAME = Matches(
    r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}",
    "a name of 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit",
)
PROBABILITY = Interval(float, 0, 1)
# A lease holder's name (a daemon's ``--holder``; its host name and process id by default).
LEASE_HOLDER = Matches(r"(?s).{1,200}", "a string of 1-200 characters")


def check(field: str, value: Any, *constraints: Constraint) -> Any:
    """``value`` (an integer as ``int``, a real as ``float``) if one of ``constraints`` accepts it;
    ``InvalidInput(field)`` saying what is accepted otherwise."""
    for constraint in constraints:
        if constraint.accepts(value):
            return constraint.convert(value)
    raise InvalidInput(field, f"must be {' or '.join(str(c) for c in constraints)}, got {shown(value)}")


def check_all(
    values: Mapping[str, Any], spec: Mapping[str, tuple[Constraint, ...]], *, within: str = ""
) -> dict[str, Any]:
    """Every field of ``values`` checked against its constraints in ``spec`` (fields ``spec`` does not
    name are refused), in ``spec``'s order. ``within`` names the mapping itself when it is a nested
    field (``settings``): its fields are then named ``settings.<field>``."""
    prefix = f"{within}." if within else ""
    unknown = sorted(set(values) - set(spec))
    if unknown:
        raise InvalidInput(prefix + unknown[0], f"is not a parameter here; accepted: {', '.join(spec)}")
    return {field: check(prefix + field, values[field], *spec[field]) for field in spec if field in values}


def check_each(field: str, values: Any, *constraints: Constraint) -> tuple[Any, ...]:
    """``values`` as a tuple, each converted, if it is a non-empty list or tuple whose every element one
    of ``constraints`` accepts; ``InvalidInput(field)`` naming the first element refused otherwise."""
    requirement = f"must be a non-empty list of values, each {' or '.join(str(c) for c in constraints)}"
    if not isinstance(values, list | tuple) or not values:
        raise InvalidInput(field, f"{requirement}, got {shown(values)}")
    checked = []
    for value in values:
        constraint = next((c for c in constraints if c.accepts(value)), None)
        if constraint is None:
            raise InvalidInput(field, f"{requirement}, got {shown(value)} in {shown(values)}")
        checked.append(constraint.convert(value))
    return tuple(checked)


def shown(value: object, limit: int = 60) -> str:
    """``value``'s repr, cut to ``limit`` characters, for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() and abs(bound) < 2**63 else repr(bound)
