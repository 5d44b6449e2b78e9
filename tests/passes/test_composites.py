"""The composite-expansion pass (openinfer_jax/passes/composites.py) and its entry points: the
simulator and the synthesizer run it after validating the user's graph; expanded nodes keep
the user's node location and name their temporaries after it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openinfer_jax.core.errors import GraphValidationError
from openinfer_jax.emit import Synthesizer
from openinfer_jax.ir.nodes import Assign, Loop, Node, Op
from openinfer_jax.oinf import write_oinf
from openinfer_jax.ops import registry
from openinfer_jax.ops.composite import Builder, composite
from openinfer_jax.ops.elementwise import input_specs
from openinfer_jax.ops.registry import FLOAT
from openinfer_jax.passes import prepare
from openinfer_jax.passes.composites import expand_composites
from openinfer_jax.sim import Simulator
from openinfer_jax.trace import parse

GRAPH = """graph {
  dynamic { x: f32[2, 1, 3]; s: f32[1]; b: f32[1]; }
  volatile { y: f32[2, 1, 3]; z: f32[2, 3]; }
  block entry {
    loop layers (l in 0..2) {
      op instance_norm(x, s, b) >> y;
    }
    op squeeze(y, axes=[1]) >> z;
    return;
  }
}"""


def _walk(nodes: Sequence[Node]) -> Iterator[Node]:
    for node in nodes:
        yield node
        if isinstance(node, Loop):
            yield from _walk(node.body)


def test_composite_nodes_become_registry_ops_with_the_users_location() -> None:
    graph = parse(GRAPH)
    expanded, report, temporaries = expand_composites(graph, None)
    nodes = list(_walk(expanded.blocks[0].nodes))
    ops = [n for n in nodes if isinstance(n, Op)]
    assert all(registry.get(n.op).composite is None for n in ops)  # type: ignore[union-attr]
    assert [n.op for n in ops] == ["layer_norm", "reshape", "mul", "reshape", "add", "reshape"]
    loop = next(n for n in nodes if isinstance(n, Loop))
    assert {n.loc.line for n in loop.body if n.loc} == {6}  # type: ignore[union-attr]
    assert ops[-2].output.name == "y" and ops[-1].output.name == "z"  # last ops write the outputs
    temps = {n.name for n in nodes if isinstance(n, Assign)}
    assert temps == set(temporaries)
    assert all(t.startswith("y__") for t in temps)
    assert report == [
        "6:7: op instance_norm >> y -> layer_norm, reshape, mul, reshape, add",
        "8:5: op squeeze >> z -> reshape",
    ]


def test_a_graph_without_composites_is_returned_unchanged() -> None:
    graph = parse("graph { dynamic { x: f32[2]; } volatile { y: f32[2]; } "
                  "block entry { op exp(x) >> y; return; } }")  # fmt: skip
    same, report, _ = expand_composites(graph, None)
    assert same is graph and not report


def test_the_simulator_runs_the_expansion_and_traces_name_the_users_output() -> None:
    sim = Simulator(None, GRAPH).with_trace()
    assert sim.user_graph is not sim.graph and sim.pass_report.expanded
    ex = sim.make_executor()
    x = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    ex.insert(x=x, s=np.array([2.0], np.float32), b=np.array([1.0], np.float32))
    ex.step()
    centered = x - x.mean(axis=2, keepdims=True)
    want = centered / np.sqrt((centered**2).mean(axis=2, keepdims=True) + 1e-5) * 2.0 + 1.0
    np.testing.assert_allclose(np.asarray(ex.fetch("z")), want.reshape(2, 3), rtol=1e-5)
    descs = [e.node_desc for e in ex.trace() if e.kind == "OpExecute"]
    assert any(d.startswith("op layer_norm(x, axis=2") and d.endswith(">> y__layer_norm0")
               for d in descs), descs  # fmt: skip


def test_the_emitter_keeps_temporaries_out_of_the_default_outputs(tmp_path: Path) -> None:
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    plan = Synthesizer("c").synthesize(model, GRAPH, name="prog")
    assert set(plan.outputs) == {"x", "s", "b", "y", "z"}


def test_a_composite_of_composites_expands_fully() -> None:
    def expand(b: Builder, inputs: Sequence[Any], params: Mapping[str, Any]) -> Any:
        (x,) = inputs
        return b.op("unsqueeze", b.op("squeeze", x, axes=(0,)), axes=(0,))

    opdef = composite("test_roundtrip", "test", input_specs("x", FLOAT), expand,
                      shape_rule=lambda shapes, params: shapes[0])  # fmt: skip
    try:
        graph = parse("graph { dynamic { x: f32[1, 4]; } volatile { y: f32[1, 4]; } "
                      "block entry { op test_roundtrip(x) >> y; return; } }")  # fmt: skip
        expanded, _ = prepare(graph, None)
        assert [n.op for n in expanded.blocks[0].nodes if isinstance(n, Op)] == ["reshape"] * 2
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        np.testing.assert_array_equal(opdef.reference(x), x)
        np.testing.assert_array_equal(np.asarray(opdef.lower_jax(x)), x)
    finally:
        registry._REGISTRY.pop("test_roundtrip")


def test_unresolved_input_sizes_are_reported_on_the_node() -> None:
    graph = parse("graph { dynamic { x: f32[B, 1]; } volatile { y: f32[B]; } "
                  "block entry { op squeeze(x, axes=[1]) >> y; return; } }")  # fmt: skip
    with pytest.raises(
        GraphValidationError, match=r"squeeze needs the sizes of its inputs.*\[B, 1\]"
    ):
        expand_composites(graph, None)


def test_validation_skipped_still_reports_the_users_node() -> None:
    text = "graph {\n  dynamic { x: f32[2, 3]; }\n  volatile { y: f32[3]; }\n" \
           "  block entry { op squeeze(x, axes=[0]) >> y; return; }\n}"  # fmt: skip
    with pytest.raises(GraphValidationError, match=r"4:17.*squeeze: dim 0 of x \(2, 3\)"):
        Simulator(None, text, validate=False)


def test_the_vulkan_target_runs_every_expanded_node_on_the_gpu(tmp_path: Path) -> None:
    """strict=True: any op node that would stay on the host is an error."""
    text = """graph {
  dynamic { x: f32[2, 4, 3]; s: f32[4]; xs: f32[2, 5]; w: f32[12, 5]; r: f32[12, 3]; }
  volatile { y: f32[2, 4, 3]; z: f32[2, 4, 3]; st: f32[2, 2, 3]; }
  block entry {
    op group_norm(x, s, s, num_groups=2) >> y;
    op softsign(y) >> z;
    op lstm_cell(xs, w, r, st) >> st;
    return;
  }
}"""
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    plan = Synthesizer("vulkan").synthesize(model, text, name="prog", strict=True)
    assert plan.vulkan.gpu > 20 and not plan.vulkan.host  # type: ignore[attr-defined]
