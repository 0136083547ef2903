"""``SplitParams``: defaults, the settings round trip, and validation naming ``split.<field>``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from repart.errors import InvalidInput
from repart.partitioning.domain import SPLIT_SCHEMES
from repart.partitioning.split.params import SplitParams


def test_the_schemes_and_the_head_threshold_default_to_1_over_20n() -> None:
    assert SPLIT_SCHEMES == ("pkg", "dchoices", "wchoices", "rr", "fish", "dkg")
    assert SplitParams("dchoices").head_threshold(8) == pytest.approx(1 / 160)
    assert SplitParams("pkg", theta=0.01).head_threshold(8) == 0.01


@pytest.mark.parametrize("scheme", SPLIT_SCHEMES)
def test_settings_round_trip_as_plain_json(scheme: str) -> None:
    params = SplitParams(scheme, theta=0.02, epsilon=0.001, spread=2.5, virtual_nodes=7, seed=3)
    settings = json.loads(json.dumps(params.to_settings()))
    assert settings == {
        "scheme": scheme,
        "theta": 0.02,
        "epsilon": 0.001,
        "spread": 2.5,
        "virtual_nodes": 7,
        "seed": 3,
    }
    assert SplitParams.from_settings(settings) == params
    assert SplitParams.from_settings({"scheme": scheme}) == SplitParams(scheme)
    assert SplitParams.from_settings(SplitParams(scheme).to_settings()) == SplitParams(scheme)


def test_an_integer_theta_is_stored_as_a_float() -> None:
    params = SplitParams("rr", theta=1)
    assert params.theta == 1.0 and isinstance(params.theta, float)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"scheme": "magic"}, "split.scheme"),
        ({"scheme": "pkg", "theta": 0.0}, "split.theta"),
        ({"scheme": "pkg", "theta": 1.5}, "split.theta"),
        ({"scheme": "pkg", "theta": "0.1"}, "split.theta"),
        ({"scheme": "dchoices", "epsilon": 0.0}, "split.epsilon"),
        ({"scheme": "fish", "spread": -1.0}, "split.spread"),
        ({"scheme": "fish", "virtual_nodes": 0}, "split.virtual_nodes"),
        ({"scheme": "fish", "virtual_nodes": 2.5}, "split.virtual_nodes"),
        ({"scheme": "pkg", "seed": -1}, "split.seed"),
    ],
)
def test_a_bad_field_is_named_with_its_accepted_range(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as excinfo:
        SplitParams(**kwargs)
    assert excinfo.value.field == field
    assert "must be" in excinfo.value.requirement


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"theta": 0.1}, "split.scheme"),
        ({"scheme": "pkg", "colour": 1}, "split.colour"),
        ({"scheme": "wchoices", "theta": -0.1}, "split.theta"),
        (["pkg"], "split"),
    ],
)
def test_from_settings_names_the_bad_field(settings: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as excinfo:
        SplitParams.from_settings(settings)
    assert excinfo.value.field == field
