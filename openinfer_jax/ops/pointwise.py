"""Pointwise ops declared only by their expression trees: ONNX activations and hypot.

Each op is one `elementwise` entry whose tree is its whole meaning: the C and GLSL printers
render it as one fused kernel, and the JAX lowering and the NumPy reference evaluate it (the
tests check every backend against NumPy formulas of their own). Semantics follow ONNX where
ONNX defines the op; f8/bf16/f16 compute in f32 and round once; NaN inputs give NaN.

* ``hardsigmoid(x, alpha=0.2, beta=0.5)`` = ``max(0, min(1, alpha * x + beta))``.
* ``hardswish(x)`` = ``x * max(0, min(1, x / 6 + 0.5))`` (ONNX HardSwish: alpha = 1/6).
* ``elu(x, alpha=1)`` = ``x < 0 ? alpha * (e^x - 1) : x`` (``e^x - 1`` as expm1, exact near 0).
* ``selu(x, alpha=1.6732632..., gamma=1.0507009...)`` = ``gamma * (x <= 0 ? alpha * (e^x - 1)
  : x)`` (ONNX's float32 constants).
* ``softplus(x)`` = ``log(1 + e^x)``, computed as ``max(x, 0) + log1p(e^-|x|)`` (no overflow
  for large x, exact for very negative x).
* ``prelu(x, slope)`` = ``x < 0 ? slope * x : x``; ``slope`` broadcasts to x's shape (ONNX
  PRelu: one-directional, so the output has x's shape; e.g. slope [C, 1, 1] for x [N, C, H, W]).
* ``softsign(x)`` = ``x / (1 + |x|)`` (so +-inf gives NaN, as the formula does in ONNX).
* ``sin cos tan asin acos atan sinh cosh asinh acosh atanh`` (x): the functions of ONNX's
  trigonometric and hyperbolic ops, radians; outside an inverse function's domain, NaN.
* ``erf(x)``: the error function (ONNX Erf).
* ``pow(x, y)`` = ``x^y``, broadcast (ONNX Pow with a float base): a negative x with an
  integral y keeps the sign of the power, with a fractional y gives NaN; ``pow(x, 0)`` = 1.
* ``hypot(a, b)`` = ``sqrt(a^2 + b^2)`` without overflow or underflow (the larger magnitude
  times ``sqrt(1 + r^2)``, r the ratio); +inf if either is infinite, even with a NaN (C99).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import expr as ex
from openinfer_jax.ops.elementwise import elementwise, params_of
from openinfer_jax.ops.expr import Input, clamp, maximum, minimum, param, select
from openinfer_jax.ops.registry import FLOAT, OpCheckError, ParamKind, ParamSpec, broadcast_shapes

__all__: list[str] = []

x = Input(0)


def _alpha(default: float, doc: str) -> ParamSpec:
    return ParamSpec("alpha", ParamKind.FLOAT, default, doc=doc)


def _slope_fits(
    in_dtypes: Sequence[DType], shapes: Sequence[tuple[int, ...]], params: Mapping[str, Any]
) -> None:
    """PRelu broadcasts one way: slope must broadcast to x's shape, not enlarge it."""
    if broadcast_shapes("prelu", shapes) != tuple(shapes[0]):
        raise OpCheckError(
            f"prelu: slope of shape {tuple(shapes[1])} does not broadcast to x's shape "
            f"{tuple(shapes[0])}; give slope x's trailing dims or 1s (e.g. [C, 1, 1])"
        )


elementwise(
    "hardsigmoid", "activation", "x", FLOAT,
    params=params_of(_alpha(0.2, "slope"), ParamSpec("beta", ParamKind.FLOAT, 0.5, doc="offset")),
    expr=clamp(param("alpha") * x + param("beta"), 0, 1),
    doc="ONNX HardSigmoid: max(0, min(1, alpha * x + beta))",
)  # fmt: skip
elementwise(
    "hardswish", "activation", "x", FLOAT,
    expr=x * clamp(x * (1 / 6) + 0.5, 0, 1),
    doc="ONNX HardSwish: x * max(0, min(1, x / 6 + 0.5))",
)  # fmt: skip
elementwise(
    "elu", "activation", "x", FLOAT,
    params=params_of(_alpha(1.0, "scale of the negative part")),
    expr=select(x < 0, param("alpha") * ex.expm1(x), x),
    doc="ONNX Elu: x < 0 ? alpha * (e^x - 1) : x",
)  # fmt: skip
elementwise(
    "selu", "activation", "x", FLOAT,
    params=params_of(
        _alpha(1.67326319217681884765625, "scale of the negative part (ONNX default)"),
        ParamSpec("gamma", ParamKind.FLOAT, 1.05070102214813232421875, doc="output scale (ONNX default)"),
    ),
    expr=param("gamma") * select(x <= 0, param("alpha") * ex.expm1(x), x),
    doc="ONNX Selu: gamma * (x <= 0 ? alpha * (e^x - 1) : x)",
)  # fmt: skip
elementwise(
    "softplus", "activation", "x", FLOAT,
    expr=maximum(x, 0) + ex.log1p(ex.exp(-abs(x))),
    doc="ONNX Softplus: log(1 + e^x), computed without overflow",
)  # fmt: skip
elementwise(
    "prelu", "activation", "x slope", FLOAT,
    broadcast=True, check=_slope_fits,
    expr=select(x < 0, Input(1) * x, x),
    doc="ONNX PRelu: x < 0 ? slope * x : x; slope broadcasts to x's shape",
)  # fmt: skip

elementwise(
    "softsign", "activation", "x", FLOAT,
    expr=x / (1 + abs(x)),
    doc="ONNX Softsign: x / (1 + |x|)",
)  # fmt: skip

_a, _b = abs(Input(0)), abs(Input(1))
_big, _small = maximum(_a, _b), minimum(_a, _b)
_ratio = _small / _big
elementwise(
    "hypot", "math", "a b", FLOAT,
    broadcast=True,
    expr=select(ex.isinf(Input(0)) | ex.isinf(Input(1)), math.inf,
                select(_big.eq(0), 0, _big * ex.sqrt(1 + _ratio * _ratio))),
    doc="sqrt(a^2 + b^2) without overflow or underflow; inf if either is infinite",
)  # fmt: skip

for _name, _what in ex.TRIG.items():
    elementwise(_name, "math", "x", FLOAT, expr=ex.Apply(_name, (x,)), doc=_what)
elementwise("erf", "math", "x", FLOAT, expr=ex.erf(x), doc="the error function (ONNX Erf)")
elementwise(
    "pow", "math", "x y", FLOAT,
    broadcast=True,
    expr=ex.power(Input(0), Input(1)),
    doc="x^y, broadcast (ONNX Pow); negative x: NaN unless y is integral",
)  # fmt: skip
