"""Elementwise ONNX ops: arithmetic, comparisons, logic, activations, casts."""

from __future__ import annotations

import numpy as np

from openinfer_jax.core.dtypes import NARROW_FLOATS, DType
from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.converters.common import broadcast_all, scalar
from openinfer_jax.onnx.dtypes import ONNX_TO_DTYPE, onnx_type_name
from openinfer_jax.onnx.values import Const, Tensor, Value

__all__ = ["binary", "round_half_even"]


def binary(ctx: NodeContext, op: str, a: Value, b: Value, hint: str | None = None) -> Tensor:
    """``op(a, b)`` with ONNX (NumPy) broadcasting, made explicit for ops that lack it."""
    from openinfer_jax.ops import registry

    opdef = registry.get(op)
    assert opdef is not None
    shape_a = a.array.shape if isinstance(a, Const) else a.shape
    shape_b = b.array.shape if isinstance(b, Const) else b.shape
    if opdef.broadcast or tuple(shape_a) == tuple(shape_b):
        return ctx.emit(op, [a, b], hint=hint)
    return ctx.emit(op, broadcast_all(ctx, [a, b]), hint=hint)


_BINARY = {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div",
    "Equal": "eq", "Less": "lt", "LessOrEqual": "le", "Greater": "gt", "GreaterOrEqual": "ge",
    "And": "and", "Or": "or", "Xor": "xor",
    "BitwiseAnd": "and", "BitwiseOr": "or", "BitwiseXor": "xor",
}  # fmt: skip


@converter(*_BINARY, becomes="add, sub, mul, div, eq, lt, le, gt, ge, and, or, xor (broadcast)")
def _binary(ctx: NodeContext) -> None:
    ctx.set_output(0, binary(ctx, _BINARY[ctx.op_type], ctx.value(0), ctx.value(1)))


_UNARY = {
    "Abs": "abs", "Neg": "neg", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Tanh": "tanh",
    "Sigmoid": "sigmoid", "Ceil": "ceil", "Floor": "floor", "Reciprocal": "recip",
    "Relu": "relu", "Not": "not", "BitwiseNot": "not", "IsNaN": "is_nan",
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan",
    "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
    "Erf": "erf",
}  # fmt: skip


@converter(*_UNARY, becomes="the op of the same meaning")
def _unary(ctx: NodeContext) -> None:
    ctx.set_output(0, ctx.emit(_UNARY[ctx.op_type], [ctx.value(0)]))


@converter("LeakyRelu", attrs=("alpha",), becomes="relu(negative_slope=alpha)")
def _leaky_relu(ctx: NodeContext) -> None:
    alpha = float(ctx.attr("alpha", 0.01))
    ctx.set_output(0, ctx.emit("relu", [ctx.value(0)], negative_slope=alpha))


@converter("Swish", attrs=("alpha",), becomes="silu (alpha = 1), else mul, sigmoid, mul")
def _swish(ctx: NodeContext) -> None:
    x, alpha = ctx.value(0), float(ctx.attr("alpha", 1.0))
    if alpha == 1.0:
        ctx.set_output(0, ctx.emit("silu", [x]))
        return
    scaled = ctx.emit("mul", [x, scalar(ctx, alpha, ctx.dtype(0))], hint=ctx.hint(0, "scaled"))
    gate = ctx.emit("sigmoid", [scaled], hint=ctx.hint(0, "gate"))
    ctx.set_output(0, ctx.emit("mul", [x, gate]))


@converter("Gelu", attrs=("approximate",), becomes="gelu")
def _gelu(ctx: NodeContext) -> None:
    mode = ctx.attr("approximate", "none")
    ctx.set_output(0, ctx.emit("gelu", [ctx.value(0)], approximate=mode))


@converter("Sign", becomes="sign, cast back to the input dtype")
def _sign(ctx: NodeContext) -> None:
    x = ctx.value(0)
    dtype = ctx.dtype(0)
    out = ctx.emit("sign", [x], hint=ctx.hint(0, "i8"))
    if dtype is not DType.I8:
        out = ctx.emit("cast", [out], to=dtype)
    ctx.set_output(0, out)


@converter("IsInf", attrs=("detect_negative", "detect_positive"), becomes="is_inf (and is_neg)")
def _is_inf(ctx: NodeContext) -> None:
    negative = int(ctx.attr("detect_negative", 1))
    positive = int(ctx.attr("detect_positive", 1))
    x = ctx.value(0)
    inf = ctx.emit("is_inf", [x], hint=ctx.hint(0, "inf") if not (negative and positive) else None)
    if negative and positive:
        ctx.set_output(0, inf)
        return
    if not negative and not positive:
        ctx.set_output(0, ctx.emit("and", [inf, ctx.emit("not", [inf], hint=ctx.hint(0, "no"))]))
        return
    neg = ctx.emit("is_neg", [x], hint=ctx.hint(0, "neg"))
    if positive:
        neg = ctx.emit("not", [neg], hint=ctx.hint(0, "pos"))
    ctx.set_output(0, ctx.emit("and", [inf, neg]))


@converter("Clip", attrs=("min", "max"), becomes="clamp")
def _clip(ctx: NodeContext) -> None:
    dtype = ctx.dtype(0)
    low = high = None
    if ctx.opset < 11:
        low, high = ctx.attr("min"), ctx.attr("max")
    else:
        if ctx.has(1):
            low = ctx.const(1, "the lower bound").item()
        if ctx.has(2):
            high = ctx.const(2, "the upper bound").item()
    if dtype.is_float:
        low = None if low is None else float(low)
        high = None if high is None else float(high)
    else:
        low = None if low is None else int(low)
        high = None if high is None else int(high)
    x = ctx.value(0)
    if low is None and high is None:
        ctx.set_output(0, x)
        return
    if low is not None and high is not None and low > high:
        # ONNX: min > max gives max everywhere.
        ctx.set_output(0, ctx.emit("fill", [x], value=high))
        return
    ctx.set_output(0, ctx.emit("clamp", [x], min=low, max=high))


@converter("Cast", attrs=("to", "saturate", "round_mode"), becomes="cast")
def _cast(ctx: NodeContext) -> None:
    code = int(ctx.attr("to"))
    _cast_to(ctx, ctx.value(0), code)


@converter("CastLike", attrs=("saturate", "round_mode"), becomes="cast")
def _cast_like(ctx: NodeContext) -> None:
    target = ctx.dtype(1)
    _cast_to(ctx, ctx.value(0), _code_of(target))


def _code_of(dtype: DType) -> int:
    from openinfer_jax.onnx.dtypes import DTYPE_TO_ONNX

    return DTYPE_TO_ONNX[dtype]


def _cast_to(ctx: NodeContext, x: Value, code: int) -> None:
    target = ONNX_TO_DTYPE.get(code)
    if target is None:
        raise ctx.error(f"cast to {onnx_type_name(code)} is not supported (no package dtype)")
    round_mode = ctx.attr("round_mode", "up")
    if round_mode not in _E8M0_ROUNDING:
        raise ctx.error(f"round_mode={round_mode!r} is not supported (up, down, nearest are)")
    if x.dtype is target:
        ctx.set_output(0, x)
        return
    if target.is_packed:
        # ONNX wraps into the 4-bit and 2-bit ranges (8 -> -8 for int4).
        ctx.set_output(0, ctx.emit("cast", [x], to=target, saturate=False))
        return
    saturate = bool(int(ctx.attr("saturate", 1)))
    if target is DType.F8 and x.dtype is not None and x.dtype.is_float and saturate:
        # saturate=1 (the default): values beyond the float8 range, infinities included,
        # become its largest value (the cast op keeps IEEE overflow for f8 e5m2).
        limit = 57344.0  # the largest finite float8 e5m2
        x = ctx.emit("clamp", [x], hint=ctx.hint(0, "saturated"), min=-limit, max=limit)
    if target in NARROW_FLOATS:
        # The cast op has ONNX's saturate semantics for these (and its e8m0 rounding).
        rounding = _E8M0_ROUNDING[round_mode]
        ctx.set_output(
            0, ctx.emit("cast", [x], to=target, saturate=saturate, rounding_mode=rounding)
        )
        return
    ctx.set_output(0, ctx.emit("cast", [x], to=target))


# ONNX round_mode (for casts to float8 e8m0) as the cast op's rounding_mode.
_E8M0_ROUNDING = {"up": "ceil", "down": "trunc", "nearest": "nearest"}


_VARIADIC = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}


@converter(*_VARIADIC, becomes="a chain of max, min or add (Mean: then div)")
def _variadic(ctx: NodeContext) -> None:
    op = _VARIADIC[ctx.op_type]
    values = [v for v in ctx.values() if v is not None]
    out: Value = values[0]
    for i, v in enumerate(values[1:], start=1):
        last = i == len(values) - 1 and ctx.op_type != "Mean"
        out = binary(ctx, op, out, v, hint=None if last else ctx.hint(0, f"acc{i}"))
    if ctx.op_type == "Mean":
        out = ctx.emit("div", [out, scalar(ctx, len(values), ctx.dtype(0))])
    elif len(values) == 1:
        out = ctx.as_tensor(out)
    ctx.set_output(0, out)


@converter(
    "Pow",
    becomes="mul, sqrt, rsqrt, recip for one constant exponent 2, 3, 0.5, -0.5, -1, 1; else pow "
    "(broadcast; an integer base computes in f64 and truncates back, as ONNX's reference)",
)
def _pow(ctx: NodeContext) -> None:
    x = ctx.value(0)
    if ctx.is_const(1) and ctx.dtype(0).is_float and not _broadcast_grows(ctx):
        values = np.unique(np.asarray(ctx.const(1, "the exponent"), dtype=np.float64))
        if values.size == 1 and float(values[0]) in _SHORT_POWERS:
            ctx.set_output(0, _power(ctx, x, float(values[0])))
            return
    ctx.set_output(0, _general_power(ctx, x, ctx.value(1)))


def _general_power(ctx: NodeContext, x: Value, y: Value) -> Tensor:
    """x^y with the pow op, in x's dtype (f64 for an integer x, cast back with truncation)."""
    out = ctx.dtype(0)
    work = out if out.is_float else DType.F64
    if ctx.dtype(0) is not work:
        x = ctx.emit("cast", [x], hint=ctx.hint(0, "base"), to=work)
    if ctx.dtype(1) is not work:
        y = ctx.emit("cast", [y], hint=ctx.hint(0, "exponent"), to=work)
    if work is out:
        return ctx.emit("pow", [x, y])
    power = ctx.emit("pow", [x, y], hint=ctx.hint(0, "power"))
    return ctx.emit("cast", [power], to=out)


_SHORT_POWERS = (1.0, 2.0, 3.0, 0.5, -0.5, -1.0)


def _broadcast_grows(ctx: NodeContext) -> bool:
    shape = ctx.shape(0)
    return tuple(np.broadcast_shapes(shape, ctx.shape(1))) != tuple(shape)


def _power(ctx: NodeContext, x: Value, e: float) -> Tensor:
    if e == 1.0:
        return ctx.as_tensor(x)
    if e == 2.0:
        return ctx.emit("mul", [x, x])
    if e == 3.0:
        sq = ctx.emit("mul", [x, x], hint=ctx.hint(0, "sq"))
        return ctx.emit("mul", [sq, x])
    if e == 0.5:
        return ctx.emit("sqrt", [x])
    if e == -0.5:
        return ctx.emit("rsqrt", [x])
    assert e == -1.0, e
    return ctx.emit("recip", [x])


@converter("Round", becomes="round half to even: round, with ties corrected")
def _round(ctx: NodeContext) -> None:
    ctx.set_output(0, round_half_even(ctx, ctx.value(0), "round", last=True))


def round_half_even(ctx: NodeContext, x: Value, tag: str, last: bool = False) -> Tensor:
    """`x` rounded to the nearest integer, ties to even (ONNX's rounding): `round` rounds
    ties away from zero, so a tie takes 2 * round(x / 2) instead."""
    dtype = ctx.as_tensor(x).dtype
    r = ctx.emit("round", [x], hint=ctx.hint(0, f"{tag}_away"))
    half = scalar(ctx, 0.5, dtype)
    halved = ctx.emit("mul", [x, half], hint=ctx.hint(0, f"{tag}_half"))
    even = ctx.emit("round", [halved], hint=ctx.hint(0, f"{tag}_half_r"))
    even = ctx.emit("add", [even, even], hint=ctx.hint(0, f"{tag}_even"))
    diff = ctx.emit("sub", [r, x], hint=ctx.hint(0, f"{tag}_diff"))
    diff = ctx.emit("abs", [diff], hint=ctx.hint(0, f"{tag}_adiff"))
    tie = binary(ctx, "eq", diff, half, hint=ctx.hint(0, f"{tag}_tie"))
    return ctx.emit("where", [tie, even, r], hint=None if last else ctx.hint(0, tag))


@converter("BitCast", attrs=("to",), becomes="bitcast")
def _bitcast(ctx: NodeContext) -> None:
    code = int(ctx.attr("to"))
    target = ONNX_TO_DTYPE.get(code)
    if target is None:
        raise ctx.error(f"bitcast to {onnx_type_name(code)} is not supported (no package dtype)")
    x = ctx.value(0)
    if ctx.dtype(0) is target:
        ctx.set_output(0, x)
        return
    ctx.set_output(0, ctx.emit("bitcast", [x], to=target))
