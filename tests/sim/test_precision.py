"""JAX's 64-bit mode is scoped to the simulator's own calls (sim/precision.py).

The user's JAX defaults never change: after `import openinfer_jax` and after running graphs,
`jnp.zeros(1)` is float32 in user code. Graphs with i64/u64/f64 values run in 64-bit mode
and stay exact; other graphs run in 32-bit mode, switching to 64-bit when an op asks for
64-bit intermediates (fma, integer sums, float-to-int casts).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from openinfer_jax.sim import Simulator
from openinfer_jax.sim.precision import Precision, graph_uses_64bit
from openinfer_jax.trace import parse

ROOT = Path(__file__).resolve().parents[2]

F32_RELU = "graph { dynamic { x: f32[3]; } block entry { assign y: f32[3]; op relu(x) >> y; return; } }"
F32_FMA = """graph {
  dynamic { a: f32[2]; b: f32[2]; c: f32[2]; }
  block entry { assign y: f32[2]; op fma(a, b, c) >> y; return; }
}"""
WIDE = """graph {
  dynamic { i: i64[2]; u: u64[2]; f: f64[2]; }
  block entry {
    assign si: i64[2]; assign su: u64[2]; assign q: f64[2];
    op add(i, i) >> si;
    op add(u, u) >> su;
    op div(f, f) >> q;
    op div(q, f) >> q;
    return;
  }
}"""


def test_user_defaults_unchanged_after_import_and_runs() -> None:
    code = f"""
import sys; sys.path.insert(0, {str(ROOT)!r})
import numpy as np
import openinfer_jax
import jax, jax.numpy as jnp
print(jnp.zeros(1).dtype)
sim = openinfer_jax.Simulator(None, {F32_RELU!r})
ex = sim.make_executor(); ex.insert(x=np.ones(3, np.float32)); ex.step(); ex.fetch("y")
print(jnp.zeros(1).dtype, jax.jit(lambda v: v * 2)(np.ones(2)).dtype)
sim = openinfer_jax.Simulator(None, {WIDE!r})
ex = sim.make_executor()
ex.insert(i=np.ones(2, np.int64), u=np.ones(2, np.uint64), f=np.ones(2)); ex.step()
print(jnp.zeros(1).dtype, jnp.arange(3).dtype, jax.config.jax_enable_x64)
"""
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["float32"] * 4 + ["int32", "False"]


def test_graphs_with_64bit_values_are_exact() -> None:
    sim = Simulator(None, WIDE)
    assert sim.precision.x64 and graph_uses_64bit(sim.graph)
    ex = sim.make_executor()
    big = np.array([2**61 + 1, -(2**62) + 3], np.int64)
    ubig = np.array([2**63 - 5, 7], np.uint64)
    third = np.array([1 / 3, 1e-300], np.float64)
    ex.insert(i=big, u=ubig, f=third)
    ex.step()
    assert ex.fetch("si").dtype == np.int64 and (ex.fetch("si") == big * 2).all()
    assert (ex.fetch("su") == ubig * np.uint64(2)).all()  # wraps modulo 2**64, exactly
    assert ex.fetch("q").dtype == np.float64 and (ex.fetch("q") == 1 / third).all()


@pytest.mark.parametrize("text", ["acc=f64", "to=i64"])
def test_64bit_dtype_params_count_as_64bit_use(text: str) -> None:
    op = "sum_axis(x, axes=[0], acc=f64)" if "acc" in text else "cast(x, to=i64)"
    out = "f64[1]" if "acc" in text else "i64[3]"
    graph = parse(
        f"graph {{ dynamic {{ x: f32[3]; }} block entry {{ assign y: {out}; op {op} >> y; return; }} }}"
    )
    assert graph_uses_64bit(graph)
    assert not graph_uses_64bit(parse(F32_RELU))


def _fma_inputs() -> dict[str, np.ndarray]:
    a = np.array([1 + 2**-23, 3.0], np.float32)
    return {"a": a, "b": a, "c": np.array([-1.0, 1.0], np.float32)}


def _fma_want() -> np.ndarray:
    ins = {k: v.astype(np.float64) for k, v in _fma_inputs().items()}
    return (ins["a"] * ins["b"] + ins["c"]).astype(np.float32)


def test_32bit_graph_stays_32bit_and_upgrades_once_for_fma() -> None:
    plain = Simulator(None, F32_RELU)
    ex = plain.make_executor()
    ex.insert(x=np.array([-1, 0, 2], np.float32))
    ex.step()
    assert not plain.precision.x64  # relu needs no 64-bit intermediates
    sim = Simulator(None, F32_FMA)
    assert not sim.precision.x64
    ex = sim.make_executor()
    for _ in range(2):
        ex.insert(**_fma_inputs())
        ex.step()
        # a*b rounded to f32 first would give 0 for the first element; fma keeps 2**-22.
        np.testing.assert_array_equal(ex.fetch("y"), _fma_want())
    assert sim.precision.x64 and ex.steps == 2 and ex.stats["compilations"] == 1


def test_iterate_upgrades_without_repeating_events() -> None:
    sim = Simulator(None, F32_FMA)
    ex = sim.make_executor()
    ex.insert(**_fma_inputs())
    descs = [ev.event.node_desc for ev in ex.iterate()]
    assert descs == ["assign y: f32[2]", "op fma(a, b, c) >> y", "return"]
    np.testing.assert_array_equal(ex.fetch("y"), _fma_want())
    assert jnp.zeros(1).dtype == jnp.float32  # code between events runs in the user's mode


def test_a_users_global_64bit_mode_is_left_alone() -> None:
    with jax.enable_x64(True):
        sim = Simulator(None, F32_RELU)
        ex = sim.make_executor()
        ex.insert(x=np.ones(3, np.float32))
        ex.step()
        assert jnp.zeros(1).dtype == jnp.float64


def test_precision_call_reruns_only_for_a_refused_64bit_request() -> None:
    precision = Precision(False)
    calls = []

    def wide() -> str:
        calls.append(jax.config.jax_enable_x64)
        return str(jnp.ones(1, jnp.float32).astype(jnp.float64).dtype)

    assert precision.call(wide) == "float64" and calls == [False, True]
    other = Precision(False)
    with pytest.raises(ZeroDivisionError):
        other.call(lambda: 1 // 0)
    assert not other.x64


def test_every_public_executor_method_runs_in_the_jax_mode() -> None:
    """A new public method that touches JAX must run in the simulator's mode: decorate it
    with executor._in_jax_mode (or list it here when it touches no JAX or scopes itself)."""
    from openinfer_jax.sim.executor import Executor

    no_jax = {"insert", "insert_dynamic", "trace", "clear_trace", "steps", "stats"}
    scoped_inside = {"step", "run_step", "iterate"}  # rerun in 64-bit mode, see precision.py
    step_helpers = {"op_setup", "check_transfer", "writes_locked"}  # sim/wide.py, in a step
    public = {n for n in vars(Executor) if not n.startswith("_")}
    unscoped = {
        name
        for name in public - no_jax - scoped_inside - step_helpers
        if not hasattr(getattr(Executor, name), "__wrapped__")
    }
    assert unscoped == set()
