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
    params = conv_params(ctx, x_shape, w_shape)
    inputs = [ctx.value(0), ctx.value(1)] + ([ctx.value(2)] if ctx.has(2) else [])
    ctx.set_output(0, ctx.emit(f"conv{len(x_shape) - 2}d", inputs, **params))


def conv_params(
    ctx: NodeContext, x_shape: tuple[int, ...], w_shape: tuple[int, ...]
) -> dict[str, object]:
    """The conv op's params for a Conv-like node (auto_pad resolved, defaults left out).

    Raises:
        OnnxImportError: 3-d or higher convolutions, or a kernel_shape that differs from W's.
    """
    spatial = len(x_shape) - 2
    if spatial not in (1, 2):
        raise ctx.error(f"{spatial}-d convolution is not supported (1-d and 2-d are)")
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape", w_shape[2:]))
    if kernel != tuple(w_shape[2:]):
        raise ctx.error(f"kernel_shape {kernel} differs from the weight's {w_shape[2:]}")
    window = _window(ctx, tuple(x_shape[2:]), kernel)
    return {"groups": int(ctx.attr("group", 1)), **_window_params(window)}


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
    if int(ctx.attr("spatial", 1)) != 1:
        raise ctx.error("spatial=0 is not supported")
    inputs = [ctx.value(i) for i in range(5)]
    eps = float(ctx.attr("epsilon", 1e-5))
    if int(ctx.attr("training_mode", 0)):
        _batch_norm_training(ctx, inputs, eps)
        return
    if any(o for o in ctx.node.output[1:]):
        raise ctx.error("the running statistics outputs need training_mode=1")
    ctx.set_output(0, ctx.emit("batch_norm", inputs, epsilon=eps))


def _batch_norm_training(ctx: NodeContext, inputs: list[Value], eps: float) -> None:
    """Training mode: normalize with the batch's statistics (population variance) and
    output the running ones, input * momentum + batch * (1 - momentum)."""
    x, dtype, rank = inputs[0], ctx.dtype(0), len(ctx.shape(0))
    axes = [0, *range(2, rank)]
    kept = ctx.emit("mean_axis", [x], hint=ctx.hint(0, "batch_mean_k"), axes=axes, keepdims=True)
    centered = ctx.emit("sub", [x, kept], hint=ctx.hint(0, "centered"))
    square = ctx.emit("mul", [centered, centered], hint=ctx.hint(0, "square"))
    mean = ctx.emit("mean_axis", [x], hint=ctx.hint(0, "batch_mean"), axes=axes, keepdims=False)
    var = ctx.emit("mean_axis", [square], hint=ctx.hint(0, "batch_var"), axes=axes, keepdims=False)
    ctx.set_output(0, ctx.emit("batch_norm", [x, inputs[1], inputs[2], mean, var], epsilon=eps))
    momentum = float(ctx.attr("momentum", 0.9))
    for out, (running, batch) in enumerate(((inputs[3], mean), (inputs[4], var)), start=1):
        if out >= len(ctx.node.output) or not ctx.node.output[out]:
            continue
        old = ctx.emit("mul", [running, scalar(ctx, momentum, dtype)], hint=ctx.hint(out, "old"))
        new = ctx.emit(
            "mul", [batch, scalar(ctx, 1.0 - momentum, dtype)], hint=ctx.hint(out, "new")
        )
        ctx.set_output(out, ctx.emit("add", [old, new]))


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


@converter(
    "ConvTranspose",
    attrs=("auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape",
           "pads", "strides"),
    becomes="zeros inserted between inputs (reshape, pad), pad or slice, conv with the flipped kernel",
)  # fmt: skip
def _conv_transpose(ctx: NodeContext) -> None:
    x_shape, w_shape = ctx.shape(0), ctx.shape(1)
    n = len(x_shape) - 2
    if n not in (1, 2):
        raise ctx.error(f"{n}-d transposed convolution is not supported (1-d and 2-d are)")
    group = int(ctx.attr("group", 1))
    kernel = [int(k) for k in ctx.attr("kernel_shape", w_shape[2:])]
    strides = [int(s) for s in ctx.attr("strides", [1] * n)]
    dilations = [int(d) for d in ctx.attr("dilations", [1] * n)]
    extra = [int(p) for p in ctx.attr("output_padding", [0] * n)]
    spatial = x_shape[2:]
    natural = [
        strides[i] * (spatial[i] - 1) + extra[i] + (kernel[i] - 1) * dilations[i] + 1
        for i in range(n)
    ]
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    out_shape = ctx.attr("output_shape", None)
    if "pads" not in ctx.attrs and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = (
            [int(o) for o in out_shape]
            if out_shape is not None
            else [spatial[i] * strides[i] for i in range(n)]
        )
        total = [natural[i] - target[i] for i in range(n)]
        first = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
        pads = first + [t - f for t, f in zip(total, first, strict=True)]
    else:
        pads = [int(p) for p in ctx.attr("pads", [0] * (2 * n))]
    lengths = [natural[i] - pads[i] - pads[i + n] for i in range(n)]
    if out_shape is not None:  # the output's size wins (extra positions are zeros + bias)
        lengths = [int(o) for o in out_shape][-n:]
    w = _flipped_kernel(ctx, group)
    x: Value = ctx.value(0)
    x = _insert_zeros(ctx, x, strides)
    for i in range(n):
        axis = 2 + i
        up = spatial[i] * strides[i]  # inserted zeros leave s - 1 trailing ones
        begin = dilations[i] * (kernel[i] - 1) - pads[i]
        end = lengths[i] + dilations[i] * (kernel[i] - 1) - begin - up
        x = _pad_or_crop(ctx, x, axis, begin, end, i)
    inputs = [x, w] + ([ctx.value(2)] if ctx.has(2) else [])
    params = _window_params({"strides": [1] * n, "pads": [0] * (2 * n), "dilations": dilations})
    ctx.set_output(0, ctx.emit(f"conv{n}d", inputs, groups=group, **params))


def _flipped_kernel(ctx: NodeContext, group: int) -> Const:
    """ConvTranspose's W [C, M/g, k...] as a conv weight [M, C/g, k...], spatially flipped."""
    w = ctx.const(1, "the weights W")
    c = w.shape[0]
    cg = c // group
    parts = []
    for g in range(group):
        block = w[g * cg : (g + 1) * cg]  # [Cg, Mg, k...]
        block = np.swapaxes(block, 0, 1)  # [Mg, Cg, k...]
        parts.append(block[(slice(None), slice(None), *[slice(None, None, -1)] * (w.ndim - 2))])
    flipped = np.ascontiguousarray(np.concatenate(parts, axis=0))
    value = ctx.value(1)
    assert isinstance(value, Const)
    return Const(flipped, value.dtype, value.hint + "_conv")


def _insert_zeros(ctx: NodeContext, x: Value, strides: list[int]) -> Value:
    """`s - 1` zeros after every element along each spatial axis with stride s > 1."""
    if all(s == 1 for s in strides):
        return x
    shape = ctx.as_tensor(x).shape
    n = len(strides)
    split: list[int] = list(shape[:2])
    for i in range(n):
        split += [shape[2 + i], 1]
    t = reshape(ctx, x, tuple(split), hint=ctx.hint(0, "split"))
    axes = [3 + 2 * i for i in range(n) if strides[i] > 1]
    ends = [strides[i] - 1 for i in range(n) if strides[i] > 1]
    t = ctx.emit("pad", [t], hint=ctx.hint(0, "zeros"), pads=[0] * len(axes) + ends, axes=axes)
    merged = tuple(shape[:2]) + tuple(shape[2 + i] * strides[i] for i in range(n))
    return reshape(ctx, t, merged, hint=ctx.hint(0, "upsampled"))


def _pad_or_crop(ctx: NodeContext, x: Value, axis: int, begin: int, end: int, i: int) -> Value:
    """Pad with zeros (positive amounts) or cut (negative ones) at both ends of `axis`."""
    from openinfer_jax.onnx.converters.movement import slice_axis

    length = ctx.as_tensor(x).shape[axis]
    if begin < 0 or end < 0:
        x = slice_axis(
            ctx, x, axis, max(-begin, 0), length - max(-end, 0), hint=ctx.hint(0, f"cut{i}")
        )
    if begin > 0 or end > 0:
        x = ctx.emit(
            "pad", [x], hint=ctx.hint(0, f"pad{i}"), pads=[max(begin, 0), max(end, 0)], axes=[axis]
        )
    return x


@converter("InstanceNormalization", attrs=("epsilon",), becomes="instance_norm")
def _instance_norm(ctx: NodeContext) -> None:
    eps = float(ctx.attr("epsilon", 1e-5))
    ctx.set_output(
        0, ctx.emit("instance_norm", [ctx.value(0), ctx.value(1), ctx.value(2)], epsilon=eps)
    )


@converter(
    "GroupNormalization",
    attrs=("epsilon", "num_groups", "stash_type"),
    becomes="group_norm (opset 18's per-group scale and bias: reshape into groups, normalize, "
    "scale and bias per group)",
)
def _group_norm(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    n, c = shape[:2]
    groups = int(ctx.attr("num_groups"))
    eps = float(ctx.attr("epsilon", 1e-5))
    scale, bias = ctx.value(1), ctx.value(2)
    if not (ctx.shape(1)[0] == groups and groups != c):
        # GroupNormalization-21: scale and bias per channel, the registry op's meaning.
        ctx.set_output(
            0, ctx.emit("group_norm", [ctx.value(0), scale, bias], num_groups=groups, epsilon=eps)
        )
        return
    # GroupNormalization-18: one scale and bias per group.
    grouped = reshape(
        ctx,
        ctx.value(0),
        (n, groups, (c // groups) * math.prod(shape[2:])),
        hint=ctx.hint(0, "groups"),
    )
    y = ctx.emit("layer_norm", [grouped], hint=ctx.hint(0, "gn_normalized"), axis=2, epsilon=eps)
    scaled = ctx.emit(
        "mul",
        [y, reshape(ctx, scale, (groups, 1), hint=ctx.hint(0, "scale"))],
        hint=ctx.hint(0, "scaled"),
    )
    y = ctx.emit(
        "add",
        [scaled, reshape(ctx, bias, (groups, 1), hint=ctx.hint(0, "bias"))],
        hint=ctx.hint(0, "grouped_out"),
    )
    ctx.set_output(0, reshape(ctx, y, shape))


@converter("MeanVarianceNormalization", attrs=("axes",), becomes="(x - mean) / sqrt(var) over axes")
def _mvn(ctx: NodeContext) -> None:
    rank = len(ctx.shape(0))
    axes = [a % rank for a in ctx.attr("axes", [0, 2, 3])]
    x = ctx.value(0)
    dtype = ctx.dtype(0)
    mean = ctx.emit("mean_axis", [x], hint=ctx.hint(0, "mean"), axes=axes, keepdims=True)
    centered = ctx.emit("sub", [x, mean], hint=ctx.hint(0, "centered"))
    square = ctx.emit("mul", [centered, centered], hint=ctx.hint(0, "square"))
    var = ctx.emit("mean_axis", [square], hint=ctx.hint(0, "var"), axes=axes, keepdims=True)
    std = ctx.emit("sqrt", [var], hint=ctx.hint(0, "std"))
    std = ctx.emit("add", [std, scalar(ctx, 1e-9, dtype)], hint=ctx.hint(0, "std_eps"))
    ctx.set_output(0, ctx.emit("div", [centered, std]))


@converter(
    "LRN",
    attrs=("alpha", "beta", "bias", "size"),
    becomes="avg_pool of x^2 over channels, exp(beta * log(.))",
)
def _lrn(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    dtype = ctx.dtype(0)
    size = int(ctx.attr("size"))
    alpha, beta, bias = (
        float(ctx.attr("alpha", 1e-4)),
        float(ctx.attr("beta", 0.75)),
        float(ctx.attr("bias", 1.0)),
    )
    x = ctx.value(0)
    square = ctx.emit("mul", [x, x], hint=ctx.hint(0, "square"))
    # Sum over channels c - floor((size-1)/2) .. c + ceil((size-1)/2): an average pool over
    # a [N, 1, C, H*W] view, padding counted, times size.
    n, c = shape[:2]
    view = reshape(ctx, square, (n, 1, c, math.prod(shape[2:])), hint=ctx.hint(0, "channels"))
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    pooled = ctx.emit("avg_pool", [view], hint=ctx.hint(0, "pooled"), kernel_shape=[size, 1],
                      pads=[before, 0, after, 0], count_include_pad=True)  # fmt: skip
    sums = reshape(ctx, pooled, shape, hint=ctx.hint(0, "sums"))
    scaled = ctx.emit("mul", [sums, scalar(ctx, alpha, dtype)], hint=ctx.hint(0, "scaled"))
    base = ctx.emit("add", [scaled, scalar(ctx, bias, dtype)], hint=ctx.hint(0, "base"))
    log = ctx.emit("log", [base], hint=ctx.hint(0, "log"))
    power = ctx.emit(
        "exp",
        [ctx.emit("mul", [log, scalar(ctx, beta, dtype)], hint=ctx.hint(0, "beta_log"))],
        hint=ctx.hint(0, "den"),
    )
    ctx.set_output(0, ctx.emit("div", [x, power]))


@converter("LpPool", "GlobalLpPool", attrs=("auto_pad", "ceil_mode", "dilations", "kernel_shape", "p", "pads", "strides"),
           becomes="avg_pool of |x|^p times the window size, then the p-th root (exp(log(.)/p))")  # fmt: skip
def _lp_pool(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    p = int(ctx.attr("p", 2))
    if p < 1:
        raise ctx.error(f"p={p} is not supported (p >= 1 is)")
    x = ctx.value(0)
    dtype = ctx.dtype(0)
    magnitude: Value = x if p % 2 == 0 else ctx.emit("abs", [x], hint=ctx.hint(0, "abs"))
    powered = ctx.as_tensor(magnitude)
    for i in range(1, p):
        powered = ctx.emit("mul", [powered, magnitude], hint=ctx.hint(0, f"power{i + 1}"))
    if ctx.op_type == "GlobalLpPool":
        total = ctx.emit(
            "sum_axis",
            [powered],
            hint=ctx.hint(0, "sum"),
            axes=list(range(2, len(shape))),
            keepdims=True,
        )
    else:
        kernel = tuple(int(k) for k in ctx.attr("kernel_shape"))
        window = _window(ctx, tuple(shape[2:]), kernel)
        if int(ctx.attr("ceil_mode", 0)) and _ceil_pads(ctx, tuple(shape[2:]), kernel, window):
            raise ctx.error("ceil_mode=1 is not supported for LpPool")
        mean = ctx.emit("avg_pool", [powered], hint=ctx.hint(0, "mean"), kernel_shape=list(kernel),
                        count_include_pad=True, **_window_params(window))  # fmt: skip
        total = ctx.emit(
            "mul", [mean, scalar(ctx, float(math.prod(kernel)), dtype)], hint=ctx.hint(0, "sum")
        )
    if p == 1:
        ctx.set_output(0, total)
    elif p == 2:
        ctx.set_output(0, ctx.emit("sqrt", [total]))
    else:  # the p-th root of a non-negative sum
        log = ctx.emit("log", [total], hint=ctx.hint(0, "log"))
        root = ctx.emit("div", [log, scalar(ctx, float(p), dtype)], hint=ctx.hint(0, "log_root"))
        ctx.set_output(0, ctx.emit("exp", [root]))
