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
