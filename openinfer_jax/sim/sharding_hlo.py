"""Collectives of a compiled SPMD region, read from its optimized HLO text.

XLA inserts the collectives (all-reduce, all-gather, ...) when it partitions a region over
the mesh; how many there are and how many bytes they move is the cost of a sharding plan
that the trace reports per region. Asynchronous pairs (``all-reduce-start`` /
``all-reduce-done`` on GPU) count once, at their start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["COLLECTIVE_KINDS", "CollectiveStats", "collectives_of"]

# The HLO instructions that move data between devices.
COLLECTIVE_KINDS = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
)

# Bytes per element of HLO primitive types (sub-byte types round up: a count, not a layout).
_ELEMENT_BYTES = {
    "pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1,
    "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "s32": 4, "u32": 4, "f32": 4,
    "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
}  # fmt: skip

_INSTRUCTION = re.compile(
    r"=\s*(?P<shape>.*?)\s(?P<kind>" + "|".join(COLLECTIVE_KINDS) + r")(?P<start>-start)?\("
)
_ARRAY = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")


@dataclass
class CollectiveStats:
    """Collectives of one executable: count per kind and result bytes per kind."""

    counts: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    # Every collective in program order: (kind, result bytes).
    instances: list[tuple[str, int]] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Number of collectives."""
        return sum(self.counts.values())

    @property
    def total_bytes(self) -> int:
        """Bytes of all collective results (per device)."""
        return sum(self.bytes.values())

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict: counts, bytes and totals."""
        return {
            "counts": dict(self.counts),
            "bytes": dict(self.bytes),
            "total": self.total,
            "total_bytes": self.total_bytes,
        }


def _array_bytes(shape: str) -> list[int]:
    sizes = []
    for dtype, dims in _ARRAY.findall(shape):
        size = _ELEMENT_BYTES.get(dtype)
        if size is None:
            continue  # tokens and opaque types carry no data
        count = 1
        for dim in dims.split(","):
            if dim:
                count *= int(dim)
        sizes.append(count * size)
    return sizes


def collectives_of(hlo_text: str) -> CollectiveStats:
    """Count the collectives in optimized HLO text (`Compiled.as_text()`)."""
    stats = CollectiveStats()
    for line in hlo_text.splitlines():
        match = _INSTRUCTION.search(line)
        if match is None:
            continue
        kind = match.group("kind")
        arrays = _array_bytes(match.group("shape"))
        # An async start returns (operand, result, [context...]): count the result once.
        size = max(arrays, default=0) if match.group("start") else sum(arrays)
        stats.counts[kind] = stats.counts.get(kind, 0) + 1
        stats.bytes[kind] = stats.bytes.get(kind, 0) + size
        stats.instances.append((kind, size))
    return stats
