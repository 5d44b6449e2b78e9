"""format_graph prints canonical graph{} text that parses back to an equal graph."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir import (
    Block,
    CacheAccess,
    CacheIncrement,
    CacheIndex,
    CacheRead,
    CacheSlice,
    Graph,
    MemoryKind,
    Op,
    Return,
    VarDecl,
    VarName,
    VarRef,
    format_graph,
)
from openinfer_jax.ir.printer import format_param_value, format_scalar
from openinfer_jax.trace import parse, parse_file

from .fixtures import SEED_FILES
from .strategies import graphs


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: p.stem)
def test_seed_programs_round_trip_through_text(path: Path) -> None:
    graph = parse_file(path)
    text = format_graph(graph)
    assert parse(text) == graph
    # Canonical: printing the reparsed graph gives the same text.
    assert format_graph(parse(text)) == text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_generated_graphs_round_trip_through_text(graph: Graph) -> None:
    text = format_graph(graph)
    assert parse(text) == graph, text


def test_str_of_graph_is_the_canonical_text() -> None:
    graph = parse("block entry { return; }")
    assert str(graph) == format_graph(graph)


def test_canonical_layout_of_a_small_program() -> None:
    graph = Graph(
        vars=(
            VarDecl("x", MemoryKind.DYNAMIC, DType.F32, ("B",)),
            VarDecl("W", MemoryKind.VOLATILE, DType.F32, ("D", "3*D"), pattern="W.{l}", table_indices=("l",)),
            VarDecl("y", MemoryKind.DYNAMIC, DType.F16, ()),
            VarDecl("K", MemoryKind.PERSISTENT, DType.F16, ("H",), table_indices=("l", "t"), table=True,
                    fixed=(("l", 4),), auto_dim=("t",), init=-1.5),
        ),
        blocks=(
            Block("entry", (
                Op("relu", (VarRef("x"),), (("alpha", 0.01), ("clamp_max", math.inf), ("to", DType.F16)), VarRef("x")),
                CacheRead(CacheAccess("K", (CacheIndex(0), CacheSlice(None, -3))), VarRef("y")),
                CacheIncrement("step", 5),
                Return(),
            )),
        ),
    )  # fmt: skip
    assert format_graph(graph) == (
        "graph {\n"
        "  dynamic {\n"
        "    x: f32[B];\n"
        "  }\n"
        "  volatile {\n"
        '    W(l): f32[D, 3*D] @pattern("W.{l}");\n'
        "  }\n"
        "  dynamic {\n"
        "    y: f16;\n"
        "  }\n"
        "  persistent {\n"
        "    K(l, t): f16[H] @init(-1.5) @table @auto_dim(t) @fixed(l=4);\n"
        "  }\n"
        "\n"
        "  block entry {\n"
        "    op relu(x, alpha=0.01, clamp_max=inf, to=f16) >> x;\n"
        "    cache.read K[0, ..-3] >> y;\n"
        "    cache.increment 5 step;\n"
        "    return;\n"
        "  }\n"
        "}\n"
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (-7, "-7"),
        (1.0, "1.0"),
        (0.01, "0.01"),
        (1e-06, "1e-06"),
        (1e20, "1e+20"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (math.nan, "nan"),
    ],
)
def test_scalar_literals_keep_int_float_and_bool_apart(value: object, text: str) -> None:
    assert format_scalar(value) == text  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (DType.BF16, "bf16"),
        ((DType.F32, DType.F64), "[f32, f64]"),
        ((0, -1), "[0, -1]"),
        ((), "[]"),
        (VarName("alpha"), "alpha"),
        ('say "hi"\n', '"say \\"hi\\"\\n"'),
    ],
)
def test_param_values_print_as_the_dsl_writes_them(value: object, text: str) -> None:
    assert format_param_value(value) == text  # type: ignore[arg-type]


def test_return_with_a_value_and_bracketed_empty_access_print_back() -> None:
    graph = parse("block b { cache.reset K[]; cache.reset K; return h; }")
    text = format_graph(graph)
    assert "cache.reset K[];" in text and "cache.reset K;" in text and "return h;" in text
    assert parse(text) == graph
