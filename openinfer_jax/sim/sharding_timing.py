"""Collective time of a region, measured by running the same collectives on their own.

XLA fuses a region into one program, so the time its collectives take inside it cannot be
read from the outside without a profiler. What can be measured is each collective alone:
for every (kind, bytes) the region's HLO contains, a jitted `shard_map` over the same mesh
runs that collective `REPEATS` times in a row (one dispatch, so launch overhead is divided
away) and the per-collective time is the median over a few calls. A region's collective time
is the sum over its collectives. Collectives run over the whole mesh here, which bounds
those XLA runs over a sub-group (one axis of a 2-D mesh) from above.

Results are cached per (mesh, kind, bytes): each distinct collective is compiled and timed
once per process. Only traced and timed runs (`with_trace().with_timer()`) pay for it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["REPEATS", "collective_time_ns", "region_collective_ns"]

# Collectives per timed dispatch, and timed dispatches per measurement.
REPEATS = 8
_CALLS = 5

_CACHE: dict[tuple[Any, str, int], int] = {}


def _body(kind: str, axes: tuple[str, ...], size: int) -> Callable[[Any], Any]:
    """One collective of `kind` on a per-device block, as a shard_map body."""

    def all_reduce(x: Any) -> Any:
        return jax.lax.psum(x, axes)

    def all_gather(x: Any) -> Any:
        # Gather then keep this device's block so the loop carry keeps its shape.
        gathered = jax.lax.all_gather(x, axes, tiled=True)
        return gathered[: x.shape[0]] * 0.5

    def reduce_scatter(x: Any) -> Any:
        part = jax.lax.psum_scatter(x, axes, tiled=True)
        return jnp.tile(part, size)

    def all_to_all(x: Any) -> Any:
        return jax.lax.all_to_all(x, axes, 0, 0, tiled=True)

    def permute(x: Any) -> Any:
        perm = [(i, (i + 1) % size) for i in range(size)]
        return jax.lax.ppermute(x, axes, perm)

    table = {
        "all-reduce": all_reduce,
        "all-gather": all_gather,
        "reduce-scatter": reduce_scatter,
        "all-to-all": all_to_all,
        "collective-permute": permute,
        "collective-broadcast": permute,
    }
    return table[kind]


def collective_time_ns(mesh: Mesh, kind: str, nbytes: int) -> int:
    """Nanoseconds of one `kind` collective whose per-device result is `nbytes`, on `mesh`."""
    key = (mesh, kind, nbytes)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    axes = tuple(mesh.axis_names)
    size = int(mesh.devices.size)
    # Per-device block in f32 elements, a multiple of the mesh size (tiled gathers/scatters).
    elems = max(size, -(-max(nbytes, 4) // 4 // size) * size)
    if kind == "all-gather":
        elems = max(1, elems // size)  # the result (`nbytes`) is the gathered size
    body = _body(kind, axes, size)

    def repeated(x: Any) -> Any:
        return jax.lax.fori_loop(0, REPEATS, lambda _i, carry: body(carry), x)

    spec = PartitionSpec(axes)
    fn = jax.jit(jax.shard_map(repeated, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))
    data = jax.device_put(np.ones(elems * size, np.float32), NamedSharding(mesh, spec))
    jax.block_until_ready(fn(data))  # compile and warm up
    times = []
    for _ in range(_CALLS):
        start = time.perf_counter_ns()
        jax.block_until_ready(fn(data))
        times.append(time.perf_counter_ns() - start)
    result = int(statistics.median(times) / REPEATS)
    _CACHE[key] = result
    return result


def region_collective_ns(mesh: Mesh, instances: list[tuple[str, int]]) -> int:
    """Sum of the standalone times of a region's collectives (kind, bytes) on `mesh`."""
    if mesh.devices.size < 2:
        return 0
    return sum(collective_time_ns(mesh, kind, nbytes) for kind, nbytes in instances)
