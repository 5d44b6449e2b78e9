"""Shape variants for the Vulkan target: op shapes at each possible cache-slice length.

A value read from a cache-table slice (``K[l, ..]``) grows step by step, so the ops that
consume it have run-time shapes, while the Vulkan target bakes push constants at synthesis.
For those nodes the analysis is run again with every slice at length 1, 2, ... (up to the
table capacity, at most `DEFAULT_MAX_VARIANTS` or ``preferences.vk_max_shape_variants``):
each run gives the op shapes at that length, and the emitted node picks, at run time, the
prepared variant whose input shapes match (a node with no match runs its C kernel on the
host). Every slice takes the same length in one run, which is what a decode loop does
(every layer's cache holds the same number of steps); other patterns simply fall back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openinfer_jax.core.errors import OpenInferError
from openinfer_jax.emit.analysis import OpInfo, _Analyzer
from openinfer_jax.emit.device import DeviceArch
from openinfer_jax.ir.nodes import Branch, CacheAccess, CacheSlice, Graph
from openinfer_jax.ir.walk import walk

__all__ = [
    "DEFAULT_MAX_VARIANTS",
    "MAX_PREFIX_ENTRIES",
    "max_variants",
    "prefix_counts",
    "shape_variants",
]

#: Most entries of one prefix table preloaded into the Vulkan arena.
MAX_PREFIX_ENTRIES = 4096

DEFAULT_MAX_VARIANTS = 64


def max_variants(raw_preferences: Mapping[str, Any]) -> int:
    """``preferences.vk_max_shape_variants`` (0 turns variants off), default 64."""
    value = raw_preferences.get("vk_max_shape_variants", DEFAULT_MAX_VARIANTS)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        from openinfer_jax.core.errors import SynthesisError

        raise SynthesisError(
            f"preferences.vk_max_shape_variants must be an int >= 0, got {value!r}"
        )
    return value


class _AtLength(_Analyzer):
    """The analysis with every cache slice at `length` (capped by the axis capacity)."""

    def __init__(self, graph: Graph, model: Any, arch: DeviceArch, length: int) -> None:
        super().__init__(graph, model, arch)
        self.length = length

    def read_shape(self, access: CacheAccess) -> tuple[int, ...]:
        table = self.tables.get(access.name)
        if table is None:
            return super().read_shape(access)
        dims = [
            min(self.length, cap)
            for idx, cap in zip(access.indices, table.caps)
            if isinstance(idx, CacheSlice)
        ]
        return (*dims, *table.entry)


def shape_variants(
    graph: Graph, model: Any, arch: DeviceArch, limit: int
) -> dict[int, dict[int, OpInfo]]:
    """Slice length -> (id of op node -> its `OpInfo` at that length), lengths 1..limit
    (capped by the largest table capacity); lengths at which the graph does not type-check
    are left out."""
    blocks = {b.name: b for b in graph.blocks}
    if not blocks:
        return {}
    entry = blocks.get("entry", graph.blocks[0])
    targets = {
        name
        for blk in graph.blocks
        for node in walk(blk.nodes)
        if isinstance(node, Branch)
        for name in (node.then_block, node.else_block)
        if name
    }
    consumers = [b for b in graph.blocks if b is not entry and b.name not in targets]
    out: dict[int, dict[int, OpInfo]] = {}
    probe = _AtLength(graph, model, arch, 1)
    try:
        probe.declare()
    except OpenInferError:
        return {}
    top = max((max(t.caps, default=0) for t in probe.tables.values()), default=0)
    for length in range(1, min(limit, top) + 1):
        an = _AtLength(graph, model, arch, length)
        try:
            an.declare()
            an.run(blocks, entry, consumers)
        except OpenInferError:
            continue
        out[length] = dict(an.ops)
    return out


def _entry_fits(info: Any, decl: Any, an: Any) -> bool:
    """True if a model tensor can be entry of table `decl`: it exists and has the entry's
    dtype and shape (a table whose loop starts at 1 may find an unrelated tensor at 0)."""
    if info is None:
        return False
    from openinfer_jax.ir.validate_context import DimResolver

    dims = DimResolver(an.sizevars)
    shape = tuple(dims.dim(d) for d in decl.dims)
    return info.dtype is decl.dtype and (None in shape or tuple(info.shape) == shape)


def prefix_counts(an: Any, model: Any) -> dict[str, int]:
    """Prefix table -> how many entries (indices 0, 1, ... with a model tensor) the Vulkan
    target preloads into its arena: tables with one index that no node writes."""
    out: dict[str, int] = {}
    tensors = getattr(model, "tensors", {})
    writes = getattr(an, "prefix_writes", {})
    for name, decl in sorted(an.prefixes.items()):
        if len(decl.table_indices) != 1 or writes.get(name):
            continue
        index = decl.table_indices[0]
        pattern = decl.pattern or f"{decl.model_name}.{{{index}}}"
        count = 0
        while count < MAX_PREFIX_ENTRIES and _entry_fits(
            tensors.get(pattern.replace(f"{{{index}}}", str(count))), decl, an
        ):
            count += 1
        if count:
            out[name] = count
    return out
