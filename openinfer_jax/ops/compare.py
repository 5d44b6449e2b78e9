"""Comparison ops: eq, ne, lt, le, gt, ge (bool output, IEEE semantics: NaN compares unequal)."""

from __future__ import annotations

import operator

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops.elementwise import elementwise
from openinfer_jax.ops.expr import Apply, Input
from openinfer_jax.ops.registry import (
    BOOL,
    FLOAT,
    PACKED_SIGNED,
    PACKED_UNSIGNED,
    SIGNED,
    TERNARY,
    UNSIGNED,
    OutputRule,
)

__all__: list[str] = []

ORDERED = FLOAT | SIGNED | UNSIGNED | PACKED_SIGNED | PACKED_UNSIGNED
EQUATABLE = ORDERED | BOOL | TERNARY
TO_BOOL = OutputRule("fixed", dtype=DType.BOOL)

# name (also the tree primitive), comparison, symbol for the docs, dtype set
_COMPARISONS = (
    ("eq", operator.eq, "==", EQUATABLE),
    ("ne", operator.ne, "!=", EQUATABLE),
    ("lt", operator.lt, "<", ORDERED),
    ("le", operator.le, "<=", ORDERED),
    ("gt", operator.gt, ">", ORDERED),
    ("ge", operator.ge, ">=", ORDERED),
)

for _name, _compare, _symbol, _dtypes in _COMPARISONS:
    elementwise(
        _name, "comparison", "a b", _dtypes,
        # Both sides use the Python operator on their own arrays (jnp vs exact/NumPy values).
        lambda c, a, b, f=_compare: f(a, b),
        lambda c, a, b, f=_compare: f(a, b),
        output=TO_BOOL, inplace=False, expr=Apply(_name, (Input(0), Input(1))),
        doc=f"a {_symbol} b elementwise (bool); NaN compares unequal",
    )  # fmt: skip
