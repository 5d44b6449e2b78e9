"""GLSL for each storage dtype: compute types, element loads and stores.

Kernels never hard-code a dtype. For every input and output slot the kernel generator
asks this module for

* the **compute type** the element is held in while computing (`GlslType.compute`):
  f8/bf16/f16/f32 in ``float`` (the original computed low-precision floats in f32 too),
  f64 in ``double``, signed integers up to 32 bits (packed ones included) in ``int``,
  unsigned ones and bool in ``uint``, i64/u64 in ``int64_t``/``uint64_t``;
* a **load** function ``CT name(uint i)`` reading element ``i`` of a word buffer with the
  layout of `openinfer_jax.vk.storage` (bit extraction, sign extension for signed types);
* an **encode** function turning a compute value into the element's bit pattern:
  integers wrap to their width (two's complement), floats round to nearest even
  (`quantize_float` in shaders/common.glsl), bool becomes 0/1, t1 becomes its sign bit.

A kernel then writes whole output words (see shaders/elementwise.comp), so narrow
elements never race with their neighbours in the same word.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import BackendError

__all__ = ["GlslType", "convert", "encode_function", "glsl_type", "literal", "load_function"]

_EXT_INT64 = "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require"


@dataclass(frozen=True)
class GlslType:
    """How one dtype is held and computed in GLSL.

    `family` is one of ``float``, ``double``, ``int``, ``uint``, ``int64``, ``uint64``,
    ``bool``; op expression tables are keyed by it. `capability` names the device
    feature the type needs (``shader_int64`` / ``shader_float64``) or is None.
    """

    dtype: DType
    compute: str
    family: str
    capability: str | None

    @property
    def bits(self) -> int:
        """Bits per stored element."""
        return self.dtype.bits

    @property
    def extensions(self) -> tuple[str, ...]:
        """GLSL ``#extension`` lines the type's code needs."""
        return (_EXT_INT64,) if self.family in ("int64", "uint64") else ()

    @property
    def is_wide(self) -> bool:
        """True for 64-bit types, which take two words per element."""
        return self.bits == 64


def glsl_type(dtype: DType) -> GlslType:
    """The GLSL view of `dtype`.

    Raises:
        BackendError: for dtypes that cannot be tensors (bitset, string, ndarray) and the
            narrow floats (f8e4m3fn, f8e4m3fnuz, f8e5m2fnuz, f8e8m0, f4e2m1).
    """
    if dtype in (DType.F8, DType.BF16, DType.F16, DType.F32):
        return GlslType(dtype, "float", "float", None)
    if dtype is DType.F64:
        return GlslType(dtype, "double", "double", "shader_float64")
    if dtype is DType.I64:
        return GlslType(dtype, "int64_t", "int64", "shader_int64")
    if dtype is DType.U64:
        return GlslType(dtype, "uint64_t", "uint64", "shader_int64")
    if dtype is DType.BOOL:
        return GlslType(dtype, "uint", "bool", None)
    if dtype.is_signed_int:
        return GlslType(dtype, "int", "int", None)
    if dtype.is_unsigned_int:
        return GlslType(dtype, "uint", "uint", None)
    if dtype.is_float:  # the narrow floats: no GLSL conversions for them yet
        raise BackendError(
            f"{dtype.short} has no Vulkan kernels (narrow float types run on the CPU or the "
            "simulator's numpy device; cast to f16/f32 for Vulkan)"
        )
    raise BackendError(f"{dtype.short} cannot be a device tensor (it is a metadata-only type)")


def _extract(buffer: str, bits: int, signed: bool) -> str:
    """GLSL expression: the `bits`-bit field of element `i` (sign-extended if `signed`)."""
    if bits == 32:
        return f"int({buffer}[i])" if signed else f"{buffer}[i]"
    word = f"{buffer}[(i * {bits}u) >> 5]"
    if signed:
        word = f"int({word})"  # bitfieldExtract sign-extends an int operand
    return f"bitfieldExtract({word}, int((i * {bits}u) & 31u), {bits})"


def load_function(name: str, buffer: str, dtype: DType) -> str:
    """GLSL source of ``CT name(uint i)``: element `i` of word buffer `buffer` as `dtype`."""
    t = glsl_type(dtype)
    if dtype is DType.F32:
        body = f"uintBitsToFloat({buffer}[i])"
    elif dtype is DType.F16:
        body = f"unpackHalf2x16({_extract(buffer, 16, False)}).x"
    elif dtype is DType.BF16:
        body = f"uintBitsToFloat({_extract(buffer, 16, False)} << 16)"
    elif dtype is DType.F8:
        # e5m2 is the upper byte of an IEEE half.
        body = f"unpackHalf2x16({_extract(buffer, 8, False)} << 8).x"
    elif dtype is DType.F64:
        body = f"packDouble2x32(uvec2({buffer}[2u * i], {buffer}[2u * i + 1u]))"
    elif dtype is DType.I64:
        body = f"int64_t(pack64(uvec2({buffer}[2u * i], {buffer}[2u * i + 1u])))"
    elif dtype is DType.U64:
        body = f"pack64(uvec2({buffer}[2u * i], {buffer}[2u * i + 1u]))"
    elif dtype is DType.T1:
        body = f"int({_extract(buffer, 1, False)}) * 2 - 1"
    elif dtype is DType.BOOL:
        body = f"min({_extract(buffer, 8, False)}, 1u)"
    else:
        body = _extract(buffer, dtype.bits, t.family == "int")
    return f"{t.compute} {name}(uint i) {{ return {body}; }}\n"


def encode_function(name: str, dtype: DType) -> str:
    """GLSL source of the encoder of `dtype`'s compute values.

    For types up to 32 bits: ``uint name(CT v)`` returning the element's bit pattern in
    the low bits (higher bits masked off by the caller). For 64-bit types:
    ``uvec2 name(CT v)`` returning (low word, high word).
    """
    t = glsl_type(dtype)
    mask = f"0x{(1 << dtype.bits) - 1:x}u" if dtype.bits < 32 else None
    if dtype is DType.F32:
        body = "floatBitsToUint(v)"
    elif dtype is DType.F16:
        body = "f32_to_f16_bits(v)"
    elif dtype is DType.BF16:
        body = "f32_to_bf16_bits(v)"
    elif dtype is DType.F8:
        body = "f32_to_e5m2_bits(v)"
    elif dtype is DType.F64:
        body = "unpackDouble2x32(v)"
    elif dtype in (DType.I64, DType.U64):
        body = "unpack32(uint64_t(v))"
    elif dtype is DType.BOOL:
        body = "(v != 0u) ? 1u : 0u"
    elif dtype is DType.T1:
        body = "(v > 0) ? 1u : 0u"
    elif mask is not None:
        body = f"uint(v) & {mask}"
    else:
        body = "uint(v)"
    ret = "uvec2" if t.is_wide else "uint"
    return f"{ret} {name}({t.compute} v) {{ return {body}; }}\n"


def convert(expr: str, src: GlslType, dst: GlslType) -> str:
    """GLSL expression converting `expr` from `src`'s compute type to `dst`'s.

    A plain GLSL constructor: floats truncate toward zero when they become integers
    (ops that need another rounding or saturation do it before converting).
    """
    if src.compute == dst.compute:
        return expr
    if dst.family == "bool":
        return f"(({expr}) != {src.compute}(0) ? 1u : 0u)"
    return f"{dst.compute}({expr})"


def literal(value: Any, t: GlslType) -> str:
    """A GLSL literal of `value` in `t`'s compute type (exact for every integer)."""
    ct = t.compute
    if t.family in ("float", "double"):
        v = float(value)
        if math.isnan(v):
            return f"{ct}(0.0 / 0.0)"
        if math.isinf(v):
            return f"{ct}({'-' if v < 0 else ''}1.0 / 0.0)"
        suffix = "lf" if ct == "double" else ""
        return f"{ct}({v!r}{suffix})"
    v = int(value)
    if ct == "int":
        return f"int({v})" if v > -(2**31) else "int(-2147483647 - 1)"
    if ct == "int64_t":
        return f"int64_t({v}l)" if v > -(2**63) else "int64_t(-9223372036854775807l - 1l)"
    if ct == "uint64_t":
        return f"uint64_t({v}ul)"
    return f"{v}u"
