"""Quantized linear layer: i4 activations x i4 weights, accumulated in i32 (`acc=[i32, i32]`).

The weight is stored packed (two i4 values per byte) in the .oinf; the simulator holds it
unpacked as int8. The i32 result is dequantized with the per-tensor scales kept as model
metadata (`x_scale`, `w_scale`, constant scalars). Run: `python examples/quantized_linear.py`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from openinfer_jax.oinf import DType, OinfWriter
from openinfer_jax.sim import Simulator

GRAPH = """
graph {
  dynamic { xq: i4[B, I]; }
  constant {
    wq: i4[I, O];
    x_scale: f32;
    w_scale: f32;
  }
  volatile {
    acc: i32[B, O];
    y: f32[B, O];
  }
  block entry {
    op matmul(xq, wq, acc=[i32, i32]) >> acc;
    op cast(acc, to=f32) >> y;
    op mul(y, x_scale) >> y;
    op mul(y, w_scale) >> y;
    return;
  }
}
"""


def main() -> int:
    """Quantize random data, run the integer matmul, compare with NumPy exactly."""
    rng = np.random.default_rng(7)
    b, i, o = 4, 32, 8
    w = rng.standard_normal((i, o)).astype(np.float32)
    x = rng.standard_normal((b, i)).astype(np.float32)
    w_scale = float(np.abs(w).max() / 7)
    x_scale = float(np.abs(x).max() / 7)
    wq = np.clip(np.round(w / w_scale), -8, 7).astype(np.int8)
    xq = np.clip(np.round(x / x_scale), -8, 7).astype(np.int8)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "quant.oinf"
        with OinfWriter(path, overwrite=True) as writer:
            for name, value in (("B", b), ("I", i), ("O", o)):
                writer.add_sizevar(name, value)
            writer.add_metadata("x_scale", x_scale)
            writer.add_metadata("w_scale", w_scale)
            writer.add_tensor("wq", wq, dtype=DType.I4)
        size = path.stat().st_size
        sim = Simulator(path, GRAPH)
        ex = sim.make_executor()
        ex.insert(xq=xq)
        ex.step()
        acc, y = ex.fetch("acc"), ex.fetch("y")
        sim.model.close()
    want_acc = xq.astype(np.int32) @ wq.astype(np.int32)
    np.testing.assert_array_equal(acc, want_acc)  # integer accumulation is exact
    np.testing.assert_allclose(y, want_acc * np.float32(x_scale) * np.float32(w_scale), rtol=1e-6)
    err = np.abs(y - x @ w).max() / np.abs(x @ w).max()
    print(f"i4 x i4 -> i32 matmul exact; dequantized relative error vs f32 {err:.3f}; model {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
