"""GridSample: sampling an image at run-time coordinates, as gathers of weighted taps.

For every spatial axis the grid's normalized coordinate becomes a pixel coordinate (ONNX's
`align_corners` convention), is rounded (nearest) or split into an integer base and a
fraction, and gives 1 (nearest), 2 (linear) or 4 (cubic, Keys' a = -0.75) taps: an index
and a weight. Out-of-range coordinates follow `padding_mode` (zeros: the tap's weight is
0; border: clamped; reflection: reflected at the borders). Each combination of taps over
the axes is one `gather` of the channel rows (data transposed to channels-last), scaled by
the product of the taps' weights; their sum is transposed back to channels-first.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.converters.common import scalar
from openinfer_jax.onnx.converters.elementwise import binary, round_half_even
from openinfer_jax.onnx.converters.movement import reshape, slice_axis
from openinfer_jax.onnx.values import Tensor

_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic",
          "nearest": "nearest"}  # fmt: skip
_CUBIC_A = -0.75


class _Ops:
    """Terse step writing for one GridSample node (every step gets a distinct hint)."""

    def __init__(self, ctx: NodeContext, dtype: DType) -> None:
        self.ctx = ctx
        self.dtype = dtype
        self.count = 0

    def __call__(self, op: str, *inputs: Tensor, **params: object) -> Tensor:
        self.count += 1
        hint = self.ctx.hint(0, f"gs{self.count}")
        if len(inputs) == 2:  # comparisons do not broadcast a scalar: binary() makes it so
            return binary(self.ctx, op, inputs[0], inputs[1], hint=hint)
        return self.ctx.emit(op, list(inputs), hint=hint, **params)

    def c(self, value: float) -> Tensor:
        return scalar(self.ctx, value, self.dtype)

    def axpb(self, x: Tensor, a: float, b: float) -> Tensor:
        """a * x + b (steps left out where a is 1 or b is 0)."""
        if a != 1.0:
            x = self("mul", x, self.c(a))
        return self("add", x, self.c(b)) if b != 0.0 else x

    def poly(self, x: Tensor, coeffs: tuple[float, ...]) -> Tensor:
        """coeffs[0] * x^n + ... + coeffs[n] (Horner)."""
        acc = self.axpb(x, coeffs[0], coeffs[1])
        for k in coeffs[2:]:
            acc = self.axpb(self("mul", acc, x), 1.0, k)
        return acc

    def reflect(self, x: Tensor, lo: float, hi: float) -> Tensor:
        """`x` reflected at `lo` and `hi` until inside (ONNX's GridSample reflection)."""
        span = hi - lo
        if span <= 0:
            return self("clamp", x, min=lo, max=hi)
        below = self("sub", self.c(lo), x)  # > 0 below the range
        above = self("sub", x, self.c(hi))  # > 0 above it
        out = x
        for dist, inner, outer, is_out in ((below, lo, hi, "lt"), (above, hi, lo, "gt")):
            turns = self("floor", self("mul", dist, self.c(1.0 / span)))
            rest = self("sub", dist, self("mul", turns, self.c(span)))
            half = self("mul", turns, self.c(0.5))
            odd = self("ne", half, self("floor", half))
            sign = 1.0 if inner < outer else -1.0
            near = self.axpb(rest, sign, inner)  # an even number of bounces
            far = self.axpb(rest, -sign, outer)
            folded = self("where", odd, far, near)
            out = self("where", self(is_out, x, self.c(lo if is_out == "lt" else hi)), folded, out)
        return out


@converter(
    "GridSample",
    attrs=("align_corners", "mode", "padding_mode"),
    becomes="per tap: index and weight arithmetic, gather of channel rows, mul, add",
)
def _grid_sample(ctx: NodeContext) -> None:
    shape, grid_shape = ctx.shape(0), ctx.shape(1)
    spatial = len(shape) - 2
    if spatial < 1 or len(grid_shape) != spatial + 2 or grid_shape[-1] != spatial:
        raise ctx.error(f"X {list(shape)} and grid {list(grid_shape)} do not fit together")
    mode = _MODES.get(str(ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear")))
    padding = str(ctx.attr("padding_mode", "zeros"))
    if mode is None or padding not in ("zeros", "border", "reflection"):
        raise ctx.error(f"mode {ctx.attr('mode')!r} / padding_mode {padding!r} is not supported")
    align = bool(ctx.attr("align_corners", 0))
    fdt = ctx.dtype(1)
    if not fdt.is_float:
        raise ctx.error(f"the grid is {fdt.short}; a float grid is needed")
    ops = _Ops(ctx, fdt)
    n, channels, dims = shape[0], shape[1], shape[2:]
    out = grid_shape[1:-1]
    perm = [0, *range(2, 2 + spatial), 1]
    rows = reshape(
        ctx,
        ctx.emit("transpose", [ctx.tensor(0)], hint=ctx.hint(0, "cl"), perm=perm),
        (n * math.prod(dims), channels),
        hint=ctx.hint(0, "rows"),
    )
    grid = ctx.tensor(1)
    strides = [math.prod(dims[i + 1 :]) for i in range(spatial)]
    axes_taps = []
    for i, size in enumerate(dims):
        comp = slice_axis(ctx, grid, spatial + 1, spatial - 1 - i, spatial - i, ctx.hint(0, "g"))
        comp = reshape(ctx, comp, (n, *out), hint=ctx.hint(0, f"g{i}"))
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        coord = (
            ops.axpb(comp, (size - 1) / 2.0, (size - 1) / 2.0)
            if align
            else ops.axpb(comp, size / 2.0, (size - 1) / 2.0)
        )
        if mode == "nearest":
            coord = round_half_even(ctx, coord, f"gs_round{i}")
        if padding == "border":
            outside = ops("or", ops("lt", coord, ops.c(lo)), ops("gt", coord, ops.c(hi)))
            coord = ops("where", outside, ops("clamp", coord, min=0.0, max=size - 1.0), coord)
        elif padding == "reflection":
            coord = ops.reflect(coord, lo, hi)
        axes_taps.append(_taps(ops, coord, mode, padding, size, lo, hi, strides[i]))
    base = ctx.constant(
        (np.arange(n, dtype=np.int64) * math.prod(dims)).reshape((n,) + (1,) * len(out)),
        DType.I64,
        ctx.hint(0, "batch_rows"),
    )
    total: Tensor | None = None
    for combo in itertools.product(*axes_taps):
        index: Tensor = base
        weight: Tensor | None = None
        for tap_index, tap_weight in combo:
            index = binary(ctx, "add", index, tap_index, hint=ctx.hint(0, "idx"))
            if tap_weight is not None:
                weight = tap_weight if weight is None else ops("mul", weight, tap_weight)
        picked = ctx.emit("gather", [rows, index], hint=ctx.hint(0, "tap"))
        if weight is not None:
            weight = reshape(ctx, weight, (n, *out, 1), hint=ctx.hint(0, "w"))
            picked = binary(ctx, "mul", picked, weight, hint=ctx.hint(0, "wtap"))
        total = picked if total is None else ops("add", total, picked)
    assert total is not None
    back = [0, spatial + 1, *range(1, spatial + 1)]
    ctx.set_output(0, ctx.emit("transpose", [total], perm=back))


def _taps(
    ops: _Ops, coord: Tensor, mode: str, padding: str, size: int, lo: float, hi: float, stride: int
) -> list[tuple[Tensor, Tensor | None]]:
    """(row offset as i64, weight or None) of each tap along one axis."""
    if mode == "nearest":
        start, weights = coord, [None]
    else:
        start = ops("floor", coord)
        frac = ops("sub", coord, start)
        if mode == "linear":
            weights = [ops.axpb(frac, -1.0, 1.0), frac]
        else:
            a = _CUBIC_A
            near = (a + 2, -(a + 3), 0.0, 1.0)
            far = (a, -5 * a, 8 * a, -4 * a)
            rest = ops.axpb(frac, -1.0, 1.0)
            weights = [
                ops.poly(ops.axpb(frac, 1.0, 1.0), far),
                ops.poly(frac, near),
                ops.poly(rest, near),
                ops.poly(ops.axpb(frac, -1.0, 2.0), far),
            ]
    first = 0 if mode == "nearest" else (0 if mode == "linear" else -1)
    taps: list[tuple[Tensor, Tensor | None]] = []
    for k, weight in enumerate(weights):
        at = ops.axpb(start, 1.0, float(first + k))
        if padding == "zeros":
            inside = ops("and", ops("ge", at, ops.c(0.0)), ops("le", at, ops.c(size - 1.0)))
            mask = ops("cast", inside, to=ops.dtype)
            weight = mask if weight is None else ops("mul", weight, mask)
        elif padding == "reflection":
            at = ops.reflect(at, lo, hi)
        at = ops("clamp", at, min=0.0, max=size - 1.0)
        index = ops("cast", at, to=DType.I64)
        if stride != 1:
            index = ops("mul", index, ops.ctx.constant(np.asarray(stride, np.int64), DType.I64))
        taps.append((index, weight))
    return taps


def _roi_axis(ops: _Ops, v: Tensor, size: int) -> list[tuple[Tensor, Tensor]]:
    """RoiAlign's two taps along one axis: (index as i64, weight), ONNX's edge rules."""
    ctx = ops.ctx
    valid = ops("cast", ops("and", ops("ge", v, ops.c(-1.0)), ops("le", v, ops.c(float(size)))),
                to=ops.dtype)  # fmt: skip
    v = ops("clamp", v, min=0.0)
    low = ops("floor", v)
    edge = ops("ge", low, ops.c(size - 1.0))
    last = ops.c(size - 1.0)
    high = ops("where", edge, last, ops.axpb(low, 1.0, 1.0))
    low = ops("where", edge, last, low)
    v = ops("where", edge, low, v)
    frac = ops("sub", v, low)
    taps = []
    for at, weight in ((low, ops.axpb(frac, -1.0, 1.0)), (high, frac)):
        index = ctx.emit("cast", [at], hint=ctx.hint(0, "roi_i"), to=DType.I64)
        taps.append((index, ops("mul", weight, valid)))
    return taps


@converter(
    "RoiAlign",
    attrs=("coordinate_transformation_mode", "mode", "output_height", "output_width",
           "sampling_ratio", "spatial_scale"),
    becomes="sample coordinates from the boxes, 4 gathers of channel rows, mul, add, "
    "mean_axis/max_axis over each bin's samples",
)  # fmt: skip
def _roi_align(ctx: NodeContext) -> None:
    shape, rois_shape = ctx.shape(0), ctx.shape(1)
    if len(shape) != 4 or len(rois_shape) != 2 or rois_shape[1] != 4:
        raise ctx.error(
            f"X {list(shape)} / rois {list(rois_shape)}: [N, C, H, W] / [R, 4] expected"
        )
    ratio = int(ctx.attr("sampling_ratio", 0))
    if ratio <= 0:
        raise ctx.error(
            "sampling_ratio=0 (adaptive) takes a number of samples that depends on the boxes; "
            "program shapes are static: give sampling_ratio > 0"
        )
    mode = str(ctx.attr("mode", "avg"))
    half = str(ctx.attr("coordinate_transformation_mode", "half_pixel")) == "half_pixel"
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    scale = float(ctx.attr("spatial_scale", 1.0))
    n, channels, height, width = shape
    count = rois_shape[0]
    ops = _Ops(ctx, ctx.dtype(1))
    rows = reshape(
        ctx,
        ctx.emit("transpose", [ctx.tensor(0)], hint=ctx.hint(0, "cl"), perm=[0, 2, 3, 1]),
        (n * height * width, channels),
        hint=ctx.hint(0, "rows"),
    )
    rois = ctx.tensor(1)
    axes = []
    for k, (size, out, stride) in enumerate(((height, oh, width), (width, ow, 1))):
        # column 1/3 are y start/end, 0/2 x start/end
        start = ops.axpb(slice_axis(ctx, rois, 1, 1 - k, 2 - k, ctx.hint(0, "r0")), scale,
                         -0.5 if half else 0.0)  # fmt: skip
        end = ops.axpb(slice_axis(ctx, rois, 1, 3 - k, 4 - k, ctx.hint(0, "r1")), scale,
                       -0.5 if half else 0.0)  # fmt: skip
        extent = ops("sub", end, start)
        if not half:
            extent = ops("clamp", extent, min=1.0)
        cells = np.repeat(np.arange(out), ratio) + np.tile((np.arange(ratio) + 0.5) / ratio, out)
        at = ctx.constant(
            (cells / out)[None, :].astype(ops.dtype.numpy), ops.dtype, ctx.hint(0, "cells")
        )
        pos = binary(ctx, "add", start, binary(ctx, "mul", extent, at), hint=ctx.hint(0, "pos"))
        taps = _roi_axis(ops, pos, size)  # [R, out * ratio] each
        shaped = (count, out * ratio, 1) if k == 0 else (count, 1, out * ratio)
        axes.append([
            (ops("mul", reshape(ctx, i, shaped), ctx.constant(np.asarray(stride, np.int64), DType.I64)),
             reshape(ctx, w, shaped))
            for i, w in taps
        ])  # fmt: skip
    batch = ctx.emit("cast", [ctx.tensor(2)], hint=ctx.hint(0, "b64"), to=DType.I64)
    batch = ops("mul", reshape(ctx, batch, (count, 1, 1)),
                ctx.constant(np.asarray(height * width, np.int64), DType.I64))  # fmt: skip
    total: Tensor | None = None
    for (yi, yw), (xi, xw) in itertools.product(*axes):
        index = binary(ctx, "add", binary(ctx, "add", batch, yi), xi, hint=ctx.hint(0, "idx"))
        weight = binary(ctx, "mul", yw, xw, hint=ctx.hint(0, "w"))  # [R, oh*r, ow*r]
        picked = ctx.emit("gather", [rows, index], hint=ctx.hint(0, "tap"))  # [R, ., ., C]
        weight = reshape(ctx, weight, (count, oh * ratio, ow * ratio, 1))
        value = binary(ctx, "mul", picked, weight, hint=ctx.hint(0, "wtap"))
        if total is None:
            total = value
        else:
            total = ops("add" if mode == "avg" else "max", total, value)
    assert total is not None
    bins = reshape(ctx, total, (count, oh, ratio, ow, ratio, channels), hint=ctx.hint(0, "bins"))
    pooled = ctx.emit("mean_axis" if mode == "avg" else "max_axis", [bins],
                      hint=ctx.hint(0, "pooled"), axes=[2, 4])  # fmt: skip
    ctx.set_output(0, ctx.emit("transpose", [pooled], perm=[0, 3, 1, 2]))


@converter(
    "DeformConv",
    attrs=("dilations", "group", "kernel_shape", "offset_group", "pads", "strides"),
    becomes="bilinear taps at the offset positions (GridSample's), gathers of channel rows, "
    "mask, linear with the kernel",
)
def _deform_conv(ctx: NodeContext) -> None:
    shape, w_shape, off_shape = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    if len(shape) != 4:
        raise ctx.error(f"X {list(shape)}: only 2-d deformable convolution is supported")
    if int(ctx.attr("group", 1)) != 1:
        raise ctx.error("group > 1 is not supported (offset_group is)")
    n, channels, height, width = shape
    out_c, _, kh, kw = w_shape
    kernel = (kh, kw)
    groups = int(ctx.attr("offset_group", 1))
    dil = list(ctx.attr("dilations", [1, 1]))
    strides = list(ctx.attr("strides", [1, 1]))
    pads = list(ctx.attr("pads", [0, 0, 0, 0]))
    oh, ow = off_shape[2:]
    taps_k = kh * kw
    if channels % groups or off_shape[1] != groups * taps_k * 2:
        raise ctx.error(
            f"offset {list(off_shape)} does not fit offset_group {groups}, kernel {kernel}"
        )
    ops = _Ops(ctx, ctx.dtype(0))
    rows = reshape(
        ctx,
        ctx.emit("transpose", [ctx.tensor(0)], hint=ctx.hint(0, "cl"), perm=[0, 2, 3, 1]),
        (n * height * width, channels),
        hint=ctx.hint(0, "rows"),
    )
    grid = (n, groups, taps_k, oh, ow)
    offsets = reshape(ctx, ctx.value(2), (n, groups, taps_k, 2, oh, ow), hint=ctx.hint(0, "off"))
    axes = []
    for a, (size, stride) in enumerate(((height, width), (width, 1))):
        out = (oh, ow)[a]
        pos = np.arange(out) * strides[a] - pads[a]  # the window's first row/column
        tap = np.arange(kernel[a]) * dil[a]
        base = tap[:, None] + pos[None, :]  # [k_a, out_a]
        if a == 0:
            base = np.repeat(base[:, None, :, None], kw, axis=1).reshape(taps_k, oh, 1)
        else:
            base = np.tile(base[None, :, None, :], (kh, 1, 1, 1)).reshape(taps_k, 1, ow)
        part = reshape(ctx, slice_axis(ctx, offsets, 3, a, a + 1, ctx.hint(0, "o")), grid)
        at = ctx.constant(base[None, None].astype(ops.dtype.numpy), ops.dtype, ctx.hint(0, "base"))
        coord = binary(ctx, "add", part, at, hint=ctx.hint(0, f"at{a}"))
        axes.append(_taps(ops, coord, "linear", "zeros", size, 0.0, size - 1.0, stride))
    base_rows = ctx.constant(
        (np.arange(n, dtype=np.int64) * height * width).reshape(n, 1, 1, 1, 1),
        DType.I64,
        ctx.hint(0, "batch_rows"),
    )
    total: Tensor | None = None
    for (yi, yw), (xi, xw) in itertools.product(*axes):
        index = binary(ctx, "add", binary(ctx, "add", base_rows, yi), xi, hint=ctx.hint(0, "i"))
        picked = ctx.emit("gather", [rows, index], hint=ctx.hint(0, "tap"))  # [*grid, C]
        assert yw is not None and xw is not None
        weight = reshape(ctx, ops("mul", yw, xw), (*grid, 1), hint=ctx.hint(0, "w"))
        value = binary(ctx, "mul", picked, weight, hint=ctx.hint(0, "wtap"))
        total = value if total is None else ops("add", total, value)
    assert total is not None
    if ctx.has(4):  # the modulation mask, one value per (group, tap, position)
        mask = reshape(ctx, ctx.value(4), (*grid, 1), hint=ctx.hint(0, "mask"))
        total = binary(ctx, "mul", total, mask, hint=ctx.hint(0, "masked"))
    # each channel takes the samples of its offset group
    own = np.zeros((1, groups, 1, 1, 1, channels), dtype=ops.dtype.numpy)
    for g in range(groups):
        own[0, g, ..., g * (channels // groups) : (g + 1) * (channels // groups)] = 1
    if groups > 1:
        total = binary(ctx, "mul", total, ctx.constant(own, ops.dtype, ctx.hint(0, "own")))
    cols = ctx.emit("sum_axis", [total], hint=ctx.hint(0, "cols"), axes=[1])  # [N, K, oh, ow, C]
    cols = ctx.emit("transpose", [cols], hint=ctx.hint(0, "cols_t"), perm=[0, 2, 3, 1, 4])
    cols = reshape(ctx, cols, (n, oh, ow, taps_k * channels), hint=ctx.hint(0, "cols_r"))
    weights = ctx.emit("transpose", [ctx.tensor(1)], hint=ctx.hint(0, "w_t"), perm=[0, 2, 3, 1])
    weights = reshape(ctx, weights, (out_c, taps_k * channels), hint=ctx.hint(0, "w_r"))
    inputs = [cols, weights] + ([ctx.tensor(3)] if ctx.has(3) else [])
    conv = ctx.emit("linear", inputs, hint=ctx.hint(0, "conv"))  # [N, oh, ow, oC]
    ctx.set_output(0, ctx.emit("transpose", [conv], perm=[0, 3, 1, 2]))
