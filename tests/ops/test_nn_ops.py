"""Model-building ops: JAX lowering vs the independent NumPy reference, every op x dtype.

Inputs are drawn with hypothesis (shapes, params, seeds; empty dims included). Data movement
is compared exactly, floats within the documented tolerance: f64 1e-12, f32 1e-5 relative,
f16/bf16/f8 one storage ulp (they compute in f32, the reference in f64). Set
`CONFORMANCE_EXAMPLES=N` to multiply the hypothesis draws by N/4 for a longer run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openinfer_jax.core.dtypes import DType, dtype_from_numpy
from openinfer_jax.core.errors import GraphValidationError
from openinfer_jax.ops import registry
from openinfer_jax.ops.nn import ANY_DTYPE

FLOATS = (DType.F8, DType.BF16, DType.F16, DType.F32, DType.F64)
INTS = (DType.I8, DType.I16, DType.I32, DType.I64, DType.U8, DType.U16, DType.U32, DType.U64)
ALL_DTYPES = tuple(sorted(ANY_DTYPE, key=lambda d: d.code))

# (rtol, atol) per float dtype: one storage ulp for the narrow types, plus f32 compute noise.
TOLERANCE = {
    DType.F64: (1e-12, 1e-12),
    DType.F32: (1e-5, 1e-6),
    DType.F16: (2.0**-10, 2e-5),
    DType.BF16: (2.0**-7, 2e-5),
    DType.F8: (2.0**-2, 2e-5),
}

# Scale of the example counts below; 4 is the default shared with tests/ops/test_conformance.py.
SCALE = max(1, int(os.environ.get("CONFORMANCE_EXAMPLES", "4"))) / 4


def examples(count: int) -> int:
    """`count` hypothesis examples, scaled by CONFORMANCE_EXAMPLES."""
    return max(1, round(count * SCALE))


SETTINGS = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Case = tuple[list[np.ndarray], dict[str, Any], list[DType]]


def sample(
    dtype: DType, shape: tuple[int, ...], rng: np.random.Generator, *, positive: bool = False
) -> np.ndarray:
    """Random values covering `dtype`'s range, in the in-memory representation."""
    if dtype.is_float:
        values = rng.standard_normal(shape) * 2.0
        return (np.abs(values) + 0.05 if positive else values).astype(dtype.numpy)
    if dtype is DType.BOOL:
        return rng.random(shape) < 0.5
    if dtype is DType.T1:
        return rng.choice(np.array([-1, 1], np.int8), size=shape)
    lo, hi = dtype.value_range()
    return rng.integers(lo, hi, size=shape, endpoint=True, dtype=dtype.numpy)


def assert_matches(
    actual: Any, expected: np.ndarray, dtype: DType, atol_scale: float = 1.0
) -> None:
    """Exact for non-floats; within TOLERANCE (atol times `atol_scale`) for floats."""
    got = np.asarray(actual)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    if not dtype.is_float:
        np.testing.assert_array_equal(got, expected)
        return
    rtol, atol = TOLERANCE[dtype]
    np.testing.assert_allclose(
        got.astype(np.float64),
        expected.astype(np.float64),
        rtol=rtol,
        atol=atol * atol_scale,
        equal_nan=True,
    )


def run_both(
    name: str, arrays: list[np.ndarray], params: dict[str, Any], dtypes: list[DType]
) -> tuple[Any, np.ndarray]:
    """Lower (jitted) and reference one call; check `infer` agrees with the result's dtype and shape."""
    op = registry.get(name)
    assert op is not None, f"{name} is not registered"
    out_dtype, out_shape = op.infer(dtypes, [a.shape for a in arrays], params)
    # Under jit, as the simulator runs it: one compile per case instead of one per primitive.
    got = jax.jit(lambda *xs: op.lower_jax(*xs, dtypes=dtypes, **params))(*arrays)
    want = op.reference(*arrays, dtypes=dtypes, **params)
    assert tuple(want.shape) == out_shape
    assert want.dtype == out_dtype.numpy
    return got, want


def shapes(
    draw: Any, min_rank: int = 0, max_rank: int = 3, max_side: int = 5, min_side: int = 0
) -> tuple[int, ...]:
    """A small shape; sides may be 0 unless `min_side` says otherwise."""
    rank = draw(st.integers(min_rank, max_rank))
    return tuple(draw(st.integers(min_side, max_side)) for _ in range(rank))


def rng_of(draw: Any) -> np.random.Generator:
    """A NumPy generator seeded by hypothesis (so failures shrink and replay)."""
    return np.random.default_rng(draw(st.integers(0, 2**32 - 1)))


# ---- float ops: case builders ---------------------------------------------------------------------


def unary_case(name: str, positive: bool = False, **params: Any) -> Callable[[Any, DType], Case]:
    """Elementwise op on any shape (scalars and empty arrays included)."""

    def build(draw: Any, dtype: DType) -> Case:
        x = sample(dtype, shapes(draw), rng_of(draw), positive=positive)
        return [x], dict(params), [dtype]

    build.__name__ = name
    return build


def softmax_case(draw: Any, dtype: DType) -> Case:
    shape = shapes(draw, min_rank=1)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return [sample(dtype, shape, rng_of(draw))], {"axis": axis}, [dtype]


def norm_case(max_affine: int, epsilon: float) -> Callable[[Any, DType], Case]:
    """layer_norm (up to scale and bias) or rms_norm (up to scale) over a drawn trailing axis."""

    def build(draw: Any, dtype: DType) -> Case:
        shape = shapes(draw, min_rank=1, min_side=1, max_side=6)
        axis = draw(st.integers(-len(shape), len(shape) - 1))
        rng = rng_of(draw)
        normalized = shape[axis % len(shape) :]
        arrays = [sample(dtype, shape, rng)]
        for _ in range(draw(st.integers(0, max_affine))):
            # A suffix of the normalized dims is enough: it broadcasts.
            arrays.append(sample(dtype, normalized[draw(st.integers(0, len(normalized))) :], rng))
        return arrays, {"axis": axis, "epsilon": epsilon}, [dtype] * len(arrays)

    return build


def batch_norm_case(draw: Any, dtype: DType) -> Case:
    shape = shapes(draw, min_rank=2, max_rank=4, min_side=1)
    rng = rng_of(draw)
    c = (shape[1],)
    arrays = [sample(dtype, shape, rng), sample(dtype, c, rng), sample(dtype, c, rng), sample(dtype, c, rng),
              sample(dtype, c, rng, positive=True)]  # fmt: skip
    return arrays, {"epsilon": 1e-3}, [dtype] * 5


def rope_case(draw: Any, dtype: DType) -> Case:
    lead = shapes(draw, max_rank=2, min_side=1, max_side=3)
    seq, half = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    rng = rng_of(draw)
    x = sample(dtype, (*lead, seq, 2 * half), rng)
    pos_dtype = draw(st.sampled_from((DType.I32, DType.I64, DType.U16)))
    if draw(st.booleans()):
        positions = np.asarray(draw(st.integers(0, 300)), dtype=pos_dtype.numpy)
    else:
        positions = rng.integers(0, 300, size=(seq,)).astype(pos_dtype.numpy)
    params = {
        "theta": draw(st.sampled_from((10000.0, 100000.0, 500.0))),
        "rotary_dim": 2 * draw(st.integers(0, half)),
        "interleaved": draw(st.booleans()),
    }
    return [x, positions], params, [dtype, pos_dtype]


def attention_case(draw: Any, dtype: DType) -> Case:
    batch = shapes(draw, max_rank=1, min_side=1, max_side=2)
    hkv, group = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    sq, skv = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    d, dv = draw(st.integers(1, 8)), draw(st.integers(1, 5))
    rng = rng_of(draw)
    arrays = [sample(dtype, (*batch, hkv * group, sq, d), rng), sample(dtype, (*batch, hkv, skv, d), rng),
              sample(dtype, (*batch, hkv, skv, dv), rng)]  # fmt: skip
    dtypes = [dtype] * 3
    mask_kind = draw(st.sampled_from(("none", "bool", "float")))
    if mask_kind != "none":
        mask_shape = draw(st.sampled_from(((sq, skv), (1, sq, skv), (hkv * group, 1, skv))))
        mask = (
            sample(DType.BOOL, mask_shape, rng)
            if mask_kind == "bool"
            else sample(dtype, mask_shape, rng)
        )
        arrays.append(mask)
        dtypes.append(DType.BOOL if mask_kind == "bool" else dtype)
    params: dict[str, Any] = {"causal": draw(st.booleans())}
    scale = draw(st.sampled_from((None, 0.5, 0.125)))
    if scale is not None:
        params["scale"] = scale
    return arrays, params, dtypes


def linear_case(draw: Any, dtype: DType) -> Case:
    lead = shapes(draw, max_rank=2, max_side=4)
    n_in, n_out = draw(st.integers(1, 9)), draw(st.integers(1, 7))
    rng = rng_of(draw)
    arrays = [sample(dtype, (*lead, n_in), rng), sample(dtype, (n_out, n_in), rng)]
    if draw(st.booleans()):
        arrays.append(sample(dtype, (n_out,), rng))
    return arrays, {}, [dtype] * len(arrays)


def window(
    draw: Any, spatial: int, max_pad_below_span: bool
) -> tuple[list[int], dict[str, Any], list[int]]:
    """Kernel, window params and input sides that give a non-empty output."""
    kernel = [draw(st.integers(1, 3)) for _ in range(spatial)]
    strides = [draw(st.integers(1, 2)) for _ in range(spatial)]
    dilations = [draw(st.integers(1, 2)) for _ in range(spatial)]
    spans = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
    limit = [s - 1 if max_pad_below_span else 2 for s in spans]
    pads = [draw(st.integers(0, min(limit[i % spatial], 2))) for i in range(2 * spatial)]
    sides = [
        max(1, spans[i] - pads[i] - pads[i + spatial]) + draw(st.integers(0, 3))
        for i in range(spatial)
    ]
    return (
        kernel,
        {"strides": tuple(strides), "pads": tuple(pads), "dilations": tuple(dilations)},
        sides,
    )


def conv_case(spatial: int) -> Callable[[Any, DType], Case]:
    def build(draw: Any, dtype: DType) -> Case:
        groups, cg, mg, n = (draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 2)),
                             draw(st.integers(1, 2)))  # fmt: skip
        kernel, params, sides = window(draw, spatial, max_pad_below_span=False)
        rng = rng_of(draw)
        arrays = [
            sample(dtype, (n, groups * cg, *sides), rng),
            sample(dtype, (groups * mg, cg, *kernel), rng),
        ]
        if draw(st.booleans()):
            arrays.append(sample(dtype, (groups * mg,), rng))
        params["groups"] = groups
        return arrays, params, [dtype] * len(arrays)

    return build


def has_padding_only_window(kernel: list[int], params: dict[str, Any], sides: list[int]) -> bool:
    """True if some pooling window would cover padding only (an error for the pool ops)."""
    n = len(kernel)
    strides, pads, dilations = params["strides"], params["pads"], params["dilations"]
    for i in range(n):
        padded = sides[i] + pads[i] + pads[i + n]
        count = (padded - dilations[i] * (kernel[i] - 1) - 1) // strides[i] + 1
        for o in range(count):
            taps = [o * strides[i] + k * dilations[i] for k in range(kernel[i])]
            if not any(pads[i] <= t < pads[i] + sides[i] for t in taps):
                return True
    return False


def pool_case(kind: str) -> Callable[[Any, DType], Case]:
    def build(draw: Any, dtype: DType) -> Case:
        spatial = draw(st.integers(1, 2))
        kernel, params, sides = window(draw, spatial, max_pad_below_span=True)
        params["kernel_shape"] = tuple(kernel)
        if has_padding_only_window(kernel, params, sides):
            params["pads"] = (0,) * (2 * spatial)
            spans = [d * (k - 1) + 1 for k, d in zip(kernel, params["dilations"])]
            sides = [max(side, span) for side, span in zip(sides, spans)]
        if kind == "avg":
            params["count_include_pad"] = draw(st.booleans())
        x = sample(dtype, (draw(st.integers(1, 2)), draw(st.integers(1, 3)), *sides), rng_of(draw))
        return [x], params, [dtype]

    return build


def global_pool_case(draw: Any, dtype: DType) -> Case:
    return (
        [sample(dtype, shapes(draw, min_rank=3, max_rank=4, min_side=1), rng_of(draw))],
        {},
        [dtype],
    )


# name -> (builder, dtypes, atol scale for sums of many products)
FLOAT_CASES: dict[str, tuple[str, Callable[[Any, DType], Case], tuple[DType, ...], float]] = {
    "exp": ("exp", unary_case("exp"), FLOATS, 1.0),
    "log": ("log", unary_case("log", positive=True), FLOATS, 1.0),
    "sqrt": ("sqrt", unary_case("sqrt", positive=True), FLOATS, 1.0),
    "rsqrt": ("rsqrt", unary_case("rsqrt", positive=True), FLOATS, 1.0),
    "tanh": ("tanh", unary_case("tanh"), FLOATS, 1.0),
    "sigmoid": ("sigmoid", unary_case("sigmoid"), FLOATS, 1.0),
    "silu": ("silu", unary_case("silu"), FLOATS, 1.0),
    "gelu": ("gelu", unary_case("gelu"), FLOATS, 1.0),
    "gelu_tanh": ("gelu", unary_case("gelu", approximate="tanh"), FLOATS, 1.0),
    "softmax": ("softmax", softmax_case, FLOATS, 1.0),
    "log_softmax": ("log_softmax", softmax_case, FLOATS, 1.0),
    "layer_norm": ("layer_norm", norm_case(2, 1e-5), FLOATS, 4.0),
    "rms_norm": ("rms_norm", norm_case(1, 1e-6), FLOATS, 4.0),
    "batch_norm": ("batch_norm", batch_norm_case, FLOATS, 10.0),
    "rope": ("rope", rope_case, FLOATS, 4.0),
    "attention": ("attention", attention_case, FLOATS, 10.0),
    "linear": ("linear", linear_case, FLOATS, 20.0),
    "conv1d": ("conv1d", conv_case(1), FLOATS, 20.0),
    "conv2d": ("conv2d", conv_case(2), FLOATS, 40.0),
    "max_pool": ("max_pool", pool_case("max"), FLOATS + INTS, 1.0),
    "avg_pool": ("avg_pool", pool_case("avg"), FLOATS, 4.0),
    "global_average_pool": ("global_average_pool", global_pool_case, FLOATS, 4.0),
}

FLOAT_PARAMS = [
    pytest.param(key, dtype, id=f"{key}-{dtype.short}")
    for key, (_, _, dtypes, _) in FLOAT_CASES.items()
    for dtype in dtypes
    if dtype is not DType.F32
]


def check_compute_case(key: str, dtype: DType, data: st.DataObject) -> None:
    """Draw one case of `key` for `dtype` and compare lowering and reference."""
    name, build, _, atol_scale = FLOAT_CASES[key]
    arrays, params, dtypes = build(data.draw, dtype)
    got, want = run_both(name, arrays, params, dtypes)
    assert_matches(got, want, dtype, atol_scale)


@pytest.mark.parametrize("key", sorted(FLOAT_CASES))
@settings(SETTINGS, max_examples=examples(10))
@given(data=st.data())
def test_compute_op_matches_reference_f32(key: str, data: st.DataObject) -> None:
    check_compute_case(key, DType.F32, data)


@pytest.mark.parametrize(("key", "dtype"), FLOAT_PARAMS)
@settings(SETTINGS, max_examples=examples(2))
@given(data=st.data())
def test_compute_op_matches_reference_other_dtypes(
    key: str, dtype: DType, data: st.DataObject
) -> None:
    check_compute_case(key, dtype, data)


# ---- data movement: every dtype, exact ----------------------------------------------------------------


def gather_case(draw: Any, dtype: DType) -> Case:
    shape = shapes(draw, min_rank=1, min_side=1)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    size = shape[axis % len(shape)]
    rng = rng_of(draw)
    index_dtype = draw(st.sampled_from((DType.I8, DType.I32, DType.I64, DType.U8, DType.U64)))
    lo, hi = (-size - 2, size + 2) if index_dtype.is_signed_int else (0, size + 2)
    indices = rng.integers(lo, hi, size=shapes(draw, max_rank=2), endpoint=True).astype(
        index_dtype.numpy
    )
    return [sample(dtype, shape, rng), indices], {"axis": axis}, [dtype, index_dtype]


def embedding_case(draw: Any, dtype: DType) -> Case:
    arrays, _, dtypes = gather_case(draw, dtype)
    table = arrays[0].reshape(arrays[0].shape[0], -1) if arrays[0].ndim else arrays[0]
    return [table, arrays[1]], {}, dtypes


def reshape_case(draw: Any, dtype: DType) -> Case:
    shape = shapes(draw, min_rank=1, min_side=1)
    numel = int(np.prod(shape))
    dims = [d for d in range(1, numel + 1) if numel % d == 0]
    first = draw(st.sampled_from(dims))
    target: list[int] = [first, -1] if draw(st.booleans()) else [first, numel // first]
    if draw(st.booleans()) and shape[0] == first:
        target[0] = 0  # ONNX: copy the input's dim
    return [sample(dtype, shape, rng_of(draw))], {"shape": tuple(target)}, [dtype]


def transpose_case(draw: Any, dtype: DType) -> Case:
    shape = shapes(draw)
    perm = tuple(draw(st.permutations(range(len(shape))))) if draw(st.booleans()) else ()
    return [sample(dtype, shape, rng_of(draw))], {"perm": perm}, [dtype]


def concat_case(draw: Any, dtype: DType) -> Case:
    shape = shapes(draw, min_rank=1)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    rng = rng_of(draw)
    arrays = []
    for _ in range(draw(st.integers(1, 3))):
        part = list(shape)
        part[axis] = draw(st.integers(0, 3))
        arrays.append(sample(dtype, tuple(part), rng))
    return arrays, {"axis": axis}, [dtype] * len(arrays)


def slice_case(draw: Any, dtype: DType) -> Case:
    shape = shapes(draw, min_rank=1, max_side=6)
    axes = draw(st.permutations(range(len(shape))))[: draw(st.integers(1, len(shape)))]
    bound = st.integers(-9, 9) | st.sampled_from((2**62, -(2**62)))
    starts = tuple(draw(bound) for _ in axes)
    ends = tuple(draw(bound) for _ in axes)
    steps = tuple(draw(st.sampled_from((1, 2, 3, -1, -2))) for _ in axes)
    negative_axes = tuple(a - len(shape) if draw(st.booleans()) else a for a in axes)
    params = {"starts": starts, "ends": ends, "axes": negative_axes, "steps": steps}
    return [sample(dtype, shape, rng_of(draw))], params, [dtype]


def pad_case(draw: Any, dtype: DType) -> Case:
    shape = shapes(draw, min_rank=1, min_side=1, max_side=4)
    mode = draw(st.sampled_from(("constant", "reflect", "edge", "wrap")))
    # reflect and wrap repeat periodically, so pads may exceed the axis length
    pads = [draw(st.integers(0, 2 * shape[i % len(shape)] + 1)) for i in range(2 * len(shape))]
    if dtype.is_float:
        value: float | int | bool = draw(st.sampled_from((0.0, -1.5, float("inf"))))
    elif dtype is DType.BOOL:
        value = draw(st.booleans())
    else:
        lo, hi = dtype.value_range()
        value = draw(st.sampled_from((lo, hi) if dtype is not DType.T1 else (-1, 1)))
    params = {"pads": tuple(pads), "mode": mode, "value": value}
    return [sample(dtype, shape, rng_of(draw))], params, [dtype]


def where_case(draw: Any, dtype: DType) -> Case:
    full = shapes(draw, min_rank=1)
    rng = rng_of(draw)

    def part() -> tuple[int, ...]:
        suffix = full[draw(st.integers(0, len(full))) :]
        return tuple(d if draw(st.booleans()) else 1 for d in suffix)

    arrays = [
        sample(DType.BOOL, part(), rng),
        sample(dtype, part(), rng),
        sample(dtype, part(), rng),
    ]
    return arrays, {}, [DType.BOOL, dtype, dtype]


MOVEMENT_CASES: dict[str, Callable[[Any, DType], Case]] = {
    "gather": gather_case,
    "embedding": embedding_case,
    "reshape": reshape_case,
    "transpose": transpose_case,
    "permute": transpose_case,
    "concat": concat_case,
    "slice": slice_case,
    "pad": pad_case,
    "where": where_case,
}


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.short)
@pytest.mark.parametrize("name", sorted(MOVEMENT_CASES))
@settings(SETTINGS, max_examples=examples(2))
@given(data=st.data())
def test_movement_op_is_exact_for_every_dtype(name: str, dtype: DType, data: st.DataObject) -> None:
    arrays, params, dtypes = MOVEMENT_CASES[name](data.draw, dtype)
    got, want = run_both(name, arrays, params, dtypes)
    np.testing.assert_array_equal(np.asarray(got), want)
    assert np.asarray(got).dtype == want.dtype


@pytest.mark.parametrize("name", sorted(MOVEMENT_CASES))
@settings(SETTINGS, max_examples=examples(15))
@given(data=st.data())
def test_movement_op_shapes_f32(name: str, data: st.DataObject) -> None:
    """More shapes and params for one dtype: clamping, negative steps, empty dims."""
    arrays, params, dtypes = MOVEMENT_CASES[name](data.draw, DType.F32)
    got, want = run_both(name, arrays, params, dtypes)
    np.testing.assert_array_equal(np.asarray(got), want)


# ---- eagerly ---------------------------------------------------------------------------------------


def _eager_cases() -> list[Any]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    return [
        pytest.param("softmax", [x], {"axis": 1}, id="softmax"),
        pytest.param("layer_norm", [x, x[0, 0, 0], x[1, 1, 1]], {}, id="layer_norm"),
        pytest.param("gather", [x, np.array([[1, -1]], np.int32)], {"axis": 2}, id="gather"),
        pytest.param(
            "slice", [x], {"starts": (3,), "ends": (-9,), "axes": (2,), "steps": (-2,)}, id="slice"
        ),
        pytest.param(
            "pad", [x], {"pads": (1, 0, 2, 1), "mode": "reflect", "axes": (1, 3)}, id="pad"
        ),
        pytest.param("rope", [x, np.int64(5)], {"theta": 1e5}, id="rope"),
        pytest.param("attention", [x, x[:, :1], x[:, :1]], {"causal": True}, id="attention"),
        pytest.param(
            "conv2d", [x, x[:2, :, :2, :2]], {"pads": (1, 1, 0, 0), "strides": (2, 1)}, id="conv2d"
        ),
        pytest.param(
            "avg_pool", [x], {"kernel_shape": (2, 3), "pads": (1, 1, 1, 1)}, id="avg_pool"
        ),
    ]


@pytest.mark.parametrize(("name", "arrays", "params"), _eager_cases())
def test_lowering_runs_eagerly(name: str, arrays: list[np.ndarray], params: dict[str, Any]) -> None:
    """Outside jit too (dtypes read from the arrays, no `dtypes=` given)."""
    op = registry.get(name)
    assert op is not None
    dtypes = [dtype_from_numpy(a.dtype) for a in arrays]
    assert_matches(op.lower_jax(*arrays, **params), op.reference(*arrays, **params), dtypes[0])


def test_every_nn_op_is_covered() -> None:
    """Each op declared in nn.py has a case above, so none goes untested."""
    from openinfer_jax.ops.nn import NN_OPS

    covered = {name for name, *_ in FLOAT_CASES.values()} | set(MOVEMENT_CASES)
    assert {row.name for row in NN_OPS} == covered


def test_errors_are_graph_validation_errors() -> None:
    op = registry.get("softmax")
    assert op is not None
    with pytest.raises(GraphValidationError):
        op.infer([DType.I32], [(3,)], {})
