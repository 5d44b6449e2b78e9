"""Wide regions with persistent state and the affine replay of their host plan (wide.py,
symbolic.py): a step keeps its results and its atomicity when its cache bookkeeping is
replayed instead of walked."""

from __future__ import annotations

import numpy as np
import pytest

from openinfer_jax.core.errors import SimulationError
from openinfer_jax.sim import Simulator
from openinfer_jax.sim.symbolic import SymInt, recording

# `total` is a plain persistent variable (no table): its read and write join the wide
# region that also appends to table A. B is fixed at 3 entries: the third step writes past
# it, after the wide region ran, so the whole step must be undone.
STATE_GRAPH = """
graph {
  dynamic { x: f32[D]; }
  persistent {
    step: i32 @init(0);
    total: f32[D] @init(0.0);
    A(t): f32[D] @table;
    B(t): f32[D] @table @fixed(t=3);
  }
  block entry {
    assign s: f32[D];
    cache.read total >> s;
    op add(s, x) >> s;
    cache.write s >> total;
    cache.write s >> A[step];
    cache.increment step;
    cache.write x >> B[step];
    return;
  }
}
"""


def test_persistent_state_runs_inside_the_wide_region_and_rolls_back(make_model) -> None:
    sim = Simulator(make_model(sizevars={"D": 2}), STATE_GRAPH)
    ex = sim.make_executor()
    xs = [np.full(2, k + 1, np.float32) for k in range(3)]
    ex.insert(x=xs[0])
    ex.step()
    # One region for read total/add/write total/write A, one for the write into B: the
    # persistent variable no longer splits the first one.
    assert ex.region_calls == 2
    ex.insert(x=xs[1])
    ex.step()  # replayed: same template, new step value and counts
    np.testing.assert_array_equal(ex.fetch("total"), [3.0, 3.0])
    np.testing.assert_array_equal(ex.fetch("A"), [[1.0, 1.0], [3.0, 3.0]])
    before = {name: ex.fetch(name).copy() for name in ("total", "A", "B", "step")}
    ex.insert(x=xs[2])
    with pytest.raises(SimulationError, match="fixed size"):
        ex.step()  # B[3] is past @fixed(t=3): total, A, step all back as they were
    for name, value in before.items():
        np.testing.assert_array_equal(ex.fetch(name), value)
    assert ex.persistent.tables["A"].counts == {"t": 2}
    # The executor goes on from the restored state.
    ex.set_persistent("B", np.zeros((0, 2), np.float32))
    ex.set_persistent("step", np.asarray(0, np.int32))
    ex.insert(x=xs[2])
    ex.step()
    np.testing.assert_array_equal(ex.fetch("total"), [6.0, 6.0])
    np.testing.assert_array_equal(ex.fetch("A"), [[6.0, 6.0], [3.0, 3.0]])


def test_replayed_steps_match_the_numpy_interpreter(make_model) -> None:
    model = make_model(sizevars={"D": 2})
    graph = STATE_GRAPH.replace("@fixed(t=3)", "")
    fast = Simulator(model, graph).make_executor()
    slow = Simulator(model, graph, device="numpy").make_executor()
    rng = np.random.default_rng(0)
    for _ in range(20):  # crosses several capacity doublings and read buckets of A
        x = rng.standard_normal(2).astype(np.float32)
        for ex in (fast, slow):
            ex.insert(x=x)
            ex.step()
    for name in ("total", "A", "B", "step"):
        np.testing.assert_allclose(fast.fetch(name), slow.fetch(name), rtol=1e-6)


def test_symbolic_ints_record_the_guards_of_their_comparisons() -> None:
    n = SymInt.variable("n", 5)
    with recording() as rec:
        assert n + 3 < 10  # holds while n < 7
        end = 2 * n + 1
    plan = rec.plan(["n"], [end])
    assert plan.evaluate([6]).tolist() == [13]
    assert plan.evaluate([7]) is None  # the guard n + 3 < 10 fails: walk again


STREAK_GRAPH = """
graph {
  dynamic { x: f32[D]; }
  volatile { s: f32[1, D]; }
  persistent {
    step: i32 @init(0);
    A(t): f32[D] @table;
  }
  block entry {
    cache.write x >> A[step];
    cache.increment step;
    cache.read A[0..step] >> s;
    return;
  }
}
"""


def test_foreseen_operands_equal_the_plan_at_every_call(make_model, monkeypatch) -> None:
    """A decode-like step: every call's operands, foreseen a streak ahead or not, are the
    plan's at its variables; across read buckets and table growth (guards fail, walk)."""
    from openinfer_jax.sim import wide

    calls: list[tuple[object, ...]] = []
    execute = wide.WideRunner._execute

    def spy(self, ex, call, compiled, region_id):  # type: ignore[no-untyped-def]
        counts = {name: dict(axes) for name, axes in (call.counts or {}).items()}
        calls.append((call.prog, call.x, call.ints.copy(), list(call.lengths), counts, call.streak))
        return execute(self, ex, call, compiled, region_id)

    monkeypatch.setattr(wide.WideRunner, "_execute", spy)
    model = make_model(sizevars={"D": 2})
    fast = Simulator(model, STREAK_GRAPH).make_executor()
    slow = Simulator(model, STREAK_GRAPH, device="numpy").make_executor()
    rng = np.random.default_rng(1)
    for _ in range(150):
        x = rng.standard_normal(2).astype(np.float32)
        for ex in (fast, slow):
            ex.insert(x=x)
            ex.step()
        np.testing.assert_allclose(fast.fetch("s"), slow.fetch("s"), rtol=1e-6)
    replays = [c for c in calls if c[1] is not None]
    assert len(replays) > 100
    assert sum(c[5] is not None for c in replays) > 50  # most came from a streak
    for prog, x, ints, lengths, counts, _streak in replays:
        want = wide._operands(prog, prog.plan.evaluate(x))
        np.testing.assert_array_equal(ints, want[0])
        assert ints.dtype == np.int32
        assert lengths == want[1]
        assert counts == want[2]
