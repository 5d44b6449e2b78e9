"""The GLSL printer of expression trees (`openinfer_jax.ops.expr`): a bound tree as GLSL.

`render_glsl(tree, operands, width)` returns the statements that bind repeated subtrees to
locals, the root's expression (in its compute type, see `openinfer_jax.vk.glsl`), the params
the expression reads (each a push-constant slot ``P_<name>`` of a stated type) and the helper
functions it calls, defined once per (helper, compute type).

GLSL facts the printer encodes: integer arithmetic wraps in 32 or 64 bits (the encoder then
masks to the storage width), so no casts are needed for wrap; ``int_min / -1`` is undefined,
so signed division goes through ``t_div``; GLSL's min/max/clamp leave NaN operands undefined,
so real min/max test for NaN and the clamp is ``nan_clamp``; GLSL has no erf, expm1 or log1p
(helpers), and no double exp/log/tanh: a tree that needs one in f64 raises `UnsupportedExpr`
(the op then runs elsewhere; `openinfer_jax.vk.selection` reports why).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from openinfer_jax.core.errors import BackendError
from openinfer_jax.ops import expr as ex
from openinfer_jax.vk.glsl import glsl_type, literal

__all__ = ["GlslExpr", "UnsupportedExpr", "glsl_type_of", "helper_source", "render_glsl"]


class UnsupportedExpr(BackendError):
    """A tree uses a function GLSL lacks for that type (exp of a double)."""


@dataclass(frozen=True)
class GlslExpr:
    """A printed tree: `statements` to place before `value`, the `params` it reads as
    ``(name, tree type)`` in first-use order, and the `helpers` it calls as
    ``(helper, compute type)`` (see `helper_source`)."""

    statements: tuple[str, ...]
    value: str
    params: tuple[tuple[str, ex.Type], ...]
    helpers: tuple[tuple[str, str], ...]


def glsl_type_of(t: ex.Type) -> str:
    """The GLSL compute type of a tree type (``bool`` for truth values)."""
    return "bool" if t is ex.PRED else glsl_type(t).compute


def render_glsl(tree: ex.Typed, operands: Sequence[str], width: int, prefix: str = "t") -> GlslExpr:
    """Print `tree` as GLSL: `operands[k]` is input k's text, `width` input 0's storage bits.

    Raises:
        UnsupportedExpr: a function GLSL lacks for that type (the message names it).
    """
    printer = _Printer(operands, width)
    statements, text = ex.print_tree(
        tree, lambda n: printer.node(n)[0], printer.names,
        lambda t, name, value: f"{glsl_type_of(t)} {name} = {value};", prefix,
    )  # fmt: skip
    return GlslExpr(statements, text, tuple(printer.params.items()), tuple(printer.helpers))


class _Printer:
    def __init__(self, operands: Sequence[str], width: int) -> None:
        self.operands = operands
        self.width = width
        self.names: dict[tuple[object, ...], str] = {}
        self.params: dict[str, ex.Type] = {}
        self.helpers: dict[tuple[str, str], None] = {}

    def lit(self, value: object, t: ex.Type) -> str:
        if t is ex.PRED:
            return "true" if value else "false"
        return literal(value, glsl_type(t))

    def need(self, name: str, ct: str) -> None:
        for dep in _DEPENDS.get(name, ()):
            self.need(dep, ct)
        self.helpers[(name, ct)] = None

    def node(self, n: ex.Typed) -> tuple[str, bool]:
        """(GLSL text, whether it needs no parentheses as an operand)."""
        if n.key in self.names:
            return self.names[n.key], True
        if n.kind == "input":
            return self.operands[n.value], True
        if n.kind == "param":
            known = self.params.setdefault(n.value, n.type)
            if known is not n.type:
                raise UnsupportedExpr(f"param {n.value} is read as two types ({known}, {n.type})")
            return f"P_{n.value}", True
        if n.kind == "const":
            return self.lit(n.value, n.type), True
        if n.kind == "width":
            return f"{n.value}u", True
        if n.kind == "cast":
            return f"{glsl_type_of(n.type)}({self.node(n.args[0])[0]})", True
        args = [self.node(a) for a in n.args]
        wrapped = [text if atomic else f"({text})" for text, atomic in args]
        bare = [text for text, _ in args]
        operand = n.args[1].type if n.kind == "select" else n.args[0].type
        ct = glsl_type_of(operand)
        fam = ex.family(operand)
        if n.kind in ex.TRANSCENDENTAL and ct != "float":
            raise UnsupportedExpr(f"GLSL has no {ct} {n.kind}")
        render = _PRIMITIVES[n.kind]
        text = render(self, fam, ct, wrapped, bare)
        return text, _CALLS(text)


def _CALLS(text: str) -> bool:
    """True for a single call ``f(...)`` (no parentheses needed around it)."""
    head = text.split("(", 1)[0]
    if not head or not head.replace("_", "a").isalnum() or "(" not in text:
        return False
    depth = 0
    for k in range(len(head), len(text)):
        depth += text[k] == "("
        depth -= text[k] == ")"
        if depth == 0:
            return k == len(text) - 1
    return False


Render = Callable[["_Printer", str, str, list[str], list[str]], str]


def _infix(symbol: str, bool_symbol: str | None = None, pred_symbol: str | None = None) -> Render:
    def render(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
        op = {"bool": bool_symbol, "pred": pred_symbol}.get(fam) or symbol
        return f"{a[0]} {op} {a[1]}"

    return render


def _helper(
    name: str, families: frozenset[str] | None = None, other: Render | None = None
) -> Render:
    """A call of helper `name` (for the operand families given; `other` renders the rest)."""

    def render(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
        if families is not None and fam not in families:
            assert other is not None
            return other(p, fam, ct, a, bare)
        p.need(name, ct)
        extra = f", {ct}(0)" if name in ("t_div", "t_floor_div") else ""
        return f"{name}({', '.join(bare)}{extra})"

    return render


def _builtin(name: str) -> Render:
    def render(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
        return f"{name}({', '.join(bare)})"

    return render


SINT = frozenset({"sint"})
_DIV = _infix("/")


def _abs(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    return f"abs({bare[0]})" if fam == "real" else f"({a[0]} < {ct}(0)) ? -{a[0]} : {a[0]}"


def _extreme(symbol: str, builtin: str) -> Render:
    def render(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
        if fam == "real":
            return f"(isnan({bare[0]}) || {a[0]} {symbol} {a[1]}) ? {a[0]} : {a[1]}"
        return f"{builtin}({bare[0]}, {bare[1]})"

    return render


def _clamp(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    if fam == "real":
        p.need("nan_clamp", ct)
        return f"nan_clamp({', '.join(bare)})"
    return f"min(max({bare[0]}, {bare[1]}), {bare[2]})"


def _mul_add(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    if ct == "double":
        p.need("mul_add_unfused", ct)
        return f"mul_add_unfused({', '.join(bare)})"
    # The reference computes in f64, where the product of two f32 values is exact: an infinite
    # addend wins over a product that overflows f32 (and drivers need not fuse fma()).
    x, y, z = bare
    return (f"(isinf({z}) && !isinf({x}) && !isinf({y}) && !isnan({x}) && !isnan({y})) ? {z} "
            f": fma({x}, {y}, {z})")  # fmt: skip


def _not(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    return {"bool": f"{a[0]} ^ 1u", "pred": f"!{a[0]}"}.get(fam, f"~{a[0]}")


def _isfinite(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    return f"!isnan({bare[0]}) && !isinf({bare[0]})"


def _select(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    return f"{a[0]} ? {a[1]} : {a[2]}"


def _erf(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    p.need("erf_acc", ct)
    return f"erf_acc({bare[0]})"


def _popcount(p: _Printer, fam: str, ct: str, a: list[str], bare: list[str]) -> str:
    p.need(f"popcount_w{p.width}", ct)
    return f"popcount_w{p.width}({bare[0]})"


_PRIMITIVES: dict[str, Render] = {
    "add": _infix("+", "|"),
    "sub": _infix("-"),
    "mul": _infix("*", "&"),
    "div": _helper("t_div", SINT, _DIV),  # int_min / -1 is undefined in GLSL
    "floor_div": _helper("t_floor_div", SINT, _DIV),
    "rem": _helper("t_rem", SINT, _infix("%")),
    "neg": lambda p, fam, ct, a, bare: f"-{a[0]}",
    "abs": _abs,
    "min": _extreme("<", "min"),
    "max": _extreme(">", "max"),
    "clamp": _clamp,
    "mul_add": _mul_add,
    "and": _infix("&", "&", "&&"),
    "or": _infix("|", "|", "||"),
    "xor": _infix("^", "^", "^^"),
    "not": _not,
    "shl": _infix("<<"),
    "shr": _infix(">>"),
    "popcount": _popcount,
    "eq": _infix("=="),
    "ne": _infix("!="),
    "lt": _infix("<"),
    "le": _infix("<="),
    "gt": _infix(">"),
    "ge": _infix(">="),
    "isnan": _builtin("isnan"),
    "isinf": _builtin("isinf"),
    "isfinite": _isfinite,
    "select": _select,
    "floor": _builtin("floor"),
    "ceil": _builtin("ceil"),
    "trunc": _builtin("trunc"),
    "round": _helper("round_away"),
    "exp": _builtin("exp"),
    "expm1": _helper("expm1_small"),
    "log": _builtin("log"),
    "log1p": _helper("log1p_small"),
    "sqrt": _builtin("sqrt"),
    "tanh": _builtin("tanh"),
    "erf": _erf,
    "erfc": _helper("erfc_approx"),
    "pow": _helper("t_pow"),
    **{name: _builtin(name) for name in ex.TRIG},
    # The drivers' formulas lose relative accuracy near 0 (and asinh overflows for huge x).
    "sinh": _helper("sinh_small"),
    "atan": _helper("atan_nan"),
    "asinh": _helper("asinh_acc"),
    "atanh": _helper("atanh_acc"),
}
assert set(_PRIMITIVES) == set(ex.PRIMITIVES), "every primitive needs a GLSL spelling"

_DEPENDS = {
    "t_floor_div": ("t_div", "t_rem"),
    "erf_acc": ("erfc_approx",),
    "asinh_acc": ("log1p_small",),
    "atanh_acc": ("log1p_small",),
}


def helper_source(name: str, ct: str) -> str:
    """GLSL source of helper `name` for compute type `ct` (see `GlslExpr.helpers`)."""
    if name.startswith("popcount_w"):
        bits = int(name[len("popcount_w") :])
        if ct in ("int64_t", "uint64_t"):
            return (f"uint {name}({ct} a) {{ uvec2 h = unpack32(uint64_t(a)); "
                    "return uint(bitCount(h.x) + bitCount(h.y)); }\n")  # fmt: skip
        mask = "0xffffffffu" if bits >= 32 else f"0x{(1 << bits) - 1:x}u"
        return f"uint {name}({ct} a) {{ return uint(bitCount(uint(a) & {mask})); }}\n"
    return _HELPERS[name].replace("CT", ct)


_HELPERS = {
    "t_div": (
        "CT t_div(CT a, CT b, CT mask) {\n"
        "    if (b == CT(0)) return mask;\n"
        "    if (b == CT(-1)) return -a;\n"  # int_min / -1 overflows in hardware; negation wraps
        "    return a / b;\n}\n"
    ),
    "t_rem": (
        "CT t_rem(CT a, CT b) {\n"
        "    if (b == CT(0) || b == CT(-1)) return CT(0);\n"
        "    return a - b * (a / b);\n}\n"
    ),
    "t_floor_div": (
        "CT t_floor_div(CT a, CT b, CT mask) {\n"
        "    if (b == CT(0)) return mask;\n"
        "    CT q = t_div(a, b, mask);\n"
        "    CT r = t_rem(a, b);\n"
        "    if (r != CT(0) && ((r < CT(0)) != (b < CT(0)))) q -= CT(1);\n"
        "    return q;\n}\n"
    ),
    # GLSL's min/max leave NaN operands undefined; the references propagate NaN.
    "nan_clamp": "CT nan_clamp(CT y, CT lo, CT hi) { return isnan(y) ? y : min(max(y, lo), hi); }\n",
    # `precise` forbids contracting the multiply-add into one fused operation.
    "mul_add_unfused": (
        "double mul_add_unfused(double a, double b, double c) {\n"
        "    precise double p = a * b;\n    precise double r = p + c;\n    return r;\n}\n"
    ),
    # erfc from Numerical Recipes' Chebyshev fit (fractional error < 1.2e-7 everywhere, so
    # the far negative tail of x * Phi(x) stays accurate).
    "erfc_approx": (
        "float erfc_approx(float x) {\n"
        "    float z = abs(x);\n    float t = 1.0 / (1.0 + 0.5 * z);\n"
        "    float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418"
        " + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587"
        " + t * (-0.82215223 + t * 0.17087277)))))))));\n"
        "    return (x >= 0.0) ? r : 2.0 - r;\n}\n"
    ),
    # Half away from zero, keeping the sign of zero (the registry's `round`).
    # GLSL's pow is undefined for a < 0 (and for a = 0, b <= 0): C's pow semantics by hand.
    "t_pow": (
        "CT t_pow(CT a, CT b) {\n"
        "    if (b == CT(0) || a == CT(1) || (abs(a) == CT(1) && isinf(b))) return CT(1);\n"
        "    if (isnan(a) || isnan(b)) return a + b;\n"
        "    bool edge = a == CT(0) || isinf(a);\n"
        "    bool neg = a < CT(0) || (a == CT(0) && (floatBitsToUint(a) & 0x80000000u) != 0u);\n"
        "    CT m = edge ? (((b < CT(0)) == (a == CT(0))) ? uintBitsToFloat(0x7f800000u) : CT(0))"
        " : pow(abs(a), b);\n"
        "    if (!neg) return m;\n"
        "    if (floor(b) != b) return edge ? m : uintBitsToFloat(0x7fc00000u);\n"
        "    return (!isinf(b) && mod(b, CT(2)) == CT(1)) ? -m : m;\n}\n"
    ),
    "round_away": (
        "CT round_away(CT x) {\n"
        "    if (x == CT(0) || isnan(x) || isinf(x)) return x;\n"
        "    CT m = abs(x);\n"
        "    CT r = floor(m) + ((m - floor(m) >= CT(0.5)) ? CT(1) : CT(0));\n"
        "    return (x < 0) ? -r : r;\n}\n"
    ),
    # Near 0 a Taylor polynomial (|x| < 1/16: the next term is below 1e-9 relative); elsewhere
    # exp(x) - 1 and log(1 + x) lose nothing that matters in f32.
    "expm1_small": (
        "float expm1_small(float x) {\n"
        "    if (abs(x) < 0.0625) return x * (1.0 + x * (0.5 + x * (1.0 / 6.0 + x * (1.0 / 24.0"
        " + x * (1.0 / 120.0 + x * (1.0 / 720.0))))));\n"
        "    return exp(x) - 1.0;\n}\n"
    ),
    # Below |x| = 0.25 the Taylor series (next term under 2e-8 relative): 1 - erfc cancels.
    "erf_acc": (
        "float erf_acc(float x) {\n"
        "    if (abs(x) < 0.25) { float z = x * x;\n"
        "        return 1.1283791671 * x * (1.0 - z * (1.0 / 3.0 - z * (0.1 - z * (1.0 / 42.0"
        " - z * (1.0 / 216.0 - z / 1320.0))))); }\n"
        "    return 1.0 - erfc_approx(x);\n}\n"
    ),
    "atan_nan": "float atan_nan(float x) {\n    return isnan(x) ? x : atan(x);\n}\n",
    "sinh_small": (
        "float sinh_small(float x) {\n"
        "    if (abs(x) < 0.0625) { float z = x * x;\n"
        "        return x * (1.0 + z * (1.0 / 6.0 + z * (1.0 / 120.0 + z / 5040.0))); }\n"
        "    return sinh(x);\n}\n"
    ),
    "asinh_acc": (
        "float asinh_acc(float x) {\n"
        "    float a = abs(x);\n"
        "    if (isnan(x) || isinf(x) || a == 0.0) return x;\n"
        "    float r = (a > 1e18) ? log(a) + 0.69314718 "
        ": log1p_small(a + a * a / (1.0 + sqrt(1.0 + a * a)));\n"
        "    return (x < 0.0) ? -r : r;\n}\n"
    ),
    "atanh_acc": (
        "float atanh_acc(float x) {\n"
        "    float a = abs(x);\n"
        "    if (isnan(x) || a > 1.0) return (x - x) / (x - x);\n"
        "    if (a == 0.0) return x;\n"
        "    float r = 0.5 * log1p_small(2.0 * a / (1.0 - a));\n"
        "    return (x < 0.0) ? -r : r;\n}\n"
    ),
    "log1p_small": (
        "float log1p_small(float x) {\n"
        "    if (abs(x) < 0.0625) return x * (1.0 - x * (0.5 - x * (1.0 / 3.0 - x * (0.25"
        " - x * (0.2 - x * (1.0 / 6.0 - x / 7.0))))));\n"
        "    return log(1.0 + x);\n}\n"
    ),
}
