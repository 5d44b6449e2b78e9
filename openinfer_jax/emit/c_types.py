"""How each dtype lives in emitted C: storage type, compute type, load and store expressions.

Storage follows the simulator's in-memory representation: byte-sized types as themselves,
f16/bf16 as their 16 bits, f8 (e5m2) and the narrow floats (f8e4m3fn, f8e4m3fnuz, f8e5m2fnuz,
f8e8m0, f4e2m1) as their byte, packed integers unpacked to one int8_t/uint8_t per element.
Arithmetic happens in a compute type: float for the 8-bit floats, bf16 and f16
(rounded to nearest even on store, like the registry's `compute_dtype`), int64_t for signed
and uint64_t for unsigned integers (stores wrap to the storage width, packed types to their
bit width, ternary t2/t1 clip to -1..1), int for bool (stores normalize to 0/1).
"""

from __future__ import annotations

from dataclasses import dataclass

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import SynthesisError

__all__ = ["NARROW_KIND", "CType", "ctype", "family"]


@dataclass(frozen=True)
class CType:
    """The C view of one dtype."""

    dtype: DType
    storage: str
    compute: str
    load: str  # format with the element expression: "{}" or "oi_f16_to_f32({})"
    store: str  # format with a compute-type value

    @property
    def size(self) -> int:
        """Bytes per stored element."""
        return _SIZES[self.storage]

    @property
    def family(self) -> str:
        """``real``, ``sint``, ``uint`` or ``bool``."""
        return family(self.dtype)


_SIZES = {"float": 4, "double": 8, "int8_t": 1, "int16_t": 2, "int32_t": 4, "int64_t": 8,
          "uint8_t": 1, "uint16_t": 2, "uint32_t": 4, "uint64_t": 8}  # fmt: skip


def _wrap_signed(bits: int) -> str:
    # Sign-extend the low `bits` bits: the two's complement wrap of the reference.
    mask, half = (1 << bits) - 1, 1 << (bits - 1)
    return f"(int8_t)((int64_t)((((uint64_t)({{}})) & {mask}u) ^ {half}u) - {half})"


_TABLE: dict[DType, CType] = {
    DType.F32: CType(DType.F32, "float", "float", "{}", "{}"),
    DType.F64: CType(DType.F64, "double", "double", "{}", "{}"),
    DType.F16: CType(DType.F16, "uint16_t", "float", "oi_f16_to_f32({})", "oi_f32_to_f16({})"),
    DType.BF16: CType(DType.BF16, "uint16_t", "float", "oi_bf16_to_f32({})", "oi_f32_to_bf16({})"),
    DType.F8: CType(DType.F8, "uint8_t", "float", "oi_f8_to_f32({})", "oi_f32_to_f8({})"),
    DType.BOOL: CType(DType.BOOL, "uint8_t", "int", "(int)({})", "(uint8_t)(({}) != 0)"),
    DType.I4: CType(DType.I4, "int8_t", "int64_t", "(int64_t)({})", _wrap_signed(4)),
    DType.I2: CType(DType.I2, "int8_t", "int64_t", "(int64_t)({})", _wrap_signed(2)),
    DType.I1: CType(DType.I1, "int8_t", "int64_t", "(int64_t)({})", _wrap_signed(1)),
    DType.U4: CType(DType.U4, "uint8_t", "uint64_t", "(uint64_t)({})", "(uint8_t)(({}) & 15u)"),
    DType.U2: CType(DType.U2, "uint8_t", "uint64_t", "(uint64_t)({})", "(uint8_t)(({}) & 3u)"),
    DType.U1: CType(DType.U1, "uint8_t", "uint64_t", "(uint64_t)({})", "(uint8_t)(({}) & 1u)"),
    # Ternary values -1/0/+1 (t1: -1/+1) are stored unpacked like the other packed types;
    # stores clip to [-1, 1] as the registry's `wrap_int` does (the ops that accept ternary
    # inputs are closed over the set, so the clip only guards).
    DType.T2: CType(DType.T2, "int8_t", "int64_t", "(int64_t)({})", "oi_ternary((int64_t)({}))"),
    DType.T1: CType(DType.T1, "int8_t", "int64_t", "(int64_t)({})", "oi_ternary((int64_t)({}))"),
}
# Narrow floats: one byte per element (f4e2m1 in the low 4 bits), decoded to float exactly;
# a plain store rounds to nearest even and saturates (`cast` passes its own settings).
NARROW_KIND = {
    DType.F8E4M3FN: "OI_NARROW_E4M3FN",
    DType.F8E4M3FNUZ: "OI_NARROW_E4M3FNUZ",
    DType.F8E5M2FNUZ: "OI_NARROW_E5M2FNUZ",
    DType.F4E2M1: "OI_NARROW_F4E2M1",
    DType.F8E8M0: "OI_NARROW_E8M0",
}
for _dt, _kind in NARROW_KIND.items():
    _TABLE[_dt] = CType(
        _dt, "uint8_t", "float", f"oi_narrow_to_f32({{}}, {_kind})",
        f"oi_narrow_from_f64((double)({{}}), {_kind}, 1, 0)",
    )  # fmt: skip
for _dt, _st in (
    (DType.I8, "int8_t"),
    (DType.I16, "int16_t"),
    (DType.I32, "int32_t"),
    (DType.I64, "int64_t"),
):
    _TABLE[_dt] = CType(_dt, _st, "int64_t", "(int64_t)({})", f"({_st})({{}})")
for _dt, _st in (
    (DType.U8, "uint8_t"),
    (DType.U16, "uint16_t"),
    (DType.U32, "uint32_t"),
    (DType.U64, "uint64_t"),
):
    _TABLE[_dt] = CType(_dt, _st, "uint64_t", "(uint64_t)({})", f"({_st})({{}})")


def ctype(dtype: DType, where: str = "") -> CType:
    """The C view of `dtype`.

    Raises:
        SynthesisError: a non-tensor dtype (bitset, string, ndarray), naming `where`.
    """
    info = _TABLE.get(dtype)
    if info is None:
        raise SynthesisError(
            f"{where + ': ' if where else ''}dtype {dtype.short} is not supported by the C target "
            f"(supported: {', '.join(sorted(d.short for d in _TABLE))})"
        )
    return info


def family(dtype: DType) -> str:
    """The compute family of `dtype`: ``real``, ``sint``, ``uint`` or ``bool``."""
    if dtype is DType.BOOL:
        return "bool"
    if dtype.is_float:
        return "real"
    if dtype.is_signed_int:
        return "sint"
    return "uint"
