"""Mixture-of-experts routing with branch: a gate picks expert 0 or 1 per step.

The gate score `x . g` is compared with 0 (`gt`) into a bool scalar `route`, and
`branch route expert0 expert1` runs one expert block as a call. Run: `python examples/moe_routing.py`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from openinfer_jax.oinf import write_oinf
from openinfer_jax.sim import Simulator

GRAPH = """
graph {
  dynamic { x: f32[1, D]; }
  constant {
    gate: f32[D, 1];
    zero: f32 @init(0.0);
    E0: f32[D, D];
    E1: f32[D, D];
  }
  volatile {
    score: f32[1, 1];
    s: f32;
    route: bool;
    y: f32[1, D];
  }
  block entry {
    op matmul(x, gate) >> score;
    op reshape(score, shape=[]) >> s;
    op gt(s, zero) >> route;
    branch route expert0 expert1;
    op relu(y) >> y;
    return;
  }
  block expert0 {
    op matmul(x, E0) >> y;
    return;
  }
  block expert1 {
    op matmul(x, E1) >> y;
    return;
  }
}
"""


def main() -> int:
    """Route 8 random tokens and check each against NumPy."""
    rng = np.random.default_rng(5)
    d = 8
    tensors = {
        "gate": rng.standard_normal((d, 1)).astype(np.float32),
        "E0": rng.standard_normal((d, d)).astype(np.float32),
        "E1": rng.standard_normal((d, d)).astype(np.float32),
    }
    routes = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "moe.oinf"
        write_oinf(path, sizevars={"D": d}, metadata={}, tensors=tensors)
        sim = Simulator(path, GRAPH)
        ex = sim.make_executor()
        for _ in range(8):
            x = rng.standard_normal((1, d)).astype(np.float32)
            ex.insert(x=x)
            ex.step()
            expert = "E0" if (x @ tensors["gate"]).item() > 0 else "E1"
            routes.append(expert)
            np.testing.assert_allclose(ex.fetch("y"), np.maximum(x @ tensors[expert], 0), rtol=1e-5, atol=1e-5)
        sim.model.close()
    assert len(set(routes)) == 2, "both experts should be exercised"
    print(f"routed 8 tokens: {' '.join(routes)}; every output matches NumPy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
