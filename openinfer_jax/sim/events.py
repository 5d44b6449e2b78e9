"""Trace events of the simulator, and their export as JSON and Chrome trace-event files.

A `TraceEvent` carries the original runtime's fields (block_name, node_index, node_uuid,
kind, params, output, micros) plus the op name, input/output shapes and dtypes, the jit
region that ran the node and the device. `OPENINFER_TRACE=1|full` prints one line per
event, `idx uuid [block] -- desc -- (timing)`, like the original.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "TraceEvent",
    "env_trace_level",
    "format_micros",
    "print_event",
    "split_micros",
    "trace_to_chrome",
    "trace_to_json",
    "write_chrome_trace",
    "write_trace_json",
]

# The node kinds of the original trace; the simulator never invents others.
EVENT_KINDS = (
    "Assign",
    "OpExecute",
    "CacheRead",
    "CacheWrite",
    "CacheIncrement",
    "CacheDecrement",
    "CacheReset",
    "Barrier",
    "Dep",
    "Transfer",
    "Yield",
    "Await",
    "Branch",
    "Loop",
    "Return",
)


def split_micros(nanos: int) -> list[int]:
    """A duration in ns as the original's `[ms, us, ns]` triple (each part < 1000 except ms)."""
    nanos = max(int(nanos), 0)
    return [nanos // 1_000_000, (nanos // 1000) % 1000, nanos % 1000]


def format_micros(micros: list[int]) -> str:
    """The original's timing string, e.g. ``"1ms 126us 340ns"``."""
    ms, us, ns = micros
    return f"{ms}ms {us}us {ns}ns"


@dataclass
class TraceEvent:
    """One executed node.

    `start_ns` is the time since the executor was created, `duration_ns` the node's time;
    for nodes fused into a jit region, the region's time is split evenly over its nodes
    (XLA fuses them, so a per-node time does not exist) and `region_ns` holds the total.
    `loaded` names model tensors read from the mmap for the first time by this node.
    `scope` maps enclosing loop indices to their values. `compiled` is True when running
    this node's region compiled a new XLA executable (so the trace counts compilations).
    `output_summaries` (with ``with_trace(summaries=True)``) describe each output value:
    counts, min/max/sum and checksums, comparable with an emitted program's ``-DOI_TRACE``
    trace (`openinfer trace-diff`).
    """

    block_name: str
    node_index: int
    node_uuid: str
    kind: str
    params: list[str] = field(default_factory=list)
    output: list[str] = field(default_factory=list)
    micros: list[int] = field(default_factory=lambda: [0, 0, 0])
    op_name: str = ""
    node_desc: str = ""
    input_shapes: list[list[int]] = field(default_factory=list)
    input_dtypes: list[str] = field(default_factory=list)
    output_shapes: list[list[int]] = field(default_factory=list)
    output_dtypes: list[str] = field(default_factory=list)
    region: int | None = None
    region_ns: int = 0
    device: str = "cpu"
    step: int = 0
    scope: dict[str, int] = field(default_factory=dict)
    loaded: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    compiled: bool = False
    start_ns: int = 0
    duration_ns: int = 0
    # Sharded runs only (docs/sharding.md): mesh, output specs, the region's collectives.
    sharding: dict[str, Any] = field(default_factory=dict)
    # Where the node is in the program (`file:line:column`, the file's base name).
    node_loc: str = ""
    # With `Simulator.with_trace(summaries=True)`: one summary per output (sim/summaries.py).
    output_summaries: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with every field."""
        return asdict(self)

    def line(self) -> str:
        """The original's log line: ``idx uuid [block] -- desc -- (timing)``."""
        return (
            f"{self.node_index} {self.node_uuid} [{self.block_name}] -- {self.node_desc} -- "
            f"({format_micros(self.micros)})"
        )


def trace_to_json(events: list[TraceEvent]) -> list[dict[str, Any]]:
    """The trace as a list of dicts (the format `write_trace_json` writes)."""
    return [ev.to_dict() for ev in events]


def trace_to_chrome(events: list[TraceEvent]) -> dict[str, Any]:
    """The trace in Chrome trace-event format (Perfetto / chrome://tracing).

    Every node becomes a complete event (`ph: "X"`) with `ts`/`dur` in microseconds;
    `tid` separates blocks so branch targets and yield consumers show as their own rows.
    """
    tids: dict[str, int] = {}
    trace_events: list[dict[str, Any]] = []
    for ev in events:
        tid = tids.setdefault(ev.block_name, len(tids) + 1)
        name = ev.op_name or ev.kind
        trace_events.append(
            {
                "name": name,
                "cat": ev.kind,
                "ph": "X",
                "ts": ev.start_ns / 1000.0,
                "dur": max(ev.duration_ns, 1) / 1000.0,
                "pid": 1,
                "tid": tid,
                "args": {
                    "node_index": ev.node_index,
                    "node_uuid": ev.node_uuid,
                    "desc": ev.node_desc,
                    "step": ev.step,
                    "region": ev.region,
                    "inputs": ev.params,
                    "outputs": ev.output,
                    "output_shapes": ev.output_shapes,
                    "output_dtypes": ev.output_dtypes,
                    "loaded": ev.loaded,
                    "warnings": ev.warnings,
                    "sharding": ev.sharding,
                },
            }
        )
    meta = [
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": f"block {blk}"}}
        for blk, tid in tids.items()
    ]
    meta.append(
        {
            "name": "process_name",
            "ph": "M",
            "pid": 1,
            "tid": 0,
            "args": {"name": "openinfer simulator"},
        }
    )
    return {"traceEvents": meta + trace_events, "displayTimeUnit": "ns"}


def write_trace_json(events: list[TraceEvent], path: str | os.PathLike[str]) -> None:
    """Write the trace as a JSON list of events to `path`."""
    Path(path).write_text(json.dumps(trace_to_json(events), indent=1))


def write_chrome_trace(events: list[TraceEvent], path: str | os.PathLike[str]) -> None:
    """Write the trace in Chrome trace-event JSON to `path` (open it in ui.perfetto.dev)."""
    Path(path).write_text(json.dumps(trace_to_chrome(events)))


def env_trace_level() -> int:
    """`OPENINFER_TRACE`: 0 off, 1 print events (and errors), 2 (`full`) warnings too."""
    raw = os.environ.get("OPENINFER_TRACE", "").strip().lower()
    if raw in ("", "0", "off", "false", "no"):
        return 0
    if raw == "full":
        return 2
    return 1


def print_event(ev: TraceEvent, level: int) -> None:
    """Print an event's log line on stderr (and its warnings when `level` is 2)."""
    print(ev.line(), file=sys.stderr)
    if level >= 2:
        for warning in ev.warnings:
            print(f"  warning: {warning}", file=sys.stderr)
