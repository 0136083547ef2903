"""``repart.validation``: the declarative parameter checks (DESIGN §12.4), against plain comparisons."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.validation import (
    BOOLEAN,
    FRACTION,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    NONE,
    POSITIVE,
    POSITIVE_INT,
    PROBABILITY,
    STRING,
    Interval,
    Kind,
    Options,
    check,
    check_all,
    check_each,
    shown,
)

CLOSED = ("both", "left", "right", "neither")


def inside(x: float, low: float | None, high: float | None, closed: str) -> bool:
    """The oracle: x in the interval by direct comparison of the bounds."""
    above = low is None or x > low or (x == low and closed in ("both", "left"))
    below = high is None or x < high or (x == high and closed in ("both", "right"))
    return above and below


@given(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(-1e6, 1e6),
    st.floats(0, 1e6),
    st.sampled_from(CLOSED),
)
def test_float_interval_matches_direct_comparison(x: float, low: float, width: float, closed: Any) -> None:
    interval = Interval(float, low, low + width, closed)
    assert interval.accepts(x) == inside(x, low, low + width, closed)


@given(st.integers(-(2**70), 2**70), st.integers(-100, 100), st.integers(0, 100), st.sampled_from(CLOSED))
def test_int_interval_matches_direct_comparison(x: int, low: int, width: int, closed: Any) -> None:
    assert Interval(int, low, low + width, closed).accepts(x) == inside(x, low, low + width, closed)


@given(st.integers(-(2**70), 2**70))
def test_unbounded_int_interval_accepts_every_integer_and_converts_to_int(x: int) -> None:
    value = check("n", x, Interval(int, None, None))
    assert value == x and type(value) is int


@pytest.mark.parametrize("closed", CLOSED)
def test_bounds_are_open_or_closed_as_named(closed: Any) -> None:
    interval = Interval(float, 0, 1, closed)
    assert interval.accepts(0) == (closed in ("both", "left"))
    assert interval.accepts(1) == (closed in ("both", "right"))
    assert interval.accepts(0.5)
    assert not interval.accepts(-1e-9) and not interval.accepts(1 + 1e-9)


def test_infinities_only_where_a_closed_bound_is_that_infinity() -> None:
    assert not Interval(float, 0, None).accepts(math.inf)
    assert not Interval(float, None, 0).accepts(-math.inf)
    assert Interval(float, 0, math.inf).accepts(math.inf)
    assert not Interval(float, 0, math.inf, "left").accepts(math.inf)
    assert Interval(float, -math.inf, 0).accepts(-math.inf)
    assert not Interval(float, 0, math.inf).accepts(-math.inf)
    for interval in (Interval(float, None, None), Interval(float, -math.inf, math.inf)):
        assert not interval.accepts(math.nan)


def test_an_integer_beyond_the_largest_float_is_no_finite_number() -> None:
    assert not NON_NEGATIVE.accepts(10**400)
    assert NON_NEGATIVE_INT.accepts(10**400)
    with pytest.raises(InvalidInput) as excinfo:
        check("alpha", 10**400, Interval(float, 1, None))
    assert excinfo.value.field == "alpha"


@pytest.mark.parametrize("value", [True, False, np.bool_(True), "1", None, b"1", [1], 1j])
def test_no_interval_accepts_bools_strings_or_non_reals(value: object) -> None:
    for interval in (POSITIVE_INT, NON_NEGATIVE_INT, POSITIVE, NON_NEGATIVE, FRACTION, PROBABILITY):
        assert not interval.accepts(value)


@pytest.mark.parametrize("value", [np.int8(3), np.int64(3), np.uint64(3), np.uint8(3)])
def test_numpy_integers_are_integers_and_come_back_as_int(value: object) -> None:
    checked = check("n", value, POSITIVE_INT)
    assert checked == 3 and type(checked) is int
    assert type(check("x", value, POSITIVE)) is float


def test_int_intervals_refuse_non_integral_reals() -> None:
    for value in (2.0, np.float64(2.0), Fraction(4, 2)):
        assert not POSITIVE_INT.accepts(value)
        assert POSITIVE.accepts(value)
    assert type(check("x", Fraction(1, 2), FRACTION)) is float


def test_options_compare_by_type_and_value() -> None:
    modes = Options(("jump", 1))
    assert modes.accepts("jump") and modes.accepts(1)
    for value in (True, 1.0, np.int64(1), "Jump", None):
        assert not modes.accepts(value)
    assert not Options((False,)).accepts(0)
    assert check("method", "jump", modes) == "jump"


def test_kinds() -> None:
    assert STRING.accepts("") and not STRING.accepts(b"")
    assert BOOLEAN.accepts(False) and not BOOLEAN.accepts(0)
    assert NONE.accepts(None) and not NONE.accepts(0) and not NONE.accepts("")
    assert Kind(dict, "a mapping").accepts({})


@pytest.mark.parametrize(
    ("field", "value", "constraints", "message"),
    [
        ("n", 0, (POSITIVE_INT,), "n must be an integer in [1, inf), got 0"),
        ("alpha", 0.5, (Interval(float, 1, None),), "alpha must be a number in [1, inf), got 0.5"),
        ("sigma", 0, (FRACTION,), "sigma must be a number in (0, 1], got 0"),
        ("p", 2, (PROBABILITY,), "p must be a number in [0, 1], got 2"),
        ("x", -1, (Interval(int, -1, 1, "neither"),), "x must be an integer in (-1, 1), got -1"),
        ("x", 2.5, (Interval(float, None, 1.5),), "x must be a number in (-inf, 1.5], got 2.5"),
        (
            "method",
            "ring2",
            (Options(("ring", "jump")),),
            "method must be one of 'ring', 'jump', got 'ring2'",
        ),
        ("format", 2, (Options((1,)),), "format must be 1, got 2"),
        (
            "key_type",
            3,
            (Options(("str", "int")), NONE),
            "key_type must be one of 'str', 'int' or None, got 3",
        ),
        ("name", 1, (STRING,), "name must be a string, got 1"),
    ],
)
def test_check_messages_have_one_shape_and_name_the_field(
    field: str, value: object, constraints: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(InvalidInput) as excinfo:
        check(field, value, *constraints)
    assert str(excinfo.value) == message
    assert excinfo.value.field == field
    assert excinfo.value.requirement == message.removeprefix(f"{field} ")


def test_check_returns_the_first_accepting_constraints_conversion() -> None:
    assert check("x", None, POSITIVE, NONE) is None
    assert check("x", 3, POSITIVE, NONE) == 3.0
    assert check("x", 3, POSITIVE_INT, POSITIVE) == 3 and type(check("x", 3, POSITIVE_INT, POSITIVE)) is int


def test_a_long_value_is_shown_cut_short() -> None:
    with pytest.raises(InvalidInput) as excinfo:
        check("name", "x" * 1000, POSITIVE)
    assert len(str(excinfo.value)) < 120 and str(excinfo.value).endswith("...")
    assert shown("abc") == "'abc'" and len(shown(list(range(100)), 20)) == 20


SPEC = {"counters": (Interval(int, 2, None),), "cooldown": (NON_NEGATIVE,), "label": (STRING, NONE)}


def test_check_all_checks_every_given_field_in_spec_order() -> None:
    checked = check_all({"label": None, "counters": np.int64(3)}, SPEC)
    assert checked == {"counters": 3, "label": None} and list(checked) == ["counters", "label"]
    assert check_all({}, SPEC) == {}


def test_check_all_names_a_bad_field_and_the_mapping_it_is_in() -> None:
    with pytest.raises(InvalidInput) as excinfo:
        check_all({"counters": 1}, SPEC, within="settings")
    assert excinfo.value.field == "settings.counters"
    assert str(excinfo.value).startswith("settings.counters must be an integer in [2, inf), got 1")
    with pytest.raises(InvalidInput) as excinfo:
        check_all({"cooldown": -1}, SPEC)
    assert excinfo.value.field == "cooldown"


def test_check_all_refuses_unknown_fields_listing_the_accepted_ones() -> None:
    with pytest.raises(InvalidInput) as excinfo:
        check_all({"counters": 3, "zeta": 1, "beta": 2}, SPEC, within="settings")
    assert excinfo.value.field == "settings.beta"  # the first unknown field in sorted order
    assert "counters, cooldown, label" in excinfo.value.requirement


@given(st.lists(st.integers(-5, 5), max_size=8))
def test_check_each_accepts_exactly_the_non_empty_lists_of_accepted_values(values: list[int]) -> None:
    if values and all(v >= 1 for v in values):
        assert check_each("workers", values, POSITIVE_INT) == tuple(values)
        assert check_each("workers", tuple(values), POSITIVE_INT) == tuple(values)
    else:
        with pytest.raises(InvalidInput) as excinfo:
            check_each("workers", values, POSITIVE_INT)
        assert excinfo.value.field == "workers"
        assert excinfo.value.requirement.startswith(
            "must be a non-empty list of values, each an integer in [1, inf), got "
        )


@pytest.mark.parametrize("values", ["abc", {1: 2}, 3, None, range(3)])
def test_check_each_wants_a_list_or_tuple(values: object) -> None:
    with pytest.raises(InvalidInput) as excinfo:
        check_each("zipf", values, NON_NEGATIVE)
    assert excinfo.value.field == "zipf"


def test_check_each_converts_every_value() -> None:
    assert check_each("zipf", [1, np.float32(0.5)], NON_NEGATIVE) == (1.0, 0.5)
    assert all(type(z) is float for z in check_each("zipf", [1, np.float32(0.5)], NON_NEGATIVE))
