"""ONNX Scan: the body unrolled over the (import-time known) sequence length.

Each iteration binds the body's state inputs to the current states and its scan inputs to
one slice of each scanned input, imports the body's nodes (as `If` inlines a branch), and
takes the new states and this iteration's scan outputs from the body's outputs. The scan
outputs are stacked along their axis at the end. Opset 8's batched form (a leading
`sequence_lens` input) is not supported.
"""

from __future__ import annotations

import numpy as np

from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.converters.common import norm_axis
from openinfer_jax.onnx.converters.movement import reshape, slice_axis
from openinfer_jax.onnx.values import Const, Value

# An unrolled scan writes its body once per step: beyond this many steps, refuse.
_MAX_STEPS = 4096


def _step_slice(ctx: NodeContext, x: Value, axis: int, t: int, hint: str) -> Value:
    """Element `t` of `x` along `axis`, that axis removed."""
    if isinstance(x, Const):
        return Const(np.take(x.array, t, axis=axis), x.dtype, hint)
    shape = x.shape[:axis] + x.shape[axis + 1 :]
    return reshape(ctx, slice_axis(ctx, x, axis, t, t + 1, hint=f"{hint}_s"), shape, hint=hint)


def _stack(ctx: NodeContext, parts: list[Value], axis: int, hint: str) -> Value:
    """`parts` (equal shapes) stacked along a new axis `axis`."""
    if all(isinstance(p, Const) for p in parts):
        arrays = [p.array for p in parts if isinstance(p, Const)]
        return Const(np.stack(arrays, axis=axis), parts[0].dtype, hint)
    grown = []
    for i, part in enumerate(parts):
        shape = ctx.as_tensor(part).shape
        grown.append(reshape(ctx, part, (*shape[:axis], 1, *shape[axis:]), hint=f"{hint}_{i}"))
    if len(grown) == 1:
        return grown[0]
    return ctx.emit("concat", grown, hint=hint, axis=axis)


@converter(
    "Scan",
    attrs=(
        "body",
        "num_scan_inputs",
        "scan_input_axes",
        "scan_input_directions",
        "scan_output_axes",
        "scan_output_directions",
    ),
    becomes="the body's nodes once per sequence step (unrolled), then concat of the scan outputs",
)
def _scan(ctx: NodeContext) -> None:
    if ctx.opset < 9:
        raise ctx.error(
            "Scan before opset 9 (with sequence_lens and a batch axis) is not supported"
        )
    body = ctx.attr("body")
    m = int(ctx.attr("num_scan_inputs"))
    inputs = [ctx.value(i) for i in range(ctx.input_count)]
    n = len(inputs) - m
    scanned = inputs[n:]
    in_axes = list(ctx.attr("scan_input_axes", [0] * m))
    in_dirs = list(ctx.attr("scan_input_directions", [0] * m))
    k = len(body.output) - n
    out_axes = list(ctx.attr("scan_output_axes", [0] * k))
    out_dirs = list(ctx.attr("scan_output_directions", [0] * k))
    ranks = [len(ctx.shape(n + j)) for j in range(m)]
    in_axes = [norm_axis(ctx, int(a), r) for a, r in zip(in_axes, ranks, strict=True)]
    lengths = {ctx.shape(n + j)[a] for j, a in enumerate(in_axes)}
    if len(lengths) != 1:
        raise ctx.error(f"the scan inputs have different sequence lengths {sorted(lengths)}")
    steps = lengths.pop()
    if steps > _MAX_STEPS:
        raise ctx.error(f"a scan of {steps} steps is too long to unroll (at most {_MAX_STEPS})")
    if steps == 0:
        raise ctx.error("a scan over an empty sequence is not supported")
    importer = ctx.importer
    states: list[Value] = inputs[:n]
    collected: list[list[Value]] = [[] for _ in range(k)]
    for t in range(steps):
        importer.initializers(body)
        for i, info in enumerate(body.input[:n]):
            importer.bind(info.name, states[i])
        for j, info in enumerate(body.input[n:]):
            pos = steps - 1 - t if in_dirs[j] else t
            hint = ctx.hint(0, f"{info.name}_t{pos}")
            importer.bind(info.name, _step_slice(ctx, scanned[j], in_axes[j], pos, hint))
        importer.nodes(body.node)
        results = [importer.values[o.name] for o in body.output]
        states = results[:n]
        for j in range(k):
            collected[j].append(results[n + j])
    for i in range(n):
        ctx.set_output(i, states[i])
    for j in range(k):
        parts = collected[j][::-1] if out_dirs[j] else collected[j]
        rank = len(parts[0].array.shape if isinstance(parts[0], Const) else parts[0].shape)
        axis = norm_axis(ctx, int(out_axes[j]), rank + 1)
        ctx.set_output(n + j, _stack(ctx, parts, axis, ctx.hint(n + j)))
