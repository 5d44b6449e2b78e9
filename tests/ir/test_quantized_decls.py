"""Block-quantized weights in the DSL: `W: q4_1[N, K]` parses, prints, round-trips through JSON and
the builder, and every misuse is a located error naming the node."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.blocks import BlockScheme
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import DslSyntaxError, GraphValidationError
from openinfer_jax.ir import from_json, to_json
from openinfer_jax.ir.validate import validate
from openinfer_jax.oinf import ModelLoader, OinfWriter, quantize
from openinfer_jax.trace import parse
from openinfer_jax.trace.builder import GraphBuilder

PROGRAM = """
graph {
  dynamic { x: f32[1, K]; ids: i32[2]; }
  constant {
    W: q4_1[N, K];
    E: q8_0[V, K];
    L(l): q4_0[K, K] @pattern("layer.{l}");
  }
  volatile { y: f32[1, N]; h: f32[2, K]; z: f32[1, K]; }
  block entry {
    op linear(x, W) >> y;
    op embedding(E, ids) >> h;
    op gather(E, ids, axis=0) >> h;
    op matmul(x, L[0]) >> z;
    return;
  }
}
"""


@pytest.fixture()
def model(tmp_path: Path) -> ModelLoader:
    rng = np.random.default_rng(0)
    path = tmp_path / "m.oinf"
    with OinfWriter(path) as w:
        w.add_sizevar("N", 16)
        w.add_sizevar("K", 64)
        w.add_sizevar("V", 10)
        w.add_tensor("W", quantize(rng.standard_normal((16, 64)), "q4_1"))
        w.add_tensor("E", quantize(rng.standard_normal((10, 64)), "q8_0"))
        w.add_tensor("layer.0", quantize(rng.standard_normal((64, 64)), "q4_0"))
        w.add_tensor("F", rng.standard_normal((16, 64)).astype(np.float32))
    loader = ModelLoader.open(path)
    yield loader
    loader.close()


def test_parse_print_json_builder_agree(model: ModelLoader) -> None:
    graph = parse(PROGRAM)
    decls = {d.name: d for d in graph.vars}
    assert decls["W"].quant is BlockScheme.Q4_1 and decls["W"].dtype is DType.F32
    assert decls["L"].quant is BlockScheme.Q4_0 and decls["x"].quant is None
    text = str(graph)
    assert "W: q4_1[N, K];" in text and 'L(l): q4_0[K, K] @pattern("layer.{l}");' in text
    assert parse(text) == graph
    data = to_json(graph)
    assert [v.get("quant") for v in data["vars"]][:4] == [None, None, "q4_1", "q8_0"]
    assert "quant" not in data["vars"][0]  # only quantized weights carry the key
    assert from_json(data) == graph
    g = GraphBuilder()
    g.constant("W", "q4_1", "N", "K")
    with g.block("entry") as b:
        b.return_()
    assert g.build().vars[0] == decls["W"]
    validate(graph, model)  # model types and shapes agree


def _errors(text: str, model: ModelLoader | None) -> str:
    with pytest.raises(GraphValidationError) as info:
        validate(parse(text), model)
    return str(info.value)


def _program(decls: str, body: str) -> str:
    return f"""graph {{
  dynamic {{ x: f32[1, K]; ids: i32[2]; }}
  constant {{ {decls} }}
  volatile {{ y: f32[1, N]; h: f32[2, K]; z: f32[1, K]; a: f32[N, K]; }}
  block entry {{
    {body}
    return;
  }}
}}"""


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "op add(W, W) >> a;",
            "6:5: block 'entry', node 1 (op add(W, W) >> a): input 1 'W' is a block-quantized weight (q4_1): input 'a' of add cannot",
        ),
        (
            "op linear(W, x) >> y;",
            "input 'x' of linear cannot be a block-quantized weight (it takes one as w)",
        ),
        ("op matmul(W, W) >> a;", "matmul takes at most one block-quantized input, got 2"),
        ("op gather(W, ids, axis=1) >> a;", "axis must be 0, got 1"),
        (
            "transfer W >> a;",
            "transfer source 'W' is a block-quantized weight (q4_1); it is read-only",
        ),
        ("op relu(a) >> W;", "output 'W' is a block-quantized weight"),
    ],
)
def test_misuse_names_the_node(model: ModelLoader, body: str, expected: str) -> None:
    message = _errors(_program("W: q4_1[N, K];", body), model)
    assert expected in message, message
    assert "linear (w)" in message and "embedding (table)" in message


def test_declaration_rules(model: ModelLoader) -> None:
    text = _program("W: q4_1[N, K];", "op linear(x, W) >> y;").replace(
        "dynamic { x: f32[1, K]; ids: i32[2]; }",
        "dynamic { x: f32[1, K]; ids: i32[2]; P: q8_0[N, K]; }",
    )
    assert "declare it in a constant or volatile section, not dynamic" in _errors(text, model)
    text = _program("S: q4_1;", "op linear(x, W) >> y;")
    assert "without dims" in _errors(text, None)
    with pytest.raises(DslSyntaxError, match=r"'q4_1' is a block-quantized weight type"):
        parse("graph { block entry { assign a: q4_1[2]; return; } }")


def test_model_types_must_agree(model: ModelLoader) -> None:
    wrong_scheme = _program("W: q8_0[N, K];", "op linear(x, W) >> y;")
    assert "model tensor 'W' which is q4_1[16, 64], but is declared q8_0[N, K]" in _errors(
        wrong_scheme, model
    )
    plain = _program("W: f32[N, K];", "op linear(x, W) >> y;")
    assert "declare it q4_1[N, K]" in _errors(plain, model)
    packed_name = _program("F: q4_1[N, K];", "op linear(x, F) >> y;")
    assert "which is f32[16, 64], but is declared q4_1[N, K]" in _errors(packed_name, model)
    missing = _program("Q: q4_1[N, K];", "op linear(x, Q) >> y;")
    assert "the model has no tensor 'Q'" in _errors(missing, model)
    table = PROGRAM.replace(
        'L(l): q4_0[K, K] @pattern("layer.{l}");', 'L(l): q4_1[K, K] @pattern("layer.{l}");'
    )
    assert (
        "model tensor 'layer.0' (for L[0]) is q4_0[64, 64] but table 'L' declares entries q4_1[K, K]"
        in _errors(table, model)
    )
