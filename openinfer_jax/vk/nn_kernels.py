"""Kernel generation for the model-building ops: attention, rope, linear, conv, pools, pad...

The same contract as `kernels.py`: pure functions of op, dtypes, static params and shapes
that return GLSL sources, push-constant words and grids; sources depend only on dtypes and
static params (pad mode, bias present, mask kind, interleaving), shapes go to the push
constants. Some ops need more than one dispatch or a buffer besides their inputs (rope's
inverse frequencies, attention's f32 result before it is rounded to a narrow dtype), so the
entry point `nn_plan` returns an `NnPlan`: dispatches whose bindings name inputs, the output,
scratch tensors and host constants. The backend allocates and binds them (backend.py); the
C/Vulkan emitter (emit/vk_kernels.py) reuses the same plans.

Families, by template (shaders/):

* nn.comp         one invocation per output word, the element function generated per op:
                  linear (generic path), rope, conv1d/conv2d (direct), max/avg pool, pad,
                  concat, and the merge of split attention's partials;
* elementwise.comp batch_norm (the per-channel vectors broadcast by strides);
* reduce.comp     global_average_pool (``mean_axis`` over the spatial dims);
* matmul_tiled.comp linear in f32 with at least 8 rows (w read as [N, K], bias epilogue);
* conv_tiled.comp  conv1d/conv2d in f32 with 8+ output channels per group (implicit GEMM);
* attention.comp  one work group per (batch, head, query) row, two passes over the keys
                  (decode steps, few queries); on GPUs long caches are split into key
                  ranges, one work group each, merged by a second kernel;
* attention_tiled.comp blocks of 16 queries x chunks of 16 keys through shared memory with
                  an online softmax (prefills).

Every kernel computes low-precision floats in f32 and f64 in double, and rounds once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import BackendError
from openinfer_jax.vk import launch
from openinfer_jax.vk.compiler import render
from openinfer_jax.vk.glsl import encode_function, glsl_type, load_function
from openinfer_jax.vk.kernels import (
    Kernel,
    _check_words,
    _elementwise_push,
    _elementwise_source,
    _storable_scalar,
    buffers,
    cast_kernel,
    copy_kernel,
    extensions,
    invocations,
    literal,
    param_decl,
    param_words,
    reduce_kernel,
    store_snippet,
    tile_config,
)

__all__ = [
    "NN_OPS",
    "READS_NEIGHBOURS",
    "Binding",
    "Dispatch",
    "NnPlan",
    "attention_kernel",
    "attention_merge_kernel",
    "attention_splits",
    "batch_norm_kernel",
    "concat_kernel",
    "conv_kernel",
    "linear_kernel",
    "nn_plan",
    "pad_kernel",
    "pool_kernel",
    "rope_inv_freq",
    "rope_kernel",
    "unsupported_reason",
]

NN_OPS = ("attention", "avg_pool", "max_pool", "global_average_pool", "batch_norm", "concat",
          "conv1d", "conv2d", "linear", "pad", "rope")  # fmt: skip
#: Ops whose output elements read input elements other than their own: an in-place call
#: computes into a scratch tensor, then a copy dispatch moves it (`nn_plan(inplace=True)`).
READS_NEIGHBOURS = frozenset({"rope"})
MAX_CONCAT_INPUTS = 8  # bindings per dispatch: Vulkan guarantees few storage buffers per stage
MAX_POOL_DIMS = 3
ATTENTION_GROUP = 64  # invocations per attention row
ATTENTION_COLS = 4  # output columns per invocation: head dims of v up to 256
# The tiled (FlashAttention-like) kernel: blocks of 16 queries share each chunk of K/V in
# shared memory; it takes prefills (8+ queries) with head dims up to 128 (shared memory:
# about 25 KiB, under the 32 KiB of lavapipe).
ATTENTION_TILED_MIN_QUERIES = 8
# Split decode steps (few rows) over key ranges of this many keys, at most this many ranges.
ATTENTION_SPLIT_ROWS = 64
ATTENTION_SPLIT_KEYS = 256
ATTENTION_MAX_SPLITS = 32
ATTENTION_TILED_DIM = 128
# Qs[16][128] + Ks[16][129] + Vs[16][128] + S[16][16] floats (Vulkan guarantees only 16 KiB)
ATTENTION_TILED_SHARED = 4 * (16 * 128 + 16 * 129 + 16 * 128 + 16 * 16)
_PUSH_WORDS = 32  # nn.comp: n + p[31], the 128-byte minimum of every Vulkan device


@dataclass(frozen=True)
class Binding:
    """One buffer of a dispatch: ``input`` k, the ``output``, ``scratch`` k or ``constant`` k."""

    kind: Literal["input", "output", "scratch", "constant"]
    index: int = 0


@dataclass(frozen=True)
class Dispatch:
    """A kernel and the buffers it binds, in binding order."""

    kernel: Kernel
    bindings: tuple[Binding, ...]


@dataclass(frozen=True)
class NnPlan:
    """The dispatches of one op call, with the scratch tensors and host constants they use.

    `scratch` holds (dtype, shape) of tensors the backend allocates; `constants` holds
    (dtype, host array) of small tensors it uploads (and may cache).
    """

    dispatches: tuple[Dispatch, ...]
    scratch: tuple[tuple[DType, tuple[int, ...]], ...] = ()
    constants: tuple[tuple[DType, np.ndarray], ...] = ()


def _inputs(count: int) -> tuple[Binding, ...]:
    return tuple(Binding("input", k) for k in range(count))


_OUT = Binding("output")


def _acc_type(dtype: DType) -> str:
    """The compute type of a float op: f32 for f32 and narrower, double for f64."""
    return "double" if dtype is DType.F64 else "float"


def _nn_kernel(
    label: str,
    in_dtypes: Sequence[DType],
    out: DType,
    body: str,
    words: Sequence[int],
    functions: str = "",
) -> Kernel:
    """A kernel of nn.comp: `body` is the element function's body, `words` = [n, p...]."""
    in_types = [glsl_type(d) for d in in_dtypes]
    out_t = glsl_type(out)
    loads = [load_function(f"load{k}", f"in{k}", d) for k, d in enumerate(in_dtypes)]
    source = render(
        "nn.comp",
        EXTENSIONS=extensions(*in_types, out_t),
        LOCAL_SIZE=launch.LOCAL_SIZE,
        BUFFERS=buffers(len(in_dtypes)),
        FUNCTIONS="".join(loads) + encode_function("encode_out", out) + functions,
        OUT_TYPE=out_t.compute,
        BODY=body,
        STORE=store_snippet(out),
    )
    push = _check_words([int(w) % (1 << 32) for w in words], _PUSH_WORDS, label)
    return Kernel(
        label, source, push, launch.dispatch_grid(invocations(out, int(words[0]))), flat=True
    )


def _numel(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


# ---- linear --------------------------------------------------------------------------------------
def linear_kernel(
    dtype: DType,
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    has_bias: bool,
    tiles: str = "large",
) -> Kernel:
    """``x @ w^T (+ bias)`` with w [N, K]: the tiled f32 path for 8+ rows, else one dot per output.

    The generic path accumulates in f32 (double for f64) over k in order, adds the bias and
    rounds once to the storage dtype.
    """
    n_out, k = w_shape
    rows = _numel(x_shape[:-1])
    label = f"linear({dtype.short}{', bias' if has_bias else ''})"
    config = tile_config(tiles)
    if dtype is DType.F32 and config is not None and rows >= 8:
        bm, bn, bk, tm, tn = config
        variant = "#define B_TRANSPOSED\n" + ("#define HAS_BIAS\n" if has_bias else "")
        source = render("matmul_tiled.comp", BM=bm, BN=bn, BK=bk, TM=tm, TN=tn, VARIANT=variant)
        words = [rows * n_out, rows, n_out, k, 0, 1, 1, 1, 1]
        push = _check_words(words, 17, label)
        grid = (math.ceil(n_out / bn), math.ceil(rows / bm), 1)
        return Kernel(label + f" [tiled {tiles}]", source, push, grid)
    acc = _acc_type(dtype)
    bias = f"    acc += {acc}(load2(col));\n" if has_bias else ""
    body = (
        "    uint k = pc.p[0];\n    uint col = o % pc.p[1];\n    uint row = o / pc.p[1];\n"
        f"    {acc} acc = {acc}(0);\n"
        "    for (uint t = 0u; t < k; t++)\n"
        f"        acc += {acc}(load0(row * k + t)) * {acc}(load1(col * k + t));\n"
        f"{bias}    return {glsl_type(dtype).compute}(acc);"
    )
    dtypes = [dtype] * (3 if has_bias else 2)
    return _nn_kernel(label, dtypes, dtype, body, [rows * n_out, k, n_out])


# ---- rope ------------------------------------------------------------------------------------------
# sin and cos of an f32 angle to about one ulp: Cody-Waite reduction by pi/2 with a three-part
# constant, then the minimax polynomials of the Cephes library on [-pi/4, pi/4]. The driver's
# sin/cos are only specified to 2^-11 absolute error on [-pi, pi] in Vulkan, and positions
# reach thousands of radians.
_SINCOS = """
vec2 sincos_f32(float x) {
    precise float j = roundEven(x * 0.63661977236758134);  // 2/pi
    precise float r = ((x - j * 1.5703125) - j * 4.8375129699707031e-4) - j * 7.5497899548918821e-8;
    precise float z = r * r;
    precise float s = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    precise float c = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z
                       + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
    int q = int(j) & 3;
    if (q == 0) return vec2(s, c);
    if (q == 1) return vec2(c, -s);
    if (q == 2) return vec2(-s, -c);
    return vec2(-c, s);
}
"""


def rope_inv_freq(theta: float, rotary_dim: int) -> np.ndarray:
    """f32 ``theta^(-2i/rotary_dim)``: computed in f64 and rounded, as the reference does."""
    exponents = np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim
    return np.power(np.float64(theta), -exponents).astype(np.float32)


def rope_kernel(
    dtype: DType, positions: DType, x_shape: tuple[int, ...], scalar_positions: bool,
    rotary_dim: int, interleaved: bool,
) -> Kernel:  # fmt: skip
    """Rotary embedding of x [..., seq, head_dim]; bindings x, positions, inv_freq (f32), out.

    The angle is ``f32(position) * inv_freq[i]`` (one f32 rounding, like the reference);
    pairs are (i, i + rot/2) or, interleaved, (2i, 2i+1); dims past `rotary_dim` are copied.
    """
    if dtype is DType.F64:
        raise BackendError("rope: no Vulkan kernel for f64 inputs (GLSL's sin/cos take no doubles)")
    seq, head_dim = x_shape[-2], x_shape[-1]
    rot = rotary_dim or head_dim
    pt = glsl_type(positions)
    pair = (
        "    uint i = d >> 1;\n    uint ia = base + 2u * i;\n    uint ib = ia + 1u;\n"
        "    bool second = (d & 1u) == 1u;\n"
        if interleaved
        else "    uint halfr = rot >> 1;\n    bool second = d >= halfr;\n"
        "    uint i = second ? d - halfr : d;\n    uint ia = base + i;\n    uint ib = ia + halfr;\n"
    )
    ct = pt.compute
    body = (
        "    uint seq = pc.p[0];\n    uint hd = pc.p[1];\n    uint rot = pc.p[2];\n"
        "    uint d = o % hd;\n    uint s = (o / hd) % seq;\n    uint base = o - d;\n"
        "    if (d >= rot) return float(load0(o));\n"
        f"{pair}"
        f"    {ct} pos = (pc.p[3] != 0u) ? load1(0u) + {ct}(s) : load1(s);\n"
        "    vec2 sc = sincos_f32(float(pos) * uintBitsToFloat(in2[i]));\n"
        "    float a = float(load0(ia));\n    float b = float(load0(ib));\n"
        "    return second ? a * sc.x + b * sc.y : a * sc.y - b * sc.x;"
    )
    label = f"rope({dtype.short}, {positions.short}{', interleaved' if interleaved else ''})"
    words = [_numel(x_shape), seq, head_dim, rot, int(scalar_positions)]
    return _nn_kernel(label, [dtype, positions, DType.F32], dtype, body, words, _SINCOS)


# ---- attention ------------------------------------------------------------------------------------
def _mask_strides(
    mask_shape: tuple[int, ...], q_shape: tuple[int, ...], skv: int, label: str
) -> list[int]:
    """Mask element strides along (flattened batch, head, query, key)."""
    target = (*q_shape[:-1], skv)
    try:
        strides = launch.broadcast_strides(mask_shape, target)
    except ValueError as exc:
        raise BackendError(f"{label}: {exc}") from None
    batch = q_shape[:-3]
    if batch:
        shape, (batch_strides,) = launch.collapse(batch, [strides[: len(batch)]])
        if len(shape) > 1:
            raise BackendError(
                f"{label}: the mask broadcasts over the batch dims {batch} in a way that does "
                "not flatten to one stride; run this node on the CPU"
            )
        batch_stride = batch_strides[0] if shape[0] == _numel(batch) else 0
    else:
        batch_stride = 0
    return [batch_stride, *strides[len(batch) :]]


def attention_kernel(
    dtype: DType,
    mask: DType | None,
    shapes: Sequence[tuple[int, ...]],
    causal: bool,
    scale: float,
    shared_memory: int = 32768,
    splits: int = 1,
    kv_dtype: DType | None = None,
) -> Kernel:
    """The attention dispatch: bindings q, k, v[, mask], then f32 words of the result.

    `dtype` is q's, `kv_dtype` k's and v's (None: q's), e.g. an f16 cache read by f32
    queries: each input is loaded in its own type and the math runs in f32.

    Prefills take the tiled kernel when the device has `shared_memory` bytes for it
    (`ATTENTION_TILED_SHARED`), decode steps and large head dims the row kernel. With
    `splits` > 1 (row kernel only) each row's keys are split into that many ranges, one
    work group each, and the result is the partials `attention_merge_kernel` combines:
    per (row, range) its max, its sum of exp and its dv unnormalized outputs.

    Raises:
        BackendError: f64 inputs (no double exp in GLSL), a v head dim above
            ATTENTION_GROUP * ATTENTION_COLS, or a mask broadcast that does not flatten.
    """
    kv = kv_dtype or dtype
    kv_label = f"/{kv.short}" if kv is not dtype else ""
    label = f"attention({dtype.short}{kv_label}{', ' + mask.short + ' mask' if mask else ''})"
    if DType.F64 in (dtype, kv):
        raise BackendError(
            "attention: no Vulkan kernel for f64 inputs (GLSL's exp takes no doubles)"
        )
    q, k, v = shapes[:3]
    hq, sq, d = q[-3:]
    hkv, skv = k[-3], k[-2]
    dv = v[-1]
    if dv > ATTENTION_GROUP * ATTENTION_COLS:
        raise BackendError(
            f"{label}: v head dim {dv} exceeds the kernel's {ATTENTION_GROUP * ATTENTION_COLS}; "
            "this node runs on the CPU"
        )
    rows = _numel(q[:-1])
    strides = _mask_strides(shapes[3], q, skv, label) if mask is not None else [0, 0, 0, 0]
    in_dtypes = [dtype, kv, kv] + ([mask] if mask is not None else [])
    functions = "".join(load_function(f"load{i}", f"in{i}", t) for i, t in enumerate(in_dtypes))
    mask_at = "load3(m_base + j * pc.m_key)"
    heads = rows // sq if sq else 0
    tiled = sq >= ATTENTION_TILED_MIN_QUERIES and max(d, dv) <= ATTENTION_TILED_DIM
    tiled = tiled and heads <= 65535 and shared_memory >= ATTENTION_TILED_SHARED
    tiled = tiled and splits == 1
    select = add = ""
    if tiled:
        if mask is DType.BOOL:
            select = f"            if (visible && {mask_at} == 0u) visible = false;"
        elif mask is not None:
            add = f"                s += float({mask_at});"
        source = render(
            "attention_tiled.comp",
            EXTENSIONS=extensions(*(glsl_type(t) for t in in_dtypes)),
            MAXD=ATTENTION_TILED_DIM,
            COLS=ATTENTION_TILED_DIM // 4,
            BUFFERS=buffers(len(in_dtypes)),
            FUNCTIONS=functions,
            MASK_SELECT=select,
            MASK_ADD=add,
        )
        grid = (math.ceil(sq / 16), heads, 1)
        label += " [tiled]"
        push_words = 13
    else:
        if mask is DType.BOOL:
            select = f"    if ({mask_at} == 0u) return NEG_INF;"
        elif mask is not None:
            add = f"    acc += float({mask_at});"
        source = render(
            "attention.comp",
            EXTENSIONS=extensions(*(glsl_type(t) for t in in_dtypes)),
            WG=ATTENTION_GROUP,
            COLS=ATTENTION_COLS,
            BUFFERS=buffers(len(in_dtypes)),
            FUNCTIONS=functions,
            MASK_SELECT=select,
            MASK_ADD=add,
            VARIANT="#define SPLIT" if splits > 1 else "",
        )
        grid = launch.dispatch_grid(rows * splits, 1)
        push_words = 15
        if splits > 1:
            label += f" [{splits} key ranges]"
    scale_bits = int(np.float32(scale).view(np.uint32))
    chunk = math.ceil(skv / splits) if splits > 1 else skv
    words = [rows, hq, sq, skv, d, dv, hq // hkv, int(causal), scale_bits, *strides, splits, chunk]
    push = _check_words([w % (1 << 32) for w in words[:push_words]], push_words, label)
    # The row kernel's groups past `rows` return at once (pc.rows); the tiled grid is exact.
    return Kernel(label, source, push, grid, flat=not tiled)


def attention_splits(shapes: Sequence[tuple[int, ...]]) -> int:
    """Key ranges per row for a decode step: > 1 when few rows would leave a GPU idle.

    Rows (batch x heads x queries) below ATTENTION_SPLIT_ROWS with fewer queries than the
    tiled kernel takes and at least two ranges of ATTENTION_SPLIT_KEYS keys get
    ceil(Skv / ATTENTION_SPLIT_KEYS) ranges, at most ATTENTION_MAX_SPLITS.
    """
    q, k = shapes[0], shapes[1]
    rows, sq, skv = _numel(q[:-1]), q[-2], k[-2]
    if rows >= ATTENTION_SPLIT_ROWS or sq >= ATTENTION_TILED_MIN_QUERIES:
        return 1
    if skv < 2 * ATTENTION_SPLIT_KEYS:
        return 1
    return min(ATTENTION_MAX_SPLITS, math.ceil(skv / ATTENTION_SPLIT_KEYS))


def attention_merge_kernel(out: DType, rows: int, dv: int, splits: int) -> Kernel:
    """Merge the key-range partials of split attention into the output (any float dtype).

    out[row, c] = sum_r exp(m_r - M) acc_r[c] / sum_r exp(m_r - M) s_r with M the largest
    m_r; ranges with nothing visible (m_r = -inf) weigh 0, a row with none gives 0.
    """
    ct = glsl_type(out).compute
    body = (
        "    uint dv = pc.p[0];\n    uint splits = pc.p[1];\n"
        "    uint row = o / dv;\n    uint c = o % dv;\n    uint base = row * splits * (dv + 2u);\n"
        "    float top = -1.0 / 0.0;\n"
        "    for (uint r = 0u; r < splits; r++) top = max(top, load0(base + r * (dv + 2u)));\n"
        f"    if (top == -1.0 / 0.0) return {ct}(0);\n"
        "    float total = 0.0;\n    float acc = 0.0;\n"
        "    for (uint r = 0u; r < splits; r++) {\n"
        "        uint part = base + r * (dv + 2u);\n        float m = load0(part);\n"
        "        if (m == -1.0 / 0.0) continue;\n        float w = exp(m - top);\n"
        "        total += w * load0(part + 1u);\n        acc += w * load0(part + 2u + c);\n"
        "    }\n"
        f"    return {ct}(total > 0.0 ? acc / total : 0.0);"
    )
    label = f"attention-merge({out.short})"
    return _nn_kernel(label, [DType.F32], out, body, [rows * dv, dv, splits])


# ---- data movement -----------------------------------------------------------------------------------
def concat_kernel(dtype: DType, shapes: Sequence[tuple[int, ...]], axis: int) -> Kernel:
    """Concatenation of up to MAX_CONCAT_INPUTS non-empty inputs in one pass over the output.

    Output element o splits into (outer, r) with r < total * inner; input k owns r in
    [end_{k-1}, end_k) and holds it at outer * (end_k - end_{k-1}) + r - end_{k-1}.
    """
    count = len(shapes)
    if count > MAX_CONCAT_INPUTS:
        raise BackendError(
            f"concat: {count} inputs exceed the kernel's {MAX_CONCAT_INPUTS}; run it on the CPU "
            "or concatenate in stages"
        )
    first = shapes[0]
    axis %= len(first)
    inner = _numel(first[axis + 1 :])
    ends = list(np.cumsum([s[axis] * inner for s in shapes]))
    ct = glsl_type(dtype).compute
    lines = ["    uint outer = o / pc.p[0];\n    uint r = o % pc.p[0];"]
    for k in range(count):
        start = "0u" if k == 0 else f"pc.p[{k}]"
        read = f"load{k}(outer * (pc.p[{k + 1}] - {start}) + r - {start})"
        if k < count - 1:
            lines.append(f"    if (r < pc.p[{k + 1}]) return {ct}({read});")
        else:
            lines.append(f"    return {ct}({read});")
    out_shape = (*first[:axis], sum(s[axis] for s in shapes), *first[axis + 1 :])
    words = [_numel(out_shape), ends[-1], *ends]
    return _nn_kernel(f"concat({dtype.short} x{count})", [dtype] * count, dtype,
                      "\n".join(lines), words)  # fmt: skip


_PAD_MODES = {
    "constant": "        if (q < 0 || q >= size) inside = false;",
    "edge": "        q = clamp(q, 0, size - 1);",
    # GLSL leaves % of negative operands undefined: fold negatives by hand.
    "wrap": "        q = (q < 0) ? size - 1 - ((-q - 1) % size) : q % size;",
    "reflect": (
        "        int period = (size > 1) ? 2 * (size - 1) : 1;\n"
        "        int f = abs(q) % period;\n        q = (f >= size) ? period - f : f;"
    ),
}


def pad_kernel(
    dtype: DType, in_shape: tuple[int, ...], widths: Sequence[tuple[int, int]], mode: str,
    value: Any,
) -> Kernel:  # fmt: skip
    """ONNX Pad: each output coordinate maps to a source coordinate per the mode's rule.

    Push words: rank, out shape[6], in shape[6], begin pads[6], then the constant's bits.
    """
    rank = len(in_shape)
    label = f"pad({dtype.short}, {mode})"
    if rank > launch.MAX_RANK:
        raise BackendError(f"{label}: rank {rank} exceeds the kernel's {launch.MAX_RANK}")
    t = glsl_type(dtype)
    out_shape = [d + b + e for d, (b, e) in zip(in_shape, widths)]
    r = launch.MAX_RANK
    body = (
        "    uint rest = o;\n    uint src = 0u;\n    uint step = 1u;\n    bool inside = true;\n"
        "    for (int d = int(pc.p[0]) - 1; d >= 0; d--) {\n"
        "        uint c = rest % pc.p[1 + d];\n        rest /= pc.p[1 + d];\n"
        f"        int size = int(pc.p[{1 + r} + d]);\n"
        f"        int q = int(c) - int(pc.p[{1 + 2 * r} + d]);\n"
        f"{_PAD_MODES[mode]}\n"
        "        src += uint(max(q, 0)) * step;\n        step *= uint(size);\n    }\n"
        + ("    if (!inside) return P_value;\n" if mode == "constant" else "")
        + f"    return {t.compute}(load0(src));"
    )
    pad_to = lambda v, fill: list(v) + [fill] * (r - len(v))  # noqa: E731
    words = [_numel(out_shape), rank, *pad_to(out_shape, 1), *pad_to(in_shape, 1),
             *pad_to([b for b, _ in widths], 0)]  # fmt: skip
    functions = ""
    if mode == "constant":
        functions = param_decl("value", len(words) - 1, t)
        words += param_words(_storable_scalar(value, dtype), t)
    return _nn_kernel(label, [dtype], dtype, body, words, functions)


# ---- normalization and convolution ----------------------------------------------------------------
def batch_norm_kernel(dtype: DType, x_shape: tuple[int, ...], epsilon: float) -> Kernel:
    """``scale * (x - mean) / sqrt(var + eps) + bias`` per channel (axis 1), the reference's order.

    The elementwise template with the four [C] vectors broadcast by strides (0 except along
    the channel axis); each invocation reads only its own elements, so in-place is safe.
    """
    t = glsl_type(dtype)
    label = f"batch_norm({dtype.short})"
    channel = [0] * len(x_shape)
    channel[1] = 1
    strides = [list(launch.contiguous_strides(x_shape))] + [channel] * 4
    expr = f"{t.compute}(((x1 * (x0 - x3)) / sqrt(x4 + P_epsilon)) + x2)"
    source = _elementwise_source([dtype] * 5, dtype, expr, param_decl("epsilon", 0, t), label,
                                 max_rank=4)  # fmt: skip
    push, n = _elementwise_push([x_shape] * 5, x_shape, param_words(epsilon, t), label,
                                strides=strides, max_rank=4)  # fmt: skip
    return Kernel(label, source, push, launch.dispatch_grid(invocations(dtype, n)), flat=True)


def _spatial(values: Sequence[int], count: int, fill: int) -> list[int]:
    """Spatial values padded at the front to `count` dims (a 1-d op is 2-d with height 1)."""
    return [fill] * (count - len(values)) + list(values)


def conv_kernel(
    dtype: DType, x_shape: tuple[int, ...], w_shape: tuple[int, ...], has_bias: bool,
    strides: Sequence[int], pads: Sequence[int], dilations: Sequence[int], groups: int,
    out_shape: tuple[int, ...], tiles: str = "large",
) -> Kernel:  # fmt: skip
    """ONNX Conv; conv1d runs as conv2d with height 1.

    f32 with 8+ output channels per group: an implicit GEMM on `conv_tiled.comp` with tile
    config `tiles` (``"generic"`` turns it off). Otherwise direct convolution, one output
    element per invocation, accumulating in f32 (double for f64) over the group's channels,
    then kernel rows and columns, skipping taps in the padding; the bias is added and the
    result rounded once.
    """
    spatial = len(x_shape) - 2
    label = f"conv{spatial}d({dtype.short}{', bias' if has_bias else ''})"
    acc = _acc_type(dtype)
    h, w = _spatial(x_shape[2:], 2, 1)
    kh, kw = _spatial(w_shape[2:], 2, 1)
    oh, ow = _spatial(out_shape[2:], 2, 1)
    sh, sw = _spatial(strides, 2, 1)
    ph, pw = _spatial(pads[:spatial], 2, 0)
    dh, dw = _spatial(dilations, 2, 1)
    words = [_numel(out_shape), x_shape[1], h, w, w_shape[0], oh, ow, kh, kw, sh, sw, ph, pw,
             dh, dw, groups]  # fmt: skip
    config = tile_config(tiles)
    per_group = w_shape[0] // groups
    if dtype is DType.F32 and config is not None and per_group >= 8:
        # An implicit GEMM per (batch, group); too few output channels per group (depthwise)
        # would leave most of a BM-row tile idle, so those take the direct kernel.
        bm, bn, bk, tm, tn = config
        variant = "#define HAS_BIAS\n" if has_bias else ""
        source = render("conv_tiled.comp", BM=bm, BN=bn, BK=bk, TM=tm, TN=tn, VARIANT=variant)
        batches = x_shape[0] * groups
        if batches > 65535:
            raise BackendError(f"{label}: {batches} (batch, group) pairs exceed the grid limit")
        grid = (math.ceil(oh * ow / bn), math.ceil(per_group / bm), batches)
        return Kernel(label + f" [tiled {tiles}]", source, _check_words(words, 16, label), grid)
    body = (
        "    uint C = pc.p[0], H = pc.p[1], W = pc.p[2], M = pc.p[3], OH = pc.p[4], OW = pc.p[5];\n"
        "    uint KH = pc.p[6], KW = pc.p[7], G = pc.p[14];\n"
        "    uint ox = o % OW;\n    uint t = o / OW;\n    uint oy = t % OH;\n    t /= OH;\n"
        "    uint m = t % M;\n    uint nb = t / M;\n"
        "    uint cg = C / G;\n    uint g = m / (M / G);\n"
        f"    {acc} acc = {acc}(0);\n"
        "    for (uint ci = 0u; ci < cg; ci++) {\n"
        "        uint xb = (nb * C + g * cg + ci) * H * W;\n"
        "        uint wb = (m * cg + ci) * KH * KW;\n"
        "        for (uint ky = 0u; ky < KH; ky++) {\n"
        "            int iy = int(oy * pc.p[8] + ky * pc.p[12]) - int(pc.p[10]);\n"
        "            if (iy < 0 || iy >= int(H)) continue;\n"
        "            for (uint kx = 0u; kx < KW; kx++) {\n"
        "                int ix = int(ox * pc.p[9] + kx * pc.p[13]) - int(pc.p[11]);\n"
        "                if (ix < 0 || ix >= int(W)) continue;\n"
        f"                acc += {acc}(load0(xb + uint(iy) * W + uint(ix))) * "
        f"{acc}(load1(wb + ky * KW + kx));\n"
        "            }\n        }\n    }\n"
        + (f"    acc += {acc}(load2(m));\n" if has_bias else "")
        + f"    return {glsl_type(dtype).compute}(acc);"
    )
    dtypes = [dtype] * (3 if has_bias else 2)
    return _nn_kernel(label, dtypes, dtype, body, words)


def pool_kernel(
    op: str, dtype: DType, x_shape: tuple[int, ...], out_shape: tuple[int, ...],
    kernel_shape: Sequence[int], strides: Sequence[int], pads: Sequence[int],
    dilations: Sequence[int], count_include_pad: bool = False,
) -> Kernel:  # fmt: skip
    """max_pool / avg_pool over 1 to 3 spatial dims (fewer run as 3-d with leading 1s).

    Only taps inside the input are visited: max_pool starts from the type's lowest value
    (a window always holds a real element), avg_pool divides by the real taps, or by the
    whole window with `count_include_pad`. NaN wins in max_pool, like np.maximum.
    """
    spatial = len(x_shape) - 2
    label = f"{op}({dtype.short}, {spatial}d)"
    if not 1 <= spatial <= MAX_POOL_DIMS:
        raise BackendError(
            f"{label}: {spatial} spatial dims; the kernel takes 1 to {MAX_POOL_DIMS}"
        )
    t = glsl_type(dtype)
    r = MAX_POOL_DIMS
    ins = _spatial(x_shape[2:], r, 1)
    outs = _spatial(out_shape[2:], r, 1)
    ks = _spatial(kernel_shape, r, 1)
    ss = _spatial(strides, r, 1)
    ps = _spatial(pads[:spatial], r, 0)
    ds = _spatial(dilations, r, 1)
    if op == "max_pool":
        acc = t.compute
        lowest = "-1.0 / 0.0" if dtype.is_float else None
        init = (f"    {acc} best = {acc}({lowest});" if lowest
                else f"    {acc} best = {literal(dtype.value_range()[0], t)};")  # fmt: skip
        step = ("if (isnan(v) || (!isnan(best) && v > best)) best = v;" if dtype.is_float
                else "best = max(best, v);")  # fmt: skip
        finish = "    return best;"
    else:
        acc = _acc_type(dtype)
        init = f"    {acc} total = {acc}(0);\n    uint count = 0u;"
        step = "total += v;\n                    count++;"
        divisor = f"{acc}({math.prod(kernel_shape)})" if count_include_pad else f"{acc}(count)"
        finish = f"    return {t.compute}(total / {divisor});"
    body = (
        "    uint i0 = pc.p[0], i1 = pc.p[1], i2 = pc.p[2];\n"
        "    uint c2 = o % pc.p[5];\n    uint rest = o / pc.p[5];\n"
        "    uint c1 = rest % pc.p[4];\n    rest /= pc.p[4];\n"
        "    uint c0 = rest % pc.p[3];\n    uint base = (rest / pc.p[3]) * i0 * i1 * i2;\n"
        f"{init}\n"
        "    for (uint k0 = 0u; k0 < pc.p[6]; k0++) {\n"
        "        int a = int(c0 * pc.p[9] + k0 * pc.p[15]) - int(pc.p[12]);\n"
        "        if (a < 0 || a >= int(i0)) continue;\n"
        "        for (uint k1 = 0u; k1 < pc.p[7]; k1++) {\n"
        "            int b = int(c1 * pc.p[10] + k1 * pc.p[16]) - int(pc.p[13]);\n"
        "            if (b < 0 || b >= int(i1)) continue;\n"
        "            for (uint k2 = 0u; k2 < pc.p[8]; k2++) {\n"
        "                int c = int(c2 * pc.p[11] + k2 * pc.p[17]) - int(pc.p[14]);\n"
        "                if (c < 0 || c >= int(i2)) continue;\n"
        f"                {acc} v = {acc}(load0(base + (uint(a) * i1 + uint(b)) * i2 + uint(c)));\n"
        f"                {step}\n"
        "            }\n        }\n    }\n"
        f"{finish}"
    )
    words = [_numel(out_shape), *ins, *outs, *ks, *ss, *ps, *ds]
    return _nn_kernel(label, [dtype], dtype, body, words)


# ---- planning ---------------------------------------------------------------------------------------
def unsupported_reason(
    op: str, in_dtypes: Sequence[DType], params: Mapping[str, Any]
) -> str | None:
    """Why `op` cannot run on the device for these dtypes/params (known before shapes), or
    None. (f64 attention and rope need GLSL's exp/sin/cos in double, which do not exist: the
    registry marks them `Traits.math`, and `openinfer_jax.vk.selection` reports it.)"""
    if op == "concat" and len(in_dtypes) > MAX_CONCAT_INPUTS:
        return (f"concat: {len(in_dtypes)} inputs exceed the Vulkan kernel's "
                f"{MAX_CONCAT_INPUTS}; it runs on the CPU")  # fmt: skip
    return None


def _window(params: Mapping[str, Any], spatial: int) -> tuple[list[int], list[int], list[int]]:
    strides = list(params.get("strides") or [1] * spatial)
    pads = list(params.get("pads") or [0] * (2 * spatial))
    dilations = list(params.get("dilations") or [1] * spatial)
    return strides, pads, dilations


def nn_plan(
    op: str,
    in_dtypes: Sequence[DType],
    in_shapes: Sequence[tuple[int, ...]],
    params: Mapping[str, Any],
    out: DType,
    out_shape: tuple[int, ...],
    tiles: str = "large",
    inplace: bool = False,
    shared_memory: int = 32768,
    split_keys: bool = True,
) -> NnPlan:
    """The dispatches of one call of an `NN_OPS` op (params resolved by the registry).

    `shared_memory` is the device's compute shared memory in bytes (kernels that need more
    are not chosen); `split_keys` allows splitting decode-step attention over key ranges
    (right for GPUs; on CPU devices such as lavapipe the extra groups cost more than they
    give). `inplace` says the output buffer is also one of the inputs: for the ops in
    `READS_NEIGHBOURS` the result then goes to a scratch tensor and a copy dispatch moves it
    to the output (an invocation would otherwise overwrite elements others still read).

    Raises:
        BackendError: what the kernels cannot do (see `unsupported_reason`, plus shape
            limits: attention head dims, pad rank, pool spatial rank, mask broadcasts).
    """
    reason = unsupported_reason(op, in_dtypes, params)
    if reason is not None:
        raise BackendError(reason)
    if inplace and op in READS_NEIGHBOURS:
        plan = nn_plan(
            op,
            in_dtypes,
            in_shapes,
            params,
            out,
            out_shape,
            tiles,
            False,
            shared_memory,
            split_keys,
        )
        scratch = Binding("scratch", len(plan.scratch))
        retarget = tuple(
            Dispatch(d.kernel, tuple(scratch if b == _OUT else b for b in d.bindings))
            for d in plan.dispatches
        )
        copy = copy_kernel(out, 0, 0, _numel(out_shape))
        return NnPlan(
            (*retarget, Dispatch(copy, (scratch, _OUT))),
            scratch=(*plan.scratch, (out, out_shape)),
            constants=plan.constants,
        )
    dtype = in_dtypes[0]
    count = len(in_dtypes)
    if op == "linear":
        kernel = linear_kernel(dtype, in_shapes[0], in_shapes[1], count > 2, tiles)
        return NnPlan((Dispatch(kernel, (*_inputs(count), _OUT)),))
    if op == "rope":
        rot = int(params["rotary_dim"]) or in_shapes[0][-1]
        kernel = rope_kernel(dtype, in_dtypes[1], in_shapes[0], in_shapes[1] == (), rot,
                             bool(params["interleaved"]))  # fmt: skip
        inv_freq = rope_inv_freq(float(params["theta"]), rot)
        bindings = (*_inputs(2), Binding("constant"), _OUT)
        return NnPlan((Dispatch(kernel, bindings),), constants=((DType.F32, inv_freq),))
    if op == "attention":
        scale = params.get("scale")
        scale = 1.0 / math.sqrt(in_shapes[0][-1]) if scale is None else float(scale)
        mask = in_dtypes[3] if count > 3 else None
        splits = attention_splits(in_shapes) if split_keys else 1
        causal = bool(params["causal"])
        kv = in_dtypes[1]  # k's and v's (q's may differ)
        kernel = attention_kernel(
            dtype, mask, in_shapes, causal, scale, shared_memory, splits, kv_dtype=kv
        )
        if splits > 1:
            rows, dv = _numel(in_shapes[0][:-1]), in_shapes[2][-1]
            merge = attention_merge_kernel(dtype, rows, dv, splits)
            partials = Binding("scratch")
            return NnPlan(
                (Dispatch(kernel, (*_inputs(count), partials)), Dispatch(merge, (partials, _OUT))),
                scratch=((DType.F32, (rows * splits * (dv + 2),)),),
            )
        if dtype is DType.F32:
            return NnPlan((Dispatch(kernel, (*_inputs(count), _OUT)),))
        # Narrow outputs: the f32 result, then one rounding (a word per invocation, no races).
        cast = cast_kernel(DType.F32, dtype, out_shape, "nearest", True)
        scratch = Binding("scratch")
        return NnPlan(
            (Dispatch(kernel, (*_inputs(count), scratch)), Dispatch(cast, (scratch, _OUT))),
            scratch=((DType.F32, out_shape),),
        )
    if op == "concat":
        # Empty inputs hold nothing to copy (and a zero-word buffer cannot be bound).
        used = [k for k, s in enumerate(in_shapes) if _numel(s) > 0]
        kernel = concat_kernel(dtype, [in_shapes[k] for k in used], int(params["axis"]))
        return NnPlan((Dispatch(kernel, (*(Binding("input", k) for k in used), _OUT)),))
    if op == "pad":
        from openinfer_jax.ops.nn_shapes import pad_widths  # lazy: ops load JAX

        widths = pad_widths(len(in_shapes[0]), params["pads"], params.get("axes"))
        kernel = pad_kernel(
            dtype, in_shapes[0], widths, str(params["mode"]), params.get("value", 0)
        )
        return NnPlan((Dispatch(kernel, (Binding("input"), _OUT)),))
    if op == "batch_norm":
        kernel = batch_norm_kernel(dtype, in_shapes[0], float(params["epsilon"]))
        return NnPlan((Dispatch(kernel, (*_inputs(5), _OUT)),))
    if op in ("conv1d", "conv2d"):
        spatial = len(in_shapes[0]) - 2
        strides, pads, dilations = _window(params, spatial)
        kernel = conv_kernel(dtype, in_shapes[0], in_shapes[1], count > 2, strides, pads,
                             dilations, int(params["groups"]), out_shape, tiles)  # fmt: skip
        return NnPlan((Dispatch(kernel, (*_inputs(count), _OUT)),))
    if op in ("max_pool", "avg_pool"):
        kernel_shape = list(params["kernel_shape"])
        strides, pads, dilations = _window(params, len(kernel_shape))
        kernel = pool_kernel(op, dtype, in_shapes[0], out_shape, kernel_shape, strides, pads,
                             dilations, bool(params.get("count_include_pad", False)))  # fmt: skip
        return NnPlan((Dispatch(kernel, (Binding("input"), _OUT)),))
    if op == "global_average_pool":
        axes = list(range(2, len(in_shapes[0])))
        kernel = reduce_kernel("mean_axis", dtype, in_shapes[0], out, axes, None)
        return NnPlan((Dispatch(kernel, (Binding("input"), _OUT)),))
    raise BackendError(f"op {op} has no Vulkan kernel in nn_kernels")
