"""Every example runs with its ops on the Vulkan device and still passes its own checks.

Each example's `main()` builds a model and a graph, runs the simulator and compares the
result with NumPy; here its `Simulator` is swapped for one with ``device="vulkan"``, so
the same checks hold for the Vulkan kernels (nodes the backend cannot run fall back to
the CPU with a warning, as in the original).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
from pathlib import Path
from typing import Any

import pytest

from openinfer_jax.sim import Simulator
from openinfer_jax.vk import VulkanBackend

pytestmark = pytest.mark.vulkan

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
# demo.py needs a downloaded model; the others are self-contained.
EXAMPLES = sorted(
    p.stem for p in EXAMPLES_DIR.glob("*.py") if p.stem != "demo" and "def main" in p.read_text()
)


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_on_vulkan(
    backend: VulkanBackend, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES_DIR))
    module = importlib.import_module(name)
    created: list[Simulator] = []

    def on_vulkan(*args: Any, **kwargs: Any) -> Simulator:
        kwargs["device"] = "vulkan"
        sim = Simulator(*args, **kwargs)
        created.append(sim)
        return sim

    monkeypatch.setattr(module, "Simulator", on_vulkan)
    with contextlib.redirect_stdout(io.StringIO()):
        rc = module.main()
    assert rc in (0, None)
    assert created, f"{name} made no Simulator"
    dispatched = sum(sim.vulkan.dispatch_count for sim in created if sim.vulkan is not None)
    assert dispatched > 0, f"{name}: no op ran on the Vulkan device"
    sys.modules.pop(name, None)
