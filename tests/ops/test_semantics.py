"""The documented integer, rounding and special-value semantics, checked against values
written out by hand (docs/ops.md), on both the JAX lowering and the NumPy reference."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import registry

I4, I8, U8, U4, F32, I64 = DType.I4, DType.I8, DType.U8, DType.U4, DType.F32, DType.I64


def both(name: str, inputs: list[Any], dtype: DType, **params: Any) -> list[np.ndarray]:
    """Results of the JAX lowering and the reference for `inputs` of one dtype."""
    opdef = registry.get(name)
    assert opdef is not None
    arrays = [np.asarray(x, dtype=dtype.numpy) for x in inputs]
    dtypes = [dtype] * len(arrays)
    return [
        np.asarray(opdef.lower_jax(*arrays, dtypes=dtypes, **params)),
        opdef.reference(*arrays, dtypes=dtypes, **params),
    ]


# (op, inputs, dtype, params, expected)
EXAMPLES = [
    ("add", [[7, -8], [1, -1]], I4, {}, [-8, 7]),  # i4 wraps modulo 16
    ("add", [[15], [1]], U4, {}, [0]),
    ("mul", [[True, True], [False, True]], DType.BOOL, {}, [False, True]),
    ("add", [[True, False], [True, False]], DType.BOOL, {}, [True, False]),
    ("abs", [[-128, -5]], I8, {}, [-128, 5]),  # abs(int_min) wraps
    ("neg", [[-8, 3]], I4, {}, [-8, -3]),
    ("div", [[7, -7, -128, 5], [2, 2, -1, 0]], I8, {}, [3, -3, -128, 0]),  # truncates; /0 -> 0
    ("div", [[5], [0]], I8, {"div_by_zero_mask": -1}, [-1]),
    ("floor_div", [[7, -7, 5], [2, 2, 0]], I8, {}, [3, -4, 0]),
    ("rem", [[7, -7, 7, -128, 3], [2, 2, -2, -1, 0]], I8, {}, [1, -1, 1, 0, 0]),
    ("shl", [[1, 3]], I4, {"bits": 2}, [4, -4]),
    ("shl", [[1]], I8, {"bits": 8}, [0]),
    ("shr", [[-128, 64]], I8, {"bits": 9}, [-1, 0]),  # arithmetic, saturating at width
    ("shr", [[255]], U8, {"bits": 4}, [15]),
    ("popcount", [[-1, 5]], I4, {}, [4, 2]),
    ("not", [[0, 5]], U4, {}, [15, 10]),
    ("cast", [[300.7, -300.7, math.nan, math.inf]], F32, {"to": I8}, [127, -128, 0, 127]),
    ("cast", [[300.7, -1.0, math.inf]], F32, {"to": U8, "saturate": False}, [44, 255, 0]),
    ("cast", [[2.5, 3.5, -2.5]], F32, {"to": I8, "rounding_mode": "nearest"}, [2, 4, -2]),
    ("cast", [[2.5, -2.5]], F32, {"to": I8, "rounding_mode": "floor"}, [2, -3]),
    ("cast", [[2.1, -2.1]], F32, {"to": I8, "rounding_mode": "ceil"}, [3, -2]),
    ("cast", [[200, -1]], DType.I16, {"to": I4}, [7, -1]),
    ("cast", [[200, -1]], DType.I16, {"to": I4, "saturate": False}, [-8, -1]),
    ("cast", [[-5, 300]], DType.I16, {"to": U8}, [0, 255]),
    ("round", [[2.5, -2.5, 0.49999997, -0.4]], F32, {}, [3.0, -3.0, 0.0, -0.0]),
    ("sign", [[-2.0, 0.0, math.nan, 7.0]], F32, {}, [-1, 0, 0, 1]),
    ("is_neg", [[-0.0, -1.0, math.nan]], F32, {}, [False, True, False]),
    ("relu", [[-4, 5]], I8, {"negative_slope": 0.5, "clamp_max": 4.5}, [-2, 4]),
    ("relu", [[-2.0, 8.0]], F32, {"alpha": 0.5, "clamp_max": 6.0}, [-1.0, 6.0]),
    ("clamp", [[-8, 7, 0]], I4, {"min": -2.5, "max": 3.5}, [-2, 3, 0]),
    # Bounds outside the type's range are limited to it on both sides (u8 max=-3 -> 0).
    ("clamp", [[1, 200, 255]], U8, {"min": 0, "max": -3}, [0, 0, 0]),
    ("clamp", [[1, 200]], U8, {"min": 300, "max": 400}, [255, 255]),
    ("clamp", [[-8, 7]], I4, {"min": -20, "max": -12}, [-8, -8]),
    ("relu", [[-4, 5]], I8, {"clamp_max": -200.0}, [-128, -128]),
    ("mean_axis", [[-7, 0]], I8, {}, -3),  # truncates toward zero
    ("sum_axis", [[100, 100]], I8, {}, -56),
    ("sum_axis", [[100, 100]], I8, {"acc": (DType.I32, DType.I32)}, 200),
    ("argmax_axis", [[1, 3, 3]], I8, {}, 1),
    ("argmax_axis", [[1, 3, 3]], I8, {"select_first": False}, 2),
    ("argmin_axis", [[1.0, math.nan, 0.0]], F32, {}, 1),  # NaN wins
    ("recip", [[0.0, 2.0]], F32, {}, [math.nan, 0.5]),
    ("div", [[1.0], [-0.0]], F32, {}, [math.nan]),
    ("fill", [[1, 2]], I4, {"value": -8}, [-8, -8]),
    ("filter", [[1, 0], [5, 5], [9, 9]], I8, {}, [5, 9]),
]  # fmt: skip


@pytest.mark.parametrize("name, inputs, dtype, params, expected", EXAMPLES, ids=[f"{e[0]}-{i}" for i, e in enumerate(EXAMPLES)])
def test_documented_examples(name: str, inputs: list[Any], dtype: DType, params: dict, expected: Any) -> None:
    for result in both(name, inputs, dtype, **params):
        want = np.asarray(expected, dtype=np.float64)
        got = result.astype(np.float64)
        assert np.array_equal(got, want, equal_nan=True), (name, got, want)
        if np.issubdtype(result.dtype, np.floating):
            assert np.array_equal(np.signbit(got), np.signbit(want)), (name, got, want)


@settings(max_examples=30, deadline=None, database=None)
@given(bits=st.sampled_from([1, 2, 4]), a=st.lists(st.integers(-128, 127), min_size=4, max_size=4),
       b=st.lists(st.integers(-128, 127), min_size=4, max_size=4))  # fmt: skip
def test_packed_signed_add_and_mul_wrap_modulo_two_to_the_bits(bits: int, a: list[int], b: list[int]) -> None:
    dtype = {1: DType.I1, 2: DType.I2, 4: DType.I4}[bits]
    low, high = dtype.value_range()
    a = [low + (v - low) % (high - low + 1) for v in a]
    b = [low + (v - low) % (high - low + 1) for v in b]
    half, span = 1 << (bits - 1), 1 << bits
    for name, exact in (("add", lambda x, y: x + y), ("mul", lambda x, y: x * y)):
        want = [((exact(x, y) + half) % span) - half for x, y in zip(a, b)]
        for result in both(name, [a, b], dtype):
            assert result.tolist() == want


def test_packed_results_stay_packed_in_storage_representation() -> None:
    for result in both("add", [[7, 7], [7, -8]], I4):
        assert result.dtype == np.int8
    for result in both("add", [[15], [15]], U4):
        assert result.dtype == np.uint8 and result.tolist() == [14]


def test_i64_and_u64_are_exact() -> None:
    big = 2**62 + 1
    for result in both("add", [[big], [big]], I64):
        assert result.tolist() == [-(2**63) + 2]
    for result in both("mul", [[2**32 + 1], [2**32 + 1]], DType.U64):
        assert result.tolist() == [(2**64 + 2**33 + 1) % 2**64]


_dims = st.lists(st.integers(1, 3), min_size=0, max_size=3)


@settings(max_examples=12, deadline=None, database=None, derandomize=True)
@given(shape=_dims, drop=st.integers(0, 3), ones=st.lists(st.booleans(), min_size=3, max_size=3),
       name=st.sampled_from(["add", "sub", "mul", "div", "floor_div", "rem"]),
       dtype=st.sampled_from([DType.I4, DType.U8, DType.I64, DType.F32]), data=st.data())  # fmt: skip
def test_broadcasting_lowering_matches_reference_for_random_shapes(
    shape: list[int], drop: int, ones: list[bool], name: str, dtype: DType, data: st.DataObject
) -> None:
    opdef = registry.get(name)
    assert opdef is not None
    if dtype not in opdef.dtypes:
        return
    other = [1 if ones[i] else d for i, d in enumerate(shape)][drop:]
    low, high = dtype.value_range() if dtype.is_int else (-100, 100)
    values = st.integers(low, high)
    arrays = [
        np.asarray(data.draw(st.lists(values, min_size=int(np.prod(s)), max_size=int(np.prod(s)))), dtype=dtype.numpy).reshape(s)
        for s in (tuple(shape), tuple(other))
    ]  # fmt: skip
    got = np.asarray(opdef.lower_jax(*arrays, dtypes=[dtype, dtype]))
    want = opdef.reference(*arrays, dtypes=[dtype, dtype])
    assert got.shape == want.shape == np.broadcast_shapes(arrays[0].shape, arrays[1].shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6, equal_nan=True)



_FMA_UNDER_JIT = """
import json, jax, numpy as np
from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import registry
opdef = registry.get("fma")
a = np.array([1.79e308, 1e308, 3.0, 2.0])
b = np.array([1.79e308, 10.0, 1.0 / 3.0, 0.5])
c = np.array([-np.inf, -1e308, -1.0, np.nan])
with jax.enable_x64(True):
    got = jax.jit(lambda *x: opdef.lower_jax(*x, dtypes=[DType.F64] * 3))(a, b, c)
print(json.dumps(np.asarray(got).tolist()))
"""


def test_f64_fma_rounds_the_product_first_under_jit() -> None:
    """XLA contracts a multiply feeding an add into one fused multiply-add under jit (on
    targets with FMA, at its default optimization level, which the suite lowers: hence a
    process of its own): the lowering must still round the f64 product first, as the
    reference, C and Vulkan do."""
    import json
    import os
    import subprocess
    import sys

    flags = os.environ.get("XLA_FLAGS", "").replace("--xla_backend_optimization_level=0", "")
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", _FMA_UNDER_JIT], env=env, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    # the rounded products: inf - inf, inf - 1e308, 1.0 - 1.0, and a NaN addend
    got = json.loads(out.strip().splitlines()[-1])
    np.testing.assert_array_equal(got, [np.nan, np.inf, 0.0, np.nan])
