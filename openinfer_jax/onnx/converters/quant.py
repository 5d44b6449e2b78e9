"""Quantization ops written with casts and arithmetic: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Dequantize is (x - zero_point) * scale in the scale's type; quantize is
saturate(round_half_even(x / scale) + zero_point) in the target integer range (float8
targets: a saturating cast). Per-axis scales broadcast along `axis`; block scales
(`block_size`) repeat along it. Integer products (MatMulInteger) accumulate in int32;
integer convolutions run in f64, exact for these sizes, then cast to int32.
"""

from __future__ import annotations

import numpy as np

from openinfer_jax.core.dtypes import NARROW_FLOATS, DType
from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.converters.common import norm_axis, scalar
from openinfer_jax.onnx.converters.elementwise import binary, round_half_even
from openinfer_jax.onnx.converters.movement import reshape
from openinfer_jax.onnx.dtypes import ONNX_TO_DTYPE, onnx_type_name
from openinfer_jax.onnx.values import Const, Tensor, Value

__all__: list[str] = []

_QATTRS = ("axis", "block_size", "output_dtype", "saturate", "precision")


def _along(
    ctx: NodeContext, value: Value, x_shape: tuple[int, ...], axis: int, block: int, tag: str
) -> Value:
    """A scale or zero point shaped to broadcast against x: a scalar as is, a per-axis vector
    as [1.., C, ..1], a block tensor repeated `block` times along `axis`."""
    shape = value.array.shape if isinstance(value, Const) else value.shape
    rank = len(x_shape)
    if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1 and x_shape[axis] != 1 and block == 0):
        return value
    if block:
        if isinstance(value, Const):
            grown = np.repeat(value.array, block, axis=axis)
            index = tuple(
                slice(0, x_shape[axis]) if d == axis else slice(None) for d in range(rank)
            )
            return Const(np.ascontiguousarray(grown[index]), value.dtype, value.hint + f"_{tag}")
        raise ctx.error("block quantization with parameters computed at run time is not supported")
    if len(shape) == 1:
        return reshape(
            ctx,
            value,
            tuple(shape[0] if d == axis else 1 for d in range(rank)),
            hint=ctx.hint(0, tag),
        )
    return value


def _target(ctx: NodeContext, zero_point: int | None, default: DType) -> DType:
    code = int(ctx.attr("output_dtype", 0))
    if code:
        target = ONNX_TO_DTYPE.get(code)
        if target is None:
            raise ctx.error(f"output_dtype {onnx_type_name(code)} is not supported")
        return target
    return ctx.dtype(zero_point) if zero_point is not None and ctx.has(zero_point) else default


def dequantize(ctx: NodeContext, x: Value, scale: Value, zero: Value | None, axis: int, block: int,
               out: DType, tag: str, last: bool) -> Tensor:  # fmt: skip
    """(x - zero) * scale in `out`."""
    shape = x.array.shape if isinstance(x, Const) else x.shape
    xf: Value = ctx.emit("cast", [x], hint=ctx.hint(0, f"{tag}_float"), to=out)
    if zero is not None:
        zf = ctx.emit(
            "cast",
            [_along(ctx, zero, shape, axis, block, f"{tag}_zp")],
            hint=ctx.hint(0, f"{tag}_zp_float"),
            to=out,
        )
        xf = binary(ctx, "sub", xf, zf, hint=ctx.hint(0, f"{tag}_centered"))
    s = _along(ctx, scale, shape, axis, block, f"{tag}_scale")
    if ctx.as_tensor(s).dtype is not out:
        s = ctx.emit("cast", [s], hint=ctx.hint(0, f"{tag}_scale_cast"), to=out)
    return binary(ctx, "mul", xf, s, hint=None if last else ctx.hint(0, tag))


def quantize(ctx: NodeContext, x: Value, scale: Value, zero: Value | None, axis: int, block: int,
             target: DType, tag: str, last: bool) -> Tensor:  # fmt: skip
    """saturate(round_half_even(x / scale) + zero) as `target`."""
    shape = x.array.shape if isinstance(x, Const) else x.shape
    xdtype = ctx.as_tensor(x).dtype
    s = _along(ctx, scale, shape, axis, block, f"{tag}_scale")
    if ctx.as_tensor(s).dtype is not xdtype:
        s = ctx.emit("cast", [s], hint=ctx.hint(0, f"{tag}_scale_cast"), to=xdtype)
    q = binary(ctx, "div", x, s, hint=ctx.hint(0, f"{tag}_scaled"))
    if target.is_float:
        saturate = bool(int(ctx.attr("saturate", 1)))
        if target in NARROW_FLOATS:  # the cast op saturates these as ONNX does
            return ctx.emit("cast", [q], hint=None if last else ctx.hint(0, tag), to=target,
                            saturate=saturate)  # fmt: skip
        if target is not DType.F8:
            return ctx.emit("cast", [q], hint=None if last else ctx.hint(0, tag), to=target)
        if saturate:
            q = ctx.emit(
                "clamp", [q], hint=ctx.hint(0, f"{tag}_saturated"), min=-57344.0, max=57344.0
            )
        return ctx.emit("cast", [q], hint=None if last else ctx.hint(0, tag), to=target)
    q = round_half_even(ctx, q, f"{tag}_rounded")
    if zero is not None:
        zf = ctx.emit(
            "cast",
            [_along(ctx, zero, shape, axis, block, f"{tag}_zp")],
            hint=ctx.hint(0, f"{tag}_zp_float"),
            to=xdtype,
        )
        q = binary(ctx, "add", q, zf, hint=ctx.hint(0, f"{tag}_shifted"))
    lo, hi = target.value_range()
    q = ctx.emit("clamp", [q], hint=ctx.hint(0, f"{tag}_clamped"), min=float(lo), max=float(hi))
    return ctx.emit("cast", [q], hint=None if last else ctx.hint(0, tag), to=target)


def _axis(ctx: NodeContext) -> int:
    """The quantization axis (ignored, and so never out of range, for a scalar scale)."""
    rank = len(ctx.shape(0))
    if not ctx.shape(1) or rank == 0:
        return 0
    return norm_axis(ctx, int(ctx.attr("axis", 1)), rank)


def _blocks(
    ctx: NodeContext, axis: int
) -> tuple[Value, Value, Value | None, int, tuple[int, ...] | None]:
    """(x, scale, zero, block, shape to restore): block parameters computed at run time are
    applied by splitting the axis into [blocks, block_size] so they broadcast."""
    x, scale = ctx.value(0), ctx.value(1)
    zero = ctx.value(2) if ctx.has(2) else None
    block = int(ctx.attr("block_size", 0))
    if not block or (isinstance(scale, Const) and (zero is None or isinstance(zero, Const))):
        return x, scale, zero, block, None
    shape = ctx.shape(0)
    if shape[axis] % block:
        raise ctx.error(f"block_size {block} does not divide axis {axis} of {shape}")
    split = (*shape[:axis], shape[axis] // block, block, *shape[axis + 1 :])
    x = reshape(ctx, x, split, hint=ctx.hint(0, "blocks"))
    params = (*shape[:axis], shape[axis] // block, 1, *shape[axis + 1 :])
    scale = reshape(ctx, scale, params, hint=ctx.hint(0, "block_scale"))
    if zero is not None:
        zero = reshape(ctx, zero, params, hint=ctx.hint(0, "block_zp"))
    return x, scale, zero, 0, shape


@converter("DequantizeLinear", attrs=_QATTRS, becomes="cast, sub, mul")
def _dequantize(ctx: NodeContext) -> None:
    axis = _axis(ctx)
    out = ONNX_TO_DTYPE.get(int(ctx.attr("output_dtype", 0))) or ctx.dtype(1)
    x, scale, zero, block, restore = _blocks(ctx, axis)
    y = dequantize(ctx, x, scale, zero, axis, block, out, "dq", last=restore is None)
    ctx.set_output(0, y if restore is None else reshape(ctx, y, restore))


@converter("QuantizeLinear", attrs=_QATTRS, becomes="div, round half to even, add, clamp, cast")
def _quantize(ctx: NodeContext) -> None:
    axis = _axis(ctx)
    target = _target(ctx, 2, DType.U8)
    x, scale, zero, block, restore = _blocks(ctx, axis)
    y = quantize(ctx, x, scale, zero, axis, block, target, "q", last=restore is None)
    ctx.set_output(0, y if restore is None else reshape(ctx, y, restore))


@converter("DynamicQuantizeLinear", becomes="min/max reductions, then QuantizeLinear's lines")
def _dynamic_quantize(ctx: NodeContext) -> None:
    x = ctx.value(0)
    rank = len(ctx.shape(0))
    every = list(range(rank))
    low = ctx.emit("min_axis", [x], hint=ctx.hint(0, "min"), axes=every)
    high = ctx.emit("max_axis", [x], hint=ctx.hint(0, "max"), axes=every)
    low = ctx.emit("clamp", [low], hint=ctx.hint(0, "min0"), max=0.0)
    high = ctx.emit("clamp", [high], hint=ctx.hint(0, "max0"), min=0.0)
    span = ctx.emit("sub", [high, low], hint=ctx.hint(0, "span"))
    scale = ctx.emit("div", [span, scalar(ctx, 255.0, DType.F32)], hint=ctx.hint(1))
    neg = ctx.emit("neg", [low], hint=ctx.hint(0, "neg_min"))
    zp = ctx.emit("div", [neg, scale], hint=ctx.hint(0, "zp_scaled"))
    zp = round_half_even(ctx, zp, "zp_rounded")
    zp = ctx.emit("clamp", [zp], hint=ctx.hint(0, "zp_clamped"), min=0.0, max=255.0)
    zero = ctx.emit("cast", [zp], hint=ctx.hint(2), to=DType.U8)
    ctx.set_output(0, quantize(ctx, x, scale, zero, 0, 0, DType.U8, "q", last=True))
    ctx.set_output(1, scale)
    ctx.set_output(2, zero)


def _centered(
    ctx: NodeContext, x: Value, zero: Value | None, out: DType, row_axis: int | None, tag: str
) -> Tensor:
    """cast(x) - cast(zero) in `out`; a per-row zero point [M] of A broadcasts as [M, 1]."""
    xc = ctx.emit("cast", [x], hint=ctx.hint(0, f"{tag}_wide"), to=out)
    if zero is None:
        return xc
    z: Value = zero
    shape = z.array.shape if isinstance(z, Const) else z.shape
    if row_axis is not None and len(shape) == 1 and shape[0] > 1:
        z = reshape(ctx, z, (shape[0], 1), hint=ctx.hint(0, f"{tag}_zp_col"))
    zc = ctx.emit("cast", [z], hint=ctx.hint(0, f"{tag}_zp_wide"), to=out)
    return binary(ctx, "sub", xc, zc, hint=ctx.hint(0, f"{tag}_centered"))


@converter("MatMulInteger", becomes="cast to i32, sub the zero points, matmul (i32)")
def _matmul_integer(ctx: NodeContext) -> None:
    a = _centered(ctx, ctx.value(0), ctx.value(2) if ctx.has(2) else None, DType.I32, 0, "a")
    b = _centered(ctx, ctx.value(1), ctx.value(3) if ctx.has(3) else None, DType.I32, None, "b")
    ctx.set_output(0, ctx.emit("matmul", [a, b]))


def _conv_float(ctx: NodeContext, x: Tensor, w: Tensor, bias: Tensor | None, tag: str) -> Tensor:
    from openinfer_jax.onnx.converters.nn import conv_params

    spatial = len(x.shape) - 2
    params = conv_params(ctx, x.shape, w.shape)
    inputs = [x, w] + ([bias] if bias is not None else [])
    return ctx.emit(f"conv{spatial}d", inputs, hint=ctx.hint(0, tag), **params)


@converter("ConvInteger", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"),
           becomes="cast to f64, sub the zero points, conv (exact), cast to i32")  # fmt: skip
def _conv_integer(ctx: NodeContext) -> None:
    x = _centered(ctx, ctx.value(0), ctx.value(2) if ctx.has(2) else None, DType.F64, None, "x")
    w_zero = ctx.value(3) if ctx.has(3) else None
    if w_zero is not None and len(ctx.shape(3)) == 1 and ctx.shape(3)[0] > 1:  # per output channel
        w_zero = reshape(
            ctx,
            w_zero,
            (ctx.shape(3)[0],) + (1,) * (len(ctx.shape(1)) - 1),
            hint=ctx.hint(0, "w_zp_col"),
        )
    w = _centered(ctx, ctx.value(1), w_zero, DType.F64, None, "w")
    y = _conv_float(ctx, x, w, None, "conv")
    ctx.set_output(0, ctx.emit("cast", [y], to=DType.I32))


@converter("QLinearMatMul", becomes="DequantizeLinear's lines, matmul, QuantizeLinear's lines")
def _qlinear_matmul(ctx: NodeContext) -> None:
    # a's scale is per row (axis -2), b's per column (axis -1).
    a_axis, b_axis = len(ctx.shape(0)) - 2, len(ctx.shape(3)) - 1
    a = dequantize(
        ctx, ctx.value(0), ctx.value(1), ctx.value(2), a_axis, 0, _float_of(ctx, 1), "a", last=False
    )
    b = dequantize(
        ctx, ctx.value(3), ctx.value(4), ctx.value(5), b_axis, 0, _float_of(ctx, 4), "b", last=False
    )
    if a.dtype is not b.dtype:
        b = ctx.emit("cast", [b], hint=ctx.hint(0, "b_cast"), to=a.dtype)
    y = ctx.emit("matmul", [a, b], hint=ctx.hint(0, "product"))
    target = ctx.dtype(7)
    ctx.set_output(
        0, quantize(ctx, y, ctx.value(6), ctx.value(7), len(y.shape) - 1, 0, target, "y", last=True)
    )


def _float_of(ctx: NodeContext, scale_index: int) -> DType:
    dtype = ctx.dtype(scale_index)
    return dtype if dtype.is_float else DType.F32


@converter("QLinearConv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"),
           becomes="DequantizeLinear's lines, conv, QuantizeLinear's lines")  # fmt: skip
def _qlinear_conv(ctx: NodeContext) -> None:
    x = dequantize(ctx, ctx.value(0), ctx.value(1), ctx.value(2), 1, 0, DType.F32, "x", last=False)
    w = dequantize(ctx, ctx.value(3), ctx.value(4), ctx.value(5), 0, 0, DType.F32, "w", last=False)
    bias = None
    if ctx.has(8):  # int32 bias in x_scale * w_scale units
        b = ctx.emit("cast", [ctx.value(8)], hint=ctx.hint(0, "bias_float"), to=DType.F32)
        unit = binary(ctx, "mul", ctx.value(1), ctx.value(4), hint=ctx.hint(0, "bias_unit"))
        bias = binary(ctx, "mul", b, unit, hint=ctx.hint(0, "bias"))
    y = _conv_float(ctx, x, w, bias, "conv")
    ctx.set_output(
        0, quantize(ctx, y, ctx.value(6), ctx.value(7), 1, 0, ctx.dtype(7), "y", last=True)
    )
