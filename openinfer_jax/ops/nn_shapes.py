"""Shape rules and param checks of the model-building ops.

Pure Python over int tuples: validation calls these through the registry (with concrete
shapes resolved from the model), and the JAX lowerings call the small helpers
(`reshape_target`, `slice_plan`, ...) at trace time so both agree on one definition.
Every rule raises `OpCheckError` with a message that says what is allowed; the validator
adds the block/node/line location.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from openinfer_jax.ops.registry import OpCheckError, broadcast_shapes

__all__ = [
    "Shape",
    "attention_shape",
    "batch_norm_shape",
    "broadcasts_to",
    "concat_shape",
    "conv_shape",
    "embedding_shape",
    "gather_shape",
    "global_pool_shape",
    "linear_shape",
    "norm_shape",
    "normalize_axis",
    "pad_shape",
    "pad_widths",
    "pool_shape",
    "reshape_shape",
    "reshape_target",
    "rope_inv_freq",
    "rope_shape",
    "same_shape",
    "slice_plan",
    "slice_shape",
    "softmax_shape",
    "transpose_perm",
    "transpose_shape",
    "where_shape",
    "window_params",
]

Shape = tuple[int, ...]


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """`axis` in [0, ndim); negative counts from the end.

    Raises:
        OpCheckError: if `axis` is outside [-ndim, ndim).
    """
    if not -ndim <= axis < ndim:
        raise OpCheckError(
            f"{what}={axis} is out of range for rank {ndim}; allowed: {-ndim}..{ndim - 1}"
        )
    return axis % ndim


def broadcasts_to(shape: Shape, target: Shape) -> bool:
    """True if `shape` broadcasts to exactly `target` (NumPy rules, no growth of `target`)."""
    if len(shape) > len(target):
        return False
    return all(d in (1, t) for d, t in zip(shape[::-1], target[::-1]))


def same_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """Shape rule of elementwise unary ops: the input's shape."""
    return tuple(shapes[0])


def softmax_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """softmax/log_softmax: the input's shape; `axis` must exist (rank >= 1)."""
    x = tuple(shapes[0])
    if not x:
        raise OpCheckError(f"{op} needs an input of rank >= 1, got a scalar")
    normalize_axis(int(params["axis"]), len(x), f"{op}: axis")
    return x


def norm_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """layer_norm/rms_norm: the input's shape; scale/bias broadcast to the normalized dims."""
    x = tuple(shapes[0])
    if not x:
        raise OpCheckError(f"{op} needs an input of rank >= 1, got a scalar")
    ax = normalize_axis(int(params["axis"]), len(x), f"{op}: axis")
    normalized = x[ax:]
    for name, shape in zip(("scale", "bias"), shapes[1:]):
        shape = tuple(shape)
        if not broadcasts_to(shape, normalized):
            raise OpCheckError(
                f"{op}: {name} shape {shape} must broadcast to the normalized dims {normalized} "
                f"(axes {ax}..{len(x) - 1} of {x})"
            )
    return x


def batch_norm_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """batch_norm: x [N, C, ...] and four [C] vectors (scale, bias, mean, var)."""
    x = tuple(shapes[0])
    if len(x) < 2:
        raise OpCheckError(f"{op} needs x of rank >= 2 ([N, C, ...]), got {x}")
    for name, shape in zip(("scale", "bias", "mean", "var"), shapes[1:]):
        if tuple(shape) != (x[1],):
            raise OpCheckError(
                f"{op}: {name} must have shape ({x[1]},) (channels), got {tuple(shape)}"
            )
    return x


def gather_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """gather: `data.shape[:axis] + indices.shape + data.shape[axis+1:]`."""
    data, indices = tuple(shapes[0]), tuple(shapes[1])
    if not data:
        raise OpCheckError(f"{op} needs data of rank >= 1, got a scalar")
    ax = normalize_axis(int(params["axis"]), len(data), f"{op}: axis")
    if data[ax] == 0 and math.prod(indices) > 0:
        raise OpCheckError(f"{op}: axis {ax} of data {data} is empty; there is no row to pick")
    return data[:ax] + indices + data[ax + 1 :]


def embedding_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """embedding: `ids.shape + table.shape[1:]`."""
    return gather_shape(op, shapes, {"axis": 0})


def reshape_target(in_shape: Shape, shape: Sequence[int]) -> Shape:
    """The concrete target of ONNX Reshape (allowzero=0): 0 copies the input dim, -1 is inferred.

    Raises:
        OpCheckError: for more than one -1, a 0 past the input's rank, dims below -1, or a
        product that does not match the input's element count.
    """
    target = [int(d) for d in shape]
    if sum(1 for d in target if d == -1) > 1:
        raise OpCheckError(
            f"reshape: shape={tuple(target)} has more than one -1; allowed: at most one"
        )
    for i, d in enumerate(target):
        if d < -1:
            raise OpCheckError(
                f"reshape: shape={tuple(target)}: dim {d} is invalid; allowed: >= 0, 0 (copy), -1 (infer)"
            )
        if d == 0:
            if i >= len(in_shape):
                raise OpCheckError(
                    f"reshape: shape={tuple(target)}: 0 at position {i} copies a dim the input {in_shape} lacks"
                )
            target[i] = in_shape[i]
    numel = math.prod(in_shape)
    if -1 in target:
        known = math.prod(d for d in target if d != -1)
        if known == 0 or numel % known:
            raise OpCheckError(
                f"reshape: cannot infer -1 in {tuple(shape)} for input {in_shape} ({numel} elements)"
            )
        target[target.index(-1)] = numel // known
    if math.prod(target) != numel:
        raise OpCheckError(
            f"reshape: from {in_shape} ({numel} elements) to {tuple(target)} "
            f"({math.prod(target)} elements): element counts must match"
        )
    return tuple(target)


def reshape_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """reshape: the concrete target of `shape` for the input (see `reshape_target`)."""
    return reshape_target(tuple(shapes[0]), params["shape"])


def transpose_perm(ndim: int, perm: Sequence[int] | None, op: str = "transpose") -> Shape:
    """The permutation of ONNX Transpose: `perm` (negatives allowed) or reversed axes if empty.

    Raises:
        OpCheckError: if `perm` is not a permutation of 0..ndim-1.
    """
    if not perm:
        return tuple(range(ndim - 1, -1, -1))
    if len(perm) != ndim or sorted(p % ndim if -ndim <= p < ndim else -1 for p in perm) != list(
        range(ndim)
    ):
        raise OpCheckError(
            f"{op}: perm={tuple(perm)} must be a permutation of 0..{ndim - 1} (rank {ndim})"
        )
    return tuple(p % ndim for p in perm)


def transpose_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """transpose/permute: input dims reordered by `perm`."""
    x = tuple(shapes[0])
    return tuple(x[p] for p in transpose_perm(len(x), params.get("perm"), op))


def concat_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """concat: inputs equal except along `axis`, where the sizes add up."""
    first = tuple(shapes[0])
    if not first:
        raise OpCheckError(f"{op} needs inputs of rank >= 1, got a scalar")
    ax = normalize_axis(int(params["axis"]), len(first), f"{op}: axis")
    total = 0
    for i, shape in enumerate(shapes):
        shape = tuple(shape)
        if len(shape) != len(first) or shape[:ax] + shape[ax + 1 :] != first[:ax] + first[ax + 1 :]:
            raise OpCheckError(
                f"{op}: input {i} has shape {shape}, input 0 has {first}; "
                f"all dims except axis {ax} must be equal"
            )
        total += shape[ax]
    return (*first[:ax], total, *first[ax + 1 :])


def slice_plan(
    in_shape: Shape,
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int] | None = None,
    steps: Sequence[int] | None = None,
) -> tuple[tuple[int, int, int, int], ...]:
    """Per axis (start, end, step, count) of ONNX Slice after clamping.

    Negative starts/ends add the dim; then, for step > 0, both clamp to [0, dim]; for
    step < 0, start clamps to [0, dim-1] and end to [-1, dim-1]. Axes not named keep
    (0, dim, 1, dim).

    Raises:
        OpCheckError: for mismatched list lengths, repeated or out-of-range axes, step 0.
    """
    ndim = len(in_shape)
    axes_ = list(range(len(starts))) if not axes else list(axes)
    steps_ = [1] * len(starts) if not steps else list(steps)
    if not (len(starts) == len(ends) == len(axes_) == len(steps_)):
        raise OpCheckError(
            f"slice: starts/ends/axes/steps must have equal lengths, got "
            f"{len(starts)}/{len(ends)}/{len(axes_)}/{len(steps_)}"
        )
    norm_axes = [normalize_axis(a, ndim, "slice: axis") for a in axes_]
    if len(set(norm_axes)) != len(norm_axes):
        raise OpCheckError(f"slice: axes={tuple(axes_)} repeat an axis; each axis may appear once")
    plan = [(0, d, 1, d) for d in in_shape]
    for ax, start, end, step in zip(norm_axes, starts, ends, steps_):
        if step == 0:
            raise OpCheckError("slice: steps must be non-zero")
        dim = in_shape[ax]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        count = max(0, -((start - end) // step)) if dim else 0
        plan[ax] = (start, end, step, count)
    return tuple(plan)


def slice_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """slice: each axis's element count after ONNX clamping."""
    plan = slice_plan(
        tuple(shapes[0]), params["starts"], params["ends"], params.get("axes"), params.get("steps")
    )
    return tuple(count for (_, _, _, count) in plan)


def pad_widths(
    ndim: int, pads: Sequence[int], axes: Sequence[int] | None = None
) -> tuple[tuple[int, int], ...]:
    """(begin, end) per axis from ONNX `pads` = [begins..., ends...] over `axes` (all by default).

    Raises:
        OpCheckError: for a wrong `pads` length or a negative pad (cropping is `slice`'s job).
    """
    axes_ = list(range(ndim)) if not axes else [normalize_axis(a, ndim, "pad: axis") for a in axes]
    if len(set(axes_)) != len(axes_):
        raise OpCheckError(
            f"pad: axes={tuple(axes or ())} repeat an axis; each axis may appear once"
        )
    if len(pads) != 2 * len(axes_):
        raise OpCheckError(
            f"pad: pads has {len(pads)} values; expected {2 * len(axes_)} (begins then ends for {len(axes_)} axes)"
        )
    if any(p < 0 for p in pads):
        raise OpCheckError(
            f"pad: pads={tuple(pads)} has a negative value; allowed: >= 0 (use slice to crop)"
        )
    widths = [(0, 0)] * ndim
    for i, ax in enumerate(axes_):
        widths[ax] = (int(pads[i]), int(pads[i + len(axes_)]))
    return tuple(widths)


def pad_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """pad: each dim grows by its begin and end pads; non-constant modes need a non-empty axis."""
    x = tuple(shapes[0])
    widths = pad_widths(len(x), params["pads"], params.get("axes"))
    mode = params["mode"]
    for ax, (begin, end) in enumerate(widths):
        # reflect/edge/wrap repeat existing values (periodically past the axis length, as NumPy
        # and ONNX do); an empty axis has none to repeat.
        if mode != "constant" and x[ax] == 0 and begin + end > 0:
            raise OpCheckError(f"{op}: mode={mode} on empty axis {ax}: there is no value to repeat")
    return tuple(d + b + e for d, (b, e) in zip(x, widths))


def where_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """where: the broadcast of cond, a and b."""
    return broadcast_shapes(op, [tuple(s) for s in shapes])


def rope_inv_freq(theta: float, rotary_dim: int) -> np.ndarray:
    """`theta^(-2i/rotary_dim)` for i < rotary_dim/2, computed in f64 (host constant)."""
    return np.power(np.float64(theta), -np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def rope_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """rope: x [..., seq, head_dim] unchanged; positions a scalar offset or a [seq] vector."""
    x, positions = tuple(shapes[0]), tuple(shapes[1])
    if len(x) < 2:
        raise OpCheckError(f"{op} needs x of rank >= 2 ([..., seq, head_dim]), got {x}")
    seq, head_dim = x[-2], x[-1]
    rot = int(params["rotary_dim"]) or head_dim
    if rot % 2 or not 0 < rot <= head_dim:
        raise OpCheckError(
            f"{op}: rotary_dim={rot} must be even and in 2..{head_dim} (head_dim), or 0 for all"
        )
    if positions not in ((), (seq,)):
        raise OpCheckError(
            f"{op}: positions must be a scalar offset or a vector of {seq} positions, got shape {positions}"
        )
    theta = params["theta"]
    if isinstance(theta, (int, float)) and not theta > 0:
        raise OpCheckError(f"{op}: theta={params['theta']} must be > 0")
    return x


def attention_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """attention: q [..., Hq, Sq, D], k [..., Hkv, Skv, D], v [..., Hkv, Skv, Dv] -> [..., Hq, Sq, Dv]."""
    q, k, v = (tuple(s) for s in shapes[:3])
    for name, s in (("q", q), ("k", k), ("v", v)):
        if len(s) < 3:
            raise OpCheckError(
                f"{op}: {name} must have rank >= 3 ([..., heads, seq, dim]), got {s}"
            )
    if not (q[:-3] == k[:-3] == v[:-3]):
        raise OpCheckError(
            f"{op}: batch dims differ: q {q[:-3]}, k {k[:-3]}, v {v[:-3]}; they must be equal"
        )
    hq, _sq, d = q[-3:]
    hkv, skv, dk = k[-3:]
    if dk != d:
        raise OpCheckError(f"{op}: head dim of k ({dk}) must equal that of q ({d})")
    if v[-3:-1] != (hkv, skv):
        raise OpCheckError(f"{op}: v heads/seq {v[-3:-1]} must equal k's {(hkv, skv)}")
    if hkv == 0 or hq % hkv:
        raise OpCheckError(f"{op}: q heads ({hq}) must be a multiple of kv heads ({hkv})")
    out = (*q[:-1], v[-1])
    if len(shapes) > 3:
        mask = tuple(shapes[3])
        target = (*q[:-1], skv)
        if not broadcasts_to(mask, target):
            raise OpCheckError(
                f"{op}: mask shape {mask} must broadcast to [..., Hq, Sq, Skv] = {target}"
            )
    return out


def linear_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """linear: x [..., in], w [out, in], optional bias [out] -> [..., out]."""
    x, w = tuple(shapes[0]), tuple(shapes[1])
    if not x or len(w) != 2:
        raise OpCheckError(
            f"{op} needs x of rank >= 1 and w of rank 2 ([out, in]), got {x} and {w}"
        )
    if x[-1] != w[1]:
        raise OpCheckError(
            f"{op}: x's last dim ({x[-1]}) must equal w's dim 1 (in features, {w[1]}); w is [out, in]"
        )
    if len(shapes) > 2 and tuple(shapes[2]) != (w[0],):
        raise OpCheckError(f"{op}: bias must have shape ({w[0]},), got {tuple(shapes[2])}")
    return (*x[:-1], w[0])


def window_params(
    spatial: int,
    strides: Sequence[int] | None,
    pads: Sequence[int] | None,
    dilations: Sequence[int] | None,
    op: str = "conv",
) -> tuple[Shape, Shape, Shape]:
    """strides, pads (2*spatial: begins then ends) and dilations with ONNX defaults filled in.

    Raises:
        OpCheckError: for a wrong length or a non-positive stride/dilation or a negative pad.
    """
    strides_ = tuple(strides) if strides else (1,) * spatial
    pads_ = tuple(pads) if pads else (0,) * (2 * spatial)
    dilations_ = tuple(dilations) if dilations else (1,) * spatial
    for name, values, length in (
        ("strides", strides_, spatial),
        ("dilations", dilations_, spatial),
        ("pads", pads_, 2 * spatial),
    ):
        if len(values) != length:
            raise OpCheckError(
                f"{op}: {name}={values} must have {length} values for {spatial} spatial dims"
            )
    if min(strides_ + dilations_, default=1) < 1:
        raise OpCheckError(f"{op}: strides={strides_} and dilations={dilations_} must be >= 1")
    if min(pads_, default=0) < 0:
        raise OpCheckError(f"{op}: pads={pads_} must be >= 0")
    return (
        tuple(int(s) for s in strides_),
        tuple(int(p) for p in pads_),
        tuple(int(d) for d in dilations_),
    )


def _window_output(
    spatial_in: Shape, kernel: Shape, strides: Shape, pads: Shape, dilations: Shape, what: str
) -> Shape:
    """Output spatial dims: floor((in + pads - dilation*(k-1) - 1) / stride) + 1, each >= 1."""
    n = len(spatial_in)
    out = []
    for i in range(n):
        span = dilations[i] * (kernel[i] - 1) + 1
        padded = spatial_in[i] + pads[i] + pads[i + n]
        if padded < span:
            raise OpCheckError(
                f"{what}: spatial dim {i} has {spatial_in[i]} (+{pads[i] + pads[i + n]} padding) "
                f"but the window spans {span}; the output would be empty"
            )
        out.append((padded - span) // strides[i] + 1)
    return tuple(out)


def conv_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any], spatial: int) -> Shape:
    """conv1d/conv2d: x [N, C, *S], w [M, C/groups, *K], bias [M] -> [N, M, *out]."""
    x, w = tuple(shapes[0]), tuple(shapes[1])
    if len(x) != spatial + 2 or len(w) != spatial + 2:
        raise OpCheckError(f"{op} needs x and w of rank {spatial + 2}, got {x} and {w}")
    groups = int(params["groups"])
    if groups < 1 or x[1] % groups or w[0] % groups:
        raise OpCheckError(
            f"{op}: groups={groups} must divide both input channels ({x[1]}) and output channels ({w[0]})"
        )
    if w[1] * groups != x[1]:
        raise OpCheckError(
            f"{op}: weights {w} need dim 1 = channels/groups = {x[1] // groups}, got {w[1]}"
        )
    if len(shapes) > 2 and tuple(shapes[2]) != (w[0],):
        raise OpCheckError(f"{op}: bias must have shape ({w[0]},), got {tuple(shapes[2])}")
    strides, pads, dilations = window_params(
        spatial, params.get("strides"), params.get("pads"), params.get("dilations"), op
    )
    return (x[0], w[0], *_window_output(x[2:], w[2:], strides, pads, dilations, op))


def pool_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """max_pool/avg_pool: x [N, C, *S] -> [N, C, *out]; every window must touch a real element."""
    x = tuple(shapes[0])
    kernel = tuple(params["kernel_shape"])
    spatial = len(kernel)
    if spatial < 1 or len(x) != spatial + 2:
        raise OpCheckError(
            f"{op}: kernel_shape={kernel} needs x of rank {spatial + 2} ([N, C, *spatial]), got {x}"
        )
    if min(kernel) < 1:
        raise OpCheckError(f"{op}: kernel_shape={kernel} must be >= 1")
    strides, pads, dilations = window_params(
        spatial, params.get("strides"), params.get("pads"), params.get("dilations"), op
    )
    out = _window_output(x[2:], kernel, strides, pads, dilations, op)
    for i in range(spatial):
        # A window over padding only has no defined max or average: reject it here.
        begin = pads[i]
        for position in range(out[i]):
            first = position * strides[i]
            taps = range(first, first + dilations[i] * kernel[i], dilations[i])
            if not any(begin <= t < begin + x[2 + i] for t in taps):
                raise OpCheckError(
                    f"{op}: on spatial dim {i} the window at output {position} covers padding "
                    f"only (pads={pads}, dilations={dilations}); use smaller pads"
                )
    return (*x[:2], *out)


def global_pool_shape(op: str, shapes: Sequence[Shape], params: dict[str, Any]) -> Shape:
    """global_average_pool: [N, C, *S] -> [N, C, 1, ...]."""
    x = tuple(shapes[0])
    if len(x) < 3:
        raise OpCheckError(f"{op} needs x of rank >= 3 ([N, C, *spatial]), got {x}")
    return x[:2] + (1,) * (len(x) - 2)
