"""The variables a step sees: reading and writing them, scalars on the host, model tensors.

`Variables` is the executor's variable environment, shared with the region runners
(narrow regions in executor.py, wide regions in wide.py): the step's store (volatile
values, inserted inputs, region outputs), the prefix-table entries written this step
(`W[l]` after `op ... >> W[l]`), the model tensors loaded so far (once per executor), and
the resolution of names used as scalars (cache indices, loop bounds, runtime params)
against loop scopes, variables and sizevars. Persistent memory itself lives in
`caches.PersistentStore`; this class only reads its scalars.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import SimulationError
from openinfer_jax.ir.nodes import (
    Assign,
    CacheAccess,
    CacheIndex,
    CacheSlice,
    Loop,
    MemoryKind,
    VarDecl,
    VarRef,
)
from openinfer_jax.sim.caches import Index, PersistentStore, Slice
from openinfer_jax.sim.values import Zeros, scalar_of
from openinfer_jax.sim.vulkan_store import DeviceResident, DeviceStore

if TYPE_CHECKING:
    from openinfer_jax.sim.simulator import Simulator

__all__ = ["Variables"]

Scope = dict[str, int]


class Variables:
    """Values of one executor's variables during and between steps.

    Attributes:
        decls: declarations by name. dtypes: the dtype of every declared or assigned name.
        store: the step's values by name (a `DeviceStore` on the Vulkan device).
        entries: prefix-table entries written this step, by model tensor name.
        weights: model tensors loaded so far, by model tensor name (immutable, per executor).
        loaded_now: model tensors first read since the last trace event.
        write_check: called with a name before it is written (the executor's yield lock).
    """

    def __init__(self, sim: Simulator, persistent: PersistentStore, store: dict[str, Any]) -> None:
        self.sim = sim
        self.device = sim.jax_device
        self.persistent = persistent
        self.decls: dict[str, VarDecl] = {d.name: d for d in sim.graph.vars}
        self.dtypes: dict[str, DType] = {d.name: d.dtype for d in sim.graph.vars}
        self.store = store
        self.entries: dict[str, Any] = {}
        self.weights: dict[str, Any] = {}
        self.initial_values: dict[str, Any] = {}
        self.loaded_now: list[str] = []
        self.write_check: Callable[[str], None] | None = None
        # Host copies of constant scalars (loop bounds such as num_layers): reading a device
        # scalar on the host every step would be a device-to-host copy per step.
        self._host_scalars: dict[str, Any] = {}
        self._assign_shapes: dict[int, tuple[Any, tuple[int, ...]]] = {}  # see assign

    # ---- declarations ----------------------------------------------------------------------
    def names(self, kind: MemoryKind) -> str:
        """The declared names of one memory kind, comma-separated ("none" if none)."""
        names = [d.name for d in self.sim.graph.vars if d.kind is kind]
        return ", ".join(names) if names else "none"

    def dtype(self, ref: VarRef) -> DType:
        """The dtype of a referenced variable (declared or assigned).

        Raises:
            SimulationError: the name has no dtype yet.
        """
        dtype = self.dtypes.get(ref.name)
        if dtype is None:
            raise SimulationError(f"{ref.name!r} has no declared dtype")
        return dtype

    def persistent_decl(self, name: str) -> VarDecl:
        """The declaration of a persistent variable.

        Raises:
            SimulationError: `name` is not persistent.
        """
        decl = self.decls.get(name)
        if decl is None or decl.kind is not MemoryKind.PERSISTENT:
            raise SimulationError(
                f"{name!r} is not a persistent variable; cache ops work on persistent memory only"
            )
        return decl

    # ---- scalars ---------------------------------------------------------------------------
    def scalar(self, name: str, scope: Scope) -> Any:
        """A scalar named in an index, bound or param: loop index, variable or sizevar.

        Raises:
            SimulationError: unknown name, a table, or a value with more than one element.
        """
        if name in scope:
            return scope[name]
        decl = self.decls.get(name)
        if decl is not None:
            if decl.kind is MemoryKind.PERSISTENT:
                if name in self.persistent.tables:
                    raise SimulationError(f"{name!r} is a cache table, not a scalar")
                return scalar_of(self.persistent.values[name], f"{name!r}")
            if decl.kind is MemoryKind.CONSTANT:
                cached = self._host_scalars.get(name)
                if cached is None:
                    cached = self._host_scalars[name] = scalar_of(
                        self.read(VarRef(name), scope), f"{name!r}"
                    )
                return cached
            return scalar_of(self.read(VarRef(name), scope), f"{name!r}")
        if name in self.store:
            return scalar_of(self.store[name], f"{name!r}")
        if name in self.sim.sizevars:
            return self.sim.sizevars[name]
        raise SimulationError(f"unknown name {name!r}: not a loop index, variable or sizevar")

    def index(self, raw: int | str, scope: Scope, what: str) -> int:
        """The integer value of a cache index or prefix-table index.

        Raises:
            SimulationError: not an integer (or not resolvable, see `scalar`).
        """
        if isinstance(raw, int):
            return raw
        value = self.scalar(raw, scope)
        if type(value) is int:  # an integer variable's value or a loop index
            return value
        if isinstance(value, bool) or not float(value).is_integer():
            raise SimulationError(f"index {raw!r} of {what!r} must be an integer, got {value!r}")
        return int(value)

    def bound(self, raw: int | str, scope: Scope, node: Loop, which: str) -> int:
        """A loop bound's value (`which` is "start" or "end", for messages).

        Raises:
            SimulationError: a float/bool variable or value.
        """
        if isinstance(raw, int):
            return raw
        decl = self.decls.get(raw)
        if decl is not None and (decl.dtype.is_float or decl.dtype is DType.BOOL):
            raise SimulationError(
                f"loop {node.name}: {which} bound {raw!r} is {decl.dtype.short}; a loop bound must be "
                f"an integer scalar"
            )
        value = self.scalar(raw, scope)
        if isinstance(value, (bool, float)):
            raise SimulationError(
                f"loop {node.name}: {which} bound {raw!r} must be an integer scalar, got {value!r}"
            )
        return int(value)

    def selection(
        self,
        access: CacheAccess,
        scope: Scope,
        wrap: Callable[[str, int], int] | None = None,
    ) -> tuple[Index, ...]:
        """The resolved indices of a cache access (ints and `Slice`s).

        `wrap(name, value)` is applied to every value read from a name that is not a loop
        index of `scope` (wide.py passes the value through as a plan variable).
        """

        def value(raw: int | str) -> int:
            resolved = self.index(raw, scope, access.name)
            if wrap is not None and isinstance(raw, str) and raw not in scope:
                return wrap(raw, resolved)
            return resolved

        out: list[Index] = []
        for idx in access.indices:
            if isinstance(idx, CacheIndex):
                out.append(value(idx.value))
            else:
                assert isinstance(idx, CacheSlice)
                start = None if idx.start is None else value(idx.start)
                end = None if idx.end is None else value(idx.end)
                out.append(Slice(start, end))
        return tuple(out)

    # ---- prefix tables -----------------------------------------------------------------------
    def entry_name(self, decl: VarDecl, ref: VarRef, scope: Scope) -> str:
        """The model tensor name of a prefix-table entry (`W[l]` -> `layers.3.w`).

        Raises:
            SimulationError: wrong number of indices, or a `@pattern` that cannot be filled.
        """
        if len(ref.indices) != len(decl.table_indices):
            raise SimulationError(
                f"{decl.name!r} takes {len(decl.table_indices)} indices "
                f"({', '.join(decl.table_indices)}), got {len(ref.indices)}"
            )
        values = {
            idx: self.index(raw, scope, decl.name)
            for idx, raw in zip(decl.table_indices, ref.indices)
        }
        pattern = decl.pattern or decl.model_name + "".join(f".{{{i}}}" for i in decl.table_indices)
        try:
            return pattern.format(**values)
        except (KeyError, IndexError, ValueError) as err:
            raise SimulationError(
                f"@pattern({pattern!r}) of {decl.name!r} cannot be filled: {err}"
            ) from None

    def entry_key(self, ref: VarRef, scope: Scope) -> str:
        """`entry_name` of a reference to a declared prefix table.

        Raises:
            SimulationError: `ref` does not name a prefix table.
        """
        decl = self.decls.get(ref.name)
        if decl is None or not decl.is_table:
            raise SimulationError(f"{ref}: {ref.name!r} is not a prefix table")
        return self.entry_name(decl, ref, scope)

    # ---- values ------------------------------------------------------------------------------
    def read(self, ref: VarRef, scope: Scope) -> Any:
        """The current value of a variable or prefix-table entry (loaded lazily).

        Raises:
            SimulationError: persistent memory (read it with cache.read), a dynamic input not
                inserted, an undeclared name, or a bad prefix-table reference.
        """
        name = ref.name
        if ref.indices:
            decl = self.decls.get(name)
            if decl is None or not decl.is_table or decl.kind is MemoryKind.PERSISTENT:
                raise SimulationError(
                    f"{ref}: {name!r} is not a prefix table (persistent tables need cache.read)"
                )
            key = self.entry_name(decl, ref, scope)
            if key in self.entries:
                return self.host_value(self.entries[key])  # Vulkan: entries may be resident
            return self.load_model(key, decl)
        value = self.store.get(name)
        if value is not None:
            return value
        if name in scope:
            return np.asarray(scope[name], np.int64)
        decl = self.decls.get(name)
        if decl is None:
            raise SimulationError(f"{name!r} is not declared and was not assigned before use")
        if decl.kind is MemoryKind.PERSISTENT:
            raise SimulationError(f"persistent cache {name!r} must be read via cache.read")
        if decl.kind is MemoryKind.DYNAMIC:
            raise SimulationError(f"dynamic input {name!r} was not inserted before step()")
        value = self.initial(decl)
        self.store[name] = value
        return value

    def check_writable(self, ref: VarRef) -> VarDecl | None:
        """The declaration of a name an op may write (None for an assigned name).

        Raises:
            SimulationError: a constant, persistent memory, an undeclared prefix table, or
                (through `write_check`) a yielded variable before its await.
        """
        name = ref.name
        if self.write_check is not None:
            self.write_check(name)
        decl = self.decls.get(name)
        if decl is not None:
            if decl.kind is MemoryKind.CONSTANT:
                raise SimulationError(f"constant {name!r} is read-only")
            if decl.kind is MemoryKind.PERSISTENT:
                raise SimulationError(f"persistent cache {name!r} must be written via cache.write")
        elif ref.indices:
            raise SimulationError(f"{ref}: {name!r} is not a declared prefix table")
        return decl

    def write(self, ref: VarRef, value: Any, scope: Scope) -> None:
        """Store a node's output (a variable, or a prefix-table entry `W[l]`).

        Raises:
            SimulationError: see `check_writable`.
        """
        decl = self.check_writable(ref)
        if decl is not None and ref.indices:
            self.entries[self.entry_name(decl, ref, scope)] = value
            return
        self.store[ref.name] = value

    def assign(self, node: Assign) -> None:
        """Run an `assign` outside a compiled region: a `Zeros` placeholder of its shape.

        Raises:
            SimulationError: the name is declared.
        """
        if node.name in self.decls:
            raise SimulationError(
                f"assign {node.name!r} shadows a declared variable; pick another name"
            )
        # Sizevars are fixed for the simulator: a node's shape is resolved once (device
        # "vulkan"/"numpy" run every assign of every step through here).
        shape = self._assign_shapes.get(id(node))
        if shape is None or shape[0] is not node:
            shape = (node, self.sim.resolve_dims(node.dims, f"assign {node.name!r}"))
            self._assign_shapes[id(node)] = shape
        self.store[node.name] = Zeros(shape[1], node.dtype.numpy)
        self.dtypes[node.name] = node.dtype

    def initial(self, decl: VarDecl) -> Any:
        """A volatile/constant variable's value at the start of a step (shared, immutable)."""
        cached = self.initial_values.get(decl.name)
        if cached is None:
            loaded = self.sim.will_load(decl)
            cached = self.sim.initial_value(decl, self.device)
            if loaded:
                self.loaded_now.append(decl.model_name)
            self.initial_values[decl.name] = cached
        return cached

    def load_model(self, tensor: str, decl: VarDecl) -> Any:
        """Model tensor `tensor` (an entry of prefix table `decl`), loaded once per executor."""
        cached = self.weights.get(tensor)
        if cached is None:
            cached = self.sim.load_tensor(tensor, decl, self.device)
            self.loaded_now.append(tensor)
            self.weights[tensor] = cached
        return cached

    def is_model_value(self, value: Any) -> bool:
        """Whether `value` is a loaded model tensor or initial value (immutable, shared)."""
        return any(value is w for w in self.weights.values()) or any(
            value is w for w in self.initial_values.values()
        )

    def host_value(self, value: Any) -> Any:
        """The host value of a possibly device-resident value held outside the store
        (persistent tensors, prefix-table entries); downloaded once, then kept."""
        store = self.store
        if isinstance(value, DeviceResident) and isinstance(store, DeviceStore):
            return store.host_value(value)
        return value
