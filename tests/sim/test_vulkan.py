"""device="vulkan": ops on the Kompute backend (lavapipe in CI), CPU fallback with a warning."""

from __future__ import annotations

import numpy as np
import pytest

from openinfer_jax.sim import Simulator

vk = pytest.importorskip("openinfer_jax.vk")
available, why = vk.vulkan_available()
pytestmark = [
    pytest.mark.vulkan,
    pytest.mark.skipif(not available, reason=f"no Vulkan device: {why}"),
]

GRAPH = """
graph {
  dynamic { x: f32[B, D]; }
  volatile { w: f32[D, D]; b: f32[D]; h: f32[B, D]; z: f64[D] @init(1.5); z2: f64[D]; }
  block entry {
    op matmul(x, w) >> h;
    op add(h, b) >> h;
    op add(z, z) >> z2;
    return;
  }
}
"""


def test_vulkan_matches_cpu_and_flags_fallbacks(make_model, monkeypatch) -> None:
    # Hide f64 support so one op must fall back to XLA CPU, whatever the device offers.
    monkeypatch.setenv("OPENINFER_VK_DISABLE", "shader_float64")
    rng = np.random.default_rng(0)
    tensors = {"w": rng.standard_normal((8, 8)).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32)}
    model = make_model(sizevars={"B": 2, "D": 8}, tensors=tensors)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    outs = {}
    for device in ("cpu", "vulkan"):
        sim = Simulator(model, GRAPH, device=device).with_trace()
        ex = sim.make_executor()
        for _ in range(2):  # the second step reuses the uploaded weights
            ex.insert(x=x)
            ex.step()
        outs[device] = (ex.fetch("h"), ex.fetch("z2"), ex.trace())
    np.testing.assert_allclose(outs["vulkan"][0], outs["cpu"][0], rtol=2e-4, atol=2e-4)
    np.testing.assert_array_equal(outs["vulkan"][1], np.full(8, 3.0))
    events = {e.output[0]: e for e in outs["vulkan"][2] if e.step == 1 and e.op_name}
    assert events["h"].device == "vulkan" and not events["h"].warnings
    assert events["z2"].warnings and events["z2"].warnings[0].startswith("vulkan:")
