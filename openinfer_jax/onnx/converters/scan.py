"""ONNX Scan and Loop: the body unrolled over the (import-time known) sequence length.

Each iteration binds the body's state inputs to the current states and its scan inputs to
one slice of each scanned input, imports the body's nodes (as `If` inlines a branch), and
takes the new states and this iteration's scan outputs from the body's outputs. The scan
outputs are stacked along their axis at the end. Opset 8's batched form (a leading
`sequence_lens` input, axis 0 a batch) is unrolled per batch item, then per step. A Loop
is unrolled the same way when its trip count and condition are known at import and every
iteration's condition folds (the loop's length does not depend on run-time data).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType
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
    body = ctx.attr("body")
    m = int(ctx.attr("num_scan_inputs"))
    if ctx.opset < 9:
        _scan8(ctx, body, m)
        return
    inputs = [ctx.value(i) for i in range(ctx.input_count)]
    n = len(inputs) - m
    k = len(body.output) - n
    ranks = [len(ctx.shape(n + j)) for j in range(m)]
    in_axes = [
        norm_axis(ctx, int(a), r)
        for a, r in zip(ctx.attr("scan_input_axes", [0] * m), ranks, strict=True)
    ]
    in_dirs = list(ctx.attr("scan_input_directions", [0] * m))
    out_axes = list(ctx.attr("scan_output_axes", [0] * k))
    out_dirs = list(ctx.attr("scan_output_directions", [0] * k))
    states, collected = _unroll(ctx, body, inputs[:n], inputs[n:], in_axes, in_dirs, "")
    for i in range(n):
        ctx.set_output(i, states[i])
    for j in range(k):
        parts = collected[j][::-1] if out_dirs[j] else collected[j]
        rank = len(parts[0].array.shape if isinstance(parts[0], Const) else parts[0].shape)
        axis = norm_axis(ctx, int(out_axes[j]), rank + 1)
        ctx.set_output(n + j, _stack(ctx, parts, axis, ctx.hint(n + j)))


def _scan8(ctx: NodeContext, body: Any, m: int) -> None:
    """Opset 8's Scan: axis 0 of every input is a batch, scanned over axis 1, one batch
    item at a time (`sequence_lens`, if given, must be the full length)."""
    inputs = [ctx.value(i) for i in range(1, ctx.input_count)]
    n = len(inputs) - m
    k = len(body.output) - n
    dirs = list(ctx.attr("directions", [0] * m))
    batch = ctx.shape(1)[0]
    if ctx.has(0):
        lens = np.asarray(ctx.const(0, "sequence_lens"))
        if not np.all(lens == ctx.shape(1 + n)[1]):
            raise ctx.error("sequence_lens shorter than the sequence are not supported")
    finals: list[list[Value]] = [[] for _ in range(n)]
    outputs: list[list[Value]] = [[] for _ in range(k)]
    for b in range(batch):
        items = [_step_slice(ctx, v, 0, b, ctx.hint(0, f"b{b}_{i}")) for i, v in enumerate(inputs)]
        states, collected = _unroll(ctx, body, items[:n], items[n:], [0] * m, dirs, f"b{b}_")
        for i in range(n):
            finals[i].append(states[i])
        for j in range(k):
            outputs[j].append(_stack(ctx, collected[j], 0, ctx.hint(n + j, f"b{b}")))
    for i in range(n):
        ctx.set_output(i, _stack(ctx, finals[i], 0, ctx.hint(i)))
    for j in range(k):
        ctx.set_output(n + j, _stack(ctx, outputs[j], 0, ctx.hint(n + j)))


def _unroll(
    ctx: NodeContext, body: Any, states: list[Value], scanned: list[Value], in_axes: list[int],
    in_dirs: list[int], tag: str,
) -> tuple[list[Value], list[list[Value]]]:  # fmt: skip
    """The body once per step: (final states, each scan output's per-step values)."""
    lengths = {_shape(v)[a] for v, a in zip(scanned, in_axes, strict=True)}
    if len(lengths) != 1:
        raise ctx.error(f"the scan inputs have different sequence lengths {sorted(lengths)}")
    steps = lengths.pop()
    if steps > _MAX_STEPS:
        raise ctx.error(f"a scan of {steps} steps is too long to unroll (at most {_MAX_STEPS})")
    if steps == 0:
        raise ctx.error("a scan over an empty sequence is not supported")
    n = len(states)
    importer = ctx.importer
    collected: list[list[Value]] = [[] for _ in range(len(body.output) - n)]
    for t in range(steps):
        importer.initializers(body)
        for i, info in enumerate(body.input[:n]):
            importer.bind(info.name, states[i])
        for j, info in enumerate(body.input[n:]):
            pos = steps - 1 - t if in_dirs[j] else t
            hint = ctx.hint(0, f"{tag}{info.name}_t{pos}")
            importer.bind(info.name, _step_slice(ctx, scanned[j], in_axes[j], pos, hint))
        importer.nodes(body.node)
        results = [importer.values[o.name] for o in body.output]
        states = results[:n]
        for j, part in enumerate(results[n:]):
            collected[j].append(part)
    return states, collected


def _shape(value: Value) -> tuple[int, ...]:
    return tuple(value.array.shape) if isinstance(value, Const) else value.shape


@converter(
    "Loop",
    attrs=("body",),
    becomes="the body's nodes once per iteration (unrolled; trip count and condition known at "
    "import), then concat of the scan outputs",
)
def _loop(ctx: NodeContext) -> None:
    body = ctx.attr("body")
    trips = int(np.asarray(ctx.const(0, "the trip count M")).item()) if ctx.has(0) else None
    go = bool(np.asarray(ctx.const(1, "the loop condition")).item()) if ctx.has(1) else True
    if trips is None and not ctx.has(1):
        raise ctx.error("a Loop without trip count and condition runs forever")
    states: list[Value] = [ctx.value(i) for i in range(2, ctx.input_count)]
    n = len(states)
    collected: list[list[Value]] = [[] for _ in range(len(body.output) - 1 - n)]
    importer = ctx.importer
    limit = _MAX_STEPS if trips is None else trips
    if limit > _MAX_STEPS:
        raise ctx.error(
            f"a loop of {limit} iterations is too long to unroll (at most {_MAX_STEPS})"
        )
    done = 0
    while go and done < limit:
        importer.initializers(body)
        importer.bind(body.input[0].name, Const(np.array(done, np.int64), DType.I64, "iter"))
        importer.bind(body.input[1].name, Const(np.array(go), DType.BOOL, "cond"))
        for info, value in zip(body.input[2:], states, strict=True):
            importer.bind(info.name, value)
        importer.nodes(body.node)
        results = [importer.values[o.name] for o in body.output]
        cond = results[0]
        if not isinstance(cond, Const):
            raise ctx.error(
                "the loop's condition is computed at run time (a data-dependent loop): write "
                "the loop in the DSL instead"
            )
        go = bool(np.asarray(cond.array).item())
        states = results[1 : 1 + n]
        for j, part in enumerate(results[1 + n :]):
            collected[j].append(part)
        done += 1
    if trips is None and go:
        raise ctx.error(f"the loop did not end within {_MAX_STEPS} iterations")
    for i in range(n):
        ctx.set_output(i, states[i])
    for j, parts in enumerate(collected):
        if not parts:
            raise ctx.error("a loop of zero iterations with scan outputs (empty tensors)")
        ctx.set_output(n + j, _stack(ctx, parts, 0, ctx.hint(n + j)))
