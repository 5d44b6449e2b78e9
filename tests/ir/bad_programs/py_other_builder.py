# expect: 15: 'w' belongs to another GraphBuilder; use handles created by this builder
"""A handle from one builder used in another (e.g. a helper that built its own weights)."""

from openinfer_jax.ir.nodes import Graph
from openinfer_jax.trace.builder import GraphBuilder


def build() -> Graph:
    weights = GraphBuilder()
    w = weights.constant("w", "f32", "D", "D")
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B", "D")
    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "D")
        b.op.matmul(x, w) >> h
        b.return_()
    return g.build()
