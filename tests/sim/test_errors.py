"""Bad input gets a typed error naming the variable/node, and a failed step changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from openinfer_jax.core.errors import (
    DslSyntaxError,
    GraphValidationError,
    OpenInferError,
    SimulationError,
)
from openinfer_jax.sim import Simulator

GRAPH = """
graph {
  dynamic { x: f32[D]; }
  volatile { w: f32[D]; h: f32[D]; }
  constant { c: f32[D]; }
  persistent {
    step: i32 @init(0);
    A(t): f32[D] @table;
    B(t): f32[D] @table @fixed(t=2);
  }
  block entry {
    op add(x, w) >> h;
    cache.write h >> A[step];
    cache.increment step;
    cache.write h >> B[step];
    return;
  }
}
"""


@pytest.fixture
def executor(make_model):
    model = make_model(sizevars={"D": 3}, tensors={"w": np.ones(3, np.float32), "c": np.ones(3, np.float32)})
    return Simulator(model, GRAPH).make_executor()


@pytest.mark.parametrize(
    "name, value, match",
    [
        ("w", np.ones(3, np.float32), "volatile memory; only dynamic"),
        ("c", np.ones(3, np.float32), "constant memory"),
        ("nope", np.ones(3, np.float32), "no such variable"),
        ("x", np.ones(3, np.float64), "dtype f64 does not match the declaration f32"),
        ("x", np.ones(4, np.float32), r"shape \[4\] does not match the declaration f32\[3\]"),
        ("x", "text", "cannot convert"),
    ],
)
def test_insert_rejects_bad_values(executor, name, value, match) -> None:
    with pytest.raises(SimulationError, match=match):
        executor.insert({name: value})


def test_insert_is_all_or_nothing(executor) -> None:
    with pytest.raises(SimulationError):
        executor.insert(x=np.ones(3, np.float32), w=np.ones(3, np.float32))
    with pytest.raises(SimulationError, match="x not inserted"):
        executor.step()


def test_fetch_unknown_name(executor) -> None:
    with pytest.raises(SimulationError, match="fetch 'bogus': no such variable"):
        executor.fetch("bogus")


def test_step_before_inputs_are_inserted(executor) -> None:
    with pytest.raises(SimulationError, match=r"dynamic input x not inserted; call insert\(x=...\)"):
        executor.step()
    assert executor.steps == 0


def test_fixed_overflow_mid_step_leaves_persistent_state_unchanged(executor) -> None:
    executor.insert(x=np.full(3, 1, np.float32))
    executor.step()  # A[0], step=1, B[1]
    before = {n: executor.fetch(n).copy() for n in ("A", "B", "step")}
    executor.insert(x=np.full(3, 7, np.float32))
    # The second step writes A[1] and bumps step before B[2] overflows @fixed(t=2).
    with pytest.raises(SimulationError) as info:
        executor.step()
    message = str(info.value)
    assert "block entry node 3 (cache.write h >> B[step])" in message
    assert "exceeds fixed size t=2" in message
    for name, value in before.items():
        np.testing.assert_array_equal(executor.fetch(name), value)
    assert executor.persistent.tables["A"].counts == {"t": 1}
    assert executor.steps == 1
    # The inserted input survives the failed step: a retry fails the same way.
    with pytest.raises(SimulationError, match="exceeds fixed size"):
        executor.step()


def test_op_error_mid_step_rolls_back_cache_writes(make_model) -> None:
    text = """
    graph {
      dynamic { x: f32[D]; idx: i32; }
      volatile { r: f32[1, D]; q: f32[2, 2]; }
      persistent { A(t): f32[D] @table; }
      block entry {
        cache.write x >> A[idx];
        cache.read A[0..idx] >> r;
        op reshape(r, shape=[2, 2]) >> q;
        return;
      }
    }
    """
    ex = Simulator(make_model(sizevars={"D": 2}), text, validate=False).make_executor()
    ex.insert(x=np.ones(2, np.float32), idx=np.int32(2))
    ex.step()  # A[0..2] is [2, 2]: the reshape fits
    before = ex.fetch("A").copy()
    ex.insert(x=np.full(2, 5, np.float32), idx=np.int32(4))
    # The write grows A to 5 entries; then reshape([4, 2] -> [2, 2]) fails: both are undone.
    with pytest.raises(SimulationError, match=r"block entry node 2 \(op reshape\(r, shape=\[2, 2\]\) >> q\)"):
        ex.step()
    np.testing.assert_array_equal(ex.fetch("A"), before)
    assert ex.persistent.tables["A"].counts == {"t": 3}


@pytest.mark.parametrize(
    "bound_decl, bound_value, match",
    [
        ("n: f32;", np.float32(2.5), "must be an integer scalar|is f32"),
        ("n: i32[D];", np.ones(2, np.int32), "must be a scalar"),
    ],
)
def test_loop_bound_must_be_integer_scalar(make_model, bound_decl, bound_value, match) -> None:
    text = f"""
    graph {{
      dynamic {{ {bound_decl} }}
      volatile {{ h: f32[D]; }}
      block entry {{
        loop body (i in 0..n) {{
          op neg(h) >> h;
        }}
        return;
      }}
    }}
    """
    model = make_model(sizevars={"D": 2})
    with pytest.raises(GraphValidationError):
        Simulator(model, text)  # validation already refuses it
    ex = Simulator(model, text, validate=False).make_executor()  # and so does the runtime
    ex.insert(n=bound_value)
    with pytest.raises(SimulationError, match=match) as info:
        ex.step()
    assert "loop body" in str(info.value)


def test_unknown_device_and_missing_graph_file(make_model) -> None:
    with pytest.raises(OpenInferError, match="unknown device"):
        Simulator(None, GRAPH, device="tpu9")
    # One loader for every consumer (trace.load_graph): an unreadable file is a DslSyntaxError.
    with pytest.raises(DslSyntaxError, match="cannot read the graph file"):
        Simulator(None, "no/such/file.graph")


def test_persistent_tensor_shape_checked_on_write(make_model) -> None:
    text = """
    graph {
      dynamic { x: f32[D]; }
      persistent { W: f32[D]; }
      volatile { w: f32[D]; }
      block entry {
        cache.read W >> w;
        op add(w, x) >> w;
        cache.write w >> W;
        return;
      }
    }
    """
    ex = Simulator(make_model(sizevars={"D": 2}), text).make_executor()
    for _ in range(3):
        ex.insert(x=np.ones(2, np.float32))
        ex.step()
    np.testing.assert_array_equal(ex.fetch("W"), [3, 3])
    with pytest.raises(SimulationError, match="shape"):
        ex.set_persistent("W", np.ones(3, np.float32))
