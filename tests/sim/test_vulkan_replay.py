"""device="vulkan": runs of ops recorded once and replayed per step (sim/vulkan_replay.py)
compute what a fresh walk computes, and anything that changes falls back to the walk."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import SimulationError
from openinfer_jax.sim import Simulator
from openinfer_jax.sim.vulkan_replay import VulkanSegment, segments
from tests.vk.conftest import new_backend, vulkan_marks

pytestmark = vulkan_marks()

# Ops before and after a persistent read/write, an assign placeholder, a reshape view, an
# op whose output is overwritten in place and a persistent value carried from step to step.
STREAM = """
graph {
  dynamic { x: f32[B, D]; }
  volatile {
    w: f32[D, D]; b: f32[D]; h: f32[B, D]; s: f32[B, D]; g: f32[B, D]; r: f32[D, B];
    o: f32[D, B];
  }
  persistent { state: f32[B, D]; }
  block entry {
    op matmul(x, w) >> h;
    op add(h, b) >> h;
    op tanh(h) >> h;
    cache.read state >> s;
    assign t: f32[B, D];
    assign unused: f32[B, D];
    op add(h, s) >> t;
    op mul(t, t) >> g;
    op reshape(g, shape=[8, 2]) >> r;
    cache.write t >> state;
    op sigmoid(r) >> o;
    return;
  }
}
"""
NAMES = ("h", "s", "t", "unused", "g", "r", "o", "state")


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "w": (rng.standard_normal((8, 8)) * 0.5).astype(np.float32),
        "b": rng.standard_normal(8).astype(np.float32),
    }


def _run(model, graph: str, feeds: list[dict], replay: bool, monkeypatch, names=NAMES):
    """Steps over `feeds`, every value fetched after each; also the executor's stats before
    the last 4 steps."""
    monkeypatch.setenv("OPENINFER_VK_REPLAY", "1" if replay else "0")
    ex = Simulator(model, graph, device="vulkan").make_executor()
    seen = []
    for k, feed in enumerate(feeds):
        if k == len(feeds) - 4:
            ex.stats_before_last = ex.stats
        ex.insert(**feed)
        ex.step()
        seen.append([np.asarray(ex.fetch(n)) for n in names])
    return ex, seen


def _last_steps(ex) -> tuple[int, int]:
    """Segments replayed and walks recorded in the last 4 steps of `_run`."""
    now, before = ex.stats, ex.stats_before_last
    return now["vk_replayed"] - before["vk_replayed"], now["vk_recorded"] - before["vk_recorded"]


def _assert_same(got: list, want: list) -> None:
    for step, (a, b) in enumerate(zip(got, want)):
        for x, y in zip(a, b):
            assert x.dtype == y.dtype and x.shape == y.shape, step
            np.testing.assert_array_equal(x, y, err_msg=f"step {step}")


def test_replay_gives_what_a_fresh_walk_gives_bit_for_bit(make_model, monkeypatch) -> None:
    rng = np.random.default_rng(0)
    model = make_model(sizevars={"B": 2, "D": 8}, tensors=_weights(rng))
    feeds = [{"x": rng.standard_normal((2, 8)).astype(np.float32)} for _ in range(14)]
    ex, replayed = _run(model, STREAM, feeds, True, monkeypatch)
    walk, walked = _run(model, STREAM, feeds, False, monkeypatch)
    _assert_same(replayed, walked)
    # Three segments (before the read, between read and write, after the write). The
    # first steps record a trace per buffer signature (h alternates between two buffers,
    # the state between three: the step before's `s` and `t` are held for rollback), then
    # every step replays all three.
    assert _last_steps(ex) == (3 * 4, 0)
    assert walk.stats["vk_replayed"] == 0 and walk.stats["vk_recorded"] == 0
    got, want = ex.sim.vulkan.stats, walk.sim.vulkan.stats
    assert got["dispatches"] == want["dispatches"] and got["submits"] == want["submits"]
    assert ex.stats["vk_uploads"] == walk.stats["vk_uploads"]


def test_a_growing_read_changes_shapes_and_falls_back_to_the_walk(make_model, monkeypatch) -> None:
    graph = """
    graph {
      dynamic { x: f32[D]; }
      volatile { w: f32[D]; h: f32[D]; hs: f32[1, D]; s: f32[D]; y: f32[D]; }
      persistent { step: i32 @init(0); K(t): f32[D] @table; }
      block entry {
        op mul(x, w) >> h;
        op exp(h) >> h;
        cache.write h >> K[step];
        cache.read K[0..step] >> hs;
        cache.increment step;
        op sum_axis(hs, axes=[0]) >> s;
        op mul(s, w) >> y;
        return;
      }
    }
    """
    rng = np.random.default_rng(1)
    model = make_model(sizevars={"D": 4}, tensors={"w": rng.standard_normal(4).astype(np.float32)})
    feeds = [{"x": rng.standard_normal(4).astype(np.float32)} for _ in range(8)]
    names = ("h", "hs", "s", "y", "K")
    ex, replayed = _run(model, graph, feeds, True, monkeypatch, names)
    _walk, walked = _run(model, graph, feeds, False, monkeypatch, names)
    _assert_same(replayed, walked)
    # The ops after the read see a new shape every step: walked (and recorded) each step;
    # the ops before it replay.
    assert _last_steps(ex) == (4, 4)


def test_a_runtime_scalar_param_is_walked_between_replayed_ops(make_model, monkeypatch) -> None:
    graph = """
    graph {
      dynamic { x: f32[D]; alpha: f32; }
      volatile { h: f32[D]; z: f32[D]; y: f32[D]; }
      block entry {
        op neg(x) >> h;
        op fill(h, value=alpha) >> z;
        op add(h, z) >> y;
        op abs(y) >> y;
        return;
      }
    }
    """
    model = make_model(sizevars={"D": 4})
    x = np.arange(4, dtype=np.float32)
    feeds = [{"x": x + k, "alpha": np.float32(k * 1.5)} for k in range(8)]
    ex, replayed = _run(model, graph, feeds, True, monkeypatch, ("h", "z", "y"))
    for k, (h, z, y) in enumerate(replayed):
        np.testing.assert_array_equal(h, -(x + k))
        np.testing.assert_array_equal(z, np.full(4, k * 1.5, np.float32))
        np.testing.assert_array_equal(y, np.abs(-(x + k) + k * 1.5))
    assert _last_steps(ex) == (2 * 4, 0)  # neg; add + abs


def test_a_cpu_fallback_inside_a_run_keeps_it_walked(make_model, monkeypatch) -> None:
    monkeypatch.setenv("OPENINFER_VK_DISABLE", "shader_float64")
    graph = """
    graph {
      dynamic { x: f32[D]; }
      volatile { h: f32[D]; z: f64[D] @init(1.5); z2: f64[D]; k: f32[D]; }
      block entry {
        op add(x, x) >> h;
        op add(z, z) >> z2;
        op mul(h, h) >> k;
        return;
      }
    }
    """
    model = make_model(sizevars={"D": 4})
    feeds = [{"x": np.full(4, k, np.float32)} for k in range(5)]
    ex, replayed = _run(model, graph, feeds, True, monkeypatch, ("h", "z2", "k"))
    for k, (h, z2, kk) in enumerate(replayed):
        np.testing.assert_array_equal(h, np.full(4, 2 * k, np.float32))
        np.testing.assert_array_equal(z2, np.full(4, 3.0))
        np.testing.assert_array_equal(kk, np.full(4, 4 * k * k, np.float32))
    assert ex.stats["vk_replayed"] == 0 and ex.stats["vk_recorded"] == 0


def test_a_traced_step_walks_and_reports_every_op(make_model, monkeypatch) -> None:
    rng = np.random.default_rng(2)
    model = make_model(sizevars={"B": 2, "D": 8}, tensors=_weights(rng))
    sim = Simulator(model, STREAM, device="vulkan").with_trace()
    ex = sim.make_executor()
    for _ in range(4):
        ex.insert(x=rng.standard_normal((2, 8)).astype(np.float32))
        ex.step()
    ops = [e for e in ex.trace() if e.op_name and e.step == 3]
    assert len(ops) == 7 and all(e.device == "vulkan" for e in ops)
    assert ex.stats["vk_replayed"] == 0


def test_a_failed_step_after_replays_rolls_back(make_model, monkeypatch) -> None:
    graph = """
    graph {
      dynamic { x: f32[D]; }
      volatile { w: f32[D]; h: f32[D]; }
      persistent { step: i32 @init(0); B(t): f32[D] @table @fixed(t=4); }
      block entry {
        op add(x, w) >> h;
        op mul(h, h) >> h;
        cache.write h >> B[step];
        cache.increment step;
        return;
      }
    }
    """
    model = make_model(sizevars={"D": 3}, tensors={"w": np.ones(3, np.float32)})
    ex = Simulator(model, graph, device="vulkan").make_executor()
    for k in range(4):  # nothing read back: the next step's start waits for the device
        ex.insert(x=np.full(3, k, np.float32))
        ex.step()
    assert ex.stats["vk_replayed"] == 2 and ex.stats["vk_recorded"] == 2
    ex.insert(x=np.full(3, 9, np.float32))
    with pytest.raises(SimulationError, match="exceeds fixed size t=4"):
        ex.step()
    assert ex.steps == 4
    np.testing.assert_array_equal(ex.fetch("h"), np.full(3, 16, np.float32))
    want = np.array([[(k + 1) ** 2] * 3 for k in range(4)], np.float32)
    np.testing.assert_array_equal(ex.fetch("B"), want)


def test_segments_end_where_an_op_reads_an_assign_placeholder() -> None:
    from openinfer_jax.ir.nodes import Assign, Op, VarRef
    from openinfer_jax.sim.plan import RegionPlan

    def op(name: str, ins: tuple[str, ...], out: str) -> RegionPlan:
        node = Op(name, tuple(VarRef(i) for i in ins), (), VarRef(out))
        return RegionPlan(0, "entry", (node,))

    z = RegionPlan(0, "entry", (Assign("z", DType.F32, (4,)),))
    items = [op("neg", ("x",), "h"), z, op("abs", ("z",), "y"), op("exp", ("y",), "y")]
    out = segments(items)
    assert [type(i) for i in out] == [VulkanSegment, VulkanSegment]
    assert [len(s.items) for s in out] == [2, 2]  # neg + assign | abs(z) + exp


# ---- the backend's tapes ----------------------------------------------------------------------
def test_a_tape_replays_into_its_buffers_only_while_they_are_free() -> None:
    be = new_backend()
    if not be.batching:
        pytest.skip("tapes need kp's OpShaderBarrier (batching)")
    x = np.arange(6, dtype=np.float32)
    src = be.upload(x, DType.F32)
    assert be.start_tape() and not be.start_tape()
    h = be.run("neg", [src], {}, DType.F32, (6,))
    y = be.run("mul", [h, h], {}, DType.F32, (6,))
    tape = be.stop_tape()
    assert [a[1] for a in tape.allocs] == [h.buffer, y.buffer] and tape.dispatches == 2
    tape.made = None
    np.testing.assert_array_equal(be.download(y), x * x)
    held = y
    del h, y
    gc.collect()
    assert be.replay_tape(tape) is None  # y's buffer is still held: nothing taken
    del held
    gc.collect()
    before = be.stats["dispatches"]
    made = be.replay_tape(tape)
    assert made is not None and [t.buffer for t in made] == [a[1] for a in tape.allocs]
    assert be.stats["dispatches"] == before + 2
    np.testing.assert_array_equal(be.download(made[1]), x * x)


def test_a_run_inside_a_loop_replays_per_iteration_like_a_walk(make_model, monkeypatch) -> None:
    # The loop index is not among the run's names, so each iteration may replay it (its
    # input h is the iteration before's result: the buffer signature changes each time).
    graph = """
    graph {
      dynamic { x: f32[D]; }
      volatile { b: f32[D]; h: f32[D]; g: f32[D]; }
      block entry {
        op mul(x, b) >> h;
        loop layers (l in 0..3) {
          op add(h, b) >> g;
          op tanh(g) >> h;
        }
        return;
      }
    }
    """
    rng = np.random.default_rng(3)
    model = make_model(sizevars={"D": 4}, tensors={"b": rng.standard_normal(4).astype(np.float32)})
    feeds = [{"x": rng.standard_normal(4).astype(np.float32)} for _ in range(12)]
    ex, replayed = _run(model, graph, feeds, True, monkeypatch, ("h", "g"))
    _walk, walked = _run(model, graph, feeds, False, monkeypatch, ("h", "g"))
    _assert_same(replayed, walked)
    assert _last_steps(ex)[0] >= 4 * 3  # the loop body at least, every iteration
