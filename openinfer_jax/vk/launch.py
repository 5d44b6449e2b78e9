"""Shape arithmetic for kernel launches: broadcast strides, dim collapsing, grid sizes.

Pure functions of shapes (no Vulkan), so they are tested on their own. Kernels receive
shapes and element strides in push constants, never an expanded copy of an input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "LOCAL_SIZE",
    "MAX_RANK",
    "broadcast_strides",
    "bucket",
    "bucket_grid",
    "collapse",
    "contiguous_strides",
    "dispatch_grid",
]

MAX_RANK = 6  # collapsed rank a kernel handles; 30 push-constant words stay under 128 bytes
LOCAL_SIZE = 128
_MAX_GROUPS = 65535


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    strides = []
    step = 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def broadcast_strides(in_shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a contiguous `in_shape` input indexed by `out_shape` coordinates.

    NumPy broadcasting: shapes right-aligned, a dim of 1 (or a missing leading dim) repeats
    its single element, which is a stride of 0.

    Raises:
        ValueError: if `in_shape` does not broadcast to `out_shape`.
    """
    if len(in_shape) > len(out_shape):
        raise ValueError(f"shape {tuple(in_shape)} does not broadcast to {tuple(out_shape)}")
    padded = (1,) * (len(out_shape) - len(in_shape)) + tuple(in_shape)
    own = contiguous_strides(padded)
    strides = []
    for dim_in, dim_out, stride in zip(padded, out_shape, own):
        if dim_in == dim_out:
            strides.append(stride if dim_out != 1 else 0)
        elif dim_in == 1:
            strides.append(0)
        else:
            raise ValueError(f"shape {tuple(in_shape)} does not broadcast to {tuple(out_shape)}")
    return tuple(strides)


def collapse(
    shape: Sequence[int], strides: Sequence[Sequence[int]]
) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Drop size-1 dims and merge neighbours that every operand walks contiguously.

    Dims d and d+1 merge when, for every stride list, ``stride[d] == stride[d+1] *
    shape[d+1]`` (both broadcast, or both contiguous). A same-shape elementwise op collapses
    to rank 1. Always returns at least rank 1.
    """
    dims = [i for i, n in enumerate(shape) if n != 1]
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for d in dims:
        if out_shape and all(s[-1] == st[d] * shape[d] for s, st in zip(out_strides, strides)):
            out_shape[-1] *= shape[d]
            for s, st in zip(out_strides, strides):
                s[-1] = st[d]
            continue
        out_shape.append(shape[d])
        for s, st in zip(out_strides, strides):
            s.append(st[d])
    if not out_shape:
        return (1,), tuple((0,) for _ in strides)
    return tuple(out_shape), tuple(tuple(s) for s in out_strides)


def dispatch_grid(invocations: int, local_size: int = LOCAL_SIZE) -> tuple[int, int, int]:
    """Work-group counts covering `invocations` (x capped at 65535, spilling into y)."""
    groups = max(1, math.ceil(invocations / local_size))
    x = min(groups, _MAX_GROUPS)
    y = math.ceil(groups / x)
    if y > _MAX_GROUPS:
        raise ValueError(f"{invocations} invocations exceed the dispatch grid limit")
    return (x, y, 1)


def bucket(n: int) -> int:
    """`n` rounded up to the ladder 1..8, then 4 steps per octave (10, 12, 14, 16, 20, ...).

    A count that grows one step at a time (a KV cache read) changes bucket about every
    1/8 of its size, and never wastes more than a quarter of the rounded value.
    """
    if n <= 8:
        return max(n, 0)
    step = 1 << ((n - 1).bit_length() - 3)  # an eighth of the next power of two
    return -(-n // step) * step


def bucket_grid(grid: tuple[int, int, int]) -> tuple[int, int, int]:
    """A one-row grid with its x count rounded up to `bucket` (within the 65535 limit);
    other grids unchanged. Only for kernels whose extra groups do nothing (`Kernel.flat`)."""
    x, y, z = grid
    if y != 1 or z != 1:
        return grid  # the flat index spans rows of x groups: keep the exact layout
    return (min(bucket(x), _MAX_GROUPS), 1, 1)
