"""Graphviz DOT of a graph's control flow, for `openinfer show --format dot|svg`.

Blocks are clusters and loops nested clusters. Solid edges follow execution order inside
a block (a dashed back edge closes each loop), blue edges are branches (labelled then /
else / call), green edges are yield -> await hand-offs between the entry block and its
consumer blocks. Node shapes and colours tell kinds apart: cache reads and writes are
cylinders (blue read, orange write, purple increment/decrement/reset), ops are yellow
boxes, branches diamonds, yields and awaits house shapes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Barrier,
    Block,
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
    Transfer,
    Yield,
)
from openinfer_jax.ir.printer import format_node

__all__ = ["NODE_STYLES", "to_dot"]

# Node class -> Graphviz attributes. One table so the legend in docs/dsl.md matches.
NODE_STYLES: dict[type[Node], dict[str, str]] = {
    Assign: {"shape": "box", "style": "filled", "fillcolor": "white"},
    Op: {"shape": "box", "style": "rounded,filled", "fillcolor": "lightyellow"},
    Transfer: {"shape": "box", "style": "filled", "fillcolor": "lightgrey"},
    CacheRead: {"shape": "cylinder", "style": "filled", "fillcolor": "lightblue"},
    CacheWrite: {"shape": "cylinder", "style": "filled", "fillcolor": "orange"},
    CacheIncrement: {"shape": "cylinder", "style": "filled", "fillcolor": "thistle"},
    CacheDecrement: {"shape": "cylinder", "style": "filled", "fillcolor": "thistle"},
    CacheReset: {"shape": "cylinder", "style": "filled", "fillcolor": "thistle"},
    Branch: {"shape": "diamond", "style": "filled", "fillcolor": "lightcyan"},
    Yield: {"shape": "invhouse", "style": "filled", "fillcolor": "palegreen"},
    Await: {"shape": "house", "style": "filled", "fillcolor": "palegreen"},
    Barrier: {"shape": "box", "style": "filled", "fillcolor": "black", "fontcolor": "white"},
    Dep: {"shape": "note", "style": "filled", "fillcolor": "white"},
    Return: {"shape": "box", "style": "rounded,filled,bold", "fillcolor": "grey85"},
}
_BRANCH_EDGE = 'color="blue", fontcolor="blue"'
_YIELD_EDGE = 'color="darkgreen", fontcolor="darkgreen", style="bold"'
_RESUME_EDGE = 'color="darkgreen", fontcolor="darkgreen", style="dashed"'


def _quote(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _attrs(attrs: dict[str, str]) -> str:
    return ", ".join(f"{k}={_quote(v)}" for k, v in attrs.items())


@dataclass
class _Region:
    """Where a run of nodes starts and ends in the drawing, for edges into and out of it."""

    first: str
    last: str
    cluster: str | None = None


@dataclass
class _Writer:
    """Accumulates DOT lines; `drawn` lists each block's (node, DOT id) pairs in source order.

    Pairs rather than a dict keyed by node: equal (or even identical) node objects may
    appear several times in a graph and each occurrence is its own box.
    """

    lines: list[str] = field(default_factory=list)
    counter: int = 0
    drawn: list[tuple[Node, str]] = field(default_factory=list)  # the current block's

    def new_id(self) -> str:
        self.counter += 1
        return f"n{self.counter}"

    def node(self, depth: int, label: str, attrs: dict[str, str]) -> str:
        ident = self.new_id()
        self.lines.append(f"{'  ' * depth}{ident} [label={_quote(label)}, {_attrs(attrs)}];")
        return ident

    def edge(self, src: str, dst: str, depth: int, attrs: str = "") -> None:
        extra = f" [{attrs}]" if attrs else ""
        self.lines.append(f"{'  ' * depth}{src} -> {dst}{extra};")


def _emit_nodes(w: _Writer, nodes: tuple[Node, ...], depth: int, cluster: str) -> _Region:
    """Draw `nodes` in order inside the current cluster; returns the region's ends."""
    if not nodes:
        ident = w.node(depth, "(empty)", {"shape": "plaintext"})
        return _Region(ident, ident)
    regions: list[_Region] = []
    for index, node in enumerate(nodes):
        if isinstance(node, Loop):
            name = f"{cluster}_{index}"
            w.lines.append(f"{'  ' * depth}subgraph {_quote(name)} {{")
            header = format_node(node).removesuffix(" {")
            w.lines.append(
                f'{"  " * (depth + 1)}label={_quote(header)}; style="dashed,rounded"; color="gray40";'
            )
            body = _emit_nodes(w, node.body, depth + 1, name)
            w.lines.append(f"{'  ' * depth}}}")
            # The back edge closes the loop: after the last body node, the next iteration.
            w.edge(
                body.last,
                body.first,
                depth,
                f'style="dashed", color="gray40", label={_quote("next " + node.index)}, constraint="false"',
            )
            region = _Region(body.first, body.last, name)
        else:
            ident = w.node(depth, format_node(node), NODE_STYLES[type(node)])
            w.drawn.append((node, ident))
            region = _Region(ident, ident)
        regions.append(region)
    for prev, nxt in itertools.pairwise(regions):
        attrs = []
        if prev.cluster:
            attrs.append(f"ltail={_quote(prev.cluster)}")
        if nxt.cluster:
            attrs.append(f"lhead={_quote(nxt.cluster)}")
        w.edge(prev.last, nxt.first, depth, ", ".join(attrs))
    return _Region(regions[0].first, regions[-1].last)


def to_dot(graph: Graph, title: str = "graph") -> str:
    """The control-flow graph of `graph` as Graphviz DOT text (see module docstring)."""
    w = _Writer()
    w.lines += [
        f"digraph {_quote(title)} {{",
        '  compound=true; rankdir="TB"; newrank=true;',
        '  node [fontname="Helvetica", fontsize="10"]; edge [fontname="Helvetica", fontsize="9"];',
    ]
    starts: dict[str, str] = {}
    clusters: dict[str, str] = {}
    drawn: list[tuple[Block, list[tuple[Node, str]]]] = []
    for index, block in enumerate(graph.blocks):
        cluster = f"cluster_{index}"
        clusters.setdefault(block.name, cluster)
        w.lines.append(f"  subgraph {_quote(cluster)} {{")
        w.lines.append(
            f'    label={_quote("block " + block.name)}; style="rounded"; color="black";'
        )
        w.drawn = []
        region = _emit_nodes(w, block.nodes, 2, cluster)
        drawn.append((block, w.drawn))
        starts.setdefault(block.name, region.first)
        w.lines.append("  }")
    _branch_edges(w, drawn, starts, clusters)
    _yield_edges(w, drawn)
    w.lines.append("}")
    return "\n".join(w.lines) + "\n"


def _branch_edges(
    w: _Writer,
    drawn: list[tuple[Block, list[tuple[Node, str]]]],
    starts: dict[str, str],
    clusters: dict[str, str],
) -> None:
    missing: dict[str, str] = {}
    for _, nodes in drawn:
        for node, ident in nodes:
            if not isinstance(node, Branch):
                continue
            targets = [(node.then_block, "call" if node.cond is None else "then")]
            if node.else_block is not None:
                targets.append((node.else_block, "else"))
            for target, label in targets:
                if target in starts:
                    dst = starts[target]
                    head = f", lhead={_quote(clusters[target])}"
                else:
                    # Draw a dangling target so the user sees the broken branch.
                    if target not in missing:
                        missing[target] = w.node(
                            1,
                            f"missing block {target}",
                            {"shape": "box", "color": "red", "fontcolor": "red"},
                        )
                    dst, head = missing[target], ""
                w.edge(ident, dst, 1, f"{_BRANCH_EDGE}, label={_quote(label)}{head}")


def _hand_offs(
    w: _Writer,
    sources: list[tuple[Node, str]],
    sinks: list[tuple[Node, str]],
    style: str,
    verb: str,
) -> None:
    """An edge from each `yield` in `sources` to each `await` in `sinks` sharing a variable."""
    for src, src_id in sources:
        for dst, dst_id in sinks:
            if isinstance(src, Yield) and isinstance(dst, Await):
                shared = [v for v in dst.vars if v in src.vars]
                if shared:
                    label = _quote(f"{verb} {', '.join(shared)}")
                    w.edge(src_id, dst_id, 1, f"{style}, label={label}")


def _yield_edges(w: _Writer, drawn: list[tuple[Block, list[tuple[Node, str]]]]) -> None:
    """Entry `yield` -> consumers' `await`, consumers' `yield` -> entry's `await`.

    Consumers are the blocks after the entry that no branch targets (docs/dsl.md).
    """
    if not drawn:
        return
    branch_targets = {
        name
        for _, nodes in drawn
        for node, _ in nodes
        if isinstance(node, Branch)
        for name in (node.then_block, node.else_block)
        if name is not None
    }
    _, entry_nodes = drawn[0]
    for block, nodes in drawn[1:]:
        if block.name in branch_targets:
            continue
        _hand_offs(w, entry_nodes, nodes, _YIELD_EDGE, "yield")
        _hand_offs(w, nodes, entry_nodes, _RESUME_EDGE, "resume")
