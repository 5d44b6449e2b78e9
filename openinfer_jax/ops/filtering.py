"""Filtering ops: filter (select), is_finite, is_nan, is_inf, is_neg.

``filter(cond, a, b)`` selects ``a`` where ``cond`` is non-zero (true; NaN counts as true) and
``b`` elsewhere, like NumPy's ``where`` but without broadcasting; ``cond`` may have any dtype
of the set, ``a`` and ``b`` share one. ``is_neg`` is ``x < 0``: false for -0.0, NaN and every
unsigned value.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import expr as ex
from openinfer_jax.ops import numpy_numeric
from openinfer_jax.ops.elementwise import elementwise
from openinfer_jax.ops.expr import Input, select
from openinfer_jax.ops.registry import (
    BOOL,
    ELEMENTWISE_TRAITS,
    FLOAT,
    PACKED_SIGNED,
    PACKED_UNSIGNED,
    SIGNED,
    TERNARY,
    UNSIGNED,
    Call,
    InputSpec,
    OpDef,
    OutputRule,
    register,
)

__all__: list[str] = []

SELECTABLE = FLOAT | SIGNED | UNSIGNED | PACKED_SIGNED | PACKED_UNSIGNED | BOOL | TERNARY
TO_BOOL = OutputRule("fixed", dtype=DType.BOOL)


def _jax_filter(call: Call, cond: Any, a: Any, b: Any) -> Any:
    return jnp.where(jnp.asarray(cond) != 0, jnp.asarray(a), jnp.asarray(b))


def _ref_filter(call: Call, cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    keep = numpy_numeric.ref_values(cond, call.in_dtypes[0]) != 0
    chosen = [x if k else y for k, x, y in zip(keep.reshape(-1), a.reshape(-1), b.reshape(-1))]
    return np.array(chosen, dtype=a.dtype).reshape(a.shape)


register(
    OpDef(
        name="filter",
        category="filtering",
        inputs=(
            InputSpec("cond", SELECTABLE, "C"),
            InputSpec("a", SELECTABLE, "T"),
            InputSpec("b", SELECTABLE, "T"),
        ),
        jax_impl=_jax_filter,
        ref_impl=_ref_filter,
        output=OutputRule("same", index=1),
        traits=ELEMENTWISE_TRAITS,
        expr=select(Input(0).ne(0), Input(1), Input(2)),
        doc="a where cond is non-zero, else b (no broadcasting)",
    )
)

_x = Input(0)
# name, JAX predicate, NumPy predicate, dtype set, tree, formula for the docs
_PREDICATES = (
    ("is_finite", jnp.isfinite, np.isfinite, FLOAT, ex.isfinite(_x), "isfinite(x)"),
    ("is_nan", jnp.isnan, np.isnan, FLOAT, ex.isnan(_x), "isnan(x)"),
    ("is_inf", jnp.isinf, np.isinf, FLOAT, ex.isinf(_x), "isinf(x)"),
    # No unsigned value is negative (and C compilers warn about `x < 0` on one).
    ("is_neg", lambda x: x < 0, lambda x: x < 0, FLOAT | SIGNED | UNSIGNED | PACKED_SIGNED | TERNARY,
     {"real": _x < 0, "sint": _x < 0, "uint": ex.const(False)}, "x < 0"),
)  # fmt: skip

for _name, _jax_pred, _ref_pred, _dtypes, _tree, _formula in _PREDICATES:
    elementwise(
        _name, "filtering", "x", _dtypes,
        lambda c, x, f=_jax_pred: f(x), lambda c, x, f=_ref_pred: f(x),
        output=TO_BOOL, inplace=False, expr=_tree, doc=f"{_formula} elementwise (bool)",
    )  # fmt: skip
