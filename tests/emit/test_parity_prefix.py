"""Model tensors written during a step, in C vs the simulator over several steps.

A write into a prefix-table entry (`op ... >> W[l]`, `cache.read ... >> W[i]`,
`transfer ... >> W[i]`) overrides that entry for the rest of the step; the next step sees
the model tensor again (docs/semantics.md). Also the regression for volatile variables
linked to a model tensor: a node that writes one must not change the model's bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.emit import Synthesizer
from openinfer_jax.oinf import write_oinf
from tests.emit.harness import CC, build, parity, run_driver

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

GRAPH = """
graph {
  dynamic { x: f32[2, 4]; s: f32; j: i32; }
  volatile {
    W(l): f32[4, 4] @pattern("layer{l}.w");
    G(a, b): i16[3] @pattern("g.{b}.{a}");
    w0: f32[4, 4] @ref("layer0.w");
    h: f32[2, 4]; r0: f32[4, 4]; r1: f32[4, 4]; r2: f32[4, 4]; gsum: i16[3];
  }
  persistent { P: f32[4, 4]; }
  block entry {
    assign e: f32[4, 4];
    op add(x, x) >> h;
    loop layers (l in 0..3) {
      op matmul(h, W[l]) >> h;
      op mul(W[l], s) >> W[l];
      op add(W[0], W[l]) >> W[l];
      op matmul(h, W[l]) >> h;
    }
    op fill(e, value=s) >> e;
    cache.write e >> P;
    cache.read P >> W[1];
    transfer w0 >> W[2];
    op add(w0, e) >> w0;
    op add(W[0], W[1]) >> r0;
    op add(W[2], w0) >> r1;
    op mul(W[j], s) >> r2;
    op add(G[0, 1], G[1, j]) >> G[0, 1];
    op add(G[0, 1], G[1, 0]) >> gsum;
    return;
  }
}
"""


def _model(path: Path, rng: np.random.Generator) -> Path:
    tensors = {
        f"layer{i}.w": (rng.standard_normal((4, 4)) * 0.5).astype(np.float32) for i in range(3)
    }
    for a in range(2):
        for b in range(2):
            tensors[f"g.{b}.{a}"] = rng.integers(-1000, 1000, 3).astype(np.int16)
    write_oinf(path, sizevars={}, metadata={}, tensors=tensors)
    return path


def test_prefix_entry_writes_match_simulator(tmp_path: Path) -> None:
    rng = np.random.default_rng(21)
    model = _model(tmp_path / "m.oinf", rng)
    steps = [
        {"x": rng.standard_normal((2, 4)).astype(np.float32),
         "s": np.float32([0.5, -2.0, 1.5, 3.0][k]), "j": np.int32([0, 1, 1, 0][k])}
        for k in range(4)
    ]  # fmt: skip
    outputs = ["h", "r0", "r1", "r2", "gsum", "w0"]
    result = parity(tmp_path, model, GRAPH, steps, outputs=outputs)
    assert result["compared"] == 4 * len(outputs)
    source = result["plan"].files["prog.c"]
    assert "oi_prefix_W_write" in source and "OW_W_n = 0;" in source


TOO_MANY = """
graph {
  dynamic { x: f32[2]; n: i32; }
  volatile { W(l): f32[2] @pattern("W.{l}"); y: f32[2]; }
  block entry {
    loop fill_up (i in 0..n) { op add(x, x) >> W[i]; }
    op add(W[0], W[1]) >> y;
    return;
  }
}
"""


def test_entries_beyond_the_models_are_kept_until_the_slots_run_out(tmp_path: Path) -> None:
    """W.0 and W.1 are in the model: two slots. Writing W[0..2) matches the simulator
    (W[1] need not exist to be written); a third distinct entry fails with OI_ERR_INDEX."""
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={},
               tensors={"W.0": np.ones(2, np.float32), "W.1": np.full(2, 2.0, np.float32)})  # fmt: skip
    x = np.array([3.0, 4.0], np.float32)
    result = parity(tmp_path, model, TOO_MANY, [{"x": x, "n": np.int32(2)}, {"x": x, "n": np.int32(1)}],
                    outputs=["y"])  # fmt: skip
    assert result["compared"] == 2
    plan = Synthesizer("c").synthesize(model, TOO_MANY, name="prog", outputs=["y"])
    run = run_driver(build(plan, tmp_path / "c2"), model, [{"x": x, "n": np.int32(3)}], tmp_path)
    assert run.returncode == 1
    assert "prefix table W: a step overrides more than 2 entries" in run.stderr


def test_written_volatile_model_tensor_is_reset_every_step(tmp_path: Path) -> None:
    """Regression: a volatile variable linked to a model tensor that a node writes was used
    in place, so the write changed the model's bytes and the next step started from them."""
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={"w": np.arange(4, dtype=np.float32)})
    graph = """
graph {
  dynamic { x: f32[4]; }
  volatile { w: f32[4]; y: f32[4]; }
  block entry { op add(w, x) >> w; op mul(w, w) >> y; return; }
}
"""
    steps = [{"x": np.ones(4, np.float32)} for _ in range(3)]
    assert parity(tmp_path, model, graph, steps, outputs=["y", "w"])["compared"] == 6
