"""The simulator: a Python scheduler for effects, jax.jit for pure regions, persistent caches.

Public names: `Simulator`, `Executor`, `StepEvent`, `TraceEvent`, `write_trace_json`,
`write_chrome_trace`; sharding: `device_mesh`, `sharding_scope`, `AUTO` (docs/sharding.md).
Semantics: docs/semantics.md; design and trace format: docs/simulator.md.
"""

from openinfer_jax.sim.events import (
    TraceEvent,
    trace_to_chrome,
    write_chrome_trace,
    write_trace_json,
)
from openinfer_jax.sim.executor import Executor, StepEvent
from openinfer_jax.sim.sharding import AUTO, ShardedPlacement, device_mesh, sharding_scope
from openinfer_jax.sim.simulator import Simulator

__all__ = [
    "AUTO",
    "Executor",
    "ShardedPlacement",
    "Simulator",
    "StepEvent",
    "TraceEvent",
    "device_mesh",
    "sharding_scope",
    "trace_to_chrome",
    "write_chrome_trace",
    "write_trace_json",
]
