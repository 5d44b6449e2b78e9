"""Element types of `.oinf` files and graphs, with the original format's codes.

Every dtype has a code (docs/oinf.md, table of value types), a short name used in the
DSL (``f32``, ``i4``), and a NumPy type. Byte-sized types map to a NumPy dtype directly
(bf16 and the 8-bit floats through ml_dtypes). Packed types (i4/u4/i2/u2/i1/u1/t2/t1) are
stored LSB-first, several elements per byte; in memory they unpack to int8 or uint8 arrays.
The 4-bit float f4e2m1 is stored one element per byte (its code in the low nibble), as
ml_dtypes holds it in memory.
"""

from __future__ import annotations

import enum
from typing import Any

import ml_dtypes
import numpy as np

from openinfer_jax.core.errors import OinfFormatError

__all__ = [
    "FLOAT_DTYPES",
    "NARROW_FLOATS",
    "PACKED_DTYPES",
    "SIGNED_DTYPES",
    "UNSIGNED_DTYPES",
    "DType",
    "dtype_from_name",
    "dtype_from_numpy",
    "pack",
    "packed_nbytes",
    "unpack",
]


class DType(enum.Enum):
    """An element type. The value is the original format's value-type code."""

    I8 = 1
    I16 = 2
    I32 = 3
    I64 = 4
    U8 = 5
    U16 = 6
    U32 = 7
    U64 = 8
    F16 = 9
    F32 = 10
    F64 = 11
    BOOL = 12
    BITSET = 13
    STRING = 14
    NDARRAY = 15
    BF16 = 16
    F8 = 17
    I4 = 18
    I2 = 19
    I1 = 20
    U4 = 21
    U2 = 22
    U1 = 23
    T2 = 24
    T1 = 25
    # The narrow floats of ONNX / OCP (ml_dtypes names): storage types, which `cast` converts.
    F8E4M3FN = 26
    F8E4M3FNUZ = 27
    F8E5M2FNUZ = 28
    F8E8M0 = 29
    F4E2M1 = 30

    # Members are singletons compared by identity, so the identity hash agrees with ==;
    # Enum's own __hash__ (hash of the name, in Python) is a hot spot of the simulator's
    # per-op caches, which key on dtypes.
    __hash__ = object.__hash__

    # ---- names -------------------------------------------------------------------
    @property
    def code(self) -> int:
        """The on-disk value-type code."""
        return self.value

    @property
    def short(self) -> str:
        """The DSL spelling: ``f32``, ``i4``, ``bool``, ``bitset``."""
        return self.name.lower()

    def __str__(self) -> str:
        return self.short

    # ---- classification ------------------------------------------------------------
    @property
    def is_packed(self) -> bool:
        """True for sub-byte types stored several to a byte."""
        return self in PACKED_DTYPES

    @property
    def is_float(self) -> bool:
        """True for f8 (every 8-bit variant), f4e2m1, bf16, f16, f32, f64."""
        return self in FLOAT_DTYPES

    @property
    def is_signed_int(self) -> bool:
        """True for i8..i64 and the signed packed types (i4, i2, i1, t2, t1)."""
        return self in SIGNED_DTYPES or self in (DType.I4, DType.I2, DType.I1, DType.T2, DType.T1)

    @property
    def is_unsigned_int(self) -> bool:
        """True for u8..u64 and u4, u2, u1."""
        return self in UNSIGNED_DTYPES or self in (DType.U4, DType.U2, DType.U1)

    @property
    def is_int(self) -> bool:
        """True for every integer type, packed or not (not bool)."""
        return self.is_signed_int or self.is_unsigned_int

    @property
    def is_tensor_type(self) -> bool:
        """True if tensors may have this type (bitset, string and ndarray are metadata only)."""
        return self not in (DType.BITSET, DType.STRING, DType.NDARRAY)

    @property
    def bits(self) -> int:
        """Bits per element on disk."""
        return _BITS[self]

    @property
    def itemsize(self) -> int:
        """Bytes per element of the unpacked NumPy representation."""
        return int(np.dtype(self.numpy).itemsize)

    @property
    def numpy(self) -> np.dtype[Any]:
        """The NumPy dtype of this type in memory (packed types unpack to int8/uint8)."""
        try:
            return _NUMPY[self]
        except KeyError:
            raise TypeError(f"{self.short} has no NumPy element type") from None

    def nbytes(self, numel: int) -> int:
        """Bytes that `numel` elements occupy on disk (packed: ceil(numel*bits/8))."""
        return (numel * self.bits + 7) // 8

    def value_range(self) -> tuple[int, int]:
        """Inclusive (min, max) of an integer type's values, packed types included."""
        if self is DType.T1:
            return (-1, 1)
        if self is DType.T2:
            return (-1, 1)
        if self is DType.BOOL:
            return (0, 1)
        if not self.is_int:
            raise TypeError(f"{self.short} is not an integer type")
        b = self.bits
        if self.is_signed_int:
            return (-(1 << (b - 1)), (1 << (b - 1)) - 1)
        return (0, (1 << b) - 1)


#: Floats narrower than 16 bits besides f8 (e5m2): only `cast` reads and writes them.
NARROW_FLOATS = frozenset(
    {DType.F8E4M3FN, DType.F8E4M3FNUZ, DType.F8E5M2FNUZ, DType.F8E8M0, DType.F4E2M1}
)
FLOAT_DTYPES = frozenset({DType.F8, DType.BF16, DType.F16, DType.F32, DType.F64}) | NARROW_FLOATS
SIGNED_DTYPES = frozenset({DType.I8, DType.I16, DType.I32, DType.I64})
UNSIGNED_DTYPES = frozenset({DType.U8, DType.U16, DType.U32, DType.U64})
PACKED_DTYPES = frozenset(
    {DType.I4, DType.U4, DType.I2, DType.U2, DType.I1, DType.U1, DType.T2, DType.T1}
)

_BITS: dict[DType, int] = {
    DType.I8: 8, DType.I16: 16, DType.I32: 32, DType.I64: 64,
    DType.U8: 8, DType.U16: 16, DType.U32: 32, DType.U64: 64,
    DType.F16: 16, DType.F32: 32, DType.F64: 64, DType.BF16: 16, DType.F8: 8,
    DType.BOOL: 8, DType.BITSET: 1, DType.STRING: 8, DType.NDARRAY: 8,
    DType.I4: 4, DType.U4: 4, DType.I2: 2, DType.U2: 2, DType.T2: 2,
    DType.I1: 1, DType.U1: 1, DType.T1: 1,
    DType.F8E4M3FN: 8, DType.F8E4M3FNUZ: 8, DType.F8E5M2FNUZ: 8, DType.F8E8M0: 8,
    DType.F4E2M1: 8,  # one element per byte on disk too
}  # fmt: skip

_NUMPY: dict[DType, np.dtype[Any]] = {
    DType.I8: np.dtype("<i1"), DType.I16: np.dtype("<i2"), DType.I32: np.dtype("<i4"),
    DType.I64: np.dtype("<i8"), DType.U8: np.dtype("<u1"), DType.U16: np.dtype("<u2"),
    DType.U32: np.dtype("<u4"), DType.U64: np.dtype("<u8"), DType.F16: np.dtype("<f2"),
    DType.F32: np.dtype("<f4"), DType.F64: np.dtype("<f8"), DType.BOOL: np.dtype(np.bool_),
    DType.BF16: np.dtype(ml_dtypes.bfloat16), DType.F8: np.dtype(ml_dtypes.float8_e5m2),
    DType.I4: np.dtype(np.int8), DType.I2: np.dtype(np.int8), DType.I1: np.dtype(np.int8),
    DType.T2: np.dtype(np.int8), DType.T1: np.dtype(np.int8),
    DType.U4: np.dtype(np.uint8), DType.U2: np.dtype(np.uint8), DType.U1: np.dtype(np.uint8),
    DType.F8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    DType.F8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    DType.F8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    DType.F8E8M0: np.dtype(ml_dtypes.float8_e8m0fnu),
    DType.F4E2M1: np.dtype(ml_dtypes.float4_e2m1fn),
}  # fmt: skip

_ALIASES = {
    "f8e5m2": DType.F8,
    "float8e5m2": DType.F8,
    "float8_e5m2": DType.F8,
    "float8_e4m3fn": DType.F8E4M3FN,
    "float8_e4m3fnuz": DType.F8E4M3FNUZ,
    "float8_e5m2fnuz": DType.F8E5M2FNUZ,
    "float8_e8m0fnu": DType.F8E8M0,
    "f8e8m0fnu": DType.F8E8M0,
    "float4_e2m1fn": DType.F4E2M1,
    "f4e2m1fn": DType.F4E2M1,
    "float16": DType.F16,
    "half": DType.F16,
    "float32": DType.F32,
    "float": DType.F32,
    "float64": DType.F64,
    "double": DType.F64,
    "bfloat16": DType.BF16,
    "int8": DType.I8,
    "int16": DType.I16,
    "int32": DType.I32,
    "int64": DType.I64,
    "uint8": DType.U8,
    "uint16": DType.U16,
    "uint32": DType.U32,
    "uint64": DType.U64,
}


def dtype_from_name(name: str) -> DType:
    """Parse a dtype name (``"f32"``, ``"bf16"``, ``"f8e5m2"``, ``"float32"``).

    Raises:
        ValueError: for an unknown name; the message lists the known ones.
    """
    key = name.strip().lower()
    if key in _ALIASES:
        return _ALIASES[key]
    try:
        return DType[key.upper()]
    except KeyError:
        known = ", ".join(d.short for d in DType if d.is_tensor_type)
        raise ValueError(f"unknown dtype {name!r}; expected one of {known}") from None


_FROM_NUMPY = {
    np.dtype(np.int8): DType.I8, np.dtype(np.int16): DType.I16, np.dtype(np.int32): DType.I32,
    np.dtype(np.int64): DType.I64, np.dtype(np.uint8): DType.U8, np.dtype(np.uint16): DType.U16,
    np.dtype(np.uint32): DType.U32, np.dtype(np.uint64): DType.U64,
    np.dtype(np.float16): DType.F16, np.dtype(np.float32): DType.F32,
    np.dtype(np.float64): DType.F64, np.dtype(np.bool_): DType.BOOL,
    np.dtype(ml_dtypes.bfloat16): DType.BF16, np.dtype(ml_dtypes.float8_e5m2): DType.F8,
    **{_NUMPY[d]: d for d in NARROW_FLOATS},
}  # fmt: skip


def dtype_from_numpy(dtype: Any) -> DType:
    """The byte-sized DType of a NumPy dtype (packed types are never inferred).

    Raises:
        ValueError: if the NumPy dtype has no `.oinf` equivalent.
    """
    nd = np.dtype(dtype).newbyteorder("=") if np.dtype(dtype).byteorder == ">" else np.dtype(dtype)
    try:
        return _FROM_NUMPY[nd]
    except KeyError:
        raise ValueError(f"NumPy dtype {np.dtype(dtype)} has no .oinf equivalent") from None


def packed_nbytes(dtype: DType, numel: int) -> int:
    """Bytes of `numel` packed elements: ceil(numel * bits / 8)."""
    return dtype.nbytes(numel)


def _check_packed(dtype: DType) -> None:
    if not dtype.is_packed:
        raise ValueError(f"{dtype.short} is not a packed type")


def pack(values: Any, dtype: DType) -> np.ndarray:
    """Pack integer values of a packed type into bytes, LSB-first (docs/oinf.md, packed types).

    `values` is any array-like of ints; t1 takes -1/+1, t2 takes -1/0/1.

    Raises:
        OinfFormatError: if a value is outside the type's range.
        ValueError: if `dtype` is not packed.
    """
    _check_packed(dtype)
    flat = np.asarray(values).reshape(-1)
    if flat.dtype.kind not in "iub" and (
        not np.all(np.isfinite(flat)) or np.any(flat != np.round(flat))
    ):
        raise OinfFormatError(f"{dtype.short} values must be integers")
    ints = flat.astype(np.int64)
    if dtype is DType.T1:
        bad = (ints != -1) & (ints != 1)
        if np.any(bad):
            raise OinfFormatError(
                f"t1 values must be -1 or +1, got {int(ints[np.argmax(bad)])} "
                f"at element {int(np.argmax(bad))}"
            )
        codes = (ints > 0).astype(np.uint8)
    else:
        lo, hi = dtype.value_range()
        bad = (ints < lo) | (ints > hi)
        if np.any(bad):
            i = int(np.argmax(bad))
            raise OinfFormatError(
                f"{dtype.short} values must lie in [{lo}, {hi}], got {int(ints[i])} at element {i}"
            )
        codes = (ints & ((1 << dtype.bits) - 1)).astype(np.uint8)
    bits = dtype.bits
    per_byte = 8 // bits
    pad = (-codes.size) % per_byte
    if pad:
        codes = np.concatenate([codes, np.zeros(pad, np.uint8)])
    groups = codes.reshape(-1, per_byte).astype(np.uint16)
    shifts = (np.arange(per_byte, dtype=np.uint16) * bits)[None, :]
    packed: np.ndarray = np.bitwise_or.reduce(groups << shifts, axis=1).astype(np.uint8)
    return packed


def unpack(data: Any, dtype: DType, numel: int) -> np.ndarray:
    """Unpack `numel` elements of a packed type from bytes (LSB-first).

    Returns int8 for signed types (t1 as -1/+1), uint8 for unsigned ones.

    Raises:
        OinfFormatError: if `data` holds fewer than ceil(numel*bits/8) bytes.
    """
    _check_packed(dtype)
    raw = (
        np.frombuffer(memoryview(data), dtype=np.uint8)
        if not isinstance(data, np.ndarray)
        else data.reshape(-1).view(np.uint8)
    )
    need = dtype.nbytes(numel)
    if raw.size < need:
        raise OinfFormatError(f"{dtype.short}: {numel} elements need {need} bytes, got {raw.size}")
    bits = dtype.bits
    per_byte = 8 // bits
    # One uint8 array of per_byte * need codes, then in-place uint8 arithmetic: the peak is
    # about twice the unpacked size (no int16/int64 temporaries).
    codes = np.empty((need, per_byte), dtype=np.uint8)
    for k in range(per_byte):
        np.right_shift(raw[:need], k * bits, out=codes[:, k])
    codes &= (1 << bits) - 1
    flat = codes.reshape(-1)[:numel]
    if dtype is DType.T1:
        flat *= 2
        flat -= 1  # 0 -> 255 (-1), 1 -> 1
        return flat.view(np.int8)
    if dtype.is_signed_int:
        sign = 1 << (bits - 1)
        flat ^= sign
        flat -= sign  # two's complement in uint8 arithmetic (wraps like int8)
        return flat.view(np.int8)
    return flat
