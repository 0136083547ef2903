"""The adaptation experiment: records, averaging and the qualitative findings of Gedik §5."""

from __future__ import annotations

import pytest

from repart.errors import InvalidInput
from repart.sim.experiment import RECORD_FIELDS, ExperimentConfig, run_experiment, select


@pytest.fixture(scope="module")
def records() -> list[dict]:
    config = ExperimentConfig(channels=8, domain=50_000, runs=2, seed=3, tail_aware=True)
    return run_experiment(config)


def test_one_record_per_variant_and_n_with_exactly_the_documented_fields(records: list[dict]) -> None:
    variants = {(r["algorithm"], r["tail_aware"]) for r in records}
    assert len(variants) == 5 + 3
    assert len(records) == len(variants) * 8
    for record in records:
        assert tuple(record) == RECORD_FIELDS
    for record in select(records, N=1):
        assert record["m"] == 0.0 and record["explicit_size"] == 0


def test_paper_findings_hold_on_a_small_instance(records: list[dict]) -> None:
    uniform = select(records, algorithm="uniform", tail_aware=False)
    consistent = select(records, algorithm="consistent", tail_aware=False)
    redist = select(records, algorithm="redist", tail_aware=False)
    assert uniform[-1]["m"] > 3 * consistent[-1]["m"]  # uniform hashing migrates almost everything
    assert all(r["explicit_size"] == 0 and r["slot_overrides"] == 0 for r in uniform + consistent)
    assert all(r["explicit_size"] > 0 for r in redist[1:])
    for n in range(4, 9):
        hashed = min(uniform[n - 1]["b"], consistent[n - 1]["b"])
        assert redist[n - 1]["b"] < hashed
    for record in records:
        assert record["b"] >= record["b_lb"] * (1 - 1e-9)


def test_tail_aware_rows_use_overrides_and_balance_better(records: list[dict]) -> None:
    plain = select(records, algorithm="redist", tail_aware=False)
    tail = select(records, algorithm="redist", tail_aware=True)
    assert sum(r["slot_overrides"] for r in tail) > 0
    assert sum(r["b"] for r in tail) < sum(r["b"] for r in plain)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"channels": 0}, "channels"),
        ({"algorithms": ("scan", "magic")}, "algorithms"),
        ({"algorithms": ()}, "algorithms"),
        ({"runs": 0}, "runs"),
        ({"zipf": -1.0}, "zipf"),
        ({"domain": 0}, "domain"),
        ({"alpha": 0.9}, "alpha"),
        ({"sigma": 0.0}, "sigma"),
        ({"resources": "XYZ"}, "resources"),
        ({"utility": "nope"}, "utility"),
        ({"stream_factor": 0.0}, "stream_factor"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidInput, match=field) as excinfo:
        ExperimentConfig(**kwargs)
    assert excinfo.value.field == field
