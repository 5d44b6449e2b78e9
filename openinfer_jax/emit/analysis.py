"""Static analysis for synthesis: every variable's dtype, declared shape and BOUNDED shape.

The emitted code has no allocator, so every buffer needs a size known at synthesis time.
Most shapes are fixed by the declarations and the model's sizevars; the exception is a
cache read of a slice (`K[l, ..]`), whose length grows step by step. Those are bounded by
the table's capacity (``@fixed`` or the device JSON's ``cache_capacity``), and the bound is
propagated through the ops that consume them with the registry's own shape rules. A table
axis with neither is a `SynthesisError` naming the table and the axis.

The walk visits nodes in execution order (branch targets inline at the branch, consumers
at entry's yield, loop bodies twice so bounds reach a fixed point).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from openinfer_jax.core.blocks import BlockLayout
from openinfer_jax.core.dims import missing_sizes
from openinfer_jax.core.dims import resolve_dims as core_resolve_dims
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import GraphValidationError, OpenInferError, SynthesisError
from openinfer_jax.emit.device import DeviceArch
from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Block,
    Branch,
    CacheAccess,
    CacheIndex,
    CacheRead,
    CacheSlice,
    CacheWrite,
    Graph,
    Loop,
    MemoryKind,
    Node,
    Op,
    Transfer,
    VarDecl,
    VarRef,
    Yield,
)
from openinfer_jax.ir.printer import describe_node
from openinfer_jax.ir.walk import walk, walk_graph, writes_in
from openinfer_jax.ops import registry

__all__ = [
    "Analysis",
    "OpInfo",
    "TableInfo",
    "VarInfo",
    "analyze",
    "node_where",
    "resolve_dims",
]


@dataclass
class VarInfo:
    """One buffer the program needs: a declared variable or an `assign`ed temporary.

    `kind` is the memory kind's name or ``"temp"``. `source` says where the value of a
    volatile/constant/persistent variable starts each step (or once): ``"tensor"`` (model
    tensor `model_name`), ``"scalar"`` (`scalar` from metadata or a sizevar), ``"fill"``
    (`init` or zero). `bound` is the largest element count the buffer must hold.
    """

    name: str
    dtype: DType
    kind: str
    shape: tuple[int, ...]
    bound: int
    source: str = "fill"
    model_name: str = ""
    init: bool | int | float | None = None
    scalar: bool | int | float | None = None
    decl: VarDecl | None = None
    layout: BlockLayout | None = None  # a block-quantized model weight (the model's layout)

    @property
    def numel(self) -> int:
        """Element count of the declared shape."""
        return math.prod(self.shape)


@dataclass
class TableInfo:
    """A persistent cache table: index names, capacity per index, entry shape.

    `autod` has one item per index: -1 for a table axis, or for an `@auto_dim` index the
    entry dim its count widens (empty: no auto-dim index). Storage is
    ``[caps of the table axes..., entry dims widened by the caps of their auto axes]``.
    """

    name: str
    dtype: DType
    indices: tuple[str, ...]
    caps: tuple[int, ...]
    entry: tuple[int, ...]
    autod: tuple[int, ...] = ()

    @property
    def storage(self) -> tuple[int, ...]:
        """Dims of the preallocated buffer."""
        if not self.autod:
            return (*self.caps, *self.entry)
        table = [c for c, k in zip(self.caps, self.autod) if k < 0]
        grown = [d + sum(c for c, k in zip(self.caps, self.autod) if k == e)
                 for e, d in enumerate(self.entry)]  # fmt: skip
        return (*table, *grown)

    @property
    def numel(self) -> int:
        """Elements of the whole preallocated table."""
        return math.prod(self.storage)


@dataclass
class OpInfo:
    """A resolved op node: its declaration, resolved params and dtypes."""

    opdef: registry.OpDef
    params: dict[str, Any]
    in_dtypes: tuple[DType, ...]
    out_dtype: DType
    in_shapes: tuple[tuple[int, ...], ...] = ()
    out_shape: tuple[int, ...] = ()
    # per input: the block layout of a block-quantized weight (openinfer_jax.emit.c_quant), else None
    in_layouts: tuple[BlockLayout | None, ...] = ()


@dataclass
class Analysis:
    """Everything the emitters need to know about a graph bound to a model."""

    graph: Graph
    sizevars: dict[str, int]
    vars: dict[str, VarInfo]
    tables: dict[str, TableInfo]
    prefixes: dict[str, VarDecl]
    ops: dict[int, OpInfo]
    entry: Block
    branch_targets: set[str]
    consumers: list[Block]
    consumer_writes: dict[str, set[str]] = field(default_factory=dict)
    written: set[str] = field(default_factory=set)
    # Prefix tables some node writes an entry of -> how many entries one step may override
    # (the model tensors matching the pattern; at least 1).
    prefix_writes: dict[str, int] = field(default_factory=dict)
    # The graph as given, before the passes (`openinfer_jax.passes`) rewrote it into `graph`:
    # the C trace numbers nodes by it, as the simulator does (None: `graph` itself). `origins`
    # maps a node the passes made (``id``) to the node of `source` whose output it writes.
    source: Graph | None = None
    origins: dict[int, Node] = field(default_factory=dict)
    # Block-quantized prefix tables -> the layout of their model tensors (one for all entries).
    prefix_layouts: dict[str, BlockLayout] = field(default_factory=dict)

    def layout_of(self, name: str) -> BlockLayout | None:
        """The block layout of a block-quantized variable or prefix table, else None."""
        info = self.vars.get(name)
        if info is not None:
            return info.layout
        return self.prefix_layouts.get(name)

    def read_only(self, name: str) -> bool:
        """True for a variable no node writes (its model data can be used in place)."""
        return name not in self.written

    def where(self, node: Node, block: str) -> str:
        """`block B node <text>` (with line:column when known) for error messages."""
        return node_where(node, block)


def node_where(node: Node, block: str) -> str:
    """`block B node <text> at FILE:LINE:COL` for messages, in synthesis errors and in the
    emitted C. The file is its base name: emitted sources must not depend on the path the
    graph was given by (byte-identical output from `g.graph` and `/abs/dir/g.graph`)."""
    loc = getattr(node, "loc", None)
    at = f" at {loc.short()}" if loc is not None else ""
    return f"block {block} node `{describe_node(node)}`{at}"


def resolve_dims(dims: tuple[Any, ...], sizevars: Mapping[str, int], what: str) -> tuple[int, ...]:
    """Dims (ints, sizevars, products like ``3*D``; `openinfer_jax.core.dims`) as ints.

    Raises:
        SynthesisError: a size that is not a sizevar of the model, or a malformed dim,
            naming `what`.
    """
    try:
        missing = missing_sizes(dims, sizevars)
    except GraphValidationError as err:
        raise SynthesisError(f"{what}: {err}") from None
    if missing:
        raise SynthesisError(
            f"{what}: size {missing[0]!r} is not a sizevar of the model; the C target needs "
            f"every dimension fixed at synthesis (model sizevars: {', '.join(sorted(sizevars)) or 'none'})"
        )
    shape = core_resolve_dims(dims, sizevars)
    assert shape is not None
    return shape


class _Analyzer:
    """Builds an `Analysis`: declarations first, then a bounded-shape walk of the program."""

    def __init__(self, graph: Graph, model: Any, arch: DeviceArch) -> None:
        self.graph = graph
        self.model = model
        self.arch = arch
        self.sizevars: dict[str, int] = dict(model.sizevars)
        self.vars: dict[str, VarInfo] = {}
        self.tables: dict[str, TableInfo] = {}
        self.prefixes: dict[str, VarDecl] = {}
        self.ops: dict[int, OpInfo] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.prefix_layouts: dict[str, BlockLayout] = {}

    # ---- declarations -------------------------------------------------------------------
    def declare(self) -> None:
        for decl in self.graph.vars:
            shape = resolve_dims(decl.dims, self.sizevars, f"variable {decl.name!r}")
            if decl.is_table and decl.kind is MemoryKind.PERSISTENT:
                self.tables[decl.name] = self._table(decl, shape)
                continue
            if decl.is_table:
                self.prefixes[decl.name] = decl
                if decl.quant is not None:
                    self.prefix_layouts[decl.name] = _prefix_layout(decl, self.model.tensors)
                continue
            info = VarInfo(
                decl.name, decl.dtype, decl.kind.value, shape, math.prod(shape), decl=decl
            )
            info.init = decl.init
            self._bind_source(info, decl, shape)
            self.vars[decl.name] = info
            self.shapes[decl.name] = shape
        for blk in self.graph.blocks:
            for node in walk(blk.nodes):
                if isinstance(node, Assign):
                    shape = resolve_dims(node.dims, self.sizevars, f"assign {node.name!r}")
                    if node.name in self.vars and self.vars[node.name].kind != "temp":
                        raise SynthesisError(
                            f"{self.where(node, blk.name)}: assign shadows the declared variable {node.name!r}"
                        )
                    self.vars[node.name] = VarInfo(
                        node.name, node.dtype, "temp", shape, math.prod(shape)
                    )
                    self.shapes[node.name] = shape

    def _table(self, decl: VarDecl, entry: tuple[int, ...]) -> TableInfo:
        fixed = dict(decl.fixed)
        caps = []
        for axis in decl.table_indices:
            cap = fixed.get(axis) or self.arch.capacity_for(decl.name, axis)
            if cap is None:
                raise SynthesisError(
                    f"cache table {decl.name!r}: index {axis!r} is unbounded; the C target preallocates "
                    f'tables, so give it a capacity with @fixed({axis}=N) or "cache_capacity" in the '
                    "device JSON"
                )
            caps.append(cap)
        if decl.dtype.is_packed:
            raise SynthesisError(
                f"cache table {decl.name!r}: packed dtype {decl.dtype.short} is not allowed in tables"
            )
        if len(decl.auto_dim) > len(entry):
            raise SynthesisError(
                f"cache table {decl.name!r}: @auto_dim names {len(decl.auto_dim)} indices but the "
                f"entry has only {len(entry)} dims"
            )
        # Each auto-dim axis widens the entry dim of its position in @auto_dim(...).
        autod = tuple(
            decl.auto_dim.index(i) if i in decl.auto_dim else -1 for i in decl.table_indices
        )
        return TableInfo(
            decl.name, decl.dtype, decl.table_indices, tuple(caps), entry,
            autod if decl.auto_dim else (),
        )  # fmt: skip

    def _bind_source(self, info: VarInfo, decl: VarDecl, shape: tuple[int, ...]) -> None:
        if decl.kind is MemoryKind.DYNAMIC:
            info.source = "input"
            return
        name = decl.model_name
        tensors = self.model.tensors
        if name in tensors:
            t = tensors[name]
            block = getattr(t, "block", None)
            file_type = str(block.scheme) if block is not None else t.dtype.short
            if file_type != decl.type_name or tuple(t.shape) != shape:
                raise SynthesisError(
                    f"variable {decl.name!r}: model tensor {name!r} is {file_type}{list(t.shape)}, "
                    f"the declaration says {decl.type_name}{list(shape)}"
                )
            if t.has_data:
                info.source, info.model_name = "tensor", name
            if block is not None:
                info.layout = block.layout
            return
        if not shape:
            meta = self.model.metadata
            if name in meta and isinstance(meta[name], (bool, int, float)):
                info.source, info.scalar = "scalar", meta[name]
            elif name in self.sizevars:
                info.source, info.scalar = "scalar", self.sizevars[name]

    def where(self, node: Node, block: str) -> str:
        return node_where(node, block)

    # ---- bounded shapes -------------------------------------------------------------------
    def ref_info(self, ref: VarRef, where: str) -> tuple[DType, tuple[int, ...]]:
        if ref.indices:
            decl = self.prefixes.get(ref.name)
            if decl is None:
                raise SynthesisError(
                    f"{where}: {ref} indexes {ref.name!r}, which is not a prefix table"
                )
            return decl.dtype, resolve_dims(decl.dims, self.sizevars, f"variable {decl.name!r}")
        info = self.vars.get(ref.name)
        if info is None:
            if ref.name in self.tables:
                raise SynthesisError(
                    f"{where}: cache table {ref.name!r} must be read with cache.read"
                )
            raise SynthesisError(f"{where}: {ref.name!r} is neither declared nor assigned")
        return info.dtype, self.shapes[ref.name]

    def write_shape(self, ref: VarRef, shape: tuple[int, ...], where: str) -> None:
        """Record a write of `shape` into `ref`: a variable's bound grows; a prefix-table
        entry keeps its declared shape, so the value must fit it."""
        if not ref.indices:
            self.set_shape(ref.name, shape)
            return
        _dtype, entry = self.ref_info(ref, where)
        if math.prod(shape) > math.prod(entry):
            raise SynthesisError(
                f"{where}: writes {list(shape)} into an entry of {ref.name!r}, declared {list(entry)}"
            )

    def set_shape(self, name: str, shape: tuple[int, ...]) -> None:
        self.shapes[name] = shape
        info = self.vars[name]
        info.bound = max(info.bound, math.prod(shape))

    def read_shape(self, access: CacheAccess) -> tuple[int, ...]:
        table = self.tables.get(access.name)
        if table is None:
            info = self.vars[access.name]
            return info.shape
        out: list[int] = []
        autod = table.autod or (-1,) * len(table.caps)
        sels = access.indices or (CacheSlice(None, None),) * len(table.caps)
        grown = list(table.storage[len(table.storage) - len(table.entry) :])
        for idx, cap, auto in zip(sels, table.caps, autod):
            if not isinstance(idx, CacheSlice):
                continue
            # A slice is at most the axis' extent at capacity; literal bounds fix its length.
            extent = cap if auto < 0 else grown[auto]
            start, end = idx.start, idx.end
            if (
                isinstance(start, (int, type(None)))
                and isinstance(end, int)
                and end >= (start or 0) >= 0
            ):
                extent = min(extent, end - (start or 0))
            if auto < 0:
                out.append(extent)
            else:
                grown[auto] = extent
        # An auto-dim entry dim is at most its base plus the axis' capacity.
        return (*out, *grown)

    def run(self, blocks: dict[str, Block], entry: Block, consumers: list[Block]) -> None:
        self._walk(entry.nodes, entry.name, blocks, consumers, depth=0)

    def _walk(
        self,
        nodes: tuple[Node, ...],
        block: str,
        blocks: dict[str, Block],
        consumers: list[Block],
        depth: int,
    ) -> None:
        if depth > 32:
            raise SynthesisError(
                f"block {block}: branches nest more than 32 deep (recursive blocks?)"
            )
        for node in nodes:
            where = self.where(node, block)
            if isinstance(node, Op):
                self._op(node, where)
            elif isinstance(node, Transfer):
                _dtype, shape = self.ref_info(node.src, where)
                self.write_shape(node.dst, shape, where)
            elif isinstance(node, CacheRead):
                if node.src.name not in self.tables and node.src.name not in self.vars:
                    raise SynthesisError(f"{where}: {node.src.name!r} is not a persistent variable")
                self.write_shape(node.dst, self.read_shape(node.src), where)
            elif isinstance(node, CacheWrite):
                self.ref_info(node.src, where)
            elif isinstance(node, Loop):
                for _ in range(2):
                    self._walk(node.body, block, blocks, consumers, depth)
            elif isinstance(node, Branch):
                for target in (node.then_block, node.else_block):
                    if target is not None:
                        self._walk(blocks[target].nodes, target, blocks, consumers, depth + 1)
            elif isinstance(node, Yield) and block == self.graph.blocks[0].name:
                for blk in consumers:
                    self._walk(blk.nodes, blk.name, blocks, consumers, depth + 1)

    def _op(self, node: Op, where: str) -> None:
        opdef = registry.get(node.op)
        if opdef is None:
            raise SynthesisError(f"{where}: unknown op {node.op!r}")
        ins = [self.ref_info(ref, where) for ref in node.inputs]
        if node.output.indices:
            out_decl_dtype, _entry = self.ref_info(node.output, where)
        elif node.output.name not in self.vars:
            raise SynthesisError(
                f"{where}: output {node.output.name!r} is neither declared nor assigned"
            )
        try:
            params = opdef.resolve_params(dict(node.params))
            out_dtype, out_shape = opdef.infer([d for d, _ in ins], [s for _, s in ins], params)
        except OpenInferError as err:
            raise SynthesisError(
                f"{where}: with every cache slice at its capacity the op does not type-check: {err}"
            ) from None
        want = out_decl_dtype if node.output.indices else self.vars[node.output.name].dtype
        if out_dtype is not want:
            raise SynthesisError(
                f"{where}: the op produces {out_dtype.short} but {node.output.name!r} is {want.short}"
            )
        layouts = tuple(
            self.prefix_layouts.get(r.name) if r.indices else self.vars[r.name].layout
            for r in node.inputs
        )
        self.ops[id(node)] = OpInfo(
            opdef, params, tuple(d for d, _ in ins), out_dtype, tuple(s for _, s in ins), out_shape,
            layouts if any(layouts) else (),
        )  # fmt: skip
        self.write_shape(node.output, out_shape, where)


def analyze(graph: Graph, model: Any, arch: DeviceArch) -> Analysis:
    """Bind `graph` to `model` and bound every buffer (see the module docstring).

    Raises:
        SynthesisError: an unknown size, an unbounded cache axis, an op that does not
            type-check at the bounded shapes, a model tensor that differs from its declaration.
    """
    if not graph.blocks:
        raise SynthesisError("the graph has no blocks; add `block entry { ... }`")
    an = _Analyzer(graph, model, arch)
    an.declare()
    blocks = {b.name: b for b in graph.blocks}
    entry = blocks.get("entry", graph.blocks[0])
    targets = {name for node in walk_graph(graph) for name in node.targets()}
    for name in sorted(targets):
        if name not in blocks:
            raise SynthesisError(f"branch target block {name!r} does not exist")
    consumers = [b for b in graph.blocks if b is not entry and b.name not in targets]
    an.run(blocks, entry, consumers)
    writes = {b.name: _written(b.nodes, graph) for b in consumers}
    written = set().union(*(_written(b.nodes, graph) for b in graph.blocks))
    prefix_writes = {
        name: max(1, _pattern_matches(decl, model.tensors)) for name, decl in an.prefixes.items()
        if name in written
    }  # fmt: skip
    for blk in consumers:
        if any(isinstance(n, Await) for n in walk(blk.nodes)) is False:
            raise SynthesisError(f"block {blk.name}: a consumer block must start with await")
    return Analysis(
        graph,
        an.sizevars,
        an.vars,
        an.tables,
        an.prefixes,
        an.ops,
        entry,
        targets,
        consumers,
        writes,
        written,
        prefix_writes,
        prefix_layouts=an.prefix_layouts,
    )


def _pattern_regex(decl: VarDecl) -> str:
    pattern = decl.pattern or decl.model_name + "".join(f".{{{i}}}" for i in decl.table_indices)
    parts = re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", pattern)
    return "".join("(-?[0-9]+)" if p.startswith("{") else re.escape(p) for p in parts)


def _pattern_matches(decl: VarDecl, tensors: Mapping[str, Any]) -> int:
    """How many model tensors a prefix table's pattern names (its entries in the model)."""
    regex = _pattern_regex(decl)
    return sum(1 for name in tensors if re.fullmatch(regex, name))


def _prefix_layout(decl: VarDecl, tensors: Mapping[str, Any]) -> BlockLayout:
    """The block layout of a quantized prefix table: its model tensors' (they must share it;
    `oi_model_get_block` checks each entry again when the step reads it)."""
    regex = _pattern_regex(decl)
    layouts = {
        t.block.layout for name, t in tensors.items()
        if re.fullmatch(regex, name) and getattr(t, "block", None) is not None
    }  # fmt: skip
    if len(layouts) != 1:
        found = ", ".join(sorted(x.describe() for x in layouts)) or "none"
        raise SynthesisError(
            f"prefix table {decl.name!r} ({decl.type_name}): its model tensors must share one block "
            f"layout for the C target, found {found}"
        )
    return layouts.pop()


def _written(nodes: tuple[Node, ...], graph: Graph) -> set[str]:
    """The working-memory variables `nodes` write: what a consumer snapshots (persistent
    variables are shared, not snapshotted)."""
    persistent = {d.name for d in graph.vars if d.kind is MemoryKind.PERSISTENT}
    return writes_in(nodes) - persistent


# Kept for the emitters: index parts of a cache access in one place.
CacheIndexPart = CacheIndex | CacheSlice
