"""The C target: a graph + its analysis become `<name>.h`, `<name>.c` and a test driver.

Node kinds map to C as follows (semantics: the simulator, docs/semantics.md):

* ``op``: a call of a generated kernel (`openinfer_jax.emit.c_kernels`); an output that
  aliases an input of a kernel that is not alias-safe goes through the scratch buffer.
* ``assign``: reset the temporary's shape and zero it. ``transfer``: a copy.
* ``loop``: a C ``for`` over int64; ``branch``: the target block inlined in an ``if``
  (a branch is a call, so execution resumes after it); ``return``: a ``goto`` to the end
  of the block being run.
* ``yield``/``await``: consumers run sequentially at entry's yield, each on snapshot copies
  of the variables it writes; at entry's await the one consumer that yields and writes a
  variable copies it back (the simulator's schedule, without threads).
* ``cache.*``: the runtime's `oi_table_*` functions on tables preallocated to capacity;
  overflow returns ``OI_ERR_CACHE_FULL``.
* ``barrier``/``dep``: nothing (the program runs nodes in order).

Every C statement that can fail is wrapped in ``OI_TRY`` which records the block/node.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field

from openinfer_jax.emit.analysis import Analysis, OpInfo, VarInfo, resolve_dims
from openinfer_jax.emit.c_kernels import (
    ALIAS_SAFE,
    ELEMENTWISE,
    KernelRequest,
    RuntimeParam,
    c_literal,
    matmul_pack_bytes,
    render_kernel,
    runtime_params,
)
from openinfer_jax.emit.c_prefix import overlay_buffers, overlay_resets, prefix_functions
from openinfer_jax.emit.c_types import ctype
from openinfer_jax.emit.memory import Buffer, MemoryPlan, plan_memory
from openinfer_jax.emit.vk_program import ALIGN as VK_ALIGN
from openinfer_jax.emit.vk_program import VkOptions, VkReport, VkState
from openinfer_jax.errors import SynthesisError
from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Barrier,
    Block,
    Branch,
    CacheAccess,
    CacheDecrement,
    CacheIncrement,
    CacheIndex,
    CacheRead,
    CacheReset,
    CacheSlice,
    CacheWrite,
    Dep,
    Loop,
    Node,
    Op,
    Return,
    Transfer,
    VarName,
    VarRef,
    Yield,
)
from openinfer_jax.oinf.dtypes import DType

__all__ = ["CProgram", "generate_c"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class CProgram:
    """The generated sources (file name -> text) and the memory plan behind them."""

    files: dict[str, str]
    memory: MemoryPlan
    kernels: int
    outputs: tuple[str, ...]
    vulkan: VkReport | None = None


@dataclass
class _Scope:
    """Names visible while generating a node list: loop indices and consumer shadows."""

    loops: dict[str, str] = field(default_factory=dict)
    shadows: dict[str, str] = field(default_factory=dict)
    end_label: str = ""


class _Gen:
    """One generation run: kernels, statements, live positions, labels."""

    def __init__(
        self,
        an: Analysis,
        name: str,
        outputs: tuple[str, ...],
        target: str = "c",
        vk: VkOptions | None = None,
    ) -> None:
        self.an = an
        self.target = target
        # The Vulkan target's placement, dispatches and syncs (None for the C target).
        self.vk = VkState(an, vk or VkOptions({})) if target == "vulkan" else None
        self.prefix_slots: list[
            tuple[str, int]
        ] = []  # (slot name, bytes) for prefix views (Vulkan)
        self.name = name
        self.outputs = outputs
        self.kernels: dict[str, str] = {}  # signature -> function name
        self.kernel_code: list[str] = []
        self.pos = 0
        self.first: dict[str, int] = {}
        self.last: dict[str, int] = {}
        self.used_labels: set[str] = set()
        self.label_count = 0
        self.tmp_count = 0
        self.scratch_elems: dict[DType, int] = {}
        self.shadows: dict[str, tuple[str, str]] = {}  # C name -> (consumer, var)
        self.yielded: set[str] = set()
        self.ran: set[str] = set()
        # A yield inside a loop of entry: consumers run at the first yield that makes them
        # eligible, decided at run time (flags per consumer, a bit per yielded variable).
        self.yield_bits = _yield_bits(an)
        self.accesses: dict[str, list[tuple[int, bool]]] = {}
        self.assigns: list[tuple[str, int]] = []  # (buffer, index of the access)
        self.first_forced: dict[str, bool] = {}
        self.pack_bytes = 0  # the tiled matmul's panel buffer
        self.journal_bytes = 0  # undo journal: old bytes of table entries a step may overwrite

    def dead_assigns(self) -> set[int]:
        """Assigns whose zeros are overwritten before any read (by the access order)."""
        dead = set()
        for k, (key, index) in enumerate(self.assigns):
            acc = self.accesses[key]
            if index + 1 < len(acc) and acc[index + 1][1]:
                dead.add(k)
        return dead

    def resolve_assigns(self, lines: list[str]) -> list[str]:
        """Replace the assign markers with a zeroing or a shape-only statement."""
        dead = self.dead_assigns()
        out = []
        for line in lines:
            marker = line.strip()
            if not marker.startswith("@@ASSIGN "):
                out.append(line)
                continue
            ind = line[: len(line) - len(line.lstrip())]
            k_text, where = marker[len("@@ASSIGN ") :].rstrip("@").split(" ", 1)
            key, _index = self.assigns[int(k_text)]
            name = self.shadows[key][1] if key in self.shadows else key
            info = self.an.vars[name]
            if int(k_text) in dead:
                out.append(
                    f'{ind}OI_TRY(oi_set_shape(&{_c_var(key)}, {len(info.shape)}, {_dims_name(name)}), "{where}");'
                )
            else:
                if self.vk is not None:  # zeroing writes the arena on the host
                    out.append(self.vk.sync(ind, where))
                out.append(
                    f'{ind}OI_TRY(oi_zero(&{_c_var(key)}, {len(info.shape)}, {_dims_name(name)}, {ctype(info.dtype).size}), "{where}");'
                )
        return out

    def live_interval(self, key: str) -> tuple[int, int] | None:
        """[first live write or read, last access], or None when never accessed."""
        acc = self.accesses.get(key)
        if not acc:
            return None
        dead = self.dead_assigns()
        dead_index = {i for n, (k, i) in enumerate(self.assigns) if k == key and n in dead}
        live = [a for i, a in enumerate(acc) if i not in dead_index]
        first = live[0][0] if live else acc[0][0]
        if self.first_forced.get(key):
            # Carried around a loop: conservatively from the first access of all.
            first = min(first, self.first[key])
        return first, self.last[key]

    # ---- bookkeeping ------------------------------------------------------------------
    def touch(self, name: str, scope: _Scope, write: bool = False) -> None:
        """Record an access at the current position (reads before writes within a node)."""
        key = scope.shadows.get(name, name)
        self.first.setdefault(key, self.pos)
        self.last[key] = self.pos
        self.accesses.setdefault(key, []).append((self.pos, write))

    def var(self, name: str, scope: _Scope) -> str:
        """The C tensor (an lvalue) of variable `name` in `scope`."""
        if name in scope.shadows:
            return scope.shadows[name]
        if name not in self.an.vars and name not in self.an.tables:
            raise SynthesisError(f"{name!r} is neither declared nor assigned")
        return f"V_{name}"

    def label(self, stem: str) -> str:
        self.label_count += 1
        return f"{stem}_{self.label_count}"

    def scalar(self, raw: int | str, scope: _Scope, where: str, as_int: bool = True) -> str:
        """A C expression for an index/bound/condition: literal, loop index, variable, sizevar."""
        if isinstance(raw, int):
            return f"INT64_C({raw})"
        if raw in scope.loops:
            return scope.loops[raw]
        info = self.an.vars.get(raw)
        if info is not None:
            if as_int and info.dtype.is_float:
                raise SynthesisError(
                    f"{where}: {raw!r} is {info.dtype.short}; an index or bound must be an integer"
                )
            self.touch(raw, scope)
            fn = "oi_get_i64" if as_int else "oi_get_f64"
            return f"{fn}({self.var(raw, scope)}.data, {info.dtype.code}u)"
        if raw in self.an.sizevars:
            return f"INT64_C({self.an.sizevars[raw]})"
        raise SynthesisError(f"{where}: {raw!r} is not a loop index, variable or sizevar")

    # ---- references -------------------------------------------------------------------
    def ref(
        self, ref: VarRef, scope: _Scope, where: str, pre: list[str], write: bool = False
    ) -> str:
        """A C expression (address of an oi_tensor) for a use of `ref`; may add setup lines."""
        if ref.indices:
            decl = self.an.prefixes.get(ref.name)
            if decl is None:
                raise SynthesisError(
                    f"{where}: {ref} indexes {ref.name!r}, which is not a prefix table"
                )
            self.tmp_count += 1
            if write:  # overrides the entry for the rest of the step (c_prefix.py)
                tmp = f"P{self.tmp_count}"
                args = ", ".join(self.scalar(i, scope, where) for i in ref.indices)
                pre.append(f"oi_tensor {tmp};")
                pre.append(f'OI_TRY(oi_prefix_{ref.name}_write(&{tmp}, {args}), "{where}");')
                return f"&{tmp}"
            tmp = f"P{self.tmp_count}"
            args = ", ".join(self.scalar(i, scope, where) for i in ref.indices)
            slot = "NULL"
            if self.target == "vulkan":
                # The GPU sees only the arena: the model tensor is copied into a slot of it.
                shape = resolve_dims(decl.dims, self.an.sizevars, f"variable {decl.name!r}")
                slot = f"PXS_{self.tmp_count}"
                self.prefix_slots.append((slot, math.prod(shape) * ctype(decl.dtype).size))
            pre.append(f"oi_tensor {tmp};")
            pre.append(f'OI_TRY(oi_prefix_{ref.name}(&{tmp}, {slot}, {args}), "{where}");')
            return f"&{tmp}"
        self.touch(ref.name, scope, write)
        return f"&{self.var(ref.name, scope)}"

    # ---- nodes ------------------------------------------------------------------------
    def nodes(
        self, nodes: tuple[Node, ...], block: str, scope: _Scope, out: list[str], depth: int
    ) -> None:
        for node in nodes:
            self.pos += 1
            where = _c_string(self.an.where(node, block))
            self.node(node, block, scope, out, depth, where)

    def node(
        self, node: Node, block: str, scope: _Scope, out: list[str], depth: int, where: str
    ) -> None:
        ind = "    " * depth
        if self.vk is not None and self.vk.node_needs_sync(node, block):
            out.append(self.vk.sync(ind, where))
        if isinstance(node, Op):
            self.op(node, scope, out, ind, where)
        elif isinstance(node, Assign):
            # Resolved after the walk: an assign whose zeros are overwritten before any read
            # only sets the shape, so it does not write into memory another buffer may share.
            self.touch(node.name, scope, write=True)
            key = scope.shadows.get(node.name, node.name)
            self.assigns.append((key, len(self.accesses[key]) - 1))
            out.append(f"{ind}@@ASSIGN {len(self.assigns) - 1} {where}@@")
        elif isinstance(node, Transfer):
            pre: list[str] = []
            src = self.ref(node.src, scope, where, pre)
            dst = self.ref(node.dst, scope, where, pre, write=True)
            elem = ctype(self.dtype_of(node.dst.name)).size
            out.extend(f"{ind}{line}" for line in ["{", *pre])
            out.append(f'{ind}OI_TRY(oi_copy({dst}, {src}, {elem}), "{where}");')
            out.append(f"{ind}}}")
        elif isinstance(node, Loop):
            lo = self.scalar(node.start, scope, where)
            hi = self.scalar(node.end, scope, where)
            var = f"L_{node.index}_{depth}"
            start = self.pos
            inner = _Scope(dict(scope.loops), dict(scope.shadows), scope.end_label)
            inner.loops[node.index] = var
            body: list[str] = []
            self.nodes(node.body, block, inner, body, depth + 1)
            # A buffer read in the body before the body writes it carries a value from one
            # iteration to the next (or from before the loop): it lives for the whole loop.
            # One written first in every iteration only lives from that write to its last use.
            for key, acc in self.accesses.items():
                inside = [a for a in acc if start <= a[0] <= self.pos]
                if inside and not inside[0][1]:
                    self.first[key] = min(self.first[key], start)
                    self.first_forced[key] = True
                    self.last[key] = max(self.last[key], self.pos)
            out.append(f"{ind}{{")
            out.append(f"{ind}    int64_t {var};")
            out.append(f"{ind}    const int64_t {var}_hi = {hi};")
            out.append(f"{ind}    for ({var} = {lo}; {var} < {var}_hi; {var}++) {{")
            out.extend(body)
            out.append(f"{ind}    }}")
            out.append(f"{ind}}}")
        elif isinstance(node, Branch):
            self.branch(node, block, scope, out, depth, where)
        elif isinstance(node, Return):
            self.used_labels.add(scope.end_label)
            out.append(f"{ind}goto {scope.end_label};")
        elif isinstance(node, Yield):
            self.on_yield(node, block, scope, out, depth, where)
        elif isinstance(node, Await):
            self.on_await(node, block, scope, out, ind)
        elif isinstance(node, CacheRead):
            self.cache_read(node, scope, out, ind, where)
        elif isinstance(node, CacheWrite):
            self.cache_write(node, scope, out, ind, where)
        elif isinstance(node, (CacheIncrement, CacheDecrement)):
            info = self.an.vars.get(node.name)
            if info is None or info.kind != "persistent" or info.shape:
                raise SynthesisError(f"{where}: {node.name!r} is not a persistent scalar")
            delta = node.amount if isinstance(node, CacheIncrement) else -node.amount
            self.touch(node.name, scope)
            out.append(
                f"{ind}oi_add_scalar(V_{node.name}.data, {info.dtype.code}u, INT64_C({delta}));"
            )
        elif isinstance(node, CacheReset):
            self.cache_reset(node, scope, out, ind, where)
        elif isinstance(node, (Barrier, Dep)):
            out.append(
                f"{ind}/* {type(node).__name__.lower()}: nodes already run in program order */"
            )
        else:  # pragma: no cover - every IR node kind is listed above
            raise SynthesisError(
                f"{where}: node kind {type(node).__name__} is not supported by the C target"
            )

    def op(self, node: Op, scope: _Scope, out: list[str], ind: str, where: str) -> None:
        info = self.bind_params(self.an.ops[id(node)], scope, where)
        key = repr(
            (
                info.opdef.name,
                info.in_dtypes,
                info.out_dtype,
                sorted(info.params.items(), key=str),
                # Structured kernels bake ranks and axes in: key them by input shapes too.
                info.in_shapes if info.opdef.name not in ELEMENTWISE else (),
            )
        )
        fn = self.kernels.get(key)
        if fn is None:
            fn = f"k{len(self.kernels)}_{info.opdef.name}_{info.in_dtypes[0].short if info.in_dtypes else 'x'}"
            self.kernel_code.append(render_kernel(KernelRequest(fn, info, where)))
            self.pack_bytes = max(self.pack_bytes, matmul_pack_bytes(info))
            self.kernels[key] = fn
        if self.vk is not None and self.vk_op(node, info, fn, scope, out, ind, where):
            return
        pre: list[str] = []
        args = [self.ref(r, scope, where, pre) for r in node.inputs]
        args += self.param_args(node, info, scope, where, pre)
        dst = self.ref(node.output, scope, where, pre, write=True)
        out_name = node.output.name
        # Entries of one prefix table may be the same entry at run time: go through scratch.
        aliased = any(
            r.name == out_name and (not r.indices or node.output.indices) for r in node.inputs
        )
        same_shape = all(
            s == info.out_shape for r, s in zip(node.inputs, info.in_shapes) if r.name == out_name
        )
        if aliased and not (info.opdef.name in ALIAS_SAFE and same_shape):
            elems = self.bound_of(out_name)
            self.scratch_elems[info.out_dtype] = max(
                self.scratch_elems.get(info.out_dtype, 0), elems
            )
            size = ctype(info.out_dtype).size
            out.extend(f"{ind}{line}" for line in ["{", *pre])
            out.append(f"{ind}    oi_tensor T = oi_scratch_tensor({elems});")
            out.append(f'{ind}    OI_TRY({fn}(&T, {", ".join(args)}), "{where}");')
            out.append(f'{ind}    OI_TRY(oi_copy({dst}, &T, {size}), "{where}");')
            out.append(f"{ind}}}")
            return
        if pre:
            out.extend(f"{ind}{line}" for line in ["{", *pre])
            out.append(f'{ind}    OI_TRY({fn}({dst}, {", ".join(args)}), "{where}");')
            out.append(f"{ind}}}")
        else:
            out.append(f'{ind}OI_TRY({fn}({dst}, {", ".join(args)}), "{where}");')

    def bind_params(self, info: OpInfo, scope: _Scope, where: str) -> OpInfo:
        """`info` with the params given as names resolved like the simulator does: a loop
        index or a variable (scalar, persistent scalar) is read each time the op runs
        (`RuntimeParam`); validation rejects any other name."""
        named = {k: v for k, v in info.params.items() if isinstance(v, VarName)}
        if not named:  # (the Vulkan target runs such nodes on the host)
            return info
        params = dict(info.params)
        for key, value in named.items():
            if value.name in scope.loops or value.name in self.an.vars:
                params[key] = RuntimeParam(key)
            else:
                raise SynthesisError(
                    f"{where}: param {key}={value.name} names neither a scalar variable nor a loop "
                    "index"
                )
        return dataclasses.replace(info, params=params)

    def param_args(
        self, node: Op, info: OpInfo, scope: _Scope, where: str, pre: list[str]
    ) -> list[str]:
        """Kernel arguments of the params read at run time (`bind_params`), in the kernel's
        order; a variable is checked to hold one element and read when the op runs."""
        named = self.an.ops[id(node)].params
        out = []
        for key in runtime_params(info):
            vname = named[key].name
            if vname in scope.loops:
                out.append(f"oi_param_i64({scope.loops[vname]})")
                continue
            self.touch(vname, scope)
            self.tmp_count += 1
            q = f"Q{self.tmp_count}"
            code = self.an.vars[vname].dtype.code
            pre.append(f"oi_param {q};")
            pre.append(f'OI_TRY(oi_param_of(&{self.var(vname, scope)}, {code}u, &{q}), "{where}");')
            out.append(q)
        return out

    def vk_op(
        self, node: Op, info: OpInfo, fn: str, scope: _Scope, out: list[str], ind: str, where: str
    ) -> bool:
        """Vulkan target: emit `node` as GPU dispatches and return True, or record why it
        runs on the host, emit the sync before it and return False (the C path follows)."""
        assert self.vk is not None
        return self.vk.op_node(self, node, info, fn, scope, out, ind, where)

    def branch(
        self, node: Branch, block: str, scope: _Scope, out: list[str], depth: int, where: str
    ) -> None:
        ind = "    " * depth
        if depth > 40:
            raise SynthesisError(
                f"{where}: branches nest too deep (a block that branches to itself?)"
            )
        arms = (
            [(node.then_block, None)]
            if node.cond is None
            else [(node.then_block, True), (node.else_block, False)]
        )
        if node.cond is not None:
            info = self.an.vars.get(node.cond)
            if info is not None and info.dtype.is_packed:
                raise SynthesisError(
                    f"{where}: branch condition {node.cond!r} is packed; use a non-packed scalar"
                )
            cond = self.scalar(node.cond, scope, where, as_int=False)
            out.append(f"{ind}if (({cond}) != 0) {{")
        else:
            out.append(f"{ind}{{")
        for k, (target, _arm) in enumerate(arms):
            assert target is not None
            if k == 1:
                out.append(f"{ind}}} else {{")
            blk = self.an.graph.block(target)
            assert blk is not None
            end = self.label(f"end_{target}")
            inner = _Scope(dict(scope.loops), dict(scope.shadows), end)
            self.nodes(blk.nodes, target, inner, out, depth + 1)
            if end in self.used_labels:
                out.append(f"{ind}    {end}:;")
        out.append(f"{ind}}}")

    def on_yield(
        self, node: Yield, block: str, scope: _Scope, out: list[str], depth: int, where: str
    ) -> None:
        ind = "    " * depth
        if block != self.an.entry.name:
            self.used_labels.add(scope.end_label)
            out.append(f"{ind}goto {scope.end_label}; /* a consumer's yield ends it */")
            return
        if self.yield_bits:
            self.dynamic_yield(node, scope, out, depth, where)
            return
        self.yielded |= set(node.vars)
        for blk in self.an.consumers:
            awaits = {v for n in blk.nodes if isinstance(n, Await) for v in n.vars}
            if blk.name in self.ran or not awaits <= self.yielded:
                continue
            self.ran.add(blk.name)
            out.append(f"{ind}/* consumer {blk.name}: runs here on snapshots of what it writes */")
            self.consumer_body(blk, scope, out, depth, where)

    def consumer_body(
        self, blk: Block, scope: _Scope, out: list[str], depth: int, where: str
    ) -> None:
        """A consumer block run in place: snapshot copies of the variables it writes (its
        writes go to the shadows), then its nodes, then its end label if a return uses it."""
        ind = "    " * depth
        inner = _Scope(dict(scope.loops), {}, self.label(f"end_{blk.name}"))
        for var in sorted(self.an.consumer_writes[blk.name]):
            if var not in self.an.vars:
                continue
            cname = f"S_{blk.name}_{var}"
            self.shadows[cname] = (blk.name, var)
            inner.shadows[var] = cname
            self.touch(var, scope)
            size = ctype(self.an.vars[var].dtype).size
            out.append(f'{ind}OI_TRY(oi_copy(&{cname}, &V_{var}, {size}), "{where}");')
        self.nodes(blk.nodes, blk.name, inner, out, depth)
        if inner.end_label in self.used_labels:
            out.append(f"{ind}{inner.end_label}:;")

    def dynamic_yield(
        self, node: Yield, scope: _Scope, out: list[str], depth: int, where: str
    ) -> None:
        """A yield when some yield of entry is inside a loop: mark the variables yielded, then
        run each consumer that has not run in this step and whose awaited variables have all
        been yielded (the simulator's rule, evaluated at run time, in declaration order)."""
        ind = "    " * depth
        bits = self.yield_bits
        mask = sum(1 << bits[v] for v in node.vars)
        out.append(f"{ind}oi_yielded |= UINT64_C({mask});")
        for blk in self.an.consumers:
            awaits = {v for n in blk.nodes if isinstance(n, Await) for v in n.vars}
            if not awaits <= set(bits):
                continue  # never eligible: entry never yields all of it
            need = sum(1 << bits[v] for v in awaits)
            self.ran.add(blk.name)
            out.append(
                f"{ind}if (!oi_ran_{blk.name} && (oi_yielded & UINT64_C({need})) == UINT64_C({need})) {{"
            )
            out.append(f"{ind}    oi_ran_{blk.name} = 1; /* consumer {blk.name}, on snapshots */")
            self.consumer_body(blk, scope, out, depth + 1, where)
            out.append(f"{ind}}}")

    def yield_state(self, reset: bool) -> list[str]:
        """Declarations (or the step-start resets) of the run-time yield state."""
        if not self.yield_bits:
            return []
        names = ["oi_yielded", *(f"oi_ran_{b}" for b in sorted(self.ran))]
        if reset:
            return [f"    {n} = 0;" for n in names]
        return ["static uint64_t oi_yielded; /* a bit per variable entry has yielded */"] + [
            f"static int {n};" for n in names[1:]
        ]

    def on_await(self, node: Await, block: str, scope: _Scope, out: list[str], ind: str) -> None:
        if block != self.an.entry.name:
            return
        for var in node.vars:
            writers = [
                blk.name
                for blk in self.an.consumers
                if blk.name in self.ran
                and var in self.an.consumer_writes[blk.name]
                and any(isinstance(n, Yield) and var in n.vars for n in blk.nodes)
            ]
            if len(writers) > 1:
                raise SynthesisError(
                    f"await {var}: consumers {', '.join(writers)} both mutate {var!r}; only one may"
                )
            if writers:
                self.touch(var, scope)
                size = ctype(self.an.vars[var].dtype).size
                guard = f"if (oi_ran_{writers[0]}) " if self.yield_bits else ""
                out.append(
                    f'{ind}{guard}OI_TRY(oi_copy(&V_{var}, &S_{writers[0]}_{var}, {size}), "await {var}");'
                )

    # ---- caches -------------------------------------------------------------------------
    def selection(
        self, access: CacheAccess, scope: _Scope, where: str, out: list[str], ind: str
    ) -> tuple[str, int]:
        sels = []
        for idx in access.indices:
            if isinstance(idx, CacheIndex):
                sels.append(f"{{0, 0, 0, {self.scalar(idx.value, scope, where)}, 0}}")
            else:
                assert isinstance(idx, CacheSlice)
                lo = "0" if idx.start is None else self.scalar(idx.start, scope, where)
                hi = "0" if idx.end is None else self.scalar(idx.end, scope, where)
                sels.append(
                    f"{{1, {int(idx.start is not None)}, {int(idx.end is not None)}, {lo}, {hi}}}"
                )
        if not sels:
            return "NULL", 0
        self.tmp_count += 1
        name = f"sel{self.tmp_count}"
        out.append(f"{ind}oi_sel {name}[{len(sels)}] = {{{', '.join(sels)}}};")
        return name, len(sels)

    def cache_read(
        self, node: CacheRead, scope: _Scope, out: list[str], ind: str, where: str
    ) -> None:
        pre: list[str] = []
        name = node.src.name
        out.append(f"{ind}{{")
        if name in self.an.tables:
            sel, n = self.selection(node.src, scope, where, out, ind + "    ")
            self.touch(name, scope)
            dst = self.ref(node.dst, scope, where, pre, write=True)
            out.extend(f"{ind}    {line}" for line in pre)  # a prefix entry's overlay
            out.append(f'{ind}    OI_TRY(oi_table_read(&TB_{name}, {sel}, {n}, {dst}), "{where}");')
        else:
            info = self.an.vars.get(name)
            if info is None or info.kind != "persistent":
                raise SynthesisError(f"{where}: {name!r} is not a persistent variable")
            if node.src.indices:
                raise SynthesisError(f"{where}: {name!r} is not a table; read it without indices")
            self._check_dtype(info.dtype, self.dtype_of(node.dst.name), where)
            self.touch(name, scope)
            dst = self.ref(node.dst, scope, where, pre, write=True)
            out.extend(f"{ind}    {line}" for line in pre)  # a prefix entry's overlay
            out.append(
                f'{ind}    OI_TRY(oi_copy({dst}, &V_{name}, {ctype(info.dtype).size}), "{where}");'
            )
        out.append(f"{ind}}}")

    def cache_write(
        self, node: CacheWrite, scope: _Scope, out: list[str], ind: str, where: str
    ) -> None:
        pre: list[str] = []
        src = self.ref(node.src, scope, where, pre)
        name = node.dst.name
        src_dtype = (
            self.an.vars[node.src.name].dtype
            if not node.src.indices
            else self.an.prefixes[node.src.name].dtype
        )
        out.append(f"{ind}{{")
        out.extend(f"{ind}    {line}" for line in pre)
        if name in self.an.tables:
            self._check_dtype(self.an.tables[name].dtype, src_dtype, where)
            sel, n = self.selection(node.dst, scope, where, out, ind + "    ")
            self.touch(name, scope)
            self.journal_bytes += self._block_bytes(name, node.dst)
            out.append(
                f'{ind}    OI_TRY(oi_table_write(&TB_{name}, {sel}, {n}, {src}), "{where}");'
            )
        else:
            info = self.an.vars.get(name)
            if info is None or info.kind != "persistent":
                raise SynthesisError(f"{where}: {name!r} is not a persistent variable")
            self._check_dtype(info.dtype, src_dtype, where)
            self.touch(name, scope)
            out.append(
                f"{ind}    OI_TRY(oi_write_whole(&V_{name}, {src}, {len(info.shape)}, {_dims_name(name)}, "
                f'{ctype(info.dtype).size}), "{where}");'
            )
        out.append(f"{ind}}}")

    def cache_reset(
        self, node: CacheReset, scope: _Scope, out: list[str], ind: str, where: str
    ) -> None:
        name = node.target.name
        out.append(f"{ind}{{")
        if name in self.an.tables:
            sel, n = self.selection(node.target, scope, where, out, ind + "    ")
            self.touch(name, scope)
            self.journal_bytes += self._block_bytes(name, node.target)
            out.append(f'{ind}    OI_TRY(oi_table_reset(&TB_{name}, {sel}, {n}), "{where}");')
        else:
            if name not in self.an.vars or self.an.vars[name].kind != "persistent":
                raise SynthesisError(f"{where}: {name!r} is not a persistent variable")
            self.touch(name, scope)
            out.append(f'{ind}    OI_TRY(oi_init_{name}(), "{where}");')
        out.append(f"{ind}}}")

    def _block_bytes(self, name: str, access: CacheAccess) -> int:
        """Journal bytes one write/reset of `access` may need (entries it can overwrite + records)."""
        table = self.an.tables[name]
        if table.autod:
            # Auto-dim tables journal every row a write or reset overwrites: at most the
            # whole storage minus the table axes a scalar index picks, one record a row.
            dims = list(table.storage)
            axes = [k for k, a in enumerate(table.autod) if a < 0]
            for pos, k in enumerate(axes):
                idx = access.indices[k] if k < len(access.indices) else None
                if isinstance(idx, CacheIndex):
                    dims[pos] = 1
            rows = math.prod(dims[:-1]) if len(dims) > 1 else 1
            return math.prod(dims) * ctype(table.dtype).size + rows * 32
        entries = 1
        for k, cap in enumerate(table.caps):
            idx = access.indices[k] if k < len(access.indices) else None
            if idx is None or isinstance(idx, CacheSlice):
                entries *= cap
        entry_bytes = math.prod(table.entry) * ctype(table.dtype).size
        return entries * (entry_bytes + 32)

    def dtype_of(self, name: str) -> DType:
        """The dtype of a variable or of a prefix table's entries."""
        decl = self.an.prefixes.get(name)
        return (
            decl.dtype
            if decl is not None and name not in self.an.vars
            else self.an.vars[name].dtype
        )

    def bound_of(self, name: str) -> int:
        """Elements a variable (or one entry of a prefix table) can hold."""
        if name in self.an.vars:
            return self.an.vars[name].bound
        decl = self.an.prefixes[name]
        return math.prod(resolve_dims(decl.dims, self.an.sizevars, f"variable {name!r}"))

    @staticmethod
    def _check_dtype(want: DType, got: DType, where: str) -> None:
        if want is not got:
            raise SynthesisError(
                f"{where}: dtype {got.short} does not match the persistent variable's {want.short}"
            )


def _yield_bits(an: Analysis) -> dict[str, int]:
    """Variable -> bit of the run-time yield state, when some yield of entry is inside a
    loop (else empty: consumers are placed at synthesis)."""
    from openinfer_jax.emit.analysis import walk_nodes

    nested = any(
        isinstance(n, Yield) for loop in an.entry.nodes if isinstance(loop, Loop)
        for n in walk_nodes(loop.body)
    )  # fmt: skip
    if not nested:
        return {}
    names = sorted({v for n in walk_nodes(an.entry.nodes) if isinstance(n, Yield) for v in n.vars})
    if len(names) > 64:
        raise SynthesisError(
            f"entry yields {len(names)} variables with a yield inside a loop; the C target tracks at most 64"
        )
    return {v: k for k, v in enumerate(names)}


def _c_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', "'")


def _c_var(key: str) -> str:
    return key if key.startswith("S_") else f"V_{key}"


def _dims_name(var: str) -> str:
    return f"D_{var}"


def _dims_init(shape: tuple[int, ...]) -> str:
    return "{" + (", ".join(f"INT64_C({d})" for d in shape) or "0") + "}"


def _c_ident_check(names: list[str]) -> None:
    for name in names:
        if not _IDENT.match(name):
            raise SynthesisError(f"variable {name!r} is not a valid C identifier; rename it")


def _pattern_format(
    decl_name: str, pattern: str | None, model_name: str, indices: tuple[str, ...]
) -> tuple[str, list[int]]:
    """A printf format for a prefix table's model names and the order of indices in it."""
    pat = pattern or model_name + "".join(f".{{{i}}}" for i in indices)
    fmt, order = "", []
    for piece in re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", pat):
        if piece.startswith("{") and piece.endswith("}"):
            name = piece[1:-1]
            if name not in indices:
                raise SynthesisError(
                    f"@pattern({pat!r}) of {decl_name!r} names {name!r}, which is not one of its indices"
                )
            fmt += "%lld"
            order.append(indices.index(name))
        else:
            fmt += piece.replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')
    return fmt, order


def generate_c(
    an: Analysis,
    name: str,
    outputs: tuple[str, ...],
    embed: bytes | None,
    device: str,
    target: str = "c",
    vk: VkOptions | None = None,
) -> CProgram:
    """Generate the C program for `an` (see the module docstring); `target` ``"vulkan"`` runs
    the op nodes that have GPU kernels as Vulkan dispatches (`openinfer_jax.emit.vk_program`,
    options `vk`) and the rest on the host.

    Raises:
        SynthesisError: a node the C target cannot express, naming the node and the limit
            (with ``vk.strict``: any op node that would run on the host).
    """
    _c_ident_check(sorted(an.vars) + sorted(an.tables) + sorted(an.prefixes))
    gen = _Gen(an, name, outputs, target, vk)
    body: list[str] = []
    scope = _Scope(end_label="step_end")
    gen.nodes(an.entry.nodes, an.entry.name, scope, body, 1)
    for blk in an.consumers:
        if blk.name not in gen.ran:
            raise SynthesisError(
                f"block {blk.name}: consumer never runs (entry never yields all of what it awaits)"
            )
    body = gen.resolve_assigns(body)
    mem = _plan(an, gen, outputs)
    vk_globals, vk_files = gen.vk.globals(mem) if gen.vk is not None else ([], {})
    files = {
        f"{name}.h": _header(an, name, outputs, embed is not None),
        f"{name}.c": _source(
            an, gen, name, outputs, mem, body, embed is not None, device, vk_globals
        ),
        f"{name}_driver.c": _driver(an, name, outputs, gen.vk is not None),
        **vk_files,
    }
    if embed is not None:
        files[f"{name}_weights.c"] = _weights(name, embed)
    report = gen.vk.report() if gen.vk is not None else None
    return CProgram(files, mem, len(gen.kernels), outputs, report)


# ---- memory --------------------------------------------------------------------------------
def _in_place(info: VarInfo, an: Analysis, target: str) -> bool:
    """Model data used where it lies: constants, and volatile variables no node writes (their
    per-step reset would copy the same bytes again). Not on Vulkan: the GPU sees only the arena."""
    if target == "vulkan" or info.source != "tensor":
        return False
    return info.kind == "constant" or (info.kind == "volatile" and an.read_only(info.name))


def _plan(an: Analysis, gen: _Gen, outputs: tuple[str, ...]) -> MemoryPlan:
    bufs: list[Buffer] = []
    for vname in sorted(an.vars):
        info = an.vars[vname]
        if _in_place(info, an, gen.target):
            continue
        nbytes = info.bound * ctype(info.dtype).size
        pinned = (
            info.kind in ("persistent", "dynamic", "constant")
            or vname in outputs
            or vname not in gen.first
        )
        interval = gen.live_interval(vname) or (0, 0)
        # Volatile variables are written at the start of every step (their reset).
        first = 0 if info.kind == "volatile" else interval[0]
        bufs.append(
            Buffer(vname, nbytes, None if pinned else first, None if pinned else interval[1])
        )
    for tname in sorted(an.tables):
        t = an.tables[tname]
        bufs.append(Buffer(f"table:{tname}", t.numel * ctype(t.dtype).size))
    for cname in sorted(gen.shadows):
        _blk, var = gen.shadows[cname]
        info = an.vars[var]
        bufs.append(Buffer(f"shadow:{cname}", info.bound * ctype(info.dtype).size))
    for slot, nbytes in gen.prefix_slots:
        bufs.append(Buffer(f"prefix:{slot}", nbytes))
    bufs += [Buffer(bname, nbytes) for bname, nbytes in overlay_buffers(an)]
    if gen.vk is not None:
        bufs += [Buffer(bname, nbytes) for bname, nbytes in gen.vk.buffers()]
    scratch = max((n * ctype(d).size for d, n in gen.scratch_elems.items()), default=0)
    if scratch:
        bufs.append(Buffer("scratch", scratch))
    if gen.pack_bytes:
        bufs.append(Buffer("pack", gen.pack_bytes))
    if an.tables and gen.journal_bytes:
        bufs.append(Buffer("journal", gen.journal_bytes))
    for vname in _undo_vars(an):
        info = an.vars[vname]
        bufs.append(Buffer(f"undo:{vname}", info.bound * ctype(info.dtype).size))
    return plan_memory(bufs, VK_ALIGN if gen.vk is not None else None)


def _undo_vars(an: Analysis) -> list[str]:
    """Persistent variables (not tables) whose value a failed step must put back."""
    return sorted(n for n, v in an.vars.items() if v.kind == "persistent")


# ---- files ---------------------------------------------------------------------------------
def _fetchable(an: Analysis, outputs: tuple[str, ...]) -> list[str]:
    return [n for n in outputs if n in an.vars or n in an.tables]


def _header(an: Analysis, name: str, outputs: tuple[str, ...], embedded: bool) -> str:
    guard = re.sub(r"[^A-Za-z0-9]", "_", name).upper() + "_H"
    lines = [
        f"/* {name}.h: API of the program synthesized by OpenInfer-JAX. Generated; do not edit. */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        '#include "oi_runtime.h"',
        "",
        "/* Load and check the model (docs/oinf.md rules), bind weights, initialize persistent state."
        if not embedded
        else "/* Load the model (NULL: the weights embedded at synthesis) and initialize persistent state.",
        " * Returns OI_OK or an OI_ERR_* code; oi_last_error() says why. */",
        "int oi_init(const char *oinf_path);",
        "/* Run one step; dynamic inputs must be inserted before every step. */",
        "int oi_step(void);",
        "/* Release the model; oi_init may be called again. */",
        "void oi_free(void);",
        "/* A short text for an error code (oi_last_error() has the details). */",
        "const char *oi_error_string(int code);",
        "",
    ]
    for vname in sorted(n for n, v in an.vars.items() if v.kind == "dynamic"):
        info = an.vars[vname]
        ct = ctype(info.dtype)
        lines.append(f"/* {vname}: {info.dtype.short}{list(info.shape)} */")
        lines.append(
            f"int oi_insert_{vname}(const {ct.storage} *data, int ndim, const int64_t *dims);"
        )
    lines.append("")
    lines.append(
        "/* Fetch after a step: `capacity` elements at `out`; `dims` receives up to OI_MAX_DIMS sizes. */"
    )
    for vname in _fetchable(an, outputs):
        if vname in an.tables:
            t = an.tables[vname]
            ct, bound = ctype(t.dtype), t.numel
        else:
            info = an.vars[vname]
            ct, bound = ctype(info.dtype), info.bound
        lines.append(f"#define OI_BOUND_{vname} {bound}")
        lines.append(
            f"int oi_fetch_{vname}({ct.storage} *out, int64_t capacity, int *ndim, int64_t *dims);"
        )
    lines += ["", "#endif", ""]
    return "\n".join(lines)


def _source(
    an: Analysis,
    gen: _Gen,
    name: str,
    outputs: tuple[str, ...],
    mem: MemoryPlan,
    body: list[str],
    embedded: bool,
    device: str,
    vk_globals: list[str] | None = None,
) -> str:
    vulkan = gen.vk is not None
    out: list[str] = []
    out.append(f"/* {name}.c: generated by OpenInfer-JAX for {device}. Do not edit.")
    out.append(f" * Memory plan: {mem.summary()}.")
    out.append(" * buffer                              offset      bytes  live")
    for bname, buf in mem.buffers.items():
        live = "pinned" if buf.pinned else f"{buf.first}..{buf.last}"
        out.append(f" *   {bname:<32} {buf.offset:>9} {buf.nbytes:>10}  {live}")
    out.append(" */")
    out += [f'#include "{name}.h"', ""]
    if vulkan:
        out += ['#include "oi_vulkan.h"', ""]
    out += ["#include <math.h>", "#include <stdio.h>", "#include <string.h>", ""]
    out.append(f"#define OI_ARENA_BYTES {mem.arena_bytes}")
    if vulkan:
        out.append("/* one arena: the host-visible Vulkan storage buffer, mapped at oi_init */")
        out.append("static unsigned char *A;")
        for slot, _nbytes in gen.prefix_slots:
            out.append(f"#define {slot} (A + {mem.buffers['prefix:' + slot].offset})")
        out.extend(vk_globals or [])
    else:
        out.append("/* one arena, 8-byte aligned; every buffer offset is a multiple of 64 */")
        out.append(f"static uint64_t oi_arena[{max(mem.arena_bytes // 8, 1)}];")
        out.append("static unsigned char *const A = (unsigned char *)oi_arena;")
    out.append("static oi_model oi_m;")
    out.append("static int oi_ready;")
    if embedded:
        out.append(f"extern const unsigned char oi_{name}_weights[];")
        out.append(f"extern const uint64_t oi_{name}_weights_size;")
    out.append("")
    out.append(
        "#define OI_TRY(expr, where) do { rc = (expr); if (rc) { oi_where(where); goto fail; } } while (0)"
    )
    out.append("")
    out.append("static void oi_where(const char *where) {")
    out.append("    char msg[512];")
    out.append('    snprintf(msg, sizeof msg, "%s: %s", where, oi_last_error());')
    out.append('    oi_set_error("%s", msg);')
    out.append("}")
    out.append("")
    # Tensors, dims, tables.
    for vname in sorted(an.vars):
        info = an.vars[vname]
        out.append(
            f"static const int64_t {_dims_name(vname)}[{max(len(info.shape), 1)}] = {_dims_init(info.shape)};"
        )
        out.append(f"static oi_tensor V_{vname};")
    for cname in sorted(gen.shadows):
        out.append(f"static oi_tensor {cname};")
    for tname in sorted(an.tables):
        t = an.tables[tname]
        out.append(f"static const int64_t TC_{tname}[{len(t.caps)}] = {_dims_init(t.caps)};")
        out.append(
            f"static const int64_t TE_{tname}[{max(len(t.entry), 1)}] = {_dims_init(t.entry)};"
        )
        out.append(f"static int64_t TN_{tname}[{len(t.caps)}];")
        out.append(f"static oi_table TB_{tname};")
        if t.autod:  # per index: -1 (a table axis) or the entry dim its count widens
            out.append(
                f"static const int TA_{tname}[{len(t.autod)}] = {{{', '.join(map(str, t.autod))}}};"
            )
    dynamic = sorted(n for n, v in an.vars.items() if v.kind == "dynamic")
    for vname in dynamic:
        out.append(f"static int oi_have_{vname};")
    out.extend(gen.yield_state(reset=False))
    journaled = bool(an.tables) and "journal" in mem.buffers
    if journaled:
        out.append("static oi_journal oi_j; /* undo journal of the running step */")
    for vname in _undo_vars(an):
        out.append(f"static oi_tensor U_{vname}; /* value at the start of the step */")
    scratch = mem.buffers.get("scratch")
    out.append("")
    if scratch is not None:
        out.append("static oi_tensor oi_scratch_tensor(int64_t cap) {")
        out.append("    oi_tensor t;")
        out.append(f"    t.data = A + {scratch.offset};")
        out.append("    t.ndim = 0;")
        out.append("    t.cap = cap;")
        out.append("    return t;")
        out.append("}")
        out.append("")
    # Prefix tables: model tensors looked up by their pattern name; writes go to an overlay.
    formats = {
        pname: _pattern_format(pname, d.pattern, d.model_name, d.table_indices)
        for pname, d in an.prefixes.items()
    }
    offsets = {bname: buf.offset for bname, buf in mem.buffers.items()}
    out.extend(prefix_functions(an, offsets, formats))
    if gen.pack_bytes:
        out.append("static unsigned char *oi_pack; /* the tiled matmul's packed panel of B */")
    out.append("/* ---- kernels (rendered from the op registry) ---- */")
    out.extend(gen.kernel_code)
    # Initial values.
    source_vars = [
        n for n in sorted(an.vars) if an.vars[n].kind in ("volatile", "constant", "persistent")
    ]
    for vname in source_vars:
        out.extend(
            _init_function(an.vars[vname], in_place=_in_place(an.vars[vname], an, gen.target))
        )
    # Binding the arena.
    out.append("static void oi_bind(void) {")
    if gen.pack_bytes:
        out.append(f"    oi_pack = A + {mem.buffers['pack'].offset};")
    for vname in sorted(an.vars):
        info = an.vars[vname]
        placed = mem.buffers.get(vname)
        data = f"A + {placed.offset}" if placed is not None else "NULL"
        out.append(f"    V_{vname}.data = {data};")
        out.append(f"    V_{vname}.cap = {info.bound};")
        out.append(f"    oi_set_shape(&V_{vname}, {len(info.shape)}, {_dims_name(vname)});")
    for cname in sorted(gen.shadows):
        _blk, var = gen.shadows[cname]
        buf = mem.buffers[f"shadow:{cname}"]
        out.append(f"    {cname}.data = A + {buf.offset};")
        out.append(f"    {cname}.cap = {an.vars[var].bound};")
        out.append(f"    {cname}.ndim = 0;")
    if journaled:
        out.append(f"    oi_j.buf = A + {mem.buffers['journal'].offset};")
        out.append(f"    oi_j.cap = {mem.buffers['journal'].nbytes};")
        out.append("    oi_j.used = 0;")
        out.append("    oi_j.overflow = 0;")
    for vname in _undo_vars(an):
        out.append(f"    U_{vname}.data = A + {mem.buffers['undo:' + vname].offset};")
        out.append(f"    U_{vname}.cap = {an.vars[vname].bound};")
        out.append(f"    U_{vname}.ndim = 0;")
    for tname in sorted(an.tables):
        t = an.tables[tname]
        buf = mem.buffers[f"table:{tname}"]
        out.append(f"    TB_{tname}.journal = {'&oi_j' if journaled else 'NULL'};")
        out.append(f"    TB_{tname}.n_idx = {len(t.caps)};")
        out.append(f"    TB_{tname}.caps = TC_{tname};")
        out.append(f"    TB_{tname}.counts = TN_{tname};")
        out.append(f"    TB_{tname}.entry_nd = {len(t.entry)};")
        out.append(f"    TB_{tname}.entry = TE_{tname};")
        out.append(f"    TB_{tname}.elem = {ctype(t.dtype).size};")
        out.append(f"    TB_{tname}.data = A + {buf.offset};")
        out.append(f'    TB_{tname}.name = "{tname}";')
        if t.autod:
            out.append(f"    TB_{tname}.autod = TA_{tname};")
        out.append(f"    memset(A + {buf.offset}, 0, {buf.nbytes});")
        out.append(f"    memset(TN_{tname}, 0, sizeof TN_{tname});")
    out.append("}")
    out.append("")
    # oi_init
    out.append("int oi_init(const char *oinf_path) {")
    out.append("    int rc;")
    out.append("    uint64_t sv;")
    out.append("    oi_free();")
    if embedded:
        out.append(
            f"    rc = oinf_path ? oi_model_open_file(&oi_m, oinf_path) : oi_model_open_buffer(&oi_m, oi_{name}_weights, oi_{name}_weights_size);"
        )
    else:
        out.append(
            '    if (!oinf_path) { oi_set_error("oi_init: no model path"); return OI_ERR_ARGUMENT; }'
        )
        out.append("    rc = oi_model_open_file(&oi_m, oinf_path);")
    out.append("    if (rc) return rc;")
    for sname in sorted(an.sizevars):
        out.append(
            f'    if (!oi_model_sizevar(&oi_m, "{sname}", &sv) || sv != UINT64_C({an.sizevars[sname]})) {{'
        )
        out.append(
            f'        oi_set_error("model sizevar {sname} differs from the synthesized value {an.sizevars[sname]}");'
        )
        out.append("        rc = OI_ERR_MODEL;")
        out.append("        goto fail;")
        out.append("    }")
    if gen.vk is not None:
        vk = gen.vk
        out.append(
            f"    OI_TRY(oi_vk_init(OI_ARENA_BYTES, {VK_ALIGN}u, &A, {len(vk.sources)}, "
            f'{len(vk.dispatches)}, {vk.needs_mask()}), "Vulkan setup");'
        )
    out.append("    oi_bind();")
    if gen.vk is not None:
        out.extend(gen.vk.init_lines())
    for vname in source_vars:
        info = an.vars[vname]
        if info.kind in ("constant", "persistent"):
            out.append(f'    OI_TRY(oi_init_{vname}(), "init {vname}");')
    out.append("    oi_ready = 1;")
    out.append("    (void)sv;")
    out.append("    return OI_OK;")
    out.append("    goto fail; /* keeps the label used when no check jumps to it */")
    out.append("fail:")
    out.append("    oi_model_close(&oi_m);")
    if vulkan:
        out.append("    oi_vk_free();")
    out.append("    return rc;")
    out.append("}")
    out.append("")
    out.append("void oi_free(void) {")
    out.append("    if (oi_ready || oi_m.bytes) oi_model_close(&oi_m);")
    if vulkan:
        out.append("    oi_vk_free();")
    out.append("    oi_ready = 0;")
    for vname in dynamic:
        out.append(f"    oi_have_{vname} = 0;")
    out.append("}")
    out.append("")
    out.append("const char *oi_error_string(int code) { return oi_status_string(code); }")
    out.append("")
    for vname in dynamic:
        info = an.vars[vname]
        ct = ctype(info.dtype)
        out.append(
            f"int oi_insert_{vname}(const {ct.storage} *data, int ndim, const int64_t *dims) {{"
        )
        out.append("    int rc, d;")
        out.append(
            '    if (!oi_ready) { oi_set_error("insert before oi_init"); return OI_ERR_STATE; }'
        )
        out.append(
            '    if (!data || (ndim && !dims)) { oi_set_error("insert: NULL argument"); return OI_ERR_ARGUMENT; }'
        )
        out.append(
            f'    if (ndim != {len(info.shape)}) {{ oi_set_error("insert {vname}: rank %d, expected {len(info.shape)}", ndim); return OI_ERR_SHAPE; }}'
        )
        out.append(
            f'    for (d = 0; d < ndim; d++) if (dims[d] != {_dims_name(vname)}[d]) {{ oi_set_error("insert {vname}: dim %d is %lld, expected %lld", d, (long long)dims[d], (long long){_dims_name(vname)}[d]); return OI_ERR_SHAPE; }}'
        )
        out.append(f"    rc = oi_set_shape(&V_{vname}, ndim, dims);")
        out.append("    if (rc) return rc;")
        out.append(f"    memcpy(V_{vname}.data, data, (size_t)oi_numel(&V_{vname}) * {ct.size});")
        out.append(f"    oi_have_{vname} = 1;")
        out.append("    return OI_OK;")
        out.append("}")
        out.append("")
    for vname in _fetchable(an, outputs):
        if vname in an.tables:
            t = an.tables[vname]
            ct = ctype(t.dtype)
            out.append(
                f"int oi_fetch_{vname}({ct.storage} *out, int64_t capacity, int *ndim, int64_t *dims) {{"
            )
            out.append("    int rc, d;")
            out.append("    oi_tensor t;")
            out.append("    int64_t saved[OI_MAX_DIMS];")
            out.append(
                '    if (!oi_ready || !out || !ndim || !dims) { oi_set_error("fetch: not initialized or NULL argument"); return OI_ERR_STATE; }'
            )
            out.append(f"    for (d = 0; d < {len(t.caps)}; d++) saved[d] = TN_{vname}[d];")
            out.append("    t.data = out; t.cap = capacity; t.ndim = 0;")
            out.append(f"    rc = oi_table_read(&TB_{vname}, NULL, 0, &t);")
            out.append(f"    for (d = 0; d < {len(t.caps)}; d++) TN_{vname}[d] = saved[d];")
            out.append("    if (rc) return rc;")
        else:
            info = an.vars[vname]
            ct = ctype(info.dtype)
            out.append(
                f"int oi_fetch_{vname}({ct.storage} *out, int64_t capacity, int *ndim, int64_t *dims) {{"
            )
            out.append("    int d;")
            out.append("    oi_tensor t;")
            out.append(
                '    if (!oi_ready || !out || !ndim || !dims) { oi_set_error("fetch: not initialized or NULL argument"); return OI_ERR_STATE; }'
            )
            out.append(f"    t = V_{vname};")
            out.append(
                f'    if (oi_numel(&t) > capacity) {{ oi_set_error("fetch {vname}: %lld elements do not fit in %lld", (long long)oi_numel(&t), (long long)capacity); return OI_ERR_STATE; }}'
            )
            out.append(f"    memcpy(out, t.data, (size_t)oi_numel(&t) * {ct.size});")
        out.append("    *ndim = t.ndim;")
        out.append("    for (d = 0; d < t.ndim; d++) dims[d] = t.dims[d];")
        out.append("    return OI_OK;")
        out.append("}")
        out.append("")
    # oi_step
    out.append("int oi_step(void) {")
    out.append("    int rc = OI_OK;")
    out.append(
        '    if (!oi_ready) { oi_set_error("oi_step before oi_init"); return OI_ERR_STATE; }'
    )
    for vname in dynamic:
        out.append(
            f'    if (!oi_have_{vname}) {{ oi_set_error("step: dynamic input {vname} not inserted; call oi_insert_{vname} first"); return OI_ERR_STATE; }}'
        )
    # Atomic steps: what a failed step changed in persistent state is put back at `fail`.
    if journaled:
        out.append("    oi_j.used = 0;")
        out.append("    oi_j.overflow = 0;")
    out.extend(overlay_resets(an))
    out.extend(gen.yield_state(reset=True))
    for tname in sorted(an.tables):
        out.append(f"    oi_table_begin(&TB_{tname});")
    for vname in _undo_vars(an):
        size = ctype(an.vars[vname].dtype).size
        out.append(f'    OI_TRY(oi_copy(&U_{vname}, &V_{vname}, {size}), "save {vname}");')
    for vname in sorted(n for n, v in an.vars.items() if v.kind == "volatile"):
        out.append(f'    OI_TRY(oi_init_{vname}(), "reset volatile {vname}");')
    out.extend(body)
    if "step_end" in gen.used_labels:
        out.append("step_end:")
    if gen.vk is not None:  # the host reads results (fetch) after the step
        out.append(gen.vk.sync("    ", "end of step"))
    for vname in dynamic:
        out.append(f"    oi_have_{vname} = 0;")
    out.append("    return OI_OK;")
    out.append("fail:")
    if gen.vk is not None:
        out.append("    oi_vk_discard(); /* dispatches recorded and not submitted */")
    for vname in dynamic:
        out.append(f"    oi_have_{vname} = 0;")
    for vname in _undo_vars(an):
        size = ctype(an.vars[vname].dtype).size
        out.append(f"    oi_copy(&V_{vname}, &U_{vname}, {size});")
    if an.tables:
        names = ", ".join(f"&TB_{t}" for t in sorted(an.tables))
        out.append("    {")
        out.append(f"        oi_table *const tables[{len(an.tables)}] = {{{names}}};")
        if journaled:
            out.append(f"        if (!oi_journal_rollback(&oi_j, tables, {len(an.tables)})) {{")
        else:
            out.append("        oi_journal none = {NULL, 0, 0, 0};")
            out.append(f"        if (!oi_journal_rollback(&none, tables, {len(an.tables)})) {{")
        out.append("            char msg[512];")
        out.append(
            '            snprintf(msg, sizeof msg, "%s (the undo journal overflowed: cache tables were only partly restored)", oi_last_error());'
        )
        out.append('            oi_set_error("%s", msg);')
        out.append("        }")
        out.append("    }")
    out.append("    return rc;")
    out.append("}")
    out.append("")
    return "\n".join(out)


def _init_function(info: VarInfo, in_place: bool = True) -> list[str]:
    """`oi_init_<var>()`: the value a variable starts from (model tensor, scalar, @init, zeros)."""
    ct = ctype(info.dtype, f"variable {info.name!r}")
    v = f"V_{info.name}"
    lines = [f"static int oi_init_{info.name}(void) {{", "    int rc;"]
    if info.source == "tensor":
        lines.append("    const void *p;")
        lines.append(
            f'    rc = oi_model_get(&oi_m, "{info.model_name}", {info.dtype.code}u, {len(info.shape)}, {_dims_name(info.name)}, &p);'
        )
        lines.append("    if (rc) return rc;")
        if in_place:
            # Read in place from the loaded model: no copy, no arena space.
            lines.append(f"    {v}.data = (void *)p;")
            lines.append(f"    {v}.cap = {info.numel};")
            lines.append(
                f"    return oi_set_shape(&{v}, {len(info.shape)}, {_dims_name(info.name)});"
            )
        else:
            lines.append(
                f"    rc = oi_set_shape(&{v}, {len(info.shape)}, {_dims_name(info.name)});"
            )
            lines.append("    if (rc) return rc;")
            lines.append(f"    memcpy({v}.data, p, (size_t){info.numel} * {ct.size});")
            lines.append("    return OI_OK;")
        lines.append("}")
        lines.append("")
        return lines
    value = info.scalar if info.source == "scalar" else info.init
    lines.append(f"    {ct.storage} *X = ({ct.storage} *){v}.data;")
    lines.append("    int64_t i;")
    lines.append(f"    rc = oi_set_shape(&{v}, {len(info.shape)}, {_dims_name(info.name)});")
    lines.append("    if (rc) return rc;")
    if value is None or value == 0:
        lines.append(f"    memset(X, 0, (size_t){info.numel} * {ct.size});")
        lines.append("    (void)i;")
    else:
        lit = ct.store.format(c_literal(value, ct))
        lines.append(f"    for (i = 0; i < {info.numel}; i++) X[i] = {lit};")
    lines.append("    return OI_OK;")
    lines.append("}")
    lines.append("")
    return lines


def _driver(an: Analysis, name: str, outputs: tuple[str, ...], vulkan: bool = False) -> str:
    """A small test driver: reads inputs from files, runs steps, writes outputs to files.

    File format (inputs and outputs): int32 ndim, int64 dims[ndim], raw little-endian elements.
    Usage: ``driver MODEL STEPS IN_DIR OUT_DIR [REPEAT]``; with REPEAT the first step's inputs
    are run REPEAT more times and the mean step time is printed (``ns_per_step N``).
    """
    dynamic = sorted(n for n, v in an.vars.items() if v.kind == "dynamic")
    out = [
        f"/* {name}_driver.c: test driver generated by OpenInfer-JAX. Do not edit.",
        " * usage: driver MODEL.oinf STEPS IN_DIR OUT_DIR [REPEAT]",
        " * files: IN_DIR/<input>.<step>.bin and OUT_DIR/<output>.<step>.bin, each",
        " *        int32 ndim, int64 dims[ndim], then the raw elements. */",
        f'#include "{name}.h"',
        "",
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        "#include <time.h>",
        "",
        "static void *read_input(const char *dir, const char *var, int step, size_t elem, int *ndim, int64_t *dims) {",
        "    char path[1024];",
        "    FILE *f;",
        "    int32_t nd;",
        "    int64_t n = 1;",
        "    int d;",
        "    void *buf;",
        '    snprintf(path, sizeof path, "%s/%s.%d.bin", dir, var, step);',
        '    f = fopen(path, "rb");',
        '    if (!f) { fprintf(stderr, "cannot open %s\\n", path); return NULL; }',
        "    if (fread(&nd, 4, 1, f) != 1 || nd < 0 || nd > OI_MAX_DIMS) { fclose(f); return NULL; }",
        "    if (nd && fread(dims, 8, (size_t)nd, f) != (size_t)nd) { fclose(f); return NULL; }",
        "    for (d = 0; d < nd; d++) n *= dims[d];",
        "    buf = malloc(n ? (size_t)n * elem : 1);",
        "    if (!buf || (n && fread(buf, elem, (size_t)n, f) != (size_t)n)) { free(buf); fclose(f); return NULL; }",
        "    fclose(f);",
        "    *ndim = nd;",
        "    return buf;",
        "}",
        "",
        "static int write_output(const char *dir, const char *var, int step, const void *data, size_t elem, int ndim, const int64_t *dims) {",
        "    char path[1024];",
        "    FILE *f;",
        "    int32_t nd = ndim;",
        "    int64_t n = 1;",
        "    int d;",
        '    snprintf(path, sizeof path, "%s/%s.%d.bin", dir, var, step);',
        '    f = fopen(path, "wb");',
        "    if (!f) return 1;",
        "    for (d = 0; d < ndim; d++) n *= dims[d];",
        "    fwrite(&nd, 4, 1, f);",
        "    if (ndim) fwrite(dims, 8, (size_t)ndim, f);",
        "    if (n) fwrite(data, elem, (size_t)n, f);",
        "    return fclose(f) != 0;",
        "}",
        "",
        "static int insert_all(const char *dir, int step) {",
        "    int rc = 0, ndim;",
        "    int64_t dims[OI_MAX_DIMS];",
        "    void *buf;",
    ]
    for vname in dynamic:
        ct = ctype(an.vars[vname].dtype)
        out.append(f'    buf = read_input(dir, "{vname}", step, {ct.size}, &ndim, dims);')
        out.append("    if (!buf) return OI_ERR_IO;")
        out.append(f"    rc = oi_insert_{vname}((const {ct.storage} *)buf, ndim, dims);")
        out.append("    free(buf);")
        out.append("    if (rc) return rc;")
    out.append("    (void)buf; (void)ndim; (void)dims; (void)dir; (void)step; (void)&read_input;")
    out.append("    return rc;")
    out.append("}")
    out.append("")
    out.append("static int fetch_all(const char *dir, int step) {")
    out.append("    int rc = 0, ndim;")
    out.append("    int64_t dims[OI_MAX_DIMS];")
    out.append("    void *buf;")
    for vname in _fetchable(an, outputs):
        dtype = an.tables[vname].dtype if vname in an.tables else an.vars[vname].dtype
        ct = ctype(dtype)
        out.append(f"    buf = malloc((size_t)OI_BOUND_{vname} * {ct.size} + 1);")
        out.append("    if (!buf) return OI_ERR_NOMEM;")
        out.append(
            f"    rc = oi_fetch_{vname}(({ct.storage} *)buf, OI_BOUND_{vname}, &ndim, dims);"
        )
        out.append(
            f'    if (!rc && write_output(dir, "{vname}", step, buf, {ct.size}, ndim, dims)) rc = OI_ERR_IO;'
        )
        out.append("    free(buf);")
        out.append("    if (rc) return rc;")
    out.append("    (void)buf; (void)ndim; (void)dims; (void)dir; (void)step; (void)&write_output;")
    out.append("    return rc;")
    out.append("}")
    out.append("")
    out += [
        "int main(int argc, char **argv) {",
        "    int steps, s, rc;",
        "    if (argc < 5) {",
        '        fprintf(stderr, "usage: %s MODEL STEPS IN_DIR OUT_DIR [REPEAT]\\n", argv[0]);',
        "        return 2;",
        "    }",
        "    steps = atoi(argv[2]);",
        "    rc = oi_init(argv[1]);",
        '    if (rc) { fprintf(stderr, "oi_init: %s: %s\\n", oi_error_string(rc), oi_last_error()); return 1; }',
        "    for (s = 0; s < steps; s++) {",
        "        rc = insert_all(argv[3], s);",
        "        if (!rc) rc = oi_step();",
        "        if (!rc) rc = fetch_all(argv[4], s);",
        '        if (rc) { fprintf(stderr, "step %d: %s: %s\\n", s, oi_error_string(rc), oi_last_error()); oi_free(); return 1; }',
        "    }",
        "    if (argc > 5) {",
        "        int repeat = atoi(argv[5]), r;",
        "        clock_t t0, t1;",
        "        double total = 0;",
        "        /* one untimed step first: model tensors are prepared on first use */",
        "        rc = insert_all(argv[3], 0);",
        "        if (!rc) rc = oi_step();",
        "        for (r = 0; !rc && r < repeat; r++) {",
        "            rc = insert_all(argv[3], 0);",
        "            if (rc) break;",
        "            t0 = clock();",
        "            rc = oi_step();",
        "            t1 = clock();",
        "            if (rc) break;",
        "            total += (double)(t1 - t0);",
        "        }",
        '        if (rc) { fprintf(stderr, "timing: %s: %s\\n", oi_error_string(rc), oi_last_error()); oi_free(); return 1; }',
        '        printf("ns_per_step %.0f\\n", repeat ? total * 1e9 / CLOCKS_PER_SEC / repeat : 0.0);',
        "    }",
        "    oi_free();",
        "    return 0;",
        "}",
        "",
    ]
    return "\n".join(_vk_driver(out) if vulkan else out)


def _vk_driver(lines: list[str]) -> list[str]:
    """The Vulkan variant of the driver: wall-clock timing (the GPU's work is not this
    process's CPU time) and a report of the device and the queue submissions per step."""
    out = ["#define _POSIX_C_SOURCE 199309L /* clock_gettime */"]
    for line in lines:
        if line.strip() in ("t0 = clock();", "t1 = clock();"):
            line = line.replace("clock()", "wall()")
        out.append(line)
        if line == "#include <time.h>":
            out += ['#include "oi_vulkan.h"', "",
                    "static clock_t wall(void) {",
                    "    struct timespec ts;",
                    "    clock_gettime(CLOCK_MONOTONIC, &ts);",
                    "    return (clock_t)((double)ts.tv_sec * CLOCKS_PER_SEC + (double)ts.tv_nsec * (CLOCKS_PER_SEC / 1e9));",
                    "}"]  # fmt: skip
    # After the steps: the device and the queue submissions / dispatches per step.
    k = out.index("    if (argc > 5) {")
    out[k:k] = [
        '    printf("vk_device %s\\n", oi_vk_device_name());',
        '    printf("vk_submits_per_step %.3f\\n", steps ? (double)oi_vk_submits() / steps : 0.0);',
        '    printf("vk_dispatches_per_step %.3f\\n", steps ? (double)oi_vk_dispatches() / steps : 0.0);',
        '    printf("vk_fallbacks_per_step %.3f\\n", steps ? (double)oi_vk_fallbacks() / steps : 0.0);',
    ]
    return out


def _weights(name: str, data: bytes) -> str:
    """The model file as a C array (for --embed-weights); 16 bytes a line, no timestamps."""
    lines = [
        f"/* {name}_weights.c: the .oinf model embedded by OpenInfer-JAX ({len(data)} bytes). Generated. */",
        "#include <stdint.h>",
        "",
        f"const unsigned char oi_{name}_weights[{max(len(data), 1)}] = {{",
    ]
    for i in range(0, len(data), 16):
        lines.append("    " + ", ".join(f"0x{b:02x}" for b in data[i : i + 16]) + ",")
    if not data:
        lines.append("    0")
    lines.append("};")
    lines.append(f"const uint64_t oi_{name}_weights_size = UINT64_C({len(data)});")
    lines.append("")
    return "\n".join(lines)
