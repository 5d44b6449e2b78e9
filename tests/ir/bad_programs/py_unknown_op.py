# expect: 12: unknown op 'layernorm' (did you mean 'layer_norm'?)
"""A misspelled op name: found by validation, with a suggestion."""

from openinfer_jax.ir.nodes import Graph
from openinfer_jax.trace.builder import GraphBuilder


def build() -> Graph:
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B", "D")
    with g.block("entry") as b:
        b.op.layernorm(h) >> h
        b.return_()
    return g.build()
