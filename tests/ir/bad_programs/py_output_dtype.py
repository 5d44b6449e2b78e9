# expect: 15: output 'y' is f16[B, D] but matmul(f32[B, D], f32[D, D]) produces f32; declare 'y' as f32[B, D]
"""An op routed into an output of the wrong dtype (reported by validation at the call)."""

from openinfer_jax.ir.nodes import Graph
from openinfer_jax.trace.builder import GraphBuilder


def build() -> Graph:
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B", "D")
    w = g.constant("w", "f32", "D", "D")
    y = g.volatile("y", "f16", "B", "D")
    with g.block("entry") as b:
        # matmul of f32 inputs produces f32
        b.op.matmul(x, w) >> y
        b.return_()
    return g.build()
