"""Fuse a bias add into the linear layer that produces its operand.

``op linear(x, W) >> y; op add(y, b) >> z`` with a model constant ``b [out]`` becomes
``op linear(x, W, b) >> z``: the layer adds the bias as it stores each output, so the
output is written once instead of twice. linear adds the bias to the rounded f32 (or f64)
dot product exactly as the separate add did, so results are unchanged.

Rewritten only when the add is the next node touching `y`, takes `y` and a rank-1 constant
of `W`'s out dim with the same dtype (either operand order), and `y` is dead after the add
(or the add writes `y` itself), and nothing between the two nodes touches `z`.
"""

from __future__ import annotations

from dataclasses import replace

from openinfer_jax.ir.nodes import Block, Graph, Loop, Node, Op, VarRef
from openinfer_jax.passes.context import PassContext, node_text
from openinfer_jax.passes.dataflow import Frame, access, dead_after

__all__ = ["fuse_bias"]


def _bias_operand(add: Node, y: str, out_dim: int, ctx: PassContext) -> VarRef | None:
    """The bias of `add(y, b)` / `add(b, y)` when `b` fits, else None."""
    if not isinstance(add, Op) or add.op != "add" or add.params or len(add.inputs) != 2:
        return None
    a, b = add.inputs
    if a == VarRef(y) and b.name != y:
        bias = b
    elif b == VarRef(y) and a.name != y:
        bias = a
    else:
        return None
    if not ctx.is_constant(bias) or ctx.dims(bias.name) != (out_dim,):
        return None
    if ctx.dtype(bias.name) != ctx.dtype(y) or ctx.dtype(add.output.name) != ctx.dtype(y):
        return None
    return bias


class _BiasFuser:
    def __init__(self, ctx: PassContext) -> None:
        self.ctx = ctx
        self.report: list[str] = []
        self.origins: dict[int, Node] = {}  # id(new node) -> the node whose output it writes

    def sequence(
        self, nodes: tuple[Node, ...], outer: tuple[Frame, ...], loop: bool, block: str
    ) -> tuple[Node, ...]:
        out: list[Node | None] = list(nodes)
        for i, node in enumerate(nodes):
            if isinstance(node, Loop):
                body = self.sequence(node.body, (*outer, Frame(nodes, i, loop)), True, block)
                out[i] = replace(node, body=body)
        for i, node in enumerate(nodes):
            if not (isinstance(node, Op) and node.op == "linear" and len(node.inputs) == 2):
                continue
            if node.output.indices or out[i] is not node:
                continue
            y = node.output.name
            w_dims = self.ctx.dims(node.inputs[1].name)
            if w_dims is None or len(w_dims) != 2:
                continue
            j = next((k for k in range(i + 1, len(nodes)) if access(nodes[k]).touches(y)), None)
            if j is None:
                continue
            add = nodes[j]
            bias = _bias_operand(add, y, w_dims[0], self.ctx)
            if bias is None:
                continue
            assert isinstance(add, Op)
            z = add.output
            if z.indices:
                continue
            between = nodes[i + 1 : j]
            if z.name != y:
                if any(access(n).touches(z.name) for n in between):
                    continue
                if any(z.name == r.name for r in node.inputs):
                    continue
                path = (*outer, Frame(nodes, j, loop))
                if not dead_after(path, y, i, self.ctx.end_dead(y, block)):
                    continue
            fused = Op("linear", (*node.inputs, bias), (), z, loc=node.loc)
            self.report.append(f"fused {node_text(add)} into {node_text(node)} as its bias")
            out[i] = fused
            out[j] = None
            self.origins[id(fused)] = add
        return tuple(n for n in out if n is not None)


def fuse_bias(graph: Graph, ctx: PassContext) -> tuple[Graph, list[str], dict[int, Node]]:
    """Give `linear` nodes the bias the next node adds; returns the graph, report lines and,
    per new node (by id), the add whose output it writes."""
    fuser = _BiasFuser(ctx)
    blocks = tuple(
        Block(b.name, fuser.sequence(b.nodes, (), False, b.name), b.loc) for b in graph.blocks
    )
    return replace(graph, blocks=blocks), fuser.report, fuser.origins
