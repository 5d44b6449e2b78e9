"""Neural-network ONNX ops: matrix products, convolution, pooling, normalization, softmax."""

from __future__ import annotations

import math

import numpy as np

from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.converters.common import norm_axis, scalar
from openinfer_jax.onnx.converters.movement import reshape
from openinfer_jax.onnx.values import Const, Tensor, Value

__all__: list[str] = []


@converter(
    "MatMul", becomes="matmul; linear when B is a constant matrix (stored transposed, [out, in])"
)
def _matmul(ctx: NodeContext) -> None:
    a, b = ctx.value(0), ctx.value(1)
    if (
        isinstance(b, Const)
        and b.array.ndim == 2
        and ctx.dtype(0).is_float
        and len(ctx.shape(0)) >= 1
    ):
        # linear reads its weight as [out, in], the layout torch keeps and the C kernels
        # want; the import stores ONNX's [in, out] matrix transposed once.
        w = Const(np.ascontiguousarray(b.array.T), b.dtype, b.hint + "_t")
        ctx.set_output(0, ctx.emit("linear", [a, w]))
        return
    ctx.set_output(0, ctx.emit("matmul", [a, b]))


def _transposed(ctx: NodeContext, value: Value, hint: str) -> Value:
    if isinstance(value, Const):
        return Const(np.ascontiguousarray(value.array.T), value.dtype, value.hint + "_T")
    return ctx.emit("transpose", [value], hint=hint, perm=[1, 0])


@converter(
    "Gemm", attrs=("alpha", "beta", "transA", "transB"), becomes="linear, or matmul (+ mul, add)"
)
def _gemm(ctx: NodeContext) -> None:
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    trans_a, trans_b = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    a: Value = ctx.value(0)
    b: Value = ctx.value(1)
    c: Value | None = ctx.value(2) if ctx.has(2) else None
    dtype = ctx.dtype(0)
    if trans_a:
        a = _transposed(ctx, a, ctx.hint(0, "aT"))
    n = ctx.shape(1)[0 if trans_b else 1]
    bias_ok = c is None or (beta == 1.0 and ctx.shape(2) in ((n,), (1, n)))
    if alpha == 1.0 and bias_ok and dtype.is_float:
        # linear reads w as [out, in]: that is B itself when transB=1.
        w = b if trans_b else _transposed(ctx, b, ctx.hint(0, "wT"))
        inputs = [a, w]
        if c is not None:
            inputs.append(
                reshape(ctx, c, (n,), hint=ctx.hint(0, "bias")) if ctx.shape(2) != (n,) else c
            )
        ctx.set_output(0, ctx.emit("linear", inputs))
        return
    if trans_b:
        b = _transposed(ctx, b, ctx.hint(0, "bT"))
    last = c is None and alpha == 1.0
    y: Tensor = ctx.emit("matmul", [a, b], hint=None if last else ctx.hint(0, "ab"))
    if alpha != 1.0:
        y = ctx.emit(
            "mul", [y, scalar(ctx, alpha, dtype)], hint=None if c is None else ctx.hint(0, "alpha")
        )
    if c is not None:
        if beta != 1.0:
            if isinstance(c, Const):
                c = Const(
                    (c.array * np.asarray(beta, c.array.dtype)).astype(c.array.dtype),
                    c.dtype,
                    c.hint,
                )
            else:
                c = ctx.emit("mul", [c, scalar(ctx, beta, dtype)], hint=ctx.hint(0, "beta"))
        y = ctx.emit("add", [y, c])
    ctx.set_output(0, y)


def _window(
    ctx: NodeContext, spatial: tuple[int, ...], kernel: tuple[int, ...]
) -> dict[str, list[int]]:
    """strides, pads and dilations of a Conv/pool node, auto_pad resolved to explicit pads."""
    n = len(kernel)
    strides = [int(s) for s in ctx.attr("strides", [1] * n)]
    dilations = [int(d) for d in ctx.attr("dilations", [1] * n)]
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * n))]
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad == "VALID":
        pads = [0] * (2 * n)
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * n)
        for i in range(n):
            out = -(-spatial[i] // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - spatial[i], 0)
            small, large = total // 2, total - total // 2
            pads[i], pads[i + n] = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
    elif auto_pad != "NOTSET":
        raise ctx.error(f"auto_pad={auto_pad!r} is not supported")
    return {"strides": strides, "pads": pads, "dilations": dilations}


def _window_params(window: dict[str, list[int]]) -> dict[str, list[int]]:
    """The window params that differ from the ops' defaults (strides 1, pads 0, dilations 1)."""
    trivial = {"strides": 1, "pads": 0, "dilations": 1}
    return {k: v for k, v in window.items() if any(x != trivial[k] for x in v)}


@converter(
    "Conv",
    attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"),
    becomes="conv1d, conv2d",
)
def _conv(ctx: NodeContext) -> None:
    x_shape, w_shape = ctx.shape(0), ctx.shape(1)
    spatial = len(x_shape) - 2
    if spatial not in (1, 2):
        raise ctx.error(f"{spatial}-d convolution is not supported (1-d and 2-d are)")
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape", w_shape[2:]))
    if kernel != tuple(w_shape[2:]):
        raise ctx.error(f"kernel_shape {kernel} differs from the weight's {w_shape[2:]}")
    window = _window(ctx, tuple(x_shape[2:]), kernel)
    inputs = [ctx.value(0), ctx.value(1)] + ([ctx.value(2)] if ctx.has(2) else [])
    ctx.set_output(
        0,
        ctx.emit(
            f"conv{spatial}d", inputs, groups=int(ctx.attr("group", 1)), **_window_params(window)
        ),
    )


def _ceil_pads(
    ctx: NodeContext,
    spatial: tuple[int, ...],
    kernel: tuple[int, ...],
    window: dict[str, list[int]],
) -> bool:
    """Grow the end pads so floor-mode sizes equal ONNX's ceil_mode sizes; False if the
    grown windows would change results (they never do for max; for average only when the
    padding is not counted)."""
    n = len(kernel)
    grew = False
    for i in range(n):
        s, d, k = window["strides"][i], window["dilations"][i], kernel[i]
        p0, p1 = window["pads"][i], window["pads"][i + n]
        span = spatial[i] + p0 + p1 - d * (k - 1) - 1
        floor_out = span // s + 1
        ceil_out = -(-span // s) + 1
        if (ceil_out - 1) * s >= spatial[i] + p0:  # ONNX: the last window starts inside
            ceil_out -= 1
        if ceil_out > floor_out:
            window["pads"][i + n] += (ceil_out - 1) * s + d * (k - 1) + 1 - (spatial[i] + p0 + p1)
            grew = True
    return grew


@converter(
    "MaxPool", "AveragePool",
    attrs=("auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads",
           "storage_order", "strides"),
    becomes="max_pool, avg_pool",
)  # fmt: skip
def _pool(ctx: NodeContext) -> None:
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        raise ctx.error("the Indices output of MaxPool is not supported")
    x_shape = ctx.shape(0)
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape"))
    window = _window(ctx, tuple(x_shape[2:]), kernel)
    include = bool(ctx.attr("count_include_pad", 0))
    ceil = int(ctx.attr("ceil_mode", 0)) and _ceil_pads(ctx, tuple(x_shape[2:]), kernel, window)
    if ceil and ctx.op_type == "AveragePool" and include:
        raise ctx.error("ceil_mode=1 with count_include_pad=1 is not supported")
    if ctx.op_type == "MaxPool":
        ctx.set_output(
            0,
            ctx.emit(
                "max_pool", [ctx.value(0)], kernel_shape=list(kernel), **_window_params(window)
            ),
        )
        return
    ctx.set_output(
        0,
        ctx.emit(
            "avg_pool",
            [ctx.value(0)],
            kernel_shape=list(kernel),
            count_include_pad=include,
            **_window_params(window),
        ),
    )


@converter("GlobalAveragePool", becomes="global_average_pool")
def _global_average_pool(ctx: NodeContext) -> None:
    ctx.set_output(0, ctx.emit("global_average_pool", [ctx.value(0)]))


@converter("GlobalMaxPool", becomes="max_axis over the spatial axes")
def _global_max_pool(ctx: NodeContext) -> None:
    rank = len(ctx.shape(0))
    ctx.set_output(
        0, ctx.emit("max_axis", [ctx.value(0)], axes=list(range(2, rank)), keepdims=True)
    )


@converter(
    "BatchNormalization", attrs=("epsilon", "momentum", "spatial", "training_mode"),
    becomes="batch_norm",
)  # fmt: skip
def _batch_norm(ctx: NodeContext) -> None:
    if int(ctx.attr("training_mode", 0)) or any(o for o in ctx.node.output[1:]):
        raise ctx.error("training mode (running statistics outputs) is not supported")
    if int(ctx.attr("spatial", 1)) != 1:
        raise ctx.error("spatial=0 is not supported")
    inputs = [ctx.value(i) for i in range(5)]
    ctx.set_output(0, ctx.emit("batch_norm", inputs, epsilon=float(ctx.attr("epsilon", 1e-5))))


@converter("LayerNormalization", attrs=("axis", "epsilon", "stash_type"), becomes="layer_norm")
def _layer_norm(ctx: NodeContext) -> None:
    rank = len(ctx.shape(0))
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), rank)
    eps = float(ctx.attr("epsilon", 1e-5))
    inputs = [ctx.value(i) for i in range(ctx.input_count)]
    ctx.set_output(0, ctx.emit("layer_norm", inputs, axis=axis, epsilon=eps))
    if len(ctx.node.output) > 1 and any(ctx.node.output[1:]):
        _norm_statistics(ctx, axis, eps)


def _norm_statistics(ctx: NodeContext, axis: int, eps: float) -> None:
    """LayerNormalization's optional Mean and InvStdDev outputs."""
    x = ctx.value(0)
    dtype = ctx.dtype(0)
    rank = len(ctx.shape(0))
    axes = list(range(axis, rank))
    mean = ctx.emit("mean_axis", [x], hint=ctx.hint(1), axes=axes, keepdims=True)
    ctx.set_output(1, mean)
    if len(ctx.node.output) > 2 and ctx.node.output[2]:
        centered = ctx.emit("sub", [x, mean], hint=ctx.hint(2, "centered"))
        square = ctx.emit("mul", [centered, centered], hint=ctx.hint(2, "square"))
        var = ctx.emit("mean_axis", [square], hint=ctx.hint(2, "var"), axes=axes, keepdims=True)
        var = ctx.emit("add", [var, scalar(ctx, eps, dtype)], hint=ctx.hint(2, "var_eps"))
        ctx.set_output(2, ctx.emit("rsqrt", [var], hint=ctx.hint(2)))


@converter("RMSNormalization", attrs=("axis", "epsilon", "stash_type"), becomes="rms_norm")
def _rms_norm(ctx: NodeContext) -> None:
    rank = len(ctx.shape(0))
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), rank)
    inputs = [ctx.value(i) for i in range(ctx.input_count)]
    ctx.set_output(
        0, ctx.emit("rms_norm", inputs, axis=axis, epsilon=float(ctx.attr("epsilon", 1e-5)))
    )


@converter("Softmax", "LogSoftmax", attrs=("axis",), becomes="softmax, log_softmax")
def _softmax(ctx: NodeContext) -> None:
    op = "softmax" if ctx.op_type == "Softmax" else "log_softmax"
    shape = ctx.shape(0)
    rank = len(shape)
    if ctx.opset >= 13:
        axis = norm_axis(ctx, int(ctx.attr("axis", -1)), rank)
        ctx.set_output(0, ctx.emit(op, [ctx.value(0)], axis=axis))
        return
    # Before opset 13 the input is coerced to 2-D around `axis` (default 1).
    axis = norm_axis(ctx, int(ctx.attr("axis", 1)), rank)
    flat = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    x = reshape(ctx, ctx.value(0), flat, hint=ctx.hint(0, "2d"))
    y = ctx.emit(op, [x], hint=ctx.hint(0, "flat"), axis=1)
    ctx.set_output(0, reshape(ctx, y, shape))
