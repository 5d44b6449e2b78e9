"""The Executor: runs steps of a graph, one Python scheduler for effects, XLA for math.

The scheduler walks blocks node by node. Runs of pure nodes are `RegionPlan`s executed as
one compiled XLA function (see regions.py); cache ops, branches, loops, yield/await and
barriers run here. Semantics of every node and memory kind: docs/semantics.md.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import jax
import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import BackendError, OpenInferError, SimulationError
from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Barrier,
    Branch,
    CacheAccess,
    CacheDecrement,
    CacheIncrement,
    CacheRead,
    CacheReset,
    CacheWrite,
    Dep,
    Loop,
    MemoryKind,
    Node,
    Op,
    Return,
    Transfer,
    VarDecl,
    VarName,
    VarRef,
    Yield,
)
from openinfer_jax.ops import registry
from openinfer_jax.sim.caches import PersistentStore, TableCache
from openinfer_jax.sim.events import TraceEvent, print_event, split_micros
from openinfer_jax.sim.interrupts import GUARD, atomic, signal_guard
from openinfer_jax.sim.long_loops import LoopTooLong, fori_body_ok, fori_region
from openinfer_jax.sim.plan import RegionPlan
from openinfer_jax.sim.ragged import NeedExact, Rag
from openinfer_jax.sim.regions import NodeFailure, fill_lengths, static_params
from openinfer_jax.sim.stats import CompileStats
from openinfer_jax.sim.summaries import summarize
from openinfer_jax.sim.values import (
    Deferred,
    Ragged,
    Zeros,
    coerce_input,
    materialize,
    to_host,
    value_dtype_name,
    value_shape,
)
from openinfer_jax.sim.variables import Variables
from openinfer_jax.sim.vulkan_replay import VulkanReplay, VulkanSegment, replay_enabled
from openinfer_jax.sim.vulkan_store import DeviceResident, DeviceStore
from openinfer_jax.sim.vulkan_tables import (
    CACHE_STATS,
    VulkanTableStorage,
    device_caches_enabled,
)

if TYPE_CHECKING:
    from openinfer_jax.sim.simulator import Simulator

__all__ = ["Executor", "StepEvent"]

_R = TypeVar("_R")


def _in_jax_mode(method: Callable[..., _R]) -> Callable[..., _R]:
    """Run an executor method in its simulator's JAX mode (64-bit or not; precision.py)."""

    @functools.wraps(method)
    def scoped(self: Executor, *args: Any, **kwargs: Any) -> _R:
        with self.sim.precision.scope():
            return method(self, *args, **kwargs)

    return scoped


@dataclass
class StepEvent:
    """What `Executor.iterate` yields: the node's trace event, with the executor at hand.

    `fetch(name)` reads a variable as it is right after this node ran.
    """

    event: TraceEvent
    executor: Executor

    def fetch(self, name: str) -> np.ndarray:
        """The executor's `fetch`, mid-step."""
        return self.executor.fetch(name)


class Executor:
    """Runs steps of one simulator's graph; holds dynamic inputs and persistent state.

    Create it with `Simulator.make_executor()`. Typical use::

        ex = sim.make_executor()
        ex.insert(x=np.ones(4, np.float32))
        ex.step()
        y = ex.fetch("y")
    """

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.graph = sim.graph
        self.plan = sim.plan
        self.compiler = sim.compiler
        self.device = sim.jax_device
        self._inserted: dict[str, np.ndarray] = {}
        self._input_shapes: dict[str, tuple[int, ...]] = {}  # dynamic variables' shapes
        self.persistent = PersistentStore()
        # Vulkan: op results stay on the device until the host reads them (vulkan_store.py).
        store: dict[str, Any] = {} if sim.vulkan is None else DeviceStore(self._vk_download)
        self.vars = Variables(sim, self.persistent, store)
        self.vars.write_check = self._check_yield_lock
        self._params_cache = sim.params_cache
        self._vk_weights: dict[int, tuple[Any, Any]] = {}
        self._vk_shapes: dict[Any, tuple[dict[str, Any], Any]] = {}  # see _vk_out_shape
        self._vk_verdicts: dict[int, tuple[Any, ...]] = {}  # see _vk_verdict
        self._static_ops: dict[int, tuple[Op, dict[str, Any]]] = {}  # see op_setup
        self._vk_transfers = {
            "vk_uploads": 0,
            "vk_downloads": 0,
            "vk_bytes": 0,
            **dict.fromkeys(CACHE_STATS, 0),
        }
        # Persistent memory on the Vulkan device (vulkan_tables.py) unless
        # OPENINFER_VK_HOST_CACHES=1 keeps it in JAX host memory, the layout before issue 7
        # (bench/bench_vk_caches.py's baseline; also a way out for a device short of memory).
        self._vk_device_caches = sim.vulkan is not None and device_caches_enabled()
        # Runs of Vulkan ops recorded once and replayed per step (vulkan_replay.py).
        self._vk_replay = (
            VulkanReplay(self)
            if sim.vulkan is not None and not sim.eager and replay_enabled()
            else None
        )
        # Inserted inputs stay host arrays in the store (see _guarded_step_events) where an
        # XLA call given one runs on this executor's device anyway: not sharded, the default
        # device (a Vulkan executor's XLA fallbacks run on the CPU device: host arrays when
        # that is the default; its uploads and downloads then skip a JAX round trip).
        self._host_inputs = sim.sharded is None and self.device == jax.devices()[0]
        # Per dynamic input checked once: (dtype, shape) of an array `insert` takes as it is.
        self._input_types: dict[str, tuple[np.dtype[Any], tuple[int, ...]]] = {}
        self._volatile = tuple(d.name for d in self.graph.vars if d.kind is MemoryKind.VOLATILE)
        self._pending_warnings: list[str] = []
        self._emit = False
        self._events: list[TraceEvent] = []
        self._steps = 0
        self._t0 = time.perf_counter_ns()
        self.region_calls = 0
        # Host time inside calls of compiled regions (XLA's own dispatch; asynchronous
        # calls return before the device finishes), first calls (compilations) excluded.
        self.dispatch_ns = 0
        self.compile_stats = CompileStats()
        # Per-executor state of compiled regions (wide.py: model tensors bound per template).
        self.region_state: dict[int, Any] = {}
        self._counters: dict[int, tuple[Node, int, np.dtype[Any], tuple[int, int] | None]] = {}
        self._fori_cache: dict[tuple[Any, ...], Any] = {}  # long loops as fori_loop (long_loops.py)
        self._yield_state: _YieldState | None = None
        self._current_block = ""
        with sim.precision.scope():
            for decl in self.graph.vars:
                if decl.kind is MemoryKind.PERSISTENT:
                    self._init_persistent(decl)

    # ---- public API ---------------------------------------------------------------------
    @property
    def steps(self) -> int:
        """How many steps completed successfully."""
        return self._steps

    @property
    def stats(self) -> dict[str, int]:
        """Counters of this executor: steps, XLA compilations of regions it was the first to
        run (``compilations``; executors of one simulator share compiled regions, so a
        second executor counts only what it compiled itself), regions loaded from JAX's
        persistent compilation cache instead (``compile_cache_hits``), exact-shape
        fallbacks, region calls, the host time spent inside those calls (``dispatch_ns``:
        XLA's own dispatch, compilations excluded; the rest of a step's host time is the
        simulator's); with ``device="vulkan"`` also host-to-device tensor uploads and
        device-to-host downloads (``vk_uploads``/``vk_downloads``, ``vk_bytes`` moved),
        and the part of them made by persistent memory (``vk_cache_uploads``/
        ``vk_cache_downloads``, ``vk_cache_bytes``), and runs of ops replayed from a recorded
        walk and walks recorded (``vk_replayed``/``vk_recorded``, sim/vulkan_replay.py)."""
        counts = self.compile_stats
        stats = {
            "steps": self._steps,
            "compilations": counts.compilations,
            "compile_cache_hits": counts.cache_hits,
            "exact_fallbacks": counts.exact_fallbacks,
            "region_calls": self.region_calls,
            "dispatch_ns": self.dispatch_ns,
            "regions": len(self.plan.regions),
        }
        if self.sim.vulkan is not None:
            stats.update(self._vk_transfers)
            replay = self._vk_replay
            stats["vk_replayed"] = replay.replayed if replay is not None else 0
            stats["vk_recorded"] = replay.recorded if replay is not None else 0
        return stats

    def insert(self, tensors: Mapping[str, Any] | None = None, /, **named: Any) -> None:
        """Insert values for dynamic variables for the next step (`insert(x=...)` or a dict).

        Raises:
            SimulationError: unknown variable, a variable that is not dynamic, or a value of
                the wrong dtype or shape. Nothing is inserted if any value is rejected.
        """
        items = named if tensors is None else {**dict(tensors), **named}
        checked: dict[str, np.ndarray] = {}
        for name, value in items.items():
            # An array exactly as declared (the common case, every decode step): one copy,
            # the step must own it (see below).
            want = self._input_types.get(name)
            if (
                want is not None
                and type(value) is np.ndarray
                and value.dtype == want[0]
                and value.shape == want[1]
                and value.flags.c_contiguous
            ):
                checked[name] = value.copy()
                continue
            decl = self.vars.decls.get(name)
            if decl is None:
                raise SimulationError(
                    f"insert {name!r}: no such variable; dynamic variables: {self.vars.names(MemoryKind.DYNAMIC)}"
                )
            if decl.kind is not MemoryKind.DYNAMIC:
                raise SimulationError(
                    f"insert {name!r}: it is {decl.kind.value} memory; only dynamic variables "
                    f"({self.vars.names(MemoryKind.DYNAMIC)}) take host values"
                )
            shape = self._input_shapes.get(name)
            if shape is None:
                shape = self._input_shapes[name] = self.sim.resolve_dims(
                    decl.dims, f"variable {name!r}"
                )
            arr = coerce_input(name, value, decl.dtype, shape)
            if not decl.dtype.is_packed:
                self._input_types[name] = (np.dtype(decl.dtype.numpy), tuple(shape))
            # The step may hand the array to XLA as it is (_host_inputs): own it, so the
            # caller changing theirs afterwards cannot change the step's input.
            checked[name] = arr.copy() if arr is value or arr.base is not None else arr
        self._inserted.update(checked)

    # Seeds' spelling.
    insert_dynamic = insert

    @_in_jax_mode
    def fetch_device(self, name: str) -> Any:
        """A variable's current value as held on the device (no host copy; may be padded).

        For benchmarks and interop: the array may still be computing (JAX is asynchronous).

        Raises:
            SimulationError: the name has no value in the step's variable store.
        """
        if name not in self.vars.store:
            raise SimulationError(f"fetch_device {name!r}: no value in the variable store")
        value = self.vars.store[name]
        return value.data if isinstance(value, Ragged) else materialize(value)

    @_in_jax_mode
    def fetch(self, name: str) -> np.ndarray:
        """A host copy of a variable: packed types unpacked (int8/uint8), bf16/f8 as ml_dtypes.

        Persistent tables come back whole (`[n_i, n_j, *entry]`).

        Raises:
            SimulationError: unknown name, or a dynamic input that was not inserted.
        """
        if name in self.vars.store:
            return to_host(self.vars.store[name])
        decl = self.vars.decls.get(name)
        if decl is None:
            known = sorted(set(self.vars.decls) | set(self.vars.store))
            raise SimulationError(f"fetch {name!r}: no such variable; known: {', '.join(known)}")
        if decl.kind is MemoryKind.PERSISTENT:
            if name in self.persistent.tables:
                return self.persistent.tables[name].host_view()
            return to_host(self.vars.host_value(self.persistent.values[name]))
        if decl.kind is MemoryKind.DYNAMIC:
            if name in self._inserted:
                return np.array(self._inserted[name])
            raise SimulationError(
                f"fetch {name!r}: the dynamic variable has no value (insert it first)"
            )
        if decl.is_table:
            raise SimulationError(
                f"fetch {name!r}: a prefix table has no single value; fetch an entry's variable instead"
            )
        return to_host(self.vars.initial(decl))

    @_in_jax_mode
    def set_persistent(self, name: str, value: Any) -> None:
        """Set a persistent variable between steps: a scalar/tensor, or a whole table.

        For a table, `value` has shape `[n_table..., *entry]` and the counts become its
        leading dims (e.g. a prefilled KV cache). Not part of a step, so not undone.

        Raises:
            SimulationError: not persistent, or a dtype/shape that does not fit.
        """
        decl = self.vars.decls.get(name)
        if decl is None or decl.kind is not MemoryKind.PERSISTENT:
            known = sorted(d.name for d in self.graph.vars if d.kind is MemoryKind.PERSISTENT)
            raise SimulationError(
                f"set_persistent {name!r}: no persistent variable of that name (persistent: "
                f"{', '.join(known) or 'none'})"
            )
        arr = np.asarray(value)
        if arr.dtype != np.dtype(decl.dtype.numpy):
            raise SimulationError(
                f"set_persistent {name!r}: dtype {arr.dtype} is not {decl.dtype.short}"
            )
        if name in self.persistent.tables:
            self.persistent.tables[name].load(arr)
            return
        want = self.sim.resolve_dims(decl.dims, f"variable {name!r}")
        if tuple(arr.shape) != want:
            raise SimulationError(
                f"set_persistent {name!r}: shape {list(arr.shape)} is not {list(want)}"
            )
        self.persistent.values[name] = (
            arr if not want else jax.device_put(arr, self.sim.placement(name, self.device))
        )

    @_in_jax_mode
    def reset(self) -> None:
        """Put all persistent state back to its initial value, between steps: every persistent
        variable to its start value (model tensor, `@init`, metadata scalar or zeros) and every
        cache table emptied (counts 0), as in a new executor. Inserted inputs, the trace and
        the stats are kept. Like `set_persistent`, not part of a step, so not undone."""
        store = self.persistent
        store.undo.clear()
        for decl in self.graph.vars:
            if decl.kind is not MemoryKind.PERSISTENT:
                continue
            if decl.name in store.tables:
                self._init_persistent(decl)  # a new, empty table
            else:
                store.values[decl.name] = store.initial[decl.name]

    def step(self) -> TraceEvent | None:
        """Run one step to completion; returns the last trace event (None if not tracing).

        Raises:
            SimulationError: naming the block and node; persistent state is unchanged.
        """
        start = len(self._events)

        def attempt() -> TraceEvent | None:
            # A graph without 64-bit types starts in 32-bit mode; if an op needs 64-bit
            # intermediates, the attempt was rolled back and runs again in 64-bit mode.
            self._drop_events(start)
            last = None
            for ev in self._step_events(fused=True):
                last = ev
            return last

        return self.sim.precision.call(attempt)

    # The seeds' examples call it run_step().
    run_step = step

    def iterate(self) -> Iterator[StepEvent]:
        """Run one step node by node, yielding a `StepEvent` after each node.

        Every op runs as its own compiled region here, so `fetch` between events sees the
        value right after that node. Stopping early abandons the step (state rolled back).
        """
        done = 0  # events already handed out: a rerun in 64-bit mode skips them
        events = len(self._events)
        while True:
            self._drop_events(events)
            steps = self._step_events(fused=False, force_events=True)
            try:
                for index, ev in enumerate(self._resumed_in_jax_mode(steps)):
                    if index >= done:
                        done = index + 1
                        yield StepEvent(ev, self)
                return
            except Exception as err:
                if not self.sim.precision.upgrade(err):
                    raise
            finally:
                steps.close()

    def _resumed_in_jax_mode(self, steps: Iterator[TraceEvent]) -> Iterator[TraceEvent]:
        """`steps`, each resumption run in the JAX mode; the caller's code between events
        runs in the user's own mode."""
        while True:
            with self.sim.precision.scope():
                ev = next(steps, None)
            if ev is None:
                return
            yield ev

    def _drop_events(self, count: int) -> None:
        """Forget trace events recorded after the first `count` (a rerun records them again)."""
        del self._events[count:]

    def trace(self) -> list[TraceEvent]:
        """Events recorded so far (with `Simulator.with_trace()`), all steps, in order."""
        return list(self._events)

    def clear_trace(self) -> None:
        """Forget recorded events."""
        self._events.clear()

    # ---- step driver ------------------------------------------------------------------------
    def _step_events(
        self, fused: bool, force_events: bool = False
    ) -> Generator[TraceEvent, None, None]:
        # Signals (Ctrl-C) land between state changes, never inside one (interrupts.py), so
        # an interrupted step rolls back like a failed one.
        guard = signal_guard()
        with guard:
            try:
                yield from self._guarded_step_events(fused, force_events)
            finally:
                if guard.installed:  # no call before the guard's exit (interrupts.py)
                    GUARD.closing = True

    def _guarded_step_events(
        self, fused: bool, force_events: bool
    ) -> Generator[TraceEvent, None, None]:
        self._check_inputs()
        if self.sim.vulkan is not None:
            self.sim.vulkan.begin_step()  # the step's buffers come back in the same order
        # The NumPy interpreter and the Vulkan device run node by node.
        # Value summaries need every node's output: one region per op, like iterate().
        fused = (
            fused
            and not self.sim.eager
            and self.sim.vulkan is None
            and not self.sim.trace_summaries
        )
        emit = force_events or self.sim.tracing or self.sim.env_trace > 0
        with atomic():
            saved_store = self.vars.store.copy()  # Vulkan: resident entries stay on the device
            saved_dtypes = dict(self.vars.dtypes)
            # Dynamic inputs move into the store; volatile values start again from the model.
            # On the default device the host array itself goes in: the XLA call that reads
            # it copies it to the device with its other operands (a separate device_put per
            # input cost about 0.3 ms a step on a GPU).
            for name, value in self._inserted.items():
                self.vars.store[name] = (
                    value
                    if self._host_inputs
                    else jax.device_put(value, self.sim.placement(name, self.device))
                )
            for name in self._volatile:
                self.vars.store.pop(name, None)
            self.vars.entries.clear()
            self._yield_state = _YieldState()
            self._emit = emit
        ok = False
        try:
            entry = self.sim.entry
            events = self._run_list(entry.name, self.plan.block_items(entry, fused), {}, fused)
            if self.sim.sharded is None:
                yield from events
            else:  # sharded runs (docs/sharding.md): placement and collectives per event
                for ev in events:
                    self.sim.sharded.annotate(ev, self)
                    yield ev
            ok = True
        except SimulationError:
            raise
        except OpenInferError as err:
            raise SimulationError(str(err)) from err
        except (TypeError, ValueError) as err:
            # A JAX/NumPy failure the rules above did not foresee: still typed, still atomic.
            raise SimulationError(
                f"block {self._current_block}: {type(err).__name__}: {err}"
            ) from err
        finally:
            # Inline, no call before it: a signal can land neither before the commit or
            # rollback starts nor inside it (interrupts.py); it is delivered after.
            GUARD.depth += 1
            try:
                if ok:
                    self.persistent.commit()
                    for name in self._inserted:
                        self.vars.store.pop(name, None)
                    self._inserted.clear()
                    self._steps += 1
                else:
                    self.persistent.rollback()
                    self.vars.store = saved_store
                    self.vars.dtypes = saved_dtypes
                self._yield_state = None
            finally:
                GUARD.leave()

    def _check_inputs(self) -> None:
        missing = [n for n in self.sim.required_inputs if n not in self._inserted]
        if missing:
            raise SimulationError(
                f"step: dynamic input{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                f"not inserted; call insert({missing[0]}=...) before step()"
            )

    # ---- scheduling ------------------------------------------------------------------------
    def _run_list(
        self, block: str, items: list[Any], scope: dict[str, int], fused: bool
    ) -> Generator[TraceEvent, None, bool]:
        """Run items of one node list; returns True when a `return` ended the block."""
        self._current_block = block
        if self._vk_replay is not None:
            items = self._vk_replay.items(items)
        for item in items:
            if isinstance(item, RegionPlan):
                yield from self._run_region(item, scope)
                continue
            if isinstance(item, VulkanSegment):
                assert self._vk_replay is not None
                yield from self._vk_replay.run(item, scope)
                continue
            node: Node = item
            start = time.perf_counter_ns()
            try:
                if isinstance(node, Loop):
                    lo = self.vars.bound(node.start, scope, node, "start")
                    hi = self.vars.bound(node.end, scope, node, "end")
                    if self._emit:
                        yield self._event(
                            node, scope, start, params=[str(node.start), str(node.end)]
                        )
                    body = self.plan.items(block, node.body, fused)
                    if self._loop_as_fori(node, body, hi - lo, fused):
                        self._run_fori(body[0], scope, hi - lo)
                        continue
                    for i in range(lo, hi):
                        inner = {**scope, node.index: i}
                        if (yield from self._run_list(block, body, inner, fused)):
                            return True
                        self._current_block = block
                    continue
                if isinstance(node, Branch):
                    target = self._branch_target(node, scope)
                    if self._emit:
                        yield self._event(
                            node,
                            scope,
                            start,
                            params=[node.cond] if node.cond else [],
                            output=[target],
                        )
                    blk = self.sim.block(target)
                    yield from self._run_list(
                        target, self.plan.block_items(blk, fused), scope, fused
                    )
                    self._current_block = block
                    continue
                if isinstance(node, Return):
                    if self._emit:
                        yield self._event(node, scope, start)
                    return True
                if isinstance(node, Yield):
                    ended = self._on_yield(block, node)
                    if self._emit:
                        yield self._event(node, scope, start, params=list(node.vars))
                    if ended:
                        return True
                    yield from self._run_consumers(node, fused)
                    self._current_block = block
                    continue
                if isinstance(node, Await):
                    self._on_await(block, node)
                    if self._emit:
                        yield self._event(node, scope, start, output=list(node.vars))
                    continue
                self._run_effect(node, scope)
            except NodeFailure as err:
                raise self._node_error(err.node, err.cause) from err.cause
            except OpenInferError as err:
                if getattr(err, "located", False):
                    raise
                raise self._node_error(node, err) from err
            if self._emit:
                yield self._event(node, scope, start, **self._effect_io(node))
        return False

    # ---- effects ------------------------------------------------------------------------------
    def _counter(
        self, node: CacheIncrement | CacheDecrement
    ) -> tuple[int, np.dtype[Any], tuple[int, int] | None]:
        """The signed amount, dtype and integer range of a counter node (checked once per
        node)."""
        decl = self.vars.persistent_decl(node.name)
        if decl.is_table or decl.dims:
            raise SimulationError(
                f"{node.name!r} is not a scalar; cache.increment/decrement need a persistent scalar"
            )
        if decl.dtype.is_packed or decl.dtype is DType.BOOL:
            raise SimulationError(
                f"{node.name!r} is {decl.dtype.short}; counters must be a non-packed, non-bool scalar"
            )
        delta = node.amount if isinstance(node, CacheIncrement) else -node.amount
        dtype = np.dtype(decl.dtype.numpy)
        span = None
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            span = (int(info.min), int(info.max))
        return delta, dtype, span

    def _run_effect(self, node: Node, scope: dict[str, int]) -> None:
        store = self.persistent
        if isinstance(node, CacheRead):
            value = self._cache_read(node.src, scope)
            self.vars.write(node.dst, value, scope)
        elif isinstance(node, CacheWrite):
            value = self._vk_cache_source(node.src, scope)
            self._cache_write(node.dst, value, scope)
        elif isinstance(node, (CacheIncrement, CacheDecrement)):
            known = self._counters.get(id(node))
            if known is None or known[0] is not node:
                known = self._counters[id(node)] = (node, *self._counter(node))
            _, delta, dtype, span = known
            old = store.values[node.name]
            if span is not None:
                # Integer counters (a decode position) step in Python ints (NumPy's scalar
                # arithmetic costs a few microseconds) and wrap modulo 2**bits, as in C.
                lo, hi = span
                value = (old if type(old) is np.ndarray else np.asarray(old)).item() + delta
                if not lo <= value <= hi:
                    value = (value - lo) % (hi - lo + 1) + lo
                store.set_value(node.name, np.array(value, dtype))
            else:
                store.set_value(node.name, np.array(np.asarray(old) + delta, dtype))
        elif isinstance(node, CacheReset):
            decl = self.vars.persistent_decl(node.target.name)
            if decl.name in store.tables:
                sel = self.vars.selection(node.target, scope)
                store.tables[decl.name].reset(sel, store.undo)
            else:
                store.set_value(decl.name, store.initial[decl.name])
        elif isinstance(node, (Barrier, Dep)):
            pass  # ordering hints: the scheduler already runs nodes in program order
        elif isinstance(node, Assign):  # only outside regions in hand-built plans
            self.vars.assign(node)
        else:  # pragma: no cover - every node kind is handled above or in _run_list
            raise SimulationError(f"unhandled node {type(node).__name__}")

    def _effect_io(self, node: Node) -> dict[str, Any]:
        if isinstance(node, CacheRead):
            value = dict.get(self.vars.store, node.dst.name)
            if isinstance(value, DeviceResident):  # describe it without downloading it
                value = np.empty(value.tensor.shape, value.tensor.dtype.numpy)
            out: dict[str, Any] = {"params": [str(node.src)], "output": [str(node.dst)]}
            if value is not None:
                out["output_shapes"] = [list(value_shape(value))]
                out["output_dtypes"] = [value_dtype_name(value)]
            return out
        if isinstance(node, CacheWrite):
            return {"params": [str(node.src)], "output": [str(node.dst)]}
        if isinstance(node, (CacheIncrement, CacheDecrement)):
            return {"params": [str(node.amount)], "output": [node.name]}
        if isinstance(node, CacheReset):
            return {"output": [str(node.target)]}
        if isinstance(node, Dep):
            return {"params": [node.after, node.before]}
        return {}

    def _cache_read(self, access: CacheAccess, scope: dict[str, int]) -> Any:
        decl = self.vars.persistent_decl(access.name)
        store = self.persistent
        if decl.name in store.tables:
            sel = self.vars.selection(access, scope)
            return store.tables[decl.name].read(sel, store.undo, bucket=self.sim.bucketing)
        if access.indices:
            raise SimulationError(f"{access.name!r} is not a table; read it without indices")
        return store.values[decl.name]

    def _cache_write(self, access: CacheAccess, value: Any, scope: dict[str, int]) -> None:
        decl = self.vars.persistent_decl(access.name)
        store = self.persistent
        if isinstance(value, DeviceResident):
            value = self._vk_resident_write(decl, value)
        value = materialize(value)
        if np.dtype(value.dtype) != np.dtype(decl.dtype.numpy):
            raise SimulationError(
                f"cache.write into {decl.name!r}: value dtype {np.dtype(value.dtype)} does not match "
                f"the table's {decl.dtype.short}"
            )
        if decl.name in store.tables:
            sel = self.vars.selection(access, scope)
            store.tables[decl.name].write(sel, value, store.undo)
            return
        if access.indices:
            raise SimulationError(f"{access.name!r} is not a table; write it without indices")
        want = self.sim.resolve_dims(decl.dims, f"variable {decl.name!r}")
        if value_shape(value) != want:
            raise SimulationError(
                f"cache.write into {decl.name!r}: value shape {list(value_shape(value))} does not "
                f"match the declaration {decl.dtype.short}{list(want)}"
            )
        store.set_value(decl.name, value)

    def _init_persistent(self, decl: VarDecl) -> None:
        store = self.persistent
        if decl.is_table:
            entry = self.sim.resolve_dims(decl.dims, f"table {decl.name!r}")
            store.tables[decl.name] = TableCache(
                decl.name,
                decl.dtype,
                decl.table_indices,
                decl.auto_dim,
                entry,
                dict(decl.fixed),
                self.sim.placement(decl.name, self.device),
                VulkanTableStorage(self.sim.vulkan, self._vk_transfers)
                if self._vk_device_caches
                else None,
                limits=self.sim.limits,
            )
            return
        value = self.sim.initial_value(decl, self.device)
        if not decl.dims:
            value = np.asarray(jax.device_get(value))  # counters live on the host: cheap to bump
        store.values[decl.name] = value
        store.initial[decl.name] = value

    # ---- control flow ------------------------------------------------------------------
    def _branch_target(self, node: Branch, scope: dict[str, int]) -> str:
        if node.cond is None:
            return node.then_block
        decl = self.vars.decls.get(node.cond)
        dtype = decl.dtype if decl is not None else self.vars.dtypes.get(node.cond)
        if dtype is not None and dtype.is_packed:
            raise SimulationError(
                f"branch condition {node.cond!r} is packed ({dtype.short}); use a non-packed scalar"
            )
        value = self.vars.scalar(node.cond, scope)
        if node.else_block is None:
            raise SimulationError(f"conditional branch on {node.cond!r} needs an else block")
        return node.then_block if value else node.else_block

    # ---- regions ------------------------------------------------------------------------------
    def _run_region_eager(
        self, region: RegionPlan, scope: dict[str, int]
    ) -> Generator[TraceEvent, None, None]:
        """device="numpy": every node on its own, ops through their NumPy references."""
        for node in region.nodes:
            start = time.perf_counter_ns()
            extra: dict[str, Any] = {}
            try:
                if isinstance(node, Assign):
                    self.vars.assign(node)
                    extra["output"] = [node.name]
                elif isinstance(node, Transfer):
                    self.check_transfer(node)
                    self.vars.write(node.dst, self.vars.read(node.src, scope), scope)
                    extra = {"params": [str(node.src)], "output": [str(node.dst)]}
                elif isinstance(node, Op):
                    params, out_dtype, _bound = self.op_setup(node, scope)
                    opdef = registry.get(node.op)
                    assert opdef is not None
                    xs = [to_host(self.vars.read(r, scope)) for r in node.inputs]
                    dts = [self.vars.dtype(r) for r in node.inputs]
                    out = np.asarray(opdef.reference(*xs, dtypes=dts, **params)).astype(
                        out_dtype.numpy, copy=False
                    )
                    self.vars.write(node.output, out, scope)
                    extra = {
                        "params": [str(r) for r in node.inputs],
                        "output": [str(node.output)],
                        "output_shapes": [list(out.shape)],
                        "output_dtypes": [out_dtype.short],
                    }
            except NodeFailure as err:
                raise self._node_error(err.node, err.cause) from err.cause
            except OpenInferError as err:
                if getattr(err, "located", False):
                    raise
                raise self._node_error(node, err) from err
            if self._emit:
                ev = self._event(node, scope, start, **extra)
                if isinstance(node, Op):
                    ev.op_name = node.op
                yield ev

    def _run_region_wide(
        self, region: RegionPlan, scope: dict[str, int]
    ) -> Generator[TraceEvent, None, None]:
        """A region with cache reads/writes and unrolled loops, as one XLA call (wide.py)."""
        start = time.perf_counter_ns()
        before = self.compile_stats.compilations
        try:
            prog, compiled, outs = self.sim.wide.run(self, region, scope)
            self.region_calls += 1
        except LoopTooLong:
            # Unrolling would exceed Limits.max_unrolled_iterations: the loops stay loops.
            items = self.plan.items(region.block, region.nodes, True, wide=False)
            yield from self._run_list(region.block, items, scope, True)
            return
        except NodeFailure as err:
            raise self._node_error(err.node, err.cause) from err.cause
        except OpenInferError as err:
            if getattr(err, "located", False):
                raise
            raise self._node_error(region.nodes[0], err) from err
        if not self._emit:
            return
        if self.sim.timing:
            jax.block_until_ready(outs)
        total = time.perf_counter_ns() - start
        share = total // max(len(prog.visited), 1)
        loaded, self.vars.loaded_now = self.vars.loaded_now, []
        for k, (node, node_scope, step_no) in enumerate(prog.visited):
            ev = self._event(
                node, node_scope, start + k * share, duration=share, loaded=loaded if k == 0 else []
            )
            ev.region, ev.compiled = region.id, self.compile_stats.compilations > before
            ev.region_ns = total if self.sim.timing else 0
            shapes = compiled.shapes.get(step_no) if step_no is not None else None
            if shapes is not None:
                ev.input_shapes = fill_lengths(shapes.input_shapes, prog.lengths)
                ev.output_shapes = fill_lengths(shapes.output_shapes, prog.lengths)
                ev.input_dtypes, ev.output_dtypes = shapes.input_dtypes, shapes.output_dtypes
            if isinstance(node, Op):
                ev.op_name = node.op
                ev.params, ev.output = [str(r) for r in node.inputs], [str(node.output)]
            elif isinstance(node, (Transfer, CacheRead, CacheWrite)):
                ev.params, ev.output = [str(node.src)], [str(node.dst)]
            elif isinstance(node, Assign):
                ev.output = [node.name]
            elif isinstance(node, Loop):
                ev.params = [str(node.start), str(node.end)]
            yield ev

    def _vk_upload(self, value: Any, dtype: DType) -> Any:
        """A device tensor for `value`; model weights are uploaded once per executor."""
        backend = self.sim.vulkan
        cached = self._vk_weights.get(id(value))
        if cached is not None and cached[0] is value:
            return cached[1]
        if getattr(value, "is_block_quantized", False):  # stays packed on the device too
            tensor = backend.upload_quantized(to_host(value))
        else:
            tensor = backend.upload(np.asarray(to_host(value)), dtype)
        self._vk_transfers["vk_uploads"] += 1
        self._vk_transfers["vk_bytes"] += tensor.nbytes
        if self.vars.is_model_value(value):
            self._vk_weights[id(value)] = (value, tensor)
        return tensor

    def _vk_download(self, tensor: Any) -> Any:
        """The host value of a device-resident store entry (first host read of it)."""
        try:
            host = self.sim.vulkan.download(tensor)
        except BackendError as err:
            raise SimulationError(
                f"vulkan: downloading a {tensor.dtype.short} result: {err}"
            ) from err
        self._vk_transfers["vk_downloads"] += 1
        self._vk_transfers["vk_bytes"] += tensor.nbytes
        return host if self._host_inputs else jax.device_put(host, self.device)

    def _vk_input(self, ref: VarRef, dtype: DType, scope: dict[str, int]) -> Any:
        """A device tensor for an op input: the resident buffer when there is one."""
        plain = not ref.indices and ref.name not in scope
        store = self.vars.store
        assert isinstance(store, DeviceStore)
        # A plain variable's entry is read directly (the common case: `_vk_resident` for it).
        resident = dict.get(store, ref.name) if plain else self._vk_resident(ref, scope)
        if isinstance(resident, DeviceResident):
            tensor = resident.tensor
        else:
            value = materialize(self.vars.read(ref, scope))
            tensor = self._vk_upload(value, dtype)
            if plain and dict.get(store, ref.name) is not None:
                # Later ops in this step read the same buffer instead of uploading it again.
                store.keep_resident(ref.name, dict.__getitem__(store, ref.name), tensor)
        replay = self._vk_replay
        if replay is not None and replay.recording is not None:
            recording = replay.recording
            recording.inputs.append((recording.position, ref, dtype, tensor))
        return tensor

    def _vk_resident(self, ref: VarRef, scope: dict[str, int]) -> DeviceResident | None:
        """The `DeviceResident` behind a plain variable or a written prefix-table entry
        (`W[l]` after `op ... >> W[l]`), or None when the value is only on the host."""
        store = self.vars.store
        if not isinstance(store, DeviceStore) or ref.name in scope:
            return None
        if not ref.indices:
            raw = store.raw(ref.name)
        else:
            decl = self.vars.decls.get(ref.name)
            if decl is None or not decl.is_table or decl.kind is MemoryKind.PERSISTENT:
                return None  # Variables.read reports the mistake
            raw = self.vars.entries.get(self.vars.entry_name(decl, ref, scope))
        return raw if isinstance(raw, DeviceResident) else None

    def _vk_cache_source(self, ref: VarRef, scope: dict[str, int]) -> Any:
        """A `cache.write` source: the `DeviceResident` itself when it lives on the device."""
        if self._vk_device_caches:
            resident = self._vk_resident(ref, scope)
            if resident is not None:
                return resident
        return self.vars.read(ref, scope)

    def _vk_resident_write(self, decl: VarDecl, value: DeviceResident) -> Any:
        """What `cache.write` stores for a resident value: itself for a table or a
        persistent tensor (a device-side copy / a shared immutable buffer), the host value
        for a scalar (counters and indices are read on the host)."""
        if not decl.is_table and not decl.dims:
            return self.vars.host_value(value)
        return value

    def _run_op_vulkan(
        self, region: RegionPlan, scope: dict[str, int]
    ) -> Generator[TraceEvent, None, None]:
        """One op on the Vulkan backend, or on XLA CPU with a warning when it is unsupported."""
        node = region.nodes[0]
        assert isinstance(node, Op)
        start = time.perf_counter_ns()
        backend = self.sim.vulkan
        warning = ""
        out = None
        try:
            params, out_dtype, _bound = self.op_setup(node, scope)
            dtypes = [self.vars.dtype(r) for r in node.inputs]
            verdict, opdef = self._vk_verdict(node, params, dtypes)
            if verdict is True:
                try:
                    tensors = [self._vk_input(r, d, scope) for r, d in zip(node.inputs, dtypes)]
                    shape = self._vk_out_shape(opdef, dtypes, tensors, params)
                    out = backend.run(node.op, tensors, params, out_dtype, shape)
                except BackendError as err:
                    warning = f"vulkan: {err}; ran on XLA CPU instead"
            else:
                warning = f"vulkan: {verdict}"
        except NodeFailure as err:
            raise self._node_error(err.node, err.cause) from err.cause
        except OpenInferError as err:
            if getattr(err, "located", False):
                raise
            raise self._node_error(node, err) from err
        if out is None:
            if self._vk_replay is not None and self._vk_replay.recording is not None:
                self._vk_replay.recording.fallback = True
            self._pending_warnings.append(warning)
            yield from self._run_region(region, scope, allow_vulkan=False)
            self._pending_warnings.clear()
            return
        try:
            # Plain variables and prefix-table entries (`>> W[l]`) alike stay on the device.
            self.vars.write(node.output, DeviceResident(out), scope)
        except OpenInferError as err:
            raise self._node_error(node, err) from err
        if self._emit:
            ev = self._event(
                node,
                scope,
                start,
                params=[str(r) for r in node.inputs],
                output=[str(node.output)],
                output_shapes=[list(out.shape)],
                output_dtypes=[out_dtype.short],
            )
            ev.op_name = node.op
            yield ev

    def _vk_verdict(
        self, node: Op, params: dict[str, Any], dtypes: list[DType]
    ) -> tuple[bool | str, Any]:
        """`VulkanBackend.supports` for a node's call and the op's definition, kept per node:
        the verdict is a function of the op, its params (op_setup's cached dict, the same
        object while the node's runtime-scalar params keep their values), its input dtypes
        and which inputs are quantized (declarations), all checked or fixed here."""
        memo = self._vk_verdicts.get(id(node))
        key = tuple(dtypes)
        if memo is not None and memo[0] is node and memo[1] is params and memo[2] == key:
            return memo[3], memo[4]
        decls = self.vars.decls
        quantized = [decls[r.name].quant is not None if r.name in decls else False
                     for r in node.inputs]  # fmt: skip
        verdict = self.sim.vulkan.supports(node.op, dtypes, params, quantized)
        opdef = registry.get(node.op)
        if verdict is True:
            assert opdef is not None
        if len(self._vk_verdicts) >= 4096:
            self._vk_verdicts.clear()
        self._vk_verdicts[id(node)] = (node, params, key, verdict, opdef)
        return verdict, opdef

    def _vk_out_shape(
        self, opdef: Any, dtypes: list[DType], tensors: list[Any], params: dict[str, Any]
    ) -> tuple[int, ...]:
        """The output shape of a Vulkan op; kept per (params, dtypes, input shapes): params
        are the node's cached dict (op_setup), the same object every step."""
        shapes = tuple(t.shape for t in tensors)
        key = (id(params), tuple(dtypes), shapes)
        cached = self._vk_shapes.get(key)
        if cached is not None and cached[0] is params:
            return cached[1]
        # infer, not output_shape alone: it also runs the op's own check on the bound
        # params (fill value=1000 into i8), as the XLA and NumPy paths do.
        _dtype, shape = opdef.infer(dtypes, list(shapes), params)
        if len(self._vk_shapes) >= 4096:
            self._vk_shapes.clear()
        self._vk_shapes[key] = (params, shape)
        return shape

    def _run_region(
        self, region: RegionPlan, scope: dict[str, int], allow_vulkan: bool = True
    ) -> Generator[TraceEvent, None, None]:
        if self.sim.eager:
            yield from self._run_region_eager(region, scope)
            return
        if allow_vulkan and self.sim.vulkan is not None and isinstance(region.nodes[0], Op):
            yield from self._run_op_vulkan(region, scope)
            return
        if self.sim.vulkan is not None and all(isinstance(n, (Assign, Dep)) for n in region.nodes):
            # Vulkan runs node by node; an assign is a `Zeros` placeholder, as in the NumPy
            # interpreter, not an XLA region of its own (a compiled call per assign per step).
            yield from self._run_region_eager(region, scope)
            return
        if region.wide:
            yield from self._run_region_wide(region, scope)
            return
        start = time.perf_counter_ns()
        before = self.compile_stats.compilations
        try:
            arrays, rags, lengths, dtypes = self._region_inputs(region, scope)
            out_dtypes: list[DType] = []
            params: list[dict[str, Any]] = []
            scalars: dict[str, Any] = {}
            for pos, node in enumerate(region.nodes):
                if isinstance(node, Assign):
                    if node.name in self.vars.decls:
                        raise NodeFailure(
                            node,
                            SimulationError(
                                f"assign {node.name!r} shadows a declared variable; pick another name"
                            ),
                        )
                    self.vars.dtypes[node.name] = node.dtype
                elif isinstance(node, Op):
                    params_i, out_dtype, bound = self.op_setup(node, scope)
                    params.append(params_i)
                    out_dtypes.append(out_dtype)
                    for k, v in bound.items():
                        scalars[f"{pos}.{k}"] = v
                elif isinstance(node, Transfer):
                    self.check_transfer(node)
            # Static shapes of assigns are resolved here (sizevars), so the region sees ints.
            region_nodes = self._resolved_assigns(region)
            try:
                compiled = self.compiler.get(
                    region_nodes,
                    arrays,
                    rags,
                    len(lengths),
                    dtypes,
                    out_dtypes,
                    scalars,
                    params,
                    self.compile_stats,
                )
            except NeedExact:
                arrays = [
                    materialize(Ragged(a, r.axis, lengths[r.slot])) if r else a
                    for a, r in zip(arrays, rags)
                ]
                rags = [None] * len(arrays)
                lengths = []
                compiled = self.compiler.get(
                    region_nodes,
                    arrays,
                    rags,
                    0,
                    dtypes,
                    out_dtypes,
                    scalars,
                    params,
                    self.compile_stats,
                )
            lens = tuple(np.asarray(n, np.int32) for n in lengths)
            if compiled.fresh:  # XLA compiles it now: counted for this executor
                compiled.fresh = False
                outs = self.compile_stats.first_call(compiled.fn, tuple(arrays), lens)
            else:
                called = time.perf_counter_ns()
                outs = compiled.fn(tuple(arrays), lens)
                self.dispatch_ns += time.perf_counter_ns() - called
            self.region_calls += 1
            # Dead writes come back as Zeros/Deferred placeholders (regions.py, plan_layout).
            values = compiled.values(outs, tuple(arrays), lens, lengths)
            for ref, value in zip(region.writes, values):
                self.vars.write(ref, value, scope)
        except NodeFailure as err:
            raise self._node_error(err.node, err.cause) from err.cause
        except OpenInferError as err:
            if getattr(err, "located", False):
                raise
            raise self._node_error(region.nodes[0], err) from err
        if not self._emit:
            return
        if self.sim.timing:
            jax.block_until_ready(outs)
        total = time.perf_counter_ns() - start
        share = total // max(len(region.nodes), 1)
        loaded, self.vars.loaded_now = self.vars.loaded_now, []
        for k, node in enumerate(region.nodes):
            shapes = compiled.shapes[k] if k < len(compiled.shapes) else None
            ev = self._event(
                node, scope, start + k * share, duration=share, loaded=loaded if k == 0 else []
            )
            ev.region = region.id
            ev.region_ns = total if self.sim.timing else 0
            ev.compiled = self.compile_stats.compilations > before
            if shapes is not None:
                ev.input_shapes = fill_lengths(shapes.input_shapes, lengths)
                ev.input_dtypes = shapes.input_dtypes
                ev.output_shapes = fill_lengths(shapes.output_shapes, lengths)
                ev.output_dtypes = shapes.output_dtypes
            if isinstance(node, Op):
                ev.op_name = node.op
                ev.params = [str(r) for r in node.inputs]
                ev.output = [str(node.output)]
            elif isinstance(node, Transfer):
                ev.params, ev.output = [str(node.src)], [str(node.dst)]
            elif isinstance(node, Assign):
                ev.output = [node.name]
            elif isinstance(node, Dep):
                ev.params = [node.after, node.before]
            yield ev

    def _loop_as_fori(self, loop: Loop, body: list[Any], count: int, fused: bool) -> bool:
        """Whether a loop runs as one `lax.fori_loop` (long_loops.py): fused JAX runs only,
        longer than the unroll budget, no per-node trace events, a single pure region."""
        return (
            fused
            and count > self.sim.limits.max_unrolled_iterations
            and not self._emit
            and not self.sim.eager
            and self.sim.vulkan is None
            and self.sim.sharded is None
            and len(body) == 1
            and isinstance(body[0], RegionPlan)
            and fori_body_ok(body[0])
        )

    def _run_fori(self, region: RegionPlan, scope: dict[str, int], count: int) -> None:
        """Run the pure region `count` times as one XLA while loop; store its writes."""
        try:
            arrays, rags, _lengths, dtypes = self._region_inputs(region, scope)
            if any(rags):
                arrays = [materialize(a) if r is None else a for a, r in zip(arrays, rags)]
            out_dtypes: list[DType] = []
            params: list[dict[str, Any]] = []
            for node in region.nodes:
                if isinstance(node, Assign):
                    self.vars.dtypes[node.name] = node.dtype
                elif isinstance(node, Op):
                    params_i, out_dtype, _bound = self.op_setup(node, scope)
                    params.append(params_i)
                    out_dtypes.append(out_dtype)
            key = ("fori", region.id, tuple((a.shape, a.dtype) for a in arrays))
            fn = self._fori_cache.get(key)
            if fn is None:
                nodes = self._resolved_assigns(region)
                fn = fori_region(nodes, dtypes, out_dtypes, params, self.compiler.trace_op)
                self._fori_cache[key] = fn
                outs = self.compile_stats.first_call(
                    fn, tuple(materialize(a) for a in arrays), np.int32(count)
                )
            else:
                operands = tuple(materialize(a) for a in arrays)
                called = time.perf_counter_ns()
                outs = fn(operands, np.int32(count))
                self.dispatch_ns += time.perf_counter_ns() - called
            for ref, value in zip(region.writes, outs):
                self.vars.write(ref, value, scope)
        except NodeFailure as err:
            raise self._node_error(err.node, err.cause) from err.cause
        except OpenInferError as err:
            if getattr(err, "located", False):
                raise
            raise self._node_error(region.nodes[0], err) from err

    def _region_inputs(
        self, region: RegionPlan, scope: dict[str, int]
    ) -> tuple[list[Any], list[Rag | None], list[int], list[DType]]:
        arrays: list[Any] = []
        rags: list[Rag | None] = []
        lengths: list[int] = []
        dtypes: list[DType] = []
        for ref in region.reads:
            try:
                value = self.vars.read(ref, scope)
            except SimulationError as err:
                node = next(n for n in region.nodes if _reads(n, ref))
                raise NodeFailure(node, err) from None
            if isinstance(value, (Zeros, Deferred)):
                value = value.exact()
            if isinstance(value, Ragged):
                # Inputs that share a valid length share a slot: the signature records the
                # sharing, so masks of k and v can be computed once.
                slot = lengths.index(value.length) if value.length in lengths else len(lengths)
                if slot == len(lengths):
                    lengths.append(value.length)
                arrays.append(value.data)
                rags.append(Rag(value.axis, slot))
            else:
                arrays.append(value)
                rags.append(None)
            dtypes.append(self.vars.dtype(ref))
        return arrays, rags, lengths, dtypes

    def op_setup(
        self, node: Op, scope: dict[str, int]
    ) -> tuple[dict[str, Any], DType, dict[str, Any]]:
        """Resolved params (cached per node and runtime-scalar values), output dtype, bindings.

        Raises:
            NodeFailure: unknown op, bad params, or an undeclared output.
        """
        static = self._static_ops.get(id(node))
        if static is not None and static[0] is node:
            # A node without scalar-variable params: the same resolved params every step.
            out_dtype = self.vars.dtypes.get(node.output.name)
            if out_dtype is not None:
                return static[1], out_dtype, {}
        opdef = registry.get(node.op)
        if opdef is None:
            raise NodeFailure(
                node, SimulationError(f"unknown op {node.op!r}; see `openinfer ops` for the list")
            )

        def lookup(name: str) -> Any:
            try:
                return self.vars.scalar(name, scope)
            except SimulationError:
                return None

        raw, bound = static_params(node, lookup)
        key = (id(node), tuple(bound.items()))
        params = self._params_cache.get(key)
        if params is None:
            try:
                params = opdef.resolve_params(raw)
            except OpenInferError as err:
                raise NodeFailure(node, err) from None
            self._params_cache[key] = params
        if not any(isinstance(value, VarName) for _key, value in node.params):
            if len(self._static_ops) >= 4096:
                self._static_ops.clear()
            self._static_ops[id(node)] = (node, params)
        out_dtype = self.vars.dtypes.get(node.output.name)
        if out_dtype is None:
            raise NodeFailure(
                node, SimulationError(f"output {node.output.name!r} is not declared or assigned")
            )
        return params, out_dtype, bound

    def check_transfer(self, node: Transfer) -> None:
        src_dtype = self.vars.dtypes.get(node.src.name)
        dst_dtype = self.vars.dtypes.get(node.dst.name)
        if src_dtype is not None and dst_dtype is not None and src_dtype is not dst_dtype:
            raise NodeFailure(
                node,
                SimulationError(
                    f"transfer {node.src} >> {node.dst}: dtypes differ ({src_dtype.short} vs {dst_dtype.short})"
                ),
            )

    def _resolved_assigns(self, region: RegionPlan) -> RegionPlan:
        if not region.assigns:
            return region
        cached = self.sim.resolved_regions.get(region.id)
        if cached is None:
            nodes = tuple(
                Assign(
                    n.name, n.dtype, self.sim.resolve_dims(n.dims, f"assign {n.name!r}"), loc=n.loc
                )
                if isinstance(n, Assign)
                else n
                for n in region.nodes
            )
            cached = dataclasses.replace(region, nodes=nodes)
            self.sim.resolved_regions[region.id] = cached
        return cached

    # ---- yield / await ---------------------------------------------------------------------------
    def writes_locked(self) -> bool:
        """Whether entry holds yielded variables it has not awaited (their writes raise)."""
        state = self._yield_state
        return state is not None and bool(state.locked)

    def _check_yield_lock(self, name: str) -> None:
        """Entry may not write a variable it yielded until it awaits it."""
        state = self._yield_state
        if (
            state is not None
            and name in state.locked
            and self._current_block == self.sim.entry.name
        ):
            raise SimulationError(f"entry writes {name!r} after yielding it; await {name} first")

    def _on_yield(self, block: str, node: Yield) -> bool:
        state = self._yield_state
        assert state is not None
        if block != self.sim.entry.name:
            # A consumer's yield is its terminator: hand its yielded values back.
            state.results[block] = {v: self.vars.store.get(v) for v in node.vars}
            return True
        if state.locked:
            raise SimulationError(
                f"yield {', '.join(node.vars)}: await {', '.join(sorted(state.locked))} before yielding again"
            )
        state.locked = set(node.vars)
        state.yielded |= set(node.vars)
        return False

    def _run_consumers(self, node: Yield, fused: bool) -> Generator[TraceEvent, None, None]:
        state = self._yield_state
        assert state is not None
        for blk in self.sim.consumers:
            if blk.name in state.ran:
                continue
            awaits = self.sim.consumer_awaits[blk.name]
            if not awaits <= state.yielded:
                continue
            state.ran.add(blk.name)
            # The consumer works on a snapshot: its writes stay in its fork, and only the
            # variables it yields come back, at entry's await.
            entry_store = self.vars.store
            self.vars.store = entry_store.copy()
            locked, state.locked = state.locked, set()
            try:
                yield from self._run_list(blk.name, self.plan.block_items(blk, fused), {}, fused)
                if blk.name not in state.results:
                    state.results[blk.name] = {}
                writes = self.sim.consumer_writes[blk.name]
                state.results[blk.name] = {
                    v: val
                    for v, val in state.results[blk.name].items()
                    if v in writes and val is not None
                }
            finally:
                self.vars.store = entry_store
                state.locked = locked

    def _on_await(self, block: str, node: Await) -> None:
        state = self._yield_state
        assert state is not None
        if block != self.sim.entry.name:
            return  # a consumer's await receives the snapshot it already runs on
        for var in node.vars:
            if var not in state.yielded:
                raise SimulationError(f"await {var}: {var!r} was never yielded")
            writers = [name for name, res in state.results.items() if var in res]
            if len(writers) > 1:
                raise SimulationError(
                    f"await {var}: consumers {', '.join(writers)} both mutate {var!r}; only one may"
                )
            if writers:
                self.vars.store[var] = state.results[writers[0]][var]
            state.locked.discard(var)

    # ---- events and errors ------------------------------------------------------------------------
    def _event(
        self,
        node: Node,
        scope: dict[str, int],
        start: int,
        *,
        duration: int | None = None,
        params: list[str] | None = None,
        output: list[str] | None = None,
        output_shapes: list[list[int]] | None = None,
        output_dtypes: list[str] | None = None,
        loaded: list[str] | None = None,
    ) -> TraceEvent:
        info = self.plan.info[id(node)]
        if duration is None:
            duration = time.perf_counter_ns() - start
        if loaded is None:
            loaded, self.vars.loaded_now = self.vars.loaded_now, []
        ev = TraceEvent(
            block_name=info.block if self._current_block == info.block else self._current_block,
            node_index=info.index,
            node_uuid=info.uuid,
            kind=info.kind,
            params=params or [],
            output=output or [],
            micros=split_micros(duration) if self.sim.timing else [0, 0, 0],
            node_desc=info.desc,
            output_shapes=output_shapes or [],
            output_dtypes=output_dtypes or [],
            device=self.sim.device_name,
            step=self._steps,
            scope=dict(scope),
            loaded=list(loaded),
            start_ns=start - self._t0,
            duration_ns=duration if self.sim.timing else 0,
            warnings=list(self._pending_warnings),
            node_loc=info.loc,
        )
        if self.sim.trace_summaries:
            ev.output_summaries = self._summaries(node, scope)
        if self.sim.tracing:
            self._events.append(ev)
        if self.sim.env_trace:
            print_event(ev, self.sim.env_trace)
        return ev

    def _summaries(self, node: Node, scope: dict[str, int]) -> list[dict[str, Any]]:
        """Summaries of what `node` wrote (op, transfer, cache.read), read right after it."""
        if isinstance(node, Op):
            ref = node.output
        elif isinstance(node, (Transfer, CacheRead)):
            ref = node.dst
        else:
            return []
        decl = self.vars.decls.get(ref.name)
        dtype = decl.dtype if ref.indices and decl is not None else self.vars.dtypes[ref.name]
        return [summarize(to_host(self.vars.read(ref, scope)), dtype)]

    def _node_error(self, node: Any, err: BaseException) -> SimulationError:
        """A SimulationError naming the block, node and DSL location (raised once per error)."""
        if isinstance(err, SimulationError) and getattr(err, "located", False):
            return err
        info = self.plan.info.get(id(node))
        if info is None:
            out = SimulationError(str(err))
        else:
            loc = getattr(node, "loc", None)
            where = f" at {loc}" if loc is not None else ""
            block = self._current_block or info.block
            out = SimulationError(f"block {block} node {info.index} ({info.desc}){where}: {err}")
        out.located = True  # type: ignore[attr-defined]
        return out


class _YieldState:
    """Per-step bookkeeping of yield/await: what entry yielded, which consumers ran."""

    def __init__(self) -> None:
        self.yielded: set[str] = set()
        self.locked: set[str] = set()
        self.ran: set[str] = set()
        self.results: dict[str, dict[str, Any]] = {}


def _reads(node: Node, ref: VarRef) -> bool:
    if isinstance(node, Op):
        return ref in node.inputs
    if isinstance(node, Transfer):
        return node.src == ref
    return False
