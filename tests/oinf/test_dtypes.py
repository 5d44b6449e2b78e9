"""dtypes: the original's codes, packing LSB-first, and exact pack/unpack for every value in range."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openinfer_jax.core.errors import OinfFormatError
from openinfer_jax.oinf import (
    PACKED_DTYPES,
    DType,
    dtype_from_name,
    dtype_from_numpy,
    pack,
    packed_nbytes,
    unpack,
)

# reference/upstream-openinfer.md §1, ValueType codes
REFERENCE_CODES = {
    "i8": 1, "i16": 2, "i32": 3, "i64": 4, "u8": 5, "u16": 6, "u32": 7, "u64": 8, "f16": 9, "f32": 10,
    "f64": 11, "bool": 12, "bitset": 13, "string": 14, "ndarray": 15, "bf16": 16, "f8": 17, "i4": 18,
    "i2": 19, "i1": 20, "u4": 21, "u2": 22, "u1": 23, "t2": 24, "t1": 25,
}  # fmt: skip
BITS = {"i4": 4, "u4": 4, "i2": 2, "u2": 2, "t2": 2, "i1": 1, "u1": 1, "t1": 1}


# This package's extension (docs/oinf.md §3, §8 (h)): the narrow floats of ONNX and OCP.
EXTENSION_CODES = {"f8e4m3fn": 26, "f8e4m3fnuz": 27, "f8e5m2fnuz": 28, "f8e8m0": 29, "f4e2m1": 30}


def test_codes_match_reference() -> None:
    assert {d.short: d.code for d in DType} == {**REFERENCE_CODES, **EXTENSION_CODES}


@pytest.mark.parametrize("name", sorted(EXTENSION_CODES))
def test_narrow_floats_round_trip_through_a_file(name: str, tmp_path: Path) -> None:
    """Every byte pattern of a narrow float (f4e2m1: every 4-bit code, one per byte) is
    written and read back bit for bit."""
    from openinfer_jax.oinf import ModelLoader, write_oinf

    dtype = dtype_from_name(name)
    assert dtype.is_float and dtype.bits == 8 and not dtype.is_packed
    codes = np.arange(16 if dtype is DType.F4E2M1 else 256, dtype=np.uint8)
    values = codes.view(dtype.numpy)
    assert dtype_from_numpy(values.dtype) is dtype
    write_oinf(tmp_path / "m.oinf", tensors={"t": values})
    with ModelLoader.open(tmp_path / "m.oinf") as model:
        back = np.array(model.tensor("t"))
    assert back.dtype == dtype.numpy and np.array_equal(back.view(np.uint8), codes)


@pytest.mark.parametrize("name,bits", sorted(BITS.items()))
def test_packed_bits(name: str, bits: int) -> None:
    dtype = dtype_from_name(name)
    assert dtype in PACKED_DTYPES and dtype.bits == bits
    assert packed_nbytes(dtype, 9) == (9 * bits + 7) // 8


def _domain(dtype: DType) -> list[int]:
    if dtype is DType.T1:
        return [-1, 1]
    lo, hi = dtype.value_range()
    return list(range(lo, hi + 1))


@pytest.mark.parametrize("dtype", sorted(PACKED_DTYPES, key=lambda d: d.code), ids=str)
def test_every_value_in_range_at_every_position(dtype: DType) -> None:
    domain = _domain(dtype)
    per_byte = 8 // dtype.bits
    # each value at each position within a byte, plus a ragged tail
    values = [v for v in domain for _ in range(per_byte)] + domain[:1]
    packed = pack(values, dtype)
    assert packed.size == dtype.nbytes(len(values))
    out = unpack(packed, dtype, len(values))
    assert out.dtype == (np.int8 if dtype.is_signed_int else np.uint8)
    assert out.tolist() == values


def test_lsb_first_layout() -> None:
    assert pack([1, 2, 3, 0], DType.U2).tolist() == [0b00111001]
    assert pack([-1, 1], DType.I4).tolist() == [0x1F]
    assert pack([-1, 1, 1, -1, -1, -1, -1, -1, 1], DType.T1).tolist() == [0b00000110, 0b1]
    assert pack([-1, 0, 1], DType.T2).tolist() == [0b010011]


@pytest.mark.parametrize("dtype", sorted(PACKED_DTYPES, key=lambda d: d.code), ids=str)
def test_out_of_range_is_rejected(dtype: DType) -> None:
    lo, hi = dtype.value_range()
    with pytest.raises(OinfFormatError):
        pack([hi + 1], dtype)
    with pytest.raises(OinfFormatError):
        pack([lo - 1 if dtype is not DType.T1 else 0], dtype)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(PACKED_DTYPES, key=lambda d: d.code)), st.data())
def test_pack_unpack_round_trip(dtype: DType, data: st.DataObject) -> None:
    domain = _domain(dtype)
    values = data.draw(st.lists(st.sampled_from(domain), max_size=67))
    assert unpack(pack(values, dtype), dtype, len(values)).tolist() == values


def test_unpack_short_buffer() -> None:
    with pytest.raises(OinfFormatError, match="need 2 bytes"):
        unpack(b"\x00", DType.I4, 3)


@pytest.mark.parametrize(
    "alias,expected",
    [("f8e5m2", DType.F8), ("float8e5m2", DType.F8), ("bfloat16", DType.BF16), ("F32", DType.F32)],
)
def test_aliases(alias: str, expected: DType) -> None:
    assert dtype_from_name(alias) is expected


def test_from_numpy_and_unknown() -> None:
    assert dtype_from_numpy(np.dtype(">f4")) is DType.F32
    with pytest.raises(ValueError):
        dtype_from_numpy(np.complex64)
    with pytest.raises(ValueError, match="unknown dtype"):
        dtype_from_name("f12")
