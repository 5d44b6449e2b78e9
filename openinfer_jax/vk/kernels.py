"""Kernel generation: GLSL source + push constants + grid for one op call.

A `Kernel` is everything the backend needs to dispatch: the generated GLSL (compiled and
cached by source hash), the bindings' order (inputs then output), the push-constant
words and the work-group grid. Sources depend only on dtypes and static params, never
on shapes (shapes go into push constants), so one compiled kernel serves every shape.

Kernel families, each rendered from one template in shaders/:

* elementwise.comp  every op with an expression tree in the registry (printed by
                    `expressions.render_glsl`), plus ``cast``, ``fill``, gathers and movement;
* reduce.comp       the ``*_axis`` reductions;
* matmul.comp       matmul for every dtype (accumulator from ``acc``);
* matmul_tiled.comp the f32 fast path (shared-memory tiles, register blocking);
* copy.comp         element copies between buffers (cache slices).

Every template writes whole output words, so narrow types never race (storage.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import BackendError
from openinfer_jax.vk import launch
from openinfer_jax.vk.compiler import render
from openinfer_jax.vk.expressions import helper_source, render_glsl
from openinfer_jax.vk.glsl import GlslType, encode_function, glsl_type, literal, load_function

__all__ = [
    "MATMUL_TILES",
    "REDUCTIONS",
    "Kernel",
    "cast_kernel",
    "copy_kernel",
    "elementwise_kernel",
    "fill_kernel",
    "kernel_ops",
    "literal",
    "matmul_kernel",
    "op_kernel",
    "reduce_kernel",
]

MOVEMENT = ("reshape", "transpose", "permute", "slice")
GATHERS = ("gather", "embedding")
NORMALIZATIONS = ("softmax", "log_softmax", "layer_norm", "rms_norm")
REDUCTIONS = ("sum_axis", "prod_axis", "max_axis", "min_axis", "mean_axis",
              "argmax_axis", "argmin_axis")  # fmt: skip
# The structured single-kernel ops of `op_kernel` (every other op it takes has a tree).
_STRUCTURED = frozenset({"cast", "bitcast", "matmul", *REDUCTIONS, *MOVEMENT, *GATHERS})
# (BM, BN, BK, TM, TN) of the tiled f32 matmul; "small" suits CPUs (lavapipe). Any
# "BMxBNxBKxTMxTN" string also works (tuning; see `tile_config`).
# Measured (bench_vk.py --tiles): on an H200, 128x128x16x8x8 gave 26.7 TFLOP/s at 4096
# (0.52 of cuBLAS fp32) against 24.3 for 128x128x8x8x8 and 20.1 for 64x64x16x4x4; on
# lavapipe 64x64x16x8x8 (64 invocations per group) ran twice as fast as 64x64x16x4x4.
MATMUL_TILES = {"large": (128, 128, 16, 8, 8), "small": (64, 64, 16, 8, 8)}


def tile_config(tiles: str) -> tuple[int, int, int, int, int] | None:
    """(BM, BN, BK, TM, TN) of a named or ``"BMxBNxBKxTMxTN"`` tile config; None if neither.

    A config must tile evenly: (BM/TM)*(BN/TN) invocations that divide BM*BK and BN*BK.
    """
    if tiles in MATMUL_TILES:
        return MATMUL_TILES[tiles]
    try:
        bm, bn, bk, tm, tn = (int(v) for v in tiles.split("x"))
    except ValueError:
        return None
    threads = (bm // tm) * (bn // tn)
    if bm % tm or bn % tn or threads > 1024 or (bm * bk) % threads or (bn * bk) % threads:
        return None
    return bm, bn, bk, tm, tn


@dataclass(frozen=True)
class Kernel:
    """One dispatch: source, push constants (uint32 words) and grid (x, y, z groups).

    `flat`: the grid is `launch.dispatch_grid` of a count the shader also receives in its
    push constants and checks (extra work groups return at once), so a runner may launch
    more groups along x (`launch.bucket_grid`) and get the same result.
    """

    label: str
    source: str
    push: np.ndarray
    grid: tuple[int, int, int]
    flat: bool = False


def kernel_ops() -> frozenset[str]:
    """Names of the ops that have a Vulkan kernel: every op with an expression tree, and the
    structured ones here and in nn_kernels.py."""
    from openinfer_jax.ops import registry  # lazy: importing ops loads JAX
    from openinfer_jax.vk.nn_kernels import NN_OPS  # nn_kernels builds on this module

    others = {
        "cast",
        "bitcast",
        "fill",
        "matmul",
        *REDUCTIONS,
        *MOVEMENT,
        *NORMALIZATIONS,
        *GATHERS,
    }
    trees = {op.name for op in registry.all_ops() if op.expr is not None}
    return frozenset(trees | set(NN_OPS) | others)


# ---- shared pieces ------------------------------------------------------------------------------
def param_words(value: Any, t: GlslType) -> list[int]:
    """Raw 32-bit words of a scalar param held in `t`'s compute type."""
    if t.family == "float":
        return [int(np.float32(value).view(np.uint32))]
    if t.family == "double":
        bits = int(np.float64(value).view(np.uint64))
        return [bits & 0xFFFFFFFF, bits >> 32]
    if isinstance(value, float) and math.isnan(value):
        value = 0
    v = int(value)
    if t.is_wide:
        v &= (1 << 64) - 1
        return [v & 0xFFFFFFFF, v >> 32]
    return [v & 0xFFFFFFFF]


def param_decl(name: str, slot: int, t: GlslType) -> str:
    """A ``#define P_name`` reading push-constant slot `slot` as `t`'s compute type."""
    ct, p = t.compute, f"pc.p[{slot}]"
    expr = {
        "float": f"uintBitsToFloat({p})",
        "double": f"packDouble2x32(uvec2({p}, pc.p[{slot + 1}]))",
        "int": f"int({p})",
        "uint": p,
        "bool": p,
        "int64": f"int64_t(pack64(uvec2({p}, pc.p[{slot + 1}])))",
        "uint64": f"pack64(uvec2({p}, pc.p[{slot + 1}]))",
    }[t.family]
    return f"#define P_{name} ({ct}({expr}))\n"


def store_snippet(out: DType) -> str:
    """The body of main() that writes output word/element `w` from ``element(o)``."""
    if out.bits == 64:
        return ("    if (w >= pc.n) return;\n    uvec2 v = encode_out(element(w));\n"
                "    outw[2u * w] = v.x;\n    outw[2u * w + 1u] = v.y;")  # fmt: skip
    if out.bits == 32:
        return "    if (w >= pc.n) return;\n    outw[w] = encode_out(element(w));"
    per_word, mask = 32 // out.bits, (1 << out.bits) - 1
    return (
        f"    uint first = w * {per_word}u;\n    if (first >= pc.n) return;\n    uint word = 0u;\n"
        f"    for (uint k = 0u; k < {per_word}u; k++) {{\n        uint o = first + k;\n"
        "        if (o >= pc.n) break;\n"
        f"        word |= (encode_out(element(o)) & 0x{mask:x}u) << (k * {out.bits}u);\n    }}\n"
        "    outw[w] = word;"
    )


def invocations(out: DType, n: int) -> int:
    """Invocations a store snippet needs for `n` output elements (one per word or element)."""
    return n if out.bits >= 32 else (n * out.bits + 31) // 32


def buffers(n_inputs: int) -> str:
    """Binding declarations: word buffers ``in0..`` then ``outw`` (no qualifiers: may alias)."""
    lines = [f"layout(set = 0, binding = {k}) buffer In{k} {{ uint in{k}[]; }};"
             for k in range(n_inputs)]  # fmt: skip
    lines.append(f"layout(set = 0, binding = {n_inputs}) buffer Out {{ uint outw[]; }};")
    return "\n".join(lines)


def extensions(*types: GlslType) -> str:
    """The ``#extension`` lines the given types need."""
    lines = sorted({line for t in types for line in t.extensions})
    return "\n".join(lines)


def _check_words(words: list[int], limit: int, label: str) -> np.ndarray:
    if len(words) > limit:
        raise BackendError(f"{label}: {len(words)} push-constant words exceed the limit {limit}")
    return np.array(words + [0] * (limit - len(words)), dtype=np.uint32)


# ---- elementwise ---------------------------------------------------------------------------------
def _elementwise_push(
    in_shapes: Sequence[tuple[int, ...]],
    out_shape: tuple[int, ...],
    params: list[int],
    label: str,
    strides: Sequence[Sequence[int]] | None = None,
    max_rank: int = launch.MAX_RANK,
) -> tuple[np.ndarray, int]:
    if strides is None:
        try:
            strides = [launch.broadcast_strides(s, out_shape) for s in in_shapes]
        except ValueError as exc:
            raise BackendError(f"{label}: {exc}") from None
    # Negative strides (reversed slices) wrap modulo 2^32 like the index sums in the shader.
    strides = [[s % (1 << 32) for s in row] for row in strides]
    shape, collapsed = launch.collapse(out_shape, strides)
    if len(shape) > max_rank:
        raise BackendError(
            f"{label}: broadcast of rank {len(shape)} (after merging contiguous dims) exceeds "
            f"the Vulkan kernels' limit of {max_rank}; run this node on the CPU"
        )
    rank = len(shape)
    n = int(np.prod(out_shape, dtype=np.int64))
    words = [n, rank, *shape, *([1] * (max_rank - rank))]
    for s in collapsed:
        words += [*s, *([0] * (max_rank - rank))]
    if not in_shapes:  # the template declares at least one stride row (ARITY >= 1)
        words += [0] * max_rank
    words += params
    rows = max(1, len(in_shapes))
    return _check_words(words, 2 + max_rank * (1 + rows) + 6, label), n


def _elementwise_source(
    in_dtypes: Sequence[DType],
    out: DType,
    expr: str,
    param_defs: str,
    label: str,
    index_adjust: str = "",
    max_rank: int = launch.MAX_RANK,
    statements: str = "",
) -> str:
    in_types = [glsl_type(d) for d in in_dtypes]
    out_t = glsl_type(out)
    functions = [load_function(f"load{k}", f"in{k}", d) for k, d in enumerate(in_dtypes)]
    functions.append(encode_function("encode_out", out))
    functions.append(f"#define OT {out_t.compute}\n")
    for k, t in enumerate(in_types):
        functions.append(f"#define T{k} {t.compute}\n")
    functions.append(param_defs)
    operands = "\n".join(
        f"    {t.compute} x{k} = load{k}(idx[{k}]);" for k, t in enumerate(in_types)
    ) + ("\n" + statements.rstrip("\n") if statements else "")
    return render(
        "elementwise.comp",
        EXTENSIONS=extensions(*in_types, out_t),
        MAX_RANK=max_rank,
        ARITY=max(1, len(in_dtypes)),
        LOCAL_SIZE=launch.LOCAL_SIZE,
        BUFFERS=buffers(len(in_dtypes)),
        FUNCTIONS="".join(functions),
        OUT_TYPE=out_t.compute,
        OPERANDS=operands,
        EXPR=expr,
        STORE=store_snippet(out),
        INDEX_ADJUST=index_adjust,
    )


def elementwise_kernel(
    op: str,
    in_dtypes: Sequence[DType],
    in_shapes: Sequence[tuple[int, ...]],
    out: DType,
    out_shape: tuple[int, ...],
    params: Mapping[str, Any],
) -> Kernel:
    """The kernel of an op with an expression tree (`OpDef.expr`): the tree printed per
    element by `expressions.render_glsl`, its params in push constants.

    Raises:
        BackendError: no tree for the input's compute family, a function GLSL lacks for
            the type (`expressions.UnsupportedExpr`), or a broadcast too deep for the push
            constants.
    """
    from openinfer_jax.ops import registry  # lazy: importing ops loads JAX

    opdef = registry.get(op)
    label = f"{op}({', '.join(d.short for d in in_dtypes)}) -> {out.short}"
    tree = opdef.expression(in_dtypes, params) if opdef is not None else None
    if tree is None:
        raise BackendError(f"{label}: no Vulkan kernel for {in_dtypes[0].short} inputs")
    printed = render_glsl(tree, [f"x{k}" for k in range(len(in_dtypes))], in_dtypes[0].bits)
    values = opdef.prepared_params(in_dtypes, params)  # type: ignore[union-attr]
    defs = [helper_source(name, ct) for name, ct in printed.helpers]
    words: list[int] = []
    for name, tree_type in printed.params:
        t = glsl_type(tree_type)
        defs.append(param_decl(name, len(words), t))
        words += param_words(values[name], t)
    # A cast of the expression into the output's compute type keeps e.g. `abs` of an i8
    # (computed in int) storable; for same-typed results it is the identity.
    out_t = glsl_type(out)
    body = "".join(f"    {line}\n" for line in printed.statements)
    source = _elementwise_source(in_dtypes, out, f"{out_t.compute}({printed.value})",
                                 "".join(defs), label, statements=body)  # fmt: skip
    push, n = _elementwise_push(in_shapes, out_shape, words, label)
    return Kernel(label, source, push, launch.dispatch_grid(invocations(out, n)), flat=True)


def movement_kernel(
    op: str, dtype: DType, out_shape: tuple[int, ...], strides: Sequence[int], offset: int
) -> Kernel:
    """Reshape/transpose/slice as one strided gather: out[o] = in[offset + sum c_d * s_d].

    Strides may be negative (reversed slices); the sum wraps modulo 2^32 in the shader
    and lands on the right element.
    """
    label = f"{op}({dtype.short})"
    source = _elementwise_source(
        [dtype], dtype, f"{glsl_type(dtype).compute}(x0)", "", label,
        index_adjust="    idx[0] += pc.p[0];",
    )  # fmt: skip
    push, n = _elementwise_push(
        [()], out_shape, [offset % (1 << 32)], label, strides=[list(strides)]
    )
    return Kernel(label, source, push, launch.dispatch_grid(invocations(dtype, n)), flat=True)


def gather_kernel(
    data: DType,
    indices: DType,
    data_shape: tuple[int, ...],
    index_shape: tuple[int, ...],
    axis: int,
) -> Kernel:
    """ONNX Gather (and embedding = gather on axis 0) with the registry's index clamping.

    Output element o splits into (outer, j, inner) over data.shape[:axis], indices.shape,
    data.shape[axis+1:]; it reads data[outer, clamp(indices[j]), inner], where a negative
    index counts from the end and anything still outside [0, size) is clamped.
    """
    axis %= len(data_shape)
    size = data_shape[axis]
    inner = int(np.prod(data_shape[axis + 1 :], dtype=np.int64))
    count = int(np.prod(index_shape, dtype=np.int64))
    out_shape = (*data_shape[:axis], *index_shape, *data_shape[axis + 1 :])
    it = glsl_type(indices)
    ict = it.compute
    if it.family in ("int", "int64"):
        clamp = (
            f"uint(clamp((v < {ict}(0)) ? v + {ict}(size) : v, {ict}(0), {ict}(size) - {ict}(1)))"
        )
    else:
        clamp = f"uint(min(v, {ict}(size) - {ict}(1)))"
    helper = f"uint clamp_index({ict} v, uint size) {{ return {clamp}; }}\n"
    adjust = (
        "    uint inner_i = o % pc.p[0];\n    uint rest_j = o / pc.p[0];\n"
        "    uint j = rest_j % pc.p[1];\n    idx[1] = j;\n"
        "    idx[0] = ((rest_j / pc.p[1]) * pc.p[2] + clamp_index(load1(j), pc.p[2])) * pc.p[0]"
        " + inner_i;"
    )
    label = f"gather({data.short}, {indices.short}, axis={axis})"
    source = _elementwise_source(
        [data, indices], data, f"{glsl_type(data).compute}(x0)", helper, label, index_adjust=adjust
    )
    n = int(np.prod(out_shape, dtype=np.int64))
    push, _ = _elementwise_push([(), ()], (n,), [inner, count, size], label, strides=[[0], [0]])
    return Kernel(label, source, push, launch.dispatch_grid(invocations(data, n)), flat=True)


def slice_layout(in_shape: tuple[int, ...], params: Mapping[str, Any]) -> tuple[list[int], int]:
    """Element strides over the output and the start offset of an ONNX Slice.

    Starts and ends are clamped as the ONNX spec says (negative values count from the end;
    for a negative step the start is clamped to dim-1 and the end to -1).
    """
    strides = list(launch.contiguous_strides(in_shape))
    out = list(strides)
    offset = 0
    starts, ends = params["starts"], params["ends"]
    axes = list(params.get("axes") or range(len(starts)))
    steps = list(params.get("steps") or [1] * len(starts))
    for start, axis, step in zip(starts, axes, steps):
        axis %= len(in_shape)
        dim = in_shape[axis]
        if start < 0:
            start += dim
        start = max(0, min(start, dim)) if step > 0 else max(0, min(start, dim - 1))
        offset += start * strides[axis]
        out[axis] = strides[axis] * step
    del ends  # the output shape (from the registry) already holds the clamped lengths
    return out, offset


# ---- normalizations ----------------------------------------------------------------------------------
_NORM_RANK = 4  # apply kernels bind up to 5 buffers: 2 + 4 * 5 + 6 words stay under 128 bytes


def norm_axes(op: str, ndim: int, axis: int) -> list[int]:
    """The axes a normalization reduces: softmax one axis, the norms axis..ndim-1."""
    axis %= ndim
    return [axis] if op in ("softmax", "log_softmax") else list(range(axis, ndim))


def norm_stats_kernel(op: str, dtype: DType, in_shape: tuple[int, ...], axes: list[int]) -> Kernel:
    """Per-row statistics of a normalization, two per row into an f32 (f64) buffer.

    softmax: (max, sum of exp(x - max)) by the online rescaling; layer_norm: (mean,
    variance) by Welford; rms_norm: (mean of squares, 0). Output element 2r + c is
    component c of row r; the kept dims get an extra innermost dim of 2 with stride 0.
    """
    t = glsl_type(dtype)
    ct = t.compute
    stats = DType.F64 if ct == "double" else DType.F32
    if op in ("softmax", "log_softmax"):
        init = f"    {ct} m = {ct}(-1.0 / 0.0);\n    {ct} s = {ct}(0);"
        step = (f"        if (v > m) {{ s = s * exp(m - v) + {ct}(1); m = v; }}\n"
                f"        else if (v != {ct}(-1.0 / 0.0)) s += exp(v - m);")  # fmt: skip
        # exp(x - max) is NaN in the reference when max is +inf or every x is -inf.
        finish = (f"    if (isinf(m)) s = {ct}(0.0 / 0.0);\n"
                  "    return ((o & 1u) == 0u) ? m : s;")  # fmt: skip
    elif op == "layer_norm":
        init = f"    {ct} mean = {ct}(0);\n    {ct} m2 = {ct}(0);\n    {ct} cnt = {ct}(0);"
        step = (f"        cnt += {ct}(1);\n        {ct} d = v - mean;\n        mean += d / cnt;\n"
                "        m2 += d * (v - mean);")  # fmt: skip
        finish = "    return ((o & 1u) == 0u) ? mean : m2 / cnt;"
    else:
        init = f"    {ct} ss = {ct}(0);"
        step = "        ss += v * v;"
        finish = f"    return ((o & 1u) == 0u) ? ss / {ct}(pc.n_red) : {ct}(0);"
    source = render(
        "reduce.comp",
        EXTENSIONS=extensions(t),
        MAX_RANK=launch.MAX_RANK,
        LOCAL_SIZE=launch.LOCAL_SIZE,
        BUFFERS=buffers(1),
        FUNCTIONS=load_function("load0", "in0", dtype) + encode_function("encode_out", stats),
        OUT_TYPE=ct,
        INIT=init,
        ACC_TYPE=ct,
        LOAD=f"{ct}(load0(i))",
        STEP=step,
        FINISH=finish,
        STORE=store_snippet(stats),
    )
    label = f"{op}-stats({dtype.short}, axes={tuple(axes)})"
    k_shape, k_stride, r_shape, r_stride = _reduce_layout(in_shape, axes)
    k_shape, k_stride = [*k_shape, 2], [*k_stride, 0]
    if len(k_shape) > launch.MAX_RANK or len(r_shape) > launch.MAX_RANK:
        raise BackendError(f"{label}: too many non-contiguous dims for the Vulkan kernel")
    n_red = int(np.prod([in_shape[d] for d in axes], dtype=np.int64))
    n = 2 * int(
        np.prod([in_shape[d] for d in range(len(in_shape)) if d not in axes], dtype=np.int64)
    )
    pad = lambda v, fill: v + [fill] * (launch.MAX_RANK - len(v))  # noqa: E731
    words = [n, len(k_shape), len(r_shape), n_red, *pad(k_shape, 1), *pad(k_stride, 0),
             *pad(r_shape, 1), *pad(r_stride, 0)]  # fmt: skip
    push = _check_words(words, 4 + 4 * launch.MAX_RANK, label)
    return Kernel(label, source, push, launch.dispatch_grid(invocations(stats, n)), flat=True)


def norm_apply_kernel(
    op: str, dtype: DType, in_shapes: Sequence[tuple[int, ...]], axes: list[int], epsilon: float
) -> Kernel:
    """out = f(x, row stats[, scale[, bias]]) with the stats broadcast along the reduced axes."""
    x_shape = in_shapes[0]
    ndim = len(x_shape)
    t = glsl_type(dtype)
    ct = t.compute
    stats = DType.F64 if ct == "double" else DType.F32
    kept = [d for d in range(ndim) if d not in axes]
    kept_strides = dict(zip(kept, launch.contiguous_strides([x_shape[d] for d in kept])))
    stat_strides = [0 if d in axes else 2 * kept_strides[d] for d in range(ndim)]
    strides = [list(launch.contiguous_strides(x_shape)), stat_strides]
    normalized = tuple(x_shape[axes[0] :])
    for shape in in_shapes[1:]:  # scale, bias: broadcast over the normalized dims
        try:
            tail = launch.broadcast_strides(shape, normalized)
        except ValueError as exc:
            raise BackendError(f"{op}: {exc}") from None
        strides.append([0] * (ndim - len(normalized)) + list(tail))
    s0, s1 = "S0", "S1"
    expr = {
        "softmax": f"exp(x0 - {s0}) / {s1}",
        "log_softmax": f"x0 - {s0} - log({s1})",
        "layer_norm": f"(x0 - {s0}) / sqrt({s1} + P_epsilon)",
        "rms_norm": f"x0 / sqrt({s0} + P_epsilon)",
    }[op]
    # operands: x0 = x, x1 = stats (read through S0/S1), x2 = scale, x3 = bias
    if len(in_shapes) > 1:
        expr = f"({expr}) * x2"
    if len(in_shapes) > 2:
        expr = f"{expr} + x3"
    defs = (param_decl("epsilon", 0, t) + f"#define S0 {ct}(load1(idx[1]))\n"
            f"#define S1 {ct}(load1(idx[1] + 1u))\n")  # fmt: skip
    label = f"{op}({dtype.short})"
    in_dtypes = [dtype, stats, *[dtype] * (len(in_shapes) - 1)]
    source = _elementwise_source(
        in_dtypes, dtype, f"{ct}({expr})", defs, label, max_rank=_NORM_RANK
    )
    push, n = _elementwise_push(
        [x_shape, (), *in_shapes[1:]], x_shape, param_words(epsilon, t), label,
        strides=strides, max_rank=_NORM_RANK,
    )  # fmt: skip
    return Kernel(label, source, push, launch.dispatch_grid(invocations(dtype, n)), flat=True)


def fill_kernel(in_dtype: DType, out_shape: tuple[int, ...], value: Any) -> Kernel:
    """``fill``: every element of a `in_dtype` tensor of `out_shape` set to `value`."""
    t = glsl_type(in_dtype)
    label = f"fill({in_dtype.short})"
    stored = _storable_scalar(value, in_dtype)
    source = _elementwise_source([], in_dtype, "P_value", param_decl("value", 0, t), label)
    push, n = _elementwise_push([], out_shape, param_words(stored, t), label)
    return Kernel(label, source, push, launch.dispatch_grid(invocations(in_dtype, n)), flat=True)


def _storable_scalar(value: Any, dtype: DType) -> Any:
    if dtype.is_float:
        return float(value)
    if dtype is DType.BOOL:
        return int(bool(value))
    if isinstance(value, float) and not value.is_integer():
        raise BackendError(f"fill value {value!r} is not a {dtype.short} value")
    return int(value)


# ---- cast ------------------------------------------------------------------------------------------
_ROUND = {"trunc": "trunc", "floor": "floor", "ceil": "ceil", "nearest": "roundEven"}


def _cast_expr(src: DType, dst: DType, rounding: str, saturate: bool) -> str:
    s, d = glsl_type(src), glsl_type(dst)
    x = "x0"
    if dst is DType.BOOL:
        return f"(x0 != {s.compute}(0)) ? 1u : 0u"
    if dst.is_float:
        return f"{d.compute}(x0)"
    low, high = dst.value_range()
    if src is DType.BOOL:  # 0/1, clamped into the target (i1 holds only -1 and 0)
        return f"{d.compute}(min(x0, 0u))" if saturate and high < 1 else f"{d.compute}(x0)"
    if src.is_float:
        r = f"{_ROUND[rounding]}(x0)"
        if rounding == "nearest" and src is DType.F64:
            # lavapipe's roundEven(double) rounds 1.5 and 3.5 down; x0 - floor(x0) is exact.
            fl, half = "floor(x0)", literal(0.5, s)
            r = (f"(((x0 - {fl}) > {half} || ((x0 - {fl}) == {half} && "
                 f"mod({fl}, {literal(2.0, s)}) != {literal(0.0, s)})) ? {fl} + {literal(1.0, s)} : {fl})")  # fmt: skip
        if saturate:
            # low and high + 1 are 0 or powers of two: exact in every float type.
            return (f"isnan(x0) ? {d.compute}(0) : ({r} < {literal(low, s)} ? {literal(low, d)} : "
                    f"({r} >= {literal(high + 1, s)} ? {literal(high, d)} : {d.compute}({r})))")  # fmt: skip
        # Wrap modulo 2^W (W = 64 for 64-bit targets, else 32; the encoder then masks to
        # the width). Below 2^(W-1) in magnitude the value converts exactly to a signed
        # W-bit integer whose bits are the wrapped value; above it, r is a multiple of a
        # large power of two, so r mod 2^W is exact in the float type. ±inf and NaN -> 0.
        wide = dst.bits == 64
        span = 2.0**64 if wide else 2.0**32
        small_t = "int64_t" if wide else "int"
        wrapped = f"(({r}) - {literal(span, s)} * floor(({r}) / {literal(span, s)}))"
        if wide:
            hi = f"floor({wrapped} / {literal(2.0**32, s)})"
            lo = f"({wrapped} - {hi} * {literal(2.0**32, s)})"
            big = f"{d.compute}((uint64_t(uint({hi})) << 32) | uint64_t(uint({lo})))"
        else:
            big = f"{d.compute}(uint({wrapped}))"
        small = f"{d.compute}({small_t}({r}))"
        return (
            f"(isnan(x0) || isinf(x0)) ? {d.compute}(0) : "
            f"((abs({r}) < {literal(span / 2, s)}) ? {small} : {big})"
        )
    # integer -> integer
    if saturate:
        src_low, src_high = src.value_range()
        if low > src_low:
            x = f"max({x}, {literal(low, s)})"
        if high < src_high:
            x = f"min({x}, {literal(high, s)})"
    return f"{d.compute}({x})"


def cast_kernel(
    src: DType, dst: DType, in_shape: tuple[int, ...], rounding: str, saturate: bool
) -> Kernel:
    """``cast`` from `src` to `dst` with the registry's rounding and saturation rules."""
    label = f"cast({src.short} -> {dst.short}, {rounding}, saturate={saturate})"
    expr = _cast_expr(src, dst, rounding, saturate)
    source = _elementwise_source([src], dst, f"{glsl_type(dst).compute}({expr})", "", label)
    push, n = _elementwise_push([in_shape], in_shape, [], label)
    return Kernel(label, source, push, launch.dispatch_grid(invocations(dst, n)), flat=True)


_BIT_VIEWS = {
    (DType.F32, DType.I32): "floatBitsToInt(x0)", (DType.F32, DType.U32): "floatBitsToUint(x0)",
    (DType.I32, DType.F32): "intBitsToFloat(x0)", (DType.U32, DType.F32): "uintBitsToFloat(x0)",
}  # fmt: skip
_SMALL_INTS = (DType.I8, DType.U8, DType.I16, DType.U16, DType.I32, DType.U32)


def bitcast_expr(src: DType, dst: DType) -> str | None:
    """GLSL for ``bitcast`` of compute value x0, or None where there is no kernel (64-bit
    and 16-bit float types). Integer stores keep the low bits, so int -> int is a conversion."""
    if (src, dst) in _BIT_VIEWS:
        return _BIT_VIEWS[(src, dst)]
    if src in _SMALL_INTS and dst in _SMALL_INTS:
        return f"{glsl_type(dst).compute}(x0)"
    if dst is DType.BOOL and src in (DType.I8, DType.U8):
        return f"(x0 != {glsl_type(src).compute}(0)) ? 1u : 0u"
    if src is DType.BOOL and dst in (DType.I8, DType.U8):
        return f"{glsl_type(dst).compute}(x0)"
    return None


def bitcast_kernel(src: DType, dst: DType, in_shape: tuple[int, ...]) -> Kernel:
    """``bitcast``: each element's bits reread as `dst` (see `bitcast_expr`)."""
    expr = bitcast_expr(src, dst)
    if expr is None:
        raise BackendError(f"no Vulkan kernel for bitcast from {src.short} to {dst.short}")
    label = f"bitcast({src.short} -> {dst.short})"
    source = _elementwise_source([src], dst, f"{glsl_type(dst).compute}({expr})", "", label)
    push, n = _elementwise_push([in_shape], in_shape, [], label)
    return Kernel(label, source, push, launch.dispatch_grid(invocations(dst, n)), flat=True)


# ---- reductions -----------------------------------------------------------------------------------
def _reduce_layout(
    in_shape: tuple[int, ...], axes: Sequence[int]
) -> tuple[list[int], list[int], list[int], list[int]]:
    strides = launch.contiguous_strides(in_shape)
    keep = [d for d in range(len(in_shape)) if d not in axes]
    red = [d for d in range(len(in_shape)) if d in axes]
    k_shape, (k_stride,) = launch.collapse(
        [in_shape[d] for d in keep], [[strides[d] for d in keep]]
    )
    r_shape, (r_stride,) = launch.collapse([in_shape[d] for d in red], [[strides[d] for d in red]])
    return list(k_shape), list(k_stride), list(r_shape), list(r_stride)


def reduce_kernel(
    op: str,
    in_dtype: DType,
    in_shape: tuple[int, ...],
    out: DType,
    axes: Sequence[int],
    acc: tuple[DType, DType] | None,
    select_first: bool = True,
) -> Kernel:
    """A ``*_axis`` reduction of `in_shape` over `axes` (non-negative, sorted).

    The accumulator follows the registry: ``acc[0]`` when given; otherwise f32 for
    low-precision floats, the input's own type for sum/prod/max/min of other types, and a
    64-bit integer for the mean of integers (truncating division, as the reference).
    """
    label = f"{op}({in_dtype.short}, axes={tuple(axes)}) -> {out.short}"
    in_t, out_t = glsl_type(in_dtype), glsl_type(out)
    acc_t = glsl_type(acc[0]) if acc is not None else in_t
    act, real = acc_t.compute, acc_t.family in ("float", "double")
    load = f"{act}(load0(i))"
    functions = [load_function("load0", "in0", in_dtype)]
    result_t = out_t
    if op in ("argmax_axis", "argmin_axis"):
        # Indices fit in 32 bits (buffers are < 4 GiB); written as i64 without needing int64.
        functions.append("uvec2 encode_out(uint v) { return uvec2(v, 0u); }\n")
        result_t = glsl_type(DType.U32)
        cmp = ">" if op == "argmax_axis" else "<"
        tie = "" if select_first else "="
        if real:
            # A NaN wins over every number: the first one, or the last with select_first=false.
            better = (
                f"(isnan(v) && !isnan(best)) || (!isnan(best) && v {cmp} best)"
                if select_first
                else f"isnan(v) || (!isnan(best) && v {cmp}= best)"
            )
        else:
            better = f"v {cmp}{tie} best"
        init = f"    {act} best = {load.replace('(i)', '(base)')};\n    uint bi = 0u;"
        step = f"        if (r == 0u || {better}) {{ best = v; bi = r; }}"
        finish = "    return bi;"
    else:
        functions.append(encode_function("encode_out", out))
        start = {"sum_axis": f"{act}(0)", "mean_axis": f"{act}(0)", "prod_axis": f"{act}(1)",
                 "max_axis": load.replace("(i)", "(base)"),
                 "min_axis": load.replace("(i)", "(base)")}[op]  # fmt: skip
        init = f"    {act} s = {start};"
        # NaN propagates through max/min: once s is NaN no comparison replaces it.
        pick = {"max_axis": ">", "min_axis": "<"}.get(op, "")
        step = {
            "sum_axis": "        s += v;",
            "mean_axis": "        s += v;",
            "prod_axis": "        s *= v;",
        }.get(op) or (
            f"        if (isnan(v) || (!isnan(s) && v {pick} s)) s = v;"
            if real
            else f"        s = {'max' if pick == '>' else 'min'}(s, v);"
        )
        if op == "mean_axis" and acc is None and not real and not in_t.is_wide:
            # Exact integer mean without a wider type: sum the quotients and the remainders
            # by the count separately (remainders kept in (-n, n)), then truncate once.
            init = f"    {act} s = {act}(0);\n    {act} rs = {act}(0);\n    {act} cnt = {act}(pc.n_red);"
            step = (
                "        s += v / cnt;\n        rs += v - (v / cnt) * cnt;\n"
                "        if (rs >= cnt) { s += " + act + "(1); rs -= cnt; }"
            )
            if in_t.family == "int" or in_t.family == "int64":
                step += "\n        else if (rs <= -cnt) { s -= " + act + "(1); rs += cnt; }"
                finish = (
                    f"    if (s > {act}(0) && rs < {act}(0)) s -= {act}(1);\n"
                    f"    else if (s < {act}(0) && rs > {act}(0)) s += {act}(1);\n"
                    f"    return {out_t.compute}(s);"
                )
            else:
                finish = f"    return {out_t.compute}(s);"
        elif op == "mean_axis":
            if acc is not None:
                finish = f"    return {out_t.compute}(s) / {out_t.compute}(pc.n_red);"
            else:
                finish = f"    return {out_t.compute}(s / {act}(pc.n_red));"
        else:
            finish = f"    return {out_t.compute}(s);"
    source = render(
        "reduce.comp",
        EXTENSIONS=extensions(in_t, out_t, acc_t),
        MAX_RANK=launch.MAX_RANK,
        LOCAL_SIZE=launch.LOCAL_SIZE,
        BUFFERS=buffers(1),
        FUNCTIONS="".join(functions),
        OUT_TYPE=result_t.compute,
        INIT=init,
        ACC_TYPE=act,
        LOAD=load,
        STEP=step,
        FINISH=finish,
        STORE=store_snippet(out),
    )
    k_shape, k_stride, r_shape, r_stride = _reduce_layout(in_shape, axes)
    n_red = int(np.prod([in_shape[d] for d in axes], dtype=np.int64))
    n = int(np.prod([in_shape[d] for d in range(len(in_shape)) if d not in axes], dtype=np.int64))
    if len(k_shape) > launch.MAX_RANK or len(r_shape) > launch.MAX_RANK:
        raise BackendError(f"{label}: too many non-contiguous axes for the Vulkan kernel")
    pad = lambda v, fill: v + [fill] * (launch.MAX_RANK - len(v))  # noqa: E731
    words = [n, len(k_shape), len(r_shape), n_red, *pad(k_shape, 1), *pad(k_stride, 0),
             *pad(r_shape, 1), *pad(r_stride, 0)]  # fmt: skip
    push = _check_words(words, 4 + 4 * launch.MAX_RANK, label)
    return Kernel(label, source, push, launch.dispatch_grid(invocations(out, n)), flat=True)


# ---- matmul -------------------------------------------------------------------------------------------
def _matmul_dims(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...], out_shape: tuple[int, ...], label: str
) -> tuple[int, int, int, list[int], list[int], list[int]]:
    a2 = (1, *a_shape) if len(a_shape) == 1 else a_shape
    b2 = (*b_shape, 1) if len(b_shape) == 1 else b_shape
    m, k = a2[-2], a2[-1]
    n = b2[-1]
    batch = tuple(out_shape[: len(out_shape) - (2 - (len(a_shape) == 1) - (len(b_shape) == 1))])
    batch = batch[: max(0, len(batch))]
    try:
        a_strides = launch.broadcast_strides(a2[:-2], batch) if batch else ()
        b_strides = launch.broadcast_strides(b2[:-2], batch) if batch else ()
    except ValueError as exc:
        raise BackendError(f"{label}: {exc}") from None
    a_strides = tuple(s * m * k for s in a_strides)
    b_strides = tuple(s * k * n for s in b_strides)
    shape, (sa, sb) = (
        launch.collapse(batch, [a_strides, b_strides]) if batch else ((1,), ((0,), (0,)))
    )
    if len(shape) > 4:
        raise BackendError(f"{label}: more than 4 non-contiguous batch dims; run it on the CPU")
    return m, n, k, list(shape), list(sa), list(sb)


def matmul_kernel(
    a_dtype: DType,
    b_dtype: DType,
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    out: DType,
    out_shape: tuple[int, ...],
    acc: tuple[DType, DType] | None,
    tiles: str = "large",
) -> Kernel:
    """matmul with batch broadcasting.

    f32 x f32 -> f32 takes the tiled shared-memory kernel with tile config `tiles` (a key
    of `MATMUL_TILES`); ``tiles="generic"`` (or any other dtype) takes the one-invocation-
    per-output kernel, which is faster on CPU devices where work-group barriers are slow.
    """
    label = f"matmul({a_dtype.short}, {b_dtype.short}) -> {out.short}"
    m, n, k, batch, sa, sb = _matmul_dims(a_shape, b_shape, out_shape, label)
    batch_count = int(np.prod(batch, dtype=np.int64))
    pad = lambda v, fill: v + [fill] * (4 - len(v))  # noqa: E731
    total = batch_count * m * n
    words = [total, m, n, k, len(batch), *pad(batch, 1), *pad(sa, 0), *pad(sb, 0)]
    push = _check_words(words, 17, label)
    # A tile of BM rows is wasted on a matrix-vector product (decode steps): few rows take
    # the one-invocation-per-output kernel.
    config = tile_config(tiles)
    tiled = config is not None and a_dtype is b_dtype is out is DType.F32 and m >= 8
    if tiled and (acc is None or acc[0] is DType.F32):
        assert config is not None
        bm, bn, bk, tm, tn = config
        source = render("matmul_tiled.comp", BM=bm, BN=bn, BK=bk, TM=tm, TN=tn, VARIANT="")
        if batch_count > 65535:
            raise BackendError(f"{label}: {batch_count} batch matrices exceed the grid limit")
        grid = (math.ceil(n / bn), math.ceil(m / bm), batch_count)
        return Kernel(label + f" [tiled {tiles}]", source, push, grid)
    in_t, out_t = glsl_type(a_dtype), glsl_type(out)
    acc_t = (
        glsl_type(acc[0])
        if acc is not None
        else (glsl_type(DType.F32) if a_dtype.is_float and a_dtype.bits < 32 else in_t)
    )
    functions = [load_function("load0", "in0", a_dtype), load_function("load1", "in1", b_dtype),
                 encode_function("encode_out", out)]  # fmt: skip
    if acc_t.family == "bool":
        finish = "uint(acc != 0u)"
        body_acc = glsl_type(DType.U32)
    else:
        finish = f"{out_t.compute}(acc)"
        body_acc = acc_t
    source = render(
        "matmul.comp",
        EXTENSIONS=extensions(in_t, out_t, acc_t),
        LOCAL_SIZE=launch.LOCAL_SIZE,
        BUFFERS=buffers(2),
        FUNCTIONS="".join(functions),
        OUT_TYPE=out_t.compute,
        ACC_TYPE=body_acc.compute,
        FINISH=finish,
        STORE=store_snippet(out),
    )
    return Kernel(label, source, push, launch.dispatch_grid(invocations(out, total)), flat=True)


# ---- copies ---------------------------------------------------------------------------------------------
def copy_kernel(dtype: DType, src_offset: int, dst_offset: int, count: int) -> Kernel:
    """Copy `count` elements of `dtype` from element `src_offset` to element `dst_offset`."""
    bits, scale = (32, 2) if dtype.bits == 64 else (dtype.bits, 1)
    src_offset, dst_offset, count = src_offset * scale, dst_offset * scale, count * scale
    per_word = 32 // bits
    first_word = (dst_offset * bits) // 32
    last_word = ((dst_offset + count) * bits - 1) // 32 if count else first_word
    source = render("copy.comp", BITS=bits, LOCAL_SIZE=launch.LOCAL_SIZE)
    push = np.array([count, src_offset, dst_offset, first_word], dtype=np.uint32)
    words = last_word - first_word + 1
    del per_word
    return Kernel(f"copy({dtype.short})", source, push, launch.dispatch_grid(words), flat=True)


def op_kernel(
    op: str,
    dtypes: Sequence[DType],
    shapes: Sequence[tuple[int, ...]],
    params: Mapping[str, Any],
    out: DType,
    out_shape: tuple[int, ...],
    tiles: str,
) -> Kernel:
    """The one kernel of a single-dispatch op: an op with an expression tree, gathers,
    movement, cast, fill, matmul and the reductions.

    `openinfer_jax.vk.selection.plan` calls this for both the simulator backend and the
    emitted Vulkan target, so they run the same GLSL. Normalizations and the model-building
    ops (`nn_kernels.nn_plan`) take several dispatches and are planned there.

    Raises:
        BackendError: no kernel for these dtypes/params (the message says which).
    """
    if op == "fill":
        return fill_kernel(dtypes[0], out_shape, params["value"])
    if op not in _STRUCTURED:  # an op with an expression tree
        return elementwise_kernel(op, dtypes, shapes, out, out_shape, params)
    if op in GATHERS:
        axis = int(params.get("axis", 0)) if op == "gather" else 0
        return gather_kernel(dtypes[0], dtypes[1], shapes[0], shapes[1], axis)
    if op in MOVEMENT:
        in_shape = shapes[0]
        if op == "reshape":
            strides, offset = list(launch.contiguous_strides(out_shape)), 0
        elif op == "slice":
            strides, offset = slice_layout(in_shape, params)
        else:
            perm = list(params.get("perm") or reversed(range(len(in_shape))))
            own = launch.contiguous_strides(in_shape)
            strides, offset = [own[p % len(in_shape)] for p in perm], 0
        return movement_kernel(op, dtypes[0], out_shape, strides, offset)
    if op == "bitcast":
        return bitcast_kernel(dtypes[0], out, shapes[0])
    if op == "cast":
        return cast_kernel(
            dtypes[0], out, shapes[0], params["rounding_mode"], bool(params["saturate"])
        )
    if op == "matmul":
        return matmul_kernel(dtypes[0], dtypes[1], shapes[0], shapes[1], out, out_shape,
                             params.get("acc"), tiles)  # fmt: skip
    ndim = len(shapes[0])
    if op in ("argmax_axis", "argmin_axis"):
        axes = [params["axis"] % ndim] if ndim else []
        first = bool(params.get("select_first", True))
    else:
        axes = sorted({a % ndim for a in params.get("axes", ())}) if ndim else []
        if not axes:
            axes = list(range(ndim))
        first = True
    return reduce_kernel(op, dtypes[0], shapes[0], out, axes, params.get("acc"), first)
