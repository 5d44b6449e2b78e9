"""Reductions: ReduceSum/Mean/Max/Min/Prod and their L1/L2/log forms, ArgMax/ArgMin."""

from __future__ import annotations

import math

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.converters.common import norm_axes, norm_axis
from openinfer_jax.onnx.converters.movement import reshape
from openinfer_jax.onnx.values import Tensor, Value

__all__: list[str] = []

_DIRECT = {
    "ReduceSum": "sum_axis", "ReduceMean": "mean_axis", "ReduceMax": "max_axis",
    "ReduceMin": "min_axis", "ReduceProd": "prod_axis",
}  # fmt: skip
_COMPOSED = ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")
# The opset from which each op takes its axes as an input instead of an attribute.
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _axes(ctx: NodeContext) -> list[int] | None:
    """The reduced axes (normalized), or None for "every axis"; [] for a no-op reduction."""
    rank = len(ctx.shape(0))
    if ctx.opset >= _AXES_INPUT_SINCE.get(ctx.op_type, 18):
        axes = [int(a) for a in ctx.const(1, "the reduced axes").reshape(-1)] if ctx.has(1) else []
    else:
        axes = [int(a) for a in ctx.attr("axes", [])]
    if not axes:
        return [] if int(ctx.attr("noop_with_empty_axes", 0)) else None
    return sorted(set(norm_axes(ctx, axes, rank)))


def _reduce(ctx: NodeContext, op: str, x: Value, axes: list[int] | None, last: bool) -> Tensor:
    keepdims = bool(int(ctx.attr("keepdims", 1)))
    every = list(range(len(ctx.shape(0)))) if axes is None else axes
    hint = None if last else ctx.hint(0, op)
    return ctx.emit(op, [x], hint=hint, axes=every, keepdims=keepdims)


@converter(*_DIRECT, *_COMPOSED, attrs=("axes", "keepdims", "noop_with_empty_axes"),
           becomes="sum_axis, mean_axis, max_axis, min_axis, prod_axis (L1/L2/log forms composed)")  # fmt: skip
def _reduction(ctx: NodeContext) -> None:
    axes = _axes(ctx)
    x = ctx.value(0)
    op_type = ctx.op_type
    if axes == []:  # noop_with_empty_axes: the input (transformed for the composite forms)
        ctx.set_output(0, _noop(ctx, x))
        return
    shape = ctx.shape(0)
    every = list(range(len(shape))) if axes is None else axes
    if op_type in _EMPTY_IDENTITY and any(shape[a] == 0 for a in every):
        ctx.set_output(0, _empty_reduction(ctx, shape, every))
        return
    if op_type in _DIRECT:
        if ctx.dtype(0) is DType.BOOL and op_type in ("ReduceMax", "ReduceMin"):
            # any / all: reduce 0/1 bytes
            wide = ctx.emit("cast", [x], hint=ctx.hint(0, "u8"), to=DType.U8)
            folded = _reduce(ctx, _DIRECT[op_type], wide, axes, last=False)
            ctx.set_output(0, ctx.emit("cast", [folded], to=DType.BOOL))
            return
        ctx.set_output(0, _reduce(ctx, _DIRECT[op_type], x, axes, last=True))
        return
    if op_type == "ReduceL1":
        x = ctx.emit("abs", [x], hint=ctx.hint(0, "abs"))
        ctx.set_output(0, _reduce(ctx, "sum_axis", x, axes, last=True))
    elif op_type in ("ReduceL2", "ReduceSumSquare"):
        sq = ctx.emit("mul", [x, x], hint=ctx.hint(0, "square"))
        total = _reduce(ctx, "sum_axis", sq, axes, last=op_type == "ReduceSumSquare")
        ctx.set_output(0, total if op_type == "ReduceSumSquare" else ctx.emit("sqrt", [total]))
    elif op_type == "ReduceLogSum":
        total = _reduce(ctx, "sum_axis", x, axes, last=False)
        ctx.set_output(0, ctx.emit("log", [total]))
    else:  # ReduceLogSumExp, shifted by the max so exp cannot overflow
        rank = len(ctx.shape(0))
        every = list(range(rank)) if axes is None else axes
        peak = ctx.emit("max_axis", [x], hint=ctx.hint(0, "max"), axes=every, keepdims=True)
        shifted = ctx.emit("sub", [x, peak], hint=ctx.hint(0, "shifted"))
        e = ctx.emit("exp", [shifted], hint=ctx.hint(0, "exp"))
        total = _reduce(ctx, "sum_axis", e, axes, last=False)
        logs = ctx.emit("log", [total], hint=ctx.hint(0, "log"))
        if not int(ctx.attr("keepdims", 1)):
            peak = reshape(ctx, peak, logs.shape, hint=ctx.hint(0, "max_r"))
        ctx.set_output(0, ctx.emit("add", [logs, peak]))


# Reductions with no identity element the backends' max/min could start from: over an
# empty axis ONNX gives the identity of the whole reduction (max: -inf, min: +inf,
# logsumexp: log 0 = -inf; integers: the type's lowest / highest value).
_EMPTY_IDENTITY = {"ReduceMax": -1, "ReduceMin": 1, "ReduceLogSumExp": -1}


def _empty_reduction(ctx: NodeContext, shape: tuple[int, ...], axes: list[int]) -> Tensor:
    """The result of reducing an empty axis: a constant of the output's shape."""
    dtype = ctx.dtype(0)
    keep = bool(int(ctx.attr("keepdims", 1)))
    out = tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)
    sign = _EMPTY_IDENTITY[ctx.op_type]
    if dtype.is_float:
        value: float | int = sign * math.inf
    elif dtype is DType.BOOL:
        value = 0 if sign < 0 else 1
    else:
        low, high = dtype.value_range()
        value = low if sign < 0 else high
    return ctx.constant(np.full(out, value, dtype=dtype.numpy), dtype, ctx.hint(0, "empty"))


def _noop(ctx: NodeContext, x: Value) -> Value:
    op_type = ctx.op_type
    if op_type == "ReduceL1" or op_type == "ReduceL2":
        return ctx.emit("abs", [x])
    if op_type == "ReduceSumSquare":
        return ctx.emit("mul", [x, x])
    if op_type == "ReduceLogSum":
        return ctx.emit("log", [x])
    return x


@converter("ArgMax", "ArgMin", attrs=("axis", "keepdims", "select_last_index"),
           becomes="argmax_axis, argmin_axis")  # fmt: skip
def _arg(ctx: NodeContext) -> None:
    op = "argmax_axis" if ctx.op_type == "ArgMax" else "argmin_axis"
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), len(ctx.shape(0)))
    ctx.set_output(
        0,
        ctx.emit(
            op, [ctx.value(0)], axis=axis, keepdims=bool(int(ctx.attr("keepdims", 1))),
            select_first=not int(ctx.attr("select_last_index", 0)),
        ),
    )  # fmt: skip
