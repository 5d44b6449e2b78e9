"""Recycled region outputs (wide.py `WideRunner.recycle`, on by default on a GPU): a wide
region's calls alternate between two lanes (two loaded copies of its executable), each
call donating its lane's last outputs' buffers (wide.py `_lane`). Forced on here on the
CPU: values, fetches, held device arrays and rollback must be exactly as without it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.errors import SimulationError
from openinfer_jax.sim import Simulator
from openinfer_jax.sim.values import Deferred

from .test_wide_state import STATE_GRAPH

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from kv_cache_decode import Config, graph_text, numpy_step, write_model


def _recycling(sim: Simulator, pack: bool = True) -> Simulator:
    # before the first executor and the first compilation; a GPU simulator packs too
    sim.wide.recycle = True
    sim.wide.pack = pack
    return sim


def _slot_pointers(ex) -> list[int]:
    """The output buffers of the last call of the first recycled region."""
    lanes, *_ = [v for k, v in ex.region_state.items() if isinstance(k, tuple)]
    return [x.unsafe_buffer_pointer() for x in lanes.outs[lanes.last]]


def _lanes_keep_their_buffers(pointers: list[list[int]]) -> bool:
    """Calls alternate between two lanes, each writing into its own buffers every time."""
    return pointers[0] != pointers[1] and all(p == pointers[k % 2] for k, p in enumerate(pointers))


def test_recycling_is_off_on_the_cpu(make_model) -> None:
    sim = Simulator(make_model(sizevars={"D": 2}), STATE_GRAPH)
    assert sim.wide.recycle is False
    ex = sim.make_executor()
    ex.insert(x=np.ones(2, np.float32))
    ex.step()
    assert not [k for k in ex.region_state if isinstance(k, tuple)]  # no lanes


def test_decode_with_recycled_outputs_matches_numpy(tmp_path: Path) -> None:
    cfg = Config(layers=2, d=32, heads=2)
    path = tmp_path / "m.oinf"
    write_model(path, cfg)
    sim = _recycling(Simulator(path, graph_text(cfg)))
    ex = sim.make_executor()
    rng = np.random.default_rng(0)
    context = 40  # inside one read bucket for the steps below: one executable
    shape = (cfg.layers, context, cfg.heads, cfg.head_dim)
    tables = {name: rng.standard_normal(shape).astype(np.float32) for name in ("K", "V")}
    for name, value in tables.items():
        ex.set_persistent(name, value)
    ex.set_persistent("step", np.asarray(context, np.int32))
    weights = {name: np.array(sim.model.tensor(name)) for name in sim.model.tensors}
    cache = [
        ([tables["K"][n, t] for t in range(context)], [tables["V"][n, t] for t in range(context)])
        for n in range(cfg.layers)
    ]
    held, held_value, pointers = None, None, []
    for k in range(6):
        x = rng.standard_normal((1, cfg.d)).astype(np.float32)
        ex.insert(x=x)
        ex.step()
        want = numpy_step(weights, cfg, x, cache)
        np.testing.assert_allclose(ex.fetch("y"), want, rtol=1e-4, atol=1e-4)
        # A cache-read view of the last layer: the table's entries so far, this step's too.
        ks = ex.fetch("ks")
        np.testing.assert_allclose(ks, np.stack(cache[-1][0]), rtol=1e-4, atol=1e-4)
        pointers.append(_slot_pointers(ex))
        if k == 1:
            held = ex.fetch_device("y")  # held across later steps: never donated
            held_value = np.array(held)
    assert not held.is_deleted()
    np.testing.assert_array_equal(np.array(held), held_value)
    # The first call of each lane got new buffers; from then on each lane's outputs stay
    # in them (but for the call after `held` was taken, which found its lane's held).
    assert _lanes_keep_their_buffers(pointers[:3]) and _lanes_keep_their_buffers(pointers[3:])
    # The lanes run two loaded copies of one executable (on a GPU, two sets of command
    # buffers, each seeing the same buffers at every call).
    lanes, *_ = [v for k, v in ex.region_state.items() if isinstance(k, tuple)]
    assert lanes.compiled.lane(1).exe is not lanes.compiled.lane(0).exe


def test_packed_temporaries_match_unpacked_outputs(tmp_path: Path) -> None:
    """The decode step's dead temporaries come back in one flat output (WideRunner.pack):
    every fetched value, held device arrays and the tables equal those of separate
    outputs, bit for bit, and the call returns (and recycles) fewer buffers."""
    cfg = Config(layers=2, d=32, heads=2)
    path = tmp_path / "m.oinf"
    write_model(path, cfg)
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((1, cfg.d)).astype(np.float32) for _ in range(5)]
    names = ("y", "a", "qkv", "f", "o2", "kh", "ks", "K", "V")
    results, counts = [], []
    for pack in (True, False):
        sim = _recycling(Simulator(path, graph_text(cfg)), pack=pack)
        ex = sim.make_executor()
        fetched, held = [], None
        for k, x in enumerate(xs):
            ex.insert(x=x)
            ex.step()
            fetched.append({name: np.array(ex.fetch(name)) for name in names})
            if k == 1:
                held = ex.fetch_device("f")
        fetched.append({"held": np.array(held)})
        results.append(fetched)
        lanes, *_ = [v for k, v in ex.region_state.items() if isinstance(k, tuple)]
        counts.append(len(lanes.outs[lanes.last]))
        assert isinstance(ex.vars.store["a"], Deferred) == pack  # a view, made if fetched
    for packed, separate in zip(*results):
        for name, value in separate.items():
            np.testing.assert_array_equal(packed[name], value, err_msg=name)
    assert counts[0] < counts[1] - 5, counts


def test_recycled_outputs_roll_back_with_the_step(make_model) -> None:
    sim = _recycling(Simulator(make_model(sizevars={"D": 2}), STATE_GRAPH))
    ex = sim.make_executor()
    for k in range(2):
        ex.insert(x=np.full(2, k + 1, np.float32))
        ex.step()
    before = {name: ex.fetch(name).copy() for name in ("s", "total", "A", "B", "step")}
    np.testing.assert_array_equal(before["s"], [3.0, 3.0])
    ex.insert(x=np.full(2, 3, np.float32))
    with pytest.raises(SimulationError, match="fixed size"):
        ex.step()  # the wide region ran (into its recycled buffers), then B[3] failed
    for name, value in before.items():
        np.testing.assert_array_equal(ex.fetch(name), value)
    ex.set_persistent("B", np.zeros((0, 2), np.float32))
    ex.set_persistent("step", np.asarray(0, np.int32))
    for _ in range(2):  # the executor goes on from the restored state, recycling again
        ex.insert(x=np.full(2, 3, np.float32))
        ex.step()
    np.testing.assert_array_equal(ex.fetch("total"), [9.0, 9.0])
    np.testing.assert_array_equal(ex.fetch("s"), [9.0, 9.0])


def test_recycled_regions_stored_and_loaded(make_model, tmp_path: Path) -> None:
    """A stored executable keeps its donated output buffers (the store's key and metadata
    carry them): a second simulator loads it and recycles the same way."""
    from openinfer_jax.sim.executable_store import ExecutableStore

    model = make_model(sizevars={"D": 2})
    graph = STATE_GRAPH.replace("@fixed(t=3)", "")
    results = []
    for _ in range(2):
        sim = _recycling(Simulator(model, graph))
        sim.wide.store = ExecutableStore(tmp_path / "regions")
        ex = sim.make_executor()
        pointers = []
        for k in range(5):
            ex.insert(x=np.full(2, k + 1, np.float32))
            ex.step()
            pointers.append(_slot_pointers(ex))
        assert _lanes_keep_their_buffers(pointers)
        results.append((ex.fetch("total"), ex.fetch("A"), ex.stats["compile_cache_hits"]))
    (total0, a0, hits0), (total1, a1, hits1) = results
    assert hits0 == 0 and hits1 > 0
    np.testing.assert_array_equal(total0, [15.0, 15.0])
    np.testing.assert_array_equal(total1, total0)
    np.testing.assert_array_equal(a1, a0)
