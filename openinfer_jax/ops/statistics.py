"""Statistics ops: min, max (elementwise, NaN propagates) and sign (i8: -1, 0, +1; NaN → 0)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops.elementwise import elementwise
from openinfer_jax.ops.expr import Input, maximum, minimum, select
from openinfer_jax.ops.numpy_numeric import per_element
from openinfer_jax.ops.registry import (
    FLOAT,
    PACKED_SIGNED,
    PACKED_UNSIGNED,
    SIGNED,
    TERNARY,
    UNSIGNED,
    Call,
    OutputRule,
)

__all__: list[str] = []

ORDERED = FLOAT | SIGNED | UNSIGNED | PACKED_SIGNED | PACKED_UNSIGNED
x0, x1 = Input(0), Input(1)

elementwise(
    "min", "statistics", "a b", ORDERED,
    lambda c, a, b: jnp.minimum(a, b), lambda c, a, b: np.minimum(a, b),
    expr=minimum(x0, x1), doc="elementwise minimum (NaN propagates)",
)  # fmt: skip
elementwise(
    "max", "statistics", "a b", ORDERED,
    lambda c, a, b: jnp.maximum(a, b), lambda c, a, b: np.maximum(a, b),
    expr=maximum(x0, x1), doc="elementwise maximum (NaN propagates)",
)  # fmt: skip


def _jax_sign(call: Call, x: Any) -> Any:
    if call.in_dtypes[0].is_float:
        return jnp.where(jnp.isnan(x), 0, jnp.sign(x)).astype(jnp.int32)
    return jnp.sign(x)


def _ref_sign(call: Call, x: np.ndarray) -> np.ndarray:
    if call.in_dtypes[0].is_float:
        return per_element(lambda v: (v > 0) - (v < 0), x.astype(np.float64))
    return per_element(lambda v: (v > 0) - (v < 0), x)


elementwise(
    "sign", "statistics", "x", FLOAT | SIGNED | PACKED_SIGNED | TERNARY, _jax_sign, _ref_sign,
    output=OutputRule("fixed", dtype=DType.I8), expr=select(x0 > 0, 1, select(x0 < 0, -1, 0)),
    doc="-1, 0 or +1 as i8 (NaN gives 0)",
)  # fmt: skip
