"""The emitted C names a node by the program's own text (ir.printer.describe_node), params
included: a failing `relu(h, clamp_max=6.0)` must not read as `relu(h)`."""

from __future__ import annotations

from pathlib import Path

from openinfer_jax.emit import Synthesizer
from openinfer_jax.oinf import write_oinf

GRAPH = """
graph {
  dynamic { x: f32[4]; }
  volatile { h: f32[4]; }
  block entry {
    op relu(x, clamp_max=6.0) >> h;
    return;
  }
}
"""


def test_emitted_messages_quote_the_node_with_its_params(tmp_path: Path) -> None:
    model = tmp_path / "m.oinf"
    write_oinf(model)
    plan = Synthesizer("c").synthesize(model, GRAPH)
    source = "".join(plan.files.values())
    assert "node `op relu(x, clamp_max=6.0) >> h`" in source
    assert "op relu(x) >> h" not in source


def test_string_params_stay_inside_the_c_string(tmp_path: Path) -> None:
    model = tmp_path / "m.oinf"
    write_oinf(model)
    graph = """graph { dynamic { x: f32[4]; } volatile { h: i32[4]; }
      block entry { op cast(x, to=i32, rounding_mode="nearest") >> h; return; } }"""
    source = "".join(Synthesizer("c").synthesize(model, graph).files.values())
    assert "node `op cast(x, to=i32, rounding_mode='nearest') >> h`" in source
