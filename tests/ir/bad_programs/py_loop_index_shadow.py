# expect: 12: loop index 'l' is already the index of the enclosing loop 'outer'; pick another name
"""Nested loops reusing one index name."""

from openinfer_jax.ir.nodes import Graph
from openinfer_jax.trace.builder import GraphBuilder


def build() -> Graph:
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        with b.loop("outer", "l", 0, 2), b.loop("inner", "l", 0, 2):  # the inner loop reuses `l`
            b.op.relu(h) >> h
        b.return_()
    return g.build()
