"""The cast op: convert to the dtype named by ``to`` (and bitcast: keep the bits).

Semantics (docs/ops.md, "cast"); this is looser than the original, which allowed int→int only
when widening with the same signedness — every pair below is well defined, so all are allowed:

* float → float: round to nearest even (overflow gives ±inf, as IEEE).
* anything → a narrow float (f8e4m3fn, f8e4m3fnuz, f8e5m2fnuz, f4e2m1; ONNX's Cast):
  ``saturate=true`` (default) first clamps to the type's finite range (±inf → ±max, NaN
  stays NaN; f4e2m1 has no NaN and gives -0 for it, as ml_dtypes), ``saturate=false``
  converts directly (out of range → NaN; f4e2m1 saturates anyway). Rounding: nearest even.
* anything → f8e8m0 (a power of two, 2^-127..2^127, and NaN; ONNX's Cast): the float's
  exponent, rounded by ``rounding_mode``: ``ceil`` up when any mantissa bit is set,
  ``trunc``/``floor`` down, ``nearest`` half up on the mantissa; ``saturate=true`` keeps
  2^127 from rounding past the top into NaN. The sign is ignored (ONNX leaves negative
  inputs unspecified); inf and NaN give NaN.
* float → integer: round with ``rounding_mode`` (trunc default, floor, ceil, nearest = ties to
  even), NaN → 0. ``saturate=true`` (default) clamps to the target range (±inf → max/min);
  ``saturate=false`` wraps the rounded value modulo 2**bits (±inf → 0).
* integer → integer: ``saturate=true`` clamps, ``false`` wraps (two's complement truncation).
* integer/bool → float: round to nearest even. bool → integer: 0/1.
* anything → bool: non-zero is true (NaN is true, like C).
``rounding_mode`` only matters for float → integer casts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from openinfer_jax.core.dtypes import NARROW_FLOATS, DType
from openinfer_jax.ops import jax_numeric, numpy_numeric
from openinfer_jax.ops.elementwise import input_specs, params_of
from openinfer_jax.ops.registry import (
    BOOL,
    FLOAT,
    PACKED_SIGNED,
    PACKED_UNSIGNED,
    REQUIRED,
    SIGNED,
    TERNARY,
    UNSIGNED,
    Call,
    OpCheckError,
    OpDef,
    OutputRule,
    ParamKind,
    ParamSpec,
    Traits,
    register,
)

__all__ = ["ROUNDING_MODES"]

SOURCES = (
    FLOAT | NARROW_FLOATS | SIGNED | UNSIGNED | PACKED_SIGNED | PACKED_UNSIGNED | BOOL | TERNARY
)
TARGETS = FLOAT | NARROW_FLOATS | SIGNED | UNSIGNED | PACKED_SIGNED | PACKED_UNSIGNED | BOOL
ROUNDING_MODES = ("trunc", "floor", "ceil", "nearest")

_JAX_ROUND = {"trunc": jnp.trunc, "floor": jnp.floor, "ceil": jnp.ceil, "nearest": jnp.round}
_PY_ROUND: dict[str, Callable[[float], int]] = {
    "trunc": math.trunc,
    "floor": math.floor,
    "ceil": math.ceil,
    "nearest": round,
}


def _int_container(dtype: DType) -> Any:
    """The array type integer results are built in before `jax_numeric.store`."""
    return jnp.int32 if dtype.is_packed else dtype.numpy


def _jax_float_to_int(call: Call, x: Any, dst: DType) -> Any:
    rounded = _JAX_ROUND[call["rounding_mode"]](x.astype(jnp.float64))
    low, high = dst.value_range()
    if call["saturate"]:
        # high + 1 and low are powers of two (or 0), so both bounds are exact in f64.
        below, above = float(low), float(high + 1)
        fits = (rounded >= below) & (rounded < above)
        inside = jnp.where(fits, rounded, 0.0).astype(_int_container(dst))
        bounded = jnp.where(rounded >= above, jnp.asarray(high, inside.dtype), inside)
        return jax_numeric.store(
            jnp.where(rounded < below, jnp.asarray(low, inside.dtype), bounded), dst
        )
    # Wrap modulo 2**64 exactly: split the (integral) value into two 32-bit halves in f64.
    finite = jnp.where(jnp.isfinite(rounded), rounded, 0.0)
    reduced = jnp.fmod(finite, 2.0**64)
    upper = jnp.floor(reduced / 2.0**32)
    lower = reduced - upper * 2.0**32
    bits64 = (upper.astype(jnp.int64) << 32) + lower.astype(jnp.int64)
    return jax_numeric.store(bits64, dst)


def _jax_int_to_int(call: Call, x: Any, src: DType, dst: DType) -> Any:
    values = jax_numeric.widen(x, src) if src.is_packed or src is DType.BOOL else jnp.asarray(x)
    if call["saturate"]:
        src_low, src_high = src.value_range()
        dst_low, dst_high = dst.value_range()
        # Each bound is applied only when it lies inside the source range, so it is exact there.
        if dst_low > src_low:
            values = jnp.maximum(values, jnp.asarray(dst_low, values.dtype))
        if dst_high < src_high:
            values = jnp.minimum(values, jnp.asarray(dst_high, values.dtype))
    if dst.is_packed:
        return jax_numeric.store(values.astype(jnp.int64) if src is DType.U64 else values, dst)
    return values.astype(dst.numpy)


def _narrow_max(dst: DType) -> float:
    return float(ml_dtypes.finfo(dst.numpy).max)  # type: ignore[no-untyped-call]


def _e8m0_exponent(xp: Any, bits: Any, call: Call) -> Any:
    """The f8e8m0 byte of float32 bit patterns `bits` (uint32), as uint32 (see the module doc)."""
    exponent = (bits >> 23) & 0xFF
    mode = call["rounding_mode"]
    if mode == "ceil":
        up = (bits & 0x7FFFFF) != 0
    elif mode == "nearest":
        guard = (bits & 0x400000) != 0
        up = guard & (((bits & 0x3FFFFF) != 0) | (exponent > 0))
    else:
        up = xp.zeros(bits.shape, bool)
    up = up & (exponent != 0xFF)
    if call["saturate"]:
        up = up & (exponent != 0xFE)
    return exponent + up.astype(xp.uint32)


def _jax_to_narrow(call: Call, x: Any, src: DType, dst: DType) -> Any:
    if dst is DType.F8E8M0:
        bits = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
        code = _e8m0_exponent(jnp, bits, call).astype(jnp.uint8)
        return jax.lax.bitcast_convert_type(code, dst.numpy)
    if call["saturate"] and src is not DType.BOOL:
        limit = _narrow_max(dst)
        if src.is_float:
            x = jnp.clip(x, -limit, limit)
        else:
            low, high = src.value_range()
            x = jnp.clip(x, max(low, -int(limit)), min(high, int(limit)))
    return x.astype(dst.numpy)


def _jax_cast(call: Call, x: Any) -> Any:
    src, dst = call.in_dtypes[0], call.out_dtype
    x = jnp.asarray(x)
    if src.is_float and src.bits < 16:
        # Exact in f32; XLA's direct conversions between 8-bit floats give NaN, and a clamp
        # in the 8-bit type would round its bound.
        x = x.astype(jnp.float32)
    if dst in NARROW_FLOATS:
        return _jax_to_narrow(call, jax_numeric.widen(x, src) if src.is_packed else x, src, dst)
    if dst is DType.BOOL:
        return x != 0
    if src is DType.BOOL and dst.is_float:
        return x.astype(dst.numpy)
    if dst.is_float:
        return x.astype(dst.numpy)
    if src.is_float:
        return _jax_float_to_int(call, x, dst)
    return _jax_int_to_int(call, x, src, dst)


def _py_to_int(call: Call, value: Any, src: DType, dst: DType) -> int:
    low, high = dst.value_range()
    if src.is_float:
        number = float(value)
        if math.isnan(number):
            return 0
        if math.isinf(number):
            if not call["saturate"]:
                return 0
            return high if number > 0 else low
        exact = int(_PY_ROUND[call["rounding_mode"]](number))
    else:
        exact = int(value)
    if call["saturate"]:
        return max(low, min(high, exact))
    return numpy_numeric.wrap_int(exact, dst)


def _ref_to_narrow(call: Call, x: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    if dst is DType.F8E8M0:
        bits = np.asarray(x, np.float32).view(np.uint32)
        code: np.ndarray = _e8m0_exponent(np, bits, call).astype(np.uint8)
        return code.view(dst.numpy)
    values = np.asarray(x)
    if call["saturate"] and src is not DType.BOOL:
        limit = _narrow_max(dst)
        if src.is_float:
            values = np.clip(values, -limit, limit)  # NaN passes through
        elif src.is_unsigned_int:  # through uint64: u64 values beyond int64 stay positive
            values = np.minimum(values.astype(np.uint64), np.uint64(int(limit)))
        else:
            values = np.clip(values.astype(np.int64), -int(limit), int(limit))
    with np.errstate(all="ignore"):
        return values.astype(dst.numpy)


def _ref_cast(call: Call, x: np.ndarray) -> np.ndarray:
    src, dst = call.in_dtypes[0], call.out_dtype
    if src.is_float and src.bits < 16:  # exact; ml_dtypes has no e8m0 -> e5m2 cast
        x = np.asarray(x).astype(np.float32)
    if dst in NARROW_FLOATS:
        return _ref_to_narrow(call, x, src, dst)
    if dst is DType.BOOL:
        return np.array([float(v) != 0 for v in x.reshape(-1).tolist()], bool).reshape(x.shape)
    if dst.is_float:
        with np.errstate(all="ignore"):
            return x.astype(dst.numpy)
    flat = [_py_to_int(call, v, src, dst) for v in x.reshape(-1).tolist()]
    return np.array(flat, dtype=dst.numpy).reshape(x.shape)


register(
    OpDef(
        name="cast",
        category="casting",
        inputs=input_specs("x", SOURCES),
        jax_impl=_jax_cast,
        ref_impl=_ref_cast,
        params=params_of(
            ParamSpec("to", ParamKind.DTYPE, REQUIRED, allowed=tuple(TARGETS), doc="target dtype"),
            ParamSpec(
                "rounding_mode", ParamKind.STRING, "trunc", allowed=ROUNDING_MODES,
                doc="float → integer rounding (nearest: ties to even); float → f8e8m0 too",
            ),
            ParamSpec("saturate", ParamKind.BOOL, True,
                      doc="clamp out-of-range values (else wrap; narrow floats: NaN)"),
        ),
        output=OutputRule("attr", attr="to"),
        traits=Traits(elementwise=True, alias_safe=True, reads_neighbours=False),
        doc="convert to dtype `to` (rounding, saturation: see docs)",
    )
)  # fmt: skip


# ---- bitcast -------------------------------------------------------------------------------------
# Byte-sized types only: a packed element has no bytes of its own.
_BITCAST = FLOAT | NARROW_FLOATS | SIGNED | UNSIGNED | BOOL


def _bitcast_check(
    in_dtypes: Sequence[DType], shapes: Sequence[tuple[int, ...]], params: Mapping[str, Any]
) -> None:
    src, dst = in_dtypes[0], params.get("to")
    if isinstance(dst, DType) and dst.bits != src.bits:
        raise OpCheckError(
            f"bitcast: {src.short} is {src.bits} bits and {dst.short} {dst.bits}; bitcast keeps "
            f"the bits, so pick a {src.bits}-bit target (or use cast to convert the value)"
        )


def _jax_bitcast(call: Call, x: Any) -> Any:
    src, dst = call.in_dtypes[0], call.out_dtype
    x = jnp.asarray(x)
    if src is DType.BOOL:
        x = x.astype(jnp.uint8)
    if dst is DType.BOOL:  # a byte other than 0 or 1 reads as true, as in C
        return jax.lax.bitcast_convert_type(x, jnp.uint8) != 0
    return jax.lax.bitcast_convert_type(x, dst.numpy)


def _ref_bitcast(call: Call, x: np.ndarray) -> np.ndarray:
    src, dst = call.in_dtypes[0], call.out_dtype
    # np.array, not ascontiguousarray: that one makes a 0-d array 1-d.
    raw = np.array(x, dtype=np.uint8 if src is DType.BOOL else None, order="C")
    if dst is DType.BOOL:
        flags: np.ndarray = raw.view(np.uint8) != 0
        return flags
    out: np.ndarray = raw.view(dst.numpy)
    return out


register(
    OpDef(
        name="bitcast",
        category="casting",
        inputs=input_specs("x", _BITCAST),
        jax_impl=_jax_bitcast,
        ref_impl=_ref_bitcast,
        params=params_of(
            ParamSpec("to", ParamKind.DTYPE, REQUIRED, allowed=tuple(_BITCAST),
                      doc="target dtype, as wide as x's"),
        ),
        output=OutputRule("attr", attr="to"),
        check=_bitcast_check,
        traits=Traits(elementwise=True, alias_safe=True, reads_neighbours=False),
        doc="reinterpret each element's bits as dtype `to` of the same width (ONNX BitCast)",
    )
)  # fmt: skip
