"""Model-building ops declared as compositions of other registry ops (`ops.composite`).

Each op has its own declaration (validation reports a bad call on the user's node) and an
expansion into registry ops; `openinfer_jax.passes.expand_composites` replaces the node
before any backend runs. Results round to the storage dtype after each step of the
expansion (f8/bf16/f16 lose a little more than a single fused kernel would); f32 and f64
match the formulas to their precision. Semantics follow ONNX:

* ``squeeze(x, axes=[])``: removes the listed dims, each of size 1 (negative axes count from
  the end); without axes, every dim of size 1. ``unsqueeze(x, axes)``: inserts dims of size
  1 at the listed positions of the *output* (ONNX Unsqueeze-13). Both are a reshape.
* ``instance_norm(x, scale, bias, epsilon=1e-5)``: x [N, C, *spatial] normalized over the
  spatial dims per (n, c), then ``* scale[c] + bias[c]`` (ONNX InstanceNormalization).
* ``group_norm(x, scale, bias, num_groups, epsilon=1e-5)``: the C channels split into
  num_groups groups of C/num_groups; each (n, group) is normalized over its channels and
  spatial dims, then ``* scale[c] + bias[c]`` with scale and bias of shape [C] (ONNX
  GroupNormalization-21; opset 18's per-group scale is not accepted).
* ``lstm_cell(x, w, r, state, b?)``: one step of an ONNX LSTM layer (one direction, default
  activations sigmoid/tanh/tanh, no peepholes, no clip). x [B, I]; w [4H, I] and r [4H, H]
  hold the gates in ONNX order **i, o, f, c** (input, output, forget, cell) along dim 0; b
  [8H] is ONNX's B (Wb then Rb, each in i, o, f, c order; optional, default 0). ``state`` is
  [2, B, H]: state[0] the hidden state h, state[1] the cell state c; the output is the next
  state in the same layout, so ``op lstm_cell(x, w, r, state, b) >> state`` steps it in place.
  g = x w^T + Wb + h r^T + Rb; i, o, f = sigmoid of their slices; c' = f * c + i * tanh(g_c);
  h' = o * tanh(c'). (PyTorch's gate order is i, f, g, o: reorder its weights.)
* ``gru_cell(x, w, r, h, b?, linear_before_reset=false)``: one step of an ONNX GRU layer (one
  direction, sigmoid/tanh). x [B, I]; w [3H, I], r [3H, H] with gates in ONNX order **z, r,
  h** (update, reset, hidden); b [6H] = Wb then Rb (optional). z = sigmoid(x Wz^T + Wbz +
  h Rz^T + Rbz), r likewise; the candidate is tanh(x Wh^T + Wbh + (r * h) Rh^T + Rbh), or with
  ``linear_before_reset`` tanh(x Wh^T + Wbh + r * (h Rh^T + Rbh)) (PyTorch's GRU, whose gate
  order is r, z, n); h' = (1 - z) * candidate + z * h, computed as candidate + z * (h -
  candidate). Output: h' [B, H].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from openinfer_jax.ops.composite import Builder, composite
from openinfer_jax.ops.elementwise import input_specs, params_of
from openinfer_jax.ops.nn import ANY_DTYPE
from openinfer_jax.ops.registry import (
    FLOAT,
    REQUIRED,
    OpCheckError,
    ParamKind,
    ParamSpec,
)

__all__: list[str] = []

Shape = tuple[int, ...]
_EPSILON = ParamSpec("epsilon", ParamKind.FLOAT, 1e-5, doc="added to the variance")


def _reshape_params(in_shape: Shape, out_shape: Shape) -> tuple[int, ...]:
    """Reshape dims for `out_shape` that stay right if leading dims shrink at run time: the
    dims before the first one that changes are written 0 (copy the input's)."""
    same = 0
    while same < min(len(in_shape), len(out_shape)) and in_shape[same] == out_shape[same]:
        same += 1
    return (0,) * same + tuple(out_shape[same:])


# ---- squeeze / unsqueeze --------------------------------------------------------------------------
def _axes(op: str, axes: Sequence[int], rank: int) -> list[int]:
    out = []
    for axis in axes:
        if not -rank <= axis < rank:
            raise OpCheckError(f"{op}: axis {axis} is out of range for rank {rank}")
        out.append(axis % rank)
    if len(set(out)) != len(out):
        raise OpCheckError(f"{op}: axes {list(axes)} name a dim twice")
    return out


def _squeeze_shape(shapes: Sequence[Shape], params: Mapping[str, Any]) -> Shape:
    (x,) = shapes
    axes = _axes("squeeze", params["axes"], len(x))
    if not params["axes"]:
        return tuple(d for d in x if d != 1)
    for axis in axes:
        if x[axis] != 1:
            raise OpCheckError(
                f"squeeze: dim {axis} of x {x} has size {x[axis]}, not 1; squeeze only dims of size 1"
            )
    return tuple(d for k, d in enumerate(x) if k not in axes)


def _unsqueeze_shape(shapes: Sequence[Shape], params: Mapping[str, Any]) -> Shape:
    (x,) = shapes
    if not params["axes"]:
        raise OpCheckError("unsqueeze: axes is empty; give the positions of the new dims")
    rank = len(x) + len(params["axes"])
    axes = set(_axes("unsqueeze", params["axes"], rank))
    dims = iter(x)
    return tuple(1 if k in axes else next(dims) for k in range(rank))


def _reshape_to(rule: Any) -> Any:
    def expand(b: Builder, inputs: Sequence[Any], params: Mapping[str, Any]) -> Any:
        (x,) = inputs
        shape = b.shape(x)
        return b.op("reshape", x, shape=_reshape_params(shape, rule([shape], params)))

    return expand


_AXES = "axes"
composite(
    "squeeze", "movement", input_specs("x", ANY_DTYPE), _reshape_to(_squeeze_shape),
    shape_rule=_squeeze_shape, inplace=True,
    params=params_of(ParamSpec(_AXES, ParamKind.INT_LIST, (), doc="dims to remove (default: every dim of size 1)")),
    doc="ONNX Squeeze: remove dims of size 1 (a reshape)",
)  # fmt: skip
composite(
    "unsqueeze", "movement", input_specs("x", ANY_DTYPE), _reshape_to(_unsqueeze_shape),
    shape_rule=_unsqueeze_shape, inplace=True,
    params=params_of(ParamSpec(_AXES, ParamKind.INT_LIST, REQUIRED, doc="positions of the new dims in the output")),
    doc="ONNX Unsqueeze: insert dims of size 1 (a reshape)",
)  # fmt: skip


# ---- instance_norm / group_norm ------------------------------------------------------------------
def _channel_norm_shape(op: str, shapes: Sequence[Shape], groups: int | None = None) -> Shape:
    x, scale, bias = shapes
    if len(x) < 3:
        raise OpCheckError(f"{op}: x must be [N, C, *spatial] (rank >= 3), got shape {x}")
    channels = x[1]
    for name, shape in (("scale", scale), ("bias", bias)):
        if shape != (channels,):
            raise OpCheckError(f"{op}: {name} must have shape [C] = ({channels},), got {shape}")
    if groups is not None and (groups < 1 or channels % groups):
        raise OpCheckError(
            f"{op}: num_groups={groups} must divide the {channels} channels of x {x}"
        )
    return x


def _per_channel(b: Builder, y: Any, scale: Any, bias: Any) -> Any:
    """y * scale[c] + bias[c] for y [N, C, *spatial] and scale, bias [C]."""
    ones = (1,) * (len(b.shape(y)) - 2)
    channels = b.shape(scale)[0]
    scaled = b.op("mul", y, b.op("reshape", scale, shape=(channels, *ones)))
    return b.op("add", scaled, b.op("reshape", bias, shape=(channels, *ones)))


def _instance_norm(b: Builder, inputs: Sequence[Any], params: Mapping[str, Any]) -> Any:
    x, scale, bias = inputs
    y = b.op("layer_norm", x, axis=2, epsilon=params["epsilon"])
    return _per_channel(b, y, scale, bias)


def _group_norm(b: Builder, inputs: Sequence[Any], params: Mapping[str, Any]) -> Any:
    x, scale, bias = inputs
    grouped = b.op("reshape", x, shape=(0, params["num_groups"], -1))
    normed = b.op("layer_norm", grouped, axis=2, epsilon=params["epsilon"])
    y = b.op("reshape", normed, shape=_reshape_params(b.shape(normed), b.shape(x)))
    return _per_channel(b, y, scale, bias)


composite(
    "group_norm", "normalization", input_specs("x scale bias", FLOAT), _group_norm,
    shape_rule=lambda shapes, params: _channel_norm_shape("group_norm", shapes, params["num_groups"]),
    params=params_of(
        ParamSpec("num_groups", ParamKind.INT, REQUIRED, doc="channel groups; must divide C"),
        _EPSILON,
    ),
    inplace=True,
    doc="ONNX GroupNormalization-21: per (n, group) over its channels and spatial dims, then "
    "* scale + bias [C]",
)  # fmt: skip
composite(
    "instance_norm", "normalization", input_specs("x scale bias", FLOAT), _instance_norm,
    shape_rule=lambda shapes, params: _channel_norm_shape("instance_norm", shapes),
    params=params_of(_EPSILON), inplace=True,
    doc="ONNX InstanceNormalization: per (n, c) over the spatial dims, then * scale + bias [C]",
)  # fmt: skip


# ---- lstm_cell / gru_cell ---------------------------------------------------------------------------
def _recurrent_shape(op: str, gates: int, shapes: Sequence[Shape]) -> tuple[int, int]:
    """Check x [B, I], w [gH, I], r [gH, H] and the optional bias [2gH]; returns (B, H)."""
    x, w, r = shapes[:3]
    if len(x) != 2:
        raise OpCheckError(f"{op}: x must be [batch, input_size], got shape {x}")
    if len(r) != 2 or r[0] != gates * r[1]:
        raise OpCheckError(f"{op}: r must be [{gates}*H, H], got shape {r}")
    hidden = r[1]
    if w != (gates * hidden, x[1]):
        raise OpCheckError(
            f"{op}: w must be [{gates}*H, input_size] = ({gates * hidden}, {x[1]}), got {w}"
        )
    if len(shapes) > 4 and shapes[4] != (2 * gates * hidden,):
        raise OpCheckError(
            f"{op}: b must be [{2 * gates}*H] = ({2 * gates * hidden},) (Wb then Rb), got {shapes[4]}"
        )
    return x[0], hidden


def _lstm_shape(shapes: Sequence[Shape], params: Mapping[str, Any]) -> Shape:
    batch, hidden = _recurrent_shape("lstm_cell", 4, shapes)
    if shapes[3] != (2, batch, hidden):
        raise OpCheckError(
            f"lstm_cell: state must be [2, batch, H] = (2, {batch}, {hidden}) (h then c), got {shapes[3]}"
        )
    return (2, batch, hidden)


def _gru_shape(shapes: Sequence[Shape], params: Mapping[str, Any]) -> Shape:
    batch, hidden = _recurrent_shape("gru_cell", 3, shapes)
    if shapes[3] != (batch, hidden):
        raise OpCheckError(f"gru_cell: h must be [batch, H] = ({batch}, {hidden}), got {shapes[3]}")
    return (batch, hidden)


def _cut(b: Builder, v: Any, start: int, end: int, axis: int = -1) -> Any:
    return b.op("slice", v, starts=(start,), ends=(end,), axes=(axis,))


def _linear(b: Builder, v: Any, w: Any, bias: Any | None) -> Any:
    return b.op("linear", v, w) if bias is None else b.op("linear", v, w, bias)


def _biases(b: Builder, inputs: Sequence[Any], size: int) -> tuple[Any | None, Any | None]:
    """ONNX's B split into (Wb, Rb), or (None, None) without it."""
    if len(inputs) < 5:
        return None, None
    return _cut(b, inputs[4], 0, size, 0), _cut(b, inputs[4], size, 2 * size, 0)


def _lstm_cell(b: Builder, inputs: Sequence[Any], params: Mapping[str, Any]) -> Any:
    x, w, r, state = inputs[:4]
    hidden = b.shape(r)[1]
    wb, rb = _biases(b, inputs, 4 * hidden)
    h = _cut(b, state, 0, 1, 0)  # [1, B, H]
    c = _cut(b, state, 1, 2, 0)
    gates = b.op("add", _linear(b, h, r, rb), _linear(b, x, w, wb))  # [1, B, 4H]

    def gate(k: int, fn: str) -> Any:
        return b.op(fn, _cut(b, gates, k * hidden, (k + 1) * hidden))

    i, o, f, cell = gate(0, "sigmoid"), gate(1, "sigmoid"), gate(2, "sigmoid"), gate(3, "tanh")
    c_next = b.op("add", b.op("mul", f, c), b.op("mul", i, cell))
    h_next = b.op("mul", o, b.op("tanh", c_next))
    return b.op("concat", h_next, c_next, axis=0)


def _gru_cell(b: Builder, inputs: Sequence[Any], params: Mapping[str, Any]) -> Any:
    x, w, r, h = inputs[:4]
    hidden = b.shape(r)[1]
    wb, rb = _biases(b, inputs, 3 * hidden)
    gx = _linear(b, x, w, wb)  # [B, 3H]: z, r, h parts

    def part(v: Any, k: int, count: int = 1, axis: int = -1) -> Any:
        return _cut(b, v, k * hidden, (k + count) * hidden, axis)

    if params["linear_before_reset"]:
        gh = _linear(b, h, r, rb)
        zr = b.op("sigmoid", b.op("add", part(gx, 0, 2), part(gh, 0, 2)))
        reset = part(zr, 1)
        candidate = b.op("tanh", b.op("add", part(gx, 2), b.op("mul", reset, part(gh, 2))))
    else:
        rb_zr = None if rb is None else part(rb, 0, 2, 0)
        gh = _linear(b, h, part(r, 0, 2, 0), rb_zr)
        zr = b.op("sigmoid", b.op("add", part(gx, 0, 2), gh))
        reset = part(zr, 1)
        rb_h = None if rb is None else part(rb, 2, 1, 0)
        hidden_in = _linear(b, b.op("mul", reset, h), part(r, 2, 1, 0), rb_h)
        candidate = b.op("tanh", b.op("add", part(gx, 2), hidden_in))
    z = part(zr, 0)
    return b.op("add", candidate, b.op("mul", z, b.op("sub", h, candidate)))


composite(
    "lstm_cell", "recurrent", input_specs("x w r state b", FLOAT), _lstm_cell,
    shape_rule=_lstm_shape, min_inputs=4, inplace=True,
    doc="one ONNX LSTM step (gates i, o, f, c); state [2, B, H] = (h, c) in and out; b optional",
)  # fmt: skip
composite(
    "gru_cell", "recurrent", input_specs("x w r h b", FLOAT), _gru_cell,
    shape_rule=_gru_shape, min_inputs=4, inplace=True,
    params=params_of(ParamSpec("linear_before_reset", ParamKind.BOOL, False,
                               doc="apply the reset gate after the hidden linear (PyTorch's GRU)")),
    doc="one ONNX GRU step (gates z, r, h) -> h [B, H]; b optional",
)  # fmt: skip
