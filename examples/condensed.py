"""The seed 001 condensed example, every component in one program, on a generated model.

Same structure as the seed's README: a dynamic input, a volatile `W(l)` prefix table, a
constant `alpha` linked with `@ref` and `num_layers` from metadata, a persistent counter and
a `K(l, t)` cache table, relu with settings, a barrier, a loop reading and writing the
cache, `is_finite` + `branch ok bad`, `cache.increment`. Deviations, so that it runs and
checks: shapes made consistent (`x: f32[B, D]`, `K: f32[B, D]` entries, no f16/f32 mix),
the `ok` block ends with `return` (the seed's `yield h` in a branch target has no consumer).
Run: `python examples/condensed.py`.
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
  dynamic { x: f32[B, D]; }
  volatile { W(l): f32[D, D] @pattern("W.{l}"); }
  constant { alpha: f32 @ref("alpha_value"); num_layers: u32; }
  persistent {
    step: i32 @init(0);
    K(l, t): f32[B, D] @table;
  }

  block entry {
    assign h: f32[B, D];
    assign k: f32[B, D];
    assign total: f32;
    assign cond: bool;

    op matmul(x, W[0]) >> h;
    op relu(h, negative_slope=0.01, clamp_max=6.0) >> h;
    barrier;

    loop layers (l in 0..num_layers) {
      cache.read K[l, step] >> k;
      op add(h, k) >> h;
      op matmul(h, W[l]) >> h;
      cache.write h >> K[l, step];
    }

    op sum_axis(h) >> total;
    op is_finite(total) >> cond;
    branch cond ok bad;
    cache.increment step;
    return;
  }

  block ok {
    op add(h, alpha) >> h;
    return;
  }

  block bad {
    op fill(h, value=0.0) >> h;
    return;
  }
}
"""


def reference(x: np.ndarray, weights: dict[str, np.ndarray], layers: int, alpha: float) -> np.ndarray:
    """The same program in NumPy (the cache entries it reads were never written: zeros)."""
    h = x.astype(np.float64) @ weights["W.0"]
    h = np.clip(np.where(h < 0, 0.01 * h, h), None, 6.0)
    for layer in range(layers):
        h = h @ weights[f"W.{layer}"]
    return h + alpha if np.isfinite(h.sum()) else np.zeros_like(h)


def main() -> int:
    """Two steps; outputs vs NumPy, the cache and the counter grow."""
    rng = np.random.default_rng(62846)
    b, d, layers, alpha = 2, 8, 3, 0.5
    weights = {f"W.{layer}": (rng.standard_normal((d, d)) * 0.4).astype(np.float32) for layer in range(layers)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.oinf"
        write_oinf(
            path,
            sizevars={"B": b, "D": d},
            metadata={"num_layers": layers},
            tensors={**weights, "alpha_value": np.float32(alpha)},
        )
        sim = Simulator(path, GRAPH).with_trace().with_timer()
        ex = sim.make_executor()
        for _ in range(2):
            x = rng.uniform(-10, 10, (b, d)).astype(np.float32)
            ex.insert(x=x)
            ex.run_step()
            np.testing.assert_allclose(ex.fetch("h"), reference(x, weights, layers, alpha), rtol=1e-4, atol=1e-4)
        assert int(ex.fetch("step")) == 2
        assert ex.fetch("K").shape == (layers, 2, b, d)
        kinds = sorted({e.kind for e in ex.trace()})
        sim.model.close()
    print(f"2 steps match NumPy; K is {layers}x2 entries; trace kinds: {', '.join(kinds)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
