"""Persistent memory: scalar counters, persistent tensors and growable cache tables.

A table (`K(l, t): f32[H, Dh] @table`, `A(i, j): f32[D, H] @auto_dim(i, j)`) lives in ONE
preallocated device buffer `[cap_l, cap_t, *entry]` (auto-dim axes widen entry dims
instead). Capacity grows by doubling, so an append is amortized O(1); a write updates the
buffer in place (JAX: a jitted `dynamic_update_slice` with the buffer donated, so XLA
does not copy the whole cache; Vulkan: a device copy). Every mutation during a step
pushes an undo record (the old entry and counts; for an append past the counts just
"zero it again"); a failed step replays them backwards, leaving the cache exactly as it
was (docs/semantics.md, "Atomic steps"). Each of these changes is one transaction under
`interrupts.atomic`, so a KeyboardInterrupt never lands between donating a buffer and
keeping its replacement, or between a change and its undo record.

Invariant: storage beyond the current counts is zero. New capacity is zero-filled, a
reset zeroes, and rollback restores overwritten entries (and re-zeroes appended ones), so
reading a never-written entry returns zeros without bookkeeping.

Where the buffer lives is a `TableStorage` strategy: `JaxTableStorage` (a JAX array on
the executor's device, the default) or `openinfer_jax.sim.vulkan_tables.VulkanTableStorage`
(a Vulkan device tensor). `TableCache` does all the index arithmetic (counts, slices,
negative indices, auto_dim widening, fixed caps, undo records) once for both; a storage
only moves blocks given as per-dim `starts`/`sizes` of its buffer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import SimulationError
from openinfer_jax.core.limits import DEFAULT_LIMITS, Limits
from openinfer_jax.sim.interrupts import atomic
from openinfer_jax.sim.values import Ragged, bucket_size

__all__ = [
    "INITIAL_CAPACITY",
    "JaxTableStorage",
    "PersistentStore",
    "Slice",
    "TableCache",
    "TableStorage",
]

# First capacity of a growable axis; a power of two so that buckets fit the buffer.
INITIAL_CAPACITY = 16


@dataclass(frozen=True)
class Slice:
    """A resolved half-open slice request; None bounds are open, negatives count from the end."""

    start: int | None
    end: int | None


Index = int | Slice


@dataclass(frozen=True)
class ReadPlan:
    """The storage block a cache read copies: `starts`/`sizes` in the buffer, the result
    `shape`, and for a padded (bucketed) read the ragged `axis` and valid `length`.

    `growing` is (result axis, length) of the one sliced table axis of an exact read that
    a storage without padded reads made where bucketing was asked for (see
    `TableStorage.mark_growing`).
    """

    starts: tuple[int, ...]
    sizes: tuple[int, ...]
    shape: tuple[int, ...]
    axis: int | None
    length: int
    growing: tuple[int, int] | None = None


@partial(jax.jit, donate_argnums=(0,), static_argnums=(3,))
def _write_block(
    buf: jax.Array, value: jax.Array, starts: jax.Array, sizes: tuple[int, ...]
) -> jax.Array:
    """Write `value` (reshaped to the block `sizes`) at `starts`, in place (donated buffer).

    Nothing else may read `buf` in this computation: XLA CPU then copies the whole buffer
    to keep the read consistent (measured: O(capacity) instead of O(entry)).
    """
    idx = tuple(starts[k] for k in range(buf.ndim))
    return jax.lax.dynamic_update_slice(buf, value.astype(buf.dtype).reshape(sizes), idx)


def _update(
    buf: jax.Array, value: Any, starts: np.ndarray, sizes: tuple[int, ...]
) -> tuple[jax.Array, jax.Array]:
    """Write a block in place; returns the new buffer and the overwritten block (undo record)."""
    old = _read(buf, starts, sizes, sizes)
    return _write_block(buf, value, starts, sizes), old


@partial(jax.jit, static_argnums=(2, 3))
def _read(
    buf: jax.Array, starts: jax.Array, sizes: tuple[int, ...], shape: tuple[int, ...]
) -> jax.Array:
    """A copy of the block at `starts` of static `sizes`, reshaped to `shape` (never an alias)."""
    idx = tuple(starts[k] for k in range(buf.ndim))
    return jax.lax.dynamic_slice(buf, idx, sizes).reshape(shape)


@partial(jax.jit, static_argnums=(1,))
def _grow(buf: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """A zero buffer of `shape` holding `buf` in its leading corner."""
    out = jnp.zeros(shape, buf.dtype)
    return jax.lax.dynamic_update_slice(out, buf, (0,) * buf.ndim)


def _power_of_two(n: int) -> int:
    """The smallest power of two >= n (>= 1).

    Capacities are powers of two whatever the read-bucket ladder (`bucket_size`) is, so
    doubling stays amortized O(1) and capacities stay predictable.
    """
    return 1 << max(0, int(n) - 1).bit_length()


class TableStorage(Protocol):
    """Where a table's buffer lives, and the block moves `TableCache` needs on it.

    Blocks are given per buffer dim: `starts` (ints) and `sizes` (ints). Values a storage
    returns from `read` and `write` (the overwritten block) are its own kind (a JAX array,
    a device tensor) and are accepted back by `write`.
    """

    #: Whether `TableCache.read` may return a padded `Ragged` block (bucketed reads).
    padded_reads: bool

    def new_buffer(self, dtype: DType, shape: tuple[int, ...]) -> Any:
        """A new all-zero buffer of `shape`, placed where the table lives."""
        ...

    def zeros(self, dtype: DType, shape: tuple[int, ...]) -> Any:
        """An all-zero block value of `shape`, to `write` into a buffer."""
        ...

    def shape(self, buf: Any) -> tuple[int, ...]:
        """The storage shape of `buf`."""
        ...

    def grow(self, buf: Any, shape: tuple[int, ...]) -> Any:
        """A zero buffer of `shape` holding `buf` in its leading corner."""
        ...

    def read(
        self, buf: Any, starts: tuple[int, ...], sizes: tuple[int, ...], shape: tuple[int, ...]
    ) -> Any:
        """A copy (never an alias) of the block at `starts`/`sizes`, reshaped to `shape`."""
        ...

    def write(
        self,
        buf: Any,
        value: Any,
        starts: tuple[int, ...],
        sizes: tuple[int, ...],
        *,
        keep_old: bool = True,
    ) -> tuple[Any, Any]:
        """Write `value` (any shape holding the block's elements) at `starts`/`sizes`.

        Returns the buffer to keep and the overwritten block (the undo record), or None
        without `keep_old` (the caller knows the block held zeros).
        """
        ...

    def load(self, array: np.ndarray, dtype: DType, shape: tuple[int, ...]) -> Any:
        """A new buffer of `shape`: zeros with the host `array` in its leading corner."""
        ...

    def mark_growing(self, value: Any, axis: int, length: int) -> Any:
        """Note that the exact read `value` is a growing slice along `axis` (storages
        without padded reads: its host copy can then be padded to a bucket)."""
        ...

    def host(self, buf: Any, sizes: tuple[int, ...]) -> np.ndarray:
        """The leading-corner block of `sizes` as a host array."""
        ...

    def end_step(self) -> None:
        """The step's undo records are gone (committed or replayed): their storage may be
        reused."""
        ...


class JaxTableStorage:
    """Table buffers as JAX arrays on one device (or sharding); writes update in place."""

    padded_reads = True

    def __init__(self, device: Any) -> None:
        self.device = device

    def new_buffer(self, dtype: DType, shape: tuple[int, ...]) -> jax.Array:
        """A zero array of `shape` on the storage's device (or sharding)."""
        return jax.device_put(jnp.zeros(shape, dtype.numpy), self.device)

    def zeros(self, dtype: DType, shape: tuple[int, ...]) -> jax.Array:
        """A zero block; not placed, so a block need not fit a sharded buffer's layout."""
        return jnp.zeros(shape, dtype.numpy)

    def shape(self, buf: jax.Array) -> tuple[int, ...]:
        """`buf.shape`."""
        return tuple(buf.shape)

    def grow(self, buf: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """A zero array of `shape` holding `buf` in its leading corner (one XLA call)."""
        return _grow(buf, shape)

    def read(
        self,
        buf: jax.Array,
        starts: tuple[int, ...],
        sizes: tuple[int, ...],
        shape: tuple[int, ...],
    ) -> jax.Array:
        """The block as a new array (jitted `dynamic_slice`, starts traced)."""
        return _read(buf, np.asarray(starts, np.int32), tuple(sizes), tuple(shape))

    def write(
        self,
        buf: jax.Array,
        value: Any,
        starts: tuple[int, ...],
        sizes: tuple[int, ...],
        *,
        keep_old: bool = True,
    ) -> tuple[jax.Array, jax.Array | None]:
        """In-place `dynamic_update_slice` (donated buffer); the old block read first."""
        at = np.asarray(starts, np.int32)
        if not keep_old:
            return _write_block(buf, value, at, tuple(sizes)), None
        return _update(buf, value, at, tuple(sizes))

    def mark_growing(self, value: jax.Array, axis: int, length: int) -> jax.Array:
        """Nothing to note: this storage pads reads itself (`padded_reads`)."""
        return value

    def load(self, array: np.ndarray, dtype: DType, shape: tuple[int, ...]) -> jax.Array:
        """Zeros of `shape` with `array` in the corner, put on the device; returns once the
        buffer is there.

        Built on the host (one pass; the zeros are lazily mapped pages) and copied once.
        Waiting here bills the copy to the load: left asynchronous, it ran inside the next
        step, which took about twice as long (a 2048-entry SmolLM2 cache).
        """
        host = np.asarray(array, dtype.numpy)
        if tuple(host.shape) != tuple(shape):
            full = np.zeros(shape, dtype.numpy)
            full[tuple(slice(0, n) for n in host.shape)] = host
            host = full
        return jax.device_put(host, self.device).block_until_ready()

    def host(self, buf: jax.Array, sizes: tuple[int, ...]) -> np.ndarray:
        """The corner block copied to the host."""
        return np.asarray(_read(buf, np.zeros(len(sizes), np.int32), sizes, sizes))

    def end_step(self) -> None:
        """Nothing to release: undo blocks are arrays of their own."""


class TableCache:
    """One `@table` / `@auto_dim` persistent variable.

    `indices` are the declared index names in access order; each is either a table axis
    (selects entries) or an auto-dim axis (widens entry dim k by its count, k being its
    position in `@auto_dim(...)`). `fixed` caps counts (`@fixed(i=N)`), pre-sizing storage.
    `storage` holds the buffer (default: a JAX array on `device`).
    """

    def __init__(
        self,
        name: str,
        dtype: DType,
        indices: tuple[str, ...],
        auto_dim: tuple[str, ...],
        entry_dims: tuple[int, ...],
        fixed: dict[str, int],
        device: Any,
        storage: TableStorage | None = None,
        *,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        if dtype.is_packed:
            raise SimulationError(
                f"cache table {name!r}: packed dtype {dtype.short} is not allowed in tables"
            )
        if len(auto_dim) > len(entry_dims):
            raise SimulationError(
                f"cache table {name!r}: @auto_dim names {len(auto_dim)} indices but the entry has "
                f"only {len(entry_dims)} dims"
            )
        self.name = name
        self.dtype = dtype
        self.indices = indices
        self.auto_dim = auto_dim
        self.entry_dims = entry_dims
        self.fixed = dict(fixed)
        self.device = device
        self.limits = limits
        self.table_axes = tuple(i for i in indices if i not in auto_dim)
        self.counts: dict[str, int] = {i: 0 for i in indices}
        self.capacity: dict[str, int] = {i: self.fixed.get(i, INITIAL_CAPACITY) for i in indices}
        self.storage: TableStorage = storage if storage is not None else JaxTableStorage(device)
        self.buffer = self.storage.new_buffer(dtype, self._storage_shape(self.capacity))

    # ---- geometry ---------------------------------------------------------------------
    def _storage_shape(self, capacity: dict[str, int]) -> tuple[int, ...]:
        table = [capacity[a] for a in self.table_axes]
        entry = list(self.entry_dims)
        for k, axis in enumerate(self.auto_dim):
            entry[k] += capacity[axis]
        return (*table, *entry)

    def logical_shape(self) -> tuple[int, ...]:
        """The whole table's shape now: `[n_table..., *entry dims grown by auto counts]`."""
        return self._storage_shape(self.counts)

    def size(self, axis: str) -> int:
        """The current count of index `axis`."""
        return self.counts[axis]

    # ---- index resolution ---------------------------------------------------------------
    def _check_cap(self, axis: str, needed: int) -> None:
        cap = self.fixed.get(axis)
        if cap is not None and needed > cap:
            raise SimulationError(
                f"cache table {self.name!r}: index {needed - 1} of {axis!r} exceeds fixed size "
                f"{axis}={cap}; raise @fixed({axis}=...) or reset the table"
            )
        limit = self.limits.max_cache_entries
        if needed > limit:
            raise SimulationError(
                f"cache table {self.name!r}: index {needed - 1} of {axis!r} needs {needed:,} "
                f"entries, above the limit max_cache_entries={limit:,} (Simulator(limits=...), "
                "`--limit max_cache_entries=...`); a table never grows that far by accident"
            )

    def _plan(
        self, sel: tuple[Index, ...], *, grow: bool = False
    ) -> tuple[list[int], list[int], list[bool], dict[str, int]]:
        """Storage starts/sizes for a selection, which dims are kept, and the new counts.

        A scalar index on any axis grows that axis' count (reads too: reading entry n of a
        table of n entries creates it, zero-filled). With `grow` (a write), a slice of a table
        axis with an explicit non-negative end grows the count to that end: a range write
        appends several entries at once (a prefill's keys). Read slices never grow.
        """
        if sel and len(sel) != len(self.indices):
            raise SimulationError(
                f"cache table {self.name!r} takes {len(self.indices)} indices "
                f"({', '.join(self.indices)}), got {len(sel)}"
            )
        full = sel or tuple(Slice(None, None) for _ in self.indices)
        counts = dict(self.counts)
        for axis, idx in zip(self.indices, full):
            if isinstance(idx, int):
                pos = idx + counts[axis] if idx < 0 else idx
                if pos < 0:
                    raise SimulationError(
                        f"cache table {self.name!r}: index {idx} of {axis!r} is before the first "
                        f"entry ({counts[axis]} entries)"
                    )
                self._check_cap(axis, pos + 1)
                counts[axis] = max(counts[axis], pos + 1)
            elif grow and axis in self.table_axes and idx.end is not None and idx.end >= 0:
                self._check_cap(axis, idx.end)
                counts[axis] = max(counts[axis], idx.end)
        starts: list[int] = []
        sizes: list[int] = []
        kept: list[bool] = []
        per_axis: dict[str, Index] = dict(zip(self.indices, full))
        for axis in self.table_axes:
            idx = per_axis[axis]
            if isinstance(idx, int):
                pos = idx + self.counts[axis] if idx < 0 else idx
                starts.append(pos)
                sizes.append(1)
                kept.append(False)
            else:
                lo, hi = self._slice_bounds(axis, idx, counts[axis])
                starts.append(lo)
                sizes.append(hi - lo)
                kept.append(True)
        for k, base in enumerate(self.entry_dims):
            if k < len(self.auto_dim):
                axis = self.auto_dim[k]
                extent = base + counts[axis]
                idx = per_axis[axis]
                if isinstance(idx, int):
                    starts.append(0)
                    sizes.append(extent)
                else:
                    lo, hi = self._slice_bounds(axis, idx, extent)
                    starts.append(lo)
                    sizes.append(hi - lo)
            else:
                starts.append(0)
                sizes.append(base)
            kept.append(True)
        return starts, sizes, kept, counts

    def _slice_bounds(self, axis: str, sl: Slice, n: int) -> tuple[int, int]:
        lo = 0 if sl.start is None else (sl.start + n if sl.start < 0 else sl.start)
        hi = n if sl.end is None else (sl.end + n if sl.end < 0 else sl.end)
        if not 0 <= lo <= hi <= n:
            raise SimulationError(
                f"cache table {self.name!r}: slice {sl.start if sl.start is not None else ''}.."
                f"{sl.end if sl.end is not None else ''} of {axis!r} is out of range for "
                f"{n} entries (resolved to {lo}..{hi}); only a write with an explicit end grows a table"
            )
        return lo, hi

    # ---- growth -------------------------------------------------------------------------
    def _ensure_capacity(self, counts: dict[str, int]) -> None:
        new_cap = dict(self.capacity)
        for axis, n in counts.items():
            if n > new_cap[axis]:
                # Doubling keeps appends amortized O(1) and capacities powers of two.
                new_cap[axis] = max(_power_of_two(n), 2 * new_cap[axis])
        if new_cap != self.capacity:
            shape = self._storage_shape(new_cap)
            elements = int(np.prod(shape, dtype=object))
            if elements > self.limits.max_tensor_elements:
                raise SimulationError(
                    f"cache table {self.name!r}: growing to {list(shape)} needs {elements:,} "
                    f"elements, above the limit max_tensor_elements="
                    f"{self.limits.max_tensor_elements:,} (Simulator(limits=...), "
                    "`--limit max_tensor_elements=...`)"
                )
            self.buffer = self.storage.grow(self.buffer, shape)
            self.capacity = new_cap

    # ---- operations ---------------------------------------------------------------------
    def prepare_read(
        self, sel: tuple[Index, ...], undo: list[Callable[[], None]], *, bucket: bool
    ) -> ReadPlan:
        """Grow counts for scalar indices (undoable) and plan the block a read copies.

        With `bucket`, a read with exactly one sliced table axis is planned padded to its
        bucket, or to the buffer's end where the bucket does not fit: the result will be a
        `Ragged`.
        """
        starts, sizes, kept, counts = self._plan(sel)
        if counts != self.counts:
            with atomic():
                self._set_counts(counts, undo)
            # Re-plan: negative scalar indices resolve against the grown counts.
            starts, sizes, kept, counts = self._plan(sel)
        out_shape = tuple(s for s, k in zip(sizes, kept) if k)
        sliced = [a for a, k in enumerate(kept[: len(self.table_axes)]) if k]
        if bucket and len(sliced) == 1:
            axis = sliced[0]
            length = sizes[axis]
            out_axis = sum(1 for k in kept[:axis] if k)
            if not self.storage.padded_reads:
                growing = (out_axis, length)
                return ReadPlan(tuple(starts), tuple(sizes), out_shape, None, 0, growing)
            # Capped at the buffer's end: near a fixed capacity that is not a bucket (a
            # 2056-entry cache read at 2049 entries: bucket 2560) the read pads to the end
            # instead, one shape for the rest of the buffer rather than one per length.
            room = self.storage.shape(self.buffer)[axis] - starts[axis]
            if room > 0:  # (an empty read at the very end stays exact: no block to pad)
                psizes = list(sizes)
                psizes[axis] = bucket_size(length, limit=room)
                pshape = tuple(s for s, k in zip(psizes, kept) if k)
                return ReadPlan(tuple(starts), tuple(psizes), pshape, out_axis, length)
        return ReadPlan(tuple(starts), tuple(sizes), out_shape, None, 0)

    def read(self, sel: tuple[Index, ...], undo: list[Callable[[], None]], *, bucket: bool) -> Any:
        """Read a selection: scalars drop their axis, slices keep it, entry dims follow.

        Returns an array, or a `Ragged` when the plan is padded (see `prepare_read`).
        """
        plan = self.prepare_read(sel, undo, bucket=bucket)
        block = self.storage.read(self.buffer, plan.starts, plan.sizes, plan.shape)
        if plan.axis is not None:
            return Ragged(block, plan.axis, plan.length)
        if plan.growing is not None:
            return self.storage.mark_growing(block, *plan.growing)
        return block

    def prepare_write(
        self, sel: tuple[Index, ...], undo: list[Callable[[], None]]
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Grow counts/capacity for a write (undoable); (starts, block sizes, value shape)."""
        starts, sizes, kept, counts = self._plan(sel, grow=True)
        if counts != self.counts:
            with atomic():
                self._set_counts(counts, undo)
        want = tuple(s for s, k in zip(sizes, kept) if k)
        return tuple(starts), tuple(sizes), want

    def write(self, sel: tuple[Index, ...], value: Any, undo: list[Callable[[], None]]) -> None:
        """Write `value` (shape of the same selection's read) into the table, in place."""
        _starts, sizes, kept, _counts = self._plan(sel, grow=True)
        want = tuple(s for s, k in zip(sizes, kept) if k)
        shape = tuple(int(d) for d in value.shape)
        if shape != want:
            raise SimulationError(
                f"cache.write into {self.name!r}: value shape {list(shape)} does not match the "
                f"entry shape {list(want)}"
            )
        fresh = self.beyond_counts(sel)
        # One transaction: the buffer is donated inside storage.write, so the table must
        # hold the returned buffer, and the undo record must exist, before a signal lands.
        with atomic():
            starts_t, sizes_t, _want = self.prepare_write(sel, undo)
            self.buffer, old = self.storage.write(
                self.buffer, value, starts_t, sizes_t, keep_old=not fresh
            )
            if fresh:
                # An append: the block held zeros (storage invariant), so there is nothing to
                # copy out; a rollback zeroes it again.
                self._record_zero_restore(starts_t, sizes_t, undo)
            else:
                self.record_restore(old, starts_t, undo)

    def beyond_counts(self, sel: tuple[Index, ...], counts: dict[str, int] | None = None) -> bool:
        """Whether the whole selected block lies beyond the current counts (never written).

        True when some table axis gets a non-negative scalar index, or a slice starting, at or
        past its count: every element of the block then has such a coordinate, so all of it
        is zero. `counts` (default: the current ones) are the counts to judge against (wide.py:
        those at the start of a region, before its own writes).
        """
        counts = self.counts if counts is None else counts
        for axis, idx in zip(self.indices, sel):
            if axis not in self.table_axes:
                continue
            first = idx if isinstance(idx, int) else idx.start
            if first is not None and first >= counts[axis]:
                return True
        return False

    def _record_zero_restore(
        self, starts: tuple[int, ...], sizes: tuple[int, ...], undo: list[Callable[[], None]]
    ) -> None:
        def restore() -> None:
            zeros = self.storage.zeros(self.dtype, sizes)
            self.buffer, _ = self.storage.write(self.buffer, zeros, starts, sizes, keep_old=False)

        undo.append(restore)

    def record_restore(self, old: Any, starts: Any, undo: list[Callable[[], None]]) -> None:
        """Push an undo record that writes the block `old` (the storage's kind) back at `starts`.

        Starts are per-dim indices, so the record stays valid if the buffer grows later in
        the step (its capacity changes, the entry's position does not).
        """
        at = tuple(int(i) for i in np.asarray(starts))

        def restore() -> None:
            self.buffer, _ = self.storage.write(
                self.buffer, old, at, tuple(old.shape), keep_old=False
            )

        undo.append(restore)

    def reset(self, sel: tuple[Index, ...], undo: list[Callable[[], None]]) -> None:
        """Reset the whole table (no indices: counts to 0) or zero the selected entries."""
        with atomic():
            self._reset(sel, undo)

    def _reset(self, sel: tuple[Index, ...], undo: list[Callable[[], None]]) -> None:
        if not sel:
            old_buf, old_counts, old_cap = self.buffer, dict(self.counts), dict(self.capacity)
            # A fresh buffer keeps the old one alive for rollback (no donation here).
            self.buffer = self.storage.new_buffer(self.dtype, self.storage.shape(old_buf))
            self.counts = {i: 0 for i in self.indices}

            def restore() -> None:
                # Capacity too: a write after the reset may have grown the fresh buffer,
                # and the capacity must describe the buffer that comes back.
                self.buffer, self.counts, self.capacity = old_buf, old_counts, old_cap

            undo.append(restore)
            return
        padded = sel + tuple(Slice(None, None) for _ in range(len(self.indices) - len(sel)))
        for axis, idx in zip(self.indices, padded):
            if isinstance(idx, int) and idx >= self.counts[axis]:
                return  # never written: already zero (storage invariant), nothing to undo
        starts, sizes, _kept, _counts = self._plan(padded)
        zeros = self.storage.zeros(self.dtype, tuple(sizes))
        self.buffer, old = self.storage.write(self.buffer, zeros, tuple(starts), tuple(sizes))
        self.record_restore(old, tuple(starts), undo)

    def _set_counts(self, counts: dict[str, int], undo: list[Callable[[], None]]) -> None:
        old = dict(self.counts)
        self._ensure_capacity(counts)
        self.counts = counts

        def restore() -> None:
            self.counts = old

        undo.append(restore)

    def load(self, array: Any) -> None:
        """Replace the whole table with `array` of shape `[n_table..., *entry]` (a prefill).

        Raises:
            SimulationError: an auto-dim table, or a shape that does not end in the entry dims.
        """
        if self.auto_dim:
            raise SimulationError(
                f"cache table {self.name!r}: loading an @auto_dim table is not supported"
            )
        shape = tuple(int(d) for d in np.shape(array))
        lead = len(self.table_axes)
        if len(shape) != lead + len(self.entry_dims) or shape[lead:] != self.entry_dims:
            raise SimulationError(
                f"cache table {self.name!r}: a load needs shape [{', '.join(self.table_axes)}, "
                f"{', '.join(str(d) for d in self.entry_dims)}], got {list(shape)}"
            )
        counts = dict(zip(self.table_axes, shape[:lead]))
        for axis, n in counts.items():
            self._check_cap(axis, n)
        capacity = {
            a: self.fixed.get(a, max(INITIAL_CAPACITY, _power_of_two(counts[a])))
            for a in self.indices
        }
        buffer = self.storage.load(
            np.asarray(array, self.dtype.numpy), self.dtype, self._storage_shape(capacity)
        )
        with atomic():
            self.buffer, self.capacity, self.counts = buffer, capacity, counts

    def host_view(self) -> np.ndarray:
        """The whole logical table as a host array (for `fetch`)."""
        return self.storage.host(self.buffer, self.logical_shape())


class PersistentStore:
    """All persistent variables of one executor, with the per-step undo log.

    Plain persistent variables (scalars such as `step`, tensors such as an online-updated
    weight) hold immutable arrays, so their undo record is just the old reference.
    """

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.initial: dict[str, Any] = {}
        self.tables: dict[str, TableCache] = {}
        self.undo: list[Callable[[], None]] = []

    def set_value(self, name: str, value: Any) -> None:
        """Replace a plain persistent variable, recording the old value for rollback."""
        old = self.values[name]

        def restore() -> None:
            self.values[name] = old

        self.undo.append(restore)
        self.values[name] = value

    def commit(self) -> None:
        """Forget the undo log: the step succeeded."""
        with atomic():
            self.undo.clear()
            self._end_step()

    def rollback(self) -> None:
        """Undo every mutation of the failed step, newest first (signals wait until done)."""
        with atomic():
            while self.undo:
                self.undo.pop()()
            self._end_step()

    def _end_step(self) -> None:
        for table in self.tables.values():
            table.storage.end_step()
