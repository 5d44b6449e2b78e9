"""TableCache: growth by doubling, fixed capacity, slices, multi-index reads, auto_dim, undo."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import SimulationError
from openinfer_jax.sim.caches import INITIAL_CAPACITY, PersistentStore, Slice, TableCache
from openinfer_jax.sim.values import Ragged, materialize

CPU = jax.devices("cpu")[0]


def table(indices=("t",), auto=(), entry=(2,), fixed=None, dtype=DType.F32) -> TableCache:
    return TableCache("A", dtype, indices, auto, entry, fixed or {}, CPU)


def entry(v: float, shape=(2,)) -> np.ndarray:
    return np.full(shape, v, np.float32)


def test_append_grows_by_doubling_and_keeps_entries() -> None:
    t, undo = table(), []
    for i in range(40):
        t.write((i,), entry(i), undo)
    assert t.counts == {"t": 40}
    assert t.capacity["t"] == 64  # 16 -> 32 -> 64, never one buffer per append
    np.testing.assert_array_equal(t.host_view()[:, 0], np.arange(40, dtype=np.float32))


def test_write_is_in_place_donated_buffer() -> None:
    t, undo = table(entry=(4, 8)), []
    t.write((0,), entry(1, (4, 8)), undo)
    ptr = t.buffer.unsafe_buffer_pointer()
    t.write((1,), entry(2, (4, 8)), undo)
    assert t.buffer.unsafe_buffer_pointer() == ptr


def test_never_written_entry_reads_zero_and_scalar_read_grows() -> None:
    t, undo = table(), []
    out = t.read((3,), undo, bucket=False)
    np.testing.assert_array_equal(np.asarray(out), np.zeros(2, np.float32))
    assert t.counts["t"] == 4


def test_slices_half_open_negative_and_open() -> None:
    t, undo = table(), []
    for i in range(10):
        t.write((i,), entry(i), undo)

    def read(sl: Slice) -> np.ndarray:
        return np.asarray(materialize(t.read((sl,), undo, bucket=False)))[:, 0]

    np.testing.assert_array_equal(read(Slice(0, 5)), [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(read(Slice(2, 5)), [2, 3, 4])
    np.testing.assert_array_equal(read(Slice(0, -3)), np.arange(7))
    np.testing.assert_array_equal(read(Slice(None, None)), np.arange(10))
    np.testing.assert_array_equal(read(Slice(-2, None)), [8, 9])
    assert t.counts["t"] == 10  # slices never grow


def test_slice_past_the_end_is_an_error() -> None:
    t, undo = table(), []
    t.write((0,), entry(1), undo)
    with pytest.raises(SimulationError, match="out of range"):
        t.read((Slice(0, 5),), undo, bucket=False)


def test_bucketed_slice_is_padded_to_power_of_two() -> None:
    t, undo = table(), []
    for i in range(5):
        t.write((i,), entry(i + 1), undo)
    out = t.read((Slice(None, None),), undo, bucket=True)
    assert isinstance(out, Ragged)
    assert out.data.shape == (8, 2) and out.length == 5 and out.axis == 0
    np.testing.assert_array_equal(np.asarray(out.exact())[:, 0], [1, 2, 3, 4, 5])


def test_bucketed_read_near_a_fixed_capacity_pads_to_the_buffer_end() -> None:
    # Capacity 6: lengths 5 and 6 would pad to bucket 8, past the buffer; both read a block
    # of the 6 entries there are (one shape, one compilation), lengths kept apart.
    t, undo = table(fixed={"t": 6}), []
    for n in (5, 6):
        t.write((n - 1,), entry(n), undo)
        out = t.read((Slice(0, n),), undo, bucket=True)
        assert isinstance(out, Ragged)
        assert out.data.shape == (6, 2) and out.length == n
        np.testing.assert_array_equal(np.asarray(out.exact())[:, 0], [0, 0, 0, 0, 5, 6][:n])
    # a read starting later has less room: padded to the end from its start
    out = t.read((Slice(2, 5),), undo, bucket=True)
    assert isinstance(out, Ragged) and out.data.shape == (4, 2) and out.length == 3


def test_fixed_capacity_presized_and_overflow_raises() -> None:
    t, undo = table(fixed={"t": 4}), []
    assert t.capacity["t"] == 4
    for i in range(4):
        t.write((i,), entry(i), undo)
    with pytest.raises(SimulationError, match="exceeds fixed size t=4"):
        t.write((4,), entry(9), undo)


def test_two_index_table_multi_index_read_shapes() -> None:
    t, undo = table(indices=("l", "t"), entry=(3,)), []
    for layer in range(2):
        for step in range(5):
            t.write((layer, step), np.full(3, 10 * layer + step, np.float32), undo)
    assert materialize(t.read((1, 2), undo, bucket=False)).shape == (3,)
    assert materialize(t.read((1, Slice(0, 4)), undo, bucket=False)).shape == (4, 3)
    whole = np.asarray(
        materialize(t.read((Slice(None, None), Slice(None, None)), undo, bucket=False))
    )
    assert whole.shape == (2, 5, 3)
    assert whole[1, 3, 0] == 13


def test_reset_whole_table_and_one_entry() -> None:
    t, undo = table(indices=("l", "t")), []
    for layer in range(2):
        for step in range(3):
            t.write((layer, step), entry(1 + layer), undo)
    t.reset((0,), undo)  # K[0]: every entry of layer 0 zeroed, counts kept
    view = t.host_view()
    assert view.shape == (2, 3, 2) and view[0].sum() == 0 and view[1].sum() == 12
    t.reset((), undo)
    assert t.counts == {"l": 0, "t": 0}
    assert t.host_view().shape == (0, 0, 2)


def test_auto_dim_grows_entry_dims() -> None:
    t, undo = table(indices=("i", "j"), auto=("i", "j"), entry=(2, 3)), []
    whole = materialize(t.read((1, 0), undo, bucket=False))
    assert whole.shape == (4, 4)  # [D + n_i, H + n_j] after touching i=1, j=0
    t.write((1, 0), np.ones((4, 4), np.float32), undo)
    assert t.logical_shape() == (4, 4)


def test_undo_restores_entries_counts_and_capacity_use() -> None:
    store = PersistentStore()
    t = table()
    store.tables["A"] = t
    for i in range(3):
        t.write((i,), entry(i + 1), store.undo)
    store.commit()
    before = t.host_view().copy()
    for i in range(3, 40):  # grows past capacity during the failing step
        t.write((i,), entry(100), store.undo)
    t.write((0,), entry(-5), store.undo)
    t.reset((), store.undo)
    store.rollback()
    assert t.counts == {"t": 3}
    np.testing.assert_array_equal(t.host_view(), before)
    # The zero-beyond-counts invariant survives rollback: a new entry reads zeros.
    np.testing.assert_array_equal(np.asarray(t.read((3,), [], bucket=False)), np.zeros(2))


def test_packed_tables_are_rejected() -> None:
    with pytest.raises(SimulationError, match="packed"):
        table(dtype=DType.I4)


def test_load_prefill_sets_counts() -> None:
    t = table(indices=("l", "t"), entry=(2,))
    data = np.arange(2 * 20 * 2, dtype=np.float32).reshape(2, 20, 2)
    t.load(data)
    assert t.counts == {"l": 2, "t": 20} and t.capacity["t"] >= 32
    np.testing.assert_array_equal(t.host_view(), data)


def test_load_is_done_when_it_returns_and_copies_the_host_array() -> None:
    """The buffer is on the device when `load` returns (its copy is not left to run inside
    the next step) and is a copy: later changes to the host array do not show through."""
    t = table(indices=("l", "t"), entry=(2,))
    data = np.ones((2, 5, 2), np.float32)
    t.load(data)
    assert t.buffer.is_ready() and t.buffer.shape[1] == t.capacity["t"]
    data[:] = 7
    np.testing.assert_array_equal(t.host_view(), np.ones((2, 5, 2), np.float32))
    full = np.ones((2, t.capacity["t"], 2), np.float32)  # exactly the buffer's shape
    t.load(full)
    full[:] = 7
    np.testing.assert_array_equal(t.host_view(), np.ones_like(full))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=70), min_size=1, max_size=20))
def test_random_writes_match_a_dict_model(indices: list[int]) -> None:
    t, undo = table(), []
    model: dict[int, float] = {}
    for k, i in enumerate(indices):
        t.write((i,), entry(k + 1), undo)
        model[i] = k + 1
    n = max(indices) + 1
    assert t.counts["t"] == n and t.capacity["t"] >= max(n, INITIAL_CAPACITY)
    want = np.zeros(n, np.float32)
    for i, v in model.items():
        want[i] = v
    np.testing.assert_array_equal(t.host_view()[:, 0], want)


def test_range_write_appends_several_entries_and_rolls_back() -> None:
    table = TableCache("K", DType.F32, ("t",), (), (2,), {}, jax.devices("cpu")[0])
    undo: list = []
    table.write((Slice(0, 3),), np.arange(6, dtype=np.float32).reshape(3, 2), undo)
    assert table.size("t") == 3
    # A slice write that starts inside and ends past the count overwrites and grows.
    table.write((Slice(2, 20),), np.ones((18, 2), np.float32), undo)
    assert table.size("t") == 20 and table.capacity["t"] >= 20
    got = np.asarray(table.read((Slice(0, 3),), undo, bucket=False))
    np.testing.assert_array_equal(got, [[0, 1], [2, 3], [1, 1]])
    for restore in reversed(undo):
        restore()
    assert table.size("t") == 0
    with pytest.raises(SimulationError, match="only a write with an explicit end grows a table"):
        table.read((Slice(0, 1),), [], bucket=False)


def test_range_write_past_fixed_capacity_names_the_table() -> None:
    table = TableCache("K", DType.F32, ("t",), (), (2,), {"t": 4}, jax.devices("cpu")[0])
    with pytest.raises(
        SimulationError, match="cache table 'K': index 5 of 't' exceeds fixed size t=4"
    ):
        table.write((Slice(2, 6),), np.zeros((4, 2), np.float32), [])
    assert table.size("t") == 0
