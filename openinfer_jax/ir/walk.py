"""The one way to visit the nodes of a graph: depth-first, in source order, loop bodies
included (branch targets are blocks of their own, visited where the graph lists them).

Every pass that needs "each node" or "what does this list of nodes write" calls these,
so a new node kind that nests other nodes is handled everywhere by its `children()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from openinfer_jax.ir.nodes import Graph, Node

__all__ = ["reads_in", "walk", "walk_graph", "writes_in"]


def walk(nodes: Iterable[Node]) -> Iterator[Node]:
    """Every node of `nodes` and, recursively, of their `children()`, each before its body."""
    # An explicit stack, not recursion: deeply nested loops from a hostile graph file must
    # not hit Python's recursion limit.
    stack: list[Iterator[Node]] = [iter(nodes)]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            continue
        yield node
        children = node.children()
        if children:
            stack.append(iter(children))


def walk_graph(graph: Graph) -> Iterator[Node]:
    """Every node of every block of `graph`, blocks in graph order."""
    for block in graph.blocks:
        yield from walk(block.nodes)


def writes_in(nodes: Iterable[Node]) -> set[str]:
    """The variables some node of `nodes` (loop bodies included) writes."""
    return {name for node in walk(nodes) for name in node.writes()}


def reads_in(nodes: Iterable[Node]) -> set[str]:
    """The names some node of `nodes` (loop bodies included) reads."""
    return {name for node in walk(nodes) for name in node.reads()}
