"""Arithmetic ops: add, mul, sub, div, floor_div, rem, fma, abs, neg, recip.

Integer semantics (docs/ops.md): results wrap to the storage type's width (two's complement),
so ``abs(int_min) == int_min`` and ``neg(int_min) == int_min``; ``div`` truncates toward zero
(Rust ``/``), ``floor_div`` rounds toward negative infinity, ``rem`` is the truncated
remainder (sign of the dividend, Rust ``%``); ``int_min / -1`` wraps to ``int_min`` and its
remainder is 0. Division by zero yields ``div_by_zero_mask`` (default 0 for integers, NaN for
floats; a float divisor of -0.0 counts as zero); ``rem`` by zero yields 0. On bool, add is OR
and mul is AND (NumPy's bool arithmetic).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import expr as ex
from openinfer_jax.ops.elementwise import elementwise, params_of
from openinfer_jax.ops.expr import Input, param, select
from openinfer_jax.ops.numpy_numeric import per_element
from openinfer_jax.ops.registry import (
    BOOL,
    FLOAT,
    PACKED_SIGNED,
    PACKED_UNSIGNED,
    SIGNED,
    TERNARY,
    UNSIGNED,
    Call,
    OpCheckError,
    ParamKind,
    ParamSpec,
)

__all__: list[str] = []

INTS = SIGNED | UNSIGNED | PACKED_SIGNED | PACKED_UNSIGNED
PACKED4 = frozenset({DType.I4, DType.U4})
DIV_INTS = SIGNED | UNSIGNED | PACKED4

MASK = ParamSpec(
    "div_by_zero_mask",
    ParamKind.SCALAR,
    None,
    doc="value where the divisor is zero (default: NaN for floats, 0 for integers)",
)


def mask_value(call: Call) -> float | int:
    """The div_by_zero_mask of a call, with the dtype-dependent default applied."""
    value = call.params.get("div_by_zero_mask")
    if value is None:
        return math.nan if call.in_dtypes[0].is_float else 0
    return value  # type: ignore[no-any-return]


def with_mask(in_dtypes: Sequence[DType], params: Mapping[str, Any]) -> dict[str, Any]:
    """Kernel params with the dtype-dependent default of div_by_zero_mask filled in."""
    out = dict(params)
    if out.get("div_by_zero_mask") is None:
        out["div_by_zero_mask"] = math.nan if in_dtypes[0].is_float else 0
    return out


def check_mask(
    in_dtypes: Sequence[DType], in_shapes: Sequence[tuple[int, ...]], params: Mapping[str, Any]
) -> None:
    """An integer op's mask must be an integer inside the storage range."""
    value = params.get("div_by_zero_mask")
    dtype = in_dtypes[0]
    if value is None or not dtype.is_int or not isinstance(value, (int, float)):
        return
    low, high = dtype.value_range()
    if (isinstance(value, float) and not value.is_integer()) or not low <= value <= high:
        raise OpCheckError(
            f"div_by_zero_mask={value!r} is not a {dtype.short} value; use an integer in "
            f"[{low}, {high}]"
        )


def _is_bool(call: Call) -> bool:
    return call.in_dtypes[0] is DType.BOOL


# ---- integer division helpers (JAX) ------------------------------------------------------------
def _jax_trunc_div(call: Call, a: Any, b: Any) -> Any:
    """Truncating division with int_min / -1 wrapping and zero divisors masked."""
    signed = call.in_dtypes[0].is_signed_int
    zero = b == 0
    minus_one = (b == -1) if signed else jnp.zeros_like(zero)
    safe = jnp.where(zero | minus_one, jnp.ones_like(b), b)
    quotient = jnp.where(minus_one, -a, lax.div(a, safe))
    return jnp.where(zero, jnp.asarray(mask_value(call)).astype(a.dtype), quotient)


def _jax_rem(call: Call, a: Any, b: Any) -> Any:
    signed = call.in_dtypes[0].is_signed_int
    special = (b == 0) | ((b == -1) if signed else (b == 0))
    safe = jnp.where(special, jnp.ones_like(b), b)
    return jnp.where(special, jnp.zeros_like(a), lax.rem(a, safe))


def _jax_floor_div(call: Call, a: Any, b: Any) -> Any:
    quotient = _jax_trunc_div(call, a, b)
    if not call.in_dtypes[0].is_signed_int:
        return quotient
    remainder = _jax_rem(call, a, b)
    adjust = (remainder != 0) & ((remainder < 0) != (b < 0)) & (b != 0)
    return quotient - adjust.astype(quotient.dtype)


def _jax_div(call: Call, a: Any, b: Any) -> Any:
    if call.in_dtypes[0].is_float:
        return jnp.where(b == 0, jnp.asarray(mask_value(call), a.dtype), a / b)
    return _jax_trunc_div(call, a, b)


# ---- integer division helpers (reference, exact Python ints) ------------------------------------
def _py_tdiv(a: int, b: int, mask: int) -> int:
    if b == 0:
        return mask
    quotient = abs(a) // abs(b)
    return -quotient if (a < 0) != (b < 0) else quotient


def _ref_div(call: Call, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if call.in_dtypes[0].is_float:
        return np.where(b == 0, np.asarray(mask_value(call), a.dtype), a / b)
    mask = int(mask_value(call))
    return per_element(lambda x, y: _py_tdiv(x, y, mask), a, b)


def _ref_floor_div(call: Call, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    mask = int(mask_value(call))
    return per_element(lambda x, y: mask if y == 0 else x // y, a, b)


def _ref_rem(call: Call, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return per_element(lambda x, y: 0 if y == 0 else x - y * _py_tdiv(x, y, 0), a, b)


def _ref_fma(call: Call, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    a64, b64, c64 = (np.asarray(v, np.float64) for v in (a, b, c))
    return a64 * b64 + c64


def _jax_fma(call: Call, a: Any, b: Any, c: Any) -> Any:
    a64, b64, c64 = (v.astype(jnp.float64) for v in (a, b, c))
    product = a64 * b64
    if jnp.float64 in (a.dtype, b.dtype, c.dtype):
        # XLA contracts a multiply feeding an add into one fused operation (depending on the
        # target and its optimization level; optimization_barrier and reduce_precision are
        # simplified away first). A select between them keeps the f64 product rounded, as
        # the reference rounds it: where c is NaN the sum is NaN either way. (The product of
        # narrower floats is exact in f64: nothing to round.)
        product = jnp.where(jnp.isnan(c64), c64, product)
    return product + c64


def _ref_recip(call: Call, x: np.ndarray) -> np.ndarray:
    return np.where(x == 0, np.asarray(mask_value(call), x.dtype), np.divide(1, x, dtype=x.dtype))


def _jax_recip(call: Call, x: Any) -> Any:
    return jnp.where(x == 0, jnp.asarray(mask_value(call), x.dtype), 1 / x)


# ---- declarations -----------------------------------------------------------------------------------
x0, x1, x2 = Input(0), Input(1), Input(2)
MASKED = param("div_by_zero_mask")

elementwise(
    "add", "arith", "a b", FLOAT | INTS | BOOL,
    lambda c, a, b: (a | b) if _is_bool(c) else a + b,
    lambda c, a, b: (a | b) if _is_bool(c) else a + b,
    broadcast=True, expr=x0 + x1, doc="a + b (bool: a or b); integers wrap",
)  # fmt: skip
elementwise(
    "mul", "arith", "a b", FLOAT | INTS | BOOL | TERNARY,
    lambda c, a, b: (a & b) if _is_bool(c) else a * b,
    lambda c, a, b: (a & b) if _is_bool(c) else a * b,
    broadcast=True, expr=x0 * x1, doc="a * b (bool: a and b); integers wrap",
)  # fmt: skip
elementwise(
    "sub", "arith", "a b", FLOAT | INTS,
    lambda c, a, b: a - b, lambda c, a, b: a - b,
    broadcast=True, expr=x0 - x1, doc="a - b; integers wrap",
)  # fmt: skip
elementwise(
    "div", "arith", "a b", FLOAT | DIV_INTS, _jax_div, _ref_div,
    broadcast=True, params=params_of(MASK), check=check_mask, kernel_params=with_mask,
    expr=select(x1.eq(0), MASKED, x0 / x1),
    doc="a / b; integers truncate toward zero; zero divisors give div_by_zero_mask",
)  # fmt: skip
elementwise(
    "floor_div", "arith", "a b", DIV_INTS, _jax_floor_div, _ref_floor_div,
    broadcast=True, params=params_of(MASK), check=check_mask, kernel_params=with_mask,
    expr=select(x1.eq(0), MASKED, ex.floor_div(x0, x1)),
    doc="floor(a / b) for integers; zero divisors give div_by_zero_mask (default 0)",
)  # fmt: skip
elementwise(
    "rem", "arith", "a b", DIV_INTS, _jax_rem, _ref_rem,
    broadcast=True, expr=select(x1.eq(0), 0, ex.rem(x0, x1)),
    doc="truncated remainder a - b*trunc(a/b) (sign of a); b == 0 gives 0",
)  # fmt: skip
elementwise(
    "fma", "arith", "a b c", FLOAT, _jax_fma, _ref_fma,
    expr=ex.mul_add(x0, x1, x2), doc="a * b + c computed in f64, rounded once to the storage type",
)  # fmt: skip
elementwise(
    "abs", "arith", "x", FLOAT | SIGNED | PACKED_SIGNED | TERNARY,
    lambda c, x: jnp.abs(x), lambda c, x: np.abs(x) if x.dtype != object else np.vectorize(abs, otypes=[object])(x),
    expr=abs(x0), doc="|x|; abs(int_min) wraps to int_min",
)  # fmt: skip
elementwise(
    "neg", "arith", "x", FLOAT | SIGNED | PACKED_SIGNED | TERNARY,
    lambda c, x: -x, lambda c, x: -x, expr=-x0, doc="-x; neg(int_min) wraps to int_min",
)  # fmt: skip
elementwise(
    "recip", "arith", "x", FLOAT, _jax_recip, _ref_recip, params=params_of(MASK),
    kernel_params=with_mask, expr=select(x0.eq(0), MASKED, 1 / x0), doc="1 / x; x == 0 gives div_by_zero_mask (default NaN)",
)  # fmt: skip
