"""What a node reads, writes, contains and runs (Node.reads/writes/children/targets), the one
walker (ir/walk.py) and the one node printer used by messages, traces and the emitted C."""

from __future__ import annotations

import sys

import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Barrier,
    Branch,
    CacheAccess,
    CacheDecrement,
    CacheIncrement,
    CacheIndex,
    CacheRead,
    CacheReset,
    CacheSlice,
    CacheWrite,
    Dep,
    Loop,
    Node,
    Op,
    Return,
    Transfer,
    VarName,
    VarRef,
    Yield,
)
from openinfer_jax.ir.printer import describe_node, format_node
from openinfer_jax.ir.walk import reads_in, walk, walk_graph, writes_in
from openinfer_jax.trace import parse

K_L_STEP = CacheAccess("K", (CacheIndex("l"), CacheSlice(0, "step")))
BODY = (Op("relu", (VarRef("x"),), (), VarRef("x")),)

# node, reads, writes, children, targets
CASES: list[tuple[Node, tuple[str, ...], tuple[str, ...], tuple[Node, ...], tuple[str, ...]]] = [
    (
        Op("clamp", (VarRef("x"), VarRef("W", ("l",))), (("max", VarName("hi")),), VarRef("y")),
        ("x", "W", "l", "hi"),
        ("y",),
        (),
        (),
    ),
    (Op("add", (VarRef("h"), VarRef("h")), (), VarRef("h")), ("h",), ("h",), (), ()),
    (Op("add", (VarRef("a"),), (), VarRef("P", ("i",))), ("a", "i"), ("P",), (), ()),
    # `assign` zero-fills its temporary: it writes it (and reads nothing).
    (Assign("t", DType.F32, (4,)), (), ("t",), (), ()),
    (Transfer(VarRef("a", ("j",)), VarRef("b")), ("a", "j"), ("b",), (), ()),
    (CacheRead(K_L_STEP, VarRef("k")), ("K", "l", "step"), ("k",), (), ()),
    (CacheWrite(VarRef("k"), CacheAccess("K", (CacheIndex("l"), CacheIndex(-1)))), ("k", "l"), ("K",), (), ()),
    (CacheIncrement("step", 2), ("step",), ("step",), (), ()),
    (CacheDecrement("step"), ("step",), ("step",), (), ()),
    (CacheReset(CacheAccess("K", (CacheIndex("l"),))), ("l",), ("K",), (), ()),
    (CacheReset(CacheAccess("step")), (), ("step",), (), ()),
    (Branch("then", "flag", "other"), ("flag",), (), (), ("then", "other")),
    (Branch("always"), (), (), (), ("always",)),
    (Loop("layers", "l", 0, "L", BODY), ("L",), (), BODY, ()),
    (Yield(("a", "b")), ("a", "b"), (), (), ()),
    # `await` makes visible values written elsewhere: it writes nothing itself.
    (Await(("a",)), (), (), (), ()),
    (Return("h"), ("h",), (), (), ()),
    (Return(), (), (), (), ()),
    (Barrier(), (), (), (), ()),
    (Dep("a", "b"), (), (), (), ()),
]


@pytest.mark.parametrize(("node", "reads", "writes", "children", "targets"), CASES)
def test_node_answers(
    node: Node,
    reads: tuple[str, ...],
    writes: tuple[str, ...],
    children: tuple[Node, ...],
    targets: tuple[str, ...],
) -> None:
    assert node.reads() == reads
    assert node.writes() == writes
    assert node.children() == children
    assert node.targets() == targets


def test_every_node_kind_is_covered() -> None:
    kinds = {type(case[0]) for case in CASES}
    assert kinds == set(Node.__subclasses__())


PROGRAM = """
graph {
  dynamic { x: f32[4]; n: i32; }
  persistent { step: i32; }
  block entry {
    assign t: f32[4];
    loop outer (i in 0..n) {
      op relu(x) >> t;
      loop inner (j in 0..2) {
        op add(t, x) >> t;
      }
    }
    cache.increment step;
    branch other;
    return;
  }
  block other {
    op neg(x) >> x;
    return;
  }
}
"""


def test_walk_is_depth_first_in_source_order() -> None:
    graph = parse(PROGRAM)
    kinds = [type(n).__name__ for n in walk(graph.blocks[0].nodes)]
    assert kinds == ["Assign", "Loop", "Op", "Loop", "Op", "CacheIncrement", "Branch", "Return"]
    assert [type(n).__name__ for n in walk_graph(graph)][-2:] == ["Op", "Return"]
    assert writes_in(graph.blocks[0].nodes) == {"t", "step"}
    assert reads_in(graph.blocks[0].nodes) == {"n", "x", "t", "step"}


def test_walk_survives_nesting_deeper_than_the_recursion_limit() -> None:
    node: Node = BODY[0]
    depth = sys.getrecursionlimit() + 100
    for i in range(depth):
        node = Loop(f"l{i}", f"i{i}", 0, 1, (node,))
    assert sum(1 for _ in walk((node,))) == depth + 1


def test_one_printer_for_messages_and_the_program() -> None:
    node = Op("relu", (VarRef("h"),), (("clamp_max", 6.0),), VarRef("h"))
    assert format_node(node) == "op relu(h, clamp_max=6.0) >> h;"
    assert describe_node(node) == "op relu(h, clamp_max=6.0) >> h"
    loop = parse(PROGRAM).blocks[0].nodes[1]
    assert describe_node(loop) == "loop outer (i in 0..n)"
    assert describe_node(CacheIncrement("step")) == "cache.increment step"


def test_numbering_is_preorder_and_stable() -> None:
    from openinfer_jax.ir.numbering import number_nodes

    graph = parse(PROGRAM)
    infos = sorted(number_nodes(graph).values(), key=lambda info: info.index)
    assert [info.desc for info in infos][:5] == [
        "assign t: f32[4]",
        "loop outer (i in 0..n)",
        "op relu(x) >> t",
        "loop inner (j in 0..2)",
        "op add(t, x) >> t",
    ]
    assert [info.index for info in infos] == list(range(len(infos)))
    again = sorted(number_nodes(parse(PROGRAM)).values(), key=lambda info: info.index)
    assert [i.uuid for i in infos] == [i.uuid for i in again]
    assert infos[2].kind == "OpExecute" and infos[-1].block == "other"
