"""Parity of every Vulkan kernel with the op registry's NumPy reference.

One case per op x dtype x variant (broadcast, in-place, acc rules, params): see
vk_cases.py. Integers, bool and packed types must match exactly; floats within the
documented tolerance, with NaN in the same places.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import registry
from openinfer_jax.vk import VulkanBackend
from openinfer_jax.vk.kernels import MATMUL_TILES
from tests.vk.vk_cases import (
    FALLBACKS,
    NN_FALLBACKS,
    Case,
    all_cases,
    as_float64,
    make_inputs,
    tolerance,
)

pytestmark = pytest.mark.vulkan

CASES = all_cases()


# Ops whose kernel source depends on the backend's matmul tile config (or attention split).
_TILED = ("matmul", "linear", "conv1d", "conv2d", "attention")


@pytest.fixture(scope="module")
def compiled(backend: VulkanBackend) -> VulkanBackend:
    """The backend with every case's kernel compiled in one glslc run (much faster).

    The tiled kernels are compiled for both named tile configs, and attention with and
    without the key-range split, so a SPIR-V cache built by this run on lavapipe ("small",
    no split) also serves a GPU ("large", split) that has no glslc.
    """
    backend.precompile([(c.op, c.dtypes, c.shapes, c.params) for c in CASES])
    own = backend.matmul_tiles, backend.split_attention
    try:
        backend.split_attention = not own[1]
        for tiles in MATMUL_TILES:
            backend.matmul_tiles = tiles
            backend.precompile([(c.op, c.dtypes, c.shapes, c.params) for c in CASES
                                if c.op in _TILED])  # fmt: skip
    finally:
        backend.matmul_tiles, backend.split_attention = own
    return backend


def _reduce_len(case: Case) -> int:
    """How many terms each output element sums (scales the float tolerance)."""
    shapes = case.shapes
    if case.op in ("matmul", "linear"):
        return shapes[0][-1]
    if case.op.endswith("_axis"):
        return int(np.prod(shapes[0]))
    if case.op in ("conv1d", "conv2d"):
        return int(np.prod(shapes[1][1:]))
    if case.op == "attention":
        return shapes[1][-2] * shapes[0][-1]
    if case.op == "avg_pool":
        return int(np.prod(case.params["kernel_shape"]))
    if case.op == "global_average_pool":
        return int(np.prod(shapes[0][2:]))
    return 1


# Ops whose results sum or rotate several inputs: f32 errors are relative to the magnitude of
# the row (cancellation can leave a result near zero), so atol scales with the largest one.
_MAGNITUDE_SCALED = frozenset({"matmul", "linear", "conv1d", "conv2d", "attention", "rope",
                               "batch_norm"})  # fmt: skip


def check_case(backend: VulkanBackend, case: Case) -> None:
    """Run `case` on the device and compare with the reference."""
    opdef = registry.get(case.op)
    assert opdef is not None
    arrays = make_inputs(case)
    expected = np.asarray(opdef.reference(*arrays, dtypes=list(case.dtypes), **case.params))
    out_dtype, out_shape = opdef.infer(list(case.dtypes), list(case.shapes), case.params)
    reason = backend.supports(case.op, list(case.dtypes), case.params)
    assert reason is True, reason
    tensors = [backend.upload(a, d) for a, d in zip(arrays, case.dtypes)]
    out = tensors[case.inplace_index] if case.inplace else None
    result = backend.run(case.op, tensors, case.params, out_dtype, out_shape, out=out)
    got = backend.download(result)
    assert got.shape == expected.shape == tuple(out_shape)
    if out_dtype.is_float:
        acc = case.params.get("acc")
        compute = acc[0] if acc is not None else out_dtype  # e.g. acc=[f32,f64] sums in f32
        rtol, atol = tolerance(case.op, compute, _reduce_len(case))
        finite = np.abs(as_float64(expected))[np.isfinite(as_float64(expected))]
        if case.op in _MAGNITUDE_SCALED and finite.size and compute is DType.F32:
            atol *= max(1.0, float(finite.max()))
        np.testing.assert_allclose(as_float64(got), as_float64(expected), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=case.id)  # fmt: skip
    else:
        assert got.dtype == expected.dtype, case.id
        mismatch = np.flatnonzero(got.reshape(-1) != expected.reshape(-1))
        assert mismatch.size == 0, (
            f"{case.id}: {mismatch.size} mismatches, first at {mismatch[0]}: "
            f"got {got.reshape(-1)[mismatch[0]]}, expected {expected.reshape(-1)[mismatch[0]]}; "
            f"inputs {[a.reshape(-1)[mismatch[0] % a.size] for a in arrays]}"
        )


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_parity(compiled: VulkanBackend, case: Case) -> None:
    check_case(compiled, case)


def test_case_count_covers_every_kernel_op() -> None:
    from openinfer_jax.vk.kernels import kernel_ops

    covered = {c.op for c in CASES}
    missing = sorted(
        op for op in kernel_ops() if registry.get(op) is not None and op not in covered
    )
    assert not missing, f"kernel ops without parity cases: {missing}"
    print(f"vulkan parity cases: {len(CASES)} over {len(covered)} ops")


@pytest.mark.parametrize(("op", "dtype"), FALLBACKS, ids=[f"{o}-{d.short}" for o, d in FALLBACKS])
def test_unsupported_kernels_report_a_reason(
    backend: VulkanBackend, op: str, dtype: object
) -> None:
    opdef = registry.get(op)
    assert opdef is not None
    reason = backend.supports(op, [dtype] * len(opdef.inputs), {})
    assert isinstance(reason, str) and dtype.short in reason  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("op", "dtype"), NN_FALLBACKS, ids=[f"{o}-{d.short}" for o, d in NN_FALLBACKS]
)
def test_nn_fallbacks_report_a_reason(backend: VulkanBackend, op: str, dtype: DType) -> None:
    dtypes = [dtype, DType.I32] if op == "rope" else [dtype] * 3
    reason = backend.supports(op, dtypes, {})
    assert isinstance(reason, str) and dtype.short in reason and "GLSL" in reason


_BROADCAST_OPS = [
    op
    for op in ("add", "mul", "sub", "div", "floor_div", "where")
    if (d := registry.get(op)) is not None and d.broadcast_ok
]
_BROADCAST_DTYPES = [DType.F32, DType.F16, DType.I8, DType.U4, DType.I64, DType.BOOL]


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_broadcasts_match_the_reference(
    compiled: VulkanBackend, data: st.DataObject
) -> None:
    op = data.draw(st.sampled_from(_BROADCAST_OPS))
    opdef = registry.get(op)
    assert opdef is not None
    allowed = [d for d in _BROADCAST_DTYPES if d in opdef.inputs[-1].dtypes]
    dtype = data.draw(st.sampled_from(allowed))
    out_shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    arity = len(opdef.inputs)
    shapes = []
    for _ in range(arity):
        keep = data.draw(st.integers(0, len(out_shape)))
        tail = out_shape[len(out_shape) - keep :]
        shapes.append(tuple(1 if data.draw(st.booleans()) else d for d in tail))
    dtypes = (DType.BOOL, dtype, dtype) if op == "where" else (dtype,) * arity
    check_case(compiled, Case(op, dtypes, tuple(shapes), seed=data.draw(st.integers(0, 999))))
