"""Lean regions (sim/regions.py, sim/wide.py, plan.py `used_after`): a compiled region
returns only the writes a later node may read; untouched `assign`s become `Zeros` and big
values computed from the region's inputs alone become `Deferred` (computed when fetched).
Every fetch must see exactly what the region would have returned (`lean=False`)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.sim import Simulator
from openinfer_jax.sim.regions import DEFER_MIN_BYTES
from openinfer_jax.sim.values import Deferred, Zeros

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from kv_cache_decode import Config, graph_text, write_model

# `big` (a transposed 1024x512 f32 weight, 2 MiB) is only read inside the first region;
# `z` is never written; `y` is read by the second region (after the barrier).
NARROW = """
graph {
  dynamic { x: f32[1, 512]; }
  volatile { w: f32[1024, 512]; }
  block entry {
    assign big: f32[512, 1024];
    assign z: f32[1, 4];
    assign y: f32[1, 1024];
    assign s: f32[1, 1024];
    op transpose(w, perm=[1, 0]) >> big;
    op matmul(x, big) >> y;
    barrier;
    op add(y, y) >> s;
    return;
  }
}
"""


def _narrow(make_model, lean: bool) -> tuple[Simulator, np.ndarray]:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1024, 512)).astype(np.float32)
    sim = Simulator(make_model(tensors={"w": w}), NARROW, lean=lean)
    return sim, rng.standard_normal((1, 512)).astype(np.float32)


def test_dead_writes_are_placeholders_and_fetch_sees_the_same_values(make_model) -> None:
    sim, x = _narrow(make_model, lean=True)
    ex = sim.make_executor()
    ex.insert(x=x)
    ex.step()
    assert isinstance(ex.vars.store["big"], Deferred)  # only read inside its region, 2 MiB
    assert isinstance(ex.vars.store["z"], Zeros)  # never written: no buffer at all
    assert not isinstance(ex.vars.store["y"], (Deferred, Zeros))  # read by the next region
    full_sim, _ = _narrow(make_model, lean=False)
    full = full_sim.make_executor()
    full.insert(x=x)
    full.step()
    assert not any(isinstance(v, (Deferred, Zeros)) for v in full.vars.store.values())
    for name in ("big", "z", "y", "s"):
        np.testing.assert_array_equal(ex.fetch(name), full.fetch(name))
    np.testing.assert_array_equal(ex.fetch("big"), ex.fetch("w").T)


def test_iterate_keeps_every_write(make_model) -> None:
    sim, x = _narrow(make_model, lean=True)
    ex = sim.make_executor()
    ex.insert(x=x)
    for ev in ex.iterate():
        if ev.event.output == ["big"]:
            assert not isinstance(ex.vars.store["big"], Deferred)


def test_small_dead_writes_are_returned() -> None:
    """Below DEFER_MIN_BYTES a dead write costs less to return than its recipe to compile."""
    graph = """
graph {
  dynamic { x: f32[4]; }
  block entry {
    assign t: f32[4];
    op add(x, x) >> t;
    return;
  }
}
"""
    ex = Simulator(None, graph).make_executor()
    ex.insert(x=np.arange(4, dtype=np.float32))
    ex.step()
    assert DEFER_MIN_BYTES > 16 and not isinstance(ex.vars.store["t"], Deferred)
    np.testing.assert_array_equal(ex.fetch("t"), [0, 2, 4, 6])


def test_a_write_read_by_the_next_loop_iteration_stays_live(make_model) -> None:
    """A loop body's region that reads its own earlier write must return it (loop-carried)."""
    graph = """
graph {
  volatile { w: f32[512, 512]; }
  constant { n: u32; }
  block entry {
    assign acc: f32[512, 512];
    assign i: f32[1];
    loop it (k in 0..n) {
      op add(acc, w) >> acc;
      barrier;
    }
    return;
  }
}
"""
    w = np.full((512, 512), 0.5, np.float32)
    sim = Simulator(make_model(sizevars={"n": 3}, tensors={"w": w}), graph)
    ex = sim.make_executor()
    ex.step()
    assert not isinstance(ex.vars.store["acc"], (Deferred, Zeros))  # the body's region reads it
    np.testing.assert_array_equal(ex.fetch("acc"), np.full((512, 512), 1.5, np.float32))
    np.testing.assert_array_equal(ex.fetch("i"), [0.0])


@pytest.mark.parametrize("lean", [True, False])
def test_wide_decode_is_bit_identical_lean_or_not(tmp_path: Path, lean: bool) -> None:
    """The GPT-2-shaped decode (one wide region): same outputs and cache in both modes."""
    cfg = Config(layers=2, d=16, heads=2)
    path = tmp_path / "gpt.oinf"
    write_model(path, cfg)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1, cfg.d)).astype(np.float32) for _ in range(5)]
    results = []
    for mode in (lean, not lean):
        ex = Simulator(path, graph_text(cfg), lean=mode).make_executor()
        ys = []
        for x in xs:
            ex.insert(x=x)
            ex.step()
            ys.append(ex.fetch("y"))
        results.append((ys, ex.fetch("K"), ex.fetch("V"), ex.fetch("a"), ex.fetch("qkv")))
    for got, want in zip(results[0], results[1]):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_wide_region_defers_a_big_weight_only_value(tmp_path: Path) -> None:
    """A transposed weight used only inside the wide region is Deferred, and fetchable."""
    cfg = Config(layers=1, d=256, heads=2)  # w_fc: [256, 1024] f32 = 1 MiB
    path = tmp_path / "gpt.oinf"
    write_model(path, cfg)
    text = (
        graph_text(cfg)
        .replace("  block entry {\n", "  block entry {\n    assign wt: f32[4*D, D];\n")
        .replace("  block entry {\n", "  block entry {\n    assign unused: f32[3];\n")
        .replace(
            "    cache.increment",
            "    op transpose(w_fc[0], perm=[1, 0]) >> wt;\n    cache.increment",
        )
    )
    sim = Simulator(path, text)
    ex = sim.make_executor()
    ex.insert(x=np.ones((1, cfg.d), np.float32))
    ex.step()
    assert sim.plan.regions[0].wide
    assert isinstance(ex.vars.store["wt"], Deferred)
    assert isinstance(ex.vars.store["unused"], Zeros)
    assert not isinstance(ex.vars.store["y"], (Deferred, Zeros))  # depends on the cache reads
    w_fc = np.asarray(sim.model.tensor("h.0.w_fc"))
    np.testing.assert_array_equal(ex.fetch("wt"), w_fc.T)
    np.testing.assert_array_equal(ex.fetch("unused"), np.zeros(3, np.float32))
    sim.model.close()


def test_values_from_padded_reads_are_returned_not_deferred() -> None:
    """A write computed from a bucket-padded cache slice (a Ragged input) depends on the
    call's valid length: returned even when dead and big (1 MiB per entry here)."""
    graph = """
graph {
  dynamic { x: f32[262144]; }
  volatile { hs: f32[1, 262144]; t: f32[1, 262144]; }
  persistent { step: i32 @init(0); K(n): f32[262144] @table; }
  block entry {
    cache.write x >> K[step];
    cache.read K[..] >> hs;
    cache.increment step;
    barrier;
    op mul(hs, hs) >> t;
    return;
  }
}
"""
    fetched = []
    for lean in (True, False):
        ex = Simulator(None, graph, lean=lean).make_executor()
        for k in range(3):
            ex.insert(x=np.full(262144, k + 1, np.float32))
            ex.step()
        assert not isinstance(ex.vars.store["t"], (Deferred, Zeros))
        fetched.append(ex.fetch("t"))
    assert fetched[0].shape == (3, 262144)
    np.testing.assert_array_equal(fetched[0], fetched[1])
    np.testing.assert_array_equal(fetched[0][:, 0], [1.0, 4.0, 9.0])
