"""Helpers shared by the converters: axes, broadcasting, scalar constants."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.values import Const, Tensor, Value

__all__ = [
    "broadcast_all",
    "expand_to",
    "norm_axes",
    "norm_axis",
    "scalar",
]


def norm_axis(ctx: NodeContext, axis: int, rank: int) -> int:
    """`axis` in [0, rank) (negative counts from the end).

    Raises:
        OnnxImportError: the axis is out of range (names the node).
    """
    if not -rank <= axis < max(rank, 1):
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def norm_axes(ctx: NodeContext, axes: Sequence[int], rank: int) -> list[int]:
    """Every axis of `axes` normalized (see `norm_axis`)."""
    return [norm_axis(ctx, int(a), rank) for a in axes]


def scalar(ctx: NodeContext, value: float | int | bool, dtype: DType) -> Tensor:
    """A 0-d constant of `dtype` (an @init scalar in the program)."""
    return ctx.constant(np.asarray(value, dtype=dtype.numpy), dtype, f"c_{_label(value)}")


def _label(value: float | int | bool) -> str:
    text = repr(value).replace("-", "m").replace(".", "_").replace("+", "")
    return "".join(ch for ch in text if ch.isalnum() or ch == "_")


def expand_to(ctx: NodeContext, value: Value, shape: tuple[int, ...], hint: str) -> Tensor:
    """`value` broadcast to `shape` (NumPy rules) as a program variable.

    A constant is broadcast at import. A variable goes through an op that broadcasts:
    ``add`` of zeros shaped like the new dims only (``where`` for bool), so the constant
    stays as small as the expansion.
    """
    if isinstance(value, Const):
        if tuple(value.array.shape) == shape:
            return ctx.as_tensor(value)
        return ctx.constant(np.broadcast_to(value.array, shape).copy(), value.dtype, hint)
    if value.shape == shape:
        return value
    pad = (1,) * (len(shape) - len(value.shape)) + value.shape
    grown = tuple(s if p == 1 else 1 for s, p in zip(shape, pad, strict=True))
    if value.dtype is DType.BOOL:
        ones = ctx.constant(np.ones(grown, dtype=bool), DType.BOOL, f"{hint}_true")
        zeros = ctx.constant(np.zeros(grown, dtype=bool), DType.BOOL, f"{hint}_false")
        return ctx.emit("where", [value, ones, zeros], hint=hint)
    zeros = ctx.constant(np.zeros(grown, dtype=value.dtype.numpy), value.dtype, f"{hint}_zeros")
    return ctx.emit("add", [value, zeros], hint=hint)


def broadcast_all(ctx: NodeContext, values: Sequence[Value]) -> list[Tensor]:
    """`values` broadcast to their common shape (for ops that need equal shapes)."""
    shapes = [tuple(v.array.shape) if isinstance(v, Const) else v.shape for v in values]
    try:
        target = tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise ctx.error(
            f"input shapes {' and '.join(str(s) for s in shapes)} do not broadcast"
        ) from None
    return [expand_to(ctx, v, target, ctx.hint(0, f"b{i}")) for i, v in enumerate(values)]
