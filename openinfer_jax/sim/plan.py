"""Static planning of a graph for the simulator: jit regions.

Every node gets a deterministic index and UUID from `openinfer_jax.ir.numbering` (the
emitted C trace numbers nodes the same way), so traces of two runs compare equal.
Each node list (a block body or a loop body) is split into *items*: a `RegionPlan` is a
maximal run of pure nodes (ops, assign, transfer, dep) compiled as one jax.jit function;
every other node (cache ops, branch, loop, yield/await, barrier, return) is an effect the
Python scheduler runs itself (DESIGN.md, "Pure regions go to XLA").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from openinfer_jax.ir.nodes import (
    Assign,
    Block,
    CacheRead,
    CacheWrite,
    Dep,
    Graph,
    Loop,
    Node,
    Op,
    Transfer,
    VarRef,
)
from openinfer_jax.ir.numbering import NodeInfo, number_nodes
from openinfer_jax.ir.walk import walk, writes_in

__all__ = ["GraphPlan", "Item", "RegionPlan"]

# Nodes a jit region may contain: pure computation and ordering hints.
_PURE = (Op, Assign, Transfer, Dep)


@dataclass
class RegionPlan:
    """A maximal run of pure nodes, compiled as one function per input signature.

    `reads` are the variable references read before being written in the region (its
    inputs, in first-use order); `writes` those it writes (its outputs). `used_after`
    names the written variables that some node outside the region may read, or that the
    region reads itself (a later run of it, in a loop or a later step, sees them): only
    those are always returned by the compiled region. With `lean` (fused plans), another
    output is not returned: an untouched `assign` becomes a `Zeros` placeholder and a
    value computed from the region's inputs alone a `Deferred` one (computed if fetched).
    """

    id: int
    block: str
    nodes: tuple[Node, ...]
    reads: tuple[VarRef, ...] = ()
    writes: tuple[VarRef, ...] = ()
    assigns: tuple[str, ...] = field(default_factory=tuple)
    wide: bool = False
    used_after: frozenset[str] = frozenset()
    lean: bool = False


Item = RegionPlan | Node


class GraphPlan:
    """Node numbering plus the fused and per-node item lists of every node list.

    `items(nodes, fused)` returns the plan of one node list; `fused=False` gives one region
    per pure node (used by `Executor.iterate`, so values can be fetched after each node).
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._items: dict[tuple[int, bool], list[Item]] = {}
        self.regions: list[RegionPlan] = []
        self.info: dict[int, NodeInfo] = number_nodes(graph)
        # name -> ids of the nodes that may read it (for the regions' live outputs)
        self._readers: dict[str, set[int]] = {}
        for block in graph.blocks:
            # Every name a node may read (inputs, indices, bounds, conditions, params):
            # deliberately generous, an extra name keeps an output materialized (speed), a
            # missing one would drop a value (correctness).
            for node in walk(block.nodes):
                for name in node.reads():
                    self._readers.setdefault(name, set()).add(id(node))

    def block_items(self, block: Block, fused: bool) -> list[Item]:
        """The items of a block body."""
        return self.items(block.name, block.nodes, fused)

    def items(
        self, block: str, nodes: tuple[Node, ...], fused: bool, wide: bool = True
    ) -> list[Item]:
        """The items of a node list (cached; identity of the tuple is the key).

        Fused regions also take in cache reads/writes of persistent memory and whole loops
        whose bodies qualify (a *wide* region, run by `WideRunner`), as long as every cache index and
        loop bound they name is known on the host when the region starts, i.e. not
        written by an earlier node of the same region. `wide=False` keeps this list's
        effects (and loops) out of regions: the plan of a wide region whose loops turned
        out too long to unroll (long_loops.py).
        """
        key = (id(nodes), fused, wide)
        cached = self._items.get(key)
        if cached is not None:
            return cached
        out: list[Item] = []
        run: list[Node] = []
        written: set[str] = set()

        def flush() -> None:
            if run:
                out.append(self._region(block, tuple(run), lean=fused))
                run.clear()
                written.clear()

        for node in nodes:
            if isinstance(node, _PURE):
                run.append(node)
                written.update(writes_in((node,)))
                if not fused:
                    flush()
            elif fused and wide and self._wide_ok(node, written):
                run.append(node)
                written.update(writes_in((node,)))
            else:
                flush()
                out.append(node)
        flush()
        self._items[key] = out
        return out

    def _is_persistent(self, name: str) -> bool:
        decl = self.graph.var(name)
        return decl is not None and decl.kind.value == "persistent"

    def _wide_ok(self, node: Node, written: set[str]) -> bool:
        """Can `node` join a wide region after nodes that wrote `written`?

        Cache reads and writes of persistent memory (tables and plain persistent variables)
        can, as long as the indices they name are not written earlier in the region.
        """
        if isinstance(node, CacheRead):
            return self._is_persistent(node.src.name) and not (
                set(node.src.index_names()) & written
            )
        if isinstance(node, CacheWrite):
            return self._is_persistent(node.dst.name) and not (
                set(node.dst.index_names()) & written
            )
        if isinstance(node, Loop):
            bounds = {b for b in (node.start, node.end) if isinstance(b, str)}
            if bounds & written:
                return False
            inner = set(written)
            inner.update(writes_in(node.body))
            inner.discard(node.index)
            return all(isinstance(c, _PURE) or self._wide_ok(c, inner) for c in node.body)
        return False

    def _region(self, block: str, nodes: tuple[Node, ...], lean: bool = False) -> RegionPlan:
        reads: list[VarRef] = []
        writes: list[VarRef] = []
        written: set[VarRef] = set()
        assigns: list[str] = []

        def read(ref: VarRef) -> None:
            if ref not in written and ref not in reads:
                reads.append(ref)

        def write(ref: VarRef) -> None:
            written.add(ref)
            if ref not in writes:
                writes.append(ref)

        for node in nodes:
            if isinstance(node, Op):
                for ref in node.inputs:
                    read(ref)
                write(node.output)
            elif isinstance(node, Transfer):
                read(node.src)
                write(node.dst)
            elif isinstance(node, Assign):
                write(VarRef(node.name))
                assigns.append(node.name)
        inside = {id(n) for n in walk(nodes)}
        read_names = {r.name for r in reads}
        used_after = frozenset(
            ref.name
            for ref in writes
            if ref.name in read_names or self._readers.get(ref.name, set()) - inside
        )
        plan = RegionPlan(
            id=len(self.regions),
            block=block,
            nodes=nodes,
            reads=tuple(reads),
            writes=tuple(writes),
            assigns=tuple(assigns),
            wide=any(not isinstance(n, _PURE) for n in nodes),
            used_after=used_after,
            lean=lean,
        )
        self.regions.append(plan)
        return plan
