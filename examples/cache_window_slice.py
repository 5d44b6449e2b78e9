"""Sliding window over a cache slice: the mean of the last W inserted vectors.

Every step appends `x` to the persistent table `A(t)`, then reads the window
`A[start..end]` where start = max(0, count - W) is computed by ops (max/min clamps on i32
scalars) and read back from the cache. Run: `python examples/cache_window_slice.py`.
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
  dynamic { x: f32[D]; }
  volatile {
    window: i32 @init(3);
    zero: i32 @init(0);
    start: i32;
    end: i32;
    win: f32[3, D];
    avg: f32[D];
  }
  persistent {
    count: i32 @init(0);
    A(t): f32[D] @table;
  }
  block entry {
    cache.write x >> A[count];
    cache.increment count;
    cache.read count >> end;
    op sub(end, window) >> start;
    op max(start, zero) >> start;
    cache.read A[start..end] >> win;
    op mean_axis(win, axes=[0]) >> avg;
    return;
  }
}
"""


def main() -> int:
    """Stream 7 vectors; after each, the average of the last 3 must match NumPy."""
    rng = np.random.default_rng(3)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "window.oinf"
        write_oinf(path, sizevars={"D": 5}, metadata={}, tensors={})
        sim = Simulator(path, GRAPH)
        ex = sim.make_executor()
        seen = []
        for _ in range(7):
            x = rng.standard_normal(5).astype(np.float32)
            seen.append(x)
            ex.insert(x=x)
            ex.step()
            np.testing.assert_allclose(ex.fetch("avg"), np.mean(seen[-3:], axis=0), rtol=1e-5, atol=1e-6)
            assert ex.fetch("win").shape == (min(len(seen), 3), 5)
        sim.model.close()
    print(f"sliding window mean matches NumPy over {len(seen)} steps; compilations: {ex.stats['compilations']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
