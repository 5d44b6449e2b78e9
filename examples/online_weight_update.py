"""Online weight update in persistent memory: one SGD step on a linear model per inference step.

`W` lives in persistent memory (initialized from the model tensor `W`): each step reads it
with cache.read, predicts, computes the gradient of the squared error and writes the
updated weight back with cache.write. Run: `python examples/online_weight_update.py`.
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
  dynamic { x: f32[1, D]; target: f32[1, 1]; }
  constant { lr: f32[1, 1]; }
  persistent { W: f32[D, 1]; }
  volatile {
    w: f32[D, 1];
    pred: f32[1, 1];
    err: f32[1, 1];
    xt: f32[D, 1];
    grad: f32[D, 1];
  }
  block entry {
    cache.read W >> w;
    op matmul(x, w) >> pred;
    op sub(pred, target) >> err;
    op transpose(x) >> xt;
    op matmul(xt, err) >> grad;
    op mul(grad, lr) >> grad;
    op sub(w, grad) >> w;
    cache.write w >> W;
    return;
  }
}
"""


def main() -> int:
    """Learn y = x . true_w online; check every update against NumPy and that the loss falls."""
    rng = np.random.default_rng(6)
    d = 4
    true_w = rng.standard_normal((d, 1)).astype(np.float32)
    w0 = np.zeros((d, 1), np.float32)
    lr = np.full((1, 1), 0.1, np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "online.oinf"
        write_oinf(path, sizevars={"D": d}, metadata={}, tensors={"W": w0, "lr": lr})
        sim = Simulator(path, GRAPH)
        ex = sim.make_executor()
        w = w0.astype(np.float64)
        for _ in range(200):
            x = rng.standard_normal((1, d)).astype(np.float32)
            y = x @ true_w
            ex.insert(x=x, target=y)
            ex.step()
            w = w - 0.1 * x.T @ (x @ w - y)
            np.testing.assert_allclose(ex.fetch("W"), w, rtol=1e-4, atol=1e-5)
        learned = ex.fetch("W")
        sim.model.close()
    assert np.abs(learned - true_w).max() < 1e-2
    print(f"after 200 online updates |W - true_w|max = {np.abs(learned - true_w).max():.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
