"""Graph-to-graph passes run between validation and a backend.

Each pass takes a validated `Graph` and returns an equivalent one (same results within the
parity tolerance of docs/synthesis.md) plus report lines saying what it changed, so the
simulator, the Vulkan backend and the emitters can all consume its output. `optimize` runs
the pipeline the C target uses.
"""

from openinfer_jax.passes.pipeline import PassReport, optimize

__all__ = ["PassReport", "optimize"]
