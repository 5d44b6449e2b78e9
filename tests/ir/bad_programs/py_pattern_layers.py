# expect: 20: W[l] can reach model tensor 'W.3' (loop 'layers' runs l in 0..n_layers = 0..4), which the model does not have
# model: basic
"""A loop whose bound, a constant with @init(4), reaches a layer the model lacks (it has W.0..W.2)."""

from openinfer_jax.ir.nodes import Graph
from openinfer_jax.trace.builder import GraphBuilder


def build() -> Graph:
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "D", "D")
    W = g.volatile("W", "f32", "D", "D", index="l", pattern="W.{l}")
    g.constant("n_layers", "i32", init=4)
    with g.block("entry") as b:
        h = b.assign("h", "f32", "D", "D")
        b.transfer(x) >> h
        with b.loop("layers", "l", 0, "n_layers") as li:
            # one matmul per layer
            b.op.relu(h) >> h
            b.op.matmul(h, W[li]) >> h
        b.return_()
    return g.build()
