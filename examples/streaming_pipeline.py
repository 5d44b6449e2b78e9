"""Streaming pipeline with yield/await: entry hands `frame` to two consumer blocks.

`denoise` mutates the frame (so its result comes back at `await`), `stats` only reads it
(its own writes stay in its snapshot). The trace shows the schedule: entry's yield, then
each consumer in declaration order, then entry's await. Run: `python examples/streaming_pipeline.py`.
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
    scale: f32[N];
    frame: f32[N];
    energy: f32;
    out: f32[N];
  }
  block entry {
    op mul(x, scale) >> frame;
    yield frame;
    op mul(x, x) >> out;
    await frame;
    op add(out, frame) >> out;
    return;
  }
  block denoise {
    await frame;
    op relu(frame) >> frame;
    yield frame;
  }
  block stats {
    await frame;
    op sum_axis(frame, axes=[0]) >> energy;
    yield frame;
  }
}
"""


def main() -> int:
    """Run three frames and check each against NumPy."""
    rng = np.random.default_rng(4)
    scale = rng.uniform(0.5, 2.0, 8).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "stream.oinf"
        write_oinf(path, sizevars={"N": 8}, metadata={}, tensors={"scale": scale})
        sim = Simulator(path, GRAPH).with_trace()
        ex = sim.make_executor()
        for _ in range(3):
            x = rng.standard_normal(8).astype(np.float32)
            ex.insert(x=x)
            ex.step()
            np.testing.assert_allclose(ex.fetch("out"), x * x + np.maximum(x * scale, 0), rtol=1e-6)
            # `stats` wrote `energy` in its own snapshot only: entry's copy stays zero.
            assert ex.fetch("energy") == 0.0
        schedule = [f"{e.block_name}:{e.kind}" for e in ex.trace() if e.step == 2]
        sim.model.close()
    assert schedule.index("entry:Yield") < schedule.index("denoise:Await") < schedule.index("stats:Await")
    assert schedule.index("stats:Yield") < schedule.index("entry:Await")
    print("schedule of the last step: " + " -> ".join(schedule))
    return 0


if __name__ == "__main__":
    sys.exit(main())
