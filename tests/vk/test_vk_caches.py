"""Persistent caches resident on the Vulkan device (issue 7): tables, tensors, atomic steps.

Every table scenario of tests/sim/test_caches.py runs here on both storages (JAX array and
Vulkan device tensor, sharing TableCache's index arithmetic) and must agree; executor
scenarios compare device="vulkan" with device="cpu" step by step, check that a failed
step leaves device tables exactly as before, and count host<->device transfers.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import SimulationError
from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.sim import Simulator
from openinfer_jax.sim.caches import PersistentStore, Slice, TableCache
from openinfer_jax.sim.precision import WIDE_DTYPES, Precision
from openinfer_jax.sim.values import Ragged, materialize
from openinfer_jax.sim.vulkan_store import DeviceResident
from openinfer_jax.sim.vulkan_tables import VulkanTableStorage, block_runs
from openinfer_jax.vk import VulkanBackend

pytestmark = pytest.mark.vulkan

CPU = jax.devices("cpu")[0]
STORAGES = ("jax", "vulkan")
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


# ---- block geometry (pure) -------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_block_runs_cover_exactly_the_block(data: st.DataObject) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    starts = tuple(data.draw(st.integers(0, n - 1)) for n in shape)
    sizes = tuple(data.draw(st.integers(0, n - s)) for n, s in zip(shape, starts))
    buf = np.arange(math.prod(shape)).reshape(shape)
    want = buf[tuple(slice(s, s + n) for s, n in zip(starts, sizes))].reshape(-1)
    got = np.empty(want.size, np.int64)
    runs = block_runs(shape, starts, sizes)
    for buf_offset, block_offset, length in runs:
        got[block_offset : block_offset + length] = buf.reshape(-1)[
            buf_offset : buf_offset + length
        ]
    np.testing.assert_array_equal(got, want)
    assert sum(length for *_, length in runs) == want.size


def test_entry_and_run_of_entries_are_one_run() -> None:
    # K(l, t): f32[H, Dh] with capacity [16, 16]: K[l, t] and K[l, 0..n] copy in one go.
    assert block_runs((16, 16, 4, 8), (3, 5, 0, 0), (1, 1, 4, 8)) == [((3 * 16 + 5) * 32, 0, 32)]
    assert block_runs((16, 16, 4, 8), (3, 0, 0, 0), (1, 7, 4, 8)) == [(3 * 16 * 32, 0, 7 * 32)]
    assert len(block_runs((16, 16, 4, 8), (0, 0, 0, 0), (2, 7, 4, 8))) == 2


# ---- TableCache on both storages ----------------------------------------------------------------
class Tables:
    """Makes TableCaches on one storage and reads their values back to the host."""

    def __init__(self, kind: str, backend: VulkanBackend) -> None:
        self.kind = kind
        self.backend = backend
        self.stats: dict[str, int] = {}

    def table(self, indices=("t",), auto=(), entry=(2,), fixed=None, dtype=DType.F32) -> TableCache:
        storage = None if self.kind == "jax" else VulkanTableStorage(self.backend, self.stats)
        return TableCache("A", dtype, indices, auto, entry, fixed or {}, CPU, storage)

    def host(self, value: Any) -> np.ndarray:
        if isinstance(value, DeviceResident):
            return self.backend.download(value.tensor)
        return np.asarray(materialize(value))


@pytest.fixture(params=STORAGES)
def tables(request: pytest.FixtureRequest, backend: VulkanBackend) -> Tables:
    return Tables(request.param, backend)


def entry(v: float, shape=(2,), dtype=np.float32) -> np.ndarray:
    return np.full(shape, v, dtype)


def test_append_grows_by_doubling_and_keeps_entries(tables: Tables) -> None:
    t, undo = tables.table(), []
    for i in range(40):
        t.write((i,), entry(i), undo)
    assert t.counts == {"t": 40} and t.capacity["t"] == 64
    np.testing.assert_array_equal(t.host_view()[:, 0], np.arange(40, dtype=np.float32))


def test_reads_are_device_resident_copies(backend: VulkanBackend) -> None:
    tabs = Tables("vulkan", backend)
    t, undo = tabs.table(entry=(3,)), []
    t.write((0,), entry(1, (3,)), undo)
    out = t.read((0,), undo, bucket=True)
    assert isinstance(out, DeviceResident) and out.host is None and out.shape == (3,)
    t.write((0,), entry(9, (3,)), undo)  # a later write must not show through the copy
    np.testing.assert_array_equal(tabs.host(out), [1, 1, 1])
    whole = t.read((Slice(None, None),), undo, bucket=True)
    assert not isinstance(whole, Ragged)  # exact shapes on Vulkan: kernels are shape-free
    assert tabs.stats.get("vk_cache_downloads", 0) == 0


def test_never_written_entry_reads_zero_and_scalar_read_grows(tables: Tables) -> None:
    t, undo = tables.table(), []
    for _ in range(2):  # the second time on a buffer that already held a write
        np.testing.assert_array_equal(tables.host(t.read((3,), undo, bucket=False)), [0, 0])
        t.write((5,), entry(4), undo)
    assert t.counts["t"] == 6


def test_slices_half_open_negative_and_open(tables: Tables) -> None:
    t, undo = tables.table(), []
    for i in range(10):
        t.write((i,), entry(i), undo)
    cases = [(Slice(0, 5), [0, 1, 2, 3, 4]), (Slice(2, 5), [2, 3, 4]), (Slice(0, -3), range(7)),
             (Slice(None, None), range(10)), (Slice(-2, None), [8, 9]), (Slice(4, 4), [])]  # fmt: skip
    for sl, want in cases:
        got = tables.host(t.read((sl,), undo, bucket=False))
        np.testing.assert_array_equal(got.reshape(-1, 2)[:, 0], np.asarray(list(want), np.float32))
    assert t.counts["t"] == 10
    with pytest.raises(SimulationError, match="out of range"):
        t.read((Slice(0, 11),), undo, bucket=False)


def test_fixed_capacity_presized_and_overflow_raises(tables: Tables) -> None:
    t, undo = tables.table(fixed={"t": 4}), []
    assert t.capacity["t"] == 4
    for i in range(4):
        t.write((i,), entry(i), undo)
    with pytest.raises(SimulationError, match="exceeds fixed size t=4"):
        t.write((4,), entry(9), undo)


def test_two_index_table_strided_reads(tables: Tables) -> None:
    t, undo = tables.table(indices=("l", "t"), entry=(3,)), []
    for layer in range(3):
        for step in range(5):
            t.write((layer, step), np.full(3, 10 * layer + step, np.float32), undo)
    want = (10 * np.arange(3)[:, None] + np.arange(5)[None, :]).astype(np.float32)
    # Across layers the block is not contiguous in the [16, 16, 3] buffer: a strided copy.
    whole = tables.host(t.read((Slice(None, None), Slice(None, None)), undo, bucket=False))
    np.testing.assert_array_equal(whole[..., 0], want)
    col = tables.host(t.read((Slice(None, None), 2), undo, bucket=False))
    np.testing.assert_array_equal(col[:, 0], want[:, 2])
    part = tables.host(t.read((Slice(1, None), Slice(-3, -1)), undo, bucket=False))
    np.testing.assert_array_equal(part[..., 0], want[1:, 2:4])
    assert tables.host(t.read((1, Slice(0, 4)), undo, bucket=False)).shape == (4, 3)


def test_reset_whole_table_and_one_entry(tables: Tables) -> None:
    t, undo = tables.table(indices=("l", "t")), []
    for layer in range(2):
        for step in range(3):
            t.write((layer, step), entry(1 + layer), undo)
    t.reset((0,), undo)  # K[0]: every entry of layer 0 zeroed, counts kept
    view = t.host_view()
    assert view.shape == (2, 3, 2) and view[0].sum() == 0 and view[1].sum() == 12
    t.reset((), undo)
    assert t.counts == {"l": 0, "t": 0} and t.host_view().shape == (0, 0, 2)
    np.testing.assert_array_equal(tables.host(t.read((1, 2), undo, bucket=False)), [0, 0])


def test_auto_dim_grows_entry_dims(tables: Tables) -> None:
    t, undo = tables.table(indices=("i", "j"), auto=("i", "j"), entry=(2, 3)), []
    assert tables.host(t.read((1, 0), undo, bucket=False)).shape == (4, 4)
    value = np.arange(16, dtype=np.float32).reshape(4, 4)
    t.write((1, 0), value, undo)  # rows of the [2 + 16, 3 + 16] buffer: one run per row
    assert t.logical_shape() == (4, 4)
    np.testing.assert_array_equal(t.host_view(), value)
    got = tables.host(t.read((Slice(1, 3), Slice(None, -1)), undo, bucket=False))
    np.testing.assert_array_equal(got, value[1:3, :3])


@pytest.mark.parametrize(
    "dtype", [DType.F16, DType.BF16, DType.I8, DType.BOOL, DType.I64, DType.F64]
)
def test_narrow_and_wide_dtypes_at_unaligned_offsets(tables: Tables, dtype: DType) -> None:
    # Entries of 3 elements: 8/16-bit entries start inside 32-bit words, 64-bit ones
    # move as word pairs (no shaderInt64 needed for copies). JAX storage of 64-bit values
    # needs the 64-bit mode a simulator of such a graph runs in.
    with Precision(dtype in WIDE_DTYPES).scope():
        _write_and_read_back(tables, dtype)


def _write_and_read_back(tables: Tables, dtype: DType) -> None:
    t, undo = tables.table(indices=("l", "t"), entry=(3,), dtype=dtype), []
    rng = np.random.default_rng(7)
    want = np.zeros((2, 5, 3), dtype.numpy)
    for layer in range(2):
        for step in range(5):
            raw = rng.integers(0, 2 if dtype is DType.BOOL else 100, 3)
            value = raw.astype(dtype.numpy)
            t.write((layer, step), value, undo)
            want[layer, step] = value
    np.testing.assert_array_equal(t.host_view(), want)
    got = tables.host(t.read((Slice(None, None), Slice(1, 4)), undo, bucket=False))
    np.testing.assert_array_equal(got, want[:, 1:4])


def test_undo_restores_entries_counts_and_capacity_use(tables: Tables) -> None:
    store = PersistentStore()
    t = store.tables["A"] = tables.table(indices=("l", "t"))
    for i in range(3):
        t.write((0, i), entry(i + 1), store.undo)
    store.commit()
    before, buf_shape = t.host_view().copy(), t.storage.shape(t.buffer)
    for i in range(3, 40):  # grows past capacity during the failing step
        t.write((1, i), entry(100), store.undo)
    t.write((0, 0), entry(-5), store.undo)
    t.reset((0,), store.undo)
    t.reset((), store.undo)
    t.write((2, 1), entry(7), store.undo)
    store.rollback()
    assert t.counts == {"l": 1, "t": 3}
    np.testing.assert_array_equal(t.host_view(), before)
    assert t.storage.shape(t.buffer)[1] >= buf_shape[1]
    # The zero-beyond-counts invariant survives rollback: new entries read zeros.
    np.testing.assert_array_equal(tables.host(t.read((1, 5), [], bucket=False)), [0, 0])
    np.testing.assert_array_equal(tables.host(t.read((0, 3), [], bucket=False)), [0, 0])


def test_rollback_of_reset_then_growth_restores_capacity(tables: Tables) -> None:
    # Found by the random programs below: a whole reset swaps buffers; a later write grew
    # the fresh one; the rollback must bring back the old buffer WITH its capacity.
    store = PersistentStore()
    t = store.tables["A"] = tables.table(indices=("l", "t"))
    t.write((0, 3), entry(3), store.undo)
    store.commit()
    t.reset((), store.undo)
    t.write((0, 20), entry(20), store.undo)
    assert t.capacity["t"] == 32
    store.rollback()
    assert t.capacity["t"] == 16 == t.storage.shape(t.buffer)[1]
    t.write((0, 20), entry(5), store.undo)  # grows the restored buffer properly
    view = t.host_view()
    assert view.shape == (1, 21, 2) and view[0, 3, 0] == 3 and view[0, 20, 0] == 5


def test_load_prefill_sets_counts(tables: Tables) -> None:
    t = tables.table(indices=("l", "t"), entry=(2,))
    data = np.arange(2 * 20 * 2, dtype=np.float32).reshape(2, 20, 2)
    t.load(data)
    assert t.counts == {"l": 2, "t": 20} and t.capacity["t"] >= 32
    np.testing.assert_array_equal(t.host_view(), data)
    t.write((1, 20), entry(-1), [])
    np.testing.assert_array_equal(t.host_view()[1, 20], [-1, -1])


def test_device_tensor_of_another_dtype_is_refused(backend: VulkanBackend) -> None:
    t = Tables("vulkan", backend).table()
    with pytest.raises(SimulationError, match="cannot take a i32 value"):
        t.write((0,), backend.upload(np.zeros(2, np.int32), DType.I32), [])
    assert t.counts == {"t": 1}  # counts grow before the copy; a step failure undoes them


@settings(max_examples=12, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(-3, 40)), min_size=1, max_size=12))
def test_random_writes_agree_between_storages(backend: VulkanBackend, ops: list) -> None:
    views = []
    for kind in STORAGES:
        t, undo = Tables(kind, backend).table(indices=("l", "t")), []
        for k, (layer, step) in enumerate(ops):
            with contextlib.suppress(SimulationError):  # a negative index before entry 0
                t.write((layer, step), entry(k + 1), undo)
        views.append((t.counts, t.host_view()))
    assert views[0][0] == views[1][0]
    np.testing.assert_array_equal(views[0][1], views[1][1])


TABLE_OPS = st.one_of(
    # Mostly overwrites of a few entries (undo must restore them), sometimes a far write
    # that grows the buffer.
    st.tuples(st.just("write"), st.integers(0, 2), st.integers(-2, 3)),
    st.tuples(st.just("write"), st.integers(0, 2), st.just(20)),
    st.tuples(st.just("read"), st.integers(-3, 3), st.integers(-3, 3)),
    st.tuples(st.just("reset"), st.integers(0, 2), st.just(0)),
    st.tuples(st.sampled_from(["reset_all", "commit", "rollback"]), st.just(0), st.just(0)),
)


@settings(max_examples=20, deadline=None)
@given(st.lists(TABLE_OPS, min_size=1, max_size=14))
@example([("write", 1, 2), ("commit", 0, 0), ("write", 1, 2), ("write", 0, 20), ("rollback", 0, 0)])
@example([("reset_all", 0, 0), ("write", 0, 20), ("rollback", 0, 0), ("write", 0, 20)])
@example(
    [("write", 0, 0), ("write", 0, 1), ("commit", 0, 0)]
    + [("write", 0, 0), ("write", 0, 1), ("rollback", 0, 0)] * 2
)
@example(
    [("write", 0, 1), ("commit", 0, 0), ("reset", 0, 0), ("reset_all", 0, 0), ("rollback", 0, 0)]
)
def test_random_programs_agree_between_storages(backend: VulkanBackend, program: list) -> None:
    # Writes, slice reads, partial and whole resets, commits and rollbacks: both storages
    # must give the same values, errors, counts and contents after every operation.
    pairs = []
    for kind in STORAGES:
        tabs, store = Tables(kind, backend), PersistentStore()
        store.tables["A"] = tabs.table(indices=("l", "t"), entry=(3,))
        pairs.append((tabs, store))
    for k, (op, a, b) in enumerate(program):
        seen = []
        for tabs, store in pairs:
            t = store.tables["A"]
            try:
                if op == "write":
                    t.write((a, b), np.full(3, k + 1, np.float32), store.undo)
                    got: Any = None
                elif op == "read":
                    got = tabs.host(
                        t.read((Slice(None, None), Slice(a, b)), store.undo, bucket=False)
                    )
                elif op == "reset":
                    got = t.reset((a,), store.undo)
                elif op == "reset_all":
                    got = t.reset((), store.undo)
                else:
                    got = getattr(store, op)()
            except SimulationError as err:
                got = str(err)
            seen.append((got, dict(t.counts), t.host_view()))
        (got0, counts0, view0), (got1, counts1, view1) = seen
        assert counts0 == counts1, (k, op)
        np.testing.assert_array_equal(view0, view1, err_msg=f"{k} {op}")
        if isinstance(got0, np.ndarray):
            np.testing.assert_array_equal(got0, got1)
        else:
            assert got0 == got1


# ---- executors: vulkan vs cpu -----------------------------------------------------------------------
@pytest.fixture
def make_model(tmp_path: Path) -> Iterator[Callable[..., ModelLoader]]:
    """`make_model(sizevars=..., tensors=...)`: a model written with the real writer."""
    opened: list[ModelLoader] = []

    def make(sizevars: dict[str, int] | None = None, tensors: dict[str, Any] | None = None):
        path = tmp_path / f"model{len(opened)}.oinf"
        write_oinf(path, sizevars=sizevars or {}, metadata={}, tensors=tensors or {})
        opened.append(ModelLoader.open(path))
        return opened[-1]

    yield make
    for model in opened:
        model.close()


def run_both(
    make_model: Callable[..., Any],
    graph: str,
    steps: list[dict[str, Any]],
    names: tuple[str, ...],
    model_kwargs: dict[str, Any],
    setup: Callable[[Any], None] | None = None,
    reference: str = "cpu",
) -> dict[str, Any]:
    """Run the same steps on `reference` and vulkan, fetching `names` after each step;
    returns the executors by device."""
    model = make_model(**model_kwargs)
    seen: dict[str, list[list[np.ndarray]]] = {}
    executors = {}
    for device in (reference, "vulkan"):
        ex = Simulator(model, graph, device=device).make_executor()
        if setup is not None:
            setup(ex)
        for inputs in steps:
            ex.insert(**inputs)
            ex.step()
            seen.setdefault(device, []).append([ex.fetch(n) for n in names])
        executors[device] = ex
    for got_step, want_step in zip(seen["vulkan"], seen[reference]):
        for name, got, want in zip(names, got_step, want_step):
            assert got.shape == want.shape, name
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
    return executors


TABLES_GRAPH = """
graph {
  dynamic { x: f32[D]; flag: i32; }
  volatile {
    w: f32[D]; h: f32[D]; win: f32[2, 2, D]; s: f32[D]; g: f32[E, 2]; one: f32[E, 2] @init(1.0);
  }
  persistent {
    step: i32 @init(0);
    K(l, t): f32[D] @table;
    F(t): f32[D] @table @fixed(t=16);
    G(i): f32[D, 2] @auto_dim(i);
    W: f32[D];
  }
  block entry {
    cache.read W >> h;
    op add(h, x) >> h;
    cache.write h >> W;
    loop layers (l in 0..2) {
      op mul(h, w) >> h;
      cache.write h >> K[l, step];
    }
    cache.read K[.., -2..] >> win;
    op sum_axis(win, axes=[0, 1]) >> s;
    cache.write s >> F[step];
    cache.read G[0] >> g;
    op add(g, one) >> g;
    cache.write g >> G[0];
    cache.increment step;
    branch flag wipe keep;
    return;
  }
  block wipe { cache.reset F; cache.reset K[0]; return; }
  block keep { return; }
}
"""


def _prefill(ex: Any) -> None:
    ex.set_persistent("K", np.ones((2, 2, 3), np.float32))
    ex.set_persistent("step", np.int32(2))


def test_tables_tensors_resets_and_auto_dim_match_cpu(make_model) -> None:
    rng = np.random.default_rng(0)
    steps = [
        {"x": rng.standard_normal(3).astype(np.float32), "flag": np.int32(k == 3)} for k in range(6)
    ]
    exs = run_both(
        make_model, TABLES_GRAPH, steps, ("h", "K", "F", "G", "W", "step", "win", "g"),
        {"sizevars": {"D": 3, "E": 4}, "tensors": {"w": np.array([1.0, -0.5, 2.0], np.float32)}},
        setup=_prefill,
    )  # fmt: skip
    stats = exs["vulkan"].stats
    assert stats["vk_cache_uploads"] == 1  # the prefill; the rest never left the device
    assert isinstance(exs["vulkan"].persistent.values["W"], DeviceResident)
    np.testing.assert_array_equal(exs["vulkan"].fetch("G"), np.full((4, 2), 6, np.float32))


KV_GRAPH = """
graph {
  dynamic { x: f32[1, D]; }
  volatile {
    w: f32[D, D]; k: f32[1, D]; kv: f32[D]; ks: f32[N, D]; s: f32[D]; acc: f32[D]; y: f32[D];
  }
  persistent { step: i32 @init(0); K(l, t): f32[D] @table; }
  block entry {
    loop layers (l in 0..2) {
      op matmul(x, w) >> k;
      op reshape(k, shape=[4]) >> kv;
      cache.write kv >> K[l, step];
      cache.read K[l, ..] >> ks;
      op sum_axis(ks, axes=[0]) >> s;
      op add(acc, s) >> acc;
    }
    op mul(acc, acc) >> y;
    cache.increment step;
    return;
  }
}
"""


def test_kv_decode_step_moves_no_cache_data_between_host_and_device(make_model) -> None:
    # Issue 7: per decode step only the new input goes up; cache write sources are not
    # downloaded and cache reads are not uploaded.
    d, steps = 4, 6
    w = np.random.default_rng(1).standard_normal((d, d)).astype(np.float32)
    model = make_model(sizevars={"D": d, "N": 1}, tensors={"w": w})
    ex = Simulator(model, KV_GRAPH, device="vulkan", validate=False).make_executor()
    xs = [np.random.default_rng(k).standard_normal((1, d)).astype(np.float32) for k in range(steps)]
    per_step = []
    for x in xs:
        before = dict(ex.stats)
        ex.insert(x=x)
        ex.step()
        per_step.append({k: ex.stats[k] - before[k] for k in ("vk_uploads", "vk_downloads")})
    assert per_step[0] == {"vk_uploads": 3, "vk_downloads": 0}  # x, w, acc's zeros
    assert all(s == {"vk_uploads": 1, "vk_downloads": 0} for s in per_step[1:])  # x only
    assert ex.stats["vk_cache_uploads"] == ex.stats["vk_cache_downloads"] == 0
    # And the math is right: K holds x @ w per step and layer; y sums the prefixes.
    rows = np.concatenate(xs) @ w
    np.testing.assert_allclose(ex.fetch("K"), np.stack([rows, rows]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ex.fetch("y"), (2 * rows.sum(0)) ** 2, rtol=1e-4, atol=1e-5)
    assert ex.stats["vk_cache_downloads"] == 1  # fetch("K")


def test_traced_cache_read_is_described_without_a_download(make_model) -> None:
    d = 4
    model = make_model(sizevars={"D": d, "N": 1}, tensors={"w": np.eye(d, dtype=np.float32)})
    sim = Simulator(model, KV_GRAPH, device="vulkan", validate=False).with_trace()
    ex = sim.make_executor()
    for _ in range(2):
        ex.insert(x=np.ones((1, d), np.float32))
        ex.step()
    assert ex.stats["vk_downloads"] == 0
    reads = [e for e in ex.trace() if e.kind == "CacheRead" and e.step == 1]
    assert [e.output_shapes for e in reads] == [[[2, d]], [[2, d]]]
    assert reads[0].output_dtypes == ["float32"]


GROWING_GRAPH = """
graph {
  dynamic { x: f64[D]; }
  volatile { ks: f64[N, D]; s: f64[D]; }
  persistent { step: i32 @init(0); K(t): f64[D] @table; }
  block entry {
    cache.write x >> K[step];
    cache.read K[..] >> ks;
    op sum_axis(ks, axes=[0]) >> s;
    cache.increment step;
    return;
  }
}
"""


def test_cpu_fallback_on_a_growing_slice_compiles_per_bucket(make_model, monkeypatch) -> None:
    # Without shaderFloat64 the f64 sum falls back to XLA CPU; the resident slice's host
    # copy is bucket-padded (a Ragged), so 12 lengths compile for 5 buckets, not 12 times.
    monkeypatch.setenv("OPENINFER_VK_DISABLE", "shader_float64")
    model = make_model(sizevars={"D": 3, "N": 1})
    steps = [{"x": np.full(3, k + 0.5)} for k in range(12)]
    sims = {}
    for device in ("cpu", "vulkan"):
        sim = Simulator(model, GROWING_GRAPH, device=device, validate=False).with_trace()
        ex = sim.make_executor()
        for inputs in steps:
            ex.insert(**inputs)
            ex.step()
        sims[device] = ex
    ex = sims["vulkan"]
    np.testing.assert_array_equal(ex.fetch("s"), np.full(3, sum(k + 0.5 for k in range(12))))
    np.testing.assert_array_equal(ex.fetch("K"), sims["cpu"].fetch("K"))
    sums = [e for e in ex.trace() if e.op_name == "sum_axis"]
    assert all(e.warnings for e in sums)  # really on the CPU
    assert ex.stats["compilations"] <= 5
    # x is a host input written straight into the table: one upload per step, nothing else.
    assert ex.stats["vk_cache_uploads"] == ex.stats["vk_uploads"] == 12


def test_host_caches_switch_keeps_tables_in_host_memory(make_model, monkeypatch) -> None:
    # OPENINFER_VK_HOST_CACHES=1: the layout before issue 7 (the benchmark's baseline).
    d = 4
    w = np.random.default_rng(1).standard_normal((d, d)).astype(np.float32)
    model = make_model(sizevars={"D": d, "N": 1}, tensors={"w": w})
    fetched = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("OPENINFER_VK_HOST_CACHES", flag)
        ex = Simulator(model, KV_GRAPH, device="vulkan", validate=False).make_executor()
        assert isinstance(ex.persistent.tables["K"].buffer, jax.Array) == (flag == "1")
        for k in range(3):
            before = dict(ex.stats)
            ex.insert(x=np.full((1, d), k, np.float32))
            ex.step()
        delta = {k: ex.stats[k] - before[k] for k in ("vk_uploads", "vk_downloads")}
        # Per step and layer the host layout downloads kv (cache.write) and uploads ks.
        want = (
            {"vk_uploads": 3, "vk_downloads": 2}
            if flag == "1"
            else {"vk_uploads": 1, "vk_downloads": 0}
        )
        assert delta == want
        fetched[flag] = (ex.fetch("K"), ex.fetch("y"))
    for got, want in zip(fetched["0"], fetched["1"]):
        np.testing.assert_array_equal(got, want)


PREFIX_GRAPH = """
graph {
  dynamic { x: f32[D]; }
  volatile { W(l): f32[D] @pattern("w.{l}"); h: f32[D]; }
  persistent { step: i32 @init(0); A(l, t): f32[D] @table; }
  block entry {
    loop layers (l in 0..2) {
      op add(W[l], x) >> W[l];
      cache.write W[l] >> A[l, step];
      op mul(W[l], W[l]) >> W[l];
      cache.read A[l, step] >> W[l];
      op add(h, W[l]) >> h;
    }
    cache.increment step;
    return;
  }
}
"""


def test_prefix_table_entries_stay_on_the_device(make_model) -> None:
    # `op ... >> W[l]` and `cache.read ... >> W[l]` override an entry for the step; on
    # Vulkan the override stays resident like any op result.
    tensors = {f"w.{i}": np.full(3, i + 1, np.float32) for i in range(2)}
    steps = [{"x": np.full(3, k, np.float32)} for k in range(3)]
    # Reference: the NumPy interpreter. The fused CPU path disagrees here: a wide region
    # writes `cache.read ... >> W[l]` to the plain variable W, not the entry (wide.py).
    exs = run_both(make_model, PREFIX_GRAPH, steps, ("h", "A", "step"),
                   {"sizevars": {"D": 3}, "tensors": tensors}, reference="numpy")  # fmt: skip
    ex = exs["vulkan"]
    before = dict(ex.stats)
    ex.insert(x=np.ones(3, np.float32))
    ex.step()
    assert ex.stats["vk_uploads"] - before["vk_uploads"] == 1  # x; the weights stay up
    assert ex.stats["vk_downloads"] == before["vk_downloads"]  # nothing came down


def test_host_value_written_to_a_table_is_uploaded_once(make_model) -> None:
    text = """
    graph {
      dynamic { x: f32[D]; }
      persistent { step: i32 @init(0); A(t): f32[D] @table; }
      block entry { cache.write x >> A[step]; cache.increment step; return; }
    }
    """
    exs = run_both(make_model, text, [{"x": np.full(2, k, np.float32)} for k in range(3)],
                   ("A", "step"), {"sizevars": {"D": 2}})  # fmt: skip
    stats = exs["vulkan"].stats
    assert stats["vk_cache_uploads"] == 3 and stats["vk_uploads"] == 3
    # 3 uploads of 8 bytes; fetch after step k downloads the k written entries (gathered
    # on the device first: they are less than half of the 16-entry buffer).
    assert stats["vk_cache_bytes"] == 3 * 8 + (1 + 2 + 3) * 8


def _kv_example() -> Any:
    """examples/kv_cache_decode.py as a module."""
    sys.path.insert(0, str(EXAMPLES_DIR))
    try:
        import kv_cache_decode
    finally:
        sys.path.remove(str(EXAMPLES_DIR))
    return kv_cache_decode


def test_kv_cache_decode_example_keeps_its_caches_on_the_device(tmp_path: Path) -> None:
    # examples/kv_cache_decode.py, 2 layers: the K/V writes and reads stay on the device.
    # What still crosses per step is the attention fallback (no Vulkan kernel yet: qh, kt,
    # vt down, its output up) and x; with an attention kernel it would be less still.
    kv = _kv_example()
    cfg = kv.Config(layers=2, d=16, heads=2)
    path = tmp_path / "kv.oinf"
    kv.write_model(path, cfg)
    outs = {}
    for device in ("cpu", "vulkan"):
        sim = Simulator(path, kv.graph_text(cfg), device=device)
        ex = sim.make_executor()
        rng, ys, deltas = np.random.default_rng(1), [], []
        for _ in range(5):
            before = dict(ex.stats)
            ex.insert(x=rng.standard_normal((1, cfg.d)).astype(np.float32))
            ex.step()
            if device == "vulkan":
                deltas.append({k: ex.stats[k] - before[k] for k in ("vk_uploads", "vk_downloads")})
            ys.append(ex.fetch("y"))
        outs[device] = (ys, ex.fetch("K"), ex.fetch("V"))
        sim.model.close()
    np.testing.assert_allclose(
        np.stack(outs["vulkan"][0]), np.stack(outs["cpu"][0]), rtol=1e-4, atol=1e-5
    )
    for got, want in zip(outs["vulkan"][1:], outs["cpu"][1:]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for delta in deltas[1:]:
        # Before issue 7's cache residency: 1 + 4 * layers uploads and 5 * layers + 1
        # downloads per step (cache.write sources down, cache reads up).
        assert delta["vk_uploads"] <= 1 + 2 * cfg.layers
        assert delta["vk_downloads"] <= 3 * cfg.layers + 1


# ---- atomic steps on the device ---------------------------------------------------------------
ATOMIC = """
graph {
  dynamic { x: f32[D]; }
  volatile { w: f32[D]; h: f32[D]; }
  persistent {
    step: i32 @init(0);
    A(t): f32[D] @table;
    B(t): f32[D] @table @fixed(t=2);
    W: f32[D];
  }
  block entry {
    op add(x, w) >> h;
    cache.write h >> W;
    cache.write h >> A[step];
    cache.write h >> A[GROW];
    RESET
    cache.increment step;
    cache.write h >> B[step];
    return;
  }
}
"""


@pytest.mark.parametrize(
    "grow, reset",
    [("step", ""), ("40", ""), ("step", "cache.reset A;"), ("40", "cache.reset A[0];")],
    ids=["write", "grow", "reset-whole", "grow-reset-entry"],
)
@pytest.mark.parametrize("device", ["cpu", "vulkan"])
def test_failed_step_leaves_persistent_state_as_before(
    make_model, device: str, grow: str, reset: str
) -> None:
    text = ATOMIC.replace("GROW", grow).replace("RESET", reset)
    model = make_model(sizevars={"D": 3}, tensors={"w": np.ones(3, np.float32)})
    ex = Simulator(model, text, device=device).make_executor()
    ex.insert(x=np.full(3, 1, np.float32))
    ex.step()  # A[0], B[1], step = 1
    names = ("A", "B", "W", "step")
    before = {n: ex.fetch(n).copy() for n in names}
    counts = {n: dict(ex.persistent.tables[n].counts) for n in ("A", "B")}
    ex.insert(x=np.full(3, 7, np.float32))
    for _ in range(2):  # the inserted input survives: a retry fails the same way
        with pytest.raises(SimulationError, match="exceeds fixed size t=2") as info:
            ex.step()
        assert "cache.write h >> B[step]" in str(info.value)
        for name in names:
            np.testing.assert_array_equal(ex.fetch(name), before[name], err_msg=name)
        assert {n: ex.persistent.tables[n].counts for n in ("A", "B")} == counts
    assert ex.steps == 1
    # After the failure the tables keep working from the restored state.
    ex.set_persistent("step", np.int32(0))
    ex.step()
    assert ex.fetch("B")[1, 0] == 8 and int(ex.fetch("step")) == 1


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
def test_op_error_mid_step_rolls_back_cache_writes(make_model, device: str) -> None:
    text = """
    graph {
      dynamic { x: f32[D]; idx: i32; }
      volatile { r: f32[1, D]; q: f32[2, 2]; }
      persistent { A(t): f32[D] @table; }
      block entry {
        cache.write x >> A[idx];
        cache.read A[0..idx] >> r;
        op reshape(r, shape=[2, 2]) >> q;
        return;
      }
    }
    """
    ex = Simulator(
        make_model(sizevars={"D": 2}), text, device=device, validate=False
    ).make_executor()
    ex.insert(x=np.ones(2, np.float32), idx=np.int32(2))
    ex.step()
    before = ex.fetch("A").copy()
    ex.insert(x=np.full(2, 5, np.float32), idx=np.int32(4))
    with pytest.raises(SimulationError, match=r"block entry node 2 \(op reshape"):
        ex.step()
    np.testing.assert_array_equal(ex.fetch("A"), before)
    assert ex.persistent.tables["A"].counts == {"t": 3}


@pytest.mark.parametrize("replay", [False, True])
def test_a_growing_kv_cache_builds_pipelines_only_when_a_bucket_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replay: bool
) -> None:
    # kp fixes an algorithm's buffers and grid, so a K/V read one entry longer each step
    # used to build ~5 pipelines per layer per step. Results now get bucketed buffers and
    # flat kernels bucketed grids (vk/launch.py `bucket`): a step builds pipelines only
    # when the read's length enters a new bucket (or the step after: persistent results
    # alternate between two buffers) or in the few steps after a table grew (the old
    # buffer, kept for rollback, goes back to the pool and other results take it).
    # With replayed op runs (sim/vulkan_replay.py) a replay takes its recorded buffers,
    # which are not always those a walk would have taken: after a table grew, a walk may
    # once bind one op's result to a buffer it never had (a few pipelines, once).
    from openinfer_jax.vk.launch import bucket

    monkeypatch.setenv("OPENINFER_VK_REPLAY", "1" if replay else "0")
    kv = _kv_example()
    cfg = kv.Config(layers=1, d=16, heads=2)
    path = tmp_path / "kv.oinf"
    kv.write_model(path, cfg)
    sim = Simulator(path, kv.graph_text(cfg), device="vulkan")
    ex = sim.make_executor()
    rng = np.random.default_rng(2)
    created, capacities = [], []
    for _ in range(48):
        before = sim.vulkan.stats["pipelines_created"]
        ex.insert(x=rng.standard_normal((1, cfg.d)).astype(np.float32))
        ex.step()
        ex.fetch("y")
        created.append(sim.vulkan.stats["pipelines_created"] - before)
        capacities.append(dict(ex.persistent.tables["K"].capacity))
    sim.model.close()
    # Step s reads s + 1 entries of cfg.d elements; a bucket change moves the read's
    # buffer and the grids of the kernels that follow it.
    sizes = [bucket((s + 1) * cfg.d) for s in range(48)]
    quiet = [
        s for s in range(8, 48)
        if sizes[s] == sizes[s - 1] == sizes[s - 2] and capacities[s] == capacities[s - 4]
    ]  # fmt: skip
    assert len(quiet) >= 15, quiet
    built = [created[s] for s in quiet]
    if replay:
        assert sum(built) <= 5 and built.count(0) >= len(quiet) - 1, (created, quiet)
        assert ex.stats["vk_replayed"] > 0
    else:
        assert built == [0] * len(quiet), (created, quiet, capacities)
