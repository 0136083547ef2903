"""``repart region create|update --set KEY=VALUE``: the controller settings of a region."""

from __future__ import annotations

import pytest

from tests.cli.helpers import one_error, repart, repart_json
from tests.factories import row_counts


def test_settings_are_stored_merged_and_used(db_url: str) -> None:
    created = repart_json(
        db_url,
        "region",
        "create",
        "tu",
        "--key-type",
        "int",
        "--policy",
        "target-utilization",
        "--max-channels",
        "8",
        "--set",
        "target_utilization=0.7",
        "--set",
        "batch_interval_seconds=60",
    )
    assert created["settings"] == {"target_utilization": 0.7, "batch_interval_seconds": 60}
    updated = repart_json(db_url, "region", "update", "tu", "--set", "utilization_band=[0.5, 0.9]")
    assert updated["settings"] == {
        "target_utilization": 0.7,
        "batch_interval_seconds": 60,
        "utilization_band": [0.5, 0.9],
    }


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("bogus=1", "bogus"),
        ("target_utilization=2", "target_utilization"),
        ("counters=1", "counters"),
        ("nokey", "KEY=VALUE"),
        ("utilization_band=[0.85, 0.95]", "--set utilization_band"),
        ("utilization_band=[0.5]", "--set utilization_band"),
        ("batch_interval_seconds=0", "--set batch_interval_seconds"),
        ("batch_interval_seconds=-30", "--set batch_interval_seconds"),
        ("max_scale_down_factor=1", "--set max_scale_down_factor"),
    ],
)
def test_bad_settings_exit_2_and_change_nothing(db_url: str, setting: str, field: str) -> None:
    assert repart(db_url, "region", "create", "r", "--key-type", "str").exit_code == 0
    before = row_counts(db_url)
    for command in (["region", "create", "s", "--key-type", "str"], ["region", "update", "r"]):
        result = repart(db_url, *command, "--set", setting)
        assert result.exit_code == 2, result.output
        assert field in result.output and "Traceback" not in result.output
    assert row_counts(db_url) == before
    assert repart_json(db_url, "region", "show", "r")["settings"] == {}


def test_user_text_in_an_error_is_not_read_as_markup(db_url: str) -> None:
    before = row_counts(db_url)
    result = repart(db_url, "region", "create", "[/x]", "--key-type", "str")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: NAME must be") and "[/x]" in result.stderr
    assert row_counts(db_url) == before


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("plan_keep_days=1e9", "error: --set plan_keep_days must be a number in (0, 36500]"),
        ("plan_keep_days=0", "error: --set plan_keep_days must be a number in (0, 36500]"),
        (
            "plan_keep_versions=100000000000000000000",
            "error: --set plan_keep_versions must be an integer in [1, 2147483647]",
        ),
        ("split=5", "error: --set split must be an object of the split scheme's parameters"),
    ],
)
def test_out_of_range_settings_exit_2_naming_the_range(db_url: str, setting: str, message: str) -> None:
    assert repart(db_url, "region", "create", "r", "--key-type", "str").exit_code == 0
    before = row_counts(db_url)
    for command in (["region", "create", "s", "--key-type", "str"], ["region", "update", "r"]):
        result = repart(db_url, *command, "--set", setting)
        assert result.exit_code == 2, result.output
        assert one_error(result.output).startswith(message), result.output
    assert row_counts(db_url) == before


def test_null_removes_a_setting(db_url: str) -> None:
    repart_json(db_url, "region", "create", "r", "--key-type", "str", "--set", "plan_keep_versions=3")
    updated = repart_json(db_url, "region", "update", "r", "--set", "plan_keep_versions=null")
    assert updated["settings"] == {}
    updated = repart_json(db_url, "region", "update", "r", "--set", "counters=4", "--set", "move_limit=null")
    assert updated["settings"] == {"counters": 4}


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        (
            "--keep-versions",
            "100000000000000000000",
            "error: --keep-versions must be an integer in [1, 2147483647]",
        ),
        ("--older-than", "1e9", "error: --older-than must be a number in (0, 36500], got"),
        ("--older-than", "0", "error: --older-than must be a number in (0, 36500], got"),
    ],
)
def test_out_of_range_prune_options_exit_2_naming_the_range(
    db_url: str, option: str, value: str, message: str
) -> None:
    assert repart(db_url, "region", "create", "r", "--key-type", "str").exit_code == 0
    before = row_counts(db_url)
    result = repart(db_url, "plans", "prune", "r", option, value)
    assert result.exit_code == 2, result.output
    assert one_error(result.output).startswith(message), result.output
    assert row_counts(db_url) == before


@pytest.mark.parametrize("target", ["0.95", "0.3"])
def test_a_target_outside_the_default_band_alone_is_accepted(db_url: str, target: str) -> None:
    created = repart_json(
        db_url, "region", "create", "r", "--key-type", "int", "--set", f"target_utilization={target}"
    )
    assert created["settings"] == {"target_utilization": float(target)}
    assert repart(db_url, "region", "update", "r", "--set", "target_utilization=0.9").exit_code == 0
