"""The Zipf workload of Gedik §5.1."""

from __future__ import annotations

import numpy as np
import pytest

from repart.errors import InvalidInput
from repart.sim.workload import ZipfWorkload


def test_frequencies_follow_zipf_and_sum_to_one() -> None:
    workload = ZipfWorkload(1.0, 1000)
    f = workload.frequencies
    assert f.sum() == pytest.approx(1.0)
    assert f[0] / f[9] == pytest.approx(10.0)  # f(d_k) ∝ 1/k
    assert np.all(np.diff(f) <= 0)


def test_samples_match_the_frequencies() -> None:
    workload = ZipfWorkload(0.8, 50, key_seed=4)
    sample = workload.sample(200_000, np.random.default_rng(0))
    counts = np.array([np.count_nonzero(sample == key) for key in workload.keys])
    expected = workload.frequencies * sample.size
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected) + 1)


def test_key_seed_permutes_which_key_is_hot() -> None:
    a, b = ZipfWorkload(1.0, 1000, key_seed=1), ZipfWorkload(1.0, 1000, key_seed=2)
    assert sorted(a.keys.tolist()) == sorted(b.keys.tolist()) == list(range(1000))
    assert a.keys[0] != b.keys[0] or a.keys[1] != b.keys[1]


@pytest.mark.parametrize(
    ("z", "domain", "field"), [(-0.5, 10, "z"), (float("nan"), 10, "z"), (1.0, 0, "domain")]
)
def test_bad_workload_names_the_field(z: float, domain: int, field: str) -> None:
    with pytest.raises(InvalidInput, match=field) as excinfo:
        ZipfWorkload(z, domain)
    assert excinfo.value.field == field
