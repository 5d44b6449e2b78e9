"""Yield and await inside a loop of `entry`, in C vs the simulator over several steps.

A consumer runs at the first yield (in any iteration) after which everything it awaits has
been yielded, once per step, on snapshots of what it writes; every later `await` of a
variable it mutated takes its result again (docs/semantics.md). The C target decides this at
run time when a yield of entry is inside a loop (per-consumer flags, a bit per variable).
"""

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
  dynamic { x0: f32[4]; n: i32; }
  volatile { x: f32[4]; y: f32[4]; z: f32[4]; one: f32 @init(1.0); }
  block entry {
    op add(x0, x0) >> x;
    op mul(x0, x0) >> z;
    loop l (i in 0..n) {
      yield x;
      await x;
      op add(x, one) >> x;
    }
    yield z;
    await z;
    op add(x, z) >> y;
    return;
  }
  block doubler { await x; op add(x, x) >> x; yield x; }
  block late { await x, z; op mul(z, x) >> z; yield x, z; }
}
"""


def test_yield_inside_a_loop_matches_simulator(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    # n = 0: the loop never yields x, so neither consumer runs; n > 1: later awaits of x take
    # the result `doubler` computed in the first iteration again.
    steps = [
        {"x0": rng.standard_normal(4).astype(np.float32), "n": np.int32(n)} for n in (3, 0, 1, 2)
    ]
    result = parity(tmp_path, model, GRAPH, steps, outputs=["x", "y", "z"])
    assert result["compared"] == 12
    source = result["plan"].files["prog.c"]
    assert "if (!oi_ran_doubler" in source and "oi_yielded = 0;" in source
