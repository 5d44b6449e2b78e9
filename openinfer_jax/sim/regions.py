"""Compiling jit regions: one XLA executable per (region, input signature), cached.

A signature is the input shapes and dtypes, which inputs are padded (`Ragged`) along which
axis and which of them share a valid length, and the values of runtime-scalar params
(`value=alpha`). Loop bodies reuse their region across iterations because prefix-table
references (`W[l]`) are resolved by the scheduler: the region only sees arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import OpenInferError
from openinfer_jax.ir.nodes import Assign, Dep, Op, Transfer, VarName, VarRef
from openinfer_jax.ops import registry
from openinfer_jax.ops.nn_jax import partitioned
from openinfer_jax.sim.plan import RegionPlan
from openinfer_jax.sim.ragged import NeedExact, Rag, apply_op
from openinfer_jax.sim.stats import CompileStats
from openinfer_jax.sim.values import Deferred, Packed, Ragged, Zeros

__all__ = [
    "CompiledRegion",
    "NodeFailure",
    "NodeShapes",
    "RegionCompiler",
    "Signature",
    "Slot",
    "plan_layout",
    "slot_value",
]


class NodeFailure(Exception):
    """A node of a region failed while tracing; carries the node and the cause."""

    def __init__(self, node: Any, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.node = node
        self.cause = cause


@dataclass
class NodeShapes:
    """Shapes and dtypes one node saw while its region was traced (for trace events)."""

    input_shapes: list[list[int]] = field(default_factory=list)
    input_dtypes: list[str] = field(default_factory=list)
    output_shapes: list[list[int]] = field(default_factory=list)
    output_dtypes: list[str] = field(default_factory=list)


# (shape, numpy dtype str, padded axis or None, length slot or None) per input, then params.
Signature = tuple[Any, ...]


# How a region write comes back: ("out", position in the returned tuple), ("zeros",
# shape, dtype) for an untouched `assign`, ("deferred", shape, dtype) for a value no
# later node reads, computed from the region's inputs when someone does (values.Deferred),
# or ("packed", position, offset, shape, dtype) for a small dead `assign` returned inside
# one flat output with the others of its dtype (a view of it made if fetched).
Slot = tuple[Any, ...]

# A dead write smaller than this is returned anyway: writing it out costs less than the
# recipe compilation a fetch of it would need (~0.1 ms per MiB at memory speed, vs ms-s).
DEFER_MIN_BYTES = 1 << 20


@dataclass
class CompiledRegion:
    """A region's executable for one signature, plus what its outputs look like.

    `layout` has one `Slot` per `region.writes`; `recipe(inputs, lengths, k)` computes
    write k alone (XLA drops the rest of the region), for `Deferred` slots.
    """

    fn: Callable[..., Any]
    out_rags: list[Rag | None]
    shapes: list[NodeShapes]
    exact: bool
    layout: list[Slot] = field(default_factory=list)
    recipe: Callable[..., Any] | None = None
    fresh: bool = True  # not called yet: XLA compiles it at its first call (sim/stats.py)

    def values(
        self,
        outs: tuple[Any, ...],
        inputs: tuple[Any, ...],
        lengths: tuple[Any, ...],
        valid: list[int],
    ) -> list[Any]:
        """One stored value per region write: arrays/`Ragged` returned, or placeholders.

        `inputs` and `lengths` are the call's arguments (a `Deferred` recomputes from
        them); `valid` the call's valid lengths as ints (for `Ragged` outputs).
        """
        return [
            slot_value(slot, k, outs, self.out_rags, valid, self.recipe, inputs, lengths)
            for k, slot in enumerate(self.layout)
        ]


def slot_value(
    slot: Slot,
    k: int,
    outs: tuple[Any, ...],
    out_rags: list[Rag | None],
    valid: list[int],
    recipe: Callable[..., Any] | None,
    inputs: Any,
    lengths: Any,
) -> Any:
    """The stored value of one region write (shared by narrow and wide regions)."""
    kind = slot[0]
    if kind == "out":
        out, rag = outs[slot[1]], out_rags[slot[1]]
        return Ragged(out, rag.axis, valid[rag.slot]) if rag is not None else out
    if kind == "zeros":
        return Zeros(slot[1], slot[2])
    if kind == "packed":
        return Packed(outs[slot[1]], slot[2], slot[3], slot[4])
    assert recipe is not None
    return Deferred(slot[1], slot[2], lambda: recipe(inputs, lengths, k))


def plan_layout(
    region: RegionPlan,
    keys: list[Any],
    name_of: Callable[[Any], str | None],
    env: dict[Any, Any],
    zero_ids: dict[int, Any],
    tainted: set[Any],
    lean: bool,
    pack: bool = False,
) -> tuple[list[Slot], list[Any], list[list[Any]]]:
    """Which writes a traced region returns: (layout, keys returned in order, packs).

    `env[key]` starts with the traced value and its padding; `zero_ids` the ids of untouched
    `assign` zeros; `tainted` the keys whose value depends on something not immutable or
    padded (a table read, a `Ragged` input), which must be returned. `name_of(key)` is the
    variable name, or None for a prefix-table entry (always returned). Dead writes below
    `DEFER_MIN_BYTES` are returned too: with `pack`, the dead `assign`s among them (not
    padded) as one flat output per dtype, each pack of keys returned after `returned`, so
    a call hands back (and, recycled, donates) one buffer for them instead of one each.
    """
    layout: list[Slot] = []
    returned: list[Any] = []
    groups: dict[Any, list[tuple[int, Any]]] = {}
    for key in keys:
        value, rag = env[key][0], env[key][1]
        name = name_of(key)
        live = not lean or name is None or name in region.used_after
        if lean and id(value) in zero_ids:
            # Live or not: a reader materializes the zeros itself, usually never (the
            # next region overwrites the `assign`ed buffer before reading it).
            layout.append(("zeros", tuple(value.shape), np.dtype(value.dtype)))
        elif not live and key not in tainted and _nbytes(value) >= DEFER_MIN_BYTES:
            layout.append(("deferred", tuple(value.shape), np.dtype(value.dtype)))
        elif pack and not live and rag is None and name in region.assigns:
            groups.setdefault(np.dtype(value.dtype), []).append((len(layout), key))
            layout.append(())  # placed below
        else:
            layout.append(("out", len(returned)))
            returned.append(key)
    packs = []
    for members in groups.values():
        if len(members) == 1:  # alone: returned as it is
            ((at, key),) = members
            layout[at] = ("out", len(returned))
            returned.append(key)
        else:
            packs.append(members)
    # the packed outputs follow every returned key
    for position, members in enumerate(packs, start=len(returned)):
        offset = 0
        for at, key in members:
            value = env[key][0]
            layout[at] = ("packed", position, offset, tuple(value.shape), np.dtype(value.dtype))
            offset += math.prod(value.shape)
    return layout, returned, [[key for _at, key in members] for members in packs]


def _shape_of(x: Any, rag: Rag | None) -> list[int]:
    shape = [int(d) for d in x.shape]
    if rag is not None:
        shape[rag.axis] = -1 - rag.slot  # padded: filled in with the call's valid length
    return shape


# Cache entry for a signature whose region cannot run on padded inputs.
_NEEDS_EXACT: Any = object()


class RegionCompiler:
    """Builds and caches region executables (shared by a simulator's executors).

    `dtype_of(ref)` gives the declared DType of a variable reference (packed types are
    int8/uint8 in memory, so the array alone cannot tell i4 from i8).
    """

    def __init__(self) -> None:
        self.cache: dict[tuple[int, Signature], CompiledRegion] = {}
        # Sharding hooks (docs/sharding.md, set by sim/sharding.py): pin a planned
        # activation's sharding as it is produced; wrap a region's jitted function.
        self.constrain: Callable[[str, Any], Any] | None = None
        self.wrap: Callable[[str, Any], Any] | None = None
        # Lean regions (plan.py RegionPlan.lean) may leave dead outputs out; off to
        # return every write (Simulator(lean=False)), and always off when sharded, whose
        # trace annotations read each output's placement.
        self.lean = True

    def lean_for(self, region: RegionPlan) -> bool:
        """Whether `region` leaves its dead outputs out in this compiler's mode."""
        return region.lean and self.lean and self.constrain is None and self.wrap is None

    def get(
        self,
        region: RegionPlan,
        arrays: list[Any],
        rags: list[Rag | None],
        n_lengths: int,
        dtypes: list[DType],
        out_dtypes: list[DType],
        scalars: dict[str, Any],
        params: list[dict[str, Any]],
        stats: CompileStats | None = None,
    ) -> CompiledRegion:
        """The executable for this call's signature (built on first use; a signature that
        needs exact shapes counts in `stats.exact_fallbacks` of the executor that found it).

        Raises:
            NeedExact: the region cannot run on these padded inputs.
        """
        sig: Signature = (
            tuple(
                (a.shape, a.dtype, r.axis if r else None, r.slot if r else None)
                for a, r in zip(arrays, rags)
            ),
            tuple(d.code for d in dtypes),
            tuple(sorted(scalars.items())),
            self.lean_for(region),
        )
        key = (region.id, sig)
        compiled = self.cache.get(key)
        if compiled is None:
            try:
                compiled = self._build(region, arrays, rags, n_lengths, dtypes, out_dtypes, params)
            except NeedExact:
                if stats is not None:
                    stats.exact_fallbacks += 1
                compiled = _NEEDS_EXACT
            self.cache[key] = compiled
        if compiled is _NEEDS_EXACT:
            raise NeedExact(f"region {region.id} needs exact shapes")
        return compiled

    def _build(
        self,
        region: RegionPlan,
        samples: list[Any],
        rags: list[Rag | None],
        n_lengths: int,
        dtypes: list[DType],
        out_dtypes: list[DType],
        params: list[dict[str, Any]],
    ) -> CompiledRegion:
        out_rags: list[Rag | None] = []
        shapes: list[NodeShapes] = []
        layout: list[Slot] = []
        lean = self.lean_for(region)

        def run(
            ragged: bool, inputs: tuple[Any, ...], lengths: tuple[Any, ...], target: int = -1
        ) -> Any:
            # target >= 0: the recipe of one deferred write (nothing recorded, one output)
            record = target < 0
            if record:
                out_rags.clear()
                shapes.clear()
            env: dict[VarRef, tuple[Any, Rag | None, DType]] = {
                ref: (x, r if ragged else None, d)
                for ref, x, r, d in zip(region.reads, inputs, rags, dtypes)
            }
            # Padded inputs make a write depend on the call's valid lengths: returned.
            tainted = {ref for ref, r in zip(region.reads, rags) if ragged and r is not None}
            zero_ids: dict[int, Any] = {}  # id -> the zeros (kept alive: ids stay unique)
            op_index = 0
            for node in region.nodes:
                info = NodeShapes()
                if record:
                    shapes.append(info)
                try:
                    if isinstance(node, Op):
                        self.trace_op(
                            node, env, lengths, params[op_index], out_dtypes[op_index], info
                        )
                        op_index += 1
                        _taint(tainted, node.output, any(r in tainted for r in node.inputs))
                    elif isinstance(node, Assign):
                        arr = jnp.zeros(tuple(int(d) for d in node.dims), node.dtype.numpy)
                        zero_ids[id(arr)] = arr
                        env[VarRef(node.name)] = (arr, None, node.dtype)
                        _taint(tainted, VarRef(node.name), False)
                        info.output_shapes.append(list(arr.shape))
                        info.output_dtypes.append(node.dtype.short)
                    elif isinstance(node, Transfer):
                        src = env[node.src]
                        env[node.dst] = src
                        _taint(tainted, node.dst, node.src in tainted)
                        info.input_shapes.append(_shape_of(src[0], src[1]))
                        info.output_shapes.append(_shape_of(src[0], src[1]))
                        info.input_dtypes.append(src[2].short)
                        info.output_dtypes.append(src[2].short)
                    else:
                        assert isinstance(node, Dep)
                except NeedExact:
                    raise
                except (OpenInferError, TypeError, ValueError, IndexError) as err:
                    raise NodeFailure(node, err) from err
            if not record:
                return env[region.writes[target]][0]
            slots, returned, _packs = plan_layout(
                region,
                list(region.writes),
                lambda ref: None if ref.indices else ref.name,
                env,
                zero_ids,
                tainted,
                lean,
            )
            layout[:] = slots
            outs = []
            for ref in returned:
                arr, rag, _dtype = env[ref]
                outs.append(arr)
                out_rags.append(rag)
            return tuple(outs)

        fn = jax.jit(lambda inputs, lengths: run(True, inputs, lengths))
        # Trace now (not at the first call) so that NeedExact surfaces here and the node
        # shapes are known; the jitted callable then compiles this signature on its first
        # call and later calls take JAX's C++ fast path (an AOT `Compiled` call is slower).
        lengths0 = tuple(np.zeros((), np.int32) for _ in range(n_lengths))
        fn.trace(tuple(samples), lengths0)
        if self.wrap is not None:
            fn = self.wrap(f"region {region.id}", fn)
        recipe = None
        if any(slot[0] == "deferred" for slot in layout):
            recipe = jax.jit(
                lambda inputs, lengths, k: run(True, inputs, lengths, k), static_argnums=2
            )
        return CompiledRegion(fn, list(out_rags), list(shapes), not any(rags), list(layout), recipe)

    def trace_op(
        self,
        node: Op,
        env: dict[VarRef, tuple[Any, Rag | None, DType]],
        lengths: tuple[Any, ...],
        params: dict[str, Any],
        out_dtype: DType,
        info: NodeShapes,
    ) -> None:
        """Trace one op node into `env` (ref -> (value, rag, dtype)), recording its shapes."""
        opdef = registry.get(node.op)
        assert opdef is not None
        xs = [env[r][0] for r in node.inputs]
        rags = [env[r][1] for r in node.inputs]
        dts = [env[r][2] for r in node.inputs]
        for x, r, d in zip(xs, rags, dts):
            info.input_shapes.append(_shape_of(x, r))
            info.input_dtypes.append(d.short)
        # A sharded region: ops keep their partitionable formulation.
        with partitioned(self.constrain is not None):
            out, rag = apply_op(opdef, xs, rags, lengths, dts, params)
        want = out_dtype.numpy
        if out.dtype != want:
            out = out.astype(want)
        if self.constrain is not None:
            out = self.constrain(node.output.name, out)
        env[node.output] = (out, rag, out_dtype)
        info.output_shapes.append(_shape_of(out, rag))
        info.output_dtypes.append(out_dtype.short)


def _nbytes(value: Any) -> int:
    return int(np.prod(value.shape, dtype=np.int64)) * np.dtype(value.dtype).itemsize


def _taint(tainted: set[Any], key: Any, dirty: bool) -> None:
    """Record whether `key` now holds a value that must be returned (see plan_layout)."""
    if dirty:
        tainted.add(key)
    else:
        tainted.discard(key)


def fill_lengths(shapes: list[list[int]], lengths: list[int]) -> list[list[int]]:
    """Trace-time shapes with padded axes (negative: -1 - slot) replaced by this call's lengths."""
    return [[lengths[-d - 1] if d < 0 else d for d in shape] for shape in shapes]


def static_params(node: Op, lookup: Callable[[str], Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Raw params of `node` with `VarName` values bound via `lookup`; and those bindings."""
    raw: dict[str, Any] = {}
    bound: dict[str, Any] = {}
    for key, value in node.params:
        if isinstance(value, VarName) and value.name.lower() not in (
            "inf",
            "+inf",
            "-inf",
            "nan",
            "true",
            "false",
        ):
            resolved = lookup(value.name)
            if resolved is not None:
                bound[key] = resolved
                raw[key] = resolved
                continue
        raw[key] = value
    return raw, bound
