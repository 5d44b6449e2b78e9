"""Buffer and pipeline reuse across steps (vk/reuse.py): reuse happens, and never aliases a
buffer that is still needed (a live tensor, a view, a pending dispatch, a fetched value, a
persistent variable, an input of a later op of the same step)."""

from __future__ import annotations

import copy
import dataclasses
import gc
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.oinf import write_oinf
from openinfer_jax.sim import Simulator
from openinfer_jax.vk import VulkanBackend, vulkan_available
from openinfer_jax.vk.reuse import BufferPool, PipelineCache
from tests.vk.conftest import new_backend

pytestmark = pytest.mark.vulkan


@pytest.fixture(scope="module")
def own() -> VulkanBackend:
    """A backend of this module's own: its counters and pool see only these tests."""
    return new_backend()


def _f32(backend: VulkanBackend, values: np.ndarray) -> object:
    return backend.upload(values.astype(np.float32), DType.F32)


# ---- the backend ---------------------------------------------------------------------------
def test_a_dropped_tensor_gives_its_buffer_to_the_next_of_its_size(own: VulkanBackend) -> None:
    t = own.empty(DType.F32, (64,))
    buffer = t.buffer
    del t
    gc.collect()
    assert own.empty(DType.I32, (64,)).buffer == buffer  # same words, any dtype


def test_live_tensors_views_and_pending_inputs_are_never_reused(own: VulkanBackend) -> None:
    x = np.arange(32, dtype=np.float32)
    a = _f32(own, x)
    view = own.empty(DType.F32, (32,)).view(DType.U32, (32,))  # its base is only in the view
    # A dispatch still in the open batch holds its input: `src` has no other reference.
    src = _f32(own, x + 100)
    out = own.run("neg", [src], {}, DType.F32, (32,))
    pending_buffer = src.buffer
    del src
    gc.collect()
    taken = [own.empty(DType.F32, (32,)) for _ in range(4)]
    held = {a.buffer, view.buffer, out.buffer}
    if own.batching:  # otherwise the dispatch may have finished and released it
        held.add(pending_buffer)
    assert not held & {t.buffer for t in taken}
    for t in taken:  # writing the new tensors must not change the held ones
        own.zero_fill(t)
    np.testing.assert_array_equal(own.download(a), x)
    np.testing.assert_array_equal(own.download(out), -(x + 100))


def test_a_copy_keeps_its_buffer_from_the_pool(own: VulkanBackend) -> None:
    t = _f32(own, np.arange(16, dtype=np.float32))
    twin = copy.deepcopy(copy.copy(t))
    buffer = t.buffer
    del t
    gc.collect()
    assert own.empty(DType.F32, (16,)).buffer != buffer  # the copy still holds it
    np.testing.assert_array_equal(own.download(twin), np.arange(16, dtype=np.float32))


def test_a_reshape_is_a_view_that_keeps_its_input_buffer(own: VulkanBackend) -> None:
    x = np.arange(24, dtype=np.float32)
    t = own.run("neg", [_f32(own, x)], {}, DType.F32, (24,))
    before = own.stats["dispatches"]
    r = own.run("reshape", [t], {"shape": [4, 6]}, DType.F32, (4, 6))
    assert own.stats["dispatches"] == before and r.buffer == t.buffer
    buffer = t.buffer
    del t
    gc.collect()
    assert own.empty(DType.F32, (24,)).buffer != buffer  # the view holds its input
    np.testing.assert_array_equal(own.download(r), -x.reshape(4, 6))


def test_a_result_buffer_is_bucketed_and_its_data_exact(own: VulkanBackend) -> None:
    x = np.arange(9, dtype=np.float32)
    t = own.run("neg", [_f32(own, x)], {}, DType.F32, (9,))
    assert t.words == 10 and t.nbytes == 36  # launch.bucket(9) words, 9 floats of data
    np.testing.assert_array_equal(own.download(t), -x)


def test_a_bucket_past_the_buffer_limit_falls_back_to_the_exact_size() -> None:
    be = new_backend()
    limits = {**be.capabilities.limits, "max_storage_buffer_range": 4000}
    be.capabilities = dataclasses.replace(be.capabilities, limits=limits)
    assert be.empty(DType.F32, (1000,)).words == 1000  # bucket(1000) = 1024 words won't fit
    assert be.empty(DType.F32, (800,)).words == 896  # bucket(800) fits


def test_a_repeated_step_reuses_its_buffers_and_pipelines(own: VulkanBackend) -> None:
    w = _f32(own, np.linspace(-1, 1, 48).reshape(6, 8))
    rng = np.random.default_rng(0)

    def step() -> tuple[np.ndarray, np.ndarray]:
        own.begin_step()
        x = rng.standard_normal((1, 8)).astype(np.float32)
        h = own.run("matmul", [_f32(own, x), own_t], {}, DType.F32, (1, 6))
        h = own.run("relu", [h], {}, DType.F32, (1, 6))
        y = own.run("mul", [h, h], {}, DType.F32, (1, 6))
        return own.download(y), np.maximum(x @ wt, 0) ** 2

    wt = np.linspace(-1, 1, 48, dtype=np.float32).reshape(6, 8).T.copy()
    own_t = _f32(own, wt)
    del w
    for _ in range(3):
        step()
    before = own.stats
    for _ in range(5):
        got, want = step()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    after = own.stats
    assert after["pipelines_created"] == before["pipelines_created"]
    assert after["buffers_allocated"] == before["buffers_allocated"]
    assert after["pipelines_reused"] - before["pipelines_reused"] == 15
    # Each step's batch (its uploads, three dispatches, the read-back) is the recorded one
    # submitted again, and still reads each step's new input.
    assert after["replayed"] - before["replayed"] == 5


def test_a_batch_is_recorded_anew_when_its_operations_change(own: VulkanBackend) -> None:
    rng = np.random.default_rng(1)

    def step(n: int) -> None:
        own.begin_step()
        x = rng.standard_normal((n,)).astype(np.float32)
        y = own.run("relu", [_f32(own, x)], {}, DType.F32, (n,))
        y = own.run("mul", [y, y], {}, DType.F32, (n,))
        np.testing.assert_allclose(own.download(y), np.maximum(x, 0) ** 2, rtol=1e-6)

    for _ in range(2):
        step(40)
    before = own.stats["replayed"]
    step(40)
    assert own.stats["replayed"] == before + 1
    step(3000)  # other buffers and grids: other operations, recorded and submitted anew
    assert own.stats["replayed"] == before + 1
    step(40)  # back to the first shape: its recorded batch again
    assert own.stats["replayed"] == before + 2


def test_pool_limit_releases_buffers_and_their_pipelines() -> None:
    cache = PipelineCache(capacity=2)
    made = iter(range(100))
    cache.get(("k", (1, 2)), (1, 2), lambda: next(made))
    cache.get(("k", (3, 2)), (3, 2), lambda: next(made))
    pool = BufferPool(limit_bytes=64, on_drop=cache.forget_buffer)
    pool.give(16, 7, "h7")  # 64 bytes: fits
    pool.give(8, 1, "h1")  # over the limit: released, its pipelines forgotten
    assert len(cache) == 1 and pool.held_bytes == 64
    assert cache.get(("k", (3, 2)), (3, 2), lambda: next(made)) == 1  # still cached
    cache.get(("k", (4,)), (4,), lambda: next(made))
    cache.get(("k", (5,)), (5,), lambda: next(made))  # capacity 2: the oldest goes
    assert cache.created == 4 and len(cache) == 2
    assert pool.take(16, site="s") == (7, "h7") and pool.take(16) is None


def test_a_site_gets_back_its_own_buffer() -> None:
    pool = BufferPool(limit_bytes=1 << 20, on_drop=lambda b: None)
    for buffer in (1, 2, 3):
        pool.give(4, buffer, f"h{buffer}")
    pool.note("a", 2)
    assert pool.take(4, "a") == (2, "h2")  # the site's own, not the last given back (3)
    assert pool.take(4, "b") == (3, "h3")


# ---- the simulator ------------------------------------------------------------------------
VAD = """
graph {
  dynamic { x: f32[1, 1, T]; }
  volatile {
    w1: f32[C, 1, 4]; b1: f32[C]; wi: f32[4*H, C]; wr: f32[4*H, H]; bl: f32[8*H];
    f: f32[1, C, F]; feat: f32[1, C]; s: f32[2, 1, H]; a: f32[1, C]; y: f32[1, C];
  }
  persistent { state: f32[2, 1, H]; }
  block entry {
    op conv1d(x, w1, b1, strides=[2]) >> f;
    op relu(f) >> f;
    op mean_axis(f, axes=[2]) >> feat;
    op tanh(feat) >> a;
    op relu(feat) >> feat;
    op add(a, feat) >> y;
    cache.read state >> s;
    op lstm_cell(y, wi, wr, s, bl) >> s;
    cache.write s >> state;
    return;
  }
}
"""


def _vad_model(path: Path) -> Path:
    rng = np.random.default_rng(5)
    c, h, t = 8, 6, 32

    def r(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    write_oinf(path, sizevars={"T": t, "C": c, "H": h, "F": (t - 4) // 2 + 1}, metadata={},
               tensors={"w1": r(c, 1, 4), "b1": r(c), "wi": r(4 * h, c), "wr": r(4 * h, h),
                        "bl": r(8 * h)})  # fmt: skip
    return path


def test_streaming_state_and_fetches_match_the_cpu_with_no_new_pipelines(tmp_path: Path) -> None:
    ok, reason = vulkan_available()
    if not ok:
        pytest.skip(f"Vulkan unavailable: {reason}")
    model = _vad_model(tmp_path / "vad.oinf")
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal((1, 1, 32)).astype(np.float32) for _ in range(8)]
    results = {}
    for device in ("cpu", "vulkan"):
        sim = Simulator(model, VAD, device=device)
        ex = sim.make_executor()
        fetched, created = [], []
        for x in xs:
            before = sim.vulkan.stats["pipelines_created"] if sim.vulkan else 0
            ex.insert(x=x)
            ex.step()
            # Kept across later steps: a fetched value must not change when buffers are reused.
            fetched.append((ex.fetch("y"), ex.fetch("state")))
            if sim.vulkan:
                created.append(sim.vulkan.stats["pipelines_created"] - before)
        results[device] = [(np.array(y), np.array(s)) for y, s in fetched], fetched
        if device == "vulkan":
            assert created[0] > 0 and created[3:] == [0] * (len(xs) - 3), created
            assert sim.vulkan.stats["replayed"] >= len(xs) - 3  # later steps resubmit
    (cpu, _), (vk, raw) = results["cpu"], results["vulkan"]
    for (y_cpu, s_cpu), (y_vk, s_vk), (y_raw, s_raw) in zip(cpu, vk, raw):
        np.testing.assert_allclose(y_vk, y_cpu, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(s_vk, s_cpu, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(y_raw), y_vk)  # unchanged since fetched
        np.testing.assert_array_equal(np.asarray(s_raw), s_vk)
