"""Data-movement ONNX ops: reshapes, transposes, slicing, gathering, joining, padding."""

from __future__ import annotations

import math

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.converters.common import expand_to, norm_axes, norm_axis
from openinfer_jax.onnx.values import Tensor, Value

__all__ = ["reshape", "slice_axis"]


def reshape(ctx: NodeContext, x: Value, shape: tuple[int, ...], hint: str | None = None) -> Tensor:
    """`x` reshaped to the concrete `shape` (no step when it already has it)."""
    tensor = ctx.as_tensor(x)
    if tensor.shape == tuple(shape):
        return tensor
    return ctx.emit("reshape", [tensor], hint=hint, shape=list(shape))


@converter("Reshape", attrs=("allowzero",), becomes="reshape")
def _reshape(ctx: NodeContext) -> None:
    x = ctx.value(0)
    if ctx.opset < 5:
        raise ctx.error("Reshape before opset 5 (shape as an attribute) is not supported")
    target = [int(d) for d in ctx.const(1, "the target shape")]
    in_shape = ctx.shape(0)
    allowzero = int(ctx.attr("allowzero", 0))
    if allowzero and 0 in target:
        raise ctx.error("allowzero=1 with a 0 in the shape (an empty tensor) is not supported")
    resolved = [in_shape[i] if d == 0 else d for i, d in enumerate(target)]
    if resolved.count(-1) > 1:
        raise ctx.error(f"shape {target} has more than one -1")
    if -1 in resolved:
        known = math.prod(d for d in resolved if d != -1)
        resolved[resolved.index(-1)] = math.prod(in_shape) // known if known else 0
    if math.prod(resolved) != math.prod(in_shape):
        raise ctx.error(f"cannot reshape {in_shape} to {target}")
    ctx.set_output(0, reshape(ctx, x, tuple(resolved)))


@converter("Flatten", attrs=("axis",), becomes="reshape")
def _flatten(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    axis = int(ctx.attr("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise ctx.error(f"axis {axis} is out of range for rank {len(shape)}")
    out = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    ctx.set_output(0, reshape(ctx, ctx.value(0), out))


def _axes_input(ctx: NodeContext, index: int, what: str) -> list[int] | None:
    """Axes from the attribute (old opsets) or from input `index` (new ones)."""
    if "axes" in ctx.attrs:
        return [int(a) for a in ctx.attr("axes")]
    if ctx.has(index):
        return [int(a) for a in np.asarray(ctx.const(index, what)).reshape(-1)]
    return None


@converter("Squeeze", attrs=("axes",), becomes="reshape")
def _squeeze(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    axes = _axes_input(ctx, 1, "the squeezed axes")
    if axes is None:
        keep = [d for d in shape if d != 1]
    else:
        drop = set(norm_axes(ctx, axes, len(shape)))
        for a in drop:
            if shape[a] != 1:
                raise ctx.error(f"cannot squeeze axis {a} of size {shape[a]}")
        keep = [d for i, d in enumerate(shape) if i not in drop]
    ctx.set_output(0, reshape(ctx, ctx.value(0), tuple(keep)))


@converter("Unsqueeze", attrs=("axes",), becomes="reshape")
def _unsqueeze(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    axes = _axes_input(ctx, 1, "the new axes")
    if axes is None:
        raise ctx.error("Unsqueeze needs axes")
    rank = len(shape) + len(axes)
    new = set(norm_axes(ctx, axes, rank))
    dims = iter(shape)
    out = tuple(1 if i in new else next(dims) for i in range(rank))
    ctx.set_output(0, reshape(ctx, ctx.value(0), out))


@converter("Transpose", attrs=("perm",), becomes="transpose")
def _transpose(ctx: NodeContext) -> None:
    rank = len(ctx.shape(0))
    perm = [int(p) for p in ctx.attr("perm", list(range(rank))[::-1])]
    if perm == list(range(rank)):
        ctx.set_output(0, ctx.value(0))
        return
    ctx.set_output(0, ctx.emit("transpose", [ctx.value(0)], perm=perm))


@converter("Concat", attrs=("axis",), becomes="concat")
def _concat(ctx: NodeContext) -> None:
    values = [v for i, v in enumerate(ctx.values()) if v is not None and 0 not in ctx.shape(i)]
    rank = len(ctx.shape(0))
    axis = norm_axis(ctx, int(ctx.attr("axis")), rank)
    if not values:
        raise ctx.error("every input is empty")
    if len(values) == 1:
        ctx.set_output(0, values[0])
        return
    ctx.set_output(0, ctx.emit("concat", values, axis=axis))


@converter("Gather", attrs=("axis",), becomes="gather")
def _gather(ctx: NodeContext) -> None:
    rank = len(ctx.shape(0))
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), rank)
    ctx.set_output(0, ctx.emit("gather", [ctx.value(0), ctx.value(1)], axis=axis))


def slice_axis(
    ctx: NodeContext, x: Value, axis: int, start: int, end: int, hint: str | None = None
) -> Tensor:
    """`x[start:end]` along `axis` (step 1, bounds already in range)."""
    return ctx.emit("slice", [x], hint=hint, starts=[start], ends=[end], axes=[axis])


@converter("Slice", attrs=("starts", "ends", "axes"), becomes="slice")
def _slice(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    if ctx.opset < 10:
        starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
        axes = list(ctx.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = [int(v) for v in ctx.const(1, "the starts")]
        ends = [int(v) for v in ctx.const(2, "the ends")]
        axes = (
            [int(v) for v in ctx.const(3, "the axes")] if ctx.has(3) else list(range(len(starts)))
        )
        steps = [int(v) for v in ctx.const(4, "the steps")] if ctx.has(4) else [1] * len(starts)
    axes = norm_axes(ctx, axes, len(shape))
    n_starts, n_ends, n_axes, n_steps = [], [], [], []
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step == 0:
            raise ctx.error("a slice step of 0 is not allowed")
        dim = shape[axis]
        lo, hi, st = slice(int(start), int(end), int(step)).indices(dim)
        if st > 0 and (lo, hi, st) == (0, dim, 1):
            continue  # the whole axis
        if st < 0 and hi < 0:
            hi = -(dim + 1)  # past the first element, as the slice op reads negative ends
        n_starts.append(lo)
        n_ends.append(hi)
        n_axes.append(axis)
        n_steps.append(st)
    if not n_axes:
        ctx.set_output(0, ctx.value(0))
        return
    steps_param = n_steps if any(s != 1 for s in n_steps) else None
    ctx.set_output(
        0,
        ctx.emit(
            "slice", [ctx.value(0)], starts=n_starts, ends=n_ends, axes=n_axes, steps=steps_param
        ),
    )


@converter("Pad", attrs=("mode", "pads", "value"), becomes="pad (slice for negative pads)")
def _pad(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    rank = len(shape)
    mode = ctx.attr("mode", "constant")
    if ctx.opset < 11:
        pads = [int(p) for p in ctx.attr("pads")]
        value: float | int = float(ctx.attr("value", 0.0))
        axes = list(range(rank))
    else:
        pads = [int(p) for p in ctx.const(1, "the pads")]
        value = ctx.const(2, "the pad value").item() if ctx.has(2) else 0
        axes = (
            norm_axes(ctx, [int(a) for a in ctx.const(3, "the axes")], rank)
            if ctx.has(3)
            else list(range(rank))
        )
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"{len(pads)} pads for {len(axes)} axes")
    begins, ends = pads[: len(axes)], pads[len(axes) :]
    x: Value = ctx.value(0)
    crop = [(a, -b, -e) for a, b, e in zip(axes, begins, ends, strict=True) if b < 0 or e < 0]
    for axis, cut_begin, cut_end in crop:
        dim = ctx.as_tensor(x).shape[axis]
        lo, hi = max(cut_begin, 0), dim - max(cut_end, 0)
        x = slice_axis(ctx, x, axis, lo, hi, hint=ctx.hint(0, f"crop{axis}"))
    begins = [max(b, 0) for b in begins]
    ends = [max(e, 0) for e in ends]
    if not any(begins) and not any(ends):
        ctx.set_output(0, x)
        return
    dtype = ctx.dtype(0)
    if dtype.is_float:
        value = float(value)
    elif dtype.name != "BOOL":
        value = int(value)
    ctx.set_output(
        0,
        ctx.emit("pad", [x], pads=[*begins, *ends], mode=mode, value=value, axes=axes),
    )


@converter("Where", becomes="where")
def _where(ctx: NodeContext) -> None:
    ctx.set_output(0, ctx.emit("where", [ctx.value(0), ctx.value(1), ctx.value(2)]))


@converter("Split", attrs=("axis", "split", "num_outputs"), becomes="slice per output")
def _split(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), len(shape))
    dim = shape[axis]
    outputs = len(ctx.node.output)
    if "split" in ctx.attrs:
        sizes = [int(s) for s in ctx.attr("split")]
    elif ctx.has(1):
        sizes = [int(s) for s in ctx.const(1, "the split sizes")]
    else:
        n = int(ctx.attr("num_outputs", outputs))
        chunk = -(-dim // n)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    if sum(sizes) != dim or len(sizes) != outputs:
        raise ctx.error(
            f"split sizes {sizes} do not cover axis {axis} of size {dim} in {outputs} outputs"
        )
    start = 0
    for i, size in enumerate(sizes):
        if size == dim:
            ctx.set_output(i, ctx.value(0))
        else:
            ctx.set_output(
                i, slice_axis(ctx, ctx.value(0), axis, start, start + size, hint=ctx.hint(i))
            )
        start += size


@converter("Expand", becomes="add of zeros (where for bool) shaped like the new dims")
def _expand(ctx: NodeContext) -> None:
    shape = tuple(int(d) for d in ctx.const(1, "the target shape"))
    try:
        target = tuple(int(d) for d in np.broadcast_shapes(ctx.shape(0), shape))
    except ValueError:
        raise ctx.error(f"cannot expand {ctx.shape(0)} to {shape}") from None
    ctx.set_output(0, expand_to(ctx, ctx.value(0), target, ctx.hint()))


@converter("Tile", becomes="concat of copies")
def _tile(ctx: NodeContext) -> None:
    repeats = [int(r) for r in ctx.const(1, "the repeats")]
    x: Value = ctx.value(0)
    for axis, count in enumerate(repeats):
        if count == 1:
            continue
        if count == 0:
            raise ctx.error("a repeat of 0 (an empty tensor) is not supported")
        x = ctx.emit("concat", [x] * count, hint=ctx.hint(0, f"tile{axis}"), axis=axis)
    ctx.set_output(0, x)


@converter("ConstantOfShape", "Range", attrs=("value",), becomes="a constant")
def _shape_only(ctx: NodeContext) -> None:
    # Reached only when an input is not known at import (folding takes the rest).
    for i in range(ctx.input_count):
        ctx.const(i, "this value")
    raise ctx.error("cannot fold")  # pragma: no cover - const() raised


@converter("Trilu", attrs=("upper",), becomes="where with a constant triangular mask")
def _trilu(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    k = int(np.asarray(ctx.const(1, "k")).item()) if ctx.has(1) else 0
    n, m = shape[-2], shape[-1]
    i, j = np.meshgrid(np.arange(n), np.arange(m), indexing="ij")
    keep = (j - i >= k) if int(ctx.attr("upper", 1)) else (j - i <= k)
    if keep.all():
        ctx.set_output(0, ctx.value(0))
        return
    dtype = ctx.dtype(0)
    mask = ctx.constant(keep, DType.BOOL, ctx.hint(0, "mask"))
    zero = ctx.constant(np.zeros((), dtype.numpy), dtype, ctx.hint(0, "zero"))
    ctx.set_output(0, ctx.emit("where", [mask, ctx.value(0), zero]))


@converter(
    "DepthToSpace",
    "SpaceToDepth",
    attrs=("blocksize", "mode"),
    becomes="reshape, transpose, reshape",
)
def _depth_space(ctx: NodeContext) -> None:
    n, c, h, w = ctx.shape(0)
    b = int(ctx.attr("blocksize"))
    x: Value = ctx.value(0)
    if ctx.op_type == "SpaceToDepth":
        split, perm, out = (
            (n, c, h // b, b, w // b, b),
            [0, 3, 5, 1, 2, 4],
            (n, c * b * b, h // b, w // b),
        )
    elif ctx.attr("mode", "DCR") == "DCR":
        split, perm, out = (
            (n, b, b, c // (b * b), h, w),
            [0, 3, 4, 1, 5, 2],
            (n, c // (b * b), h * b, w * b),
        )
    else:
        split, perm, out = (
            (n, c // (b * b), b, b, h, w),
            [0, 1, 4, 2, 5, 3],
            (n, c // (b * b), h * b, w * b),
        )
    x = reshape(ctx, x, split, hint=ctx.hint(0, "split"))
    x = ctx.emit("transpose", [x], hint=ctx.hint(0, "moved"), perm=perm)
    ctx.set_output(0, reshape(ctx, x, out))


@converter("OneHot", attrs=("axis",), becomes="eq of the indices with positions, where(on, off)")
def _one_hot(ctx: NodeContext) -> None:
    from openinfer_jax.onnx.converters.elementwise import binary

    depth = int(np.asarray(ctx.const(1, "the depth")).item())
    values = np.asarray(ctx.const(2, "the off/on values")).reshape(-1)
    vdtype = ctx.dtype(2)
    indices: Value = ctx.value(0)
    if ctx.dtype(0).is_float:
        indices = ctx.emit("cast", [indices], hint=ctx.hint(0, "index"), to=DType.I64)
    itype = ctx.as_tensor(indices).dtype
    shape = ctx.as_tensor(indices).shape
    rank = len(shape) + 1
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), rank)
    if itype.is_signed_int:  # negative indices count from the end
        wrapped = ctx.emit(
            "add",
            [indices, ctx.constant(np.asarray(depth, itype.numpy), itype, ctx.hint(0, "depth"))],
            hint=ctx.hint(0, "wrapped"),
        )
        negative = ctx.emit("is_neg", [indices], hint=ctx.hint(0, "negative"))
        indices = ctx.emit("where", [negative, wrapped, indices], hint=ctx.hint(0, "positive"))
    grown = tuple(1 if a == axis else shape[a - (a > axis)] for a in range(rank))
    indices = reshape(ctx, indices, grown, hint=ctx.hint(0, "grown"))
    positions = np.arange(depth).reshape([depth if a == axis else 1 for a in range(rank)])
    hit = binary(
        ctx,
        "eq",
        indices,
        ctx.constant(positions.astype(itype.numpy), itype, ctx.hint(0, "positions")),
        hint=ctx.hint(0, "hit"),
    )
    on = ctx.constant(values[1], vdtype, ctx.hint(0, "on"))
    off = ctx.constant(values[0], vdtype, ctx.hint(0, "off"))
    ctx.set_output(0, ctx.emit("where", [hit, on, off]))


@converter("CenterCropPad", attrs=("axes",), becomes="slice and pad, centered")
def _center_crop_pad(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    rank = len(shape)
    target = [int(d) for d in ctx.const(1, "the target shape")]
    axes = norm_axes(ctx, ctx.attr("axes", list(range(rank))), rank)
    x: Value = ctx.value(0)
    for axis, size in zip(axes, target, strict=True):
        have = shape[axis]
        if size < have:  # crop: the extra element goes at the end
            start = (have - size) // 2
            x = slice_axis(ctx, x, axis, start, start + size, hint=ctx.hint(0, f"crop{axis}"))
        elif size > have:  # pad: the extra element goes at the end
            before = (size - have) // 2
            x = ctx.emit(
                "pad",
                [x],
                hint=ctx.hint(0, f"pad{axis}"),
                pads=[before, size - have - before],
                axes=[axis],
            )
    ctx.set_output(0, x)


@converter("RotaryEmbedding", attrs=("interleaved", "num_heads", "rotary_embedding_dim"),
           becomes="gather of the cos/sin caches, slices, mul, sub/add, concat")  # fmt: skip
def _rotary(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    x: Value = ctx.value(0)
    four_d = len(shape) == 4
    if not four_d:  # [B, S, H*D] -> [B, S, H, D]
        heads = int(ctx.attr("num_heads", 0))
        if not heads:
            raise ctx.error("3-D input needs num_heads")
        x = reshape(
            ctx, x, (shape[0], shape[1], heads, shape[2] // heads), hint=ctx.hint(0, "heads")
        )
    else:  # [B, H, S, D] -> [B, S, H, D]
        x = ctx.emit("transpose", [x], hint=ctx.hint(0, "bshd"), perm=[0, 2, 1, 3])
    b, s, h, d = ctx.as_tensor(x).shape
    rot = int(ctx.attr("rotary_embedding_dim", 0)) or d
    half = rot // 2
    cos: Value = ctx.value(1)
    sin: Value = ctx.value(2)
    if ctx.has(3):
        cos = ctx.emit("gather", [cos, ctx.value(3)], hint=ctx.hint(0, "cos_rows"))
        sin = ctx.emit("gather", [sin, ctx.value(3)], hint=ctx.hint(0, "sin_rows"))
    cos = reshape(ctx, cos, (b, s, 1, half), hint=ctx.hint(0, "cos"))
    sin = reshape(ctx, sin, (b, s, 1, half), hint=ctx.hint(0, "sin"))
    interleaved = int(ctx.attr("interleaved", 0))
    step = 2 if interleaved else 1
    first = ctx.emit(
        "slice",
        [x],
        hint=ctx.hint(0, "x1"),
        starts=[0],
        ends=[rot if interleaved else half],
        axes=[3],
        steps=[step] if interleaved else None,
    )
    second = ctx.emit(
        "slice",
        [x],
        hint=ctx.hint(0, "x2"),
        starts=[1 if interleaved else half],
        ends=[rot],
        axes=[3],
        steps=[step] if interleaved else None,
    )
    out1 = ctx.emit(
        "sub",
        [
            ctx.emit("mul", [first, cos], hint=ctx.hint(0, "x1cos")),
            ctx.emit("mul", [second, sin], hint=ctx.hint(0, "x2sin")),
        ],
        hint=ctx.hint(0, "r1"),
    )
    out2 = ctx.emit(
        "add",
        [
            ctx.emit("mul", [second, cos], hint=ctx.hint(0, "x2cos")),
            ctx.emit("mul", [first, sin], hint=ctx.hint(0, "x1sin")),
        ],
        hint=ctx.hint(0, "r2"),
    )
    if interleaved:  # pairs (2i, 2i+1) back in place
        pairs = ctx.emit(
            "concat",
            [
                reshape(ctx, out1, (b, s, h, half, 1), hint=ctx.hint(0, "r1c")),
                reshape(ctx, out2, (b, s, h, half, 1), hint=ctx.hint(0, "r2c")),
            ],
            hint=ctx.hint(0, "pairs"),
            axis=4,
        )
        rotated = reshape(ctx, pairs, (b, s, h, rot), hint=ctx.hint(0, "rotated"))
    else:
        rotated = ctx.emit("concat", [out1, out2], hint=ctx.hint(0, "rotated"), axis=3)
    if rot < d:
        rest = slice_axis(ctx, x, 3, rot, d, hint=ctx.hint(0, "pass"))
        rotated = ctx.emit("concat", [rotated, rest], hint=ctx.hint(0, "joined"), axis=3)
    if four_d:
        ctx.set_output(0, ctx.emit("transpose", [rotated], perm=[0, 2, 1, 3]))
    else:
        ctx.set_output(0, reshape(ctx, rotated, shape))


@converter(
    "If",
    attrs=("then_branch", "else_branch"),
    becomes="the taken branch's nodes, inlined (the condition must be known at import)",
)
def _if(ctx: NodeContext) -> None:
    cond = bool(np.asarray(ctx.const(0, "the condition")).reshape(-1)[0])
    branch = ctx.attr("then_branch" if cond else "else_branch")
    importer = ctx.importer
    importer.initializers(branch)
    importer.nodes(branch.node)
    for i, out in enumerate(branch.output):
        ctx.set_output(i, importer.values[out.name])
