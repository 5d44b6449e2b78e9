"""Elementwise math as a small typed expression tree: an op's meaning, declared once.

An elementwise op declares its per-element math as a tree (`OpDef.expr`); the C printer
(`openinfer_jax.emit.c_expr`) and the GLSL printer (`openinfer_jax.vk.expressions`) render
it, and ops without a hand-written lowering or reference evaluate it with JAX or NumPy
(`evaluate`). Nothing in here knows a backend.

Leaves: `Input` (operand k in its compute type), `Param` (a named param, held in a stated
type), `Const` (a literal that takes the type of its context), `WIDTH` (the storage bits of
input 0). Inner nodes: `Apply` of a primitive from `PRIMITIVES` (each with one meaning,
written in its `Primitive.doc`), `Cast`. Trees are built with Python operators and the
functions below::

    x = Input(0)
    softsign = x / (1 + abs(x))
    relu_int = clamp(select(x < 0, cast(IN, trunc(cast(F64, x) * param("slope", F64))), x),
                     param("lo"), param("hi"))

Types. Values are typed by *compute dtype*: floats up to 32 bits compute in f32 (`F32`),
f64 in `F64`, integers and bool in their own dtype (each printer picks the machine type:
C computes every signed integer in int64_t, GLSL in int or int64_t), and comparisons give
`PRED`, a truth value. `IN`/`OUT` name the compute type of input 0 and of the output. Operands
of one node must share a type; a `Const` adopts it. `bind` checks all this for concrete
dtypes and returns a `Typed` tree, which is what printers walk.

Integer semantics: intermediate integer values are exact in the backend's compute width and
the result wraps to the output's storage width when stored, so trees of wrapping operations
(add, sub, mul, neg, shl, bitwise) give the two's complement result of the storage type.
Operations that read a value (div, rem, comparisons, shr, min/max) must apply to values that
fit the storage type: inputs, or results known to be in range.

A family mapping (`{"real": tree, "sint": ..., "uint": ..., "bool": ..., "*": ...}`) gives
different trees per compute family of input 0, and `switch` picks a tree by a string param
(gelu's ``approximate``); `choose` resolves both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from openinfer_jax.core.dtypes import DType

__all__ = [
    "F32",
    "F64",
    "IN",
    "OUT",
    "PRED",
    "PRIMITIVES",
    "TRIG",
    "U32",
    "WIDTH",
    "Apply",
    "Cast",
    "Const",
    "Expr",
    "ExprSpec",
    "Input",
    "Param",
    "Primitive",
    "Switch",
    "Typed",
    "Width",
    "bind",
    "cast",
    "choose",
    "clamp",
    "compute_type",
    "const",
    "describe",
    "describe_spec",
    "evaluate",
    "family",
    "maximum",
    "minimum",
    "nodes_of",
    "param",
    "print_tree",
    "select",
    "shared_subtrees",
    "switch",
    "switch_variants",
    "trees",
    "walk",
]

F32, F64, U32 = DType.F32, DType.F64, DType.U32
IN, OUT = "in", "out"
Role = DType | str


class _Pred:
    """The type of truth values (comparisons, predicates, `select` conditions)."""

    def __repr__(self) -> str:
        return "PRED"


PRED: Any = _Pred()
Type = Any  # a DType (compute dtype) or PRED


def compute_type(dtype: DType) -> DType:
    """The compute dtype of `dtype` in trees: f8/bf16/f16/f32 compute in f32; others in
    themselves (packed and ternary integers keep their dtype, so printers know the width)."""
    return F32 if dtype.is_float and dtype is not DType.F64 else dtype


def family(dtype: Type) -> str:
    """``real``, ``sint``, ``uint``, ``bool`` or ``pred``: what a value's operations mean."""
    if dtype is PRED:
        return "pred"
    if dtype is DType.BOOL:
        return "bool"
    if dtype.is_float:
        return "real"
    return "sint" if dtype.is_signed_int else "uint"


# ---- nodes ----------------------------------------------------------------------------------------
class Expr:
    """Base of tree nodes. Python operators build `Apply` nodes (``==`` keeps its identity
    meaning: use `eq`/`ne` for comparisons)."""

    def key(self) -> tuple[Any, ...]:
        """A hashable structural identity (for finding repeated subtrees)."""
        raise NotImplementedError

    def children(self) -> tuple[Expr, ...]:
        """The operand nodes."""
        return ()

    def __add__(self, other: Any) -> Apply:
        return Apply("add", (self, _wrap(other)))

    def __radd__(self, other: Any) -> Apply:
        return Apply("add", (_wrap(other), self))

    def __sub__(self, other: Any) -> Apply:
        return Apply("sub", (self, _wrap(other)))

    def __rsub__(self, other: Any) -> Apply:
        return Apply("sub", (_wrap(other), self))

    def __mul__(self, other: Any) -> Apply:
        return Apply("mul", (self, _wrap(other)))

    def __rmul__(self, other: Any) -> Apply:
        return Apply("mul", (_wrap(other), self))

    def __truediv__(self, other: Any) -> Apply:
        return Apply("div", (self, _wrap(other)))

    def __rtruediv__(self, other: Any) -> Apply:
        return Apply("div", (_wrap(other), self))

    def __floordiv__(self, other: Any) -> Apply:
        return Apply("floor_div", (self, _wrap(other)))

    def __mod__(self, other: Any) -> Apply:
        return Apply("rem", (self, _wrap(other)))

    def __and__(self, other: Any) -> Apply:
        return Apply("and", (self, _wrap(other)))

    def __or__(self, other: Any) -> Apply:
        return Apply("or", (self, _wrap(other)))

    def __xor__(self, other: Any) -> Apply:
        return Apply("xor", (self, _wrap(other)))

    def __invert__(self) -> Apply:
        return Apply("not", (self,))

    def __lshift__(self, other: Any) -> Apply:
        return Apply("shl", (self, _wrap(other)))

    def __rshift__(self, other: Any) -> Apply:
        return Apply("shr", (self, _wrap(other)))

    def __neg__(self) -> Apply:
        return Apply("neg", (self,))

    def __abs__(self) -> Apply:
        return Apply("abs", (self,))

    def __lt__(self, other: Any) -> Apply:
        return Apply("lt", (self, _wrap(other)))

    def __le__(self, other: Any) -> Apply:
        return Apply("le", (self, _wrap(other)))

    def __gt__(self, other: Any) -> Apply:
        return Apply("gt", (self, _wrap(other)))

    def __ge__(self, other: Any) -> Apply:
        return Apply("ge", (self, _wrap(other)))

    def eq(self, other: Any) -> Apply:
        """``self == other`` as a node (IEEE: NaN is unequal to everything)."""
        return Apply("eq", (self, _wrap(other)))

    def ne(self, other: Any) -> Apply:
        """``self != other`` as a node (true for NaN)."""
        return Apply("ne", (self, _wrap(other)))

    def __str__(self) -> str:
        return describe(self)


@dataclass(frozen=True, eq=False)
class Input(Expr):
    """Operand `index` (0 = the op's first input), in its compute type."""

    index: int

    def key(self) -> tuple[Any, ...]:
        return ("input", self.index)


@dataclass(frozen=True, eq=False)
class Param(Expr):
    """The op param `name`, held in type `role` (`IN`, `OUT` or a DType such as `F64`).

    The value reaching a kernel is the op's `OpDef.kernel_params` (defaults resolved, bounds
    rounded): C bakes it as a literal or reads it at run time, GLSL takes it in push constants.
    """

    name: str
    role: Role = IN

    def key(self) -> tuple[Any, ...]:
        return ("param", self.name, str(self.role))


@dataclass(frozen=True, eq=False)
class Const(Expr):
    """A literal; it takes the type its context gives it (the other operand, or the output)."""

    value: bool | int | float

    def key(self) -> tuple[Any, ...]:
        return ("const", type(self.value).__name__, repr(self.value))


@dataclass(frozen=True, eq=False)
class Width(Expr):
    """The storage width in bits of input 0 (8 for i8, 4 for u4), a `U32`."""

    def key(self) -> tuple[Any, ...]:
        return ("width",)


@dataclass(frozen=True, eq=False)
class Apply(Expr):
    """Primitive `fn` (a key of `PRIMITIVES`) applied to `args`."""

    fn: str
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        spec = PRIMITIVES.get(self.fn)
        if spec is None:
            raise ValueError(f"unknown primitive {self.fn!r}; known: {', '.join(PRIMITIVES)}")
        if len(self.args) != spec.arity:
            raise ValueError(f"{self.fn} takes {spec.arity} operands, got {len(self.args)}")

    def key(self) -> tuple[Any, ...]:
        return ("apply", self.fn, *(a.key() for a in self.args))

    def children(self) -> tuple[Expr, ...]:
        return self.args


@dataclass(frozen=True, eq=False)
class Cast(Expr):
    """`arg` converted to type `role`: floats become integers by truncation toward zero,
    integers become floats by rounding to nearest, a truth value becomes 0 or 1."""

    role: Role
    arg: Expr

    def key(self) -> tuple[Any, ...]:
        return ("cast", str(self.role), self.arg.key())

    def children(self) -> tuple[Expr, ...]:
        return (self.arg,)


WIDTH = Width()


@dataclass(frozen=True)
class Switch:
    """A tree chosen by the value of the string param `param` (a key of `cases`)."""

    param: str
    cases: Mapping[str, ExprSpec]


ExprSpec = Expr | Mapping[str, Any] | Switch


def _wrap(value: Any) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, (bool, int, float)):
        return Const(value)
    raise TypeError(f"cannot use {value!r} in an expression tree")


# ---- constructors ---------------------------------------------------------------------------------
def const(value: bool | int | float) -> Const:
    """A literal node."""
    return Const(value)


def param(name: str, role: Role = IN) -> Param:
    """The param `name` held in type `role` (default: input 0's compute type)."""
    return Param(name, role)


def cast(role: Role, arg: Any) -> Cast:
    """`arg` converted to `role` (see `Cast`)."""
    return Cast(role, _wrap(arg))


def select(cond: Any, then: Any, otherwise: Any) -> Apply:
    """`then` where the truth value `cond` holds, else `otherwise` (only one is evaluated)."""
    return Apply("select", (_wrap(cond), _wrap(then), _wrap(otherwise)))


def minimum(a: Any, b: Any) -> Apply:
    """The smaller operand; NaN if either is NaN."""
    return Apply("min", (_wrap(a), _wrap(b)))


def maximum(a: Any, b: Any) -> Apply:
    """The larger operand; NaN if either is NaN."""
    return Apply("max", (_wrap(a), _wrap(b)))


def clamp(x: Any, low: Any, high: Any) -> Apply:
    """``min(max(x, low), high)``; a NaN `x` stays NaN (with low > high every value is high)."""
    return Apply("clamp", (_wrap(x), _wrap(low), _wrap(high)))


def switch(name: str, **cases: ExprSpec) -> Switch:
    """A tree per value of the string param `name`."""
    return Switch(name, cases)


def _unary(fn: str) -> Callable[[Any], Apply]:
    def build(arg: Any) -> Apply:
        return Apply(fn, (_wrap(arg),))

    build.__name__ = fn
    build.__doc__ = f"The {fn} primitive (see `PRIMITIVES`)."
    return build


# ---- primitives -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Primitive:
    """One operation of the tree language.

    `arity` operands; `result`: ``same`` (the operands' type), ``pred``, ``u32``; `operands`:
    ``same`` (all share one type), ``first`` (only operand 0 types the node; the others
    are typed on their own: shift counts), ``cond`` (select: a truth value, then two of one
    type). `families` lists the operand families the primitive is defined for. `numeric`
    is the NumPy/JAX spelling used by `evaluate` (None: not evaluable here).
    """

    arity: int
    families: frozenset[str]
    doc: str
    result: str = "same"
    operands: str = "same"
    numeric: Callable[..., Any] | None = None


REAL = frozenset({"real"})
INTS = frozenset({"sint", "uint"})
NUMBERS = frozenset({"real", "sint", "uint"})
LOGIC = frozenset({"sint", "uint", "bool", "pred"})
ORDERED = NUMBERS
EQUATABLE = frozenset({"real", "sint", "uint", "bool"})


def _np_round(xp: Any, x: Any) -> Any:
    magnitude = xp.abs(x)
    floor = xp.floor(magnitude)
    return xp.where(x == 0, x, xp.copysign(floor + (magnitude - floor >= 0.5), x))


#: The trigonometric and hyperbolic primitives (C, GLSL and NumPy spell them alike); angles in
#: radians, the inverse functions give NaN outside their domain.
TRIG = {
    "sin": "sine", "cos": "cosine", "tan": "tangent",
    "asin": "arc sine, in [-pi/2, pi/2]", "acos": "arc cosine, in [0, pi]",
    "atan": "arc tangent, in [-pi/2, pi/2]",
    "sinh": "hyperbolic sine", "cosh": "hyperbolic cosine",
    "asinh": "inverse hyperbolic sine", "acosh": "inverse hyperbolic cosine (a >= 1)",
    "atanh": "inverse hyperbolic tangent (|a| <= 1)",
}  # fmt: skip
_NUMPY_NAMES = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh",
                "acosh": "arccosh", "atanh": "arctanh"}  # fmt: skip


def _numeric_fn(name: str) -> Callable[[Any, Any], Any]:
    """The array function of trigonometric primitive `name` in NumPy or jax.numpy."""
    attr = _NUMPY_NAMES.get(name, name)
    return lambda xp, a: getattr(xp, attr)(a)


def _erf(xp: Any, x: Any) -> Any:
    if xp.__name__ == "numpy":
        return xp.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x
    from jax.scipy.special import erf

    return erf(x)


def _erfc(xp: Any, x: Any) -> Any:
    if xp.__name__ == "numpy":
        return xp.vectorize(math.erfc, otypes=[x.dtype])(x) if x.size else x
    from jax.scipy.special import erfc

    return erfc(x)


def _nan_clamp(xp: Any, x: Any, low: Any, high: Any) -> Any:
    return xp.where(xp.isnan(x), x, xp.minimum(xp.maximum(x, low), high))


PRIMITIVES: dict[str, Primitive] = {
    # arithmetic
    "add": Primitive(2, NUMBERS | {"bool"}, "a + b; integers wrap; bool: a or b",
                     numeric=lambda xp, a, b: a + b),
    "sub": Primitive(2, NUMBERS, "a - b; integers wrap", numeric=lambda xp, a, b: a - b),
    "mul": Primitive(2, NUMBERS | {"bool"}, "a * b; integers wrap; bool: a and b",
                     numeric=lambda xp, a, b: a * b),
    "div": Primitive(2, NUMBERS, "a / b (IEEE); integers truncate toward zero and int_min / -1 "
                     "wraps; an integer b == 0 is unspecified (guard it with select)",
                     numeric=lambda xp, a, b: a / b),
    "floor_div": Primitive(2, INTS, "floor(a / b) for integers; b == 0 is unspecified"),
    "rem": Primitive(2, INTS, "a - b * trunc(a / b) (sign of a); b == -1 gives 0; b == 0 is "
                     "unspecified"),
    "neg": Primitive(1, frozenset({"real", "sint"}), "-a; integers wrap",
                     numeric=lambda xp, a: -a),
    "abs": Primitive(1, frozenset({"real", "sint"}), "|a| (abs(-0.0) = 0.0); abs(int_min) "
                     "wraps to int_min", numeric=lambda xp, a: xp.abs(a)),
    "min": Primitive(2, ORDERED, "the smaller of a and b; NaN if either is NaN",
                     numeric=lambda xp, a, b: xp.minimum(a, b)),
    "max": Primitive(2, ORDERED, "the larger of a and b; NaN if either is NaN",
                     numeric=lambda xp, a, b: xp.maximum(a, b)),
    "clamp": Primitive(3, ORDERED, "min(max(x, lo), hi) with a NaN x passing through",
                       numeric=_nan_clamp),
    "mul_add": Primitive(3, REAL, "a * b + c rounded once for f32 (the f64 product of f32 "
                         "values is exact); in f64 the product is rounded first, on every "
                         "backend",
                         numeric=lambda xp, a, b, c: a * b + c),
    # bits and logic
    "and": Primitive(2, LOGIC, "bitwise and; bool and truth values: logical",
                     numeric=lambda xp, a, b: a & b),
    "or": Primitive(2, LOGIC, "bitwise or; bool and truth values: logical",
                    numeric=lambda xp, a, b: a | b),
    "xor": Primitive(2, LOGIC, "bitwise xor; bool and truth values: logical",
                     numeric=lambda xp, a, b: a ^ b),
    "not": Primitive(1, LOGIC, "bitwise not; bool and truth values: logical",
                     numeric=lambda xp, a: ~a),
    "shl": Primitive(2, INTS, "a << n for a count n below the width (guard larger counts); "
                     "bits shifted out are lost", operands="first"),
    "shr": Primitive(2, INTS, "a >> n for a count n below the width: arithmetic for signed, "
                     "logical for unsigned", operands="first"),
    "popcount": Primitive(1, INTS, "number of set bits of the storage-width pattern of a",
                          result="u32"),
    # comparisons and predicates
    "eq": Primitive(2, EQUATABLE, "a == b (NaN unequal)", result="pred",
                    numeric=lambda xp, a, b: a == b),
    "ne": Primitive(2, EQUATABLE, "a != b (true for NaN)", result="pred",
                    numeric=lambda xp, a, b: a != b),
    "lt": Primitive(2, ORDERED, "a < b", result="pred", numeric=lambda xp, a, b: a < b),
    "le": Primitive(2, ORDERED, "a <= b", result="pred", numeric=lambda xp, a, b: a <= b),
    "gt": Primitive(2, ORDERED, "a > b", result="pred", numeric=lambda xp, a, b: a > b),
    "ge": Primitive(2, ORDERED, "a >= b", result="pred", numeric=lambda xp, a, b: a >= b),
    "isnan": Primitive(1, REAL, "a is NaN", result="pred", numeric=lambda xp, a: xp.isnan(a)),
    "isinf": Primitive(1, REAL, "a is +inf or -inf", result="pred",
                       numeric=lambda xp, a: xp.isinf(a)),
    "isfinite": Primitive(1, REAL, "a is neither NaN nor infinite", result="pred",
                          numeric=lambda xp, a: xp.isfinite(a)),
    "select": Primitive(3, frozenset({"real", "sint", "uint", "bool", "pred"}),
                        "b where the truth value a holds, else c", operands="cond",
                        numeric=lambda xp, c, a, b: xp.where(c, a, b)),
    # real functions
    "floor": Primitive(1, REAL, "largest integral value <= a", numeric=lambda xp, a: xp.floor(a)),
    "ceil": Primitive(1, REAL, "smallest integral value >= a", numeric=lambda xp, a: xp.ceil(a)),
    "trunc": Primitive(1, REAL, "a rounded toward zero", numeric=lambda xp, a: xp.trunc(a)),
    "round": Primitive(1, REAL, "a rounded half away from zero (sign of zero kept)",
                       numeric=_np_round),
    "exp": Primitive(1, REAL, "e^a", numeric=lambda xp, a: xp.exp(a)),
    "expm1": Primitive(1, REAL, "e^a - 1, accurate near 0", numeric=lambda xp, a: xp.expm1(a)),
    "log": Primitive(1, REAL, "natural log (log 0 = -inf, log of a negative = NaN)",
                     numeric=lambda xp, a: xp.log(a)),
    "log1p": Primitive(1, REAL, "log(1 + a), accurate near 0", numeric=lambda xp, a: xp.log1p(a)),
    "sqrt": Primitive(1, REAL, "square root (sqrt(-0.0) = -0.0, negative: NaN)",
                      numeric=lambda xp, a: xp.sqrt(a)),
    "tanh": Primitive(1, REAL, "hyperbolic tangent", numeric=lambda xp, a: xp.tanh(a)),
    "erf": Primitive(1, REAL, "the error function", numeric=_erf),
    "erfc": Primitive(1, REAL, "1 - erf(a); backends may compute it as 1 - erf(a) and lose "
                      "the far tail (C does, like XLA's f32 erf)", numeric=_erfc),
    "pow": Primitive(2, REAL, "a raised to b (C pow: a negative a with an integral b keeps "
                     "the sign of a^b, with a fractional b gives NaN; pow(a, 0) = 1)",
                     numeric=lambda xp, a, b: xp.power(a, b)),
    **{name: Primitive(1, REAL, what, numeric=_numeric_fn(name)) for name, what in TRIG.items()},
}  # fmt: skip

#: Primitives that are transcendental functions: a backend may lack them in f64 (GLSL).
TRANSCENDENTAL = frozenset({"exp", "expm1", "log", "log1p", "tanh", "erf", "erfc", "pow", *TRIG})

floor = _unary("floor")
ceil = _unary("ceil")
trunc = _unary("trunc")
round_half_away = _unary("round")
exp = _unary("exp")
expm1 = _unary("expm1")
log = _unary("log")
log1p = _unary("log1p")
sqrt = _unary("sqrt")
tanh = _unary("tanh")
erf = _unary("erf")
erfc = _unary("erfc")
sin, cos, tan = _unary("sin"), _unary("cos"), _unary("tan")
asin, acos, atan = _unary("asin"), _unary("acos"), _unary("atan")
sinh, cosh = _unary("sinh"), _unary("cosh")
asinh, acosh, atanh = _unary("asinh"), _unary("acosh"), _unary("atanh")


def power(a: Any, b: Any) -> Apply:
    """``a ** b`` (see the ``pow`` primitive)."""
    return Apply("pow", (_wrap(a), _wrap(b)))


isnan = _unary("isnan")
isinf = _unary("isinf")
isfinite = _unary("isfinite")
popcount = _unary("popcount")


def mul_add(a: Any, b: Any, c: Any) -> Apply:
    """``a * b + c`` (see the ``mul_add`` primitive)."""
    return Apply("mul_add", (_wrap(a), _wrap(b), _wrap(c)))


def floor_div(a: Any, b: Any) -> Apply:
    """Integer floor division (see the ``floor_div`` primitive)."""
    return Apply("floor_div", (_wrap(a), _wrap(b)))


def rem(a: Any, b: Any) -> Apply:
    """Truncated remainder (see the ``rem`` primitive)."""
    return Apply("rem", (_wrap(a), _wrap(b)))


# ---- choosing and typing ------------------------------------------------------------------------
def choose(spec: ExprSpec | None, dtype: DType, params: Mapping[str, Any]) -> Expr | None:
    """The tree `spec` gives for input-0 dtype `dtype` and resolved `params` (None: none).

    A family mapping is looked up by `family` of the compute type, then ``*``.
    """
    while isinstance(spec, Switch):
        spec = spec.cases.get(str(params.get(spec.param)))
    if spec is None or isinstance(spec, Expr):
        return spec
    fam = family(compute_type(dtype))
    found = spec.get(fam, spec.get("*"))
    return choose(found, dtype, params) if found is not None else None


def trees(spec: ExprSpec | None) -> Iterator[Expr]:
    """Every tree a spec can choose (for checks over all of an op's variants)."""
    if spec is None:
        return
    if isinstance(spec, Expr):
        yield spec
    elif isinstance(spec, Switch):
        for case in spec.cases.values():
            yield from trees(case)
    else:
        for case in spec.values():
            yield from trees(case)


def switch_variants(spec: ExprSpec | None) -> list[dict[str, str]]:
    """One params dict per path through the spec's `Switch` nodes (``[{}]`` without any)."""
    if isinstance(spec, Switch):
        return [{spec.param: value, **rest} for value, case in spec.cases.items()
                for rest in switch_variants(case)]  # fmt: skip
    if isinstance(spec, Mapping):
        return [v for case in spec.values() for v in switch_variants(case)] or [{}]
    return [{}]


@dataclass(frozen=True, eq=False)
class Typed:
    """A node of a bound tree: `node` with its resolved `type` and typed `args`.

    `kind` is ``input``, ``param``, ``const``, ``width``, ``cast`` or a primitive name;
    `value` is the input index, param name, literal or width.
    """

    kind: str
    type: Type
    args: tuple[Typed, ...] = ()
    value: Any = None
    key: tuple[Any, ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class _Env:
    in_types: tuple[DType, ...]
    out_type: DType
    width: int


def bind(tree: Expr, in_dtypes: Sequence[DType], out_dtype: DType) -> Typed:
    """Type `tree` for these input dtypes and output dtype.

    Raises:
        TypeError: operands of different types, a primitive outside its families, an
            untyped literal, an input the op does not have (all programming errors of a
            declaration; `registry.register` checks every op's trees for its dtypes).
    """
    env = _Env(tuple(compute_type(d) for d in in_dtypes), compute_type(out_dtype),
               in_dtypes[0].bits if in_dtypes else 0)  # fmt: skip
    return _bind(tree, env, env.out_type)


def _role(role: Role, env: _Env) -> DType:
    if role == IN:
        return env.in_types[0]
    if role == OUT:
        return env.out_type
    assert isinstance(role, DType)
    return compute_type(role)


def _const_only(node: Expr) -> bool:
    if isinstance(node, Const):
        return True
    return isinstance(node, Apply) and all(_const_only(a) for a in node.args)


def _bind(node: Expr, env: _Env, hint: Type | None) -> Typed:
    typed = _bind_untyped_key(node, env, hint)
    return Typed(typed.kind, typed.type, typed.args, typed.value, (str(typed.type), node.key()))


def _bind_untyped_key(node: Expr, env: _Env, hint: Type | None) -> Typed:
    if isinstance(node, Input):
        if node.index >= len(env.in_types):
            raise TypeError(f"input {node.index} used, but the op has {len(env.in_types)}")
        return Typed("input", env.in_types[node.index], value=node.index)
    if isinstance(node, Param):
        return Typed("param", _role(node.role, env), value=node.name)
    if isinstance(node, Const):
        if hint is None:
            raise TypeError(f"literal {node.value!r} has no type: combine it with a typed operand")
        return Typed("const", hint, value=node.value)
    if isinstance(node, Width):
        return Typed("width", U32, value=env.width)
    if isinstance(node, Cast):
        target = _role(node.role, env)
        return Typed("cast", target, (_bind(node.arg, env, None),))
    assert isinstance(node, Apply)
    spec = PRIMITIVES[node.fn]
    if spec.operands == "cond":
        cond = _bind(node.args[0], env, PRED)
        if cond.type is not PRED:
            raise TypeError(f"select: the condition must be a truth value, got {cond.type}")
        a, b = _unify(node.fn, node.args[1:], env, hint)
        args: tuple[Typed, ...] = (cond, a, b)
        operand = a.type
    elif spec.operands == "first":
        first = _bind(node.args[0], env, hint)
        count = _bind(node.args[1], env, U32)
        args, operand = (first, count), first.type
    else:
        operand_hint = hint if spec.result == "same" else None
        args = _unify(node.fn, node.args, env, operand_hint)
        operand = args[0].type
    fam = family(operand)
    if fam not in spec.families:
        raise TypeError(f"{node.fn} is not defined for {operand} ({fam}) operands")
    result = {"same": operand, "pred": PRED, "u32": U32}[spec.result]
    return Typed(node.fn, result, args)


def _unify(fn: str, nodes: Sequence[Expr], env: _Env, hint: Type | None) -> tuple[Typed, ...]:
    """Bind operands that must share one type: typed ones first, literals adopt their type."""
    typed: dict[int, Typed] = {}
    for k, arg in enumerate(nodes):
        if not _const_only(arg):
            typed[k] = _bind(arg, env, hint)
    types = {t.type for t in typed.values()}
    if len(types) > 1:
        raise TypeError(f"{fn}: operands of different types {sorted(map(str, types))}")
    common = types.pop() if types else hint
    for k, arg in enumerate(nodes):
        if k not in typed:
            typed[k] = _bind(arg, env, common)
    return tuple(typed[k] for k in range(len(nodes)))


def nodes_of(node: Expr) -> Iterator[Expr]:
    """Every node of an unbound tree, parents before children."""
    yield node
    for child in node.children():
        yield from nodes_of(child)


def walk(node: Typed) -> Iterator[Typed]:
    """Every node of a bound tree, parents before children."""
    yield node
    for arg in node.args:
        yield from walk(arg)


def shared_subtrees(root: Typed) -> list[Typed]:
    """Inner nodes used more than once, children before parents: printers bind each to a
    local once instead of repeating its text (and its work)."""
    counts: dict[tuple[Any, ...], int] = {}
    first: dict[tuple[Any, ...], Typed] = {}
    order: list[tuple[Any, ...]] = []

    def visit(node: Typed) -> None:
        if not node.args:
            return
        counts[node.key] = counts.get(node.key, 0) + 1
        if counts[node.key] > 1:
            return  # its children were counted the first time
        first[node.key] = node
        for arg in node.args:
            visit(arg)
        order.append(node.key)

    visit(root)
    return [first[k] for k in order if counts[k] > 1]


_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "rem": "%", "and": "&", "or": "|",
          "xor": "^", "shl": "<<", "shr": ">>", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
          "gt": ">", "ge": ">="}  # fmt: skip


def print_tree(
    tree: Typed,
    node_text: Callable[[Typed], str],
    names: dict[tuple[Any, ...], str],
    declare: Callable[[Type, str, str], str],
    prefix: str = "t",
) -> tuple[tuple[str, ...], str]:
    """Print a bound tree with each repeated subtree bound to a local once: (statements,
    root text). `node_text` prints a node (reading `names` for nodes already bound),
    `declare(type, name, text)` spells a local's definition. The printers share this."""
    statements = []
    for k, node in enumerate(shared_subtrees(tree)):
        name = f"{prefix}{k}"
        statements.append(declare(node.type, name, node_text(node)))
        names[node.key] = name
    return tuple(statements), node_text(tree)


def describe(node: Expr) -> str:
    """Readable infix text of a tree (docs and messages): ``x0 / (1 + abs(x0))``."""
    if isinstance(node, Input):
        return f"x{node.index}"
    if isinstance(node, Param):
        return node.name
    if isinstance(node, Const):
        return str(node.value).lower() if isinstance(node.value, bool) else repr(node.value)
    if isinstance(node, Width):
        return "W"
    if isinstance(node, Cast):
        role = node.role if isinstance(node.role, str) else node.role.short
        return f"{role}({describe(node.arg)})"
    assert isinstance(node, Apply)
    parts = [describe(a) if not isinstance(a, Apply) or (a.fn not in _INFIX and a.fn != "select"
             and a.fn != "neg") else f"({describe(a)})" for a in node.args]  # fmt: skip
    if node.fn in _INFIX:
        return f"{parts[0]} {_INFIX[node.fn]} {parts[1]}"
    if node.fn == "neg":
        return f"-{parts[0]}"
    if node.fn == "not":
        return f"~{parts[0]}"
    if node.fn == "select":
        return f"{parts[0]} ? {parts[1]} : {parts[2]}"
    return f"{node.fn}({', '.join(describe(a) for a in node.args)})"


def describe_spec(spec: ExprSpec) -> str:
    """Readable text of a tree, family mapping or switch (``real: ...; sint: ...``)."""
    if isinstance(spec, Expr):
        return describe(spec)
    if isinstance(spec, Switch):
        return "; ".join(f"{spec.param}={k}: {describe_spec(v)}" for k, v in spec.cases.items())
    return "; ".join(f"{k}: {describe_spec(v)}" for k, v in spec.items())


# ---- evaluation ------------------------------------------------------------------------------------
def evaluate(root: Typed, xp: Any, inputs: Sequence[Any], params: Mapping[str, Any]) -> Any:
    """Evaluate a bound tree with array module `xp` (``numpy`` or ``jax.numpy``).

    `inputs` are arrays in their compute types (broadcast against each other by `xp`),
    `params` the kernel params (`OpDef.kernel_params`). Returns the root's value in its
    compute type; the caller stores it in the output dtype.

    Raises:
        NotImplementedError: a primitive with no array spelling here (integer division,
            shifts, popcount): such ops keep a hand-written lowering and reference.
    """

    def numpy_type(t: Type) -> Any:
        return bool if t is PRED else t.numpy

    def value(node: Typed) -> Any:
        if node.kind == "input":
            return inputs[node.value]
        if node.kind in ("param", "const", "width"):
            raw = params[node.value] if node.kind == "param" else node.value
            return xp.asarray(raw, numpy_type(node.type))
        args = [value(a) for a in node.args]
        if node.kind == "cast":
            return xp.asarray(args[0]).astype(numpy_type(node.type))
        spec = PRIMITIVES[node.kind]
        if spec.numeric is None:
            raise NotImplementedError(f"primitive {node.kind} has no array evaluation")
        return spec.numeric(xp, *args)

    return value(root)
