"""Stability guard: `is_finite` on the activations' sum (NaN/inf anywhere poisons it), then `branch ok bad`.

When the input holds a NaN/inf, the `bad` block zero-fills the output instead of letting
it propagate. Run: `python examples/stability_guard.py`.
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
  dynamic { x: f32[N]; }
  volatile {
    w: f32[N];
    h: f32[N];
    total: f32;
    ok_all: bool;
  }
  block entry {
    op mul(x, w) >> h;
    op sum_axis(h, axes=[0]) >> total;
    op is_finite(total) >> ok_all;
    branch ok_all ok bad;
    return;
  }
  block ok {
    op relu(h) >> h;
    return;
  }
  block bad {
    op fill(h, value=0.0) >> h;
    return;
  }
}
"""


def main() -> int:
    """A clean input passes through relu; a poisoned one is zeroed."""
    w = np.linspace(0.5, 1.5, 6).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "guard.oinf"
        write_oinf(path, sizevars={"N": 6}, metadata={}, tensors={"w": w})
        sim = Simulator(path, GRAPH).with_trace()
        ex = sim.make_executor()
        clean = np.array([1, -2, 3, -4, 5, -6], np.float32)
        ex.insert(x=clean)
        ex.step()
        np.testing.assert_allclose(ex.fetch("h"), np.maximum(clean * w, 0))
        poisoned = clean.copy()
        poisoned[2] = np.nan
        ex.insert(x=poisoned)
        ex.step()
        np.testing.assert_array_equal(ex.fetch("h"), np.zeros(6, np.float32))
        taken = [e.output[0] for e in ex.trace() if e.kind == "Branch"]
        sim.model.close()
    assert taken == ["ok", "bad"], taken
    print(f"guard took branches {taken}: clean input kept, NaN input zeroed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
