"""The static memory plan: one arena, buffers placed by lifetime so that dead ones are reused.

Each buffer has a size (bytes, from its bounded element count) and a live interval over
the linearized program (positions handed out by the code generator as it visits nodes in
execution order; a loop stretches every buffer it touches to the whole loop). Buffers that
must survive the step (persistent state, inputs, requested outputs, constants) are pinned:
live everywhere. Placement is greedy: largest first, each at the lowest 64-byte-aligned
offset that does not overlap a placed buffer whose interval overlaps its own. The plan
reports the arena size against the sum of all buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ALIGN", "Buffer", "MemoryPlan", "plan_memory"]

ALIGN = 64


def _align(n: int, align: int = ALIGN) -> int:
    return (n + align - 1) // align * align


@dataclass
class Buffer:
    """One arena buffer: size in bytes, live interval [first, last] (None = pinned)."""

    name: str
    nbytes: int
    first: int | None = None
    last: int | None = None
    offset: int = 0

    @property
    def pinned(self) -> bool:
        """True when the buffer lives for the whole program (never shares space)."""
        return self.first is None

    def overlaps(self, other: Buffer) -> bool:
        """True when both buffers are live at some common position."""
        if self.pinned or other.pinned:
            return True
        assert self.first is not None and self.last is not None
        assert other.first is not None and other.last is not None
        return not (self.last < other.first or other.last < self.first)


@dataclass
class MemoryPlan:
    """Offsets of every buffer in one arena of `arena_bytes`."""

    buffers: dict[str, Buffer] = field(default_factory=dict)
    arena_bytes: int = 0
    align: int = ALIGN

    @property
    def total_bytes(self) -> int:
        """Sum of all buffer sizes (aligned), i.e. the arena size without reuse."""
        return sum(_align(b.nbytes, self.align) for b in self.buffers.values())

    def summary(self) -> str:
        """``arena N bytes for K buffers totalling S bytes (reuse saves P%)``."""
        total = self.total_bytes
        saved = 100.0 * (total - self.arena_bytes) / total if total else 0.0
        return (
            f"arena {self.arena_bytes} bytes for {len(self.buffers)} buffers totalling {total} bytes "
            f"(reuse saves {saved:.1f}%)"
        )


def plan_memory(buffers: list[Buffer], align: int | None = None) -> MemoryPlan:
    """Place `buffers` in one arena (see the module docstring); deterministic for equal input.

    `align` (default `ALIGN`) is the offset alignment; the Vulkan target asks for 256, the
    largest minStorageBufferOffsetAlignment of any device, so every buffer can be a binding.
    """
    align = align or ALIGN
    order = sorted(buffers, key=lambda b: (-_align(b.nbytes, align), b.name))
    placed: list[Buffer] = []
    end = 0
    for buf in order:
        size = _align(max(buf.nbytes, 1), align)
        conflicts = sorted((p for p in placed if p.overlaps(buf)), key=lambda p: p.offset)
        offset = 0
        for other in conflicts:
            if offset + size <= other.offset:
                break
            offset = max(offset, other.offset + _align(max(other.nbytes, 1), align))
        buf.offset = offset
        placed.append(buf)
        end = max(end, offset + size)
    return MemoryPlan({b.name: b for b in sorted(buffers, key=lambda b: b.name)}, end, align)
