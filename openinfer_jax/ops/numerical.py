"""Numerical ops: matmul, relu, and the mutation op fill.

* ``matmul`` follows NumPy's matmul shapes (1-D operands are promoted and the added axis
  dropped; batch axes broadcast). Integers accumulate exactly and wrap to the output type
  (the same result as wrapping at every step); bool is OR of ANDs; f8/bf16/f16 accumulate in f32.
  ``acc=[A, O]`` converts the inputs to A, accumulates in A (integers wrap in A) and outputs O.
* ``relu(x, negative_slope=0, clamp_min=-inf, clamp_max=+inf)``: ``x < 0 ? x*negative_slope : x``
  then clamped to [clamp_min, clamp_max] (``min(max(y, clamp_min), clamp_max)``, NaN stays NaN).
  ``alpha`` is an alias of ``negative_slope``. For integer inputs the negative branch is
  ``trunc(f64(x) * negative_slope)`` with 0 <= negative_slope <= 1, and the clamp bounds are
  rounded inward (ceil of the minimum, floor of the maximum) and limited to the type's range.
* ``fill(x, value)``: an array shaped like x, every element ``value`` in x's dtype. An integer
  dtype needs an integer value in its range; floats round to nearest even.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import jax_numeric, numpy_numeric
from openinfer_jax.ops.elementwise import elementwise, input_specs, params_of
from openinfer_jax.ops.expr import IN, OUT, Input, cast, clamp, param, select, trunc
from openinfer_jax.ops.numpy_numeric import per_element
from openinfer_jax.ops.registry import (
    BOOL,
    ELEMENTWISE_TRAITS,
    FLOAT,
    PACKED_SIGNED,
    PACKED_UNSIGNED,
    REQUIRED,
    SIGNED,
    TERNARY,
    UNSIGNED,
    Call,
    InputSpec,
    OpCheckError,
    OpDef,
    ParamKind,
    ParamSpec,
    Traits,
    broadcast_shapes,
    compute_dtype,
    register,
)

__all__ = ["clamp_bounds", "int_bounds", "require_bound"]

I32, I64, U32, U64, F32, F64 = DType.I32, DType.I64, DType.U32, DType.U64, DType.F32, DType.F64
MATMUL_RULES = (
    (I32, I32), (I32, I64), (I64, I64), (U32, U32), (U32, U64), (U64, U64),
    (F32, F32), (F32, F64), (F64, F64),
)  # fmt: skip
MATMUL_DTYPES = FLOAT | SIGNED | UNSIGNED | BOOL | PACKED_SIGNED | PACKED_UNSIGNED


# ---- matmul ------------------------------------------------------------------------------------------
def _matmul_shape(shapes: Sequence[tuple[int, ...]], params: Mapping[str, Any]) -> tuple[int, ...]:
    a, b = shapes
    if not a or not b:
        raise OpCheckError(f"matmul: inputs must have rank >= 1, got shapes {a} and {b}")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise OpCheckError(
            f"matmul: inner dimensions differ: {a} @ {b} needs a.shape[-1] == b.shape[-2] "
            f"({a2[-1]} != {b2[-2]})"
        )
    batch = broadcast_shapes("matmul", [a2[:-2], b2[:-2]])
    out = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _jax_matmul(call: Call, a: Any, b: Any) -> Any:
    src, out = call.in_dtypes[0], call.out_dtype
    acc = call.params.get("acc")
    if src.is_float:
        work = acc[0].numpy if acc else compute_dtype(src).numpy
        product = jnp.matmul(
            jnp.asarray(a).astype(work),
            jnp.asarray(b).astype(work),
            precision=lax.Precision.HIGHEST,
        )
        return jax_numeric.store(product, out)
    wide = jax_numeric.wide_int_dtype(src)
    product = jnp.matmul(jnp.asarray(a).astype(wide), jnp.asarray(b).astype(wide))
    if acc is not None:
        return jax_numeric.store(product, acc[0]).astype(out.numpy)
    if src is DType.BOOL:
        return product != 0
    return jax_numeric.store(product, out)


def _ref_matmul(call: Call, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    src, out = call.in_dtypes[0], call.out_dtype
    acc = call.params.get("acc")
    if src.is_float:
        work = acc[0].numpy if acc else numpy_numeric.floats(a[:0], src).dtype
        with np.errstate(all="ignore"):
            product = np.matmul(a.astype(work), b.astype(work))
        return numpy_numeric.store_ref(product, out)
    product = np.matmul(numpy_numeric.exact(a), numpy_numeric.exact(b))
    if acc is not None:
        return numpy_numeric.pack_ints(product, acc[0]).astype(out.numpy)
    if src is DType.BOOL:
        return np.asarray(product != 0, bool)
    return numpy_numeric.store_ref(product, out)


register(
    OpDef(
        name="matmul",
        category="numerical",
        inputs=tuple(
            InputSpec(spec.name, spec.dtypes, spec.group, quantized=True)
            for spec in input_specs("a b", MATMUL_DTYPES)
        ),
        jax_impl=_jax_matmul,
        ref_impl=_ref_matmul,
        params=params_of(ParamSpec("acc", ParamKind.ACC, None, doc="[accumulator, output]")),
        acc_rules=MATMUL_RULES,
        broadcast=True,
        inplace=True,
        shape_rule=_matmul_shape,
        traits=Traits(),
        doc="matrix product with NumPy matmul shapes (batch axes broadcast)",
    )
)


# ---- shared bound helpers ------------------------------------------------------------------------
def require_bound(op: str, name: str, value: Any) -> float | None:
    """A scalar bound as a float (None stays None); a VarName must be bound before lowering.

    Raises:
        OpCheckError: the value is still a variable name.
    """
    if value is None or isinstance(value, (bool, int, float)):
        return None if value is None else float(value)
    raise OpCheckError(f"{op}: param {name}={value} must be bound to a number before running")


def int_bounds(dtype: DType, low: float | None, high: float | None) -> tuple[int, int]:
    """Float clamp bounds rounded inward to integers and limited to `dtype`'s range.

    Both bounds are limited on both sides (a u8 ``max=-3`` becomes 0), so every backend can
    hold them in the element type: clamping to a bound outside the range gives that range end.
    """
    type_low, type_high = dtype.value_range()

    def limit(value: float) -> int:
        return int(min(type_high, max(type_low, value)))

    lo = (
        type_low
        if low is None or (math.isinf(low) and low < 0)
        else limit(math.ceil(min(max(low, -(2.0**65)), 2.0**65)))
    )
    hi = (
        type_high
        if high is None or (math.isinf(high) and high > 0)
        else limit(math.floor(max(min(high, 2.0**65), -(2.0**65))))
    )
    return int(lo), int(hi)


def clamp_bounds(dtype: DType, low: Any, high: Any) -> tuple[Any, Any]:
    """Clamp bounds as kernels take them: absent float bounds are -inf/+inf; integer bounds
    are rounded inward and limited to the type's range (`int_bounds`). A bound that is not
    a number (read at run time) is passed through."""
    numbers = [v if isinstance(v, (bool, int, float)) or v is None else None for v in (low, high)]
    if dtype.is_float:
        lo = -math.inf if numbers[0] is None else float(numbers[0])
        hi = math.inf if numbers[1] is None else float(numbers[1])
    else:
        lo, hi = int_bounds(dtype, *(None if v is None else float(v) for v in numbers))
    return (lo if numbers[0] is not None or low is None else low,
            hi if numbers[1] is not None or high is None else high)  # fmt: skip


# ---- relu ---------------------------------------------------------------------------------------------
def _relu_check(
    in_dtypes: Sequence[DType], shapes: Sequence[tuple[int, ...]], params: Mapping[str, Any]
) -> None:
    slope = params.get("negative_slope")
    if in_dtypes[0].is_int and isinstance(slope, float) and not 0.0 <= slope <= 1.0:
        raise OpCheckError(
            f"relu: negative_slope={slope} is not allowed for {in_dtypes[0].short} inputs; "
            "integer relu needs 0 <= negative_slope <= 1"
        )


def _jax_relu(call: Call, x: Any) -> Any:
    slope = require_bound("relu", "negative_slope", call["negative_slope"]) or 0.0
    low = require_bound("relu", "clamp_min", call["clamp_min"])
    high = require_bound("relu", "clamp_max", call["clamp_max"])
    if call.in_dtypes[0].is_float:
        low = -math.inf if low is None else low
        high = math.inf if high is None else high
        y = jnp.where(x < 0, x * slope, x)
        return jnp.minimum(jnp.maximum(y, low), high)
    negative = jnp.trunc(x.astype(jnp.float64) * slope).astype(x.dtype)
    y = jnp.where(x < 0, negative, x)
    lo, hi = int_bounds(call.in_dtypes[0], low, high)
    return jnp.minimum(jnp.maximum(y, jnp.asarray(lo, y.dtype)), jnp.asarray(hi, y.dtype))


def _ref_relu_int(value: int, slope: float, lo: int, hi: int) -> int:
    y = math.trunc(float(value) * slope) if value < 0 else value
    return min(max(y, lo), hi)


def _ref_relu(call: Call, x: np.ndarray) -> np.ndarray:
    slope = float(call["negative_slope"])
    low, high = float(call["clamp_min"]), float(call["clamp_max"])
    if call.in_dtypes[0].is_float:
        y = np.where(x < 0, x * x.dtype.type(slope), x)
        return np.asarray(np.minimum(np.maximum(y, x.dtype.type(low)), x.dtype.type(high)))
    lo, hi = int_bounds(call.in_dtypes[0], low, high)
    return per_element(lambda v: _ref_relu_int(v, slope, lo, hi), x)


def _relu_params(in_dtypes: Sequence[DType], params: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(params)
    if not in_dtypes[0].is_float:
        out["clamp_min"], out["clamp_max"] = clamp_bounds(
            in_dtypes[0], params["clamp_min"], params["clamp_max"]
        )
    return out


_x = Input(0)
_LOW, _HIGH = param("clamp_min"), param("clamp_max")
# -inf * 0 is NaN in the reference too, and NaN passes the clamps. Integers: the reference
# truncates x * slope computed in f64.
_RELU = {
    "real": clamp(select(_x < 0, _x * param("negative_slope"), _x), _LOW, _HIGH),
    "sint": clamp(select(_x < 0, cast(IN, trunc(cast(F64, _x) * param("negative_slope", F64))), _x),
                  _LOW, _HIGH),
}  # fmt: skip

elementwise(
    "relu", "numerical", "x", FLOAT | SIGNED | PACKED_SIGNED, _jax_relu, _ref_relu,
    params=params_of(
        ParamSpec("negative_slope", ParamKind.FLOAT, 0.0, aliases=("alpha",), doc="slope for x < 0"),
        ParamSpec("clamp_min", ParamKind.FLOAT, -math.inf, doc="lower clamp"),
        ParamSpec("clamp_max", ParamKind.FLOAT, math.inf, doc="upper clamp"),
    ),
    check=_relu_check, kernel_params=_relu_params, expr=_RELU,
    doc="leaky relu with optional clamps (seed params negative_slope, clamp_min, clamp_max)",
)  # fmt: skip


# ---- fill ------------------------------------------------------------------------------------------------
def _fill_check(
    in_dtypes: Sequence[DType], shapes: Sequence[tuple[int, ...]], params: Mapping[str, Any]
) -> None:
    value, dtype = params.get("value"), in_dtypes[0]
    if not isinstance(value, (bool, int, float)) or dtype.is_float:
        return
    if dtype is DType.BOOL:
        if value not in (0, 1):
            raise OpCheckError(f"fill: value={value!r} is not a bool; use true/false (or 0/1)")
        return
    low, high = dtype.value_range()
    ok = float(value).is_integer() and low <= value <= high
    if dtype is DType.T1:
        ok = value in (-1, 1)
    if not ok:
        raise OpCheckError(
            f"fill: value={value!r} is not a {dtype.short} value; use an integer in [{low}, {high}]"
            + (" other than 0" if dtype is DType.T1 else "")
        )


def _jax_fill(call: Call, x: Any) -> Any:
    value = call["value"]
    if not isinstance(value, (bool, int, float)):
        raise OpCheckError(f"fill: param value={value} must be bound to a number before running")
    dtype = call.out_dtype
    if dtype.is_int:
        value = int(value)
    return jnp.full(jnp.shape(x), value, dtype=dtype.numpy)


def _ref_fill(call: Call, x: np.ndarray) -> np.ndarray:
    dtype = call.out_dtype
    value = call["value"]
    if dtype is DType.BOOL:
        return np.full(x.shape, bool(value))
    if dtype.is_int:
        return np.full(x.shape, int(value), dtype=dtype.numpy)
    return np.full(x.shape, np.float64(value)).astype(dtype.numpy)


register(
    OpDef(
        name="fill",
        category="mutation",
        inputs=input_specs(
            "x", FLOAT | SIGNED | UNSIGNED | BOOL | PACKED_SIGNED | PACKED_UNSIGNED | TERNARY
        ),
        jax_impl=_jax_fill,
        ref_impl=_ref_fill,
        params=params_of(ParamSpec("value", ParamKind.SCALAR, REQUIRED, doc="the fill value")),
        inplace=True,
        check=_fill_check,
        traits=ELEMENTWISE_TRAITS,
        expr=param("value", OUT),
        doc="x-shaped array with every element = value",
    )
)
