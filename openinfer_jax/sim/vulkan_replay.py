"""Replay of a Vulkan executor's op walk: a run of ops recorded once, resubmitted per step.

On ``device="vulkan"`` the executor walks a block op by op, and for each op finds in Python
its params, its Vulkan verdict, its input buffers, its output shape, a result buffer, a
pipeline and the kp operations to record (about 40 us per op). A streaming step finds the
same answers every time. Here a run of plan items made only of Vulkan ops and assigns (a
`VulkanSegment`: no branch, loop, cache op, yield or scalar-variable param inside) is walked
once while the backend records a `Tape` (vk/reuse.py), and later steps replay it:

1. the segment's external inputs (what it reads before writing: weights, inserted inputs,
   values of earlier nodes) are resolved as the walk resolves them, uploads included, and
   must sit in the recorded buffers with the recorded shapes and dtypes (traces are kept per
   such signature: a value carried from step to step alternates between two buffers);
2. the backend takes the recorded result buffers back from its pool and appends the
   recorded kp operations to the open batch. All must be free: the results of the step
   before are still held (its snapshot, for rollback), so a segment has two traces in use,
   one per parity of the step, and the least recently used that fits is taken;
3. the variables the segment writes get their final values (the new result tensors, or views
   of them), the assigned names their dtypes.

Otherwise the segment is walked as before, recording a new trace: a new shape or buffer, a
trace being emitted (events come from the walk), a loop index among its names. A walk in
which an op fell back to the CPU, or read a block-quantized weight, is not replayed. The kp
operations bind the same buffers and push constants, so a replay computes what the walk
would, bit for bit. ``OPENINFER_VK_REPLAY=0`` turns replay off.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import OpenInferError
from openinfer_jax.core.names import VarName
from openinfer_jax.ir.nodes import Assign, Dep, Op, VarRef
from openinfer_jax.sim.events import TraceEvent
from openinfer_jax.sim.plan import Item, RegionPlan
from openinfer_jax.sim.values import Zeros
from openinfer_jax.sim.vulkan_store import DeviceResident

if TYPE_CHECKING:
    from openinfer_jax.sim.executor import Executor
    from openinfer_jax.vk.reuse import Tape

__all__ = ["VulkanReplay", "VulkanSegment", "replay_enabled"]

# Input signatures kept per segment, and traces per signature (least recently used first).
# Values carried across steps cycle through a few buffers (two for a value rewritten each
# step, three for one read under another name), so a segment sees a few signatures in turn.
_SIGNATURES = 8
_TRACES = 4


def replay_enabled() -> bool:
    """Whether Vulkan executors replay recorded op walks (unless ``OPENINFER_VK_REPLAY=0``)."""
    return os.environ.get("OPENINFER_VK_REPLAY", "1") != "0"


@dataclass(eq=False)
class _Trace:
    """One recorded walk of a segment: its tape and how its written variables are rebuilt.

    An output recipe is an int (the tape's result of that index), ``("ext", j)`` (external
    input j), ``("view", recipe, dtype, shape)`` (a view of another recipe's tensor) or
    ``("value", v)`` (an immutable host placeholder, an assign's `Zeros`).
    """

    tape: Tape
    outputs: tuple[tuple[str, Any], ...]
    assigned: tuple[tuple[str, DType], ...]


@dataclass(eq=False)
class VulkanSegment:
    """A run of plan items that a Vulkan executor replays (see the module docstring)."""

    items: tuple[RegionPlan, ...]
    #: Every variable its nodes read or write (a loop index among them: walked).
    names: frozenset[str]
    #: The ops' output names (the yield lock is checked for them) and every written name.
    op_outputs: tuple[str, ...]
    written: tuple[str, ...]
    #: Per item, the names written by the items before it.
    written_before: tuple[frozenset[str], ...]
    #: The external inputs in the order the walk resolved them (from the first trace).
    externals: tuple[tuple[VarRef, DType], ...] | None = None
    #: Per external input, (model value, its device tensor) when the walk read a model
    #: tensor or initial value uploaded once per executor, else None: a replay takes that
    #: tensor while the name has no value of the step and the value is still the initial one.
    models: tuple[tuple[Any, Any] | None, ...] = ()
    traces: OrderedDict[Any, list[_Trace]] = field(default_factory=OrderedDict)
    #: A walk that cannot be replayed (an op ran on the CPU, a quantized input).
    broken: bool = False


@dataclass(eq=False)
class _Recording:
    """What the executor reports during a recorded walk (Executor._vk_input and the CPU
    fallback of Executor._run_op_vulkan)."""

    position: int = 0
    inputs: list[tuple[int, VarRef, DType, Any]] = field(default_factory=list)
    fallback: bool = False


def _replayable(item: Item) -> bool:
    """An item a segment may hold: assigns (and deps), or one op on plain variables with
    static params."""
    if not isinstance(item, RegionPlan) or item.wide:
        return False
    nodes = item.nodes
    if all(isinstance(n, (Assign, Dep)) for n in nodes):
        return True
    if len(nodes) != 1 or not isinstance(nodes[0], Op):
        return False
    op = nodes[0]
    return (
        not op.output.indices
        and not any(r.indices for r in op.inputs)
        and not any(isinstance(v, VarName) for _key, v in op.params)
    )


def _segment(run: list[RegionPlan]) -> VulkanSegment:
    names: set[str] = set()
    op_outputs: list[str] = []
    written: dict[str, None] = {}
    before: list[frozenset[str]] = []
    for item in run:
        before.append(frozenset(written))
        for node in item.nodes:
            if isinstance(node, Op):
                names.update(r.name for r in node.inputs)
                names.add(node.output.name)
                op_outputs.append(node.output.name)
                written[node.output.name] = None
            elif isinstance(node, Assign):
                names.add(node.name)
                written[node.name] = None
    return VulkanSegment(
        tuple(run), frozenset(names), tuple(dict.fromkeys(op_outputs)), tuple(written),
        tuple(before),
    )  # fmt: skip


def segments(items: list[Item]) -> list[Item]:
    """`items` with each run of replayable items that holds an op made one `VulkanSegment`.

    A run ends before an op that reads a name whose last writer in the run is an assign (the
    placeholder is an input uploaded from the host, resolved when the segment starts).
    """
    out: list[Item] = []
    run: list[RegionPlan] = []
    placeholders: set[str] = set()

    def close() -> None:
        if any(isinstance(i.nodes[0], Op) for i in run):
            out.append(_segment(run))
        else:
            out.extend(run)
        run.clear()
        placeholders.clear()

    for item in items:
        if not _replayable(item):
            close()
            out.append(item)
            continue
        assert isinstance(item, RegionPlan)
        node = item.nodes[0]
        if isinstance(node, Op):
            if any(r.name in placeholders for r in node.inputs):
                close()
            placeholders.discard(node.output.name)
        else:
            placeholders.update(n.name for n in item.nodes if isinstance(n, Assign))
        run.append(item)
    close()
    return out


def _root(tensor: Any) -> Any:
    while tensor.base is not None:
        tensor = tensor.base
    return tensor


class VulkanReplay:
    """The segments of one Vulkan executor and their traces; `run` replays or walks one."""

    def __init__(self, executor: Executor) -> None:
        from openinfer_jax.vk.backend import DeviceTensor  # vk only where it runs

        self._device_tensor = DeviceTensor
        self.executor = executor
        self.backend = executor.sim.vulkan
        self._items: dict[int, tuple[list[Item], list[Item]]] = {}
        #: The walk being recorded (the executor reports its inputs and fallbacks).
        self.recording: _Recording | None = None
        #: Segments replayed and walks recorded since the executor started.
        self.replayed = 0
        self.recorded = 0

    def items(self, items: list[Item]) -> list[Item]:
        """A plan item list with its segments (kept per list: plan lists are cached)."""
        found = self._items.get(id(items))
        if found is not None and found[0] is items:
            return found[1]
        out = segments(items)
        self._items[id(items)] = (items, out)
        return out

    def run(
        self, segment: VulkanSegment, scope: dict[str, int]
    ) -> Generator[TraceEvent, None, None]:
        """Replay `segment` if a trace fits, else walk it (recording a trace when it may)."""
        ex = self.executor
        eligible = (
            not ex._emit and not segment.broken and (not scope or segment.names.isdisjoint(scope))
        )
        if eligible and segment.externals is not None:
            try:
                if self._replay(segment, scope):
                    self.replayed += 1
                    return
            except OpenInferError as err:
                first = next(n for i in segment.items for n in i.nodes if isinstance(n, Op))
                raise ex._node_error(first, err) from err
        if not eligible or not self.backend.start_tape():
            for item in segment.items:
                yield from ex._run_region(item, scope)
            return
        recording = self.recording = _Recording()
        try:
            for position, item in enumerate(segment.items):
                recording.position = position
                yield from ex._run_region(item, scope)  # no events: none are emitted
        finally:
            self.recording = None
            tape = self.backend.stop_tape()
        try:
            self._keep_trace(segment, recording, tape)
        finally:
            tape.made = None  # the results are the store's now; the tape must not hold them

    def _replay(self, segment: VulkanSegment, scope: dict[str, int]) -> bool:
        ex = self.executor
        assert segment.externals is not None
        vk_input = ex._vk_input
        store, initial = ex.vars.store, ex.vars.initial_values
        try:
            tensors = [
                model[1]
                if model is not None
                and dict.get(store, ref.name) is None
                and initial.get(ref.name) is model[0]
                else vk_input(ref, dtype, scope)
                for (ref, dtype), model in zip(segment.externals, segment.models)
            ]
        except OpenInferError:
            return False  # the walk reports it at the node that reads the input
        device_tensor = self._device_tensor
        if any(type(t) is not device_tensor for t in tensors):
            return False
        traces = segment.traces.get(tuple([(t.buffer, t.shape, t.dtype) for t in tensors]))
        if not traces:
            return False
        check = ex.vars.write_check
        if check is not None:
            try:
                for name in segment.op_outputs:
                    check(name)
            except OpenInferError:
                return False  # the walk reports it at its node
        for trace in traces:
            made = self.backend.replay_tape(trace.tape)
            if made is not None:
                break
        else:
            return False
        if trace is not traces[-1]:
            traces.remove(trace)
            traces.append(trace)
        for name, recipe in trace.outputs:
            if type(recipe) is int:
                dict.__setitem__(store, name, DeviceResident(made[recipe]))
            elif recipe[0] == "value":
                dict.__setitem__(store, name, recipe[1])
            else:
                dict.__setitem__(store, name, DeviceResident(_build(recipe, made, tensors)))
        dtypes = ex.vars.dtypes
        for name, dtype in trace.assigned:
            dtypes[name] = dtype
        return True

    def _keep_trace(self, segment: VulkanSegment, recording: _Recording, tape: Tape) -> None:
        """Turn a recorded walk into a trace of `segment`, or mark the segment `broken`."""
        if recording.fallback:
            segment.broken = True
            return
        made = tape.made
        assert made is not None
        if len({alloc[1] for alloc in tape.allocs}) != len(tape.allocs):
            return  # a buffer taken twice (freed within the walk): not replayable as is
        index = {id(t): i for i, t in enumerate(made)}
        externals: list[tuple[VarRef, DType]] = []
        tensors: list[Any] = []
        seen: dict[str, Any] = {}
        for position, ref, dtype, tensor in recording.inputs:
            if type(tensor) is not self._device_tensor:
                segment.broken = True  # a block-quantized weight: its planes are not checked
                return
            if id(_root(tensor)) in index:
                continue  # computed in the segment
            if ref.name in segment.written_before[position]:
                segment.broken = True  # a value from the host after the segment began
                return
            if ref.name in seen:
                if seen[ref.name] is not tensor:
                    return
                continue
            seen[ref.name] = tensor
            externals.append((ref, dtype))
            tensors.append(tensor)
        if segment.externals is None:
            segment.externals = tuple(externals)
            segment.models = tuple(
                self._model(ref.name, t) for (ref, _dtype), t in zip(externals, tensors)
            )
        elif segment.externals != tuple(externals):
            return
        ext_index = {id(t): j for j, t in enumerate(tensors)}
        store = self.executor.vars.store
        outputs: list[tuple[str, Any]] = []
        for name in segment.written:
            raw = dict.get(store, name)
            if isinstance(raw, DeviceResident):
                recipe = _recipe(raw.tensor, index, ext_index)
                if recipe is None or raw.host is not None or raw.growing is not None:
                    return
            elif isinstance(raw, Zeros):
                recipe = ("value", raw)
            else:
                return
            outputs.append((name, recipe))
        assigned = tuple(
            (n.name, n.dtype) for item in segment.items for n in item.nodes
            if isinstance(n, Assign)
        )  # fmt: skip
        key = tuple([(t.buffer, t.shape, t.dtype) for t in tensors])
        traces = segment.traces.pop(key, [])
        segment.traces[key] = [*traces[1 - _TRACES :], _Trace(tape, tuple(outputs), assigned)]
        while len(segment.traces) > _SIGNATURES:
            segment.traces.popitem(last=False)
        self.recorded += 1

    def _model(self, name: str, tensor: Any) -> tuple[Any, Any] | None:
        """(value, tensor) when `name` holds its initial value, uploaded as `tensor` once per
        executor (Executor._vk_upload keeps model values), else None."""
        ex = self.executor
        value = ex.vars.initial_values.get(name)
        raw = dict.get(ex.vars.store, name)
        uploaded = ex._vk_weights.get(id(value))
        if (
            value is not None
            and isinstance(raw, DeviceResident)
            and raw.host is value
            and raw.tensor is tensor
            and uploaded is not None
            and uploaded[0] is value
            and uploaded[1] is tensor
        ):
            return value, tensor
        return None


def _recipe(tensor: Any, index: dict[int, int], ext_index: dict[int, int]) -> Any:
    """How a replay rebuilds `tensor` (see `_Trace`), or None if it cannot."""
    found = index.get(id(tensor))
    if found is not None:
        return found
    found = ext_index.get(id(tensor))
    if found is not None:
        return ("ext", found)
    if tensor.base is None:
        return None
    inner = _recipe(tensor.base, index, ext_index)
    return None if inner is None else ("view", inner, tensor.dtype, tensor.shape)


def _build(recipe: Any, made: list[Any], tensors: list[Any]) -> Any:
    """The tensor of a recipe from a replay's results and external inputs."""
    if type(recipe) is int:
        return made[recipe]
    if recipe[0] == "ext":
        return tensors[recipe[1]]
    return _build(recipe[1], made, tensors).view(recipe[2], recipe[3])
