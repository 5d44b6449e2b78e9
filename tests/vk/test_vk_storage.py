"""Host-side layout of device buffers (no Vulkan needed): words round-trip every dtype."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openinfer_jax.core.dtypes import DType, pack
from openinfer_jax.core.errors import BackendError
from openinfer_jax.vk.storage import STORABLE_DTYPES, decode_words, encode_words, storage_words
from tests.vk.vk_cases import sample

DTYPES = sorted(STORABLE_DTYPES, key=lambda d: d.value)


@pytest.mark.parametrize("dtype", DTYPES, ids=[d.short for d in DTYPES])
@settings(max_examples=15, deadline=None)
@given(numel=st.integers(0, 70), seed=st.integers(0, 2**16))
def test_words_round_trip(dtype: DType, numel: int, seed: int) -> None:
    values = sample(dtype, (numel,), np.random.default_rng(seed))
    words = encode_words(values, dtype)
    assert words.dtype == np.uint32 and words.size == storage_words(dtype, numel)
    back = decode_words(words, dtype, (numel,))
    np.testing.assert_array_equal(back.view(np.uint8), values.view(np.uint8))


@pytest.mark.parametrize("dtype", [DType.I4, DType.U2, DType.T1, DType.I1])
def test_packed_words_are_the_oinf_bytes(dtype: DType) -> None:
    values = sample(dtype, (37,), np.random.default_rng(1))
    on_disk = pack(values, dtype)
    words = encode_words(values, dtype)
    assert bytes(words.view(np.uint8)[: on_disk.size]) == bytes(on_disk)


def test_zero_elements_still_take_one_word() -> None:
    assert storage_words(DType.F32, 0) == 1
    assert storage_words(DType.U1, 33) == 2
    assert storage_words(DType.F64, 3) == 6


def test_out_of_range_packed_values_are_a_backend_error() -> None:
    with pytest.raises(BackendError, match="i4"):
        encode_words(np.array([9], np.int8), DType.I4)


def test_metadata_types_cannot_be_tensors() -> None:
    with pytest.raises(BackendError, match="string"):
        encode_words(np.array([1]), DType.STRING)
