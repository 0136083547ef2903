"""``repart region create|update --split SCHEME --merge SPEC``: a region in split mode (DESIGN §11.3)."""

from __future__ import annotations

import pytest

from tests.cli.helpers import repart, repart_json
from tests.factories import row_counts


def test_a_split_region_stores_its_scheme_canonical_merge_and_parameters(db_url: str) -> None:
    created = repart_json(
        db_url,
        "region",
        "create",
        "vwap",
        "--key-type",
        "str",
        "--split",
        "dchoices",
        "--merge",
        "volume=sum, pv=sum",
        "--set",
        "split.theta=0.02",
    )
    assert (created["split_scheme"], created["merge"]) == ("dchoices", "pv=sum,volume=sum")
    assert created["settings"] == {"split": {"theta": 0.02}}
    updated = repart_json(db_url, "region", "update", "vwap", "--split", "pkg", "--set", "scale_down_delay=5")
    assert (updated["split_scheme"], updated["merge"]) == ("pkg", "pv=sum,volume=sum")
    assert updated["settings"] == {"split": {"theta": 0.02}, "scale_down_delay": 5}
    preserve = repart_json(db_url, "region", "update", "vwap", "--split", "none")
    assert preserve["split_scheme"] is None and preserve["merge"] == "pv=sum,volume=sum"
    plain = repart_json(db_url, "region", "create", "plain", "--key-type", "int")
    assert plain["split_scheme"] is None and plain["merge"] is None


@pytest.mark.parametrize(
    ("options", "option"),
    [
        (["--split", "dchoices"], "--merge is required in split mode"),
        (["--split", "salting", "--merge", "pv=sum"], "--split must be"),
        (["--split", "pkg", "--merge", "pv=avg"], "--merge must be"),
        (["--set", "split=3"], "--set split must be"),
        (["--set", "split.theta=5"], "--set split.theta must be"),  # checked in a key-preserving region too
        (["--split", "pkg", "--merge", "pv=sum", "--set", "split.scheme=rr"], "--set split.scheme is"),
    ],
)
def test_bad_split_options_exit_2_and_write_nothing(db_url: str, options: list[str], option: str) -> None:
    before = row_counts(db_url)
    result = repart(db_url, "region", "create", "r", "--key-type", "str", *options)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {option}"), result.stderr
    assert row_counts(db_url) == before
