"""Validation: valid programs pass, model links resolve, and bad input only ever raises
GraphValidationError (property tests over random and mutated graphs)."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import GraphValidationError
from openinfer_jax.ir.nodes import Block, Graph, Loop, MemoryKind, Node, Op, VarRef
from openinfer_jax.ir.validate import ValidationErrors, check, infer_var_types, validate
from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.ops import registry
from openinfer_jax.trace import parse, parse_file
from openinfer_jax.trace.builder import GraphBuilder

from .strategies import graphs

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"

DECODE = """
graph {
  dynamic { x: f32[B, D]; }
  constant {
    num_layers: u32;
    Wq(l): f32[D, D] @pattern("layers.{l}.wq");
  }
  persistent {
    step: i32 @init(0);
    K(l, t): f32[B, D] @table @fixed(t=64);
  }
  block entry {
    assign h: f32[B, D];
    assign q: f32[B, D];
    assign ok: bool;
    assign total: f32;
    transfer x >> h;
    loop layers (l in 0..num_layers) {
      op matmul(h, Wq[l]) >> q;
      dep after(matmul) before(cache.write);
      cache.write q >> K[l, step];
      op add(h, q) >> h;
    }
    op sum_axis(h, axes=[0, 1]) >> total;
    op is_finite(total) >> ok;
    branch ok good bad;
    cache.increment step;
    yield h;
    await h;
    return;
  }
  block good { op relu(h) >> h; return; }
  block bad { op fill(h, value=0.0) >> h; return; }
  block logger { await h; yield h; }
}
"""


def _model(tmp: Path, layers: int = 3, **overrides: Any) -> ModelLoader:
    spec: dict[str, Any] = {
        "sizevars": {"B": 2, "D": 4},
        "metadata": {"num_layers": layers},
        "tensors": {f"layers.{i}.wq": np.eye(4, dtype=np.float32) for i in range(layers)},
    }
    spec.update(overrides)
    return ModelLoader.open(write_oinf(tmp / "model.oinf", **spec))


def test_decode_graph_is_valid_without_and_with_model(tmp_path: Path) -> None:
    graph = parse(DECODE)
    validate(graph)
    with _model(tmp_path) as model:
        validate(graph, model)


def test_metadata_loop_bound_reaches_missing_layer(tmp_path: Path) -> None:
    graph = parse(DECODE)
    tensors = {f"layers.{i}.wq": np.eye(4, dtype=np.float32) for i in range(2)}
    with _model(tmp_path, tensors=tensors) as model, pytest.raises(GraphValidationError) as info:
        validate(graph, model)
    message = str(info.value)
    assert "Wq[l] can reach model tensor 'layers.2.wq'" in message
    assert "loop 'layers' runs l in 0..num_layers = 0..3" in message


def test_table_entry_of_wrong_shape_is_reported(tmp_path: Path) -> None:
    graph = parse(DECODE)
    tensors = {f"layers.{i}.wq": np.eye(4, dtype=np.float32) for i in range(3)}
    tensors["layers.1.wq"] = np.zeros((4, 2), np.float32)
    with _model(tmp_path, tensors=tensors) as model:
        issues = check(graph, model)
    assert [i.message.split(";")[0] for i in issues] == [
        "model tensor 'layers.1.wq' (for Wq[l]) is f32[4, 2] but table 'Wq' declares entries f32[D, D] = [4, 4]"
    ]


def test_sizes_come_from_the_model(tmp_path: Path) -> None:
    graph = parse("graph { volatile { a: f32[B]; b: f32[D]; c: f32[B]; } block entry { op max(a, b) >> c; return; } }")
    # Symbolic sizes: B and D are different sizes, max does not broadcast.
    with pytest.raises(GraphValidationError, match=r"max does not support broadcasting.*\(B,\).*\(D,\)"):
        validate(graph)
    with _model(tmp_path, sizevars={"B": 4, "D": 4}, metadata={}, tensors={}) as model:
        validate(graph, model)  # B == D == 4 in this model
    with (
        _model(tmp_path, sizevars={"B": 4, "D": 5}, metadata={}, tensors={}) as model,
        pytest.raises(GraphValidationError, match=r"input 0 has shape \(4,\) but input 1 has shape \(5,\)"),
    ):
        validate(graph, model)


def test_runtime_index_into_prefix_table_is_not_enumerated(tmp_path: Path) -> None:
    graph = parse(
        "graph { constant { W(l): f32[D, D] @pattern(\"layers.{l}.wq\"); } persistent { step: i32; }"
        " volatile { h: f32[D, D]; i: i32 @init(0); }"
        " block entry { op matmul(h, W[i]) >> h; loop r (k in 0..step_count) { op add(h, W[k]) >> h; } return; } }"
    )
    with _model(tmp_path, sizevars={"B": 2, "D": 4, "step_count": 2}) as model:
        validate(graph, model)


def test_infer_var_types(tmp_path: Path) -> None:
    graph = parse(DECODE)
    types = infer_var_types(graph)
    assert types["h"].dtype is DType.F32 and types["h"].dims == ("B", "D") and types["h"].shape is None
    assert types["h"].kind is None and types["x"].kind is MemoryKind.DYNAMIC
    assert types["K"].table_indices == ("l", "t")
    with _model(tmp_path) as model:
        types = infer_var_types(graph, model)
    assert types["h"].shape == (2, 4)
    assert types["K"].shape == (2, 4)
    assert types["num_layers"].shape == ()


def test_every_problem_is_collected() -> None:
    graph = parse(
        "graph { constant { c: f32[B]; } block entry { op relu(c) >> c; op nope(c) >> c; branch missing; } }"
    )
    with pytest.raises(ValidationErrors) as info:
        validate(graph)
    err = info.value
    assert len(err.errors) == 4
    assert str(err).startswith("4 problems in the graph:")
    assert err.loc is not None and err.loc.line == 1
    assert isinstance(err, GraphValidationError)


def test_non_strict_skips_unknown_ops() -> None:
    graph = parse_file(SEEDS / "002_kv_cache_step.graph")
    assert [i.message.split(" (")[0] for i in check(graph)] == ["unknown op 'attn'"]
    assert check(graph, strict=False) == []


@pytest.mark.parametrize("name", ["002_minimal", "004_overview", "002_kv_cache_step"])
def test_seed_programs_that_are_complete_validate(name: str) -> None:
    validate(parse_file(SEEDS / f"{name}.graph"), strict=name != "002_kv_cache_step")


def test_builder_graph_validates_against_model(tmp_path: Path) -> None:
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B", "D")
    Wq = g.constant("Wq", "f32", "D", "D", index="l", pattern="layers.{l}.wq")
    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "D")
        b.transfer(x) >> h
        for layer in range(3):
            b.op.matmul(h, Wq[layer]) >> h
        b.op.matmul(h, Wq[3]) >> h
        b.return_()
    with _model(tmp_path) as model, pytest.raises(GraphValidationError) as info:
        validate(g.build(), model)
    assert str(info.value).startswith(f"{__file__}:")
    assert "Wq[3] can reach model tensor 'layers.3.wq'" in str(info.value)


# ---- properties: never anything but GraphValidationError ------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_random_graphs_only_raise_validation_errors(graph: Graph) -> None:
    with contextlib.suppress(GraphValidationError):
        validate(graph)


_VALID = [parse(DECODE), parse_file(SEEDS / "002_minimal.graph"), parse_file(SEEDS / "004_overview.graph")]
_OPS = registry.names()
_DTYPES = [d for d in DType if d.is_tensor_type]


def _all_names(graph: Graph) -> list[str]:
    return [v.name for v in graph.vars] + [b.name for b in graph.blocks] + ["nope", "B", "l"]


def _map_nodes(nodes: tuple[Node, ...], index: int, change: Any) -> tuple[tuple[Node, ...], int]:
    """Apply `change` to the index-th node (depth-first); returns the new nodes and the count."""
    out = []
    for node in nodes:
        if index == 0:
            node = change(node)
        index -= 1
        if isinstance(node, Loop):
            body, index = _map_nodes(node.body, index, change)
            node = dataclasses.replace(node, body=body)
        out.append(node)
    return tuple(out), index


@st.composite
def mutated(draw: st.DrawFn) -> Graph:
    graph = draw(st.sampled_from(_VALID))
    for _ in range(draw(st.integers(1, 3))):
        graph = draw(_mutation(graph))
    return graph


@st.composite
def _mutation(draw: st.DrawFn, graph: Graph) -> Graph:
    kind = draw(st.sampled_from(["drop_var", "dtype", "kind", "dims", "rename", "op", "block", "target"]))
    names = _all_names(graph)
    if kind in ("drop_var", "dtype", "kind", "dims") and graph.vars:
        i = draw(st.integers(0, len(graph.vars) - 1))
        decl = graph.vars[i]
        if kind == "drop_var":
            return Graph((*graph.vars[:i], *graph.vars[i + 1:]), graph.blocks)
        if kind == "dtype":
            decl = dataclasses.replace(decl, dtype=draw(st.sampled_from(_DTYPES)))
        elif kind == "kind":
            decl = dataclasses.replace(decl, kind=draw(st.sampled_from(list(MemoryKind))))
        else:
            decl = dataclasses.replace(decl, dims=tuple(draw(st.lists(st.sampled_from([1, 4, "B", "D", "3*D", "Q"]), max_size=3))))
        return Graph((*graph.vars[:i], decl, *graph.vars[i + 1:]), graph.blocks)
    if kind == "block" and graph.blocks:
        i = draw(st.integers(0, len(graph.blocks) - 1))
        renamed = dataclasses.replace(graph.blocks[i], name=draw(st.sampled_from(names)))
        return Graph(graph.vars, (*graph.blocks[:i], renamed, *graph.blocks[i + 1:]))
    if not graph.blocks:
        return graph
    b = draw(st.integers(0, len(graph.blocks) - 1))
    block = graph.blocks[b]
    new_name = draw(st.sampled_from(names))

    def change(node: Node) -> Node:
        if isinstance(node, Op):
            if kind == "op":
                return dataclasses.replace(node, op=draw(st.sampled_from(_OPS)))
            if kind == "rename" and node.inputs:
                return dataclasses.replace(node, inputs=(VarRef(new_name), *node.inputs[1:]))
            return dataclasses.replace(node, output=VarRef(new_name))
        for field in ("then_block", "name", "src", "dst", "target"):
            if hasattr(node, field) and isinstance(getattr(node, field), str):
                return dataclasses.replace(node, **{field: new_name})
        return node

    count = sum(1 for _ in _iter(block.nodes))
    if count == 0:
        return graph
    nodes, _ = _map_nodes(block.nodes, draw(st.integers(0, count - 1)), change)
    return Graph(graph.vars, (*graph.blocks[:b], Block(block.name, nodes, block.loc), *graph.blocks[b + 1:]))


def _iter(nodes: tuple[Node, ...]) -> Any:
    for node in nodes:
        yield node
        if isinstance(node, Loop):
            yield from _iter(node.body)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_valid_graphs_give_success_or_validation_error(graph: Graph) -> None:
    try:
        validate(graph)
    except GraphValidationError as err:
        assert str(err)


def test_literal_sizes_against_symbolic_dims_wait_for_the_model(tmp_path: Path) -> None:
    graph = parse(
        "graph { volatile { x: f32[B, D]; y: f32[8]; } block entry { op reshape(x, shape=[8]) >> y; return; } }"
    )
    validate(graph)  # B*D may well be 8: only the model can tell
    with _model(tmp_path, sizevars={"B": 2, "D": 4}, metadata={}, tensors={}) as model:
        validate(graph, model)
    with (
        _model(tmp_path, sizevars={"B": 3, "D": 4}, metadata={}, tensors={}) as model,
        pytest.raises(GraphValidationError, match="element counts must match"),
    ):
        validate(graph, model)
