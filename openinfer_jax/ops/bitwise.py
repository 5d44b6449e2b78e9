"""Bitwise ops: and, or, xor, not, shl, shr, popcount.

Integers are two's complement in their storage width (packed types included). ``shl`` drops
bits shifted past the width (a count >= width gives 0); ``shr`` is arithmetic for signed types
(a count >= width gives -1 for negative values, 0 otherwise) and logical for unsigned ones
(>= width gives 0). ``popcount`` counts the set bits of the width-bit pattern, so
``popcount(i4 -1) == 4``. On bool, and/or/xor/not are the logical operations.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import expr as ex
from openinfer_jax.ops.elementwise import elementwise, params_of
from openinfer_jax.ops.expr import U32, WIDTH, Input, minimum, param, select
from openinfer_jax.ops.numpy_numeric import per_element
from openinfer_jax.ops.registry import (
    BOOL,
    PACKED_SIGNED,
    PACKED_UNSIGNED,
    SIGNED,
    UNSIGNED,
    Call,
    OutputRule,
    ParamKind,
    ParamSpec,
)

__all__: list[str] = []

LOGIC = SIGNED | UNSIGNED | PACKED_SIGNED | PACKED_UNSIGNED | BOOL
# The original's shift and popcount kernels take i2/i4/u2/u4 but not the 1-bit types.
SHIFTABLE = SIGNED | UNSIGNED | frozenset({DType.I4, DType.I2, DType.U4, DType.U2})
BITS = ParamSpec("bits", ParamKind.UINT, 0, doc="shift count (>= width: see semantics)")


def _jax_shl(call: Call, x: Any) -> Any:
    bits = call["bits"]
    if bits >= call.in_dtypes[0].bits:
        return jnp.zeros_like(x)
    return jnp.left_shift(x, jnp.asarray(bits, x.dtype))


def _jax_shr(call: Call, x: Any) -> Any:
    dtype = call.in_dtypes[0]
    bits = call["bits"]
    if bits >= dtype.bits:
        if not dtype.is_signed_int:
            return jnp.zeros_like(x)
        bits = dtype.bits - 1  # an arithmetic shift by width-1 already yields the sign fill
    return jnp.right_shift(x, jnp.asarray(bits, x.dtype))


def _jax_popcount(call: Call, x: Any) -> Any:
    dtype = call.in_dtypes[0]
    if dtype.is_packed:
        x = x & ((1 << dtype.bits) - 1)  # the width-bit pattern of a sign-extended value
    return lax.population_count(x)


def _ref_popcount(call: Call, x: np.ndarray) -> np.ndarray:
    modulus = 1 << call.in_dtypes[0].bits
    return per_element(lambda v: bin(v % modulus).count("1"), x)


def _ref_not(call: Call, x: np.ndarray) -> np.ndarray:
    if call.in_dtypes[0] is DType.BOOL:
        return ~x
    return per_element(lambda v: ~v, x)


x0, x1 = Input(0), Input(1)
SHIFT = param("bits", U32)
# Counts of the width or more: shl gives 0, shr the sign fill (signed) or 0 (unsigned).
SHL = select(SHIFT >= WIDTH, 0, x0 << SHIFT)
SHR = {"sint": x0 >> minimum(SHIFT, WIDTH - 1), "uint": select(SHIFT >= WIDTH, 0, x0 >> SHIFT)}

elementwise(
    "and", "bitwise", "a b", LOGIC,
    lambda c, a, b: a & b, lambda c, a, b: a & b, expr=x0 & x1, doc="bitwise and (bool: logical)",
)  # fmt: skip
elementwise(
    "or", "bitwise", "a b", LOGIC,
    lambda c, a, b: a | b, lambda c, a, b: a | b, expr=x0 | x1, doc="bitwise or (bool: logical)",
)  # fmt: skip
elementwise(
    "xor", "bitwise", "a b", LOGIC,
    lambda c, a, b: a ^ b, lambda c, a, b: a ^ b, expr=x0 ^ x1, doc="bitwise xor (bool: logical)",
)  # fmt: skip
elementwise(
    "not", "bitwise", "x", LOGIC,
    lambda c, x: ~x, _ref_not, expr=~x0, doc="bitwise not (bool: logical not)",
)  # fmt: skip
elementwise(
    "shl", "bitwise", "x", SHIFTABLE, _jax_shl,
    lambda c, x: per_element(lambda v: v << c["bits"], x),
    params=params_of(BITS), expr=SHL,
    doc="x << bits; bits shifted out are lost; bits >= width gives 0",
)  # fmt: skip
elementwise(
    "shr", "bitwise", "x", SHIFTABLE, _jax_shr,
    lambda c, x: per_element(lambda v: v >> c["bits"], x),
    params=params_of(BITS), expr=SHR,
    doc="x >> bits; arithmetic for signed, logical for unsigned; bits >= width saturates",
)  # fmt: skip
elementwise(
    "popcount", "bitwise", "x", SHIFTABLE, _jax_popcount, _ref_popcount,
    output=OutputRule("fixed", dtype=DType.U8), inplace=False, expr=ex.popcount(x0),
    doc="number of set bits of the storage-width two's complement pattern (u8)",
)  # fmt: skip
