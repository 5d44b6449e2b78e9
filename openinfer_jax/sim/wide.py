"""Wide regions: pure ops, table cache reads/writes and whole loops in ONE jitted function.

A wide region runs in two phases. On the host, a walk over its nodes (loops unrolled,
`W[l]` resolved to model tensors, cache indices resolved to ints) grows the tables that
will be written (capacity doubling, counts, undo records) and produces a *program*: a flat
list of static steps plus the runtime operands (input arrays, table buffers, int32 start
vectors, valid lengths). The program's static part is the compile-cache key, so the next
decode step (same shapes, new `step` value, same length bucket) reuses the executable.
Then XLA runs the program: table buffers are donated and updated in place with
`dynamic_update_slice`; each write also returns the block it overwrote, which becomes the
undo record of the step. This is how a whole decode step (12 layers, KV cache) becomes one
dispatch instead of ~70 (DESIGN.md, "Pure regions go to XLA").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import OpenInferError, SimulationError
from openinfer_jax.ir.nodes import (
    Assign,
    CacheRead,
    CacheWrite,
    Dep,
    Loop,
    Node,
    Op,
    Transfer,
    VarRef,
)
from openinfer_jax.ops import registry
from openinfer_jax.sim.interrupts import atomic
from openinfer_jax.sim.long_loops import LoopTooLong, unrolled_iterations
from openinfer_jax.sim.plan import RegionPlan
from openinfer_jax.sim.ragged import NeedExact, Rag, apply_op
from openinfer_jax.sim.regions import NodeFailure, NodeShapes, Slot, plan_layout, slot_value
from openinfer_jax.sim.values import Deferred, Ragged, Zeros

if TYPE_CHECKING:
    from openinfer_jax.sim.executor import Executor

__all__ = ["WideProgram", "WideRunner"]

Key = tuple[str, ...]  # ("v", name) for a variable, ("m", decl, tensor) for a prefix-table entry


def _dst_key(ex: Executor, ref: VarRef, sc: dict[str, int]) -> Key:
    """The program key a node writes: a variable, or the model entry of a prefix table (W[l])."""
    if not ref.indices:
        return ("v", ref.name)
    return ("m", ref.name, ex._model_name(ex._decls[ref.name], ref, sc))


@dataclass
class WideProgram:
    """What the host walk produced for one call of a wide region."""

    steps: list[tuple[Any, ...]] = field(default_factory=list)
    params: list[dict[str, Any]] = field(default_factory=list)
    input_keys: list[Key] = field(default_factory=list)
    inputs: list[Any] = field(default_factory=list)
    input_rags: list[Rag | None] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    starts: list[tuple[int, ...]] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    dtypes: dict[Key, DType] = field(default_factory=dict)
    written: list[Key] = field(default_factory=list)
    visited: list[tuple[Node, dict[str, int], int | None]] = field(default_factory=list)
    # Host work in walk order, so a later call can replay it without walking the nodes:
    # ("in", key, ref, scope, node), ("read"|"write", node, scope, step), ("assign", name, dtype).
    events: list[tuple[Any, ...]] = field(default_factory=list)
    replayable: bool = True
    steps_id: int | None = None

    def write_slots(self) -> list[tuple[int, int]]:
        """(table number, starts slot) of every cache write, in program order."""
        return [(s[2], s[4]) for s in self.steps if s[0] == "write"]

    def packed_starts(self) -> np.ndarray:
        """All block offsets as ONE int32 matrix (row = slot): one host-to-device copy per
        call instead of one per cache op (it matters on a GPU)."""
        width = max((len(s) for s in self.starts), default=1)
        out = np.zeros((max(len(self.starts), 1), width), np.int32)
        for row, starts in enumerate(self.starts):
            out[row, : len(starts)] = starts
        return out

    def packed_lengths(self) -> np.ndarray:
        """The valid lengths as one int32 vector."""
        return np.asarray(self.lengths if self.lengths else [0], np.int32)

    def length_slot(self, length: int) -> int:
        """The slot of a valid length (equal lengths share one, so masks are shared)."""
        if length in self.lengths:
            return self.lengths.index(length)
        self.lengths.append(length)
        return len(self.lengths) - 1


@dataclass
class _Compiled:
    fn: Any
    olds: Any
    out_rags: list[Rag | None]
    shapes: dict[int, NodeShapes]
    layout: list[Slot] = field(default_factory=list)
    recipe: Any = None  # recipe(inputs, lengths, k): write k alone (Deferred slots)


_NEEDS_EXACT: Any = object()


class WideRunner:
    """Builds, caches and runs wide-region programs for one simulator."""

    def __init__(self) -> None:
        self.cache: dict[Any, Any] = {}
        self.templates: dict[tuple[Any, ...], WideProgram] = {}
        self._bound_names: dict[int, tuple[str, ...]] = {}
        self._steps_ids: dict[Any, int] = {}
        # template key -> whether its loops fit Limits.max_unrolled_iterations (long_loops.py)
        self.unroll_fits: dict[tuple[Any, ...], bool] = {}
        self.compilations = 0
        self.exact_fallbacks = 0
        # Sharding hooks (docs/sharding.md, set by sim/sharding.py): pin a planned
        # activation's sharding as it is produced; wrap a region's jitted function.
        self.constrain: Any = None
        self.wrap: Any = None
        self.lean = True  # leave dead outputs out (regions.py RegionCompiler.lean)

    def lean_for(self, region: RegionPlan) -> bool:
        """Whether `region` leaves its dead outputs out (never when sharded)."""
        return region.lean and self.lean and self.constrain is None and self.wrap is None

    # ---- host walk ----------------------------------------------------------------------
    def walk(
        self, ex: Executor, region: RegionPlan, scope: dict[str, int], bucket: bool
    ) -> WideProgram:
        """Resolve every reference and cache index of the region (loops unrolled)."""
        prog = WideProgram()
        written: set[Key] = set()
        input_index: dict[Key, int] = {}
        table_index: dict[str, int] = {}
        undo = ex.persistent.undo

        def key_of(ref: VarRef, sc: dict[str, int]) -> Key:
            if not ref.indices:
                return ("v", ref.name)
            decl = ex._decls.get(ref.name)
            if decl is None or not decl.is_table:
                raise SimulationError(f"{ref}: {ref.name!r} is not a prefix table")
            return ("m", ref.name, ex._model_name(decl, ref, sc))

        def use(ref: VarRef, sc: dict[str, int], node: Node) -> Key:
            key = key_of(ref, sc)
            if key in written or key in input_index:
                return key
            try:
                value = ex._read_ref(ref, sc)
            except SimulationError as err:
                raise NodeFailure(node, err) from None
            if isinstance(value, (Zeros, Deferred)):
                value = value.exact()
            if isinstance(value, Ragged):
                if bucket:
                    prog.input_rags.append(Rag(value.axis, prog.length_slot(value.length)))
                    value = value.data
                else:
                    prog.input_rags.append(None)
                    value = value.exact()
            else:
                prog.input_rags.append(None)
            input_index[key] = len(prog.inputs)
            prog.events.append(("in", key, ref, sc, node))
            prog.input_keys.append(key)
            prog.inputs.append(value)
            prog.dtypes[key] = ex._ref_dtype(ref)
            return key

        def define(key: Key, dtype: DType) -> None:
            written.add(key)
            if key not in prog.written:
                prog.written.append(key)
            prog.dtypes[key] = dtype

        def table(name: str) -> int:
            if name not in table_index:
                table_index[name] = len(prog.tables)
                prog.tables.append(name)
            return table_index[name]

        def visit(nodes: tuple[Node, ...], sc: dict[str, int]) -> None:
            for node in nodes:
                step_no = len(prog.steps)
                if isinstance(node, Loop):
                    prog.visited.append((node, sc, None))  # the Loop event precedes its body
                try:
                    self._visit_node(ex, prog, node, sc, use, define, table, visit, bucket, undo)
                except NodeFailure:
                    raise
                except OpenInferError as err:
                    raise NodeFailure(node, err) from None
                if not isinstance(node, Loop):
                    prog.visited.append((node, sc, step_no if len(prog.steps) > step_no else None))

        visit(region.nodes, scope)
        return prog

    def _visit_node(self, ex, prog, node, sc, use, define, table, visit, bucket, undo) -> None:  # type: ignore[no-untyped-def]
        if isinstance(node, Op):
            opdef = registry.get(node.op)
            if opdef is None:
                raise SimulationError(f"unknown op {node.op!r}; see `openinfer ops` for the list")
            ins = tuple(use(r, sc, node) for r in node.inputs)
            params, out_dtype, bound = ex._op_setup(node, sc)
            if bound:
                prog.replayable = False  # runtime-scalar params are part of the program
            out = _dst_key(ex, node.output, sc)
            prog.params.append(params)
            prog.steps.append(("op", id(node), ins, out, id(params), out_dtype.code))
            define(out, out_dtype)
        elif isinstance(node, Assign):
            if node.name in ex._decls:
                raise SimulationError(
                    f"assign {node.name!r} shadows a declared variable; pick another name"
                )
            shape = ex.sim.resolve_dims(node.dims, f"assign {node.name!r}")
            ex._dtypes[node.name] = node.dtype
            prog.events.append(("assign", node.name, node.dtype))
            prog.steps.append(("assign", ("v", node.name), shape, node.dtype.code))
            define(("v", node.name), node.dtype)
        elif isinstance(node, Transfer):
            ex._check_transfer(node)
            src = use(node.src, sc, node)
            dst = _dst_key(ex, node.dst, sc)
            prog.steps.append(("transfer", src, dst))
            define(dst, prog.dtypes[src])
        elif isinstance(node, Dep):
            pass
        elif isinstance(node, CacheRead):
            decl = ex._persistent_decl(node.src.name)
            tab = ex.persistent.tables[decl.name]
            plan = tab.prepare_read(ex._cache_selection(node.src, sc), undo, bucket=bucket)
            prog.events.append(("read", node, sc, len(prog.steps)))
            slot = len(prog.starts)
            prog.starts.append(plan.starts)
            lslot = prog.length_slot(plan.length) if plan.axis is not None else None
            dst = _dst_key(ex, node.dst, sc)
            dst_dtype = ex._dtypes.get(node.dst.name)
            if dst_dtype is not None and dst_dtype is not decl.dtype:
                raise SimulationError(
                    f"cache.read {node.src} >> {node.dst}: {node.dst.name!r} is {dst_dtype.short}, the table holds {decl.dtype.short}"
                )
            prog.steps.append(
                (
                    "read",
                    id(node),
                    table(decl.name),
                    slot,
                    plan.sizes,
                    plan.shape,
                    plan.axis,
                    lslot,
                    dst,
                    decl.dtype.code,
                )
            )
            define(dst, decl.dtype)
        elif isinstance(node, CacheWrite):
            decl = ex._persistent_decl(node.dst.name)
            src = use(node.src, sc, node)
            tab = ex.persistent.tables[decl.name]
            starts, sizes, want = tab.prepare_write(ex._cache_selection(node.dst, sc), undo)
            prog.events.append(("write", node, sc, len(prog.steps)))
            slot = len(prog.starts)
            prog.starts.append(starts)
            prog.steps.append(
                ("write", id(node), table(decl.name), src, slot, sizes, want, decl.dtype.code)
            )
        elif isinstance(node, Loop):
            lo = ex._bound(node.start, sc, node, "start")
            hi = ex._bound(node.end, sc, node, "end")
            prog.steps.append(("loop", id(node), lo, hi))
            for i in range(lo, hi):
                visit(node.body, {**sc, node.index: i})
        else:  # pragma: no cover - plan.py only admits the kinds above
            raise SimulationError(f"{type(node).__name__} cannot run in a wide region")

    # ---- compile and run --------------------------------------------------------------------
    def run(
        self, ex: Executor, region: RegionPlan, scope: dict[str, int]
    ) -> tuple[WideProgram, _Compiled, Any]:
        """Walk (or replay), compile (cached), run; store outputs and undo records."""
        bucket = ex.sim.bucketing
        tkey = self._template_key(ex, region, scope, bucket)
        fits = self.unroll_fits.get(tkey)
        if fits is None:
            budget = ex.sim.limits.max_unrolled_iterations
            fits = unrolled_iterations(region.nodes, scope, ex._bound, budget) <= budget
            self.unroll_fits[tkey] = fits
        if not fits:
            raise LoopTooLong(region.id)
        template = self.templates.get(tkey)
        prog = self.replay(ex, template, bucket) if template is not None else None
        if prog is None:
            prog = self.walk(ex, region, scope, bucket)
            if prog.replayable:
                self.templates[tkey] = prog
        compiled = self._get(ex, region, prog)
        if compiled is _NEEDS_EXACT:
            self.templates.pop(tkey, None)
            prog = self.walk(ex, region, scope, False)
            compiled = self._get(ex, region, prog)
        # One transaction (interrupts.atomic): the call donates the table buffers, so each
        # table must hold its returned buffer, with the undo records, before a signal lands.
        with atomic():
            buffers = tuple(ex.persistent.tables[name].buffer for name in prog.tables)
            # Undo records first, in their own call: reading a buffer in the same computation
            # that updates it in place makes XLA copy the whole buffer.
            starts = prog.packed_starts()
            olds = compiled.olds(buffers, starts) if compiled.olds is not None else ()
            inputs, lengths = tuple(prog.inputs), prog.packed_lengths()
            outs, new_buffers = compiled.fn(inputs, buffers, starts, lengths)
            undo = ex.persistent.undo
            for name, buf in zip(prog.tables, new_buffers):
                ex.persistent.tables[name].buffer = buf
            for (table_no, slot), old in zip(prog.write_slots(), olds):
                ex.persistent.tables[prog.tables[table_no]].record_restore(
                    old, np.asarray(prog.starts[slot], np.int32), undo
                )
        # Dead writes come back as Zeros/Deferred placeholders (regions.py, plan_layout).
        for k, (key, slot) in enumerate(zip(prog.written, compiled.layout)):
            value = slot_value(
                slot, k, outs, compiled.out_rags, prog.lengths, compiled.recipe, inputs, lengths
            )
            if key[0] == "v":
                ex._write_ref(VarRef(key[1]), value, scope)
            else:
                ex._indexed[key[2]] = value
        return prog, compiled, outs

    def _template_key(
        self, ex: Executor, region: RegionPlan, scope: dict[str, int], bucket: bool
    ) -> tuple[Any, ...]:
        """What fixes a region's unrolled structure: scope and the loop bounds' values."""
        names = self._bound_names.get(region.id)
        if names is None:
            names = self._bound_names[region.id] = _free_bound_names(region.nodes, set())
        bounds = tuple(ex._scalar_lookup(n, scope) for n in names)
        return (region.id, bucket, tuple(scope.items()), bounds)

    def replay(self, ex: Executor, template: WideProgram, bucket: bool) -> WideProgram | None:
        """Redo only the host work of a previous walk (inputs, cache plans) with fresh values.

        Returns None when a cache plan's static part (bucket size, shape) or the sharing of
        valid lengths differs from the template: then the caller walks afresh.
        """
        prog = WideProgram(
            steps=template.steps,
            params=template.params,
            input_keys=template.input_keys,
            tables=template.tables,
            dtypes=template.dtypes,
            written=template.written,
            visited=template.visited,
            events=template.events,
            steps_id=template.steps_id,
        )
        undo = ex.persistent.undo
        tables = ex.persistent.tables
        for event in template.events:
            kind = event[0]
            if kind == "in":
                _, key, ref, sc, node = event
                try:
                    value = None
                    if key[0] == "m":  # prefix-table entry: override, else the cached weight
                        value = ex._indexed.get(key[2])
                        if value is None:
                            value = ex._pristine.get(key[2])
                    if value is None:
                        value = ex._read_ref(ref, sc)
                except SimulationError as err:
                    raise NodeFailure(node, err) from None
                if isinstance(value, (Zeros, Deferred)):
                    value = value.exact()
                if isinstance(value, Ragged):
                    prog.input_rags.append(Rag(value.axis, prog.length_slot(value.length)))
                    value = value.data
                else:
                    prog.input_rags.append(None)
                prog.inputs.append(value)
            elif kind == "read":
                _, node, sc, pos = event
                try:
                    decl = ex._persistent_decl(node.src.name)
                    plan = tables[decl.name].prepare_read(
                        ex._cache_selection(node.src, sc), undo, bucket=bucket
                    )
                except OpenInferError as err:
                    raise NodeFailure(node, err) from None
                lslot = prog.length_slot(plan.length) if plan.axis is not None else None
                step = template.steps[pos]
                if (plan.sizes, plan.shape, plan.axis, lslot) != (
                    step[4],
                    step[5],
                    step[6],
                    step[7],
                ):
                    return None
                prog.starts.append(plan.starts)
            elif kind == "write":
                _, node, sc, pos = event
                try:
                    decl = ex._persistent_decl(node.dst.name)
                    starts, sizes, want = tables[decl.name].prepare_write(
                        ex._cache_selection(node.dst, sc), undo
                    )
                except OpenInferError as err:
                    raise NodeFailure(node, err) from None
                step = template.steps[pos]
                if (sizes, want) != (step[5], step[6]):
                    return None
                prog.starts.append(starts)
            else:
                _, name, dtype = event
                ex._dtypes[name] = dtype
        return prog

    def _get(self, ex: Executor, region: RegionPlan, prog: WideProgram) -> Any:
        if prog.steps_id is None:
            # Number distinct step lists once; the signature then carries a small int.
            steps_key = (region.id, tuple(prog.steps), tuple(prog.written))
            prog.steps_id = self._steps_ids.setdefault(steps_key, len(self._steps_ids))
        signature = (
            prog.steps_id,
            tuple((x.shape, x.dtype, r) for x, r in zip(prog.inputs, prog.input_rags)),
            tuple(ex.persistent.tables[t].buffer.shape for t in prog.tables),
            len(prog.lengths),
            self.lean_for(region),
        )
        compiled = self.cache.get(signature)
        if compiled is None:
            try:
                buffers = [ex.persistent.tables[t].buffer for t in prog.tables]
                compiled = self._build(prog, buffers, region, self.lean_for(region))
                if self.wrap is not None:
                    compiled.fn = self.wrap(f"region {region.id}", compiled.fn)
                self.compilations += 1
            except NeedExact:
                self.exact_fallbacks += 1
                compiled = _NEEDS_EXACT
            self.cache[signature] = compiled
        return compiled

    def _build(
        self, prog: WideProgram, buffers: list[Any], region: RegionPlan, lean: bool
    ) -> _Compiled:
        steps = list(prog.steps)
        params = {id(p): p for p in prog.params}
        keys = list(prog.input_keys)
        rags = list(prog.input_rags)
        dtypes = dict(prog.dtypes)
        written = list(prog.written)
        out_rags: list[Rag | None] = []
        shapes: dict[int, NodeShapes] = {}
        layout: list[Slot] = []
        nodes = {id(n): n for n, _sc, _i in prog.visited}

        def run(
            inputs: tuple[Any, ...],
            buffers: tuple[Any, ...] | None,
            starts: Any,
            lengths: Any,
            target: int = -1,
        ) -> Any:
            # target >= 0: the recipe of one deferred write: no tables (reads give dummy
            # zeros, which XLA drops with everything else the write does not need).
            record = target < 0
            if record:
                out_rags.clear()
            env: dict[Key, tuple[Any, Rag | None]] = {
                k: (x, r) for k, x, r in zip(keys, inputs, rags)
            }
            # Keys whose value depends on a table read or a padded input: always returned.
            tainted: set[Key] = {k for k, r in zip(keys, rags) if r is not None}
            zero_ids: dict[int, Any] = {}  # untouched assign zeros (kept alive: unique ids)
            bufs = list(buffers) if buffers is not None else []
            for pos, step in enumerate(steps):
                kind = step[0]
                info = NodeShapes()
                if record:
                    shapes[pos] = info
                if kind == "op":
                    _, node_id, ins, out, pid, out_code = step
                    node = nodes.get(node_id)
                    opdef = registry.get(node.op) if node is not None else None
                    assert opdef is not None
                    xs = [env[k][0] for k in ins]
                    rs = [env[k][1] for k in ins]
                    ds = [dtypes[k] for k in ins]
                    for x, r, d in zip(xs, rs, ds):
                        info.input_shapes.append(_shape(x, r))
                        info.input_dtypes.append(d.short)
                    try:
                        y, rag = apply_op(opdef, xs, rs, lengths, ds, params[pid])
                    except NeedExact:
                        raise
                    except (OpenInferError, TypeError, ValueError, IndexError) as err:
                        raise NodeFailure(node, err) from err
                    want = DType(out_code).numpy
                    if y.dtype != want:
                        y = y.astype(want)
                    if self.constrain is not None:
                        y = self.constrain(out[1], y)
                    env[out] = (y, rag)
                    _mark(tainted, out, any(k in tainted for k in ins))
                    info.output_shapes.append(_shape(y, rag))
                    info.output_dtypes.append(DType(out_code).short)
                elif kind == "assign":
                    _, key, shape, code = step
                    zeros = jnp.zeros(shape, DType(code).numpy)
                    zero_ids[id(zeros)] = zeros
                    env[key] = (zeros, None)
                    _mark(tainted, key, False)
                    info.output_shapes.append(list(shape))
                    info.output_dtypes.append(DType(code).short)
                elif kind == "transfer":
                    _, src, dst = step
                    env[dst] = env[src]
                    _mark(tainted, dst, src in tainted)
                elif kind == "read":
                    _, _node_id, t, slot, sizes, shape, axis, lslot, dst, code = step
                    rag = Rag(axis, lslot) if axis is not None else None
                    if not record:
                        env[dst] = (jnp.zeros(shape, DType(code).numpy), rag)
                        continue
                    buf = bufs[t]
                    idx = tuple(starts[slot, k] for k in range(buf.ndim))
                    block = jax.lax.dynamic_slice(buf, idx, sizes).reshape(shape)
                    env[dst] = (block, rag)
                    tainted.add(dst)
                    info.output_shapes.append(_shape(block, rag))
                    info.output_dtypes.append(DType(code).short)
                elif kind == "write":
                    if not record:
                        continue
                    _, node_id, t, src, slot, sizes, want, code = step
                    value, rag = env[src]
                    if rag is not None:
                        raise NeedExact("a padded value is written into a cache table")
                    if tuple(value.shape) != tuple(want):
                        raise NodeFailure(
                            nodes[node_id],
                            SimulationError(
                                f"value shape {list(value.shape)} does not match the entry shape {list(want)}"
                            ),
                        )
                    if value.dtype != DType(code).numpy:
                        raise NodeFailure(
                            nodes[node_id],
                            SimulationError(
                                f"value dtype {value.dtype} does not match the table's {DType(code).short}"
                            ),
                        )
                    buf = bufs[t]
                    idx = tuple(starts[slot, k] for k in range(buf.ndim))
                    bufs[t] = jax.lax.dynamic_update_slice(buf, value.reshape(sizes), idx)
                    info.input_shapes.append(list(value.shape))
            if not record:
                return env[written[target]][0]
            slots, returned = plan_layout(
                region,
                written,
                lambda key: key[1] if key[0] == "v" else None,
                env,
                zero_ids,
                tainted,
                lean,
            )
            layout[:] = slots
            outs = []
            for key in returned:
                value, rag = env[key]
                outs.append(value)
                out_rags.append(rag)
            return tuple(outs), tuple(bufs)

        writes = [(s[2], s[4], s[5]) for s in steps if s[0] == "write"]

        def read_olds(buffers: tuple[Any, ...], starts: Any) -> tuple[Any, ...]:
            return tuple(
                jax.lax.dynamic_slice(
                    buffers[t], tuple(starts[slot, k] for k in range(buffers[t].ndim)), sizes
                )
                for t, slot, sizes in writes
            )

        fn = jax.jit(run, donate_argnums=(1,))
        olds_fn = jax.jit(read_olds) if writes else None
        buffers0 = tuple(jax.ShapeDtypeStruct(b.shape, b.dtype) for b in buffers)
        # Trace now so NeedExact and node errors surface before any buffer is donated.
        fn.trace(tuple(prog.inputs), buffers0, prog.packed_starts(), prog.packed_lengths())
        recipe = None
        if any(slot[0] == "deferred" for slot in layout):
            recipe = jax.jit(
                lambda inputs, lengths, k: run(inputs, None, None, lengths, k), static_argnums=2
            )
        return _Compiled(fn, olds_fn, list(out_rags), shapes, list(layout), recipe)


def _mark(tainted: set[Key], key: Key, dirty: bool) -> None:
    """Record whether `key` now holds a value that must be returned (see plan_layout)."""
    if dirty:
        tainted.add(key)
    else:
        tainted.discard(key)


def _shape(x: Any, rag: Rag | None) -> list[int]:
    shape = [int(d) for d in x.shape]
    if rag is not None:
        shape[rag.axis] = -1 - rag.slot  # a padded axis: filled in with its length per call
    return shape


def _free_bound_names(nodes: tuple[Node, ...], inner: set[str]) -> tuple[str, ...]:
    """Loop-bound names of a region that are not indices of loops inside it (host scalars)."""
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Loop):
            for bound in (node.start, node.end):
                if isinstance(bound, str) and bound not in inner and bound not in out:
                    out.append(bound)
            for name in _free_bound_names(node.body, inner | {node.index}):
                if name not in out:
                    out.append(name)
    return tuple(out)
