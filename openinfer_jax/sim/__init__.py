"""The simulator: a Python scheduler for effects, jax.jit for pure regions, persistent caches.

Public names: `Simulator`, `Executor`, `StepEvent`, `TraceEvent`, `write_trace_json`,
`write_chrome_trace`. Semantics: docs/semantics.md; design and trace format: docs/simulator.md.
"""

from openinfer_jax.sim.events import (
    TraceEvent,
    trace_to_chrome,
    write_chrome_trace,
    write_trace_json,
)
from openinfer_jax.sim.executor import Executor, StepEvent
from openinfer_jax.sim.simulator import Simulator, load_graph

__all__ = [
    "Executor",
    "Simulator",
    "StepEvent",
    "TraceEvent",
    "load_graph",
    "trace_to_chrome",
    "write_chrome_trace",
    "write_trace_json",
]
