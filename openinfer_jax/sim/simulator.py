"""The Simulator: binds a graph to a model and a device, then makes executors.

`Simulator(model, graph, device="cpu")` validates the graph against the model once; its
executors share the compiled regions (compilation is per simulator, not per executor).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from openinfer_jax.core.dims import missing_sizes, resolve_dims
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import (
    BackendError,
    GraphValidationError,
    OpenInferError,
    SimulationError,
)
from openinfer_jax.core.limits import DEFAULT_LIMITS, Limits
from openinfer_jax.ir.nodes import (
    Await,
    Block,
    Dim,
    Graph,
    MemoryKind,
    VarDecl,
)
from openinfer_jax.ir.walk import reads_in, walk, walk_graph, writes_in
from openinfer_jax.passes import prepare
from openinfer_jax.sim.compile_cache import enable_compile_cache
from openinfer_jax.sim.events import env_trace_level
from openinfer_jax.sim.executable_store import ExecutableStore
from openinfer_jax.sim.executor import Executor
from openinfer_jax.sim.plan import GraphPlan, RegionPlan
from openinfer_jax.sim.precision import Precision, graph_uses_64bit
from openinfer_jax.sim.regions import RegionCompiler
from openinfer_jax.sim.sharding import attach_sharding
from openinfer_jax.sim.wide import WideRunner
from openinfer_jax.trace.load import load_graph

__all__ = ["DEVICES", "Simulator"]

# Device names accepted by `Simulator(device=...)`.
DEVICES = ("cpu", "gpu", "vulkan", "numpy")


def _load_model(model: Any) -> Any:
    if model is None or hasattr(model, "tensors"):
        return model
    from openinfer_jax.oinf import ModelLoader

    return ModelLoader.open(model)


class Simulator:
    """A graph bound to a model and a device.

    Args:
        model: a `ModelLoader`, a path to a `.oinf` file, or None for a graph that needs no
            model (no sizevars, no weights).
        graph: a `Graph`, `graph{}` text, or a path.
        device: ``"cpu"`` (XLA CPU), ``"gpu"`` (JAX's GPU backend), ``"vulkan"`` (ops on the
            Kompute backend where supported, else XLA CPU with a warning in the trace),
            ``"numpy"`` (an eager interpreter calling each op's NumPy reference, no jit), or a
            `jax.Device`.
        bucketing: pad growing cache slices to buckets of a geometric ladder (see
            docs/simulator.md).
        lean: compiled regions return only the writes a later node may read; other writes
            are held as placeholders (an untouched `assign` as `Zeros`, a value computed
            from the region's inputs as `Deferred`, computed when fetched). `False` returns
            every write (the mode before; for comparisons). Sharded runs are never lean.
        validate: run `openinfer_jax.ir.validate(graph, model)` first.
        mesh: a `jax.sharding.Mesh` to run sharded over its devices (docs/sharding.md).
        sharding: the plan: variable names or patterns -> `PartitionSpec` (default replicate).
        compile_cache: JAX's persistent compilation cache (`sim/compile_cache.py`): None
            follows ``OPENINFER_COMPILE_CACHE`` (default on, in the user's cache directory),
            False turns it off, a path picks the directory. A cache directory the user
            configured in JAX is used as it is.

    Raises:
        GraphValidationError: the graph breaks a rule. BackendError: the device is missing.
        ShardingError: the plan does not fit the mesh or the graph's variables.
    """

    def __init__(
        self,
        model: Any,
        graph: Graph | str | os.PathLike[str],
        device: str | Any = "cpu",
        *,
        bucketing: bool = True,
        lean: bool = True,
        validate: bool = True,
        mesh: Any = None,
        sharding: Any = None,
        compile_cache: bool | str | os.PathLike[str] | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.compile_cache_dir = enable_compile_cache(compile_cache)
        self.model = _load_model(model)
        self.graph = load_graph(graph)
        # JAX's 64-bit mode for this simulator's calls only (see precision.py).
        self.precision = Precision(graph_uses_64bit(self.graph))
        self.sizevars: dict[str, int] = dict(self.model.sizevars) if self.model is not None else {}
        self.device_name, self.jax_device, self.vulkan = _pick_device(device)
        # device="numpy": an eager interpreter running each op's NumPy reference (a baseline).
        self.eager = self.device_name == "numpy"
        self.bucketing = bucketing
        self.tracing = False
        self.trace_summaries = False
        self.timing = False
        self.env_trace = env_trace_level()
        # The resource budget (openinfer_jax/core/limits.py): validation checks what the program
        # and model fix, the executor what run time decides (cache indices, loop lengths).
        self.limits = limits or DEFAULT_LIMITS
        if validate:
            self._validate()
        # Composite ops become registry ops with kernels (openinfer_jax/passes), after the
        # user's graph validated, so errors name the user's nodes.
        self.user_graph = self.graph
        self.graph, self.pass_report = prepare(self.graph, self.model)
        self._check_structure()
        self.plan = GraphPlan(self.graph)
        self.compiler = RegionCompiler()
        # Resolved op params, shared by every executor: the wide-region compile cache keys on
        # their identity, so per-executor copies made each new executor recompile every region.
        self.params_cache: dict[tuple[int, tuple[Any, ...]], dict[str, Any]] = {}
        self.wide = WideRunner()
        self.compiler.lean = self.wide.lean = lean
        # Sharded simulation over a jax Mesh (docs/sharding.md); the logic lives in sharding.py.
        self.sharded = attach_sharding(self, mesh, sharding)
        # Wide regions' executables kept across processes next to JAX's cache, for the
        # default device only (a stored executable runs where it was compiled).
        if (
            self.compile_cache_dir is not None
            and self.sharded is None
            and self.vulkan is None
            and not self.eager
            and self.jax_device == jax.devices()[0]
        ):
            self.wide.store = ExecutableStore(self.compile_cache_dir / "regions")
        # On a GPU a region call writes its outputs into its last outputs' buffers (wide.py).
        self.wide.recycle = (
            self.sharded is None
            and self.vulkan is None
            and not self.eager
            and self.jax_device is not None
            and self.jax_device.platform == "gpu"
        )
        # There too, small dead temporaries come back packed (wide.py WideRunner.pack).
        self.wide.pack = self.wide.recycle
        self.resolved_regions: dict[int, RegionPlan] = {}
        entry = self.graph.block("entry") or (self.graph.blocks[0] if self.graph.blocks else None)
        if entry is None:
            raise GraphValidationError("the graph has no blocks; add `block entry { ... }`")
        self.entry: Block = entry
        targets = {name for node in walk_graph(self.graph) for name in node.targets()}
        # Async consumers: blocks that are neither entry nor branch targets (reference §3).
        self.consumers = [
            b for b in self.graph.blocks if b.name != entry.name and b.name not in targets
        ]
        self.consumer_awaits = {
            b.name: {v for n in walk(b.nodes) if isinstance(n, Await) for v in n.vars}
            for b in self.consumers
        }
        # What a consumer writes into its snapshot of working memory comes back at entry's
        # await; persistent memory is shared, so persistent writes are not part of it.
        persistent = {d.name for d in self.graph.vars if d.kind is MemoryKind.PERSISTENT}
        self.consumer_writes = {b.name: writes_in(b.nodes) - persistent for b in self.consumers}
        self.required_inputs = self._required_inputs()

    # ---- builder-style options -----------------------------------------------------------
    def with_trace(self, summaries: bool = False) -> Simulator:
        """Record a `TraceEvent` per node (see `Executor.trace`); returns self.

        With `summaries`, each node that writes a variable (op, transfer, cache.read) also
        records a summary of the value it wrote (`sim/summaries.py`), for `openinfer
        trace-diff` against an emitted program's trace. Steps then run node by node (one
        region per op, as `Executor.iterate` does), so values exist after every node.
        """
        self.tracing = True
        self.trace_summaries = self.trace_summaries or summaries
        return self

    def with_timer(self) -> Simulator:
        """Time every node (waits for device results, so it slows steps down); returns self."""
        self.timing = True
        return self

    def make_executor(self) -> Executor:
        """A fresh executor: empty dynamic inputs, persistent memory at its initial values."""
        return Executor(self)

    # ---- graph facts ------------------------------------------------------------------------
    def block(self, name: str) -> Block:
        """The block called `name`.

        Raises:
            SimulationError: no such block.
        """
        blk = self.graph.block(name)
        if blk is None:
            raise SimulationError(f"branch target {name!r} is not a block of the graph")
        return blk

    def _validate(self) -> None:
        if importlib.util.find_spec("openinfer_jax.ir.validate") is None:
            return
        module = importlib.import_module("openinfer_jax.ir.validate")
        module.validate(self.graph, self.model, limits=self.limits)

    def _check_structure(self) -> None:
        names = {d.name for d in self.graph.vars}
        for decl in self.graph.vars:
            if decl.kind is MemoryKind.PERSISTENT and decl.is_table and decl.dtype.is_packed:
                raise GraphValidationError(
                    f"persistent table {decl.name!r}: packed dtype {decl.dtype.short} is not allowed in tables"
                )
        for blk in self.graph.blocks:
            for node in walk(blk.nodes):
                for target in node.targets():
                    if self.graph.block(target) is None:
                        raise GraphValidationError(
                            f"block {blk.name}: branch target {target!r} is not a block"
                        )
        del names

    def _required_inputs(self) -> list[str]:
        """Dynamic variables some node reads (a step without them fails up front)."""
        read = set().union(*(reads_in(blk.nodes) for blk in self.graph.blocks))
        return [d.name for d in self.graph.vars if d.kind is MemoryKind.DYNAMIC and d.name in read]

    # ---- sizes and model values ---------------------------------------------------------------
    def resolve_dims(self, dims: Sequence[Dim], what: str) -> tuple[int, ...]:
        """Resolve dims (ints, sizevars, products like ``3*D``; `openinfer_jax.core.dims`).

        Raises:
            SimulationError: an unknown sizevar or a malformed dim, naming `what`.
        """
        try:
            shape = resolve_dims(dims, self.sizevars)
            if shape is not None:
                return shape
            missing = missing_sizes(dims, self.sizevars)
        except GraphValidationError as err:
            raise SimulationError(f"{what}: {err}") from None
        known = ", ".join(sorted(self.sizevars)) or "none"
        raise SimulationError(f"{what}: unknown size {missing[0]!r}; the model defines: {known}")

    def placement(self, name: str, device: Any) -> Any:
        """Where variable `name` lives: its planned sharding on a mesh, else `device`."""
        return device if self.sharded is None else self.sharded.sharding_for(name)

    def will_load(self, decl: VarDecl) -> bool:
        """True if `decl`'s initial value comes from tensor data in the model (a lazy load)."""
        info = self.model.tensors.get(decl.model_name) if self.model is not None else None
        return info is not None and info.has_data

    def load_tensor(self, name: str, decl: VarDecl, device: Any) -> Any:
        """Model tensor `name` (a prefix-table entry of `decl`) on `device`, read from the mmap.

        Raises:
            SimulationError: the model lacks it, or its dtype/shape differs from `decl`.
        """
        device = self.placement(decl.name, device)
        if self.model is None or name not in self.model.tensors:
            raise SimulationError(f"{decl.name}: the model has no tensor {name!r} (from @pattern)")
        info = self.model.tensors[name]
        shape = self.resolve_dims(decl.dims, f"variable {decl.name!r}")
        file_quant = info.block.scheme if getattr(info, "block", None) is not None else None
        file_type = str(file_quant) if file_quant is not None else info.dtype.short
        if file_type != decl.type_name or tuple(info.shape) != shape:
            raise SimulationError(
                f"{decl.name}: model tensor {name!r} is {file_type}{list(info.shape)}, "
                f"the declaration says {decl.type_name}{list(shape)}"
            )
        if file_quant is not None:
            return self._load_quantized(name, decl, device)
        if not info.has_data:
            return self._filled(decl, shape, device)
        if self.eager:
            return np.asarray(self.model.tensor(name))
        if self.sharded is not None:  # shard by shard from the mmap
            return self.sharded.load_tensor(self.model.tensor(name), decl)
        return jax.device_put(np.asarray(self.model.tensor(name)), device)

    def _load_quantized(self, name: str, decl: VarDecl, device: Any) -> Any:
        """A block-quantized weight, kept packed: its planes on `device` (views for numpy)."""
        from openinfer_jax.ops.quantized import QuantizedArray

        packed = self.model.quantized(name)
        value = QuantizedArray.from_planes(
            packed.layout, packed.shape, packed.quants, packed.scales, packed.offsets
        )
        if self.eager:
            return value
        if self.sharded is not None:
            raise SimulationError(
                f"{decl.name}: block-quantized weights ({decl.quant}) are not sharded yet; run "
                "without a mesh or convert the model with dtype='f32'"
            )
        return jax.device_put(value, device)

    def initial_value(self, decl: VarDecl, device: Any) -> Any:
        """The value a variable starts from: model tensor, metadata/sizevar scalar, @init, or zeros.

        Raises:
            SimulationError: the model tensor's dtype or shape differs from the declaration.
        """
        device = self.placement(decl.name, device)
        shape = self.resolve_dims(decl.dims, f"variable {decl.name!r}")
        model = self.model
        name = decl.model_name
        if model is not None and name in model.tensors:
            return self.load_tensor(name, decl, device)
        if not shape and model is not None:
            # Scalars may come from metadata or a sizevar (`num_layers: u32`), docs/semantics.md.
            if name in model.metadata and np.ndim(model.metadata[name]) == 0:
                raw = model.metadata[name]
                if isinstance(raw, (bool, int, float, np.generic)):
                    return jax.device_put(np.asarray(raw, decl.dtype.numpy), device)
            if name in self.sizevars:
                return jax.device_put(np.asarray(self.sizevars[name], decl.dtype.numpy), device)
        return self._filled(decl, shape, device)

    def _filled(self, decl: VarDecl, shape: tuple[int, ...], device: Any) -> Any:
        if decl.init is not None:
            return jax.device_put(np.full(shape, decl.init, decl.dtype.numpy), device)
        return jax.device_put(jnp.zeros(shape, decl.dtype.numpy), device)


def _pick_device(device: Any) -> tuple[str, Any, Any]:
    """(name, jax device for arrays and XLA, Vulkan backend or None)."""
    if not isinstance(device, str):
        return getattr(device, "platform", "device"), device, None
    name = device.lower()
    if name == "cpu":
        return "cpu", jax.devices("cpu")[0], None
    if name == "numpy":
        return "numpy", jax.devices("cpu")[0], None
    if name in ("gpu", "cuda"):
        try:
            return "gpu", jax.devices("gpu")[0], None
        except RuntimeError as err:
            raise BackendError(
                f"device='gpu': JAX has no GPU backend here ({err}); use device='cpu'"
            ) from None
    if name == "vulkan":
        try:
            vk = importlib.import_module("openinfer_jax.vk")
            backend = vk.VulkanBackend()
        except (ImportError, AttributeError) as err:
            raise BackendError(
                f"device='vulkan': the Vulkan backend is not available ({err})"
            ) from None
        except OpenInferError:
            raise
        return "vulkan", jax.devices("cpu")[0], backend
    raise BackendError(f"unknown device {device!r}; use one of {', '.join(DEVICES)}")


_ = DType
