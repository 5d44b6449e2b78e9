# expect: 13: positional argument 2 is 0.01; inputs are variables and settings must be given by name
"""A setting given positionally (the text grammar also requires names for settings)."""

from openinfer_jax.ir.nodes import Graph
from openinfer_jax.trace.builder import GraphBuilder


def build() -> Graph:
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        # negative_slope given by position
        b.op.relu(h, 0.01) >> h
        b.return_()
    return g.build()
