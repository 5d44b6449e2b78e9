"""Padded (bucketed) cache slices give exactly what exact shapes give, op by op."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openinfer_jax.sim import Simulator

# Each case: declarations of the outputs, then ops consuming `s` (the slice A[0..n], [n, D]).
CASES = {
    "softmax": ("r: f32[1, D];", "op softmax(s, axis=0) >> r;"),
    "sum": ("r: f32[D];", "op sum_axis(s, axes=[0]) >> r;"),
    "mean": ("r: f32[D];", "op mean_axis(s, axes=[0]) >> r;"),
    "max": ("r: f32[D];", "op max_axis(s, axes=[0]) >> r;"),
    "min_keep": ("r: f32[1, D];", "op min_axis(s, axes=[0], keepdims=true) >> r;"),
    "sum_other_axis": ("r: f32[1];", "op sum_axis(s, axes=[1]) >> r;"),
    "elementwise_then_sum": ("t: f32[1, D]; r: f32[D];", "op mul(s, s) >> t;\n op sum_axis(t, axes=[0]) >> r;"),
    "contract": (
        "t: f32[D, 1]; r: f32[D, D];",
        "op transpose(s, perm=[1, 0]) >> t;\n op matmul(t, s) >> r;",
    ),
    "scores": (
        "t: f32[D, 1]; p: f32[1, 1]; r: f32[1, D];",
        "op transpose(s, perm=[1, 0]) >> t;\n op matmul(q, t) >> p;\n op softmax(p, axis=-1) >> p;\n op matmul(p, s) >> r;",
    ),
    "exact_fallback": ("r: f32[1, D];", "op reshape(s, shape=[-1, 3]) >> r;"),
}


@functools.cache
def simulator(case: str, bucketing: bool) -> Simulator:
    """One simulator per case and mode, so examples share compiled regions."""
    return Simulator(None, graph(case), bucketing=bucketing, validate=False)


def graph(case: str) -> str:
    decls, ops = CASES[case]
    text = f"""
    graph {{
      dynamic {{ x: f32[D]; n: i32; q: f32[1, D]; }}
      volatile {{ s: f32[1, D]; {decls} }}
      persistent {{ A(t): f32[D] @table; }}
      block entry {{
        cache.write x >> A[n];
        cache.read A[0..n] >> s;
        {ops}
        return;
      }}
    }}
    """
    return text.replace("D", "3")


@pytest.mark.parametrize("case", sorted(CASES))
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_bucketed_equals_exact(case: str, data) -> None:
    results = []
    steps = data.draw(st.integers(min_value=2, max_value=6))
    seed = data.draw(st.integers(min_value=0, max_value=2**16))
    for bucketing in (True, False):
        rng = np.random.default_rng(seed)
        ex = simulator(case, bucketing).make_executor()
        for k in range(steps):
            ex.insert(x=rng.standard_normal(3).astype(np.float32), n=np.int32(k + 1), q=np.ones((1, 3), np.float32))
            ex.step()
        results.append(ex.fetch("r"))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-6)
