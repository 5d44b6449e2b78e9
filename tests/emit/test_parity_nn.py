"""Model-building ops in C vs the simulator: embedding and gather (negative and out-of-range
indices clamp), concat, attention with a bool mask and with a float mask plus causal."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.oinf import write_oinf
from tests.emit.harness import CC, parity

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

GRAPH = """
graph {
  dynamic {
    ids: i32[2, 3]; gi: i64[4]; ui: u8[3];
    q: f32[2, 2, 3, 4]; k: f32[2, 2, 5, 4]; v: f32[2, 2, 5, 4];
    mb: bool[2, 1, 1, 5]; mf: f32[3, 5]; a: f32[2, 3]; b: f32[2, 5];
  }
  constant { table: f32[V, D]; }
  volatile {
    e: f32[2, 3, D]; g: f32[4, D]; g1: f32[2, 4]; g2: f32[3, D];
    o1: f32[2, 2, 3, 4]; o2: f32[2, 2, 3, 4]; c: f32[2, 8];
  }
  block entry {
    op embedding(table, ids) >> e;
    op gather(table, gi, axis=0) >> g;
    op gather(a, gi, axis=1) >> g1;
    op gather(table, ui) >> g2;
    op attention(q, k, v, mb) >> o1;
    op attention(q, k, v, mf, causal=true) >> o2;
    op concat(a, b, axis=1) >> c;
    return;
  }
}
"""


def test_nn_ops_match_simulator(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    model = tmp_path / "m.oinf"
    write_oinf(
        model,
        sizevars={"V": 10, "D": 8},
        metadata={},
        tensors={"table": rng.standard_normal((10, 8)).astype(np.float32)},
    )

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    steps = [
        {
            "ids": rng.integers(-12, 12, (2, 3)).astype(np.int32),
            "gi": rng.integers(-5, 5, 4).astype(np.int64),
            "ui": rng.integers(0, 255, 3).astype(np.uint8),
            "q": f32(2, 2, 3, 4),
            "k": f32(2, 2, 5, 4),
            "v": f32(2, 2, 5, 4),
            "mb": rng.integers(0, 2, (2, 1, 1, 5)).astype(bool),
            "mf": f32(3, 5),
            "a": f32(2, 3),
            "b": f32(2, 5),
        }
        for _ in range(2)
    ]
    result = parity(tmp_path, model, GRAPH, steps, outputs=["e", "g", "g1", "g2", "o1", "o2", "c"])
    assert result["compared"] == 14
