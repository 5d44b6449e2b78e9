"""The bucket ladder of padded cache reads (sim/values.py `bucket_size`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from openinfer_jax.sim import Simulator
from openinfer_jax.sim.values import BUCKETS_PER_DOUBLING, LADDER_START, bucket_size


@given(st.integers(1, 1 << 20), st.sampled_from([1, 2, 4, 8]))
def test_a_bucket_holds_n_and_overshoots_by_less_than_one_step(n: int, per: int) -> None:
    size = bucket_size(n, per_doubling=per)
    assert size >= n
    below = 1 << (n - 1).bit_length() - 1 if n > 1 else 1  # the power of two below n
    if n > max(LADDER_START, 2 * per):
        assert size - n < below // per
    else:
        assert size == 1 << (n - 1).bit_length()  # short lengths: powers of two


@given(st.integers(1, 1 << 16), st.integers(0, 1 << 16))
def test_the_ladder_is_monotonic(n: int, more: int) -> None:
    assert bucket_size(n) <= bucket_size(n + more)
    assert bucket_size(bucket_size(n)) == bucket_size(n)  # a bucket is its own bucket


def test_distinct_buckets_grow_logarithmically() -> None:
    for limit in (64, 1000, 4096):
        buckets = {bucket_size(n) for n in range(1, limit + 1)}
        assert len(buckets) <= BUCKETS_PER_DOUBLING * math.ceil(math.log2(limit)) + 1
    assert sorted({bucket_size(n) for n in range(1, 65)}) == [1, 2, 4, 8, 16, 32, 64]
    assert [bucket_size(n) for n in (1024, 1025, 1281, 1537, 1793)] == [
        1024,
        1280,
        1536,
        1792,
        2048,
    ]
    assert bucket_size(1025, per_doubling=1) == 2048  # the old power-of-two ladder
    assert bucket_size(1500, limit=1400) == 1400


@pytest.mark.parametrize("device", ["cpu", "numpy"])
def test_scalar_input_keeps_its_shape(device: str) -> None:
    """A 0-d dynamic input stays 0-d (np.ascontiguousarray made it shape (1,), and every op
    result computed from it came back with shape (1,))."""
    program = """graph { dynamic { x: f64; } block entry {
        assign y: f64; assign z: f64; transfer x >> y; op neg(x) >> z; return; } }"""
    ex = Simulator(None, program, device=device).make_executor()
    ex.insert(x=np.array(3.0))
    ex.step()
    assert ex.fetch("y").shape == () and ex.fetch("z").shape == ()
    assert float(ex.fetch("z")) == -3.0
