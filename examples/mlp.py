"""MLP regression: matmul + add + relu, two layers, written with the Python builder.

Run: `python examples/mlp.py`. Checks the output against NumPy.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from openinfer_jax.oinf import write_oinf
from openinfer_jax.sim import Simulator
from openinfer_jax.trace.builder import GraphBuilder


def build_graph():
    """x[B, I] -> relu(x W1 + b1) W2 + b2 -> y[B, O]."""
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B", "I")
    w1 = g.constant("w1", "f32", "I", "H")
    b1 = g.constant("b1", "f32", "H")
    w2 = g.constant("w2", "f32", "H", "O")
    b2 = g.constant("b2", "f32", "O")
    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "H")
        y = b.assign("y", "f32", "B", "O")
        b.op.matmul(x, w1) >> h
        b.op.add(h, b1) >> h
        b.op.relu(h) >> h
        b.op.matmul(h, w2) >> y
        b.op.add(y, b2) >> y
        b.return_()
    return g.build()


def main() -> int:
    """Run one batch and compare with NumPy."""
    rng = np.random.default_rng(1)
    sizes = {"B": 8, "I": 16, "H": 32, "O": 4}
    weights = {
        "w1": rng.standard_normal((16, 32)).astype(np.float32) * 0.3,
        "b1": rng.standard_normal(32).astype(np.float32) * 0.1,
        "w2": rng.standard_normal((32, 4)).astype(np.float32) * 0.3,
        "b2": rng.standard_normal(4).astype(np.float32) * 0.1,
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mlp.oinf"
        write_oinf(path, sizevars=sizes, metadata={}, tensors=weights)
        sim = Simulator(path, build_graph())
        ex = sim.make_executor()
        x = rng.standard_normal((8, 16)).astype(np.float32)
        ex.insert(x=x)
        ex.step()
        y = ex.fetch("y")
        sim.model.close()
    want = np.maximum(x @ weights["w1"] + weights["b1"], 0) @ weights["w2"] + weights["b2"]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    print(f"mlp output {y.shape} matches NumPy; y[0] = {y[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
