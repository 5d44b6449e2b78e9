"""The graph{} parser: every construct gives the expected IR, with locations."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import DslSyntaxError
from openinfer_jax.ir import (
    Assign,
    Await,
    Barrier,
    Block,
    Branch,
    CacheAccess,
    CacheDecrement,
    CacheIncrement,
    CacheIndex,
    CacheRead,
    CacheReset,
    CacheSlice,
    CacheWrite,
    Dep,
    Graph,
    Loop,
    MemoryKind,
    Node,
    Op,
    Return,
    SourceLoc,
    Transfer,
    VarDecl,
    VarName,
    VarRef,
    Yield,
)
from openinfer_jax.trace import parse, parse_file

SEED_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "seeds"


def _decl(text: str) -> VarDecl:
    graph = parse(f"volatile {{ {text} }}")
    assert len(graph.vars) == 1
    return graph.vars[0]


def _node(text: str) -> Node:
    graph = parse(f"block entry {{ {text} }}")
    assert len(graph.blocks[0].nodes) == 1
    return graph.blocks[0].nodes[0]


V = MemoryKind.VOLATILE
DECLS = [
    ("x: f32;", VarDecl("x", V, DType.F32)),
    ("flag: bool[];", VarDecl("flag", V, DType.BOOL, ())),
    ("x: f32[B, 3*D, 4, B*D];", VarDecl("x", V, DType.F32, ("B", "3*D", 4, "B*D"))),
    ("x: bf16[2 * H * Dh];", VarDecl("x", V, DType.BF16, ("2*H*Dh",))),
    ("y: f32[B] @init(5.0);", VarDecl("y", V, DType.F32, ("B",), init=5.0)),
    ("y: i8 @init(-3);", VarDecl("y", V, DType.I8, init=-3)),
    ("y: f32 @init(-inf);", VarDecl("y", V, DType.F32, init=-math.inf)),
    ("y: bool @init(true);", VarDecl("y", V, DType.BOOL, init=True)),
    ('a: f32 @ref("alpha.0");', VarDecl("a", V, DType.F32, ref="alpha.0")),
    ("a: f32 @ref(alpha);", VarDecl("a", V, DType.F32, ref="alpha")),
    ('W(l): f32[D, D] @pattern("W.{l}");', VarDecl("W", V, DType.F32, ("D", "D"), pattern="W.{l}", table_indices=("l",))),
    ('W(l): f32[D] pattern("W.{l}");', VarDecl("W", V, DType.F32, ("D",), pattern="W.{l}", table_indices=("l",))),
    ("K(l, t): f16[H, Dh] @table;", VarDecl("K", V, DType.F16, ("H", "Dh"), table_indices=("l", "t"), table=True)),
    ("D(i, j): f16[D] @table @fixed(i=1024, j=256);",
     VarDecl("D", V, DType.F16, ("D",), table_indices=("i", "j"), table=True, fixed=(("i", 1024), ("j", 256)))),
    ("C(l, i, j): f32[D, H] @table @auto_dim(i, j);",
     VarDecl("C", V, DType.F32, ("D", "H"), table_indices=("l", "i", "j"), table=True, auto_dim=("i", "j"))),
    ("q: i4[N] /* packed */ ;", VarDecl("q", V, DType.I4, ("N",))),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), DECLS, ids=[d[0] for d in DECLS])
def test_declarations(text: str, expected: VarDecl) -> None:
    assert _decl(text) == expected


NODES = [
    ("assign h: f32[B, D];", Assign("h", DType.F32, ("B", "D"))),
    ("assign c: bool[];", Assign("c", DType.BOOL, ())),
    ("op add(x, a) >> t0;", Op("add", (VarRef("x"), VarRef("a")), (), VarRef("t0"))),
    ("op matmul(x, W[0]) >> h;", Op("matmul", (VarRef("x"), VarRef("W", (0,))), (), VarRef("h"))),
    ("op attn(h, k, v, W[l, 2]) >> h;",
     Op("attn", (VarRef("h"), VarRef("k"), VarRef("v"), VarRef("W", ("l", 2))), (), VarRef("h"))),
    ("op relu(h, negative_slope=0.0, clamp_min=-1e-6, clamp_max=inf) >> h;",
     Op("relu", (VarRef("h"),), (("negative_slope", 0.0), ("clamp_min", -1e-6), ("clamp_max", math.inf)), VarRef("h"))),
    ("op cast(x, to=f16, rounding_mode=\"nearest\", saturate=false) >> y;",
     Op("cast", (VarRef("x"),), (("to", DType.F16), ("rounding_mode", "nearest"), ("saturate", False)), VarRef("y"))),
    ("op matmul(x, w, acc=[f32, f32]) >> y;", Op("matmul", (VarRef("x"), VarRef("w")), (("acc", (DType.F32, DType.F32)),), VarRef("y"))),
    ("op matmul(x, w, acc=i32) >> y;", Op("matmul", (VarRef("x"), VarRef("w")), (("acc", DType.I32),), VarRef("y"))),
    ("op sum_axis(x, axes=[0, -1], keepdims=true) >> y;",
     Op("sum_axis", (VarRef("x"),), (("axes", (0, -1)), ("keepdims", True)), VarRef("y"))),
    ("op fill(h, value=alpha) >> h;", Op("fill", (VarRef("h"),), (("value", VarName("alpha")),), VarRef("h"))),
    ("op fill(h, value=-2, mask=nan, e=[]) >> h;",
     Op("fill", (VarRef("h"),), (("value", -2), ("mask", math.nan), ("e", ())), VarRef("h"))),
    ("op noop() >> h;", Op("noop", (), (), VarRef("h"))),
    ("transfer x >> h;", Transfer(VarRef("x"), VarRef("h"))),
    ("cache.read  K[l, step] >> k;", CacheRead(CacheAccess("K", (CacheIndex("l"), CacheIndex("step"))), VarRef("k"))),
    ("cache.read A[] >> a;", CacheRead(CacheAccess("A", (), bracketed=True), VarRef("a"))),
    ("cache.read A[0..5] >> a;", CacheRead(CacheAccess("A", (CacheSlice(0, 5),)), VarRef("a"))),
    ("cache.read A[2..-3] >> a;", CacheRead(CacheAccess("A", (CacheSlice(2, -3),)), VarRef("a"))),
    ("cache.read A[..5] >> a;", CacheRead(CacheAccess("A", (CacheSlice(None, 5),)), VarRef("a"))),
    ("cache.read A[start..] >> a;", CacheRead(CacheAccess("A", (CacheSlice("start", None),)), VarRef("a"))),
    ("cache.read A[l, -1, ..] >> a;", CacheRead(CacheAccess("A", (CacheIndex("l"), CacheIndex(-1), CacheSlice())), VarRef("a"))),
    ("cache.read step >> s;", CacheRead(CacheAccess("step"), VarRef("s"))),
    ("cache.write v >> V[l, step];", CacheWrite(VarRef("v"), CacheAccess("V", (CacheIndex("l"), CacheIndex("step"))))),
    ("cache.increment step;", CacheIncrement("step", 1)),
    ("cache.increment 5 step;", CacheIncrement("step", 5)),
    ("cache.decrement step;", CacheDecrement("step", 1)),
    ("cache.decrement 2 step;", CacheDecrement("step", 2)),
    ("cache.reset step;", CacheReset(CacheAccess("step"))),
    ("cache.reset K[l];", CacheReset(CacheAccess("K", (CacheIndex("l"),)))),
    ("branch algorithm;", Branch("algorithm")),
    ("branch cond ok bad;", Branch("ok", cond="cond", else_block="bad")),
    ("loop layers (l in 0..num_layers) { op relu(h) >> h; }",
     Loop("layers", "l", 0, "num_layers", (Op("relu", (VarRef("h"),), (), VarRef("h")),))),
    ("loop outer (i in a..4) { loop inner (j in 0..i) { barrier; } }",
     Loop("outer", "i", "a", 4, (Loop("inner", "j", 0, "i", (Barrier(),)),))),
    ("loop empty (i in 0..0) { }", Loop("empty", "i", 0, 0, ())),
    ("yield x;", Yield(("x",))),
    ("yield a, b, c;", Yield(("a", "b", "c"))),
    ("await a, b;", Await(("a", "b"))),
    ("barrier;", Barrier()),
    ("dep after(matmul) before(cache.write);", Dep("matmul", "cache.write")),
    ("return;", Return()),
    ("return h;", Return("h")),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), NODES, ids=[n[0] for n in NODES])
def test_nodes(text: str, expected: Node) -> None:
    assert _node(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "block entry { return; }",
        "graph { block entry { return; } }",
        "graph! { block entry { return; } }",
        "graph! { block entry { return; } };",
        "// leading comment\n/* multi\nline */ block entry { return; } // trailing",
    ],
)
def test_graph_wrapper_forms_are_equivalent(text: str) -> None:
    assert parse(text) == Graph((), (Block("entry", (Return(),)),))


def test_empty_program_and_empty_graph() -> None:
    assert parse("") == Graph((), ())
    assert parse("graph { }") == Graph((), ())


def test_sections_may_repeat_and_interleave_with_blocks() -> None:
    graph = parse(
        "dynamic { a: f32; } block b { return; } dynamic { c: f32; } constants { k: i32; }"
    )
    assert [(v.name, v.kind) for v in graph.vars] == [
        ("a", MemoryKind.DYNAMIC), ("c", MemoryKind.DYNAMIC), ("k", MemoryKind.CONSTANT),
    ]  # fmt: skip
    assert [b.name for b in graph.blocks] == ["b"]


def _pos(loc: SourceLoc | None) -> tuple[int, int, str | None]:
    assert loc is not None
    return (loc.line, loc.column, loc.file)


def test_every_node_and_declaration_carries_its_location() -> None:
    text = "dynamic {\n  x: f32[B];\n}\nblock entry {\n  loop l (i in 0..2) {\n    op relu(x) >> x;\n  }\n}\n"
    graph = parse(text, filename="prog.graph")
    assert _pos(graph.vars[0].loc) == (2, 3, "prog.graph")
    assert graph.vars[0].loc.snippet == "  x: f32[B];"
    block = graph.blocks[0]
    assert _pos(block.loc) == (4, 1, "prog.graph")
    loop = block.nodes[0]
    assert isinstance(loop, Loop)
    assert _pos(loop.loc) == (5, 3, "prog.graph")
    assert _pos(loop.body[0].loc) == (6, 5, "prog.graph")  # type: ignore[attr-defined]
    assert loop.body[0].loc.snippet == "    op relu(x) >> x;"  # type: ignore[attr-defined]
    assert str(loop.body[0].loc) == "prog.graph:6:5"  # type: ignore[attr-defined]


def test_locations_count_lines_inside_block_comments_and_crlf() -> None:
    graph = parse("/* one\ntwo\nthree */\r\nblock b {\r\n  barrier;\r\n}\r\n")
    assert graph.blocks[0].loc.line == 4  # type: ignore[union-attr]
    node = graph.blocks[0].nodes[0]
    assert node.loc.line == 5 and node.loc.column == 3  # type: ignore[attr-defined]
    assert node.loc.snippet == "  barrier;"  # type: ignore[attr-defined]


def test_keywords_can_be_variable_and_block_names() -> None:
    graph = parse(
        "volatile { loop: f32; op: f32; } block return { op add(loop, op) >> loop; branch return; }"
    )
    assert [v.name for v in graph.vars] == ["loop", "op"]
    assert graph.blocks[0].nodes[1] == Branch("return")


def test_string_escapes_follow_json() -> None:
    assert _decl(r'a: f32 @ref("x\"y\\z\u00e9");').ref == 'x"y\\zé'


def test_parse_file_reads_utf8_and_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p.graph"
    path.write_text("block entry {\n  return\n}\n", encoding="utf-8")
    with pytest.raises(DslSyntaxError, match=r"p\.graph:2:9: missing ';'"):
        parse_file(path)
    with pytest.raises(DslSyntaxError, match="cannot read the graph file"):
        parse_file(tmp_path / "missing.graph")
    bad = tmp_path / "latin1.graph"
    bad.write_bytes(b"block \xe9 { }")
    with pytest.raises(DslSyntaxError, match="not UTF-8"):
        parse_file(bad)


def test_parse_file_skips_a_utf8_bom(tmp_path: Path) -> None:
    path = tmp_path / "bom.graph"
    path.write_bytes(b"\xef\xbb\xbfblock entry {\n  return;\n}\n")
    graph = parse_file(path)
    assert graph.blocks[0].loc.column == 1  # type: ignore[union-attr]


def test_parse_rejects_non_text() -> None:
    with pytest.raises(DslSyntaxError, match="takes the program text as str"):
        parse(b"block b { }")  # type: ignore[arg-type]


# ---- the seed programs, as written --------------------------------------------------------
def test_every_seed_program_is_a_fixture() -> None:
    assert len(list(SEED_DIR.glob("*.graph"))) >= 20


def test_condensed_seed_001() -> None:
    graph = parse_file(SEED_DIR / "001_condensed.graph")
    assert [v.name for v in graph.vars] == ["x", "W", "alpha", "num_layers", "step", "K"]
    assert graph.var("W") == VarDecl(
        "W", V, DType.F32, ("D", "D"), pattern="W.{l}", table_indices=("l",)
    )
    assert graph.var("step").init == 0  # type: ignore[union-attr]
    entry = graph.block("entry")
    assert entry is not None
    assert entry.nodes[3] == Op(
        "relu", (VarRef("h"),), (("negative_slope", 0.01), ("clamp_max", 6.0)), VarRef("h")
    )
    loop = entry.nodes[5]
    assert isinstance(loop, Loop) and loop.end == "num_layers" and len(loop.body) == 3
    assert entry.nodes[7] == Branch("ok", cond="cond", else_block="bad")
    assert [b.name for b in graph.blocks] == ["entry", "ok", "bad"]


def test_seed_decisions() -> None:
    # pattern("W.{l}") without '@' (seed 002, KV example) means @pattern.
    kv = parse_file(SEED_DIR / "002_kv_cache_step.graph")
    assert kv.var("W").pattern == "W.{l}"  # type: ignore[union-attr]
    # dep with a dotted node-kind name.
    dep = parse_file(SEED_DIR / "002_dep.graph")
    assert Dep("matmul", "cache.write") in dep.blocks[0].nodes
    # return h; in the entry block of the yield example.
    ya = parse_file(SEED_DIR / "002_yield_await.graph")
    assert ya.blocks[0].nodes[-1] == Return("h")
    assert ya.block("consumer_1").nodes == (Await(("x",)), Yield(("x",)))  # type: ignore[union-attr]
    # `constants` section spelling.
    attrs = parse_file(SEED_DIR / "002_attributes_ref.graph")
    assert {v.kind for v in attrs.vars} == {MemoryKind.CONSTANT}
    # unknown op names are not a syntax matter.
    br = parse_file(SEED_DIR / "002_branch.graph")
    assert any(isinstance(n, Op) and n.op == "fill_nan_like" for n in br.block("bad").nodes)  # type: ignore[union-attr]
