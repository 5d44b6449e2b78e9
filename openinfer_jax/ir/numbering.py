"""Stable names for the nodes of a graph: index, UUID, text and kind, as traces show them.

The simulator's trace and the emitted C trace (`-DOI_TRACE`) number nodes the same way, so a
line of one can be matched to a line of the other: nodes are numbered depth-first in source
order across blocks (loop bodies after their loop), and each UUID is derived from the
node's position and its text (`ir.printer.describe_node`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Barrier,
    Branch,
    CacheDecrement,
    CacheIncrement,
    CacheRead,
    CacheReset,
    CacheWrite,
    Dep,
    Graph,
    Loop,
    Node,
    Op,
    Return,
    SourceLoc,
    Transfer,
    Yield,
)
from openinfer_jax.ir.printer import describe_node

__all__ = ["NodeInfo", "node_kind", "number_nodes"]

_NAMESPACE = uuid.UUID("6f1c3a52-8d0e-4b8a-9d61-0b7e5f3c2a19")

# Trace `kind` of each node class (the original's TraceEvent kinds).
_KINDS: dict[type[Node], str] = {
    Assign: "Assign",
    Op: "OpExecute",
    CacheRead: "CacheRead",
    CacheWrite: "CacheWrite",
    CacheIncrement: "CacheIncrement",
    CacheDecrement: "CacheDecrement",
    CacheReset: "CacheReset",
    Barrier: "Barrier",
    Dep: "Dep",
    Transfer: "Transfer",
    Yield: "Yield",
    Await: "Await",
    Branch: "Branch",
    Loop: "Loop",
    Return: "Return",
}


def node_kind(node: Node) -> str:
    """The trace kind of a node (``OpExecute``, ``CacheRead``...)."""
    return _KINDS[type(node)]


@dataclass(frozen=True)
class NodeInfo:
    """Where a node sits: its block, global index, UUID, text and trace kind."""

    block: str
    index: int
    uuid: str
    desc: str
    kind: str
    loc: str = ""  # `file:line:column` (base name), "" when the node has no location


def number_nodes(graph: Graph) -> dict[int, NodeInfo]:
    """`NodeInfo` of every node of `graph`, keyed by `id(node)` (equal nodes in two places
    are different nodes)."""
    out: dict[int, NodeInfo] = {}
    counter = 0
    # (block, nodes, next position, path) frames: an explicit stack, like ir.walk.
    for block in graph.blocks:
        stack: list[tuple[tuple[Node, ...], int, str]] = [(block.nodes, 0, block.name)]
        while stack:
            nodes, pos, path = stack.pop()
            if pos >= len(nodes):
                continue
            node = nodes[pos]
            desc = describe_node(node)
            key = f"{path}/{pos}/{desc}"
            where: SourceLoc | None = getattr(node, "loc", None)
            loc = where.short() if where is not None else ""
            out[id(node)] = NodeInfo(
                block.name, counter, str(uuid.uuid5(_NAMESPACE, key)), desc, node_kind(node), loc
            )
            counter += 1
            stack.append((nodes, pos + 1, path))
            if node.children():
                stack.append((node.children(), 0, f"{key}/body"))
    return out
