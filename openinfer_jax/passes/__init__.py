"""Graph-to-graph passes run between validation and a backend.

Each pass takes a validated `Graph` and returns an equivalent one (same results within the
parity tolerance of docs/synthesis.md) plus report lines saying what it changed, so the
simulator, the Vulkan backend and the emitters can all consume its output. Two entry points:

* `prepare(graph, model)`: what every backend runs right after validating the user's graph
  (the simulator, so also its Vulkan device, and the synthesizer for both targets): the
  composite ops (`openinfer_jax.ops.composite`) become the registry ops they are made of
  (`expand_composites`, composites.py).
* `optimize(graph, sizevars, outputs)`: the pipeline the C target adds (weight folding,
  bias fusion; pipeline.py).

To add a pass: a function in its own module here returning ``(graph, report lines)``, a
test under tests/passes, and a call in `prepare` (every backend) or `optimize` (C).
"""

from openinfer_jax.passes.pipeline import PassReport, optimize, prepare

__all__ = ["PassReport", "optimize", "prepare"]
