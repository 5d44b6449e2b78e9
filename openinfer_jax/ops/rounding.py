"""Rounding ops: floor, ceil, round, trunc (floats) and clamp.

``round`` rounds half away from zero (Rust's ``f32::round``, the original's CPU kernel), keeping
the sign of zero. ``clamp(x, min, max)`` is ``min(max(x, min), max)``; omitted bounds are the
type's limits; for integers the bounds are rounded inward (ceil min, floor max) and limited to
the type's range; NaN stays NaN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import expr as ex
from openinfer_jax.ops.elementwise import elementwise, params_of
from openinfer_jax.ops.expr import Input, param
from openinfer_jax.ops.numerical import clamp_bounds, int_bounds, require_bound
from openinfer_jax.ops.numpy_numeric import per_element
from openinfer_jax.ops.registry import (
    FLOAT,
    PACKED_SIGNED,
    PACKED_UNSIGNED,
    SIGNED,
    UNSIGNED,
    Call,
    ParamKind,
    ParamSpec,
)

__all__: list[str] = []


def _jax_round(x: Any) -> Any:
    whole = jnp.trunc(x)
    return jnp.where(jnp.abs(x - whole) >= 0.5, whole + jnp.sign(x), whole)


def _ref_round(x: np.ndarray) -> np.ndarray:
    magnitude = np.abs(x)
    floor = np.floor(magnitude)
    return np.asarray(np.copysign(floor + (magnitude - floor >= 0.5), x))


_x = Input(0)
# name, JAX function, NumPy function, tree
_ROUNDERS = (
    ("floor", jnp.floor, np.floor, ex.floor(_x)),
    ("ceil", jnp.ceil, np.ceil, ex.ceil(_x)),
    ("round", _jax_round, _ref_round, ex.round_half_away(_x)),
    ("trunc", jnp.trunc, np.trunc, ex.trunc(_x)),
)

for _name, _jax_fn, _np_fn, _tree in _ROUNDERS:
    elementwise(
        _name, "rounding", "x", FLOAT,
        lambda c, x, f=_jax_fn: f(x), lambda c, x, f=_np_fn: f(x),
        expr=_tree, doc=f"{_name}(a) elementwise" + (" (half away from zero)" if _name == "round" else ""),
    )  # fmt: skip


def _jax_clamp(call: Call, x: Any) -> Any:
    low = require_bound("clamp", "min", call["min"])
    high = require_bound("clamp", "max", call["max"])
    dtype = call.in_dtypes[0]
    if dtype.is_float:
        y = x if low is None else jnp.maximum(x, low)
        return y if high is None else jnp.minimum(y, high)
    lo, hi = int_bounds(dtype, low, high)
    return jnp.minimum(jnp.maximum(x, jnp.asarray(lo, x.dtype)), jnp.asarray(hi, x.dtype))


def _clamp_params(in_dtypes: Sequence[DType], params: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(params)
    out["min"], out["max"] = clamp_bounds(in_dtypes[0], params["min"], params["max"])
    return out


def _ref_clamp(call: Call, x: np.ndarray) -> np.ndarray:
    low, high = call["min"], call["max"]
    dtype = call.in_dtypes[0]
    if dtype.is_float:
        y = x if low is None else np.maximum(x, x.dtype.type(low))
        return y if high is None else np.minimum(y, x.dtype.type(high))
    lo, hi = int_bounds(
        dtype, None if low is None else float(low), None if high is None else float(high)
    )
    return per_element(lambda v: min(max(v, lo), hi), x)


elementwise(
    "clamp", "rounding", "x", FLOAT | SIGNED | UNSIGNED | PACKED_SIGNED | PACKED_UNSIGNED,
    _jax_clamp, _ref_clamp,
    params=params_of(
        ParamSpec("min", ParamKind.SCALAR, None, doc="lower bound (default: type minimum)"),
        ParamSpec("max", ParamKind.SCALAR, None, doc="upper bound (default: type maximum)"),
    ),
    kernel_params=_clamp_params, expr=ex.clamp(_x, param("min"), param("max")),
    doc="min(max(x, min), max)",
)  # fmt: skip
