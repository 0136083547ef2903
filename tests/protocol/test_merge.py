"""``MergeSpec``: the merge a split-mode region declares, parsed and written canonically."""

from __future__ import annotations

import pytest

from repart.errors import InvalidInput
from repart.protocol.merge import MergeSpec


def test_parse_and_canonical_text() -> None:
    spec = MergeSpec.parse(" volume=sum, pv = sum,low=min,high=max ")
    assert dict(spec.columns) == {"high": "max", "low": "min", "pv": "sum", "volume": "sum"}
    assert spec.to_text() == "high=max,low=min,pv=sum,volume=sum"
    assert MergeSpec.parse(spec.to_text()) == spec


@pytest.mark.parametrize("text", ["", "   ", "pv", "pv=avg", "pv=sum,pv=min", "9x=sum", "pv=sum,", None, 3])
def test_bad_specs_name_the_field(text: object) -> None:
    with pytest.raises(InvalidInput) as raised:
        MergeSpec.parse(text, field="--merge")
    assert raised.value.field == "--merge"


def test_a_merge_names_each_columns_source_in_the_batch() -> None:
    spec = MergeSpec.parse("volume=sum(qty), trades=count, low=min, high = max( price )")
    assert dict(spec.columns) == {"high": "max", "low": "min", "trades": "count", "volume": "sum"}
    assert dict(spec.sources) == {"high": "price", "low": "low", "trades": None, "volume": "qty"}
    assert spec.to_text() == "high=max(price),low=min,trades=count,volume=sum(qty)"
    assert MergeSpec.parse(spec.to_text()) == spec
    assert MergeSpec.of({"volume": "sum(qty)", "trades": "count", "high": "max(price)", "low": "min"}) == spec
    assert MergeSpec.of(spec) is spec


@pytest.mark.parametrize(
    "given",
    [
        "n=count(x)",
        "v=sum(1x)",
        "v=sum()",
        {"volume": "sum,trades=count"},
        {"a": "sum", "b=max,c": "sum"},
        {"volume": 1},
        {},
        7,
    ],
)
def test_a_malformed_source_or_mapping_is_refused_naming_merge(given: object) -> None:
    with pytest.raises(InvalidInput, match=r"^merge must"):
        MergeSpec.of(given)
