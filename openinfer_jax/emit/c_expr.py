"""The C printer of expression trees (`openinfer_jax.ops.expr`): a bound tree as C99.

`render_c(tree, operands, param)` returns the C statements that bind repeated subtrees to
locals and the expression of the root, in the root's compute type. Compute types follow
`openinfer_jax.emit.c_types`: float for f8/bf16/f16/f32, double, int64_t for every signed
integer, uint64_t for unsigned, int for bool and for truth values. Signed arithmetic that may
overflow goes through uint64_t (C leaves signed overflow undefined; the trees mean two's
complement wrap), integer division and remainder through the runtime's ``oi_tdiv`` family
(``INT64_MIN / -1`` traps in hardware), NaN-passing clamps through ``oi_nan_clamp_*``.

The element kernels (`openinfer_jax.emit.c_kernels`) print an op's tree per element; other
kernels may print a tree into their own loops (an epilogue) the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from openinfer_jax.core.errors import SynthesisError
from openinfer_jax.emit.c_types import ctype
from openinfer_jax.ops import expr as ex

__all__ = ["CExpr", "c_type_of", "render_c"]

_CALL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\(")
ParamText = Callable[[str, str], str]  # (param name, C compute type) -> C text


@dataclass(frozen=True)
class CExpr:
    """A printed tree: `statements` (``const T t0 = ...;``) to place before `value`."""

    statements: tuple[str, ...]
    value: str


def c_type_of(t: ex.Type) -> str:
    """The C compute type of a tree type."""
    return "int" if t is ex.PRED else ctype(t).compute


def render_c(
    tree: ex.Typed,
    operands: Sequence[str],
    param: ParamText,
    *,
    literal: Callable[[object, str], str],
    width: int = 0,
    prefix: str = "t",
) -> CExpr:
    """Print `tree` as C.

    `operands[k]` is the C text of input k (already in its compute type), `param(name, ct)`
    the text of a param held in C type `ct` (a literal or a run-time local), `literal(value,
    ct)` a literal in `ct` (`c_kernels.c_literal`), `width` the storage bits of input 0 (for
    popcount), `prefix` the name stem of the locals.

    Raises:
        SynthesisError: a primitive the C printer cannot express for that type.
    """
    printer = _Printer(operands, param, literal, width)
    statements, text = ex.print_tree(
        tree, lambda n: printer.node(n)[0], printer.names,
        lambda t, name, value: f"const {c_type_of(t)} {name} = {value};", prefix,
    )  # fmt: skip
    return CExpr(statements, text)


def _wrap(text: str, atomic: bool) -> str:
    return text if atomic else f"({text})"


class _Printer:
    def __init__(
        self, operands: Sequence[str], param: ParamText, literal: Callable[[object, str], str],
        width: int,
    ) -> None:  # fmt: skip
        self.operands = operands
        self.param = param
        self.literal = literal
        self.width = width
        self.names: dict[tuple[object, ...], str] = {}

    def lit(self, value: object, t: ex.Type) -> str:
        if t is ex.PRED:
            return "1" if value else "0"
        return self.literal(value, c_type_of(t))

    def node(self, n: ex.Typed) -> tuple[str, bool]:
        """(C text, whether it needs no parentheses as an operand)."""
        if n.key in self.names:
            return self.names[n.key], True
        ct = c_type_of(n.type)
        if n.kind == "input":
            return self.operands[n.value], True
        if n.kind in ("param", "const", "width"):
            text = self.param(n.value, ct) if n.kind == "param" else self.lit(n.value, n.type)
            return text, not text.startswith("-")
        if n.kind == "cast":
            return f"({ct}){_wrap(*self.node(n.args[0]))}", False
        args = [self.node(a) for a in n.args]
        wrapped = [_wrap(*a) for a in args]
        bare = [a[0] for a in args]
        operand = n.args[1].type if n.kind == "select" else n.args[0].type
        fam = ex.family(operand)
        text = _PRIMITIVES[n.kind](self, fam, c_type_of(operand), wrapped, bare)
        if text is None:
            raise SynthesisError(f"the C target cannot print {n.kind} on {operand} values")
        return text, _is_call(text)


def _is_call(text: str) -> bool:
    """True if `text` is one call ``name(...)`` (its first parenthesis closes at the end)."""
    head = _CALL.match(text)
    if head is None:
        return False
    depth = 0
    for k in range(head.end() - 1, len(text)):
        depth += text[k] == "("
        depth -= text[k] == ")"
        if depth == 0:
            return k == len(text) - 1
    return False


def _fn(ct: str, name: str) -> str:
    """The libm function `name` for compute type `ct` (``expf`` for float)."""
    return f"{name}f" if ct == "float" else name


Render = Callable[["_Printer", str, str, list[str], list[str]], "str | None"]


def _wrapping(symbol: str, bool_symbol: str | None = None) -> Render:
    """a OP b: signed through uint64_t (defined wrap), bool with `bool_symbol`."""

    def render(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str | None:
        if fam == "sint":
            return f"(int64_t)((uint64_t){a[0]} {symbol} (uint64_t){a[1]})"
        if fam == "bool":
            return None if bool_symbol is None else f"{a[0]} {bool_symbol} {a[1]}"
        return f"{a[0]} {symbol} {a[1]}"

    return render


def _binary(symbol: str, pred_symbol: str | None = None) -> Render:
    def render(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
        return f"{a[0]} {pred_symbol if fam == 'pred' and pred_symbol else symbol} {a[1]}"

    return render


def _call(name: str, families: frozenset[str] = ex.REAL) -> Render:
    def render(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str | None:
        return f"{_fn(ct, name)}({', '.join(bare)})" if fam in families else None

    return render


def _mul_add(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str | None:
    if fam not in ex.REAL:
        return None
    # in double the product is rounded first, as every other backend does (oi_runtime.h)
    return f"{'oi_mul_add_double' if ct == 'double' else _fn(ct, 'fma')}({', '.join(bare)})"


def _div(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    if fam == "sint":  # INT64_MIN / -1 wraps; a zero divisor is guarded by the tree
        return f"oi_tdiv({bare[0]}, {bare[1]}, INT64_C(0))"
    return f"{a[0]} / {a[1]}"


def _floor_div(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    if fam == "sint":
        return f"oi_floordiv({bare[0]}, {bare[1]}, INT64_C(0))"
    return f"{a[0]} / {a[1]}"


def _rem(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    return f"oi_trem({bare[0]}, {bare[1]})" if fam == "sint" else f"{a[0]} % {a[1]}"


def _neg(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    if fam == "sint":
        return f"(int64_t)(0 - (uint64_t){a[0]})"
    return f"-{a[0]}" if fam == "real" else f"0 - {a[0]}"


def _abs(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    zero = p.literal(0, ct)
    if fam == "sint":
        return f"({a[0]} < {zero}) ? (int64_t)(0 - (uint64_t){a[0]}) : {a[0]}"
    # -0.0 becomes +0.0 (the reference's abs); a NaN passes unchanged
    return f"({a[0]} < {zero}) ? -{a[0]} : (({a[0]} == {zero}) ? {zero} : {a[0]})"


def _extreme(symbol: str) -> Render:
    def render(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
        if fam == "real":  # NaN in either operand gives NaN, like NumPy's minimum/maximum
            return f"(({a[0]} != {a[0]}) || {a[0]} {symbol} {a[1]}) ? {a[0]} : {a[1]}"
        return f"({a[0]} {symbol} {a[1]}) ? {a[0]} : {a[1]}"

    return render


def _clamp(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    if fam == "real":
        return f"oi_nan_clamp_{ct}({bare[0]}, {bare[1]}, {bare[2]})"
    return f"oi_min_{ct}(oi_max_{ct}({bare[0]}, {bare[1]}), {bare[2]})"


def _shl(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    if fam == "sint":
        return f"(int64_t)((uint64_t){a[0]} << {a[1]})"
    return f"{a[0]} << {a[1]}"


def _not(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    return f"!{a[0]}" if fam in ("bool", "pred") else f"~{a[0]}"


def _popcount(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    return f"oi_popcount((uint64_t){a[0]} & UINT64_C({(1 << p.width) - 1}))"


def _select(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    return f"{a[0]} ? {a[1]} : {a[2]}"


def _erf(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    # A rational approximation (the one XLA uses for f32) that vectorizes, for float.
    return f"oi_erf_f32({bare[0]})" if ct == "float" else f"erf({bare[0]})"


def _erfc(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    # 1 + erf(-w): erf is odd, and a NaN argument keeps its sign bit through the two negations
    return f"{p.literal(1, ct)} + {_erf(p, fam, ct, [f'-{a[0]}'], [f'-{a[0]}'])}"


def _predicate(name: str) -> Render:
    def render(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
        return f"{name}({bare[0]})"

    return render


_PRIMITIVES: dict[str, Render] = {
    "add": _wrapping("+", "|"),
    "sub": _wrapping("-"),
    "mul": _wrapping("*", "&"),
    "div": _div,
    "floor_div": _floor_div,
    "rem": _rem,
    "neg": _neg,
    "abs": _abs,
    "min": _extreme("<"),
    "max": _extreme(">"),
    "clamp": _clamp,
    "mul_add": _mul_add,
    "and": _binary("&", "&&"),
    "or": _binary("|", "||"),
    "xor": _binary("^", "!="),
    "not": _not,
    "shl": _shl,
    "shr": _binary(">>"),
    "popcount": _popcount,
    "eq": _binary("=="),
    "ne": _binary("!="),
    "lt": _binary("<"),
    "le": _binary("<="),
    "gt": _binary(">"),
    "ge": _binary(">="),
    "isnan": _predicate("isnan"),
    "isinf": _predicate("isinf"),
    "isfinite": _predicate("isfinite"),
    "select": _select,
    "floor": _call("floor"),
    "ceil": _call("ceil"),
    "trunc": _call("trunc"),
    "round": _call("round"),  # C's round() is half away from zero
    "exp": _call("exp"),
    "expm1": _call("expm1"),
    "log": _call("log"),
    "log1p": _call("log1p"),
    "sqrt": _call("sqrt"),
    "tanh": _call("tanh"),
    "erf": _erf,
    "erfc": _erfc,
    "pow": _call("pow"),
    **{name: _call(name) for name in ex.TRIG},
}
assert set(_PRIMITIVES) == set(ex.PRIMITIVES), "every primitive needs a C spelling"
