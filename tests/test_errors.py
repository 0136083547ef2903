"""``repart.errors``: the error classes by what the caller should do (DESIGN §12.4)."""

from __future__ import annotations

import pickle

import pytest

from repart.errors import Conflict, Corrupt, InvalidInput, NotFound, RepartError


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidInput("alpha", "must be a number in [1, inf), got 0.5"), 2),
        (NotFound("region 'x' does not exist"), 2),
        (Conflict("plan 3 is being applied"), 3),
        (Corrupt("checksum mismatch", path="state/gen-7/part-0.parquet"), 4),
    ],
)
def test_every_error_is_a_repart_error_with_its_exit_code(error: RepartError, code: int) -> None:
    assert isinstance(error, RepartError)
    assert error.exit_code == code
    assert type(error).exit_code == code


def test_exit_codes_are_the_documented_ones() -> None:
    assert (InvalidInput.exit_code, NotFound.exit_code, Conflict.exit_code, Corrupt.exit_code) == (2, 2, 3, 4)
    assert RepartError.exit_code not in (0, 2, 3, 4)


def test_invalid_input_names_its_field_and_requirement() -> None:
    error = InvalidInput("settings.reversal_margin", "must be a number in [0, inf), got -1")
    assert str(error) == "settings.reversal_margin must be a number in [0, inf), got -1"
    assert error.field == "settings.reversal_margin"
    assert error.requirement == "must be a number in [0, inf), got -1"


def test_rename_shows_the_field_under_a_front_ends_name() -> None:
    error = InvalidInput("alpha", "must be a number in [1, inf), got 0.5")
    assert error.rename("--alpha") == "--alpha must be a number in [1, inf), got 0.5"
    assert error.field == "alpha" and str(error) == "alpha must be a number in [1, inf), got 0.5"


def test_the_standard_bases_keep_their_meaning() -> None:
    assert isinstance(InvalidInput("x", "must be 1, got 2"), ValueError)
    assert isinstance(NotFound("no such plan"), LookupError)
    with pytest.raises(ValueError, match=r"^x must be 1, got 2$"):
        raise InvalidInput("x", "must be 1, got 2")
    assert not isinstance(Conflict("busy"), ValueError | LookupError)
    assert not isinstance(Corrupt("bad"), ValueError | LookupError)


def test_corrupt_names_the_damaged_file() -> None:
    assert str(Corrupt("truncated")) == "truncated" and Corrupt("truncated").path is None
    error = Corrupt("Parquet magic bytes not found", path="state/gen-3/c0.parquet")
    assert str(error) == "state/gen-3/c0.parquet: Parquet magic bytes not found"
    assert error.path == "state/gen-3/c0.parquet"


def test_invalid_input_is_caught_by_its_base_and_keeps_its_field() -> None:
    with pytest.raises(RepartError) as excinfo:
        raise InvalidInput("n_channels", "must be an integer in [1, 65536], got 0")
    assert isinstance(excinfo.value, InvalidInput)
    assert excinfo.value.field == "n_channels"


def test_errors_pickle_with_their_message() -> None:
    # Spark ships an executor's exception to the driver by pickling it.
    for error in (NotFound("no such region"), Conflict("lease held")):
        assert str(pickle.loads(pickle.dumps(error))) == str(error)
