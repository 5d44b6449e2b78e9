"""Every seed program of tests/fixtures/seeds/*.graph, written with the Python builder.

`SEED_PROGRAMS` maps a fixture's file stem to a function building the same program; the
equal-IR test parses the text and compares. Fragments that use names they do not declare
(the seed shows a lone block) name them with `g.undeclared(...)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from openinfer_jax.ir.nodes import Graph
from openinfer_jax.trace.builder import GraphBuilder


def seed_001_condensed() -> Graph:
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B")
    W = g.volatile("W", "f32", "D", "D", index="l", pattern="W.{l}")
    alpha = g.constant("alpha", "f32", ref="alpha")
    g.constant("num_layers", "u32")
    step = g.persistent("step", "i32", init=0)
    K = g.persistent("K", "f16", "H", "Dh", index=("l", "t"), table=True)
    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "D")
        cond = b.assign("cond", "bool")
        b.op.matmul(x, W[0]) >> h
        b.op.relu(h, negative_slope=0.01, clamp_max=6.0) >> h
        b.barrier()
        with b.loop("layers", "l", 0, "num_layers") as li:
            b.cache.read(K[li, step]) >> h
            b.op.matmul(h, W[li]) >> h
            b.cache.write(h) >> K[li, step]
        b.op.is_finite(h) >> cond
        b.branch(cond, "ok", "bad")
        b.cache.increment(step)
        b.return_()
    with g.block("ok") as b:
        b.op.add(h, alpha) >> h
        b.yield_(h)
    with g.block("bad") as b:
        b.op.fill(h, value=0.0) >> h
        b.return_()
    return g.build()


def seed_002_assign_op() -> Graph:
    g = GraphBuilder()
    x, w = g.undeclared("x"), g.undeclared("w")
    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "D")
        b.op.matmul(x, w) >> h
    return g.build()


def seed_002_attributes_ref() -> Graph:
    g = GraphBuilder()
    g.constant("alpha", "f32", ref="alpha")
    g.constant("beta", "f32", ref="beta")
    g.constant("bias", "f32", ref="gamma")
    return g.build()


def seed_002_auto_dim() -> Graph:
    g = GraphBuilder()
    g.persistent("A", "f32", "D", "H", index=("i", "j"), auto_dim=("i", "j"))
    g.persistent("B", "f32", "D", "H", index=("i", "j"), auto_dim=("i", "j"), fixed={"i": 1024, "j": 256})
    g.persistent("C", "f32", "D", "H", index=("l", "i", "j"), table=True, auto_dim=("i", "j"))
    return g.build()


def seed_002_barrier() -> Graph:
    g = GraphBuilder()
    x, W = g.undeclared("x"), g.undeclared("W")
    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "D")
        b.op.matmul(x, W[0]) >> h
        b.barrier()
        b.op.relu(h) >> h
        b.return_()
    return g.build()


def seed_002_block() -> Graph:
    g = GraphBuilder()
    x, w, bias = g.undeclared("x"), g.undeclared("w"), g.undeclared("bias")
    with g.block("entry") as b:
        a = b.assign("a", "f32", "B", "D")
        b.op.matmul(x, w) >> a
        b.op.add(a, bias) >> a
        b.return_()
    return g.build()


def seed_002_branch() -> Graph:
    g = GraphBuilder()
    x, W = g.undeclared("x"), g.undeclared("W")
    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "D")
        cond = b.assign("cond", "bool")
        b.op.matmul(x, W[0]) >> h
        b.op.is_finite(h) >> cond
        b.branch(cond, "ok", "bad")
        b.branch("algorithm")
        b.return_()
    with g.block("ok") as b:
        b.op.relu(h, negative_slope=0.0) >> h
        b.return_()
    with g.block("bad") as b:
        b.op.fill_nan_like(h, value=0.0) >> h
        b.return_()
    with g.block("algorithm") as b:
        b.return_()
    return g.build()


def seed_002_cache_ops() -> Graph:
    g = GraphBuilder()
    K, V, k, v = (g.undeclared(n) for n in ("K", "V", "k", "v"))
    step = g.undeclared("step")
    with g.block("entry") as b:
        b.cache.read(K["l", step]) >> k
        b.cache.write(v) >> V["l", step]
        b.cache.increment(step)
        b.cache.increment(step, 5)
        b.cache.decrement(step)
        b.cache.decrement(step, 2)
        b.cache.reset(step)
        b.cache.reset(K)
        b.cache.reset(K["l"])
        b.cache.reset(K["l", step])
    return g.build()


def seed_002_dep() -> Graph:
    g = GraphBuilder()
    x, W, K, step = (g.undeclared(n) for n in ("x", "W", "K", "step"))
    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "D")
        b.op.matmul(x, W[0]) >> h
        b.dep(after="matmul", before="cache.write")
        b.cache.write(h) >> K[0, step]
        b.op.relu(h, negative_slope=0.0) >> h
        b.return_()
    return g.build()


def seed_002_inputs_outputs() -> Graph:
    g = GraphBuilder()
    g.dynamic("x", "f32", "B")
    g.volatile("a", "f32", "B")
    g.volatile("y", "f32", "B")
    g.constant("alpha", "f32")
    g.persistent("cache", "f16", "H", "Dh")
    return g.build()


def seed_002_kv_cache_step() -> Graph:
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B", "D")
    g.volatile("z", "f32", "B", "D")
    W = g.volatile("W", "f32", "D", "D", index="l", pattern="W.{l}")
    step = g.persistent("step", "i32", init=0)
    K = g.persistent("K", "f16", "H", "Dh", index=("l", "t"), table=True)
    V = g.persistent("V", "f16", "H", "Dh", index=("l", "t"), table=True)
    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "D")
        k = b.assign("k", "f16", "H", "Dh")
        v = b.assign("v", "f16", "H", "Dh")
        b.transfer(x) >> h
        with b.loop("layers", "l", 0, 10) as li:
            b.cache.read(K[li, step]) >> k
            b.cache.read(V[li, step]) >> v
            b.op.attn(h, k, v, W[li]) >> h
            b.cache.write(k) >> K[li, step]
            b.cache.write(v) >> V[li, step]
        b.cache.increment(step)
        b.return_()
    return g.build()


def seed_002_loop() -> Graph:
    g = GraphBuilder()
    h, W = g.undeclared("h"), g.undeclared("W")
    with g.block("entry") as b, b.loop("layers", "l", 0, "num_layers") as li:
        b.op.matmul(h, W[li]) >> h
        b.op.relu(h) >> h
    return g.build()


def seed_002_minimal() -> Graph:
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B")
    a = g.volatile("a", "f32", "B")
    y = g.volatile("y", "f32", "B", init=5.0)
    with g.block("entry") as b:
        t0 = b.assign("t0", "f32", "B")
        b.op.add(x, a) >> t0
        b.op.mul(y, t0) >> y
        b.return_()
    return g.build()


def seed_002_persistent() -> Graph:
    g = GraphBuilder()
    g.persistent("step", "i32", init=0)
    g.persistent("cache", "f16", "H", "H")
    return g.build()


def seed_002_prefix_alias() -> Graph:
    g = GraphBuilder()
    g.constant("QKV", "f16", "D", "3*D", index=("layer", "head"), pattern="attn.{head}.qkv.{layer}")
    return g.build()


def seed_002_prefix_table() -> Graph:
    g = GraphBuilder()
    g.volatile("W", "f32", "D", "D", index="l", pattern="W.{l}")
    return g.build()


def seed_002_prefixed_cache() -> Graph:
    g = GraphBuilder()
    g.persistent("A", "f32", "D", index="i", table=True)
    g.persistent("B", "f32", "D", index=("i", "j"), table=True)
    g.persistent("C", "f16", "D", "H", index="i", table=True)
    g.persistent("D", "f16", "D", "H", index=("i", "j"), table=True, fixed={"i": 1024, "j": 256})
    g.persistent("K", "f16", "H", "Dh", index=("l", "t"), table=True)
    g.persistent("V", "f16", "H", "Dh", index=("l", "t"), table=True)
    return g.build()


def seed_002_relu_settings() -> Graph:
    g = GraphBuilder()
    h = g.undeclared("h")
    with g.block("entry") as b:
        b.op.relu(h, negative_slope=0.0, clamp_min=0.0, clamp_max=math.inf) >> h
    return g.build()


def seed_002_relu_variants() -> Graph:
    g = GraphBuilder()
    h = g.undeclared("h")
    with g.block("entry") as b:
        # Table-driven: the four activation settings of the seed, in order.
        for settings in (
            {"negative_slope": 0.0},
            {"negative_slope": 0.01},
            {"negative_slope": 0.0, "clamp_max": 6.0},
            {"negative_slope": 0.0, "clamp_min": -1e-6},
        ):
            b.op.relu(h, **settings) >> h
    return g.build()


def seed_002_yield_await() -> Graph:
    g = GraphBuilder()
    W = g.undeclared("W")
    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "D")
        x = b.assign("x", "i32", "D")
        b.op.matmul(x, W[0]) >> h
        b.yield_(x)
        b.op.relu(h, negative_slope=0.0, clamp_max=6.0) >> h
        b.await_(x)
        b.return_(h)
    for name in ("consumer_1", "consumer_2", "consumer_3"):
        with g.block(name) as c:
            c.await_(x)
            c.yield_(x)
    return g.build()


def seed_004_overview() -> Graph:
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B", "D")
    W = g.constant("W", "f32", "D", "D")
    y = g.volatile("y", "f32", "B", "D")
    with g.block("entry") as b:
        b.op.matmul(x, W) >> y
        b.return_()
    return g.build()


SEED_PROGRAMS: dict[str, Callable[[], Graph]] = {
    name.removeprefix("seed_"): fn for name, fn in dict(globals()).items() if name.startswith("seed_0")
}
