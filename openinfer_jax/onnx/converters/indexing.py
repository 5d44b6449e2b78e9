"""Element-wise indexing ops on flat positions: GatherElements, GatherND, ScatterElements,
ScatterND, Compress, TopK (k rounds of arg-max, for small k).

A gather computes each output element's flat position in the data (the index times the
axis stride plus a constant for the other coordinates) and reads it with one `gather` from
the flattened data. A scatter with indices known at import becomes a constant map: each
output position either keeps the data or takes one update (`where` + `gather`), and
``reduction="add"`` adds a constant 0/1 matrix product of the updates; mul/max/min gather
each position's updates into a row, reduce it and combine it with the data.
"""

from __future__ import annotations

import math

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.converters.common import norm_axis
from openinfer_jax.onnx.converters.elementwise import binary
from openinfer_jax.onnx.converters.movement import reshape
from openinfer_jax.onnx.values import Tensor, Value

__all__: list[str] = []


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


def _wrapped(ctx: NodeContext, index: Value, size: Value | int, tag: str) -> Tensor:
    """i64 indices with negative ones counted from the end (`size` is the axis length, or a
    constant of per-column lengths)."""
    idx = ctx.as_tensor(index)
    if idx.dtype is not DType.I64:
        idx = ctx.emit("cast", [idx], hint=ctx.hint(0, f"{tag}_i64"), to=DType.I64)
    length = (
        ctx.constant(np.asarray(size, np.int64), DType.I64, ctx.hint(0, f"{tag}_len"))
        if isinstance(size, (int, np.ndarray))
        else size
    )
    shifted = binary(ctx, "add", idx, length, hint=ctx.hint(0, f"{tag}_shifted"))
    negative = ctx.emit("is_neg", [idx], hint=ctx.hint(0, f"{tag}_negative"))
    return ctx.emit("where", [negative, shifted, idx], hint=ctx.hint(0, f"{tag}_wrapped"))


@converter(
    "GatherElements", attrs=("axis",), becomes="gather on the flattened data at computed positions"
)
def _gather_elements(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    idx_shape = ctx.shape(1)
    rank = len(shape)
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), rank)
    strides = _strides(shape)
    grid = np.indices(idx_shape, dtype=np.int64)
    base = sum(grid[d] * strides[d] for d in range(rank) if d != axis)
    idx = _wrapped(ctx, ctx.value(1), shape[axis], "index")
    if strides[axis] != 1:
        idx = ctx.emit(
            "mul",
            [
                idx,
                ctx.constant(np.asarray(strides[axis], np.int64), DType.I64, ctx.hint(0, "stride")),
            ],
            hint=ctx.hint(0, "offset"),
        )
    flat_index = ctx.emit(
        "add",
        [idx, ctx.constant(np.asarray(base, np.int64), DType.I64, ctx.hint(0, "base"))],
        hint=ctx.hint(0, "position"),
    )
    flat = reshape(ctx, ctx.value(0), (math.prod(shape),), hint=ctx.hint(0, "flat"))
    ctx.set_output(0, ctx.emit("gather", [flat, flat_index]))


@converter(
    "GatherND",
    attrs=("batch_dims",),
    becomes="gather on the data's leading axes flattened, at computed positions",
)
def _gather_nd(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    idx_shape = ctx.shape(1)
    b = int(ctx.attr("batch_dims", 0))
    k = idx_shape[-1]
    lead = shape[b : b + k]
    strides = np.asarray(_strides(lead), np.int64)
    idx = _wrapped(ctx, ctx.value(1), np.asarray(lead, np.int64), "index")
    picked = ctx.emit(
        "mul",
        [idx, ctx.constant(strides, DType.I64, ctx.hint(0, "strides"))],
        hint=ctx.hint(0, "scaled"),
    )
    local = ctx.emit("sum_axis", [picked], hint=ctx.hint(0, "local"), axes=[len(idx_shape) - 1])
    batch = math.prod(shape[:b])
    block = math.prod(lead)
    if b:
        grid = np.indices(idx_shape[:-1], dtype=np.int64)
        offsets = sum(grid[d] * _strides(shape[:b])[d] for d in range(b)) * block
        local = ctx.emit(
            "add",
            [
                local,
                ctx.constant(np.asarray(offsets, np.int64), DType.I64, ctx.hint(0, "batch_offset")),
            ],
            hint=ctx.hint(0, "position"),
        )
    table = reshape(ctx, ctx.value(0), (batch * block, *shape[b + k :]), hint=ctx.hint(0, "rows"))
    ctx.set_output(0, ctx.emit("gather", [table, local]))


def _scatter(ctx: NodeContext, targets: np.ndarray, reduction: str) -> None:
    """data with update u written at flat position targets[u] (constant)."""
    data, updates = ctx.value(0), ctx.value(2)
    shape = ctx.shape(0)
    size = math.prod(shape)
    flat_data = reshape(ctx, data, (size,), hint=ctx.hint(0, "flat"))
    flat_updates = reshape(ctx, updates, (targets.size,), hint=ctx.hint(0, "updates_flat"))
    targets = targets.reshape(-1)
    if reduction == "none":
        source = np.zeros(size, np.int64)
        written = np.zeros(size, bool)
        for u, t in enumerate(targets.tolist()):  # the last update to a position wins
            source[t] = u
            written[t] = True
        picked = ctx.emit(
            "gather",
            [flat_updates, ctx.constant(source, DType.I64, ctx.hint(0, "source"))],
            hint=ctx.hint(0, "picked"),
        )
        mask = ctx.constant(written, DType.BOOL, ctx.hint(0, "written"))
        out = ctx.emit("where", [mask, picked, flat_data], hint=ctx.hint(0, "scattered"))
    elif reduction == "add":
        dtype = ctx.dtype(0)
        onto = np.zeros((targets.size, size), dtype=dtype.numpy)
        onto[np.arange(targets.size), targets] = 1
        row = reshape(ctx, flat_updates, (1, targets.size), hint=ctx.hint(0, "updates_row"))
        sums = ctx.emit(
            "matmul",
            [row, ctx.constant(onto, dtype, ctx.hint(0, "onto"))],
            hint=ctx.hint(0, "sums"),
        )
        sums = reshape(ctx, sums, (size,), hint=ctx.hint(0, "sums_flat"))
        out = ctx.emit("add", [flat_data, sums], hint=ctx.hint(0, "scattered"))
    else:
        out = _scatter_reduced(ctx, flat_data, flat_updates, targets, size, reduction)
    ctx.set_output(0, reshape(ctx, out, shape))


_REDUCE = {"mul": ("prod_axis", "mul"), "max": ("max_axis", "max"), "min": ("min_axis", "min")}


def _scatter_reduced(ctx: NodeContext, data: Tensor, updates: Tensor, targets: np.ndarray, size: int,
                     reduction: str) -> Tensor:  # fmt: skip
    """mul/max/min scatter: the updates of each position gathered into a row (padded with
    the reduction's neutral value), reduced, then combined with the data."""
    if reduction not in _REDUCE:
        raise ctx.error(f"reduction={reduction!r} is not supported")
    dtype = ctx.dtype(0)
    if reduction == "mul":
        neutral: float | int = 1
    elif dtype.is_float:
        neutral = -math.inf if reduction == "max" else math.inf
    else:
        neutral = dtype.value_range()[0 if reduction == "max" else 1]
    per_position: list[list[int]] = [[] for _ in range(size)]
    for u, t in enumerate(targets.tolist()):
        per_position[t].append(u)
    width = max(len(p) for p in per_position)
    slots = np.full((size, width), targets.size, np.int64)  # the padding slot: neutral
    for p, us in enumerate(per_position):
        slots[p, : len(us)] = us
    padding = ctx.constant(np.full((1,), neutral, dtype.numpy), dtype, ctx.hint(0, "neutral"))
    pool = ctx.emit("concat", [updates, padding], hint=ctx.hint(0, "pool"), axis=0)
    rows = ctx.emit(
        "gather",
        [pool, ctx.constant(slots, DType.I64, ctx.hint(0, "slots"))],
        hint=ctx.hint(0, "rows"),
    )
    axis_op, combine = _REDUCE[reduction]
    reduced = ctx.emit(axis_op, [rows], hint=ctx.hint(0, "reduced"), axes=[1])
    return ctx.emit(combine, [data, reduced], hint=ctx.hint(0, "scattered"))


@converter(
    "ScatterElements",
    "Scatter",
    attrs=("axis", "reduction"),
    becomes="where/gather (or matmul for add) with constant positions",
)
def _scatter_elements(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    rank = len(shape)
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), rank)
    idx = np.asarray(ctx.const(1, "the scatter indices"), np.int64)
    idx = np.where(idx < 0, idx + shape[axis], idx)
    grid = list(np.indices(idx.shape, dtype=np.int64))
    grid[axis] = idx
    targets = np.ravel_multi_index(tuple(grid), shape)
    _scatter(ctx, targets, ctx.attr("reduction", "none"))


@converter(
    "ScatterND",
    attrs=("reduction",),
    becomes="where/gather (or matmul for add) with constant positions",
)
def _scatter_nd(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    idx = np.asarray(ctx.const(1, "the scatter indices"), np.int64)
    k = idx.shape[-1]
    lead = np.asarray(shape[:k], np.int64)
    idx = np.where(idx < 0, idx + lead, idx)
    rest = math.prod(shape[k:])
    starts = np.ravel_multi_index(tuple(np.moveaxis(idx, -1, 0)), shape[:k]) * rest
    targets = starts[..., None] + np.arange(rest)
    _scatter(ctx, targets, ctx.attr("reduction", "none"))


@converter("Compress", attrs=("axis",), becomes="gather with the kept positions")
def _compress(ctx: NodeContext) -> None:
    keep = np.flatnonzero(np.asarray(ctx.const(1, "the condition")).astype(bool))
    x: Value = ctx.value(0)
    shape = ctx.shape(0)
    if "axis" in ctx.attrs:
        axis = norm_axis(ctx, int(ctx.attr("axis")), len(shape))
        keep = keep[keep < shape[axis]]
    else:
        x = reshape(ctx, x, (math.prod(shape),), hint=ctx.hint(0, "flat"))
        axis = 0
        keep = keep[keep < math.prod(shape)]
    index = ctx.constant(keep.astype(np.int64), DType.I64, ctx.hint(0, "kept"))
    ctx.set_output(0, ctx.emit("gather", [x, index], axis=axis))


@converter(
    "TopK",
    attrs=("axis", "largest", "sorted"),
    becomes="k rounds of argmax/argmin, gather, masking",
)
def _top_k(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    rank = len(shape)
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), rank)
    k = int(np.asarray(ctx.const(1, "k")).reshape(-1)[0])
    largest = int(ctx.attr("largest", 1))
    dtype = ctx.dtype(0)
    if k > 64:
        raise ctx.error(f"k={k} is too large for the unrolled top-k (at most 64)")
    if dtype.is_float:
        sentinel = -math.inf if largest else math.inf
    else:
        lo, hi = dtype.value_range()
        sentinel = lo if largest else hi
    positions = np.arange(shape[axis], dtype=np.int64).reshape(
        [shape[axis] if d == axis else 1 for d in range(rank)]
    )
    position_const = ctx.constant(positions, DType.I64, ctx.hint(0, "positions"))
    fill = ctx.constant(np.asarray(sentinel, dtype=dtype.numpy), dtype, ctx.hint(0, "used"))
    x: Value = ctx.value(0)
    values: list[Tensor] = []
    indices: list[Tensor] = []
    op = "argmax_axis" if largest else "argmin_axis"
    for r in range(k):
        best = ctx.emit(op, [x], hint=ctx.hint(1, f"i{r}"), axis=axis, keepdims=True)
        hit = binary(ctx, "eq", position_const, best, hint=ctx.hint(0, f"hit{r}"))
        flat = _select(ctx, x, hit, axis, r)
        values.append(flat)
        indices.append(best)
        if r + 1 < k:
            x = ctx.emit("where", [hit, fill, x], hint=ctx.hint(0, f"rest{r}"))
    ctx.set_output(0, values[0] if k == 1 else ctx.emit("concat", values, axis=axis))
    ctx.set_output(
        1, indices[0] if k == 1 else ctx.emit("concat", indices, hint=ctx.hint(1), axis=axis)
    )


def _select(ctx: NodeContext, x: Value, hit: Tensor, axis: int, r: int) -> Tensor:
    """The element of `x` where `hit` is true along `axis` (exactly one), keeping the axis."""
    dtype = ctx.as_tensor(x).dtype
    zero = ctx.constant(np.zeros((), dtype.numpy), dtype, ctx.hint(0, "zero"))
    masked = ctx.emit("where", [hit, x, zero], hint=ctx.hint(0, f"masked{r}"))
    # The sum of the one kept element and zeros is that element (an infinity stays one).
    return ctx.emit("sum_axis", [masked], hint=ctx.hint(0, f"v{r}"), axes=[axis], keepdims=True)


@converter(
    "ReverseSequence",
    attrs=("batch_axis", "time_axis"),
    becomes="gather on the flattened data at positions reversed below each sequence length",
)
def _reverse_sequence(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    rank = len(shape)
    batch_axis = norm_axis(ctx, int(ctx.attr("batch_axis", 1)), rank)
    time_axis = norm_axis(ctx, int(ctx.attr("time_axis", 0)), rank)
    strides = _strides(shape)
    grid = np.indices(shape, dtype=np.int64)
    base = sum(grid[d] * strides[d] for d in range(rank) if d != time_axis)
    # lens along the batch axis, broadcast over the rest: time t < len reads len - 1 - t
    per_batch = [1] * rank
    per_batch[batch_axis] = shape[batch_axis]
    lens = ctx.value(1)
    if ctx.dtype(1) is not DType.I64:
        lens = ctx.emit("cast", [lens], hint=ctx.hint(0, "lens_i64"), to=DType.I64)
    lens = reshape(ctx, lens, tuple(per_batch), hint=ctx.hint(0, "lens"))
    time = ctx.constant(grid[time_axis], DType.I64, ctx.hint(0, "time"))
    last = binary(ctx, "sub", lens, ctx.constant(np.asarray(1, np.int64), DType.I64, "one"),
                  hint=ctx.hint(0, "last"))  # fmt: skip
    reversed_t = binary(ctx, "sub", last, time, hint=ctx.hint(0, "reversed"))
    inside = binary(ctx, "lt", time, lens, hint=ctx.hint(0, "inside"))
    t = ctx.emit("where", [inside, reversed_t, time], hint=ctx.hint(0, "t"))
    offset = binary(ctx, "mul", t, ctx.constant(np.asarray(strides[time_axis], np.int64),
                                                DType.I64, ctx.hint(0, "stride")),
                    hint=ctx.hint(0, "offset"))  # fmt: skip
    position = binary(ctx, "add", offset, ctx.constant(np.asarray(base, np.int64), DType.I64,
                                                       ctx.hint(0, "base")),
                      hint=ctx.hint(0, "position"))  # fmt: skip
    flat = reshape(ctx, ctx.value(0), (math.prod(shape),), hint=ctx.hint(0, "flat"))
    ctx.set_output(0, ctx.emit("gather", [flat, position]))
