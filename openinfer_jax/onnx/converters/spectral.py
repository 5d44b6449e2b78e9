"""DFT and STFT as `linear` steps with constant cosine/sine matrices.

A discrete Fourier transform of length n is linear in the real and imaginary parts of the
signal, so each output part is a sum of `linear` steps with matrices computed at import
(in float64, stored in the signal's dtype). The transformed axis is moved last for them and
back afterwards. The length (`dft_length`, `frame_length`) and the axis must be known at
import; an inverse one-sided transform (irfft) treats the input as half of a Hermitian
spectrum, as NumPy's `irfft` does. STFT gathers its frames with one `gather` of constant
positions and folds a constant window into the matrices.
"""

from __future__ import annotations

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.converters.common import norm_axis
from openinfer_jax.onnx.converters.elementwise import binary
from openinfer_jax.onnx.converters.movement import reshape, slice_axis
from openinfer_jax.onnx.values import Const, Tensor, Value


def _matrices(
    length: int, n: int, inverse: bool, onesided: bool, complex_in: bool
) -> dict[tuple[int, int], np.ndarray]:
    """(output part, input part) -> [K, length] matrix; parts 0 = real, 1 = imaginary."""
    half = n // 2 + 1
    if inverse and onesided:
        k = np.arange(min(length, half))  # the spectrum's bins used
        j = np.arange(n)
        theta = 2 * np.pi * np.outer(j, k) / n
        weight = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0) / n
        cos, sin = np.cos(theta) * weight, -np.sin(theta) * weight
        pad = ((0, 0), (0, length - len(k)))
        out = {(0, 0): np.pad(cos, pad)}
        if complex_in:
            out[(0, 1)] = np.pad(sin, pad)
        return out
    bins = half if onesided else n
    j = np.arange(length)
    theta = 2 * np.pi * np.outer(np.arange(bins), j) / n
    used = (j < n)[None, :]  # a longer signal is truncated to n samples
    cos, sin = np.cos(theta) * used, np.sin(theta) * used
    if inverse:
        cos, sin = cos / n, sin / n
        out = {(0, 0): cos, (1, 0): sin}
        if complex_in:
            out.update({(0, 1): -sin, (1, 1): cos})
    else:
        out = {(0, 0): cos, (1, 0): -sin}
        if complex_in:
            out.update({(0, 1): sin, (1, 1): cos})
    return out


def _transform(
    ctx: NodeContext,
    parts: list[Tensor],
    matrices: dict[tuple[int, int], np.ndarray],
    window: Value | None = None,
) -> list[Tensor]:
    """Each output part: the sum over input parts of linear(part, matrix) (last axis)."""
    dtype = parts[0].dtype
    outputs = []
    for o in sorted({o for o, _ in matrices}):
        total: Tensor | None = None
        for c, part in enumerate(parts):
            if (o, c) not in matrices:
                continue
            matrix = matrices[(o, c)]
            if isinstance(window, Const):
                matrix = matrix * window.array.astype(np.float64)[None, :]
            weight = ctx.constant(matrix.astype(dtype.numpy), dtype, ctx.hint(0, f"dft{o}{c}"))
            term = ctx.emit("linear", [part, weight], hint=ctx.hint(0, f"part{o}{c}"))
            total = (
                term if total is None else ctx.emit("add", [total, term], hint=ctx.hint(0, f"y{o}"))
            )
        assert total is not None
        outputs.append(total)
    return outputs


def _join(ctx: NodeContext, parts: list[Tensor], perm: list[int] | None) -> Tensor:
    """The parts moved back (inverse of `perm`) and stacked along a new last axis."""
    joined = []
    for i, part in enumerate(parts):
        if perm is not None:
            back = [perm.index(a) for a in range(len(perm))]
            part = ctx.emit("transpose", [part], hint=ctx.hint(0, f"back{i}"), perm=back)
        joined.append(reshape(ctx, part, (*part.shape, 1), hint=ctx.hint(0, f"c{i}")))
    if len(joined) == 1:
        return joined[0]
    return ctx.emit("concat", joined, axis=len(joined[0].shape) - 1)


def _split_parts(ctx: NodeContext, x: Tensor) -> list[Tensor]:
    """The real (and imaginary) part of `x` [..., 1 or 2], the last axis removed."""
    last = len(x.shape) - 1
    if x.shape[-1] not in (1, 2):
        raise ctx.error(f"the last axis of the input has size {x.shape[-1]}; 1 or 2 expected")
    return [
        reshape(ctx, slice_axis(ctx, x, last, c, c + 1, ctx.hint(0, f"in{c}")), x.shape[:-1])
        for c in range(x.shape[-1])
    ]


@converter(
    "DFT",
    attrs=("axis", "inverse", "onesided"),
    becomes="linear with constant cosine/sine matrices per real/imaginary part, transposes",
)
def _dft(ctx: NodeContext) -> None:
    x = ctx.tensor(0)
    rank = len(x.shape)
    if ctx.opset >= 20:
        axis = int(np.asarray(ctx.const(2, "the axis")).item()) if ctx.has(2) else -2
    else:
        axis = int(ctx.attr("axis", 1))
    axis = norm_axis(ctx, axis, rank)
    if axis == rank - 1:
        raise ctx.error("the transformed axis cannot be the last one (real/imaginary parts)")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    if onesided and x.shape[-1] == 2 and not inverse:
        raise ctx.error("onesided=1 is only defined for a real input (last axis of size 1)")
    length = x.shape[axis]
    if ctx.has(1):
        n = int(np.asarray(ctx.const(1, "dft_length")).item())
    else:
        n = 2 * (length - 1) if inverse and onesided else length
    if n < 1:
        raise ctx.error(f"dft_length {n} must be positive")
    parts = _split_parts(ctx, x)
    perm = None
    if axis != rank - 2:
        perm = [a for a in range(rank - 1) if a != axis] + [axis]
        parts = [
            ctx.emit("transpose", [p], hint=ctx.hint(0, f"t{i}"), perm=perm)
            for i, p in enumerate(parts)
        ]
    matrices = _matrices(length, n, inverse, onesided, len(parts) == 2)
    ctx.set_output(0, _join(ctx, _transform(ctx, parts, matrices), perm))


@converter(
    "STFT",
    attrs=("onesided",),
    becomes="gather of the frames, linear with constant cosine/sine matrices (window folded in)",
)
def _stft(ctx: NodeContext) -> None:
    x = ctx.tensor(0)
    if len(x.shape) != 3:
        raise ctx.error(f"the signal has shape {list(x.shape)}; [batch, length, 1 or 2] expected")
    step = int(np.asarray(ctx.const(1, "frame_step")).item())
    window = ctx.value(2) if ctx.has(2) else None
    if ctx.has(3):
        n = int(np.asarray(ctx.const(3, "frame_length")).item())
    elif window is not None:
        n = (window.array.shape if isinstance(window, Const) else window.shape)[0]
    else:
        raise ctx.error("STFT needs a window or a frame_length")
    length = x.shape[1]
    if step < 1 or n < 1 or n > length:
        raise ctx.error(f"frame_step {step} / frame_length {n} do not fit a signal of {length}")
    frames = (length - n) // step + 1
    positions = (np.arange(frames)[:, None] * step + np.arange(n)[None, :]).astype(np.int64)
    index = ctx.constant(positions, DType.I64, ctx.hint(0, "frames"))
    parts = [ctx.emit("gather", [p, index], hint=ctx.hint(0, f"f{i}"), axis=1)
             for i, p in enumerate(_split_parts(ctx, x))]  # fmt: skip
    if window is not None and not isinstance(window, Const):
        parts = [
            binary(ctx, "mul", p, window, hint=ctx.hint(0, f"w{i}")) for i, p in enumerate(parts)
        ]
    onesided = bool(ctx.attr("onesided", 1))
    matrices = _matrices(n, n, False, onesided, len(parts) == 2)
    ctx.set_output(0, _join(ctx, _transform(ctx, parts, matrices, window), None))


@converter(
    "MelWeightMatrix",
    attrs=("output_datatype",),
    becomes="a constant (computed at import: its inputs set its shape, so they must be known)",
)
def _mel_weight_matrix(ctx: NodeContext) -> None:
    # Reached only when an input is not known at import (else the node is folded): the
    # matrix's shape depends on the inputs' values, so say which one to fold.
    for i, what in enumerate(("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz",
                              "upper_edge_hertz")):  # fmt: skip
        ctx.const(i, what)
    raise ctx.error("MelWeightMatrix could not be computed at import")
