"""Resize and Upsample: separable, so each resized axis is one constant matrix.

ONNX's interpolations (nearest, linear, cubic, with every coordinate transformation mode,
exclude_outside, antialias) act on one axis at a time, and linearly (tf_crop_and_resize's
extrapolation adds a constant). The importer measures each axis's matrix with ONNX's own
reference implementation: the node is evaluated on one-hot inputs along that axis (other
resized axes held constant, untouched axes shrunk to 1), which gives the matrix column by
column. The program then applies it: `gather` with constant indices when every row picks one
input (nearest), else `matmul` with the matrix (plus the extrapolation constant).
"""

from __future__ import annotations

import numpy as np

from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.fold import fold_node
from openinfer_jax.onnx.values import Tensor, Value

__all__: list[str] = []

_ATTRS = ("antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a",
          "exclude_outside", "extrapolation_value", "keep_aspect_ratio_policy", "mode",
          "nearest_mode", "scales")  # fmt: skip
# Work bound for measuring one axis (input elements x evaluations).
_PROBE_LIMIT = 50_000_000


def _full(values: np.ndarray | None, axes: list[int], rank: int, fill: float) -> list[float]:
    out = [fill] * rank
    if values is not None:
        for a, v in zip(axes, values.tolist(), strict=True):
            out[a] = v
    return out


@converter(
    "Resize",
    "Upsample",
    attrs=_ATTRS,
    becomes="gather (nearest) or matmul per resized axis with a constant matrix",
)
def _resize(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    rank = len(shape)
    x: Value = ctx.value(0)
    dtype = ctx.dtype(0)
    consts = [
        ctx.const(i, "the Resize parameters") if ctx.has(i) else None
        for i in range(1, ctx.input_count)
    ]
    zeros = np.zeros(shape, dtype=np.float64)
    (out,) = fold_node(ctx.node, [zeros, *consts], ctx.importer.opsets, ctx.name)[:1]
    out_shape = tuple(int(d) for d in out.shape)
    axes = [a % rank for a in ctx.attr("axes", range(rank))]
    mode = ctx.attr("mode", "nearest")
    ctm = ctx.attr("coordinate_transformation_mode", "half_pixel")
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    scales_index = 0 if ctx.op_type == "Upsample" else 1  # position in `consts`
    scales = consts[scales_index] if len(consts) > scales_index else None
    if ctx.op_type == "Upsample" and scales is None:
        scales = np.asarray(ctx.attr("scales"), dtype=np.float32)
    sizes = consts[2] if ctx.op_type == "Resize" and len(consts) > 2 else None
    scale_full = _full(None if scales is None or scales.size == 0 else scales, axes, rank, 1.0)
    # Axes that neither resize nor move may be shrunk to length 1 while measuring.
    still = [
        out_shape[d] == shape[d]
        and scale_full[d] == 1.0
        and ctm != "tf_crop_and_resize"
        and policy == "stretch"
        for d in range(rank)
    ]
    if not dtype.is_float and mode != "nearest":
        raise ctx.error(f"mode={mode!r} on {dtype.short} values is not supported (nearest is)")
    result: Value = x
    for a in range(rank):
        if still[a]:
            continue
        matrix, offset = _measure(ctx, a, shape, out_shape, still, consts, axes, sizes)
        if (
            offset is None
            and matrix.shape[0] == matrix.shape[1]
            and np.array_equal(matrix, np.eye(matrix.shape[0]))
        ):
            continue
        result = _apply(ctx, result, a, matrix, offset, rank)
    ctx.set_output(0, ctx.as_tensor(result))


def _measure(ctx: NodeContext, axis: int, shape: tuple[int, ...], out_shape: tuple[int, ...],
             still: list[bool], consts: list[np.ndarray | None], axes: list[int],
             sizes: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:  # fmt: skip
    """(matrix [out, in], offset [out] or None) of `axis`, from one-hot probes."""
    probe_shape = [1 if still[d] else shape[d] for d in range(len(shape))]
    n = shape[axis]
    if n * int(np.prod(probe_shape)) > _PROBE_LIMIT:
        raise ctx.error(f"resizing axis {axis} of {shape} is too large to measure at import")
    inputs = list(consts)
    if sizes is not None:  # shrunk axes keep their length: 1
        adjusted = sizes.copy()
        for i, a in enumerate(axes):
            if still[a]:
                adjusted[i] = 1
        inputs[2] = adjusted

    def run(column: np.ndarray) -> np.ndarray:
        probe = np.broadcast_to(
            column.reshape([n if d == axis else 1 for d in range(len(shape))]), probe_shape
        )
        (y,) = fold_node(
            ctx.node, [np.ascontiguousarray(probe), *inputs], ctx.importer.opsets, ctx.name
        )[:1]
        index = tuple(slice(None) if d == axis else 0 for d in range(len(shape)))
        return np.asarray(y[index], dtype=np.float64)

    base = run(np.zeros(n))
    matrix = np.stack([run(np.eye(n)[j]) - base for j in range(n)], axis=1)
    assert matrix.shape == (out_shape[axis], n)
    return matrix, (base if np.any(base) else None)


def _apply(ctx: NodeContext, x: Value, axis: int, matrix: np.ndarray, offset: np.ndarray | None,
           rank: int) -> Tensor:  # fmt: skip
    dtype = ctx.dtype(0)
    hint = ctx.hint(0, f"axis{axis}")
    rows = matrix != 0
    if offset is None and np.all(rows.sum(1) == 1) and np.allclose(matrix[rows], 1.0):
        index = ctx.constant(
            np.argmax(rows, axis=1).astype(np.int64), hint=ctx.hint(0, f"index{axis}")
        )
        return ctx.emit("gather", [x, index], hint=hint, axis=axis)
    if not dtype.is_float:
        raise ctx.error(
            f"this resize of {dtype.short} values interpolates; only nearest is supported"
        )
    weights = ctx.constant(matrix.astype(dtype.numpy), dtype, ctx.hint(0, f"weights{axis}"))
    if axis == rank - 2:  # [out, in] @ [..., in, W]: the matrix broadcasts over the batch axes
        y = ctx.emit("matmul", [weights, x], hint=hint)
    else:
        perm = None
        if axis != rank - 1:
            perm = [d for d in range(rank) if d != axis] + [axis]
            x = ctx.emit("transpose", [x], hint=ctx.hint(0, f"moved{axis}"), perm=perm)
        w_t = ctx.constant(
            np.ascontiguousarray(matrix.T).astype(dtype.numpy),
            dtype,
            ctx.hint(0, f"weights{axis}_t"),
        )
        y = ctx.emit("matmul", [x, w_t], hint=hint if perm is None else ctx.hint(0, f"mm{axis}"))
        if perm is not None:
            y = ctx.emit("transpose", [y], hint=hint, perm=[perm.index(d) for d in range(rank)])
    if offset is not None:
        shape = [offset.size if d == axis else 1 for d in range(rank)]
        bias = ctx.constant(
            offset.reshape(shape).astype(dtype.numpy), dtype, ctx.hint(0, f"offset{axis}")
        )
        y = ctx.emit("add", [y, bias], hint=ctx.hint(0, f"shifted{axis}"))
    return y
