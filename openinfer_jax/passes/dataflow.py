"""Which variables a node reads and writes, and whether a value is still needed after a point.

The passes rewrite node sequences (a block's nodes or a loop body) locally; before they drop
or redirect a write they ask `dead_after` whether any later node could read the old value.
The answers are conservative: a branch, yield, await or return between two nodes counts as
touching every variable (its target blocks run there), so a pass never moves a value across
one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Branch,
    CacheRead,
    Loop,
    Node,
    Op,
    Return,
    Transfer,
    Yield,
)

__all__ = ["Access", "Frame", "access", "dead_after"]


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


def access(node: Node) -> Access:
    """The variables `node` reads and writes (`Node.reads`/`writes`; loop bodies merged;
    control transfers are barriers)."""
    if isinstance(node, (Branch, Yield, Await, Return)):
        return _BARRIER
    reads, writes = set(node.reads()), set(node.writes())
    if isinstance(node, Loop):
        for inner in node.body:
            sub = access(inner)
            if sub.barrier:
                return _BARRIER
            reads |= sub.reads
            writes |= sub.writes
        return Access(frozenset(reads), frozenset(writes))
    if isinstance(node, Assign):
        return Access(frozenset(reads), frozenset(writes), frozenset(writes))
    # An indexed write, or one whose node reads the old value, is partial.
    target = (
        node.output
        if isinstance(node, Op)
        else node.dst
        if isinstance(node, (Transfer, CacheRead))
        else None
    )
    full = target is not None and not target.indices and target.name not in reads
    return Access(frozenset(reads), frozenset(writes), frozenset(writes) if full else frozenset())


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
