"""Synthesis: a graph and its model become plain C source for a device (docs/synthesis.md).

`Synthesizer(device)` / `Synthesizer.from_arch(json)` -> `synthesize(model, graph)` -> `Plan`
-> `plan.emit(dir)`.
"""

from openinfer_jax.emit.device import DeviceArch, load_arch
from openinfer_jax.emit.memory import MemoryPlan
from openinfer_jax.emit.plan import MANIFEST, Plan
from openinfer_jax.emit.synthesizer import TARGETS, Synthesizer
from openinfer_jax.emit.vk_program import VkReport

__all__ = [
    "MANIFEST",
    "TARGETS",
    "DeviceArch",
    "MemoryPlan",
    "Plan",
    "Synthesizer",
    "VkReport",
    "load_arch",
]
