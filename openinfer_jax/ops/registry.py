"""The op registry: every op is declared here once, and every layer reads the declaration.

An op is one `OpDef`. Validation, the simulator, the Vulkan backend, the C emitter and the
generated docs/ops.md all read the same fields, so adding an op is one `register(OpDef(...))`
call in an op module plus its kernels. The fields, for backend authors:

``name``, ``category``, ``doc``
    DSL name (``op add(a, b) >> y``), a grouping used by docs and kernel templates, one line
    of documentation.
``inputs``: tuple of `InputSpec`
    Positional inputs. Each has a name, an allowed dtype set and a *type group*: inputs that
    share a group letter must have equal dtypes (ONNX-style type constraints). When
    ``variadic`` is true the last input repeats (``min_inputs`` to ``max_inputs`` inputs in
    total; ``max_inputs=None`` means no limit).
``params``: dict of `ParamSpec`
    Named settings with kind (`ParamKind`), default (`REQUIRED` when mandatory), allowed values
    and aliases (``alpha`` for relu's ``negative_slope``). `OpDef.resolve_params` turns the IR's
    raw values into typed Python values: float, int, bool, str, `DType`, ``tuple[int, ...]``,
    and for ``acc`` a ``tuple[DType, DType]`` (accumulator, output) or None.
``output``: `OutputRule`
    ``same`` (dtype of input ``index``), ``fixed`` (``dtype``) or ``attr`` (the dtype param
    named ``attr``, as cast's ``to``). When the op has ``acc_rules`` and ``acc`` is given,
    the output dtype is ``acc[-1]`` instead.
``acc_rules``: tuple of dtype pairs
    Accepted ``acc`` values, ``(accumulator, output)``. ``acc=[f32, f32]`` must equal one rule
    exactly; the single form ``acc=i32`` means ``[i32, i32]`` (accumulate in i32, output i32).
    The accumulator must also suit the input (`acc_accepts`): a float accumulator for float
    inputs, a signed one for signed inputs, unsigned for unsigned, never narrower than the input.
``broadcast``, ``inplace``
    Policies. Broadcasting is NumPy's (right-aligned, dims equal or 1); an op that denies it
    rejects unequal input shapes. ``inplace`` allows the output to name an input
    (`OpDef.check_inplace`).
``shape_rule``
    ``f(in_shapes, params) -> out_shape``; None means elementwise (broadcast or equal shapes).
``check``
    Optional extra validation ``f(in_dtypes, in_shapes, params)`` raising `OpCheckError`
    (for rules a dtype set cannot express, such as cast's source/target combinations).
``traits``: `Traits`
    What backends and passes may assume: ``elementwise`` (output element i reads only element
    i of each broadcast input), ``alias_safe`` (every kernel may write the output over an
    input of the same shape), ``reads_neighbours`` (an output element reads other input
    positions), ``math`` (transcendental functions in the compute type: a backend without
    them in f64 cannot run f64 calls), ``index_output`` (the output holds indices, not computed
    values). `OpDef.capabilities` turns them and the dtypes into the capabilities a call needs.
``expr``
    For elementwise ops, the per-element math as an expression tree
    (`openinfer_jax.ops.expr`): a tree, a mapping from compute family (``real``, ``sint``,
    ``uint``, ``bool``, ``*``) to trees, or a `Switch` on a string param. The C and GLSL
    printers render it; backends apply the storage rules themselves (integer results wrap to
    the storage type, packed types to their bit width; low-precision floats round to nearest
    even). None for ops whose kernel is not one expression (reductions, matmul, cast).
``kernel_params``
    Optional ``f(in_dtypes, params) -> params``: the values the tree's `Param` leaves take
    (dtype-dependent defaults such as ``div_by_zero_mask``, clamp bounds rounded inward for
    integers). Values that are not numbers (run-time variables) pass through unchanged.
``composite``
    For an op declared as a composition of other registry ops, its expansion
    (`openinfer_jax.ops.composite`); the pass `openinfer_jax.passes.expand_composites`
    replaces its nodes before any backend runs, so backends never see it.
``jax_impl`` / ``ref_impl``
    ``f(call, *arrays)``: the JAX lowering (jit-traceable) and the independent NumPy reference.
    Public entry points are `OpDef.lower_jax` and `OpDef.reference`.

In-memory representation (simulator, references): byte-sized dtypes as their NumPy/JAX dtype
(bf16/f8 via ml_dtypes); packed dtypes unpacked to int8 (signed, t2/t1 as -1/0/+1) or uint8
(unsigned). Since int8 cannot tell i8 from i4, pass ``dtypes=`` to `OpDef.lower_jax` and
`OpDef.reference` for packed inputs; without it the dtypes are read from the arrays.

Errors: every user mistake raises `OpCheckError` (a `GraphValidationError` without location);
validation and the simulator re-raise it naming the block and node.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from openinfer_jax.core.dtypes import DType, dtype_from_name, dtype_from_numpy
from openinfer_jax.core.errors import GraphValidationError
from openinfer_jax.core.names import VarName
from openinfer_jax.ops import expr as ex

if TYPE_CHECKING:
    from openinfer_jax.ops.composite import Composite

__all__ = [
    "ACC_ANY",
    "BOOL",
    "FLOAT",
    "PACKED_SIGNED",
    "PACKED_UNSIGNED",
    "REQUIRED",
    "SIGNED",
    "TERNARY",
    "UNSIGNED",
    "Call",
    "CheckRule",
    "InputSpec",
    "OpCheckError",
    "OpDef",
    "OutputRule",
    "ParamKind",
    "ParamSpec",
    "ShapeRule",
    "Traits",
    "acc_accepts",
    "all_ops",
    "broadcast_shapes",
    "compute_dtype",
    "elementwise_shape",
    "format_dtypes",
    "get",
    "names",
    "register",
]


class OpCheckError(GraphValidationError):
    """An op's inputs or params break its declaration. Raised without location; callers add it."""


# ---- dtype sets (reference §2a abbreviations) -------------------------------------------------
FLOAT: frozenset[DType] = frozenset({DType.F8, DType.BF16, DType.F16, DType.F32, DType.F64})
SIGNED: frozenset[DType] = frozenset({DType.I8, DType.I16, DType.I32, DType.I64})
UNSIGNED: frozenset[DType] = frozenset({DType.U8, DType.U16, DType.U32, DType.U64})
BOOL: frozenset[DType] = frozenset({DType.BOOL})
PACKED_SIGNED: frozenset[DType] = frozenset({DType.I4, DType.I2, DType.I1})
PACKED_UNSIGNED: frozenset[DType] = frozenset({DType.U4, DType.U2, DType.U1})
TERNARY: frozenset[DType] = frozenset({DType.T2, DType.T1})
ACC_ANY: frozenset[DType] = FLOAT | SIGNED | UNSIGNED

# Order used whenever dtypes are listed to a user, so messages and docs are stable.
_DTYPE_ORDER: tuple[DType, ...] = (
    DType.F8, DType.BF16, DType.F16, DType.F32, DType.F64,
    DType.I8, DType.I16, DType.I32, DType.I64,
    DType.U8, DType.U16, DType.U32, DType.U64,
    DType.I4, DType.I2, DType.I1, DType.U4, DType.U2, DType.U1, DType.T2, DType.T1,
    DType.BOOL,
    DType.F8E4M3FN, DType.F8E4M3FNUZ, DType.F8E5M2FNUZ, DType.F8E8M0, DType.F4E2M1,
)  # fmt: skip
_ORDER_INDEX = {d: i for i, d in enumerate(_DTYPE_ORDER)}


def format_dtypes(dtypes: Iterable[DType]) -> str:
    """A stable, comma-separated listing of dtypes (``"f32, f64, i8"``)."""
    return ", ".join(d.short for d in sorted(dtypes, key=lambda d: _ORDER_INDEX.get(d, 99)))


def compute_dtype(dtype: DType) -> DType:
    """The type an elementwise kernel computes in for `dtype`.

    Floats narrower than f32 (f8 variants, f4e2m1, bf16, f16) compute in f32 (like the
    original's CPU backend) and round to the storage type; packed integer types compute in i32
    and wrap to their bit width; all others compute in themselves.
    """
    if dtype.is_float and dtype not in (DType.F32, DType.F64):
        return DType.F32
    if dtype.is_packed:
        return DType.I32
    return dtype


# ---- params -------------------------------------------------------------------------------------
class ParamKind(enum.Enum):
    """What a param holds. `ParamSpec.coerce` documents what each kind accepts."""

    SCALAR = "scalar"  # bool/int/float (fill value, clamp bounds, masks), or a VarName
    FLOAT = "float"  # a real number (int accepted), or a VarName
    INT = "int"
    UINT = "uint"  # an int >= 0
    BOOL = "bool"
    STRING = "string"  # one of `allowed`
    DTYPE = "dtype"  # one of `allowed` (a DType set)
    INT_LIST = "int_list"  # a tuple of ints; a single int is accepted as a 1-tuple
    FLOAT_LIST = "float_list"
    DTYPE_LIST = "dtype_list"
    ACC = "acc"  # dtype or [acc, out] list; resolved to (acc, out) or None


def _is_varname(value: Any) -> bool:
    """True for a param value that names a variable (`openinfer_jax.core.names.VarName`)."""
    return isinstance(value, VarName)


class _Required:
    """Sentinel type of `REQUIRED`."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

# Identifiers the DSL lexes as names but that mean literals when used as a scalar value.
_SPECIAL_NAMES: dict[str, bool | float] = {
    "inf": math.inf,
    "+inf": math.inf,
    "-inf": -math.inf,
    "nan": math.nan,
    "true": True,
    "false": False,
}


@dataclass(frozen=True)
class ParamSpec:
    """One named param of an op: its kind, default, allowed values and aliases.

    `allowed` is a tuple of strings for STRING params and of DTypes for DTYPE params (empty:
    anything of the kind). `default` is `REQUIRED` for a mandatory param; None means "absent"
    (for example ``acc`` or a mask that is only applied when given).
    """

    name: str
    kind: ParamKind
    default: Any = None
    allowed: tuple[Any, ...] = ()
    aliases: tuple[str, ...] = ()
    doc: str = ""

    def describe_kind(self) -> str:
        """The kind as docs and error messages show it (``string (trunc|floor)``)."""
        if self.kind is ParamKind.STRING and self.allowed:
            return f"string ({'|'.join(self.allowed)})"
        if self.kind is ParamKind.DTYPE and self.allowed:
            return f"dtype ({format_dtypes(self.allowed)})"
        return self.kind.value

    def coerce(self, op: str, value: Any) -> Any:
        """Check one raw value (IR `ParamValue` or an already resolved one) and type it.

        Raises:
            OpCheckError: the value has the wrong kind or is not allowed; the message names the
                op, the param and what is accepted.
        """
        where = f"{op}: param {self.name}"
        kind = self.kind
        if value is None and self.default is None:
            return None  # an optional param left absent (resolved output fed back in)
        if _is_varname(value) and value.name.lower() in _SPECIAL_NAMES:
            value = _SPECIAL_NAMES[value.name.lower()]
        if kind in (ParamKind.SCALAR, ParamKind.FLOAT) and _is_varname(value):
            return value  # a runtime scalar: the simulator binds it before lowering
        if isinstance(value, np.generic):
            value = value.item()
        return _COERCERS[kind](self, where, value)


# ---- one coercion per param kind (`ParamSpec.coerce` dispatches here) ----------------------
def _coerce_scalar(spec: ParamSpec, where: str, value: Any) -> Any:
    if isinstance(value, (bool, int, float)):
        return value
    raise OpCheckError(f"{where} must be a number or bool, got {value!r}")


def _coerce_float(spec: ParamSpec, where: str, value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise OpCheckError(f"{where} must be a number, got {value!r}")


def _coerce_int(spec: ParamSpec, where: str, value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise OpCheckError(f"{where} must be an integer, got {value!r}")
    if spec.kind is ParamKind.UINT and value < 0:
        raise OpCheckError(f"{where} must be >= 0, got {value}")
    return value


def _coerce_bool(spec: ParamSpec, where: str, value: Any) -> Any:
    if isinstance(value, bool):
        return value
    raise OpCheckError(f"{where} must be true or false, got {value!r}")


def _coerce_string(spec: ParamSpec, where: str, value: Any) -> Any:
    text = value.name if _is_varname(value) else value
    if not isinstance(text, str):
        raise OpCheckError(f"{where} must be a string, got {value!r}")
    if spec.allowed and text not in spec.allowed:
        raise OpCheckError(f"{where} is {text!r}; allowed: {', '.join(spec.allowed)}")
    return text


def _coerce_dtype(spec: ParamSpec, where: str, value: Any) -> Any:
    dtype = _as_dtype(where, value)
    if spec.allowed and dtype not in spec.allowed:
        raise OpCheckError(f"{where} is {dtype.short}; allowed: {format_dtypes(spec.allowed)}")
    return dtype


def _coerce_int_list(spec: ParamSpec, where: str, value: Any) -> Any:
    items = (value,) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(items, (tuple, list)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in items
    ):
        raise OpCheckError(f"{where} must be a list of integers, got {value!r}")
    return tuple(int(v) for v in items)


def _coerce_float_list(spec: ParamSpec, where: str, value: Any) -> Any:
    single = isinstance(value, (int, float)) and not isinstance(value, bool)
    items = (value,) if single else value
    if not isinstance(items, (tuple, list)) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in items
    ):
        raise OpCheckError(f"{where} must be a list of numbers, got {value!r}")
    return tuple(float(v) for v in items)


def _coerce_dtype_list(spec: ParamSpec, where: str, value: Any) -> Any:
    items = value if isinstance(value, (tuple, list)) else (value,)
    return tuple(_as_dtype(where, v) for v in items)


def _coerce_acc(spec: ParamSpec, where: str, value: Any) -> Any:
    if value is None:
        return None
    items = value if isinstance(value, (tuple, list)) else (value,)
    dtypes = tuple(_as_dtype(where, v) for v in items)
    if len(dtypes) == 1:  # single form acc=i32 means [i32, i32]
        dtypes = (dtypes[0], dtypes[0])
    if len(dtypes) != 2:
        raise OpCheckError(
            f"{where} must be one dtype or a list [accumulator, output], got "
            f"[{', '.join(d.short for d in dtypes)}]"
        )
    return dtypes


_COERCERS: dict[ParamKind, Callable[[ParamSpec, str, Any], Any]] = {
    ParamKind.SCALAR: _coerce_scalar,
    ParamKind.FLOAT: _coerce_float,
    ParamKind.INT: _coerce_int,
    ParamKind.UINT: _coerce_int,
    ParamKind.BOOL: _coerce_bool,
    ParamKind.STRING: _coerce_string,
    ParamKind.DTYPE: _coerce_dtype,
    ParamKind.INT_LIST: _coerce_int_list,
    ParamKind.FLOAT_LIST: _coerce_float_list,
    ParamKind.DTYPE_LIST: _coerce_dtype_list,
    ParamKind.ACC: _coerce_acc,
}
assert set(_COERCERS) == set(ParamKind), "every param kind needs a coercion"


def _as_dtype(where: str, value: Any) -> DType:
    if isinstance(value, DType):
        return value
    text = value.name if _is_varname(value) else value
    if isinstance(text, str):
        try:
            return dtype_from_name(text)
        except ValueError as err:
            raise OpCheckError(f"{where}: {err}") from None
    raise OpCheckError(f"{where} must be a dtype name such as f32, got {value!r}")


# ---- inputs and outputs ---------------------------------------------------------------------------
@dataclass(frozen=True)
class InputSpec:
    """One positional input: its name, allowed dtypes, and type group.

    Inputs with the same non-empty `group` must have the same dtype. `quantized` marks the
    inputs that may be a block-quantized model weight (``W: q4_1[N, K]``, docs/dsl.md): the
    op then reads its f32 values straight from the packed codes and scales
    (`openinfer_jax.ops.quantized`); any other input given such a weight is a validation error.
    """

    name: str
    dtypes: frozenset[DType]
    group: str = "T"
    quantized: bool = False


@dataclass(frozen=True)
class OutputRule:
    """How the output dtype is chosen (before `acc`, which overrides it with ``acc[-1]``).

    kind ``same``: dtype of input `index`; ``fixed``: `dtype`; ``attr``: the DTYPE param `attr`.
    """

    kind: str = "same"
    index: int = 0
    dtype: DType | None = None
    attr: str | None = None

    def describe(self) -> str:
        """Short text for docs: ``same``, ``bool``, ``from to``."""
        if self.kind == "fixed":
            assert self.dtype is not None
            return self.dtype.short
        if self.kind == "attr":
            return f"from {self.attr}"
        return "same" if self.index == 0 else f"same as input {self.index}"


@dataclass(frozen=True)
class Call:
    """What an implementation gets besides arrays: input/output dtypes and resolved params."""

    in_dtypes: tuple[DType, ...]
    out_dtype: DType
    params: Mapping[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.params[key]


ShapeRule = Callable[[Sequence[tuple[int, ...]], Mapping[str, Any]], tuple[int, ...]]
CheckRule = Callable[[Sequence[DType], Sequence[tuple[int, ...]], Mapping[str, Any]], None]
Impl = Callable[..., Any]


def broadcast_shapes(op: str, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """NumPy broadcasting of `shapes` (right-aligned, dims equal or 1).

    Raises:
        OpCheckError: naming the op, the shapes and the first incompatible axis.
    """
    ndim = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for axis in range(-ndim, 0):
        dims = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(dims) > 1:
            listed = " and ".join(str(tuple(s)) for s in shapes)
            raise OpCheckError(
                f"{op}: shapes {listed} do not broadcast (axis {axis} has sizes "
                f"{sorted(dims)}; each must be equal or 1)"
            )
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def acc_accepts(in_dtype: DType, acc_dtype: DType) -> bool:
    """True if `acc_dtype` may accumulate values of `in_dtype` without changing their kind.

    Float inputs need a float accumulator at least as wide; signed integers (packed and
    ternary included) a signed one at least as wide; unsigned integers an unsigned one;
    bool any integer accumulator.
    """
    if in_dtype is DType.BOOL:
        return acc_dtype.is_int
    if in_dtype.is_float:
        return acc_dtype.is_float and _float_rank(acc_dtype) >= _float_rank(in_dtype)
    if in_dtype.is_signed_int:
        return acc_dtype in SIGNED and acc_dtype.bits >= in_dtype.bits
    return acc_dtype in UNSIGNED and acc_dtype.bits >= in_dtype.bits


def _float_rank(dtype: DType) -> int:
    return {DType.BF16: 1, DType.F16: 1, DType.F32: 2, DType.F64: 3}.get(dtype, 0)


# ---- traits --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Traits:
    """What backends and passes may assume about an op, beyond its dtypes and shapes.

    `elementwise`: output element i reads only element i of each (broadcast) input.
    `alias_safe`: a kernel may write the output into an input's buffer of the same shape
    (each element is read before it is written). `reads_neighbours`: an output element reads
    input elements at other positions (norms, softmax, movement, conv). `math`: the op
    evaluates transcendental functions (exp, log, tanh, sin...) in its compute type.
    `index_output`: the output holds indices (argmax), so its dtype needs no arithmetic.
    """

    elementwise: bool = False
    alias_safe: bool = False
    reads_neighbours: bool = True
    math: bool = False
    index_output: bool = False

    def describe(self) -> str:
        """The set traits as words, for docs (``elementwise, alias-safe``)."""
        words = [name.replace("_", "-") for name in ("elementwise", "alias_safe", "math")
                 if getattr(self, name)]  # fmt: skip
        if self.reads_neighbours and not self.elementwise:
            words.append("reads-neighbours")
        return ", ".join(words) or "–"


#: Elementwise ops: each output element from the same element of the inputs, in place safe.
ELEMENTWISE_TRAITS = Traits(elementwise=True, alias_safe=True, reads_neighbours=False)

#: Capabilities a call may need from a backend (`OpDef.capabilities`).
CAPABILITIES = ("int64", "float64", "float64_math")
KernelParams = Callable[[Sequence[DType], Mapping[str, Any]], dict[str, Any]]


# ---- the op definition ------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpDef:
    """One op's complete declaration (see the module docstring for each field)."""

    name: str
    category: str
    inputs: tuple[InputSpec, ...]
    jax_impl: Impl
    ref_impl: Impl
    params: Mapping[str, ParamSpec] = field(default_factory=dict)
    output: OutputRule = field(default_factory=OutputRule)
    acc_rules: tuple[tuple[DType, DType], ...] = ()
    broadcast: bool = False
    inplace: bool = False
    variadic: bool = False
    min_inputs: int = 1
    max_inputs: int | None = None
    shape_rule: ShapeRule | None = None
    check: CheckRule | None = None
    traits: Traits = field(default_factory=Traits)
    expr: ex.ExprSpec | None = None
    kernel_params: KernelParams | None = None
    composite: Composite | None = None
    doc: str = ""
    pure: bool = True
    quant_check: Callable[[int, Mapping[str, Any]], str | None] | None = None

    # ---- contract aliases -----------------------------------------------------------------
    @property
    def arity(self) -> int:
        """Number of positional inputs (for a variadic op: the declared minimum)."""
        return self.min_inputs if self.variadic else len(self.inputs)

    @property
    def inplace_ok(self) -> bool:
        """True if the output may name one of the inputs."""
        return self.inplace

    @property
    def broadcast_ok(self) -> bool:
        """True if inputs of different shapes broadcast NumPy-style."""
        return self.broadcast

    @property
    def dtypes(self) -> frozenset[DType]:
        """Union of the dtypes any input accepts (for tables and kernel generation)."""
        out: frozenset[DType] = frozenset()
        for spec in self.inputs:
            out |= spec.dtypes
        return out

    def input_spec(self, index: int) -> InputSpec:
        """The spec of positional input `index` (variadic ops repeat their last spec)."""
        return self.inputs[min(index, len(self.inputs) - 1)]

    def quantized_input_problem(
        self, index: int, params: Mapping[str, Any], quantized: Sequence[int]
    ) -> str | None:
        """Why input `index` cannot be a block-quantized weight here (None when it can).

        `quantized` lists every input index that is quantized in this call; ``quant_check``
        adds op-specific limits (gather: only along axis 0).
        """
        spec = self.input_spec(index)
        takers = [s.name for s in self.inputs if s.quantized]
        if not spec.quantized:
            where = f" (it takes one as {', '.join(takers)})" if takers else ""
            return f"input {spec.name!r} of {self.name} cannot be a block-quantized weight{where}"
        if len(quantized) > 1:
            return f"{self.name} takes at most one block-quantized input, got {len(quantized)}"
        if self.quant_check is not None:
            return self.quant_check(index, self.resolve_params(params))
        return None

    # ---- params --------------------------------------------------------------------------
    def resolve_params(self, raw: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Check raw param values and fill defaults; idempotent on its own output.

        Aliases map to their param (relu ``alpha`` → ``negative_slope``).

        Raises:
            OpCheckError: unknown param (the message lists the known ones), a param given twice
                through an alias, a missing required param, a value of the wrong kind, or
                ``acc`` on an op without accumulation rules.
        """
        raw = dict(raw or {})
        by_alias = {alias: spec.name for spec in self.params.values() for alias in spec.aliases}
        given: dict[str, Any] = {}
        for key, value in raw.items():
            name = by_alias.get(key, key)
            if name not in self.params:
                if key == "acc":
                    raise OpCheckError(
                        f"{self.name}: acc is not supported (ops with acc: "
                        f"{', '.join(n for n in names() if get(n).acc_rules)})"  # type: ignore[union-attr]
                    )
                known = ", ".join(self._param_listing()) or "none"
                raise OpCheckError(f"{self.name}: unknown param {key!r}; known params: {known}")
            if name in given:
                raise OpCheckError(f"{self.name}: param {name!r} given twice (as {key!r})")
            given[name] = value
        out: dict[str, Any] = {}
        for name, spec in self.params.items():
            if name in given:
                out[name] = spec.coerce(self.name, given[name])
            elif spec.default is REQUIRED:
                raise OpCheckError(
                    f"{self.name}: param {name!r} ({spec.describe_kind()}) is required"
                )
            else:
                out[name] = spec.default
        return out

    def _param_listing(self) -> list[str]:
        out = []
        for spec in self.params.values():
            alias = f" (alias {', '.join(spec.aliases)})" if spec.aliases else ""
            out.append(f"{spec.name}: {spec.describe_kind()}{alias}")
        return out

    # ---- dtype and shape inference --------------------------------------------------------
    def check_arity(self, count: int) -> None:
        """Raise `OpCheckError` unless `count` inputs fit this op."""
        if self.variadic:
            if count < self.min_inputs or (self.max_inputs is not None and count > self.max_inputs):
                most = f" and at most {self.max_inputs}" if self.max_inputs is not None else ""
                raise OpCheckError(
                    f"{self.name} takes at least {self.min_inputs}{most} inputs, got {count}"
                )
        elif count != len(self.inputs):
            names_ = ", ".join(s.name for s in self.inputs)
            raise OpCheckError(
                f"{self.name} takes {len(self.inputs)} input{'s' if len(self.inputs) != 1 else ''}"
                f" ({names_}), got {count}"
            )

    def output_dtype(self, in_dtypes: Sequence[DType], params: Mapping[str, Any]) -> DType:
        """Check input dtypes (sets, groups, acc) and return the output dtype.

        `params` must be resolved (`resolve_params`); raw params are resolved here too.

        Raises:
            OpCheckError: wrong input count, a dtype outside an input's set (the message lists
                the allowed ones), inputs of one type group with different dtypes, or an
                ``acc`` that matches no accumulation rule for this input dtype.
        """
        self.check_arity(len(in_dtypes))
        groups: dict[str, tuple[int, DType]] = {}
        for i, dtype in enumerate(in_dtypes):
            spec = self.input_spec(i)
            if dtype not in spec.dtypes:
                raise OpCheckError(
                    f"{self.name}: input {i} ({spec.name}) has dtype {dtype.short}; "
                    f"allowed: {format_dtypes(spec.dtypes)}"
                )
            if spec.group:
                if spec.group in groups and groups[spec.group][1] is not dtype:
                    j, other = groups[spec.group]
                    raise OpCheckError(
                        f"{self.name}: inputs {j} and {i} must have the same dtype, "
                        f"got {other.short} and {dtype.short}"
                    )
                groups.setdefault(spec.group, (i, dtype))
        acc = params.get("acc") if self.acc_rules else None
        if acc is not None:
            acc = self.params["acc"].coerce(self.name, acc)
            return self._check_acc(in_dtypes[0], acc)
        rule = self.output
        if rule.kind == "fixed":
            assert rule.dtype is not None
            return rule.dtype
        if rule.kind == "attr":
            assert rule.attr is not None
            value = params.get(rule.attr, self.params[rule.attr].default)
            return self.params[rule.attr].coerce(self.name, value)  # type: ignore[no-any-return]
        return in_dtypes[rule.index]

    def _check_acc(self, in_dtype: DType, acc: tuple[DType, DType]) -> DType:
        usable = [r for r in self.acc_rules if acc_accepts(in_dtype, r[0])]
        listing = ", ".join(f"[{a.short},{o.short}]" for a, o in usable) or "none"
        if acc not in self.acc_rules:
            raise OpCheckError(
                f"{self.name}: acc=[{acc[0].short},{acc[1].short}] does not match any "
                f"accumulation rule; allowed for {in_dtype.short} inputs: {listing}"
            )
        if acc not in usable:
            raise OpCheckError(
                f"{self.name}: acc=[{acc[0].short},{acc[1].short}] cannot accumulate "
                f"{in_dtype.short} inputs; allowed for {in_dtype.short}: {listing}"
            )
        return acc[1]

    def output_shape(
        self, in_shapes: Sequence[tuple[int, ...]], params: Mapping[str, Any]
    ) -> tuple[int, ...]:
        """The output shape for `in_shapes` (broadcast policy enforced for elementwise ops).

        Raises:
            OpCheckError: shapes that do not broadcast, unequal shapes where broadcasting is
                denied, or a shape rule's own check (axis out of range, inner dims differ...).
        """
        shapes = [tuple(int(d) for d in s) for s in in_shapes]
        if self.shape_rule is not None:
            return tuple(self.shape_rule(shapes, params))
        return elementwise_shape(self, shapes)

    def infer(
        self,
        in_dtypes: Sequence[DType],
        in_shapes: Sequence[tuple[int, ...]],
        params: Mapping[str, Any] | None = None,
    ) -> tuple[DType, tuple[int, ...]]:
        """Output (dtype, shape) for the given inputs; resolves `params` if they are raw.

        Raises:
            OpCheckError: any rule of the declaration is broken (see `output_dtype`,
                `output_shape`, `resolve_params`).
        """
        if len(in_dtypes) != len(in_shapes):
            raise OpCheckError(
                f"{self.name}: {len(in_dtypes)} input dtypes but {len(in_shapes)} input shapes"
            )
        resolved = self.resolve_params(params)
        out_dtype = self.output_dtype(in_dtypes, resolved)
        out_shape = self.output_shape(in_shapes, resolved)
        if self.check is not None:
            self.check(list(in_dtypes), [tuple(s) for s in in_shapes], resolved)
        return out_dtype, out_shape

    def bind_variables(
        self, params: Mapping[str, Any], values: Mapping[str, bool | int | float]
    ) -> dict[str, Any]:
        """Resolved params with every `VarName` value replaced by ``values[name]``.

        The simulator calls this before lowering, with the current scalar values of the
        variables that params name (``fill(x, value=alpha)``).

        Raises:
            OpCheckError: a named variable has no value in `values`, or its value does not
                suit the param (the same checks as a literal).
        """
        resolved = self.resolve_params(params)
        for name, value in resolved.items():
            if _is_varname(value):
                if value.name not in values:
                    raise OpCheckError(
                        f"{self.name}: param {name}={value.name} names a variable with no "
                        "scalar value; declare it as a scalar variable or use a literal"
                    )
                resolved[name] = self.params[name].coerce(self.name, values[value.name])
        return resolved

    def check_inplace(self, output: str, inputs: Sequence[str]) -> None:
        """Raise `OpCheckError` if `output` names an input and the op denies in-place writes."""
        if output in inputs and not self.inplace:
            raise OpCheckError(
                f"op {self.name} does not support inplace writes (output {output!r} is also an "
                f"input); write to a new variable"
            )

    # ---- kernels -----------------------------------------------------------------------------
    def prepared_params(
        self, in_dtypes: Sequence[DType], params: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Resolved `params` as kernels take them (`kernel_params` applied; values that are
        not numbers, such as a backend's run-time param handles, pass through)."""
        if self.kernel_params is None:
            return dict(params)
        return self.kernel_params(list(in_dtypes), params)

    def expression(self, in_dtypes: Sequence[DType], params: Mapping[str, Any]) -> ex.Typed | None:
        """The bound expression tree for these input dtypes and resolved params, or None
        (no tree, or none for input 0's compute family)."""
        tree = ex.choose(self.expr, in_dtypes[0], params) if in_dtypes else None
        if tree is None:
            return None
        return ex.bind(tree, in_dtypes, self.output_dtype(in_dtypes, params))

    def capabilities(self, in_dtypes: Sequence[DType], params: Mapping[str, Any]) -> frozenset[str]:
        """What a call needs from a backend: ``int64`` / ``float64`` arithmetic (for i64/u64/
        f64 values it computes with: inputs, the accumulator, the output unless it holds
        indices, and the expression tree's own types) and ``float64_math`` (transcendental
        functions in f64).

        Raises:
            OpCheckError: the dtypes or params break the declaration.
        """
        resolved = self.resolve_params(params)
        out = self.output_dtype(in_dtypes, resolved)
        types: set[Any] = set(in_dtypes)
        if not self.traits.index_output:
            types.add(out)
        acc = resolved.get("acc") if self.acc_rules else None
        if acc is not None:
            types.add(acc[0])
        math_f64 = self.traits.math
        tree = self.expression(in_dtypes, resolved) if self.expr is not None else None
        if tree is not None:
            for node in ex.walk(tree):
                types.add(node.type)
                if node.kind in ex.TRANSCENDENTAL and node.type is DType.F64:
                    math_f64 = True
        needs = set()
        if types & {DType.I64, DType.U64}:
            needs.add("int64")
        if DType.F64 in types:
            needs.add("float64")
            if math_f64:
                needs.add("float64_math")
        return frozenset(needs)

    # ---- implementations -------------------------------------------------------------------
    def bind(
        self, arrays: Sequence[Any], dtypes: Sequence[DType] | None, params: Mapping[str, Any]
    ) -> Call:
        """Resolve params and dtypes for one call of an implementation."""
        resolved = self.resolve_params(params)
        if dtypes is None:
            dtypes = [dtype_from_numpy(np.dtype(a.dtype)) for a in arrays]
        in_dtypes = tuple(dtypes)
        out_dtype = self.output_dtype(in_dtypes, resolved)
        if self.check is not None:
            self.check(list(in_dtypes), [tuple(np.shape(a)) for a in arrays], resolved)
        return Call(in_dtypes, out_dtype, resolved)

    def lower_jax(self, *arrays: Any, dtypes: Sequence[DType] | None = None, **params: Any) -> Any:
        """The JAX lowering (jit-traceable): arrays in the in-memory representation.

        Pass `dtypes` (one per input) when an input is packed; otherwise each dtype is read
        from its array. Params may be raw or resolved.

        Raises:
            OpCheckError: the dtypes or params break the declaration.
        """
        call = self.bind(arrays, dtypes, params)
        self.output_shape([tuple(np.shape(a)) for a in arrays], call.params)
        if any(_is_quantized(a) for a in arrays):
            from openinfer_jax.ops import quantized

            return quantized.lower_jax(self, call, arrays)
        return self.jax_impl(call, *arrays)

    def reference(
        self, *arrays: Any, dtypes: Sequence[DType] | None = None, **params: Any
    ) -> np.ndarray:
        """The independent NumPy reference; same arguments as `lower_jax`.

        Raises:
            OpCheckError: the dtypes or params break the declaration.
        """
        call = self.bind(arrays, dtypes, params)
        self.output_shape([tuple(np.shape(a)) for a in arrays], call.params)
        if any(_is_quantized(a) for a in arrays):
            from openinfer_jax.ops import quantized

            return np.asarray(quantized.reference(self, call, arrays))
        result = self.ref_impl(call, *[np.asarray(a) for a in arrays])
        return np.asarray(result)


def _is_quantized(value: Any) -> bool:
    # A block-quantized weight (openinfer_jax.ops.quantized.QuantizedArray) knows its layout.
    return getattr(value, "is_block_quantized", False) is True


def elementwise_shape(op: OpDef, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """Output shape of an elementwise op: broadcast if allowed, else all shapes equal."""
    if not shapes:
        return ()
    if op.broadcast:
        return broadcast_shapes(op.name, shapes)
    first = shapes[0]
    for i, shape in enumerate(shapes[1:], start=1):
        if shape != first:
            raise OpCheckError(
                f"{op.name} does not support broadcasting: input 0 has shape {first} but input "
                f"{i} has shape {shape}; shapes must be equal"
            )
    return first


# ---- registration -------------------------------------------------------------------------------
_REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    """Add an op to the registry and return it.

    Raises:
        ValueError: an op of that name exists already, or the declaration is inconsistent
            (a programming error in an op module, not a user mistake).
    """
    if opdef.name in _REGISTRY:
        raise ValueError(f"op {opdef.name!r} is registered twice")
    if not opdef.inputs and not opdef.variadic:
        raise ValueError(f"op {opdef.name!r} declares no inputs")
    if opdef.acc_rules and "acc" not in opdef.params:
        raise ValueError(f"op {opdef.name!r} has acc_rules but no acc param")
    if opdef.output.kind == "attr" and opdef.output.attr not in opdef.params:
        raise ValueError(f"op {opdef.name!r} takes its output dtype from a missing param")
    if "dtypes" in opdef.params:
        raise ValueError(f"op {opdef.name!r}: 'dtypes' is reserved for lower_jax/reference")
    if opdef.expr is not None:
        _check_trees(opdef)
    _REGISTRY[opdef.name] = opdef
    return opdef


def _check_trees(opdef: OpDef) -> None:
    """Bind the op's trees for every dtype each type group takes, so a typing error in a
    declaration shows at import, not in a backend."""
    groups: dict[str, frozenset[DType]] = {}
    for spec in opdef.inputs:
        groups[spec.group or spec.name] = (
            groups.get(spec.group or spec.name, spec.dtypes) & spec.dtypes
        )
    first = {g: min(ds, key=lambda d: d.value) for g, ds in groups.items()}
    for group, dtypes in groups.items():
        for dtype in dtypes:
            ins = [dtype if (spec.group or spec.name) == group else first[spec.group or spec.name]
                   for spec in opdef.inputs]  # fmt: skip
            for variant in ex.switch_variants(opdef.expr):
                tree = ex.choose(opdef.expr, ins[0], variant)
                if tree is None:
                    continue
                try:
                    ex.bind(tree, ins, opdef.output_dtype(ins, variant))
                except TypeError as err:
                    raise ValueError(
                        f"op {opdef.name!r}: expression for {', '.join(d.short for d in ins)}: {err}"
                    ) from None


def get(name: str) -> OpDef | None:
    """The op called `name`, or None if no such op is registered."""
    return _REGISTRY.get(name)


def names() -> list[str]:
    """Names of all registered ops, sorted."""
    return sorted(_REGISTRY)


def all_ops() -> list[OpDef]:
    """All registered ops, sorted by category then name."""
    return sorted(_REGISTRY.values(), key=lambda o: (o.category, o.name))
