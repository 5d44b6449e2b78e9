"""`ImportReport`: what an import did, as data and as the short text the CLI prints."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ImportReport", "LoopSummary"]


@dataclass
class LoopSummary:
    """One folded run of layers."""

    name: str
    count: int
    body_steps: int
    tables: int


@dataclass
class ImportReport:
    """What `import_onnx` did.

    `ops_used` counts the program's op lines by op; `converted`, `folded` and `dropped`
    count ONNX nodes by op type, `expanded` the function ops imported as ONNX's function body,
    `fused` the multi-node patterns imported as one op; `defaulted_dims` lists symbolic dims
    no value was given for (they were set to 1); `inputs`/`outputs` map ONNX names to program
    variables.
    """

    source: str
    nodes: int
    opset: int
    converted: collections.Counter[str] = field(default_factory=collections.Counter)
    folded: collections.Counter[str] = field(default_factory=collections.Counter)
    dropped: collections.Counter[str] = field(default_factory=collections.Counter)
    fused: collections.Counter[str] = field(default_factory=collections.Counter)
    expanded: collections.Counter[str] = field(default_factory=collections.Counter)
    ops_used: collections.Counter[str] = field(default_factory=collections.Counter)
    loops: list[LoopSummary] = field(default_factory=list)
    sizevars: dict[str, int] = field(default_factory=dict)
    defaulted_dims: dict[str, int] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    state: dict[str, str] = field(default_factory=dict)
    weights: int = 0
    weight_bytes: int = 0
    graph_lines: int = 0
    notes: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0

    def format(self) -> str:
        """The report as a few lines of text."""
        lines = [
            f"imported {self.source}: {self.nodes} ONNX nodes (opset {self.opset}) -> "
            f"{sum(self.ops_used.values())} op lines, {self.graph_lines} graph lines, "
            f"{self.weights} tensors ({self.weight_bytes / 1e6:.2f} MB) in {self.seconds:.2f} s",
            "  converted: " + _counts(self.converted),
            "  folded at import: " + _counts(self.folded),
            "  dropped: " + _counts(self.dropped),
            "  fused patterns: " + _counts(self.fused),
            "  function bodies inlined: " + _counts(self.expanded),
            "  program ops: " + _counts(self.ops_used),
        ]
        for loop in self.loops:
            lines.append(
                f"  loop {loop.name}: {loop.count} layers of {loop.body_steps} steps, "
                f"{loop.tables} prefix tables"
            )
        if self.sizevars:
            lines.append(
                "  sizevars: " + ", ".join(f"{k}={v}" for k, v in sorted(self.sizevars.items()))
            )
        if self.defaulted_dims:
            lines.append(
                "  dims set to 1 (pass --dim NAME=N to choose): "
                + ", ".join(sorted(self.defaulted_dims))
            )
        lines.append("  inputs: " + _mapping(self.inputs))
        lines.append("  outputs: " + _mapping(self.outputs))
        if self.state:
            lines.append("  state: " + _mapping(self.state))
        lines.extend(f"  note: {n}" for n in self.notes)
        lines.extend(f"  wrote {p}" for p in self.files)
        return "\n".join(lines)


def _counts(counter: collections.Counter[str]) -> str:
    if not counter:
        return "none"
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def _mapping(mapping: dict[str, str]) -> str:
    if not mapping:
        return "none"
    return ", ".join(k if k == v else f"{k} -> {v}" for k, v in mapping.items())
