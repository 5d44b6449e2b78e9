"""The Python builder: IR it produces, locations of the user's calls, and its errors."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import DslSyntaxError
from openinfer_jax.ir.nodes import (
    CacheAccess,
    CacheIndex,
    CacheRead,
    CacheSlice,
    CacheWrite,
    Loop,
    MemoryKind,
    Op,
    VarName,
    VarRef,
)
from openinfer_jax.ir.validate import validate
from openinfer_jax.trace.builder import BlockBuilder, GraphBuilder, LoopIndex, Var


def _transformer_layer(b: BlockBuilder, h: Var, tmp: Var, Wq: Var, Wo: Var, K: Var, step: Var, layer: LoopIndex | int) -> None:
    """One (tiny) attention-like layer: the helper a user writes once and calls per layer."""
    b.op.matmul(h, Wq[layer]) >> tmp
    b.cache.write(tmp) >> K[layer, step]
    b.op.relu(tmp, clamp_max=6.0) >> tmp
    b.op.matmul(tmp, Wo[layer]) >> tmp
    b.op.add(h, tmp) >> h


def _transformer(layers: int) -> GraphBuilder:
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B", "D")
    Wq = g.constant("Wq", "f32", "D", "D", index="l", pattern="layers.{l}.wq")
    Wo = g.constant("Wo", "f32", "D", "D", index="l", pattern="layers.{l}.wo")
    step = g.persistent("step", "i32", init=0)
    K = g.persistent("K", "f32", "B", "D", index=("l", "t"), table=True)
    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "D")
        tmp = b.assign("tmp", "f32", "B", "D")
        b.transfer(x) >> h
        for layer in range(layers):  # a Python loop unrolls the layers
            _transformer_layer(b, h, tmp, Wq, Wo, K, step, layer)
        b.cache.increment(step)
        b.return_()
    return g


def test_transformer_helper_in_a_python_loop_builds_and_validates() -> None:
    graph = _transformer(4).build()
    entry = graph.blocks[0]
    ops = [n for n in entry.nodes if isinstance(n, Op)]
    assert len(ops) == 4 * 4
    assert ops[0].inputs == (VarRef("h"), VarRef("Wq", (0,)))
    assert ops[-1].output == VarRef("h")
    writes = [n for n in entry.nodes if isinstance(n, CacheWrite)]
    assert writes[3].dst == CacheAccess("K", (CacheIndex(3), CacheIndex("step")), bracketed=True)
    # Locations are the helper's lines (the user's code), not the builder's.
    _, first = inspect.getsourcelines(_transformer_layer)
    assert ops[0].loc is not None and ops[0].loc.line == first + 2
    assert ops[0].loc.file == __file__
    validate(graph)


def test_dsl_loop_with_loop_index() -> None:
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B", "D")
    W = g.volatile("W", "f32", "D", "D", index="l", pattern="W.{l}")
    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "D")
        b.transfer(x) >> h
        with b.loop("layers", "l", 0, "L") as li:
            b.op.matmul(h, W[li]) >> h
        b.return_()
    graph = g.build()
    loop = graph.blocks[0].nodes[2]
    assert isinstance(loop, Loop)
    assert (loop.name, loop.index, loop.start, loop.end) == ("layers", "l", 0, "L")
    assert loop.body[0] == Op("matmul", (VarRef("h"), VarRef("W", ("l",))), (), VarRef("h"))
    validate(graph)


def test_cache_slices_map_to_cache_slice() -> None:
    g = GraphBuilder()
    step = g.persistent("step", "i32", init=0)
    A = g.persistent("A", "f32", "D", index="i", table=True)
    K = g.persistent("K", "f16", "H", index=("l", "t"), table=True)
    out = g.volatile("out", "f32", "n", "D")
    with g.block("entry") as b:
        b.cache.read(A[0:step]) >> out
        b.cache.read(A[2:-3]) >> out
        b.cache.read(A[:5]) >> out
        b.cache.read(A[2:]) >> out
        b.cache.read(A[...]) >> out
        b.cache.read(A[:]) >> out
        with b.loop("layers", "l", 0, 2) as li:
            b.cache.reset(K[li, 0:-3])
        b.cache.reset(K)
    entry = g.build().blocks[0].nodes
    sources = [n.src for n in entry if isinstance(n, CacheRead)]
    assert sources == [
        CacheAccess("A", (CacheSlice(0, "step"),), True),
        CacheAccess("A", (CacheSlice(2, -3),), True),
        CacheAccess("A", (CacheSlice(None, 5),), True),
        CacheAccess("A", (CacheSlice(2, None),), True),
        CacheAccess("A", (), True),
        CacheAccess("A", (CacheSlice(None, None),), True),
    ]
    loop = entry[6]
    assert isinstance(loop, Loop)
    assert loop.body[0].target == CacheAccess("K", (CacheIndex("l"), CacheSlice(0, -3)), True)  # type: ignore[attr-defined]
    assert entry[7].target == CacheAccess("K")  # type: ignore[attr-defined]


def test_settings_convert_like_the_text() -> None:
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B")
    alpha = g.constant("alpha", "f32")
    with g.block("entry") as b:
        y = b.assign("y", "f16", "B")
        b.op.cast(x, to="f16", rounding_mode="nearest", saturate=True) >> y
        b.op.sum_axis(x, axes=[0], keepdims=False, acc=["f32", "f32"]) >> y
        b.op.fill(x, value=alpha) >> x
        b.op.clamp(x, min=-math.inf, max=3) >> x
    ops = [n for n in g.build().blocks[0].nodes if isinstance(n, Op)]
    assert ops[0].params == (("to", DType.F16), ("rounding_mode", "nearest"), ("saturate", True))
    assert ops[1].params == (("axes", (0,)), ("keepdims", False), ("acc", (DType.F32, DType.F32)))
    assert ops[2].params == (("value", VarName("alpha")),)
    assert ops[3].params == (("min", -math.inf), ("max", 3))
    assert isinstance(ops[3].params[1][1], int)


def test_declaration_attributes() -> None:
    g = GraphBuilder()
    g.persistent("K", "f16", "H", "3 * Dh", index=("l", "t"), table=True, fixed={"t": 128}, init=0)
    g.constant("c", DType.BF16, [4, "B*D"], ref="model.c")
    k, c = g.build().vars
    assert k.kind is MemoryKind.PERSISTENT and k.dims == ("H", "3*Dh") and k.fixed == (("t", 128),)
    assert k.table and k.table_indices == ("l", "t") and k.init == 0
    assert c.dtype is DType.BF16 and c.dims == (4, "B*D") and c.ref == "model.c"


def test_node_location_is_the_call_site() -> None:
    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B")
    with g.block("entry") as b:
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        b.op.relu(x, clamp_max=6.0) >> x
    node = g.build().blocks[0].nodes[0]
    assert node.loc is not None
    assert (node.loc.file, node.loc.line, node.loc.column) == (__file__, line, 9)
    assert node.loc.snippet == "        b.op.relu(x, clamp_max=6.0) >> x"


# ---- errors: each case's LAST line is the offending call --------------------------------------
def _unknown_dtype() -> None:
    g = GraphBuilder()
    g.volatile("x", "f33", "B")


def _bad_dim() -> None:
    g = GraphBuilder()
    g.volatile("W", "f32", "D", "W.{l}")


def _unknown_attribute() -> None:
    g = GraphBuilder()
    g.volatile("W", "f32", "D", patern="W.{l}")


def _duplicate_var() -> None:
    g = GraphBuilder()
    g.volatile("x", "f32", "B")
    g.constant("x", "f32", "B")


def _duplicate_block() -> None:
    g = GraphBuilder()
    g.block("entry")
    g.block("entry")


def _assign_duplicate() -> None:
    g = GraphBuilder()
    g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        b.assign("h", "f32", "B")


def _setting_positional() -> None:
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        b.op.relu(h, 0.01) >> h


def _route_undeclared() -> None:
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        b.op.relu(h) >> "hh"


def _route_not_a_variable() -> None:
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        b.op.relu(h) >> 3


def _unknown_input_name() -> None:
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        b.op.relu("hx") >> h


def _other_builder() -> None:
    other = GraphBuilder()
    foreign = other.volatile("h", "f32", "B")
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        b.op.add(h, foreign) >> h


def _routed_twice() -> None:
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        pending = b.op.relu(h)
        pending >> h
        pending >> h


def _slice_as_operand() -> None:
    g = GraphBuilder()
    W = g.volatile("W", "f32", "D", index="l", pattern="W.{l}")
    h = g.volatile("h", "f32", "D")
    with g.block("entry") as b:
        b.op.relu(W[0:2]) >> h


def _slice_with_step() -> None:
    g = GraphBuilder()
    K = g.persistent("K", "f32", "D", index="t", table=True)
    h = g.volatile("h", "f32", "n", "D")
    with g.block("entry") as b:
        b.cache.read(K[0:8:2]) >> h


def _branch_without_else() -> None:
    g = GraphBuilder()
    cond = g.volatile("cond", "bool")
    with g.block("entry") as b:
        b.branch(cond, "ok")


def _emit_after_close() -> None:
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        pass
    b.op.relu(h) >> h


def _metadata_dtype() -> None:
    g = GraphBuilder()
    g.constant("s", "string")


def _bad_fixed() -> None:
    g = GraphBuilder()
    g.persistent("K", "f32", "D", index="t", table=True, fixed={"t": "big"})


def _bool_index() -> None:
    g = GraphBuilder()
    W = g.volatile("W", "f32", "D", index="l", pattern="W.{l}")
    h = g.volatile("h", "f32", "D")
    with g.block("entry") as b:
        b.op.relu(W[True]) >> h


def _bad_loop_bound() -> None:
    g = GraphBuilder()
    with g.block("entry") as b:
        b.loop("layers", "l", 0, 2.5)


def _bad_setting_value() -> None:
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        b.op.relu(h, clamp_max={"a": 1}) >> h


def _iterate_a_variable() -> None:
    g = GraphBuilder()
    W = g.volatile("W", "f32", "D", index="l", pattern="W.{l}")
    _first, _second = W


def _unknown_acc_dtype() -> None:
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        b.op.matmul(h, h, acc=["f32", "f99"]) >> h


ERROR_CASES: list[tuple[Callable[[], None], str]] = [
    (_unknown_dtype, "unknown dtype 'f33'; expected one of"),
    (_bad_dim, "bad dimension 'W.{l}'; expected an int, a sizevar name or a product"),
    (_unknown_attribute, "unknown attribute 'patern'; expected one of init, ref, pattern"),
    (_duplicate_var, "duplicate name 'x'"),
    (_duplicate_block, "duplicate block name 'entry'"),
    (_assign_duplicate, "assign: duplicate name 'h'"),
    (_setting_positional, "positional argument 2 is 0.01; inputs are variables and settings must be given by name"),
    (_route_undeclared, "'hh' is not declared"),
    (_route_not_a_variable, "the output must be a declared or assigned variable"),
    (_unknown_input_name, "'hx' is not declared; declare it"),
    (_other_builder, "'h' belongs to another GraphBuilder"),
    (_routed_twice, "already routed"),
    (_slice_as_operand, "slices like W[a:b] are only for cache.read"),
    (_slice_with_step, "cache slices have no step"),
    (_branch_without_else, "a conditional branch needs both blocks"),
    (_emit_after_close, "block 'entry' is closed"),
    (_metadata_dtype, "string is a metadata type"),
    (_bad_fixed, "expected index=int pairs"),
    (_bool_index, "index True is a bool"),
    (_bad_loop_bound, "expected an int, a sizevar name or a scalar variable, got 2.5"),
    (_bad_setting_value, "setting clamp_max={'a': 1} has type dict"),
    (_unknown_acc_dtype, "unknown dtype 'f99'"),
    (_iterate_a_variable, "'W' is a program variable, not a Python sequence"),
]


@pytest.mark.parametrize("case,expected", ERROR_CASES, ids=[c.__name__.strip("_") for c, _ in ERROR_CASES])
def test_builder_errors_name_the_user_line(case: Callable[[], None], expected: str) -> None:
    lines, first = inspect.getsourcelines(case)
    last_line = first + len(lines) - 1
    with pytest.raises(DslSyntaxError) as info:
        case()
    message = str(info.value)
    assert expected in message
    assert f"{__file__}:{last_line}:" in message.splitlines()[0]
    snippet, caret = message.splitlines()[-2:]
    assert snippet.strip() == lines[-1].strip()
    assert caret.strip() == "^"
    # The caret sits under the offending call: the statement, or the subscript inside it.
    column = len(caret) - 1
    assert len(snippet) - len(snippet.lstrip()) <= column < len(snippet)
    assert snippet[column].isalpha() or snippet[column] == "_"


def test_unrouted_op_is_reported_at_build_with_its_line() -> None:
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        b.op.relu(h)
        b.op.add(h, h) >> h
    with pytest.raises(DslSyntaxError) as info:
        g.build()
    message = str(info.value)
    assert f"{__file__}:{line}:" in message
    assert "op relu is never routed to an output; add `>> target`" in message
    assert "b.op.relu(h)" in message


def test_routing_in_another_loop_is_rejected() -> None:
    g = GraphBuilder()
    h = g.volatile("h", "f32", "B")
    with g.block("entry") as b:
        pending = b.op.relu(h)
        with b.loop("inner", "i", 0, 2), pytest.raises(DslSyntaxError, match="different block or loop"):
            pending >> h


def test_build_is_repeatable_and_equal() -> None:
    first = _transformer(2).build()
    second = _transformer(2).build()
    assert first == second
    assert first != _transformer(3).build()
