# expect: 13: output 'scale' is constant memory, which is read-only
"""A constant written by an op."""

from openinfer_jax.ir.nodes import Graph
from openinfer_jax.trace.builder import GraphBuilder


def build() -> Graph:
    g = GraphBuilder()
    scale = g.constant("scale", "f32", "B")
    x = g.dynamic("x", "f32", "B")
    with g.block("entry") as b:
        b.op.mul(x, scale) >> scale
        b.return_()
    return g.build()
