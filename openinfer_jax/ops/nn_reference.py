"""Independent NumPy references of the model-building ops, used by tests.

Written separately from the JAX lowerings (openinfer_jax/ops/nn_jax.py) and never calling
them: where the lowering uses a library primitive (lax.conv, reduce_window, jnp.pad, slices),
the reference spells the definition out (loops over kernel offsets, index maps). Floats are
computed in f64 and rounded once to the storage dtype; the lowering's f32 compute for
low-precision types therefore differs by at most one storage ulp (docs/ops.md).

Only two documented choices of the lowering are mirrored on purpose because they are part of
the op's definition: rope angles are `f32(position) * f32(inv_freq)` for f32 and narrower
inputs, and gather/embedding clamp out-of-range indices.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

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
    "reshape",
    "rms_norm",
    "rope",
    "slice_",
    "softmax",
    "transpose",
    "where",
]


def _f64(x: np.ndarray) -> np.ndarray:
    """`x` as float64 (bf16/f8 through ml_dtypes' conversions)."""
    return np.asarray(x).astype(np.float64)


def _elementwise(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """Run `fn` in f64 with floating-point warnings silenced, then round to the input dtype."""

    def reference(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(_f64(x))).astype(x.dtype)

    return reference


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)))


#: Unary float ops evaluated in f64 from their textbook definitions.
UNARY_MATH: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": _elementwise(np.exp),
    "log": _elementwise(np.log),
    "sqrt": _elementwise(np.sqrt),
    "rsqrt": _elementwise(lambda x: 1.0 / np.sqrt(x)),
    "tanh": _elementwise(np.tanh),
    "sigmoid": _elementwise(_sigmoid),
    "silu": _elementwise(lambda x: x * _sigmoid(x)),
}


def gelu(x: np.ndarray, *, approximate: str = "none") -> np.ndarray:
    """GELU from its definition: x * Phi(x), or 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))."""

    def exact(v: np.ndarray) -> np.ndarray:
        return np.asarray(v * 0.5 * (1.0 + _erf(v / math.sqrt(2.0))))

    def tanh_form(v: np.ndarray) -> np.ndarray:
        return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))

    return _elementwise(tanh_form if approximate == "tanh" else exact)(x)


def softmax(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)) along `axis`, in f64."""
    with np.errstate(all="ignore"):
        v = _f64(x)
        e = np.exp(v - np.max(v, axis=axis, keepdims=True, initial=-np.inf))
        return np.asarray((e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype))


def log_softmax(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """x - max - log(sum(exp(x - max))) along `axis`, in f64."""
    with np.errstate(all="ignore"):
        v = _f64(x)
        shifted = v - np.max(v, axis=axis, keepdims=True, initial=-np.inf)
        return np.asarray(
            (shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))).astype(x.dtype)
        )


def layer_norm(
    x: np.ndarray, *affine: np.ndarray, axis: int = -1, epsilon: float = 1e-5
) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) over the trailing axes from `axis`, then scale and bias."""
    v = _f64(x)
    axes = tuple(range(axis % x.ndim, x.ndim))
    count = math.prod(x.shape[a] for a in axes)
    mean = np.sum(v, axis=axes, keepdims=True) / count
    var = np.sum((v - mean) ** 2, axis=axes, keepdims=True) / count
    y = (v - mean) / np.sqrt(var + epsilon)
    for array, combine in zip(affine, (np.multiply, np.add)):
        y = combine(y, _f64(array))
    return np.asarray(y.astype(x.dtype))


def rms_norm(
    x: np.ndarray, *scale: np.ndarray, axis: int = -1, epsilon: float = 1e-6
) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) over the trailing axes from `axis`, times scale."""
    v = _f64(x)
    axes = tuple(range(axis % x.ndim, x.ndim))
    y = v / np.sqrt(np.mean(v * v, axis=axes, keepdims=True) + epsilon)
    if scale:
        y = y * _f64(scale[0])
    return np.asarray(y.astype(x.dtype))


def batch_norm(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    epsilon: float = 1e-5,
) -> np.ndarray:
    """scale * (x - mean) / sqrt(var + eps) + bias per channel (axis 1)."""
    v = np.moveaxis(_f64(x), 1, -1)
    y = _f64(scale) * (v - _f64(mean)) / np.sqrt(_f64(var) + epsilon) + _f64(bias)
    return np.asarray(np.moveaxis(y, -1, 1).astype(x.dtype))


def _clamp_indices(indices: np.ndarray, size: int) -> np.ndarray:
    """Negative indices count from the end; anything still outside [0, size) is clamped."""
    idx = np.asarray(indices)
    if size == 0:
        return idx.astype(np.int64)  # empty indices on an empty axis
    if idx.dtype.kind == "u":
        return np.asarray(np.minimum(idx, np.uint64(size - 1)).astype(np.int64))
    wide = idx.astype(np.int64)
    return np.clip(np.where(wide < 0, wide + size, wide), 0, size - 1)


def gather(data: np.ndarray, indices: np.ndarray, *, axis: int = 0) -> np.ndarray:
    """np.take along `axis` after the documented index clamping."""
    ax = axis % data.ndim
    return np.take(data, _clamp_indices(indices, data.shape[ax]), axis=ax)


def embedding(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Rows of `table` picked by `ids` (gather on axis 0)."""
    return gather(table, ids, axis=0)


def reshape(x: np.ndarray, *, shape: Sequence[int]) -> np.ndarray:
    """Reshape with ONNX's 0 (copy dim) resolved here and -1 left to NumPy."""
    target = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return np.reshape(x, target)


def transpose(x: np.ndarray, *, perm: Sequence[int] | None = None) -> np.ndarray:
    """np.transpose (reversed axes when `perm` is empty)."""
    return np.transpose(x, tuple(perm) if perm else None)


def concat(*xs: np.ndarray, axis: int = 0) -> np.ndarray:
    """np.concatenate along `axis`."""
    return np.concatenate(xs, axis=axis)


def _slice_indices(dim: int, start: int, end: int, step: int) -> list[int]:
    """Element indices of one ONNX Slice axis, following the spec's clamping text."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = max(0, min(start, dim)), max(0, min(end, dim))
    else:
        start, end = max(0, min(start, dim - 1)), max(-1, min(end, dim - 1))
    return list(range(start, end, step)) if dim else []


def slice_(
    x: np.ndarray,
    *,
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int] | None = None,
    steps: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX Slice through explicit index lists, one np.take per sliced axis."""
    axes_ = list(axes) if axes else list(range(len(starts)))
    steps_ = list(steps) if steps else [1] * len(starts)
    out = x
    for ax, start, end, step in zip(axes_, starts, ends, steps_):
        ax %= x.ndim
        picked = np.asarray(_slice_indices(x.shape[ax], start, end, step), dtype=np.int64)
        out = np.take(out, picked, axis=ax)
    return out


def _pad_source(size: int, begin: int, end: int, mode: str) -> np.ndarray:
    """For each output position of one padded axis, the source index (-1 for the constant)."""
    positions = np.arange(-begin, size + end)
    inside = (positions >= 0) & (positions < size)
    if mode == "constant":
        return np.where(inside, positions, -1)
    if mode == "edge":
        return np.clip(positions, 0, size - 1)
    if mode == "wrap":
        return positions % size
    # reflect: mirror about the first and last element without repeating them
    period = 2 * (size - 1) if size > 1 else 1
    folded = np.abs(positions) % period
    return np.where(folded >= size, period - folded, folded)


def pad(
    x: np.ndarray,
    *,
    pads: Sequence[int],
    mode: str = "constant",
    value: float | int | bool = 0,
    axes: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX Pad through per-axis source-index maps (no np.pad)."""
    axes_ = [a % x.ndim for a in axes] if axes else list(range(x.ndim))
    n = len(axes_)
    out = np.asarray(x)
    for i, ax in enumerate(axes_):
        source = _pad_source(out.shape[ax], pads[i], pads[i + n], mode)
        taken = (
            np.take(out, np.maximum(source, 0), axis=ax)
            if out.shape[ax]
            else np.zeros((*out.shape[:ax], len(source), *out.shape[ax + 1 :]), out.dtype)
        )
        fill_shape = [1] * out.ndim
        fill_shape[ax] = len(source)
        out = np.where((source < 0).reshape(fill_shape), np.asarray(value).astype(x.dtype), taken)
    return out.astype(x.dtype)


def where(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.where with broadcasting."""
    return np.where(cond, a, b)


def rope(
    x: np.ndarray,
    positions: np.ndarray,
    *,
    theta: float = 10000.0,
    rotary_dim: int = 0,
    interleaved: bool = False,
) -> np.ndarray:
    """Rotary embedding as a complex rotation of (a, b) pairs by e^(i * angle).

    Pairs are (2i, 2i+1) when `interleaved`, else (i, i + rotary_dim/2).
    """
    seq, head_dim = x.shape[-2], x.shape[-1]
    rot = rotary_dim or head_dim
    pos = np.asarray(positions).astype(np.int64)
    pos = pos + np.arange(seq) if pos.ndim == 0 else pos
    inv_freq = 1.0 / (float(theta) ** (np.arange(rot // 2, dtype=np.float64) * 2.0 / rot))
    # The angle's definition rounds through the compute type (f32 unless x is f64).
    angle_type = np.float64 if x.dtype == np.float64 else np.float32
    angles = np.multiply(
        pos.astype(angle_type)[:, None], inv_freq.astype(angle_type)[None, :]
    ).astype(np.float64)
    v = _f64(x)
    head = v[..., :rot]
    if interleaved:
        a, b = head[..., 0::2], head[..., 1::2]
    else:
        a, b = head[..., : rot // 2], head[..., rot // 2 :]
    turned = (a + 1j * b) * np.exp(1j * angles)
    out = v.copy()
    if interleaved:
        out[..., 0:rot:2], out[..., 1:rot:2] = turned.real, turned.imag
    else:
        out[..., : rot // 2], out[..., rot // 2 : rot] = turned.real, turned.imag
    return out.astype(x.dtype)


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *mask: np.ndarray,
    causal: bool = False,
    scale: float | None = None,
) -> np.ndarray:
    """softmax(q k^T * scale + mask) v with kv heads repeated (np.repeat) for grouped queries."""
    hq, sq, d = q.shape[-3:]
    hkv, skv = k.shape[-3], k.shape[-2]
    kr = np.repeat(_f64(k), hq // hkv, axis=-3)
    vr = np.repeat(_f64(v), hq // hkv, axis=-3)
    scores = (_f64(q) @ np.swapaxes(kr, -1, -2)) * (
        scale if scale is not None else 1.0 / math.sqrt(d)
    )
    visible = np.ones(scores.shape, dtype=bool)
    if mask:
        if mask[0].dtype == np.bool_:
            visible = visible & mask[0]
        else:
            scores = scores + _f64(mask[0])
    if causal:
        offset = skv - sq
        allowed = np.array([[j <= i + offset for j in range(skv)] for i in range(sq)], dtype=bool)
        visible = visible & allowed.reshape((sq, skv))
    with np.errstate(all="ignore"):
        scores = np.where(visible, scores, -np.inf)
        peak = np.max(scores, axis=-1, keepdims=True, initial=-np.inf)
        weights = np.where(visible, np.exp(scores - np.where(np.isfinite(peak), peak, 0.0)), 0.0)
        total = np.sum(weights, axis=-1, keepdims=True)
        weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
    return np.asarray((weights @ vr).astype(q.dtype))


def linear(x: np.ndarray, w: np.ndarray, *bias: np.ndarray) -> np.ndarray:
    """sum over k of x[..., k] * w[o, k], plus bias[o], in f64."""
    y = np.einsum("...k,ok->...o", _f64(x), _f64(w))
    if bias:
        y = y + _f64(bias[0])
    return np.asarray(y.astype(x.dtype))


def _window_defaults(
    spatial: int,
    strides: Sequence[int] | None,
    pads: Sequence[int] | None,
    dilations: Sequence[int] | None,
) -> tuple[list[int], list[int], list[int]]:
    return (
        list(strides) if strides else [1] * spatial,
        list(pads) if pads else [0] * (2 * spatial),
        list(dilations) if dilations else [1] * spatial,
    )


def _window_slices(
    kernel: Sequence[int], out: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> list[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """Per kernel offset: the offset and the strided slice of the padded input it reads."""
    result = []
    for offset in itertools.product(*(range(k) for k in kernel)):
        picks = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s)
            for o, d, n, s in zip(offset, dilations, out, strides)
        )
        result.append((offset, (slice(None), slice(None), *picks)))
    return result


def _padded(x: np.ndarray, pads: Sequence[int], value: float | int) -> np.ndarray:
    spatial = x.ndim - 2
    out = np.full(
        x.shape[:2] + tuple(x.shape[2 + i] + pads[i] + pads[i + spatial] for i in range(spatial)),
        value,
        dtype=x.dtype,
    )
    out[
        (
            slice(None),
            slice(None),
            *(slice(pads[i], pads[i] + x.shape[2 + i]) for i in range(spatial)),
        )
    ] = x
    return out


def _out_dims(
    x: np.ndarray, kernel: Sequence[int], strides: list[int], pads: list[int], dilations: list[int]
) -> list[int]:
    spatial = x.ndim - 2
    return [
        (x.shape[2 + i] + pads[i] + pads[i + spatial] - dilations[i] * (kernel[i] - 1) - 1)
        // strides[i]
        + 1
        for i in range(spatial)
    ]


def conv(
    x: np.ndarray,
    w: np.ndarray,
    *bias: np.ndarray,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    groups: int = 1,
) -> np.ndarray:
    """Convolution as a sum over kernel offsets of channel contractions, per group."""
    spatial = x.ndim - 2
    strides_, pads_, dilations_ = _window_defaults(spatial, strides, pads, dilations)
    kernel = w.shape[2:]
    out_dims = _out_dims(x, kernel, strides_, pads_, dilations_)
    xp = _padded(_f64(x), pads_, 0.0)
    wf = _f64(w)
    n, m = x.shape[0], w.shape[0]
    cg, mg = x.shape[1] // groups, m // groups
    out = np.zeros((n, groups, mg, *out_dims))
    for offset, picks in _window_slices(kernel, out_dims, strides_, dilations_):
        window = xp[picks].reshape((n, groups, cg, *out_dims))
        tap: tuple[slice | int, ...] = (slice(None), slice(None), *offset)
        taps = wf[tap].reshape(groups, mg, cg)
        out += np.einsum("ngc...,gmc->ngm...", window, taps)
    out = out.reshape((n, m, *out_dims))
    if bias:
        out = out + _f64(bias[0]).reshape((1, m) + (1,) * spatial)
    return out.astype(x.dtype)


def max_pool(
    x: np.ndarray,
    *,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
) -> np.ndarray:
    """Elementwise maximum over the kernel offsets of an input padded with the type's lowest value."""
    strides_, pads_, dilations_ = _window_defaults(len(kernel_shape), strides, pads, dilations)
    out_dims = _out_dims(x, kernel_shape, strides_, pads_, dilations_)
    floating = x.dtype.kind not in "iu"  # bf16/f8 report kind "V"
    lowest = -np.inf if floating else np.iinfo(x.dtype).min
    xp = _padded(_f64(x) if floating else x, pads_, lowest)
    best = None
    for _, picks in _window_slices(kernel_shape, out_dims, strides_, dilations_):
        best = xp[picks] if best is None else np.maximum(best, xp[picks])
    assert best is not None
    return best.astype(x.dtype)


def avg_pool(
    x: np.ndarray,
    *,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    count_include_pad: bool = False,
) -> np.ndarray:
    """Window sums over kernel offsets divided by the window size or by the real elements in it."""
    strides_, pads_, dilations_ = _window_defaults(len(kernel_shape), strides, pads, dilations)
    out_dims = _out_dims(x, kernel_shape, strides_, pads_, dilations_)
    xp = _padded(_f64(x), pads_, 0.0)
    real = _padded(np.ones((1, 1, *x.shape[2:])), pads_, 0.0)
    total = np.zeros(x.shape[:2] + tuple(out_dims))
    count = np.zeros((1, 1, *tuple(out_dims)))
    for _, picks in _window_slices(kernel_shape, out_dims, strides_, dilations_):
        total += xp[picks]
        count += real[picks]
    divisor = float(math.prod(kernel_shape)) if count_include_pad else count
    return (total / divisor).astype(x.dtype)


def global_average_pool(x: np.ndarray) -> np.ndarray:
    """Mean over every spatial axis, kept as size-1 dims."""
    v = _f64(x)
    spatial = tuple(range(2, x.ndim))
    return np.asarray(
        (np.sum(v, axis=spatial, keepdims=True) / math.prod(x.shape[2:])).astype(x.dtype)
    )
