"""The narrow floats (f8e4m3fn, f8e4m3fnuz, f8e5m2fnuz, f8e8m0, f4e2m1) through `cast` on the
JAX lowering, the NumPy reference, the simulator's cpu and numpy devices and the emitted C,
against values written here from the formats' definitions (ONNX Cast's saturate tables, OCP
MX for e8m0); Vulkan refuses them by name (they run on the CPU there)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openinfer_jax.core.dtypes import NARROW_FLOATS, DType
from tests.ops.op_backends import run_everywhere

HOST = ("jax", "reference", "cpu", "numpy", "c")
NAN = math.nan
SOURCE = np.array([0.3, -1.75, 1e3, -1e9, math.inf, -math.inf, NAN, 0.0], np.float32)

# dtype -> (largest finite value, 1e3 saturated, 1e3 unsaturated, 0.3 rounded)
FORMATS = {
    DType.F8E4M3FN: (448.0, 448.0, NAN, 0.3125),
    DType.F8E4M3FNUZ: (240.0, 240.0, NAN, 0.3125),
    DType.F8E5M2FNUZ: (57344.0, 1024.0, 1024.0, 0.3125),  # 1e3 fits (rounded to 1024)
    DType.F4E2M1: (6.0, 6.0, 6.0, 0.5),  # no NaN or inf: conversion itself saturates
}


def _cast(x: np.ndarray, src: DType, dst: DType, tmp_path: Path, **params: Any) -> dict[str, Any]:
    return run_everywhere("cast", [x], [src], {"to": dst, **params}, tmp_path, HOST)


def _same(results: dict[str, Any], want: list[float]) -> None:
    for backend, got in results.items():
        values = np.asarray(got).astype(np.float64)
        assert np.array_equal(values, np.array(want), equal_nan=True), (backend, values, want)


@pytest.mark.parametrize("dst", list(FORMATS), ids=lambda d: d.short)
def test_saturating_cast_clamps_to_the_finite_range(dst: DType, tmp_path: Path) -> None:
    top, thousand, _, small = FORMATS[dst]
    nan = -0.0 if dst is DType.F4E2M1 else NAN  # f4e2m1 has no NaN (ml_dtypes gives -0)
    results = _cast(SOURCE, DType.F32, dst, tmp_path)
    _same(results, [small, -1.75 if dst is not DType.F4E2M1 else -2.0,
                    thousand, -top, top, -top, nan, 0.0])  # fmt: skip
    assert all(np.asarray(r).dtype == dst.numpy for r in results.values())


@pytest.mark.parametrize("dst", list(FORMATS), ids=lambda d: d.short)
def test_non_saturating_cast_overflows_to_nan(dst: DType, tmp_path: Path) -> None:
    _, _, thousand, small = FORMATS[dst]
    if dst is DType.F4E2M1:
        want = [small, -2.0, 6.0, -6.0, 6.0, -6.0, -0.0, 0.0]
    else:
        want = [small, -1.75, thousand, NAN, NAN, NAN, NAN, 0.0]
    _same(_cast(SOURCE, DType.F32, dst, tmp_path, saturate=False), want)


def test_e8m0_takes_the_exponent_rounded_as_asked(tmp_path: Path) -> None:
    x = np.array([1.0, 1.5, 3.0, 0.75, 2.0**127 * 1.5, math.inf, NAN], np.float32)
    up = [1.0, 2.0, 4.0, 1.0, 2.0**127, NAN, NAN]  # saturate: 2^127 does not round into NaN
    down = [1.0, 1.0, 2.0, 0.5, 2.0**127, NAN, NAN]
    nearest = [1.0, 2.0, 4.0, 1.0, 2.0**127, NAN, NAN]
    _same(_cast(x, DType.F32, DType.F8E8M0, tmp_path, rounding_mode="ceil"), up)
    _same(_cast(x, DType.F32, DType.F8E8M0, tmp_path, rounding_mode="trunc"), down)
    _same(_cast(x, DType.F32, DType.F8E8M0, tmp_path, rounding_mode="nearest"), nearest)
    over = _cast(x[4:5], DType.F32, DType.F8E8M0, tmp_path, rounding_mode="ceil", saturate=False)
    _same(over, [NAN])


@pytest.mark.parametrize("src", sorted(NARROW_FLOATS, key=lambda d: d.code), ids=lambda d: d.short)
def test_every_value_converts_back_exactly(src: DType, tmp_path: Path) -> None:
    codes = np.arange(16 if src is DType.F4E2M1 else 256, dtype=np.uint8)
    x = codes.view(src.numpy)
    _same(_cast(x, src, DType.F32, tmp_path), x.astype(np.float64).tolist())
    ints = _cast(x[np.isfinite(x.astype(np.float64))], src, DType.I32, tmp_path)
    want = np.trunc(x[np.isfinite(x.astype(np.float64))].astype(np.float64))
    _same(ints, np.clip(want, -(2**31), 2**31 - 1).tolist())


def test_integers_saturate_into_a_narrow_float(tmp_path: Path) -> None:
    x = np.array([3, -1000, 1000, 17], np.int32)
    _same(_cast(x, DType.I32, DType.F8E4M3FN, tmp_path), [3.0, -448.0, 448.0, 16.0])


def test_every_f32_bit_pattern_sample_rounds_like_the_reference(tmp_path: Path) -> None:
    # Random f32 bit patterns (all magnitudes, NaN, inf, subnormals) and the midpoints
    # between neighbouring narrow values (ties to even): the emitted C against the reference.
    rng = np.random.default_rng(7)
    pool = [rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    for dst in NARROW_FLOATS - {DType.F8E8M0}:
        values = np.arange(16 if dst is DType.F4E2M1 else 256, dtype=np.uint8).view(dst.numpy)
        finite = np.unique(values.astype(np.float64)[np.isfinite(values.astype(np.float64))])
        pool.append(((finite[1:] + finite[:-1]) / 2).astype(np.float32))
    x = np.concatenate(pool)
    for dst in sorted(NARROW_FLOATS, key=lambda d: d.code):
        rounding = ({"rounding_mode": "ceil"}, {"rounding_mode": "nearest"})  # e8m0's modes
        for params in ({}, {"saturate": False}, *(rounding if dst is DType.F8E8M0 else ())):
            got = run_everywhere(
                "cast", [x], [DType.F32], {"to": dst, **params}, tmp_path, ("reference", "c")
            )
            ref, c = (np.asarray(got[k]).astype(np.float64) for k in ("reference", "c"))
            assert np.array_equal(ref, c, equal_nan=True), (
                dst,
                params,
                x[~((ref == c) | (np.isnan(ref) & np.isnan(c)))][:5],
            )


def test_vulkan_selection_names_the_narrow_float() -> None:
    from openinfer_jax.vk.selection import select

    features = {"shader_float64": True, "shader_int64": True}
    reason = select("cast", [DType.F32], {"to": DType.F4E2M1}, features)
    assert reason == "no Vulkan kernel for f4e2m1 (narrow floats run on the CPU)"
    reason = select("cast", [DType.F8E5M2FNUZ], {"to": DType.F32}, features)
    assert isinstance(reason, str) and "f8e5m2fnuz" in reason
