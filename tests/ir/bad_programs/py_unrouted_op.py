# expect: 15: op relu is never routed to an output; add `>> target` after the call
"""Forgetting `>>`: the op is built but never routed into an output."""

from openinfer_jax.ir.nodes import Graph
from openinfer_jax.trace.builder import GraphBuilder


def build() -> Graph:
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B")
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        b.op.add(x, x) >> h
        # the relu below is missing its `>> h`
        b.op.relu(h)
        b.return_()
    return g.build()
