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

from openinfer_jax.core.errors import BackendError
from openinfer_jax.sim import Simulator
from openinfer_jax.vk import VulkanBackend, nn_kernels

pytestmark = pytest.mark.vulkan

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
# demo.py needs a downloaded model; the others are self-contained.
EXAMPLES = sorted(
    p.stem for p in EXAMPLES_DIR.glob("*.py") if p.stem != "demo" and "def main" in p.read_text()
)


def _record_fallbacks(backend: VulkanBackend, log: list[tuple[str, str]]) -> None:
    """Wrap `backend`'s supports/run so each CPU fallback (a reason or a BackendError) is logged."""
    supports, run = backend.supports, backend.run

    def logged_supports(op: str, *args: Any, **kwargs: Any) -> Any:
        verdict = supports(op, *args, **kwargs)
        if verdict is not True:
            log.append((op, str(verdict)))
        return verdict

    def logged_run(op: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return run(op, *args, **kwargs)
        except BackendError as err:
            log.append((op, str(err)))
            raise

    backend.supports = logged_supports  # type: ignore[method-assign]
    backend.run = logged_run  # type: ignore[method-assign]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_on_vulkan(
    backend: VulkanBackend, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES_DIR))
    module = importlib.import_module(name)
    created: list[Simulator] = []

    fallbacks: list[tuple[str, str]] = []

    def on_vulkan(*args: Any, **kwargs: Any) -> Simulator:
        kwargs["device"] = "vulkan"
        sim = Simulator(*args, **kwargs)
        created.append(sim)
        if sim.vulkan is not None:
            _record_fallbacks(sim.vulkan, fallbacks)
        return sim

    monkeypatch.setattr(module, "Simulator", on_vulkan)
    with contextlib.redirect_stdout(io.StringIO()):
        rc = module.main()
    assert rc in (0, None)
    assert created, f"{name} made no Simulator"
    dispatched = sum(sim.vulkan.dispatch_count for sim in created if sim.vulkan is not None)
    assert dispatched > 0, f"{name}: no op ran on the Vulkan device"
    # Every registry op has a kernel now: the model-building ops must not fall back.
    nn = sorted({f"{op}: {reason}" for op, reason in fallbacks if op in nn_kernels.NN_OPS})
    assert not nn, f"{name}: CPU fallbacks of model-building ops: {nn}"
    sys.modules.pop(name, None)
