"""The pointwise ops declared only as expression trees (openinfer_jax/ops/pointwise.py), on
every backend (JAX lowering, NumPy reference, simulator on XLA CPU and NumPy, Vulkan on
lavapipe, emitted C) against NumPy formulas written here, on edge values (NaN, +-inf, +-0,
the largest finite value, tiny and huge magnitudes) and random ones."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import registry
from tests.ops.op_backends import BACKENDS, assert_all_close, run_everywhere

F = np.float64
SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875

# op -> (formula over float64 arrays, params variants, number of inputs)
FORMULAS: dict[str, tuple[Callable[..., Any], list[dict[str, Any]], int]] = {
    "hardsigmoid": (lambda x, alpha=0.2, beta=0.5: np.clip(alpha * x + beta, 0.0, 1.0),
                    [{}, {"alpha": 0.5, "beta": 0.25}], 1),
    "hardswish": (lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0), [{}], 1),
    "elu": (lambda x, alpha=1.0: np.where(x < 0, alpha * np.expm1(x), x), [{}, {"alpha": 0.5}], 1),
    "selu": (lambda x, alpha=SELU_ALPHA, gamma=SELU_GAMMA:
             gamma * np.where(x <= 0, alpha * np.expm1(x), x), [{}], 1),
    "softplus": (lambda x: np.logaddexp(0.0, x), [{}], 1),
    "prelu": (lambda x, slope: np.where(x < 0, slope * x, x), [{}], 2),
    "hypot": (lambda a, b: np.hypot(a, b), [{}], 2),
    "softsign": (lambda x: x / (1.0 + np.abs(x)), [{}], 1),
    "sin": (np.sin, [{}], 1), "cos": (np.cos, [{}], 1), "tan": (np.tan, [{}], 1),
    "asin": (np.arcsin, [{}], 1), "acos": (np.arccos, [{}], 1), "atan": (np.arctan, [{}], 1),
    "sinh": (np.sinh, [{}], 1), "cosh": (np.cosh, [{}], 1), "asinh": (np.arcsinh, [{}], 1),
    "acosh": (np.arccosh, [{}], 1), "atanh": (np.arctanh, [{}], 1),
    "erf": (np.vectorize(math.erf), [{}], 1),
    "pow": (np.power, [{}], 2),
}  # fmt: skip
# The functions added for ONNX run in f32 only, and only a few on emitted C and Vulkan (each
# such case costs a C build and a Vulkan run; every tree is printed the same way): the
# others' f64/f16 cases already cover the dtype handling every tree shares.
F32_ONLY = {"sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
            "atanh", "erf", "pow"}  # fmt: skip
SLOW_BACKENDS_FOR = {"sinh", "asinh", "atanh", "erf", "pow"}

DTYPES = (DType.F32, DType.F64, DType.F16)
EDGES = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1.0, -1.0, 0.5, -2.5, 3.0, -7.0, 1e-6, -1e-6,
         -20.0, -40.0, 20.0, 1e3, -1e3]  # fmt: skip


def _inputs(op: str, dtype: DType, arity: int) -> list[np.ndarray]:
    rng = np.random.default_rng(len(op))
    big = float(ml_dtypes.finfo(dtype.numpy).max)
    values = np.array([*EDGES, big, -big, *rng.normal(0.0, 4.0, 22)], F)
    with np.errstate(over="ignore"):
        x = values.astype(dtype.numpy).reshape(2, 3, 7)
    if arity == 1:
        return [x]
    if op == "prelu":  # one slope per channel (dim 1), ONNX's [C, 1]
        return [x, np.array([[0.25], [-1.5], [0.0]], F).astype(dtype.numpy)]
    other = np.roll(values, 11)
    other[:4] = [math.inf, math.nan, 0.0, -0.0]  # hypot(nan, inf) is inf; hypot(0, 0) is 0
    return [x, other.astype(dtype.numpy).reshape(2, 3, 7)]


def _tolerance(op: str, dtype: DType) -> tuple[float, float]:
    if dtype is DType.F64:
        return 1e-12, 1e-300
    if dtype is DType.F16:
        return 2.0**-10, 2.0**-24
    transcendental = op in ("elu", "selu", "softplus")
    return (1e-5 if transcendental else 2e-6), 1e-30


def _backends(opdef: registry.OpDef, dtype: DType, arity: int) -> tuple[str, ...]:
    """Every backend, except Vulkan for f64 calls that need exp/log in double (GLSL has none;
    `test_f64_math_has_no_vulkan_kernel` checks the reason)."""
    if opdef.name in F32_ONLY and opdef.name not in SLOW_BACKENDS_FOR:
        return tuple(b for b in BACKENDS if b not in ("vulkan", "c"))
    if "float64_math" in opdef.capabilities([dtype] * arity, {}):
        return tuple(b for b in BACKENDS if b != "vulkan")
    return BACKENDS


CASES = [(op, dtype, params) for op, (_, variants, _) in FORMULAS.items()
         for dtype in DTYPES for params in variants
         if op not in F32_ONLY or dtype is DType.F32]  # fmt: skip


@pytest.mark.parametrize(("op", "dtype", "params"), CASES,
                         ids=[f"{o}-{d.short}-{p}" for o, d, p in CASES])  # fmt: skip
def test_every_backend_matches_the_formula(
    op: str, dtype: DType, params: dict[str, Any], tmp_path: Path
) -> None:
    formula, _, arity = FORMULAS[op]
    opdef = registry.get(op)
    assert opdef is not None
    arrays = _inputs(op, dtype, arity)
    with np.errstate(all="ignore"):
        want = np.asarray(formula(*(a.astype(F) for a in arrays), **params)).astype(dtype.numpy)
    results = run_everywhere(op, arrays, [dtype] * arity, params, tmp_path,
                             _backends(opdef, dtype, arity))  # fmt: skip
    rtol, atol = _tolerance(op, dtype)
    assert_all_close(results, want, dtype, rtol, atol)


@pytest.mark.parametrize("op", ["elu", "selu", "softplus"])
def test_f64_math_has_no_vulkan_kernel(op: str) -> None:
    from openinfer_jax.vk.selection import select

    reason = select(op, [DType.F64], {}, {"shader_float64": True, "shader_int64": True})
    assert isinstance(reason, str) and "f64" in reason and "GLSL" in reason


def test_each_op_is_one_fused_kernel_in_c() -> None:
    """An activation is one loop over the elements, not a chain of op kernels."""
    from openinfer_jax.emit.analysis import OpInfo
    from openinfer_jax.emit.c_kernels import KernelRequest, render_kernel

    opdef = registry.get("hardswish")
    assert opdef is not None
    info = OpInfo(opdef, opdef.resolve_params({}), (DType.F32,), DType.F32, ((8,),), (8,))
    source = render_kernel(KernelRequest("k", info, "here"))
    assert source.count("for (i = 0; i < it.numel; i++)") == 2  # the flat and strided loops
    assert "oi_nan_clamp_float" in source


def test_prelu_slope_must_broadcast_to_x() -> None:
    opdef = registry.get("prelu")
    assert opdef is not None
    with pytest.raises(registry.OpCheckError, match=r"slope of shape \(2, 5\) does not broadcast"):
        opdef.infer([DType.F32] * 2, [(5,), (2, 5)], {})
