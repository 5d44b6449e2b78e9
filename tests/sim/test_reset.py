"""`Executor.reset`: all persistent state back to its initial value between steps (the
simulator's side of the emitted C's `oi_reset`); `set_persistent` names unknown variables."""

from __future__ import annotations

import numpy as np
import pytest

from openinfer_jax.errors import SimulationError
from openinfer_jax.sim import Simulator

GRAPH = """
graph {
  dynamic { x: f32[2]; }
  volatile { w: f32[2]; }
  persistent {
    n: i32 @init(5);
    W: f32[2];
    A(t): f32[2] @table;
  }
  block entry {
    cache.read W >> w;
    op add(w, x) >> w;
    cache.write w >> W;
    cache.write x >> A[n];
    cache.increment n;
    return;
  }
}
"""


def test_reset_restores_initial_values_and_empties_tables(make_model) -> None:
    model = make_model(tensors={"W": np.array([1.0, 2.0], np.float32)})
    ex = Simulator(model, GRAPH).make_executor()
    fresh = Simulator(model, GRAPH).make_executor()
    x = np.array([0.5, -1.0], np.float32)
    for _ in range(3):
        ex.insert(x=x)
        ex.step()
    assert int(ex.fetch("n")) == 8 and ex.fetch("A").shape == (8, 2)
    ex.reset()
    for name in ("n", "W", "A"):
        np.testing.assert_array_equal(ex.fetch(name), fresh.fetch(name))
    ex.insert(x=x)
    ex.step()
    fresh.insert(x=x)
    fresh.step()
    for name in ("n", "W", "A"):
        np.testing.assert_array_equal(ex.fetch(name), fresh.fetch(name))
    assert ex.steps == 4  # the step count and the trace are not part of persistent state


def test_set_persistent_names_an_unknown_variable(make_model) -> None:
    ex = Simulator(make_model(tensors={"W": np.zeros(2, np.float32)}), GRAPH).make_executor()
    with pytest.raises(
        SimulationError, match=r"'w': no persistent variable of that name \(persistent: A, W, n\)"
    ):
        ex.set_persistent("w", np.zeros(2, np.float32))
