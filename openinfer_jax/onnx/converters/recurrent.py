"""Recurrent ONNX ops (RNN, GRU, LSTM), unrolled over the time axis, one direction at a time.

An LSTM or GRU whose cell is the registry's (default activations, no `clip`, no peepholes,
no `input_forget`) becomes one ``lstm_cell`` / ``gru_cell`` step per time step; the LSTM's
h and c travel together as its [2, batch, hidden] state. Any other recurrent node is written
out: per time step the input and recurrent projections (`linear`, with the two biases
summed at import), gate slices, activations, and the state update. Streaming models run
one frame per step (sequence length 1) and keep the state in the runtime
(``--state h_in=h_out``), so a step is one cell.
"""

from __future__ import annotations

import numpy as np

from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.converters.movement import reshape, slice_axis
from openinfer_jax.onnx.values import Tensor, Value

__all__: list[str] = []

_ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction",
          "hidden_size", "layout", "linear_before_reset", "input_forget")  # fmt: skip
_ACTIVATIONS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Relu": "relu"}
_DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


class _Cell:
    """One direction of one recurrent node: its weights and how a step is written."""

    def __init__(self, ctx: NodeContext, direction: int, hidden: int) -> None:
        self.ctx = ctx
        self.d = direction
        self.hidden = hidden
        op = ctx.op_type
        gates = _GATES[op]
        w = ctx.const(1, "the input weights W")[direction]
        r = ctx.const(2, "the recurrence weights R")[direction]
        if ctx.has(3):
            b = ctx.const(3, "the biases B")[direction]
        else:
            b = np.zeros(2 * gates * hidden, dtype=w.dtype)
        wb, rb = b[: gates * hidden], b[gates * hidden :]
        self.lbr = op == "GRU" and int(ctx.attr("linear_before_reset", 0)) == 1
        tag = f"d{direction}_" if self.bidirectional else ""
        self.tag = tag
        self.w = ctx.constant(w, hint=ctx.hint(0, f"{tag}W"))
        if op == "GRU" and not self.lbr:
            # The candidate's recurrence bias sits inside the reset product: split R.
            self.r = ctx.constant(r[: 2 * hidden], hint=ctx.hint(0, f"{tag}R_zr"))
            self.rh = ctx.constant(r[2 * hidden :], hint=ctx.hint(0, f"{tag}R_h"))
            self.rbh = ctx.constant(rb[2 * hidden :], hint=ctx.hint(0, f"{tag}Rb_h"))
            bias = wb.copy()
            bias[: 2 * hidden] += rb[: 2 * hidden]
            self.bx = ctx.constant(bias, hint=ctx.hint(0, f"{tag}B"))
            self.bh: Tensor | None = None
        elif op == "GRU":
            self.r = ctx.constant(r, hint=ctx.hint(0, f"{tag}R"))
            self.bx = ctx.constant(wb, hint=ctx.hint(0, f"{tag}Wb"))
            self.bh = ctx.constant(rb, hint=ctx.hint(0, f"{tag}Rb"))
        else:
            self.r = ctx.constant(r, hint=ctx.hint(0, f"{tag}R"))
            self.bx = ctx.constant(wb + rb, hint=ctx.hint(0, f"{tag}B"))
            self.bh = None
        self.peep: list[Tensor] | None = None
        if op == "LSTM" and ctx.has(7):
            p = ctx.const(7, "the peephole weights P")[direction]
            self.peep = [
                ctx.constant(p[i * hidden : (i + 1) * hidden], hint=ctx.hint(0, f"{tag}P{g}"))
                for i, g in enumerate("iof")
            ]
        acts = ctx.attr("activations", None)
        count = len(_DEFAULTS[op])
        names = list(acts[direction * count : (direction + 1) * count]) if acts else _DEFAULTS[op]
        for name in names:
            if name not in _ACTIVATIONS:
                raise ctx.error(
                    f"activation {name} is not supported ({', '.join(_ACTIVATIONS)} are)"
                )
        self.acts = [_ACTIVATIONS[n] for n in names]
        clip = ctx.attr("clip", None)
        self.clip = None if clip is None else float(clip)

    @property
    def bidirectional(self) -> bool:
        return self.ctx.attr("direction", "forward") == "bidirectional"

    def act(self, index: int, x: Tensor, hint: str) -> Tensor:
        if self.clip is not None:
            x = self.ctx.emit("clamp", [x], hint=hint + "_clip", min=-self.clip, max=self.clip)
        return self.ctx.emit(self.acts[index], [x], hint=hint)

    def gate(self, x: Tensor, i: int, hint: str) -> Tensor:
        h = self.hidden
        return slice_axis(self.ctx, x, 1, i * h, (i + 1) * h, hint=hint)


def _step_gru(cell: _Cell, x: Tensor, h: Tensor, t: str) -> Tensor:
    ctx = cell.ctx
    gx = ctx.emit("linear", [x, cell.w, cell.bx], hint=ctx.hint(0, f"{t}gx"))
    if cell.lbr:
        assert cell.bh is not None
        gh = ctx.emit("linear", [h, cell.r, cell.bh], hint=ctx.hint(0, f"{t}gh"))
    else:
        gh = ctx.emit("linear", [h, cell.r], hint=ctx.hint(0, f"{t}gh"))
    z = ctx.emit(
        "add",
        [cell.gate(gx, 0, ctx.hint(0, f"{t}gx_z")), cell.gate(gh, 0, ctx.hint(0, f"{t}gh_z"))],
        hint=ctx.hint(0, f"{t}z_in"),
    )
    z = cell.act(0, z, ctx.hint(0, f"{t}z"))
    r = ctx.emit(
        "add",
        [cell.gate(gx, 1, ctx.hint(0, f"{t}gx_r")), cell.gate(gh, 1, ctx.hint(0, f"{t}gh_r"))],
        hint=ctx.hint(0, f"{t}r_in"),
    )
    r = cell.act(0, r, ctx.hint(0, f"{t}r"))
    if cell.lbr:
        rec = ctx.emit(
            "mul", [r, cell.gate(gh, 2, ctx.hint(0, f"{t}gh_n"))], hint=ctx.hint(0, f"{t}rn")
        )
    else:
        rh = ctx.emit("mul", [r, h], hint=ctx.hint(0, f"{t}rh"))
        rec = ctx.emit("linear", [rh, cell.rh, cell.rbh], hint=ctx.hint(0, f"{t}rn"))
    n = ctx.emit(
        "add", [cell.gate(gx, 2, ctx.hint(0, f"{t}gx_n")), rec], hint=ctx.hint(0, f"{t}n_in")
    )
    n = cell.act(1, n, ctx.hint(0, f"{t}n"))
    diff = ctx.emit("sub", [h, n], hint=ctx.hint(0, f"{t}h_minus_n"))
    keep = ctx.emit("mul", [z, diff], hint=ctx.hint(0, f"{t}zd"))
    return ctx.emit("add", [n, keep], hint=ctx.hint(0, f"{t}h"))


def _step_lstm(cell: _Cell, x: Tensor, h: Tensor, c: Tensor, t: str) -> tuple[Tensor, Tensor]:
    ctx = cell.ctx
    gx = ctx.emit("linear", [x, cell.w, cell.bx], hint=ctx.hint(0, f"{t}gx"))
    gh = ctx.emit("linear", [h, cell.r], hint=ctx.hint(0, f"{t}gh"))
    g = ctx.emit("add", [gx, gh], hint=ctx.hint(0, f"{t}gates"))

    def gate(i: int, name: str, peep: Tensor | None, state: Tensor | None) -> Tensor:
        pre = cell.gate(g, i, ctx.hint(0, f"{t}{name}_in"))
        if peep is not None and state is not None:
            pc = ctx.emit("mul", [state, peep], hint=ctx.hint(0, f"{t}{name}_peep"))
            pre = ctx.emit("add", [pre, pc], hint=ctx.hint(0, f"{t}{name}_pre"))
        return pre

    p = cell.peep or [None, None, None]
    i = cell.act(0, gate(0, "i", p[0], c), ctx.hint(0, f"{t}i"))
    f = cell.act(0, gate(2, "f", p[2], c), ctx.hint(0, f"{t}f"))
    if int(ctx.attr("input_forget", 0)):
        one = ctx.constant(np.ones((), dtype=np.asarray(cell.w.data).dtype), hint="one")
        f = ctx.emit("sub", [one, i], hint=ctx.hint(0, f"{t}f_coupled"))
    cand = cell.act(1, cell.gate(g, 3, ctx.hint(0, f"{t}c_in")), ctx.hint(0, f"{t}cand"))
    fc = ctx.emit("mul", [f, c], hint=ctx.hint(0, f"{t}fc"))
    ic = ctx.emit("mul", [i, cand], hint=ctx.hint(0, f"{t}ic"))
    c_new = ctx.emit("add", [fc, ic], hint=ctx.hint(0, f"{t}c"))
    o = cell.act(0, gate(1, "o", p[1], c_new), ctx.hint(0, f"{t}o"))
    hc = cell.act(2, c_new, ctx.hint(0, f"{t}c_act"))
    return ctx.emit("mul", [o, hc], hint=ctx.hint(0, f"{t}h")), c_new


def _registry_weights(ctx: NodeContext, d: int) -> list[Tensor] | None:
    """[W, R, B?] of direction `d` when ``lstm_cell``/``gru_cell`` compute this node's steps."""
    op = ctx.op_type
    if op == "RNN" or ctx.attr("clip", None) is not None:
        return None
    if op == "LSTM" and (ctx.has(7) or int(ctx.attr("input_forget", 0))):
        return None
    acts = ctx.attr("activations", None)
    count = len(_DEFAULTS[op])
    if acts and list(acts[d * count : (d + 1) * count]) != _DEFAULTS[op]:
        return None
    tag = f"d{d}_" if ctx.attr("direction", "forward") == "bidirectional" else ""
    weights = [
        ctx.constant(ctx.const(1, "the input weights W")[d], hint=ctx.hint(0, f"{tag}W")),
        ctx.constant(ctx.const(2, "the recurrence weights R")[d], hint=ctx.hint(0, f"{tag}R")),
    ]
    if ctx.has(3):
        weights.append(ctx.constant(ctx.const(3, "the biases B")[d], hint=ctx.hint(0, f"{tag}B")))
    return weights


def _cell_steps(
    ctx: NodeContext, d: int, weights: list[Tensor], steps: list[int], seq: int, batch: int,
    hidden: int, layout: int,
) -> tuple[dict[int, Tensor], Tensor, Tensor | None]:  # fmt: skip
    """Direction `d` as one registry cell per step: (h per step, final h, final c)."""
    x_all = ctx.value(0)
    tag = f"d{d}_" if ctx.attr("direction", "forward") == "bidirectional" else ""
    lbr = bool(int(ctx.attr("linear_before_reset", 0))) or None
    h = _initial(ctx, 5, d, batch, hidden, layout, "h", tag)
    state = h
    if ctx.op_type == "LSTM":
        c = _initial(ctx, 6, d, batch, hidden, layout, "c", tag)
        both = [reshape(ctx, v, (1, batch, hidden), hint=ctx.hint(0, f"{tag}{n}0_")) for v, n in
                ((h, "h"), (c, "c"))]  # fmt: skip
        state = ctx.emit("concat", both, hint=ctx.hint(0, f"{tag}state0"), axis=0)
    outs: dict[int, Tensor] = {}
    for t in steps:
        step = f"{tag}t{t}_" if seq > 1 else tag
        x = _frame(ctx, x_all, t, seq, batch, layout, step)
        if ctx.op_type == "GRU":
            state = ctx.emit(
                "gru_cell", [x, *weights[:2], state, *weights[2:]],
                hint=ctx.hint(0, f"{step}h"), linear_before_reset=lbr,
            )  # fmt: skip
            outs[t] = state
        else:
            state = ctx.emit(
                "lstm_cell",
                [x, *weights[:2], state, *weights[2:]],
                hint=ctx.hint(0, f"{step}state"),
            )
            part = slice_axis(ctx, state, 0, 0, 1, hint=ctx.hint(0, f"{step}h_"))
            outs[t] = reshape(ctx, part, (batch, hidden), hint=ctx.hint(0, f"{step}h"))
    if ctx.op_type == "GRU":
        return outs, state, None
    last = slice_axis(ctx, state, 0, 1, 2, hint=ctx.hint(0, f"{tag}c_"))
    return outs, outs[steps[-1]], reshape(ctx, last, (batch, hidden), hint=ctx.hint(0, f"{tag}c"))


def _step_rnn(cell: _Cell, x: Tensor, h: Tensor, t: str) -> Tensor:
    ctx = cell.ctx
    gx = ctx.emit("linear", [x, cell.w, cell.bx], hint=ctx.hint(0, f"{t}gx"))
    gh = ctx.emit("linear", [h, cell.r], hint=ctx.hint(0, f"{t}gh"))
    pre = ctx.emit("add", [gx, gh], hint=ctx.hint(0, f"{t}pre"))
    return cell.act(0, pre, ctx.hint(0, f"{t}h"))


@converter(
    "RNN",
    "GRU",
    "LSTM",
    attrs=_ATTRS,
    becomes="lstm_cell/gru_cell per time step (default activations, no clip or peepholes); "
    "otherwise linear, slice, sigmoid/tanh, mul, add per time step",
)
def _recurrent(ctx: NodeContext) -> None:
    op = ctx.op_type
    layout = int(ctx.attr("layout", 0))
    x_shape = ctx.shape(0)
    seq, batch = (x_shape[1], x_shape[0]) if layout else (x_shape[0], x_shape[1])
    hidden = int(ctx.attr("hidden_size", ctx.shape(2)[-1]))
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.error(f"direction={direction!r} is not supported")
    if ctx.has(4):
        lens = ctx.const(4, "sequence_lens")
        if not np.all(lens == seq):
            raise ctx.error("sequence_lens shorter than the sequence are not supported")
    dirs = [0, 1] if direction == "bidirectional" else [0]
    x_all = ctx.value(0)
    ys: list[list[Tensor]] = []
    finals: list[tuple[Tensor, Tensor | None]] = []
    for d in dirs:
        reverse = direction == "reverse" or d == 1
        steps = list(range(seq))[::-1] if reverse else list(range(seq))
        weights = _registry_weights(ctx, d)
        if weights is not None:
            outs, h_last, c_last = _cell_steps(ctx, d, weights, steps, seq, batch, hidden, layout)
            ys.append([outs[t] for t in range(seq)])
            finals.append((h_last, c_last))
            continue
        cell = _Cell(ctx, d, hidden)
        h = _initial(ctx, 5, d, batch, hidden, layout, "h", cell.tag)
        c = _initial(ctx, 6, d, batch, hidden, layout, "c", cell.tag) if op == "LSTM" else None
        outs = {}
        for t in steps:
            tag = f"{cell.tag}t{t}_" if seq > 1 else cell.tag
            x = _frame(ctx, x_all, t, seq, batch, layout, tag)
            if op == "GRU":
                h = _step_gru(cell, x, h, tag)
            elif op == "LSTM":
                assert c is not None
                h, c = _step_lstm(cell, x, h, c, tag)
            else:
                h = _step_rnn(cell, x, h, tag)
            outs[t] = h
        ys.append([outs[t] for t in range(seq)])
        finals.append((h, c))
    _outputs(ctx, ys, finals, seq, batch, hidden, layout)


def _initial(ctx: NodeContext, index: int, d: int, batch: int, hidden: int, layout: int,
             name: str, tag: str) -> Tensor:  # fmt: skip
    dtype = ctx.dtype(0)
    if not ctx.has(index):
        return ctx.constant(
            np.zeros((batch, hidden), dtype=dtype.numpy), dtype, ctx.hint(0, f"{tag}{name}0")
        )
    value = ctx.value(index)
    shape = ctx.shape(index)
    axis = 1 if layout else 0
    if shape[axis] > 1:
        value = slice_axis(ctx, value, axis, d, d + 1, hint=ctx.hint(0, f"{tag}{name}0_dir"))
    return reshape(ctx, value, (batch, hidden), hint=ctx.hint(0, f"{tag}{name}0"))


def _frame(
    ctx: NodeContext, x: Value, t: int, seq: int, batch: int, layout: int, tag: str
) -> Tensor:
    shape = ctx.shape(0)
    axis = 1 if layout else 0
    if seq > 1:
        x = slice_axis(ctx, x, axis, t, t + 1, hint=ctx.hint(0, f"{tag}x_slice"))
    return reshape(ctx, x, (batch, shape[-1]), hint=ctx.hint(0, f"{tag}x"))


def _outputs(ctx: NodeContext, ys: list[list[Tensor]], finals: list[tuple[Tensor, Tensor | None]],
             seq: int, batch: int, hidden: int, layout: int) -> None:  # fmt: skip
    dirs = len(ys)
    emit_y = len(ctx.node.output) > 0 and bool(ctx.node.output[0])
    if emit_y:
        # Y: [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]).
        shape = (batch, 1, 1, hidden) if layout else (1, 1, batch, hidden)
        frames = []
        for t in range(seq):
            per_dir = [
                reshape(ctx, ys[d][t], shape, hint=ctx.hint(0, f"y{d}_t{t}")) for d in range(dirs)
            ]
            frames.append(
                per_dir[0]
                if dirs == 1
                else ctx.emit("concat", per_dir, hint=ctx.hint(0, f"y_t{t}"), axis=2)
            )
        axis = 1 if layout else 0
        ctx.set_output(0, frames[0] if seq == 1 else ctx.emit("concat", frames, axis=axis))
    for index, which in ((1, 0), (2, 1)):
        if len(ctx.node.output) <= index or not ctx.node.output[index]:
            continue
        states = [f[which] for f in finals]
        shape = (batch, 1, hidden) if layout else (1, batch, hidden)
        parts: list[Tensor] = [
            reshape(ctx, s, shape, hint=ctx.hint(index) if dirs == 1 else ctx.hint(index, f"d{d}"))
            for d, s in enumerate(states)
            if s is not None
        ]
        ctx.set_output(
            index,
            parts[0]
            if dirs == 1
            else ctx.emit("concat", parts, hint=ctx.hint(index), axis=1 if layout else 0),
        )
