"""Conformance: JAX lowering vs independent NumPy reference for every core op × dtype × variant.

Every case runs on explicit edge values (NaN, ±inf, -0.0, int min/max, zero divisors, shift
counts >= width, all pairs for binary ops) and is traced with `jax.make_jaxpr`, which proves
the lowering is jit-traceable without compiling it. Every op × dtype then runs
`CONFORMANCE_EXAMPLES` hypothesis draws (default 4; raise it for a longer run), each picking
one of its variants and generated values.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import registry
from openinfer_jax.sim.precision import WIDE_DTYPES, Precision
from tests.ops.conformance_cases import (
    ACCUMULATING,
    CORE_OPS,
    Case,
    as_array,
    assert_conforms,
    build_cases,
    edge_inputs,
    edge_values,
)

CASES = build_cases()
EXAMPLES = int(os.environ.get("CONFORMANCE_EXAMPLES", "4"))


def _precision(case: Case) -> Precision:
    """The JAX mode the simulator would run this case in (32-bit unless a dtype is 64-bit;
    an op that asks for 64-bit intermediates upgrades, see sim/precision.py)."""
    return Precision(any(d in WIDE_DTYPES for d in case.dtypes))


def _run(case: Case, inputs: list[np.ndarray]) -> None:
    op = registry.get(case.op)
    assert op is not None
    want = op.reference(*inputs, dtypes=case.dtypes, **case.params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _precision(case).call(
            lambda: np.asarray(op.lower_jax(*inputs, dtypes=case.dtypes, **case.params))
        )
    assert_conforms(case, inputs, got, want)


_SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.0]


def _element(dtype: DType, op: str) -> st.SearchStrategy[Any]:
    """Values for one element. Float reductions and matmul avoid magnitudes whose overflow or
    underflow would depend on the summation order (NaN vs 0 is not a rounding difference)."""
    edges = st.sampled_from(edge_values(dtype))
    if dtype is DType.BOOL:
        return st.booleans()
    if dtype.is_int:
        low, high = dtype.value_range()
        return st.one_of(edges, st.integers(low, high)) if dtype is not DType.T1 else edges
    width = 64 if dtype is DType.F64 else 32
    if op == "prod_axis":
        return st.one_of(
            st.sampled_from(_SPECIALS),
            st.floats(0.5, 2, width=width),
            st.floats(-2, -0.5, width=width),
        )
    if op in ACCUMULATING:
        return st.one_of(st.sampled_from(_SPECIALS), st.floats(-1e3, 1e3, width=width, allow_subnormal=False))
    floats = st.floats(width=width, allow_nan=True, allow_infinity=True, allow_subnormal=False)
    return st.one_of(edges, floats, st.floats(-4, 4, width=width, allow_subnormal=False))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_edge_values(case: Case) -> None:
    """JAX and reference agree on the edge values; the lowering traces under jit."""
    edges = edge_inputs(case)
    _run(case, edges)
    op = registry.get(case.op)
    assert op is not None
    _precision(case).call(
        lambda: jax.make_jaxpr(lambda *xs: op.lower_jax(*xs, dtypes=case.dtypes, **case.params))(
            *edges
        )
    )


GROUPS: dict[str, list[Case]] = {}
for _case in CASES:
    GROUPS.setdefault(f"{_case.op}-{'/'.join(d.short for d in dict.fromkeys(_case.dtypes))}", []).append(_case)


@pytest.mark.parametrize("group", list(GROUPS), ids=list(GROUPS))
def test_generated_values(group: str) -> None:
    """For each op × dtype: hypothesis picks variants and values; JAX and reference agree.

    Draws are short value lists tiled into the edge inputs' shapes, so every draw reuses the
    primitives JAX compiled for the edge run (co-prime list lengths pair every drawn value of
    one input with every drawn value of the other).
    """
    cases = GROUPS[group]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def generated(data: st.DataObject) -> None:
        case = data.draw(st.sampled_from(cases))
        inputs = []
        for index, (dtype, edge) in enumerate(zip(case.dtypes, edge_inputs(case))):
            size = 7 + index
            values = data.draw(st.lists(_element(dtype, case.op), min_size=size, max_size=size))
            tiled = (values * (edge.size // size + 1))[: edge.size]
            inputs.append(as_array(tiled, dtype, edge.shape))
        _run(case, inputs)

    generated()


def test_matrix_covers_every_core_op_and_dtype() -> None:
    """Each core op appears with every dtype its declaration accepts."""
    for name in CORE_OPS:
        op = registry.get(name)
        assert op is not None
        covered = {c.dtypes[-1] for c in CASES if c.op == name}
        assert covered == set(op.input_spec(len(op.inputs) - 1).dtypes), name


def _inplace_cases() -> list[Case]:
    """One case per in-place op whose output can reuse input 0's buffer (same dtype/shape)."""
    chosen = []
    for name in CORE_OPS:
        op = registry.get(name)
        assert op is not None
        if not op.inplace_ok:
            continue
        for case in CASES:
            if case.op != name or case.variant != "plain" or case.dtypes[0] not in (DType.F32, DType.I32):
                continue
            inputs = edge_inputs(case)
            out_dtype, out_shape = op.infer(case.dtypes, [x.shape for x in inputs], case.params)
            if out_dtype is case.dtypes[0] and out_shape == inputs[0].shape:
                chosen.append(case)
                break
    return chosen


INPLACE = _inplace_cases()


@pytest.mark.parametrize("case", INPLACE, ids=[c.id for c in INPLACE])
def test_inplace_lowering_with_donated_input(case: Case) -> None:
    """In-place ops lower correctly when XLA may write the output into input 0's buffer."""
    op = registry.get(case.op)
    assert op is not None
    inputs = edge_inputs(case)
    want = op.reference(*inputs, dtypes=case.dtypes, **case.params)
    donated = jax.jit(lambda *xs: op.lower_jax(*xs, dtypes=case.dtypes, **case.params), donate_argnums=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a backend that cannot donate says so and copies
        got = donated(*[jax.numpy.array(x) for x in inputs])
    assert_conforms(case, inputs, got, want)
