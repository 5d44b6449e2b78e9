"""Preloaded prefix-table entries (emitted Vulkan) are only model tensors that fit the table."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from openinfer_jax.emit.analysis import analyze
from openinfer_jax.emit.device import host_arch
from openinfer_jax.emit.vk_variants import prefix_counts
from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.trace import parse

GRAPH = """
graph {
  dynamic { x: f32[4]; }
  constant { B(l): f32[4] @pattern("blocks.{l}.b"); }
  block entry {
    assign h: f32[4];
    transfer x >> h;
    loop layers (l in 1..3) { op add(h, B[l]) >> h; }
    return;
  }
}
"""


def test_entry_of_another_shape_is_not_preloaded(tmp_path: Path) -> None:
    # An importer's loop over blocks 1..2 whose block 0 (outside the loop) is wider: entry 0
    # of the pattern exists but is not an entry of this table.
    tensors = {f"blocks.{i}.b": np.full(8 if i == 0 else 4, i, np.float32) for i in range(3)}
    write_oinf(tmp_path / "m.oinf", tensors=tensors)
    with ModelLoader.open(tmp_path / "m.oinf") as model:
        an = analyze(parse(GRAPH), model, host_arch("vulkan"))
        assert prefix_counts(an, model) == {}
    tensors["blocks.0.b"] = np.zeros(4, np.float32)
    write_oinf(tmp_path / "m.oinf", tensors=tensors)
    with ModelLoader.open(tmp_path / "m.oinf") as model:
        an = analyze(parse(GRAPH), model, host_arch("vulkan"))
        assert prefix_counts(an, model) == {"B": 3}
