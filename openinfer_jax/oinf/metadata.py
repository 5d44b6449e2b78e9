"""Metadata values: Python value <-> (value type, payload bytes) (docs/oinf.md §Metadata payloads).

Type inference follows the original encoder: `bool` -> BOOL, `int` -> the smallest
U8..U64 that fits (I8..I64 when negative), `float` -> F32, `str` -> STRING,
`Bitset` -> BITSET, `np.ndarray` -> NDARRAY, a NumPy scalar -> its own dtype, and
``(value, DType.X)`` forces a type.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import OinfFormatError
from openinfer_jax.oinf import spec
from openinfer_jax.oinf.arrays import from_disk, to_disk, to_storage
from openinfer_jax.oinf.bitset import Bitset
from openinfer_jax.oinf.checks import Checker

__all__ = [
    "SCALAR_SIZES",
    "Deferred",
    "MetadataValue",
    "MetadataValues",
    "decode_metadata",
    "encode_metadata",
]

MetadataValue = int | float | bool | str | Bitset | np.ndarray

# Payload size of every scalar value type (R18): byte-sized types use their width,
# packed scalars take one byte.
SCALAR_SIZES: dict[DType, int] = {
    d: (d.bits // 8 if not d.is_packed else 1) for d in DType if d.is_tensor_type
}

_INT_LADDER_UNSIGNED = (DType.U8, DType.U16, DType.U32, DType.U64)
_INT_LADDER_SIGNED = (DType.I8, DType.I16, DType.I32, DType.I64)
_PAIR = struct.Struct("<II")


def _infer_int(value: int, what: str) -> DType:
    ladder = _INT_LADDER_UNSIGNED if value >= 0 else _INT_LADDER_SIGNED
    for dtype in ladder:
        info = np.iinfo(dtype.numpy)
        if info.min <= value <= info.max:
            return dtype
    raise OinfFormatError(f"{what}: integer {value} does not fit in 64 bits")


def _ndarray_payload(arr: np.ndarray, dtype: DType) -> bytes:
    head = _PAIR.pack(dtype.code, arr.ndim) + struct.pack(f"<{arr.ndim}Q", *arr.shape)
    body = head + to_disk(arr, dtype).tobytes()
    return body.ljust(spec.align_up(len(body)), b"\x00")


def encode_metadata(value: Any, what: str) -> tuple[DType, bytes]:
    """The value type and payload bytes of a metadata value (see module docstring).

    Raises:
        OinfFormatError: naming `what`, for an unsupported Python type, an integer
            outside 64 bits, a value out of range for a forced type, or a non-ASCII string.
    """
    forced: DType | None = None
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], DType):
        value, forced = value
    if forced in (DType.STRING, DType.BITSET, DType.NDARRAY):
        forced = None if forced is DType.NDARRAY else forced
        if forced is DType.STRING and not isinstance(value, str):
            raise OinfFormatError(
                f"{what}: a STRING value must be a str, got {type(value).__name__}"
            )
        if forced is DType.BITSET and not isinstance(value, Bitset):
            raise OinfFormatError(
                f"{what}: a BITSET value must be a Bitset, got {type(value).__name__}"
            )
        forced = None
    if isinstance(value, str):
        if not value.isascii() or not spec.is_valid_text(value.encode("ascii")):
            raise OinfFormatError(
                f"{what}: STRING values must be printable ASCII (R10); got {value[:40]!r}"
            )
        return DType.STRING, spec.encode_string(value)
    if isinstance(value, Bitset):
        body = _PAIR.pack(len(value), (len(value) + 7) // 8) + value.to_bytes()
        return DType.BITSET, body.ljust(spec.align_up(len(body)), b"\x00")
    if isinstance(value, np.ndarray):
        arr, dtype = to_storage(value, forced, what)
        return DType.NDARRAY, _ndarray_payload(arr, dtype)
    if isinstance(value, (bool, np.bool_)) and forced is None:
        return DType.BOOL, b"\x01" if value else b"\x00"
    if forced is None:
        # NumPy scalars first: np.float64 is a subclass of float and must keep its own dtype.
        if isinstance(value, np.generic):
            arr, forced = to_storage(np.asarray(value), None, what)
        elif isinstance(value, int):
            forced = _infer_int(value, what)
        elif isinstance(value, float):
            forced = DType.F32
        else:
            raise OinfFormatError(
                f"{what}: unsupported metadata type {type(value).__name__}; use int, float, bool, str, "
                "Bitset, np.ndarray or (value, DType)"
            )
    if isinstance(value, (list, tuple)):
        raise OinfFormatError(
            f"{what}: a list is not a scalar; pass np.asarray(...) for an NDARRAY value"
        )
    arr, dtype = to_storage(np.asarray(value), forced, what)
    if arr.ndim != 0:
        raise OinfFormatError(f"{what}: a {dtype.short} metadata scalar must be a single value")
    return dtype, to_disk(arr.reshape(1), dtype).tobytes()


class Deferred:
    """A validated BITSET or NDARRAY payload, decoded on first access.

    Opening a model checks every payload but unpacks none: a 1 MiB packed i1 array would
    otherwise cost its unpacked size (and temporaries) at open, whether it is used or not.
    """

    __slots__ = ("decode",)

    def __init__(self, decode: Callable[[], Any]) -> None:
        self.decode = decode


class MetadataValues(Mapping[str, Any]):
    """key -> typed metadata value; BITSET and NDARRAY values are decoded on first access.

    A read-only mapping (compares equal to a dict of the same items). Decoding a valid
    payload can still fail for an empty NDARRAY whose dims NumPy cannot hold; that raises
    `OinfFormatError` naming the entry, on access.
    """

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = {} if values is None else values

    def __getitem__(self, key: str) -> Any:
        value = self._values[key]
        if isinstance(value, Deferred):
            value = self._values[key] = value.decode()
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def set(self, key: str, value: Any) -> None:
        """Record a checked value (or `Deferred`); for the parser."""
        self._values[key] = value

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{k!r}: {'<deferred>' if isinstance(v, Deferred) else repr(v)}"
            for k, v in self._values.items()
        )
        return "{" + shown + "}"


# Over 80 lines on purpose: one branch per value type, in the order of the value-type
# table of docs/oinf.md, each with the rule it enforces.
def decode_metadata(
    buf: memoryview, offset: int, nbytes: int, vtype: DType, checker: Checker, field: str
) -> Any:
    """Check a payload that lies in bounds (R17 checked) against R18-R21 and R37.

    Returns the typed value of a scalar or STRING, a `Deferred` for a BITSET or NDARRAY
    (checked now, decoded when first read), or None after a violation.
    """
    if vtype in SCALAR_SIZES:
        if nbytes != SCALAR_SIZES[vtype]:
            checker.fail(
                "R18",
                f"a {vtype.short} value takes {SCALAR_SIZES[vtype]} bytes, value_nbytes is {nbytes}",
                offset=offset,
                field=field,
            )
            return None
        if vtype is DType.BOOL:
            return buf[offset] != 0
        item = from_disk(buf, offset, nbytes, vtype, (1,), field)[0]
        return float(item) if vtype.is_float else int(item)
    if vtype is DType.STRING:
        if nbytes < 4:
            checker.fail(
                "R19",
                f"a STRING value needs at least 4 bytes, value_nbytes is {nbytes}",
                offset=offset,
                field=field,
            )
            return None
        length = struct.unpack_from("<I", buf, offset)[0]
        if nbytes != spec.string_size(length):
            checker.fail(
                "R19",
                f"string length {length} needs value_nbytes {spec.string_size(length)}, got {nbytes}",
                offset=offset,
                field=field,
            )
            return None
        raw = bytes(buf[offset + 4 : offset + 4 + length])
        if not spec.is_valid_text(raw):
            checker.fail(
                "R10", "a STRING value must be printable ASCII", offset=offset + 4, field=field
            )
            return None
        if any(buf[offset + 4 + length : offset + nbytes]):
            checker.fail(
                "R11",
                "string padding bytes are not 0",
                offset=offset + 4 + length,
                field=field,
            )
            return None
        return raw.decode("ascii")
    if vtype is DType.BITSET:
        if nbytes < 8:
            checker.fail(
                "R20",
                f"a BITSET value needs at least 8 bytes, value_nbytes is {nbytes}",
                offset=offset,
                field=field,
            )
            return None
        bit_count, byte_count = _PAIR.unpack_from(buf, offset)
        if byte_count != (bit_count + 7) // 8 or nbytes != spec.align_up(8 + byte_count):
            checker.fail(
                "R20",
                f"bit_count {bit_count}, byte_count {byte_count} and value_nbytes {nbytes} disagree",
                offset=offset,
                field=field,
            )
            return None
        if bit_count % 8 and buf[offset + 8 + byte_count - 1] >> (bit_count % 8):
            checker.fail(
                "R20",
                "unused high bits of the last bitset byte are not 0",
                offset=offset + 8 + byte_count - 1,
                field=field,
            )
            return None
        if not _zero_padding(buf, offset + 8 + byte_count, offset + nbytes, checker, field):
            return None
        return Deferred(
            lambda: Bitset.from_bytes(buf[offset + 8 : offset + 8 + byte_count], bit_count)
        )
    if vtype is DType.NDARRAY:
        return _decode_ndarray(buf, offset, nbytes, checker, field)
    raise AssertionError(f"unhandled value type {vtype}")  # every code is handled above


def _decode_ndarray(
    buf: memoryview, offset: int, nbytes: int, checker: Checker, field: str
) -> Deferred | None:
    if nbytes < 8:
        checker.fail(
            "R21",
            f"an NDARRAY value needs at least 8 bytes, value_nbytes is {nbytes}",
            offset=offset,
            field=field,
        )
        return None
    code, ndim = _PAIR.unpack_from(buf, offset)
    if code not in DType._value2member_map_ or not DType(code).is_tensor_type:
        checker.fail(
            "R21",
            f"NDARRAY element_type {code} is not a tensor dtype code",
            offset=offset,
            field=field,
        )
        return None
    dtype = DType(code)
    # ndim is bounded before dims are read, so a huge ndim cannot cause a large read.
    if ndim > spec.MAX_NDIM or 8 + 8 * ndim > nbytes:
        checker.fail(
            "R21",
            f"NDARRAY ndim {ndim} exceeds {spec.MAX_NDIM} or its dims run past value_nbytes {nbytes}",
            offset=offset + 4,
            field=field,
        )
        return None
    dims = struct.unpack_from(f"<{ndim}Q", buf, offset + 8)
    numel = 1
    for d in dims:
        numel *= d
    data_bytes = dtype.nbytes(numel)
    if nbytes != spec.align_up(8 + 8 * ndim + data_bytes):
        checker.fail(
            "R21",
            f"NDARRAY {dtype.short}{list(dims)} needs value_nbytes {spec.align_up(8 + 8 * ndim + data_bytes)}, got {nbytes}",
            offset=offset,
            field=field,
        )
        return None
    data_at = offset + 8 + 8 * ndim
    if not _zero_padding(buf, data_at + data_bytes, offset + nbytes, checker, field):
        return None
    return Deferred(lambda: from_disk(buf, data_at, data_bytes, dtype, tuple(dims), field))


def _zero_padding(buf: memoryview, start: int, end: int, checker: Checker, field: str) -> bool:
    # R37: the zero bytes that pad a payload to its value_nbytes (at most 7 of them).
    if any(buf[start:end]):
        checker.fail("R37", "payload padding bytes are not 0", offset=start, field=field)
        return False
    return True
