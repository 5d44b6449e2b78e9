"""Trace events, JSON and Chrome trace-event export, OPENINFER_TRACE, compilation bounds."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.sim import Simulator, write_chrome_trace, write_trace_json
from openinfer_jax.sim.events import EVENT_KINDS, split_micros
from openinfer_jax.sim.values import BUCKETS_PER_DOUBLING, bucket_size

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from kv_cache_decode import Config, graph_text, numpy_step, write_model

CACHED = """
graph {
  dynamic { x: f32[D]; }
  volatile { w: f32[D]; h: f32[D]; hs: f32[1, D]; s: f32[D]; }
  persistent { step: i32 @init(0); K(t): f32[D] @table; }
  block entry {
    op mul(x, w) >> h;
    cache.write h >> K[step];
    cache.read K[0..step] >> hs;
    cache.increment step;
    barrier;
    op sum_axis(hs, axes=[0]) >> s;
    return;
  }
}
"""


def run_traced(make_model, steps: int = 2):
    model = make_model(sizevars={"D": 2}, tensors={"w": np.full(2, 2, np.float32)})
    sim = Simulator(model, CACHED).with_trace().with_timer()
    ex = sim.make_executor()
    for k in range(steps):
        ex.insert(x=np.full(2, k + 1, np.float32))
        ex.step()
    return ex


def test_events_carry_the_seed_fields_and_more(make_model) -> None:
    ex = run_traced(make_model)
    events = ex.trace()
    assert {e.kind for e in events} <= set(EVENT_KINDS)
    first = events[0]
    for field in ("block_name", "node_index", "node_uuid", "kind", "params", "output", "micros"):
        assert hasattr(first, field)
    assert first.kind == "OpExecute" and first.op_name == "mul"
    assert first.params == ["x", "w"] and first.output == ["h"]
    assert first.input_shapes == [[2], [2]] and first.output_dtypes == ["f32"]
    assert first.loaded == ["w"] and first.region is not None and first.device == "cpu"
    read = next(e for e in events if e.kind == "CacheRead")
    assert read.output_shapes == [[0, 2]]  # step 0 reads K[0..0]: empty, exact logical shape
    assert [e.step for e in events].count(1) == len(events) // 2
    assert any(e.compiled for e in events if e.step == 0)
    assert ex.stats["compilations"] >= 1
    # Step 1 reads K[0..1] (the entry step 0 wrote, x*w = 2) and sums it over axis 0.
    np.testing.assert_allclose(ex.fetch("s"), [2.0, 2.0])


def test_micros_split() -> None:
    assert split_micros(1_126_340) == [1, 126, 340]
    assert split_micros(999) == [0, 0, 999]


def test_trace_json_round_trip(make_model, tmp_path: Path) -> None:
    ex = run_traced(make_model)
    path = tmp_path / "trace.json"
    write_trace_json(ex.trace(), path)
    data = json.loads(path.read_text())
    assert len(data) == len(ex.trace())
    assert data[1]["kind"] == "CacheWrite" and len(data[1]["micros"]) == 3


def test_chrome_trace_is_valid_trace_event_format(make_model, tmp_path: Path) -> None:
    ex = run_traced(make_model)
    path = tmp_path / "chrome.json"
    write_chrome_trace(ex.trace(), path)
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(ex.trace())
    for ev in complete:
        assert isinstance(ev["name"], str) and ev["name"]
        assert isinstance(ev["ts"], (int, float)) and ev["ts"] >= 0
        assert isinstance(ev["dur"], (int, float)) and ev["dur"] > 0
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
    ts = [e["ts"] for e in complete]
    assert ts == sorted(ts)  # events are emitted in execution order
    meta = [e for e in events if e["ph"] == "M"]
    assert any(m["name"] == "thread_name" for m in meta)


@pytest.mark.parametrize("level", ["1", "full"])
def test_env_trace_prints_original_log_lines(make_model, monkeypatch, capsys, level: str) -> None:
    monkeypatch.setenv("OPENINFER_TRACE", level)
    run_traced(make_model, steps=1)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) >= 6
    idx, uuid, block, *_ = lines[0].split(" ")
    assert idx == "0" and len(uuid) == 36 and block == "[entry]"
    assert " -- op mul(x, w) >> h -- (" in lines[0] and lines[0].endswith("ns)")


def test_decode_compiles_o_log_n_times_and_matches_numpy(tmp_path: Path) -> None:
    cfg = Config(layers=1, d=16, heads=2)
    path = tmp_path / "gpt.oinf"
    write_model(path, cfg)
    sim = Simulator(path, graph_text(cfg))
    ex = sim.make_executor()
    weights = {name: np.array(sim.model.tensor(name)) for name in sim.model.tensors}
    cache = [([], [])]
    rng = np.random.default_rng(0)
    steps = 40
    counts = []
    for _ in range(steps):
        x = rng.standard_normal((1, cfg.d)).astype(np.float32)
        ex.insert(x=x)
        ex.step()
        np.testing.assert_allclose(
            ex.fetch("y"), numpy_step(weights, cfg, x, cache), rtol=3e-4, atol=3e-4
        )
        counts.append(ex.stats["compilations"])
    # Only the attention region sees the growing cache: one compilation per bucket of the
    # ladder (1, 2, 4, ..., 64 this short; finer above LADDER_START), plus the fixed-shape
    # regions; the ladder has O(log n) buckets (tests/sim/test_values.py).
    buckets = len({bucket_size(n) for n in range(1, steps + 1)})
    assert buckets <= BUCKETS_PER_DOUBLING * math.ceil(math.log2(steps)) + 1
    fixed = counts[0] - 1
    assert counts[-1] <= fixed + buckets
    assert ex.stats["exact_fallbacks"] == 0
    # Steps inside one bucket never compile: lengths 21..32 share the bucket 32.
    assert bucket_size(21) == bucket_size(32) == 32
    assert counts[20] == counts[31]
    sim.model.close()


def test_without_bucketing_every_length_compiles(tmp_path: Path) -> None:
    cfg = Config(layers=1, d=16, heads=2)
    path = tmp_path / "gpt.oinf"
    write_model(path, cfg)
    sim = Simulator(path, graph_text(cfg), bucketing=False)
    ex = sim.make_executor()
    for _ in range(4):
        ex.insert(x=np.zeros((1, cfg.d), np.float32))
        ex.step()
    first = Simulator(path, graph_text(cfg)).make_executor()
    for _ in range(4):
        first.insert(x=np.zeros((1, cfg.d), np.float32))
        first.step()
    assert ex.stats["compilations"] > first.stats["compilations"]
    sim.model.close()


def test_a_second_executor_reuses_the_compiled_regions(tmp_path: Path) -> None:
    """Regression: per-executor param caches changed the wide-region cache key, so every new
    executor of one simulator recompiled every region (seen on SmolLM2: 4-17 s a bucket)."""
    cfg = Config(layers=2, d=16, heads=2)
    path = tmp_path / "gpt.oinf"
    write_model(path, cfg)
    sim = Simulator(path, graph_text(cfg))
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, cfg.d)).astype(np.float32) for _ in range(3)]
    outputs = []
    for _ in range(2):
        ex = sim.make_executor()
        for x in inputs:
            ex.insert(x=x)
            ex.step()
        outputs.append(ex.fetch("y"))
        if len(outputs) == 1:
            compiled_once = ex.stats["compilations"]
    assert compiled_once > 0
    # Statistics are per executor: the second one reuses the first one's executables.
    assert ex.stats["compilations"] == 0
    assert ex.stats["region_calls"] > 0
    np.testing.assert_array_equal(outputs[0], outputs[1])
    sim.model.close()
