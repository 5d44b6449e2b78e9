"""Static planning of a graph for the simulator: node numbering and jit regions.

Every node gets a deterministic index (pre-order over blocks, loop bodies included) and a
deterministic UUID (uuid5 of block, path and text), so traces of two runs compare equal.
Each node list (a block body or a loop body) is split into *items*: a `RegionPlan` is a
maximal run of pure nodes (ops, assign, transfer, dep) compiled as one jax.jit function;
every other node (cache ops, branch, loop, yield/await, barrier, return) is an effect the
Python scheduler runs itself (DESIGN.md, "Pure regions go to XLA").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Barrier,
    Block,
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
    Graph,
    Loop,
    Node,
    Op,
    Return,
    Transfer,
    VarName,
    VarRef,
    Yield,
)

__all__ = ["GraphPlan", "Item", "NodeInfo", "RegionPlan", "describe_node", "node_kind"]

_NAMESPACE = uuid.UUID("6f1c3a52-8d0e-4b8a-9d61-0b7e5f3c2a19")

# Trace `kind` of each node class (the original's TraceEvent kinds).
_KINDS: dict[type, str] = {
    Assign: "Assign",
    Op: "OpExecute",
    CacheRead: "CacheRead",
    CacheWrite: "CacheWrite",
    CacheIncrement: "CacheIncrement",
    CacheDecrement: "CacheDecrement",
    CacheReset: "CacheReset",
    Barrier: "Barrier",
    Dep: "Dep",
    Transfer: "Transfer",
    Yield: "Yield",
    Await: "Await",
    Branch: "Branch",
    Loop: "Loop",
    Return: "Return",
}

# Nodes a jit region may contain: pure computation and ordering hints.
_PURE = (Op, Assign, Transfer, Dep)


def node_kind(node: Node) -> str:
    """The trace kind of a node (``OpExecute``, ``CacheRead``...)."""
    return _KINDS[type(node)]


def describe_node(node: Node) -> str:
    """One line of DSL-like text for a node (trace lines and error messages)."""
    if isinstance(node, Op):
        args = [str(r) for r in node.inputs] + [f"{k}={_fmt(v)}" for k, v in node.params]
        return f"op {node.op}({', '.join(args)}) >> {node.output}"
    if isinstance(node, Assign):
        dims = f"[{', '.join(str(d) for d in node.dims)}]" if node.dims else ""
        return f"assign {node.name}: {node.dtype.short}{dims}"
    if isinstance(node, Transfer):
        return f"transfer {node.src} >> {node.dst}"
    if isinstance(node, CacheRead):
        return f"cache.read {node.src} >> {node.dst}"
    if isinstance(node, CacheWrite):
        return f"cache.write {node.src} >> {node.dst}"
    if isinstance(node, CacheIncrement):
        return f"cache.increment {node.amount} {node.name}"
    if isinstance(node, CacheDecrement):
        return f"cache.decrement {node.amount} {node.name}"
    if isinstance(node, CacheReset):
        return f"cache.reset {node.target}"
    if isinstance(node, Branch):
        if node.cond is None:
            return f"branch {node.then_block}"
        return f"branch {node.cond} {node.then_block} {node.else_block}"
    if isinstance(node, Loop):
        return f"loop {node.name} ({node.index} in {node.start}..{node.end})"
    if isinstance(node, Yield):
        return f"yield {', '.join(node.vars)}"
    if isinstance(node, Await):
        return f"await {', '.join(node.vars)}"
    if isinstance(node, Dep):
        return f"dep after({node.after}) before({node.before})"
    if isinstance(node, Barrier):
        return "barrier"
    value = getattr(node, "value", None)
    return f"return {value}" if value else "return"


def _fmt(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return f"[{', '.join(str(v) for v in value)}]"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def _index_names(access: CacheAccess) -> set[str]:
    names: set[str] = set()
    for idx in access.indices:
        if isinstance(idx, CacheIndex) and isinstance(idx.value, str):
            names.add(idx.value)
        elif isinstance(idx, CacheSlice):
            names.update(b for b in (idx.start, idx.end) if isinstance(b, str))
    return names


def _read_names(node: Node) -> set[str]:
    """Every name a node itself may read (inputs, indices, bounds, conditions, params).

    Deliberately generous: a name listed here keeps a region output materialized, so an
    extra name costs speed, never correctness. A loop's body nodes are not included.
    """
    names: set[str] = set()

    def ref(r: VarRef) -> None:
        names.add(r.name)
        names.update(i for i in r.indices if isinstance(i, str))

    if isinstance(node, Op):
        for r in node.inputs:
            ref(r)
        names.update(i for i in node.output.indices if isinstance(i, str))
        names.update(v.name for _k, v in node.params if isinstance(v, VarName))
    elif isinstance(node, Transfer):
        ref(node.src)
        names.update(i for i in node.dst.indices if isinstance(i, str))
    elif isinstance(node, CacheRead):
        names.update(_index_names(node.src))
        names.update(i for i in node.dst.indices if isinstance(i, str))
    elif isinstance(node, CacheWrite):
        ref(node.src)
        names.update(_index_names(node.dst))
    elif isinstance(node, CacheReset):
        names.update(_index_names(node.target))
    elif isinstance(node, Branch):
        names.update(n for n in (node.cond,) if n)
    elif isinstance(node, Loop):
        names.update(b for b in (node.start, node.end) if isinstance(b, str))
    elif isinstance(node, (Yield, Await)):
        names.update(node.vars)
    elif isinstance(node, Return):
        names.update(n for n in (getattr(node, "value", None),) if n)
    return names


def _all_nodes(nodes: tuple[Node, ...]) -> Iterator[Node]:
    """The nodes of a list and, recursively, of the loop bodies in it."""
    for node in nodes:
        yield node
        if isinstance(node, Loop):
            yield from _all_nodes(node.body)


def _written_names(node: Node) -> set[str]:
    """Variables a node (or a loop body) writes."""
    if isinstance(node, Op):
        return {node.output.name}
    if isinstance(node, (Transfer, CacheRead, CacheWrite)):
        return {node.dst.name}
    if isinstance(node, Assign):
        return {node.name}
    if isinstance(node, Loop):
        out: set[str] = set()
        for child in node.body:
            out |= _written_names(child)
        return out
    return set()


@dataclass(frozen=True)
class NodeInfo:
    """Where a node sits: its block, global index, UUID and description."""

    block: str
    index: int
    uuid: str
    desc: str
    kind: str
    loc: str = ""  # `file:line:column` (base name), "" when the node has no location


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
        self.info: dict[int, NodeInfo] = {}
        self._items: dict[tuple[int, bool], list[Item]] = {}
        self.regions: list[RegionPlan] = []
        counter = 0
        for block in graph.blocks:
            counter = self._number(block.name, block.nodes, counter, path=block.name)
        # name -> ids of the nodes that may read it (for the regions' live outputs)
        self._readers: dict[str, set[int]] = {}
        for block in graph.blocks:
            for node in _all_nodes(block.nodes):
                for name in _read_names(node):
                    self._readers.setdefault(name, set()).add(id(node))

    def _number(self, block: str, nodes: tuple[Node, ...], counter: int, path: str) -> int:
        for pos, node in enumerate(nodes):
            desc = describe_node(node)
            key = f"{path}/{pos}/{desc}"
            self.info[id(node)] = NodeInfo(
                block=block,
                index=counter,
                uuid=str(uuid.uuid5(_NAMESPACE, key)),
                desc=desc,
                kind=node_kind(node),
                loc=_short_loc(node),
            )
            counter += 1
            if isinstance(node, Loop):
                counter = self._number(block, node.body, counter, path=f"{key}/body")
        return counter

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
                written.update(_written_names(node))
                if not fused:
                    flush()
            elif fused and wide and self._wide_ok(node, written):
                run.append(node)
                written.update(_written_names(node))
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
            return self._is_persistent(node.src.name) and not (_index_names(node.src) & written)
        if isinstance(node, CacheWrite):
            return self._is_persistent(node.dst.name) and not (_index_names(node.dst) & written)
        if isinstance(node, Loop):
            bounds = {b for b in (node.start, node.end) if isinstance(b, str)}
            if bounds & written:
                return False
            inner = set(written)
            for child in node.body:
                inner.update(_written_names(child))
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
        inside = {id(n) for n in _all_nodes(nodes)}
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


def _short_loc(node: Node) -> str:
    loc = getattr(node, "loc", None)
    return loc.short() if loc is not None else ""
