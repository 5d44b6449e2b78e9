"""IR node basics: equality ignores locations, caret excerpts, access normalization."""

from __future__ import annotations

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir import (
    Block,
    CacheAccess,
    CacheIndex,
    Graph,
    MemoryKind,
    Return,
    SourceLoc,
    VarDecl,
)


def test_equality_ignores_locations() -> None:
    a = VarDecl("x", MemoryKind.DYNAMIC, DType.F32, loc=SourceLoc(1, 2, "a.graph", "x: f32;"))
    b = VarDecl("x", MemoryKind.DYNAMIC, DType.F32, loc=SourceLoc(9, 9))
    assert a == b
    assert Return(loc=SourceLoc(1)) == Return()
    assert Return("h") != Return()


def test_source_loc_text_and_excerpt() -> None:
    loc = SourceLoc(3, 5, "p.graph", "  op add(x) >> y;")
    assert str(loc) == "p.graph:3:5"
    assert str(SourceLoc(3, 5)) == "3:5"
    assert loc.excerpt() == "      op add(x) >> y;\n        ^"
    assert SourceLoc(1, 1).excerpt() == ""


def test_indexed_cache_access_is_always_bracketed() -> None:
    assert CacheAccess("K", (CacheIndex("l"),)).bracketed is True
    assert CacheAccess("K", (CacheIndex("l"),)) == CacheAccess(
        "K", (CacheIndex("l"),), bracketed=True
    )
    assert CacheAccess("K").bracketed is False
    assert str(CacheAccess("K", (), bracketed=True)) == "K[]"


def test_graph_lookup_by_name() -> None:
    decl = VarDecl("x", MemoryKind.DYNAMIC, DType.F32)
    graph = Graph((decl,), (Block("entry", (Return(),)),))
    assert graph.var("x") is decl and graph.var("y") is None
    assert graph.block("entry") is not None and graph.block("other") is None
