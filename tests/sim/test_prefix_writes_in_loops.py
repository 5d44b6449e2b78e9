"""Writes into prefix-table entries (`>> W[l]`) inside a loop: a transfer, an op and a
cache.read each override the entry for the rest of the step on every device, like the
NumPy interpreter (the wide-region path once dropped the index of transfer/cache.read)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openinfer_jax import Simulator, write_oinf

PROGRAM = """
graph {
  dynamic { x: f32[D]; }
  volatile { W(l): f32[D] @pattern("W.{l}"); }
  persistent { C(t): f32[D] @table; }
  block entry {
    assign y: f32[D];
    assign z: f32[D];
    cache.write x >> C[0];
    loop layers (l in 0..2) {
      WRITE
    }
    op add(W[0], W[1]) >> y;
    op mul(W[1], x) >> z;
    return;
  }
}
"""
WRITES = {
    "transfer": "transfer x >> W[l];",
    "op": "op mul(x, x) >> W[l];",
    "cache.read": "cache.read C[0] >> W[l];",
}


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_prefix_entry_writes_in_a_loop_match_the_interpreter(kind: str, tmp_path: Path) -> None:
    model = tmp_path / "w.oinf"
    write_oinf(model, sizevars={"D": 4},
               tensors={"W.0": np.full(4, 5, np.float32), "W.1": np.full(4, 7, np.float32)})  # fmt: skip
    program = PROGRAM.replace("WRITE", WRITES[kind])
    x = np.arange(1, 5, dtype=np.float32)
    results = {}
    for device in ("cpu", "numpy"):
        ex = Simulator(model, program, device=device).make_executor()
        for _ in range(2):  # the second step sees the model's entries again
            ex.insert(x=x)
            ex.step()
        results[device] = (np.asarray(ex.fetch("y")), np.asarray(ex.fetch("z")))
    written = x * x if kind == "op" else x
    np.testing.assert_array_equal(results["numpy"][0], 2 * written)
    for got, want in zip(results["cpu"], results["numpy"]):
        np.testing.assert_array_equal(got, want)
