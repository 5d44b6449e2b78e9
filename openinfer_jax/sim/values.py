"""How the simulator holds tensor values in memory, and conversions to and from the host.

Values are immutable JAX arrays (so "copy-on-write" is free: an op never mutates its
input, it rebinds its output), host NumPy arrays for small scalars, a `Ragged` for a
cache slice padded to a bucket of the ladder (`bucket_size`), a `Zeros` placeholder for an
`assign` that has not been written yet (no buffer is allocated until something reads it),
or a `Deferred` region output that no later node reads (computed only if fetched).
Packed dtypes are held UNPACKED (int8 signed, uint8 unsigned); bf16/f8 as ml_dtypes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from openinfer_jax.core.dtypes import DType, dtype_from_numpy
from openinfer_jax.core.errors import SimulationError

__all__ = [
    "BUCKETS_PER_DOUBLING",
    "LADDER_START",
    "Deferred",
    "Ragged",
    "Value",
    "Zeros",
    "bucket_size",
    "coerce_input",
    "materialize",
    "scalar_of",
    "to_host",
    "value_dtype_name",
    "value_shape",
]


@dataclass(frozen=True)
class Ragged:
    """A tensor whose axis `axis` is only valid up to `length`; `data` is padded beyond it.

    Cache slice reads return this so that a slice that grows by one entry per decode step
    keeps the same padded shape for many steps (no recompilation). Positions at or past
    `length` hold unspecified values: ops that reduce over `axis` mask them.
    """

    data: jax.Array
    axis: int
    length: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical (unpadded) shape."""
        shape = list(self.data.shape)
        shape[self.axis] = self.length
        return tuple(shape)

    @property
    def dtype(self) -> Any:
        """The element dtype of the data."""
        return self.data.dtype

    def exact(self) -> jax.Array:
        """The valid part as an ordinary array."""
        return jax.lax.slice_in_dim(self.data, 0, self.length, axis=self.axis)


@dataclass(frozen=True)
class Zeros:
    """A zero tensor not yet allocated (an `assign` whose first write usually replaces it)."""

    shape: tuple[int, ...]
    dtype: Any

    def exact(self) -> jax.Array:
        """The zeros as an array."""
        return jnp.zeros(self.shape, self.dtype)


class Deferred:
    """A region output that no later node reads: computed on its first read, then kept.

    A region does not return such a value (XLA then neither writes nor, often, computes
    it); `compute` re-runs the part of the region that produces it from the region's
    inputs, which are immutable arrays, so the result equals what the region would have
    returned. `fetch` and any later reader see the value through `exact()`.
    """

    __slots__ = ("_compute", "_value", "dtype", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: Any, compute: Callable[[], Any]) -> None:
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self._compute: Callable[[], Any] | None = compute
        self._value: Any = None

    def exact(self) -> Any:
        """The value (computed once; the recipe and its inputs are released after)."""
        if self._compute is not None:
            self._value = self._compute()
            self._compute = None
        return self._value


class Packed(Deferred):
    """A small dead region output returned inside one flat output with the others of its
    dtype (regions.py plan_layout): cut out of it on its first read. `shape` a tuple of
    ints and `dtype` a NumPy dtype as the region's layout holds them (a step makes one per
    such output, so nothing is normalized here)."""

    __slots__ = ("_flat", "_offset")

    def __init__(self, flat: Any, offset: int, shape: tuple[int, ...], dtype: Any) -> None:
        # `_value` is set when cut, `_compute` never read (`exact` is this class's own).
        self.shape, self.dtype, self._flat, self._offset = shape, dtype, flat, offset

    def exact(self) -> Any:
        """The value (cut once; the flat output is released after)."""
        if self._flat is not None:
            self._value = cut_packed(self._flat, self._offset, self.shape)
            self._flat = None
        return self._value


def cut_packed(flat: Any, offset: int, shape: tuple[int, ...]) -> Any:
    """The value at `offset` of a packed output, by one compiled call."""
    return _slicer(offset, shape)(flat)


@functools.lru_cache(maxsize=1024)
def _slicer(offset: int, shape: tuple[int, ...]) -> Callable[[Any], Any]:
    """One compiled call cutting a value out of a packed output (an eager slice and
    reshape would be two dispatches)."""
    size = math.prod(shape)
    return jax.jit(lambda flat: jax.lax.slice(flat, (offset,), (offset + size,)).reshape(shape))


Value = Any  # jax.Array | np.ndarray | Ragged | Zeros | Deferred


# Buckets per doubling of the length above LADDER_START: with 4 and 256 the ladder is 1, 2,
# 4, ..., 256, 320, 384, 448, 512, 640, ..., 1024, 1280, 1536, 1792, 2048. Above 256 a padded
# read is at most 25% longer than the valid length (plain powers of two: up to 100%, e.g.
# 1025 -> 2048, which doubled the attention work of a GPT-2 decode step), at the cost of 4
# compilations per doubling instead of 1 (still O(log n)); below, padding costs little and
# powers of two keep the compilations of short decodes as they were. Measured in
# bench/bench_sim.py (the ladder table) and docs/simulator.md. Read at call time: setting
# BUCKETS_PER_DOUBLING to 1 restores the power-of-two ladder (the benchmark's baseline).
BUCKETS_PER_DOUBLING = 4
LADDER_START = 256


def bucket_size(n: int, limit: int | None = None, per_doubling: int | None = None) -> int:
    """The bucket of the ladder that holds `n` (at least 1), capped at `limit` when given.

    Up to `max(LADDER_START, 2 * per_doubling)` the buckets are powers of two; above, `n`
    is rounded up to a multiple of `p / per_doubling`, p the power of two below `n`
    (`per_doubling` a power of two), so each doubling of `n` has `per_doubling` buckets:
    the number of distinct buckets up to `n` is O(log n), and a bucket exceeds `n` by less
    than `p / per_doubling` (`per_doubling=1`: plain powers of two). The default is
    `BUCKETS_PER_DOUBLING`.
    """
    if per_doubling is None:
        per_doubling = BUCKETS_PER_DOUBLING
    size = 1
    while size < n:
        size *= 2
    if size > max(LADDER_START, 2 * per_doubling):
        step = size // (2 * per_doubling)
        size = -(-n // step) * step
    if limit is not None:
        size = min(size, limit)
    return size


def materialize(value: Value) -> Any:
    """An array (JAX or NumPy) for any stored value."""
    if isinstance(value, (Ragged, Zeros, Deferred)):
        return value.exact()
    return value


def to_host(value: Value) -> np.ndarray:
    """A host NumPy copy of a stored value (packed types stay unpacked int8/uint8).

    A block-quantized weight stays packed: its planes come to the host as they are.
    """
    if type(value) is np.ndarray:  # already on the host (inserted inputs, Vulkan reads)
        return value
    if getattr(value, "is_block_quantized", False):
        return jax.device_get(value)  # type: ignore[no-any-return]
    return np.asarray(jax.device_get(materialize(value)))


def value_shape(value: Value) -> tuple[int, ...]:
    """The logical shape of a stored value."""
    return tuple(int(d) for d in value.shape)


def value_dtype_name(value: Value) -> str:
    """A short dtype name for traces (``float32``, ``bfloat16``)."""
    return str(np.dtype(value.dtype))


def coerce_input(name: str, value: Any, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """Check and convert a host value inserted into a dynamic variable.

    NumPy arrays must already have the declared dtype (a silent float64 -> float32 cast
    hides bugs); Python scalars and lists are converted. Packed dtypes take int arrays in
    the type's value range.

    Raises:
        SimulationError: wrong dtype, shape, or a value out of a packed type's range.
    """
    want = np.dtype(dtype.numpy)
    declared = _Declared(dtype, shape)  # spelled out only in a message
    if not isinstance(value, np.ndarray) and isinstance(value, jax.Array):
        value = np.asarray(value)
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if dtype.is_packed:
            if arr.dtype.kind not in "iu":
                raise SimulationError(
                    f"insert {name!r}: expected integer values for {declared}, got {arr.dtype}"
                )
        elif arr.dtype != want:
            try:
                got = dtype_from_numpy(arr.dtype).short
            except ValueError:
                got = str(arr.dtype)
            raise SimulationError(
                f"insert {name!r}: dtype {got} does not match the declaration {declared}; "
                f"convert it first, e.g. value.astype(np.{want.name})"
            )
    else:
        try:
            arr = np.asarray(value, dtype=want)
        except (TypeError, ValueError, OverflowError) as err:
            raise SimulationError(f"insert {name!r}: cannot convert to {declared}: {err}") from None
    if tuple(arr.shape) != tuple(shape):
        raise SimulationError(
            f"insert {name!r}: shape {list(arr.shape)} does not match the declaration {declared}"
        )
    if dtype.is_packed:
        lo, hi = dtype.value_range()
        if arr.size and (arr.min() < lo or arr.max() > hi):
            raise SimulationError(f"insert {name!r}: {dtype.short} values must lie in [{lo}, {hi}]")
        if dtype is DType.T1 and arr.size and np.any(arr == 0):
            raise SimulationError(f"insert {name!r}: t1 values must be -1 or +1")
        arr = arr.astype(want)
    # Not np.ascontiguousarray: it turns a 0-d scalar into shape (1,), and every op on an
    # inserted scalar then produced [1] where the declaration says [].
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


class _Declared:
    """A declaration as messages spell it (`f32[1, 64]`), formatted only when shown."""

    __slots__ = ("dtype", "shape")

    def __init__(self, dtype: DType, shape: tuple[int, ...]) -> None:
        self.dtype, self.shape = dtype, shape

    def __str__(self) -> str:
        return f"{self.dtype.short}{list(self.shape)}"


def scalar_of(value: Value, what: str) -> int | float | bool:
    """The Python scalar held by a one-element value (loop bounds, branch conditions).

    Raises:
        SimulationError: if the value has more than one element.
    """
    # Host scalars (counters, loop bounds) skip jax.device_get: this runs per cache index.
    arr = value if isinstance(value, np.ndarray) else to_host(value)
    if arr.size != 1:
        raise SimulationError(f"{what} must be a scalar, got a tensor of shape {list(arr.shape)}")
    item = arr.item()
    return item  # type: ignore[no-any-return]
