"""Sampling: greedy, seeded reproducibility, top-k and top-p restrict the support."""

from __future__ import annotations

import numpy as np
import pytest

from openinfer_jax.errors import GenerationError
from openinfer_jax.generate import Sampler, SamplingConfig

LOGITS = np.log(np.array([0.5, 0.25, 0.15, 0.1]))


def draws(config: SamplingConfig, n: int = 400) -> list[int]:
    sampler = Sampler(config)
    return [sampler(LOGITS) for _ in range(n)]


def test_greedy_is_argmax() -> None:
    assert set(draws(SamplingConfig(), 5)) == {0}


def test_seed_reproduces_and_temperature_spreads() -> None:
    a = draws(SamplingConfig(temperature=1.0, seed=7))
    assert a == draws(SamplingConfig(temperature=1.0, seed=7))
    assert a != draws(SamplingConfig(temperature=1.0, seed=8))
    counts = np.bincount(a, minlength=4) / len(a)
    np.testing.assert_allclose(counts, [0.5, 0.25, 0.15, 0.1], atol=0.08)


def test_top_k_and_top_p_restrict_the_support() -> None:
    assert set(draws(SamplingConfig(temperature=1.0, top_k=2, seed=1))) == {0, 1}
    # 0.5 + 0.25 reaches 0.7: the nucleus is the two most likely tokens.
    assert set(draws(SamplingConfig(temperature=1.0, top_p=0.7, seed=1))) == {0, 1}
    assert set(draws(SamplingConfig(temperature=1.0, top_p=0.4, seed=1))) == {0}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (SamplingConfig(temperature=-1.0), "temperature must be >= 0"),
        (SamplingConfig(top_k=-2), "top_k must be >= 0"),
        (SamplingConfig(top_p=0.0), r"top_p must be in \(0, 1\]"),
    ],
)
def test_bad_settings_are_typed_errors(config: SamplingConfig, message: str) -> None:
    with pytest.raises(GenerationError, match=message):
        Sampler(config)
