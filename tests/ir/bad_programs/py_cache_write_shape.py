# expect: 16: cache.write: 'row' is f16[D] but K[l, step] is f16[H, Dh]; the shapes must match
"""A cache write whose value does not have the table entry's shape."""

from openinfer_jax.ir.nodes import Graph
from openinfer_jax.trace.builder import GraphBuilder


def build() -> Graph:
    g = GraphBuilder()
    step = g.persistent("step", "i32", init=0)
    K = g.persistent("K", "f16", "H", "Dh", index=("l", "t"), table=True)
    row = g.volatile("row", "f16", "D")
    with g.block("entry") as b:
        with b.loop("layers", "l", 0, 2) as li:
            # a [D] row into an [H, Dh] entry
            b.cache.write(row) >> K[li, step]
        b.cache.increment(step)
        b.return_()
    return g.build()
