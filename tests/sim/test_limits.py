"""The resource budget (openinfer_jax/core/limits.py): one number must not claim unbounded time or
memory. Long loops stay loops (a pure body runs as one fori_loop), a huge cache index or
tensor fails early with a typed error naming the variable and the limit, and every limit
can be overridden."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.limits import DEFAULT_LIMITS, Limits
from openinfer_jax.errors import GraphValidationError, OpenInferError, SimulationError
from openinfer_jax.ir.validate import validate
from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.sim import Simulator
from openinfer_jax.trace import parse


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> ModelLoader:
    path = tmp_path_factory.mktemp("limits") / "m.oinf"
    write_oinf(
        path,
        sizevars={"N": 10**6, "BIG": 10**9},
        tensors={"w.0": np.ones(4, np.float32), "w.1": np.full(4, 2, np.float32)},
    )
    return ModelLoader.open(path)


def _run(model: ModelLoader, graph: str, limits: Limits | None = None, **feed: object) -> object:
    ex = Simulator(model, graph, limits=limits).make_executor()
    if feed:
        ex.insert(**feed)
    ex.step()
    return ex


def test_million_iteration_loop_runs_as_one_compiled_loop(model: ModelLoader) -> None:
    graph = """graph { dynamic { x: f32[4]; } volatile { y: f32[4]; }
      block entry { loop k (i in 0..N) { op add(y, x) >> y; } return; } }"""
    ex = _run(model, graph, x=np.full(4, 0.5, np.float32))
    np.testing.assert_array_equal(ex.fetch("y"), np.full(4, 5e5, np.float32))
    # one region compiled (not 10**6 unrolled ops, not one dispatch per iteration)
    assert ex.region_calls == 0 and len(ex._fori_cache) == 1


LOOPS = """graph {
  dynamic { x: f32[4]; }
  volatile { y: f32[4]; z: f32[4]; W(l): f32[4] @pattern("w.{l}"); }
  persistent { K(t): f32[4] @table; step: i32 @init(0); }
  block entry {
    loop outer (j in 0..3) {
      loop pure (i in 0..20) { op add(y, x) >> y; op mul(y, x) >> z; }
      loop cached (i in 0..20) { op add(z, x) >> z; cache.write z >> K[i]; }
      op add(y, W[1]) >> y;
    }
    loop prefix (l in 0..2) { op add(y, W[l]) >> y; }
    cache.increment step;
    return;
  }
}"""


@pytest.mark.parametrize("budget", [1, 8, 30, 1000])
def test_loops_beyond_the_unroll_budget_give_the_same_results(
    model: ModelLoader, budget: int
) -> None:
    feed = {"x": np.array([1.0, 0.5, -1.0, 2.0], np.float32)}
    want = _run(model, LOOPS, **feed)
    got = _run(model, LOOPS, Limits(max_unrolled_iterations=budget), **feed)
    for name in ("y", "z", "K", "step"):
        np.testing.assert_array_equal(got.fetch(name), want.fetch(name), err_msg=name)


def test_huge_cache_index_fails_before_allocating(model: ModelLoader) -> None:
    graph = """graph { dynamic { x: f32[4]; t: i32; } persistent { K(t): f32[4] @table; }
      block entry { cache.write x >> K[t]; return; } }"""
    sim = Simulator(model, graph)
    ex = sim.make_executor()
    ex.insert(x=np.ones(4, np.float32), t=np.int32(10**9))
    with pytest.raises(SimulationError, match="max_cache_entries"):
        ex.step()
    ex.insert(x=np.ones(4, np.float32), t=np.int32(3))
    ex.step()  # state intact, the next step runs
    assert ex.fetch("K").shape == (4, 4)
    small = Simulator(model, graph, limits=Limits(max_tensor_elements=32)).make_executor()
    small.insert(x=np.ones(4, np.float32), t=np.int32(20))
    with pytest.raises(SimulationError, match="max_tensor_elements"):
        small.step()  # growing to 32 entries of 4 elements is 128 elements


def test_huge_tensor_fails_validation_naming_the_variable(model: ModelLoader) -> None:
    graph = parse("graph { volatile { y: f32[N, N]; } block entry { return; } }")
    with pytest.raises(GraphValidationError, match=r"'y' f32\[N, N\].*max_tensor_elements"):
        validate(graph, model)
    validate(graph, model, limits=Limits(max_tensor_elements=10**12))
    literal = parse("graph { volatile { y: f32[1000000, 1000000]; } block entry { return; } }")
    with pytest.raises(GraphValidationError, match="max_tensor_elements"):
        validate(literal)  # literal dims are checked without a model
    with pytest.raises(GraphValidationError, match="max_tensor_elements"):
        Simulator(model, literal)


def test_fixed_table_and_loop_depth_limits() -> None:
    fixed = parse(
        "graph { persistent { K(t): f32[4] @table @fixed(t=100000000); } block entry { return; } }"
    )
    with pytest.raises(GraphValidationError, match="max_cache_entries"):
        validate(fixed)
    deep = parse(
        "graph { volatile { y: f32[2]; } block entry { "
        "loop a (i in 0..1) { loop b (j in 0..1) { loop c (k in 0..1) { op relu(y) >> y; } } } "
        "return; } }"
    )
    validate(deep)
    with pytest.raises(GraphValidationError, match=r"loop 'c' is nested 3 deep.*max_loop_depth=2"):
        validate(deep, limits=Limits(max_loop_depth=2))


def test_prefix_use_in_a_huge_loop_validates_without_building_the_range(
    model: ModelLoader,
) -> None:
    """The reachable-index check enumerates lazily (it used to make a tuple of 10**9 ints)."""
    import tracemalloc

    graph = parse(
        'graph { volatile { W(l): f32[4] @pattern("w.{l}"); y: f32[4]; } '
        "block entry { loop k (i in 0..BIG) { op add(y, W[i]) >> y; } return; } }"
    )
    tracemalloc.start()
    try:
        with pytest.raises(GraphValidationError, match=r"w\.2"):
            validate(graph, model)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


def test_overrides_from_the_command_line_syntax() -> None:
    limits = DEFAULT_LIMITS.with_overrides(["max_cache_entries=1_000", "max-loop-depth=0x10"])
    assert limits.max_cache_entries == 1000 and limits.max_loop_depth == 16
    for bad in (["nope=1"], ["max_loop_depth"], ["max_loop_depth=x"], ["max_loop_depth=0"]):
        with pytest.raises(OpenInferError, match="limit"):
            DEFAULT_LIMITS.with_overrides(bad)


def test_run_cli_takes_limits(model: ModelLoader, tmp_path: Path) -> None:
    from openinfer_jax.cli import main

    graph = tmp_path / "g.graph"
    graph.write_text("graph { volatile { y: f32[4]; } block entry { return; } }")
    assert (
        main(
            [
                "run",
                "--model",
                str(model.path),
                "--graph",
                str(graph),
                "--limit",
                "max_loop_depth=3",
            ]
        )
        == 0
    )
    assert (
        main(["run", "--model", str(model.path), "--graph", str(graph), "--limit", "bogus=3"]) != 0
    )
