"""GLSL expressions of the elementwise ops, table-driven by compute family.

Each entry maps an op name to expressions over the operands ``x0, x1, x2`` (in their
inputs' compute types, see `openinfer_jax.vk.glsl`) and params ``P_<name>``. The
expression is keyed by the compute family of input 0: the family itself first
(``float`` alone: GLSL's exp/log/tanh have no double overloads), then ``real`` for
``float``/``double``, ``int``/``int64`` the ``sint`` key, ``uint``/``uint64`` the ``uint`` key,
then ``bool``); ``*`` matches any family. The result must already be in the output's
compute type (the encoder then wraps integers and rounds floats).

Semantics follow the op registry's NumPy references (docs/ops.md): integer arithmetic
wraps (the encoder masks to the storage width), division truncates and a zero divisor
gives ``div_by_zero_mask``, ``floor_div`` floors, ``rem`` keeps the dividend's sign, shifts
saturate at the width, NaN propagates through min/max. Helper functions named here
(``t_div`` ...) are emitted per compute type by `helper_functions`.

``W`` is the bit width of input 0's storage type, ``WMASK`` its all-ones mask (as uint).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ELEMENTWISE", "ElementwiseSpec", "family_key", "helper_functions"]


@dataclass(frozen=True)
class ElementwiseSpec:
    """GLSL for one elementwise op.

    `exprs`: family key -> expression. `params`: (param name, slot type) pairs passed in
    push constants; the slot type is ``in`` (input 0's compute type), ``out`` (the
    output's), ``uint``, or ``slope`` (input 0's compute type for floats, f64 for
    integers: relu's integer path multiplies in f64 like the reference). A family missing from `exprs` (and no ``*``) means no kernel
    for that family: `VulkanBackend.supports` reports it.
    """

    exprs: dict[str, str]
    params: tuple[tuple[str, str], ...] = ()

    def expr_for(self, family: str) -> str | None:
        """The expression for compute family `family`, or None."""
        for key in (family, family_key(family), "*"):
            if key in self.exprs:
                return self.exprs[key]
        return None


def family_key(family: str) -> str:
    """The expression-table key of a compute family."""
    return {"float": "real", "double": "real", "int": "sint", "int64": "sint",
            "uint": "uint", "uint64": "uint", "bool": "bool"}[family]  # fmt: skip


def _cmp(symbol: str) -> ElementwiseSpec:
    return ElementwiseSpec({"*": f"uint(x0 {symbol} x1)"})


_MIN_MAX_REAL = "(isnan(x0) || x0 {op} x1) ? x0 : x1"

ELEMENTWISE: dict[str, ElementwiseSpec] = {
    # arithmetic
    "add": ElementwiseSpec({"bool": "x0 | x1", "*": "x0 + x1"}),
    "mul": ElementwiseSpec({"bool": "x0 & x1", "*": "x0 * x1"}),
    "sub": ElementwiseSpec({"real": "x0 - x1", "sint": "x0 - x1", "uint": "x0 - x1"}),
    "div": ElementwiseSpec(
        {
            "real": "(x1 == OT(0)) ? P_div_by_zero_mask : x0 / x1",
            "sint": "t_div(x0, x1, P_div_by_zero_mask)",
            "uint": "u_div(x0, x1, P_div_by_zero_mask)",
        },
        (("div_by_zero_mask", "in"),),
    ),
    "floor_div": ElementwiseSpec(
        {
            "sint": "t_floor_div(x0, x1, P_div_by_zero_mask)",
            "uint": "u_div(x0, x1, P_div_by_zero_mask)",
        },
        (("div_by_zero_mask", "in"),),
    ),
    "rem": ElementwiseSpec({"sint": "t_rem(x0, x1)", "uint": "u_rem(x0, x1)"}),
    # The reference computes a * b + c in f64: fused for f32 inputs (the f64 product is
    # exact, so an infinite addend wins over a product that overflows f32; drivers need not
    # fuse fma()), two roundings for f64 inputs.
    "fma": ElementwiseSpec(
        {
            "float": "(isinf(x2) && !isinf(x0) && !isinf(x1) && !isnan(x0) && !isnan(x1)) ? x2 "
            ": fma(x0, x1, x2)",
            "double": "mul_add_unfused(x0, x1, x2)",
        }
    ),
    "abs": ElementwiseSpec({"real": "abs(x0)", "sint": "(x0 < OT(0)) ? -x0 : x0"}),
    "neg": ElementwiseSpec({"real": "-x0", "sint": "-x0"}),
    "recip": ElementwiseSpec(
        {"real": "(x0 == OT(0)) ? P_div_by_zero_mask : OT(1) / x0"}, (("div_by_zero_mask", "in"),)
    ),
    # bitwise
    "and": ElementwiseSpec({"sint": "x0 & x1", "uint": "x0 & x1", "bool": "x0 & x1"}),
    "or": ElementwiseSpec({"sint": "x0 | x1", "uint": "x0 | x1", "bool": "x0 | x1"}),
    "xor": ElementwiseSpec({"sint": "x0 ^ x1", "uint": "x0 ^ x1", "bool": "x0 ^ x1"}),
    "not": ElementwiseSpec({"sint": "~x0", "uint": "~x0", "bool": "x0 ^ 1u"}),
    "shl": ElementwiseSpec(
        {
            "sint": "(P_bits >= W) ? OT(0) : (x0 << P_bits)",
            "uint": "(P_bits >= W) ? OT(0) : (x0 << P_bits)",
        },
        (("bits", "uint"),),
    ),
    "shr": ElementwiseSpec(
        {"sint": "x0 >> min(P_bits, W - 1u)", "uint": "(P_bits >= W) ? OT(0) : (x0 >> P_bits)"},
        (("bits", "uint"),),
    ),
    "popcount": ElementwiseSpec({"sint": "popcount_w(x0)", "uint": "popcount_w(x0)"}),
    # comparison and filtering
    "eq": _cmp("=="),
    "ne": _cmp("!="),
    "lt": _cmp("<"),
    "le": _cmp("<="),
    "gt": _cmp(">"),
    "ge": _cmp(">="),
    "filter": ElementwiseSpec({"*": "(x0 != T0(0)) ? x1 : x2"}),
    "is_finite": ElementwiseSpec({"real": "uint(!isnan(x0) && !isinf(x0))"}),
    "is_nan": ElementwiseSpec({"real": "uint(isnan(x0))"}),
    "is_inf": ElementwiseSpec({"real": "uint(isinf(x0))"}),
    "is_neg": ElementwiseSpec(
        {"real": "uint(x0 < T0(0))", "sint": "uint(x0 < T0(0))", "uint": "0u"}
    ),
    # statistics and rounding
    "min": ElementwiseSpec(
        {"real": _MIN_MAX_REAL.format(op="<"), "sint": "min(x0, x1)", "uint": "min(x0, x1)"}
    ),
    "max": ElementwiseSpec(
        {"real": _MIN_MAX_REAL.format(op=">"), "sint": "max(x0, x1)", "uint": "max(x0, x1)"}
    ),
    "floor": ElementwiseSpec({"real": "floor(x0)"}),
    "ceil": ElementwiseSpec({"real": "ceil(x0)"}),
    "trunc": ElementwiseSpec({"real": "trunc(x0)"}),
    "round": ElementwiseSpec({"real": "round_away(x0)"}),
    "sign": ElementwiseSpec(
        {"real": "int(x0 > T0(0)) - int(x0 < T0(0))", "sint": "int(x0 > T0(0)) - int(x0 < T0(0))"}
    ),
    "clamp": ElementwiseSpec(
        {
            "real": "nan_clamp(x0, P_min, P_max)",
            "sint": "min(max(x0, P_min), P_max)",
            "uint": "min(max(x0, P_min), P_max)",
        },
        (("min", "in"), ("max", "in")),
    ),
    "relu": ElementwiseSpec(
        # -inf * 0 is NaN in the reference too, and NaN passes the clamps.
        {
            "real": "nan_clamp((x0 < T0(0)) ? x0 * P_negative_slope : x0, P_clamp_min, P_clamp_max)",
            # The reference truncates x * slope computed in f64.
            "sint": "min(max((x0 < T0(0)) ? T0(trunc(double(x0) * P_negative_slope)) : x0, "
            "P_clamp_min), P_clamp_max)",
        },
        (("negative_slope", "slope"), ("clamp_min", "in"), ("clamp_max", "in")),
    ),
    # model-building math (f32 compute for low-precision floats)
    "exp": ElementwiseSpec({"float": "exp(x0)"}),
    "log": ElementwiseSpec({"float": "log(x0)"}),
    "sqrt": ElementwiseSpec({"real": "sqrt(x0)"}),
    # 1/sqrt(-0.0) is -inf; lavapipe's fused rsqrt of a half-loaded -0.0 gave NaN.
    "rsqrt": ElementwiseSpec({"real": "(x0 == OT(0)) ? OT(1) / x0 : OT(1) / sqrt(x0)"}),
    "tanh": ElementwiseSpec({"float": "tanh(x0)"}),
    "sigmoid": ElementwiseSpec({"float": "OT(1) / (OT(1) + exp(-x0))"}),
    "silu": ElementwiseSpec({"float": "x0 / (OT(1) + exp(-x0))"}),
    # GLSL has no erf: erfc from Numerical Recipes' Chebyshev fit (fractional error < 1.2e-7
    # everywhere, so the far negative tail of x * Phi(x) stays accurate).
    "gelu": ElementwiseSpec({"float": "OT(0.5) * x0 * erfc_approx(-x0 * 0.70710678118654752)"}),
    # 0.5x(1 + tanh(y)) == x / (1 + exp(-2y)): no cancellation of 1 + tanh(y) for x << 0.
    "gelu_tanh": ElementwiseSpec(
        {"float": "x0 / (OT(1) + exp(-1.5957691216057307 * (x0 + 0.044715 * x0 * x0 * x0)))"}
    ),
    "where": ElementwiseSpec({"*": "(x0 != 0u) ? x1 : x2"}),
}


def helper_functions(ct: str, bits: int) -> str:
    """Integer helpers for compute type `ct` (``int``/``uint``/``int64_t``/``uint64_t``).

    `bits` is input 0's storage width (for ``popcount_w``).
    """
    out = []
    if ct in ("int", "int64_t"):
        out.append(
            f"{ct} t_div({ct} a, {ct} b, {ct} mask) {{\n"
            f"    if (b == {ct}(0)) return mask;\n"
            # int_min / -1 overflows in hardware; negation wraps like the reference.
            f"    if (b == {ct}(-1)) return -a;\n"
            "    return a / b;\n}\n"
            f"{ct} t_rem({ct} a, {ct} b) {{\n"
            f"    if (b == {ct}(0) || b == {ct}(-1)) return {ct}(0);\n"
            "    return a - b * (a / b);\n}\n"
            f"{ct} t_floor_div({ct} a, {ct} b, {ct} mask) {{\n"
            f"    if (b == {ct}(0)) return mask;\n"
            f"    {ct} q = t_div(a, b, mask);\n"
            f"    {ct} r = t_rem(a, b);\n"
            f"    if (r != {ct}(0) && ((r < {ct}(0)) != (b < {ct}(0)))) q -= {ct}(1);\n"
            "    return q;\n}\n"
        )
    if ct in ("uint", "uint64_t"):
        out.append(
            f"{ct} u_div({ct} a, {ct} b, {ct} mask) {{ return (b == {ct}(0)) ? mask : a / b; }}\n"
            f"{ct} u_rem({ct} a, {ct} b) {{ return (b == {ct}(0)) ? {ct}(0) : a % b; }}\n"
        )
    if ct in ("int", "uint"):
        mask = "0xffffffffu" if bits >= 32 else f"0x{(1 << bits) - 1:x}u"
        out.append(f"uint popcount_w({ct} a) {{ return uint(bitCount(uint(a) & {mask})); }}\n")
    if ct in ("int64_t", "uint64_t"):
        out.append(
            f"uint popcount_w({ct} a) {{ uvec2 h = unpack32(uint64_t(a)); "
            "return uint(bitCount(h.x) + bitCount(h.y)); }\n"
        )
    if ct in ("float", "double"):
        # GLSL's min/max leave NaN operands undefined; the references propagate NaN.
        out.append(
            f"{ct} nan_clamp({ct} y, {ct} lo, {ct} hi) {{ return isnan(y) ? y : min(max(y, lo), hi); }}\n"
        )
        if ct == "double":
            # `precise` forbids contracting the multiply-add into one fused operation.
            out.append(
                "double mul_add_unfused(double a, double b, double c) {\n"
                "    precise double p = a * b;\n    precise double r = p + c;\n    return r;\n}\n"
            )
        if ct == "float":
            out.append(
                "float erfc_approx(float x) {\n"
                "    float z = abs(x);\n    float t = 1.0 / (1.0 + 0.5 * z);\n"
                "    float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418"
                " + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587"
                " + t * (-0.82215223 + t * 0.17087277)))))))));\n"
                "    return (x >= 0.0) ? r : 2.0 - r;\n}\n"
            )
        # Half away from zero, keeping the sign of zero (the registry's `round`).
        out.append(
            f"{ct} round_away({ct} x) {{\n"
            f"    if (x == {ct}(0) || isnan(x) || isinf(x)) return x;\n"
            f"    {ct} m = abs(x);\n"
            f"    {ct} r = floor(m) + ((m - floor(m) >= {ct}(0.5)) ? {ct}(1) : {ct}(0));\n"
            "    return (x < 0) ? -r : r;\n}\n"
        )
    return "".join(out)
