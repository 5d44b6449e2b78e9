"""Minimal (seed 002): `y = 5 * (x + a)` with a volatile `y @init(5.0)` and a model tensor `a`.

Run: `python examples/minimal.py`. Writes the model with the real OinfWriter, runs one
step, and checks the result against NumPy.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.sim import Simulator

GRAPH = """
graph {
  dynamic { x: f32[B]; }
  volatile {
    a: f32[B];
    y: f32[B] @init(5.0);
  }
  block entry {
    assign t0: f32[B];
    op add(x, a) >> t0;
    op mul(y, t0) >> y;
    return;
  }
}
"""


def main() -> int:
    """Build the model, run one step, compare with NumPy."""
    rng = np.random.default_rng(0)
    a = rng.uniform(-10, 10, 1024).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "minimal.oinf"
        write_oinf(path, sizevars={"B": 1024}, metadata={}, tensors={"a": a})
        with ModelLoader.open(path) as model:
            sim = Simulator(model, GRAPH)
            ex = sim.make_executor()
            x = rng.uniform(-10, 10, model.size_of("B")).astype(np.float32)
            ex.insert(x=x)
            ex.run_step()
            y = ex.fetch("y")
    np.testing.assert_allclose(y, 5.0 * (x + a), rtol=1e-6)
    print(f"y[0..4] = {y[:4]}  (matches 5 * (x + a))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
