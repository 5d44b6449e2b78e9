"""Sharded simulation: a `jax.sharding.Mesh` and a plan place every variable on the devices.

`Simulator(model, graph, mesh=mesh, sharding=plan)` attaches a `ShardedPlacement`. It
resolves the plan (sharding_plan.py) once, at construction, so a bad plan fails before any
weight is read. From then on the simulator asks it where each variable lives:

- weights come straight from the `.oinf` mmap shard by shard
  (`jax.make_array_from_callback` over the loader's zero-copy view: each device receives
  only its slice, no device ever sees a full host copy);
- persistent cache tables are allocated with their sharding and keep it across steps
  (donated in-place updates and capacity doubling preserve the layout);
- dynamic inputs and every other array are committed to the mesh (replicated unless the
  plan says otherwise), so each jitted region runs as one SPMD program: XLA partitions it
  from its inputs' shardings and inserts the collectives. Activations the plan names get a
  sharding constraint where a region produces them.

The effect scheduler is unchanged: it only sees arrays that happen to live on many devices.
The trace (`TraceEvent.sharding`) names the mesh, each output's spec and, per region, the
collectives XLA inserted (counts and bytes, read from the compiled HLO; with the timer on,
also their time measured standalone, see sharding_timing.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from openinfer_jax.core.errors import ShardingError
from openinfer_jax.ir.nodes import Assign, Block, MemoryKind, VarDecl
from openinfer_jax.ir.walk import walk
from openinfer_jax.sim.sharding_hlo import CollectiveStats, collectives_of
from openinfer_jax.sim.sharding_plan import (
    PlanKey,
    PlanValue,
    VariableLayout,
    auto_plan,
    resolve_plan,
    spec_text,
    variable_layouts,
)
from openinfer_jax.sim.sharding_timing import region_collective_ns

if TYPE_CHECKING:
    from openinfer_jax.sim.events import TraceEvent
    from openinfer_jax.sim.executor import Executor
    from openinfer_jax.sim.simulator import Simulator

__all__ = [
    "AUTO",
    "RegionProbe",
    "ShardedPlacement",
    "attach_sharding",
    "device_mesh",
    "mesh_text",
    "sharding_scope",
]

# `sharding=AUTO` asks for `auto_plan` over the mesh's last axis.
AUTO = "auto"

Plan = Mapping[PlanKey, PlanValue] | str | None

# A default (mesh, plan) for Simulators built without one: lets a test run unmodified
# example programs sharded (`with sharding_scope(mesh, AUTO): example.main()`).
_SCOPE: contextvars.ContextVar[tuple[Mesh, Plan] | None] = contextvars.ContextVar(
    "openinfer_sharding_scope", default=None
)


@contextlib.contextmanager
def sharding_scope(mesh: Mesh, plan: Plan = None) -> Iterator[None]:
    """Within the block, `Simulator`s built without `mesh=` use this mesh and plan."""
    token = _SCOPE.set((mesh, plan))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def device_mesh(
    devices: int | None = None,
    axes: Mapping[str, int] | None = None,
    platform: str | None = None,
) -> Mesh:
    """A `Mesh` over the first `devices` devices of `platform` (JAX's default if None).

    `axes` maps axis names to sizes (their product must be `devices`); by default one axis
    ``"model"`` over all of them.

    Raises:
        ShardingError: fewer devices than asked, or axis sizes that do not multiply out.
    """
    try:
        available = jax.devices(platform) if platform else jax.devices()
    except RuntimeError as err:
        raise ShardingError(f"no {platform} devices: {err}") from None
    n = len(available) if devices is None else devices
    if n < 1 or n > len(available):
        kind = available[0].platform if available else "jax"
        hint = (
            " (on CPU set XLA_FLAGS=--xla_force_host_platform_device_count=N before jax starts)"
            if kind == "cpu"
            else ""
        )
        raise ShardingError(f"asked for {n} devices, {kind} has {len(available)}{hint}")
    shape = dict(axes) if axes else {"model": n}
    total = 1
    for name, size in shape.items():
        if size < 1:
            raise ShardingError(f"mesh axis {name!r} has size {size}; sizes must be >= 1")
        total *= size
    if total != n:
        sizes = " x ".join(f"{a}={s}" for a, s in shape.items())
        raise ShardingError(f"mesh axes {sizes} cover {total} devices, not {n}")
    grid = np.array(available[:n], dtype=object).reshape(tuple(shape.values()))
    return Mesh(grid, tuple(shape))


def mesh_text(mesh: Mesh) -> str:
    """``"cpu mesh(data=2, model=4)"``: platform and axis sizes."""
    axes = ", ".join(f"{a}={n}" for a, n in zip(mesh.axis_names, mesh.devices.shape))
    return f"{mesh.devices.flat[0].platform} mesh({axes})"


def attach_sharding(sim: Simulator, mesh: Any, plan: Plan) -> ShardedPlacement | None:
    """The simulator's `ShardedPlacement`, or None when it runs on one device.

    Uses the enclosing `sharding_scope` when `mesh` is None. On success the simulator's
    device becomes the replicated sharding over the mesh and its region compilers get the
    constraint and probe hooks.

    Raises:
        ShardingError: a plan without a mesh, a mesh that is not a `jax.sharding.Mesh`, a
            device that cannot shard (numpy, vulkan), or a plan that does not fit.
    """
    if mesh is None:
        if plan is not None:
            raise ShardingError(
                "sharding= needs mesh=: pass a jax.sharding.Mesh (see device_mesh())"
            )
        scoped = _SCOPE.get()
        if scoped is None or sim.eager or sim.vulkan is not None:
            return None
        mesh, plan = scoped
    if not isinstance(mesh, Mesh):
        raise ShardingError(f"mesh= must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if sim.eager or sim.vulkan is not None:
        raise ShardingError(
            f"device={sim.device_name!r} runs on the host only; sharding needs 'cpu' or 'gpu'"
        )
    placement = ShardedPlacement(sim, mesh, plan)
    sim.jax_device = placement.replicated
    sim.device_name = placement.text  # trace events name the mesh, e.g. "gpu mesh(model=2)"
    sim.compiler.constrain = placement.constrain
    sim.compiler.wrap = placement.probe
    sim.wide.constrain = placement.constrain
    sim.wide.wrap = placement.probe
    return placement


class ShardedPlacement:
    """Where each variable of one simulator lives on a mesh; see the module docstring.

    `specs` maps variable names (declared, or `assign`ed in a block) to their
    PartitionSpec; everything else is replicated. `regions` collects, per jitted region,
    the mesh, its input/output specs and the collectives of its compiled program.
    """

    def __init__(self, sim: Simulator, mesh: Mesh, plan: Plan) -> None:
        self.sim = sim
        self.mesh = mesh
        self.replicated = NamedSharding(mesh, PartitionSpec())
        self.layouts = self._layouts(sim)
        if isinstance(plan, str):
            if plan != AUTO:
                raise ShardingError(f"sharding={plan!r}: use a mapping or {AUTO!r}")
            self.specs = auto_plan(self.layouts, mesh, mesh.axis_names[-1])
        else:
            self.specs = resolve_plan(plan, self.layouts, mesh)
        self.shardings = {name: NamedSharding(mesh, s) for name, s in self.specs.items()}
        self.regions: dict[str, dict[str, Any]] = {}
        self.text = mesh_text(mesh)

    # ---- plan resolution -------------------------------------------------------------------
    def _layouts(self, sim: Simulator) -> list[VariableLayout]:
        from openinfer_jax.sim.caches import INITIAL_CAPACITY

        def resolve(decl: VarDecl) -> tuple[int, ...]:
            return sim.resolve_dims(decl.dims, f"variable {decl.name!r}")

        def capacity(decl: VarDecl, index: str) -> int:
            return dict(decl.fixed).get(index, INITIAL_CAPACITY)

        tensors = list(sim.model.tensors) if sim.model is not None else []
        layouts = variable_layouts(sim.graph, resolve, tensors, capacity)
        declared = {lay.name for lay in layouts}
        # Activations named by `assign` inside blocks can be planned too.
        blocks: list[Block] = list(sim.graph.blocks)
        for blk in blocks:
            for node in walk(blk.nodes):
                if isinstance(node, Assign) and node.name not in declared:
                    declared.add(node.name)
                    dims = sim.resolve_dims(node.dims, f"assign {node.name!r}")
                    layouts.append(
                        VariableLayout(
                            node.name, MemoryKind.VOLATILE, dims, frozenset(), frozenset(), ()
                        )
                    )
        return layouts

    # ---- placement -------------------------------------------------------------------------
    def sharding_for(self, name: str) -> NamedSharding:
        """The sharding of variable `name` (replicated when the plan does not name it)."""
        return self.shardings.get(name, self.replicated)

    def load_tensor(self, view: np.ndarray, decl: VarDecl) -> jax.Array:
        """Model tensor `view` (the loader's zero-copy mmap view) placed shard by shard.

        The callback hands each device only its slice of the view, so the host never
        materializes a full copy per device.
        """
        sharding = self.sharding_for(decl.name)

        def shard(index: tuple[slice, ...] | None) -> np.ndarray:
            return np.asarray(view if index is None else view[index])

        return jax.make_array_from_callback(tuple(view.shape), sharding, shard)

    def constrain(self, name: str, value: Any) -> Any:
        """Inside a traced region: pin activation `name` to its planned sharding.

        Left alone when the plan does not name it, or when a padded (bucketed) shape does
        not divide evenly, in which case XLA's propagation decides.
        """
        sharding = self.shardings.get(name)
        if sharding is None or not hasattr(value, "shape"):
            return value
        spec = sharding.spec
        if len(spec) > len(value.shape):
            return value
        sizes = dict(self.mesh.shape)
        for dim, item in enumerate(spec):
            if item is None:
                continue
            parts = 1
            for axis in item if isinstance(item, tuple) else (item,):
                parts *= sizes[axis]
            if value.shape[dim] % parts:
                return value
        return jax.lax.with_sharding_constraint(value, sharding)

    # ---- trace --------------------------------------------------------------------------------
    def probe(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Wrap region `label`'s jitted function so traced runs record its placement."""
        return RegionProbe(self, label, fn)

    def record(self, label: str, fn: Any, args: tuple[Any, ...]) -> None:
        """Placement and collectives of region `label` for `args` (compiled program reused)."""
        compiled = fn.lower(*args).compile()
        stats: CollectiveStats = collectives_of(compiled.as_text())
        self.regions[label] = {
            "mesh": self.text,
            "inputs": [_spec_of(s) for s in jax.tree_util.tree_leaves(compiled.input_shardings)],
            "outputs": [_spec_of(s) for s in jax.tree_util.tree_leaves(compiled.output_shardings)],
            "collectives": stats.to_dict(),
            "instances": list(stats.instances),
        }

    def annotate(self, ev: TraceEvent, ex: Executor) -> None:
        """Fill `ev.sharding`: the mesh, each output's spec, its region's collectives."""
        outputs: dict[str, str] = {}
        for ref in ev.output:
            name = re.split(r"[\[(]", ref, maxsplit=1)[0].strip()
            value = ex.vars.store.get(name)
            if value is None and name in ex.persistent.tables:
                value = ex.persistent.tables[name].buffer
            sharding = getattr(getattr(value, "data", value), "sharding", None)
            if isinstance(sharding, NamedSharding):
                outputs[ref] = spec_text(sharding.spec)
        info: dict[str, Any] = {"mesh": self.text, "outputs": outputs}
        region = self.regions.get(_label_of(ev))
        if region is not None:
            collectives = region["collectives"]
            if self.sim.timing and "time_ns" not in collectives:
                # Measured here, after the region's own time was taken, not inside it.
                collectives["time_ns"] = region_collective_ns(self.mesh, region["instances"])
            info["collectives"] = collectives
        ev.sharding = info


def _label_of(ev: TraceEvent) -> str:
    return f"region {ev.region}"


def _spec_of(sharding: Any) -> str:
    if isinstance(sharding, NamedSharding):
        return spec_text(sharding.spec)
    return str(sharding)


class RegionProbe:
    """A region's jitted function that, when the simulator traces, records its placement.

    The first traced call per input signature lowers and compiles the same program (JAX's
    compile cache makes that free after the call has compiled once) and reads the
    collectives from its HLO. Untraced calls go straight to the jitted function.
    """

    def __init__(self, owner: ShardedPlacement, label: str, fn: Callable[..., Any]) -> None:
        self.owner = owner
        self.label = label
        self.fn = fn
        self.seen: set[Any] = set()

    def __call__(self, *args: Any) -> Any:
        """Run the region; on a traced step also record its placement once per signature."""
        sim = self.owner.sim
        if not (sim.tracing or sim.env_trace):
            return self.fn(*args)
        # Described before the call: donated buffers are gone after it.
        abstract = jax.tree_util.tree_map(_abstract, args)
        key = str(jax.tree_util.tree_leaves(abstract))
        out = self.fn(*args)
        if key not in self.seen:
            self.seen.add(key)
            self.owner.record(self.label, self.fn, abstract)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fn, name)


def _abstract(x: Any) -> Any:
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    if isinstance(x, (np.ndarray, np.generic)):
        return jax.ShapeDtypeStruct(x.shape, x.dtype)
    return x
