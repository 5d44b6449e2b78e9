"""device="vulkan": ops on the Kompute backend (lavapipe in CI), CPU fallback with a warning."""

from __future__ import annotations

import numpy as np
import pytest

from openinfer_jax.core.errors import SimulationError
from openinfer_jax.sim import Simulator
from tests.vk.conftest import vulkan_marks

pytestmark = vulkan_marks()

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
    tensors = {
        "w": rng.standard_normal((8, 8)).astype(np.float32),
        "b": rng.standard_normal(8).astype(np.float32),
    }
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


def _chain_graph(n: int) -> str:
    ops = "\n".join("    op add(h, b) >> h;" for _ in range(n))
    return f"""
graph {{
  dynamic {{ x: f32[D]; }}
  volatile {{ b: f32[D]; h: f32[D]; }}
  block entry {{
    op add(x, b) >> h;
{ops}
    return;
  }}
}}
"""


@pytest.mark.parametrize("n", [1, 16])
def test_vulkan_chain_keeps_values_on_device(make_model, n: int) -> None:
    # Issue 7: a chain of supported ops must not round-trip through the host per op.
    b = np.arange(4, dtype=np.float32)
    model = make_model(sizevars={"D": 4}, tensors={"b": b})
    x = np.ones(4, np.float32)
    ex = Simulator(model, _chain_graph(n), device="vulkan").make_executor()
    ex.insert(x=x)
    ex.step()
    assert ex.stats["vk_downloads"] == 0  # nothing on the host read h yet
    assert ex.stats["vk_uploads"] == 2  # x and the weight b, once each
    np.testing.assert_array_equal(ex.fetch("h"), x + (n + 1) * b)
    np.testing.assert_array_equal(ex.fetch("h"), x + (n + 1) * b)
    assert ex.stats["vk_downloads"] == 1  # the first fetch; the second reuses the copy
    ex.insert(x=x)
    ex.step()  # the weight stays uploaded: only the new x goes up
    assert ex.stats["vk_uploads"] == 3 and ex.stats["vk_downloads"] == 1


ASSIGNS = """
graph {
  dynamic { x: f32[D]; }
  volatile { b: f32[D]; }
  block entry {
    assign h: f32[D];
    assign unused: f32[D];
    op add(x, b) >> h;
    return;
  }
}
"""


def test_vulkan_assigns_run_no_xla_region(make_model) -> None:
    # Issue 18: on Vulkan every assign was an XLA region of its own (a compiled call each).
    b = np.arange(4, dtype=np.float32)
    model = make_model(sizevars={"D": 4}, tensors={"b": b})
    ex = Simulator(model, ASSIGNS, device="vulkan").make_executor()
    for _ in range(2):
        ex.insert(x=np.ones(4, np.float32))
        ex.step()
    assert ex.stats["region_calls"] == 0 and ex.stats["compilations"] == 0
    np.testing.assert_array_equal(ex.fetch("h"), 1 + b)
    np.testing.assert_array_equal(ex.fetch("unused"), np.zeros(4, np.float32))


MIXED = """
graph {
  dynamic { x: f32[D]; }
  volatile { h: f32[D]; k: f32[D]; z: f64[D] @init(1.5); z2: f64[D]; s: f32[]; out: f32[D]; }
  persistent { n: i64 @init(0); }
  block entry {
    op add(x, x) >> h;
    op add(h, h) >> h;
    op add(z, z) >> z2;
    op mul(h, h) >> k;
    op sum_axis(k, axes=[0]) >> s;
    branch s big small;
    return;
  }
  block big { op add(k, h) >> out; cache.increment n; return; }
  block small { op sub(k, h) >> out; return; }
}
"""


def test_vulkan_resident_values_match_cpu_with_fallback_and_branch(make_model, monkeypatch) -> None:
    # The f64 op falls back to the CPU; the branch condition must come to the host.
    monkeypatch.setenv("OPENINFER_VK_DISABLE", "shader_float64")
    model = make_model(sizevars={"D": 4})
    results = {}
    for device in ("cpu", "vulkan"):
        ex = Simulator(model, MIXED, device=device).make_executor()
        for x in (np.ones(4, np.float32), np.zeros(4, np.float32)):
            ex.insert(x=x)
            ex.step()
            results.setdefault(device, []).append(
                [ex.fetch(v) for v in ("h", "k", "z2", "s", "out", "n")]
            )
    for got, want in zip(results["vulkan"], results["cpu"]):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)
    assert ex.stats["vk_downloads"] < 20  # per step: s for the branch, then the fetches


ATOMIC = """
graph {
  dynamic { x: f32[D]; }
  volatile { w: f32[D]; h: f32[D]; }
  persistent {
    step: i32 @init(0);
    A(t): f32[D] @table;
    B(t): f32[D] @table @fixed(t=2);
  }
  block entry {
    op add(x, w) >> h;
    op add(h, h) >> h;
    cache.write h >> A[step];
    cache.increment step;
    cache.write h >> B[step];
    return;
  }
}
"""


def test_vulkan_failed_step_rolls_back_like_cpu(make_model) -> None:
    # The second step overflows B mid-step: state (resident h included) must roll back.
    model = make_model(sizevars={"D": 3}, tensors={"w": np.ones(3, np.float32)})
    seen = {}
    for device in ("cpu", "vulkan"):
        ex = Simulator(model, ATOMIC, device=device).make_executor()
        ex.insert(x=np.full(3, 1, np.float32))
        ex.step()
        ex.insert(x=np.full(3, 7, np.float32))
        with pytest.raises(SimulationError, match="exceeds fixed size t=2"):
            ex.step()
        seen[device] = [ex.fetch(n) for n in ("h", "A", "B", "step")]
        assert ex.steps == 1 and ex.persistent.tables["A"].counts == {"t": 1}
    for got, want in zip(seen["vulkan"], seen["cpu"]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", ["cpu", "numpy", "vulkan"])
def test_fill_value_out_of_range_raises_on_every_device(make_model, device: str) -> None:
    """fill(z, value=alpha) into i8 with alpha=1000: the Vulkan device used to write -24."""
    model = make_model(sizevars={}, tensors={})
    graph = (
        "graph { dynamic { alpha: f32; } volatile { z: i8[4]; } "
        "block entry { op fill(z, value=alpha) >> z; return; } }"
    )
    ex = Simulator(model, graph, device=device).make_executor()
    ex.insert(alpha=np.float32(1000))
    with pytest.raises(SimulationError, match=r"fill: value=1000.0 is not a i8 value"):
        ex.step()
    ex.insert(alpha=np.float32(-7))
    ex.step()
    np.testing.assert_array_equal(ex.fetch("z"), np.full(4, -7, np.int8))
