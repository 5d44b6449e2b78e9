"""Wide regions: pure ops, cache reads/writes and whole loops in ONE jitted function.

A wide region runs in two phases. On the host, a walk over its nodes (loops unrolled,
`W[l]` resolved to model tensors, cache indices resolved to ints) grows the tables that
will be written (capacity doubling, counts) and produces a *program*: a flat list of
static steps plus the runtime operands (input arrays, table buffers, one int32 vector of
block offsets and valid lengths). The program's static part is the compile-cache key, so
the next decode step (same shapes, new `step` value, same length bucket) reuses the
executable. Then XLA runs the program: table buffers are donated and updated in place
with `dynamic_update_slice`. This is how a whole decode step (12 layers, KV cache) becomes
one dispatch instead of ~70 (DESIGN.md, "Pure regions go to XLA").

The host work of a call is O(1) in the number of layers and cache ops once the region has
been walked (symbolic.py): the walk plans with the scalars named in cache indices, the
tables' counts and the valid lengths of padded inputs as plan variables, so every block
offset, valid length and new count is an affine function of them, valid under recorded
guards. A later call evaluates guards and functions with a few NumPy operations, reuses
the executor's bound model tensors, and walks again only when a guard fails (a new
bucket, a table that must grow, an index out of range).

Persistent variables that are not tables (`cache.read state >> s`, `cache.write s >>
state`) are region inputs and outputs too, so a streaming step with persistent state is
one XLA call.

Atomic steps: a call pushes one undo record for the counts of the tables it touches and
one for the blocks it overwrote (the block read before the call, or zeros for a block
beyond the counts at the region's start: an append) and one per persistent variable it
writes; a failed step replays them backwards (docs/semantics.md).
"""

from __future__ import annotations

import operator
import sys
import time
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
    MemoryKind,
    Node,
    Op,
    Transfer,
    VarRef,
)
from openinfer_jax.ops import registry
from openinfer_jax.ops.nn_jax import partitioned
from openinfer_jax.sim.caches import TableCache
from openinfer_jax.sim.executable_store import loaded_copy
from openinfer_jax.sim.interrupts import atomic
from openinfer_jax.sim.long_loops import LoopTooLong, unrolled_iterations
from openinfer_jax.sim.plan import RegionPlan
from openinfer_jax.sim.ragged import NeedExact, Rag, apply_op
from openinfer_jax.sim.regions import NodeFailure, NodeShapes, Slot, plan_layout, slot_value
from openinfer_jax.sim.stats import persistent_cache_hits
from openinfer_jax.sim.symbolic import AffinePlan, SymInt, pin, recording
from openinfer_jax.sim.values import Deferred, Packed, Ragged, Zeros

if TYPE_CHECKING:
    from openinfer_jax.sim.executable_store import ExecutableStore
    from openinfer_jax.sim.executor import Executor

__all__ = ["WideProgram", "WideRunner", "unshared"]

# ("v", name) a variable, ("m", decl, tensor) a prefix-table entry, ("p", name) a
# persistent variable that is not a table.
Key = tuple[str, ...]
Scope = dict[str, int]

# Templates kept per template key (scope and loop bounds): executors at different contexts
# of one simulator alternate between a few.
_TEMPLATES_PER_KEY = 4


@dataclass
class WideProgram:
    """What the host walk produced for one call of a wide region (and the template a later
    call replays, see `WideRunner.run`)."""

    steps: list[tuple[Any, ...]] = field(default_factory=list)
    params: list[dict[str, Any]] = field(default_factory=list)
    input_keys: list[Key] = field(default_factory=list)
    inputs: list[Any] = field(default_factory=list)
    input_rags: list[Rag | None] = field(default_factory=list)
    # How each input is fetched again: (ref, scope, node); inputs[:dynamic] change from call
    # to call (variables, persistent values), the rest are model tensors.
    input_sources: list[tuple[VarRef, Scope, Node]] = field(default_factory=list)
    dynamic: int = 0
    tables: list[str] = field(default_factory=list)
    starts: list[tuple[int, ...]] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    dtypes: dict[Key, DType] = field(default_factory=dict)
    written: list[Key] = field(default_factory=list)
    visited: list[tuple[Node, Scope, int | None]] = field(default_factory=list)
    # Cache writes in program order: (table, starts slot, block sizes, fresh); a fresh
    # block lay beyond the counts at the region's start (zeros: nothing to read for undo).
    writes: list[tuple[str, int, tuple[int, ...], bool]] = field(default_factory=list)
    assigned: dict[str, DType] = field(default_factory=dict)
    replayable: bool = True
    steps_id: int | None = None
    # Replay (symbolic.py): the affine plan, the table capacities it assumed, the order of
    # the new counts in its outputs, and the signature of the dynamic inputs.
    plan: AffinePlan | None = None
    capacities: dict[str, dict[str, int]] = field(default_factory=dict)
    count_axes: list[tuple[str, str]] = field(default_factory=list)
    dynamic_signature: tuple[Any, ...] = ()
    # Per dynamic input, how a replay fetches and checks it: (position, persistent name or
    # None, ref, scope, shape, dtype, padded axis or None).
    binders: list[tuple[Any, ...]] = field(default_factory=list)
    compiled: Any = None
    input_position: dict[Key, int] = field(default_factory=dict)  # input key -> its index
    model_entries: tuple[str, ...] = ()  # entry names of the prefix-table inputs
    # The plan variables of the last replay, and the operands evaluated ahead for the
    # values a next call would have if they moved on by the same steps (`_foresee`).
    last_x: tuple[int, ...] | None = None
    guess: tuple[tuple[int, ...], tuple[Any, ...], _Streak | None] | None = None
    stores: Any = None  # _Stores: how each call's outputs are stored (by `run`)

    width: int = 1  # columns of the block-offset matrix (the largest table rank)

    def packed_ints(self) -> np.ndarray:
        """Block offsets (row per cache op) and valid lengths as ONE int32 vector: one
        host-to-device copy per call (it matters on a GPU)."""
        width = self.width
        out = np.zeros(len(self.starts) * width + len(self.lengths), np.int32)
        for row, starts in enumerate(self.starts):
            out[row * width : row * width + len(starts)] = starts
        out[len(self.starts) * width :] = self.lengths
        return out

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
    recipe: Any = None  # recipe(inputs, ints, k): write k alone (Deferred slots)
    fresh: bool = True  # not called yet: XLA compiles it at its first call (sim/stats.py)
    trace: Any = None  # traces `fn` (fills out_rags, shapes, layout, recipe)
    olds_args: tuple[Any, ...] = ()  # abstract arguments of `olds`
    recipe_fn: Any = None
    # Recycled outputs (WideRunner.recycle): the outputs' shapes and dtypes; `fn` then
    # takes its lane's last outputs as a fourth, donated argument.
    slot_avals: tuple[Any, ...] | None = None
    # Loads another copy of the executable (the second lane), or None (lanes share `fn`).
    copy: Any = None
    second: Any = None  # the second lane's executable, loaded at its first call

    def with_layout(self) -> None:
        """Keep the recipe once the layout is known: only deferred slots need it."""
        deferred = any(slot[0] == "deferred" for slot in self.layout)
        self.recipe = self.recipe_fn if deferred else None

    def lane(self, k: int) -> Any:
        """The executable of lane `k` of a recycled region: lane 0 is `fn`, lane 1 a second
        loaded copy of the same executable (command buffers of its own), loaded at its
        first call; where no copy can be loaded, both lanes run `fn` (correct, but its
        command buffers then see their output buffers move at every call)."""
        if k == 0 or self.copy is None:
            return self.fn
        if self.second is None:
            try:
                self.second = _Executable(self.copy(), self.fn.fallback)
            except Exception:  # e.g. a backend that cannot serialize it: one lane
                self.copy = None
                return self.fn
        return self.second


@dataclass
class _Stores:
    """How a template's outputs go into the executor's state after each call: the
    variables returned as they are (one dict update), the rest slot by slot in program
    order, and the variable names the yield lock checks."""

    compiled: _Compiled
    names: tuple[str, ...]
    positions: tuple[int, ...]  # of `names` in the returned outputs
    packed_names: tuple[str, ...]
    packed: tuple[tuple[Any, ...], ...]  # per packed name: (output, offset, shape, dtype)
    others: tuple[tuple[int, Key, Slot], ...]
    checked: tuple[str, ...]

    @staticmethod
    def of(prog: WideProgram, compiled: _Compiled) -> _Stores:
        names: list[str] = []
        positions: list[int] = []
        packed_names: list[str] = []
        packed: list[tuple[Any, ...]] = []
        others: list[tuple[int, Key, Slot]] = []
        keys = list(prog.written)
        # A key written twice keeps program order: everything then goes slot by slot.
        batch = len(set(keys)) == len(keys)
        for k, (key, slot) in enumerate(zip(keys, compiled.layout)):
            plain = slot[0] == "out" and compiled.out_rags[slot[1]] is None
            if batch and key[0] == "v" and plain:
                names.append(key[1])
                positions.append(slot[1])
            elif batch and key[0] == "v" and slot[0] == "packed":
                packed_names.append(key[1])
                packed.append(slot[1:])
            else:
                others.append((k, key, slot))
        checked = tuple(key[1] for key in keys if key[0] == "v")
        return _Stores(
            compiled,
            tuple(names),
            tuple(positions),
            tuple(packed_names),
            tuple(packed),
            tuple(others),
            checked,
        )


@dataclass
class _Call:
    """One call's operands and the template they came from."""

    prog: WideProgram
    inputs: tuple[Any, ...]
    ints: np.ndarray
    lengths: list[int]
    counts: dict[str, dict[str, int]] | None = None  # new counts (replays; walks set them)
    x: tuple[int, ...] | None = None  # a replay's plan variables
    both: Any = None  # its plan's guards and outputs there (AffinePlan.values), if known
    streak: _Streak | None = None  # how its operands were foreseen, if they were


class _Streak:
    """Calls whose plan variables move on by the same step `dx` (a decode step's position
    and counts grow by one): the plan's guards hold for `left` more such moves, so each
    next call's operands are the last call's plus what one move adds, with no guard or
    formula evaluated (`WideRunner._foresee`)."""

    __slots__ = ("counts", "dx", "ints", "left", "lengths")

    def __init__(self, prog: WideProgram, dx: tuple[int, ...], left: int) -> None:
        assert prog.plan is not None
        step = prog.plan.step(dx)[len(prog.plan.gvec) :]
        n_starts = len(prog.starts) * prog.width
        n_ints = n_starts + len(prog.lengths)
        moved = step[n_starts:n_ints].tolist()
        grown = step[n_ints:].tolist()
        self.dx = dx
        self.left = left
        # What one move adds: to the packed int32 operands, to the valid lengths that
        # move (index, added), to the counts that grow (table, axis, added).
        self.ints = step[:n_ints].astype(np.int32)
        self.lengths = tuple((k, d) for k, d in enumerate(moved) if d)
        self.counts = tuple((t, a, d) for (t, a), d in zip(prog.count_axes, grown) if d)

    def advance(
        self, ints: np.ndarray, lengths: list[int], counts: dict[str, dict[str, int]]
    ) -> tuple[np.ndarray, list[int], dict[str, dict[str, int]]]:
        """The next call's operands from this call's (one move fewer left)."""
        self.left -= 1
        lengths = lengths.copy()
        for k, d in self.lengths:
            lengths[k] += d
        counts = {name: axes.copy() for name, axes in counts.items()}
        for name, axis, d in self.counts:
            counts[name][axis] += d
        return ints + self.ints, lengths, counts


@dataclass
class _Binding:
    """An executor's model tensors for one template (loaded once, reused every call)."""

    prog: WideProgram
    model_inputs: tuple[Any, ...]


_NEEDS_EXACT: Any = object()


class WideRunner:
    """Builds, caches and runs wide-region programs for one simulator."""

    def __init__(self) -> None:
        self.cache: dict[Any, Any] = {}
        self.templates: dict[tuple[Any, ...], list[WideProgram]] = {}
        self._bound_names: dict[int, tuple[str, ...]] = {}
        self._steps_ids: dict[Any, int] = {}
        # template key -> whether its loops fit Limits.max_unrolled_iterations (long_loops.py)
        self.unroll_fits: dict[tuple[Any, ...], bool] = {}
        # Sharding hooks (docs/sharding.md, set by sim/sharding.py): pin a planned
        # activation's sharding as it is produced; wrap a region's jitted function.
        self.constrain: Any = None
        self.wrap: Any = None
        self.lean = True  # leave dead outputs out (regions.py RegionCompiler.lean)
        # Compiled executables kept across processes (executable_store.py); set by the
        # simulator when the compile cache is on.
        self.store: ExecutableStore | None = None
        # Recycled outputs (set by the simulator on a GPU): a call donates the buffers of
        # its region's outputs of two calls before, so XLA writes the new outputs into the
        # same memory. XLA runs a region as CUDA-graph command buffers and re-records them
        # (about 1.3 ms for a GPT-2-small step) whenever a buffer they write moved. The last
        # call's outputs cannot be donated (the variable store holds them, the step's
        # rollback snapshot too), so calls alternate between two lanes, two loaded copies
        # of the executable, each with its own command buffers and its own outputs: with
        # every output aliased to a donated buffer of its lane, nothing moves (`_lane`).
        self.recycle = False
        # With lean regions: the small dead `assign`s of a region come back as one flat
        # output per dtype (regions.py plan_layout), viewed if fetched (one dispatch). Set
        # by the simulator on a GPU, where each output of a call, donated and recycled,
        # costs the host microseconds, and a decode step returns one per temporary of its
        # last layer. (On a CPU the view a fetch makes costs more than it saves.)
        self.pack = False

    def lean_for(self, region: RegionPlan) -> bool:
        """Whether `region` leaves its dead outputs out (never when sharded)."""
        return region.lean and self.lean and self.constrain is None and self.wrap is None

    # ---- host walk ----------------------------------------------------------------------
    def walk(self, ex: Executor, region: RegionPlan, scope: Scope, bucket: bool) -> WideProgram:
        """Resolve every reference and cache index of the region (loops unrolled), grow the
        tables' counts (one undo record per table), and record the affine replay plan."""
        walk = _Walk(self, ex, bucket)
        with recording() as rec:
            try:
                walk.visit(region.nodes, scope)
            finally:
                finals = walk.finish_counts()
        prog = walk.prog
        # Dynamic inputs first, model tensors and constants after (no node writes them):
        # a replay rebinds only the first part.
        decls = ex.vars.decls

        def fixed(key: Key) -> bool:
            if key[0] == "m":
                return True
            decl = decls.get(key[1]) if key[0] == "v" else None
            return decl is not None and decl.kind is MemoryKind.CONSTANT

        order = sorted(range(len(prog.inputs)), key=lambda k: fixed(prog.input_keys[k]))
        for name in ("input_keys", "inputs", "input_rags", "input_sources"):
            values = getattr(prog, name)
            setattr(prog, name, [values[k] for k in order])
        prog.dynamic = sum(1 for key in prog.input_keys if not fixed(key))
        prog.model_entries = tuple(key[2] for key in prog.input_keys if key[0] == "m")
        prog.input_position = {key: k for k, key in enumerate(prog.input_keys)}
        grew = any(ex.persistent.tables[t].capacity != cap for t, cap in walk.capacity.items())
        if prog.replayable and not grew:
            variables = [
                *walk.free_names,
                *(("count", t, a) for t, counts in walk.initial.items() for a in counts),
                *walk.input_lengths,
            ]
            width = prog.width
            flat: list[Any] = []
            for starts in prog.starts:
                flat += [*starts, *([0] * (width - len(starts)))]
            prog.count_axes = [(t, a) for t, counts in finals.items() for a in counts]
            outputs = [*flat, *prog.lengths, *(finals[t][a] for t, a in prog.count_axes)]
            prog.plan = rec.plan(variables, outputs)
            prog.capacities = walk.capacity
        prog.starts = [tuple(int(s) for s in row) for row in prog.starts]
        prog.lengths = [int(n) for n in prog.lengths]
        prog.dynamic_signature = _signature(prog.inputs[: prog.dynamic], prog.input_rags)
        prog.binders = [
            (pos, key[1] if key[0] == "p" else None, ref, sc, *prog.dynamic_signature[pos])
            for pos, (key, (ref, sc, _node)) in enumerate(
                zip(prog.input_keys[: prog.dynamic], prog.input_sources)
            )
        ]
        return prog

    # ---- compile and run --------------------------------------------------------------------
    def run(
        self, ex: Executor, region: RegionPlan, scope: Scope
    ) -> tuple[WideProgram, _Compiled, Any]:
        """Replay (or walk), compile (cached), run; store outputs and undo records."""
        bucket = ex.sim.bucketing
        tkey = self._template_key(ex, region, scope, bucket)
        fits = self.unroll_fits.get(tkey)
        if fits is None:
            budget = ex.sim.limits.max_unrolled_iterations
            fits = unrolled_iterations(region.nodes, scope, ex.vars.bound, budget) <= budget
            self.unroll_fits[tkey] = fits
        if not fits:
            raise LoopTooLong(region.id)
        templates = self.templates.setdefault(tkey, [])
        call = None
        for template in templates:
            call = self._replay(ex, template, scope)
            if call is not None:
                break
        if call is None:
            prog = self.walk(ex, region, scope, bucket)
            compiled = self._get(ex, region, prog)
            if compiled is _NEEDS_EXACT:
                prog = self.walk(ex, region, scope, False)
                prog.plan = None  # the first walk already grew the counts it judged from
                compiled = self._get(ex, region, prog)
            prog.compiled = compiled
            if prog.plan is not None:
                templates.insert(0, prog)
                del templates[_TEMPLATES_PER_KEY:]
            call = _Call(prog, tuple(prog.inputs), prog.packed_ints(), prog.lengths)
        prog, compiled = call.prog, call.prog.compiled
        outs = self._execute(ex, call, compiled, region.id)
        ex.vars.dtypes.update(prog.assigned)
        stores = prog.stores
        if stores is None or stores.compiled is not compiled:
            stores = prog.stores = _Stores.of(prog, compiled)
        # The walk checked each written name against the graph (Variables.check_writable:
        # static); what can change between calls is the yield lock (write_check).
        store, check = ex.vars.store, ex.vars.write_check
        if check is not None and ex.writes_locked():
            for name in stores.checked:
                check(name)
        if stores.names:  # variables returned as they are: one update
            store.update(zip(stores.names, map(outs.__getitem__, stores.positions)))
        if stores.packed_names:  # small dead temporaries, each cut out when first read
            packs = [
                Packed(outs[at], offset, shape, dtype) for at, offset, shape, dtype in stores.packed
            ]
            store.update(zip(stores.packed_names, packs))
        # Dead writes come back as Zeros/Deferred placeholders (regions.py, plan_layout).
        for k, key, slot in stores.others:
            value = slot_value(slot, k, outs, compiled.out_rags, call.lengths, compiled.recipe,
                               call.inputs, call.ints)  # fmt: skip
            if key[0] == "v":
                store[key[1]] = value
            elif key[0] == "m":
                ex.vars.entries[key[2]] = value
            else:
                with atomic():
                    ex.persistent.set_value(key[1], value)
        if call.x is not None:
            self._foresee(prog, call)
        return prog, compiled, outs

    def _execute(self, ex: Executor, call: _Call, compiled: _Compiled, region_id: int) -> Any:
        """Run the executable: new counts, donated table buffers, undo records, as one
        transaction (interrupts.atomic): each table must hold its returned buffer, with the
        undo records, before a signal lands."""
        prog = call.prog
        slots: tuple[Any, ...] = ()
        fn, lanes, lane = compiled.fn, None, 0
        if compiled.slot_avals is not None:
            lanes, lane, slots = _lane(ex, compiled, region_id)
            fn = compiled.lane(lane)
        tables = ex.persistent.tables
        undo = ex.persistent.undo
        with atomic():
            buffers = tuple(tables[name].buffer for name in prog.tables)
            # Undo blocks first, in their own call: reading a buffer in the same computation
            # that updates it in place makes XLA copy the whole buffer.
            olds = compiled.olds(buffers, call.ints) if compiled.olds is not None else ()
            if compiled.fresh:  # XLA compiles it now: counted for this executor
                compiled.fresh = False
                outs, new_buffers = ex.compile_stats.first_call(
                    fn, call.inputs, buffers, call.ints, slots
                )
            else:
                called = time.perf_counter_ns()
                outs, new_buffers = fn(call.inputs, buffers, call.ints, slots)
                ex.dispatch_ns += time.perf_counter_ns() - called
            del slots
            if lanes is not None:
                lanes.outs[lane], lanes.last = outs, lane
            # The new counts after the call (nothing reads them before it returns).
            old = None
            if call.counts is not None:
                old = {name: tables[name].counts for name in call.counts}
                for name, counts in call.counts.items():
                    tables[name].counts = counts
            for name, buf in zip(prog.tables, new_buffers):
                tables[name].buffer = buf
            if old or prog.writes:
                undo.append(_undo_call(tables, prog, call.ints, olds, old))
        return outs

    def _replay(self, ex: Executor, prog: WideProgram, scope: Scope) -> _Call | None:
        """The operands of a call from a template, or None where its plan does not hold
        (the caller then walks, which also reports any error)."""
        plan = prog.plan
        if plan is None:
            return None
        tables = ex.persistent.tables
        for name, capacity in prog.capacities.items():
            if tables[name].capacity != capacity:
                return None
        inputs = self._bind(ex, prog)
        if inputs is None:
            return None
        xs: list[int] = []
        x = xs.append
        for var in plan.variables:
            kind = var[0]
            if kind == "count":
                x(tables[var[1]].counts[var[2]])
            elif kind == "length":
                x(inputs[1][prog.input_position[var[1]]].length)
            else:
                try:
                    x(ex.vars.index(var[1], scope, var[1]))
                except SimulationError:
                    return None
        at = tuple(xs)
        guess, prog.guess = prog.guess, None
        if guess is not None and guess[0] == at:
            (ints, lengths, counts), streak = guess[1], guess[2]
            return _Call(prog, inputs[0], ints, lengths, counts, at, streak=streak)
        both = plan.values(at)
        out = plan.outputs(both)
        if out is None:
            return None
        ints, lengths, counts = _operands(prog, out)
        return _Call(prog, inputs[0], ints, lengths, counts, at, both)

    @staticmethod
    def _foresee(prog: WideProgram, call: _Call) -> None:
        """Evaluate the plan ahead, after a call was dispatched (while the device runs it):
        for plan variables that move on as they did from the last call to this one, so the
        next call's replay finds its operands ready. Within a streak of equal moves whose
        guards were shown to hold that far (`_Streak`), that is a few additions."""
        at = call.x
        assert at is not None and call.counts is not None
        last, prog.last_x = prog.last_x, at
        plan = prog.plan
        if last is None or plan is None:
            return
        step = tuple(a - b for a, b in zip(at, last))
        ahead = tuple(a + d for a, d in zip(at, step))
        streak = call.streak
        if streak is not None and streak.dx == step:
            operands = streak.advance(call.ints, call.lengths, call.counts)
            prog.guess = (ahead, operands, streak if streak.left else None)
            return
        both = call.both if call.both is not None else plan.values(at)
        moved = plan.moved(both, step)
        out = plan.outputs(moved)
        if out is None:
            return
        left = plan.headroom(moved, step)
        prog.guess = (ahead, _operands(prog, out), _Streak(prog, step, left) if left else None)

    def _bind(
        self, ex: Executor, prog: WideProgram
    ) -> tuple[tuple[Any, ...], dict[int, Any]] | None:
        """This call's input arrays (and its padded inputs by position), or None when one
        differs from the template in shape, dtype or padding."""
        dynamic: list[Any] = []
        padded: dict[int, Any] = {}
        read, values = ex.vars.read, ex.persistent.values
        # The signature check of `_signature`, inline: this runs before every replayed call.
        for pos, persistent, ref, sc, shape, dtype, axis in prog.binders:
            try:
                value = (
                    read(ref, sc) if persistent is None else ex.vars.host_value(values[persistent])
                )
            except SimulationError:
                return None
            if isinstance(value, (Zeros, Deferred)):
                value = value.exact()
            if isinstance(value, Ragged):
                if value.axis != axis:
                    return None
                padded[pos] = value
                value = value.data
            elif axis is not None:
                return None
            if value.shape != shape or value.dtype != dtype:
                return None
            dynamic.append(value)
        binding = ex.region_state.get(id(prog))
        entries = ex.vars.entries
        if (
            binding is None
            or binding.prog is not prog
            or (entries and any(name in entries for name in prog.model_entries))
        ):
            try:
                model = tuple(
                    self._model_input(ex, key, ref, sc)
                    for key, (ref, sc, _node) in zip(
                        prog.input_keys[prog.dynamic :], prog.input_sources[prog.dynamic :]
                    )
                )
            except SimulationError:
                return None
            if any(
                getattr(a, "shape", None) != getattr(b, "shape", None)
                for a, b in zip(model, prog.inputs[prog.dynamic :])
            ):
                return None
            binding = _Binding(prog, model)
            if not entries:
                ex.region_state[id(prog)] = binding
        return (*dynamic, *binding.model_inputs), padded

    @staticmethod
    def _model_input(ex: Executor, key: Key, ref: VarRef, sc: Scope) -> Any:
        value = None
        if key[0] == "m":  # else a constant
            value = ex.vars.entries.get(key[2])
            if value is None:
                value = ex.vars.weights.get(key[2])
        if value is None:
            value = ex.vars.read(ref, sc)
        if isinstance(value, (Zeros, Deferred)):
            value = value.exact()
        return value

    def _template_key(
        self, ex: Executor, region: RegionPlan, scope: Scope, bucket: bool
    ) -> tuple[Any, ...]:
        """What fixes a region's unrolled structure: scope and the loop bounds' values."""
        names = self._bound_names.get(region.id)
        if names is None:
            names = self._bound_names[region.id] = _free_bound_names(region.nodes, set())
        bounds = tuple(ex.vars.scalar(n, scope) for n in names)
        return (region.id, bucket, tuple(scope.items()), bounds)

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
            # Which writes overwrite written blocks: the executable reads those for undo.
            tuple(fresh for *_, fresh in prog.writes),
        )
        compiled = self.cache.get(signature)
        if compiled is None:
            try:
                buffers = [ex.persistent.tables[t].buffer for t in prog.tables]
                lean = self.lean_for(region)
                compiled = self._build(prog, buffers, region, lean)
                kept = False
                if self.store is not None and self.constrain is None and self.wrap is None:
                    description = _description(region, prog, buffers, lean, self.recycle, self.pack)
                    kept = _keep(self.store, ex, compiled, description)
                if not kept:
                    # Traced now so NeedExact and node errors surface before any buffer
                    # is donated. A recycled region is compiled now too: its lanes are
                    # copies of that executable.
                    traced = compiled.trace()
                    if self.recycle:
                        _compile_here(ex, compiled, traced)
                if self.wrap is not None:
                    compiled.fn = self.wrap(f"region {region.id}", compiled.fn)
            except NeedExact:
                ex.compile_stats.exact_fallbacks += 1
                compiled = _NEEDS_EXACT
            self.cache[signature] = compiled
        return compiled

    def _build(
        self, prog: WideProgram, buffers: list[Any], region: RegionPlan, lean: bool
    ) -> _Compiled:
        """The region's jitted function, traced now (`_keep` may swap in a stored or
        compiled executable before the first call)."""
        steps = list(prog.steps)
        params = {id(p): p for p in prog.params}
        keys = list(prog.input_keys)
        rags = list(prog.input_rags)
        dtypes = dict(prog.dtypes)
        written = list(prog.written)
        n_starts, width = len(prog.starts), prog.width
        out_rags: list[Rag | None] = []
        shapes: dict[int, NodeShapes] = {}
        layout: list[Slot] = []
        nodes = {id(n): n for n, _sc, _i in prog.visited}

        def unpack(ints: Any) -> tuple[Any, Any]:
            return ints[: n_starts * width].reshape(n_starts, width), ints[n_starts * width :]

        def run(
            inputs: tuple[Any, ...],
            buffers: tuple[Any, ...] | None,
            ints: Any,
            target: int = -1,
        ) -> Any:
            # target >= 0: the recipe of one deferred write: no tables (reads give dummy
            # zeros, which XLA drops with everything else the write does not need).
            record = target < 0
            if record:
                out_rags.clear()
            starts, lengths = unpack(ints)
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
                        # A sharded region: ops keep their partitionable formulation.
                        with partitioned(self.constrain is not None):
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
                elif kind == "pwrite":
                    _, node_id, src, dst, want, code = step
                    value, rag = env[src]
                    if rag is not None:
                        raise NeedExact("a padded value is written into a persistent variable")
                    _check_write(nodes[node_id], dst[1], value, want, DType(code), "declaration")
                    env[dst] = (value, None)
                    _mark(tainted, dst, src in tainted)
                    info.input_shapes.append(list(value.shape))
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
                    _check_write(nodes[node_id], None, value, want, DType(code), "entry")
                    buf = bufs[t]
                    idx = tuple(starts[slot, k] for k in range(buf.ndim))
                    bufs[t] = jax.lax.dynamic_update_slice(buf, value.reshape(sizes), idx)
                    info.input_shapes.append(list(value.shape))
            if not record:
                return env[written[target]][0]
            slots, returned, packs = plan_layout(
                region,
                written,
                lambda key: key[1] if key[0] == "v" else None,
                env,
                zero_ids,
                tainted,
                lean,
                pack=self.pack,
            )
            layout[:] = slots
            outs = []
            for key in returned:
                value, rag = env[key]
                outs.append(value)
                out_rags.append(rag)
            for members in packs:
                outs.append(jnp.concatenate([env[key][0].reshape(-1) for key in members]))
                out_rags.append(None)
            return tuple(outs), tuple(bufs)

        table_no = {name: k for k, name in enumerate(prog.tables)}
        olds = [(table_no[t], slot, sizes) for t, slot, sizes, fresh in prog.writes if not fresh]

        def read_olds(buffers: tuple[Any, ...], ints: Any) -> tuple[Any, ...]:
            starts, _lengths = unpack(ints)
            return tuple(
                jax.lax.dynamic_slice(
                    buffers[t], tuple(starts[slot, k] for k in range(buffers[t].ndim)), sizes
                )
                for t, slot, sizes in olds
            )

        buffers0 = tuple(jax.ShapeDtypeStruct(b.shape, b.dtype) for b in buffers)
        args = (tuple(prog.inputs), buffers0, prog.packed_ints())
        recycle = self.recycle

        def call(
            inputs: tuple[Any, ...], buffers: tuple[Any, ...], ints: Any, slots: tuple[Any, ...]
        ) -> Any:
            # `slots`: the last call's outputs (recycled) or (); donated, never read: kept
            # as parameters (keep_unused), JAX aliases each to the output of its shape and
            # dtype.
            return run(inputs, buffers, ints)

        def trace(name: str | None = None) -> Any:
            # Traced before the first call (WideRunner._get; `_keep` skips it when the
            # store has the executable). A `name` names the XLA modules (so JAX's cache
            # files them apart).
            if name is not None:
                call.__name__, read_olds.__name__ = name, f"{name}_olds"
                compiled.fn = jax.jit(call, donate_argnums=(1, 3), keep_unused=recycle)
                compiled.olds = jax.jit(read_olds) if olds else None
            traced = compiled.fn.trace(*args, ())
            if recycle:  # again, now with the outputs' buffers as the last argument
                compiled.slot_avals = tuple(traced.out_info[0])
                traced = compiled.fn.trace(*args, compiled.slot_avals)
            compiled.out_rags[:] = out_rags
            compiled.layout[:] = layout
            compiled.with_layout()
            return traced

        compiled = _Compiled(
            jax.jit(call, donate_argnums=(1, 3), keep_unused=recycle),
            jax.jit(read_olds) if olds else None,
            [], shapes, [], None,
        )  # fmt: skip
        compiled.trace = trace
        compiled.olds_args = (buffers0, args[2])
        # Traced only if a deferred value is fetched (with_layout keeps it only then).
        compiled.recipe_fn = jax.jit(
            lambda inputs, ints, k: run(inputs, None, ints, k), static_argnums=2
        )
        return compiled


class _Walk:
    """One host walk of a wide region (see `WideRunner.walk`)."""

    def __init__(self, runner: WideRunner, ex: Executor, bucket: bool) -> None:
        self.runner = runner
        self.ex = ex
        self.bucket = bucket
        self.prog = WideProgram()
        self.written: set[Key] = set()
        self.input_index: dict[Key, int] = {}
        self.table_index: dict[str, int] = {}
        # Plan variables: scalars named in cache indices, tables' counts at the start,
        # valid lengths of padded inputs.
        self.free_names: list[tuple[str, str]] = []
        self.input_lengths: list[tuple[str, Key]] = []
        self.initial: dict[str, dict[str, Any]] = {}
        self.capacity: dict[str, dict[str, int]] = {}
        # The walk's own per-op undo records: the region keeps one per table instead.
        self.scratch: list[Any] = []

    # ---- references ------------------------------------------------------------------------
    def key_of(self, ref: VarRef, sc: Scope) -> Key:
        if not ref.indices:
            return ("v", ref.name)
        return ("m", ref.name, self.ex.vars.entry_key(ref, sc))

    def dst_key(self, ref: VarRef, sc: Scope) -> Key:
        """The key a node writes (checked writable: constants and persistent memory are not)."""
        self.ex.vars.check_writable(ref)
        return self.key_of(ref, sc)

    def use(self, ref: VarRef, sc: Scope, node: Node, key: Key | None = None) -> Key:
        """The key of an input, fetched on its first use."""
        key = key or self.key_of(ref, sc)
        if key in self.written or key in self.input_index:
            return key
        prog = self.prog
        try:
            if key[0] == "p":
                value = self.ex.vars.host_value(self.ex.persistent.values[key[1]])
            else:
                value = self.ex.vars.read(ref, sc)
        except SimulationError as err:
            raise NodeFailure(node, err) from None
        if isinstance(value, (Zeros, Deferred)):
            value = value.exact()
        if isinstance(value, Ragged):
            if self.bucket:
                var = ("length", key)
                self.input_lengths.append(var)
                length = SymInt.variable(var, value.length)
                prog.input_rags.append(Rag(value.axis, prog.length_slot(length)))
                value = value.data
            else:
                prog.input_rags.append(None)
                value = value.exact()
        else:
            prog.input_rags.append(None)
        self.input_index[key] = len(prog.inputs)
        prog.input_sources.append((ref, sc, node))
        prog.input_keys.append(key)
        prog.inputs.append(value)
        prog.dtypes[key] = (
            self.ex.vars.persistent_decl(key[1]).dtype if key[0] == "p" else self.ex.vars.dtype(ref)
        )
        return key

    def define(self, key: Key, dtype: DType) -> None:
        self.written.add(key)
        if key not in self.prog.written:
            self.prog.written.append(key)
        self.prog.dtypes[key] = dtype

    def table(self, name: str) -> int:
        if name not in self.table_index:
            self.table_index[name] = len(self.prog.tables)
            self.prog.tables.append(name)
        return self.table_index[name]

    # ---- tables and plan variables ---------------------------------------------------------
    def touch(self, name: str) -> TableCache:
        """Table `name`; on first use its counts become plan variables, and the region's
        one undo record for them is pushed."""
        tab = self.ex.persistent.tables[name]
        if name in self.initial:
            return tab
        plain = dict(tab.counts)
        undo = self.ex.persistent.undo
        with atomic():

            def restore(tab: TableCache = tab, plain: dict[str, int] = plain) -> None:
                tab.counts = plain

            undo.append(restore)
            tab.counts = {a: SymInt.variable(("count", name, a), n) for a, n in plain.items()}
        self.initial[name] = dict(tab.counts)
        self.capacity[name] = dict(tab.capacity)
        return tab

    def finish_counts(self) -> dict[str, dict[str, Any]]:
        """The touched tables' new counts as formulas; the tables keep them as plain ints."""
        finals = {}
        for name in self.initial:
            tab = self.ex.persistent.tables[name]
            finals[name] = dict(tab.counts)
            tab.counts = {a: int(v) for a, v in tab.counts.items()}
        return finals

    def free_name(self, name: str, value: int) -> int:
        var = ("name", name)
        if var not in self.free_names:
            self.free_names.append(var)
        return SymInt.variable(var, value)

    # ---- nodes -----------------------------------------------------------------------------
    def visit(self, nodes: tuple[Node, ...], sc: Scope) -> None:
        prog = self.prog
        for node in nodes:
            step_no = len(prog.steps)
            if isinstance(node, Loop):
                prog.visited.append((node, sc, None))  # the Loop event precedes its body
            try:
                self.visit_node(node, sc)
            except NodeFailure:
                raise
            except OpenInferError as err:
                raise NodeFailure(node, err) from None
            if not isinstance(node, Loop):
                prog.visited.append((node, sc, step_no if len(prog.steps) > step_no else None))

    def visit_node(self, node: Node, sc: Scope) -> None:
        ex, prog = self.ex, self.prog
        if isinstance(node, Op):
            if registry.get(node.op) is None:
                raise SimulationError(f"unknown op {node.op!r}; see `openinfer ops` for the list")
            ins = tuple(self.use(r, sc, node) for r in node.inputs)
            params, out_dtype, bound = ex.op_setup(node, sc)
            if bound:
                prog.replayable = False  # runtime-scalar params are part of the program
            out = self.dst_key(node.output, sc)
            prog.params.append(params)
            prog.steps.append(("op", id(node), ins, out, id(params), out_dtype.code))
            self.define(out, out_dtype)
        elif isinstance(node, Assign):
            if node.name in ex.vars.decls:
                raise SimulationError(
                    f"assign {node.name!r} shadows a declared variable; pick another name"
                )
            shape = ex.sim.resolve_dims(node.dims, f"assign {node.name!r}")
            ex.vars.dtypes[node.name] = node.dtype
            prog.assigned[node.name] = node.dtype
            prog.steps.append(("assign", ("v", node.name), shape, node.dtype.code))
            self.define(("v", node.name), node.dtype)
        elif isinstance(node, Transfer):
            ex.check_transfer(node)
            src = self.use(node.src, sc, node)
            dst = self.dst_key(node.dst, sc)
            prog.steps.append(("transfer", src, dst))
            self.define(dst, prog.dtypes[src])
        elif isinstance(node, Dep):
            pass
        elif isinstance(node, CacheRead):
            self.cache_read(node, sc)
        elif isinstance(node, CacheWrite):
            self.cache_write(node, sc)
        elif isinstance(node, Loop):
            lo = ex.vars.bound(node.start, sc, node, "start")
            hi = ex.vars.bound(node.end, sc, node, "end")
            prog.steps.append(("loop", id(node), lo, hi))
            for i in range(lo, hi):
                self.visit(node.body, {**sc, node.index: i})
        else:  # pragma: no cover - plan.py only admits the kinds above
            raise SimulationError(f"{type(node).__name__} cannot run in a wide region")

    def cache_read(self, node: CacheRead, sc: Scope) -> None:
        ex, prog = self.ex, self.prog
        decl = ex.vars.persistent_decl(node.src.name)
        dst = self.dst_key(node.dst, sc)
        dst_dtype = ex.vars.dtypes.get(node.dst.name)
        if dst_dtype is not None and dst_dtype is not decl.dtype:
            raise SimulationError(
                f"cache.read {node.src} >> {node.dst}: {node.dst.name!r} is {dst_dtype.short}, the table holds {decl.dtype.short}"
            )
        if decl.name not in ex.persistent.tables:
            if node.src.indices:
                raise SimulationError(f"{node.src.name!r} is not a table; read it without indices")
            src = self.use(node.src, sc, node, key=("p", decl.name))
            prog.steps.append(("transfer", src, dst))
            self.define(dst, decl.dtype)
            return
        tab = self.touch(decl.name)
        sel = ex.vars.selection(node.src, sc, self.free_name)
        plan = tab.prepare_read(sel, self.scratch, bucket=self.bucket)
        slot = len(prog.starts)
        prog.starts.append(plan.starts)
        prog.width = max(prog.width, len(plan.starts))
        lslot = prog.length_slot(plan.length) if plan.axis is not None else None
        sizes = tuple(pin(s) for s in plan.sizes)
        shape = tuple(pin(s) for s in plan.shape)
        prog.steps.append(
            ("read", id(node), self.table(decl.name), slot, sizes, shape, plan.axis, lslot,
             dst, decl.dtype.code)
        )  # fmt: skip
        self.define(dst, decl.dtype)

    def cache_write(self, node: CacheWrite, sc: Scope) -> None:
        ex, prog = self.ex, self.prog
        decl = ex.vars.persistent_decl(node.dst.name)
        src = self.use(node.src, sc, node)
        if decl.name not in ex.persistent.tables:
            if node.dst.indices:
                raise SimulationError(f"{node.dst.name!r} is not a table; write it without indices")
            want = ex.sim.resolve_dims(decl.dims, f"variable {decl.name!r}")
            dst = ("p", decl.name)
            prog.steps.append(("pwrite", id(node), src, dst, want, decl.dtype.code))
            self.define(dst, decl.dtype)
            return
        tab = self.touch(decl.name)
        sel = ex.vars.selection(node.dst, sc, self.free_name)
        fresh = tab.beyond_counts(sel, self.initial[decl.name])
        starts, sizes, want = tab.prepare_write(sel, self.scratch)
        slot = len(prog.starts)
        prog.starts.append(starts)
        prog.width = max(prog.width, len(starts))
        sizes = tuple(pin(s) for s in sizes)
        want = tuple(pin(s) for s in want)
        prog.writes.append((decl.name, slot, sizes, fresh))
        prog.steps.append(
            ("write", id(node), self.table(decl.name), src, slot, sizes, want, decl.dtype.code)
        )


def _description(
    region: RegionPlan,
    prog: WideProgram,
    buffers: list[Any],
    lean: bool,
    recycle: bool,
    pack: bool = False,
) -> tuple[Any, ...]:
    """What the traced function of `prog` computes, without object identities: the
    executable store's key (executable_store.py). Node ids in the steps become what
    `_build`'s `run` reads from the node (an op's name and resolved params)."""
    nodes = {id(n): n for n, _sc, _i in prog.visited}
    params = {id(p): p for p in prog.params}
    steps: list[tuple[Any, ...]] = []
    for step in prog.steps:
        kind = step[0]
        if kind == "op":
            _, node_id, ins, out, pid, code = step
            op = nodes[node_id].op  # type: ignore[attr-defined]
            steps.append(("op", op, ins, out, sorted(params[pid].items()), code))
        elif kind in ("read", "write", "pwrite", "loop"):
            steps.append((kind, *step[2:]))  # step[1] is a node id, used for messages
        else:
            steps.append(step)
    leaves, tree = jax.tree.flatten(tuple(prog.inputs))
    return (
        "wide",
        steps,
        prog.written,
        sorted((repr(k), d.code) for k, d in prog.dtypes.items()),
        prog.input_keys,
        str(tree),
        [(tuple(x.shape), str(x.dtype), bool(getattr(x, "weak_type", False))) for x in leaves],
        prog.input_rags,
        [(tuple(b.shape), str(b.dtype)) for b in buffers],
        (len(prog.starts), prog.width, len(prog.lengths)),
        prog.writes,
        lean,
        sorted(region.used_after),
        recycle,
        pack,
        region.assigns,
    )


def _keep(store: ExecutableStore, ex: Executor, compiled: _Compiled, description: Any) -> bool:
    """Load `compiled`'s executables from the store, or trace, compile now and save them;
    False when the program cannot be stored (the caller traces and compiles as usual).

    A loaded region is counted as a compile-cache hit of `ex`; one compiled here as that
    executor's compilation (or a hit of JAX's own cache).
    """
    key = store.key(description)
    if key is None:
        return False
    stored = store.load(key)
    if stored is not None:
        out_rags, shapes, layout, slots = stored.meta
        compiled.out_rags[:] = out_rags
        compiled.shapes.update(shapes)
        compiled.layout[:] = layout
        compiled.with_layout()
        compiled.fn = _Executable(stored.fn, compiled.fn)
        compiled.copy = stored.copy
        if stored.olds is not None:
            compiled.olds = _Executable(stored.olds, compiled.olds)
        compiled.slot_avals = (
            None if slots is None else tuple(jax.ShapeDtypeStruct(*a) for a in slots)
        )
        compiled.fresh = False
        ex.compile_stats.cache_hits += 1
        return True
    # XLA:CPU cannot serialize an executable that JAX's cache loaded (the copy's calls fail
    # with "Function ... not found"), so only executables compiled here are stored; the
    # modules are named after the key so JAX's cache never serves one the store lacks with
    # another entry's identical module.
    traced = compiled.trace(f"region_{key[:24]}")
    hits = persistent_cache_hits()
    exe = _compile_here(ex, compiled, traced)
    olds = None
    if compiled.olds is not None:
        olds = compiled.olds.trace(*compiled.olds_args).lower().compile()
    if persistent_cache_hits() == hits:
        slots = compiled.slot_avals
        if slots is not None:
            slots = [(tuple(a.shape), np.dtype(a.dtype)) for a in slots]
        meta = (list(compiled.out_rags), dict(compiled.shapes), list(compiled.layout), slots)
        store.save(key, exe, olds, meta)
    if olds is not None:
        compiled.olds = _Executable(olds, compiled.olds)
    return True


def _compile_here(ex: Executor, compiled: _Compiled, traced: Any) -> Any:
    """Compile `traced` now (counted for `ex`): `compiled` runs that executable from now on
    and can load copies of it (its lanes, `_Compiled.lane`). Returns the executable."""
    hits = persistent_cache_hits()
    exe = ex.compile_stats.first_call(lambda: traced.lower().compile())
    compiled.fn = _Executable(exe, compiled.fn)
    compiled.fresh = False
    # Not one that JAX's cache loaded on XLA:CPU (see `_keep`); XLA:CPU has no command
    # buffers, so its lanes lose nothing by sharing one executable.
    if persistent_cache_hits() == hits or ex.device is None or ex.device.platform != "cpu":
        compiled.copy = lambda: loaded_copy(exe)
    return exe


class _Executable:
    """A compiled executable that falls back to its jitted function (which traces and
    compiles) when a call's arguments differ from those it was compiled for, e.g. in weak
    type, which the wide signature does not tell apart."""

    def __init__(self, exe: Any, fallback: Any) -> None:
        self.exe = exe
        self.fallback = fallback

    def __call__(self, *args: Any) -> Any:
        try:
            return self.exe(*args)
        except TypeError:  # raised before running: the arguments are untouched
            return self.fallback(*args)


def _operands(prog: WideProgram, out: np.ndarray) -> tuple[np.ndarray, list[int], Any]:
    """A replay's operands from its plan's outputs: the packed int32 vector (block offsets,
    valid lengths), the valid lengths as ints, the tables' new counts."""
    n_ints = len(prog.starts) * prog.width + len(prog.lengths)
    ints = out[:n_ints].astype(np.int32)
    counts: dict[str, dict[str, int]] = {}
    for (name, axis), value in zip(prog.count_axes, out[n_ints:].tolist()):
        counts.setdefault(name, {})[axis] = value
    return ints, ints[len(prog.starts) * prog.width :].tolist(), counts


def _signature(
    values: list[Any], rags: list[Rag | None], padded: dict[int, Any] | None = None
) -> tuple[Any, ...]:
    """Shapes, dtypes and padding of a call's dynamic inputs (what its executable assumed).

    With `padded` (a replay), a padded input's valid-length slot is compared through the
    plan's guards instead, so only its axis counts here.
    """
    out = []
    for pos, value in enumerate(values):
        rag = rags[pos]
        if padded is not None:
            ragged = padded.get(pos)
            axis = ragged.axis if ragged is not None else None
        else:
            axis = rag.axis if rag is not None else None
        out.append((tuple(value.shape), np.dtype(value.dtype), axis))
    return tuple(out)


def _check_write(
    node: Node, name: str | None, value: Any, want: tuple[int, ...], dtype: DType, what: str
) -> None:
    """A cache write's value must have the entry's (a persistent variable's) shape and dtype."""
    if tuple(value.shape) != tuple(want):
        where = f"cache.write into {name!r}: " if name else ""
        told = f"{dtype.short}{list(want)}" if name else str(list(want))
        raise NodeFailure(
            node,
            SimulationError(
                f"{where}value shape {list(value.shape)} does not match the {what} {told}"
            ),
        )
    if value.dtype != dtype.numpy:
        where = f"cache.write into {name!r}: " if name else ""
        raise NodeFailure(
            node,
            SimulationError(
                f"{where}value dtype {np.dtype(value.dtype)} does not match the table's {dtype.short}"
            ),
        )


@dataclass
class _Lanes:
    """A recycled region's last outputs in one executor, per lane, and the lane of its
    last call (`_lane`)."""

    compiled: _Compiled
    outs: list[tuple[Any, ...] | None] = field(default_factory=lambda: [None, None])
    last: int = 1


def _lane(ex: Executor, compiled: _Compiled, region_id: int) -> tuple[_Lanes, int, tuple[Any, ...]]:
    """The lane a recycled call runs in and the buffers it donates: that lane's last
    outputs, if nothing but this executor's region state references them. The other lane
    than last time's comes first (the variable store, and so the step's rollback snapshot,
    holds the last call's outputs); where neither lane's outputs are free (a caller keeps
    an array from `fetch_device`), that lane gets new zeros."""
    state = ex.region_state.get(("slots", region_id))
    if state is None or state.compiled is not compiled:
        state = ex.region_state[("slots", region_id)] = _Lanes(compiled)
    first = 1 - state.last
    for lane in (first, state.last):
        outs = state.outs[lane]
        if outs is not None and unshared(outs):
            return state, lane, outs
    assert compiled.slot_avals is not None
    zeros = tuple(jnp.zeros(a.shape, a.dtype, device=ex.device) for a in compiled.slot_avals)
    return state, first, zeros


# Reference counts tell who else holds an array only with the GIL (a free-threaded build
# defers some counts): without it nothing is taken as unshared, and nothing is donated.
_EXACT_REFCOUNTS = getattr(sys, "_is_gil_enabled", lambda: True)()


def unshared(arrays: tuple[Any, ...]) -> bool:
    """Whether each of `arrays` is live and referenced by the tuple alone. CPython reference
    counts, compared with those of an object only a tuple holds, counted the same way (so
    the interpreter's own temporary references cancel out)."""
    if not _EXACT_REFCOUNTS:
        return False
    return max(map(sys.getrefcount, arrays), default=0) <= _ALONE and not any(
        map(_IS_DELETED, arrays)
    )


def _refcount_alone(items: tuple[Any, ...]) -> int:
    # Counted through `map` as `unshared` counts its arrays: the same temporary references.
    return max(map(sys.getrefcount, items))


_IS_DELETED = operator.methodcaller("is_deleted")
_ALONE = _refcount_alone((object(),))  # the same in every call: the tuple holds it alone


def _undo_call(
    tables: dict[str, TableCache],
    prog: WideProgram,
    ints: np.ndarray,
    olds: tuple[Any, ...],
    counts: dict[str, dict[str, int]] | None,
) -> Any:
    """The undo record of a call: each written block back as it was, newest first (a
    fresh block back to zeros), then the tables' counts. Built when it runs: a call only
    keeps its operands."""
    width = prog.width

    def restore() -> None:
        olds_left = list(olds)
        for name, slot, sizes, fresh in reversed(prog.writes):
            tab = tables[name]
            at = tuple(int(i) for i in ints[slot * width : slot * width + len(sizes)])
            block = tab.storage.zeros(tab.dtype, sizes) if fresh else olds_left.pop()
            tab.buffer, _ = tab.storage.write(tab.buffer, block, at, sizes, keep_old=False)
        for name, old in (counts or {}).items():
            tables[name].counts = old

    return restore


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
