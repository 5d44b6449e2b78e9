"""Which variables a node reads and writes, and whether a value is still needed after a point.

The passes rewrite node sequences (a block's nodes or a loop body) locally; before they drop
or redirect a write they ask `dead_after` whether any later node could read the old value.
The answers are conservative: a branch, yield, await or return between two nodes counts as
touching every variable (its target blocks run there), so a pass never moves a value across
one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Branch,
    CacheAccess,
    CacheDecrement,
    CacheIncrement,
    CacheIndex,
    CacheRead,
    CacheReset,
    CacheSlice,
    CacheWrite,
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

__all__ = ["Access", "Frame", "access", "all_nodes", "dead_after", "written_names"]


@dataclass(frozen=True)
class Access:
    """What one node touches. `full_writes` are variables it overwrites entirely without
    reading them first; `barrier` means the node may touch anything (control transfer)."""

    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    full_writes: frozenset[str] = frozenset()
    barrier: bool = False

    def touches(self, name: str) -> bool:
        """True if the node may read or write `name`."""
        return self.barrier or name in self.reads or name in self.writes


_BARRIER = Access(barrier=True)


def _ref_reads(ref: VarRef) -> set[str]:
    """The variable of a reference plus the scalar variables its indices name."""
    return {ref.name, *(i for i in ref.indices if isinstance(i, str))}


def _index_reads(indices: Iterable[int | str]) -> set[str]:
    return {i for i in indices if isinstance(i, str)}


def _cache_index_reads(acc: CacheAccess) -> set[str]:
    names: set[str] = set()
    for item in acc.indices:
        if isinstance(item, CacheIndex):
            names |= _index_reads((item.value,))
        elif isinstance(item, CacheSlice):
            names |= _index_reads(x for x in (item.start, item.end) if x is not None)
    return names


def _written(ref: VarRef, reads: set[str]) -> tuple[frozenset[str], frozenset[str]]:
    """(writes, full writes) of a write through `ref`: an indexed write is partial."""
    full = frozenset() if ref.indices or ref.name in reads else frozenset({ref.name})
    return frozenset({ref.name}), full


def access(node: Node) -> Access:
    """The variables `node` reads and writes (loop bodies merged; control transfers are
    barriers). Loop indices are not variables and are left out."""
    if isinstance(node, Op):
        reads: set[str] = set()
        for ref in node.inputs:
            reads |= _ref_reads(ref)
        reads |= {v.name for _, v in node.params if isinstance(v, VarName)}
        reads |= _index_reads(node.output.indices)
        writes, full = _written(node.output, reads)
        return Access(frozenset(reads), writes, full)
    if isinstance(node, Assign):
        return Access(writes=frozenset({node.name}), full_writes=frozenset({node.name}))
    if isinstance(node, Transfer):
        reads = _ref_reads(node.src) | _index_reads(node.dst.indices)
        writes, full = _written(node.dst, reads)
        return Access(frozenset(reads), writes, full)
    if isinstance(node, CacheRead):
        reads = {node.src.name} | _cache_index_reads(node.src) | _index_reads(node.dst.indices)
        writes, full = _written(node.dst, reads)
        return Access(frozenset(reads), writes, full)
    if isinstance(node, CacheWrite):
        reads = _ref_reads(node.src) | _cache_index_reads(node.dst)
        return Access(frozenset(reads), frozenset({node.dst.name}))
    if isinstance(node, (CacheIncrement, CacheDecrement)):
        return Access(frozenset({node.name}), frozenset({node.name}))
    if isinstance(node, CacheReset):
        reads = _cache_index_reads(node.target)
        return Access(frozenset(reads), frozenset({node.target.name}))
    if isinstance(node, Loop):
        reads = {b for b in (node.start, node.end) if isinstance(b, str)}
        writes: set[str] = set()
        for inner in node.body:
            sub = access(inner)
            if sub.barrier:
                return _BARRIER
            reads |= sub.reads
            writes |= sub.writes
        return Access(frozenset(reads), frozenset(writes))
    if isinstance(node, (Branch, Yield, Await, Return)):
        return _BARRIER
    return Access()  # barrier, dep: ordering only


def all_nodes(nodes: Iterable[Node]) -> Iterator[Node]:
    """Every node, loop bodies included, in textual order."""
    for node in nodes:
        yield node
        if isinstance(node, Loop):
            yield from all_nodes(node.body)


def written_names(graph: Graph) -> set[str]:
    """Every variable some node of the graph writes (assigns included)."""
    names: set[str] = set()
    for block in graph.blocks:
        for node in all_nodes(block.nodes):
            names |= access(node).writes
    return names


@dataclass(frozen=True)
class Frame:
    """A position in a nested node sequence: `nodes[index]` of a block (`loop` False) or
    of a loop body (`loop` True). A path is a tuple of frames, outermost first."""

    nodes: tuple[Node, ...]
    index: int
    loop: bool


def _first_touch(nodes: Iterable[Node], name: str) -> str | None:
    """ "dead" if the first node touching `name` overwrites it, "live" if it may read it,
    "end" if a `return` ends the block first, None if no node touches it."""
    for node in nodes:
        if isinstance(node, Return):
            return "end"
        acc = access(node)
        if not acc.touches(name):
            continue
        if not acc.barrier and name in acc.full_writes:
            return "dead"
        return "live"
    return None


def dead_after(path: tuple[Frame, ...], name: str, wrap_end: int, end_dead: bool) -> bool:
    """True if no node can read the value `name` holds right after ``path[-1]``.

    The innermost sequence is scanned after its index; in a loop body the next iteration
    is scanned too, from the body's start to `wrap_end` (inclusive: the node that defines the
    value, which overwrites it again). Then each enclosing sequence after its loop node.
    Reaching the end of the top-level block (or a `return`), the value is dead iff
    `end_dead` (an entry block's temporary that is not a requested output).
    """
    for depth in range(len(path) - 1, -1, -1):
        frame = path[depth]
        first = _first_touch(frame.nodes[frame.index + 1 :], name)
        if first == "end":
            return end_dead
        if first is not None:
            return first == "dead"
        if frame.loop:
            stop = wrap_end if depth == len(path) - 1 else frame.index
            if _first_touch(frame.nodes[: stop + 1], name) == "live":
                return False
    return end_dead
