"""Residual MLP stack: `h = h + relu(h W[l])` over `num_layers` layers of a `W.{l}` prefix table.

Written with the Python builder; `num_layers` is a constant scalar taken from the model's
metadata and `W(l)` resolves `W[l]` to the model tensor `W.{l}` per index.
Run: `python examples/residual_mlp_stack.py`. Checks against NumPy.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from openinfer_jax.oinf import write_oinf
from openinfer_jax.sim import Simulator
from openinfer_jax.trace.builder import GraphBuilder

LAYERS = 6


def build_graph():
    """The stack as IR."""
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B", "D")
    W = g.volatile("W", "f32", "D", "D", index="l", pattern="W.{l}")
    num_layers = g.constant("num_layers", "u32")
    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "D")
        t = b.assign("t", "f32", "B", "D")
        b.transfer(x) >> h
        with b.loop("layers", "l", 0, num_layers) as layer:
            b.op.matmul(h, W[layer]) >> t
            b.op.relu(t) >> t
            b.op.add(h, t) >> h
        b.return_()
    return g.build()


def main() -> int:
    """Run one step and compare with NumPy."""
    rng = np.random.default_rng(2)
    weights = {f"W.{i}": (rng.standard_normal((16, 16)) * 0.2).astype(np.float32) for i in range(LAYERS)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "stack.oinf"
        write_oinf(path, sizevars={"B": 4, "D": 16}, metadata={"num_layers": LAYERS}, tensors=weights)
        sim = Simulator(path, build_graph()).with_trace()
        ex = sim.make_executor()
        x = rng.standard_normal((4, 16)).astype(np.float32)
        ex.insert(x=x)
        ex.step()
        h = ex.fetch("h")
        loaded = [name for ev in ex.trace() for name in ev.loaded]
        sim.model.close()
    want = x.astype(np.float64)
    for i in range(LAYERS):
        want = want + np.maximum(want @ weights[f"W.{i}"], 0)
    np.testing.assert_allclose(h, want, rtol=1e-4, atol=1e-4)
    assert loaded == [f"W.{i}" for i in range(LAYERS)], loaded  # lazily, in layer order
    print(f"{LAYERS} residual layers match NumPy; weights loaded lazily: {', '.join(loaded)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
