"""JAX lowerings of the model-building ops (softmax, norms, attention, convolution, ...).

Each function takes arrays in the simulator's in-memory representation (see
openinfer_jax/ops/__init__.py) plus resolved params as keywords, and returns one array.
All functions are traceable under `jax.jit`: shapes and params are static, there are no
Python loops over data and no host round trips.

Precision policy (documented per op in docs/ops.md): f8 (e5m2), bf16 and f16 inputs are
computed in f32 and rounded once to the storage dtype at the end, like the original's CPU
backend; f32 and f64 are computed natively. Params are validated beforehand by the shape
rules in openinfer_jax/ops/nn_shapes.py, so these functions assume valid input.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from openinfer_jax.ops import nn_shapes

__all__ = [
    "UNARY_MATH",
    "attention",
    "avg_pool",
    "batch_norm",
    "concat",
    "conv",
    "embedding",
    "gather",
    "gelu",
    "global_average_pool",
    "layer_norm",
    "linear",
    "log_softmax",
    "max_pool",
    "pad",
    "partitioned",
    "reshape",
    "rms_norm",
    "rope",
    "slice_",
    "softmax",
    "transpose",
    "where",
]

Array = jax.Array

# Low-precision floats are widened to f32 for the math and narrowed once at the end.
_LOW_PRECISION = frozenset(
    {np.dtype(jnp.float16), np.dtype(jnp.bfloat16), np.dtype(jnp.float8_e5m2)}
)


# Full f32 products on accelerators too (no TF32/bf16 passes): the documented tolerance is
# f32 1e-5 relative, like matmul's. CPUs compute this way anyway, at no extra cost.
_EXACT = lax.Precision.HIGHEST


def _widen(x: Array) -> Array:
    """`x` in its compute dtype: f32 for f8/bf16/f16, unchanged otherwise."""
    return x.astype(jnp.float32) if np.dtype(x.dtype) in _LOW_PRECISION else x


def _narrow(y: Array, dtype: Any) -> Array:
    """`y` rounded to the storage dtype (a no-op when it already is)."""
    return y if y.dtype == dtype else y.astype(dtype)


def _elementwise(fn: Callable[[Array], Array]) -> Callable[[Array], Array]:
    """Wrap a float function so low-precision inputs run in f32 and round once."""

    def lowered(x: Array) -> Array:
        return _narrow(fn(_widen(x)), x.dtype)

    lowered.__doc__ = f"Elementwise {getattr(fn, '__name__', 'function')} (low precision via f32)."
    return lowered


# ---- elementwise math ------------------------------------------------------------------

#: Unary float ops that are one JAX primitive each; gelu takes a param and is separate.
UNARY_MATH: dict[str, Callable[[Array], Array]] = {
    "exp": _elementwise(jnp.exp),
    "log": _elementwise(jnp.log),
    "sqrt": _elementwise(jnp.sqrt),
    "rsqrt": _elementwise(lax.rsqrt),
    "tanh": _elementwise(jnp.tanh),
    "sigmoid": _elementwise(jax.nn.sigmoid),
    "silu": _elementwise(jax.nn.silu),
}


def gelu(x: Array, *, approximate: str = "none") -> Array:
    """GELU: exact `0.5*x*(1+erf(x/sqrt2))`, or the tanh approximation (ONNX Gelu)."""
    return _narrow(jax.nn.gelu(_widen(x), approximate=approximate == "tanh"), x.dtype)


def softmax(x: Array, *, axis: int = -1) -> Array:
    """Softmax along one axis (ONNX opset 13 semantics), max-subtracted for stability."""
    return _narrow(jax.nn.softmax(_widen(x), axis=axis), x.dtype)


def log_softmax(x: Array, *, axis: int = -1) -> Array:
    """Log-softmax along one axis, computed as `(x - max) - log(sum(exp(x - max)))`."""
    return _narrow(jax.nn.log_softmax(_widen(x), axis=axis), x.dtype)


# ---- normalization -----------------------------------------------------------------------


def layer_norm(x: Array, *affine: Array, axis: int = -1, epsilon: float = 1e-5) -> Array:
    """LayerNormalization (ONNX): normalize over axes `axis..rank-1`, then `*scale + bias`.

    `affine` holds the optional scale and bias, broadcast against the normalized shape.
    """
    xc = _widen(x)
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = jnp.mean(xc, axis=axes, keepdims=True)
    centered = xc - mean
    var = jnp.mean(centered * centered, axis=axes, keepdims=True)
    y = centered * lax.rsqrt(var + epsilon)
    if len(affine) >= 1:
        y = y * _widen(affine[0])
    if len(affine) >= 2:
        y = y + _widen(affine[1])
    return _narrow(y, x.dtype)


def rms_norm(x: Array, *scale: Array, axis: int = -1, epsilon: float = 1e-6) -> Array:
    """RMSNormalization: `x / sqrt(mean(x^2 over axis..rank-1) + epsilon) * scale`."""
    xc = _widen(x)
    axes = tuple(range(axis % x.ndim, x.ndim))
    y = xc * lax.rsqrt(jnp.mean(xc * xc, axis=axes, keepdims=True) + epsilon)
    if scale:
        y = y * _widen(scale[0])
    return _narrow(y, x.dtype)


def batch_norm(
    x: Array, scale: Array, bias: Array, mean: Array, var: Array, *, epsilon: float = 1e-5
) -> Array:
    """BatchNormalization in inference mode: per-channel (axis 1) affine normalization."""
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    xc = _widen(x)
    inv = lax.rsqrt(_widen(var).reshape(shape) + epsilon) * _widen(scale).reshape(shape)
    y = (xc - _widen(mean).reshape(shape)) * inv + _widen(bias).reshape(shape)
    return _narrow(y, x.dtype)


# ---- data movement -------------------------------------------------------------------------


def _normalize_indices(indices: Array, size: int) -> Array:
    """Indices mapped into [0, size): negatives count from the end, the rest is clamped.

    Out-of-range indices are clamped (documented behaviour; a kernel must never read out of
    bounds and a jitted program cannot raise). The arithmetic runs in a type wide enough for
    both `size` and the index dtype, so u64 or i8 indices never wrap.
    """
    kind = np.dtype(indices.dtype).kind
    wide = jnp.int64 if size > np.iinfo(np.int32).max else jnp.int32
    if kind == "u":
        # Clamp in the unsigned type first: u64 values above i64 max must not turn negative.
        if size - 1 < np.iinfo(indices.dtype).max:
            indices = jnp.minimum(indices, jnp.asarray(size - 1, indices.dtype))
        return indices.astype(wide)
    if np.dtype(indices.dtype).itemsize > np.dtype(wide).itemsize:
        # i64 indices on a small axis: wrap and clamp in i64, then narrow losslessly.
        wrapped = jnp.where(indices < 0, indices + size, indices)
        return jnp.clip(wrapped, 0, size - 1).astype(wide)
    idx = indices.astype(wide)
    wrapped = jnp.where(idx < 0, idx + size, idx)
    return jnp.clip(wrapped, 0, size - 1)


def gather(data: Array, indices: Array, *, axis: int = 0) -> Array:
    """ONNX Gather: `out[..., i, ...] = data[..., indices[i], ...]` along `axis`.

    Output shape `data.shape[:axis] + indices.shape + data.shape[axis+1:]`.
    """
    ax = axis % data.ndim
    if data.shape[ax] == 0:
        # Empty indices on an empty axis; jnp.take drops the index dims in this case.
        return jnp.zeros(data.shape[:ax] + indices.shape + data.shape[ax + 1 :], data.dtype)
    idx = _normalize_indices(indices, data.shape[ax])
    return jnp.take(data, idx, axis=ax, mode="clip")


def embedding(table: Array, ids: Array) -> Array:
    """Embedding lookup: rows of `table` [V, ...] picked by `ids`; same index rules as gather."""
    return gather(table, ids, axis=0)


def reshape(x: Array, *, shape: Sequence[int]) -> Array:
    """ONNX Reshape (allowzero=0): 0 copies the input dim, one -1 is inferred."""
    return jnp.reshape(x, nn_shapes.reshape_target(tuple(x.shape), tuple(shape)))


def transpose(x: Array, *, perm: Sequence[int] | None = None) -> Array:
    """ONNX Transpose: permute axes by `perm` (reversed axes when `perm` is empty/None)."""
    return jnp.transpose(x, nn_shapes.transpose_perm(x.ndim, perm))


def concat(*xs: Array, axis: int = 0) -> Array:
    """ONNX Concat along `axis` (negative counts from the end)."""
    if len(xs) == 1:
        return xs[0]
    return jnp.concatenate(xs, axis=axis)


def slice_(
    x: Array,
    *,
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int] | None = None,
    steps: Sequence[int] | None = None,
) -> Array:
    """ONNX Slice with static starts/ends/axes/steps (clamped like ONNX; negative steps ok)."""
    plan = nn_shapes.slice_plan(tuple(x.shape), starts, ends, axes, steps)
    # Negative steps are served by reversing the axis first, so lax.slice sees positive strides.
    reverse = tuple(ax for ax, (_, _, step, _) in enumerate(plan) if step < 0)
    if reverse:
        x = lax.rev(x, reverse)
    begin, end, strides = [], [], []
    for ax, (start, _stop, step, count) in enumerate(plan):
        dim = x.shape[ax]
        first = dim - 1 - start if step < 0 else start
        stride = abs(step)
        if count == 0:
            first = 0
        begin.append(first)
        end.append(first + (count - 1) * stride + 1 if count else 0)
        strides.append(stride)
    return lax.slice(x, tuple(begin), tuple(end), tuple(strides))


def pad(
    x: Array,
    *,
    pads: Sequence[int],
    mode: str = "constant",
    value: float | int | bool = 0,
    axes: Sequence[int] | None = None,
) -> Array:
    """ONNX Pad: `pads` = [begin per axis..., end per axis...]; modes constant/reflect/edge/wrap."""
    widths = nn_shapes.pad_widths(x.ndim, pads, axes)
    if mode == "constant":
        return jnp.pad(x, widths, mode="constant", constant_values=jnp.asarray(value, x.dtype))
    return jnp.pad(x, widths, mode=mode)


def where(cond: Array, a: Array, b: Array) -> Array:
    """ONNX Where: `a` where `cond` is true, else `b`, with NumPy broadcasting."""
    return jnp.where(cond, a, b)


# ---- position encoding and attention ----------------------------------------------------------


def rope(
    x: Array,
    positions: Array,
    *,
    theta: float = 10000.0,
    rotary_dim: int = 0,
    interleaved: bool = False,
) -> Array:
    """Rotary position embedding on `x` [..., seq, head_dim] (seq is axis -2).

    `positions` is a scalar offset (token i of the sequence sits at `offset + i`, so a decode
    step passes `step`) or a vector of `seq` absolute positions. The first `rotary_dim` dims
    (all when 0) are rotated: pairs (i, i + rotary_dim/2) when `interleaved` is false
    (HF llama / GPT-NeoX "rotate_half"), pairs (2i, 2i+1) when true (GPT-J, Meta llama).
    Angles are `f32(position) * inv_freq` with `inv_freq[i] = theta^(-2i/rotary_dim)`
    computed on the host in f64 and rounded to the compute dtype.
    """
    seq, head_dim = x.shape[-2], x.shape[-1]
    rot = rotary_dim or head_dim
    xc = _widen(x)
    compute = xc.dtype
    inv_freq = nn_shapes.rope_inv_freq(theta, rot).astype(compute)
    pos = positions.astype(compute)
    if positions.ndim == 0:
        pos = pos + jnp.arange(seq, dtype=compute)
    angles = pos[:, None] * inv_freq[None, :]  # [seq, rot/2]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    head, tail = xc[..., :rot], xc[..., rot:]
    if interleaved:
        pairs = head.reshape((*head.shape[:-1], rot // 2, 2))
        even, odd = pairs[..., 0], pairs[..., 1]
        rotated = jnp.stack((even * cos - odd * sin, even * sin + odd * cos), axis=-1)
        rotated = rotated.reshape(head.shape)
    else:
        first, second = head[..., : rot // 2], head[..., rot // 2 :]
        rotated = jnp.concatenate((first * cos - second * sin, second * cos + first * sin), axis=-1)
    y = rotated if rot == head_dim else jnp.concatenate((rotated, tail), axis=-1)
    return _narrow(y, x.dtype)


# True while ops are traced for an SPMD-partitioned (sharded) computation: see `partitioned`.
_PARTITIONED: ContextVar[bool] = ContextVar("openinfer_partitioned", default=False)


@contextmanager
def partitioned(on: bool = True) -> Iterator[None]:
    """Within the block (with `on`), ops are traced for a computation that XLA partitions
    over several devices (a sharded simulator's regions): `attention` then keeps kv heads a
    batch axis of its contractions, so a head-sharded cache stays local to its device (its
    single-device decode path merges heads with the head dimension: partitioning that
    would need collectives)."""
    token = _PARTITIONED.set(on)
    try:
        yield
    finally:
        _PARTITIONED.reset(token)


# Query rows per kv head (group x queries), and kv heads, up to which `attention` multiplies
# the keys and values as one [keys, heads x d] matrix (a decode step; see `_decode_scores`):
# the block-diagonal queries cost kv-heads-fold multiplies, cheap only for few kv heads.
_DECODE_ROWS = 8
_DECODE_KV_HEADS = 4


def _keys_major(k: Array) -> Array:
    """[..., H, S, D] -> [..., S, H*D]: a cache block read in [keys, heads, d] order and
    transposed to [heads, keys, d] comes back to its storage order (XLA cancels the two
    transposes), so it is read in place instead of copied into a transposed layout."""
    return jnp.swapaxes(k, -3, -2).reshape((*k.shape[:-3], k.shape[-2], k.shape[-3] * k.shape[-1]))


def _block_diagonal(x: Array) -> Array:
    """[..., H, R, D] -> [..., H*D, H*R]: head h's rows in the block of heads (h, h)."""
    h, r, d = x.shape[-3:]
    eye = jnp.eye(h, dtype=x.dtype)
    blocks = (
        eye[:, None, :, None] * jnp.swapaxes(x, -1, -2)[..., :, :, None, :]
    )  # [.., h, d, h', r]
    return blocks.reshape((*x.shape[:-3], h * d, h * r))


# Keys per matrix product of a decode step: each block of the cache is read by its products
# while it is still in cache (measured: 54 vs 64 ms per SmolLM2 token at context 2048).
_DECODE_CHUNK = 256


def _chunks(n: int) -> list[tuple[int, int]]:
    """[start, end) ranges of at most `_DECODE_CHUNK` keys covering `n` keys."""
    return [(a, min(a + _DECODE_CHUNK, n)) for a in range(0, n, _DECODE_CHUNK)]


def _decode_scores(qg: Array, k: Array) -> Array:
    """q.k for few query rows: [..., H, G, Q, D] x [..., H, S, D] -> [..., H, G, Q, S] as ONE
    matrix product [S, H*D] x [H*D, H*G*Q] with the queries placed block-diagonally (the
    zero blocks cost H-fold multiplies of a tiny operand; the keys are read once)."""
    *batch, h, g, sq, d = qg.shape
    rows = _block_diagonal(qg.reshape((*batch, h, g * sq, d)))
    keys = _keys_major(k)
    s = jnp.concatenate(
        [jnp.matmul(keys[..., a:b, :], rows, precision=_EXACT) for a, b in _chunks(keys.shape[-2])],
        axis=-2,
    )  # [..., S, H*G*Q]
    s = s.reshape((*batch, k.shape[-2], h, g, sq))
    return jnp.moveaxis(s, -4, -1)


def _decode_values(w: Array, v: Array) -> Array:
    """sum over keys of w * v: [..., H, G, Q, S] x [..., H, S, D] -> [..., H, G, Q, D] as ONE
    matrix product [H*G*Q, S] x [S, H*D], keeping the diagonal blocks (head h's weights with
    head h's values)."""
    *batch, h, g, sq, skv = w.shape
    d = v.shape[-1]
    wf, values = w.reshape((*batch, h * g * sq, skv)), _keys_major(v)
    parts = [
        jnp.matmul(wf[..., a:b], values[..., a:b, :], precision=_EXACT) for a, b in _chunks(skv)
    ]
    full = parts[0]
    for part in parts[1:]:
        full = full + part
    full = full.reshape((*batch, h, g * sq, h, d))
    idx = jnp.arange(h)
    diag = full[..., idx, :, idx, :]  # [H, ..., G*Q, D] (advanced indices go first)
    return jnp.moveaxis(diag, 0, -3).reshape((*batch, h, g, sq, d))


def attention(
    q: Array,
    k: Array,
    v: Array,
    *mask: Array,
    causal: bool = False,
    scale: float | None = None,
) -> Array:
    """Fused scaled-dot-product attention with grouped KV heads.

    q [..., Hq, Sq, D], k [..., Hkv, Skv, D], v [..., Hkv, Skv, Dv] -> [..., Hq, Sq, Dv];
    Hq is a multiple of Hkv and q head h reads kv head `h // (Hq // Hkv)`. `scale` None means
    1/sqrt(D). The optional mask broadcasts to [..., Hq, Sq, Skv]: bool (true = attend) or
    a float added to the scores. `causal` aligns queries to the END of the keys (query i
    may see keys j <= Skv - Sq + i), which is what a decode step with a cache needs. A row
    with no visible key yields zeros rather than NaN.
    """
    hq, sq, d = q.shape[-3], q.shape[-2], q.shape[-1]
    hkv, skv = k.shape[-3], k.shape[-2]
    group = hq // hkv
    factor = scale if scale is not None else 1.0 / math.sqrt(d)
    qc, kc, vc = _widen(q), _widen(k), _widen(v)
    batch = qc.shape[:-3]
    # Group q heads under their kv head instead of repeating k/v: no copy of the cache.
    qg = qc.reshape((*batch, hkv, group, sq, d))
    decode = (
        skv > 0
        and group * sq <= _DECODE_ROWS
        and hkv <= _DECODE_KV_HEADS
        and not _PARTITIONED.get()
    )
    if decode:
        scores = _decode_scores(qg, kc) * factor
    else:
        scores = jnp.einsum("...hgqd,...hkd->...hgqk", qg, kc, precision=_EXACT) * factor
    scores = scores.reshape((*batch, hq, sq, skv))
    allowed: Array | None = None
    if mask:
        m = mask[0]
        if m.dtype == jnp.bool_:
            allowed = m
        else:
            scores = scores + _widen(m)
    if causal:
        rows = jnp.arange(sq)[:, None] + (skv - sq)
        visible = jnp.arange(skv)[None, :] <= rows
        allowed = visible if allowed is None else jnp.logical_and(allowed, visible)
    if allowed is not None:
        scores = jnp.where(allowed, scores, -jnp.inf)
    peak = jnp.max(scores, axis=-1, keepdims=True, initial=-jnp.inf)
    # Fully masked rows have peak -inf: shift by 0 there so exp gives 0, not NaN.
    peak = jnp.where(jnp.isneginf(peak), 0.0, peak)
    weights = jnp.exp(scores - peak)
    total = jnp.sum(weights, axis=-1, keepdims=True)
    weights = weights / jnp.where(total == 0, 1.0, total)
    wg = weights.reshape((*batch, hkv, group, sq, skv))
    if decode:
        out = _decode_values(wg, vc)
    else:
        out = jnp.einsum("...hgqk,...hkd->...hgqd", wg, vc, precision=_EXACT)
    return _narrow(out.reshape((*batch, hq, sq, v.shape[-1])), q.dtype)


# ---- linear layers, convolution and pooling ---------------------------------------------------


def linear(x: Array, w: Array, *bias: Array) -> Array:
    """`x @ w^T + bias` with w in the [out, in] layout of PyTorch/HF checkpoints.

    The transpose is folded into the contraction (no copy of the weight).
    """
    xc, wc = _widen(x), _widen(w)
    y = lax.dot_general(xc, wc, (((x.ndim - 1,), (1,)), ((), ())), precision=_EXACT)
    if bias:
        y = y + _widen(bias[0])
    return _narrow(y, x.dtype)


def _spatial_dimension_numbers(spatial: int) -> tuple[str, str, str]:
    """lax dimension numbers for channel-first data and [M, C/groups, k...] kernels."""
    letters = (
        "HWD"[:spatial] if spatial <= 3 else "".join(chr(ord("a") + i) for i in range(spatial))
    )
    return ("NC" + letters, "OI" + letters, "NC" + letters)


def conv(
    x: Array,
    w: Array,
    *bias: Array,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    groups: int = 1,
) -> Array:
    """ONNX Conv (NCHW, weights [M, C/groups, k...], optional bias [M]) for any spatial rank."""
    spatial = x.ndim - 2
    strides_, pads_, dilations_ = nn_shapes.window_params(spatial, strides, pads, dilations)
    y = lax.conv_general_dilated(
        _widen(x),
        _widen(w),
        window_strides=strides_,
        padding=tuple(zip(pads_[:spatial], pads_[spatial:])),
        rhs_dilation=dilations_,
        dimension_numbers=_spatial_dimension_numbers(spatial),
        feature_group_count=groups,
        precision=_EXACT,
    )
    if bias:
        y = y + _widen(bias[0]).reshape((1, -1) + (1,) * spatial)
    return _narrow(y, x.dtype)


def _pool_config(
    x: Array,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None,
    pads: Sequence[int] | None,
    dilations: Sequence[int] | None,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[int, int], ...], tuple[int, ...]]:
    """reduce_window arguments: window, strides, padding and dilation over all axes."""
    spatial = x.ndim - 2
    strides_, pads_, dilations_ = nn_shapes.window_params(spatial, strides, pads, dilations)
    window = (1, 1, *tuple(kernel_shape))
    padding = ((0, 0), (0, 0), *tuple(zip(pads_[:spatial], pads_[spatial:])))
    return window, (1, 1, *strides_), padding, (1, 1, *dilations_)


def max_pool(
    x: Array,
    *,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
) -> Array:
    """ONNX MaxPool (channel-first, any spatial rank); padding never wins the max."""
    window, strides_, padding, dil = _pool_config(x, kernel_shape, strides, pads, dilations)
    if jnp.issubdtype(x.dtype, jnp.floating):
        init = jnp.asarray(-jnp.inf, x.dtype)
    else:
        init = jnp.asarray(np.iinfo(x.dtype).min, x.dtype)
    out: Array = lax.reduce_window(x, init, lax.max, window, strides_, padding, window_dilation=dil)
    return out


def avg_pool(
    x: Array,
    *,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    count_include_pad: bool = False,
) -> Array:
    """ONNX AveragePool; with `count_include_pad` false, pads are left out of the divisor."""
    window, strides_, padding, dil = _pool_config(x, kernel_shape, strides, pads, dilations)
    xc = _widen(x)
    zero = jnp.asarray(0, xc.dtype)
    total = lax.reduce_window(xc, zero, lax.add, window, strides_, padding, window_dilation=dil)
    if count_include_pad:
        count: Array | float = float(math.prod(kernel_shape))
    else:
        # The divisor depends only on shapes: XLA folds this window sum to a constant.
        ones = jnp.ones((1, 1, *xc.shape[2:]), xc.dtype)
        count = lax.reduce_window(
            ones, zero, lax.add, window, strides_, padding, window_dilation=dil
        )
    return _narrow(total / count, x.dtype)


def global_average_pool(x: Array) -> Array:
    """ONNX GlobalAveragePool: mean over all spatial axes, kept as size-1 dims."""
    return _narrow(jnp.mean(_widen(x), axis=tuple(range(2, x.ndim)), keepdims=True), x.dtype)
