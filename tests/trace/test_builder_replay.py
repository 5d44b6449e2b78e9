"""Property: any IR graph the printer can express, replayed through the builder, is equal.

`replay` turns a Graph into builder calls (the way a user would write it); hypothesis draws
the graphs (tests/ir/strategies.py). This covers every node kind, param value kind and
declaration attribute, not only the seed programs.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, assume, given, settings

from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Barrier,
    Branch,
    CacheAccess,
    CacheDecrement,
    CacheIncrement,
    CacheIndex,
    CacheRead,
    CacheReset,
    CacheWrite,
    Dep,
    Graph,
    Loop,
    MemoryKind,
    Node,
    Op,
    Return,
    Transfer,
    VarName,
    VarRef,
    Yield,
)
from openinfer_jax.trace.builder import BlockBuilder, GraphBuilder
from tests.ir.strategies import graphs


def _ref(g: GraphBuilder, ref: VarRef) -> Any:
    handle = g.undeclared(ref.name)
    return handle[ref.indices] if ref.indices else handle


def _cache(g: GraphBuilder, access: CacheAccess) -> Any:
    handle = g.undeclared(access.name)
    if not access.bracketed:
        return handle
    if not access.indices:
        return handle[...]
    items = tuple(
        item.value if isinstance(item, CacheIndex) else slice(item.start, item.end)
        for item in access.indices
    )
    return handle[items]


def _param(g: GraphBuilder, value: Any) -> Any:
    return g.undeclared(value.name) if isinstance(value, VarName) else value


def _emit(g: GraphBuilder, b: BlockBuilder, node: Node) -> None:
    if isinstance(node, Assign):
        b.assign(node.name, node.dtype, *node.dims)
    elif isinstance(node, Op):
        settings_ = {key: _param(g, value) for key, value in node.params}
        b.op(node.op, *(_ref(g, r) for r in node.inputs), **settings_) >> _ref(g, node.output)
    elif isinstance(node, Transfer):
        b.transfer(_ref(g, node.src)) >> _ref(g, node.dst)
    elif isinstance(node, CacheRead):
        b.cache.read(_cache(g, node.src)) >> _ref(g, node.dst)
    elif isinstance(node, CacheWrite):
        b.cache.write(_ref(g, node.src)) >> _cache(g, node.dst)
    elif isinstance(node, CacheIncrement):
        b.cache.increment(g.undeclared(node.name), node.amount)
    elif isinstance(node, CacheDecrement):
        b.cache.decrement(g.undeclared(node.name), node.amount)
    elif isinstance(node, CacheReset):
        b.cache.reset(_cache(g, node.target))
    elif isinstance(node, Branch):
        if node.cond is None:
            b.branch(node.then_block)
        else:
            b.branch(g.undeclared(node.cond), node.then_block, node.else_block)
    elif isinstance(node, Loop):
        with b.loop(node.name, node.index, node.start, node.end):
            for inner in node.body:
                _emit(g, b, inner)
    elif isinstance(node, Yield):
        b.yield_(*(g.undeclared(n) for n in node.vars))
    elif isinstance(node, Await):
        b.await_(*(g.undeclared(n) for n in node.vars))
    elif isinstance(node, Barrier):
        b.barrier()
    elif isinstance(node, Dep):
        b.dep(after=node.after, before=node.before)
    elif isinstance(node, Return):
        b.return_(None if node.value is None else g.undeclared(node.value))
    else:  # pragma: no cover - a new node kind must be added here
        raise AssertionError(f"unhandled node {node!r}")


_DECLARE = {
    MemoryKind.DYNAMIC: GraphBuilder.dynamic,
    MemoryKind.VOLATILE: GraphBuilder.volatile,
    MemoryKind.CONSTANT: GraphBuilder.constant,
    MemoryKind.PERSISTENT: GraphBuilder.persistent,
}


def replay(graph: Graph) -> Graph:
    """Build `graph` again through the Python builder."""
    g = GraphBuilder()
    for decl in graph.vars:
        _DECLARE[decl.kind](
            g, decl.name, decl.dtype, *decl.dims,
            init=decl.init, ref=decl.ref, pattern=decl.pattern, index=decl.table_indices,
            table=decl.table, fixed=list(decl.fixed), auto_dim=decl.auto_dim,
        )  # fmt: skip
    for block in graph.blocks:
        with g.block(block.name) as b:
            for node in block.nodes:
                _emit(g, b, node)
    return g.build()


def _assigned(nodes: tuple[Node, ...]) -> list[str]:
    out = []
    for node in nodes:
        if isinstance(node, Assign):
            out.append(node.name)
        elif isinstance(node, Loop):
            out.extend(_assigned(node.body))
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_replay_through_builder_gives_equal_ir(graph: Graph) -> None:
    # The builder refuses duplicate names at once (validation's rule for text programs).
    names = [v.name for v in graph.vars] + [n for b in graph.blocks for n in _assigned(b.nodes)]
    assume(len(set(names)) == len(names))
    assume(len({b.name for b in graph.blocks}) == len(graph.blocks))
    assert replay(graph) == graph
