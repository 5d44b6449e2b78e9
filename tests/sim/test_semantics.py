"""Node kinds and memory kinds, exactly as docs/semantics.md states them."""

from __future__ import annotations

import numpy as np
import pytest

from openinfer_jax.core.errors import SimulationError
from openinfer_jax.sim import Simulator

MINIMAL = """
graph {
  dynamic { x: f32[B]; }
  volatile { a: f32[B]; y: f32[B] @init(5.0); }
  block entry {
    assign t0: f32[B];
    op add(x, a) >> t0;
    op mul(y, t0) >> y;
    return;
  }
}
"""


def test_minimal_seed_002_and_volatile_reset_every_step(make_model) -> None:
    a = np.linspace(-1, 1, 8).astype(np.float32)
    model = make_model(sizevars={"B": 8}, tensors={"a": a})
    ex = Simulator(model, MINIMAL).make_executor()
    for k in range(3):
        x = np.full(8, k, np.float32)
        ex.insert(x=x)
        ex.run_step()
        # y restarts from @init(5.0) each step: no compounding across steps.
        np.testing.assert_allclose(ex.fetch("y"), 5.0 * (x + a))


def test_dynamic_inputs_are_cleared_after_a_step(make_model) -> None:
    model = make_model(sizevars={"B": 4}, tensors={"a": np.zeros(4, np.float32)})
    ex = Simulator(model, MINIMAL).make_executor()
    ex.insert(x=np.ones(4, np.float32))
    ex.step()
    with pytest.raises(SimulationError, match="x not inserted"):
        ex.step()


def test_constant_scalars_from_metadata_and_sizevars_drive_loops(make_model) -> None:
    model = make_model(
        sizevars={"D": 3, "R": 2},
        metadata={"num_layers": 4},
        tensors={f"W.{i}": np.full(3, i + 1, np.float32) for i in range(4)},
    )
    text = """
    graph {
      dynamic { x: f32[D]; }
      volatile { W(l): f32[D] @pattern("W.{l}"); }
      constant { num_layers: u32; R: i32; }
      block entry {
        assign h: f32[D];
        transfer x >> h;
        loop layers (l in 0..num_layers) {
          op mul(h, W[l]) >> h;
        }
        loop twice (r in 0..R) {
          op add(h, x) >> h;
        }
        return;
      }
    }
    """
    ex = Simulator(model, text).make_executor()
    x = np.array([1, 2, 3], np.float32)
    ex.insert(x=x)
    ex.step()
    np.testing.assert_allclose(ex.fetch("h"), x * 24 + 2 * x)
    assert ex.fetch("num_layers") == 4 and ex.fetch("num_layers").dtype == np.uint32
    assert ex.fetch("R") == 2


def test_multi_index_pattern(make_model) -> None:
    tensors = {
        f"attn.{head}.qkv.{layer}": np.full(2, 10 * layer + head, np.float32)
        for layer in range(2)
        for head in range(3)
    }
    model = make_model(sizevars={"D": 2}, tensors=tensors)
    text = """
    graph {
      constant { QKV(layer, head): f32[D] @pattern("attn.{head}.qkv.{layer}"); }
      volatile { acc: f32[D]; }
      block entry {
        loop layers (layer in 0..2) {
          loop heads (head in 0..3) {
            op add(acc, QKV[layer, head]) >> acc;
          }
        }
        return;
      }
    }
    """
    ex = Simulator(model, text).make_executor()
    ex.step()
    np.testing.assert_allclose(ex.fetch("acc"), np.full(2, sum(10 * layer + head for layer in range(2) for head in range(3))))


BRANCHES = """
graph {
  dynamic { x: f32[D]; flag: bool; }
  volatile { out: f32[D]; }
  block entry {
    branch flag yes no;
    branch always;
    return;
  }
  block yes {
    op add(x, x) >> out;
    return;
    op fill(out, value=99.0) >> out;
  }
  block no {
    op neg(x) >> out;
    return;
  }
  block always {
    op add(out, x) >> out;
    return;
  }
}
"""


@pytest.mark.parametrize("flag, factor", [(True, 3.0), (False, 0.0)])
def test_branch_is_a_call_that_returns(make_model, flag: bool, factor: float) -> None:
    model = make_model(sizevars={"D": 3})
    sim = Simulator(model, BRANCHES).with_trace()
    ex = sim.make_executor()
    x = np.array([1, 2, 3], np.float32)
    ex.insert(x=x, flag=np.bool_(flag))
    ex.step()
    # yes: 2x then `always` adds x (3x); no: -x + x = 0. The node after `return` never runs.
    np.testing.assert_allclose(ex.fetch("out"), factor * x)
    kinds = [(e.block_name, e.kind) for e in ex.trace()]
    assert ("entry", "Branch") in kinds and ("always", "OpExecute") in kinds
    assert not any(e.node_desc.startswith("op fill") for e in ex.trace())


def test_loop_bounds_half_open_from_persistent_scalar(make_model) -> None:
    text = """
    graph {
      volatile { total: i32 @init(0); one: i32 @init(1); m: i32; }
      persistent { n: i32 @init(2); }
      block entry {
        cache.read n >> m;
        loop count (i in 1..m) {
          op add(total, one) >> total;
        }
        cache.increment 3 n;
        return;
      }
    }
    """
    ex = Simulator(make_model(), text).make_executor()
    ex.step()
    assert ex.fetch("total") == 1  # 1..2 runs once
    ex.step()
    assert ex.fetch("total") == 4  # 1..5 runs four times
    assert ex.fetch("n") == 8


@pytest.mark.parametrize(
    ("dtype", "start", "node", "delta", "expected"),
    [
        ("i32", 2**31 - 2, "cache.increment 3 n", 3, -(2**31) + 1),
        ("u8", 1, "cache.decrement 3 n", -3, 254),
        ("i64", 5, "cache.decrement 2 n", -2, 3),
        ("f32", 1.5, "cache.increment 2 n", 2, 3.5),
    ],
)
def test_counters_wrap_like_numpy_at_their_dtype(
    make_model, dtype, start, node, delta, expected
) -> None:
    text = f"""
    graph {{
      persistent {{ n: {dtype} @init({start}); }}
      block entry {{
        {node};
        return;
      }}
    }}
    """
    ex = Simulator(make_model(), text).make_executor()
    ex.step()
    got = ex.fetch("n")
    # Integers wrap modulo 2**bits as in C (and as NumPy's array arithmetic does).
    assert got.dtype == np.asarray(expected, got.dtype).dtype and got == expected
    assert got == (start + delta if dtype == "f32" else np.asarray(expected, got.dtype))


def test_transfer_aliases_without_corrupting_the_source(make_model) -> None:
    text = """
    graph {
      dynamic { x: f32[D]; }
      volatile { h: f32[D]; }
      block entry {
        transfer x >> h;
        dep after(transfer) before(add);
        op add(h, x) >> h;
        barrier;
        return;
      }
    }
    """
    sim = Simulator(make_model(sizevars={"D": 2}), text).with_trace()
    ex = sim.make_executor()
    ex.insert(x=np.array([1, 2], np.float32))
    events = [ev.event for ev in ex.iterate()]
    np.testing.assert_allclose(ex.fetch("h"), [2, 4])
    kinds = [e.kind for e in events]
    assert kinds == ["Transfer", "Dep", "OpExecute", "Barrier", "Return"]


def test_iterate_lets_you_fetch_after_each_node(make_model) -> None:
    model = make_model(sizevars={"B": 2}, tensors={"a": np.array([1, 1], np.float32)})
    ex = Simulator(model, MINIMAL).make_executor()
    ex.insert(x=np.array([1, 2], np.float32))
    seen = []
    for ev in ex.iterate():
        if ev.event.kind == "OpExecute":
            seen.append((ev.event.op_name, ev.fetch("y").tolist()))
    # After add, y still holds its @init value; after mul it is 5 * (x + a).
    assert seen == [("add", [5.0, 5.0]), ("mul", [10.0, 15.0])]


def test_lazy_loading_reads_each_weight_once(make_model) -> None:
    model = make_model(sizevars={"B": 2}, tensors={"a": np.ones(2, np.float32), "unused": np.ones(2, np.float32)})
    text = MINIMAL.replace("volatile { a: f32[B];", "volatile { a: f32[B]; unused: f32[B];")
    sim = Simulator(model, text).with_trace()
    ex = sim.make_executor()
    for _ in range(2):
        ex.insert(x=np.ones(2, np.float32))
        ex.step()
    loaded = [(e.step, name) for e in ex.trace() for name in e.loaded]
    assert loaded == [(0, "a")]  # first use only; "unused" is never read from the mmap


STREAM = """
graph {
  dynamic { x: f32[D]; }
  volatile { h: f32[D]; s: f32[D]; }
  block entry {
    op add(x, x) >> h;
    yield h;
    op mul(x, x) >> s;
    await h;
    op add(h, s) >> s;
    return;
  }
  block doubler {
    await h;
    op add(h, h) >> h;
    yield h;
  }
  block reader {
    await h;
    op neg(h) >> s;
    yield h;
  }
}
"""


def test_yield_await_consumers_run_on_snapshots(make_model) -> None:
    sim = Simulator(make_model(sizevars={"D": 2}), STREAM).with_trace()
    ex = sim.make_executor()
    x = np.array([1, 3], np.float32)
    ex.insert(x=x)
    ex.step()
    # doubler mutates h (2x -> 4x); reader only reads it; its write to s stays in its fork.
    np.testing.assert_allclose(ex.fetch("h"), 4 * x)
    np.testing.assert_allclose(ex.fetch("s"), 4 * x + x * x)
    order = [(e.block_name, e.kind) for e in ex.trace()]
    assert order.index(("entry", "Yield")) < order.index(("doubler", "OpExecute")) < order.index(
        ("reader", "OpExecute")
    ) < order.index(("entry", "Await"))


def test_trace_uuids_are_deterministic(make_model) -> None:
    model = make_model(sizevars={"B": 2}, tensors={"a": np.ones(2, np.float32)})

    def uuids() -> list[str]:
        sim = Simulator(model, MINIMAL).with_trace()
        ex = sim.make_executor()
        ex.insert(x=np.ones(2, np.float32))
        ex.step()
        return [e.node_uuid for e in ex.trace()]

    first = uuids()
    assert first == uuids() and len(set(first)) == len(first)


def test_numpy_device_matches_xla(make_model) -> None:
    a = np.linspace(-1, 1, 8).astype(np.float32)
    model = make_model(sizevars={"B": 8}, tensors={"a": a})
    x = np.arange(8, dtype=np.float32)
    results = []
    for device in ("cpu", "numpy"):
        ex = Simulator(model, MINIMAL, device=device).make_executor()
        ex.insert(x=x)
        ex.step()
        results.append(ex.fetch("y"))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_abandoning_iterate_rolls_the_step_back(make_model) -> None:
    text = """
    graph {
      dynamic { x: f32[D]; }
      persistent { n: i32 @init(0); A(t): f32[D] @table; }
      block entry {
        cache.write x >> A[n];
        cache.increment n;
        return;
      }
    }
    """
    ex = Simulator(make_model(sizevars={"D": 2}), text).make_executor()
    ex.insert(x=np.ones(2, np.float32))
    for ev in ex.iterate():
        if ev.event.kind == "CacheIncrement":
            assert ev.fetch("n") == 1  # mid-step state is visible...
            break
    assert ex.fetch("n") == 0 and ex.fetch("A").shape == (0, 2)  # ...and undone when abandoned
    assert ex.steps == 0


def test_fetch_types_packed_unpacked_and_bf16(make_model, tmp_path) -> None:
    import ml_dtypes

    from openinfer_jax.oinf import DType, ModelLoader, OinfWriter

    path = tmp_path / "typed.oinf"
    q = np.array([-8, -1, 0, 7, 3], np.int8)
    h = np.array([1.5, -2.25, 3.0], ml_dtypes.bfloat16)
    with OinfWriter(path, overwrite=True) as w:
        w.add_tensor("q", q, dtype=DType.I4)
        w.add_tensor("h", h)
    text = """
    graph {
      constant { q: i4[5]; h: bf16[3]; }
      volatile { h2: bf16[3]; }
      block entry {
        op add(h, h) >> h2;
        return;
      }
    }
    """
    with ModelLoader.open(path) as model:
        ex = Simulator(model, text).make_executor()
        ex.step()
        got_q = ex.fetch("q")
        assert got_q.dtype == np.int8 and got_q.tolist() == q.tolist()  # unpacked from 4 bits
        got = ex.fetch("h2")
        assert got.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(got.astype(np.float32), 2 * h.astype(np.float32))
