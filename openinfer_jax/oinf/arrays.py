"""Conversions between user arrays, the in-memory representation and on-disk bytes.

In memory (what the reader returns and the simulator uses) a byte-sized dtype is its
NumPy/ml_dtypes type and a packed dtype is unpacked to int8/uint8. On disk everything
is little-endian, packed types are packed LSB-first, and f8 NaN is written as 0x7D like
the original encoder.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType, dtype_from_numpy, pack, unpack
from openinfer_jax.core.errors import OinfFormatError

__all__ = ["F8_NAN", "from_disk", "to_disk", "to_storage"]

F8_NAN = 0x7D  # the original encoder's NaN byte for e5m2


def _range_error(what: str, dtype: DType, lo: int, hi: int, arr: np.ndarray) -> OinfFormatError:
    flat = arr.reshape(-1)
    bad = (flat < lo) | (flat > hi)
    i = int(np.argmax(bad))
    return OinfFormatError(
        f"{what}: {dtype.short} holds values in [{lo}, {hi}], element {i} is {flat[i]}; clip or pick a wider dtype"
    )


def to_storage(values: Any, dtype: DType | None, what: str) -> tuple[np.ndarray, DType]:
    """Convert `values` to the in-memory representation of `dtype` (inferred when None).

    Floats convert with round-to-nearest-even (bf16, f8, f16); integers must fit the
    target range exactly. Returns the (possibly same) array and the dtype.

    Raises:
        OinfFormatError: naming `what`, for a value that does not fit, a non-numeric
            array, or a dtype that tensors cannot have.
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "biuf" and not _is_ml_float(arr.dtype):
        raise OinfFormatError(
            f"{what}: NumPy dtype {arr.dtype} has no .oinf equivalent; pass numbers or bools"
        )
    if dtype is None:
        try:
            dtype = dtype_from_numpy(arr.dtype)
        except ValueError as err:
            raise OinfFormatError(f"{what}: {err}; pass dtype= explicitly") from None
    if not dtype.is_tensor_type:
        raise OinfFormatError(
            f"{what}: {dtype.short} cannot be a tensor dtype (bitset/string/ndarray are metadata-only)"
        )
    target = dtype.numpy
    if arr.dtype == target:
        return arr, dtype
    if dtype.is_float:
        return arr.astype(target), dtype
    source_is_float = arr.dtype.kind == "f" or _is_ml_float(arr.dtype)
    if source_is_float:
        as_f64 = arr.astype(np.float64)
        if not np.all(np.isfinite(as_f64)) or np.any(as_f64 != np.round(as_f64)):
            raise OinfFormatError(
                f"{what}: {dtype.short} needs integer values, got non-integral floats"
            )
    wide = (
        arr.astype(np.float64)
        if source_is_float
        else arr.astype(np.int64)
        if arr.dtype != np.uint64
        else arr
    )
    lo, hi = dtype.value_range() if dtype is not DType.BOOL else (0, 1)
    if dtype in (
        DType.I64,
        DType.U64,
        DType.I32,
        DType.U32,
        DType.I16,
        DType.U16,
        DType.I8,
        DType.U8,
    ):
        info = np.iinfo(target)
        lo, hi = int(info.min), int(info.max)
    if wide.size and (wide.min() < lo or wide.max() > hi):
        raise _range_error(what, dtype, lo, hi, wide)
    if dtype is DType.T1 and wide.size and np.any(wide == 0):
        raise OinfFormatError(f"{what}: t1 holds only -1 and +1, got 0")
    return wide.astype(target), dtype


def _is_ml_float(dt: np.dtype[Any]) -> bool:
    # bfloat16/float8/float4 from ml_dtypes report kind 'V'; identify them by name.
    return dt.name == "bfloat16" or dt.name.startswith(("float8_", "float4_"))


def to_disk(arr: np.ndarray, dtype: DType) -> np.ndarray:
    """Bytes to write for an in-memory array (a contiguous little-endian array or packed uint8)."""
    if dtype.is_packed:
        return pack(arr, dtype)
    out = np.ascontiguousarray(arr)
    if out.dtype.byteorder == ">":
        out = out.astype(out.dtype.newbyteorder("<"))
    if dtype is DType.F8:
        raw = out.reshape(-1).view(np.uint8)
        nan = ((raw & 0x7C) == 0x7C) & ((raw & 0x03) != 0)
        if nan.any():
            raw = raw.copy()
            raw[nan] = F8_NAN
            return raw
    return out


# NumPy refuses a shape whose non-zero dims times the item size reach 2**63, even with 0 elements.
_NUMPY_MAX_BYTES = (1 << 63) - 1


def from_disk(
    buf: Any, offset: int, nbytes: int, dtype: DType, shape: tuple[int, ...], what: str
) -> np.ndarray:
    """The in-memory array for a blob: a read-only zero-copy view, or an unpacked copy for packed types.

    Raises:
        OinfFormatError: naming `what`, for a valid but empty shape NumPy cannot hold
            (a 0 dim beside dims whose product is 2**63 bytes or more).
    """
    numel = 1
    extent = np.dtype(dtype.numpy).itemsize
    for d in shape:
        numel *= d
        extent *= max(d, 1)
    if extent > _NUMPY_MAX_BYTES:
        raise OinfFormatError(
            f"{what}: shape {list(shape)} has {numel} elements, but its other dims are too large "
            "for a NumPy array (their product reaches 2**63 bytes); read it with tensor_bytes() "
            "or fix the dims",
        )
    if dtype.is_packed:
        raw = np.frombuffer(buf, dtype=np.uint8, count=nbytes, offset=offset)
        out = unpack(raw, dtype, numel).reshape(shape)
        out.flags.writeable = False
        return out
    view = np.frombuffer(buf, dtype=dtype.numpy, count=numel, offset=offset).reshape(shape)
    if view.flags.writeable:  # a writable buffer (bytearray) still yields a read-only view
        view.flags.writeable = False
    return view
