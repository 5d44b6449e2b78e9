"""Ops that write values to computed places: Col2Im and TensorScatter.

Col2Im adds every column block into the image; the positions depend only on the shapes,
so it is one `linear` with a constant 0/1 matrix (block position -> image pixel). A
TensorScatter writes `update` into a cache at per-batch positions known only at run time:
every cache position computes which update row lands on it (`gather` of the update rows at
those positions) and a `where` keeps the old value where none does.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.converters.common import norm_axis, scalar
from openinfer_jax.onnx.converters.elementwise import binary
from openinfer_jax.onnx.converters.movement import reshape
from openinfer_jax.onnx.values import Tensor

# Col2Im's matrix has (blocks x positions) x pixels entries: refuse beyond this many.
_MAX_MATRIX = 1 << 24


@converter(
    "Col2Im",
    attrs=("dilations", "pads", "strides"),
    becomes="linear with a constant 0/1 matrix (block position -> pixel), reshape",
)
def _col2im(ctx: NodeContext) -> None:
    x = ctx.tensor(0)
    image = [int(v) for v in np.asarray(ctx.const(1, "image_shape")).reshape(-1)]
    block = [int(v) for v in np.asarray(ctx.const(2, "block_shape")).reshape(-1)]
    dims = len(image)
    if len(block) != dims or len(x.shape) != 3:
        raise ctx.error(f"input {list(x.shape)}, image_shape {image}, block_shape {block} differ")
    dil = list(ctx.attr("dilations", [1] * dims))
    strides = list(ctx.attr("strides", [1] * dims))
    pads = list(ctx.attr("pads", [0] * 2 * dims))
    counts = [
        (image[d] + pads[d] + pads[d + dims] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1
        for d in range(dims)
    ]
    n, rows, length = x.shape
    blocks = math.prod(block)
    if rows % blocks or length != math.prod(counts):
        raise ctx.error(f"input {list(x.shape)} does not fit blocks {block} at {counts} positions")
    pixels = math.prod(image)
    if blocks * length * pixels > _MAX_MATRIX:
        raise ctx.error(f"the image ({pixels} pixels) is too large for Col2Im's matrix form")
    matrix = np.zeros((pixels, blocks * length), dtype=x.dtype.numpy)
    for b, offset in enumerate(itertools.product(*(range(k) for k in block))):
        for pos, at in enumerate(itertools.product(*(range(c) for c in counts))):
            pixel = [at[d] * strides[d] + offset[d] * dil[d] - pads[d] for d in range(dims)]
            if all(0 <= p < s for p, s in zip(pixel, image, strict=True)):
                matrix[int(np.ravel_multi_index(pixel, image)), b * length + pos] += 1
    channels = rows // blocks
    flat = reshape(ctx, x, (n, channels, blocks * length), hint=ctx.hint(0, "cols"))
    weight = ctx.constant(matrix, x.dtype, ctx.hint(0, "fold"))
    summed = ctx.emit("linear", [flat, weight], hint=ctx.hint(0, "pixels"))
    ctx.set_output(0, reshape(ctx, summed, (n, channels, *image)))


@converter(
    "TensorScatter",
    attrs=("axis", "mode"),
    becomes="per cache position: the update row landing there (sub, rem, gather), where",
)
def _tensor_scatter(ctx: NodeContext) -> None:
    past, update = ctx.tensor(0), ctx.tensor(1)
    rank = len(past.shape)
    axis = norm_axis(ctx, int(ctx.attr("axis", -2)), rank)
    mode = str(ctx.attr("mode", "linear"))
    if axis == 0 or mode not in ("linear", "circular"):
        raise ctx.error(
            f"axis {axis} / mode {mode!r} is not supported (axis > 0; linear, circular)"
        )
    batch, size, count = past.shape[0], past.shape[axis], update.shape[axis]
    rest = [d for i, d in enumerate(past.shape) if i not in (0, axis)]
    if update.shape[:axis] + update.shape[axis + 1 :] != past.shape[:axis] + past.shape[axis + 1 :]:
        raise ctx.error(f"update {list(update.shape)} does not fit the cache {list(past.shape)}")
    perm = [0, axis, *(i for i in range(1, rank) if i != axis)]
    back = [perm.index(i) for i in range(rank)]

    def rows(t: Tensor, length: int, tag: str) -> Tensor:
        moved = ctx.emit("transpose", [t], hint=ctx.hint(0, f"{tag}_t"), perm=perm)
        return reshape(ctx, moved, (batch, length, math.prod(rest)), hint=ctx.hint(0, tag))

    if ctx.has(2):
        where = reshape(ctx, ctx.value(2), (batch, 1), hint=ctx.hint(0, "at"))
        where = ctx.emit("cast", [where], hint=ctx.hint(0, "at64"), to=DType.I64)
    else:
        where = ctx.constant(np.zeros((batch, 1), np.int64), DType.I64, ctx.hint(0, "at"))
    positions = ctx.constant(np.arange(size, dtype=np.int64)[None, :], DType.I64, ctx.hint(0, "s"))
    offset = binary(ctx, "sub", positions, where, hint=ctx.hint(0, "offset"))  # [B, S]
    if mode == "circular":  # (s - w) mod S, made non-negative first
        wrapped = ctx.emit("rem", [where, scalar(ctx, size, DType.I64)], hint=ctx.hint(0, "atm"))
        offset = binary(ctx, "sub", positions, wrapped, hint=ctx.hint(0, "offset_c"))
        offset = ctx.emit("add", [offset, scalar(ctx, size, DType.I64)], hint=ctx.hint(0, "offp"))
        offset = ctx.emit("rem", [offset, scalar(ctx, size, DType.I64)], hint=ctx.hint(0, "offm"))
    inside = ctx.emit(
        "and",
        [
            ctx.emit("ge", [offset, ctx.constant(np.zeros((batch, size), np.int64), DType.I64,
                                                 ctx.hint(0, "zero"))], hint=ctx.hint(0, "ge")),
            ctx.emit("lt", [offset, ctx.constant(np.full((batch, size), count, np.int64),
                                                 DType.I64, ctx.hint(0, "n"))], hint=ctx.hint(0, "lt")),
        ],
        hint=ctx.hint(0, "hit"),
    )  # fmt: skip
    row = ctx.emit("clamp", [offset], hint=ctx.hint(0, "row"), min=0, max=count - 1)
    base = ctx.constant(
        (np.arange(batch, dtype=np.int64) * count)[:, None], DType.I64, ctx.hint(0, "base")
    )
    row = binary(ctx, "add", row, base, hint=ctx.hint(0, "row_b"))
    table = reshape(ctx, rows(update, count, "upd"), (batch * count, math.prod(rest)))
    picked = ctx.emit("gather", [table, row], hint=ctx.hint(0, "picked"))  # [B, S, R]
    hit = reshape(ctx, inside, (batch, size, 1), hint=ctx.hint(0, "hit3"))
    out = ctx.emit("where", [hit, picked, rows(past, size, "old")], hint=ctx.hint(0, "new"))
    out = reshape(ctx, out, (batch, size, *rest), hint=ctx.hint(0, "new_r"))
    ctx.set_output(0, ctx.emit("transpose", [out], perm=back))


@converter(
    "MaxUnpool",
    attrs=("kernel_shape", "pads", "strides"),
    becomes="eq of the indices with every output position, matmul of the values (small outputs)",
)
def _max_unpool(ctx: NodeContext) -> None:
    x = ctx.tensor(0)
    spatial = len(x.shape) - 2
    kernel = list(ctx.attr("kernel_shape"))
    strides = list(ctx.attr("strides", [1] * spatial))
    pads = list(ctx.attr("pads", [0] * 2 * spatial))
    inferred = (*x.shape[:2], *(
        (x.shape[2 + d] - 1) * strides[d] + kernel[d] - pads[d] - pads[d + spatial]
        for d in range(spatial)
    ))  # fmt: skip
    shape = inferred
    if ctx.has(2):  # a larger output: the inferred one, padded at the end (as ONNX's reference)
        shape = tuple(int(v) for v in np.asarray(ctx.const(2, "output_shape")).reshape(-1))
        if len(shape) != len(inferred) or any(a < b for a, b in zip(shape, inferred, strict=True)):
            raise ctx.error(f"output_shape {list(shape)} is smaller than {list(inferred)}")
    total, values = math.prod(inferred), math.prod(x.shape)
    if total * values > _MAX_MATRIX:
        raise ctx.error(f"an output of {total} values is too large for MaxUnpool's matrix form")
    index = reshape(ctx, ctx.value(1), (1, values), hint=ctx.hint(0, "idx"))
    index = ctx.emit("cast", [index], hint=ctx.hint(0, "idx64"), to=DType.I64)
    slots = ctx.constant(np.arange(total, dtype=np.int64)[:, None], DType.I64, ctx.hint(0, "slots"))
    hits = binary(ctx, "eq", slots, index, hint=ctx.hint(0, "hits"))  # [total, values]
    hits = ctx.emit("cast", [hits], hint=ctx.hint(0, "hitsf"), to=x.dtype)
    flat = reshape(ctx, x, (values, 1), hint=ctx.hint(0, "vals"))
    placed = ctx.emit("matmul", [hits, flat], hint=ctx.hint(0, "placed"))
    placed = reshape(ctx, placed, inferred, hint=ctx.hint(0, "unpooled"))
    if shape != inferred:
        grow = [s - i for s, i in zip(shape, inferred, strict=True)]
        placed = ctx.emit("pad", [placed], pads=[0] * len(shape) + grow)
    ctx.set_output(0, placed)
