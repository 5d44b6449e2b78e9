"""Buffer lifetimes of a lowered step: live intervals and the `assign`s that need no zeros.

Input: the step's typed statements (`openinfer_jax.emit.c_stmt`), each carrying the buffer
accesses it makes at its execution position. Output (`Lifetimes`):

* **dead assigns**: an `assign` whose zeros are overwritten before any read (the next access
  of that buffer is a write) only sets the shape, so it writes no memory another buffer
  may share;
* **live intervals** ``[first, last]`` per buffer: from its first live write (or read) to its
  last access. Inside a loop, a buffer read before the body writes it carries a value from
  one iteration to the next (or from before the loop), so it lives for the whole loop; one
  written first in every iteration only lives from that write to its last use.

The memory planner (`openinfer_jax.emit.memory`) places buffers by these intervals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from openinfer_jax.emit.c_stmt import Access, AssignZero, ForLoop, Stmt, walk

__all__ = ["Lifetimes", "lifetimes"]


@dataclass
class Lifetimes:
    """Accesses per buffer (in execution order), the dead assigns and the loop stretches."""

    accesses: dict[str, list[Access]] = field(default_factory=dict)
    # assign number -> (buffer, index of its write in accesses[buffer])
    assigns: dict[int, tuple[str, int]] = field(default_factory=dict)
    dead_assigns: frozenset[int] = frozenset()
    first: dict[str, int] = field(default_factory=dict)
    last: dict[str, int] = field(default_factory=dict)
    carried: set[str] = field(default_factory=set)  # read before written in some loop

    def accessed(self, key: str) -> bool:
        """True when some statement uses the buffer."""
        return key in self.accesses

    def live_interval(self, key: str) -> tuple[int, int] | None:
        """[first live write or read, last access], or None when never accessed."""
        acc = self.accesses.get(key)
        if not acc:
            return None
        dead = {i for n, (k, i) in self.assigns.items() if k == key and n in self.dead_assigns}
        live = [a for i, a in enumerate(acc) if i not in dead]
        first = live[0].pos if live else acc[0].pos
        if key in self.carried:
            # Carried around a loop: conservatively from the first access of all.
            first = min(first, self.first[key])
        return first, self.last[key]


def lifetimes(stmts: Sequence[Stmt]) -> Lifetimes:
    """The lifetimes of every buffer the statements use (see the module docstring)."""
    out = Lifetimes()
    loops: list[ForLoop] = []
    for stmt in walk(stmts):
        for access in stmt.accesses:
            out.accesses.setdefault(access.key, []).append(access)
        if isinstance(stmt, AssignZero):
            (write,) = stmt.accesses
            out.assigns[stmt.index] = (write.key, len(out.accesses[write.key]) - 1)
        elif isinstance(stmt, ForLoop):
            loops.append(stmt)
    for key, acc in out.accesses.items():
        out.first[key] = min(a.pos for a in acc)
        out.last[key] = max(a.pos for a in acc)
    out.dead_assigns = frozenset(
        n
        for n, (key, index) in out.assigns.items()
        if index + 1 < len(out.accesses[key]) and out.accesses[key][index + 1].write
    )
    for loop in loops:
        for key, acc in out.accesses.items():
            inside = [a for a in acc if loop.start <= a.pos <= loop.end]
            if inside and not inside[0].write:
                out.first[key] = min(out.first[key], loop.start)
                out.carried.add(key)
                out.last[key] = max(out.last[key], loop.end)
    return out
