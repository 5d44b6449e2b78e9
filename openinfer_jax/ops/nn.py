"""Declarations of the model-building ops: math, activations, norms, movement, attention, conv.

Each op is one entry in the tables below, registered into `openinfer_jax.ops.registry`. The
JAX lowerings live in `nn_jax`, the independent NumPy references in `nn_reference`, the shape
rules and param checks in `nn_shapes`. Semantics follow ONNX where ONNX defines the op.

Precision: f8 (e5m2), bf16 and f16 inputs compute in f32 and round once to the storage
dtype; f32 and f64 compute natively. Tests hold f64 to 1e-12, f32 to 1e-5 relative and the
narrow types to one storage ulp against an f64 reference. XLA flushes subnormal results
(and subnormal intermediates) to zero. The data-movement ops (gather, embedding, reshape,
transpose/permute, concat, slice, pad, where) move values unchanged, so they accept every
tensor dtype, packed ones included (unpacked int8/uint8 in memory, packed in storage).

Layouts and choices a model author needs:

- rope: x is [..., seq, head_dim] (e.g. [heads, seq, head_dim]); positions is a scalar offset
  (token i at `offset + i`, so a decode step passes `step`) or a [seq] vector. Half-split
  pairs by default (HF llama / NeoX), `interleaved=true` for (2i, 2i+1) pairs.
- attention: q [..., Hq, Sq, D], k [..., Hkv, Skv, D], v [..., Hkv, Skv, Dv], Hq a multiple
  of Hkv (grouped KV, no copy of the cache). `causal` aligns queries to the end of the keys,
  so a decode step (Sq=1) sees the whole cache. A bool mask selects (true = attend), a float
  mask is added to the scores. A query with no visible key gets zeros, never NaN.
- gather/embedding: negative indices count from the end; indices still out of range are
  clamped to the nearest valid row (a kernel never reads out of bounds; the reference does
  the same, so the behaviour is part of the op's definition).
- pools: floor-mode output sizes; a window over padding only is rejected at validation.
- pad: reflect/edge/wrap repeat periodically past the axis length (NumPy/ONNX); negative
  pads are rejected (use slice to crop).

Optional inputs (layer_norm's scale and bias, rms_norm's scale, the conv bias, the attention
mask) are trailing inputs: the ops are declared variadic with a minimum, and the shape rule
enforces the maximum.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.names import VarName
from openinfer_jax.ops import expr as ex
from openinfer_jax.ops import nn_jax, nn_reference, nn_shapes
from openinfer_jax.ops.expr import Input, select, switch
from openinfer_jax.ops.registry import (
    BOOL,
    ELEMENTWISE_TRAITS,
    FLOAT,
    PACKED_SIGNED,
    PACKED_UNSIGNED,
    REQUIRED,
    SIGNED,
    TERNARY,
    UNSIGNED,
    Call,
    CheckRule,
    InputSpec,
    OpCheckError,
    OpDef,
    OutputRule,
    ParamKind,
    ParamSpec,
    Traits,
    register,
)

__all__ = ["ANY_DTYPE", "INDEX_DTYPES", "NN_OPS"]

#: Every tensor dtype: data movement never looks at values.
ANY_DTYPE: frozenset[DType] = (
    FLOAT | SIGNED | UNSIGNED | BOOL | PACKED_SIGNED | PACKED_UNSIGNED | TERNARY
)
#: Dtypes accepted as indices, ids and positions.
INDEX_DTYPES: frozenset[DType] = SIGNED | UNSIGNED

Shape = tuple[int, ...]
RawRule = Callable[[str, Sequence[Shape], dict[str, Any]], Shape]


def _impl(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Adapt `fn(*arrays, **params)` to the registry's `impl(call, *arrays)` convention."""

    @functools.wraps(fn)
    def impl(call: Call, *arrays: Any) -> Any:
        return fn(*arrays, **call.params)

    return impl


def _rule(
    op: str, rule: RawRule, inputs: Sequence[InputSpec], max_inputs: int | None
) -> Callable[..., Shape]:
    """Bind the op name into a shape rule and enforce the maximum input count first."""
    names = ", ".join(spec.name for spec in inputs)

    def shape_rule(shapes: Sequence[Shape], params: Mapping[str, Any]) -> Shape:
        if max_inputs is not None and len(shapes) > max_inputs:
            raise OpCheckError(
                f"{op} takes at most {max_inputs} inputs ({names}), got {len(shapes)}"
            )
        return rule(op, shapes, dict(params))

    return shape_rule


def _p(
    name: str, kind: ParamKind, default: Any = None, doc: str = "", allowed: tuple[Any, ...] = ()
) -> ParamSpec:
    """A ParamSpec in the tables' compact spelling."""
    return ParamSpec(name, kind, default, allowed=allowed, doc=doc)


def _in(spec: str, dtypes: frozenset[DType], group: str = "T") -> tuple[InputSpec, ...]:
    """Inputs named by the words of `spec`, sharing `dtypes` and one type group."""
    return tuple(InputSpec(name, dtypes, group) for name in spec.split())


@dataclass(frozen=True)
class NnOp:
    """One table row: everything `register` needs besides the shared defaults."""

    name: str
    category: str
    inputs: tuple[InputSpec, ...]
    lowering: Callable[..., Any]
    reference: Callable[..., Any]
    shape_rule: RawRule
    params: tuple[ParamSpec, ...] = ()
    min_inputs: int | None = None  # set for ops with optional trailing inputs
    unbounded: bool = False  # the last input repeats without limit (concat)
    inplace: bool = False
    broadcast: bool = False
    output: OutputRule = field(default_factory=OutputRule)
    traits: Traits = field(default_factory=Traits)
    expr: ex.ExprSpec | None = None
    check: CheckRule | None = None
    doc: str = ""
    quant_check: Callable[[int, Mapping[str, Any]], str | None] | None = None


def _gather_rows_only(index: int, params: Mapping[str, Any]) -> str | None:
    """A block-quantized gather input is selected by rows: blocks run along the last axis."""
    if params.get("axis", 0) != 0:
        return (
            f"gather of a block-quantized input selects whole rows: axis must be 0, got "
            f"{params.get('axis')}; use embedding, or a plain f32 table"
        )
    return None


# ---- param checks that need dtypes ----------------------------------------------------------------


def _check_attention_mask(
    dtypes: Sequence[DType], shapes: Sequence[Shape], params: Mapping[str, Any]
) -> None:
    """A float mask must have q's dtype (it is added to the scores); a bool mask selects."""
    if len(dtypes) > 3 and dtypes[3] is not DType.BOOL and dtypes[3] is not dtypes[0]:
        raise OpCheckError(
            f"attention: mask has dtype {dtypes[3].short}; allowed: bool (true = attend) "
            f"or {dtypes[0].short} (added to the scores, like q)"
        )


def _check_pad_value(
    dtypes: Sequence[DType], shapes: Sequence[Shape], params: Mapping[str, Any]
) -> None:
    """The constant must be representable in the padded tensor's dtype."""
    value, dtype = params.get("value"), dtypes[0]
    if params.get("mode") != "constant" or value is None or isinstance(value, VarName):
        return
    if dtype.is_float:
        return
    if dtype is DType.BOOL:
        if value not in (0, 1):
            raise OpCheckError(
                f"pad: value={value!r} does not fit bool; allowed: 0, 1, true, false"
            )
        return
    if isinstance(value, float) and not value.is_integer():
        raise OpCheckError(f"pad: value={value!r} is not an integer; {dtype.short} needs one")
    lo, hi = dtype.value_range()
    allowed_t1 = dtype is not DType.T1 or value in (-1, 1)
    if not (lo <= int(value) <= hi) or not allowed_t1:
        what = "-1 or 1" if dtype is DType.T1 else f"{lo}..{hi}"
        raise OpCheckError(f"pad: value={value!r} does not fit {dtype.short}; allowed: {what}")


# ---- the table ------------------------------------------------------------------------------------
# Norms and rope: their C kernels read each row before writing it, so the output may alias x.
_NORM = Traits(alias_safe=True)
_NORM_MATH = Traits(alias_safe=True, math=True)

_AXIS = _p("axis", ParamKind.INT, -1, "axis to work along; negative counts from the end")
_WINDOW = (
    _p("strides", ParamKind.INT_LIST, (), "step per spatial dim (default 1s)"),
    _p("pads", ParamKind.INT_LIST, (), "ONNX pads: begins then ends per spatial dim (default 0s)"),
    _p("dilations", ParamKind.INT_LIST, (), "kernel dilation per spatial dim (default 1s)"),
)
_x = Input(0)
_UNARY_DOCS = {
    "exp": (ex.exp(_x), "e^x"),
    "log": (ex.log(_x), "natural log; log(0) = -inf, log(x<0) = NaN"),
    "sqrt": (ex.sqrt(_x), "square root; sqrt(x<0) = NaN"),
    # 1/sqrt(-0.0) is -inf, like 1/-0.0 (and a driver's fused rsqrt of -0.0 gave NaN).
    "rsqrt": (select(_x.eq(0), 1 / _x, 1 / ex.sqrt(_x)), "1 / sqrt(x); rsqrt(0) = inf"),
    "tanh": (ex.tanh(_x), "hyperbolic tangent"),
    "sigmoid": (1 / (1 + ex.exp(-_x)), "logistic 1 / (1 + e^-x)"),
    "silu": (_x / (1 + ex.exp(-_x)), "x * sigmoid(x) (a.k.a. swish)"),
}
# gelu: x * Phi(x) = 0.5x * erfc(-x/sqrt2) (no cancellation of 1 + erf for x << 0); the tanh
# form 0.5x(1 + tanh(y)) == x / (1 + exp(-2y)), y = sqrt(2/pi)(x + 0.044715x^3), likewise.
_GELU = switch(
    "approximate",
    none=0.5 * _x * ex.erfc(-_x * 0.7071067811865476),
    tanh=_x / (1 + ex.exp(-1.5957691216057307 * (_x + 0.044715 * _x * _x * _x))),
)

_UNARY_ROWS = tuple(
    NnOp(
        name, "math", _in("x", FLOAT), nn_jax.UNARY_MATH[name], nn_reference.UNARY_MATH[name],
        nn_shapes.same_shape, inplace=True, traits=ELEMENTWISE_TRAITS, expr=tree,
        doc=doc + "; f8/bf16/f16 computed in f32",
    )
    for name, (tree, doc) in _UNARY_DOCS.items()
)  # fmt: skip

_CONV_ROWS = tuple(
    NnOp(
        f"conv{n}d", "conv", _in("x w bias", FLOAT), nn_jax.conv, nn_reference.conv,
        functools.partial(nn_shapes.conv_shape, spatial=n),
        params=(*_WINDOW, _p("groups", ParamKind.INT, 1, "channel groups; groups = C is depthwise")),
        min_inputs=2,
        doc=f"ONNX Conv, {n} spatial dim{'s' if n > 1 else ''}: x [N, C, ...], w [M, C/groups, k...], "
        "optional bias [M]; f8/bf16/f16 in f32",
    )
    for n in (1, 2)
)  # fmt: skip

NN_OPS: tuple[NnOp, ...] = (
    *_UNARY_ROWS,
    NnOp("gelu", "math", _in("x", FLOAT), nn_jax.gelu, nn_reference.gelu, nn_shapes.same_shape,
         params=(_p("approximate", ParamKind.STRING, "none", "none = erf form, tanh = tanh approximation",
                    allowed=("none", "tanh")),),
         inplace=True, traits=ELEMENTWISE_TRAITS, expr=_GELU, doc="ONNX Gelu: x * Phi(x) or its tanh approximation; f8/bf16/f16 in f32"),
    NnOp("softmax", "normalization", _in("x", FLOAT), nn_jax.softmax, nn_reference.softmax,
         nn_shapes.softmax_shape, params=(_AXIS,), inplace=True, traits=_NORM_MATH,
         doc="ONNX Softmax (opset 13): exp(x - max) / sum along axis; f8/bf16/f16 in f32"),
    NnOp("log_softmax", "normalization", _in("x", FLOAT), nn_jax.log_softmax, nn_reference.log_softmax,
         nn_shapes.softmax_shape, params=(_AXIS,), inplace=True, traits=_NORM_MATH,
         doc="ONNX LogSoftmax: x - max - log(sum(exp(x - max))); f8/bf16/f16 in f32"),
    NnOp("layer_norm", "normalization", _in("x scale bias", FLOAT), nn_jax.layer_norm, nn_reference.layer_norm,
         nn_shapes.norm_shape, min_inputs=1, inplace=True, traits=_NORM,
         params=(_p("axis", ParamKind.INT, -1, "first normalized axis; axes axis..rank-1 are normalized"),
                 _p("epsilon", ParamKind.FLOAT, 1e-5, "added to the variance")),
         doc="ONNX LayerNormalization: (x - mean) / sqrt(var + eps) * scale + bias; scale and bias optional"),
    NnOp("rms_norm", "normalization", _in("x scale", FLOAT), nn_jax.rms_norm, nn_reference.rms_norm,
         nn_shapes.norm_shape, min_inputs=1, inplace=True, traits=_NORM,
         params=(_p("axis", ParamKind.INT, -1, "first normalized axis; axes axis..rank-1 are normalized"),
                 _p("epsilon", ParamKind.FLOAT, 1e-6, "added to the mean square")),
         doc="RMSNormalization: x / sqrt(mean(x^2) + eps) * scale; scale optional"),
    NnOp("batch_norm", "normalization", _in("x scale bias mean var", FLOAT), nn_jax.batch_norm,
         nn_reference.batch_norm, nn_shapes.batch_norm_shape, inplace=True, traits=_NORM,
         params=(_p("epsilon", ParamKind.FLOAT, 1e-5, "added to the variance"),),
         doc="ONNX BatchNormalization, inference: (x - mean) / sqrt(var + eps) * scale + bias per channel"),
    NnOp("gather", "movement",
         (InputSpec("data", ANY_DTYPE, quantized=True), InputSpec("indices", INDEX_DTYPES, "I")),
         nn_jax.gather, nn_reference.gather, nn_shapes.gather_shape,
         params=(_p("axis", ParamKind.INT, 0, "axis of data to index"),), quant_check=_gather_rows_only,
         doc="ONNX Gather; negative indices count from the end, out-of-range indices are clamped"),
    NnOp("embedding", "movement",
         (InputSpec("table", ANY_DTYPE, quantized=True), InputSpec("ids", INDEX_DTYPES, "I")),
         nn_jax.embedding, nn_reference.embedding, nn_shapes.embedding_shape,
         doc="rows of table [V, ...] picked by ids -> ids.shape + table.shape[1:]; ids clamped like gather"),
    NnOp("reshape", "movement", _in("x", ANY_DTYPE), nn_jax.reshape, nn_reference.reshape,
         nn_shapes.reshape_shape, traits=Traits(alias_safe=True, reads_neighbours=False),
         params=(_p("shape", ParamKind.INT_LIST, REQUIRED, "target dims; 0 copies the input dim, one -1 is inferred"),),
         doc="ONNX Reshape (allowzero=0)"),
    *(
        NnOp(name, "movement", _in("x", ANY_DTYPE), nn_jax.transpose, nn_reference.transpose,
             nn_shapes.transpose_shape,
             params=(_p("perm", ParamKind.INT_LIST, (), "new order of the axes; empty reverses them"),),
             doc=f"ONNX Transpose{' (alias of transpose)' if name == 'permute' else ''}")
        for name in ("transpose", "permute")
    ),
    NnOp("concat", "movement", _in("x", ANY_DTYPE), nn_jax.concat, nn_reference.concat, nn_shapes.concat_shape,
         params=(_p("axis", ParamKind.INT, REQUIRED, "axis to join along; negative counts from the end"),),
         min_inputs=1, unbounded=True, doc="ONNX Concat of one or more inputs (variadic)"),
    NnOp("slice", "movement", _in("x", ANY_DTYPE), nn_jax.slice_, nn_reference.slice_, nn_shapes.slice_shape,
         params=(_p("starts", ParamKind.INT_LIST, REQUIRED, "first index per sliced axis"),
                 _p("ends", ParamKind.INT_LIST, REQUIRED, "end (exclusive) per sliced axis; clamped"),
                 _p("axes", ParamKind.INT_LIST, (), "sliced axes (default 0..len(starts)-1)"),
                 _p("steps", ParamKind.INT_LIST, (), "step per sliced axis, non-zero (default 1s)")),
         doc="ONNX Slice with static starts/ends/axes/steps, clamped like ONNX; negative steps reverse"),
    NnOp("pad", "movement", _in("x", ANY_DTYPE), nn_jax.pad, nn_reference.pad, nn_shapes.pad_shape,
         params=(_p("pads", ParamKind.INT_LIST, REQUIRED, "begins then ends per padded axis, each >= 0"),
                 _p("mode", ParamKind.STRING, "constant", "fill rule",
                    allowed=("constant", "reflect", "edge", "wrap")),
                 _p("value", ParamKind.SCALAR, 0, "fill value for mode=constant"),
                 _p("axes", ParamKind.INT_LIST, (), "padded axes (default all)")),
         check=_check_pad_value,
         doc="ONNX Pad; reflect/wrap repeat periodically past the axis length; negative pads are rejected"),
    NnOp("where", "movement", (InputSpec("cond", BOOL, "C"), *_in("a b", ANY_DTYPE)),
         nn_jax.where, nn_reference.where, nn_shapes.where_shape, broadcast=True, inplace=True, output=OutputRule(index=1),
         traits=ELEMENTWISE_TRAITS, expr=select(Input(0).ne(0), Input(1), Input(2)),
         doc="ONNX Where: a where cond else b, NumPy broadcasting over all three"),
    NnOp("rope", "attention", (InputSpec("x", FLOAT), InputSpec("positions", INDEX_DTYPES, "P")),
         nn_jax.rope, nn_reference.rope, nn_shapes.rope_shape, inplace=True, traits=_NORM_MATH,
         params=(_p("theta", ParamKind.FLOAT, 10000.0, "frequency base (llama 1e4, SmolLM2 1e5)"),
                 _p("rotary_dim", ParamKind.UINT, 0, "leading dims rotated; 0 = all of head_dim"),
                 _p("interleaved", ParamKind.BOOL, False,
                    "false: pairs (i, i+rot/2), HF/NeoX rotate_half; true: pairs (2i, 2i+1), GPT-J")),
         doc="rotary embedding of x [..., seq, head_dim]; positions: scalar offset or [seq]; angles in f32 "
         "(f64 for f64 x)"),
    NnOp("attention", "attention", (InputSpec("q", FLOAT), *_in("k v", FLOAT, "KV"), InputSpec("mask", FLOAT | BOOL, "")),
         nn_jax.attention, nn_reference.attention, nn_shapes.attention_shape, min_inputs=3,
         traits=Traits(math=True),
         params=(_p("causal", ParamKind.BOOL, False, "query i sees keys j <= Skv - Sq + i (end-aligned)"),
                 _p("scale", ParamKind.FLOAT, None, "score scale; default 1/sqrt(head_dim)")),
         check=_check_attention_mask,
         doc="softmax(q k^T * scale + mask) v; q [..., Hq, Sq, D], k/v [..., Hkv, Skv, D]; Hq % Hkv == 0 "
         "(grouped KV); k and v share a float dtype that may differ from q's (an f16 cache read by f32 "
         "queries); computed in f32 (f64 when any input is f64), the result in q's dtype; bool mask true "
         "= attend; rows with no visible key give 0"),
    NnOp("linear", "numerical",
         (InputSpec("x", FLOAT), InputSpec("w", FLOAT, quantized=True), InputSpec("bias", FLOAT)), nn_jax.linear, nn_reference.linear, nn_shapes.linear_shape,
         min_inputs=2,
         doc="x @ w^T + bias with w [out, in] (PyTorch/HF layout, no transpose op needed); "
         "bias optional; f8/bf16/f16 in f32"),
    *_CONV_ROWS,
    NnOp("max_pool", "pooling", _in("x", FLOAT | SIGNED | UNSIGNED), nn_jax.max_pool, nn_reference.max_pool,
         nn_shapes.pool_shape,
         params=(_p("kernel_shape", ParamKind.INT_LIST, REQUIRED, "window size per spatial dim"), *_WINDOW),
         doc="ONNX MaxPool (floor mode), channel-first, any spatial rank; a window over padding only is an error"),
    NnOp("avg_pool", "pooling", _in("x", FLOAT), nn_jax.avg_pool, nn_reference.avg_pool, nn_shapes.pool_shape,
         params=(_p("kernel_shape", ParamKind.INT_LIST, REQUIRED, "window size per spatial dim"), *_WINDOW,
                 _p("count_include_pad", ParamKind.BOOL, False, "divide by the full window, pads included")),
         doc="ONNX AveragePool (floor mode), channel-first, any spatial rank; f8/bf16/f16 in f32"),
    NnOp("global_average_pool", "pooling", _in("x", FLOAT), nn_jax.global_average_pool,
         nn_reference.global_average_pool, nn_shapes.global_pool_shape,
         doc="ONNX GlobalAveragePool: mean over spatial dims, kept as 1s"),
)  # fmt: skip


def _register(row: NnOp) -> OpDef:
    """Turn one table row into a registered OpDef."""
    bounded = row.min_inputs is not None and not row.unbounded
    max_inputs = len(row.inputs) if bounded else None
    return register(
        OpDef(
            name=row.name,
            category=row.category,
            inputs=row.inputs,
            jax_impl=_impl(row.lowering),
            ref_impl=_impl(row.reference),
            params={spec.name: spec for spec in row.params},
            inplace=row.inplace,
            broadcast=row.broadcast,
            output=row.output,
            variadic=row.min_inputs is not None,
            min_inputs=row.min_inputs or len(row.inputs),
            shape_rule=_rule(row.name, row.shape_rule, row.inputs, max_inputs),
            check=row.check,
            traits=row.traits,
            expr=row.expr,
            doc=row.doc,
            quant_check=row.quant_check,
        )
    )


for _row in NN_OPS:
    _register(_row)
