# expect: 14: input 1 'state' is persistent memory, which is accessed only through cache ops
"""Persistent memory used directly as an op input instead of through cache.read."""

from openinfer_jax.ir.nodes import Graph
from openinfer_jax.trace.builder import GraphBuilder


def build() -> Graph:
    g = GraphBuilder()
    state = g.persistent("state", "f32", "B")
    x = g.dynamic("x", "f32", "B")
    with g.block("entry") as b:
        y = b.assign("y", "f32", "B")
        b.op.add(state, x) >> y
        b.return_()
    return g.build()
