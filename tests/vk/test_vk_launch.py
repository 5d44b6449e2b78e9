"""Broadcast strides, dim collapsing and grids (pure shape arithmetic, no Vulkan)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openinfer_jax.vk.launch import (
    broadcast_strides,
    bucket,
    bucket_grid,
    collapse,
    contiguous_strides,
    dispatch_grid,
)


def _gather(shape: tuple[int, ...], strides: tuple[int, ...], source: np.ndarray) -> np.ndarray:
    """What a kernel reads: element index = sum(coord * stride) for every output coordinate."""
    out = np.empty(int(np.prod(shape)), source.dtype)
    for o, coord in enumerate(np.ndindex(*shape)):
        out[o] = source[sum(c * s for c, s in zip(coord, strides))]
    return out


shapes = st.lists(st.integers(1, 4), min_size=0, max_size=4).map(tuple)


@settings(max_examples=60, deadline=None)
@given(out_shape=shapes, data=st.data())
def test_strided_reads_equal_numpy_broadcast(
    out_shape: tuple[int, ...], data: st.DataObject
) -> None:
    # an input shape that broadcasts to out_shape: drop leading dims, set some dims to 1
    keep = data.draw(st.integers(0, len(out_shape)))
    in_shape = tuple(
        d if not data.draw(st.booleans()) else 1 for d in out_shape[len(out_shape) - keep :]
    )
    source = np.arange(int(np.prod(in_shape)))
    strides = broadcast_strides(in_shape, out_shape)
    expected = np.broadcast_to(source.reshape(in_shape), out_shape).reshape(-1)
    np.testing.assert_array_equal(_gather(out_shape, strides, source), expected)
    # collapsing dims must not change what is read
    shape, (collapsed,) = collapse(out_shape, [strides])
    assert int(np.prod(shape)) == int(np.prod(out_shape))
    np.testing.assert_array_equal(_gather(shape, collapsed, source), expected)


def test_same_shape_collapses_to_rank_one() -> None:
    shape = (2, 3, 4)
    s = contiguous_strides(shape)
    assert collapse(shape, [s, s]) == ((24,), ((1,), (1,)))


def test_broadcast_that_does_not_fit_is_rejected() -> None:
    with pytest.raises(ValueError, match="does not broadcast"):
        broadcast_strides((3,), (4,))


def test_grid_spills_into_y_beyond_65535_groups() -> None:
    assert dispatch_grid(128, 128) == (1, 1, 1)
    x, y, z = dispatch_grid(65536 * 128, 128)
    assert (x, z) == (65535, 1) and x * y * 128 >= 65536 * 128


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 1 << 24))
def test_a_bucket_covers_its_count_with_at_most_a_quarter_more(n: int) -> None:
    b = bucket(n)
    assert n <= b <= max(n, 8) * 5 // 4 + 1
    assert bucket(b) == b  # a bucket is its own bucket: buffers of one bucket are one size


def test_buckets_change_rarely_as_a_count_grows() -> None:
    # 4 buckets per octave: a KV read growing by one entry per step changes bucket (and so
    # rebuilds its pipelines) ~4 times per doubling, not every step.
    assert len({bucket(n) for n in range(1025, 2049)}) == 4
    assert [bucket(n) for n in (9, 17, 33, 1000)] == [10, 20, 40, 1024]


def test_only_one_row_grids_are_bucketed() -> None:
    assert bucket_grid((9, 1, 1)) == (10, 1, 1)
    assert bucket_grid((65535, 1, 1)) == (65535, 1, 1)  # the limit is kept
    assert bucket_grid((65535, 3, 1)) == (65535, 3, 1)  # the flat index spans rows: exact
    assert bucket_grid((9, 1, 2)) == (9, 1, 2)
