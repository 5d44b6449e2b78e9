"""Cache tables resident on the Vulkan device: a `TableStorage` over one `DeviceTensor`.

With ``device="vulkan"`` a table's buffer `[cap_l, cap_t, *entry]` is one device tensor.
`TableCache` (caches.py) still does every piece of index arithmetic; this storage only
moves blocks, all on the device:

* `cache.write` of a device-resident value copies it into the buffer (one copy dispatch
  per contiguous run of the block; an entry or a run of entries is one run). The
  overwritten block is first copied out to a new device tensor: the undo record.
* `cache.read` copies the block out into a new device tensor (one dispatch: a plain copy
  when the block is contiguous, else a strided gather) and returns it as a
  `DeviceResident`, so the next Vulkan op reads it where it is.
* Growth allocates the bigger buffer, zero-fills it and copies the old one into its
  corner; a whole reset swaps in a zero-filled buffer (the old one is kept for rollback).

Only a host value written into a table (an input, a CPU-fallback result), a prefill
(`set_persistent`) and `fetch` cross between host and device; they are counted in the
executor's stats (`vk_cache_uploads`, `vk_cache_downloads`, `vk_cache_bytes`, and in the
totals `vk_uploads` / `vk_downloads` / `vk_bytes`). `OPENINFER_VK_HOST_CACHES=1` keeps
persistent memory in JAX host memory instead (the layout before; a benchmark baseline).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import BackendError, SimulationError
from openinfer_jax.sim.values import to_host
from openinfer_jax.sim.vulkan_store import DeviceResident

__all__ = [
    "CACHE_STATS",
    "VulkanTableStorage",
    "block_runs",
    "contiguous_strides",
    "device_caches_enabled",
]

#: Counters this storage adds to an executor's stats (all start at 0).
CACHE_STATS = ("vk_cache_uploads", "vk_cache_downloads", "vk_cache_bytes")


# Elements of the first undo arena; it doubles when a step overwrites more.
_ARENA_MIN = 4096


@dataclass(frozen=True)
class _Saved:
    """An undo record: a block of `shape` kept at `offset` of an arena tensor."""

    arena: Any
    offset: int
    shape: tuple[int, ...]


def device_caches_enabled() -> bool:
    """Whether `device="vulkan"` executors keep persistent memory on the device.

    Yes unless the environment sets ``OPENINFER_VK_HOST_CACHES=1``.
    """
    return os.environ.get("OPENINFER_VK_HOST_CACHES", "") != "1"


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * int(shape[d + 1])
    return tuple(strides)


def block_runs(
    shape: Sequence[int], starts: Sequence[int], sizes: Sequence[int]
) -> list[tuple[int, int, int]]:
    """The contiguous runs of a block: ``(buffer offset, block offset, length)`` each.

    The block `starts`/`sizes` of a row-major buffer of `shape` is a sequence of runs,
    each one innermost-contiguous stretch; trailing dims the block covers whole merge
    into its run. Block offsets count in the block's own row-major order.
    """
    if any(int(n) == 0 for n in sizes):
        return []
    strides = contiguous_strides(shape)
    # k: the outermost dim after which the block covers every dim completely.
    k = len(shape) - 1
    while k > 0 and int(sizes[k]) == int(shape[k]):
        k -= 1
    length = int(sizes[k]) * (strides[k] if shape else 1)
    base = sum(int(s) * st for s, st in zip(starts, strides))
    runs = []
    for pos, outer in enumerate(np.ndindex(*[int(n) for n in sizes[:k]])):
        offset = base + sum(int(c) * strides[d] for d, c in enumerate(outer))
        runs.append((offset, pos * length, length))
    return runs


class VulkanTableStorage:
    """Table buffers as `DeviceTensor`s of one `VulkanBackend`.

    Args:
        backend: the simulator's `VulkanBackend`.
        stats: the executor's transfer counters; host<->device traffic made here is added
            to ``vk_uploads``/``vk_downloads`` and to the `CACHE_STATS` counters.
    """

    # Exact-shape results: Vulkan kernels are not compiled per shape, so padding a read to
    # a bucket would only add work.
    padded_reads = False

    def __init__(self, backend: Any, stats: dict[str, int]) -> None:
        self.backend = backend
        self.stats = stats
        self._arena: Any = None  # undo records of the current step, see _save
        self._used = 0

    # ---- counters ------------------------------------------------------------------------
    def _count(self, direction: str, tensor: Any) -> None:
        self.stats[f"vk_{direction}s"] = self.stats.get(f"vk_{direction}s", 0) + 1
        key = f"vk_cache_{direction}s"
        self.stats[key] = self.stats.get(key, 0) + 1
        for total in ("vk_cache_bytes", "vk_bytes"):
            self.stats[total] = self.stats.get(total, 0) + tensor.nbytes

    # ---- TableStorage ----------------------------------------------------------------------
    def new_buffer(self, dtype: DType, shape: tuple[int, ...]) -> Any:
        """A new zero-filled device tensor of `shape` (filled on the device)."""
        tensor = self.backend.empty(dtype, shape)
        self.backend.zero_fill(tensor)
        return tensor

    def zeros(self, dtype: DType, shape: tuple[int, ...]) -> Any:
        """A zero block value: a zero-filled device tensor, like a buffer."""
        return self.new_buffer(dtype, shape)

    def shape(self, buf: Any) -> tuple[int, ...]:
        """The device tensor's shape."""
        return tuple(buf.shape)

    def grow(self, buf: Any, shape: tuple[int, ...]) -> Any:
        """A zero tensor of `shape` with `buf` copied into its corner, on the device."""
        out = self.new_buffer(buf.dtype, shape)
        self._scatter(out, buf, (0,) * len(shape), tuple(buf.shape))
        return out

    def read(
        self, buf: Any, starts: tuple[int, ...], sizes: tuple[int, ...], shape: tuple[int, ...]
    ) -> DeviceResident:
        """The block copied into a new device tensor of `shape` (no host copy)."""
        return DeviceResident(self._gather(buf, starts, sizes, shape))

    def write(
        self,
        buf: Any,
        value: Any,
        starts: tuple[int, ...],
        sizes: tuple[int, ...],
        *,
        keep_old: bool = True,
    ) -> tuple[Any, Any]:
        """Copy `value` into the block on the device; returns (buf, undo record or None).

        `value` is a `DeviceTensor`, a `DeviceResident`, an undo record of this storage, or
        a host value (uploaded once). The undo record is a copy of the old block in the
        undo arena (see `_save`).
        """
        src = value if isinstance(value, _Saved) else self._device_value(value, buf.dtype)
        if math.prod(src.shape) != math.prod(sizes):
            raise SimulationError(
                f"cache table block of {list(sizes)} cannot take a value of {list(src.shape)}"
            )
        old = self._save(buf, starts, sizes) if keep_old else None
        if isinstance(src, _Saved):
            self._scatter(buf, src.arena, starts, sizes, src.offset)
        else:
            self._scatter(buf, src, starts, sizes)
        return buf, old

    def load(self, array: np.ndarray, dtype: DType, shape: tuple[int, ...]) -> Any:
        """Upload zeros of `shape` holding `array` in the corner (one upload)."""
        host = np.zeros(shape, dtype.numpy)
        host[tuple(slice(0, int(n)) for n in array.shape)] = array
        tensor = self._upload(host, dtype)
        return tensor

    def mark_growing(self, value: DeviceResident, axis: int, length: int) -> DeviceResident:
        """Record the growing axis on the resident read: its host copy (made only if a
        CPU-fallback op reads it) becomes a bucket-padded `Ragged`, so that op compiles once
        per bucket instead of once per length, as on the CPU path."""
        value.growing = (axis, length)
        return value

    def host(self, buf: Any, sizes: tuple[int, ...]) -> np.ndarray:
        """The corner block on the host: gathered on the device first when it is less than
        half the buffer (a table rarely fills its doubled capacity), else the whole buffer
        is downloaded and cut on the host (one transfer, no dispatch)."""
        if 2 * math.prod(sizes) < math.prod(buf.shape):
            return self._download(self._gather(buf, (0,) * len(sizes), sizes, sizes))
        whole = self._download(buf)
        return np.ascontiguousarray(whole[tuple(slice(0, int(n)) for n in sizes)])

    # ---- block moves -------------------------------------------------------------------------
    def _gather(
        self, buf: Any, starts: tuple[int, ...], sizes: tuple[int, ...], shape: tuple[int, ...]
    ) -> Any:
        runs = block_runs(buf.shape, starts, sizes)
        if len(runs) <= 1:
            # A contiguous block (the usual entry or run of entries): one plain copy.
            offset, _, length = runs[0] if runs else (0, 0, 0)
            return self.backend.read_slice(buf, offset, length, shape)
        strides = contiguous_strides(buf.shape)
        offset = sum(int(s) * st for s, st in zip(starts, strides))
        try:
            out = self.backend.read_strided(buf, offset, strides, sizes)
        except BackendError:
            # Too many dims for the gather kernel even after merging: copy run by run.
            out = self.backend.empty(buf.dtype, sizes)
            for buf_offset, block_offset, length in runs:
                self.backend.copy_elements(buf, buf_offset, out, block_offset, length)
        out.shape = tuple(shape)  # same elements, same order: only the labels change
        return out

    def _scatter(
        self, buf: Any, src: Any, starts: tuple[int, ...], sizes: tuple[int, ...], base: int = 0
    ) -> None:
        for buf_offset, block_offset, length in block_runs(buf.shape, starts, sizes):
            self.backend.copy_elements(src, base + block_offset, buf, buf_offset, length)

    # ---- undo arena ----------------------------------------------------------------------------
    def _save(self, buf: Any, starts: tuple[int, ...], sizes: tuple[int, ...]) -> _Saved:
        """Copy the block about to be overwritten into the undo arena (device to device).

        The arena is one tensor reused step after step, so these copies bind the same two
        buffers every time and reuse one kp.Algorithm (a fresh output tensor per undo
        record would create a pipeline each time: the costly part of a dispatch).
        """
        n = math.prod(sizes)
        arena = self._arena
        if arena is None or arena.dtype is not buf.dtype or self._used + n > arena.numel:
            # Records of this step in an old arena keep it alive; new ones start at 0.
            size = max(_ARENA_MIN, n, 2 * arena.numel if arena is not None else 0)
            arena = self._arena = self.backend.empty(buf.dtype, (size,))
            self._used = 0
        saved = _Saved(arena, self._used, tuple(sizes))
        self._used += n
        for buf_offset, block_offset, length in block_runs(buf.shape, starts, sizes):
            self.backend.copy_elements(buf, buf_offset, arena, saved.offset + block_offset, length)
        return saved

    def end_step(self) -> None:
        """The step's undo records are gone: the arena is reused from its start."""
        self._used = 0

    # ---- host transfers ----------------------------------------------------------------------
    def _device_value(self, value: Any, dtype: DType) -> Any:
        if isinstance(value, DeviceResident):
            value = value.tensor
        if hasattr(value, "handle"):  # a DeviceTensor (vk is imported lazily elsewhere)
            if value.dtype is not dtype:
                raise SimulationError(
                    f"cache table of {dtype.short} cannot take a {value.dtype.short} value"
                )
            return value
        return self._upload(np.asarray(to_host(value)).astype(dtype.numpy, copy=False), dtype)

    def _upload(self, host: np.ndarray, dtype: DType) -> Any:
        tensor = self.backend.upload(host, dtype)
        self._count("upload", tensor)
        return tensor

    def _download(self, tensor: Any) -> np.ndarray:
        host = self.backend.download(tensor)
        self._count("download", tensor)
        return host
