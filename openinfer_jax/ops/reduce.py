"""Reductions over axes: argmax_axis, argmin_axis, max_axis, min_axis, sum_axis, prod_axis,
mean_axis.

* ``axis`` / ``axes`` may be negative (counted from the end); ``axes=[]`` (the default) means
  every axis. ``keepdims`` keeps reduced axes with size 1.
* argmax/argmin return i64 indices; ties pick the first index (``select_first=true``, default)
  or the last; a NaN wins over every number (the first/last NaN, like NumPy's argmax/argmin).
* max/min propagate NaN.
* sum/prod without ``acc``: integers accumulate exactly and wrap to the input type (the same
  result as wrapping at every step); f8/bf16/f16 accumulate in f32 and round once.
  With ``acc=[A, O]`` the input is converted to A, accumulated in A (integers wrap in A) and
  converted to O.
* mean without ``acc``: floats as sum / count; integers divide a 64-bit sum by the count,
  truncating toward zero, in the input type. With ``acc=[A, O]``: (sum in A, converted to O) / count
  computed in O.
* Reducing an axis of size 0 is an error for argmax/argmin/max/min/mean (sum gives 0, prod 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import jax_numeric, numpy_numeric
from openinfer_jax.ops.elementwise import input_specs, params_of
from openinfer_jax.ops.numpy_numeric import per_element
from openinfer_jax.ops.registry import (
    FLOAT,
    PACKED_SIGNED,
    PACKED_UNSIGNED,
    SIGNED,
    UNSIGNED,
    Call,
    OpCheckError,
    OpDef,
    OutputRule,
    ParamKind,
    ParamSpec,
    Traits,
    compute_dtype,
    register,
)

__all__ = ["normalize_axes"]

REDUCIBLE = FLOAT | SIGNED | UNSIGNED | PACKED_SIGNED | PACKED_UNSIGNED
I32, I64, U32, U64, F32, F64 = DType.I32, DType.I64, DType.U32, DType.U64, DType.F32, DType.F64
SUM_RULES = ((I32, I32), (I64, I64), (U32, U32), (U64, U64), (F32, F32), (F64, F64))
MEAN_RULES = ((F32, F32), (F64, F64), (I32, F32), (I64, F64), (U32, F32), (U64, F64))

KEEPDIMS = ParamSpec("keepdims", ParamKind.BOOL, False, doc="keep reduced axes with size 1")
AXES = ParamSpec("axes", ParamKind.INT_LIST, (), doc="axes to reduce; [] = all")
ACC = ParamSpec("acc", ParamKind.ACC, None, doc="[accumulator, output] (see rules)")


def normalize_axes(op: str, axes: Sequence[int], ndim: int) -> tuple[int, ...]:
    """Axes made non-negative and sorted; empty means all axes.

    Raises:
        OpCheckError: an axis outside [-ndim, ndim) or an axis listed twice.
    """
    if not axes:
        return tuple(range(ndim))
    out = []
    for axis in axes:
        if not -ndim <= axis < ndim:
            raise OpCheckError(
                f"{op}: axis {axis} is out of range for rank {ndim} (use -{ndim}..{ndim - 1})"
            )
        out.append(axis % ndim)
    if len(set(out)) != len(out):
        raise OpCheckError(f"{op}: axes {list(axes)} name an axis twice")
    return tuple(sorted(out))


def _axes_of(op: str, params: Mapping[str, Any], ndim: int) -> tuple[int, ...]:
    if "axis" in params:
        return normalize_axes(op, (params["axis"],), max(ndim, 1) if ndim else 0) if ndim else ()
    return normalize_axes(op, params["axes"], ndim)


def _reduce_shape(op: str, allow_empty: bool) -> Any:
    def rule(shapes: Sequence[tuple[int, ...]], params: Mapping[str, Any]) -> tuple[int, ...]:
        shape = shapes[0]
        if "axis" in params and not shape:
            raise OpCheckError(f"{op}: needs an input of rank >= 1, got a scalar")
        axes = _axes_of(op, params, len(shape))
        if not allow_empty and any(shape[a] == 0 for a in axes):
            raise OpCheckError(f"{op}: cannot reduce an axis of size 0 (input shape {shape})")
        if params["keepdims"]:
            return tuple(1 if i in axes else d for i, d in enumerate(shape))
        return tuple(d for i, d in enumerate(shape) if i not in axes)

    return rule


# ---- argmax / argmin ---------------------------------------------------------------------------------
def _jax_arg(find_max: bool) -> Any:
    def impl(call: Call, x: Any) -> Any:
        values = jax_numeric.widen(x, call.in_dtypes[0])
        axis = _axes_of("arg", call.params, values.ndim)[0]
        pick = jnp.argmax if find_max else jnp.argmin
        if call["select_first"]:
            index = pick(values, axis=axis)
        else:
            index = values.shape[axis] - 1 - pick(jnp.flip(values, axis), axis=axis)
        index = index.astype(jnp.int64)
        return jnp.expand_dims(index, axis) if call["keepdims"] else index

    return impl


def _ref_arg(find_max: bool) -> Any:
    def impl(call: Call, x: np.ndarray) -> np.ndarray:
        values = numpy_numeric.ref_values(x, call.in_dtypes[0])
        axis = _axes_of("arg", call.params, values.ndim)[0]
        rows = np.moveaxis(values, axis, -1)
        flat = rows.reshape(-1, rows.shape[-1])
        first = call["select_first"]
        result = []
        for row in flat.tolist():
            order = range(len(row)) if first else range(len(row) - 1, -1, -1)
            best = None
            for i in order:
                v = row[i]
                if v != v:  # NaN wins at once
                    best = i
                    break
                if best is None or (v > row[best] if find_max else v < row[best]):
                    best = i
            result.append(best)
        out = np.array(result, np.int64).reshape(rows.shape[:-1])
        return np.expand_dims(out, axis) if call["keepdims"] else out

    return impl


for _name, _find_max in (("argmax_axis", True), ("argmin_axis", False)):
    register(
        OpDef(
            name=_name,
            category="reduction",
            inputs=input_specs("x", REDUCIBLE),
            jax_impl=_jax_arg(_find_max),
            ref_impl=_ref_arg(_find_max),
            params=params_of(
                ParamSpec("axis", ParamKind.INT, 0, doc="axis to search"),
                KEEPDIMS,
                ParamSpec(
                    "select_first", ParamKind.BOOL, True, doc="ties: first index (else last)"
                ),
            ),
            output=OutputRule("fixed", dtype=DType.I64),
            shape_rule=_reduce_shape(_name, allow_empty=False),
            traits=Traits(index_output=True),
            doc=f"index of the {'largest' if _find_max else 'smallest'} value along axis (i64)",
        )
    )


# ---- max / min ---------------------------------------------------------------------------------------
def _jax_extreme(fn: Any) -> Any:
    def impl(call: Call, x: Any) -> Any:
        values = jax_numeric.widen(x, call.in_dtypes[0])
        axes = _axes_of("reduce", call.params, values.ndim)
        return jax_numeric.store(fn(values, axis=axes, keepdims=call["keepdims"]), call.out_dtype)

    return impl


def _ref_extreme(fn: Any) -> Any:
    def impl(call: Call, x: np.ndarray) -> np.ndarray:
        values = numpy_numeric.ref_values(x, call.in_dtypes[0])
        axes = _axes_of("reduce", call.params, values.ndim)
        with np.errstate(all="ignore"):
            result = fn(values, axis=axes, keepdims=call["keepdims"]) if axes else values
        return numpy_numeric.store_ref(result, call.out_dtype)

    return impl


for _name, _jax_fn, _np_fn in (("max_axis", jnp.max, np.max), ("min_axis", jnp.min, np.min)):
    register(
        OpDef(
            name=_name,
            category="reduction",
            inputs=input_specs("x", REDUCIBLE),
            jax_impl=_jax_extreme(_jax_fn),
            ref_impl=_ref_extreme(_np_fn),
            params=params_of(AXES, KEEPDIMS),
            shape_rule=_reduce_shape(_name, allow_empty=False),
            doc=f"{_name[:3]} over axes (NaN propagates)",
        )
    )


# ---- sum / prod / mean -------------------------------------------------------------------------------
def _jax_accumulate(kind: str) -> Any:
    def impl(call: Call, x: Any) -> Any:
        src, out = call.in_dtypes[0], call.out_dtype
        acc = call.params.get("acc")
        axes = _axes_of(kind, call.params, jnp.ndim(x))
        keep = call["keepdims"]
        count = int(np.prod([jnp.shape(x)[a] for a in axes])) if axes else 1
        if src.is_float:
            work = acc[0].numpy if acc else compute_dtype(src).numpy
            values = jnp.asarray(x).astype(work)
            total = (jnp.prod if kind == "prod" else jnp.sum)(values, axis=axes, keepdims=keep)
            if kind == "mean":
                total = total.astype(out.numpy if acc else work) / jnp.asarray(
                    count, out.numpy if acc else work
                )
            return jax_numeric.store(total, out)
        wide = jnp.asarray(x).astype(jax_numeric.wide_int_dtype(src))
        total = (jnp.prod if kind == "prod" else jnp.sum)(wide, axis=axes, keepdims=keep)
        if acc is not None:
            total = jax_numeric.store(total, acc[0])  # wrap in the accumulator's width
            if kind == "mean":
                return total.astype(out.numpy) / jnp.asarray(count, out.numpy)
            return total.astype(out.numpy)
        if kind == "mean":
            total = lax.div(total, jnp.asarray(count, total.dtype))
        return jax_numeric.store(total, out)

    return impl


def _py_trunc_div(value: int, count: int) -> int:
    quotient = abs(value) // count
    return -quotient if value < 0 else quotient


def _ref_accumulate(kind: str) -> Any:
    def impl(call: Call, x: np.ndarray) -> np.ndarray:
        src, out = call.in_dtypes[0], call.out_dtype
        acc = call.params.get("acc")
        axes = _axes_of(kind, call.params, x.ndim)
        keep = call["keepdims"]
        count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
        combine = np.prod if kind == "prod" else np.sum
        if src.is_float:
            values = x.astype(acc[0].numpy) if acc else numpy_numeric.floats(x, src)
            with np.errstate(all="ignore"):
                total = combine(values, axis=axes, keepdims=keep, dtype=values.dtype)
                if kind == "mean":
                    work = out.numpy if acc else values.dtype
                    total = np.asarray(total).astype(work) / np.asarray(count, work)
            return numpy_numeric.store_ref(total, out)
        exact = numpy_numeric.exact(x)
        total = combine(exact, axis=axes, keepdims=keep) if axes else exact
        total = np.asarray(total, dtype=object)
        if acc is not None:
            wrapped = numpy_numeric.pack_ints(total, acc[0])
            if kind == "mean":
                return np.asarray(
                    wrapped.astype(out.numpy) / np.asarray(count, out.numpy), out.numpy
                )
            return wrapped.astype(out.numpy)
        if kind == "mean":
            # The documented integer mean divides a 64-bit (wrapping) sum.
            wide = DType.U64 if src.is_unsigned_int else DType.I64
            total = per_element(
                lambda s: _py_trunc_div(numpy_numeric.wrap_int(s, wide), count), total
            )
        return numpy_numeric.store_ref(total, out)

    return impl


for _kind, _rules, _what in (
    ("sum", SUM_RULES, "sum"),
    ("prod", SUM_RULES, "product"),
    ("mean", MEAN_RULES, "mean"),
):
    register(
        OpDef(
            name=f"{_kind}_axis",
            category="reduction",
            inputs=input_specs("x", REDUCIBLE),
            jax_impl=_jax_accumulate(_kind),
            ref_impl=_ref_accumulate(_kind),
            params=params_of(AXES, KEEPDIMS, ACC),
            acc_rules=_rules,
            shape_rule=_reduce_shape(f"{_kind}_axis", allow_empty=_kind != "mean"),
            doc=f"{_what} over axes; integers wrap; acc=[A, O] accumulates in A, outputs O",
        )
    )
